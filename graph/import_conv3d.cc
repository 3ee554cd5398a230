#include "graph/import_conv3d.h"

#include <algorithm>

#include "compiler/error.h"
#include "graph/import_builder.h"
#include "graph/ops.h"

namespace tf::graph {

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
  const std::vector<int64_t> k = three("kernel_shape", {w[2], w[3], w[4]});
  if (k[0] != w[2] || k[1] != w[3] || k[2] != w[4])
    fail(str("kernel_shape ", shape_str(k), " differs from the weight's ", shape_str(w)));
  const std::vector<int64_t> s = three("strides", {1, 1, 1}), d = three("dilations", {1, 1, 1});
  std::vector<int64_t> p = three("pads", {0, 0, 0, 0, 0, 0});
  const std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  // The depth's pads here; the 2-D convolutions take the height's and width's (and auto_pad).
  int64_t pd0 = p[0], pd1 = p[3];
  const int64_t span = (k[0] - 1) * d[0] + 1;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    int64_t out = (x[2] + s[0] - 1) / s[0];
    int64_t total = std::max<int64_t>(0, (out - 1) * s[0] + span - x[2]);
    pd0 = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    pd1 = total - pd0;
  } else if (auto_pad == "VALID") {
    pd0 = pd1 = 0;
  } else if (auto_pad != "NOTSET") {
    fail(str("auto_pad '", auto_pad, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"));
  }
  const int64_t depth = x[2] + pd0 + pd1;
  if (depth < span)
    fail(str("the window's depth ", span, " is larger than the padded input's ", depth));
  const int64_t dout = (depth - span) / s[0] + 1;
  for (const auto& [name, a] : n.attrs) {
    if (name != "kernel_shape" && name != "strides" && name != "dilations" && name != "pads" &&
        name != "auto_pad" && name != "group") {
      fail(str("attribute '", name, "' is not supported (Conv takes auto_pad, dilations, group, "
               "kernel_shape, pads, strides)"));
    }
  }
  size_t outputs = n.outputs.size();
  while (outputs > 1 && n.outputs[outputs - 1].empty()) --outputs;
  if (outputs != 1) fail(str("has ", outputs, " outputs; Conv has 1"));

  NodeBuilder b(n, g, add);
  std::string xp = n.inputs[0];
  if (pd0 || pd1) {
    xp = b.node("Pad", {xp, b.ints({0, 0, pd0, 0, 0, 0, 0, pd1, 0, 0})});
  }
  std::map<std::string, Attr> attrs2 = {{"kernel_shape", std::vector<int64_t>{k[1], k[2]}},
                                        {"strides", std::vector<int64_t>{s[1], s[2]}},
                                        {"dilations", std::vector<int64_t>{d[1], d[2]}}};
  if (auto_pad == "NOTSET") attrs2["pads"] = std::vector<int64_t>{p[1], p[2], p[4], p[5]};
  else attrs2["auto_pad"] = auto_pad;
  if (n.has("group")) attrs2["group"] = n.get_int("group", 1);
  std::string sum;
  for (int64_t t = 0; t < k[0]; ++t) {
    // The depths tap t reads, one per output depth: t * dilation + j * stride.
    int64_t begin = t * d[0], end = begin + (dout - 1) * s[0] + 1;
    std::string xs = begin == 0 && end == depth && s[0] == 1 ? xp : b.slice(xp, 2, begin, end, s[0]);
    std::string x2 = b.reshape(b.transpose(xs, {0, 2, 1, 3, 4}), {x[0] * dout, x[1], x[3], x[4]});
    std::string w2 = b.reshape(b.slice(n.inputs[1], 2, t, t + 1), {w[0], w[1], w[3], w[4]});
    std::vector<std::string> ins = {x2, w2};
    if (t == 0 && n.inputs.size() > 2 && !n.inputs[2].empty()) ins.push_back(n.inputs[2]);
    std::string y = b.node("Conv", ins, attrs2);
    sum = t == 0 ? y : b.node("Add", {sum, y});
  }
  const Shape y2 = g.value(sum).shape;  // [N * D_out, M, H_out, W_out]
  b.transpose(b.reshape(sum, {x[0], dout, y2[1], y2[2], y2[3]}), {0, 2, 1, 3, 4}, n.outputs[0]);
  return true;
}

}  // namespace tf::graph
