// conv2d_nchwc.cpu: NCHWc (blocked) convolutions on CPUs. A register tile is tile_w output
// columns by tile_kb blocks of output channels, each block one or more vectors; each input
// element broadcast, each weight row of a block one contiguous vector. No packing or copy
// back: the layouts are the blocked ones.
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

class Conv2dNchwcCpu final : public NchwcConvTemplate {
 public:
  Conv2dNchwcCpu() : NchwcConvTemplate("conv2d_nchwc.cpu", 1, {"conv2d_nchwc"}, TargetKind::Llvm) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_w", KnobType::Int, "output columns per register tile (unrolled)", 64, {}, kSplit},
        {"tile_kb", KnobType::Int, "output channel blocks per register tile (unrolled; each block vectorized)", 16, {},
         kSplit},
        {"reduce_order", KnobType::Choice,
         "reduction loop order: crs (input channel blocks, then the window, then a block's channels) or rsc "
         "(the window outermost)",
         0, {"crs", "rsc"}, kReorder},
        {"inline_pad", KnobType::Bool, "read padding through a select instead of a padded copy", 0, {}},
        {"vectorize", KnobType::Bool, "vectorize the output channel block", 0, {}},
        {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
        {"parallel", KnobType::Bool, "run the outermost loops (batch, channel tiles, rows) on all threads", 0, {}},
    };
    return k;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    auto [kb, tw] = blocked_tile(g, t, /*depthwise=*/false);
    json c;
    c["tile_w"] = tw;
    c["tile_kb"] = kb;
    c["reduce_order"] = "crs";
    c["inline_pad"] = false;
    default_annotations(c);
    return c;
  }

  void apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const override {
    schedule_pad(s, g, c, t.vector_lanes(), /*blocked=*/true);
    auto [acc, out] = acc_and_writer(s, g);
    schedule_nchwc_tiles(*out, *acc, c);
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_conv2d_nchwc_cpu() { return std::make_unique<Conv2dNchwcCpu>(); }

}  // namespace tf::templates
