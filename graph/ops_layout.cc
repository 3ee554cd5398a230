// The blocked-layout operators (graph/layout.h): LayoutTransform and ConvNCHWc.
#include <cctype>

#include "base/error.h"
#include "compiler/reference.h"
#include "compiler/workload.h"
#include "graph/op_te.h"
#include "graph/tasks.h"
#include "graph/layout.h"
#include "graph/ops.h"

namespace tf::graph {

int64_t parse_layout(const Node& n, const std::string& attr) {
  std::string s = n.get_string(attr, "");
  if (s == "NCHW") return 0;
  bool ok = s.size() > 5 && s.rfind("NCHW", 0) == 0 && s.back() == 'c' && s.size() <= 5 + 9;
  for (size_t k = 4; ok && k + 1 < s.size(); ++k)
    ok = std::isdigit(static_cast<unsigned char>(s[k])) != 0;
  if (ok && s[4] != '0') return std::stoll(s.substr(4, s.size() - 5));
  throw UserError(
      str(n.where(), ": ", attr, " '", s, "' is not NCHW or NCHW<b>c with a block b >= 1"));
}

std::string layout_name(int64_t block) { return block == 0 ? "NCHW" : str("NCHW", block, "c"); }

int64_t padded_filters(int64_t K, int64_t block, bool half_blocks_up_to_a_third) {
  if (block < 4 || K < 1 || K % block == 0) return 0;
  const int64_t padded = (K + block - 1) / block * block;
  // Filters half a block divides would run in half blocks (half vectors): up to a third more
  // filters in whole blocks instead, where the caller says the padding carries on.
  if (half_blocks_up_to_a_third && K % (block / 2) == 0 && block / 2 >= 8)
    return (padded - K) * 3 > padded ? 0 : padded;
  return (padded - K) * 8 > padded ? 0 : padded;
}

ConvNchwcDims conv_nchwc_dims(const Node& n, const Shape& x, const Shape& w) {
  ConvNchwcDims d;
  d.depthwise = w.size() == 4 || w.size() == 5;
  d.width = w.size() == 5 ? w[1] : 1;
  d.ib = x[4];
  d.C = x[1] * d.ib;
  d.group = n.get_int("group", 1);
  d.R = w.size() == 4 ? w[1] : w[2];
  d.S = w.size() == 4 ? w[2] : w[3];
  d.ob = d.depthwise ? d.ib : w[5];
  d.K = d.depthwise ? d.C : w[0] * d.ob;
  return d;
}

std::string conv_nchwc_spec(const Node& n, const Shape& x, const Shape& w) {
  const ConvNchwcDims d = conv_nchwc_dims(n, x, w);
  std::vector<int64_t> pads = n.get_ints("pads", {0, 0, 0, 0}),
                       strides = n.get_ints("strides", {1, 1}),
                       dil = n.get_ints("dilations", {1, 1});
  std::string tail =
      str(",R=", d.R, ",S=", d.S, ",stride=", strides[0], ",pad=", pads[0], ",dilation=", dil[0]);
  if (d.depthwise)
    return str("depthwise_conv2d_nchwc(N=", x[0], ",C=", d.C, ",H=", x[2], ",W=", x[3], tail,
               ",block=", d.ib, d.width != 1 ? str(",width=", d.width) : "");
  return str("conv2d_nchwc(N=", x[0], ",C=", d.C, ",H=", x[2], ",W=", x[3], ",K=", d.K, tail,
             ",ic_block=", d.ib, ",oc_block=", d.ob, d.group != 1 ? str(",group=", d.group) : "");
}

namespace {

// Logical NCHW shape of a tensor of `shape` in layout `block`.
Shape logical_shape(const Shape& shape, int64_t block) {
  if (block == 0) return shape;
  return {shape[0], shape[1] * shape[4], shape[2], shape[3]};
}

Shape layout_shape(const Node& n, const Shape& logical, int64_t block) {
  if (block == 0) return logical;
  if (logical[1] % block != 0) {
    throw UserError(
        str(n.where(), ": block ", block, " does not divide the ", logical[1], " channels"));
  }
  return {logical[0], logical[1] / block, logical[2], logical[3], block};
}

// Offset of logical element (n, c, h, w) in `shape` laid out with `block`.
int64_t offset(const Shape& s, int64_t block, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (block == 0) return ((n * s[1] + c) * s[2] + h) * s[3] + w;
  return (((n * s[1] + c / block) * s[2] + h) * s[3] + w) * block + c % block;
}

std::vector<TypeShape> transform_infer(const OpContext& c) {
  require_float(c, 0);
  int64_t src = parse_layout(c.node, "src_layout"), dst = parse_layout(c.node, "dst_layout");
  const Shape& x = c.in(0).shape;
  if (x.size() != (src ? 5u : 4u) || (src && x[4] != src)) {
    throw UserError(
        str(c.node.where(), ": input ", shape_str(x), " is not in layout ", layout_name(src)));
  }
  return {{DType::F32, layout_shape(c.node, logical_shape(x, src), dst)}};
}

std::vector<HostTensor> transform_eval(const OpContext& c,
                                       const std::vector<const HostTensor*>& in) {
  int64_t src = parse_layout(c.node, "src_layout"), dst = parse_layout(c.node, "dst_layout");
  const Shape& xs = in[0]->shape;
  Shape l = logical_shape(xs, src);
  Shape ys = layout_shape(c.node, l, dst);
  HostTensor out = make_like(DType::F32, ys);
  for (int64_t n = 0; n < l[0]; ++n)
    for (int64_t ch = 0; ch < l[1]; ++ch)
      for (int64_t h = 0; h < l[2]; ++h)
        for (int64_t w = 0; w < l[3]; ++w)
          out.f[offset(ys, dst, n, ch, h, w)] = in[0]->f[offset(xs, src, n, ch, h, w)];
  return {out};
}

void require_same(const Node& n, const char* what, const std::vector<int64_t>& v) {
  for (int64_t x : v) {
    if (x != v[0])
      throw UserError(
          str(n.where(), ": ", what, " ", shape_str(v), " differ (ConvNCHWc takes one value)"));
  }
}

std::vector<TypeShape> conv_nchwc_infer(const OpContext& c) {
  require_float(c, 0);
  require_float(c, 1);
  const Node& n = c.node;
  const Shape &x = c.in(0).shape, &w = c.in(1).shape;
  if (x.size() != 5)
    throw UserError(
        str(n.where(), ": input ", shape_str(x), " must have rank 5 ([N][C/b][H][W][b])"));
  for (const Shape* s : {&x, &w}) {
    for (int64_t d : *s) {
      if (d < 1) throw UserError(str(n.where(), ": an empty dimension in ", shape_str(*s)));
    }
  }
  if (w.size() != 4 && w.size() != 5 && w.size() != 6) {
    throw UserError(
        str(n.where(), ": weight ", shape_str(w),
            " is neither [K/ob][span/ib][R][S][ib][ob] nor [C/b][R][S][b] (depthwise) nor [C/b][width][R][S][b] "
            "(groups of width channels)"));
  }
  const ConvNchwcDims d = conv_nchwc_dims(n, x, w);
  const int64_t ib = d.ib, C = d.C, group = d.group;
  if (d.width < 1 || ib % d.width != 0) {
    throw UserError(str(n.where(), ": weight ", shape_str(w), ": groups of ", d.width,
                        " channels do not divide the input block ", ib));
  }
  if (d.width > 1 && group != C / d.width) {
    throw UserError(str(n.where(), ": group ", group, " is not the ", C, " channels over groups of ", d.width,
                        " (", C / d.width, ": weights [C/b][width][R][S][b])"));
  }
  if (group < 1 || C % group != 0 || (d.depthwise && d.width == 1 && group != C)) {
    throw UserError(str(n.where(), ": group ", group,
                        d.depthwise ? " is not the " : " does not divide the ", C, " channels",
                        d.depthwise ? " (depthwise weights)" : ""));
  }
  bool fits = d.depthwise ? w[0] == x[1] && w.back() == ib : w[4] == ib;
  if (fits && !d.depthwise) {
    fits = d.K % group == 0 && w[1] * ib == d.groups().span();  // K and C: whole blocks by construction
  }
  if (!fits) {
    throw UserError(str(n.where(), ": weight ", shape_str(w), " does not fit input ", shape_str(x),
                        " and group ", group, " (expected ",
                        w.size() == 5  ? "[C/b][width][R][S][b]"
                        : d.depthwise ? "[C/b][R][S][b]"
                                      : "[K/ob][span/ib][R][S][ib][ob]",
                        ")"));
  }
  if (n.get_string("auto_pad", "NOTSET") != "NOTSET")
    throw UserError(str(n.where(), ": auto_pad is not taken"));
  require_same(n, "pads", n.get_ints("pads", {0, 0, 0, 0}));
  require_same(n, "strides", n.get_ints("strides", {1, 1}));
  require_same(n, "dilations", n.get_ints("dilations", {1, 1}));
  // Bounded like Conv's kernel_shape (no such attribute here: the weights' dimensions).
  std::vector<int64_t> k = kernel_shape(c, {d.R, d.S});
  int64_t R = k[0], S = k[1], ob = d.ob;
  int64_t K = d.K;
  if (c.present(2) && c.in(2).shape != Shape{K}) {
    throw UserError(str(n.where(), ": bias ", shape_str(c.in(2).shape), " must be [", K, "]"));
  }
  Window win = window_of(c, {x[0], C, x[2], x[3]}, R, S);
  return {{DType::F32, {x[0], K / ob, win.oh, win.ow, ob}}};
}

std::vector<HostTensor> conv_nchwc_eval(const OpContext& c,
                                        const std::vector<const HostTensor*>& in) {
  bool bias = in.size() > 2 && in[2];
  Workload w = parse_workload(conv_nchwc_spec(c.node, in[0]->shape, in[1]->shape) +
                              ",epilogue=" + (bias ? "bias" : "none") + ")");
  std::vector<TypeShape> out_shape = conv_nchwc_infer(c);
  HostTensor out = make_like(DType::F32, out_shape[0].shape);
  std::vector<const float*> args{in[0]->f.data(), in[1]->f.data()};
  if (bias) args.push_back(in[2]->f.data());
  reference_compute(w, args, out.f.data());
  return {out};
}

}  // namespace

void register_layout_ops(std::vector<OpDef>& ops) {
  ops.push_back({"LayoutTransform", 1, 1, transform_infer, transform_eval, te::layout_transform_te});
  describe(ops.back(), OpKind::Injective, {"dst_layout", "src_layout"});
  ops.back().rows_apart = rows_apart_always;
  ops.push_back({"ConvNCHWc", 2, 3, conv_nchwc_infer, conv_nchwc_eval, te::conv_nchwc_te, conv_nchwc_workload, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor, {"dilations", "group", "pads", "strides"});
  ops.back().bias_axis = OpDef::BiasAxis::BlockedChannel;
}

}  // namespace tf::graph
