// int8-edges: uint8 activations between int8 kernels. After fold-qdq, an int8 kernel (QMatMul,
// QConvNCHWc) reads a float32 value and quantizes it on entry. Where every reader of a value
// is such a kernel, reading it as its input 0 with the same input scale and zero point, the
// value is quantized once instead, by a QuantizeU8 node after its producer, and the kernels
// read the uint8 value (their workloads say dtype=uint8,weight_dtype=int8). The fuser puts
// QuantizeU8 in the producer's epilogue (a convolution's bias, Relu and residual Add, then the
// requantization: scale, zero point, rounding, clamp), so the value between the two kernels is
// one byte an element where it was four, and the reader's pass over its input only pads it.
//
// The arithmetic is the same, bit for bit: QuantizeU8 computes what the readers computed on
// entry (ir::quantize_u8 with the same scale and zero point). A value that is a model output
// or input, read by anything else (a residual Add, a pooling), or quantized with different
// parameters by its readers stays float32. CPU targets only, as fold-qdq.
#include <optional>

#include "graph/fusion.h"
#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

bool int8_kernel(const std::string& op) { return op == "QMatMul" || op == "QConvNCHWc" || op == "QDepthwiseNCHWc"; }

// The input scale and zero point an int8 kernel quantizes its input with (its inputs 3 and 4,
// single float constants), or nullopt.
std::optional<std::pair<float, float>> input_quantization(const Graph& g, const Node& n) {
  if (n.inputs.size() < 5) return std::nullopt;
  const Value& s = g.value(n.inputs[3]);
  const Value& z = g.value(n.inputs[4]);
  if (!s.constant || !z.constant || s.constant->f.size() != 1 || z.constant->f.size() != 1) return std::nullopt;
  return std::pair{s.constant->f[0], z.constant->f[0]};
}

}  // namespace

bool int8_edges(Graph& g, int64_t channel_block) {
  if (channel_block <= 0 || g.int8_nodes == 0) return false;
  const ValueUses uses(g);
  // QuantizeU8 nodes to insert after each producer, in order.
  std::map<size_t, std::vector<Node>> after;
  for (const auto& [v, rs] : uses.readers) {
    auto p = uses.producer.find(v);
    if (p == uses.producer.end() || g.is_output(v) || g.value(v).dtype != DType::F32) continue;
    const OpKind kind = op_kind(g.nodes[p->second].op);
    // Where QuantizeU8 joins a kernel's epilogue: after a product or an elementwise tail.
    if (kind != OpKind::Anchor && kind != OpKind::Elementwise) continue;
    std::optional<std::pair<float, float>> q;
    bool all = true;
    for (const auto& [k, i] : rs) {
      const Node& r = g.nodes[k];
      std::optional<std::pair<float, float>> rq = int8_kernel(r.op) && i == 0 ? input_quantization(g, r) : std::nullopt;
      all = all && rq && (!q || *q == *rq);
      if (!all) break;
      q = rq;
    }
    if (!all || !q) continue;
    Node u;
    u.op = "QuantizeU8";
    u.name = g.fresh_name(v + ".quantize_u8");
    u.inputs = {v};
    u.outputs = {g.fresh_name(v + ".u8")};
    u.attrs["scale"] = q->first;
    u.attrs["zero_point"] = static_cast<int64_t>(q->second);
    g.values[u.outputs[0]] = Value{u.outputs[0], DType::U8, g.value(v).shape, std::nullopt};
    for (const auto& [k, i] : rs) g.nodes[k].inputs[i] = u.outputs[0];
    after[p->second].push_back(std::move(u));
  }
  if (after.empty()) return false;
  insert_after(g, std::move(after));
  return true;
}

}  // namespace tf::graph
