// split-grouped-convs: a grouped Conv that no workload expresses (group > 1 and not
// depthwise: ResNeXt's and RegNet's 3x3 convolutions) with constant weights becomes one Conv
// per group over its channels (Slice of the input, the group's weights and bias, sliced now)
// and a Concat of their outputs, so the conv2d template runs each instead of the generic
// kernel. The sum is the same: group k's outputs read only group k's input channels.
// At most kMaxSplitGroups groups (ResNeXt has 32 or 64, RegNets up to about 100): past that a
// model would compile into more kernels than it gains from them (and a hostile one into
// millions).
#include "base/error.h"
#include "graph/ops.h"
#include "graph/pass.h"
#include "graph/tasks.h"

namespace tf::graph {
namespace {

constexpr int64_t kMaxSplitGroups = 256;

bool split(Graph& g, const Node& n, std::vector<Node>& out) {
  if (n.op != "Conv" || n.inputs.size() < 2 || !g.is_constant(n.inputs[1]) || g.value(n.inputs[0]).shape.size() != 4) return false;
  const bool bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (bias && !g.is_constant(n.inputs[2])) return false;
  const int64_t group = n.get_int("group", 1);
  if (group <= 1 || group > kMaxSplitGroups || !anchor_workload(g, n).spec.empty()) return false;
  const Shape x = g.value(n.inputs[0]).shape;
  const HostTensor& w = *g.value(n.inputs[1]).constant;
  const int64_t C = x[1] / group, M = w.shape[0] / group, per = num_elements(w.shape) / group;
  auto ints = [&](const std::string& base, std::vector<int64_t> v) { return g.add_ints(n.name + "." + base, std::move(v)); };
  std::map<std::string, Attr> attrs = n.attrs;
  attrs.erase("group");
  const Shape y = g.value(n.outputs[0]).shape;
  std::vector<std::string> parts;
  for (int64_t k = 0; k < group; ++k) {
    std::string tag = str("group", k);
    std::string xk = g.add_float(n.inputs[0] + "." + tag, {x[0], C, x[2], x[3]});
    out.push_back(Node{n.name + "." + tag + ".slice", "Slice",
                       {n.inputs[0], ints(tag + ".start", {k * C}), ints(tag + ".end", {(k + 1) * C}), ints(tag + ".axis", {1})},
                       {xk}, {}});
    std::string wk = g.fresh_name(n.inputs[1] + "." + tag);
    Shape ws = {M, w.shape[1], w.shape[2], w.shape[3]};
    g.values[wk] = Value{wk, DType::F32, ws,
                         HostTensor::floats(ws, std::vector<float>(w.f.begin() + k * per, w.f.begin() + (k + 1) * per))};
    std::vector<std::string> in = {xk, wk};
    if (bias) {
      const HostTensor& b = *g.value(n.inputs[2]).constant;
      std::string bk = g.fresh_name(n.inputs[2] + "." + tag);
      g.values[bk] = Value{bk, DType::F32, {M}, HostTensor::floats({M}, std::vector<float>(b.f.begin() + k * M, b.f.begin() + (k + 1) * M))};
      in.push_back(bk);
    }
    std::string yk = g.add_float(n.outputs[0] + "." + tag, {y[0], M, y[2], y[3]});
    out.push_back(Node{n.name + "." + tag, "Conv", in, {yk}, attrs});
    parts.push_back(yk);
  }
  out.push_back(Node{n.name, "Concat", parts, {n.outputs[0]}, {{"axis", int64_t{1}}}});
  return true;
}

}  // namespace

bool split_grouped_convs(Graph& g) {
  bool changed = expand_nodes(g, split);
  if (changed) drop_unused_values(g);
  return changed;
}

}  // namespace tf::graph
