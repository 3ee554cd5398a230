// pass: graph passes and the pass manager that runs them (in the spirit of TVM's
// PassContext).
//
// What it promises:
//   - graph_passes() lists every pass in the order it runs, each with a name, the lowest
//     optimisation level that runs it, and one line of help. Each pass lives in its own file
//     (graph/pass_<name>.cc) and keeps the graph's invariants (graph/graph.h).
//   - run_passes() runs those enabled at the options' level, minus the disabled ones, times
//     each, verifies the graph after each (a broken invariant is a bug in that pass and names
//     it), and hands the graph to the dump sink after each pass named in `dump` ("all": every
//     one).
//   - A pass changes values only as the model computes them: outputs keep their names, values
//     and shapes; only float rounding may differ where a pass reassociates (folding a scale
//     into convolution weights).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/workload.h"
#include "graph/graph.h"

namespace tf::graph {

// The precision of a float model's products (--precision): fp32 as the model says, bf16 or
// fp16 (auto-mixed-precision, graph/pass_auto_mixed_precision.cc), tf32 (tensor cores only):
// the workloads' precisions (compiler/workload.h), named as they are.
using Precision = tf::Precision;
// "fp32", "bf16", "fp16" or "tf32"; UserError naming the value for others.
Precision parse_precision(const std::string& name);

// kTensorCorePrecision, the attribute auto-mixed-precision marks products for a CUDA target's
// tensor cores with: graph/graph.h.
// kTensorCoreMatMul and kTensorCoreConv, the ops a marked product of constant weights becomes at
// fp16 and bf16: graph/graph.h.
// The precision `n` is marked with (Float32 when it is not); UserError naming the node and the
// value for one other than tf32, fp16, bf16.
Precision tensor_core_precision(const Node& n);
// The precision of `g`'s marked products (Float32 when none is).
Precision tensor_core_precision(const Graph& g);

struct PassOptions {
  int opt_level = 2;
  std::set<std::string> disabled;
  std::set<std::string> dump;  // pass names, or "all"
  std::function<void(const std::string& pass, const Graph& g)> dump_sink;
  // The target's vector width in floats (Target::vector_lanes of a CPU target): the channel
  // block of transform-conv-layout. 0 (no target, or not a CPU): that pass and
  // fold-qdq (int8 kernels are CPU templates) change nothing.
  int64_t channel_block = 0;
  // The products' precision (auto-mixed-precision); fp32 runs that pass as a no-op.
  Precision precision = Precision::Float32;
  // The target is a CUDA GPU: at --precision the MatMul and Gemm nodes run on tensor cores
  // (marked with kTensorCorePrecision) instead of the CPU's bfloat16 / float16 kernels.
  bool tensor_cores = false;
};

struct PassInfo {
  const char* name;
  int opt_level;  // runs at this --opt-level and above
  const char* help;
  std::function<bool(Graph&, const PassOptions&)> run;  // true when it changed the graph
};

const std::vector<PassInfo>& graph_passes();

struct PassReport {
  std::string name;
  bool ran = false;      // false: below the level or disabled
  bool changed = false;  // it rewrote something ("fired")
  double ms = 0;
  size_t nodes_after = 0;
};

// Throws UserError for an unknown pass name in `disabled` or `dump`, or a level outside 0..3.
void check_pass_options(const PassOptions& options);
// Checks the options as above, then runs the passes.
std::vector<PassReport> run_passes(Graph& g, const PassOptions& options);

// Helpers for passes.
// How many nodes read each value (graph outputs count as one reader each).
std::map<std::string, int> use_counts(const Graph& g);
// The index in g.nodes of each value's last reader (values no node reads are absent).
std::map<std::string, size_t> last_readers(const Graph& g);
// Makes every reader of `from` (nodes and graph outputs) read `to` instead.
void replace_uses(Graph& g, const std::string& from, const std::string& to);
// For a node about to be removed whose output `out` equals `replacement`: makes readers of
// `out` read `replacement`, or where `out` is a graph output renames `replacement` to `out`
// (outputs keep their names). False, changing nothing, when neither is possible (the
// replacement is itself a graph input, output or constant).
bool bypass(Graph& g, std::string out, std::string replacement);
// A key that two nodes share exactly when they compute the same thing: operator, inputs,
// output count and attributes (eliminate-common-subexpressions).
std::string node_key(const Node& n);
// Orders the nodes so each comes after the producers of its inputs, keeping the present
// order where it already is one (stable).
void topological_sort(Graph& g);
// Drops values that no node defines or reads and that are not graph inputs or outputs.
void drop_unused_values(Graph& g);
// Replaces each node for which `expand` returns true by the nodes it appended to `out`, in
// the node's place (`expand` adds the values they need to g); returns whether any was. The
// shared loop of the passes that lower one node into several.
bool expand_nodes(Graph& g, const std::function<bool(Graph&, const Node&, std::vector<Node>&)>& expand);
// Whether Conv n's weights are a constant float32 [K][C/group][R][S] held whole (not
// narrowed) that no QDQ record names: what trim-conv-taps and split-conv-regions slice.
bool plain_conv_weights(const Graph& g, const Node& n);
// Taps [r0, r0 + R) x [s0, s0 + S) of such weights `w`, as a constant [K][C/group][R][S].
HostTensor conv_weight_taps(const HostTensor& w, int64_t r0, int64_t R, int64_t s0, int64_t S);

// The passes (one file each).
bool dead_code_elimination(Graph& g);
bool fold_constants(Graph& g);
bool simplify_inference(Graph& g);
bool fold_scale_into_conv(Graph& g);
bool lower_conv_transpose(Graph& g);
bool lower_scatter_nd(Graph& g);
bool pad_convs(Graph& g);
bool trim_conv_taps(Graph& g);
bool split_conv_regions(Graph& g);
bool einsum_to_matmul(Graph& g);
bool recognize_composites(Graph& g);
bool combine_parallel_matmuls(Graph& g);
// Scaled dot-product attention written as operators as one FusedAttention node (cuda targets).
bool fuse_attention(Graph& g);
bool eliminate_common_subexpressions(Graph& g);
// int8: QDQ convolutions (qdq_operands) become QConvNCHWc (depthwise ones QDepthwiseNCHWc), int8
// kernels (fold-qdq's part).
bool transform_conv_layout(Graph& g, int64_t channel_block, bool int8 = false);
// Filters no channel block divides padded to whole blocks, and what reads them kept padded
// (graph/pass_pad_channels.cc).
bool pad_channels(Graph& g, int64_t channel_block, bool int8 = false);
bool fold_qdq_matmuls(Graph& g, int64_t channel_block);
// Each value's producing node and its readers (node, input), by value name, as indices into
// g.nodes: what int8-edges and sixteen-bit-edges look at.
struct ValueUses {
  std::map<std::string, size_t> producer;
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> readers;
  explicit ValueUses(const Graph& g);
};
// Puts after[k]'s nodes right after node k, in their order.
void insert_after(Graph& g, std::map<size_t, std::vector<Node>> after);
// uint8 values between int8 kernels (graph/pass_int8_edges.cc).
bool int8_edges(Graph& g, int64_t channel_block);
bool convert_precision(Graph& g, Precision p, bool tensor_cores = false);
// float16 (bfloat16) values between the kernels of a cuda model at --precision fp16 (bf16)
// where tensor-core products read them, directly or through views, beside elementwise readers
// that widen them (graph/pass_auto_mixed_precision.cc).
bool sixteen_bit_edges(Graph& g, Precision p, bool tensor_cores);

// A MatMul or Gemm of activations x[..., K] by 2-D weights as x times w[K, N] (+ bias), the
// shape fold-qdq and auto-mixed-precision rewrite: Gemm's transB read (the weights stored
// [N, K]), its C a bias of N float32 constants with beta 1 (`bias`: that value). Nothing for
// another operator, a Gemm with transA or alpha != 1 or another C, weights not of rank 2, or
// shapes that do not agree.
struct WeightProduct {
  int64_t K = 0, N = 0;
  bool trans_b = false;
  std::string bias;  // empty: none
};
std::optional<WeightProduct> weight_product(const Graph& g, const Node& n);
// Weights `w` of product `p` (as stored: [N, K] when trans_b) as [K, N].
HostTensor weights_kn(const HostTensor& w, const WeightProduct& p);
// The bias of `p` as a new [N] constant named from `base` ("" when it has none).
std::string bias_constant(Graph& g, const std::string& base, const WeightProduct& p);

// What a product reads through QDQ pairs (graph/pass_fold_qdq.cc): activations `act`
// as DequantizeLinear(QuantizeLinear(x)) per tensor (x, its scale, its zero point as uint8:
// int8 ones shifted by 128), weights `weight` as DequantizeLinear of int8 values with zero
// point 0, one scale or one per channel along `channel_axis` (the values as int8 in `w`, in
// the weight's layout, each checked to be exactly its integer times its scale). Nothing when
// the product reads anything else.
struct QdqOperands {
  std::string x;
  float x_scale = 1, x_zero = 0;
  HostTensor w;
  std::vector<float> w_scale;
};
std::optional<QdqOperands> qdq_operands(const Graph& g, const std::string& act, const std::string& weight,
                                        int64_t channel_axis);
// Appends the constants QMatMul and QConvNCHWc take after their weight: weight scale, input
// scale, input zero point (named from `base`).
void add_quantization_constants(Graph& g, const std::string& base, const QdqOperands& q, std::vector<std::string>& inputs);

}  // namespace tf::graph
