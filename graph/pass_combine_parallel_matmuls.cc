// combine-parallel-matmuls: MatMuls that read the same input with constant weights of the
// same depth, as attention's Q, K and V projections, become one MatMul over the weights
// concatenated along N, then a Split back into the original outputs (TVM's
// CombineParallelDense / CombineParallelBatchMatmul). Where every one of them is followed by
// the Add of a constant bias of its N values (read nowhere else), the biases are concatenated
// too and added once, before the Split. One wide kernel instead of several narrow ones.
#include <algorithm>
#include <map>
#include <optional>

#include "graph/pass.h"

namespace tf::graph {
namespace {

struct Branch {
  size_t matmul;
  std::optional<size_t> bias_add;  // the Add of its bias
  std::string bias;                // the bias constant
  std::string out;                 // the value the branch ends in
};

HostTensor concat_last(const std::vector<const HostTensor*>& parts) {
  const Shape& first = parts[0]->shape;
  int64_t rows = num_elements(first) / first.back(), total = 0;
  for (const HostTensor* p : parts) total += p->shape.back();
  Shape s = first;
  s.back() = total;
  HostTensor out = HostTensor::floats(s, std::vector<float>(num_elements(s)));
  int64_t at = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (const HostTensor* p : parts) {
      int64_t n = p->shape.back();
      std::copy(p->f.begin() + r * n, p->f.begin() + (r + 1) * n, out.f.begin() + at);
      at += n;
    }
  }
  return out;
}

}  // namespace

bool combine_parallel_matmuls(Graph& g) {
  std::map<std::string, int> uses = use_counts(g);
  // Candidate MatMuls by shared input: 2-D constant weights [K, N].
  std::map<std::string, std::vector<size_t>> by_input;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (n.op != "MatMul" || !g.is_constant(n.inputs[1]) || g.value(n.inputs[1]).shape.size() != 2)
      continue;
    if (g.value(n.inputs[0]).shape.size() < 2) continue;
    by_input[n.inputs[0]].push_back(k);
  }
  bool changed = false;
  std::vector<bool> drop(g.nodes.size(), false);
  std::vector<std::pair<size_t, std::vector<Node>>> inserts;  // after node index: new nodes
  for (auto& [input, group] : by_input) {
    if (group.size() < 2) continue;
    std::vector<Branch> branches;
    bool all_bias = true;
    for (size_t k : group) {
      Branch b{k, std::nullopt, "", g.nodes[k].outputs[0]};
      const std::string& y = b.out;
      if (uses[y] == 1 && !g.is_output(y)) {
        for (size_t j = 0; j < g.nodes.size(); ++j) {
          const Node& a = g.nodes[j];
          if (a.op != "Add" || (a.inputs[0] != y && a.inputs[1] != y)) continue;
          const std::string& c = a.inputs[0] == y ? a.inputs[1] : a.inputs[0];
          int64_t N = g.value(g.nodes[k].inputs[1]).shape[1];
          if (g.is_constant(c) && g.value(c).shape == Shape{N} &&
              g.value(a.outputs[0]).shape == g.value(y).shape) {
            b.bias_add = j;
            b.bias = c;
            b.out = a.outputs[0];
          }
        }
      }
      all_bias = all_bias && b.bias_add.has_value();
      branches.push_back(b);
    }
    // Same depth K; outputs of the same shape but N.
    const Shape& w0 = g.value(g.nodes[group[0]].inputs[1]).shape;
    bool same_k = true;
    for (size_t k : group) same_k = same_k && g.value(g.nodes[k].inputs[1]).shape[0] == w0[0];
    if (!same_k) continue;
    std::vector<const HostTensor*> weights, biases;
    std::vector<int64_t> widths;
    for (const Branch& b : branches) {
      weights.push_back(&*g.value(g.nodes[b.matmul].inputs[1]).constant);
      widths.push_back(weights.back()->shape[1]);
      if (all_bias) biases.push_back(&*g.value(b.bias).constant);
    }
    std::string base = g.nodes[group[0]].name + ".combined";
    HostTensor w = concat_last(weights);
    Shape out_shape = g.value(g.nodes[group[0]].outputs[0]).shape;
    out_shape.back() = w.shape[1];
    std::string wname = g.add_constant(base + ".weight", std::move(w));
    std::vector<Node> nodes;
    std::string wide = g.add_float(base, out_shape);
    nodes.push_back(Node{base, "MatMul", {input, wname}, {wide}, {}});
    if (all_bias) {
      std::string bname = g.add_constant(base + ".bias", concat_last(biases));
      std::string biased = g.add_float(base + ".biased", out_shape);
      nodes.push_back(Node{base + ".add", "Add", {wide, bname}, {biased}, {}});
      wide = biased;
    }
    std::string sizes = g.add_ints(base + ".split", widths);
    Node split{base + ".split", "Split", {wide, sizes}, {}, {{"axis", int64_t{-1}}}};
    for (Branch& b : branches) {
      if (!all_bias) b.out = g.nodes[b.matmul].outputs[0];
      split.outputs.push_back(b.out);
      drop[b.matmul] = true;
      if (all_bias) drop[*b.bias_add] = true;
    }
    if (g.opset < 13) {  // split sizes are an attribute before opset 13
      split.inputs.pop_back();
      split.attrs["split"] = widths;
    }
    nodes.push_back(split);
    // Where the last of the replaced nodes was: every input is defined by then.
    size_t last = 0;
    for (const Branch& b : branches) last = std::max({last, b.matmul, b.bias_add.value_or(0)});
    inserts.emplace_back(last, std::move(nodes));
    changed = true;
  }
  if (!changed) return false;
  std::map<size_t, std::vector<Node>> after(inserts.begin(), inserts.end());
  std::vector<Node> out;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (!drop[k]) out.push_back(std::move(g.nodes[k]));
    if (auto it = after.find(k); it != after.end()) {
      for (Node& n : it->second) out.push_back(std::move(n));
    }
  }
  // Readers of the branches' outputs may sit between the replaced nodes: order again.
  g.nodes = std::move(out);
  topological_sort(g);
  drop_unused_values(g);
  return true;
}

}  // namespace tf::graph
