// Operators that read indices or positions: OneHot (opset 11), CumSum (opset 11, 14), Trilu
// (opset 14), GatherElements, DepthToSpace, SpaceToDepth, TopK, GatherND and ScatterElements (opset
// 11 to 16). Their spec helpers (in ops.h) are shared with the compiled kernels (graph/node_te.cc),
// so both read a node the same way.
#include <algorithm>
#include <array>
#include <cmath>

#include "base/error.h"
#include "graph/op_te.h"
#include "graph/ops.h"

namespace tf::graph {
namespace {

// Strides for walking `s` around dimension `axis`: the product of the dimensions before it,
// its extent, and the product of those after it.
struct AxisWalk {
  int64_t outer = 1, len = 1, inner = 1;
  AxisWalk(const Shape& s, int64_t axis) {
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
      if (d < axis) outer *= s[d];
      if (d == axis) len = s[d];
      if (d > axis) inner *= s[d];
    }
  }
};

std::vector<TypeShape> onehot_infer(const OpContext& c) {
  OneHotSpec s = onehot_spec(c);
  if (c.in(2).dtype == DType::Bool)
    throw UserError(str(c.node.where(), ": bool values are not supported (float32 or int64)"));
  return {{c.in(2).dtype, s.out}};
}

std::vector<HostTensor> onehot_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  OneHotSpec s = onehot_spec(c);
  const HostTensor &idx = *in[0], &values = *in[2];
  HostTensor out = make_like(values.dtype, s.out);
  AxisWalk w(s.out, s.axis);
  for (int64_t o = 0; o < w.outer; ++o)
    for (int64_t j = 0; j < w.len; ++j)
      for (int64_t i = 0; i < w.inner; ++i) {
        int64_t at = idx.as_int(o * w.inner + i);
        if (at < 0) at += s.depth;
        int64_t e = (o * w.len + j) * w.inner + i, v = at == j ? 1 : 0;
        copy_elem(out, e, values, v);
      }
  return {out};
}

std::vector<TypeShape> cumsum_infer(const OpContext& c) {
  cumsum_spec(c);
  DType t = c.in(0).dtype;
  if (t == DType::Bool) require_float(c, 0);
  return {{t, c.in(0).shape}};
}

std::vector<HostTensor> cumsum_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  CumSumSpec s = cumsum_spec(c);
  const HostTensor& x = *in[0];
  HostTensor out = make_like(x.dtype, x.shape);
  AxisWalk w(x.shape, s.axis);
  for (int64_t o = 0; o < w.outer; ++o)
    for (int64_t i = 0; i < w.inner; ++i) {
      double acc = 0;  // float32 sums accumulate in double, as the other reductions
      int64_t iacc = 0;
      for (int64_t step = 0; step < w.len; ++step) {
        int64_t j = s.reverse ? w.len - 1 - step : step;
        int64_t e = (o * w.len + j) * w.inner + i;
        if (x.dtype == DType::F32) {
          if (s.exclusive) out.f[e] = static_cast<float>(acc);
          acc += x.f[e];
          if (!s.exclusive) out.f[e] = static_cast<float>(acc);
        } else {
          if (s.exclusive) out.i[e] = iacc;
          if (__builtin_add_overflow(iacc, x.i[e], &iacc))
            throw UserError(str(c.node.where(), ": int64 overflow in the running sum"));
          if (!s.exclusive) out.i[e] = iacc;
        }
      }
    }
  return {out};
}

std::vector<TypeShape> trilu_infer(const OpContext& c) {
  trilu_spec(c);
  return {{c.in(0).dtype, c.in(0).shape}};
}

std::vector<HostTensor> trilu_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  TriluSpec s = trilu_spec(c);
  const HostTensor& x = *in[0];
  HostTensor out = x;
  const Shape& sh = x.shape;
  int64_t rows = sh[sh.size() - 2], cols = sh.back();
  for (int64_t e = 0; e < x.size(); ++e) {
    int64_t i = e / cols % rows, j = e % cols;
    if (s.keeps(i, j)) continue;
    if (out.dtype == DType::F32)
      out.f[e] = 0;
    else
      out.i[e] = 0;
  }
  return {out};
}

