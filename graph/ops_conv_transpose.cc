// ConvTranspose (opsets 11 to 17), 2-D (1-D through the importer, graph/onnx_import.cc): the
// geometry shared with the compiled kernel (ConvTransposeSpec: pads from pads, auto_pad or
// output_shape, output size, output_padding) and the reference evaluation, which scatters
// every input pixel's contribution as the ONNX reference does; the compiled kernel gathers
// (graph/node_te.cc), so the two compute it independently.
#include <algorithm>

#include "base/error.h"
#include "graph/op_te.h"
#include "graph/import_window3d.h"
#include "graph/ops.h"

namespace tf::graph {
namespace {

int64_t floor_div2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

}  // namespace

ConvTransposeSpec conv_transpose_spec(const OpContext& c) {
  const Node& n = c.node;
  require_float(c, 0);
  require_float(c, 1);
  for (size_t k : {size_t{0}, size_t{1}}) {
    if (c.in(k).shape.size() != 4)
      throw UserError(str(n.where(), ": ", k == 0 ? "input" : "weight", " '", c.in(k).name,
                          "' must have rank 4, not ", shape_str(c.in(k).shape)));
  }
  const Shape &x = c.in(0).shape, &w = c.in(1).shape;
  ConvTransposeSpec s;
  s.group = n.get_int("group", 1);
  if (s.group < 1 || x[1] % s.group != 0 || w[0] != x[1])
    throw UserError(str(n.where(), ": weight ", shape_str(w), " and group ", s.group,
                        " do not fit the input's ", x[1], " channels"));
  s.out_channels = w[1] * s.group;
  if (c.present(2) && c.in(2).shape != Shape{s.out_channels})
    throw UserError(str(n.where(), ": bias ", shape_str(c.in(2).shape), " must be [", s.out_channels, "]"));
  auto pair = [&](const char* a, std::vector<int64_t> fallback, int64_t lo) {
    std::vector<int64_t> v = n.get_ints(a, fallback);
    if (v.size() != fallback.size())
      throw UserError(str(n.where(), ": ", a, " ", shape_str(v), " must have ", fallback.size(), " values (2-D only)"));
    for (int64_t e : v)
      if (e < lo || e > (int64_t{1} << 30))
        throw UserError(str(n.where(), ": ", a, " value ", e, " is not in [", lo, ", 2^30]"));
    return v;
  };
  std::vector<int64_t> k = pair("kernel_shape", {w[2], w[3]}, 1);
  if (k[0] != w[2] || k[1] != w[3]) throw UserError(str(n.where(), ": kernel_shape differs from the weight's"));
  std::vector<int64_t> st = pair("strides", {1, 1}, 1), d = pair("dilations", {1, 1}, 1),
                       p = pair("pads", {0, 0, 0, 0}, 0), op = pair("output_padding", {0, 0}, 0);
  for (int a = 0; a < 2; ++a) {
    if (op[a] >= std::max(st[a], d[a]))
      throw UserError(str(n.where(), ": output_padding ", op[a], " must be less than the stride ", st[a],
                          " or the dilation ", d[a]));
  }
  s.kh = w[2], s.kw = w[3], s.sh = st[0], s.sw = st[1], s.dh = d[0], s.dw = d[1];
  s.pt = p[0], s.pl = p[1], s.pb = p[2], s.pr = p[3];
  // The full (unpadded) output size per axis.
  int64_t full_h = s.sh * (x[2] - 1) + op[0] + (s.kh - 1) * s.dh + 1;
  int64_t full_w = s.sw * (x[3] - 1) + op[1] + (s.kw - 1) * s.dw + 1;
  std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    throw UserError(str(n.where(), ": auto_pad '", auto_pad, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"));
  std::vector<int64_t> want;
  if (n.has("output_shape")) {
    want = n.get_ints("output_shape", {});
    if (want.size() == 4) want.erase(want.begin(), want.begin() + 2);
    if (want.size() != 2)
      throw UserError(str(n.where(), ": output_shape ", shape_str(n.get_ints("output_shape", {})),
                          " must have 2 values (2-D only)"));
    for (int64_t v : want)
      if (v < 1 || v > (int64_t{1} << 30))
        throw UserError(str(n.where(), ": output_shape value ", v, " is not in [1, 2^30]"));
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    want = {x[2] * s.sh, x[3] * s.sw};
  } else if (auto_pad == "VALID") {
    s.pt = s.pl = s.pb = s.pr = 0;
  }
  if (!want.empty()) {
    // The padding that gives the asked size, split as the spec says (SAME_UPPER: the larger
    // half at the end).
    bool upper = auto_pad == "SAME_UPPER";
    int64_t th = full_h - want[0], tw = full_w - want[1];
    s.pt = upper ? floor_div2(th) : th - floor_div2(th);
    s.pb = th - s.pt;
    s.pl = upper ? floor_div2(tw) : tw - floor_div2(tw);
    s.pr = tw - s.pl;
  }
  s.oh = full_h - s.pt - s.pb;
  s.ow = full_w - s.pl - s.pr;
  if (s.oh < 1 || s.ow < 1)
    throw UserError(str(n.where(), ": the pads leave an output of ", s.oh, "x", s.ow));
  check_tensor_size(n.where(), {x[0], s.out_channels, s.oh, s.ow});
  return s;
}

namespace {

std::vector<HostTensor> conv_transpose_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  ConvTransposeSpec s = conv_transpose_spec(c);
  const Shape& x = in[0]->shape;
  int64_t N = x[0], C = x[1], H = x[2], W = x[3], M = s.out_channels, CG = C / s.group,
          MG = M / s.group;
  HostTensor out = make_like(DType::F32, {N, M, s.oh, s.ow});
  std::vector<double> acc(out.f.size(), 0.0);
  for (int64_t b = 0; b < N; ++b)
    for (int64_t ci = 0; ci < C; ++ci) {
      int64_t g = ci / CG;
      for (int64_t iy = 0; iy < H; ++iy)
        for (int64_t ix = 0; ix < W; ++ix) {
          double v = in[0]->f[((b * C + ci) * H + iy) * W + ix];
          for (int64_t m = 0; m < MG; ++m)
            for (int64_t r = 0; r < s.kh; ++r) {
              int64_t oy = iy * s.sh - s.pt + r * s.dh;
              if (oy < 0 || oy >= s.oh) continue;
              for (int64_t q = 0; q < s.kw; ++q) {
                int64_t ox = ix * s.sw - s.pl + q * s.dw;
                if (ox < 0 || ox >= s.ow) continue;
                acc[((b * M + g * MG + m) * s.oh + oy) * s.ow + ox] +=
                    v * in[1]->f[((ci * MG + m) * s.kh + r) * s.kw + q];
              }
            }
        }
    }
  for (size_t e = 0; e < acc.size(); ++e) {
    int64_t m = static_cast<int64_t>(e / static_cast<size_t>(s.oh * s.ow)) % M;
    out.f[e] = static_cast<float>(acc[e] + (in.size() > 2 && in[2] ? in[2]->f[m] : 0.0));
  }
  return {out};
}

}  // namespace

void register_conv_transpose_ops(std::vector<OpDef>& ops) {
  ops.push_back({"ConvTranspose", 2, 3,
                 [](const OpContext& c) {
                   ConvTransposeSpec s = conv_transpose_spec(c);
                   return std::vector<TypeShape>{
                       {DType::F32, {c.in(0).shape[0], s.out_channels, s.oh, s.ow}}};
                 },
                 conv_transpose_eval, te::conv_transpose_te, nullptr, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Opaque, {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"});
  ops.back().rows_apart = rows_apart_always;
  ops.back().expand = expand_window;  // 1-D windows
}

}  // namespace tf::graph
