// eliminate-common-subexpressions: a node with the same operator, inputs and attributes as an
// earlier one is dropped and its readers read the earlier node's outputs.
#include <algorithm>
#include <map>
#include <sstream>

#include "graph/pass.h"

namespace tf::graph {

bool eliminate_common_subexpressions(Graph& g) {
  std::map<std::string, size_t> seen;  // key -> index of the first node computing it
  std::vector<bool> dropped(g.nodes.size(), false);
  bool changed = false;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    std::string key = node_key(g.nodes[k]);
    auto [it, first_time] = seen.emplace(key, k);
    if (first_time) continue;
    // Several outputs: only where none is a graph output (a partial bypass cannot be undone).
    const std::vector<std::string> outs = g.nodes[k].outputs, firsts = g.nodes[it->second].outputs;
    if (outs.size() > 1 && std::any_of(outs.begin(), outs.end(),
                                       [&](const std::string& o) { return g.is_output(o); })) {
      continue;
    }
    bool ok = true;
    for (size_t o = 0; o < outs.size() && ok; ++o) ok = bypass(g, outs[o], firsts[o]);
    if (!ok) continue;  // single output: nothing was changed
    dropped[k] = true;
    changed = true;
  }
  if (!changed) return false;
  std::vector<Node> kept;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (!dropped[k]) kept.push_back(std::move(g.nodes[k]));
  }
  g.nodes = std::move(kept);
  drop_unused_values(g);
  return true;
}

std::string node_key(const Node& n) {
  std::ostringstream os;
  os << n.op << '(';
  for (const std::string& in : n.inputs) os << in << ',';
  os << ')' << n.outputs.size();
  for (const auto& [name, a] : n.attrs) {
    os << ';' << name << '=' << a.index() << ':';
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, HostTensor>) {
            os << int(v.dtype) << shape_str(v.shape);
            for (float f : v.f) os << f << ' ';
            for (int64_t i : v.i) os << i << ' ';
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                               std::is_same_v<T, std::vector<float>>) {
            for (const auto& x : v) os << x << ' ';
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            for (const std::string& x : v) os << x.size() << ':' << x;
          } else {
            os << v;
          }
        },
        a);
  }
  return os.str();
}

}  // namespace tf::graph
