// Data movement and shape operators: Shape, Reshape, Flatten, Transpose, Concat, Slice, Pad, Tile,
// Gather, Split, Squeeze, Unsqueeze, Expand, Constant, ConstantOfShape, Range, Identity, Dropout.
// Most of them take any element type; shape arithmetic runs through them on int64 tensors.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "graph/node_te.h"
#include "graph/op_te.h"
#include "graph/ops.h"

namespace tf::graph {

std::vector<int64_t> transpose_perm(const Node& n, size_t rank) {
  std::vector<int64_t> perm = n.get_ints("perm", {});
  if (perm.empty()) {
    for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<int64_t>(d));
  }
  return perm;
}

bool is_permutation(const std::vector<int64_t>& perm, size_t rank) {
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t d = 0; d < sorted.size(); ++d) {
    if (sorted[d] != static_cast<int64_t>(d)) return false;
  }
  return sorted.size() == rank;
}

namespace {

std::vector<int64_t> ints_of(const HostTensor& t) {
  std::vector<int64_t> v;
  for (int64_t k = 0; k < t.size(); ++k) v.push_back(t.as_int(k));
  return v;
}

// Row-major strides.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// Copies a tensor's data to a new shape of the same size (Reshape, Flatten, Squeeze, ...).
std::vector<HostTensor> same_data(const std::vector<const HostTensor*>& in, const Shape& s) {
  HostTensor out = *in[0];
  out.shape = s;
  return {out};
}

// ---- Reshape: 0 copies the input's dimension (unless allowzero), -1 is inferred.
Shape reshape_shape(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  std::vector<int64_t> want = ints_of(c.constant(1, "shape"));
  bool allowzero = c.node.get_int("allowzero", 0);
  Shape out;
  int64_t infer_at = -1, known = 1;
  for (size_t d = 0; d < want.size(); ++d) {
    int64_t v = want[d];
    if (v == 0 && !allowzero) {
      if (d >= x.size())
        throw UserError(str(c.node.where(), ": shape ", shape_str(want), " copies dimension ", d,
                            " of ", shape_str(x)));
      v = x[d];
    }
    if (v == -1) {
      if (infer_at >= 0)
        throw UserError(str(c.node.where(), ": shape ", shape_str(want), " has two -1"));
      infer_at = static_cast<int64_t>(d);
      out.push_back(1);
      continue;
    }
    if (v < 0)
      throw UserError(str(c.node.where(), ": shape ", shape_str(want), " has dimension ", v));
    out.push_back(v);
  }
  check_tensor_size(c.node.where(), out);
  known = num_elements(out);
  int64_t n = num_elements(x);
  if (infer_at >= 0) {
    if (known == 0 || n % known != 0) {
      throw UserError(
          str(c.node.where(), ": cannot reshape ", shape_str(x), " to ", shape_str(want)));
    }
    out[infer_at] = n / known;
  }
  if (num_elements(out) != n)
    throw UserError(str(c.node.where(), ": cannot reshape ", shape_str(x), " (", n,
                        " elements) to ", shape_str(want)));
  return out;
}

Shape flatten_shape(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  auto rank = static_cast<int64_t>(x.size());
  int64_t axis = c.node.get_int("axis", 1);
  if (axis < -rank || axis > rank)
    throw UserError(str(c.node.where(), ": axis ", axis, " is out of range for rank ", rank));
  if (axis < 0) axis += rank;
  int64_t a = 1, b = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? a : b) *= x[d];
  return {a, b};
}

std::vector<int64_t> perm_of(const OpContext& c) {
  const size_t rank = c.in(0).shape.size();
  std::vector<int64_t> perm = transpose_perm(c.node, rank);
  if (!is_permutation(perm, rank))
    throw UserError(str(c.node.where(), ": perm ", shape_str(perm), " is not a permutation of rank ", rank));
  return perm;
}

std::vector<HostTensor> transpose_eval(const OpContext& c,
                                       const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  std::vector<int64_t> perm = perm_of(c), st = strides_of(x);
  Shape os;
  for (int64_t p : perm) os.push_back(x[p]);
  HostTensor out = make_like(in[0]->dtype, os);
  std::vector<int64_t> idx(os.size(), 0);
  for (int64_t e = 0; e < out.size(); ++e) {
    int64_t k = 0;
    for (size_t d = 0; d < os.size(); ++d) k += idx[d] * st[perm[d]];
    copy_elem(out, e, *in[0], k);
    for (size_t d = os.size(); d-- > 0;) {
      if (++idx[d] < os[d]) break;
      idx[d] = 0;
    }
  }
  return {out};
}

