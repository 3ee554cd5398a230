// conv2d_winograd_nchwc.cpu: Winograd F(m x m, 3 x 3) convolutions of NCHWc layouts on CPUs
// (compiler/winograd.h). Four stages, each over all threads:
//   data_pad     the zero border, and rows and columns up to whole tiles;
//   winograd_V   each input tile transformed, V = B^T d B: a tile's alpha x alpha values are
//                unrolled so the transform's constants fold and its partial sums are shared,
//                a block of input channels per vector;
//   winograd_M   alpha^2 independent GEMMs over the input channels, U (the weights, transformed
//                at compile time) times V: register tiles of tile_p input tiles (rows,
//                unrolled; each V value broadcast) by tile_kb blocks of output channels (each
//                block one or more vectors), as the direct template's tiles, the reduction
//                unrolled unroll_k deep;
//   output       Y = A^T M A per m x m output tile, unrolled, with the epilogue and the fused
//                tail applied while the tile is in registers.
// A dilated convolution's tiles are those of its residue classes (compiler/winograd.h): the
// stages are the same, the input tiles' rows and the output tiles' rows d apart.
#include "compiler/templates/common.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "base/error.h"

namespace tf::templates {
namespace {

// The GEMM stage of a Winograd graph: [alpha][alpha][K/ob][P][ob].
ir::Tensor gemm_stage(const OpGraph& g) {
  for (const ir::Tensor& t : ir::inputs_of(g.acc)) {
    if (t->name == "winograd_M") return t;
  }
  TF_CHECK(false, "a Winograd graph without its winograd_M stage");
  return nullptr;
}

class Conv2dWinogradNchwcCpu final : public CpuTemplate {
 public:
  Conv2dWinogradNchwcCpu() : CpuTemplate("conv2d_winograd_nchwc.cpu", 1, {"conv2d_winograd_nchwc"}, TargetKind::Llvm) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_p", KnobType::Int, "input tiles per register tile of the GEMM stage (unrolled)", 32, {}, kSplit},
        {"tile_kb", KnobType::Int, "output channel blocks per register tile of the GEMM stage (unrolled; each block vectorized)",
         16, {}, kSplit},
        {"unroll_k", KnobType::Int, "unroll factor of the GEMM's reduction over input channels", 64, {}, kSplit},
        {"inline_pad", KnobType::Bool, "read padding through a select instead of a padded copy", 0, {}},
        {"vectorize", KnobType::Bool, "vectorize the channel blocks", 0, {}},
        {"unroll", KnobType::Bool, "unroll the GEMM's register tile (the transforms are always unrolled)", 0, {}},
        {"parallel", KnobType::Bool, "run each stage's outer loops on all threads", 0, {}},
    };
    return k;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    // Register tiles of at most 20 accumulator vectors with 32 vector registers (10 with 16),
    // as many channel blocks as divide the output's, up to four, each V value broadcast to
    // them. Measured on Zen 5 (AVX-512, 1 thread): 4 blocks x 5 tiles ran the 28x28 and
    // 56x56 F(4x4) layers of ResNet-50 at 1.4-1.5x, and the 14x14 F(2x2) ones at 1.9x, the
    // direct template's 2 x 12 (24 accumulators, 12 broadcasts a step); 2 x 12 itself ran
    // 0.75x 2 x 10 where only two blocks exist.
    const ir::Tensor m = gemm_stage(g);
    const int64_t lanes = t.vector_lanes(), blocks = m->shape[2], tiles = m->shape[3];
    const int64_t v = (m->shape[4] + lanes - 1) / lanes;
    const bool wide = vector_registers(t) >= 32;
    const int64_t budget = wide ? 20 : 10;
    int64_t kb = wide ? 4 : 2;
    while (kb > 1 && (blocks % kb != 0 || kb * v > budget)) kb /= 2;
    json c;
    c["tile_p"] = std::clamp<int64_t>(budget / (kb * v), 1, std::min<int64_t>(tiles, 12));
    c["tile_kb"] = kb;
    c["unroll_k"] = std::min<int64_t>(4, g.workload.get("C"));
    c["inline_pad"] = true;
    default_annotations(c);
    return c;
  }

