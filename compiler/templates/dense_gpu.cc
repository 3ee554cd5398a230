// dense.cuda and dense.rocm (v2): matmul and batch_matmul on GPUs, with the block / warp /
// thread hierarchy of CUTLASS's SIMT GEMMs and the well-known hand-written SGEMMs
// (compiler/templates/gpu_gemm.h, which the implicit-GEMM convolutions share).
//
//   block   a block_m x block_n tile of C per block of threads, where
//           block_m = warps_m * lanes_m * tile_m and block_n = warps_n * lanes_n * tile_n;
//   warp    warps_m x warps_n warps (threadIdx.y), each a (lanes_m * tile_m) x
//           (lanes_n * tile_n) tile; lanes_m x lanes_n = the warp's 32 threads (64 on AMD's
//           gfx9 wavefronts) arranged as a grid (threadIdx.x), so a warp's loads of one k
//           touch few distinct rows of A and columns of B;
//   thread  a tile_m x tile_n register tile of outer products (rows unrolled, columns
//           vectorized), accumulated over K in block_k steps.
//
// With `shared`, each step of K first copies the block's A (block_m x block_k) and B
// (block_k x block_n) tiles into shared memory, 128 bits per thread and load where the rows
// allow, A kept K-major (so a thread's tile_m rows at one k are one vector read) and every
// shared row padded by 4 floats (the transposing stores of A and the rows of B then fall in
// different banks). `stages` (2 to 4) keeps that many tiles: the next K steps' are copied
// (with cp.async on sm_80+, asynchronously) while the current one is consumed, one barrier
// per step. Epilogues (bias, relu) are applied in the store of the register tile.
//
// Tiles that do not divide C shift inwards (two blocks then write the same values to the
// overlap) or, for extents smaller than a tile, are guarded; a K that block_k does not divide
// is guarded in the reduction (and in the copies).
#include <tuple>

#include "compiler/templates/gpu_gemm.h"

namespace tf::templates {
namespace {

class DenseGpu final : public GemmTemplate {
 public:
  explicit DenseGpu(TargetKind kind)
      : GemmTemplate(std::string("dense.").append(kind_name(kind)), 4, {"matmul", "batch_matmul"},
                     kind) {}

 protected:
  // An operand a model's views compute (OpGraph::prologue) is a computed operand, staged in
  // shared memory as a convolution's im2col matrix is (inlined without `shared`).
  GemmStages gemm_operands(Schedule& s, const OpGraph& g, const json& c) const override {
    GemmStages st;
    const auto [a, b] = product_reads(g.acc);
    TF_CHECK(a && b, id(), ": ", g.acc->name, " is no product of two reads");
    for (auto [read, name, input, contiguous] :
         {std::tuple{a, &st.a, &st.a_input, &st.a_contiguous},
          std::tuple{b, &st.b, &st.b_input, &st.b_contiguous}}) {
      *name = read->op->name;
      if (read->op->is_placeholder()) continue;
      *input = *contiguous = false;
      if (!c["shared"].get<bool>()) s.stage(*name).compute_inline();
    }
    return st;
  }

  void gemm_writer(Schedule& s, const OpGraph& g, GemmStages& st) const override {
    auto [acc, out] = acc_and_writer(s, g);
    const auto& oax = out->op()->axes;
    bool batch = batch_dim(g) == 1;
    size_t d = batch ? 1 : 0;
    st.acc = acc;
    st.out = out;
    if (batch) st.batch = oax[0].var;
    st.rows = oax[d].var;
    st.cols = oax[d + 1].var;
  }

  GemmShape gemm_shape(const OpGraph& g) const override {
    const Workload& w = g.workload;
    return {batch_dim(g) == 1 ? w.get("B") : 1, w.get("M"), w.get("N"), w.get("K")};
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_dense_cuda() { return std::make_unique<DenseGpu>(TargetKind::Cuda); }
std::unique_ptr<ScheduleTemplate> make_dense_rocm() { return std::make_unique<DenseGpu>(TargetKind::Rocm); }

}  // namespace tf::templates
