// depthwise_conv2d_nchw.cpu: depthwise NCHW convolutions on CPUs. vector_axis=w: tiles of
// tile_w output columns, vectorized. vector_axis=c: data [N][C][H][W] packed into
// [C/lanes][N][H][W][lanes] and the weights into [C/lanes][1][R][S][lanes] (zero past C), the
// accumulators laid out [n][oh][ow][c]: a tile is tile_w columns of one vector of channels,
// each input load one contiguous vector whatever the stride, each weight vector loaded once
// per tile. The border is read through selects on the packed data (their condition is the
// same for all lanes: a branch, not a masked load); the tile is copied back into NCHW at the
// end.
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

class DepthwiseNchwCpu final : public CpuTemplate {
 public:
  DepthwiseNchwCpu() : CpuTemplate("depthwise_conv2d_nchw.cpu", 2, {"depthwise_conv2d_nchw"}, TargetKind::Llvm) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_w", KnobType::Int, "output columns per tile (vectorized with vector_axis=w, unrolled with c)", 256, {},
         kSplit},
        {"vector_axis", KnobType::Choice,
         "the tile's vectorized axis: w (output columns; strided convolutions load with gathers) or c (channels: data "
         "and weights packed into blocks of one vector of channels first, NCHWc-style, the border read through "
         "selects, each load one contiguous vector at any stride)",
         0, {"w", "c"}, KnobKind::Choice},
        {"inline_pad", KnobType::Bool,
         "read padding through a select instead of a padded copy (vector_axis=c always does)", 0, {}},
        {"vectorize", KnobType::Bool, "vectorize the inner tile axis", 0, {}},
        {"unroll", KnobType::Bool, "unroll the filter window", 0, {}},
        {"parallel", KnobType::Bool, "run the outermost loop on all threads", 0, {}},
    };
    return k;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    // Depthwise work is light, so the padded copy costs as much as the convolution: read the
    // border through a select instead when the loads stay contiguous (stride 1; MobileNet-v2
    // layers 1.3-1.7x). Strided selects on columns become gathers and lose (0.6x); strided
    // layers with a vector of channels vectorize channels instead, packed with the border read
    // through selects: MobileNet-v2's 144x56x56 stride-2 layer 12.6 -> 16.4 GFLOPS (AVX2, 2
    // threads; the in-kernel copy into blocks costs about what the convolution does).
    const int64_t lanes = t.vector_lanes();
    bool channels = g.workload.get("stride") > 1 && out_extent(g, 1) >= lanes;
    json c;
    c["vector_axis"] = channels ? "c" : "w";
    c["tile_w"] = channels ? std::min<int64_t>(out_extent(g, 3), 4) : vector_tile(out_extent(g, 3), 1, lanes);
    c["inline_pad"] = channels || g.workload.get("stride") == 1;
    default_annotations(c);
    return c;
  }

  void apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const override {
    int lanes = t.vector_lanes();
    if (c["vector_axis"].get<std::string>() == "c") return apply_channels(s, g, c, lanes);
    int64_t tw = c["tile_w"];
    bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
    schedule_pad(s, g, c, lanes);
    auto [acc, out] = acc_and_writer(s, g);
    const auto& o = out->op()->axes;  // n, c, oh, ow
    auto [wo, wi] = out->split(o[3].var, tw);
    if (vec) out->vectorize(wi);
    if (par) out->parallel(out->fuse(o[0].var, o[1].var));
    acc->compute_at(*out, wo);
    const auto& a = acc->op()->axes;
    const auto& r = acc->op()->reduce_axes;  // rr, rs
    acc->reorder({a[0].var, a[1].var, a[2].var, r[0].var, r[1].var, a[3].var});
    if (vec) acc->vectorize(a[3].var);
    if (unroll) acc->unroll(r[1].var);
  }

 protected:
  // tile_w: vectorized (vector_axis=w) or the rows of the tile (c).
  SplitAxis split_axis(const OpGraph& g, const Target&, const std::string&) const override { return {out_extent(g, 3), true, true}; }

  Tile register_tile(const OpGraph& g, const Target& t, const json& c) const override {
    if (c["vector_axis"].get<std::string>() == "c") {
      if (!c["inline_pad"].get<bool>() && g.pad) {
        return {1, 1, 1,
                "vector_axis=c reads the border through selects (inline_pad=false is the same "
                "schedule)"};
      }
      return {c["tile_w"], t.vector_lanes(), 1, ""};
    }
    return {1, c["tile_w"], 1, ""};
  }

 private:
  void apply_channels(Schedule& s, const OpGraph& g, const json& c, int lanes) const {
    int64_t tw = c["tile_w"];
    bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
    if (g.pad) s.stage(g.pad->name).compute_inline();
    Stage& dp = s.pack(g.inputs[0]->name, 1, lanes);
    if (par) dp.parallel(dp.fuse(dp.op()->axes[0].var, dp.op()->axes[1].var));
    if (vec) dp.vectorize(dp.op()->axes.back().var);
    if (Stage* wp = pack_input(s, g, g.inputs[1]->name, 0, lanes)) {
      if (vec) wp->vectorize(wp->op()->axes.back().var);
    }
    auto [acc, out] = acc_and_writer(s, g, {0, 2, 3, 1});
    const auto& o = out->op()->axes;  // n, c, oh, ow
    auto [co, ci] = out->split(o[1].var, lanes);
    auto [wo, wi] = out->split(o[3].var, tw);
    out->reorder({o[0].var, co, o[2].var, wo, ci, wi});
    if (unroll) out->unroll(ci);
    if (par) out->parallel(out->fuse(out->fuse(o[0].var, co), o[2].var));
    acc->compute_at(*out, wo);
    const auto& a = acc->op()->axes;         // n, oh, ow, c
    const auto& r = acc->op()->reduce_axes;  // rr, rs
    acc->reorder({a[0].var, a[1].var, r[0].var, r[1].var, a[2].var, a[3].var});
    if (vec) acc->vectorize(a[3].var);
    if (unroll) {
      acc->unroll(a[2].var);
      acc->unroll(r[1].var);
    }
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_depthwise_conv2d_nchw_cpu() { return std::make_unique<DepthwiseNchwCpu>(); }

}  // namespace tf::templates
