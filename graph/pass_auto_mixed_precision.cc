// auto-mixed-precision (--precision bf16, fp16): a float model's MatMul and Gemm with constant
// weights become MatMulBF16, a product of operands rounded to bfloat16 with float32 sums
// (matmul_bf16, compiler/operators.cc: vdpbf16ps where the CPU has AVX512-BF16), or MatMulFP16
// (the same in IEEE float16: stored in float16, computed in float32, as CPUs without float16
// arithmetic must), the weights converted once at compile time. Everything else keeps float32 (docs/precision.md says what
// and why): the products of two activations (attention's scores and context), whose values
// and the softmax between them are where reduced precision loses most; Softmax, LayerNorm,
// reductions, Pow/Sqrt and the elementwise operators, whose statistics and large-range adds
// are what users report breaking. Convolutions in blocked layouts (ConvNCHWc, group 1, an even
// input block) become ConvNCHWcBF16 (conv2d_nchwc_bf16); depthwise ones stay float32 (each
// output reads 9 values: memory-bound, no dot products to pair).
// Inputs and outputs keep their types (float32), as ONNX Runtime's converter with
// keep_io_types; so does every tensor between kernels (each product converts its input on
// entry). A quantized model (QuantizeLinear/DequantizeLinear) is refused: it already says its
// precision. Not run at --precision fp32 (the default).

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "base/error.h"
#include "compiler/operators.h"
#include "graph/memory_plan.h"
#include "graph/ops.h"
#include "graph/pass.h"
#include "graph/tasks.h"

