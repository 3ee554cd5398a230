// fold-scale-into-conv: a Conv with constant weights whose only reader is a Mul or an Add by
// a per-channel constant (what BatchNormalization becomes) takes it into its weights and
// bias: W'[k] = W[k] * s[k], b'[k] = b[k] * s[k], then b''[k] = b'[k] + t[k]. New constants
// are made, so weights shared with another node stay as they were.
#include <optional>

#include "graph/pass.h"

namespace tf::graph {
namespace {

// The K per-channel values of a constant that broadcasts against a [N, K, H, W] output and
// varies along the channels only (a scalar, [K,1,1], [1,K,1,1], ...).
std::optional<std::vector<float>> per_channel(const Value& c, int64_t K) {
  if (!c.constant || c.dtype != DType::F32 || c.shape.size() > 4) return std::nullopt;
  const Shape& s = c.shape;
  size_t rank = s.size();
  for (size_t d = 0; d < rank; ++d) {
    size_t out_dim = 4 - rank + d;  // right-aligned against [N, K, H, W]
    if (s[d] != 1 && !(out_dim == 1 && s[d] == K)) return std::nullopt;
  }
  std::vector<float> v(K);
  int64_t n = num_elements(s);
  for (int64_t k = 0; k < K; ++k) v[k] = c.constant->f[n == 1 ? 0 : k];
  return v;
}

}  // namespace

bool fold_scale_into_conv(Graph& g) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    std::map<std::string, int> uses = use_counts(g);
    std::map<std::string, size_t> producer;
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      for (const std::string& o : g.nodes[k].outputs) producer[o] = k;
    }
    for (size_t k = 0; k < g.nodes.size() && !again; ++k) {
      Node& m = g.nodes[k];
      if (m.op != "Mul" && m.op != "Add") continue;
      for (int side = 0; side < 2 && !again; ++side) {
        const std::string& y = m.inputs[side];
        auto p = producer.find(y);
        if (p == producer.end() || uses[y] != 1) continue;
        Node& conv = g.nodes[p->second];
        if (conv.op != "Conv" || !g.is_constant(conv.inputs[1])) continue;
        if (conv.inputs.size() > 2 && !conv.inputs[2].empty() && !g.is_constant(conv.inputs[2]))
          continue;
        const Value& w = g.value(conv.inputs[1]);
        int64_t K = w.shape[0];
        std::optional<std::vector<float>> s = per_channel(g.value(m.inputs[1 - side]), K);
        if (!s || g.value(m.outputs[0]).shape != g.value(y).shape) continue;
        std::vector<float> bias(K, 0.0f);
        if (conv.inputs.size() > 2 && !conv.inputs[2].empty())
          bias = g.value(conv.inputs[2]).constant->f;
        HostTensor nw = *w.constant;
        int64_t per_k = num_elements(w.shape) / K;
        for (int64_t c = 0; c < K; ++c) {
          if (m.op == "Mul") {
            for (int64_t e = 0; e < per_k; ++e) nw.f[c * per_k + e] *= (*s)[c];
            bias[c] *= (*s)[c];
          } else {
            bias[c] += (*s)[c];
          }
        }
        std::string wn = m.op == "Mul" ? g.add_constant(conv.name + ".weight", std::move(nw)) : conv.inputs[1];
        std::string bn = g.add_constant(conv.name + ".bias", HostTensor::floats({K}, bias));
        conv.inputs.resize(3);
        conv.inputs[1] = wn;
        conv.inputs[2] = bn;
        // The conv now computes m's output, under m's name.
        g.values.erase(conv.outputs[0]);
        conv.outputs[0] = m.outputs[0];
        g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(k));
        again = changed = true;
      }
    }
  }
  if (changed) drop_unused_values(g);
  return changed;
}

}  // namespace tf::graph
