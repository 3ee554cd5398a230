// dead-code-elimination: drops nodes none of whose outputs reach a graph output, then the
// values (constants included) nothing reads any more.
#include <set>

#include "graph/pass.h"

namespace tf::graph {

bool dead_code_elimination(Graph& g) {
  std::set<std::string> needed(g.outputs.begin(), g.outputs.end());
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t k = g.nodes.size(); k-- > 0;) {
    const Node& n = g.nodes[k];
    for (const std::string& o : n.outputs) keep[k] = keep[k] || needed.count(o);
    if (keep[k]) needed.insert(n.inputs.begin(), n.inputs.end());
  }
  std::vector<Node> kept;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (keep[k]) kept.push_back(std::move(g.nodes[k]));
  }
  bool changed = kept.size() != g.nodes.size();
  g.nodes = std::move(kept);
  size_t before = g.values.size();
  drop_unused_values(g);
  return changed || g.values.size() != before;
}

}  // namespace tf::graph