namespace tf::graph {
namespace {

// The format of op MatMulBF16 / ConvNCHWcBF16 (bfloat16) or MatMulFP16 / ConvNCHWcFP16, or of
// a MatMulTensorCore's weights (its precision: fp16 or bf16).
const HalfPairs& format(const Node& n) {
  if (reads_16_bit_weights(n.op)) {
    const Precision p = tensor_core_precision(n);
    if (p != Precision::Float16 && p != Precision::BFloat16) {
      throw UserError(str(n.where(), ": attribute ", kTensorCorePrecision, " '", n.get_string(kTensorCorePrecision, ""),
                          "' is not fp16 or bf16 (the weights' 16-bit type)"));
    }
    return p == Precision::Float16 ? kF16Pairs : kBF16Pairs;
  }
  return n.op.find("FP16") != std::string::npos ? kF16Pairs : kBF16Pairs;
}
// The 16-bit type a MatMulTensorCore's or ConvTensorCore's weights are stored in (F16, BF16).
DType storage_type(const Node& n) { return &format(n) == &kF16Pairs ? DType::F16 : DType::BF16; }

// Whether node `n` takes data of type t: float32, or for a product of 16-bit weights its
// weights' type too (a value stored so by sixteen-bit-edges).
bool takes_as_data(const Node& n, DType t) {
  return t == DType::F32 || (reads_16_bit_weights(n.op) && t == storage_type(n));
}

// MatMulBF16's parts, checked (each refusal names the node and the value).
struct Parts {
  int64_t M = 1, K = 0, N = 0;
  const HostTensor* w = nullptr;  // [K, N] float32
};

Parts parts(const Node& n, const std::vector<const Value*>& in) {
  auto fail = [&](const std::string& why) { throw UserError(str(n.where(), ": ", why)); };
  Parts p;
  const Shape& x = in[0]->shape;
  if (!takes_as_data(n, in[0]->dtype) || x.size() < 2)
    fail(str("input must be float32 of rank 2 or more, not ", dtype_name(in[0]->dtype), " ", shape_str(x)));
  if (!in[1] || !in[1]->constant || in[1]->dtype != DType::F32 || in[1]->shape.size() != 2 ||
      in[1]->shape[0] != x.back()) {
    fail(str("weight must be a float32 constant of shape [", x.back(), ", N], not ",
             in[1] ? shape_str(in[1]->shape) : "absent"));
  }
  p.w = &*in[1]->constant;
  p.K = x.back();
  p.N = p.w->shape[1];
  for (size_t d = 0; d + 1 < x.size(); ++d) p.M *= x[d];
  return p;
}

std::vector<TypeShape> infer(const OpContext& c) {
  Parts p = parts(c.node, c.inputs);
  format(c.node);  // a MatMulTensorCore's precision, checked
  Shape y = c.in(0).shape;
  y.back() = p.N;
  return {{DType::F32, y}};
}

const char* format_suffix(const HalfPairs& f) { return &f == &kF16Pairs ? "fp16" : "bf16"; }

// As the kernel computes it: both operands rounded to bfloat16 (float16), the exact products
// summed in double (the kernel sums in float32).
std::vector<HostTensor> eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  const HalfPairs& f = format(c.node);
  Parts p = parts(c.node, c.inputs);
  Shape y = in[0]->shape;
  y.back() = p.N;
  HostTensor out = make_like(DType::F32, y);
  const auto K = static_cast<size_t>(p.K), N = static_cast<size_t>(p.N);
  std::vector<double> w(K * N), a(K);
  for (size_t k = 0; k < w.size(); ++k) w[k] = f.round(p.w->f[k]);
  for (size_t i = 0; i < static_cast<size_t>(p.M); ++i) {
    for (size_t k = 0; k < K; ++k) a[k] = f.round(in[0]->f[i * K + k]);
    for (size_t j = 0; j < N; ++j) {
      double sum = 0;
      for (size_t k = 0; k < K; ++k) sum += a[k] * w[k * N + j];
      out.f[i * N + j] = static_cast<float>(sum);
    }
  }
  return {out};
}

AnchorWorkload workload(const Graph& g, const Node& n) {
  OpContext c = context(n, g, g.opset);
  Parts p = parts(n, c.inputs);
  return {str("matmul_", format_suffix(format(n)), "(M=", p.M, ",N=", p.N, ",K=", p.K, ",const_b=1"), ""};
}

// matmul_bf16's B (compiler/operators.cc build_matmul_bf16): the weights rounded to bfloat16
// (matmul_fp16's: float16), two consecutive k of a column in one int32 word (k even in the low
// half; a zero high half past an odd K), the words' bits carried in a float32 constant.
std::vector<HostTensor> constants(const Graph& g, const Node& n) {
  const HalfPairs& f = format(n);
  OpContext c = context(n, g, g.opset);
  Parts p = parts(n, c.inputs);
  const int64_t P = (p.K + 1) / 2;
  std::vector<float> words(static_cast<size_t>(P * p.N));
  for (int64_t q = 0; q < P; ++q) {
    for (int64_t j = 0; j < p.N; ++j) {
      auto w = [&](int64_t k) { return k < p.K ? p.w->f[static_cast<size_t>(k * p.N + j)] : 0.0f; };
      words[static_cast<size_t>(q * p.N + j)] = f.pair(w(2 * q), w(2 * q + 1));
    }
  }
  return {HostTensor::floats({P, p.N}, std::move(words))};
}

// MatMulTensorCore: dense_tc.cuda's product of float32 data and 16-bit weights given N x K
// (compiler/workload.h weight_dtype, trans_b), the data rounded as the tensor cores round it
// at the weights' precision: what eval computes.
AnchorWorkload tensor_core_workload(const Graph& g, const Node& n) {
  OpContext c = context(n, g, g.opset);
  Parts p = parts(n, c.inputs);
  return {str("matmul(M=", p.M, ",N=", p.N, ",K=", p.K, sixteen_bit_types_key(c.inputs[0]->dtype, storage_type(n)), ",trans_b=1"), ""};
}

// `count` values at(0), at(1), ... rounded to format f's 16-bit type, element 2i in the low half
// of word i (a zero high half past an odd count), the words' bits carried in a float32
// constant of ceil(count / 2) values: the bytes of an array of `count` halves.
HostTensor halves_in_words(const HalfPairs& f, int64_t count, const std::function<float(int64_t)>& at) {
  const int64_t words = (count + 1) / 2;
  std::vector<float> bits(static_cast<size_t>(words));
  for (int64_t i = 0; i < words; ++i)
    bits[static_cast<size_t>(i)] = f.pair(at(2 * i), 2 * i + 1 < count ? at(2 * i + 1) : 0.0f);
  return HostTensor::floats({words}, std::move(bits));
}

// Its B: the weights [K, N] as 16-bit values [N][K] (rounded to the type), element 2i in the
// low half of word i, the words' bits carried in a float32 constant of ceil(N K / 2) values
// (bytes exactly those of a [N][K] array of halves, whatever K's parity).
std::vector<HostTensor> tensor_core_constants(const Graph& g, const Node& n) {
  OpContext c = context(n, g, g.opset);
  Parts p = parts(n, c.inputs);
  return {halves_in_words(format(n), p.N * p.K,
                          [&](int64_t e) { return p.w->f[static_cast<size_t>((e % p.K) * p.N + e / p.K)]; })};
}

// ConvTensorCore: a marked group-1 Conv of constant float32 weights [K][C][R][S], computed by
// conv2d_tc.cuda with the weights given in 16 bits (weight_dtype). Inference, evaluation and
// workload are the marked Conv's (its evaluation rounds both operands to the type as the
// tensor cores do), with the weights' type for its precision.
const OpDef& conv() { return *find_op("Conv"); }

void check_tensor_core_conv(const Node& n, const std::vector<const Value*>& in) {
  format(n);  // its precision: fp16 or bf16
  if (in.empty() || !in[0] || !takes_as_data(n, in[0]->dtype))
    throw UserError(str(n.where(), ": input must be float32 or ", dtype_name(storage_type(n)), ", not ",
                        in.empty() || !in[0] ? "absent" : dtype_name(in[0]->dtype)));
  if (n.get_int("group", 1) != 1) throw UserError(str(n.where(), ": group ", n.get_int("group", 1), " is not 1"));
  if (in.size() < 2 || !in[1] || !in[1]->constant || in[1]->dtype != DType::F32 || in[1]->shape.size() != 4)
    throw UserError(str(n.where(), ": weight must be a float32 constant [K, C, R, S]"));
}

// Conv's inference on data of the storage type as on the float32 values it holds.
std::vector<TypeShape> tensor_core_conv_infer(const OpContext& c) {
  check_tensor_core_conv(c.node, c.inputs);
  Value x = c.in(0);
  x.dtype = DType::F32;
  OpContext as_float = c;
  as_float.inputs[0] = &x;
  return conv().infer(as_float);
}

std::vector<HostTensor> tensor_core_conv_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  check_tensor_core_conv(c.node, c.inputs);
  return conv().eval(c, in);
}

