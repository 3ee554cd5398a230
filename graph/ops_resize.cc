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

// GridSample's reference evaluation: every output position's taps (per spatial axis: the
// input index and weight), read through the padding mode, in doubles.
std::vector<HostTensor> grid_sample_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const GridSampleSpec s = grid_sample_spec(c);
  const HostTensor &x = *in[0], &grid = *in[1];
  HostTensor out = make_like(DType::F32, s.out);
  const size_t r = s.spatial;
  const int64_t N = s.x[0], C = s.x[1];
  int64_t positions = 1, plane = 1;
  for (size_t d = 0; d < r; ++d) {
    positions *= s.out[2 + d];
    plane *= s.x[2 + d];
  }
  struct Tap {
    int64_t index;
    double weight;
  };
  std::vector<std::vector<Tap>> taps(r);
  std::vector<size_t> pick(r);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < positions; ++p) {
      for (size_t d = 0; d < r; ++d) {
        const int64_t size = s.x[2 + d];
        // grid's last axis lists the innermost spatial axis first.
        double v = s.denormalize(grid.f[static_cast<size_t>((n * positions + p) * int64_t(r) + int64_t(r - 1 - d))], d);
        if (s.mode == GridSampleSpec::Nearest) v = std::nearbyint(v);  // half to even
        // Cubic keeps the position and maps each tap (PyTorch's grid_sample and ONNX Runtime;
        // ONNX's Python reference clamps or reflects the position first for cubic too).
        if (s.mode != GridSampleSpec::Cubic && (v < s.low(d) || v > s.high(d))) {
          if (s.padding == GridSampleSpec::Border) v = std::clamp(v, 0.0, double(size - 1));
          if (s.padding == GridSampleSpec::Reflection) v = grid_sample_reflect(v, s.low(d), s.high(d));
        }
        // Far outside, every position reads as the input's edge or nothing: kept within 2^24 so
        // that indices stay integers (a NaN position reads index 0's neighbourhood).
        v = std::isnan(v) ? 0.0 : std::clamp(v, -16777216.0, 16777216.0);
        taps[d].clear();
        if (s.mode == GridSampleSpec::Nearest) {
          taps[d].push_back({static_cast<int64_t>(v), 1.0});  // toward zero, as the reference's astype
        } else {
          const double f = std::floor(v), t = v - f;
          const auto k = static_cast<int64_t>(f);
          if (s.mode == GridSampleSpec::Linear) {
            taps[d].push_back({k, 1 - t});
            taps[d].push_back({k + 1, t});
          } else {
            const std::array<double, 4> w = grid_sample_cubic_weights(t);
            for (int64_t j = 0; j < 4; ++j) taps[d].push_back({k - 1 + j, w[static_cast<size_t>(j)]});
          }
        }
        for (Tap& t : taps[d]) {  // where an index outside the input reads
          if (t.index >= 0 && t.index < size) continue;
          if (s.padding == GridSampleSpec::Zeros) t.weight = 0, t.index = 0;
          else if (s.padding == GridSampleSpec::Border) t.index = std::clamp<int64_t>(t.index, 0, size - 1);
          else t.index = std::clamp<int64_t>(static_cast<int64_t>(grid_sample_reflect(double(t.index), s.low(d), s.high(d))), 0, size - 1);
        }
      }
      for (int64_t ch = 0; ch < C; ++ch) {
        const float* plane_at = x.f.data() + (n * C + ch) * plane;
        double sum = 0;
        std::fill(pick.begin(), pick.end(), 0);
        for (;;) {
          double w = 1;
          int64_t at = 0;
          for (size_t d = 0; d < r; ++d) {
            w *= taps[d][pick[d]].weight;
            at = at * s.x[2 + d] + taps[d][pick[d]].index;
          }
          if (w != 0) sum += w * plane_at[at];
          size_t d = r;
          while (d-- > 0) {
            if (++pick[d] < taps[d].size()) break;
            pick[d] = 0;
          }
          if (d == static_cast<size_t>(-1)) break;
        }
        out.f[static_cast<size_t>((n * C + ch) * positions + p)] = static_cast<float>(sum);
      }
    }
  return {out};
}

}  // namespace

double GridSampleSpec::denormalize(double g, size_t d) const {
  const double size = static_cast<double>(x[2 + d]);
  return align_corners ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2;
}

double GridSampleSpec::high(size_t d) const {
  const double size = static_cast<double>(x[2 + d]);
  return align_corners ? size - 1 : size - 0.5;
}

