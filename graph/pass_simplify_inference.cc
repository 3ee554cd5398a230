// simplify-inference: what only matters for training goes. Identity and Dropout (inference:
// the identity) are bypassed; a BatchNormalization with constant statistics becomes
// x * scale + shift with per-channel constants, scale = gamma / sqrt(var + eps) and
// shift = beta - mean * scale (fold-scale-into-conv then moves them into a convolution).
#include <algorithm>
#include <cmath>

#include "graph/pass.h"

namespace tf::graph {
namespace {

// BatchNormalization -> Mul and Add, or nothing when its statistics are not constants.
bool split_batchnorm(Graph& g, const Node& bn, std::vector<Node>& out) {
  for (size_t k = 1; k < 5; ++k) {
    if (!g.is_constant(bn.inputs[k])) return false;
  }
  const Value& x = g.value(bn.inputs[0]);
  int64_t C = x.shape[1];
  float eps = bn.get_float("epsilon", 1e-5f);
  const auto& gamma = g.value(bn.inputs[1]).constant->f;
  const auto& beta = g.value(bn.inputs[2]).constant->f;
  const auto& mean = g.value(bn.inputs[3]).constant->f;
  const auto& var = g.value(bn.inputs[4]).constant->f;
  std::vector<float> scale(C), shift(C);
  for (int64_t c = 0; c < C; ++c) {
    double s = gamma[c] / std::sqrt(double(var[c]) + eps);
    scale[c] = static_cast<float>(s);
    shift[c] = static_cast<float>(beta[c] - mean[c] * s);
  }
  // [C, 1, ...]: broadcasts along the channel axis (1) of x.
  Shape per_channel(x.shape.size() - 1, 1);
  per_channel[0] = C;
  std::string s_name = g.add_constant(bn.name + ".scale", HostTensor::floats(per_channel, scale));
  std::string t_name = g.add_constant(bn.name + ".shift", HostTensor::floats(per_channel, shift));
  std::string scaled = g.add_float(bn.outputs[0] + ".scaled", x.shape);
  out.push_back(Node{bn.name + ".mul", "Mul", {bn.inputs[0], s_name}, {scaled}, {}});
  out.push_back(Node{bn.name + ".add", "Add", {scaled, t_name}, {bn.outputs[0]}, {}});
  return true;
}

}  // namespace

bool simplify_inference(Graph& g) {
  // Node by node: bypass() renames values in every node, so each rewrite lands in g at once.
  bool changed = expand_nodes(g, [](Graph& g, const Node& n, std::vector<Node>& out) {
    // (A Dropout whose mask output is read stays.)
    bool mask_read = n.op == "Dropout" && n.outputs.size() > 1 && !n.outputs[1].empty() &&
                     (g.is_output(n.outputs[1]) ||
                      std::any_of(g.nodes.begin(), g.nodes.end(), [&](const Node& m) {
                        return std::find(m.inputs.begin(), m.inputs.end(), n.outputs[1]) != m.inputs.end();
                      }));
    if (n.op == "Identity" || (n.op == "Dropout" && !mask_read)) return bypass(g, n.outputs[0], n.inputs[0]);
    return n.op == "BatchNormalization" && split_batchnorm(g, n, out);
  });
  if (changed) drop_unused_values(g);
  return changed;
}

}  // namespace tf::graph
