#include "graph/reference_run.h"

#include "base/error.h"
#include "graph/memory_budget.h"
#include "graph/ops.h"
#include "graph/pass.h"

#include <set>

namespace tf::graph {

std::map<std::string, HostTensor> run_reference(const Graph& g,
                                                const std::map<std::string, HostTensor>& inputs) {
  return run_reference(g, inputs, default_memory_budget());
}

std::map<std::string, HostTensor> run_reference(const Graph& g,
                                                const std::map<std::string, HostTensor>& inputs,
                                                int64_t memory_budget) {
  check_reference_memory(g, memory_budget);
  std::map<std::string, HostTensor> live;
  for (const std::string& name : g.inputs) {
    auto it = inputs.find(name);
    if (it == inputs.end()) throw UserError(str("input '", name, "' is not given"));
    const Value& v = g.value(name);
    if (it->second.dtype != v.dtype || it->second.shape != v.shape) {
      throw UserError(str("input '", name, "' is ", dtype_name(it->second.dtype), " ",
                          shape_str(it->second.shape), "; the model takes ", dtype_name(v.dtype),
                          " ", shape_str(v.shape)));
    }
    live[name] = it->second;
  }
  for (const auto& [name, t] : inputs) {
    if (!live.count(name)) throw UserError(str("input '", name, "' is not an input of the model"));
  }
  auto value = [&](const std::string& name) -> const HostTensor& {
    if (auto it = live.find(name); it != live.end()) return it->second;
    const Value& v = g.value(name);
    TF_CHECK(v.constant, "reference run: ", name, " is neither computed nor constant");
    return *v.constant;
  };
  // Each computed value is freed after its last reader (outputs are kept).
  const std::map<std::string, size_t> last_use = last_readers(g);
  std::set<std::string> keep(g.outputs.begin(), g.outputs.end());
  keep.insert(g.inputs.begin(), g.inputs.end());
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    std::vector<HostTensor> outs = eval_node(n, g, g.opset, value);
    for (size_t o = 0; o < n.outputs.size(); ++o) live[n.outputs[o]] = std::move(outs[o]);
    for (const std::string& in : n.inputs) {
      if (!in.empty() && !keep.count(in) && last_use.at(in) == k) live.erase(in);
    }
  }
  std::map<std::string, HostTensor> result;
  for (const std::string& name : g.outputs) result[name] = value(name);
  return result;
}

}  // namespace tf::graph