std::vector<TypeShape> gather_elements_infer(const OpContext& c) {
  const Shape &x = c.in(0).shape, &idx = c.in(1).shape;
  if (c.in(1).dtype != DType::I64)
    throw UserError(str(c.node.where(), ": indices must be integers"));
  if (x.empty())
    throw UserError(str(c.node.where(), ": input 0 is a scalar; GatherElements needs an axis"));
  int64_t axis = normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(x.size()));
  bool fits = idx.size() == x.size();
  for (size_t d = 0; fits && d < x.size(); ++d)
    fits = static_cast<int64_t>(d) == axis || idx[d] <= x[d];
  if (!fits) {
    throw UserError(str(c.node.where(), ": indices ", shape_str(idx),
                        " must have the rank of data ", shape_str(x),
                        " and no larger dimension but on the axis"));
  }
  return {{c.in(0).dtype, idx}};
}

std::vector<HostTensor> gather_elements_eval(const OpContext& c,
                                             const std::vector<const HostTensor*>& in) {
  const HostTensor &x = *in[0], &idx = *in[1];
  auto axis = static_cast<size_t>(
      normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(x.shape.size())));
  HostTensor out = make_like(x.dtype, idx.shape);
  std::vector<int64_t> at(idx.shape.size(), 0);
  for (int64_t e = 0; e < idx.size(); ++e) {
    int64_t src = 0;
    for (size_t d = 0; d < at.size(); ++d) {
      int64_t i = at[d];
      if (d == axis) {
        int64_t n = x.shape[d];
        i = idx.i[e];
        if (i < -n || i >= n)
          throw UserError(
              str(c.node.where(), ": index ", i, " is out of range for axis of size ", n));
        if (i < 0) i += n;
      }
      src = src * x.shape[d] + i;
    }
    copy_elem(out, e, x, src);
    for (size_t d = at.size(); d-- > 0;) {
      if (++at[d] < idx.shape[d]) break;
      at[d] = 0;
    }
  }
  return {out};
}

std::vector<TypeShape> depth_space_infer(const OpContext& c) {
  return {{c.in(0).dtype, depth_space_spec(c).out}};
}

std::vector<HostTensor> depth_space_eval(const OpContext& c,
                                         const std::vector<const HostTensor*>& in) {
  DepthSpaceSpec s = depth_space_spec(c);
  const HostTensor& x = *in[0];
  HostTensor out = make_like(x.dtype, s.out);
  const Shape& o = s.out;
  int64_t e = 0;
  for (int64_t n = 0; n < o[0]; ++n)
    for (int64_t ch = 0; ch < o[1]; ++ch)
      for (int64_t h = 0; h < o[2]; ++h)
        for (int64_t w = 0; w < o[3]; ++w, ++e) {
          std::array<int64_t, 4> src = s.source<int64_t>({n, ch, h, w});
          int64_t at = ((src[0] * x.shape[1] + src[1]) * x.shape[2] + src[2]) * x.shape[3] + src[3];
          copy_elem(out, e, x, at);
        }
  return {out};
}

std::vector<TypeShape> topk_infer(const OpContext& c) {
  TopKSpec s = topk_spec(c);
  if (c.in(0).dtype == DType::Bool) require_float(c, 0);
  Shape out = c.in(0).shape;
  out[static_cast<size_t>(s.axis)] = s.k;
  return {{c.in(0).dtype, out}, {DType::I64, out}};
}

