// attention: scaled dot-product attention, softmax(Q K^T * scale + mask) V, as one GPU kernel.
//
// Unfused, a model's attention is a chain of kernels: the scores (a batch matmul), a softmax
// (one kernel a row, graph/te_nn.cc), the context (a second batch matmul), each reading and
// writing the whole [heads, queries, keys] score matrix through global memory, and before them
// the layout kernels that cut Q, K and V out of the projection (graph fuse-attention folds those
// into this kernel's operand reads). Here one block computes `rows` query rows of one head:
//   scores[b, i, j] = sum_d q[b, i, d] * kt[b, d, j]        (shared memory, rows x keys)
//   x = cap(scores * scale / divisor) + mask                  (inlined where read; cap: the
//       identity, or softcap * tanh(. / softcap))
//   max[b, i] = max_j x,  sum[b, i] = sum_j exp(x - max)     (shared: each row's keys spread
//       over kAttentionRowLanes threads, max_part / sum_part, then a thread a row combines them)
//   probs[b, i, j] = exp(x - max) / sum                       (shared, rows x keys)
//   out[b, i, e] = sum_j probs[b, i, j] * v[b, j, e]          (global)
// with barriers between the stages. The softmax is the unfused one's (the row's largest
// subtracted, the sum of exponentials divided out before the second product), so results
// agree with the chain to float rounding. Every stage's rows stay in shared memory, so the keys
// a block can hold are bounded (attention_rows_per_block returns 0 past it; the graph then
// keeps the unfused chain). FlashAttention's online softmax, which streams the keys through
// in tiles, is not done: it is what longer sequences would need.
//
// `batch` is every leading dimension (batch and heads); operands are read through functions
// of the full index, so their producers (a Split, Reshape, Transpose, a scale) inline.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/lower.h"
#include "compiler/target.h"
#include "compiler/te.h"

namespace tf {

// Element [batch..., row, col] of an operand.
using AttentionRead = std::function<ir::Expr(const std::vector<ir::Expr>& index)>;

struct AttentionSpec {
  std::vector<int64_t> batch;  // leading dimensions (batch, heads), at least one
  int64_t queries = 0, keys = 0, depth = 0, value_depth = 0;
  AttentionRead q;     // [batch..., queries, depth]
  AttentionRead kt;    // [batch..., depth, keys]
  AttentionRead v;     // [batch..., keys, value_depth]
  AttentionRead mask;  // [batch..., queries, keys], added to the scaled scores; null: none
  double scale = 1.0, divisor = 1.0;  // scores * scale / divisor (an exporter's Mul or Div)
  double softcap = 0.0;                // > 0: softcap * tanh(scaled scores / softcap), before the mask
  // A row whose masked scores are -inf throughout gives zero probabilities (ONNX Attention's
  // fully masked rows), not the NaN of exp(-inf - -inf).
  bool zero_masked_rows = false;
  // The output's dimensions as a Transpose's perm of [batch..., queries, value_depth] (the
  // Transpose that merges the heads back, written by this kernel); empty: that order.
  std::vector<int64_t> out_perm;
};

struct Attention {
  ir::Tensor scores, max_part, max, sum_part, sum, probs, out;
  std::vector<int64_t> out_perm;  // out's dimensions as a perm of [batch..., queries, value_depth]
};

// The stages above; `name` names the output, the others name_scores, name_max, ...
Attention attention(const AttentionSpec& spec, const std::string& name);

// Query rows one block computes on `target`: a power of two whose stages fit the block's
// shared memory (scores and probabilities of rows + 1 rows, a margin), at most 32, fewer while
// that leaves the GPU's multiprocessors less than two blocks
// each. 0 when not even one row of `keys` fits: no fused kernel.
int64_t attention_rows_per_block(const std::vector<int64_t>& batch, int64_t queries, int64_t keys,
                                 const Target& target);

// The most keys a block's rows of scores can hold (3,055: one row and the next, 16 bytes a key,
// and the lanes' parts of a row's max and sum).
int64_t max_attention_keys();

// The threads of an attention block, and the threads (lanes) that share a row's max and sum.
constexpr int64_t kAttentionThreads = 128;
constexpr int64_t kAttentionRowLanes = 32;

// The kernel on a GPU target (cuda, rocm): `args` its inputs as placeholders, in order;
// `options` the lowering's (compiler/lower.h: passes skipped).
ir::LoweredFunc lower_attention_gpu(const Attention& a, const std::vector<ir::Tensor>& args,
                                    const Target& target, const std::string& function,
                                    const LowerOptions& options = {});

}  // namespace tf
