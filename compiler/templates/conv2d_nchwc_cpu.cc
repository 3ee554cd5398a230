// conv2d_nchwc.cpu: NCHWc (blocked) convolutions on CPUs. A register tile is tile_w output
// columns by tile_kb blocks of output channels, each block one or more vectors; each input
// element broadcast, each weight row of a block one contiguous vector. No packing or copy
// back: the layouts are the blocked ones.
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

class Conv2dNchwcCpu final : public CpuTemplate {
 public:
  Conv2dNchwcCpu() : CpuTemplate("conv2d_nchwc.cpu", 1, {"conv2d_nchwc"}, TargetKind::Llvm) {}

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
    int64_t tw = c["tile_w"], tkb = c["tile_kb"];
    bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
    schedule_pad(s, g, c, t.vector_lanes(), /*blocked=*/true);
    auto [acc, out] = acc_and_writer(s, g);
    const auto& o = out->op()->axes;  // n, ko, oh, ow, kb
    auto [koo, koi] = out->split(o[1].var, tkb);
    auto [wo, wi] = out->split(o[3].var, tw);
    out->reorder({o[0].var, koo, o[2].var, wo, koi, wi, o[4].var});
    if (vec) out->vectorize(o[4].var);
    if (unroll) {
      out->unroll(koi);
      out->unroll(wi);
    }
    if (par) out->parallel(out->fuse(out->fuse(o[0].var, koo), o[2].var));
    acc->compute_at(*out, wo);
    const auto& a = acc->op()->axes;         // n, ko, oh, ow, kb
    const auto& r = acc->op()->reduce_axes;  // rco, rr, rs, rci
    std::vector<Expr> order = {a[0].var, a[2].var};
    if (c["reduce_order"].get<std::string>() == "crs")
      order.insert(order.end(), {r[0].var, r[1].var, r[2].var});
    else
      order.insert(order.end(), {r[1].var, r[2].var, r[0].var});
    order.insert(order.end(), {r[3].var, a[1].var, a[3].var, a[4].var});
    acc->reorder(order);
    if (vec) acc->vectorize(a[4].var);
    if (unroll) {
      acc->unroll(a[1].var);
      acc->unroll(a[3].var);
    }
  }

 protected:
  // Both knobs tile unrolled rows of the tile.
  SplitAxis split_axis(const OpGraph& g, const std::string& knob) const override {
    return {out_extent(g, knob == "tile_kb" ? 1 : 3), false, true};
  }

  // Each channel block is its own vectors: blocks narrower than a vector waste lanes.
  Tile register_tile(const OpGraph& g, const Target& t, const json& c) const override {
    const int64_t lanes = t.vector_lanes(), block = out_extent(g, 4);
    bool vec = c["vectorize"];
    return {c["tile_w"], c["tile_kb"].get<int64_t>() * (vec ? ((block + lanes - 1) / lanes) * lanes : block), 1, ""};
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_conv2d_nchwc_cpu() { return std::make_unique<Conv2dNchwcCpu>(); }

}  // namespace tf::templates
