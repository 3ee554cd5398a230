#include "graph/import_quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "base/error.h"
#include "graph/import_builder.h"
#include "graph/tasks.h"

namespace tf::graph {
namespace {

// ONNX TensorProto codes of the quantized types tunefarm imports.
constexpr int64_t kOnnxUint8 = 2, kOnnxInt8 = 3;

// QMatMul's parts, checked (each refusal names the node and the value).
struct QMatMulParts {
  int64_t M = 1, K = 0, N = 0;
  const HostTensor* w = nullptr;  // [K, N] int8 values
  std::vector<float> w_scale;     // per column (one value repeated for a per-tensor scale)
  float x_scale = 1, x_zero = 0;  // uint8 activations' scale and zero point
  const HostTensor* bias = nullptr;
};

QMatMulParts qmatmul_parts(const Node& n, const std::vector<const Value*>& in) {
  auto fail = [&](const std::string& why) { throw UserError(str(n.where(), ": ", why)); };
  auto constant = [&](size_t k, const char* what) -> const HostTensor& {
    if (!in[k] || !in[k]->constant || in[k]->dtype != DType::F32) fail(str(what, " (input ", k, ") must be a float constant"));
    return *in[k]->constant;
  };
  QMatMulParts p;
  const Shape& x = in[0]->shape;
  if (in[0]->dtype != DType::F32 || x.size() < 2) fail(str("input must be float32 of rank 2 or more, not ", shape_str(x)));
  p.w = &constant(1, "weight");
  if (p.w->narrow != Narrow::Int8 || p.w->shape.size() != 2 || p.w->shape[0] != x.back())
    fail(str("weight must be int8 values of shape [", x.back(), ", N], not ", shape_str(p.w->shape)));
  p.K = x.back();
  p.N = p.w->shape[1];
  for (size_t d = 0; d + 1 < x.size(); ++d) p.M *= x[d];
  auto positive = [&](float v, const char* what) {
    if (!std::isfinite(v) || v <= 0) fail(str(what, " ", v, " is not a positive finite number"));
    return v;
  };
  const HostTensor& ws = constant(2, "weight scale");
  if (ws.size() != 1 && ws.size() != p.N) fail(str("weight scale has ", ws.size(), " values for ", p.N, " columns"));
  for (int64_t j = 0; j < p.N; ++j) p.w_scale.push_back(positive(ws.f[static_cast<size_t>(ws.size() == 1 ? 0 : j)], "weight scale"));
  const HostTensor& xs = constant(3, "input scale");
  const HostTensor& xz = constant(4, "input zero point");
  if (xs.size() != 1 || xz.size() != 1) fail("input scale and zero point must be single values");
  p.x_scale = positive(xs.f[0], "input scale");
  p.x_zero = xz.f[0];
  if (!(p.x_zero >= 0 && p.x_zero <= 255) || p.x_zero != std::nearbyint(p.x_zero))
    fail(str("input zero point ", p.x_zero, " is not an integer in [0, 255]"));
  if (in.size() > 5 && in[5]) {
    p.bias = &constant(5, "bias");
    if (p.bias->size() != p.N) fail(str("bias has ", p.bias->size(), " values for ", p.N, " columns"));
  }
  return p;
}

std::vector<TypeShape> qmatmul_infer(const OpContext& c) {
  QMatMulParts p = qmatmul_parts(c.node, c.inputs);
  Shape y = c.in(0).shape;
  y.back() = p.N;
  return {{DType::F32, y}};
}

// As DequantizeLinear(QuantizeLinear(x)) -> MatMul(., DequantizeLinear(w)) -> + bias computes
// it: the activations rounded to the uint8 grid, the products in double.
std::vector<HostTensor> qmatmul_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  QMatMulParts p = qmatmul_parts(c.node, c.inputs);
  Shape y = in[0]->shape;
  y.back() = p.N;
  HostTensor out = make_like(DType::F32, y);
  std::vector<double> a(static_cast<size_t>(p.K));
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t k = 0; k < p.K; ++k) {
      float q = std::clamp(std::nearbyint(in[0]->f[static_cast<size_t>(i * p.K + k)] / p.x_scale) + p.x_zero, 0.0f, 255.0f);
      a[static_cast<size_t>(k)] = double((q - p.x_zero) * p.x_scale);
    }
    for (int64_t j = 0; j < p.N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < p.K; ++k) sum += a[static_cast<size_t>(k)] * (double(p.w->f[static_cast<size_t>(k * p.N + j)]) * p.w_scale[static_cast<size_t>(j)]);
      if (p.bias) sum += p.bias->f[static_cast<size_t>(j)];
      out.f[static_cast<size_t>(i * p.N + j)] = static_cast<float>(sum);
    }
  }
  return {out};
}

