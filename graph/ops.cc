#include "graph/ops.h"

#include <algorithm>
#include <limits>
#include <map>

#include "base/error.h"
#include "graph/import_control_flow.h"

namespace tf::graph {

const Value& OpContext::in(size_t k) const {
  TF_CHECK(present(k), "op ", node.op, ": input ", k, " is absent");
  return *inputs[k];
}

const HostTensor& OpContext::constant(size_t k, const char* what) const {
  const Value& v = in(k);
  if (!v.constant) {
    throw UserError(str(
        node.where(), ": input ", k, " (", what, ", '", v.name,
        "') is computed at run time; tunefarm needs static shapes, so it must fold to a constant"));
  }
  return *v.constant;
}

namespace {

const std::map<std::string, OpDef>& registry() {
  static const std::map<std::string, OpDef> ops = [] {
    std::vector<OpDef> all;
    register_elementwise_ops(all);
    register_nn_ops(all);
    register_shape_ops(all);
    register_layout_ops(all);
    register_resize_ops(all);
    register_conv_transpose_ops(all);
    register_einsum_ops(all);
    register_scan_ops(all);
    register_recurrent_ops(all);
    register_quantize_ops(all);
    register_norm_ops(all);
    register_function_ops(all);
    register_precision_ops(all);
    register_attention_ops(all);
    std::map<std::string, OpDef> m;
    for (OpDef& d : all) m.emplace(d.type, std::move(d));
    for (const auto& [name, d] : m) {
      TF_CHECK(!d.workload || d.pattern == OpKind::Anchor, "operator ", name, " has a workload but is not an anchor");
    }
    return m;
  }();
  return ops;
}

}  // namespace

OpContext context(const Node& n, const Graph& g, int64_t opset) {
  OpContext c{n, opset, {}};
  for (const std::string& in : n.inputs) c.inputs.push_back(in.empty() ? nullptr : &g.value(in));
  return c;
}

const OpDef* find_op(const std::string& type) {
  auto it = registry().find(type);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> supported_ops() {
  std::vector<std::string> out;
  for (const auto& [name, d] : registry()) out.push_back(name);
  return out;
}

bool rows_apart_always(const Graph&, const Node&) { return true; }

bool axis_is_not_first(const Graph& g, const Node& n, int64_t default_axis) {
  const auto rank = static_cast<int64_t>(g.value(n.inputs[0]).shape.size());
  return rank > 0 && normalize_axis(n, n.get_int("axis", default_axis), rank) != 0;
}

bool keeps_rows_apart(const Graph& g, const Node& n) {
  const OpDef& d = check_node(n);
  if (d.rows_apart) return d.rows_apart(g, n);
  return d.pattern == OpKind::Elementwise || d.pattern == OpKind::Anchor;
}

void describe(OpDef& d, OpKind pattern, std::vector<std::string> attributes, bool int64_exact) {
  d.pattern = pattern;
  d.attributes = std::move(attributes);
  d.int64_exact = int64_exact;
}

const OpDef& check_node(const Node& n) {
  const OpDef* d = find_op(n.op);
  if (!d) {
    std::string have, written;
    for (const std::string& s : supported_ops()) have += (have.empty() ? "" : ", ") + s;
    for (const auto& [op, attributes] : written_out_operators()) written += (written.empty() ? "" : ", ") + op;
    throw UserError(str(n.where(), ": operator ", n.op, " is not supported (supported: ", have,
                        "; and, written out at import, ", written, ")"));
  }
  int count = static_cast<int>(n.inputs.size());
  while (count > 0 && n.inputs[count - 1].empty()) --count;
  if (count < d->min_inputs || count > d->max_inputs) {
    throw UserError(str(
        n.where(), ": takes ", d->min_inputs == d->max_inputs ? "" : "from ", d->min_inputs,
        d->min_inputs == d->max_inputs ? "" : str(" to ", d->max_inputs), " inputs, not ", count));
  }
  for (int k = 0; k < d->min_inputs; ++k) {
    if (n.inputs[k].empty()) throw UserError(str(n.where(), ": input ", k, " is required"));
  }
  const std::vector<std::string>& known = d->attributes;
  for (const auto& [name, a] : n.attrs) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      throw UserError(str(n.where(), ": attribute '", name, "' is not supported (", n.op, " takes ",
                          list.empty() ? "none" : list, ")"));
    }
  }
  return *d;
}

