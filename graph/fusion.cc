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
  std::map<std::string, size_t> node_order;
  for (size_t k = 0; k < g.nodes.size(); ++k) node_order[g.nodes[k].name] = k;
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  // Whether every value group k computes is read inside it or by node `n` alone, and not
  // returned: the group can become part of n's kernel.
  auto read_only_by = [&](size_t k, const Node& n) {
    std::map<std::string, int> inside;
    for (const std::string& name : groups[k].nodes) {
      for (const std::string& in : by_name.at(name)->inputs) ++inside[in];
    }
    for (const std::string& in : n.inputs) ++inside[in];
    for (const std::string& name : groups[k].nodes) {
      for (const std::string& o : by_name.at(name)->outputs) {
        if (!o.empty() && (outputs.count(o) || inside[o] != uses[o])) return false;
      }
    }
    return true;
  };
  // fuses_operands (FusedAttention): the elementwise and injective groups computing n's
  // inputs for it alone merge into one group, which n then joins; its kind becomes n's. Returns
  // the group n joins (groups.size(): a new one). Merged groups are left empty and dropped.
  auto take_operands = [&](const Node& n, std::set<size_t>& reads) {
    size_t target = groups.size();
    for (const std::string& in : n.inputs) {
      auto it = group_of_value.find(in);
      if (it == group_of_value.end()) continue;
      const size_t k = it->second;
      if (k == target || (groups[k].kind != OpKind::Elementwise && groups[k].kind != OpKind::Injective) ||
          !read_only_by(k, n))
        continue;
      if (target == groups.size()) {
        if (groups[k].nodes.size() >= kMaxGroupNodes) continue;
        target = k;
        continue;
      }
      if (groups[target].nodes.size() + groups[k].nodes.size() >= kMaxGroupNodes) continue;
      // Merging must not close a cycle through a group outside both.
      bool cycle = false;
      for (size_t r : deps[k]) cycle = cycle || (r != target && depends(r, target));
      for (size_t r : deps[target]) cycle = cycle || (r != k && depends(r, k));
      if (cycle) continue;
      for (const std::string& name : groups[k].nodes) {
        groups[target].nodes.push_back(name);
        for (const std::string& o : by_name.at(name)->outputs) group_of_value[o] = target;
      }
      groups[k].nodes.clear();
      for (size_t r : deps[k]) {
        readers[r].erase(k);
        if (r != target) {
          deps[target].insert(r);
          readers[r].insert(target);
        }
      }
      deps[k].clear();
      deps[target].erase(k);
      readers[k].clear();
      reads.erase(k);
    }
    if (target == groups.size()) return target;
    // The node's other reads must not wait for the merged group.
    for (size_t r : reads) {
      if (r != target && depends(r, target)) return groups.size();
    }
    std::sort(groups[target].nodes.begin(), groups[target].nodes.end(),
              [&](const std::string& a, const std::string& b) { return node_order.at(a) < node_order.at(b); });
    groups[target].kind = op_kind(n.op);
    return target;
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
    const bool takes_operands = find_op(n.op)->fuses_operands;
    if (takes_operands) target = take_operands(n, reads);
    for (const std::string& in : n.inputs) {
      if (takes_operands) break;
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
  ordered.erase(std::remove_if(ordered.begin(), ordered.end(), [](const FusedGroup& f) { return f.nodes.empty(); }),
                ordered.end());
  return ordered;
}

}  // namespace tf::graph