AnchorWorkload qmatmul_workload(const Graph& g, const Node& n) {
  OpContext c = context(n, g, g.opset);
  QMatMulParts p = qmatmul_parts(n, c.inputs);
  return {str("qmatmul(M=", p.M, ",N=", p.N, ",K=", p.K, ",const_b=1"), ""};
}

// The qmatmul workload's operands after A (compiler/operators.cc build_qmatmul): B as int32
// quads of four k (their bits carried in a float32 constant: kernels read the words), and
// P = {x_scale, x_zero, scale[N], offset[N]} with scale = x_scale * w_scale and offset =
// bias - x_zero * scale * (the column's sum of weights), which takes the zero point's share
// out of the integer sum.
std::vector<HostTensor> qmatmul_constants(const Graph& g, const Node& n) {
  OpContext c = context(n, g, g.opset);
  QMatMulParts p = qmatmul_parts(n, c.inputs);
  const int64_t Q = (p.K + 3) / 4;
  std::vector<float> words(static_cast<size_t>(Q * p.N)), params(static_cast<size_t>(2 + 2 * p.N));
  params[0] = p.x_scale;
  params[1] = p.x_zero;
  for (int64_t j = 0; j < p.N; ++j) {
    int64_t colsum = 0;
    for (int64_t q = 0; q < Q; ++q) {
      uint32_t word = 0;
      for (int64_t t = 0; t < 4 && q * 4 + t < p.K; ++t) {
        auto v = static_cast<int64_t>(p.w->f[static_cast<size_t>((q * 4 + t) * p.N + j)]);
        colsum += v;
        word |= static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(v))) << (8 * t);
      }
      words[static_cast<size_t>(q * p.N + j)] = std::bit_cast<float>(word);
    }
    const double sc = double(p.x_scale) * p.w_scale[static_cast<size_t>(j)];
    params[static_cast<size_t>(2 + j)] = static_cast<float>(sc);
    params[static_cast<size_t>(2 + p.N + j)] =
        static_cast<float>((p.bias ? p.bias->f[static_cast<size_t>(j)] : 0.0) - double(p.x_zero) * sc * double(colsum));
  }
  return {HostTensor::floats({Q, p.N}, std::move(words)), HostTensor::floats({2 + 2 * p.N}, std::move(params))};
}

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
  Graph::Qdq& rec = g.qdq[out];
  rec = {quantize, n.inputs[0], scale.f, std::vector<float>(scale.f.size(), 0.0f), per_channel ? axis : -1, type};
  if (has_zero) {
    const HostTensor& z = *g.value(n.inputs[2]).constant;
    for (int64_t k = 0; k < z.size(); ++k) rec.zero[static_cast<size_t>(k)] = static_cast<float>(z.as_double(k));
  }
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
  // Made by fold-qdq-matmuls (graph/pass.h): inputs x, weight, weight scale, input scale,
  // input zero point, [bias].
  ops.push_back({"QMatMul", 5, 6, qmatmul_infer, qmatmul_eval, nullptr, qmatmul_workload, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor);
  ops.back().kernel_constants = qmatmul_constants;
}

}  // namespace tf::graph