// The k largest (smallest) along the axis, in order; equal values by their index, lower first;
// NaN above everything when largest, below when not (std::sort's order needs a strict one).
std::vector<HostTensor> topk_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  TopKSpec s = topk_spec(c);
  const HostTensor& x = *in[0];
  Shape out_shape = x.shape;
  out_shape[static_cast<size_t>(s.axis)] = s.k;
  HostTensor values = make_like(x.dtype, out_shape), indices = make_like(DType::I64, out_shape);
  AxisWalk w(x.shape, s.axis);
  std::vector<int64_t> order(static_cast<size_t>(w.len));
  for (int64_t o = 0; o < w.outer; ++o)
    for (int64_t i = 0; i < w.inner; ++i) {
      auto at = [&](int64_t j) { return x.as_double((o * w.len + j) * w.inner + i); };
      for (int64_t j = 0; j < w.len; ++j) order[static_cast<size_t>(j)] = j;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        double va = at(a), vb = at(b);
        bool na = std::isnan(va), nb = std::isnan(vb);
        if (na != nb) return na == s.largest;  // NaN first when largest, last when not
        if (na) return false;
        return s.largest ? va > vb : va < vb;
      });
      for (int64_t r = 0; r < s.k; ++r) {
        int64_t src = (o * w.len + order[static_cast<size_t>(r)]) * w.inner + i;
        int64_t dst = (o * s.k + r) * w.inner + i;
        copy_elem(values, dst, x, src);
        indices.i[dst] = order[static_cast<size_t>(r)];
      }
    }
  return {values, indices};
}

std::vector<TypeShape> gather_nd_infer(const OpContext& c) {
  if (c.in(1).dtype != DType::I64)
    throw UserError(str(c.node.where(), ": indices must be integers"));
  return {{c.in(0).dtype, gather_nd_spec(c).out}};
}

std::vector<HostTensor> gather_nd_eval(const OpContext& c,
                                       const std::vector<const HostTensor*>& in) {
  GatherNDSpec s = gather_nd_spec(c);
  const HostTensor &x = *in[0], &idx = *in[1];
  HostTensor out = make_like(x.dtype, s.out);
  const Shape& xs = x.shape;
  int64_t slice = 1;  // elements copied per index tuple
  for (size_t d = static_cast<size_t>(s.batch + s.k); d < xs.size(); ++d) slice *= xs[d];
  int64_t batch_size = 1;
  for (int64_t d = 0; d < s.batch; ++d) batch_size *= xs[static_cast<size_t>(d)];
  int64_t tuples = idx.size() / s.k, per_batch = tuples / batch_size, at = 0;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t src = t / per_batch;  // the batch's position, then each index
    for (int64_t d = 0; d < s.k; ++d) {
      int64_t n = xs[static_cast<size_t>(s.batch + d)], i = idx.i[static_cast<size_t>(t * s.k + d)];
      if (i < -n || i >= n)
        throw UserError(
            str(c.node.where(), ": index ", i, " is out of range for axis of size ", n));
      src = src * n + (i < 0 ? i + n : i);
    }
    for (int64_t e = 0; e < slice; ++e, ++at) {
      copy_elem(out, at, x, src * slice + e);
    }
  }
  return {out};
}

std::vector<TypeShape> scatter_elements_infer(const OpContext& c) {
  const Shape &x = c.in(0).shape, &idx = c.in(1).shape;
  if (c.in(1).dtype != DType::I64)
    throw UserError(str(c.node.where(), ": indices must be integers"));
  if (c.in(2).dtype != c.in(0).dtype)
    throw UserError(str(c.node.where(), ": updates are ", dtype_name(c.in(2).dtype), ", data ",
                        dtype_name(c.in(0).dtype)));
  if (x.empty())
    throw UserError(str(c.node.where(), ": input 0 is a scalar; ScatterElements needs an axis"));
  normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(x.size()));
  if (idx.size() != x.size() || c.in(2).shape != idx) {
    throw UserError(str(c.node.where(), ": indices ", shape_str(idx), " and updates ",
                        shape_str(c.in(2).shape), " must have one shape, of data's rank ",
                        shape_str(x)));
  }
  for (size_t d = 0; d < x.size(); ++d) {
    if (idx[d] > x[d])
      throw UserError(str(c.node.where(), ": indices ", shape_str(idx), " are larger than data ",
                          shape_str(x)));
  }
  check_scatter_reduction(c);
  return {{c.in(0).dtype, x}};
}

std::vector<HostTensor> scatter_elements_eval(const OpContext& c,
                                              const std::vector<const HostTensor*>& in) {
  const HostTensor &data = *in[0], &idx = *in[1], &up = *in[2];
  std::string red = c.node.get_string("reduction", "none");
  HostTensor out = data;
  std::vector<int64_t> targets = scatter_targets(c.node, data.shape, idx);
  for (size_t u = 0; u < targets.size(); ++u)
    scatter_combine(out, targets[u], up, static_cast<int64_t>(u), red);
  return {out};
}

}  // namespace

