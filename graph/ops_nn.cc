// Neural-network operators: MatMul, Gemm, Conv, pooling, BatchNormalization, Softmax,
// LayerNormalization, reductions.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "graph/pass.h"
#include "graph/op_te.h"
#include "graph/tasks.h"
#include "graph/import_window3d.h"
#include "graph/ops.h"

namespace tf::graph {
namespace {

void require_rank(const OpContext& c, size_t k, size_t rank, const char* what) {
  if (c.in(k).shape.size() != rank) {
    throw UserError(str(c.node.where(), ": ", what, " '", c.in(k).name, "' must have rank ", rank,
                        ", not ", shape_str(c.in(k).shape)));
  }
}

// ---- MatMul: numpy semantics (1-D operands promoted, batch dimensions broadcast).
Shape matmul_shape(const OpContext& c, const Shape& a0, const Shape& b0) {
  if (a0.empty() || b0.empty()) throw UserError(str(c.node.where(), ": MatMul of a scalar"));
  Shape a = a0.size() == 1 ? Shape{1, a0[0]} : a0, b = b0.size() == 1 ? Shape{b0[0], 1} : b0;
  if (a.back() != b[b.size() - 2]) {
    throw UserError(
        str(c.node.where(), ": inner dimensions differ: ", shape_str(a0), " x ", shape_str(b0)));
  }
  Shape batch =
      broadcast_shapes(c.node, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  Shape out = batch;
  if (a0.size() > 1) out.push_back(a[a.size() - 2]);
  if (b0.size() > 1) out.push_back(b.back());
  return out;
}

// How a product's operands are rounded: as its tensor cores do when auto-mixed-precision marked
// it (kTensorCorePrecision), else not at all.
float (*operand_rounding(const Node& n))(float) { return precision_rounding(tensor_core_precision(n)); }

// MatMul's operands: float32, or (sixteen-bit-edges) values of the 16-bit type the product is
// marked with (kTensorCorePrecision fp16, bf16), the second one or both: its kernel takes
// float32 data times 16-bit weights, or both in 16 bits, not 16-bit data alone.
void check_matmul_operands(const OpContext& c) {
  const Precision p = tensor_core_precision(c.node);
  const DType half = p == Precision::Float16 ? DType::F16 : p == Precision::BFloat16 ? DType::BF16 : DType::F32;
  for (size_t k = 0; k < 2; ++k) {
    if (c.in(k).dtype != DType::F32 && c.in(k).dtype != half) require_float(c, k);
  }
  if (c.in(0).dtype != DType::F32 && c.in(1).dtype == DType::F32) {
    throw UserError(str(c.node.where(), ": input 0 ('", c.in(0).name, "') is ", dtype_name(c.in(0).dtype),
                        " and input 1 float32; a 16-bit first operand needs a 16-bit second one"));
  }
}

std::vector<HostTensor> matmul_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  float (*r)(float) = operand_rounding(c.node);
  const Shape& a0 = in[0]->shape;
  const Shape& b0 = in[1]->shape;
  Shape a = a0.size() == 1 ? Shape{1, a0[0]} : a0, b = b0.size() == 1 ? Shape{b0[0], 1} : b0;
  int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
  Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape batch = broadcast_shapes(c.node, ab, bb);
  HostTensor out = make_like(DType::F32, matmul_shape(c, a0, b0));
  std::vector<int64_t> sa = broadcast_strides(ab, batch), sb = broadcast_strides(bb, batch);
  int64_t nb = num_elements(batch);
  for (int64_t t = 0; t < nb; ++t) {
    int64_t oa = 0, ob = 0, rem = t;
    for (size_t d = batch.size(); d-- > 0;) {
      int64_t i = rem % batch[d];
      rem /= batch[d];
      oa += i * sa[d];
      ob += i * sb[d];
    }
    const float* A = in[0]->f.data() + oa * M * K;
    const float* B = in[1]->f.data() + ob * K * N;
    float* C = out.f.data() + t * M * N;
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(r(A[i * K + k])) * r(B[k * N + j]);
        C[i * N + j] = static_cast<float>(s);
      }
    }
  }
  return {out};
}

// ---- Gemm: alpha * op(A) op(B) + beta * C, C broadcast to [M, N].
std::vector<TypeShape> gemm_infer(const OpContext& c) {
  require_float(c, 0);
  require_float(c, 1);
  require_rank(c, 0, 2, "A");
  require_rank(c, 1, 2, "B");
  bool ta = c.node.get_int("transA", 0), tb = c.node.get_int("transB", 0);
  const Shape &a = c.in(0).shape, &b = c.in(1).shape;
  int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1], K2 = tb ? b[1] : b[0], N = tb ? b[0] : b[1];
  if (K != K2) throw UserError(str(c.node.where(), ": inner dimensions differ: ", K, " and ", K2));
  if (c.present(2) && broadcast_shapes(c.node, c.in(2).shape, {M, N}) != Shape{M, N}) {
    throw UserError(str(c.node.where(), ": C ", shape_str(c.in(2).shape), " does not broadcast to ",
                        shape_str({M, N})));
  }
  return {{DType::F32, {M, N}}};
}