// ---- Concat along `axis`.
std::vector<TypeShape> concat_infer(const OpContext& c) {
  const Shape& first = c.in(0).shape;
  int64_t axis =
      normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(first.size()));
  Shape out = first;
  out[axis] = 0;
  for (size_t k = 0; k < c.count(); ++k) {
    const Shape& s = c.in(k).shape;
    bool ok = s.size() == first.size() && c.in(k).dtype == c.in(0).dtype;
    for (size_t d = 0; ok && d < s.size(); ++d)
      ok = static_cast<int64_t>(d) == axis || s[d] == first[d];
    if (!ok)
      throw UserError(str(c.node.where(), ": input ", k, " ", shape_str(s),
                          " does not concatenate with ", shape_str(first)));
    out[axis] += s[axis];
  }
  return {{c.in(0).dtype, out}};
}

std::vector<HostTensor> concat_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  TypeShape ts = concat_infer(c)[0];
  int64_t axis =
      normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(ts.shape.size()));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= ts.shape[d];
  for (size_t d = axis + 1; d < ts.shape.size(); ++d) inner *= ts.shape[d];
  HostTensor out = make_like(ts.dtype, ts.shape);
  int64_t at = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const HostTensor* t : in) {
      int64_t chunk = t->shape[axis] * inner;
      for (int64_t e = 0; e < chunk; ++e) copy_elem(out, at++, *t, o * chunk + e);
    }
  return {out};
}

// ---- Slice (opset 10+): starts, ends, axes, steps as constant inputs.
}  // namespace

SliceSpec slice_spec(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  auto rank = static_cast<int64_t>(x.size());
  std::vector<int64_t> starts = ints_of(c.constant(1, "starts")),
                       ends = ints_of(c.constant(2, "ends"));
  std::vector<int64_t> axes, steps;
  if (c.present(3))
    axes = ints_of(c.constant(3, "axes"));
  else
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (c.present(4))
    steps = ints_of(c.constant(4, "steps"));
  else
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    throw UserError(str(c.node.where(), ": starts, ends, axes and steps differ in length"));
  }
  SliceSpec s{std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1), x};
  for (size_t k = 0; k < starts.size(); ++k) {
    int64_t a = normalize_axis(c.node, axes[k], rank), n = x[a], st = steps[k];
    if (st == 0) throw UserError(str(c.node.where(), ": step 0 on axis ", a));
    if (st == INT64_MIN) st = -INT64_MAX;  // the same slice, and -st exists
    // Negative positions count from the end; both are clamped (no overflow: |n| <= 2^32).
    int64_t b = starts[k], e = ends[k];
    if (b < 0) b = b < -n ? -1 : b + n;
    if (e < 0) e = e < -n ? -1 : e + n;
    if (st > 0) {
      b = std::clamp<int64_t>(b, 0, n);
      e = std::clamp<int64_t>(e, 0, n);
      s.out[a] = e > b ? (e - b - 1) / st + 1 : 0;
    } else {
      b = std::clamp<int64_t>(b, -1, n - 1);
      e = std::clamp<int64_t>(e, -1, n - 1);
      s.out[a] = b > e ? (b - e - 1) / (-st) + 1 : 0;
    }
    s.start[a] = b;
    s.step[a] = st;
  }
  return s;
}

namespace {

std::vector<HostTensor> slice_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  SliceSpec s = slice_spec(c);
  std::vector<int64_t> st = strides_of(in[0]->shape);
  HostTensor out = make_like(in[0]->dtype, s.out);
  std::vector<int64_t> idx(s.out.size(), 0);
  for (int64_t e = 0; e < out.size(); ++e) {
    int64_t k = 0;
    for (size_t d = 0; d < idx.size(); ++d) k += (s.start[d] + idx[d] * s.step[d]) * st[d];
    copy_elem(out, e, *in[0], k);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < s.out[d]) break;
      idx[d] = 0;
    }
  }
  return {out};
}

}  // namespace

