// auto-mixed-precision (--precision bf16): a float model's MatMul and Gemm with constant
// weights become MatMulBF16, a product of operands rounded to bfloat16 with float32 sums
// (matmul_bf16, compiler/operators.cc: vdpbf16ps where the CPU has AVX512-BF16), the weights
// converted once at compile time. Everything else keeps float32 (docs/precision.md says what
// and why): the products of two activations (attention's scores and context), whose values
// and the softmax between them are where reduced precision loses most; Softmax, LayerNorm,
// reductions, Pow/Sqrt and the elementwise operators, whose statistics and large-range adds
// are what users report breaking; convolutions (no bfloat16 convolution template yet).
// Inputs and outputs keep their types (float32), as ONNX Runtime's converter with
// keep_io_types; so does every tensor between kernels (each product converts its input on
// entry). A MatMul or Gemm that another precision already claims (a QDQ model's QMatMul) is
// not touched. Not run at --precision fp32 (the default).
#include <bit>

#include "base/bfloat16.h"
#include "base/error.h"
#include "graph/ops.h"
#include "graph/pass.h"
#include "graph/tasks.h"

namespace tf::graph {
namespace {

// MatMulBF16's parts, checked (each refusal names the node and the value).
struct Parts {
  int64_t M = 1, K = 0, N = 0;
  const HostTensor* w = nullptr;  // [K, N] float32
};

Parts parts(const Node& n, const std::vector<const Value*>& in) {
  auto fail = [&](const std::string& why) { throw UserError(str(n.where(), ": ", why)); };
  Parts p;
  const Shape& x = in[0]->shape;
  if (in[0]->dtype != DType::F32 || x.size() < 2) fail(str("input must be float32 of rank 2 or more, not ", shape_str(x)));
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
  Shape y = c.in(0).shape;
  y.back() = p.N;
  return {{DType::F32, y}};
}

// As the kernel computes it: both operands rounded to bfloat16, the exact products summed in
// double (the kernel sums in float32).
std::vector<HostTensor> eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  Parts p = parts(c.node, c.inputs);
  Shape y = in[0]->shape;
  y.back() = p.N;
  HostTensor out = make_like(DType::F32, y);
  const auto K = static_cast<size_t>(p.K), N = static_cast<size_t>(p.N);
  std::vector<double> w(K * N), a(K);
  for (size_t k = 0; k < w.size(); ++k) w[k] = round_bf16(p.w->f[k]);
  for (size_t i = 0; i < static_cast<size_t>(p.M); ++i) {
    for (size_t k = 0; k < K; ++k) a[k] = round_bf16(in[0]->f[i * K + k]);
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
  return {str("matmul_bf16(M=", p.M, ",N=", p.N, ",K=", p.K, ",const_b=1"), ""};
}

// matmul_bf16's B (compiler/operators.cc build_matmul_bf16): the weights rounded to bfloat16,
// two consecutive k of a column in one int32 word (k even in the low half; a zero high half
// past an odd K), the words' bits carried in a float32 constant.
std::vector<HostTensor> constants(const Graph& g, const Node& n) {
  OpContext c = context(n, g, g.opset);
  Parts p = parts(n, c.inputs);
  const int64_t P = (p.K + 1) / 2;
  std::vector<float> words(static_cast<size_t>(P * p.N));
  for (int64_t q = 0; q < P; ++q) {
    for (int64_t j = 0; j < p.N; ++j) {
      auto half = [&](int64_t k) -> uint32_t { return k < p.K ? bf16_bits(p.w->f[static_cast<size_t>(k * p.N + j)]) : 0; };
      words[static_cast<size_t>(q * p.N + j)] = std::bit_cast<float>(half(2 * q) | half(2 * q + 1) << 16);
    }
  }
  return {HostTensor::floats({P, p.N}, std::move(words))};
}

// A MatMul or Gemm of a float32 input and constant float32 weights [K, N] (Gemm: transB,
// beta's bias of N values as an Add after it; not transA, not alpha != 1) as MatMulBF16.
bool rewrite(Graph& g, const Node& n, std::vector<Node>& out) {
  std::optional<WeightProduct> p = weight_product(g, n);
  if (!p) return false;
  const Value& x = g.value(n.inputs[0]);
  const Value& wv = g.value(n.inputs[1]);
  if (x.dtype != DType::F32 || x.shape.size() < 2 || !wv.constant || wv.dtype != DType::F32) return false;
  const std::string bias = bias_constant(g, n.name, *p);
  const std::string weight =
      p->trans_b ? g.add_constant(n.name + ".weight_kn", weights_kn(*wv.constant, *p)) : n.inputs[1];
  Node m;
  m.name = n.name;
  m.op = "MatMulBF16";
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
  ++g.bf16_nodes;
  return true;
}

}  // namespace

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "bf16") return Precision::BF16;
  if (name == "fp16")
    throw UserError("--precision fp16 is not implemented yet (bf16 is, on CPUs: docs/precision.md)");
  if (name == "tf32")
    throw UserError("--precision tf32 is for GPU tensor cores, not implemented yet (bf16 is, on CPUs: docs/precision.md)");
  throw UserError(str("--precision '", name, "' is not one of fp32, bf16, fp16, tf32"));
}

bool convert_precision(Graph& g, Precision p) {
  if (p == Precision::Fp32) return false;
  return expand_nodes(g, rewrite);
}

void register_precision_ops(std::vector<OpDef>& ops) {
  // Made by auto-mixed-precision (--precision bf16): inputs x (float32), weight [K, N] float32.
  ops.push_back({"MatMulBF16", 2, 2, infer, eval, nullptr, workload, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Anchor);
  ops.back().kernel_constants = constants;
}

}  // namespace tf::graph