AnchorWorkload tensor_core_conv_workload(const Graph& g, const Node& n) {
  AnchorWorkload aw = conv().workload(g, n);
  if (aw.spec.empty()) return aw;
  const std::string marked = str(",precision=", precision_name(tensor_core_precision(n)));
  const size_t at = aw.spec.rfind(marked);
  TF_CHECK(at != std::string::npos && at + marked.size() == aw.spec.size(), n.op, " of workload ", aw.spec);
  aw.spec = aw.spec.substr(0, at) + sixteen_bit_types_key(g.value(n.inputs[0]).dtype, storage_type(n));
  return aw;
}

// Its weights: [K][C][R][S] rounded to the 16-bit type, in that order, element 2i in the low
// half of word i (the bytes of a [K][C][R][S] array of halves), carried in a float32 constant.
std::vector<HostTensor> tensor_core_conv_constants(const Graph& g, const Node& n) {
  OpContext c = context(n, g, g.opset);
  check_tensor_core_conv(n, c.inputs);
  const std::vector<float>& w = c.in(1).constant->f;
  return {halves_in_words(format(n), static_cast<int64_t>(w.size()), [&](int64_t e) { return w[static_cast<size_t>(e)]; })};
}

// ConvNCHWcBF16 (ConvNCHWcFP16): a ConvNCHWc (graph/layout.h; group 1, an even input block,
// constant weights [K/ob][C/ib][R][S][ib][ob]) computed by conv2d_nchwc_bf16 (_fp16).
// Inference, workload and evaluation are ConvNCHWc's, the evaluation on operands rounded to
// bfloat16 (float16).
const OpDef& conv_nchwc() { return *find_op("ConvNCHWc"); }