std::vector<HostTensor> gemm_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  bool ta = c.node.get_int("transA", 0), tb = c.node.get_int("transB", 0);
  float alpha = c.node.get_float("alpha", 1), beta = c.node.get_float("beta", 1);
  float (*r)(float) = operand_rounding(c.node);
  const Shape &a = in[0]->shape, &b = in[1]->shape;
  int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1], N = tb ? b[0] : b[1];
  HostTensor out = make_like(DType::F32, {M, N});
  std::vector<int64_t> sc;
  if (in.size() > 2 && in[2]) sc = broadcast_strides(in[2]->shape, {M, N});
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += double(r(in[0]->f[ta ? k * M + i : i * K + k])) * r(in[1]->f[tb ? j * K + k : k * N + j]);
      }
      s *= alpha;
      if (!sc.empty()) s += double(beta) * in[2]->f[i * sc[0] + j * sc[1]];
      out.f[i * N + j] = static_cast<float>(s);
    }
  }
  return {out};
}

// ---- Windows (Conv, MaxPool, AveragePool) over 2-D NCHW images.
}  // namespace

Window window_of(const OpContext& c, const Shape& x, int64_t kh, int64_t kw) {
  const Node& n = c.node;
  std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  std::vector<int64_t> s = n.get_ints("strides", {1, 1}), d = n.get_ints("dilations", {1, 1});
  std::vector<int64_t> p = n.get_ints("pads", {0, 0, 0, 0});
  if (s.size() != 2 || d.size() != 2 || p.size() != 4) {
    throw UserError(
        str(n.where(), ": strides, dilations and pads must have 2, 2 and 4 values (2-D only)"));
  }
  // Bounded so the window arithmetic below cannot overflow (images have at most 2^32 pixels).
  constexpr int64_t kMax = int64_t{1} << 30;
  for (int64_t v : s)
    if (v < 1 || v > kMax) throw UserError(str(n.where(), ": stride ", v, " is not in [1, 2^30]"));
  for (int64_t v : d)
    if (v < 1 || v > kMax)
      throw UserError(str(n.where(), ": dilation ", v, " is not in [1, 2^30]"));
  for (int64_t v : p)
    if (v < 0 || v > kMax) throw UserError(str(n.where(), ": pad ", v, " is not in [0, 2^30]"));
  Window w{kh, kw, s[0], s[1], d[0], d[1], p[0], p[1], p[2], p[3], 0, 0};
  int64_t H = x[2], W = x[3];
  int64_t eh = (kh - 1) * w.dh + 1, ew = (kw - 1) * w.dw + 1;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    int64_t oh = (H + w.sh - 1) / w.sh, ow = (W + w.sw - 1) / w.sw;
    int64_t th = std::max<int64_t>(0, (oh - 1) * w.sh + eh - H),
            tw = std::max<int64_t>(0, (ow - 1) * w.sw + ew - W);
    bool upper = auto_pad == "SAME_UPPER";
    w.pt = upper ? th / 2 : th - th / 2;
    w.pb = th - w.pt;
    w.pl = upper ? tw / 2 : tw - tw / 2;
    w.pr = tw - w.pl;
  } else if (auto_pad == "VALID") {
    w.pt = w.pl = w.pb = w.pr = 0;
  } else if (auto_pad != "NOTSET") {
    throw UserError(str(n.where(), ": auto_pad '", auto_pad,
                        "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"));
  }
  bool ceil_mode = n.get_int("ceil_mode", 0);
  int64_t spanh = H + w.pt + w.pb - eh, spanw = W + w.pl + w.pr - ew;
  if (spanh < 0 || spanw < 0) {
    throw UserError(str(n.where(), ": the window ", eh, "x", ew,
                        " is larger than the padded input ", H + w.pt + w.pb, "x",
                        W + w.pl + w.pr));
  }
  w.oh = (ceil_mode ? (spanh + w.sh - 1) / w.sh : spanh / w.sh) + 1;
  w.ow = (ceil_mode ? (spanw + w.sw - 1) / w.sw : spanw / w.sw) + 1;
  // ceil_mode: the last window must start inside the input or its left padding.
  if (ceil_mode && (w.oh - 1) * w.sh >= H + w.pt) --w.oh;
  if (ceil_mode && (w.ow - 1) * w.sw >= W + w.pl) --w.ow;
  return w;
}

std::vector<int64_t> kernel_shape(const OpContext& c, const Shape& fallback) {
  std::vector<int64_t> k = c.node.get_ints("kernel_shape", fallback);
  if (k.size() != 2)
    throw UserError(str(c.node.where(), ": kernel_shape must have 2 values (2-D only)"));
  for (int64_t v : k) {
    if (v < 1 || v > (int64_t{1} << 30))
      throw UserError(str(c.node.where(), ": kernel size ", v, " is not in [1, 2^30]"));
  }
  return k;
}

std::vector<int64_t> softmax_axes(const OpContext& c, int64_t rank) {
  const bool legacy = c.opset < 13;
  const int64_t axis =
      normalize_axis(c.node, c.node.get_int("axis", legacy ? 1 : -1), std::max<int64_t>(rank, 1));
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < (legacy ? rank : axis + 1) && d < rank; ++d) axes.push_back(d);
  return axes;
}

