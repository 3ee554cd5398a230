#include "graph/import_quantize.h"

#include <cmath>

#include "base/error.h"
#include "graph/import_builder.h"

namespace tf::graph {
namespace {

// ONNX TensorProto codes of the quantized types tunefarm imports.
constexpr int64_t kOnnxUint8 = 2, kOnnxInt8 = 3;

}  // namespace

bool expand_quantize(const Node& n, ImportSink& sink) {
  Graph& g = sink.g;
  auto fail = [&](const std::string& why) { throw UserError(str(sink.file, ": ", n.where(), ": ", why)); };
  const bool quantize = n.op == "QuantizeLinear";
  const Value& x = g.value(n.inputs[0]);
  const size_t rank = x.shape.size();
  if (n.get_int("block_size", 0) != 0)
    fail(str("block_size ", n.get_int("block_size", 0), " (blocked quantization) is not supported"));
  int64_t axis = n.get_int("axis", 1);
  if (!g.is_constant(n.inputs[1])) {
    fail(str("scale '", n.inputs[1], "' is not a constant (computed scales, as DynamicQuantizeLinear makes, are not "
             "supported)"));
  }
  const HostTensor& scale = *g.value(n.inputs[1]).constant;
  if (scale.dtype != DType::F32) fail(str("scale is ", dtype_name(scale.dtype), "; it must be float32"));
  if (scale.shape.size() > 1) fail(str("scale has shape ", shape_str(scale.shape), "; it must be a scalar or 1-D"));
  for (int64_t k = 0; k < scale.size(); ++k) {
    float s = scale.f[static_cast<size_t>(k)];
    if (!std::isfinite(s) || s <= 0) fail(str("scale ", s, " at index ", k, " is not a positive finite number"));
  }
  const bool per_channel = scale.shape.size() == 1 && scale.size() > 1;
  if (per_channel) {
    if (axis < -static_cast<int64_t>(rank) || axis >= static_cast<int64_t>(rank))
      fail(str("axis ", axis, " is out of range for input of rank ", rank));
    if (axis < 0) axis += static_cast<int64_t>(rank);
    if (scale.size() != x.shape[static_cast<size_t>(axis)]) {
      fail(str("per-channel scale has ", scale.size(), " values for axis ", axis, " of extent ",
               x.shape[static_cast<size_t>(axis)], " (input ", shape_str(x.shape), ")"));
    }
  }
  // The zero point: its type decides QuantizeLinear's range.
  const bool has_zero = n.inputs.size() > 2 && !n.inputs[2].empty();
  Narrow type = Narrow::Uint8;
  bool zero_is_zero = true;
  if (has_zero) {
    if (!g.is_constant(n.inputs[2])) fail(str("zero point '", n.inputs[2], "' is not a constant"));
    const HostTensor& z = *g.value(n.inputs[2]).constant;
    if (z.dtype == DType::I64 && !quantize) {
      type = Narrow::None;  // int32 data (a quantized bias): any integer
    } else if (z.narrow == Narrow::None) {
      fail(str("zero point is ", dtype_name(z.dtype), "; it must be int8 or uint8"));
    } else {
      type = z.narrow;
    }
    if (z.shape != scale.shape && !(z.size() == 1 && scale.size() == 1))
      fail(str("zero point has shape ", shape_str(z.shape), ", scale ", shape_str(scale.shape), "; they must match"));
    for (int64_t k = 0; k < z.size(); ++k) zero_is_zero &= z.as_double(k) == 0;
  }
  if (quantize && n.has("output_dtype")) {
    int64_t want = n.get_int("output_dtype", 0);
    if (want != kOnnxUint8 && want != kOnnxInt8)
      fail(str("output_dtype ", want, " is not supported (2: uint8, 3: int8)"));
    Narrow asked = want == kOnnxUint8 ? Narrow::Uint8 : Narrow::Int8;
    if (has_zero && asked != type) fail(str("output_dtype ", want, " differs from the zero point's type"));
    type = asked;
  }
  if (quantize && x.dtype != DType::F32) fail(str("input is ", dtype_name(x.dtype), "; QuantizeLinear takes float32"));

  NodeBuilder b(n, g, sink.add);
  // A per-channel parameter reshaped to broadcast along the axis: [C, 1, ..., 1].
  auto along_axis = [&](const std::string& v) {
    if (!per_channel) return v;
    Shape s(rank - static_cast<size_t>(axis), 1);
    s[0] = scale.size();
    return b.reshape(v, s);
  };
  auto as_float = [&](const std::string& v) {
    return g.value(v).dtype == DType::F32 ? v : b.node("Cast", {v}, {{"to", int64_t{1}}});
  };
  const std::string& out = n.outputs[0];
  const std::string s = along_axis(n.inputs[1]);
  ++g.quantize_nodes;
  if (quantize) {
    std::string q = b.node("Round", {b.node("Div", {n.inputs[0], s})});
    if (!zero_is_zero) q = b.node("Add", {q, along_axis(as_float(n.inputs[2]))});
    const bool u8 = type == Narrow::Uint8;
    b.node("Clip", {q, b.scalar(u8 ? 0.0f : -128.0f), b.scalar(u8 ? 255.0f : 127.0f)}, {}, out);
    return true;
  }
  std::string v = as_float(n.inputs[0]);
  if (!zero_is_zero) v = b.node("Sub", {v, along_axis(as_float(n.inputs[2]))});
  b.node("Mul", {v, s}, {}, out);
  return true;
}

void register_quantize_ops(std::vector<OpDef>& ops) {
  ops.push_back({"QuantizeLinear", 2, 3, nullptr, nullptr});
  describe(ops.back(), OpKind::Elementwise, {"axis", "block_size", "output_dtype", "saturate"});
  ops.back().expand = expand_quantize;
  ops.push_back({"DequantizeLinear", 2, 3, nullptr, nullptr});
  describe(ops.back(), OpKind::Elementwise, {"axis", "block_size"});
  ops.back().expand = expand_quantize;
}

}  // namespace tf::graph
