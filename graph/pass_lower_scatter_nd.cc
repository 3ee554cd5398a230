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
//   out = Add(out, Where(mask_d, Gather(rows, map_d), 0))     (Mul and 1 for mul).
// More than kMaxLayers rows on one position, computed indices, or an index out of range (the
// node's error, as in the reference evaluation) leave the node as it is.
#include "compiler/error.h"
#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

constexpr size_t kMaxLayers = 16;

// Which rows write each position, in order. ScatterND: a row is an index tuple of length k,
// writing a slice of data's dimensions after k, and positions are those of the first k
// dimensions. ScatterElements: a row is one element of the indices (and updates), writing one
// element of data: its own position with the axis's coordinate replaced by the index.
struct Writers {
  Shape prefix;  // the dimensions positions range over
  int64_t rows = 0;
  std::vector<std::vector<int64_t>> of;  // per position
};

int64_t checked(const Node& n, int64_t i, int64_t len, size_t axis) {
  if (i < -len || i >= len)
    throw UserError(
        str(n.where(), ": index ", i, " is out of range for axis ", axis, " of size ", len));
  return i < 0 ? i + len : i;
}

Writers writers_of(const Node& n, const Shape& x, const HostTensor& idx, bool last_wins) {
  Writers w;
  std::vector<int64_t> target;  // per row, its position
  if (n.op == "ScatterND") {
    const auto k = static_cast<size_t>(idx.shape.back());
    w.rows = idx.size() / static_cast<int64_t>(k);
    w.prefix.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(k));
    for (int64_t u = 0; u < w.rows; ++u) {
      int64_t at = 0;
      for (size_t d = 0; d < k; ++d)
        at = at * x[d] + checked(n, idx.i[static_cast<size_t>(u) * k + d], x[d], d);
      target.push_back(at);
    }
  } else {  // ScatterElements
    auto axis = static_cast<size_t>(
        normalize_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.size())));
    w.rows = idx.size();
    w.prefix = x;
    std::vector<int64_t> at(idx.shape.size(), 0);
    for (int64_t u = 0; u < w.rows; ++u) {
      int64_t p = 0;
      for (size_t d = 0; d < x.size(); ++d)
        p = p * x[d] + (d == axis ? checked(n, idx.i[static_cast<size_t>(u)], x[d], d) : at[d]);
      target.push_back(p);
      for (size_t d = at.size(); d-- > 0;) {
        if (++at[d] < idx.shape[d]) break;
        at[d] = 0;
      }
    }
  }
  w.of.resize(static_cast<size_t>(num_elements(w.prefix)));
  for (int64_t u = 0; u < w.rows; ++u) {
    std::vector<int64_t>& list = w.of[static_cast<size_t>(target[static_cast<size_t>(u)])];
    if (last_wins) list.clear();
    list.push_back(u);
  }
  return w;
}

bool rewrite(Graph& g, const Node& n, std::vector<Node>& out) {
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
    std::string picked = computed(tag + "_picked", x);
    out.push_back(Node{n.name + "." + tag + "_where", "Where",
                       {cond, gathered, scalar(reduction == "add" ? 0 : 1)}, {picked}, {}});
    std::string next = last ? y : computed(tag + "_acc", x);
    out.push_back(Node{last ? n.name : n.name + "." + tag, reduction == "add" ? "Add" : "Mul",
                       {acc, picked}, {next}, {}});
    acc = next;
  }
  return true;
}

}  // namespace

bool lower_scatter_nd(Graph& g) { return expand_nodes(g, rewrite); }

}  // namespace tf::graph
