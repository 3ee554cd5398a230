#include "graph/import_window3d.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "graph/import_builder.h"
#include "graph/ops.h"

namespace tf::graph {
namespace {

// A 3-D window node's attributes, checked, and its depth axis's geometry.
struct Window3d {
  std::vector<int64_t> k, s, d, p;  // kernel, strides, dilations (3 each), pads (6)
  std::string auto_pad;
  int64_t pd0 = 0, pd1 = 0;  // the depth's pads; pd1 includes ceil_mode's overhang
  int64_t pad_end = 0;       // the depth's end pad without the overhang (explicit or auto_pad's)
  int64_t dout = 0;
};

// (Its attributes were checked against the operator's entry, graph/ops.h, before it expands.)
Window3d window_3d(const Node& n, const Shape& x, const std::vector<int64_t>& kernel_fallback,
                   const std::function<void(const std::string&)>& fail) {
  auto three = [&](const char* a, std::vector<int64_t> fallback) {
    std::vector<int64_t> v = n.get_ints(a, fallback);
    size_t want = std::string(a) == "pads" ? 6 : 3;
    if (v.size() != want)
      fail(str(a, " ", shape_str(v), " has ", v.size(), " values; the 3-D input ", shape_str(x), " needs ", want));
    for (int64_t e : v) {
      int64_t lo = std::string(a) == "pads" ? 0 : 1;
      if (e < lo || e > (int64_t{1} << 30)) fail(str(a, " value ", e, " is not in [", lo, ", 2^30]"));
    }
    return v;
  };
  Window3d w;
  if (kernel_fallback.empty() && !n.has("kernel_shape")) fail("attribute 'kernel_shape' is required");
  w.k = three("kernel_shape", kernel_fallback);
  if (w.k[0] > kMaxDepthTaps)
    fail(str("a depth window of ", w.k[0], " taps is more than the ", kMaxDepthTaps, " tunefarm unrolls"));
  w.s = three("strides", {1, 1, 1});
  w.d = three("dilations", {1, 1, 1});
  w.p = three("pads", {0, 0, 0, 0, 0, 0});
  w.auto_pad = n.get_string("auto_pad", "NOTSET");
  w.pd0 = w.p[0];
  w.pd1 = w.p[3];
  const int64_t span = (w.k[0] - 1) * w.d[0] + 1, D = x[2];
  if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
    int64_t out = (D + w.s[0] - 1) / w.s[0];
    int64_t total = std::max<int64_t>(0, (out - 1) * w.s[0] + span - D);
    w.pd0 = w.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    w.pd1 = total - w.pd0;
  } else if (w.auto_pad == "VALID") {
    w.pd0 = w.pd1 = 0;
  } else if (w.auto_pad != "NOTSET") {
    fail(str("auto_pad '", w.auto_pad, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"));
  }
  const int64_t room = D + w.pd0 + w.pd1 - span;
  if (room < 0) fail(str("the window's depth ", span, " is larger than the padded input's ", D + w.pd0 + w.pd1));
  bool ceil_mode = n.get_int("ceil_mode", 0) != 0;
  w.dout = (ceil_mode ? (room + w.s[0] - 1) / w.s[0] : room / w.s[0]) + 1;
  // ceil_mode: the last window must start inside the input or its left padding (as 2-D).
  if (ceil_mode && (w.dout - 1) * w.s[0] >= D + w.pd0) --w.dout;
  w.pad_end = w.pd1;
  w.pd1 += std::max<int64_t>(0, (w.dout - 1) * w.s[0] + span - (D + w.pd0 + w.pd1));
  return w;
}

// The 2-D attributes of a 3-D window node: its height's and width's.
std::map<std::string, Attr> attrs_2d(const Node& n, const Window3d& w, bool dilations) {
  std::map<std::string, Attr> a = {{"kernel_shape", std::vector<int64_t>{w.k[1], w.k[2]}},
                                   {"strides", std::vector<int64_t>{w.s[1], w.s[2]}}};
  if (dilations) a["dilations"] = std::vector<int64_t>{w.d[1], w.d[2]};
  if (w.auto_pad == "NOTSET") a["pads"] = std::vector<int64_t>{w.p[1], w.p[2], w.p[4], w.p[5]};
  else a["auto_pad"] = w.auto_pad;
  for (const char* k : {"group", "ceil_mode", "count_include_pad", "storage_order"}) {
    if (n.has(k)) a[k] = n.get_int(k, 0);
  }
  return a;
}

// Depth tap t's slice of the depth-padded input xp (depth `depth`): one depth per output.
std::string tap(NodeBuilder& b, const std::string& xp, const Window3d& w, int64_t depth, int64_t t) {
  int64_t begin = t * w.d[0], end = begin + (w.dout - 1) * w.s[0] + 1;
  if (begin == 0 && end == depth && w.s[0] == 1) return xp;
  return b.slice(xp, 2, begin, end, w.s[0]);
}

std::string pad_depth(NodeBuilder& b, const std::string& x, const Window3d& w, float value) {
  if (!w.pd0 && !w.pd1) return x;
  std::vector<std::string> ins = {x, b.ints({0, 0, w.pd0, 0, 0, 0, 0, w.pd1, 0, 0})};
  if (value != 0.0f) ins.push_back(b.scalar(value));
  return b.node("Pad", ins);
}

// [N, C, D, H, W] -> [N * D, C, H, W] and back.
std::string depth_into_batch(NodeBuilder& b, const std::string& v, const Shape& s) {
  return b.reshape(b.transpose(v, {0, 2, 1, 3, 4}), {s[0] * s[2], s[1], s[3], s[4]});
}
std::string depth_out_of_batch(NodeBuilder& b, const std::string& v, int64_t n, int64_t depth,
                               const Shape& s2, const std::string& out = "") {
  return b.transpose(b.reshape(v, {n, depth, s2[1], s2[2], s2[3]}), {0, 2, 1, 3, 4}, out);
}

// Conv, ConvTranspose, MaxPool and AveragePool over 1-D inputs [N, C, W] run as 2-D ones of
// height 1: x (and a convolution's weight) reshaped to [N, C, 1, W], the window's attributes
// given a leading 1 (pads 0), and the result reshaped back to the node's output. Returns
// false, adding nothing, for other nodes.
bool add_window_1d_as_2d(const Node& n, Graph& g, const std::string& file, const std::function<void(Node)>& add) {
  bool conv = n.op == "Conv" || n.op == "ConvTranspose";
  if (!conv && n.op != "MaxPool" && n.op != "AveragePool") return false;
  if (n.inputs.empty() || n.inputs[0].empty() || g.value(n.inputs[0]).shape.size() != 3) return false;
  const Shape x = g.value(n.inputs[0]).shape;
  for (const char* a : {"kernel_shape", "strides", "dilations", "pads", "output_padding", "output_shape"}) {
    size_t want = std::string(a) == "pads" ? 2 : 1;
    if (n.has(a) && n.get_ints(a, {}).size() != want)
      throw UserError(str(file, ": ", n.where(), ": ", a, " ", shape_str(n.get_ints(a, {})),
                          " has ", n.get_ints(a, {}).size(), " values; the 1-D input ",
                          shape_str(x), " needs ", want));
  }
  size_t outputs = n.outputs.size();
  while (outputs > 1 && n.outputs[outputs - 1].empty()) --outputs;
  if (outputs != 1)
    throw UserError(str(file, ": ", n.where(), " has ", outputs, " outputs; tunefarm supports 1"));
  // Adds a reshape of `from` to `shape` (a new int64 constant), producing `to`.
  auto reshape = [&](const std::string& from, const std::string& to, const Shape& shape, const char* what) {
    std::string dims = g.add_ints(n.name + "/" + what + "_shape", shape);
    add(Node{n.name + "/" + what, "Reshape", {from, dims}, {to}, {}});
  };
  Node two_d = n;
  two_d.inputs[0] = g.fresh_name(n.inputs[0] + "/2d");
  reshape(n.inputs[0], two_d.inputs[0], {x[0], x[1], 1, x[2]}, "input_2d");
  if (conv && n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const Value& w = g.value(n.inputs[1]);
    if (w.shape.size() != 3)
      throw UserError(str(file, ": ", n.where(), ": weight '", w.name, "' ", shape_str(w.shape),
                          " must have rank 3 for the 1-D input ", shape_str(x)));
    two_d.inputs[1] = g.fresh_name(n.inputs[1] + "/2d");
    Shape s4 = {w.shape[0], w.shape[1], 1, w.shape[2]};
    if (w.constant) {
      HostTensor t = *w.constant;
      t.shape = s4;
      g.values[two_d.inputs[1]] = Value{two_d.inputs[1], w.dtype, s4, std::move(t)};
    } else {
      reshape(n.inputs[1], two_d.inputs[1], s4, "weight_2d");
    }
  }
  auto lead = [&](const char* a, int64_t v) {
    if (n.has(a)) two_d.attrs[a] = std::vector<int64_t>{v, n.get_ints(a, {})[0]};
  };
  lead("kernel_shape", 1);
  lead("strides", 1);
  lead("dilations", 1);
  lead("output_padding", 0);
  lead("output_shape", 1);
  if (n.has("pads")) {
    std::vector<int64_t> p = n.get_ints("pads", {});
    two_d.attrs["pads"] = std::vector<int64_t>{0, p[0], 0, p[1]};
  }
  two_d.outputs = {g.fresh_name(n.outputs[0] + "/2d")};
  std::string y4 = two_d.outputs[0];
  add(std::move(two_d));
  const Shape s = g.value(y4).shape;
  reshape(y4, n.outputs[0], {s[0], s[1], s[3]}, "output_1d");
  return true;
}

// Adds n's expansion to g through `add` when n is a Conv over a rank-5 input and returns
// true; returns false, adding nothing, for any other node.
bool add_conv_3d_as_2d(const Node& n, Graph& g, const std::string& file,
                       const std::function<void(Node)>& add) {
  if (n.op != "Conv" || n.inputs.size() < 2 || n.inputs[0].empty() || n.inputs[1].empty() ||
      g.value(n.inputs[0]).shape.size() != 5) {
    return false;
  }
  auto fail = [&](const std::string& why) { throw UserError(str(file, ": ", n.where(), ": ", why)); };
  const Shape x = g.value(n.inputs[0]).shape;
  const Shape w = g.value(n.inputs[1]).shape;
  if (w.size() != 5)
    fail(str("weight '", n.inputs[1], "' ", shape_str(w), " must have rank 5 for the 3-D input ", shape_str(x)));
  const Window3d win = window_3d(n, x, {w[2], w[3], w[4]}, fail);
  if (win.k[0] != w[2] || win.k[1] != w[3] || win.k[2] != w[4])
    fail(str("kernel_shape ", shape_str(win.k), " differs from the weight's ", shape_str(w)));
  size_t outputs = n.outputs.size();
  while (outputs > 1 && n.outputs[outputs - 1].empty()) --outputs;
  if (outputs != 1) fail(str("has ", outputs, " outputs; Conv has 1"));

  NodeBuilder b(n, g, add);
  const std::string xp = pad_depth(b, n.inputs[0], win, 0.0f);
  const int64_t depth = x[2] + win.pd0 + win.pd1;
  const std::map<std::string, Attr> attrs2 = attrs_2d(n, win, true);
  std::string sum;
  for (int64_t t = 0; t < win.k[0]; ++t) {
    std::string x2 = depth_into_batch(b, tap(b, xp, win, depth, t), {x[0], x[1], win.dout, x[3], x[4]});
    std::string w2 = b.reshape(b.slice(n.inputs[1], 2, t, t + 1), {w[0], w[1], w[3], w[4]});
    std::vector<std::string> ins = {x2, w2};
    if (t == 0 && n.inputs.size() > 2 && !n.inputs[2].empty()) ins.push_back(n.inputs[2]);
    std::string y = b.node("Conv", ins, attrs2);
    sum = t == 0 ? y : b.node("Add", {sum, y});
  }
  depth_out_of_batch(b, sum, x[0], win.dout, g.value(sum).shape, n.outputs[0]);
  return true;
}

// The same for a MaxPool or AveragePool over a rank-5 input.
bool add_pool_3d_as_2d(const Node& n, Graph& g, const std::string& file,
                       const std::function<void(Node)>& add) {
  if ((n.op != "MaxPool" && n.op != "AveragePool") || n.inputs.empty() || n.inputs[0].empty() ||
      g.value(n.inputs[0]).shape.size() != 5) {
    return false;
  }
  auto fail = [&](const std::string& why) { throw UserError(str(file, ": ", n.where(), ": ", why)); };
  const bool is_max = n.op == "MaxPool";
  const Shape x = g.value(n.inputs[0]).shape;
  const Window3d win = window_3d(n, x, {}, fail);
  size_t outputs = n.outputs.size();
  while (outputs > 1 && n.outputs[outputs - 1].empty()) --outputs;
  if (outputs != 1) fail(str("has ", outputs, " outputs; tunefarm supports 1 (no Indices)"));

  NodeBuilder b(n, g, add);
  // Each depth pooled in 2-D, then the depth window's taps combined.
  std::string p2 = b.node(n.op, {depth_into_batch(b, n.inputs[0], x)}, attrs_2d(n, win, is_max || n.has("dilations")));
  const Shape s2 = g.value(p2).shape;  // [N * D, C, H_out, W_out]
  std::string pooled = depth_out_of_batch(b, p2, x[0], x[2], s2);
  const std::string xp = pad_depth(b, pooled, win, is_max ? -std::numeric_limits<float>::infinity() : 0.0f);
  const int64_t depth = x[2] + win.pd0 + win.pd1;
  std::vector<std::string> taps;
  for (int64_t t = 0; t < win.k[0]; ++t) taps.push_back(tap(b, xp, win, depth, t));
  if (is_max) {
    if (taps.size() == 1) b.node("Identity", taps, {}, n.outputs[0]);
    else b.node("Max", taps, {}, n.outputs[0]);
    return true;
  }
  // Each output depth's count of taps: those in the input, or within its explicit padding
  // with count_include_pad (not ceil_mode's overhang), as the 2-D pooling counts.
  const bool count_pad = n.get_int("count_include_pad", 0) != 0;
  std::vector<float> inv(static_cast<size_t>(win.dout));
  for (int64_t od = 0; od < win.dout; ++od) {
    int64_t count = 0;
    for (int64_t t = 0; t < win.k[0]; ++t) {
      int64_t at = od * win.s[0] - win.pd0 + t * win.d[0];
      count += count_pad ? (at < x[2] + win.pad_end) : (at >= 0 && at < x[2]);
    }
    inv[static_cast<size_t>(od)] = 1.0f / static_cast<float>(std::max<int64_t>(count, 1));
  }
  std::string scale = g.add_constant(str(n.name, "/depth_counts"), HostTensor::floats({1, 1, win.dout, 1, 1}, std::move(inv)));
  std::string sum = taps.size() == 1 ? taps[0] : b.node("Sum", taps);
  b.node("Mul", {sum, scale}, {}, n.outputs[0]);
  return true;
}


}  // namespace

bool expand_window(const Node& n, ImportSink& s) {
  if (n.outputs.empty() || n.outputs[0].empty()) throw UserError(str(s.file, ": ", n.where(), " has no output"));
  return add_conv_3d_as_2d(n, s.g, s.file, s.add) || add_pool_3d_as_2d(n, s.g, s.file, s.add) ||
         add_window_1d_as_2d(n, s.g, s.file, s.add);
}

}  // namespace tf::graph
