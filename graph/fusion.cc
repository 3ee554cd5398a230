#include "graph/fusion.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "base/error.h"
#include "graph/memory_plan.h"
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

namespace {

// A value read by several elementwise nodes whose paths meet again in one node, each path's
// values read once, by the next node of the path: SiLU (Mul(x, Sigmoid(x))), a GELU written
// out (Mul(x, Add(Erf(Div(x, c)), 1))), Mul(x, x). `nodes`: the paths up to and including the
// node where they meet; every input of those is the value, one of theirs, or a constant.
struct Diamond {
  std::set<std::string> nodes;
};

// How many nodes a path of a diamond may have: real ones have a few (GELU's longest, 4).
constexpr size_t kMaxDiamondPath = 8;

std::map<std::string, Diamond> find_diamonds(const Graph& g, const std::map<std::string, int>& uses,
                                             const std::set<std::string>& outputs) {
  std::map<std::string, std::vector<const Node*>> readers;
  for (const Node& n : g.nodes) {
    for (const std::string& in : n.inputs) {
      auto& r = readers[in];
      if (!in.empty() && (r.empty() || r.back() != &n)) r.push_back(&n);
    }
  }
  auto elementwise = [](const Node& n) { return find_op(n.op) && op_kind(n.op) == OpKind::Elementwise; };
  // The nodes from `n` on while each one's single output is read once, by the next.
  auto path = [&](const Node* n) {
    std::vector<const Node*> p = {n};
    while (p.size() < kMaxDiamondPath && elementwise(*p.back()) && p.back()->outputs.size() == 1) {
      const std::string& o = p.back()->outputs[0];
      auto u = uses.find(o);
      if (o.empty() || outputs.count(o) || u == uses.end() || u->second != 1) break;
      p.push_back(readers.at(o).front());
    }
    return p;
  };
  std::map<std::string, Diamond> found;
  for (const auto& [v, rs] : readers) {
    auto u = uses.find(v);
    if (v.empty() || outputs.count(v) || u == uses.end() || u->second < 2 || g.is_constant(v)) continue;
    std::vector<std::vector<const Node*>> paths;
    for (const Node* r : rs) paths.push_back(path(r));
    // Where they meet: the first node of the first path on every other path.
    const Node* meet = nullptr;
    for (const Node* n : paths[0]) {
      bool everywhere = true;
      for (size_t k = 1; k < paths.size() && everywhere; ++k)
        everywhere = std::find(paths[k].begin(), paths[k].end(), n) != paths[k].end();
      if (everywhere) {
        meet = n;
        break;
      }
    }
    if (!meet || !elementwise(*meet)) continue;
    Diamond d;
    std::set<std::string> made = {v};
    std::vector<const Node*> members;
    for (const auto& p : paths) {
      for (const Node* n : p) {
        d.nodes.insert(n->name);
        members.push_back(n);
        made.insert(n->outputs.begin(), n->outputs.end());
        if (n == meet) break;
      }
    }
    bool closed = true;
    for (const Node* n : members) {
      for (const std::string& in : n->inputs) closed = closed && (in.empty() || made.count(in) || g.is_constant(in));
    }
    if (closed) found.emplace(v, std::move(d));
  }
  return found;
}

}  // namespace

bool reads_operand_views(const Node& n) {
  return n.op == "MatMul" || n.op == "Gemm" || n.op == kTensorCoreMatMul;
}

