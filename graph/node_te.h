// node_te: the tensor expression of one graph node, for the kernels of a compiled model that
// no tuned template covers: elementwise and broadcast arithmetic, data movement, reductions,
// softmax, normalization, pooling, and plain convolutions and matrix products for the nodes
// no workload expresses (grouped convolutions, asymmetric padding, broadcast batches).
//
// What it promises: for a node of a supported operator, node_te returns one tensor per output
// of the node, of the node's shape, computing what the reference evaluation (ops.h) computes
// up to float rounding (sums accumulate in float32, erf is a polynomial within 2e-7). Bool
// values (comparisons, Where's condition, Cast to bool) are float32 tensors holding 0 and 1
// inside compiled models; int64 results are refused but for ArgMax/ArgMin's indices, floats
// too (exact below 2^24), converted to int64 at the model's output.
// It reads the node's inputs only through the operands it is given. Inputs that decide shapes
// or positions (Reshape's shape, Slice's starts, Split's sizes, reduction axes) are read as
// the constants import made them. A node it cannot compile is a UserError naming the node and
// saying that compiling it is not implemented (the reference evaluation still runs it).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/attention.h"
#include "compiler/te.h"
#include "graph/graph.h"

namespace tf::graph {

// The element type of the buffer a kernel reads graph value `v` from: float32 (int64 and bool
// values are floats in kernels), or the uint16 bits of a float16 or bfloat16 model input.
ir::Type kernel_type(DType t);

// How a kernel sees one input of a node.
struct TeOperand {
  Shape shape;
  ir::Tensor tensor;             // a float32 tensor (bools as 0 / 1): a kernel argument or an
                                 // earlier node's
  std::optional<double> scalar;  // a one-element float or bool constant, folded in
  // Neither: an absent optional input, or an int64 constant read as a parameter.
  bool present() const { return tensor != nullptr || scalar.has_value(); }
};

// Element `out` (an index into a tensor of rank out.size()) of `x` broadcast numpy-style.
ir::Expr read_broadcast(const TeOperand& x, const std::vector<ir::Expr>& out);

// Whether `n` reads its input k as values (an operand of arithmetic, data to move), not as a
// parameter read from the graph (a shape, axes, Slice's bounds): an int64 constant read as
// values is a float operand like any other.
bool reads_as_data(const Graph& g, const Node& n, size_t k);

// Gather's OpDef::data_input: its indices are values when a table holds them.
bool gather_data_input(const Graph& g, const Node& n, size_t k);

// Input k of `n` (not an empty name) as a kernel sees it when it needs no tensor: an int64
// constant the node takes as a parameter (a shape, indices: neither tensor nor scalar, node_te
// reads it from the graph) or a one-element constant (its value, a bool's as 0 / 1). nullopt
// when the caller must give it a tensor (a kernel argument or an earlier node's).
std::optional<TeOperand> constant_operand(const Graph& g, const Node& n, size_t k);

// Gather's constant indices up to this many are written into the kernel's code; more are
// read from a table, as computed ones.
constexpr int64_t kMaxUnrolledIndices = 64;

// The tensors of `n`'s outputs; `prefix` starts the names of the operations it makes (unique
// per kernel). `elementwise_shape`, for an elementwise node only, computes the output in
// another shape of the same row-major elements (its operands given in matching shapes): how a
// fused tail follows a matmul whose leading dimensions were flattened. `gpu`: expressions for
// a GPU kernel (OpContext::gpu).
std::vector<ir::Tensor> node_te(const Graph& g, const Node& n, const std::vector<TeOperand>& in,
                                const std::string& prefix, const Shape* elementwise_shape = nullptr,
                                bool gpu = false);

// What compile --model checks of each node's operator and attributes when it builds the node's
// kernel expression (a Softmax axis, constant Gather indices in range, ...), checked without
// generating code, so that `import` refuses what `compile` would (UserError naming the node).
// Anchors (Conv, MatMul, Gemm) are left to their workloads; a node the compiler cannot compile
// yet ("not implemented") passes, as the reference evaluation runs it.
void check_node_expressions(const Graph& g);

// The stages of FusedAttention node `n` (graph/pass_fuse_attention.cc) over its operands `in`
// (q, kt, v, mask): node_te's output is their `out`; a GPU kernel schedules them together
// (compiler/attention.h lower_attention_gpu).
Attention fused_attention_te(const Node& n, const std::vector<TeOperand>& in, const std::string& name);

}  // namespace tf::graph