std::vector<TypeShape> infer_node(const Node& n, const Graph& g, int64_t opset) {
  const OpDef* d = &check_node(n);
  TF_CHECK(d->infer, n.op, " reached inference: the importer expands it (OpDef::expand)");
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    auto v = n.inputs[k].empty() ? g.values.end() : g.values.find(n.inputs[k]);
    if (v != g.values.end() && v->second.dtype == DType::U8 && !(k == 0 && d->uint8_data))
      throw UserError(str(n.where(), ": input ", k, " ('", n.inputs[k], "') is uint8, which only the int8 products "
                          "(QMatMul, QConvNCHWc, QDepthwiseNCHWc) read, as their data"));
  }
  std::vector<TypeShape> out = d->infer(context(n, g, opset));
  for (const TypeShape& t : out) check_tensor_size(n.where(), t.shape);
  return out;
}

std::vector<HostTensor> eval_node(
    const Node& n, const Graph& g, int64_t opset,
    const std::function<const HostTensor&(const std::string&)>& values) {
  const OpDef* d = find_op(n.op);
  TF_CHECK(d, "eval of unsupported op ", n.op);
  std::vector<const HostTensor*> ins;
  for (const std::string& in : n.inputs) ins.push_back(in.empty() ? nullptr : &values(in));
  return d->eval(context(n, g, opset), ins);
}

void check_tensor_size(const std::string& what, const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) throw UserError(str(what, ": negative dimension in ", shape_str(s)));
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxGraphTensorElements) {
      throw UserError(str(what, ": shape ", shape_str(s), " has more than ",
                          kMaxGraphTensorElements, " elements"));
    }
  }
}

bool every_input_is_data(const Graph&, const Node&, size_t) { return true; }
bool first_and_third_are_data(const Graph&, const Node&, size_t k) { return k == 0 || k == 2; }

bool foldable(const Node& n, const std::vector<TypeShape>& outputs) {
  const OpDef* def = find_op(n.op);
  if (def && !def->linear_cost) return false;
  for (const TypeShape& t : outputs) {
    if (num_elements(t.shape) > kMaxFoldedElements) return false;
  }
  return true;
}

Shape broadcast_shapes(const Node& n, const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t k = 0; k < r; ++k) {
    int64_t x = k < r - a.size() ? 1 : a[k - (r - a.size())];
    int64_t y = k < r - b.size() ? 1 : b[k - (r - b.size())];
    if (x != y && x != 1 && y != 1) {
      throw UserError(
          str(n.where(), ": shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast"));
    }
    out[k] = x == 1 ? y : x;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t d = 0; d < from.size(); ++d) {
    const int64_t have = from[from.size() - 1 - d], want = to[to.size() - 1 - d];
    if (have != 1 && have != want) return false;
  }
  return true;
}

HostTensor fully_masked_rows(const HostTensor& mask) {
  const int64_t keys = mask.shape.empty() ? 1 : mask.shape.back();
  std::vector<int64_t> rows(static_cast<size_t>(keys == 0 ? 0 : mask.size() / keys), 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    bool all = true;
    for (int64_t j = 0; j < keys && all; ++j)
      all = mask.f[r * static_cast<size_t>(keys) + static_cast<size_t>(j)] == -std::numeric_limits<float>::infinity();
    rows[r] = all ? 1 : 0;
  }
  Shape shape = mask.shape;
  if (!shape.empty()) shape.back() = 1;
  return HostTensor::ints(shape, std::move(rows), DType::Bool);
}

std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < s.size(); ++k) {
    size_t d = s.size() - 1 - k, o = out.size() - 1 - k;
    st[o] = s[d] == 1 ? 0 : stride;
    stride *= s[d];
  }
  return st;
}

int64_t normalize_axis(const Node& n, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank) {
    throw UserError(str(n.where(), ": ", what, " ", axis, " is out of range for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

void require_float(const OpContext& c, size_t k) {
  if (c.in(k).dtype != DType::F32) {
    throw UserError(str(c.node.where(), ": input ", k, " ('", c.in(k).name, "') is ",
                        dtype_name(c.in(k).dtype), "; this operator takes float32"));
  }
}

HostTensor make_like(DType t, const Shape& s) {
  HostTensor h;
  h.dtype = t;
  h.shape = s;
  if (holds_floats(t))
    h.f.assign(num_elements(s), 0.0f);
  else
    h.i.assign(num_elements(s), 0);
  return h;
}

}  // namespace tf::graph
