// conv2d_nchw.cpu: NCHW convolutions on CPUs, with two tile shapes. vector_axis=w: output
// columns vectorized, each weight broadcast. vector_axis=k: output channels vectorized; the
// weights packed so that a tile's channels are contiguous, the accumulators laid out
// [n][oh][ow][k] so that each column's channels are one vector, each input element broadcast.
#include <cstdlib>

#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

class Conv2dNchwCpu final : public CpuTemplate {
 public:
  // dtype=float16 | bfloat16 too (16-bit data and weights, widened as they are read).
  Conv2dNchwCpu()
      : CpuTemplate("conv2d_nchw.cpu", 2, {"conv2d_nchw"}, TargetKind::Llvm,
                    {OperandTypes{}, k16BitTypes[0], k16BitTypes[1]}) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_k", KnobType::Int, "output channels per register tile", 256, {}, kSplit},
        {"tile_w", KnobType::Int, "output columns per register tile", 256, {}, kSplit},
        {"vector_axis", KnobType::Choice,
         "the register tile's vectorized axis: w (output columns; weights read as broadcasts) or k "
         "(output channels; weights packed into [K/tile_k][C][R][S][tile_k] blocks first, inputs "
         "read as broadcasts, for narrow outputs and strided convolutions)",
         0, {"w", "k"}, KnobKind::Choice},
        {"inline_pad", KnobType::Bool, "read padding through a select instead of a padded copy", 0, {}},
        {"order", KnobType::Choice,
         "tile loop order: kw (channel tiles outer: each tile's weights stay in cache) or wk (rows and "
         "columns outer: each input tile stays in cache while all channel tiles use it)",
         0, {"kw", "wk"}, kReorder},
        {"vectorize", KnobType::Bool, "vectorize the inner tile axis", 0, {}},
        {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
        {"parallel", KnobType::Bool, "run the outermost loop on all threads", 0, {}},
    };
    return k;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    const int64_t lanes = t.vector_lanes();
    const int64_t rows = t.arch_name() == "x86_64" && lanes < 16 ? 6 : 8;
    int64_t k = out_extent(g, 1), ow = out_extent(g, 3);
    json c;
    if (k >= lanes) {
      // Channels vectorized, two vectors wide, by a few output columns: no lanes wasted on
      // narrow outputs (7x7) and no strided loads for strided convolutions. bench_conv,
      // ResNet-50 layers against oneDNN in the same layout (AVX-512): 0.59x -> 0.90-0.99x at 1
      // thread, 0.60x -> 0.93-1.01x at 2. Columns: the divisor of the output width in
      // want-3..want+1 nearest `want` (no tail tile), else min(OW, want).
      c["vector_axis"] = "k";
      c["tile_k"] = k >= 2 * lanes ? 2 * lanes : lanes;
      // With 16 registers (AVX2) 5 columns x 2 vectors is the widest tile that does not
      // spill, and narrower divisors cost more than a tail tile does (ResNet-18's 7x7 and
      // 14x14 layers at 1 thread on znver3: 20 and 43 GFLOPS with 1 and 2 columns, 43 and 73
      // with 5); so only 4 and 5 count as divisors there.
      const bool wide = vector_registers(t) >= 32;
      const int64_t want = wide ? 7 : 5;
      int64_t best = std::min(ow, want);
      for (int64_t d = std::max<int64_t>(1, want - (wide ? 3 : 1)); d <= std::min(ow, wide ? want + 1 : want); ++d) {
        if (ow % d == 0 && (ow % best != 0 || std::abs(d - want) < std::abs(best - want))) best = d;
      }
      c["tile_w"] = best;
    } else {
      c["vector_axis"] = "w";
      c["tile_k"] = std::min<int64_t>(k, rows);
      c["tile_w"] = vector_tile(ow, 1, lanes);
    }
    c["inline_pad"] = false;
    c["order"] = "kw";
    default_annotations(c);
    return c;
  }

  void apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const override {
    int64_t tk = c["tile_k"], tw = c["tile_w"];
    bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
    bool k_vector = c["vector_axis"].get<std::string>() == "k";
    schedule_pad(s, g, c, t.vector_lanes());
    if (k_vector) {
      Stage* wp = pack_input(s, g, g.inputs[1]->name, 0, tk);
      if (wp && par) wp->parallel(wp->op()->axes[0].var);
    }
    auto [acc, out] = k_vector ? acc_and_writer(s, g, {0, 2, 3, 1}) : acc_and_writer(s, g);
    const auto& o = out->op()->axes;  // n, k, oh, ow
    auto [ko, ki] = out->split(o[1].var, tk);
    auto [wo, wi] = out->split(o[3].var, tw);
    bool channels_outer = c["order"].get<std::string>() == "kw";
    if (channels_outer) out->reorder({o[0].var, ko, o[2].var, wo, ki, wi});
    else out->reorder({o[0].var, o[2].var, wo, ko, ki, wi});
    // With channels vectorized this is the copy back into NCHW; unrolled over the channels it
    // ran the C=64 1x1 layers 1.3x faster.
    if (vec && !k_vector) out->vectorize(wi);
    if (unroll) out->unroll(ki);
    if (par) out->parallel(out->fuse(o[0].var, channels_outer ? ko : o[2].var));
    acc->compute_at(*out, channels_outer ? wo : ko);
    const auto& a = acc->op()->axes;  // n, k, oh, ow; with channels vectorized n, oh, ow, k
    const auto& r = acc->op()->reduce_axes;  // rc, rr, rs
    Expr oh = a[k_vector ? 1 : 2].var, rows = a[k_vector ? 2 : 1].var;
    acc->reorder({a[0].var, oh, r[0].var, r[1].var, r[2].var, rows, a[3].var});
    if (vec) acc->vectorize(a[3].var);
    if (unroll) acc->unroll(rows);
  }

 protected:
  // Either axis of the tile may be the vectorized one (vector_axis).
  SplitAxis split_axis(const OpGraph& g, const Target&, const std::string& knob) const override {
    return {out_extent(g, knob == "tile_k" ? 1 : 3), true, true};
  }

  Tile register_tile(const OpGraph&, const Target&, const json& c) const override {
    bool k_vector = c["vector_axis"].get<std::string>() == "k";
    return {c[k_vector ? "tile_w" : "tile_k"], c[k_vector ? "tile_k" : "tile_w"], 1, ""};
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_conv2d_nchw_cpu() { return std::make_unique<Conv2dNchwCpu>(); }

}  // namespace tf::templates