// Why ConvNCHWc node `n` of data `x` and weight `w` is no ConvNCHWcBF16 ("" when it is one;
// the rest of the shapes are ConvNCHWc's to check).
std::string half_conv_problem(const Node& n, const Value& x, const Value* w) {
  if (n.get_int("group", 1) != 1) return str("group ", n.get_int("group", 1), " is not 1");
  if (x.dtype != DType::F32) return str("input is ", dtype_name(x.dtype), ", not float32");
  if (x.shape.size() == 5 && x.shape[4] % 2 != 0)
    return str("input block ", x.shape[4], " is odd (the kernel reads pairs of channels)");
  if (!w || !w->constant || w->dtype != DType::F32) return "weight must be a float32 constant";
  return "";
}

void check_half_conv(const Node& n, const std::vector<const Value*>& in) {
  if (std::string why = half_conv_problem(n, *in[0], in[1]); !why.empty()) throw UserError(str(n.where(), ": ", why));
}

std::vector<TypeShape> half_conv_infer(const OpContext& c) {
  check_half_conv(c.node, c.inputs);
  return conv_nchwc().infer(c);
}

std::vector<HostTensor> half_conv_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  check_half_conv(c.node, c.inputs);
  const HalfPairs& f = format(c.node);
  HostTensor x = *in[0], w = *in[1];
  for (float& v : x.f) v = f.round(v);
  for (float& v : w.f) v = f.round(v);
  std::vector<const HostTensor*> rounded = in;
  rounded[0] = &x;
  rounded[1] = &w;
  return conv_nchwc().eval(c, rounded);
}

AnchorWorkload half_conv_workload(const Graph& g, const Node& n) {
  AnchorWorkload aw = conv_nchwc_workload(g, n);
  const std::string plain = "conv2d_nchwc(";
  TF_CHECK(aw.spec.rfind(plain, 0) == 0, n.op, " of workload ", aw.spec);
  aw.spec = str("conv2d_nchwc_", format_suffix(format(n)), "(", aw.spec.substr(plain.size()));
  return aw;
}

// conv2d_nchwc_bf16's B: the weights [K/ob][C/ib][R][S][ib][ob] as pairs of input channels
// [K/ob][C/2][R][S][ob], each rounded to bfloat16 (channel 2p in the low half).
std::vector<HostTensor> half_conv_constants(const Graph& g, const Node& n) {
  const HalfPairs& f = format(n);
  OpContext c = context(n, g, g.opset);
  check_half_conv(n, c.inputs);
  const Shape& ws = c.in(1).shape;  // [K/ob][C/ib][R][S][ib][ob]
  const HostTensor& w = *c.in(1).constant;
  const int64_t KO = ws[0], CO = ws[1], R = ws[2], S = ws[3], ib = ws[4], ob = ws[5], C = CO * ib;
  std::vector<float> words(static_cast<size_t>(KO * (C / 2) * R * S * ob));
  for (int64_t ko = 0; ko < KO; ++ko)
    for (int64_t cp = 0; cp < C / 2; ++cp)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t kb = 0; kb < ob; ++kb) {
            auto at = [&](int64_t ch) {
              return w.f[static_cast<size_t>(((((ko * CO + ch / ib) * R + r) * S + s) * ib + ch % ib) * ob + kb)];
            };
            words[static_cast<size_t>((((ko * (C / 2) + cp) * R + r) * S + s) * ob + kb)] = f.pair(at(2 * cp), at(2 * cp + 1));
          }
  return {HostTensor::floats({KO, C / 2, R, S, ob}, std::move(words))};
}

// Whether constant weight `w` has a value float16 cannot hold (past 65504: it would become
// infinite) at `precision`: such a product stays float32 (on tensor cores too).
bool beyond_range(const Value& w, Precision precision) {
  return precision == Precision::Float16 &&
         std::any_of(w.constant->f.begin(), w.constant->f.end(), [](float v) { return std::fabs(v) > 65504.0f; });
}