  void apply(Schedule& s, const OpGraph& g, const Target&, const json& c) const override {
    int64_t tp = c["tile_p"], tkb = c["tile_kb"], uk = c["unroll_k"];
    bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
    const int64_t m = g.workload.get("tile"), ib = g.workload.get("ic_block");

    Stage& pad = s.stage(g.pad->name);
    if (c["inline_pad"].get<bool>()) {
      pad.compute_inline();
    } else {
      const auto& ax = g.pad->axes;  // n, c, h, w, cb
      if (par) pad.parallel(pad.fuse(pad.fuse(ax[0].var, ax[1].var), ax[2].var));
      if (vec) pad.vectorize(ax[4].var);
    }

    Stage& v = s.stage("winograd_V");
    {
      const auto& ax = v.op()->axes;  // xi, nu, p, c
      auto [co, ci] = v.split(ax[3].var, ib);
      v.reorder({ax[2].var, co, ax[0].var, ax[1].var, ci});
      v.unroll(ax[0].var);
      v.unroll(ax[1].var);
      if (vec) v.vectorize(ci);
      if (par) v.parallel(v.fuse(ax[2].var, co));
    }

    ir::Tensor mt = gemm_stage(g);
    ir::Tensor local = s.cache_write(mt);
    Stage& mo = s.stage(mt->name);
    {
      const auto& ax = mo.op()->axes;  // xi, nu, ko, p, kb
      auto [koo, koi] = mo.split(ax[2].var, tkb);
      auto [po, pi] = mo.split(ax[3].var, tp);
      mo.reorder({ax[0].var, ax[1].var, koo, po, koi, pi, ax[4].var});
      if (vec) mo.vectorize(ax[4].var);
      if (unroll) {
        mo.unroll(koi);
        mo.unroll(pi);
      }
      if (par) mo.parallel(mo.fuse(mo.fuse(ax[0].var, ax[1].var), koo));
      Stage& acc = s.stage(local->name);
      acc.compute_at(mo, po);
      const auto& a = acc.op()->axes;
      auto [rco, rci] = acc.split(acc.op()->reduce_axes[0].var, uk);
      acc.reorder({a[0].var, a[1].var, rco, rci, a[2].var, a[3].var, a[4].var});
      if (vec) acc.vectorize(a[4].var);
      if (unroll) {
        acc.unroll(a[2].var);
        acc.unroll(a[3].var);
        acc.unroll(rci);
      }
    }

    if (g.acc != g.output) s.stage(g.acc->name).compute_inline();
    Stage& out = s.stage(g.output->name);
    const auto& o = out.op()->axes;  // n, ko, oh, ow, kb
    // Dilated: output row (ho m + hi) d + rh is tile ho of residue class rh, its row hi (a
    // constant once unrolled, as without dilation); columns likewise.
    const int64_t d = g.workload.get("dilation");
    Expr h = o[2].var, rh, w = o[3].var, rw;
    if (d > 1) std::tie(h, rh) = out.split(h, d);
    auto [ho, hi] = out.split(h, m);
    if (d > 1) std::tie(w, rw) = out.split(w, d);
    auto [wo, wi] = out.split(w, m);
    std::vector<Expr> order = {o[0].var, o[1].var};
    if (d > 1) order.push_back(rh);
    order.push_back(ho);
    if (d > 1) order.push_back(rw);
    order.insert(order.end(), {wo, hi, wi, o[4].var});
    out.reorder(order);
    out.unroll(hi);
    out.unroll(wi);
    if (vec) out.vectorize(o[4].var);
    if (par) {
      Expr outer = out.fuse(o[0].var, o[1].var);
      if (d > 1) outer = out.fuse(outer, rh);
      out.parallel(out.fuse(outer, ho));
    }
  }

 protected:
  SplitAxis split_axis(const OpGraph& g, const Target&, const std::string& knob) const override {
    if (knob == "unroll_k") return {g.workload.get("C"), false, false};
    return {gemm_stage(g)->shape[knob == "tile_kb" ? 2 : 3], false, true};
  }

  Tile register_tile(const OpGraph& g, const Target& t, const json& c) const override {
    const int64_t lanes = t.vector_lanes(), block = out_extent(g, 4);
    bool vec = c["vectorize"];
    return {c["tile_p"], c["tile_kb"].get<int64_t>() * (vec ? ((block + lanes - 1) / lanes) * lanes : block),
            c["unroll_k"], ""};
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_conv2d_winograd_nchwc_cpu() {
  return std::make_unique<Conv2dWinogradNchwcCpu>();
}

}  // namespace tf::templates
