// The tensor expressions of the graph operators, as their registry entries (graph/ops.h,
// OpDef::te) name them: factories for the families whose members differ by one expression
// (unary, binary, comparisons, logic, reductions, pooling), and one function per other
// operator. Defined in graph/te_elementwise.cc, te_shape.cc and te_nn.cc.
#pragma once

#include <functional>

#include "compiler/te.h"
#include "graph/ops.h"

namespace tf::graph::te {

using UnaryExpr = std::function<ir::Expr(ir::Expr x, const Node& n)>;
using BinaryExpr = std::function<ir::Expr(ir::Expr a, ir::Expr b)>;
// Not, And, Or, Xor on bools held as floats, given whether each input is false (b: null for Not).
using LogicExpr = std::function<ir::Expr(ir::Expr a_false, ir::Expr b_false)>;

// Elementwise families.
TeFn unary_te(UnaryExpr f);
TeFn dropout_te();                             // the identity, and an all-true mask
TeFn binary_te(BinaryExpr f, bool mean = false);  // left to right over all inputs; Mean divides
TeFn div_te();                                 // integer division for int64 results
TeFn compare_te(BinaryExpr f);                 // bool results as 0 / 1
TeFn logic_te(LogicExpr f);

// Reductions: the op of a Reduce* node.
enum class ReduceOp { Sum, Max, Prod, Mean, Min, SumSquare, L1, L2, LogSum, LogSumExp };
TeFn reduce_te(ReduceOp op);
TeFn softmax_te(bool log);       // Softmax, LogSoftmax
TeFn arg_te(bool max);           // ArgMax, ArgMin
TeFn pool_te(bool max);          // MaxPool, AveragePool
TeFn global_pool_te(bool max);   // GlobalMaxPool, GlobalAveragePool

#define TF_TE_FN(fn)                                                                               \
  std::vector<ir::Tensor> fn(const Graph& g, const Node& n, const OpContext& c,                    \
                             const std::vector<TeOperand>& in, const Shape& out, const std::string& name)
TF_TE_FN(where_te);
TF_TE_FN(mod_te);
TF_TE_FN(pow_te);
TF_TE_FN(clip_te);
TF_TE_FN(cast_te);
TF_TE_FN(reshape_te);  // Reshape, Flatten, Squeeze, Unsqueeze
TF_TE_FN(expand_te);
TF_TE_FN(transpose_te);
TF_TE_FN(slice_te);
TF_TE_FN(tile_te);
TF_TE_FN(pad_te);
TF_TE_FN(resize_te);
TF_TE_FN(grid_sample_te);
TF_TE_FN(concat_te);
TF_TE_FN(split_te);
TF_TE_FN(gather_te);
TF_TE_FN(onehot_te);
TF_TE_FN(topk_te);
TF_TE_FN(gather_nd_te);
TF_TE_FN(gather_elements_te);
TF_TE_FN(depth_space_te);  // DepthToSpace, SpaceToDepth
TF_TE_FN(trilu_te);
TF_TE_FN(cumsum_te);
TF_TE_FN(hardmax_te);
TF_TE_FN(layernorm_te);
TF_TE_FN(instancenorm_te);
TF_TE_FN(batchnorm_te);
TF_TE_FN(conv_te);
TF_TE_FN(conv_transpose_te);
TF_TE_FN(conv_nchwc_te);
TF_TE_FN(layout_transform_te);
TF_TE_FN(matmul_te);
TF_TE_FN(gemm_te);
TF_TE_FN(einsum_te);
#undef TF_TE_FN

}  // namespace tf::graph::te