// A MatMul or Gemm of float32 data x[..., K] (rank 2 or more) and constant float32 weights as
// node `op` of x and the weights [K, N] (a Gemm's bias an Add after it): false, nothing
// appended, for any other product or weights float16 cannot hold at `precision`.
bool weights_product(Graph& g, const Node& n, const std::string& op, Precision precision, std::vector<Node>& out) {
  std::optional<WeightProduct> p = weight_product(g, n);
  if (!p) return false;
  const Value& x = g.value(n.inputs[0]);
  const Value& wv = g.value(n.inputs[1]);
  if (x.dtype != DType::F32 || x.shape.size() < 2 || !wv.constant || wv.dtype != DType::F32 || beyond_range(wv, precision))
    return false;
  const std::string bias = bias_constant(g, n.name, *p);
  const std::string weight =
      p->trans_b ? g.add_constant(n.name + ".weight_kn", weights_kn(*wv.constant, *p)) : n.inputs[1];
  Node m;
  m.name = n.name;
  m.op = op;
  if (n.has(kTensorCorePrecision)) m.attrs[kTensorCorePrecision] = n.attrs.at(kTensorCorePrecision);
  m.inputs = {n.inputs[0], weight};
  if (bias.empty()) {
    m.outputs = n.outputs;
    out.push_back(std::move(m));
  } else {
    Shape y = x.shape;
    y.back() = p->N;
    m.outputs = {g.add_float(n.name + ".product", y)};
    Node add;
    add.name = n.name + ".bias_add";
    add.op = "Add";
    add.inputs = {m.outputs[0], bias};
    add.outputs = n.outputs;
    out.push_back(std::move(m));
    out.push_back(std::move(add));
  }
  return true;
}


// A blocked group-1 convolution with constant weights as ConvNCHWcBF16 (ConvNCHWcFP16); a
// MatMul or Gemm of a float32 input and constant float32 weights [K, N] (Gemm: transB, beta's
// bias of N values as an Add after it; not transA, not alpha != 1) as MatMulBF16 (MatMulFP16).
bool rewrite_precision(Graph& g, const Node& n, std::vector<Node>& out, Precision precision) {
  const char* suffix = precision == Precision::Float16 ? "FP16" : "BF16";
  if (n.op == "ConvNCHWc") {
    const Value& x = g.value(n.inputs[0]);
    if (x.shape.size() != 5 || !half_conv_problem(n, x, &g.value(n.inputs[1])).empty() ||
        beyond_range(g.value(n.inputs[1]), precision))
      return false;
    Node m = n;
    m.op = str("ConvNCHWc", suffix);
    out.push_back(std::move(m));
    ++(precision == Precision::Float16 ? g.fp16_nodes : g.bf16_nodes);
    return true;
  }
  if (!weights_product(g, n, str("MatMul", suffix), precision, out)) return false;
  ++(precision == Precision::Float16 ? g.fp16_nodes : g.bf16_nodes);
  return true;
}

}  // namespace

Precision parse_precision(const std::string& name) {
  if (std::optional<Precision> p = precision_named(name)) return *p;
  throw UserError(str("--precision '", name, "' is not one of fp32, bf16, fp16, tf32"));
}

Precision tensor_core_precision(const Node& n) {
  if (!n.has(kTensorCorePrecision)) return Precision::Float32;
  const std::string name = n.get_string(kTensorCorePrecision, "");
  const std::optional<Precision> p = precision_named(name);
  if (!p || *p == Precision::Float32) {
    throw UserError(str(n.where(), ": attribute ", kTensorCorePrecision, " '", name, "' is not one of tf32, fp16, bf16"));
  }
  return *p;
}

Precision tensor_core_precision(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (n.has(kTensorCorePrecision)) return tensor_core_precision(n);
  }
  return Precision::Float32;
}