PadSpec pad_spec(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  auto rank = static_cast<int64_t>(x.size());
  PadSpec s;
  std::string mode = c.node.get_string("mode", "constant");
  if (mode == "reflect")
    s.mode = PadSpec::Reflect;
  else if (mode == "edge")
    s.mode = PadSpec::Edge;
  else if (mode == "wrap" && c.opset >= 19)
    s.mode = PadSpec::Wrap;
  else if (mode != "constant")
    throw UserError(str(c.node.where(), ": mode '", mode, "' is not supported (constant, reflect and edge are",
                        c.opset >= 19 ? ", and wrap" : "; wrap from opset 19", ")"));
  std::vector<int64_t> pads = ints_of(c.constant(1, "pads")), axes;
  if (c.present(3)) {
    for (int64_t a : ints_of(c.constant(3, "axes"))) axes.push_back(normalize_axis(c.node, a, rank));
  } else {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  if (pads.size() != 2 * axes.size())
    throw UserError(str(c.node.where(), ": pads has ", pads.size(), " values; ", axes.size(),
                        " axes need ", 2 * axes.size()));
  if (c.present(2)) {
    if (c.in(2).dtype != c.in(0).dtype || num_elements(c.in(2).shape) != 1)
      throw UserError(str(c.node.where(), ": constant_value must be one value of the data's type, not ",
                          shape_str(c.in(2).shape)));
  }
  s.begin.assign(x.size(), 0);
  s.out = x;
  std::vector<bool> seen(x.size(), false);
  for (size_t k = 0; k < axes.size(); ++k) {
    auto a = static_cast<size_t>(axes[k]);
    if (seen[a]) throw UserError(str(c.node.where(), ": axis ", a, " appears twice in axes"));
    seen[a] = true;
    int64_t b = pads[k], e = pads[k + axes.size()];
    const int64_t limit = kMaxGraphTensorElements;
    if (b < -limit || b > limit || e < -limit || e > limit || x[a] + b + e < 0)
      throw UserError(str(c.node.where(), ": pads ", b, " and ", e, " on axis ", a, " of size ", x[a],
                          " leave no valid size"));
    if (s.mode != PadSpec::Constant && x[a] == 0 && b + e > 0)
      throw UserError(str(c.node.where(), ": ", mode, " padding of the empty axis ", a));
    s.begin[a] = b;
    s.out[a] = x[a] + b + e;
  }
  check_tensor_size(c.node.where(), s.out);
  return s;
}

int64_t PadSpec::source(int64_t at, size_t dim, int64_t n) const {
  int64_t i = at - begin[dim];
  if (i >= 0 && i < n) return i;
  if (mode == Constant) return -1;
  if (mode == Edge || n == 1) return i < 0 ? 0 : n - 1;
  if (mode == Wrap) return ((i % n) + n) % n;  // a torus: ..., n-1, [0, ..., n-1], 0, ...
  int64_t period = 2 * (n - 1);  // reflect: ..., 2, 1, [0, 1, ..., n-1], n-2, ...
  i = ((i % period) + period) % period;
  return i < n ? i : period - i;
}

namespace {

std::vector<HostTensor> pad_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  PadSpec s = pad_spec(c);
  const Shape& x = in[0]->shape;
  std::vector<int64_t> st = strides_of(x);
  HostTensor out = make_like(in[0]->dtype, s.out);
  std::vector<int64_t> idx(s.out.size(), 0);
  for (int64_t e = 0; e < out.size(); ++e) {
    int64_t k = 0;
    for (size_t d = 0; d < idx.size() && k >= 0; ++d) {
      int64_t src = s.source(idx[d], d, x[d]);
      k = src < 0 ? -1 : k + src * st[d];
    }
    if (k >= 0)
      copy_elem(out, e, *in[0], k);
    else if (c.present(2))
      copy_elem(out, e, *in[2], 0);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < s.out[d]) break;
      idx[d] = 0;
    }
  }
  return {out};
}

// ---- ScatterND (opset 11+; reduction none, add or mul from opset 16, max or min from 18): a copy of data with
// the slices that indices [..., k] address replaced by (or combined with) updates. Reference
// only: compiled models get it folded when its inputs are constants (masks built by slice
// assignment, as Swin's), else compiling it is not implemented.
std::vector<TypeShape> scatter_nd_infer(const OpContext& c) {
  const Shape &x = c.in(0).shape, &idx = c.in(1).shape, &up = c.in(2).shape;
  if (c.in(1).dtype != DType::I64) throw UserError(str(c.node.where(), ": indices must be integers"));
  if (c.in(2).dtype != c.in(0).dtype)
    throw UserError(str(c.node.where(), ": updates are ", dtype_name(c.in(2).dtype), ", data ", dtype_name(c.in(0).dtype)));
  check_scatter_reduction(c);
  if (idx.empty() || idx.back() < 1 || idx.back() > static_cast<int64_t>(x.size()))
    throw UserError(str(c.node.where(), ": indices ", shape_str(idx), " must end in 1 to ", x.size(),
                        " (the rank of data ", shape_str(x), ")"));
  // updates: indices' shape but the last, then data's dims after the first k.
  Shape want(idx.begin(), idx.end() - 1);
  want.insert(want.end(), x.begin() + idx.back(), x.end());
  if (up != want)
    throw UserError(str(c.node.where(), ": updates ", shape_str(up), " must be ", shape_str(want)));
  return {{c.in(0).dtype, x}};
}

std::vector<HostTensor> scatter_nd_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const HostTensor &data = *in[0], &idx = *in[1], &up = *in[2];
  HostTensor out = data;
  auto k = static_cast<size_t>(idx.shape.back());
  int64_t slice = 1;
  for (size_t d = k; d < data.shape.size(); ++d) slice *= data.shape[d];
  std::string red = c.node.get_string("reduction", "none");
  std::vector<int64_t> targets = scatter_targets(c.node, data.shape, idx);
  for (size_t u = 0; u < targets.size(); ++u) {
    for (int64_t e = 0; e < slice; ++e)
      scatter_combine(out, targets[u] * slice + e, up, static_cast<int64_t>(u) * slice + e, red);
  }
  return {out};
}