std::vector<int64_t> scatter_targets(const Node& n, const Shape& x, const HostTensor& idx) {
  auto checked = [&](int64_t i, size_t axis) {
    int64_t len = x[axis];
    if (i < -len || i >= len) {
      throw UserError(
          str(n.where(), ": index ", i, " is out of range for axis ", axis, " of size ", len));
    }
    return i < 0 ? i + len : i;
  };
  std::vector<int64_t> targets;
  if (n.op == "ScatterND") {
    const auto k = static_cast<size_t>(idx.shape.back());
    for (size_t u = 0; u < idx.i.size() / k; ++u) {
      int64_t at = 0;
      for (size_t d = 0; d < k; ++d) at = at * x[d] + checked(idx.i[u * k + d], d);
      targets.push_back(at);
    }
    return targets;
  }
  auto axis =
      static_cast<size_t>(normalize_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.size())));
  std::vector<int64_t> at(idx.shape.size(), 0);  // the row's own position in the indices
  for (size_t u = 0; u < idx.i.size(); ++u) {
    int64_t p = 0;
    for (size_t d = 0; d < x.size(); ++d) p = p * x[d] + (d == axis ? checked(idx.i[u], d) : at[d]);
    targets.push_back(p);
    for (size_t d = at.size(); d-- > 0;) {
      if (++at[d] < idx.shape[d]) break;
      at[d] = 0;
    }
  }
  return targets;
}

void check_scatter_reduction(const OpContext& c) {
  std::string red = c.node.get_string("reduction", "none");
  const bool from18 = red == "max" || red == "min";
  if ((red != "none" && red != "add" && red != "mul" && !from18) || (from18 && c.opset < 18)) {
    throw UserError(str(c.node.where(), ": reduction '", red, "' is not supported (none, add and mul are",
                        c.opset >= 18 ? ", and max and min" : "; max and min from opset 18", ")"));
  }
}

void scatter_combine(HostTensor& out, int64_t o, const HostTensor& update, int64_t k,
                     const std::string& red) {
  if (out.dtype == DType::F32) {
    float a = out.f[o], v = update.f[k];
    out.f[o] = red == "add" ? a + v : red == "mul" ? a * v : red == "max" ? std::max(a, v) : red == "min" ? std::min(a, v) : v;
  } else {
    auto a = static_cast<uint64_t>(out.i[o]), b = static_cast<uint64_t>(update.i[k]);  // wrapping
    int64_t sa = out.i[o], sb = update.i[k];
    out.i[o] = red == "max" ? std::max(sa, sb) : red == "min" ? std::min(sa, sb)
                            : static_cast<int64_t>(red == "add" ? a + b : red == "mul" ? a * b : b);
  }
}

GatherNDSpec gather_nd_spec(const OpContext& c) {
  const Shape &x = c.in(0).shape, &idx = c.in(1).shape;
  GatherNDSpec s;
  s.batch = c.node.get_int("batch_dims", 0);
  auto xr = static_cast<int64_t>(x.size()), ir = static_cast<int64_t>(idx.size());
  if (ir < 1 || s.batch < 0 || s.batch >= std::min(xr, ir)) {
    throw UserError(str(c.node.where(), ": batch_dims ", s.batch,
                        " must be below the ranks of data ", shape_str(x), " and indices ",
                        shape_str(idx)));
  }
  s.k = idx.back();
  if (s.k < 1 || s.batch + s.k > xr) {
    throw UserError(str(c.node.where(), ": indices end in ", s.k, "; with batch_dims ", s.batch,
                        " that must be 1 to ", xr - s.batch, " (data ", shape_str(x), ")"));
  }
  for (int64_t d = 0; d < s.batch; ++d) {
    if (x[static_cast<size_t>(d)] != idx[static_cast<size_t>(d)]) {
      throw UserError(str(c.node.where(), ": batch dimension ", d, " of indices ", shape_str(idx),
                          " differs from data's ", shape_str(x)));
    }
  }
  s.out.assign(idx.begin(), idx.end() - 1);
  s.out.insert(s.out.end(), x.begin() + s.batch + s.k, x.end());
  return s;
}

