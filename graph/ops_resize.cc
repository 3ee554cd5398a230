// Resize (opsets 11 to 25) in the nearest, linear and cubic modes: the output shape from constant
// scales or sizes (of every axis, or from opset 18 of `axes`; sizes kept to the input's aspect
// ratio by keep_aspect_ratio_policy), where each output position reads in the input (ResizeSpec, shared with
// the compiled kernels in node_te.cc), and the reference evaluation. Semantics follow the ONNX
// spec and its reference implementation: the coordinate transformation maps an output
// position to a fractional input one; nearest rounds it (nearest_mode), linear interpolates
// between its two neighbours on each resized axis, cubic between its four (Keys' kernel with
// cubic_coeff_a; exclude_outside gives taps outside the input weight 0 and renormalises);
// positions outside the input read its edge. tf_crop_and_resize is refused, and antialias where
// it changes the result (a linear or cubic axis made smaller).
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "graph/op_te.h"
#include "graph/ops.h"

namespace tf::graph {

ResizeSpec resize_spec(const OpContext& c) {
  require_float(c, 0);
  const Shape& x = c.in(0).shape;
  const Node& n = c.node;
  ResizeSpec s;
  std::string mode = n.get_string("mode", "nearest");
  if (mode == "linear")
    s.linear = true;
  else if (mode == "cubic")
    s.cubic = true;
  else if (mode != "nearest")
    throw UserError(str(n.where(), ": mode '", mode, "' is not supported (nearest, linear and cubic are)"));
  s.cubic_a = n.get_float("cubic_coeff_a", -0.75f);
  s.exclude_outside = n.get_int("exclude_outside", 0) != 0;
  std::string coord = n.get_string("coordinate_transformation_mode", "half_pixel");
  const std::vector<std::string> coords = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                           "asymmetric", "tf_half_pixel_for_nn", "half_pixel_symmetric"};
  auto it = std::find(coords.begin(), coords.end(), coord);
  if (it == coords.end() || (coord == "half_pixel_symmetric" && c.opset < 19))
    throw UserError(str(n.where(), ": coordinate_transformation_mode '", coord,
                        "' is not supported (half_pixel, pytorch_half_pixel, align_corners, "
                        "asymmetric, tf_half_pixel_for_nn are; half_pixel_symmetric from opset 19)"));
  s.coord = static_cast<ResizeSpec::Coord>(it - coords.begin());
  std::string nearest = n.get_string("nearest_mode", "round_prefer_floor");
  const std::vector<std::string> nearests = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  auto nt = std::find(nearests.begin(), nearests.end(), nearest);
  if (nt == nearests.end())
    throw UserError(str(n.where(), ": nearest_mode '", nearest, "' is not supported"));
  s.nearest = static_cast<ResizeSpec::Nearest>(nt - nearests.begin());
  // scales (input 2) or sizes (input 3); an empty scales tensor counts as absent (opset 11).
  bool has_scales = c.present(2) && num_elements(c.in(2).shape) > 0;
  bool has_sizes = c.present(3) && num_elements(c.in(3).shape) > 0;
  if (has_scales == has_sizes)
    throw UserError(str(n.where(), ": exactly one of scales and sizes must be given"));
  s.in = x;
  s.out = x;
  s.scale.assign(x.size(), 1.0);
  for (size_t d = 0; d < x.size(); ++d) s.length.push_back(static_cast<double>(x[d]));
  // The axes scales and sizes hold values for (opset 18): all of them by default.
  std::vector<size_t> axes;
  if (n.has("axes")) {
    if (c.opset < 18) throw UserError(str(n.where(), ": axes is an attribute from opset 18 (the model's is ", c.opset, ")"));
    std::vector<bool> seen(x.size(), false);
    for (int64_t a : n.get_ints("axes", {})) {
      auto d = static_cast<size_t>(normalize_axis(n, a, static_cast<int64_t>(x.size())));
      if (seen[d]) throw UserError(str(n.where(), ": axis ", a, " appears twice in axes"));
      seen[d] = true;
      axes.push_back(d);
    }
  } else {
    for (size_t d = 0; d < x.size(); ++d) axes.push_back(d);
  }
  const std::string policy = n.get_string("keep_aspect_ratio_policy", "stretch");
  if ((policy != "stretch" && policy != "not_larger" && policy != "not_smaller") ||
      (policy != "stretch" && c.opset < 18))
    throw UserError(str(n.where(), ": keep_aspect_ratio_policy '", policy,
                        "' is not supported (stretch, not_larger and not_smaller from opset 18 are)"));
  if (has_scales) {
    const HostTensor& t = c.constant(2, "scales");
    if (t.dtype != DType::F32 || t.size() != static_cast<int64_t>(axes.size()))
      throw UserError(str(n.where(), ": scales ", shape_str(t.shape), " must hold one float per axis of ",
                          n.has("axes") ? str("axes ", shape_str(n.get_ints("axes", {}))) : shape_str(x)));
    for (size_t k = 0; k < axes.size(); ++k) {
      const size_t d = axes[k];
      double v = t.f[k];
      if (!(v > 0) || !std::isfinite(v) || x[d] * v >= double(kMaxGraphTensorElements))
        throw UserError(str(n.where(), ": scale ", v, " on axis ", d, " is not a positive size factor"));
      s.scale[d] = v;
      s.length[d] = x[d] * v;
      s.out[d] = static_cast<int64_t>(std::floor(s.length[d]));
    }
  } else {
    const HostTensor& t = c.constant(3, "sizes");
    if (t.dtype != DType::I64 || t.size() != static_cast<int64_t>(axes.size()))
      throw UserError(str(n.where(), ": sizes ", shape_str(t.shape), " must hold one integer per axis of ",
                          n.has("axes") ? str("axes ", shape_str(n.get_ints("axes", {}))) : shape_str(x)));
    for (size_t k = 0; k < axes.size(); ++k) {
      const size_t d = axes[k];
      int64_t v = t.i[k];
      if (v < 0 || v > kMaxGraphTensorElements)
        throw UserError(str(n.where(), ": size ", v, " on axis ", d, " is out of range"));
      s.out[d] = v;
      s.length[d] = static_cast<double>(v);
      s.scale[d] = x[d] > 0 ? double(v) / double(x[d]) : 1.0;
    }
    if (policy != "stretch" && !axes.empty()) {
      // One scale for every given axis, the smallest (not_larger) or largest of theirs; sizes
      // round half up.
      double one = s.scale[axes[0]];
      for (size_t d : axes) one = policy == "not_larger" ? std::min(one, s.scale[d]) : std::max(one, s.scale[d]);
      for (size_t d : axes) {
        s.scale[d] = one;
        s.length[d] = x[d] * one;
        if (s.length[d] >= double(kMaxGraphTensorElements))
          throw UserError(str(n.where(), ": the size on axis ", d, " kept to the aspect ratio is out of range"));
        s.out[d] = static_cast<int64_t>(std::floor(s.length[d] + 0.5));
      }
    }
  }
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == 0 && s.out[d] > 0)
      throw UserError(str(n.where(), ": cannot resize the empty axis ", d, " to ", s.out[d]));
  }
  // antialias (opset 18) widens linear and cubic filters on the axes made smaller; elsewhere it
  // changes nothing.
  if (n.get_int("antialias", 0) != 0) {
    for (size_t d = 0; d < x.size(); ++d) {
      if ((s.linear || s.cubic) && s.scale[d] < 1.0 && !s.identity(d))
        throw UserError(str(n.where(), ": antialias when ", s.linear ? "linear" : "cubic", " interpolation makes axis ", d,
                            " smaller (", x[d], " -> ", s.out[d], ") is not implemented"));
    }
  }
  check_tensor_size(n.where(), s.out);
  return s;
}