PoolWindow pool_window(const OpContext& c, const Shape& x) {
  const Node& n = c.node;
  if (x.size() == 4) {
    std::vector<int64_t> k = kernel_shape(c, {});
    Window win = window_of(c, x, k[0], k[1]);
    return {win, 1, {x[0], x[1], win.oh, win.ow}};
  }
  if (x.size() != 5) {
    throw UserError(str(n.where(), ": input '", c.in(0).name, "' must have rank 4 (NCHW) or 5 (",
                        "channel-blocked), not ", shape_str(x)));
  }
  // The blocked form: the same node with the trivial last axis taken off its attributes.
  Node view = n;
  auto trim = [&](const char* a, size_t per_axis, int64_t trivial) {
    if (!n.has(a)) return;
    std::vector<int64_t> v = n.get_ints(a, {});
    bool ok = v.size() == 3 * per_axis;
    for (size_t k = 1; ok && k <= per_axis; ++k) ok = v[k * 3 - 1] == trivial;
    if (!ok) {
      throw UserError(str(n.where(), ": ", a, " ", shape_str(v), " of the rank-5 input ",
                          shape_str(x), " must have ", 3 * per_axis, " values with ", trivial,
                          " for the last axis (pooling of channel blocks)"));
    }
    std::vector<int64_t> two;
    for (size_t k = 0; k < v.size(); ++k)
      if ((k + 1) % 3 != 0) two.push_back(v[k]);
    view.attrs[a] = two;
  };
  if (!n.has("kernel_shape"))
    throw UserError(str(n.where(), ": attribute 'kernel_shape' is required"));
  trim("kernel_shape", 1, 1);
  trim("strides", 1, 1);
  trim("dilations", 1, 1);
  trim("pads", 2, 0);
  OpContext c2{view, c.opset, c.inputs};
  std::vector<int64_t> k = kernel_shape(c2, {});
  Window win = window_of(c2, x, k[0], k[1]);
  return {win, x[4], {x[0], x[1], win.oh, win.ow, x[4]}};
}

namespace {

std::vector<TypeShape> conv_infer(const OpContext& c) {
  require_float(c, 0);
  require_float(c, 1);
  require_rank(c, 0, 4, "input");
  require_rank(c, 1, 4, "weight");
  const Shape &x = c.in(0).shape, &w = c.in(1).shape;
  int64_t group = c.node.get_int("group", 1);
  if (group < 1 || x[1] % group != 0 || w[0] % group != 0) {
    throw UserError(str(c.node.where(), ": group ", group, " does not divide channels ", x[1],
                        " and filters ", w[0]));
  }
  if (w[1] * group != x[1]) {
    throw UserError(str(c.node.where(), ": weight ", shape_str(w), " expects ", w[1] * group,
                        " input channels, the input ", shape_str(x), " has ", x[1]));
  }
  std::vector<int64_t> k = kernel_shape(c, {w[2], w[3]});
  if (k[0] != w[2] || k[1] != w[3])
    throw UserError(str(c.node.where(), ": kernel_shape differs from the weight's"));
  if (c.present(2) && c.in(2).shape != Shape{w[0]}) {
    throw UserError(
        str(c.node.where(), ": bias ", shape_str(c.in(2).shape), " must be [", w[0], "]"));
  }
  Window win = window_of(c, x, w[2], w[3]);
  return {{DType::F32, {x[0], w[0], win.oh, win.ow}}};
}

std::vector<HostTensor> conv_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const Shape &x = in[0]->shape, &w = in[1]->shape;
  int64_t N = x[0], C = x[1], H = x[2], W = x[3], K = w[0], CG = w[1];
  int64_t group = c.node.get_int("group", 1), KG = K / group;
  Window win = window_of(c, x, w[2], w[3]);
  HostTensor out = make_like(DType::F32, {N, K, win.oh, win.ow});
  float (*rd)(float) = operand_rounding(c.node);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      int64_t g = k / KG;
      for (int64_t oy = 0; oy < win.oh; ++oy)
        for (int64_t ox = 0; ox < win.ow; ++ox) {
          double s = in.size() > 2 && in[2] ? in[2]->f[k] : 0.0;
          for (int64_t ci = 0; ci < CG; ++ci)
            for (int64_t r = 0; r < win.kh; ++r) {
              int64_t iy = oy * win.sh - win.pt + r * win.dh;
              if (iy < 0 || iy >= H) continue;
              for (int64_t q = 0; q < win.kw; ++q) {
                int64_t ix = ox * win.sw - win.pl + q * win.dw;
                if (ix < 0 || ix >= W) continue;
                s += double(rd(in[0]->f[((n * C + g * CG + ci) * H + iy) * W + ix])) *
                     rd(in[1]->f[((k * CG + ci) * win.kh + r) * win.kw + q]);
              }
            }
          out.f[((n * K + k) * win.oh + oy) * win.ow + ox] = static_cast<float>(s);
        }
    }
  return {out};
}

