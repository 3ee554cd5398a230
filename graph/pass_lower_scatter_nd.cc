// lower-scatter-nd: a ScatterND with constant indices (what PyTorch exports for in-place slice
// assignment, `y[..., 0:2] = f(y)`), or a ScatterElements with constant indices (torch.scatter),
// becomes a Gather of its updates and a Where over its data, which compiled kernels run
// (neither node has a kernel of its own). For ScatterElements each element is a row of one
// value and positions range over all of data's dimensions.
//
// With data of shape X and indices [..., k], each position p of X's first k dimensions is
// written by some rows of the indices, in order. The pass computes, at compile time, which
// row writes each p (a constant map) and whether any does (a constant mask), and emits
//   rows = Reshape(updates, [U] + X[k:])              (U rows of X[k:] each)
//   out  = Where(mask, Gather(rows, map), data)       reduction none: the last row wins
// For reduction add and mul every row counts: rows writing the same position are spread over
// layers (the d-th row writing each p is in layer d), and each layer is added in
//   out = Add(out, Where(mask_d, Gather(rows, map_d), 0))     (Mul and 1 for mul),
// and for max and min (opset 18)
//   out = Where(mask_d, Max(out, Gather(rows, map_d)), out)   (Min for min).
// More than kMaxLayers rows on one position, computed indices, or an index out of range (the
// node's error, as in the reference evaluation) leave the node as it is.
#include "base/error.h"
#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

constexpr size_t kMaxLayers = 16;

// Which rows write each position, in order (rows and their positions: scatter_targets in
// graph/ops.h). ScatterND's positions range over data's first k dimensions, each row writing
// a slice of the rest; ScatterElements' over all of data's.
struct Writers {
  Shape prefix;  // the dimensions positions range over
  int64_t rows = 0;
  std::vector<std::vector<int64_t>> of;  // per position
};

Writers writers_of(const Node& n, const Shape& x, const HostTensor& idx, bool last_wins) {
  Writers w;
  std::vector<int64_t> target = scatter_targets(n, x, idx);  // per row, its position
  w.rows = static_cast<int64_t>(target.size());
  if (n.op == "ScatterND")
    w.prefix.assign(x.begin(), x.begin() + idx.shape.back());
  else
    w.prefix = x;
  w.of.resize(static_cast<size_t>(num_elements(w.prefix)));
  for (int64_t u = 0; u < w.rows; ++u) {
    std::vector<int64_t>& list = w.of[static_cast<size_t>(target[static_cast<size_t>(u)])];
    if (last_wins) list.clear();
    list.push_back(u);
  }
  return w;
}

bool rewrite_scatter_nd(Graph& g, const Node& n, std::vector<Node>& out) {
  if ((n.op != "ScatterND" && n.op != "ScatterElements") || !g.is_constant(n.inputs[1]))
    return false;
  const Value& data = g.value(n.inputs[0]);
  const HostTensor& idx = *g.value(n.inputs[1]).constant;
  const Shape& x = data.shape;
  const std::string reduction = n.get_string("reduction", "none");
  Writers wr = writers_of(n, x, idx, reduction == "none");  // none: the last row wins
  const Shape& prefix = wr.prefix;
  const size_t k = prefix.size();
  const int64_t rows = wr.rows, positions = num_elements(prefix);
  const std::vector<std::vector<int64_t>>& writers = wr.of;
  size_t layers = 0;
  for (const auto& w : writers) layers = std::max(layers, w.size());
  if (layers > kMaxLayers) return false;

  const std::string& y = n.outputs[0];
  auto computed = [&](const std::string& base, const Shape& shape) {
    std::string name = g.fresh_name(y + "." + base);
    g.values[name] = Value{name, data.dtype, shape, std::nullopt};
    return name;
  };
  Shape row_shape{rows};
  row_shape.insert(row_shape.end(), x.begin() + static_cast<std::ptrdiff_t>(k), x.end());
  std::string rows_v = computed("rows", row_shape);
  out.push_back(Node{n.name + ".rows", "Reshape", {n.inputs[2], g.add_ints(y + ".rows_shape", row_shape)},
                     {rows_v}, {}});
  // The mask broadcasts over X's last dimensions.
  Shape mask_shape = prefix;
  mask_shape.resize(x.size(), 1);
  const bool ints = data.dtype != DType::F32;
  auto scalar = [&](double v) {
    return ints ? g.add_constant(y + ".fill", HostTensor::ints({}, {static_cast<int64_t>(v)}))
                : g.add_constant(y + ".fill", HostTensor::floats({}, {static_cast<float>(v)}));
  };
  std::string acc = n.inputs[0];
  if (layers == 0) {  // no rows: the data unchanged
    out.push_back(Node{n.name, "Identity", {acc}, {y}, {}});
    return true;
  }
  for (size_t d = 0; d < layers; ++d) {
    std::vector<int64_t> map(static_cast<size_t>(positions), 0), mask(static_cast<size_t>(positions), 0);
    for (size_t p = 0; p < writers.size(); ++p) {
      if (d < writers[p].size()) {
        map[p] = writers[p][d];
        mask[p] = 1;
      }
    }
    std::string tag = "layer" + std::to_string(d);
    std::string gathered = computed(tag + "_rows", x);
    out.push_back(Node{n.name + "." + tag + "_gather", "Gather",
                       {rows_v, g.add_constant(y + "." + tag + "_map", HostTensor::ints(prefix, std::move(map)))},
                       {gathered}, {{"axis", int64_t{0}}}});
    std::string cond = g.add_constant(y + "." + tag + "_mask", HostTensor::ints(mask_shape, std::move(mask), DType::Bool));
    bool last = d + 1 == layers;
    if (reduction == "none") {
      out.push_back(Node{n.name, "Where", {cond, gathered, acc}, {y}, {}});
      break;  // one layer
    }
    std::string next = last ? y : computed(tag + "_acc", x);
    if (reduction == "max" || reduction == "min") {  // the row where the mask says, else acc
      std::string combined = computed(tag + "_combined", x);
      out.push_back(Node{n.name + "." + tag + "_" + reduction, reduction == "max" ? "Max" : "Min",
                         {acc, gathered}, {combined}, {}});
      out.push_back(Node{last ? n.name : n.name + "." + tag, "Where", {cond, combined, acc}, {next}, {}});
      acc = next;
      continue;
    }
    std::string picked = computed(tag + "_picked", x);
    out.push_back(Node{n.name + "." + tag + "_where", "Where",
                       {cond, gathered, scalar(reduction == "add" ? 0 : 1)}, {picked}, {}});
    out.push_back(Node{last ? n.name : n.name + "." + tag, reduction == "add" ? "Add" : "Mul",
                       {acc, picked}, {next}, {}});
    acc = next;
  }
  return true;
}

}  // namespace

bool lower_scatter_nd(Graph& g) { return expand_nodes(g, rewrite_scatter_nd); }

}  // namespace tf::graph
