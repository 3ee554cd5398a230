#include "graph/import_quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>

#include "base/error.h"
#include "graph/import_builder.h"
#include "graph/node_te.h"
#include "graph/te_kit.h"
#include "compiler/operator_table.h"
#include "graph/tasks.h"

namespace tf::graph {
namespace {

// ONNX TensorProto codes of the quantized types tunefarm imports.
constexpr int64_t kOnnxUint8 = 2, kOnnxInt8 = 3;

// The operands after the weight that QMatMul and QConvNCHWc share, for `channels` output
// channels: weight scale (one or one per channel), input scale, input zero point (uint8), bias.
struct QuantOperands {
  std::vector<float> w_scale;  // per channel (one value repeated for a per-tensor scale)
  float x_scale = 1, x_zero = 0;
  const HostTensor* bias = nullptr;

  bool given_u8 = false;  // the input is uint8, already quantized (graph/pass_int8_edges.cc)

  // An input value as DequantizeLinear(QuantizeLinear(x)) gives it (uint8 grid), or as
  // DequantizeLinear gives a uint8 input's.
  double dequantized(double x) const {
    float q = given_u8 ? static_cast<float>(x) : std::clamp(std::nearbyint(static_cast<float>(x) / x_scale) + x_zero, 0.0f, 255.0f);
    return double((q - x_zero) * x_scale);
  }
  // The workload's keys of the input's type: none for a float input quantized on entry.
  const char* type_keys() const { return given_u8 ? ",dtype=uint8,weight_dtype=int8" : ""; }
  // The kernels' parameter input P = {x_scale, x_zero, scale[C], offset[C]}: scale = x_scale *
  // w_scale, offset = bias - x_zero * scale * (the channel's sum of int8 weights, `sums`), which
  // takes the zero point's share out of the integer sum.
  std::vector<float> params(const std::vector<int64_t>& sums) const {
    const size_t C = sums.size();
    std::vector<float> p(2 + 2 * C);
    p[0] = x_scale;
    p[1] = x_zero;
    for (size_t c = 0; c < C; ++c) {
      const double sc = double(x_scale) * w_scale[c];
      p[2 + c] = static_cast<float>(sc);
      p[2 + C + c] = static_cast<float>((bias ? bias->f[c] : 0.0) - double(x_zero) * sc * double(sums[c]));
    }
    return p;
  }
};

// Four int8 values (held as floats) as the bytes of one int32 word, bits carried in a float.
float quad_word(const std::function<float(int64_t)>& value, int64_t count) {
  uint32_t word = 0;
  for (int64_t t = 0; t < count; ++t)
    word |= static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(value(t)))) << (8 * t);
  return std::bit_cast<float>(word);
}

// QMatMul's parts, checked (each refusal names the node and the value).
struct QMatMulParts {
  int64_t M = 1, K = 0, N = 0;
  const HostTensor* w = nullptr;  // [K, N] int8 values
  QuantOperands q;                // per column
};

QuantOperands quant_operands(const Node& n, const std::vector<const Value*>& in, int64_t channels) {
  auto fail = [&](const std::string& why) { throw UserError(str(n.where(), ": ", why)); };
  auto constant = [&](size_t k, const char* what) -> const HostTensor& {
    if (!in[k] || !in[k]->constant || in[k]->dtype != DType::F32) fail(str(what, " (input ", k, ") must be a float constant"));
    return *in[k]->constant;
  };
  auto positive = [&](float v, const char* what) {
    if (!std::isfinite(v) || v <= 0) fail(str(what, " ", v, " is not a positive finite number"));
    return v;
  };
  QuantOperands q;
  const HostTensor& ws = constant(2, "weight scale");
  if (ws.size() != 1 && ws.size() != channels) fail(str("weight scale has ", ws.size(), " values for ", channels, " columns"));
  for (int64_t j = 0; j < channels; ++j)
    q.w_scale.push_back(positive(ws.f[static_cast<size_t>(ws.size() == 1 ? 0 : j)], "weight scale"));
  const HostTensor& xs = constant(3, "input scale");
  const HostTensor& xz = constant(4, "input zero point");
  if (xs.size() != 1 || xz.size() != 1) fail("input scale and zero point must be single values");
  q.x_scale = positive(xs.f[0], "input scale");
  q.x_zero = xz.f[0];
  if (!(q.x_zero >= 0 && q.x_zero <= 255) || q.x_zero != std::nearbyint(q.x_zero))
    fail(str("input zero point ", q.x_zero, " is not an integer in [0, 255]"));
  if (in.size() > 5 && in[5]) {
    q.bias = &constant(5, "bias");
    if (q.bias->size() != channels) fail(str("bias has ", q.bias->size(), " values for ", channels, " columns"));
  }
  return q;
}

