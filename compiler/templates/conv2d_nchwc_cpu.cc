// conv2d_nchwc.cpu: NCHWc (blocked) convolutions on CPUs. A register tile is tile_w output
// columns by tile_kb blocks of output channels, each block one or more vectors; each input
// element broadcast, each weight row of a block one contiguous vector. No packing or copy
// back: the layouts are the blocked ones.
//
// v2: a 1x1 convolution of stride 1 without padding reads and writes a block's positions as
// one run of OH x OW (its rows follow each other in both layouts), so its register tile is
// tile_w consecutive positions of that run, not of one row: a 7 x 7 layer's 49 positions are
// 10 tiles of 5 (the last shifted back by one) where v1 made 2 tiles of 5 a row for 7 columns
// (30% of the products thrown away). tile_w counts positions there, hence the version.
#include "compiler/ir_mutator.h"
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

// Whether the convolution's positions are one run (1x1, stride 1, no padding).
bool flat_positions(const OpGraph& g) {
  const Workload& w = g.workload;
  return w.get("R") == 1 && w.get("S") == 1 && w.get("stride") == 1 && w.get("pad") == 0;
}

class Conv2dNchwcCpu final : public NchwcConvTemplate {
 public:
  Conv2dNchwcCpu() : NchwcConvTemplate("conv2d_nchwc.cpu", 2, {"conv2d_nchwc"}, TargetKind::Llvm) {}

  SplitAxis split_axis(const OpGraph& g, const std::string& knob) const override {
    if (knob == "tile_w" && flat_positions(g)) return {out_extent(g, 2) * out_extent(g, 3), false, true};
    return NchwcConvTemplate::split_axis(g, knob);
  }

  // The flat form: the reduction over [N][K/ob][1][OH * OW][ob] (position p at row p / OW,
  // column p % OW), the output reading it at oh * OW + ow.
  OpGraph schedule_graph(const OpGraph& g, const Target&, const json&) const override {
    if (!flat_positions(g)) return g;
    const ir::Tensor& old = g.acc;
    const ir::Reduce* red = old->reduce();
    TF_CHECK(red && old->axes.size() == 5, id(), ": ", old->name, " is not a blocked convolution's reduction");
    const int64_t oh = old->shape[2], ow = old->shape[3];
    std::vector<ir::IterVar> axes;
    for (const ir::IterVar& r : old->reduce_axes) axes.push_back(ir::reduce_axis(r.extent, r.name()));
    const std::string name = old == g.output ? old->name + "_flat" : old->name;
    ir::Tensor acc = ir::compute(
        name, {old->shape[0], old->shape[1], 1, oh * ow, old->shape[4]}, {"n", "ko", "one", "p", "kb"},
        [&](const std::vector<Expr>& ax) {
          ir::VarMap m;
          m[old->axes[0].var.get()] = ax[0];
          m[old->axes[1].var.get()] = ax[1];
          m[old->axes[2].var.get()] = ax[3] / Expr(ow);
          m[old->axes[3].var.get()] = ax[3] % Expr(ow);
          m[old->axes[4].var.get()] = ax[4];
          for (size_t i = 0; i < axes.size(); ++i) m[old->reduce_axes[i].var.get()] = axes[i].var;
          return ir::sum(ir::substitute(red->source, m), axes);
        },
        axes);
    return with_reduction_viewed(g, acc, "positions", [&](const std::vector<Expr>& ax) {
      return ir::read(acc, {ax[0], ax[1], Expr(0), ax[2] * Expr(ow) + ax[3], ax[4]});
    });
  }

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_w", KnobType::Int,
         "output columns per register tile (unrolled); of a 1x1 stride-1 unpadded convolution, positions of its "
         "OH x OW",
         64, {}, kSplit},
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
    auto [kb, tw] = blocked_tile(g, t, /*depthwise=*/false,
                                 flat_positions(g) ? out_extent(g, 2) * out_extent(g, 3) : 0);
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
    const bool flat = flat_positions(g);
    if (flat) {
      // The output's view of the flat reduction (and the epilogue's stages) inline into it.
      for (Stage* st : s.stages()) {
        if (st->op() != g.acc && st->op() != g.output) st->compute_inline();
      }
    }
    auto [acc, out] = acc_and_writer(s, g);
    schedule_nchwc_tiles(*out, *acc, c, flat);
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_conv2d_nchwc_cpu() { return std::make_unique<Conv2dNchwcCpu>(); }

}  // namespace tf::templates