std::vector<TypeShape> pool_infer(const OpContext& c) {
  require_float(c, 0);
  if (c.node.outputs.size() > 1)
    throw UserError(str(c.node.where(), ": the Indices output is not supported"));
  if (c.node.op == "AveragePool" && c.opset < 19 && c.node.has("dilations"))
    throw UserError(str(c.node.where(), ": AveragePool takes dilations from opset 19 (the model's is ", c.opset, ")"));
  return {{DType::F32, pool_window(c, c.in(0).shape).out}};
}

std::vector<HostTensor> pool_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  const PoolWindow pw = pool_window(c, x);
  const Window& win = pw.win;
  const int64_t L = pw.lanes;
  bool is_max = c.node.op == "MaxPool";
  bool count_pad = c.node.get_int("count_include_pad", 0);
  int64_t H = x[2], W = x[3];
  HostTensor out = make_like(DType::F32, pw.out);
  for (int64_t p = 0; p < x[0] * x[1]; ++p)
    for (int64_t oy = 0; oy < win.oh; ++oy)
      for (int64_t ox = 0; ox < win.ow; ++ox)
        for (int64_t l = 0; l < L; ++l) {
          double acc = is_max ? -INFINITY : 0.0;
          int64_t count = 0, padded = 0;
          for (int64_t r = 0; r < win.kh; ++r)
            for (int64_t q = 0; q < win.kw; ++q) {
              int64_t iy = oy * win.sh - win.pt + r * win.dh,
                      ix = ox * win.sw - win.pl + q * win.dw;
              // Positions in the explicit padding count for count_include_pad, not those past
              // it (ceil_mode's extra window).
              if (iy < H + win.pb && ix < W + win.pr) ++padded;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              float v = in[0]->f[((p * H + iy) * W + ix) * L + l];
              acc = is_max ? max_nan(acc, double(v)) : acc + v;
              ++count;
            }
          if (!is_max) acc /= static_cast<double>(count_pad ? padded : std::max<int64_t>(count, 1));
          out.f[((p * win.oh + oy) * win.ow + ox) * L + l] = static_cast<float>(acc);
        }
  return {out};
}

std::vector<TypeShape> global_pool_infer(const OpContext& c) {
  require_float(c, 0);
  const Shape& x = c.in(0).shape;
  if (x.size() < 3)
    throw UserError(str(c.node.where(), ": input must have rank 3 or more, not ", shape_str(x)));
  Shape out = x;
  for (size_t d = 2; d < out.size(); ++d) out[d] = 1;
  return {{DType::F32, out}};
}

std::vector<HostTensor> global_pool_eval(const OpContext& c,
                                         const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  Shape os = global_pool_infer(c)[0].shape;
  int64_t planes = x[0] * x[1], area = num_elements(x) / planes;
  bool is_max = c.node.op == "GlobalMaxPool";
  HostTensor out = make_like(DType::F32, os);
  for (int64_t p = 0; p < planes; ++p) {
    double acc = is_max ? -INFINITY : 0.0;
    for (int64_t e = 0; e < area; ++e) {
      float v = in[0]->f[p * area + e];
      acc = is_max ? max_nan(acc, double(v)) : acc + v;
    }
    out.f[p] = static_cast<float>(is_max ? acc : acc / static_cast<double>(area));
  }
  return {out};
}

// ---- BatchNormalization (inference): scale, bias, mean, var per channel (axis 1).
std::vector<TypeShape> batchnorm_infer(const OpContext& c) {
  for (size_t k = 0; k < 5; ++k) require_float(c, k);
  const Shape& x = c.in(0).shape;
  if (x.size() < 2)
    throw UserError(str(c.node.where(), ": input must have rank 2 or more, not ", shape_str(x)));
  if (c.node.get_int("training_mode", 0))
    throw UserError(str(c.node.where(), ": training_mode=1 is not supported"));
  if (c.node.outputs.size() > 1)
    throw UserError(str(c.node.where(), ": running mean/var outputs are not supported"));
  for (size_t k = 1; k < 5; ++k) {
    if (c.in(k).shape != Shape{x[1]}) {
      throw UserError(str(c.node.where(), ": input ", k, " ('", c.in(k).name, "') is ",
                          shape_str(c.in(k).shape), "; it must be [", x[1], "] (one per channel)"));
    }
  }
  return {{DType::F32, x}};
}

std::vector<HostTensor> batchnorm_eval(const OpContext& c,
                                       const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  float eps = c.node.get_float("epsilon", 1e-5f);
  int64_t C = x[1], inner = num_elements(x) / (x[0] * C);
  HostTensor out = make_like(DType::F32, x);
  for (int64_t n = 0; n < x[0]; ++n)
    for (int64_t ch = 0; ch < C; ++ch) {
      double scale = in[1]->f[ch] / std::sqrt(double(in[4]->f[ch]) + eps);
      double shift = in[2]->f[ch] - in[3]->f[ch] * scale;
      for (int64_t e = 0; e < inner; ++e) {
        int64_t at = (n * C + ch) * inner + e;
        out.f[at] = static_cast<float>(in[0]->f[at] * scale + shift);
      }
    }
  return {out};
}

