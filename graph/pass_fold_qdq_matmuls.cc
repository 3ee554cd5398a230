// fold-qdq-matmuls: a MatMul or Gemm of a QDQ model whose activations are
// DequantizeLinear(QuantizeLinear(x)) per tensor and whose weights are DequantizeLinear of an
// int8 constant (zero point 0, per tensor or per output column) becomes one QMatMul of x
// (graph/import_quantize.cc): the kernel quantizes x to uint8 on entry and multiplies bytes
// with the int8 weights in int32 (qmatmul, compiler/operators.cc), where the float model
// multiplied the dequantized values in float32. What the QDQ pair computed is kept exactly:
// the same rounding of x to the grid, the same integer weights (recovered from the folded
// float32 weights, each checked to be its integer times its scale); only the float rounding
// of the sum differs. int8 activations (symmetric quantization) are uint8 ones with 128
// added to the values and the zero point.
//
// The import keeps what each QuantizeLinear/DequantizeLinear was (Graph::qdq); a product
// whose operands do not match the pattern, a Gemm with transA or alpha != 1, or a bias that
// is not N constants stays as it is. CPU targets only (the int8 kernels are CPU templates):
// without a channel block (no target, a GPU) the pass changes nothing.
#include <cmath>

#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

using Qdq = Graph::Qdq;

const Qdq* record(const Graph& g, const std::string& v, bool quantize) {
  auto it = g.qdq.find(v);
  return it != g.qdq.end() && it->second.quantize == quantize ? &it->second : nullptr;
}

// Whether `v` is still computed in the graph (an input or some node's output).
bool defined(const Graph& g, const std::string& v) {
  if (g.is_input(v)) return true;
  for (const Node& n : g.nodes) {
    for (const std::string& o : n.outputs) {
      if (o == v) return true;
    }
  }
  return false;
}

bool rewrite(Graph& g, const Node& n, std::vector<Node>& out) {
  const bool gemm = n.op == "Gemm";
  if ((n.op != "MatMul" && !gemm) || n.inputs.size() < 2) return false;
  if (gemm && (n.get_int("transA", 0) != 0 || n.get_float("alpha", 1) != 1.0f)) return false;
  const bool trans_b = gemm && n.get_int("transB", 0) != 0;
  // The activations: DequantizeLinear(QuantizeLinear(x)), per tensor, the same parameters.
  const Qdq* dq = record(g, n.inputs[0], false);
  const Qdq* q = dq ? record(g, dq->input, true) : nullptr;
  if (!q || dq->axis >= 0 || q->axis >= 0 || dq->scale != q->scale || dq->zero != q->zero ||
      (q->type != Narrow::Uint8 && q->type != Narrow::Int8) || !g.values.count(q->input) || !defined(g, q->input) ||
      g.value(q->input).dtype != DType::F32 || g.value(q->input).shape != g.value(n.inputs[0]).shape) {
    return false;
  }
  // The weights: a constant DequantizeLinear of int8 values, zero point 0.
  const Qdq* dw = record(g, n.inputs[1], false);
  const Value& wv = g.value(n.inputs[1]);
  if (!dw || !wv.constant || wv.dtype != DType::F32 || wv.shape.size() != 2) return false;
  for (float z : dw->zero) {
    if (z != 0) return false;
  }
  const int64_t K = trans_b ? wv.shape[1] : wv.shape[0], N = trans_b ? wv.shape[0] : wv.shape[1];
  const int64_t column_axis = trans_b ? 0 : 1;
  if (dw->axis >= 0 && (dw->axis != column_axis || static_cast<int64_t>(dw->scale.size()) != N)) return false;
  if (g.value(n.inputs[0]).shape.back() != K) return false;
  std::string bias;
  if (gemm && n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Value& c = g.value(n.inputs[2]);
    if (!c.constant || c.dtype != DType::F32 || num_elements(c.shape) != N || c.shape.back() != N ||
        n.get_float("beta", 1) != 1.0f) {
      return false;
    }
    bias = g.add_constant(n.name + ".bias", HostTensor::floats({N}, c.constant->f));
  }
  // The integers back from the float32 weights: each must be exactly its integer times its scale.
  std::vector<float> wq(static_cast<size_t>(K * N));
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t j = 0; j < N; ++j) {
      const float s = dw->scale[static_cast<size_t>(dw->axis >= 0 ? j : 0)];
      const float f = wv.constant->f[static_cast<size_t>(trans_b ? j * K + k : k * N + j)];
      const float i = std::nearbyint(f / s);
      if (!(i >= -128 && i <= 127) || i * s != f) return false;
      wq[static_cast<size_t>(k * N + j)] = i;
    }
  }
  HostTensor w = HostTensor::floats({K, N}, std::move(wq));
  w.narrow = Narrow::Int8;
  const float zero = q->zero[0] + (q->type == Narrow::Int8 ? 128.0f : 0.0f);
  Node m;
  m.name = n.name;
  m.op = "QMatMul";
  m.inputs = {q->input, g.add_constant(n.name + ".weight_int8", std::move(w)),
              g.add_constant(n.name + ".weight_scale", HostTensor::floats({static_cast<int64_t>(dw->scale.size())}, dw->scale)),
              g.add_constant(n.name + ".input_scale", HostTensor::floats({1}, {q->scale[0]})),
              g.add_constant(n.name + ".input_zero_point", HostTensor::floats({1}, {zero}))};
  if (!bias.empty()) m.inputs.push_back(bias);
  m.outputs = n.outputs;
  out.push_back(std::move(m));
  ++g.int8_nodes;
  return true;
}

}  // namespace

bool fold_qdq_matmuls(Graph& g, int64_t channel_block) {
  if (channel_block <= 0 || g.qdq.empty()) return false;
  return expand_nodes(g, rewrite);
}

}  // namespace tf::graph
