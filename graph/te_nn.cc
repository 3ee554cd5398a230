// The tensor expressions of the neural-network operators (graph/op_te.h): reductions,
// softmax, normalization, pooling, convolutions, matrix products, Einsum.
#include <cmath>
#include <map>

#include "base/error.h"
#include "graph/layout.h"
#include "graph/op_te.h"
#include "graph/te_kit.h"

namespace tf::graph::te {
namespace {

std::vector<Tensor> reduce_expr(const Node& n, const OpContext& c, const TeOperand& x,
                                const Shape& out_shape, const std::string& name, ReduceOp op) {
  std::vector<int64_t> axes = reduce_axes(c, static_cast<int64_t>(x.shape.size()));
  bool keep = n.get_int("keepdims", 1);
  if (axes.empty()) {
    return {elementwise(name, out_shape, [&](const Index& i) { return operand(x, i); })};
  }
  std::vector<int64_t> extents;
  int64_t count = 1;
  for (int64_t a : axes) {
    extents.push_back(x.shape[a]);
    count *= x.shape[a];
  }
  std::vector<IterVar> rv = reduce_vars(extents, "r");
  auto src = [&](const Index& i) {
    return operand(x, reduce_input_index(i, x.shape, axes, rv, keep));
  };
  // `by` is ir::sum, ir::max_reduce or ir::prod_reduce, of f(element).
  using Reducer = Expr (*)(Expr, const std::vector<IterVar>&);
  auto reduce = [&](const std::string& suffix, Reducer by, const std::function<Expr(Expr)>& f) {
    return ir::compute(
        name + suffix, out_shape, axis_names(out_shape.size()),
        [&](const Index& i) { return by(f(src(i)), rv); }, rv);
  };
  auto then = [&](const Tensor& t, const std::function<Expr(Expr, const Index&)>& f) {
    return elementwise(name, out_shape, [&](const Index& i) { return f(ir::read(t, i), i); });
  };
  auto id = [](Expr e) { return e; };
  switch (op) {
    case ReduceOp::Sum: return {reduce("", ir::sum, id)};
    case ReduceOp::Max: return {reduce("", ir::max_reduce, id)};
    case ReduceOp::Prod: return {reduce("", ir::prod_reduce, id)};
    case ReduceOp::Mean: {
      Tensor s = reduce("_sum", ir::sum, id);
      return {then(
          s, [&](Expr v, const Index&) { return v * ir::f32(1.0 / static_cast<double>(count)); })};
    }
    case ReduceOp::Min: {
      Tensor m = reduce("_negmax", ir::max_reduce, neg);
      return {then(m, [](Expr v, const Index&) { return neg(v); })};
    }
    case ReduceOp::SumSquare: return {reduce("", ir::sum, [](Expr e) { return e * e; })};
    case ReduceOp::L1: return {reduce("", ir::sum, [](Expr e) { return ir::fabs(e); })};
    case ReduceOp::L2: {
      Tensor s = reduce("_sumsq", ir::sum, [](Expr e) { return e * e; });
      return {then(s, [](Expr v, const Index&) { return ir::sqrt(v); })};
    }
    case ReduceOp::LogSum: {
      Tensor s = reduce("_sum", ir::sum, id);
      return {then(s, [](Expr v, const Index&) { return ir::log(v); })};
    }
    case ReduceOp::LogSumExp: {
      Tensor m = reduce("_max", ir::max_reduce, id);
      Tensor s = ir::compute(
          name + "_sum", out_shape, axis_names(out_shape.size()),
          [&](const Index& i) { return ir::sum(ir::exp(src(i) - ir::read(m, i)), rv); }, rv);
      return {then(s, [&](Expr v, const Index& i) { return ir::log(v) + ir::read(m, i); })};
    }
  }
  not_implemented(n, n.op);
}


// Softmax and LogSoftmax over `dims` (one axis from opset 13, all from the axis before).
Tensor softmax_expr(const Node& n, const OpContext& c, const TeOperand& x, const std::string& name, bool log) {
  const std::vector<int64_t> axes = softmax_axes(c, static_cast<int64_t>(x.shape.size()));
  KeptReduction red(x, axes, !c.gpu);
  auto stat_of = [&](const Index& i) { return red.stat_of(i); };
  Tensor m = red.reduce(name + "_max", ir::max_reduce, [](Expr v, const Index&) { return v; });
  Tensor s = red.reduce(name + "_sum", ir::sum,
                        [&](Expr v, const Index& i) { return ir::exp(v - ir::read(m, i)); });
  return elementwise(name, x.shape, [&](const Index& i) {
    Expr v = operand(x, i) - ir::read(m, stat_of(i));
    return log ? v - ir::log(ir::read(s, stat_of(i))) : ir::exp(v) / ir::read(s, stat_of(i));
  });
}

// Hardmax: 1 at the first largest element of each row (rows as softmax_te's), 0 elsewhere:
// the row's largest value, then the largest key (count - 1 - flat position in the row) of the
// positions holding it, then each element compared with that key. A NaN is never picked.
Tensor hardmax_expr(const Node& n, const OpContext& c, const TeOperand& x, const std::string& name) {
  if (!x.tensor) not_implemented(n, "Hardmax of a one-element constant");
  const std::vector<int64_t> axes = softmax_axes(c, static_cast<int64_t>(x.shape.size()));
  KeptReduction red(x, axes, !c.gpu);
  // The key of a position in the row, its reduction variables (or an output index) given.
  auto key = [&](const std::function<Expr(size_t)>& coord) {
    Expr p = int64_t{0};
    for (size_t k = 0; k < axes.size(); ++k) p = p * x.shape[axes[k]] + coord(k);
    return to_float(Expr(red.count - 1) - p);
  };
  // The row's largest with NaN as -inf (max propagates NaN); a NaN itself never equals it, so
  // it is never picked, and a row of NaN has no 1.
  auto clean = [](Expr v) { return ir::select(ir::eq(v, v), v, ir::f32(-INFINITY)); };
  Tensor m = red.reduce(name + "_max", ir::max_reduce, [&](Expr v, const Index&) { return clean(v); });
  Expr row_key = key([&](size_t k) { return red.rv[k].var; });
  Tensor first = ir::compute(
      name + "_first", red.stat, axis_names(red.stat.size()),
      [&](const Index& i) {
        return ir::max_reduce(
            ir::select(ir::eq(red.src(i), ir::read(m, i)), row_key, ir::f32(-1.0)), red.rv);
      },
      red.rv);
  return elementwise(name, x.shape, [&](const Index& i) {
    Expr at = key([&](size_t k) { return i[axes[k]]; });
    return ir::select(ir::eq(at, ir::read(first, red.stat_of(i))), ir::f32(1.0), ir::f32(0.0));
  });
}

// ArgMax / ArgMin along `axis`: the first (select_last_index: the last) index of the largest
// (smallest) element, as a float32 (int64 results are floats inside compiled kernels, exact
// below 2^24, converted to int64 at the model's output: compiler/model_entry.h). Three
// stages: the extreme value, the largest key of the positions holding it (the index, or its
// mirror K-1-index for the first), and the index. Unlike numpy, a NaN is not picked: it
// counts as -inf (max itself would propagate it); a row of NaN gives index 0, as numpy.
Tensor arg_expr(const Node& n, const TeOperand& x, const Shape& out, const std::string& name, bool max) {
  if (!x.tensor) not_implemented(n, str(n.op, " of a one-element constant"));
  auto rank = static_cast<int64_t>(x.shape.size());
  int64_t axis = normalize_axis(n, n.get_int("axis", 0), rank);
  bool keep = n.get_int("keepdims", 1) != 0, last = n.get_int("select_last_index", 0) != 0;
  const int64_t extent = x.shape[static_cast<size_t>(axis)];
  KeptReduction red(x, {axis});
  auto value = [&](const Index& i) {
    Expr v = max ? red.src(i) : ir::f32(-1.0) * red.src(i);
    return ir::select(ir::eq(v, v), v, ir::f32(-INFINITY));
  };
  Tensor m = ir::compute(
      name + "_extreme", red.stat, axis_names(red.stat.size()),
      [&](const Index& i) { return ir::max_reduce(value(i), red.rv); }, red.rv);
  Expr r = red.rv[0].var;
  Expr key = to_float(last ? r : Expr(extent - 1) - r);
  Tensor k = ir::compute(
      name + "_key", red.stat, axis_names(red.stat.size()),
      [&](const Index& i) {
        return ir::max_reduce(ir::select(ir::eq(value(i), ir::read(m, i)), key, ir::f32(-1.0)), red.rv);
      },
      red.rv);
  return elementwise(name, out, [&](const Index& o) {
    Index i = o;
    if (!keep) i.insert(i.begin() + axis, Expr(int64_t{0}));
    Expr v = ir::read(k, i);
    return last ? v : ir::f32(static_cast<double>(extent - 1)) - v;
  });
}

// Normalization over the dimensions from `axis` on (LayerNormalization; InstanceNormalization
// with axis 2): mean and inverse standard deviation per row, then `affine` of the normalized
// value. Returns the output, the mean and the inverse standard deviation.
std::vector<Tensor> normalize_expr(const OpContext& c, const TeOperand& x, int64_t axis, float eps,
                                 const std::function<Expr(Expr, const Index&)>& affine,
                                 const std::string& name) {
  auto rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d) axes.push_back(d);
  KeptReduction red(x, axes, !c.gpu);
  const Shape& stat = red.stat;
  int64_t len = red.count;
  auto stat_of = [&](const Index& i) { return red.stat_of(i); };
  Expr inv_len = ir::f32(1.0 / static_cast<double>(len));
  Tensor sum = red.reduce(name + "_sum", ir::sum, [](Expr v, const Index&) { return v; });
  Tensor mean =
      elementwise(name + "_mean", stat, [&](const Index& i) { return ir::read(sum, i) * inv_len; });
  Tensor sq = red.reduce(name + "_sqsum", ir::sum, [&](Expr v, const Index& i) {
    Expr d = v - ir::read(mean, i);
    return d * d;
  });
  Tensor inv = elementwise(name + "_invstd", stat, [&](const Index& i) {
    return ir::f32(1.0) / ir::sqrt(ir::read(sq, i) * inv_len + ir::f32(eps));
  });
  Tensor out = elementwise(name, x.shape, [&](const Index& i) {
    Index s = stat_of(i);
    return affine((operand(x, i) - ir::read(mean, s)) * ir::read(inv, s), i);
  });
  return {out, mean, inv};
}

std::vector<Tensor> layernorm_expr(const Node& n, const OpContext& c, const std::vector<TeOperand>& in,
                                   const std::string& name) {
  const TeOperand& x = in[0];
  int64_t axis = normalize_axis(n, n.get_int("axis", -1), static_cast<int64_t>(x.shape.size()));
  const TeOperand& scale = need(n, in, 1);
  std::vector<Tensor> outs = normalize_expr(
      c, x, axis, n.get_float("epsilon", 1e-5f),
      [&](Expr y, const Index& i) {
        y = y * read_broadcast(scale, i);
        return in.size() > 2 && in[2].present() ? y + read_broadcast(in[2], i) : y;
      },
      name);
  outs.resize(std::min<size_t>(n.outputs.size(), 3));
  return outs;
}

// MaxPool, AveragePool, and the windows of Conv: the input position a window element reads
// and whether it is inside the image. The position is not clamped: every read of it is under
// a select on `inside`, which reads only the lanes it picks (a masked load: codegen_llvm's
// select), so a window over consecutive columns stays one contiguous load. Clamped, the
// columns of a vector were a gather (an NCHW 3x3 max pool over 8x480x28x28: 9.2 -> 2.2 ms).
struct WindowRead {
  Expr inside;
  Expr iy, ix;
};
WindowRead window_read(const Window& w, const Expr& oy, const Expr& ox, const Expr& r,
                       const Expr& q, int64_t H, int64_t W) {
  Expr iy = oy * w.sh - w.pt + r * w.dh, ix = ox * w.sw - w.pl + q * w.dw;
  Expr inside = ir::logical_and(ir::logical_and(iy >= int64_t{0}, iy < Expr(H)),
                                ir::logical_and(ix >= int64_t{0}, ix < Expr(W)));
  return {inside, iy, ix};
}

Tensor pool_expr(const Node& n, const OpContext& c, const TeOperand& x, const std::string& name, bool is_max) {
  if (!x.tensor) not_implemented(n, "pooling of a constant");
  const PoolWindow pw = pool_window(c, x.shape);
  const Window& w = pw.win;
  const bool blocked = pw.out.size() == 5;
  int64_t H = x.shape[2], W = x.shape[3];
  std::vector<IterVar> rv = reduce_vars({w.kh, w.kw}, "r");
  Expr r = rv[0].var, q = rv[1].var;
  Tensor acc = ir::compute(
      name + (is_max ? "" : "_sum"), pw.out, axis_names(pw.out.size()),
      [&](const Index& i) {
        WindowRead wr = window_read(w, i[2], i[3], r, q, H, W);
        Index at{i[0], i[1], wr.iy, wr.ix};
        if (blocked) at.push_back(i[4]);
        Expr v = ir::read(x.tensor, at);
        return is_max ? ir::max_reduce(ir::select(wr.inside, v, ir::f32(-INFINITY)), rv)
                      : ir::sum(ir::select(wr.inside, v, ir::f32(0.0)), rv);
      },
      rv);
  if (is_max) return acc;
  // The divisor per output position: the window's positions inside the image, or with
  // count_include_pad those inside the explicit padding too.
  bool count_pad = n.get_int("count_include_pad", 0);
  Tensor count = ir::compute(
      name + "_count", {w.oh, w.ow}, axis_names(2),
      [&](const Index& i) {
        WindowRead wr = window_read(w, i[0], i[1], r, q, H, W);
        Expr iy = i[0] * w.sh - w.pt + r * w.dh, ix = i[1] * w.sw - w.pl + q * w.dw;
        Expr in = count_pad ? ir::logical_and(iy < Expr(H + w.pb), ix < Expr(W + w.pr)) : wr.inside;
        return ir::sum(ir::select(in, ir::f32(1.0), ir::f32(0.0)), rv);
      },
      rv);
  return elementwise(name, pw.out, [&](const Index& i) {
    return ir::read(acc, i) / ir::max(ir::read(count, {i[2], i[3]}), ir::f32(1.0));
  });
}

Tensor global_pool_expr(const Node& n, const TeOperand& x, const Shape& out,
                        const std::string& name, bool is_max) {
  std::vector<int64_t> extents(x.shape.begin() + 2, x.shape.end());
  int64_t area = num_elements(extents);
  std::vector<IterVar> rv = reduce_vars(extents, "r");
  Tensor acc = ir::compute(
      name + (is_max ? "" : "_sum"), out, axis_names(out.size()),
      [&](const Index& i) {
        Index in{i[0], i[1]};
        for (const IterVar& v : rv) in.push_back(v.var);
        Expr e = operand(x, in);
        return is_max ? ir::max_reduce(e, rv) : ir::sum(e, rv);
      },
      rv);
  if (is_max) return acc;
  return elementwise(name, out, [&](const Index& i) {
    return ir::read(acc, i) * ir::f32(1.0 / static_cast<double>(area));
  });
}

// Conv as one sum over (input channel of the group, r, s), any group, padding or stride.
Tensor conv_expr(const Node& n, const OpContext& c, const std::vector<TeOperand>& in,
               const std::string& name) {
  const TeOperand &x = need(n, in, 0), &wt = need(n, in, 1);
  if (!x.tensor || !wt.tensor) not_implemented(n, "a convolution of one-element tensors");
  int64_t K = wt.shape[0], CG = wt.shape[1], group = n.get_int("group", 1), KG = K / group;
  Window w = window_of(c, x.shape, wt.shape[2], wt.shape[3]);
  int64_t H = x.shape[2], W = x.shape[3];
  Shape out{x.shape[0], K, w.oh, w.ow};
  std::vector<IterVar> rv = reduce_vars({CG, w.kh, w.kw}, "r");
  Tensor acc = ir::compute(
      name + (in.size() > 2 && in[2].present() ? "_acc" : ""), out, axis_names(4),
      [&](const Index& i) {
        WindowRead wr = window_read(w, i[2], i[3], rv[1].var, rv[2].var, H, W);
        Expr ch = (i[1] / KG) * CG + rv[0].var;
        Expr v = ir::select(wr.inside, ir::read(x.tensor, {i[0], ch, wr.iy, wr.ix}), ir::f32(0.0));
        return ir::sum(v * ir::read(wt.tensor, {i[1], rv[0].var, rv[1].var, rv[2].var}), rv);
      },
      rv);
  if (in.size() < 3 || !in[2].present()) return acc;
  return elementwise(name, out,
                     [&](const Index& i) { return ir::read(acc, i) + operand(in[2], {i[1]}); });
}

// ConvTranspose: each output pixel gathers the input pixels whose scatter reaches it,
// y[n, m, oy, ox] = sum over (c, r, q) of x[n, c, iy, ix] * w[c, m % MG, r, q] where
// oy = iy * sh - pt + r * dh (and likewise ox), c in m's group.
Tensor conv_transpose_expr(const Node& n, const OpContext& c, const std::vector<TeOperand>& in,
                         const std::string& name) {
  const TeOperand &x = need(n, in, 0), &wt = need(n, in, 1);
  if (!x.tensor || !wt.tensor) not_implemented(n, "a transposed convolution of one-element tensors");
  ConvTransposeSpec s = conv_transpose_spec(c);
  int64_t H = x.shape[2], W = x.shape[3], CG = x.shape[1] / s.group, MG = s.out_channels / s.group;
  Shape out{x.shape[0], s.out_channels, s.oh, s.ow};
  std::vector<IterVar> rv = reduce_vars({CG, s.kh, s.kw}, "r");
  // The input position along one axis that reaches output position o through tap t, and
  // whether there is one (floor division: exact for negative numerators too).
  auto source = [](Expr o, Expr t, int64_t pad, int64_t dil, int64_t stride, int64_t extent) {
    Expr num = o + pad - t * dil;
    Expr at = num / stride;
    Expr ok = ir::logical_and(ir::eq(num % stride, Expr(int64_t{0})),
                              ir::logical_and(at >= int64_t{0}, at < Expr(extent)));
    return std::pair{ok, clamp(at, 0, extent - 1)};
  };
  Tensor acc = ir::compute(
      name + (in.size() > 2 && in[2].present() ? "_acc" : ""), out, axis_names(4),
      [&](const Index& i) {
        auto [ok_y, iy] = source(i[2], rv[1].var, s.pt, s.dh, s.sh, H);
        auto [ok_x, ix] = source(i[3], rv[2].var, s.pl, s.dw, s.sw, W);
        Expr ch = (i[1] / MG) * CG + rv[0].var;
        Expr v = ir::select(ir::logical_and(ok_y, ok_x), ir::read(x.tensor, {i[0], ch, iy, ix}), ir::f32(0.0));
        return ir::sum(v * ir::read(wt.tensor, {ch, i[1] % MG, rv[1].var, rv[2].var}), rv);
      },
      rv);
  if (in.size() < 3 || !in[2].present()) return acc;
  return elementwise(name, out,
                     [&](const Index& i) { return ir::read(acc, i) + operand(in[2], {i[1]}); });
}

// ConvNCHWc (graph/layout.h): the sum over (input channel, r, s) on blocked layouts.
Tensor conv_nchwc_expr(const Node& n, const OpContext& c, const std::vector<TeOperand>& in,
                     const Shape& out, const std::string& name) {
  const TeOperand &x = need(n, in, 0), &wt = need(n, in, 1);
  if (!x.tensor || !wt.tensor) not_implemented(n, "a convolution of one-element tensors");
  const ConvNchwcDims d = conv_nchwc_dims(n, x.shape, wt.shape);
  const int64_t ib = d.ib, C = d.C, ob = out[4];
  const bool depthwise = d.depthwise;
  const NchwcGroups gr = d.groups();
  Window w = window_of(c, {x.shape[0], C, x.shape[2], x.shape[3]}, d.R, d.S);
  int64_t H = x.shape[2], W = x.shape[3];
  // Depthwise of width g: the g channels of the output's group (the same block's lanes).
  const int64_t gw = d.width;
  std::vector<IterVar> rv = reduce_vars({depthwise ? gw : gr.span(), w.kh, w.kw}, "r");
  Tensor acc = ir::compute(
      name + (in.size() > 2 && in[2].present() ? "_acc" : ""), out, axis_names(5),
      [&](const Index& i) {
        WindowRead wr = window_read(w, i[2], i[3], rv[1].var, rv[2].var, H, W);
        Expr k = i[1] * ob + i[4];
        // The input channel: depthwise, the output's; else the span's from start(ko).
        Expr ch = depthwise      ? (gw == 1 ? k : k / gw * gw + rv[0].var)
                  : d.group == 1 ? Expr(rv[0].var)
                  : gr.exact()   ? i[1] * ob / gr.filters() * gr.channels() + rv[0].var
                                 : gr.start_block(i[1]) * ib + rv[0].var;
        Expr v = ir::select(wr.inside, ir::read(x.tensor, {i[0], ch / ib, wr.iy, wr.ix, ch % ib}),
                            ir::f32(0.0));
        Expr wv = depthwise ? (gw == 1 ? ir::read(wt.tensor, {i[1], rv[1].var, rv[2].var, i[4]})
                                       : ir::read(wt.tensor, {i[1], rv[0].var, rv[1].var, rv[2].var, i[4]}))
                            : ir::read(wt.tensor, {i[1], rv[0].var / ib, rv[1].var, rv[2].var,
                                                   rv[0].var % ib, i[4]});
        return ir::sum(v * wv, rv);
      },
      rv);
  if (in.size() < 3 || !in[2].present()) return acc;
  return elementwise(name, out, [&](const Index& i) {
    return ir::read(acc, i) + operand(in[2], {i[1] * ob + i[4]});
  });
}

// LayoutTransform (graph/layout.h): each element read from its place in the source layout.
Tensor layout_transform_expr(const Node& n, const TeOperand& x, const Shape& out,
                           const std::string& name) {
  if (!x.tensor) not_implemented(n, "a layout transform of a one-element tensor");
  int64_t src = parse_layout(n, "src_layout"), dst = parse_layout(n, "dst_layout");
  return elementwise(name, out, [&](const Index& i) {
    Expr ch = dst ? i[1] * dst + i[4] : i[1];
    if (src) return ir::read(x.tensor, {i[0], ch / src, i[2], i[3], ch % src});
    return ir::read(x.tensor, {i[0], ch, i[2], i[3]});
  });
}

// MatMul with numpy semantics: 1-D operands promoted, batch dimensions broadcast.
Tensor matmul_expr(const Node& n, const std::vector<TeOperand>& in, const Shape& out,
                 const std::string& name) {
  const TeOperand &a = need(n, in, 0), &b = need(n, in, 1);
  if (!a.tensor || !b.tensor) not_implemented(n, "a product with a one-element operand");
  bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
  int64_t K = a.shape.back();
  size_t batch = out.size() - (a1 ? 0 : 1) - (b1 ? 0 : 1);
  std::vector<IterVar> rv = reduce_vars({K}, "k");
  Expr k = rv[0].var;
  return ir::compute(
      name, out, axis_names(out.size()),
      [&](const Index& i) {
        Expr m = a1 ? Expr() : i[batch], col = b1 ? Expr() : i[out.size() - 1];
        auto batch_index = [&](const Shape& s, size_t own) {
          Index idx;
          for (size_t d = 0; d < own; ++d)
            idx.push_back(s[d] == 1 ? Expr(int64_t{0}) : i[batch - own + d]);
          return idx;
        };
        Index ai = a1 ? Index{} : batch_index(a.shape, a.shape.size() - 2),
              bi = b1 ? Index{} : batch_index(b.shape, b.shape.size() - 2);
        if (!a1) ai.push_back(m);
        ai.push_back(k);
        bi.push_back(k);
        if (!b1) bi.push_back(col);
        return ir::sum(ir::read(a.tensor, ai) * ir::read(b.tensor, bi), rv);
      },
      rv);
}

Tensor gemm_expr(const Node& n, const std::vector<TeOperand>& in, const Shape& out,
               const std::string& name) {
  const TeOperand &a = need(n, in, 0), &b = need(n, in, 1);
  if (!a.tensor || !b.tensor) not_implemented(n, "a product with a one-element operand");
  bool ta = n.get_int("transA", 0), tb = n.get_int("transB", 0);
  int64_t K = ta ? a.shape[0] : a.shape[1];
  float alpha = n.get_float("alpha", 1), beta = n.get_float("beta", 1);
  std::vector<IterVar> rv = reduce_vars({K}, "k");
  Expr k = rv[0].var;
  bool has_c = in.size() > 2 && in[2].present();
  Tensor acc = ir::compute(
      name + (has_c || alpha != 1 ? "_acc" : ""), out, axis_names(2),
      [&](const Index& i) {
        Expr av = ir::read(a.tensor, ta ? Index{k, i[0]} : Index{i[0], k});
        Expr bv = ir::read(b.tensor, tb ? Index{i[1], k} : Index{k, i[1]});
        return ir::sum(av * bv, rv);
      },
      rv);
  if (!has_c && alpha == 1) return acc;
  return elementwise(name, out, [&](const Index& i) {
    Expr y = ir::read(acc, i) * ir::f32(alpha);
    if (has_c) y = y + ir::f32(beta) * read_broadcast(in[2], i);
    return y;
  });
}

}  // namespace