// ---- Softmax / LogSoftmax. Opset 13+: along `axis` (default -1). Before 13: the input is
// seen as 2-D [prod(dims < axis), prod(dims >= axis)] (default axis 1).
std::vector<TypeShape> same_float(const OpContext& c) {
  require_float(c, 0);
  return {{DType::F32, c.in(0).shape}};
}

// A row of `axes` (consecutive) in x: the elements before, in and after it, as
// [outer][len][inner].
struct Rows {
  int64_t outer = 1, len = 1, inner = 1;
  Rows(const Shape& x, const std::vector<int64_t>& axes) {
    for (size_t d = 0; d < x.size(); ++d) {
      auto dd = static_cast<int64_t>(d);
      if (!axes.empty() && dd < axes.front())
        outer *= x[d];
      else if (!axes.empty() && dd <= axes.back())
        len *= x[d];
      else
        inner *= x[d];
    }
  }
};

std::vector<HostTensor> softmax_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  const auto [outer, len, inner] = Rows(x, softmax_axes(c, static_cast<int64_t>(x.size())));
  bool log = c.node.op == "LogSoftmax";
  HostTensor out = make_like(DType::F32, x);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t l) { return (o * len + l) * inner + i; };
      double m = -INFINITY, s = 0;
      for (int64_t l = 0; l < len; ++l) m = std::max(m, double(in[0]->f[at(l)]));
      for (int64_t l = 0; l < len; ++l) s += std::exp(in[0]->f[at(l)] - m);
      for (int64_t l = 0; l < len; ++l) {
        double v = in[0]->f[at(l)] - m;
        out.f[at(l)] = static_cast<float>(log ? v - std::log(s) : std::exp(v) / s);
      }
    }
  return {out};
}

// ---- Hardmax: 1 at the first largest element of each row, 0 elsewhere; rows as Softmax's
// (along `axis` from opset 13, else over all dimensions from it). A NaN is never the largest.
std::vector<TypeShape> hardmax_infer(const OpContext& c) {
  require_float(c, 0);
  softmax_axes(c, static_cast<int64_t>(c.in(0).shape.size()));  // checks the axis
  return {{DType::F32, c.in(0).shape}};
}

std::vector<HostTensor> hardmax_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  const auto [outer, len, inner] = Rows(x, softmax_axes(c, static_cast<int64_t>(x.size())));
  HostTensor out = make_like(DType::F32, x);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t l) { return (o * len + l) * inner + i; };
      int64_t best = -1;
      for (int64_t l = 0; l < len; ++l) {
        float v = in[0]->f[at(l)];
        if (!std::isnan(v) && (best < 0 || v > in[0]->f[at(best)])) best = l;
      }
      if (best >= 0) out.f[at(best)] = 1.0f;
    }
  return {out};
}

// The mean of v[0, len) and 1 / sqrt(variance + eps), in double (LayerNormalization,
// InstanceNormalization).
std::pair<double, double> mean_and_inv_std(const float* v, int64_t len, double eps) {
  double mean = 0, var = 0;
  for (int64_t l = 0; l < len; ++l) mean += v[l];
  mean /= static_cast<double>(len);
  for (int64_t l = 0; l < len; ++l) var += (v[l] - mean) * (v[l] - mean);
  var /= static_cast<double>(len);
  return {mean, 1 / std::sqrt(var + eps)};
}

// ---- InstanceNormalization: per (n, c), normalize over the spatial dims, then the
// channel's scale and bias. GroupNorm exports as one, on [N, groups, -1].
std::vector<TypeShape> instancenorm_infer(const OpContext& c) {
  for (size_t k = 0; k < 3; ++k) require_float(c, k);
  const Shape& x = c.in(0).shape;
  if (x.size() < 3)
    throw UserError(str(c.node.where(), ": input ", shape_str(x), " must have rank 3 or more"));
  for (size_t k = 1; k < 3; ++k) {
    if (c.in(k).shape != Shape{x[1]})
      throw UserError(str(c.node.where(), ": ", k == 1 ? "scale " : "bias ", shape_str(c.in(k).shape),
                          " must be [", x[1], "]"));
  }
  return {{DType::F32, x}};
}

std::vector<HostTensor> instancenorm_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  int64_t C = x[1], len = 1;
  for (size_t d = 2; d < x.size(); ++d) len *= x[d];
  double eps = c.node.get_float("epsilon", 1e-5f);
  HostTensor out = make_like(DType::F32, x);
  for (int64_t r = 0; r < x[0] * C; ++r) {
    const float* v = in[0]->f.data() + r * len;
    auto [mean, inv] = mean_and_inv_std(v, len, eps);
    double scale = in[1]->f[r % C], bias = in[2]->f[r % C];
    for (int64_t l = 0; l < len; ++l) out.f[r * len + l] = static_cast<float>((v[l] - mean) * inv * scale + bias);
  }
  return {out};
}