// ---- Tile: repeats (a constant input) copies along each axis.
Shape tile_shape(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  std::vector<int64_t> r = ints_of(c.constant(1, "repeats"));
  if (r.size() != x.size())
    throw UserError(str(c.node.where(), ": repeats ", shape_str(r), " must have one value per axis of ",
                        shape_str(x)));
  Shape out = x;
  for (size_t d = 0; d < x.size(); ++d) {
    if (r[d] < 0 || r[d] > kMaxGraphTensorElements)
      throw UserError(str(c.node.where(), ": repeat ", r[d], " on axis ", d, " is out of range"));
    out[d] = x[d] * r[d];
    if (x[d] != 0 && out[d] / x[d] != r[d]) out[d] = kMaxGraphTensorElements + 1;  // refused below
  }
  check_tensor_size(c.node.where(), out);
  return out;
}

std::vector<HostTensor> tile_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  Shape out_shape = tile_shape(c);
  std::vector<int64_t> st = strides_of(x);
  HostTensor out = make_like(in[0]->dtype, out_shape);
  std::vector<int64_t> idx(x.size(), 0);
  for (int64_t e = 0; e < out.size(); ++e) {
    int64_t k = 0;
    for (size_t d = 0; d < x.size(); ++d) k += (idx[d] % x[d]) * st[d];
    copy_elem(out, e, *in[0], k);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < out_shape[d]) break;
      idx[d] = 0;
    }
  }
  return {out};
}

// ---- Gather along `axis` with int64 indices (negative ones count from the end).
std::vector<TypeShape> gather_infer(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  if (c.in(1).dtype != DType::I64)
    throw UserError(str(c.node.where(), ": indices must be integers"));
  int64_t axis = normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(x.size()));
  Shape out(x.begin(), x.begin() + axis);
  out.insert(out.end(), c.in(1).shape.begin(), c.in(1).shape.end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  return {{c.in(0).dtype, out}};
}

std::vector<HostTensor> gather_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  int64_t axis = normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(x.size()));
  int64_t outer = 1, inner = 1, n = x[axis];
  for (int64_t d = 0; d < axis; ++d) outer *= x[d];
  for (size_t d = axis + 1; d < x.size(); ++d) inner *= x[d];
  HostTensor out = make_like(in[0]->dtype, gather_infer(c)[0].shape);
  int64_t m = in[1]->size(), at = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < m; ++j) {
      int64_t i = in[1]->i[j];
      if (i < -n || i >= n)
        throw UserError(
            str(c.node.where(), ": index ", i, " is out of range for axis of size ", n));
      if (i < 0) i += n;
      for (int64_t e = 0; e < inner; ++e) copy_elem(out, at++, *in[0], (o * n + i) * inner + e);
    }
  return {out};
}

// ---- Squeeze / Unsqueeze: axes as attribute (before 13) or constant input.
std::vector<int64_t> axes_of(const OpContext& c) {
  if (c.opset >= 13) {
    if (c.present(1)) return ints_of(c.constant(1, "axes"));
    if (c.node.has("axes"))
      throw UserError(str(c.node.where(), ": from opset 13 axes is an input, not an attribute"));
    return {};
  }
  return c.node.get_ints("axes", {});
}

Shape squeeze_shape(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  std::vector<int64_t> axes = axes_of(c);
  std::vector<bool> drop(x.size(), false);
  if (axes.empty()) {
    for (size_t d = 0; d < x.size(); ++d) drop[d] = x[d] == 1;
  }
  for (int64_t a : axes) {
    int64_t d = normalize_axis(c.node, a, static_cast<int64_t>(x.size()));
    if (x[d] != 1)
      throw UserError(
          str(c.node.where(), ": cannot squeeze axis ", a, " of ", shape_str(x), " (not 1)"));
    drop[d] = true;
  }
  Shape out;
  for (size_t d = 0; d < x.size(); ++d)
    if (!drop[d]) out.push_back(x[d]);
  return out;
}

Shape unsqueeze_shape(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  std::vector<int64_t> axes = axes_of(c);
  auto rank = static_cast<int64_t>(x.size() + axes.size());
  std::vector<bool> added(rank, false);
  for (int64_t a : axes) {
    int64_t d = normalize_axis(c.node, a, rank);
    if (added[d]) throw UserError(str(c.node.where(), ": axis ", a, " is repeated"));
    added[d] = true;
  }
  Shape out;
  size_t k = 0;
  for (int64_t d = 0; d < rank; ++d) out.push_back(added[d] ? 1 : x[k++]);
  return out;
}

// ---- Expand: numpy broadcast of the input against a constant shape.
Shape expand_shape(const OpContext& c) {
  std::vector<int64_t> want = ints_of(c.constant(1, "shape"));
  return broadcast_shapes(c.node, c.in(0).shape, want);
}

