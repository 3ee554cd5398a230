// fold-qdq: a MatMul or Gemm of a QDQ model whose activations are
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
// without a channel block (no target, a GPU) the pass changes nothing. Convolutions are
// folded by transform-conv-layout (into QConvNCHWc, through qdq_operands below), where their
// blocked layout is chosen; disabling fold-qdq disables that too.
#include <cmath>
#include <optional>

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

bool rewrite_qdq(Graph& g, const Node& n, std::vector<Node>& out) {
  std::optional<WeightProduct> p = weight_product(g, n);
  if (!p) return false;
  std::optional<QdqOperands> q = qdq_operands(g, n.inputs[0], n.inputs[1], p->trans_b ? 0 : 1);
  if (!q) return false;
  const std::string bias = bias_constant(g, n.name, *p);
  HostTensor w = weights_kn(q->w, *p);
  Node m;
  m.name = n.name;
  m.op = "QMatMul";
  m.inputs = {q->x, g.add_constant(n.name + ".weight_int8", std::move(w))};
  add_quantization_constants(g, n.name, *q, m.inputs);
  if (!bias.empty()) m.inputs.push_back(bias);
  m.outputs = n.outputs;
  out.push_back(std::move(m));
  ++g.int8_nodes;
  return true;
}

}  // namespace

std::optional<WeightProduct> weight_product(const Graph& g, const Node& n) {
  const bool gemm = n.op == "Gemm";
  if ((n.op != "MatMul" && !gemm) || n.inputs.size() < 2) return std::nullopt;
  if (gemm && (n.get_int("transA", 0) != 0 || n.get_float("alpha", 1) != 1.0f)) return std::nullopt;
  WeightProduct p;
  p.trans_b = gemm && n.get_int("transB", 0) != 0;
  const Value& wv = g.value(n.inputs[1]);
  if (wv.shape.size() != 2) return std::nullopt;
  p.K = p.trans_b ? wv.shape[1] : wv.shape[0];
  p.N = p.trans_b ? wv.shape[0] : wv.shape[1];
  if (g.value(n.inputs[0]).shape.back() != p.K) return std::nullopt;
  if (gemm && n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Value& c = g.value(n.inputs[2]);
    if (!c.constant || c.dtype != DType::F32 || num_elements(c.shape) != p.N || c.shape.back() != p.N ||
        n.get_float("beta", 1) != 1.0f) {
      return std::nullopt;
    }
    p.bias = n.inputs[2];
  }
  return p;
}

HostTensor weights_kn(const HostTensor& w, const WeightProduct& p) {
  if (!p.trans_b) return w;
  HostTensor t = w;
  for (int64_t k = 0; k < p.K; ++k)
    for (int64_t j = 0; j < p.N; ++j) t.f[static_cast<size_t>(k * p.N + j)] = w.f[static_cast<size_t>(j * p.K + k)];
  t.shape = {p.K, p.N};
  return t;
}

std::string bias_constant(Graph& g, const std::string& base, const WeightProduct& p) {
  if (p.bias.empty()) return "";
  return g.add_constant(base + ".bias", HostTensor::floats({p.N}, g.value(p.bias).constant->f));
}

std::optional<QdqOperands> qdq_operands(const Graph& g, const std::string& act, const std::string& weight,
                                        int64_t channel_axis) {
  // The activations: DequantizeLinear(QuantizeLinear(x)), per tensor, the same parameters.
  const Qdq* dq = record(g, act, false);
  const Qdq* q = dq ? record(g, dq->input, true) : nullptr;
  if (!q || dq->axis >= 0 || q->axis >= 0 || dq->scale != q->scale || dq->zero != q->zero ||
      (q->type != Narrow::Uint8 && q->type != Narrow::Int8) || !g.values.count(q->input) || !defined(g, q->input) ||
      g.value(q->input).dtype != DType::F32 || g.value(q->input).shape != g.value(act).shape) {
    return std::nullopt;
  }
  // The weights: a constant DequantizeLinear of int8 values, zero point 0, one scale or one per
  // output channel.
  const Qdq* dw = record(g, weight, false);
  const Value& wv = g.value(weight);
  if (!dw || !wv.constant || wv.dtype != DType::F32 || channel_axis >= static_cast<int64_t>(wv.shape.size())) {
    return std::nullopt;
  }
  for (float z : dw->zero) {
    if (z != 0) return std::nullopt;
  }
  const int64_t channels = wv.shape[static_cast<size_t>(channel_axis)];
  if (dw->axis >= 0 && (dw->axis != channel_axis || static_cast<int64_t>(dw->scale.size()) != channels)) {
    return std::nullopt;
  }
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(channel_axis) + 1; d < wv.shape.size(); ++d) inner *= wv.shape[d];
  // The integers back from the float32 weights: each must be exactly its integer times its scale.
  QdqOperands r;
  r.x = q->input;
  r.x_scale = q->scale[0];
  r.x_zero = q->zero[0] + (q->type == Narrow::Int8 ? 128.0f : 0.0f);
  r.w = HostTensor::floats(wv.shape, std::vector<float>(wv.constant->f.size()));
  r.w.narrow = Narrow::Int8;
  for (size_t k = 0; k < r.w.f.size(); ++k) {
    const float s = dw->scale[dw->axis >= 0 ? (k / static_cast<size_t>(inner)) % static_cast<size_t>(channels) : 0];
    const float f = wv.constant->f[k];
    const float i = std::nearbyint(f / s);
    if (!(i >= -128 && i <= 127) || i * s != f) return std::nullopt;
    r.w.f[k] = i;
  }
  r.w_scale = dw->scale;
  return r;
}

void add_quantization_constants(Graph& g, const std::string& base, const QdqOperands& q, std::vector<std::string>& inputs) {
  inputs.push_back(g.add_constant(base + ".weight_scale", HostTensor::floats({static_cast<int64_t>(q.w_scale.size())}, q.w_scale)));
  inputs.push_back(g.add_constant(base + ".input_scale", HostTensor::floats({1}, {q.x_scale})));
  inputs.push_back(g.add_constant(base + ".input_zero_point", HostTensor::floats({1}, {q.x_zero})));
}

bool fold_qdq_matmuls(Graph& g, int64_t channel_block) {
  if (channel_block <= 0 || g.qdq.empty()) return false;
  return expand_nodes(g, rewrite_qdq);
}

}  // namespace tf::graph
