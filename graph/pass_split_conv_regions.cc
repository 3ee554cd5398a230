// split-conv-regions: a Conv whose taps read padding at many of its output positions (atrous
// convolutions at rates near the feature map's size: DeepLabv3's ASPP at rates 12, 24 and 36
// over a 40x40 map, where 36%-84% of the products multiply zeros) computes its output as
// rectangles, each with only the taps that read the image at every one of its positions.
//
// Along each axis, the taps an output position reads the image through are one run (tap r
// reads o * stride + r * dilation - pad), so the positions form bands with the same run; a
// band-by-band rectangle is a Conv of those taps' weights over the pixels they read (a Slice
// of the input, or the input itself) without padding, and the rectangles are concatenated
// back along the width, then the height. Every output is the same sum over the same pixels
// (a dropped product only ever multiplied a zero of the padding); the order of the terms
// within the sum is the kernel's. trim-conv-taps, before it, has dropped the taps that miss
// everywhere.
//
// Split where at least kMinWaste of the products read padding and that is at least
// kMinSavedFlops (the rectangles' kernels, slices and concatenations cost a few passes over
// the output and part of the input), into at most kMaxPieces rectangles. 2-D Convs with
// constant float32 weights that no QDQ record names, one stride and one dilation for both
// axes (what the conv workloads express); CPU and GPU targets alike.
#include <array>
#include <map>
#include <optional>
#include <set>

#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

constexpr double kMinWaste = 0.2;
constexpr double kMinSavedFlops = 64e6;
constexpr size_t kMaxPieces = 25;

// Outputs [o0, o1) read the image through taps [t0, t1] (inclusive), and only those.
struct Band {
  int64_t o0, o1, t0, t1;
};

// Along one axis: `in` pixels, `out` outputs, `k` taps at `stride` and `dil`, `pad` before.
// Empty when some output reads only padding (the split would leave it no taps).
std::vector<Band> bands(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t dil, int64_t pad) {
  std::vector<Band> b;
  for (int64_t o = 0; o < out; ++o) {
    std::optional<int64_t> lo, hi;
    for (int64_t r = 0; r < k; ++r) {
      const int64_t p = o * stride + r * dil - pad;
      if (p < 0 || p >= in) continue;
      if (!lo) lo = r;
      hi = r;
    }
    if (!lo) return {};
    if (!b.empty() && b.back().t0 == *lo && b.back().t1 == *hi) {
      b.back().o1 = o + 1;
    } else {
      b.push_back({o, o + 1, *lo, *hi});
    }
  }
  return b;
}

// The share of an axis' (output, tap) pairs that read the image.
double reading_share(const std::vector<Band>& b, int64_t out, int64_t k) {
  int64_t n = 0;
  for (const Band& x : b) n += (x.o1 - x.o0) * (x.t1 - x.t0 + 1);
  return static_cast<double>(n) / static_cast<double>(out * k);
}