std::vector<HostTensor> expand_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  Shape s = expand_shape(c);
  std::vector<int64_t> st = broadcast_strides(in[0]->shape, s);
  HostTensor out = make_like(in[0]->dtype, s);
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t e = 0; e < out.size(); ++e) {
    int64_t k = 0;
    for (size_t d = 0; d < s.size(); ++d) k += idx[d] * st[d];
    copy_elem(out, e, *in[0], k);
    for (size_t d = s.size(); d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  return {out};
}

// ---- Constant: value (a tensor), or value_float(s) / value_int(s).
HostTensor constant_value(const Node& n) {
  for (const auto& [name, a] : n.attrs) {
    if (name == "value") {
      if (const auto* t = std::get_if<HostTensor>(&a)) return *t;
    } else if (name == "value_float") {
      if (const auto* v = std::get_if<float>(&a)) return HostTensor::floats({}, {*v});
    } else if (name == "value_floats") {
      if (const auto* v = std::get_if<std::vector<float>>(&a))
        return HostTensor::floats({static_cast<int64_t>(v->size())}, *v);
    } else if (name == "value_int") {
      if (const auto* v = std::get_if<int64_t>(&a)) return HostTensor::ints({}, {*v});
    } else if (name == "value_ints") {
      if (const auto* v = std::get_if<std::vector<int64_t>>(&a))
        return HostTensor::ints({static_cast<int64_t>(v->size())}, *v);
    }
    throw UserError(str(n.where(), ": attribute '", name,
                        "' is not supported (value, value_float(s), value_int(s) are)"));
  }
  throw UserError(str(n.where(), ": has no value"));
}

// ConstantOfShape's fill value (default float 0) and output type, checked without allocating.
HostTensor fill_value(const OpContext& c) {
  HostTensor fill = HostTensor::floats({1}, {0.0f});
  if (c.node.has("value")) {
    const auto* t = std::get_if<HostTensor>(&c.node.attrs.at("value"));
    if (!t) throw UserError(str(c.node.where(), ": attribute 'value' must be a tensor"));
    fill = *t;
  }
  if (fill.size() != 1) throw UserError(str(c.node.where(), ": value must hold one element"));
  return fill;
}

TypeShape constant_of_shape_type(const OpContext& c) {
  std::vector<int64_t> s = ints_of(c.constant(0, "shape"));
  check_tensor_size(c.node.where(), s);
  return {fill_value(c).dtype, s};
}

HostTensor constant_of_shape(const OpContext& c) {
  TypeShape t = constant_of_shape_type(c);
  HostTensor fill = fill_value(c);
  HostTensor out = make_like(t.dtype, t.shape);
  for (int64_t e = 0; e < out.size(); ++e) copy_elem(out, e, fill, 0);
  return out;
}

// EyeLike's result type: its dtype attribute (float32, float16 and bfloat16 held as float32;
// int32 and int64 as int64; bool), else its input's (16-bit floats as float32).
DType eye_like_type(const OpContext& c) {
  if (!c.node.has("dtype")) return holds_floats(c.in(0).dtype) ? DType::F32 : c.in(0).dtype;
  const int64_t t = c.node.get_int("dtype", 1);
  if (t == 1 || t == 10 || t == 16) return DType::F32;
  if (t == 6 || t == 7) return DType::I64;
  if (t == 9) return DType::Bool;
  throw UserError(str(c.node.where(), ": dtype ", t,
                      " is not supported (float32, float16 and bfloat16 as float32, int32 and int64 as int64, bool are)"));
}

// EyeLike: ones on the diagonal shifted by k (columns right for k > 0), zeros elsewhere, of
// its rank-2 input's shape. Its shape is static, so it folds at import.
TypeShape eye_like_shape(const OpContext& c) {
  if (c.in(0).shape.size() != 2)
    throw UserError(str(c.node.where(), ": input must be rank 2, not ", shape_str(c.in(0).shape)));
  return {eye_like_type(c), c.in(0).shape};
}

HostTensor eye_like(const OpContext& c) {
  TypeShape t = eye_like_shape(c);
  HostTensor out = make_like(t.dtype, t.shape);
  const int64_t rows = t.shape[0], cols = t.shape[1], k = c.node.get_int("k", 0);
  for (int64_t r = 0; r < rows; ++r) {
    // Compared in 128 bits: k may be any int64.
    const __int128 col = static_cast<__int128>(r) + k;
    if (col < 0 || col >= cols) continue;
    const int64_t at = r * cols + static_cast<int64_t>(col);
    if (holds_floats(out.dtype))
      out.f[static_cast<size_t>(at)] = 1.0f;
    else
      out.i[static_cast<size_t>(at)] = 1;
  }
  return out;
}

int64_t range_count(const OpContext& c) {
  double start = c.constant(0, "start").as_double(0), limit = c.constant(1, "limit").as_double(0);
  double delta = c.constant(2, "delta").as_double(0);
  if (delta == 0) throw UserError(str(c.node.where(), ": delta is 0"));
  double count = std::max(0.0, std::ceil((limit - start) / delta));
  if (c.in(0).dtype != DType::F32) {
    // Exactly, in 128 bits: doubles lose the low bits of large int64 bounds.
    __int128 s0 = c.constant(0, "start").as_int(0), l0 = c.constant(1, "limit").as_int(0);
    __int128 d0 = c.constant(2, "delta").as_int(0);
    __int128 span = d0 > 0 ? l0 - s0 : s0 - l0, step = d0 > 0 ? d0 : -d0;
    count = span <= 0 ? 0.0 : static_cast<double>((span + step - 1) / step);
  }
  if (!(count <= static_cast<double>(kMaxGraphTensorElements))) {
    throw UserError(str(c.node.where(), ": a range of ", count, " elements is too large"));
  }
  return static_cast<int64_t>(count);
}

HostTensor range_of(const OpContext& c) {
  double start = c.constant(0, "start").as_double(0), delta = c.constant(2, "delta").as_double(0);
  int64_t n = range_count(c);
  HostTensor out = make_like(c.in(0).dtype, Shape{n});
  int64_t istart = c.constant(0, "start").as_int(0), idelta = c.constant(2, "delta").as_int(0);
  for (int64_t k = 0; k < n; ++k) {
    if (out.dtype == DType::F32) {
      out.f[k] = static_cast<float>(start + static_cast<double>(k) * delta);
    } else if (int64_t step; __builtin_mul_overflow(k, idelta, &step) ||
                             __builtin_add_overflow(istart, step, &out.i[k])) {
      throw UserError(str(c.node.where(), ": the range overflows int64"));
    }
  }
  return out;
}

}  // namespace