TeFn reduce_te(ReduceOp op) {
  return [op](const Graph&, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
              const std::string& name) { return reduce_expr(n, c, need(n, in, 0), out, name, op); };
}

TeFn softmax_te(bool log) {
  return [log](const Graph&, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape&,
               const std::string& name) {
    return std::vector<Tensor>{softmax_expr(n, c, need(n, in, 0), name, log)};
  };
}

TeFn arg_te(bool max) {
  return [max](const Graph&, const Node& n, const OpContext&, const std::vector<TeOperand>& in, const Shape& out,
               const std::string& name) { return std::vector<Tensor>{arg_expr(n, need(n, in, 0), out, name, max)}; };
}

TeFn pool_te(bool max) {
  return [max](const Graph&, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape&,
               const std::string& name) { return std::vector<Tensor>{pool_expr(n, c, need(n, in, 0), name, max)}; };
}

TeFn global_pool_te(bool max) {
  return [max](const Graph&, const Node& n, const OpContext&, const std::vector<TeOperand>& in, const Shape& out,
               const std::string& name) {
    return std::vector<Tensor>{global_pool_expr(n, need(n, in, 0), out, name, max)};
  };
}

std::vector<Tensor> hardmax_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  return {hardmax_expr(n, c, need(n, in, 0), name)};
}