QMatMulParts qmatmul_parts(const Node& n, const std::vector<const Value*>& in) {
  auto fail = [&](const std::string& why) { throw UserError(str(n.where(), ": ", why)); };
  QMatMulParts p;
  const Shape& x = in[0]->shape;
  if ((in[0]->dtype != DType::F32 && in[0]->dtype != DType::U8) || x.size() < 2)
    fail(str("input must be float32 or uint8 of rank 2 or more, not ", dtype_name(in[0]->dtype), " ", shape_str(x)));
  if (!in[1] || !in[1]->constant || in[1]->constant->narrow != Narrow::Int8 || in[1]->shape.size() != 2 ||
      in[1]->shape[0] != x.back()) {
    fail(str("weight must be int8 values of shape [", x.back(), ", N], not ", in[1] ? shape_str(in[1]->shape) : "absent"));
  }
  p.w = &*in[1]->constant;
  p.K = x.back();
  p.N = p.w->shape[1];
  for (size_t d = 0; d + 1 < x.size(); ++d) p.M *= x[d];
  p.q = quant_operands(n, in, p.N);
  p.q.given_u8 = in[0]->dtype == DType::U8;
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
      a[static_cast<size_t>(k)] = p.q.dequantized(in[0]->as_double(i * p.K + k));
    }
    for (int64_t j = 0; j < p.N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < p.K; ++k) sum += a[static_cast<size_t>(k)] * (double(p.w->f[static_cast<size_t>(k * p.N + j)]) * p.q.w_scale[static_cast<size_t>(j)]);
      if (p.q.bias) sum += p.q.bias->f[static_cast<size_t>(j)];
      out.f[static_cast<size_t>(i * p.N + j)] = static_cast<float>(sum);
    }
  }
  return {out};
}

AnchorWorkload qmatmul_workload(const Graph& g, const Node& n) {
  OpContext c = context(n, g, g.opset);
  QMatMulParts p = qmatmul_parts(n, c.inputs);
  return {str("qmatmul(M=", p.M, ",N=", p.N, ",K=", p.K, ",const_b=1", p.q.type_keys()), ""};
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
  std::vector<float> words(static_cast<size_t>(Q * p.N));
  std::vector<int64_t> sums(static_cast<size_t>(p.N));
  for (int64_t j = 0; j < p.N; ++j) {
    for (int64_t q = 0; q < Q; ++q) {
      auto w = [&](int64_t t) { return p.w->f[static_cast<size_t>((q * 4 + t) * p.N + j)]; };
      const int64_t count = std::min<int64_t>(4, p.K - q * 4);
      for (int64_t t = 0; t < count; ++t) sums[static_cast<size_t>(j)] += static_cast<int64_t>(w(t));
      words[static_cast<size_t>(q * p.N + j)] = quad_word(w, count);
    }
  }
  return {HostTensor::floats({Q, p.N}, std::move(words)), HostTensor::floats({2 + 2 * p.N}, p.q.params(sums))};
}

// QConvNCHWc's parts, checked: data [N][C/ib][H][W][ib] float or uint8, weight [K][C][R][S]
// int8, the scales and zero point as QMatMul's (per output channel), one pad, stride and
// dilation. QDepthwiseNCHWc's (`depthwise`): weight [C][1][R][S], K = C, ob = ib (the block).
struct QConvParts {
  int64_t N = 0, C = 0, H = 0, W = 0, K = 0, R = 0, S = 0, ib = 0, ob = 0, pad = 0, stride = 1, dilation = 1;
  bool depthwise = false;
  const HostTensor* w = nullptr;
  QuantOperands q;   // per output channel
  std::string spec;  // the qconv2d_nchwc (qdepthwise_conv2d_nchwc) workload, open
  // Weight element (k, c of k's group, r, s).
  float weight(int64_t k, int64_t c, int64_t r, int64_t s) const {
    return w->f[static_cast<size_t>(((k * (depthwise ? 1 : C) + c) * R + r) * S + s)];
  }
};

QConvParts qconv_parts(const Node& n, const std::vector<const Value*>& in, bool depthwise = false) {
  auto fail = [&](const std::string& why) { throw UserError(str(n.where(), ": ", why)); };
  QConvParts p;
  const Shape& x = in[0]->shape;
  if ((in[0]->dtype != DType::F32 && in[0]->dtype != DType::U8) || x.size() != 5)
    fail(str("input must be float32 or uint8 [N][C/b][H][W][b], not ", dtype_name(in[0]->dtype), " ", shape_str(x)));
  for (int64_t d : x) {
    if (d < 1) fail(str("an empty dimension in ", shape_str(x)));
  }
  p.N = x[0], p.ib = x[4], p.C = x[1] * x[4], p.H = x[2], p.W = x[3];
  p.depthwise = depthwise;
  const int64_t group_channels = depthwise ? 1 : p.C;
  if (!in[1] || !in[1]->constant || in[1]->constant->narrow != Narrow::Int8 || in[1]->shape.size() != 4 ||
      in[1]->shape[1] != group_channels || in[1]->shape[0] < 1 || in[1]->shape[2] < 1 || in[1]->shape[3] < 1 ||
      (depthwise && in[1]->shape[0] != p.C)) {
    fail(str("weight must be int8 values of shape [", depthwise ? std::to_string(p.C) : std::string("K"), ", ",
             group_channels, ", R, S], not ", in[1] ? shape_str(in[1]->shape) : "absent"));
  }
  p.w = &*in[1]->constant;
  p.K = p.w->shape[0], p.R = p.w->shape[2], p.S = p.w->shape[3];
  if (depthwise) {
    p.ob = p.ib;
  } else {
    p.ob = n.get_int("oc_block", 0);
    if (p.ob < 1 || p.K % p.ob != 0) fail(str("oc_block ", p.ob, " does not divide the ", p.K, " filters"));
    if (p.ib % 4 != 0) fail(str("input block ", p.ib, " is not a multiple of 4 (the kernel reads quads of channels)"));
  }
  auto same = [&](const char* a, std::vector<int64_t> v) {
    for (int64_t e : v) {
      if (e != v[0]) fail(str(a, " ", shape_str(v), " differ"));
    }
    return v.empty() ? 0 : v[0];
  };
  p.pad = same("pads", n.get_ints("pads", {0, 0, 0, 0}));
  p.stride = same("strides", n.get_ints("strides", {1, 1}));
  p.dilation = same("dilations", n.get_ints("dilations", {1, 1}));
  p.q = quant_operands(n, in, p.K);
  p.q.given_u8 = in[0]->dtype == DType::U8;
  const std::string window = str(",R=", p.R, ",S=", p.S, ",stride=", p.stride, ",pad=", p.pad, ",dilation=", p.dilation);
  p.spec = depthwise ? str("qdepthwise_conv2d_nchwc(N=", p.N, ",C=", p.C, ",H=", p.H, ",W=", p.W, window, ",block=", p.ib,
                           p.q.type_keys())
                     : str("qconv2d_nchwc(N=", p.N, ",C=", p.C, ",H=", p.H, ",W=", p.W, ",K=", p.K, window,
                           ",ic_block=", p.ib, ",oc_block=", p.ob, p.q.type_keys());
  return p;
}

