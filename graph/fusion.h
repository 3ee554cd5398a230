// fusion: which nodes become one kernel (TVM's FuseOps). A plan over the graph after the
// passes, not a rewrite: the graph keeps its operators for the reference evaluation, and
// compile_model (graph/model_compiler.h) generates the kernels of each group.
//
// What it promises: every node is in exactly one group, groups are listed in an order that
// runs them (each group's inputs are graph inputs, constants or outputs of earlier groups),
// and a value read by several groups or returned by the model is a group output (written to
// memory). The rules, by operator kind:
//   anchor      (Conv, ConvNCHWc, MatMul, Gemm): starts a group; elementwise ops after it join it
//               (bias, residual Add, Relu, Clip: conv + bias + residual add + relu is one
//               kernel)
//   elementwise (unary math, broadcasting binary ops, Where, Clip, Cast, Gelu, ...): joins the
//               group of its first computed input that has no other reader and is not a
//               model output, when that group is an anchor, elementwise, injective or
//               reduction group (Add(skip, conv(...)) joins the conv's group though the skip
//               comes first); a value read by several elementwise nodes whose paths meet
//               again (SiLU: Mul(y, Sigmoid(y))), reading nothing else computed, counts as
//               read once, and the whole diamond joins its group or none of it does; a
//               widening Cast of a computed 16-bit value (sixteen-bit-edges) read by one
//               elementwise node is joined last and joins that node's group instead (a
//               residual Add's 16-bit skip read in its product's epilogue)
//   injective   (Reshape, Transpose, Slice, Concat, Gather, Split, LayoutTransform, ...):
//               joins an elementwise or injective group the same way (not an anchor's: it
//               would change the anchor's output layout)
//   reduction   (Reduce*, Softmax, LogSoftmax, LayerNormalization, global pooling): starts a
//               group, which first takes in the elementwise/injective group computing its
//               input when nothing else reads it; elementwise ops after it join it
//   opaque      (MaxPool, AveragePool, anything else): a group of its own; an operator whose
//               entry says fuses_operands (FusedAttention) first takes in every elementwise or
//               injective group that computes one of its inputs for it alone (its values read
//               by that group or the node only, none returned), merged into one
//               group when no outside group sits between them; so does a MatMul or Gemm
//               of a graph marked products_read_views (pass read-views-in-products, cuda
//               targets; MatMulTensorCore too), taking only groups of layout views and scalings
//               (recomputed_in_operand), not a view that memory planning computes in place
//               (a lone Reshape of a computed value: graph/memory_plan.h
//               view_in_place_by_itself, its input no other view's or Concat's to take
//               first): the product reads its operand tiles through them
//               (attention's Q, K and V sliced out of one wide product, its heads merged),
//               and the kernels that only copied them are gone
// and no group has more than kMaxGroupNodes nodes, nor a node join a group (or an attention take
// in its operands' groups, or a widening Cast's group) that would then read more than
// kMaxGroupInputs values.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/ops.h"  // OpKind

namespace tf::graph {

// The most nodes one group takes: a longer chain (a hostile model's 12,000 Relus) becomes
// several kernels, so no kernel's expression, schedule or lowering walks thousands of levels.
// Real models' largest groups have tens of nodes.
constexpr size_t kMaxGroupNodes = 128;
// The most values (computed or constant) a node joining a group may make it read: each is a
// buffer parameter of its kernel, as is each output (a group of kMaxGroupNodes nodes has at
// most about as many), and a GPU library's kernel takes at most 256 (runtime/gpu_model; PTX
// before ISA 8.1 holds 4,352 bytes of parameters, 544 pointers). A node that reads more by
// itself (at most kMaxVariadicInputs since import: graph/onnx_import.h) is a group of its own.
constexpr size_t kMaxGroupInputs = 128;
const char* op_kind_name(OpKind k);
OpKind op_kind(const std::string& op);

struct FusedGroup {
  OpKind kind;                       // of the group: its anchor's, else its first node's
  std::vector<std::string> nodes;    // node names, in graph order
  std::vector<std::string> inputs;   // computed values read from outside (not constants)
  std::vector<std::string> outputs;  // values read outside the group or returned
};

std::vector<FusedGroup> plan_fusion(const Graph& g);

// Whether node `n` is a product that reads its operands through views where the graph says
// products_read_views (MatMul, Gemm, and MatMulTensorCore: either at fp16 and bf16).
bool reads_operand_views(const Node& n);
// Whether node `n` is cheap enough for a product to recompute while it reads an operand tile:
// a layout view (Reshape, Transpose, Slice, Squeeze, Unsqueeze, Flatten, Identity), a Cast, or a
// float Mul, Div, Add or Sub by a scalar constant.
bool recomputed_in_operand(const Graph& g, const Node& n);

}  // namespace tf::graph