std::vector<Tensor> layernorm_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  need(n, in, 0);
  return layernorm_expr(n, c, in, name);
}

std::vector<Tensor> instancenorm_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand &x = need(n, in, 0), &scale = need(n, in, 1), &bias = need(n, in, 2);
  return {normalize_expr(
      c, x, 2, n.get_float("epsilon", 1e-5f),
      [&](Expr y, const Index& i) { return y * operand(scale, {i[1]}) + operand(bias, {i[1]}); },
      name)[0]};
}

std::vector<Tensor> batchnorm_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  for (size_t k = 0; k < 5; ++k) need(n, in, k);
  float eps = n.get_float("epsilon", 1e-5f);
  return {elementwise(name, out, [&](const Index& i) {
    Index ch{i[1]};
    Expr inv = ir::f32(1.0) / ir::sqrt(operand(in[4], ch) + ir::f32(eps));
    return (read_broadcast(in[0], i) - operand(in[3], ch)) * inv * operand(in[1], ch) +
           operand(in[2], ch);
  })};
}

std::vector<Tensor> conv_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  return {conv_expr(n, c, in, name)};
}

std::vector<Tensor> conv_transpose_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  return {conv_transpose_expr(n, c, in, name)};
}

std::vector<Tensor> conv_nchwc_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  return {conv_nchwc_expr(n, c, in, out, name)};
}