TopKSpec topk_spec(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  if (x.empty()) throw UserError(str(c.node.where(), ": input 0 is a scalar; TopK needs an axis"));
  TopKSpec s;
  s.axis = normalize_axis(c.node, c.node.get_int("axis", -1), static_cast<int64_t>(x.size()));
  const HostTensor& k = c.constant(1, "K");
  if (k.size() != 1 || k.dtype != DType::I64)
    throw UserError(str(c.node.where(), ": K must be one integer, not ", k.size(), " ",
                        dtype_name(k.dtype), " values"));
  s.k = k.i[0];
  int64_t len = x[static_cast<size_t>(s.axis)];
  if (s.k < 0 || s.k > len)
    throw UserError(
        str(c.node.where(), ": K = ", s.k, " is not within 0 to the axis's ", len, " elements"));
  s.largest = c.node.get_int("largest", 1) != 0;
  return s;
}

DepthSpaceSpec depth_space_spec(const OpContext& c) {
  const Shape& x = c.in(0).shape;
  if (x.size() != 4)
    throw UserError(str(c.node.where(), ": input 0 ", shape_str(x), " must have rank 4 (NCHW)"));
  DepthSpaceSpec s;
  s.to_space = c.node.op == "DepthToSpace";
  s.block = c.node.get_int("blocksize", 0);
  if (s.block < 1 || s.block > 4096)
    throw UserError(str(c.node.where(), ": blocksize ", s.block, " is not a positive size"));
  std::string mode = c.node.get_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD")
    throw UserError(str(c.node.where(), ": mode '", mode, "' is not DCR or CRD"));
  s.crd = mode == "CRD";
  const int64_t b = s.block, bb = b * b;
  if (s.to_space) {
    if (x[1] % bb != 0)
      throw UserError(
          str(c.node.where(), ": ", x[1], " channels are not a multiple of blocksize^2 = ", bb));
    s.out = {x[0], x[1] / bb, x[2] * b, x[3] * b};
  } else {
    if (x[2] % b != 0 || x[3] % b != 0) {
      throw UserError(str(c.node.where(), ": height ", x[2], " and width ", x[3],
                          " must be multiples of blocksize ", b));
    }
    s.out = {x[0], x[1] * bb, x[2] / b, x[3] / b};
  }
  check_tensor_size(c.node.where(), s.out);
  s.channels = s.to_space ? s.out[1] : x[1];
  return s;
}

TriluSpec trilu_spec(const OpContext& c) {
  if (c.in(0).shape.size() < 2) {
    throw UserError(str(c.node.where(), ": input 0 ", shape_str(c.in(0).shape),
                        " has rank below 2; Trilu needs a matrix"));
  }
  TriluSpec s;
  s.upper = c.node.get_int("upper", 1) != 0;
  if (c.present(1)) {
    const HostTensor& k = c.constant(1, "k");
    if (k.size() != 1 || k.dtype != DType::I64)
      throw UserError(str(c.node.where(), ": k must be one integer, not ", k.size(), " ",
                          dtype_name(k.dtype), " values"));
    s.k = k.i[0];
  }
  return s;
}

OneHotSpec onehot_spec(const OpContext& c) {
  const HostTensor& depth = c.constant(1, "depth");
  if (depth.size() != 1)
    throw UserError(str(c.node.where(), ": depth must hold one value, not ", depth.size()));
  OneHotSpec s;
  s.depth = depth.as_int(0);
  if (s.depth < 1 || s.depth > kMaxGraphTensorElements)
    throw UserError(str(c.node.where(), ": depth ", s.depth, " is not a positive size"));
  if (num_elements(c.in(2).shape) != 2) {
    throw UserError(str(c.node.where(), ": values must hold two elements (off, on), not shape ",
                        shape_str(c.in(2).shape)));
  }
  auto rank = static_cast<int64_t>(c.in(0).shape.size()) + 1;
  s.axis = normalize_axis(c.node, c.node.get_int("axis", -1), rank);
  s.out = c.in(0).shape;
  s.out.insert(s.out.begin() + s.axis, s.depth);
  check_tensor_size(c.node.where(), s.out);
  return s;
}