std::vector<TypeShape> qconv_infer(const OpContext& c, bool depthwise = false) {
  QConvParts p = qconv_parts(c.node, c.inputs, depthwise);
  Workload w = parse_workload(p.spec + ")");  // checks the sizes
  const int64_t oh = conv_out(p.H, p.R, p.stride, p.pad, p.dilation), ow = conv_out(p.W, p.S, p.stride, p.pad, p.dilation);
  return {{DType::F32, {p.N, p.K / p.ob, oh, ow, p.ob}}};
}

// The kernel's operands after the data (compiler/operators.cc build_qconv2d_nchwc): the
// weights as quads [K/ob][C/4][R][S][ob], and P as QMatMul's with the zero point's share
// taken over every tap (the padding is the quantized 0.0: the zero point).
std::vector<HostTensor> qconv_operands(const QConvParts& p) {
  const int64_t RS = p.R * p.S;
  if (p.depthwise) {
    // qdepthwise_conv2d_nchwc's weights: int8 [C/b][R][S][b], four bytes to a word.
    std::vector<float> blocked(static_cast<size_t>(p.C * RS));
    std::vector<int64_t> sums(static_cast<size_t>(p.C));
    for (int64_t c = 0; c < p.C; ++c) {
      for (int64_t rs = 0; rs < RS; ++rs) {
        const float v = p.weight(c, 0, rs / p.S, rs % p.S);
        sums[static_cast<size_t>(c)] += static_cast<int64_t>(v);
        blocked[static_cast<size_t>(((c / p.ib) * RS + rs) * p.ib + c % p.ib)] = v;
      }
    }
    const int64_t n = static_cast<int64_t>(blocked.size());
    std::vector<float> words(static_cast<size_t>((n + 3) / 4));
    for (int64_t i = 0; i < n; i += 4)
      words[static_cast<size_t>(i / 4)] = quad_word([&](int64_t t) { return blocked[static_cast<size_t>(i + t)]; }, std::min<int64_t>(4, n - i));
    return {HostTensor::floats({static_cast<int64_t>(words.size())}, std::move(words)),
            HostTensor::floats({2 + 2 * p.C}, p.q.params(sums))};
  }
  std::vector<float> words(static_cast<size_t>(p.K * (p.C / 4) * RS));
  std::vector<int64_t> sums(static_cast<size_t>(p.K));
  for (int64_t k = 0; k < p.K; ++k) {
    for (int64_t cq = 0; cq < p.C / 4; ++cq) {
      for (int64_t rs = 0; rs < RS; ++rs) {
        auto w = [&](int64_t t) { return p.w->f[static_cast<size_t>((k * p.C + cq * 4 + t) * RS + rs)]; };
        for (int64_t t = 0; t < 4; ++t) sums[static_cast<size_t>(k)] += static_cast<int64_t>(w(t));
        words[static_cast<size_t>((((k / p.ob) * (p.C / 4) + cq) * RS + rs) * p.ob + k % p.ob)] = quad_word(w, 4);
      }
    }
  }
  return {HostTensor::floats({p.K / p.ob, p.C / 4, p.R, p.S, p.ob}, std::move(words)),
          HostTensor::floats({2 + 2 * p.K}, p.q.params(sums))};
}