double grid_sample_reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (!(range > 0)) return lo;
  if (x >= lo && x <= hi) return x;
  const bool below = x < lo;
  const double dx = below ? lo - x : x - hi;
  const double turns = std::floor(dx / range), rest = dx - turns * range;
  const bool even = std::fmod(turns, 2.0) == 0;
  return below == even ? lo + rest : hi - rest;
}

std::array<double, 4> grid_sample_cubic_weights(double t) {
  const double A = -0.75, t1 = t + 1, u = 1 - t, u1 = 2 - t;
  return {((A * t1 - 5 * A) * t1 + 8 * A) * t1 - 4 * A, ((A + 2) * t - (A + 3)) * t * t + 1,
          ((A + 2) * u - (A + 3)) * u * u + 1, ((A * u1 - 5 * A) * u1 + 8 * A) * u1 - 4 * A};
}

GridSampleSpec grid_sample_spec(const OpContext& c) {
  const Node& n = c.node;
  auto fail = [&](const std::string& why) { throw UserError(str(n.where(), ": ", why)); };
  GridSampleSpec s;
  s.x = c.in(0).shape;
  s.grid = c.in(1).shape;
  if (c.in(0).dtype != DType::F32) fail(str("X '", c.in(0).name, "' is ", dtype_name(c.in(0).dtype), "; float32 is supported"));
  if (c.in(1).dtype != DType::F32) fail(str("grid '", c.in(1).name, "' is ", dtype_name(c.in(1).dtype), "; it must be float32"));
  const size_t max_spatial = c.opset >= 20 ? 3 : 2;
  if (s.x.size() < 3 || s.x.size() - 2 > max_spatial || (c.opset < 20 && s.x.size() != 4))
    fail(str("X ", shape_str(s.x), ": ", c.opset < 20 ? "opset 16's GridSample takes rank 4 (N, C, H, W)"
                                                       : "1 to 3 spatial axes are supported (rank 3 to 5)"));
  s.spatial = s.x.size() - 2;
  if (s.grid.size() != s.x.size() || s.grid[0] != s.x[0] || s.grid.back() != static_cast<int64_t>(s.spatial))
    fail(str("grid ", shape_str(s.grid), " must be [", s.x[0], ", output positions..., ", s.spatial, "] for X ", shape_str(s.x)));
  const std::string mode = n.get_string("mode", c.opset >= 20 ? "linear" : "bilinear");
  const bool new_names = c.opset >= 20;
  if (mode == (new_names ? "linear" : "bilinear")) s.mode = GridSampleSpec::Linear;
  else if (mode == "nearest") s.mode = GridSampleSpec::Nearest;
  else if (mode == (new_names ? "cubic" : "bicubic")) s.mode = GridSampleSpec::Cubic;
  else
    fail(str("mode '", mode, "' is not one of ", new_names ? "linear, nearest, cubic (opset 20)" : "bilinear, nearest, bicubic (opset 16)"));
  const std::string padding = n.get_string("padding_mode", "zeros");
  if (padding == "zeros") s.padding = GridSampleSpec::Zeros;
  else if (padding == "border") s.padding = GridSampleSpec::Border;
  else if (padding == "reflection") s.padding = GridSampleSpec::Reflection;
  else fail(str("padding_mode '", padding, "' is not one of zeros, border, reflection"));
  const int64_t align = n.get_int("align_corners", 0);
  if (align != 0 && align != 1) fail(str("align_corners ", align, " must be 0 or 1"));
  s.align_corners = align == 1;
  s.out = {s.x[0], s.x[1]};
  s.out.insert(s.out.end(), s.grid.begin() + 1, s.grid.end() - 1);
  check_tensor_size(str(n.where(), ": the output"), s.out);
  for (size_t d = 0; d < s.spatial; ++d) {
    if (s.x[2 + d] == 0 && num_elements(s.out) > 0)
      fail(str("X ", shape_str(s.x), " has no positions along spatial axis ", d, " to sample ", shape_str(s.out), " from"));
  }
  return s;
}

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
  ops.push_back({"GridSample", 2, 2,
                 [](const OpContext& c) {
                   return std::vector<TypeShape>{{DType::F32, grid_sample_spec(c).out}};
                 },
                 grid_sample_eval, te::grid_sample_te});
  describe(ops.back(), OpKind::Injective, {"align_corners", "mode", "padding_mode"});
  ops.back().data_input = every_input_is_data;
}

}  // namespace tf::graph