double ResizeSpec::symmetric_offset(size_t d) const {
  return length[d] > 0 ? double(in[d]) / 2 * (1 - double(out[d]) / length[d]) : 0.0;
}

bool ResizeSpec::identity(size_t d) const {
  return out[d] == in[d] && scale[d] == 1.0 && coord != TfHalfPixelForNn;
}

double ResizeSpec::source(int64_t at, size_t d) const {
  double x = static_cast<double>(at), s = scale[d];
  switch (coord) {
    case HalfPixel: return (x + 0.5) / s - 0.5;
    case PytorchHalfPixel: return length[d] > 1 ? (x + 0.5) / s - 0.5 : 0.0;
    case AlignCorners: return length[d] != 1 ? x * double(in[d] - 1) / (length[d] - 1) : 0.0;
    case Asymmetric: return x / s;
    case TfHalfPixelForNn: return (x + 0.5) / s;
    case HalfPixelSymmetric: return symmetric_offset(d) + (x + 0.5) / s - 0.5;
  }
  return x;
}

int64_t ResizeSpec::round(double x) const {
  switch (nearest) {
    case RoundPreferFloor: return static_cast<int64_t>(std::ceil(x - 0.5));
    case RoundPreferCeil: return static_cast<int64_t>(std::floor(x + 0.5));
    case Floor: return static_cast<int64_t>(std::floor(x));
    case Ceil: return static_cast<int64_t>(std::ceil(x));
  }
  return 0;
}

