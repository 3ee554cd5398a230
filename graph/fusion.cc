#include "graph/fusion.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "base/error.h"
#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Anchor:
      return "anchor";
    case OpKind::Elementwise:
      return "elementwise";
    case OpKind::Injective:
      return "injective";
    case OpKind::Reduction:
      return "reduction";
    case OpKind::Opaque:
      return "opaque";
  }
  return "?";
}

OpKind op_kind(const std::string& op) {
  const OpDef* def = find_op(op);
  TF_CHECK(def && def->pattern, "operator ", op, def ? " has no fusion pattern in its entry" : " is not registered");
  return *def->pattern;
}

std::vector<FusedGroup> plan_fusion(const Graph& g) {
  std::map<std::string, int> uses = use_counts(g);
  std::set<std::string> outputs(g.outputs.begin(), g.outputs.end());
  std::map<std::string, size_t> group_of_value;  // computed value -> group index
  std::vector<FusedGroup> groups;
  std::vector<std::set<size_t>> deps;     // groups each group reads from
  std::vector<std::set<size_t>> readers;  // the reverse: groups that read each group
  // Whether group `from` depends, directly or not, on group `on`: searched from `on` through
  // its readers, which for the producer of a node's input are few (searching from `from`
  // through its dependencies walks the whole history of a long chain, such as an unrolled
  // LSTM's, for every node: quadratic).
  auto depends = [&](size_t from, size_t on) {
    std::vector<size_t> stack = {on};
    std::set<size_t> seen;
    while (!stack.empty()) {
      size_t k = stack.back();
      stack.pop_back();
      if (k == from) return true;
      if (!seen.insert(k).second) continue;
      stack.insert(stack.end(), readers[k].begin(), readers[k].end());
    }
    return false;
  };
  for (const Node& n : g.nodes) {
    OpKind kind = op_kind(n.op);
    // The groups of the computed inputs; the node joins the group of the first input that is
    // read by it alone (not a returned value) where the kinds allow it: Add(x, conv(x)), a
    // residual written with the skip first (MobileNet-v2), joins the conv's group.
    std::set<size_t> reads;
    for (const std::string& in : n.inputs) {
      auto it = group_of_value.find(in);
      if (it != group_of_value.end()) reads.insert(it->second);
    }
    size_t target = groups.size();
    for (const std::string& in : n.inputs) {
      auto it = group_of_value.find(in);
      if (it == group_of_value.end() || uses[in] != 1 || outputs.count(in)) continue;
      const size_t producer = it->second;
      if (groups[producer].nodes.size() >= kMaxGroupNodes) continue;
      OpKind pk = groups[producer].kind;
      bool joins =
          (kind == OpKind::Elementwise && pk != OpKind::Opaque) ||
          (kind == OpKind::Injective && (pk == OpKind::Elementwise || pk == OpKind::Injective)) ||
          (kind == OpKind::Reduction && (pk == OpKind::Elementwise || pk == OpKind::Injective));
      // Joining must not make the group wait for a group that waits for it.
      for (size_t r : reads) joins = joins && (r == producer || !depends(r, producer));
      if (joins) {
        target = producer;
        if (kind == OpKind::Reduction) groups[target].kind = OpKind::Reduction;
        break;
      }
    }
    if (target == groups.size()) {
      groups.push_back(FusedGroup{kind, {}, {}, {}});
      deps.emplace_back();
      readers.emplace_back();
    }
    for (size_t r : reads) {
      if (r == target) continue;
      deps[target].insert(r);
      readers[r].insert(target);
    }
    groups[target].nodes.push_back(n.name);
    for (const std::string& o : n.outputs) group_of_value[o] = target;
  }
  // Inputs and outputs of each group.
  std::map<std::string, size_t> node_group;
  for (size_t k = 0; k < groups.size(); ++k) {
    for (const std::string& name : groups[k].nodes) node_group[name] = k;
  }
  auto add_once = [](std::vector<std::string>& v, const std::string& x) {
    if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
  };
  for (const Node& n : g.nodes) {
    size_t k = node_group.at(n.name);
    for (const std::string& in : n.inputs) {
      if (in.empty() || g.is_constant(in)) continue;
      auto it = group_of_value.find(in);
      if (it != group_of_value.end() && it->second == k) continue;
      add_once(groups[k].inputs, in);
      if (it != group_of_value.end()) add_once(groups[it->second].outputs, in);
    }
  }
  for (const std::string& o : g.outputs) {
    if (auto it = group_of_value.find(o); it != group_of_value.end())
      add_once(groups[it->second].outputs, o);
  }
  // An order that runs: each group after those it reads (stable, Kahn's algorithm).
  std::vector<size_t> waiting(groups.size());
  for (size_t k = 0; k < groups.size(); ++k) waiting[k] = deps[k].size();
  std::set<size_t> ready;
  for (size_t k = 0; k < groups.size(); ++k) {
    if (waiting[k] == 0) ready.insert(k);
  }
  std::vector<FusedGroup> ordered;
  while (!ready.empty()) {
    size_t k = *ready.begin();
    ready.erase(ready.begin());
    ordered.push_back(std::move(groups[k]));
    for (size_t r : readers[k]) {
      if (--waiting[r] == 0) ready.insert(r);
    }
  }
  TF_CHECK(ordered.size() == groups.size(), "fusion: the groups form a cycle");
  return ordered;
}

}  // namespace tf::graph