CumSumSpec cumsum_spec(const OpContext& c) {
  const HostTensor& axis = c.constant(1, "axis");
  if (axis.size() != 1 || axis.dtype != DType::I64)
    throw UserError(str(c.node.where(), ": axis must be one integer, not ", axis.size(), " ",
                        dtype_name(axis.dtype), " values"));
  CumSumSpec s;
  auto rank = static_cast<int64_t>(c.in(0).shape.size());
  if (rank == 0)
    throw UserError(str(c.node.where(), ": input 0 is a scalar; CumSum needs an axis"));
  s.axis = normalize_axis(c.node, axis.i[0], rank);
  s.exclusive = c.node.get_int("exclusive", 0) != 0;
  s.reverse = c.node.get_int("reverse", 0) != 0;
  return s;
}

// rows_apart (graph/image_loop.h): along an axis other than 0 (a CumSum's, a TopK's, a
// GatherElements' axis; Trilu's last two of at least three).
static bool cumsum_rows_apart(const Graph& g, const Node& n) {
  return cumsum_spec(context(n, g, g.opset)).axis != 0;
}
static bool topk_rows_apart(const Graph& g, const Node& n) { return axis_is_not_first(g, n, -1); }
static bool gather_elements_rows_apart(const Graph& g, const Node& n) {
  return axis_is_not_first(g, n, 0);
}
static bool trilu_rows_apart(const Graph& g, const Node& n) {
  return g.value(n.inputs[0]).shape.size() >= 3;
}

void register_scan_ops(std::vector<OpDef>& ops) {
  ops.push_back({"OneHot", 3, 3, onehot_infer, onehot_eval, te::onehot_te, nullptr, first_and_third_are_data});
  describe(ops.back(), OpKind::Injective, {"axis"}, /*int64_exact=*/true);
  ops.push_back({"CumSum", 2, 2, cumsum_infer, cumsum_eval, te::cumsum_te});
  describe(ops.back(), OpKind::Opaque, {"exclusive", "reverse"}, /*int64_exact=*/true);
  ops.back().rows_apart = cumsum_rows_apart;
  ops.push_back({"Trilu", 1, 2, trilu_infer, trilu_eval, te::trilu_te});
  describe(ops.back(), OpKind::Injective, {"upper"}, /*int64_exact=*/true);
  ops.back().rows_apart = trilu_rows_apart;
  ops.push_back({"GatherElements", 2, 2, gather_elements_infer, gather_elements_eval, te::gather_elements_te, nullptr, every_input_is_data});
  describe(ops.back(), OpKind::Injective, {"axis"}, /*int64_exact=*/true);
  ops.back().rows_apart = gather_elements_rows_apart;
  ops.push_back({"TopK", 2, 2, topk_infer, topk_eval, te::topk_te});
  describe(ops.back(), OpKind::Opaque, {"axis", "largest", "sorted"}, /*int64_exact=*/true);
  ops.back().rows_apart = topk_rows_apart;
  ops.push_back({"GatherND", 2, 2, gather_nd_infer, gather_nd_eval, te::gather_nd_te, nullptr, every_input_is_data});
  describe(ops.back(), OpKind::Injective, {"batch_dims"}, /*int64_exact=*/true);
  ops.push_back({"ScatterElements", 3, 3, scatter_elements_infer, scatter_elements_eval});
  describe(ops.back(), OpKind::Opaque, {"axis", "reduction"});
  ops.push_back({"DepthToSpace", 1, 1, depth_space_infer, depth_space_eval, te::depth_space_te});
  describe(ops.back(), OpKind::Injective, {"blocksize", "mode"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"SpaceToDepth", 1, 1, depth_space_infer, depth_space_eval, te::depth_space_te});
  describe(ops.back(), OpKind::Injective, {"blocksize"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
}

}  // namespace tf::graph