// As DequantizeLinear(QuantizeLinear(x)) -> Conv(., DequantizeLinear(w)) + bias computes it,
// in blocked layouts: the data rounded to the uint8 grid (the padding is 0.0), the products in
// double.
std::vector<HostTensor> qconv_eval(const OpContext& c, const std::vector<const HostTensor*>& in, bool depthwise = false) {
  QConvParts p = qconv_parts(c.node, c.inputs, depthwise);
  HostTensor out = make_like(DType::F32, qconv_infer(c, depthwise)[0].shape);
  const int64_t OH = out.shape[2], OW = out.shape[3];
  auto data = [&](int64_t n, int64_t ch, int64_t h, int64_t x) {
    if (h < 0 || h >= p.H || x < 0 || x >= p.W) return 0.0;
    return p.q.dequantized(in[0]->as_double((((n * (p.C / p.ib) + ch / p.ib) * p.H + h) * p.W + x) * p.ib + ch % p.ib));
  };
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t k = 0; k < p.K; ++k)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double sum = p.q.bias ? p.q.bias->f[static_cast<size_t>(k)] : 0.0;
          const int64_t first = p.depthwise ? k : 0, last = p.depthwise ? k + 1 : p.C;
          for (int64_t ch = first; ch < last; ++ch)
            for (int64_t r = 0; r < p.R; ++r)
              for (int64_t s = 0; s < p.S; ++s) {
                double w = double(p.weight(k, ch - first, r, s)) * p.q.w_scale[static_cast<size_t>(k)];
                sum += data(n, ch, oh * p.stride + r * p.dilation - p.pad, ow * p.stride + s * p.dilation - p.pad) * w;
              }
          out.f[static_cast<size_t>((((n * (p.K / p.ob) + k / p.ob) * OH + oh) * OW + ow) * p.ob + k % p.ob)] =
              static_cast<float>(sum);
        }
  return {out};
}

// QuantizeU8 (made by int8-edges, graph/pass_int8_edges.cc): float x quantized to uint8 with
// attributes scale and zero_point, as the int8 kernels reading it would quantize x on entry
// (ir::quantize_u8: round half to even, saturating, NaN to 0).
struct U8Quantization {
  float scale = 0, zero = 0;
};

U8Quantization u8_quantization(const Node& n) {
  U8Quantization q{n.get_float("scale", 0), static_cast<float>(n.get_int("zero_point", -1))};
  if (!std::isfinite(q.scale) || q.scale <= 0)
    throw UserError(str(n.where(), ": scale ", q.scale, " is not a positive finite number"));
  if (!(q.zero >= 0 && q.zero <= 255)) throw UserError(str(n.where(), ": zero_point ", q.zero, " is not in [0, 255]"));
  return q;
}

std::vector<TypeShape> quantize_u8_infer(const OpContext& c) {
  u8_quantization(c.node);
  if (c.in(0).dtype != DType::F32)
    throw UserError(str(c.node.where(), ": input must be float32, not ", dtype_name(c.in(0).dtype)));
  return {{DType::U8, c.in(0).shape}};
}

std::vector<HostTensor> quantize_u8_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const U8Quantization q = u8_quantization(c.node);
  std::vector<int64_t> out(static_cast<size_t>(in[0]->size()));
  for (size_t k = 0; k < out.size(); ++k) {
    const float v = std::nearbyint(in[0]->f[k] / q.scale) + q.zero;
    out[k] = std::isnan(v) ? 0 : static_cast<int64_t>(std::clamp(v, 0.0f, 255.0f));
  }
  return {HostTensor::ints(in[0]->shape, std::move(out), DType::U8)};
}

std::vector<ir::Tensor> quantize_u8_te(const Graph&, const Node& n, const OpContext&, const std::vector<TeOperand>& in,
                                       const Shape& out, const std::string& name) {
  const U8Quantization q = u8_quantization(n);
  const TeOperand& x = te::need(n, in, 0);
  return {te::elementwise(name, out, [&](const te::Index& i) {
    return ir::quantize_u8(read_broadcast(x, i), ir::f32(q.scale), ir::f32(q.zero));
  })};
}

AnchorWorkload qconv_workload(const Graph& g, const Node& n) {
  return {qconv_parts(n, context(n, g, g.opset).inputs).spec, ""};
}

std::vector<HostTensor> qconv_constants(const Graph& g, const Node& n) {
  return qconv_operands(qconv_parts(n, context(n, g, g.opset).inputs));
}

AnchorWorkload qdepthwise_workload(const Graph& g, const Node& n) {
  return {qconv_parts(n, context(n, g, g.opset).inputs, true).spec, ""};
}

std::vector<HostTensor> qdepthwise_constants(const Graph& g, const Node& n) {
  return qconv_operands(qconv_parts(n, context(n, g, g.opset).inputs, true));
}

// `v` as float32: itself, or a Cast of it (an integer zero point).
std::string as_float(NodeBuilder& b, const Graph& g, const std::string& v) {
  return g.value(v).dtype == DType::F32 ? v : b.node("Cast", {v}, {{"to", int64_t{1}}});
}

// A per-channel parameter `v` of `count` values reshaped to broadcast along `axis` of a value
// of rank `rank`: [count, 1, ..., 1]; a single value as it is.
std::string along_axis(NodeBuilder& b, const std::string& v, int64_t count, size_t rank, int64_t axis) {
  if (count <= 1) return v;
  Shape s(rank - static_cast<size_t>(axis), 1);
  s[0] = count;
  return b.reshape(v, s);
}

}  // namespace