// ---- LayerNormalization (opset 17): normalize over dims >= axis, then scale and bias.
std::vector<TypeShape> layernorm_infer(const OpContext& c) {
  require_float(c, 0);
  const Shape& x = c.in(0).shape;
  int64_t axis = normalize_axis(c.node, c.node.get_int("axis", -1), static_cast<int64_t>(x.size()));
  Shape norm(x.begin() + axis, x.end());
  for (size_t k = 1; k < c.count(); ++k) {
    if (c.present(k) && broadcast_shapes(c.node, c.in(k).shape, norm) != norm) {
      throw UserError(str(c.node.where(), ": input ", k, " ", shape_str(c.in(k).shape),
                          " does not broadcast to ", shape_str(norm)));
    }
  }
  // Mean and InvStdDev (optional outputs): one per normalized row.
  Shape stat(x.begin(), x.begin() + axis);
  stat.resize(x.size(), 1);
  std::vector<TypeShape> out{{DType::F32, x}};
  for (size_t o = 1; o < std::min<size_t>(c.node.outputs.size(), 3); ++o)
    out.push_back({DType::F32, stat});
  return out;
}

std::vector<HostTensor> layernorm_eval(const OpContext& c,
                                       const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  int64_t axis = normalize_axis(c.node, c.node.get_int("axis", -1), static_cast<int64_t>(x.size()));
  Shape norm(x.begin() + axis, x.end());
  int64_t len = num_elements(norm), rows = num_elements(x) / std::max<int64_t>(len, 1);
  double eps = c.node.get_float("epsilon", 1e-5f);
  std::vector<int64_t> ss = broadcast_strides(in[1]->shape, norm), sb;
  if (in.size() > 2 && in[2]) sb = broadcast_strides(in[2]->shape, norm);
  auto offset = [&](const std::vector<int64_t>& st, int64_t l) {
    int64_t o = 0;
    for (size_t d = norm.size(); d-- > 0;) {
      o += (l % norm[d]) * st[d];
      l /= norm[d];
    }
    return o;
  };
  std::vector<TypeShape> types = layernorm_infer(c);
  std::vector<HostTensor> outs;
  for (const TypeShape& t : types) outs.push_back(make_like(DType::F32, t.shape));
  HostTensor& out = outs[0];
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = in[0]->f.data() + r * len;
    auto [mean, inv] = mean_and_inv_std(v, len, eps);
    for (int64_t l = 0; l < len; ++l) {
      double y = (v[l] - mean) * inv * in[1]->f[offset(ss, l)];
      if (!sb.empty()) y += in[2]->f[offset(sb, l)];
      out.f[r * len + l] = static_cast<float>(y);
    }
    if (outs.size() > 1) outs[1].f[r] = static_cast<float>(mean);
    if (outs.size() > 2) outs[2].f[r] = static_cast<float>(inv);
  }
  return outs;
}

}  // namespace

// ---- ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceSumSquare, ReduceLogSum, ReduceLogSumExp. Axes: attribute, or (ReduceSum from
// opset 13, the others from 18) an optional constant input. No axes: all of them, unless
// noop_with_empty_axes.
std::vector<int64_t> reduce_axes(const OpContext& c, int64_t rank) {
  std::vector<int64_t> axes;
  if (c.present(1)) {
    const HostTensor& a = c.constant(1, "axes");
    for (int64_t k = 0; k < a.size(); ++k) axes.push_back(a.as_int(k));
  } else {
    axes = c.node.get_ints("axes", {});
  }
  if (axes.empty() && !c.node.get_int("noop_with_empty_axes", 0)) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  for (int64_t& a : axes) a = normalize_axis(c.node, a, rank, "reduction axis");
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    throw UserError(str(c.node.where(), ": a reduction axis is repeated"));
  }
  return axes;
}

namespace {

Shape reduced_shape(const OpContext& c, const Shape& x, const std::vector<int64_t>& axes) {
  bool keep = c.node.get_int("keepdims", 1);
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
    bool r = std::binary_search(axes.begin(), axes.end(), d);
    if (!r)
      out.push_back(x[d]);
    else if (keep)
      out.push_back(1);
  }
  return out;
}

// Reductions that also take int64 (shape arithmetic: x.std() exports ReduceProd of a Shape).
bool integer_reduction(const std::string& op) {
  return op == "ReduceSum" || op == "ReduceProd" || op == "ReduceMax" || op == "ReduceMin";
}

std::vector<TypeShape> reduce_infer(const OpContext& c) {
  if (!(integer_reduction(c.node.op) && c.in(0).dtype == DType::I64)) require_float(c, 0);
  const Shape& x = c.in(0).shape;
  return {{c.in(0).dtype, reduced_shape(c, x, reduce_axes(c, static_cast<int64_t>(x.size())))}};
}