std::vector<Tensor> layout_transform_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  return {layout_transform_expr(n, need(n, in, 0), out, name)};
}

std::vector<Tensor> matmul_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  return {matmul_expr(n, in, out, name)};
}

std::vector<Tensor> gemm_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  return {gemm_expr(n, in, out, name)};
}

std::vector<Tensor> einsum_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  EinsumSpec s = einsum_spec(c);
  for (size_t k = 0; k < in.size(); ++k) need(n, in, k);
  std::vector<int64_t> sums;
  for (char l : s.summed) sums.push_back(s.extent.at(l));
  std::vector<IterVar> rv = reduce_vars(sums, "r");
  auto body = [&](const Index& i) {
    // Each label's variable: the output's axes, then the reduction's.
    std::map<char, Expr> var;
    for (size_t d = 0; d < s.output.size(); ++d) var[s.output[d]] = i[d];
    for (size_t d = 0; d < s.summed.size(); ++d) var[s.summed[d]] = rv[d].var;
    Expr prod;
    for (size_t k = 0; k < in.size(); ++k) {
      Index at;
      for (char l : s.inputs[k]) at.push_back(var.at(l));
      Expr v = operand(in[k], at);
      prod = prod ? prod * v : v;
    }
    return rv.empty() ? prod : ir::sum(prod, rv);
  };
  return {rv.empty() ? elementwise(name, out, body) : ir::compute(name, out, axis_names(out.size()), body, rv)};
}

}  // namespace tf::graph::te