// ---- Split along `axis`: sizes from the `split` input (opset 13+) or attribute, else equal
// parts (one per output; from opset 18 num_outputs parts of ceil(size / num_outputs), the last
// smaller).
std::vector<int64_t> split_sizes(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  int64_t axis = normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(x.size()));
  std::vector<int64_t> sizes;
  if (c.present(1))
    sizes = ints_of(c.constant(1, "split"));
  else
    sizes = c.node.get_ints("split", {});
  auto parts = static_cast<int64_t>(c.node.outputs.size());
  if (c.node.has("num_outputs")) {  // opset 18: parts of ceil(size / num_outputs), the last smaller
    const int64_t n = c.node.get_int("num_outputs", 0);
    if (c.opset < 18 || c.present(1) || c.node.has("split") || n != parts || n < 1) {
      throw UserError(str(c.node.where(), ": num_outputs ", n,
                          c.opset < 18 ? str(" is an attribute from opset 18 (the model's is ", c.opset, ")")
                          : n != parts || n < 1 ? str(" differs from the node's ", parts, " outputs")
                                                : std::string(" and split are given both")));
    }
    const int64_t chunk = (x[axis] + n - 1) / n, last = x[axis] - chunk * (n - 1);
    if (last < 0 || (last == 0 && x[axis] > 0)) {
      throw UserError(str(c.node.where(), ": axis of size ", x[axis], " does not split into ", n,
                          " parts of ", chunk, " (the last smaller but not empty)"));
    }
    sizes.assign(n - 1, chunk);
    sizes.push_back(last);
  }
  if (sizes.empty()) {
    if (parts == 0 || x[axis] % parts != 0) {
      throw UserError(str(c.node.where(), ": axis of size ", x[axis], " does not split into ",
                          parts, " equal parts"));
    }
    sizes.assign(parts, x[axis] / parts);
  }
  int64_t total = 0;
  for (int64_t v : sizes) {
    if (v < 0) throw UserError(str(c.node.where(), ": negative split size ", v));
    if (__builtin_add_overflow(total, v, &total)) total = -1;  // cannot cover the axis either
  }
  if (total != x[axis] || static_cast<int64_t>(sizes.size()) != parts) {
    throw UserError(str(c.node.where(), ": split ", shape_str(sizes),
                        " does not cover the axis of size ", x[axis], " in ", parts, " outputs"));
  }
  return sizes;
}

namespace {

std::vector<TypeShape> split_infer(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  int64_t axis = normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(x.size()));
  std::vector<TypeShape> out;
  for (int64_t v : split_sizes(c)) {
    Shape s = x;
    s[axis] = v;
    out.push_back({c.in(0).dtype, s});
  }
  return out;
}

std::vector<HostTensor> split_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  int64_t axis = normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(x.size()));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x[d];
  for (size_t d = axis + 1; d < x.size(); ++d) inner *= x[d];
  std::vector<HostTensor> outs;
  int64_t begin = 0;
  for (const TypeShape& t : split_infer(c)) {
    HostTensor out = make_like(t.dtype, t.shape);
    int64_t len = t.shape[axis], at = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t e = 0; e < len * inner; ++e)
        copy_elem(out, at++, *in[0], (o * x[axis] + begin) * inner + e);
    begin += len;
    outs.push_back(std::move(out));
  }
  return outs;
}