// The int64 reductions, exact; overflow is the node's error.
HostTensor reduce_ints(const OpContext& c, const HostTensor& x, const Shape& kept,
                       const std::vector<int64_t>& axes) {
  const std::string& op = c.node.op;
  std::vector<int64_t> st = broadcast_strides(kept, x.shape);
  HostTensor out = make_like(DType::I64, reduced_shape(c, x.shape, axes));
  out.i.assign(out.i.size(), op == "ReduceMax"    ? INT64_MIN
                             : op == "ReduceMin"  ? INT64_MAX
                             : op == "ReduceProd" ? 1
                                                  : 0);
  std::vector<int64_t> idx(x.shape.size(), 0);
  for (int64_t e = 0; e < x.size(); ++e) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * st[d];
    int64_t v = x.i[e], &a = out.i[o];
    bool overflow = false;
    if (op == "ReduceMax")
      a = std::max(a, v);
    else if (op == "ReduceMin")
      a = std::min(a, v);
    else if (op == "ReduceProd")
      overflow = __builtin_mul_overflow(a, v, &a);
    else
      overflow = __builtin_add_overflow(a, v, &a);
    if (overflow) throw UserError(str(c.node.where(), ": the int64 result overflows"));
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < x.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<HostTensor> reduce_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const Shape& x = in[0]->shape;
  std::vector<int64_t> axes = reduce_axes(c, static_cast<int64_t>(x.size()));
  // The output as a tensor of x's rank with reduced dimensions 1; strides of x into it.
  Shape kept = x;
  for (int64_t a : axes) kept[a] = 1;
  if (in[0]->dtype == DType::I64) return {reduce_ints(c, *in[0], kept, axes)};
  std::vector<int64_t> st = broadcast_strides(kept, x);
  const std::string& op = c.node.op;
  int64_t n_out = num_elements(kept), n = num_elements(x);
  std::vector<double> acc(n_out, op == "ReduceMax"    ? -INFINITY
                                 : op == "ReduceMin"  ? INFINITY
                                 : op == "ReduceProd" ? 1.0
                                                      : 0.0);
  std::vector<int64_t> idx(x.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t o = 0;
    for (size_t d = 0; d < x.size(); ++d) o += idx[d] * st[d];
    double v = in[0]->f[e];
    if (op == "ReduceMax")
      acc[o] = max_nan(acc[o], v);
    else if (op == "ReduceMin")
      acc[o] = min_nan(acc[o], v);
    else if (op == "ReduceProd")
      acc[o] *= v;
    else if (op == "ReduceL1")
      acc[o] += std::fabs(v);
    else if (op == "ReduceL2" || op == "ReduceSumSquare")
      acc[o] += v * v;
    else if (op == "ReduceLogSumExp")
      acc[o] += std::exp(v);
    else
      acc[o] += v;
    for (size_t d = x.size(); d-- > 0;) {
      if (++idx[d] < x[d]) break;
      idx[d] = 0;
    }
  }
  HostTensor out = make_like(DType::F32, reduced_shape(c, x, axes));
  double count = static_cast<double>(n / std::max<int64_t>(n_out, 1));
  for (int64_t o = 0; o < n_out; ++o) {
    double v = acc[o];
    if (op == "ReduceMean")
      v /= count;
    else if (op == "ReduceL2")
      v = std::sqrt(v);
    else if (op == "ReduceLogSum" || op == "ReduceLogSumExp")
      v = std::log(v);
    out.f[o] = static_cast<float>(v);
  }
  return {out};
}

// ---- ArgMax, ArgMin: the index (int64) of the first (or, select_last_index, the last)
// largest or smallest element along one axis; NaN counts as larger than everything (numpy's
// and the ONNX reference's argmax pick the first NaN; argmin too).
std::vector<TypeShape> arg_infer(const OpContext& c) {
  if (c.in(0).dtype != DType::I64) require_float(c, 0);
  const Shape& x = c.in(0).shape;
  int64_t axis = normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(x.size()), "axis");
  return {{DType::I64, reduced_shape(c, x, {axis})}};
}

std::vector<HostTensor> arg_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const HostTensor& x = *in[0];
  const int64_t axis = normalize_axis(c.node, c.node.get_int("axis", 0), static_cast<int64_t>(x.shape.size()), "axis");
  const bool is_max = c.node.op == "ArgMax", last = c.node.get_int("select_last_index", 0) != 0;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  const int64_t len = x.shape[axis];
  HostTensor out = make_like(DType::I64, reduced_shape(c, x.shape, {axis}));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      double bv = x.as_double(o * len * inner + i);
      for (int64_t k = 1; k < len && !std::isnan(bv); ++k) {
        double v = x.as_double((o * len + k) * inner + i);
        bool better = std::isnan(v) || (is_max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv));
        if (better) {
          best = k;
          bv = v;
        }
      }
      out.i[o * inner + i] = best;
    }
  }
  return {out};
}

}  // namespace

// rows_apart: normalizing along axes other than 0 (softmax_axes: a row's dimensions).
static bool softmax_rows_apart(const Graph& g, const Node& n) {
  const auto rank = static_cast<int64_t>(g.value(n.inputs[0]).shape.size());
  const std::vector<int64_t> axes = softmax_axes(context(n, g, g.opset), rank);
  return rank > 0 && std::find(axes.begin(), axes.end(), 0) == axes.end();
}
static bool layernorm_rows_apart(const Graph& g, const Node& n) {
  return axis_is_not_first(g, n, -1);
}

