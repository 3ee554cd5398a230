// trim-conv-taps: the kernel taps of a Conv that read only padding at every output position
// are dropped. An atrous (dilated) convolution whose rate is the feature map's size or more
// -- DeepLabv3's ASPP at rates 12, 24 and 36 over a 20x20 map (a 320x320 image at output
// stride 16) -- reads nothing but zeros through its outer taps, yet a kernel of the whole
// window multiplies them, over a padded copy of its input 36 pixels wider on each side. The
// weights are sliced to the taps that read the image somewhere and the pads on each side
// reduced by the span of the taps dropped there, so every output is the same sum over the
// same pixels (a dropped tap only ever multiplied zeros); a kernel left one tap wide along an
// axis takes the other axis' dilation there (it no longer matters), so a 3x3 one whose outer
// taps all miss becomes a 1x1 convolution the templates run at full speed. 2-D Convs with
// constant float32 weights that no QDQ record names; an axis whose trimmed pads would be
// negative keeps its taps.
#include <optional>

#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

struct Taps {
  int64_t lo, hi;  // the first and last tap that reads the image at some output position
};

// Along one axis: `in` pixels, `out` outputs, a kernel of `k` taps at `stride` and `dil`,
// `pad` before. Taps between lo and hi read the image somewhere; none do when nullopt.
std::optional<Taps> reading_taps(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t dil, int64_t pad) {
  std::optional<Taps> t;
  for (int64_t r = 0; r < k; ++r) {
    const int64_t first = r * dil - pad;  // the pixel output 0 reads through tap r
    const int64_t o = first >= 0 ? 0 : (-first + stride - 1) / stride;  // the first output inside
    if (o < out && first + o * stride < in) {
      if (!t) t = Taps{r, r};
      t->hi = r;
    }
  }
  return t;
}

bool trim(Graph& g, Node& n) {
  if (n.op != "Conv" || n.inputs.size() < 2) return false;
  const Value& x = g.value(n.inputs[0]);
  if (x.shape.size() != 4 || !plain_conv_weights(g, n)) return false;
  const Value& wv = g.value(n.inputs[1]);
  const Shape w = wv.shape;
  std::vector<int64_t> k = kernel_shape(context(n, g, g.opset), {w[2], w[3]});
  if (k != std::vector<int64_t>{w[2], w[3]}) return false;  // inference reports the mismatch
  const Window win = window_of(context(n, g, g.opset), x.shape, k[0], k[1]);
  std::optional<Taps> th = reading_taps(x.shape[2], win.oh, k[0], win.sh, win.dh, win.pt),
                      tw = reading_taps(x.shape[3], win.ow, k[1], win.sw, win.dw, win.pl);
  if (!th || !tw) return false;  // a kernel that never meets the image: left as it is
  int64_t pt = win.pt - th->lo * win.dh, pb = win.pb - (k[0] - 1 - th->hi) * win.dh;
  int64_t pl = win.pl - tw->lo * win.dw, pr = win.pr - (k[1] - 1 - tw->hi) * win.dw;
  if (pt < 0 || pb < 0) {
    th = Taps{0, k[0] - 1};
    pt = win.pt;
    pb = win.pb;
  }
  if (pl < 0 || pr < 0) {
    tw = Taps{0, k[1] - 1};
    pl = win.pl;
    pr = win.pr;
  }
  const int64_t R = th->hi - th->lo + 1, S = tw->hi - tw->lo + 1;
  if (R == k[0] && S == k[1]) return false;
  n.inputs[1] = g.add_constant(n.inputs[1] + ".taps", conv_weight_taps(*wv.constant, th->lo, R, tw->lo, S));
  n.attrs.erase("auto_pad");
  n.attrs["kernel_shape"] = std::vector<int64_t>{R, S};
  n.attrs["pads"] = std::vector<int64_t>{pt, pl, pb, pr};
  const int64_t dh = R > 1 ? win.dh : (S > 1 ? win.dw : 1), dw = S > 1 ? win.dw : dh;
  n.attrs["dilations"] = std::vector<int64_t>{dh, dw};
  return true;
}

}  // namespace

bool plain_conv_weights(const Graph& g, const Node& n) {
  const Value& w = g.value(n.inputs[1]);
  return w.shape.size() == 4 && w.constant && w.dtype == DType::F32 && w.constant->narrow == Narrow::None &&
         w.constant->f.size() == static_cast<size_t>(num_elements(w.shape)) && !g.qdq.count(n.inputs[1]);
}

HostTensor conv_weight_taps(const HostTensor& w, int64_t r0, int64_t R, int64_t s0, int64_t S) {
  const Shape& s = w.shape;
  std::vector<float> taps(static_cast<size_t>(s[0] * s[1] * R * S));
  for (int64_t o = 0; o < s[0] * s[1]; ++o)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < S; ++c)
        taps[static_cast<size_t>((o * R + r) * S + c)] = w.f[static_cast<size_t>((o * s[2] + r0 + r) * s[3] + s0 + c)];
  return HostTensor::floats({s[0], s[1], R, S}, std::move(taps));
}

bool trim_conv_taps(Graph& g) {
  bool changed = false;
  for (Node& n : g.nodes) changed |= trim(g, n);
  if (changed) drop_unused_values(g);
  return changed;
}

}  // namespace tf::graph