// Shape's output: the input's dimensions from `start` to `end` (opset 15), clamped.
std::vector<int64_t> shape_dims(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  auto rank = static_cast<int64_t>(x.size());
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  int64_t b = clamp(c.node.get_int("start", 0)), e = clamp(c.node.get_int("end", rank));
  return std::vector<int64_t>(x.begin() + b, x.begin() + std::max(b, e));
}

// An op whose output is its first input's data in another shape.
OpDef reshaping(const std::string& type, int min_in, int max_in,
                std::function<Shape(const OpContext&)> shape) {
  return {type, min_in, max_in,
          [shape](const OpContext& c) {
            return std::vector<TypeShape>{{c.in(0).dtype, shape(c)}};
          },
          [shape](const OpContext& c, const std::vector<const HostTensor*>& in) {
            return same_data(in, shape(c));
          }};
}

}  // namespace

void copy_elem(HostTensor& out, int64_t o, const HostTensor& in, int64_t k) {
  if (out.dtype == DType::F32 || is_storage16(out.dtype))
    out.f[o] = in.f[k];
  else
    out.i[o] = in.i[k];
}

// rows_apart, read through the decoders inference uses: a Slice that takes axis 0 from its
// start, in order; a Pad that adds or crops nothing before or after axis 0; a Gather along
// another axis, or from a constant table.
static bool slice_rows_apart(const Graph& g, const Node& n) {
  const SliceSpec s = slice_spec(context(n, g, g.opset));
  return !s.start.empty() && s.start[0] == 0 && s.step[0] == 1;
}
static bool pad_rows_apart(const Graph& g, const Node& n) {
  const PadSpec p = pad_spec(context(n, g, g.opset));
  return !p.begin.empty() && p.begin[0] == 0 && p.out[0] == g.value(n.inputs[0]).shape[0];
}
static bool gather_rows_apart(const Graph& g, const Node& n) {
  // Along axis 0 of a constant table (an embedding), the output's rows are the indices' rows.
  return axis_is_not_first(g, n, 0) ||
         (!g.value(n.inputs[0]).shape.empty() && g.is_constant(n.inputs[0]));
}