void register_nn_ops(std::vector<OpDef>& ops) {
  ops.push_back(
      {"MatMul", 2, 2,
       [](const OpContext& c) {
         check_matmul_operands(c);
         return std::vector<TypeShape>{{DType::F32, matmul_shape(c, c.in(0).shape, c.in(1).shape)}};
       },
       matmul_eval, te::matmul_te, matmul_workload, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor, {kTensorCorePrecision});
  ops.push_back({"Gemm", 2, 3, gemm_infer, gemm_eval, te::gemm_te, gemm_workload, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor, {"alpha", "beta", "transA", "transB", kTensorCorePrecision});
  ops.back().transposed_weight = "transB";
  ops.push_back({"Conv", 2, 3, conv_infer, conv_eval, te::conv_te, conv_workload, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor,
           {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", kTensorCorePrecision});
  ops.back().bias_axis = OpDef::BiasAxis::Channel;
  ops.back().expand = expand_window;  // 1-D and 3-D windows
  ops.push_back({"MaxPool", 1, 1, pool_infer, pool_eval, te::pool_te(/*max=*/true)});
  describe(ops.back(), OpKind::Opaque, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
  ops.back().rows_apart = rows_apart_always;
  ops.back().expand = expand_window;  // 1-D and 3-D windows
  ops.push_back({"AveragePool", 1, 1, pool_infer, pool_eval, te::pool_te(/*max=*/false)});
  describe(ops.back(), OpKind::Opaque, {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"});
  ops.back().rows_apart = rows_apart_always;
  ops.back().expand = expand_window;  // 1-D and 3-D windows
  ops.push_back({"GlobalAveragePool", 1, 1, global_pool_infer, global_pool_eval, te::global_pool_te(/*max=*/false)});
  describe(ops.back(), OpKind::Reduction);
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"GlobalMaxPool", 1, 1, global_pool_infer, global_pool_eval, te::global_pool_te(/*max=*/true)});
  describe(ops.back(), OpKind::Reduction);
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"BatchNormalization", 5, 5, batchnorm_infer, batchnorm_eval, te::batchnorm_te});
  describe(ops.back(), OpKind::Elementwise, {"epsilon", "momentum", "training_mode"});
  ops.push_back({"Softmax", 1, 1, same_float, softmax_eval, te::softmax_te(/*log=*/false)});
  describe(ops.back(), OpKind::Reduction, {"axis"});
  ops.back().rows_apart = softmax_rows_apart;
  ops.push_back({"LogSoftmax", 1, 1, same_float, softmax_eval, te::softmax_te(/*log=*/true)});
  describe(ops.back(), OpKind::Reduction, {"axis"});
  ops.back().rows_apart = softmax_rows_apart;
  ops.push_back({"Hardmax", 1, 1, hardmax_infer, hardmax_eval, te::hardmax_te});
  describe(ops.back(), OpKind::Reduction, {"axis"});
  ops.back().rows_apart = softmax_rows_apart;
  ops.push_back({"LayerNormalization", 2, 3, layernorm_infer, layernorm_eval, te::layernorm_te});
  describe(ops.back(), OpKind::Reduction, {"axis", "epsilon", "stash_type"});
  ops.back().rows_apart = layernorm_rows_apart;
  ops.push_back({"InstanceNormalization", 3, 3, instancenorm_infer, instancenorm_eval, te::instancenorm_te});
  describe(ops.back(), OpKind::Reduction, {"epsilon"});
  ops.back().rows_apart = rows_apart_always;
  using te::ReduceOp;
  for (auto [r, op] : {std::pair<const char*, ReduceOp>{"ReduceMean", ReduceOp::Mean}, {"ReduceSum", ReduceOp::Sum},
                       {"ReduceMax", ReduceOp::Max}, {"ReduceMin", ReduceOp::Min}, {"ReduceProd", ReduceOp::Prod},
                       {"ReduceL1", ReduceOp::L1}, {"ReduceL2", ReduceOp::L2}, {"ReduceSumSquare", ReduceOp::SumSquare},
                       {"ReduceLogSum", ReduceOp::LogSum}, {"ReduceLogSumExp", ReduceOp::LogSumExp}}) {
    ops.push_back({r, 1, 2, reduce_infer, reduce_eval, te::reduce_te(op)});
    describe(ops.back(), OpKind::Reduction, {"axes", "keepdims", "noop_with_empty_axes"},
             /*int64_exact=*/op == ReduceOp::Max || op == ReduceOp::Min || op == ReduceOp::Sum);
    ops.back().rows_apart = rows_apart_always;  // a reduction over axis 0 makes it 1 or drops it
  }
  ops.push_back({"ArgMax", 1, 1, arg_infer, arg_eval, te::arg_te(/*max=*/true)});
  describe(ops.back(), OpKind::Opaque, {"axis", "keepdims", "select_last_index"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"ArgMin", 1, 1, arg_infer, arg_eval, te::arg_te(/*max=*/false)});
  describe(ops.back(), OpKind::Opaque, {"axis", "keepdims", "select_last_index"}, /*int64_exact=*/true);
  ops.back().rows_apart = rows_apart_always;
}

}  // namespace tf::graph