bool split(Graph& g, const Node& n, std::vector<Node>& out) {
  if (n.op != "Conv" || n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  const Value& xv = g.value(n.inputs[0]);
  if (xv.shape.size() != 4 || xv.dtype != DType::F32 || g.qdq.count(n.inputs[0]) || !plain_conv_weights(g, n)) return false;
  const Shape x = xv.shape, w = g.value(n.inputs[1]).shape;
  const OpContext ctx = context(n, g, g.opset);
  std::vector<int64_t> k = kernel_shape(ctx, {w[2], w[3]});
  if (k != std::vector<int64_t>{w[2], w[3]}) return false;  // inference reports the mismatch
  const Window win = window_of(ctx, x, k[0], k[1]);
  if (win.sh != win.sw || win.dh != win.dw) return false;
  const std::vector<Band> bh = bands(x[2], win.oh, k[0], win.sh, win.dh, win.pt),
                          bw = bands(x[3], win.ow, k[1], win.sw, win.dw, win.pl);
  if (bh.empty() || bw.empty() || bh.size() * bw.size() < 2 || bh.size() * bw.size() > kMaxPieces) return false;
  const double reading = reading_share(bh, win.oh, k[0]) * reading_share(bw, win.ow, k[1]);
  const double flops = 2.0 * static_cast<double>(x[0] * w[0] * win.oh * win.ow * w[1] * k[0] * k[1]);
  if (1 - reading < kMinWaste || flops * (1 - reading) < kMinSavedFlops) return false;

  // The weights of taps [r0, r1] x [s0, s1], one constant per distinct run pair.
  std::map<std::array<int64_t, 4>, std::string> weights;
  auto taps = [&](const Band& a, const Band& b) {
    const std::array<int64_t, 4> key{a.t0, a.t1, b.t0, b.t1};
    if (a.t0 == 0 && a.t1 == k[0] - 1 && b.t0 == 0 && b.t1 == k[1] - 1) return n.inputs[1];
    if (auto it = weights.find(key); it != weights.end()) return it->second;
    return weights[key] = g.add_constant(
               str(n.inputs[1], ".taps", a.t0, a.t1, b.t0, b.t1),
               conv_weight_taps(*g.value(n.inputs[1]).constant, a.t0, a.t1 - a.t0 + 1, b.t0, b.t1 - b.t0 + 1));
  };

  // Node names the graph does not use yet (a model may name its nodes anything).
  std::set<std::string> names;
  for (const Node& m : g.nodes) names.insert(m.name);
  auto fresh = [&](const std::string& base) {
    std::string name = base;
    for (int k = 1; !names.insert(name).second; ++k) name = str(base, "_", k);
    return name;
  };

  std::vector<std::string> rows;
  for (size_t i = 0; i < bh.size(); ++i) {
    const Band& a = bh[i];
    std::vector<std::string> pieces;
    for (size_t j = 0; j < bw.size(); ++j) {
      const Band& b = bw[j];
      const std::string at = str(".r", i, "c", j);
      // The pixels the rectangle's taps read: all inside the image, by the bands' making.
      const int64_t h0 = a.o0 * win.sh + a.t0 * win.dh - win.pt, h1 = (a.o1 - 1) * win.sh + a.t1 * win.dh - win.pt + 1;
      const int64_t w0 = b.o0 * win.sw + b.t0 * win.dw - win.pl, w1 = (b.o1 - 1) * win.sw + b.t1 * win.dw - win.pl + 1;
      std::string in = n.inputs[0];
      if (h0 != 0 || w0 != 0 || h1 != x[2] || w1 != x[3]) {
        in = g.add_float(n.outputs[0] + at + ".in", {x[0], x[1], h1 - h0, w1 - w0});
        out.push_back(Node{fresh(n.name + at + ".slice"), "Slice",
                           {n.inputs[0], g.add_ints(n.name + at + ".starts", {h0, w0}),
                            g.add_ints(n.name + at + ".ends", {h1, w1}), g.add_ints(n.name + at + ".axes", {2, 3})},
                           {in}, {}});
      }
      const int64_t R = a.t1 - a.t0 + 1, S = b.t1 - b.t0 + 1;
      Node c = n;
      c.name = fresh(n.name + at);
      c.inputs[0] = in;
      c.inputs[1] = taps(a, b);
      c.attrs.erase("auto_pad");
      c.attrs["kernel_shape"] = std::vector<int64_t>{R, S};
      c.attrs["pads"] = std::vector<int64_t>{0, 0, 0, 0};
      // A kernel one tap tall (wide) takes the other axis' dilation: it no longer matters.
      const int64_t dil = R > 1 || S > 1 ? win.dh : 1;
      c.attrs["dilations"] = std::vector<int64_t>{dil, dil};
      c.outputs = {g.add_float(n.outputs[0] + at, {x[0], w[0], a.o1 - a.o0, b.o1 - b.o0})};
      pieces.push_back(c.outputs[0]);
      out.push_back(std::move(c));
    }
    if (pieces.size() == 1) {
      rows.push_back(pieces[0]);
      continue;
    }
    const std::string row = bh.size() == 1 ? n.outputs[0]
                                           : g.add_float(str(n.outputs[0], ".r", i), {x[0], w[0], a.o1 - a.o0, win.ow});
    Node cat{fresh(str(n.name, ".r", i, ".concat")), "Concat", pieces, {row}, {}};
    cat.attrs["axis"] = int64_t{3};
    out.push_back(std::move(cat));
    rows.push_back(row);
  }
  if (rows.size() > 1) {
    Node cat{fresh(n.name + ".concat"), "Concat", rows, {n.outputs[0]}, {}};
    cat.attrs["axis"] = int64_t{2};
    out.push_back(std::move(cat));
  }
  return true;
}

}  // namespace

bool split_conv_regions(Graph& g) {
  const bool changed = expand_nodes(g, split);
  if (changed) drop_unused_values(g);
  return changed;
}

}  // namespace tf::graph
