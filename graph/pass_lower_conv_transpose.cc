// lower-conv-transpose: a ConvTranspose with constant weights becomes a stride-1 convolution
// over the input with zeros inserted between its pixels, which the conv templates (and
// fold-scale-into-conv, transform-conv-layout, tuning) then handle:
//   ConvTranspose(x, w, b) {strides s, dilations d, pads, output_padding, group}
//     -> Reshape x [N, C, H, 1, W, 1] -> Pad (s - 1 zeros after each pixel) -> Reshape
//        [N, C, H s, W s] -> Pad (top d (kh - 1) - pt, bottom d (kh - 1) - pb + op - (s - 1),
//        likewise left and right; negative values crop) -> Conv(w', b) {dilations d, group}
//   with w'[g MG + m, c, r, q] = w[g CG + c, m, kh - 1 - r, kw - 1 - q] (each group's in and out
//   channels swapped, the window flipped). The zeros cost the convolution s_h s_w times the
//   useful work; the gather kernel ConvTranspose compiles to otherwise is far slower (measured
//   in docs/models.md). ConvTransposes with computed weights stay.
#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

bool lower(Graph& g, const Node& n, std::vector<Node>& out) {
  if (n.op != "ConvTranspose" || n.inputs.size() < 2 || !g.is_constant(n.inputs[1])) return false;
  ConvTransposeSpec s = conv_transpose_spec(context(n, g, g.opset));
  const Shape x = g.value(n.inputs[0]).shape;
  const HostTensor& w = *g.value(n.inputs[1]).constant;
  int64_t N = x[0], C = x[1], H = x[2], W = x[3], CG = C / s.group, MG = s.out_channels / s.group;
  auto ints = [&](const std::string& base, std::vector<int64_t> v) { return g.add_ints(n.name + "." + base, std::move(v)); };
  auto value = [&](const std::string& base, const Shape& shape) { return g.add_float(n.outputs[0] + "." + base, shape); };
  std::string at = n.inputs[0];
  if (s.sh > 1 || s.sw > 1) {
    std::string r6 = value("pixels", {N, C, H, 1, W, 1});
    out.push_back(Node{n.name + ".pixels", "Reshape", {at, ints("pixels_shape", {N, C, H, 1, W, 1})}, {r6}, {}});
    std::string z6 = value("zeros", {N, C, H, s.sh, W, s.sw});
    out.push_back(Node{n.name + ".zeros", "Pad",
                       {r6, ints("zeros_pads", {0, 0, 0, 0, 0, 0, 0, 0, 0, s.sh - 1, 0, s.sw - 1})}, {z6}, {}});
    at = value("upsampled", {N, C, H * s.sh, W * s.sw});
    out.push_back(Node{n.name + ".upsampled", "Reshape", {z6, ints("upsampled_shape", {N, C, H * s.sh, W * s.sw})}, {at}, {}});
  }
  // Padding around the zero-inserted input ((H - 1) s + 1 rows; the reshape left s - 1 more).
  int64_t eh = s.dh * (s.kh - 1), ew = s.dw * (s.kw - 1);
  int64_t full_h = (H - 1) * s.sh + 1, full_w = (W - 1) * s.sw + 1;
  int64_t top = eh - s.pt, left = ew - s.pl;
  int64_t bottom = s.oh + eh - full_h - top, right = s.ow + ew - full_w - left;  // output size is exact
  bottom -= s.sh - 1, right -= s.sw - 1;
  Shape padded = {N, C, full_h + s.sh - 1 + top + bottom, full_w + s.sw - 1 + left + right};
  if (top != 0 || left != 0 || bottom != 0 || right != 0) {
    std::string p = value("padded", padded);
    out.push_back(Node{n.name + ".padded", "Pad", {at, ints("pads", {0, 0, top, left, 0, 0, bottom, right})}, {p}, {}});
    at = p;
  }
  // The flipped, channel-swapped weights.
  Shape ws = {s.out_channels, CG, s.kh, s.kw};
  HostTensor wt = HostTensor::floats(ws, std::vector<float>(static_cast<size_t>(num_elements(ws))));
  for (int64_t grp = 0; grp < s.group; ++grp)
    for (int64_t m = 0; m < MG; ++m)
      for (int64_t c = 0; c < CG; ++c)
        for (int64_t r = 0; r < s.kh; ++r)
          for (int64_t q = 0; q < s.kw; ++q)
            wt.f[static_cast<size_t>((((grp * MG + m) * CG + c) * s.kh + r) * s.kw + q)] =
                w.f[static_cast<size_t>((((grp * CG + c) * MG + m) * s.kh + (s.kh - 1 - r)) * s.kw + (s.kw - 1 - q))];
  std::string wname = g.fresh_name(n.inputs[1] + ".as_conv");
  g.values[wname] = Value{wname, DType::F32, ws, std::move(wt)};
  std::vector<std::string> conv_in = {at, wname};
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) conv_in.push_back(n.inputs[2]);
  std::map<std::string, Attr> attrs = {{"dilations", std::vector<int64_t>{s.dh, s.dw}},
                                       {"group", s.group},
                                       {"kernel_shape", std::vector<int64_t>{s.kh, s.kw}}};
  out.push_back(Node{n.name, "Conv", conv_in, {n.outputs[0]}, attrs});
  return true;
}

}  // namespace

bool lower_conv_transpose(Graph& g) {
  bool changed = expand_nodes(g, lower);
  if (changed) drop_unused_values(g);
  return changed;
}

}  // namespace tf::graph
