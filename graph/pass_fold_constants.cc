// fold-constants: evaluates (with the reference, graph/ops.h) every node whose inputs are all
// constants and that is cheap to evaluate (graph/ops.h, foldable); its outputs become
// constants. Import already folded the int64 shape arithmetic;
// this folds float work on weights (a Transpose of a weight, a scale times a scale).
#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {

bool fold_constants(Graph& g) {
  std::vector<Node> kept;
  bool changed = false;
  int64_t budget = kMaxFoldedTotal;
  for (Node& n : g.nodes) {
    bool all_constant = true;
    for (const std::string& in : n.inputs)
      all_constant = all_constant && (in.empty() || g.is_constant(in));
    std::vector<TypeShape> types;
    for (const std::string& o : n.outputs) types.push_back({g.value(o).dtype, g.value(o).shape});
    int64_t elements = 0;
    for (const TypeShape& t : types) elements += num_elements(t.shape);
    if (!all_constant || !foldable(n, types) || elements > budget) {
      kept.push_back(std::move(n));
      continue;
    }
    budget -= elements;
    std::vector<HostTensor> outs = eval_node(
        n, g, g.opset,
        [&](const std::string& name) -> const HostTensor& { return *g.value(name).constant; });
    for (size_t o = 0; o < n.outputs.size(); ++o)
      g.value(n.outputs[o]).constant = std::move(outs[o]);
    changed = true;
  }
  g.nodes = std::move(kept);
  return changed;
}

}  // namespace tf::graph
