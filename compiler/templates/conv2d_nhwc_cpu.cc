// conv2d_nhwc.cpu: NHWC convolutions on CPUs: register tiles of tile_w output columns
// (unrolled) x tile_k output channels (vectorized, contiguous in NHWC).
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

class Conv2dNhwcCpu final : public CpuTemplate {
 public:
  // dtype=float16 | bfloat16 too (16-bit data and weights, widened as they are read).
  Conv2dNhwcCpu()
      : CpuTemplate("conv2d_nhwc.cpu", 1, {"conv2d_nhwc"}, TargetKind::Llvm,
                    {OperandTypes{}, k16BitTypes[0], k16BitTypes[1]}) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_k", KnobType::Int, "output channels per register tile (vectorized)", 256, {}, kSplit},
        {"tile_w", KnobType::Int, "output columns per register tile (unrolled)", 64, {}, kSplit},
        {"inline_pad", KnobType::Bool, "read padding through a select instead of a padded copy", 0, {}},
        {"vectorize", KnobType::Bool, "vectorize the inner tile axis", 0, {}},
        {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
        {"parallel", KnobType::Bool, "run the outermost loop on all threads", 0, {}},
    };
    return k;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    const int64_t lanes = t.vector_lanes();
    const int64_t rows = t.arch_name() == "x86_64" && lanes < 16 ? 6 : 8;
    json c;
    c["tile_k"] = vector_tile(out_extent(g, 3), 2, lanes);
    c["tile_w"] = std::min<int64_t>(out_extent(g, 2), rows - 2);
    c["inline_pad"] = false;
    default_annotations(c);
    return c;
  }

  void apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const override {
    int64_t tk = c["tile_k"], tw = c["tile_w"];
    bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
    schedule_pad(s, g, c, t.vector_lanes());
    auto [acc, out] = acc_and_writer(s, g);
    const auto& o = out->op()->axes;  // n, oh, ow, k
    auto [wo, wi] = out->split(o[2].var, tw);
    auto [ko, ki] = out->split(o[3].var, tk);
    out->reorder({o[0].var, o[1].var, wo, ko, wi, ki});
    if (vec) out->vectorize(ki);
    if (unroll) out->unroll(wi);
    if (par) out->parallel(out->fuse(o[0].var, o[1].var));
    acc->compute_at(*out, ko);
    const auto& a = acc->op()->axes;
    const auto& r = acc->op()->reduce_axes;  // rr, rs, rc
    acc->reorder({a[0].var, a[1].var, r[0].var, r[1].var, r[2].var, a[2].var, a[3].var});
    if (vec) acc->vectorize(a[3].var);
    if (unroll) acc->unroll(a[2].var);
  }

 protected:
  SplitAxis split_axis(const OpGraph& g, const Target&, const std::string& knob) const override {
    return knob == "tile_k" ? SplitAxis{out_extent(g, 3), true, false} : SplitAxis{out_extent(g, 2), false, true};
  }

  Tile register_tile(const OpGraph&, const Target&, const json& c) const override {
    return {c["tile_w"], c["tile_k"], 1, ""};
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_conv2d_nhwc_cpu() { return std::make_unique<Conv2dNhwcCpu>(); }

}  // namespace tf::templates