bool recomputed_in_operand(const Graph& g, const Node& n) {
  static const std::set<std::string> views = {"Reshape",   "Transpose", "Slice",    "Squeeze",
                                              "Unsqueeze", "Flatten",   "Identity", "Cast"};
  if (views.count(n.op)) return n.outputs.size() == 1;
  // A scaling (attention's division of Q by sqrt(d)): a float binary step with a scalar
  // constant operand.
  static const std::set<std::string> scalings = {"Mul", "Div", "Add", "Sub"};
  if (!scalings.count(n.op) || n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  int scalars = 0;
  for (const std::string& in : n.inputs) {
    const Value& v = g.value(in);
    if (v.dtype != DType::F32) return false;
    scalars += v.constant && v.constant->size() == 1;
  }
  return scalars == 1;
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
  const std::map<std::string, Diamond> diamonds = find_diamonds(g, uses, outputs);
  std::map<std::string, size_t> diamond_group;  // a diamond's source -> the group it joined
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
  // How many values (computed or constant: each a kernel argument) groups ks and node n read
  // from outside them: whether they may be one kernel (kMaxGroupInputs).
  auto fits_inputs = [&](std::initializer_list<size_t> ks, const Node& n) {
    std::set<std::string> made, read;
    auto add = [&](const Node& m) {
      made.insert(m.outputs.begin(), m.outputs.end());
      for (const std::string& in : m.inputs) {
        if (!in.empty()) read.insert(in);
      }
    };
    for (size_t k : ks) {
      for (const std::string& name : groups[k].nodes) add(*by_name.at(name));
    }
    add(n);
    return static_cast<size_t>(std::count_if(read.begin(), read.end(), [&](const std::string& v) {
             return !made.count(v);
           })) <= kMaxGroupInputs;
  };
  // Group k's nodes moved into group `target` (k left empty, dropped at the end), unless that
  // would close a cycle through a group outside both: false then, nothing changed.
  auto merge = [&](size_t k, size_t target, std::set<size_t>& reads) {
    for (size_t r : deps[k]) {
      if (r != target && depends(r, target)) return false;
    }
    for (size_t r : deps[target]) {
      if (r != k && depends(r, k)) return false;
    }
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
    std::sort(groups[target].nodes.begin(), groups[target].nodes.end(),
              [&](const std::string& a, const std::string& b) {
                return node_order.at(a) < node_order.at(b);
              });
    return true;
  };
  // Whether group k is one Cast to float32 of a computed 16-bit value (sixteen-bit-edges'
  // widening Casts): such a group joins its reader's group rather than the reverse, so that
  // the reader may still join a product's epilogue.
  auto widening = [&](size_t k) {
    if (groups[k].nodes.size() != 1) return false;
    const Node& c = *by_name.at(groups[k].nodes[0]);
    return c.op == "Cast" && !c.has(kStorageCast) && c.get_int("to", 0) == 1 &&
           g.values.count(c.inputs[0]) && is_storage16(g.value(c.inputs[0]).dtype) &&
           group_of_value.count(c.inputs[0]);
  };
  // Whether group k is a view that memory planning computes in place (graph/memory_plan.h
  // in_place_concats): alone in its group, in place by itself (view_in_place_by_itself), and no
  // other node planning may compute in place (a view or a Concat) makes its input or reads it
  // too, which could take it first. No kernel to save then, and the product copies the view's
  // source as an input (cp.async) rather than computing a view of it. A view planning could copy
  // (a second view of one value, a view of a view) is the product's to read.
  auto in_place_views = [&](size_t k) {
    if (groups[k].nodes.size() != 1) return false;
    const Node& v = *by_name.at(groups[k].nodes[0]);
    if (!view_in_place_by_itself(g, v)) return false;
    const std::string& in = v.inputs[0];
    auto has = [](const std::vector<std::string>& names, const std::string& x) {
      return std::find(names.begin(), names.end(), x) != names.end();
    };
    for (const Node& n : g.nodes) {
      if (&n == &v || (!is_view(g, n) && n.op != "Concat")) continue;
      if (has(n.outputs, in) || has(n.inputs, in)) return false;
    }
    return true;
  };
  // fuses_operands (FusedAttention): the elementwise and injective groups computing n's
  // inputs for it alone merge into one group, which n then joins; its kind becomes n's. Returns
  // the group n joins (groups.size(): a new one). Merged groups are left empty and dropped.
  // `views_only` (a product reading views, products_read_views): only groups of layout views
  // and cheap steps (recomputed_in_operand), not ones computed in place.
  auto take_operands = [&](const Node& n, std::set<size_t>& reads, bool views_only) {
    size_t target = groups.size();
    for (const std::string& in : n.inputs) {
      auto it = group_of_value.find(in);
      if (it == group_of_value.end()) continue;
      const size_t k = it->second;
      if (k == target || (groups[k].kind != OpKind::Elementwise && groups[k].kind != OpKind::Injective) ||
          !read_only_by(k, n))
        continue;
      if (views_only && (!std::all_of(groups[k].nodes.begin(), groups[k].nodes.end(),
                                      [&](const std::string& m) {
                                        return recomputed_in_operand(g, *by_name.at(m));
                                      }) ||
                         in_place_views(k)))
        continue;
      if (target == groups.size()) {
        if (groups[k].nodes.size() >= kMaxGroupNodes || !fits_inputs({k}, n)) continue;
        target = k;
        continue;
      }
      if (groups[target].nodes.size() + groups[k].nodes.size() >= kMaxGroupNodes ||
          !fits_inputs({target, k}, n))
        continue;
      merge(k, target, reads);
    }
    if (target == groups.size()) return target;
    // The node's other reads must not wait for the merged group.
    for (size_t r : reads) {
      if (r != target && depends(r, target)) return groups.size();
    }
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
    const bool takes_views = g.products_read_views && reads_operand_views(n);
    const bool takes_operands = find_op(n.op)->fuses_operands || takes_views;
    if (takes_operands) target = take_operands(n, reads, takes_views);
    // Inputs widened from 16 bits last (below).
    std::vector<std::string> candidates;
    for (bool widened : {false, true}) {
      for (const std::string& in : n.inputs) {
        auto it = group_of_value.find(in);
        if (it != group_of_value.end() && widening(it->second) == widened) candidates.push_back(in);
      }
    }
    for (const std::string& in : candidates) {
      if (takes_operands) break;
      auto it = group_of_value.find(in);
      if (it == group_of_value.end() || outputs.count(in)) continue;
      const size_t producer = it->second;
      // A diamond's nodes join its source's group all together, or none of them: room for
      // all of them when the first one joins, the later ones then follow it.
      auto d = diamonds.find(in);
      const bool in_diamond = d != diamonds.end() && d->second.nodes.count(n.name);
      if (uses[in] != 1 && !in_diamond) continue;
      auto joined = in_diamond ? diamond_group.find(in) : diamond_group.end();
      if (in_diamond && joined == diamond_group.end() &&
          groups[producer].nodes.size() + d->second.nodes.size() > kMaxGroupNodes)
        continue;
      if (joined != diamond_group.end() && joined->second != producer) continue;
      if (joined == diamond_group.end() && groups[producer].nodes.size() >= kMaxGroupNodes) continue;
      OpKind pk = groups[producer].kind;
      bool joins =
          (kind == OpKind::Elementwise && pk != OpKind::Opaque) ||
          (kind == OpKind::Injective && (pk == OpKind::Elementwise || pk == OpKind::Injective)) ||
          (kind == OpKind::Reduction && (pk == OpKind::Elementwise || pk == OpKind::Injective));
      // Joining must not make the group wait for a group that waits for it.
      for (size_t r : reads) joins = joins && (r == producer || !depends(r, producer));
      joins = joins && fits_inputs({producer}, n);
      if (joins) {
        target = producer;
        if (kind == OpKind::Reduction) groups[target].kind = OpKind::Reduction;
        if (in_diamond) diamond_group.emplace(in, producer);
        break;
      }
    }
    // The widening Casts that feed the node alone join its group (a residual Add's 16-bit
    // skip read in the product's epilogue).
    for (const std::string& in : n.inputs) {
      auto it = group_of_value.find(in);
      if (target == groups.size() || kind != OpKind::Elementwise || it == group_of_value.end() ||
          it->second == target || !widening(it->second) || uses[in] != 1 || outputs.count(in) ||
          groups[target].nodes.size() >= kMaxGroupNodes || !fits_inputs({target, it->second}, n))
        continue;
      merge(it->second, target, reads);
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