bool convert_precision(Graph& g, Precision p, bool tensor_cores) {
  if (p == Precision::Float32) return false;
  if (p == Precision::TF32 && !tensor_cores) {
    throw UserError("--precision tf32 rounds the products as NVIDIA's tensor cores do: it is for cuda targets "
                    "(sm_80 and later); CPUs take bf16 or fp16 (docs/precision.md)");
  }
  // A quantized model already says its precision, product by product: converting what is left
  // would mix three precisions nobody asked for.
  if (!g.qdq.empty()) {
    const auto& [value, q] = *g.qdq.begin();
    throw UserError(str("--precision ", precision_name(p), " converts float models, and this one is "
                        "quantized (", g.quantize_nodes, " QuantizeLinear/DequantizeLinear nodes, e.g. the ",
                        q.quantize ? "QuantizeLinear" : "DequantizeLinear", " writing '", value,
                        "'); compile it without --precision: its int8 products run as int8 kernels (docs/precision.md)"));
  }
  if (tensor_cores) {
    // Every MatMul and Gemm a workload expresses (activations by activations too, as PyTorch's
    // autocast runs attention) and every group-1 convolution, marked: its kernel is
    // dense_tc.cuda's or conv2d_tc.cuda's at this precision. Depthwise and other grouped
    // convolutions stay float32 (memory-bound; no tensor-core template for them).
    bool changed = false;
    for (Node& n : g.nodes) {
      if ((n.op != "MatMul" && n.op != "Gemm" && n.op != "Conv") || n.has(kTensorCorePrecision)) continue;
      const std::string spec = anchor_workload(g, n).spec;
      if (spec.empty() ||
          (n.op == "Conv" && (spec.rfind("conv2d_nchw(", 0) != 0 || n.get_int("group", 1) != 1)))
        continue;
      // Constant weights float16 cannot hold keep their product in float32, as on CPUs.
      if (const Value& w = g.value(n.inputs[1]); w.constant && w.dtype == DType::F32 && beyond_range(w, p)) continue;
      n.attrs[kTensorCorePrecision] = std::string(precision_name(p));
      ++g.tensor_core_nodes;
      changed = true;
    }
    // At fp16 and bf16, a product of constant weights reads them as 16-bit values stored N x K
    // (the type they are rounded to anyway): half the bytes of float32 weights, and both of
    // the kernel's tiles copied asynchronously (dense_tc.cuda, weight_dtype and trans_b).
    if (p == Precision::Float16 || p == Precision::BFloat16) {
      expand_nodes(g, [p](Graph& gg, const Node& n, std::vector<Node>& out) {
        if (!n.has(kTensorCorePrecision)) return false;
        if (n.op != "Conv") return weights_product(gg, n, kTensorCoreMatMul, p, out);
        // Marked convolutions are group 1 (conv2d_nchw); their weights [K][C][R][S] are the
        // GEMM's A as they are (rows K, C R S innermost): stored in 16 bits, nothing transposed.
        const Value& w = gg.value(n.inputs[1]);
        if (!w.constant || w.dtype != DType::F32 || w.shape.size() != 4) return false;
        Node m = n;
        m.op = kTensorCoreConv;
        out.push_back(std::move(m));
        return true;
      });
    }
    return changed;
  }
  return expand_nodes(g, [p](Graph& gg, const Node& n, std::vector<Node>& out) { return rewrite_precision(gg, n, out, p); });
}

