// dense_tc.cuda (v2): matmul and batch_matmul with precision=tf32, fp16 or bf16 (float32 operands)
// or dtype=float16 / bfloat16 (16-bit operands) on NVIDIA's
// tensor cores (sm_80 and later), one warp-level product (mma.sync m16n8k8 / m16n8k16,
// compiler/ir.h) per 16 x 8 tile of C and step of K.
//
//   block   warps_m x warps_n warps (threadIdx.x: 32 each), a block_m x block_n tile of C with
//           block_m = warps_m * 16 * tiles_m and block_n = warps_n * 8 * tiles_n;
//   warp    tiles_m x tiles_n tiles of 16 x 8, each lane holding its four accumulators of each
//           (rows g, g + 8 and columns 2t, 2t + 1 of the tile: g = lane / 4, t = lane % 4);
//   K       in steps of the product's depth (8 for TF32, 16 for fp16 and bf16), unroll_k of
//           them per iteration, every tile's product per step unrolled.
//
// How the lanes come to hold their fragments: the accumulator is defined over permuted
// coordinates, acc[M/2][N/2][2][2] (after any batch), where within a warp's tile real row
// 16mi + 8h + g is (g * tiles_m + mi, h) and real column 8ni + 2t + p is (t * tiles_n + ni, p);
// C reads it through the inverse permutation. With C's rows split [block][warp][mi][h][g] and
// columns [block][warp][ni][t][p], lanes fused from (g, t) and the accumulator computed at the
// lane, bound inference gives each lane exactly its tiles_m x tiles_n x 2 x 2 accumulators, and
// Stage::tensorize replaces the step's loops (k, h, p) by the product (docs/compiler.md).
//
// M and N are padded to whole blocks and K to whole iterations inside the accumulator (operands
// past the matrix are zero, not read), so every shape works; C's tiles past M and N are guarded,
// not shifted, since the warp tiles must stay where the permutation puts them. Epilogues (bias,
// relu) and a model's fused tail are applied in the store.
//
// With `shared`, each iteration's tiles of A (block_m x unroll_k * depth) and B are copied into
// shared memory by all the block's threads first (128-bit copies where the rows allow), rows
// padded against bank conflicts; `stages` (2 to 4, and 6, 8 or 12 where the loop has a tile for
// each) keeps that many tiles in flight, the next iterations' copied with cp.async while the
// current one is used (Stage::multi_buffer).
//
// `split_k` (v2) cuts K into parts computed by blocks of their own (blockIdx.z, after any
// batch) into a workspace, the parts' C tiles written through the inverse permutation; a second
// kernel sums them in order and applies the epilogue. The default splits where the blocks would
// leave multiprocessors idle (a BERT layer's 128-row GEMMs over K = 3,072, a batch-1
// convolution's 7 x 7 layers) and each part keeps at least 16 steps of K.
//
// `half_tiles` (fp16, bf16) holds the operands' tiles in 16 bits, K innermost (B's tile
// transposed), so that each pair of a fragment is one 32-bit shared load taken as it is; the
// copy rounds, so it goes through registers instead of cp.async (Schedule::cache_read_shared_16,
// store_16_bits for a computed operand).
// In the space, not the default, until timed on a GPU.
//
// dtype=float16 / bfloat16 gives the operands in 16 bits in global memory: their tiles are
// copies (A's rows by 16-byte cp.async; B transposed through registers, or with trans_b=1,
// B given as [N][K], by cp.async too), nothing rounded.
//
// Not yet: ldmatrix (each lane reads its fragments' words one by one), and models whose tensors
// between kernels are 16-bit (a --precision fp16 model's products read
// float32 and round it: on the H200 the 4096^3 GEMM of float32 tiles runs at ~105 TFLOPS, 0.15x
// cuBLAS fp16).
#include "compiler/templates/tensor_core_gemm.h"

namespace tf::templates {
namespace {

class DenseTensorCore final : public TensorCoreGemm {
 public:
  DenseTensorCore()
      : TensorCoreGemm("dense_tc.cuda", 2, {"matmul", "batch_matmul"},
                       {kTensorCoreTypes[0], kTensorCoreTypes[1], kTensorCoreTypes[2], k16BitTypes[0], k16BitTypes[1],
                        k16BitWeightTypes[0], k16BitWeightTypes[1]}) {}

 protected:
  GemmShape gemm_shape(const OpGraph& g) const override {
    const Workload& w = g.workload;
    return {batch_dim(g) == 1 ? w.get("B") : 1, w.get("M"), w.get("N"), w.get("K")};
  }
  // An operand a model's views compute (OpGraph::prologue) is a computed operand.
  std::pair<bool, bool> inputs_ab(const OpGraph& g) const override {
    const auto [a, b] = product_reads(g.acc);
    return {!a || a->op->is_placeholder(), !b || b->op->is_placeholder()};
  }
  bool matrix_operands(const OpGraph&) const override { return true; }
  void output_axes(Stage& out, const OpGraph&, Expr& batch, Expr& rows, Expr& cols) const override {
    const auto& ax = out.op()->axes;
    const size_t d0 = ax.size() == 3 ? 1 : 0;
    if (d0) batch = ax[0].var;
    rows = ax[d0].var;
    cols = ax[d0 + 1].var;
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_dense_tc_cuda() {
  return std::make_unique<DenseTensorCore>();
}

}  // namespace tf::templates
