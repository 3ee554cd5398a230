// Normalizations that ONNX defines as functions of other operators, imported as those operators
// (OpDef::expand), so they compile to the kernels that already exist for them:
//   GroupNormalization (opset 18: scale and bias per group; opset 21: per channel):
//     y = Reshape(LayerNormalization(Reshape(x, [N, G, -1]), axis -1, scale 1)) * scale + bias
//     (PyTorch's exporter writes InstanceNormalization over the same [N, G, -1] view)
//   RMSNormalization (opset 23): y = x / Sqrt(ReduceMean(x * x, axes >= axis) + epsilon) * scale
//   LRN (local response normalization across channels, AlexNet and GoogLeNet of Caffe):
//     y = x / Pow(bias + alpha * AveragePool(x^2 over `size` channels, zeros outside), beta)
//     with the window [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)], as a [size, 1]
//     pool over the channel axis of [N, 1, C, rest] that counts its padding (a sum / size).
// Refused (UserError naming the node): inputs that are not float32, stash_type other than 1
// (stage one in float32, what tunefarm computes in), num_groups that does not divide the
// channels, a scale or bias of another shape than the opset says, an operator used before the
// opset that defines it, LRN's size < 1.
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/import_builder.h"
#include "graph/ops.h"

namespace tf::graph {
namespace {

// The normalizations' common checks: the opset that defines them, one output, stash_type 1.
void check_norm(const Expansion& e, int64_t since) {
  e.since(since);
  e.one_output();
  if (int64_t t = e.n.get_int("stash_type", 1); t != 1)
    e.fail(str("stash_type ", t, " is not supported (1: stage one in float32)"));
}

bool expand_group_norm(const Node& n, ImportSink& s) {
  const Expansion e{n, s};
  check_norm(e, 18);
  const Shape x = e.input(0, "X").shape;
  if (x.size() < 2) e.fail(str("X ", shape_str(x), " must have rank 2 or more ([N, C, ...])"));
  if (!n.has("num_groups")) e.fail("attribute 'num_groups' is required");
  const int64_t groups = n.get_int("num_groups", 0), C = x[1];
  if (groups < 1 || C % groups != 0) e.fail(str("num_groups ", groups, " does not divide the ", C, " channels"));
  const bool per_channel = s.g.opset >= 21;  // opset 18's scale and bias are per group
  const Shape want{per_channel ? C : groups};
  for (size_t k : {size_t{1}, size_t{2}}) {
    const Value& v = e.input(k, k == 1 ? "scale" : "bias");
    if (v.shape != want)
      e.fail(str(k == 1 ? "scale " : "bias ", shape_str(v.shape), " must be ", shape_str(want), " at opset ",
                 s.g.opset, per_channel ? " (one per channel)" : " (one per group; per channel from opset 21)"));
  }
  NodeBuilder b(n, s.g, s.add);
  const int64_t rest = num_elements(x) / std::max<int64_t>(x[0] * groups, 1);
  std::string v = b.reshape(n.inputs[0], {x[0], groups, rest});
  v = b.node("LayerNormalization", {v, b.scalar(1.0f)},
             {{"axis", int64_t{-1}}, {"epsilon", n.get_float("epsilon", 1e-5f)}});
  // The affine step along the axis scale and bias run along: x's channels, or the view's groups.
  if (per_channel) v = b.reshape(v, x);
  Shape param(per_channel ? x.size() - 1 : 2, 1);
  param[0] = want[0];
  v = b.node("Mul", {v, b.reshape(n.inputs[1], param)});
  if (per_channel) {
    b.node("Add", {v, b.reshape(n.inputs[2], param)}, {}, n.outputs[0]);
  } else {
    b.reshape(b.node("Add", {v, b.reshape(n.inputs[2], param)}), x, n.outputs[0]);
  }
  return true;
}

bool expand_rms_norm(const Node& n, ImportSink& s) {
  const Expansion e{n, s};
  check_norm(e, 23);
  const Shape x = e.input(0, "X").shape;
  const Shape scale = e.input(1, "scale").shape;
  const auto rank = static_cast<int64_t>(x.size());
  const int64_t axis = e.axis(n.get_int("axis", -1), x, "X");
  const Shape norm(x.begin() + axis, x.end());
  if (!broadcasts_to(scale, norm)) e.fail(str("scale ", shape_str(scale), " does not broadcast to the normalized shape ", shape_str(norm)));
  NodeBuilder b(n, s.g, s.add);
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d) axes.push_back(d);
  std::string mean = b.reduce("ReduceMean", b.node("Mul", {n.inputs[0], n.inputs[0]}), axes);
  std::string rms = b.node("Sqrt", {b.node("Add", {mean, b.scalar(n.get_float("epsilon", 1e-5f))})});
  b.node("Mul", {b.node("Div", {n.inputs[0], rms}), n.inputs[1]}, {}, n.outputs[0]);
  return true;
}

bool expand_lrn(const Node& n, ImportSink& s) {
  const Expansion e{n, s};
  e.one_output();
  const Shape x = e.input(0, "X").shape;
  if (x.size() < 2) e.fail(str("X ", shape_str(x), " must have rank 2 or more ([N, C, ...])"));
  if (!n.has("size")) e.fail("attribute 'size' is required");
  const int64_t size = n.get_int("size", 0);
  if (size < 1 || size > (int64_t{1} << 20)) e.fail(str("size ", size, " is not in [1, 2^20]"));
  const float alpha = n.get_float("alpha", 1e-4f), beta = n.get_float("beta", 0.75f), bias = n.get_float("bias", 1.0f);
  NodeBuilder b(n, s.g, s.add);
  const int64_t C = x[1], rest = num_elements(x) / std::max<int64_t>(x[0] * C, 1);
  std::string sq = b.reshape(b.node("Mul", {n.inputs[0], n.inputs[0]}), {x[0], 1, C, rest});
  std::string avg = b.node("AveragePool", {sq},
                           {{"kernel_shape", std::vector<int64_t>{size, 1}},
                            {"pads", std::vector<int64_t>{(size - 1) / 2, 0, size / 2, 0}},
                            {"count_include_pad", int64_t{1}}});
  // alpha / size * sum = alpha * the window's mean.
  std::string den = b.node("Add", {b.node("Mul", {b.reshape(avg, x), b.scalar(alpha)}), b.scalar(bias)});
  b.node("Div", {n.inputs[0], b.node("Pow", {den, b.scalar(beta)})}, {}, n.outputs[0]);
  return true;
}

}  // namespace

void register_norm_ops(std::vector<OpDef>& ops) {
  ops.push_back({"GroupNormalization", 3, 3, nullptr, nullptr});
  describe(ops.back(), OpKind::Reduction, {"epsilon", "num_groups", "stash_type"});
  ops.back().expand = expand_group_norm;
  ops.push_back({"RMSNormalization", 2, 2, nullptr, nullptr});
  describe(ops.back(), OpKind::Reduction, {"axis", "epsilon", "stash_type"});
  ops.back().expand = expand_rms_norm;
  ops.push_back({"LRN", 1, 1, nullptr, nullptr});
  describe(ops.back(), OpKind::Reduction, {"alpha", "beta", "bias", "size"});
  ops.back().expand = expand_lrn;
}

}  // namespace tf::graph