void register_shape_ops(std::vector<OpDef>& ops) {
  ops.push_back(
      {"Shape", 1, 1,
       [](const OpContext& c) {
         return std::vector<TypeShape>{{DType::I64, {static_cast<int64_t>(shape_dims(c).size())}}};
       },
       [](const OpContext& c, const std::vector<const HostTensor*>&) {
         std::vector<int64_t> dims = shape_dims(c);
         return std::vector<HostTensor>{
             HostTensor::ints({static_cast<int64_t>(dims.size())}, dims)};
       }});
  describe(ops.back(), OpKind::Opaque, {"end", "start"});
  // Size: the element count, an int64 scalar (static shapes: folded at import like Shape).
  ops.push_back({"Size", 1, 1,
                 [](const OpContext&) {
                   return std::vector<TypeShape>{{DType::I64, {}}};
                 },
                 [](const OpContext& c, const std::vector<const HostTensor*>&) {
                   return std::vector<HostTensor>{
                       HostTensor::ints({}, {num_elements(c.in(0).shape)})};
                 }});
  describe(ops.back(), OpKind::Opaque);
  ops.push_back(reshaping("Reshape", 2, 2, reshape_shape));
  describe(ops.back(), OpKind::Injective, {"allowzero"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.back().te = te::reshape_te;
  ops.push_back(reshaping("Flatten", 1, 1, flatten_shape));
  describe(ops.back(), OpKind::Injective, {"axis"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.back().te = te::reshape_te;
  ops.push_back(reshaping("Squeeze", 1, 2, squeeze_shape));
  describe(ops.back(), OpKind::Injective, {"axes"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.back().te = te::reshape_te;
  ops.push_back(reshaping("Unsqueeze", 1, 2, unsqueeze_shape));
  describe(ops.back(), OpKind::Injective, {"axes"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.back().te = te::reshape_te;
  ops.push_back(reshaping("Identity", 1, 1, [](const OpContext& c) { return c.in(0).shape; }));
  describe(ops.back(), OpKind::Injective, {}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.back().te = te::unary_te([](ir::Expr x, const Node&) { return x; });
  // Dropout in inference is the identity, and so in training with a ratio of 0 (what
  // torchvision's Swin exports); its mask output (optional) is then all true.
  ops.push_back(
      {"Dropout", 1, 3,
       [](const OpContext& c) {
         if (c.present(2) && c.in(2).constant && c.in(2).constant->as_int(0)) {
           bool zero_ratio = c.present(1) && c.in(1).constant && c.in(1).constant->size() == 1 &&
                             c.in(1).constant->as_double(0) == 0;
           if (!zero_ratio)
             throw UserError(str(c.node.where(), ": training_mode=true with a ratio other than a constant 0 is not supported"));
         }
         std::vector<TypeShape> out{{c.in(0).dtype, c.in(0).shape}};
         if (c.node.outputs.size() > 1 && !c.node.outputs[1].empty()) out.push_back({DType::Bool, c.in(0).shape});
         return out;
       },
       [](const OpContext& c, const std::vector<const HostTensor*>& in) {
         std::vector<HostTensor> out{*in[0]};
         if (c.node.outputs.size() > 1 && !c.node.outputs[1].empty()) {
           out.push_back(HostTensor::ints(in[0]->shape, std::vector<int64_t>(in[0]->size(), 1), DType::Bool));
         }
         return out;
       }, te::dropout_te()});
  describe(ops.back(), OpKind::Injective, {"seed", "ratio"});
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"Transpose", 1, 1,
                 [](const OpContext& c) {
                   Shape s;
                   for (int64_t p : perm_of(c)) s.push_back(c.in(0).shape[p]);
                   return std::vector<TypeShape>{{c.in(0).dtype, s}};
                 },
                 transpose_eval, te::transpose_te});
  describe(ops.back(), OpKind::Injective, {"perm"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"Concat", 1, 1 << 20, concat_infer, concat_eval, te::concat_te, nullptr, every_input_is_data});
  describe(ops.back(), OpKind::Injective, {"axis"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"Slice", 3, 5,
                 [](const OpContext& c) {
                   return std::vector<TypeShape>{{c.in(0).dtype, slice_spec(c).out}};
                 },
                 slice_eval, te::slice_te});
  describe(ops.back(), OpKind::Injective, {}, /*int64_exact=*/true);
  ops.back().rows_apart = slice_rows_apart;
  ops.push_back({"Pad", 2, 4,
                 [](const OpContext& c) {
                   return std::vector<TypeShape>{{c.in(0).dtype, pad_spec(c).out}};
                 },
                 pad_eval, te::pad_te, nullptr, first_and_third_are_data});
  describe(ops.back(), OpKind::Injective, {"mode"}, /*int64_exact=*/true);
  ops.back().rows_apart = pad_rows_apart;
  ops.push_back({"Gather", 2, 2, gather_infer, gather_eval, te::gather_te, nullptr, gather_data_input});
  describe(ops.back(), OpKind::Injective, {"axis"}, /*int64_exact=*/true);
  ops.back().rows_apart = gather_rows_apart;
  ops.push_back({"ScatterND", 3, 3, scatter_nd_infer, scatter_nd_eval});
  describe(ops.back(), OpKind::Opaque, {"reduction"});
  ops.push_back({"Tile", 2, 2,
                 [](const OpContext& c) {
                   return std::vector<TypeShape>{{c.in(0).dtype, tile_shape(c)}};
                 },
                 tile_eval, te::tile_te});
  describe(ops.back(), OpKind::Injective, {}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"Split", 1, 2, split_infer, split_eval, te::split_te});
  describe(ops.back(), OpKind::Injective, {"axis", "num_outputs", "split"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"Expand", 2, 2,
                 [](const OpContext& c) {
                   return std::vector<TypeShape>{{c.in(0).dtype, expand_shape(c)}};
                 },
                 expand_eval, te::expand_te});
  describe(ops.back(), OpKind::Injective, {}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"Constant", 0, 0,
                 [](const OpContext& c) {
                   HostTensor t = constant_value(c.node);
                   return std::vector<TypeShape>{{t.dtype, t.shape}};
                 },
                 [](const OpContext& c, const std::vector<const HostTensor*>&) {
                   return std::vector<HostTensor>{constant_value(c.node)};
                 }});
  describe(ops.back(), OpKind::Opaque, {"value", "value_float", "value_floats", "value_int", "value_ints"});
  ops.push_back(
      {"ConstantOfShape", 1, 1,
       [](const OpContext& c) { return std::vector<TypeShape>{constant_of_shape_type(c)}; },
       [](const OpContext& c, const std::vector<const HostTensor*>&) {
         return std::vector<HostTensor>{constant_of_shape(c)};
       }});
  describe(ops.back(), OpKind::Opaque, {"value"});
  ops.push_back({"EyeLike", 1, 1,
                 [](const OpContext& c) { return std::vector<TypeShape>{eye_like_shape(c)}; },
                 [](const OpContext& c, const std::vector<const HostTensor*>&) {
                   return std::vector<HostTensor>{eye_like(c)};
                 }});
  describe(ops.back(), OpKind::Opaque, {"dtype", "k"});
  ops.push_back({"Range", 3, 3,
                 [](const OpContext& c) {
                   return std::vector<TypeShape>{{c.in(0).dtype, {range_count(c)}}};
                 },
                 [](const OpContext& c, const std::vector<const HostTensor*>&) {
                   return std::vector<HostTensor>{range_of(c)};
                 }});
  describe(ops.back(), OpKind::Opaque);
}

}  // namespace tf::graph