std::array<double, 4> ResizeSpec::cubic_weights(double t) const {
  const double A = cubic_a, u = 1 - t;
  return {((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
          ((A + 2) * t - (A + 3)) * t * t + 1,
          ((A + 2) * u - (A + 3)) * u * u + 1,
          ((A * (u + 1) - 5 * A) * (u + 1) + 8 * A) * (u + 1) - 4 * A};
}

namespace {

std::vector<HostTensor> resize_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  ResizeSpec s = resize_spec(c);
  const Shape& x = s.in;
  size_t rank = x.size();
  std::vector<int64_t> st(rank, 1);
  for (size_t d = rank; d-- > 1;) st[d - 1] = st[d] * x[d];
  HostTensor out = make_like(DType::F32, s.out);
  // Per axis and output position: the input positions read and their weights.
  using Taps = std::vector<std::pair<int64_t, double>>;
  std::vector<std::vector<Taps>> taps(rank);
  auto edge = [](int64_t i, int64_t n) { return std::clamp<int64_t>(i, 0, n - 1); };
  for (size_t d = 0; d < rank; ++d) {
    for (int64_t o = 0; o < s.out[d]; ++o) {
      if (s.identity(d)) {
        taps[d].push_back({{o, 1.0}});
        continue;
      }
      double src = s.source(o, d);
      if (!s.linear && !s.cubic) {
        taps[d].push_back({{edge(s.round(src), x[d]), 1.0}});
        continue;
      }
      double f = std::floor(src);
      auto k = static_cast<int64_t>(f);
      if (s.linear) {
        taps[d].push_back({{edge(k, x[d]), 1 - (src - f)}, {edge(k + 1, x[d]), src - f}});
        continue;
      }
      std::array<double, 4> cw = s.cubic_weights(src - f);
      Taps t;
      double total = 0;
      for (int64_t j = 0; j < 4; ++j) {
        int64_t at = k - 1 + j;
        double wj = s.exclude_outside && (at < 0 || at >= x[d]) ? 0.0 : cw[j];
        t.push_back({edge(at, x[d]), wj});
        total += wj;
      }
      if (s.exclude_outside && total != 0)
        for (auto& [at, wj] : t) wj /= total;
      taps[d].push_back(t);
    }
  }
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < out.size(); ++e) {
    // The sum over the product of the axes' taps.
    double v = 0;
    std::vector<size_t> pick(rank, 0);
    for (;;) {
      double weight = 1;
      int64_t k = 0;
      for (size_t d = 0; d < rank; ++d) {
        const auto& [at, wd] = taps[d][idx[d]][pick[d]];
        weight *= wd;
        k += at * st[d];
      }
      if (weight != 0) v += weight * in[0]->f[k];
      size_t d = rank;
      while (d-- > 0) {
        if (++pick[d] < taps[d][idx[d]].size()) break;
        pick[d] = 0;
      }
      if (d == static_cast<size_t>(-1)) break;
    }
    out.f[e] = static_cast<float>(v);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < s.out[d]) break;
      idx[d] = 0;
    }
  }
  return {out};
}

}  // namespace

// rows_apart: sizes along axis 0 show in the shapes; a crop's region of interest does not.
static bool resize_rows_apart(const Graph&, const Node& n) {
  return n.get_string("coordinate_transformation_mode", "half_pixel") != "tf_crop_and_resize";
}

void register_resize_ops(std::vector<OpDef>& ops) {
  ops.push_back({"Resize", 1, 4,
                 [](const OpContext& c) {
                   return std::vector<TypeShape>{{DType::F32, resize_spec(c).out}};
                 },
                 resize_eval, te::resize_te});
  describe(ops.back(), OpKind::Injective, {"antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                                          "extrapolation_value", "keep_aspect_ratio_policy", "mode", "nearest_mode"});
  ops.back().rows_apart = resize_rows_apart;
}

}  // namespace tf::graph