bool sixteen_bit_edges(Graph& g, Precision p, bool tensor_cores) {
  if (!tensor_cores || (p != Precision::Float16 && p != Precision::BFloat16)) return false;
  const DType type = p == Precision::Float16 ? DType::F16 : DType::BF16;
  const ValueUses uses(g);
  // The values to store in 16 bits: computed float32 values (no model output, not made by an
  // opaque node, whose kernel could not fuse the Cast: graph/fusion.h joins an elementwise node
  // to any other group, the product's epilogue or a generic kernel's last stage) that products
  // of this precision read where they may read 16-bit values (the data of a product of 16-bit
  // weights, or an operand of a marked MatMul of two activations that a template computes: its
  // workload, 16-bit second operands or both), directly or through a view, and that nothing
  // else reads but elementwise nodes (which widen it).
  // Nor a view (a Reshape: graph/memory_plan.h is_view) of a value that a node a view does not
  // join makes (an anchor, reduction or opaque node: an attention's heads merged back, a
  // LayerNorm's output turned sequence-first): the view costs no kernel, the Cast would.
  auto keeps_float32 = [&](const std::string& v) {
    bool view = false;
    for (auto pr = uses.producer.find(v); pr != uses.producer.end(); pr = uses.producer.find(g.nodes[pr->second].inputs[0])) {
      const Node& n = g.nodes[pr->second];
      if (is_view(g, n)) {
        view = true;
        continue;
      }
      const OpKind k = op_kind(n.op);
      return k == OpKind::Opaque || (view && k != OpKind::Elementwise && k != OpKind::Injective);
    }
    return false;
  };
  auto product_reader = [&](const std::pair<size_t, size_t>& r) {
    const Node& n = g.nodes[r.first];
    return reads_16_bit_input(n, r.second) && tensor_core_precision(n) == p &&
           (reads_16_bit_weights(n.op) || !anchor_workload(g, n).spec.empty());
  };
  // Elementwise readers beside the products (a post-norm transformer's residual Add reading
  // the LayerNorm output its next products read, a ResNet block's output read by the next
  // block's Add) read the 16-bit value through a Cast to float32 just before them, which
  // graph/fusion.h puts in their kernel: the value rounded as PyTorch's .half() rounds it, the
  // producer writing and every reader reading half the bytes.
  auto widening_reader = [&](const std::pair<size_t, size_t>& r) {
    const Node& n = g.nodes[r.first];
    return op_kind(n.op) == OpKind::Elementwise && n.op != "Cast" && n.outputs.size() == 1;
  };
  // A view (graph/memory_plan.h is_view: no kernel) whose output only products of 16-bit
  // weights read passes the 16 bits on, reading and writing them: a post-norm transformer's
  // LayerNorm output turned sequence-first for its Q, K, V product, where a Cast after the view
  // would be a kernel of its own (keeps_float32), and one after the LayerNorm is in its kernel.
  auto view_reader = [&](const std::pair<size_t, size_t>& r) {
    const Node& n = g.nodes[r.first];
    if (r.second != 0 || !is_view(g, n) || n.outputs.size() != 1 || g.is_output(n.outputs[0]))
      return false;
    auto rs = uses.readers.find(n.outputs[0]);
    return rs != uses.readers.end() &&
           std::all_of(rs->second.begin(), rs->second.end(), [&](const auto& q) {
             return product_reader(q) && reads_16_bit_weights(g.nodes[q.first].op);
           });
  };
  std::set<std::string> chosen;
  std::set<std::pair<size_t, size_t>> sixteen_bit_readers;  // the other readers widen
  for (const auto& [v, rs] : uses.readers) {
    auto pr = uses.producer.find(v);
    if (pr == uses.producer.end() || g.is_output(v) || g.value(v).dtype != DType::F32 || keeps_float32(v))
      continue;
    // Each reader classified once: 16 bits (a product or a view before products), widened, or
    // neither (the value stays float32).
    std::vector<std::pair<size_t, size_t>> sixteen;
    bool all = true;
    for (const auto& r : rs) {
      if (product_reader(r) || view_reader(r))
        sixteen.push_back(r);
      else
        all = all && widening_reader(r);
    }
    if (!all || sixteen.empty()) continue;
    chosen.insert(v);
    sixteen_bit_readers.insert(sixteen.begin(), sixteen.end());
  }
  // A view's output whose input is chosen is 16 bits through the view, not by a Cast of its own.
  for (auto v = chosen.begin(); v != chosen.end();) {
    const size_t k = uses.producer.at(*v);
    v = is_view(g, g.nodes[k]) && sixteen_bit_readers.count({k, 0}) ? chosen.erase(v)
                                                                    : std::next(v);
  }
  // A marked MatMul's first operand only with its second (16-bit data times float32 has no
  // kernel): drop such firsts until none is left (each drop may strand another).
  for (bool dropped = true; dropped;) {
    dropped = false;
    for (const Node& n : g.nodes) {
      if (n.op != "MatMul" || !n.has(kTensorCorePrecision)) continue;
      if (chosen.count(n.inputs[0]) && !chosen.count(n.inputs[1])) {
        chosen.erase(n.inputs[0]);
        dropped = true;
      }
    }
  }
  // Storage Casts to insert after each producer, in order, then the widening Casts before
  // their readers (after the node before each: after any storage Cast placed there).
  std::map<size_t, std::vector<Node>> after;
  std::vector<std::pair<size_t, Node>> widening;
  std::set<std::string> node_names;
  for (const Node& n : g.nodes) node_names.insert(n.name);
  for (const std::string& v : chosen) {
    const std::vector<std::pair<size_t, size_t>>& rs = uses.readers.at(v);
    Node cast;
    cast.op = "Cast";
    cast.name = g.fresh_name(v + ".to_" + dtype_name(type));
    cast.inputs = {v};
    cast.outputs = {g.fresh_name(v + "." + dtype_name(type))};
    cast.attrs["to"] = int64_t{type == DType::F16 ? 10 : 16};
    cast.attrs[kStorageCast] = int64_t{1};
    g.values[cast.outputs[0]] = Value{cast.outputs[0], type, g.value(v).shape, std::nullopt};
    for (const auto& [k, i] : rs) {
      if (sixteen_bit_readers.count({k, i})) {
        g.nodes[k].inputs[i] = cast.outputs[0];
        if (is_view(g, g.nodes[k]))
          g.values.at(g.nodes[k].outputs[0]).dtype = type;  // 16 bits through
        continue;
      }
      Node widen;
      widen.op = "Cast";
      widen.inputs = {cast.outputs[0]};
      widen.outputs = {g.fresh_name(v + ".widened")};
      widen.name = widen.outputs[0];  // a fresh value's name; fresh among the nodes too
      for (int suffix = 1; !node_names.insert(widen.name).second; ++suffix)
        widen.name = str(widen.outputs[0], "#", suffix);
      widen.attrs["to"] = int64_t{1};
      g.values[widen.outputs[0]] =
          Value{widen.outputs[0], DType::F32, g.value(v).shape, std::nullopt};
      g.nodes[k].inputs[i] = widen.outputs[0];
      TF_CHECK(k > uses.producer.at(v), "sixteen-bit-edges: a reader of '", v,
               "' before its producer");
      widening.emplace_back(k - 1, std::move(widen));
    }
    after[uses.producer.at(v)].push_back(std::move(cast));
    ++g.sixteen_bit_values;
  }
  for (auto& [k, widen] : widening) after[k].push_back(std::move(widen));
  if (after.empty()) return false;
  insert_after(g, std::move(after));
  return true;
}