bool expand_quantize(const Node& n, ImportSink& sink) {
  Graph& g = sink.g;
  auto fail = [&](const std::string& why) { throw UserError(str(sink.file, ": ", n.where(), ": ", why)); };
  const bool quantize = n.op == "QuantizeLinear";
  if (n.outputs.size() != 1 || n.outputs[0].empty()) fail(n.outputs.size() > 1 ? "has more than one output" : "has no output");
  const Value& x = g.value(n.inputs[0]);
  const size_t rank = x.shape.size();
  if (n.get_int("block_size", 0) != 0)
    fail(str("block_size ", n.get_int("block_size", 0), " (blocked quantization) is not supported"));
  // QuantizeLinear's precision and DequantizeLinear's output_dtype (opset 23): float32 (1), or
  // 0, the scale's type, which must be float32 (below).
  const char* precision = quantize ? "precision" : "output_dtype";
  if (int64_t p = n.get_int(precision, 0); p != 0 && p != 1)
    fail(str(precision, " ", p, " is not supported (1: float32)"));
  int64_t axis = n.get_int("axis", 1);
  if (!g.is_constant(n.inputs[1])) {
    fail(str("scale '", n.inputs[1], "' is not a constant (computed scales, as DynamicQuantizeLinear makes, are not "
             "supported)"));
  }
  const HostTensor& scale = *g.value(n.inputs[1]).constant;
  if (scale.dtype != DType::F32) fail(str("scale is ", dtype_name(scale.dtype), "; it must be float32"));
  if (scale.shape.size() > 1) fail(str("scale has shape ", shape_str(scale.shape), "; it must be a scalar or 1-D"));
  if (scale.size() == 0) fail("scale is empty");
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
  auto per_axis = [&](const std::string& v) { return along_axis(b, v, per_channel ? scale.size() : 1, rank, axis); };
  const std::string& out = n.outputs[0];
  const std::string s = per_axis(n.inputs[1]);
  ++g.quantize_nodes;
  Graph::Qdq& rec = g.qdq[out];
  rec = {quantize, n.inputs[0], scale.f, std::vector<float>(scale.f.size(), 0.0f), per_channel ? axis : -1, type};
  if (has_zero) {
    const HostTensor& z = *g.value(n.inputs[2]).constant;
    for (int64_t k = 0; k < z.size(); ++k) rec.zero[static_cast<size_t>(k)] = static_cast<float>(z.as_double(k));
  }
  if (quantize) {
    std::string q = b.node("Round", {b.node("Div", {n.inputs[0], s})});
    if (!zero_is_zero) q = b.node("Add", {q, per_axis(as_float(b, g, n.inputs[2]))});
    const bool u8 = type == Narrow::Uint8;
    b.node("Clip", {q, b.scalar(u8 ? 0.0f : -128.0f), b.scalar(u8 ? 255.0f : 127.0f)}, {}, out);
    return true;
  }
  std::string v = as_float(b, g, n.inputs[0]);
  if (!zero_is_zero) v = b.node("Sub", {v, per_axis(as_float(b, g, n.inputs[2]))});
  b.node("Mul", {v, s}, {}, out);
  return true;
}

namespace {

// Adds `node` through its operator's expansion when it has one (QuantizeLinear and
// DequantizeLinear: recorded in Graph::qdq, so fold-qdq sees them), else as it is.
void add_expanded(Node node, ImportSink& sink) {
  if (const OpDef* d = find_op(node.op); d && d->expand && d->expand(node, sink)) return;
  sink.add(std::move(node));
}

// The type (uint8 or int8) of quantized tensor `x` of the com.microsoft operator `n`: its zero
// point's when it has one, else the QuantizeLinear's that made it, else uint8.
Narrow quantized_type(const Graph& g, const std::string& x, const std::string& zero) {
  if (!zero.empty() && g.is_constant(zero) && g.value(zero).constant->narrow != Narrow::None)
    return g.value(zero).constant->narrow;
  if (auto it = g.qdq.find(x); it != g.qdq.end() && it->second.quantize) return it->second.type;
  return Narrow::Uint8;
}

// The com.microsoft operators imported (expand_contrib): the inputs each needs, how many it
// takes, its attributes.
struct MicrosoftOp {
  std::vector<size_t> required;
  int max_inputs;
  std::vector<std::string> attributes;
};
// (Built on first use: the operator registry may be asked during static initialization.)
const std::map<std::string, MicrosoftOp>& microsoft_ops() {
  static const std::map<std::string, MicrosoftOp> ops = {
      {"QLinearAdd", {{0, 1, 3, 4, 6}, 8, {}}},
      {"QLinearMul", {{0, 1, 3, 4, 6}, 8, {}}},
      {"QLinearSigmoid", {{0, 1, 3}, 5, {}}},
      {"QLinearLeakyRelu", {{0, 1, 3}, 5, {"alpha"}}},
      {"QLinearGlobalAveragePool", {{0, 1, 2, 3, 4}, 5, {"channels_last"}}},
      {"QLinearAveragePool",
       {{0, 1, 3}, 5, {"auto_pad", "ceil_mode", "channels_last", "count_include_pad", "kernel_shape", "pads", "strides"}}},
      {"QLinearConcat", {{0, 1, 2, 3, 4}, 1 << 20, {"axis"}}}};
  return ops;
}

// ONNX Runtime's quantized elementwise, pooling and concatenation operators (domain
// com.microsoft, as its QOperator-format quantizer writes them), as the DQ -> float operator ->
// Q they are defined by:
//   QLinearAdd/QLinearMul(A, As, [Az], B, Bs, [Bz], Cs, [Cz]) = Q(DQ(A) op DQ(B), Cs, Cz)
//   QLinearSigmoid/QLinearLeakyRelu(X, Xs, [Xz], Ys, [Yz]) = Q(op(DQ(X)), Ys, Yz)
//   QLinearGlobalAveragePool/QLinearAveragePool(X, Xs, Xz, Ys, Yz) likewise; channels_last=1:
//     X is N x spatial x C (transposed to channels first and back)
//   QLinearConcat(Ys, Yz, (X, Xs, Xz)...) = Q(Concat(DQ(X)...), Ys, Yz)
// A missing output zero point is 0 of the inputs' type. Returns false for other operators.
template <typename Dq, typename Q>
bool expand_contrib(const Node& n, ImportSink& sink, const Dq& dq, const Q& q) {
  auto it = microsoft_ops().find(n.op);
  if (it == microsoft_ops().end()) return false;
  Graph& g = sink.g;
  auto fail = [&](const std::string& why) { throw UserError(str(sink.file, ": ", n.where(), ": ", why)); };
  auto input = [&](size_t k) -> std::string { return k < n.inputs.size() ? n.inputs[k] : std::string(); };
  for (size_t k : it->second.required) {
    if (input(k).empty()) fail(str("input ", k, " is missing"));
  }
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    // Scales and zero points are per tensor here: one value each.
    const bool data = n.op == "QLinearConcat" ? k >= 2 && (k - 2) % 3 == 0
                                             : k == 0 || ((n.op == "QLinearAdd" || n.op == "QLinearMul") && k == 3);
    if (data || input(k).empty()) continue;
    const Value& v = g.value(input(k));
    if (num_elements(v.shape) != 1) fail(str("input ", k, " ('", input(k), "') has shape ", shape_str(v.shape), "; ", n.op,
                                             " takes one scale and one zero point per tensor"));
  }
  NodeBuilder b(n, g, sink.add);
  const Narrow type = n.op == "QLinearConcat" ? quantized_type(g, input(2), input(1))
                                             : quantized_type(g, input(0), input(2));
  if (n.op == "QLinearAdd" || n.op == "QLinearMul") {
    std::string a = dq(input(0), input(1), input(2), 1, "a"), c = dq(input(3), input(4), input(5), 1, "b");
    q(b.node(n.op == "QLinearAdd" ? "Add" : "Mul", {a, c}), input(6), input(7), type);
    return true;
  }
  if (n.op == "QLinearConcat") {
    if ((n.inputs.size() - 2) % 3 != 0) fail(str("has ", n.inputs.size(), " inputs; after Y_scale and Y_zero_point they come as tensor, scale, zero point"));
    std::vector<std::string> parts;
    for (size_t k = 2; k < n.inputs.size(); k += 3) {
      if (input(k).empty() || input(k + 1).empty()) fail(str("input ", input(k).empty() ? k : k + 1, " is missing"));
      parts.push_back(dq(input(k), input(k + 1), input(k + 2), 1, str("x", (k - 2) / 3)));
    }
    q(b.node("Concat", parts, {{"axis", n.get_int("axis", 0)}}), input(0), input(1), type);
    return true;
  }
  std::string x = dq(input(0), input(1), input(2), 1, "x");
  const size_t rank = g.value(x).shape.size();
  const bool channels_last = n.get_int("channels_last", 0) != 0;
  if (channels_last && rank < 3) fail(str("channels_last with an input of rank ", rank, "; it needs N, spatial axes and C"));
  std::vector<int64_t> to_first = {0, static_cast<int64_t>(rank) - 1}, to_last = {0};
  for (size_t d = 1; d + 1 < rank; ++d) to_first.push_back(static_cast<int64_t>(d));
  for (size_t d = 2; d < rank; ++d) to_last.push_back(static_cast<int64_t>(d));
  to_last.push_back(1);
  if (channels_last) x = b.transpose(x, to_first);
  std::string y;
  if (n.op == "QLinearSigmoid") {
    y = b.node("Sigmoid", {x});
  } else if (n.op == "QLinearLeakyRelu") {
    y = b.node("LeakyRelu", {x}, {{"alpha", n.get_float("alpha", 0.01f)}});
  } else if (n.op == "QLinearGlobalAveragePool") {
    y = b.node("GlobalAveragePool", {x});
  } else {
    std::map<std::string, Attr> pool;
    for (const char* a : {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"}) {
      if (auto at = n.attrs.find(a); at != n.attrs.end()) pool[a] = at->second;
    }
    y = b.node("AveragePool", {x}, pool);
  }
  if (channels_last) y = b.transpose(y, to_last);
  q(y, input(3), input(4), type);
  return true;
}

// The QOperator and integer operators ONNX Runtime's quantizer writes, imported as the
// QuantizeLinear/DequantizeLinear arithmetic they are defined by (so fold-qdq makes int8
// kernels of their products, as of a QDQ model's):
//   QLinearMatMul(a, as, az, b, bs, bz, ys, yz) = Q(MatMul(DQ(a), DQ(b)), ys, yz)
//   QLinearConv(x, xs, xz, w, ws, wz, ys, yz[, B]) = Q(Conv(DQ(x), DQ(w), B * xs * ws), ys, yz)
//   MatMulInteger(a, b[, az, bz]) = (a - az) x (b - bz), ConvInteger likewise (int32 results,
//     held as float32 values: exact below 2^24)
//   DynamicQuantizeLinear(x) = y, ys, yz with ys = (max(0, max x) - min(0, min x)) / 255,
//     yz = clip(round(-min(0, min x) / ys), 0, 255), y = clip(round(x / ys) + yz, 0, 255)
bool expand_qoperator(const Node& n, ImportSink& sink) {
  Graph& g = sink.g;
  auto fail = [&](const std::string& why) { throw UserError(str(sink.file, ": ", n.where(), ": ", why)); };
  for (const std::string& o : n.outputs) {
    if (o.empty()) fail("has an unnamed output");
  }
  if (n.outputs.empty()) fail("has no output");
  // The inputs the definitions need (ONNX marks the others optional).
  const size_t required = n.op == "QLinearMatMul" || n.op == "QLinearConv" ? 8 : n.op == "DynamicQuantizeLinear" ? 1 : 2;
  for (size_t k = 0; k < required; ++k) {
    if (k >= n.inputs.size() || n.inputs[k].empty()) fail(str("input ", k, " is missing; ", n.op, " needs ", required));
  }
  NodeBuilder b(n, g, sink.add);
  auto input = [&](size_t k) -> std::string { return k < n.inputs.size() ? n.inputs[k] : std::string(); };
  auto fresh = [&](const std::string& what) { return g.fresh_name(str(n.name, "/", what)); };
  // DequantizeLinear(x, scale, zero) into a new value; per channel along `axis` when the scale
  // has several values.
  auto dq = [&](const std::string& x, const std::string& s, const std::string& z, int64_t axis, const std::string& what) {
    Node d{str(n.name, "/dq_", what), "DequantizeLinear", {x, s}, {fresh(str(what, "_dequantized"))}, {}};
    if (!z.empty()) d.inputs.push_back(z);
    if (g.value(s).shape.size() == 1 && num_elements(g.value(s).shape) > 1) d.attrs["axis"] = axis;
    std::string out = d.outputs[0];
    add_expanded(std::move(d), sink);
    return out;
  };
  // QuantizeLinear into the node's output; of type `type` where it has no zero point to say it.
  auto q = [&](const std::string& x, const std::string& s, const std::string& z, Narrow type = Narrow::Uint8) {
    Node d{str(n.name, "/q"), "QuantizeLinear", {x, s}, {n.outputs[0]}, {}};
    if (!z.empty()) d.inputs.push_back(z);
    if (z.empty() && type == Narrow::Int8) d.attrs["output_dtype"] = kOnnxInt8;
    add_expanded(std::move(d), sink);
  };
  // x - zero (a scalar, or one per row of a 2-D b / per output channel of a weight: `axis`).
  auto minus_zero = [&](const std::string& x, const std::string& z, int64_t axis) {
    if (z.empty()) return as_float(b, g, x);
    const Value& zv = g.value(z);
    const int64_t count = zv.shape.size() == 1 ? num_elements(zv.shape) : 1;
    std::string zf = along_axis(b, as_float(b, g, z), count, g.value(x).shape.size(), axis);
    return b.node("Sub", {as_float(b, g, x), zf});
  };
  std::map<std::string, Attr> conv_attrs;
  for (const char* a : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}) {
    if (auto it = n.attrs.find(a); it != n.attrs.end()) conv_attrs[a] = it->second;
  }
  if (n.op == "QLinearMatMul") {
    std::string p = b.node("MatMul", {dq(input(0), input(1), input(2), 1, "a"), dq(input(3), input(4), input(5), 1, "b")});
    q(p, input(6), input(7));
    return true;
  }
  if (n.op == "QLinearConv") {
    std::vector<std::string> in = {dq(input(0), input(1), input(2), 1, "x"), dq(input(3), input(4), input(5), 0, "w")};
    if (!input(8).empty()) {
      // The int32 bias B, in units of x_scale * w_scale (per output channel).
      const Value& bv = g.value(input(8));
      if (!bv.constant) fail(str("bias '", input(8), "' is not a constant"));
      const HostTensor& xs = *g.value(input(1)).constant;
      const HostTensor& ws = *g.value(input(4)).constant;
      const int64_t K = num_elements(bv.shape);
      if (ws.size() != 1 && ws.size() != K) fail(str("bias has ", K, " values, weight scale ", ws.size()));
      std::vector<float> f(static_cast<size_t>(K));
      for (int64_t k = 0; k < K; ++k)
        f[static_cast<size_t>(k)] = static_cast<float>(bv.constant->as_double(k) * double(xs.f[0]) * ws.f[static_cast<size_t>(ws.size() == 1 ? 0 : k)]);
      in.push_back(g.add_constant(str(n.name, "/bias"), HostTensor::floats({K}, std::move(f))));
    }
    q(b.node("Conv", in, conv_attrs), input(6), input(7));
    return true;
  }
  if (n.op == "MatMulInteger") {
    b.node("MatMul", {minus_zero(input(0), input(2), 0), minus_zero(input(1), input(3), 1)}, {}, n.outputs[0]);
    return true;
  }
  if (n.op == "ConvInteger") {
    b.node("Conv", {minus_zero(input(0), input(2), 1), minus_zero(input(1), input(3), 0)}, conv_attrs, n.outputs[0]);
    return true;
  }
  if (expand_contrib(n, sink, dq, q)) return true;
  // DynamicQuantizeLinear
  if (n.outputs.size() != 3) fail(str("has ", n.outputs.size(), " outputs; it makes y, y_scale and y_zero_point"));
  const std::string x = input(0);
  if (g.value(x).dtype != DType::F32) fail(str("input is ", dtype_name(g.value(x).dtype), "; it must be float32"));
  const std::string zero = b.scalar(0.0f);
  std::string hi = b.node("Max", {b.node("ReduceMax", {x}, {{"keepdims", int64_t{0}}}), zero});
  std::string lo = b.node("Min", {b.node("ReduceMin", {x}, {{"keepdims", int64_t{0}}}), zero});
  std::string scale = b.node("Div", {b.node("Sub", {hi, lo}), b.scalar(255.0f)}, {}, n.outputs[1]);
  std::string zp = b.node("Clip", {b.node("Round", {b.node("Div", {b.node("Neg", {lo}), scale})}), b.scalar(0.0f),
                                   b.scalar(255.0f)},
                          {}, n.outputs[2]);
  b.node("Clip", {b.node("Add", {b.node("Round", {b.node("Div", {x, scale})}), zp}), b.scalar(0.0f), b.scalar(255.0f)},
         {}, n.outputs[0]);
  ++g.quantize_nodes;
  return true;
}

}  // namespace