void register_precision_ops(std::vector<OpDef>& ops) {
  for (const char* suffix : {"BF16", "FP16"}) {
    // Made by auto-mixed-precision (--precision bf16, fp16): inputs x (float32), weight [K, N]
    // float32.
    ops.push_back({str("MatMul", suffix), 2, 2, infer, eval, nullptr, workload, nullptr, /*linear_cost=*/false});
    describe(ops.back(), OpKind::Anchor);
    ops.back().kernel_constants = constants;
    // Made by auto-mixed-precision from a ConvNCHWc: ConvNCHWc's inputs and attributes.
    ops.push_back({str("ConvNCHWc", suffix), 2, 3, half_conv_infer, half_conv_eval, nullptr, half_conv_workload, nullptr,
                   /*linear_cost=*/false});
    describe(ops.back(), OpKind::Anchor, {"dilations", "group", "pads", "strides"});
    ops.back().bias_axis = OpDef::BiasAxis::BlockedChannel;
    ops.back().kernel_constants = half_conv_constants;
  }
  // Made by auto-mixed-precision for a cuda target at fp16 or bf16 (kTensorCorePrecision):
  // inputs x (float32), weight [K, N] float32; the kernel reads the weights as 16-bit values.
  ops.push_back({kTensorCoreMatMul, 2, 2, infer, eval, nullptr, tensor_core_workload, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor, {kTensorCorePrecision});
  ops.back().kernel_constants = tensor_core_constants;
  // The same for a marked Conv: Conv's inputs (x, weight [K, C, R, S] float32, bias) and
  // attributes.
  ops.push_back({kTensorCoreConv, 2, 3, tensor_core_conv_infer, tensor_core_conv_eval, nullptr, tensor_core_conv_workload,
                 nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", kTensorCorePrecision});
  ops.back().bias_axis = OpDef::BiasAxis::Channel;
  ops.back().kernel_constants = tensor_core_conv_constants;
}

}  // namespace tf::graph