std::set<std::string> microsoft_quantized_ops() {
  std::set<std::string> names;
  for (const auto& [name, op] : microsoft_ops()) names.insert(name);
  return names;
}

void register_quantize_ops(std::vector<OpDef>& ops) {
  ops.push_back({"QuantizeLinear", 2, 3, nullptr, nullptr});
  describe(ops.back(), OpKind::Elementwise, {"axis", "block_size", "output_dtype", "precision", "saturate"});
  ops.back().expand = expand_quantize;
  ops.push_back({"DequantizeLinear", 2, 3, nullptr, nullptr});
  describe(ops.back(), OpKind::Elementwise, {"axis", "block_size", "output_dtype"});
  ops.back().expand = expand_quantize;
  // ONNX Runtime's QOperator format and dynamic quantization, as Q/DQ arithmetic (always
  // expanded: never in a graph, so their fusion pattern is never asked).
  ops.push_back({"QLinearMatMul", 8, 8, nullptr, nullptr});
  describe(ops.back(), OpKind::Opaque);
  ops.back().expand = expand_qoperator;
  ops.push_back({"QLinearConv", 8, 9, nullptr, nullptr});
  describe(ops.back(), OpKind::Opaque, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  ops.back().expand = expand_qoperator;
  ops.push_back({"MatMulInteger", 2, 4, nullptr, nullptr});
  describe(ops.back(), OpKind::Opaque);
  ops.back().expand = expand_qoperator;
  ops.push_back({"ConvInteger", 2, 4, nullptr, nullptr});
  describe(ops.back(), OpKind::Opaque, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  ops.back().expand = expand_qoperator;
  // com.microsoft (the importer takes these from that domain only).
  for (const auto& [name, op] : microsoft_ops()) {
    ops.push_back({name, 1, op.max_inputs, nullptr, nullptr});
    describe(ops.back(), OpKind::Opaque, op.attributes);
    ops.back().expand = expand_qoperator;
  }
  ops.push_back({"DynamicQuantizeLinear", 1, 1, nullptr, nullptr});
  describe(ops.back(), OpKind::Elementwise);
  ops.back().expand = expand_qoperator;
  // Made by fold-qdq (graph/pass.h): inputs x, weight, weight scale, input scale,
  // input zero point, [bias].
  ops.push_back({"QMatMul", 5, 6, qmatmul_infer, qmatmul_eval, nullptr, qmatmul_workload, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor);
  ops.back().kernel_constants = qmatmul_constants;
  ops.back().uint8_data = true;
  // Made by transform-conv-layout from a QDQ Conv (fold-qdq): inputs x (blocked), weight
  // [K][C][R][S] int8, weight scale, input scale, input zero point, [bias].
  ops.push_back({"QConvNCHWc", 5, 6, [](const OpContext& c) { return qconv_infer(c); },
                 [](const OpContext& c, const std::vector<const HostTensor*>& in) { return qconv_eval(c, in); }, nullptr,
                 qconv_workload, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor, {"dilations", "oc_block", "pads", "strides"});
  ops.back().bias_axis = OpDef::BiasAxis::BlockedChannel;
  ops.back().kernel_constants = qconv_constants;
  ops.back().uint8_data = true;
  // The same of a QDQ depthwise Conv (group = channels): weight [C][1][R][S] int8, the block
  // the input's.
  ops.push_back({"QDepthwiseNCHWc", 5, 6, [](const OpContext& c) { return qconv_infer(c, true); },
                 [](const OpContext& c, const std::vector<const HostTensor*>& in) { return qconv_eval(c, in, true); },
                 nullptr, qdepthwise_workload, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor, {"dilations", "pads", "strides"});
  ops.back().bias_axis = OpDef::BiasAxis::BlockedChannel;
  ops.back().kernel_constants = qdepthwise_constants;
  ops.back().uint8_data = true;
  // Made by int8-edges (graph/pass_int8_edges.cc): a value only int8 kernels read, quantized
  // once (in its producer's epilogue, where it fuses) for all of them.
  ops.push_back({"QuantizeU8", 1, 1, quantize_u8_infer, quantize_u8_eval, quantize_u8_te});
  describe(ops.back(), OpKind::Elementwise, {"scale", "zero_point"});
}

}  // namespace tf::graph
