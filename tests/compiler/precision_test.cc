// Element types beyond float32: the IR's integer types, workloads that carry their operand
// types, the int8 matmul kernels on every x86 instruction set this machine runs (VNNI, AVX-VNNI,
// AVX-512 and AVX2 without, SSE), and the typed arguments boards fill (docs/precision.md).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "base/bfloat16.h"
#include "base/error.h"
#include "base/float16.h"
#include "compiler/codegen_llvm.h"
#include "compiler/driver.h"
#include "compiler/ir_printer.h"
#include "compiler/lower.h"
#include "compiler/model_codegen.h"
#include "compiler/schedule_templates.h"
#include "compiler/te.h"
#include "runtime/kernel_library.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {

using ir::Type;

using testing::expect_user_error;

TEST(IrTypes, IntegerTypesPrintAndHaveTheirIdentities) {
  EXPECT_EQ(Type::int8().str(), "int8");
  EXPECT_EQ(Type::uint8().with_lanes(64).str(), "uint8x64");
  EXPECT_EQ(Type::int32().str(), "int32");
  EXPECT_TRUE(Type::uint8().is_int() && Type::uint8().is_uint() && !Type::uint8().is_index());
  EXPECT_TRUE(Type::int64().is_index());
  EXPECT_EQ(Type::int8().bytes(), 1);
  EXPECT_EQ(Type::int32().bytes(), 4);
  // A reduction's identity has its source's type.
  ir::Tensor a = ir::placeholder("a", {8}, Type::int8());
  ir::IterVar k = ir::reduce_axis(8, "k");
  ir::Tensor s = ir::compute("s", {1}, {"i"}, [&](const std::vector<ir::Expr>&) {
    return ir::sum(ir::Cast::make(Type::int32(), ir::read(a, {k.var})), {k});
  }, {k});
  EXPECT_EQ(s->dtype, Type::int32());
  EXPECT_EQ(s->reduce()->identity().type(), Type::int32());
  EXPECT_EQ(ir::Reduce(ir::ReduceKind::Max, ir::read(a, {k.var}), {k.var}).identity().as<ir::IntImm>()->value, -128);
  // Index constants never fold with data constants of another type.
  EXPECT_EQ(ir::as_const_int(ir::IntImm::make_typed(3, Type::int32())), nullptr);
}

TEST(TypedWorkload, DtypeKeysAreCanonicalAndFloat32StaysUnnamed) {
  EXPECT_EQ(parse_workload("matmul(M=2,N=3,K=4)").canonical(), "matmul(M=2,N=3,K=4,epilogue=none)");
  EXPECT_EQ(parse_workload("matmul(M=2,N=3,K=4,dtype=float32)").canonical(), "matmul(M=2,N=3,K=4,epilogue=none)");
  Workload w = parse_workload("matmul(K=4, weight_dtype=int8, M=2, N=3, dtype=uint8)");
  EXPECT_EQ(w.canonical(), "matmul(M=2,N=3,K=4,dtype=uint8,weight_dtype=int8,epilogue=none)");
  EXPECT_EQ(parse_workload(w.canonical()).canonical(), w.canonical());
  EXPECT_EQ(w.types.output(), DType::Int32);
  OpGraph g = build_op(w);
  EXPECT_EQ(g.inputs[0]->dtype, Type::uint8());
  EXPECT_EQ(g.inputs[1]->dtype, Type::int8());
  EXPECT_EQ(g.output->dtype, Type::int32());
}

TEST(TypedWorkload, UnsupportedTypesAreRefusedByName) {
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,dtype=int4)"); },
                    "dtype 'int4' is not one of float32, int8, uint8, int32, float16, bfloat16");
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,dtype=int8)"); },
                    "matmul of int8 is not implemented (matmul takes: float32, uint8 x int8, float32 in tf32, float32 in fp16, "
                    "float32 in bf16, float16, bfloat16, float32 x float16, float32 x bfloat16)");
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,weight_dtype=int8)"); },
                    "matmul of float32 x int8 is not implemented");
  expect_user_error([] { parse_workload("conv2d_nchw(N=1,C=2,H=4,W=4,K=2,R=1,S=1,dtype=uint8,weight_dtype=int8)"); },
                    "conv2d_nchw of uint8 x int8 is not implemented (conv2d_nchw takes: float32, float32 in tf32, "
                    "float32 in fp16, float32 in bf16, float16, bfloat16, float32 x float16, float32 x bfloat16)");
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,dtype=uint8,weight_dtype=int8,epilogue=relu)"); },
                    "epilogue relu on uint8 x int8 operands is not implemented yet");
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,dtype=uint8,weight_dtype=int8,const_b=1)"); },
                    "const_b=1 (a prepacked B) on uint8 x int8 operands is not implemented yet");
  // The int8 products take float data (quantized on entry) or uint8 data; their output is
  // float, so they take epilogues in both.
  expect_user_error([] { parse_workload("qmatmul(M=2,N=3,K=4,dtype=int8)"); },
                    "qmatmul of int8 is not implemented (qmatmul takes: float32, uint8 x int8)");
  Workload q = parse_workload("qconv2d_nchwc(N=1,C=8,H=4,W=4,K=8,R=1,S=1,dtype=uint8,weight_dtype=int8,epilogue=bias_relu)");
  EXPECT_EQ(build_op(q).inputs[0]->dtype, Type::uint8());
  EXPECT_EQ(build_op(q).output->dtype, Type::float32());
}

TEST(TypedArguments, FillCoversEachTypeAndRoundTrips) {
  for (const char* dtype : {"int8", "uint8", "int32"}) {
    std::vector<float> v(4096);
    fill_typed(dtype, v.data(), static_cast<int64_t>(v.size()), 3);
    const bool u8 = std::string(dtype) == "uint8";
    float lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    EXPECT_EQ(lo, u8 ? 0.0f : -128.0f) << dtype;
    EXPECT_EQ(hi, u8 ? 255.0f : 127.0f) << dtype;
    for (float x : v) ASSERT_EQ(x, std::floor(x)) << dtype;
    std::vector<float> w = v;
    store_as(dtype, w.data(), static_cast<int64_t>(w.size()));
    if (std::string(dtype) == "int8") {
      EXPECT_EQ(reinterpret_cast<const int8_t*>(w.data())[5], static_cast<int8_t>(v[5]));
    }
    load_as(dtype, w.data(), static_cast<int64_t>(w.size()));
    EXPECT_EQ(w, v) << dtype;
  }
  EXPECT_EQ(arg_dtype_bytes("int8"), 1);
  EXPECT_EQ(arg_dtype_bytes(""), 4);
  EXPECT_EQ(arg_dtype_bytes("float8"), 0);
  // 16-bit floats: values of the type, passed as their bits.
  for (const char* dtype : {"float16", "bfloat16"}) {
    const bool f16 = std::string(dtype) == "float16";
    EXPECT_EQ(arg_dtype_bytes(dtype), 2);
    std::vector<float> v(4096);
    fill_typed(dtype, v.data(), static_cast<int64_t>(v.size()), 3);
    for (float x : v) ASSERT_EQ(x, f16 ? round_f16(x) : round_bf16(x)) << dtype;
    EXPECT_GT(std::set<float>(v.begin(), v.end()).size(), 1000u) << dtype;
    std::vector<float> w = v;
    store_as(dtype, w.data(), static_cast<int64_t>(w.size()));
    const auto* bits = reinterpret_cast<const uint16_t*>(w.data());
    EXPECT_EQ(bits[5], f16 ? f16_bits(v[5]) : bf16_bits(v[5])) << dtype;
    load_as(dtype, w.data(), static_cast<int64_t>(w.size()));
    EXPECT_EQ(w, v) << dtype;
  }
}

// dtype=float16 / bfloat16: 16-bit operands of their own precision (left out of the canonical
// form), a float32 output, epilogues; other mixes refused by name.
TEST(TypedWorkload, SixteenBitOperandsAreTheirOwnPrecision) {
  Workload w = parse_workload("matmul(M=2,N=3,K=4,dtype=float16,epilogue=bias)");
  EXPECT_EQ(w.canonical(), "matmul(M=2,N=3,K=4,dtype=float16,epilogue=bias)");
  EXPECT_EQ(w.types.precision, Precision::Float16);
  EXPECT_EQ(parse_workload("matmul(M=2,N=3,K=4,dtype=float16,precision=fp16)").canonical(),
            "matmul(M=2,N=3,K=4,dtype=float16,epilogue=none)");
  Workload b = parse_workload("batch_matmul(B=2,M=2,N=3,K=4,dtype=bfloat16)");
  EXPECT_EQ(b.types.precision, Precision::BFloat16);
  EXPECT_EQ(b.types.output(), DType::Float32);
  OpGraph g = build_op(b);
  EXPECT_EQ(g.inputs[0]->dtype, Type::uint16());
  EXPECT_EQ(g.arg_dtype(g.inputs[1]), "bfloat16");
  EXPECT_EQ(g.output->dtype, Type::float32());
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,dtype=float16,precision=bf16)"); },
                    "precision=bf16 rounds float32 operands, and matmul here takes float16");
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,dtype=float16,precision=fp32)"); },
                    "matmul of float16 in fp32 is not implemented");
  // Float32 data times 16-bit weights: the weights' precision (tensor cores only).
  Workload m = parse_workload("matmul(M=2,N=3,K=4,weight_dtype=bfloat16,trans_b=1)");
  EXPECT_EQ(m.canonical(), "matmul(M=2,N=3,K=4,trans_b=1,dtype=float32,weight_dtype=bfloat16,epilogue=none)");
  EXPECT_EQ(parse_workload(m.canonical()).canonical(), m.canonical());
  EXPECT_EQ(m.types.precision, Precision::BFloat16);
  OpGraph mg = build_op(m);
  EXPECT_EQ(mg.inputs[0]->dtype, Type::float32());
  EXPECT_EQ(mg.arg_dtype(mg.inputs[1]), "bfloat16");
  expect_user_error([&] { find_template(m, host_target()); },
                    "no schedule template for matmul of float32 x bfloat16 on llvm targets yet");
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,weight_dtype=float16,precision=bf16)"); },
                    "precision=bf16 rounds float32 operands, and matmul here takes float32 x float16");
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,dtype=float16,weight_dtype=float32)"); },
                    "matmul of float16 x float32 is not implemented");
  expect_user_error([] { parse_workload("depthwise_conv2d_nchw(N=1,C=2,H=4,W=4,R=1,S=1,dtype=float16)"); },
                    "depthwise_conv2d_nchw of float16 is not implemented");
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,dtype=float16,const_b=1)"); },
                    "const_b=1 (a prepacked B) on float16 operands is not implemented yet");
  // trans_b=1: B given as [N][K], for 16-bit operands.
  EXPECT_EQ(parse_workload("matmul(M=2,N=3,K=4,dtype=float16,trans_b=1)").canonical(),
            "matmul(M=2,N=3,K=4,trans_b=1,dtype=float16,epilogue=none)");
  EXPECT_EQ(build_op(parse_workload("batch_matmul(B=5,M=2,N=3,K=4,dtype=float16,trans_b=1)")).inputs[1]->shape,
            (std::vector<int64_t>{5, 3, 4}));
  expect_user_error([] { parse_workload("matmul(M=2,N=3,K=4,trans_b=1)"); },
                    "trans_b=1 (B given as N x K) on float32 operands is not implemented yet");
  expect_user_error(
      [] { parse_workload("matmul(M=2,N=3,K=4,trans_b=1,precision=fp16)"); },
      "trans_b=1 (B given as N x K) on float32 in fp16 operands is not implemented yet");
  // ... and for float32 weights of TF32 products (a model's constant weights at --precision tf32).
  EXPECT_EQ(
      build_op(parse_workload("matmul(M=2,N=3,K=4,trans_b=1,precision=tf32)")).inputs[1]->shape,
      (std::vector<int64_t>{3, 4}));
  expect_user_error([] { parse_workload("batch_matmul(B=1,M=2,N=3,K=4,dtype=float16,trans_b=2)"); },
                    "trans_b=2 is not 0 or 1");
}

// Those of `all` (target, the host feature it needs) this machine can run; none off x86.
std::vector<std::string> runnable(const std::vector<std::pair<std::string, std::string>>& all) {
  Target host = host_target();
  std::vector<std::string> out;
  if (host.arch_name() != "x86_64") return out;
  for (const auto& [t, feature] : all) {
    if (host.has_feature(feature)) out.push_back(t);
  }
  return out;
}

// The x86 instruction sets of the int8 path, those this machine can run.
std::vector<std::string> runnable_x86_targets() {
  return runnable({
      {"llvm -mcpu=icelake-server", "avx512vnni"},          // vpdpbusd zmm
      {"llvm -mcpu=x86-64-v3 -mattr=+avxvnni", "avxvnni"},  // {vex} vpdpbusd ymm
      {"llvm -mcpu=skylake-avx512", "avx512bw"},             // widening, AVX-512
      {"llvm -mcpu=x86-64-v3", "avx2"},                      // widening, AVX2
      {"llvm -mcpu=x86-64", "sse2"},                         // widening, SSE
  });
}

// The instruction sets a matching test compiles its kernels for: all of runnable_x86_targets(),
// or under the sanitizers every second one (the VNNI zmm, widening AVX-512 and SSE paths; the
// release pass runs all five). Each is a full compile per sampled config, 3-6x slower there.
std::vector<std::string> matching_x86_targets() {
  std::vector<std::string> all = runnable_x86_targets(), out;
  for (size_t k = 0; k < all.size(); ++k)
    if (testing::sampled(static_cast<int>(k), 2)) out.push_back(all[k]);
  return out;
}

// Float to data integer conversions saturate (NaN to 0, out of range to the type's bound; int64
// indices: TensorExpressions.GatherByComputedIndexUnderAVectorSelect) on every
// x86 instruction set, and stay whole vectors: LLVM lowers llvm.fptosi.sat lane by lane on x86
// (compares and branches per lane), which once made the float-to-uint8 quantization at an int8
// convolution's entry as slow as its products. Other CPUs keep the intrinsic (one fcvtzs).
TEST(FloatToInteger, ConversionsSaturateAndStayVectors) {
  std::vector<std::string> targets = runnable_x86_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs = {0.0f, -0.0f, 0.4f, -0.6f, 1.5f, 127.0f, 127.9f, 128.0f, -128.0f, -128.9f, -129.0f,
                           255.0f, 255.5f, 256.0f, -1.0f, 2147483520.0f, 2147483648.0f, -2147483648.0f,
                           -2147483904.0f, 9.2233715e18f, 9.2233720e18f, -9.2233720e18f, 1e30f, -1e30f,
                           inf, -inf, std::nanf(""), -std::nanf("")};
  while (xs.size() % 16 != 5) xs.push_back(static_cast<float>(xs.size()) * 37.25f - 300.0f);  // a scalar tail
  const int64_t n = static_cast<int64_t>(xs.size());
  auto saturate = [](float x, double lo, double hi) {
    if (std::isnan(x)) return 0.0;
    return std::trunc(std::clamp(static_cast<double>(x), lo, hi));
  };
  struct Case {
    Type type;
    double lo, hi;
  };
  const std::vector<Case> cases = {{Type::int8(), -128, 127},
                                   {Type::uint8(), 0, 255},
                                   {Type::int32(), -2147483648.0, 2147483647.0}};
  for (const Case& c : cases) {
    ir::Tensor x = ir::placeholder("x", {n});
    ir::Tensor y = ir::compute("y", {n}, {"i"}, [&](const std::vector<ir::Expr>& i) {
      return ir::Cast::make(c.type, ir::read(x, i));
    });
    ir::Schedule s(y);
    auto [o, in] = s[y].split(s[y].axis("i"), 16);
    s[y].vectorize(in);
    auto f = lower(s, {x}, "to_int").func;
    for (const std::string& ts : targets) {
      std::unique_ptr<KernelLibrary> lib = testing::build_for(f, parse_target(ts));
      std::vector<int64_t> out(static_cast<size_t>(n), 0x5A5A5A5A);
      ASSERT_EQ(lib->call({xs.data(), reinterpret_cast<float*>(out.data())}), 0);
      for (int64_t k = 0; k < n; ++k) {
        const size_t u = static_cast<size_t>(k);
        const unsigned char* p = reinterpret_cast<const unsigned char*>(out.data()) + u * c.type.bytes();
        double got = 0;
        if (c.type == Type::int8()) got = *reinterpret_cast<const int8_t*>(p);
        if (c.type == Type::uint8()) got = *p;
        if (c.type == Type::int32()) got = *reinterpret_cast<const int32_t*>(p);
        EXPECT_EQ(got, saturate(xs[u], c.lo, c.hi)) << xs[u] << " to " << c.type.str() << " on " << ts;
      }
    }
    if (c.type == Type::int32() || c.type == Type::uint8()) {
      for (const char* spec : {"llvm -mtriple=x86_64-linux-gnu -mcpu=icelake-server",
                               "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3"}) {
        std::string text = codegen_llvm(f, parse_target(spec), CodegenOutput::Asm).data;
        EXPECT_EQ(text.find("cvttss2si"), std::string::npos) << c.type.str() << " on " << spec << ": a lane-by-lane conversion";
        EXPECT_NE(text.find("vcvttps2dq"), std::string::npos) << c.type.str() << " on " << spec << ": no vector conversion";
      }
    }
  }
  ir::Tensor x = ir::placeholder("x", {n});
  ir::Tensor y = ir::compute("y", {n}, {"i"}, [&](const std::vector<ir::Expr>& i) {
    return ir::Cast::make(Type::int32(), ir::read(x, i));
  });
  ir::Schedule s(y);
  auto [o, in] = s[y].split(s[y].axis("i"), 4);
  s[y].vectorize(in);
  std::string arm = codegen_llvm(lower(s, {x}, "to_int").func,
                                 parse_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"), CodegenOutput::Asm).data;
  EXPECT_NE(arm.find("fcvtzs\tv"), std::string::npos) << arm;
}

class Int8Matmul : public ::testing::TestWithParam<const char*> {};

// Exact: integer products summed in int32 equal the reference's double sums.
TEST_P(Int8Matmul, MatchesTheReferenceExactlyOnEveryInstructionSet) {
  Workload w = parse_workload(GetParam());
  std::vector<std::string> targets = matching_x86_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  uint64_t seed = 1;
  // Under the sanitizers every other instruction set, which ones depending on the shape.
  int sample = static_cast<int>(w.canonical().size());
  for (const std::string& spec : targets) {
    if (!testing::sampled(sample++, 2) && targets.size() > 1) continue;
    Target t = parse_target(spec);
    for (const nlohmann::json& config : testing::sample_configs(w, t, 3)) {
      CompiledKernel k = compile_kernel(w, t, config, "given", "");
      std::unique_ptr<KernelLibrary> lib = testing::build_for(k.lowered.func, t);
      testing::Comparison c = testing::run_and_compare(k.graph, *lib, 11 + seed++);
      EXPECT_TRUE(c.ok()) << w.canonical() << " on " << spec << " config " << config.dump() << ": " << c.str();
      EXPECT_EQ(c.check.max_abs_error, 0.0) << w.canonical() << " on " << spec << " config " << config.dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int8Matmul,
                         ::testing::Values("matmul(M=1,N=1,K=1,dtype=uint8,weight_dtype=int8)",
                                           "matmul(M=16,N=32,K=64,dtype=uint8,weight_dtype=int8)",
                                           "matmul(M=37,N=45,K=22,dtype=uint8,weight_dtype=int8)",
                                           "matmul(M=5,N=100,K=129,dtype=uint8,weight_dtype=int8)"));

// The dot products become the instruction each CPU has: vpdpbusd with AVX512-VNNI and
// AVX-VNNI, usdot on Arm with i8mm, sdot on Arm with only the dot product; a CPU without any
// widens (no dot-product instruction).
TEST(Int8Matmul, DotProductsUseTheTargetsInstruction) {
  Workload w = parse_workload("matmul(M=16,N=64,K=64,dtype=uint8,weight_dtype=int8)");
  auto asm_of = [&](const char* spec) {
    return kernel_text(compile_kernel(w, parse_target(spec), nullptr, "default", ""), EmitKind::Asm);
  };
  EXPECT_NE(asm_of("llvm -mtriple=x86_64-linux-gnu -mcpu=icelake-server").find("vpdpbusd\t%zmm"), std::string::npos);
  EXPECT_NE(asm_of("llvm -mtriple=x86_64-linux-gnu -mcpu=alderlake").find("{vex}\tvpdpbusd"), std::string::npos);
  EXPECT_EQ(asm_of("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512").find("vpdpbusd"), std::string::npos);
  EXPECT_NE(asm_of("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1").find("usdot"), std::string::npos);
  EXPECT_EQ(asm_of("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72").find("usdot"), std::string::npos);
  EXPECT_EQ(asm_of("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72").find("sdot"), std::string::npos);
  // Cortex-A76 (Raspberry Pi 5) has the dot product but not i8mm: sdot, twice.
  EXPECT_NE(asm_of("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76").find("\tsdot\t"), std::string::npos);
  EXPECT_EQ(asm_of("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76").find("usdot"), std::string::npos);
  // The sidecar says each argument's type.
  CompiledKernel k = compile_kernel(w, host_target(), nullptr, "default", "");
  EXPECT_EQ(ir::to_string(k.lowered.func).rfind("func matmul(A: uint8[16, 64], B: int8[64, 64], C: int32[16, 64] out)", 0), 0u);
}

// qmatmul (a quantized model's MatMul: float A quantized on entry, int8 B as quads, scaled per
// column): on every instruction set this machine runs, with B packed by the kernel and given
// packed (a model's constant weights), default and sampled configs. The check measures
// errors relative to the output (integers times the harness's random scales); one quantization
// step off in one element fails it.
class QMatmul : public ::testing::TestWithParam<const char*> {};

// Workload `spec` on each of `targets`, default and sampled configs: every output passes the
// check. `packings`: also with B (its second input) given packed (const_b=1, a model's
// constant weights), which the kernel then reads as given.
void expect_matches_on_targets(const std::string& spec, const std::vector<std::string>& targets, uint64_t seed,
                               bool packings = false) {
  std::vector<std::string> variants = {""};
  if (packings) variants.push_back(",const_b=1");
  for (const std::string& const_b : variants) {
    Workload w = parse_workload(spec.substr(0, spec.size() - 1) + const_b + ")");
    // Under the sanitizers every other instruction set, which ones depending on the shape.
    int sample = static_cast<int>(w.canonical().size());
    for (const std::string& ts : targets) {
      if (!testing::sampled(sample++, 2) && targets.size() > 1) continue;
      Target t = parse_target(ts);
      for (const nlohmann::json& config : testing::sample_configs(w, t, 2)) {
        CompiledKernel k = compile_kernel(w, t, config, "given", "");
        EXPECT_EQ(k.packed.size(), const_b.empty() ? 0u : 1u) << w.canonical();
        std::unique_ptr<KernelLibrary> lib = testing::build_for(k.lowered.func, t);
        testing::Comparison c = testing::run_and_compare(k.graph, *lib, seed++, k.packed);
        EXPECT_TRUE(c.ok()) << w.canonical() << " on " << ts << " config " << config.dump() << ": " << c.str();
      }
    }
  }
}

TEST_P(QMatmul, MatchesTheReferenceOnEveryInstructionSet) {
  std::vector<std::string> targets = matching_x86_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  expect_matches_on_targets(GetParam(), targets, 3, /*packings=*/true);
}

INSTANTIATE_TEST_SUITE_P(Shapes, QMatmul,
                         ::testing::Values("qmatmul(M=1,N=1,K=1)", "qmatmul(M=16,N=32,K=64)",
                                           "qmatmul(M=37,N=45,K=22,epilogue=bias_relu)", "qmatmul(M=5,N=100,K=129)",
                                           // A given as uint8 (int8-edges): read as it is, K padded.
                                           "qmatmul(M=7,N=33,K=22,dtype=uint8,weight_dtype=int8)",
                                           "qmatmul(M=16,N=64,K=64,dtype=uint8,weight_dtype=int8,epilogue=bias_relu)"));

// qconv2d_nchwc (a quantized model's Conv in blocked layouts): the same on every instruction
// set, padded and strided windows, default and sampled configs.
class QConv : public ::testing::TestWithParam<const char*> {};

TEST_P(QConv, MatchesTheReferenceOnEveryInstructionSet) {
  std::vector<std::string> targets = runnable_x86_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  expect_matches_on_targets(GetParam(), targets, 21);
}

INSTANTIATE_TEST_SUITE_P(Shapes, QConv,
                         ::testing::Values("qconv2d_nchwc(N=1,C=8,H=5,W=7,K=16,R=3,S=3,pad=1,ic_block=8,oc_block=16)",
                                           "qconv2d_nchwc(N=2,C=32,H=9,W=9,K=24,R=3,S=3,stride=2,pad=1,ic_block=16,oc_block=8,"
                                           "epilogue=bias_relu)",
                                           "qconv2d_nchwc(N=1,C=12,H=6,W=6,K=16,R=1,S=1,ic_block=12,oc_block=16)",
                                           // uint8 data (int8-edges): padded with the zero point, or
                                           // (no padding) read by the register tile as it is.
                                           "qconv2d_nchwc(N=1,C=8,H=5,W=7,K=16,R=3,S=3,pad=1,ic_block=8,oc_block=16,"
                                           "dtype=uint8,weight_dtype=int8,epilogue=relu)",
                                           "qconv2d_nchwc(N=2,C=16,H=9,W=9,K=24,R=1,S=1,stride=2,ic_block=16,oc_block=8,"
                                           "dtype=uint8,weight_dtype=int8,epilogue=bias)"));

// qdepthwise_conv2d_nchwc (a quantized model's depthwise Conv): float data quantized on entry
// or uint8 data, padded and strided windows, a 5x5 window, epilogues; the sums are exact.
class QDepthwise : public ::testing::TestWithParam<const char*> {};

TEST_P(QDepthwise, MatchesTheReferenceOnEveryInstructionSet) {
  std::vector<std::string> targets = runnable_x86_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  expect_matches_on_targets(GetParam(), targets, 41);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QDepthwise,
    ::testing::Values("qdepthwise_conv2d_nchwc(N=1,C=32,H=7,W=9,R=3,S=3,pad=1,block=16)",
                      "qdepthwise_conv2d_nchwc(N=1,C=32,H=9,W=7,R=3,S=3,stride=2,pad=1,block=16,dtype=uint8,weight_dtype=int8,"
                      "epilogue=bias_relu)",
                      "qdepthwise_conv2d_nchwc(N=2,C=24,H=10,W=9,R=5,S=5,stride=2,pad=2,block=8,epilogue=bias)",
                      "qdepthwise_conv2d_nchwc(N=1,C=12,H=6,W=5,R=3,S=3,block=4,dtype=uint8,weight_dtype=int8)"));

TEST(QConv, BlocksOfOddQuadsAreRefused) {
  expect_user_error([] { parse_workload("qconv2d_nchwc(N=1,C=6,H=5,W=5,K=16,R=3,S=3,ic_block=6,oc_block=16)"); },
                    "ic_block=6 is not a multiple of 4");
}

TEST(QMatmul, TheCheckSeesOneQuantizationStep) {
  Workload w = parse_workload("qmatmul(M=8,N=16,K=32)");
  CompiledKernel k = compile_kernel(w, host_target(), nullptr, "default", "");
  std::vector<std::vector<float>> in;
  std::vector<const float*> ptrs;
  uint64_t seed = 5;
  for (const ir::Tensor& t : k.graph.inputs) {
    in.emplace_back(static_cast<size_t>(t->shape.size() == 1 ? t->shape[0] : t->shape[0] * t->shape[1]));
    fill_typed(t->dtype.str(), in.back().data(), static_cast<int64_t>(in.back().size()), seed++);
    ptrs.push_back(in.back().data());
  }
  in[2][0] = 0.25f;  // a_scale
  in[2][1] = 7.0f;   // a_zero
  std::vector<float> ref(8 * 16);
  reference_compute(w, ptrs, ref.data());
  EXPECT_TRUE(check_against_reference(k.graph, ptrs, ref.data()).ok());
  // Element (0, 3) as if one byte of A were one more: scale[3] * B's byte.
  std::vector<float> off = ref;
  off[3] += in[2][2 + 3] * 1.0f;
  EXPECT_FALSE(check_against_reference(k.graph, ptrs, off.data()).ok());
}

TEST(Int8Matmul, GpuTargetsSayTheyHaveNoTemplateYet) {
  Workload w = parse_workload("matmul(M=16,N=64,K=64,dtype=uint8,weight_dtype=int8)");
  expect_user_error([&] { compile_kernel(w, parse_target("cuda -arch=sm_90"), nullptr, "default", ""); },
                    "no schedule template for matmul of uint8 x int8 on cuda targets yet");
}

// bfloat16 (matmul_bf16, docs/precision.md): boards fill pairs of bfloat16 into int32 words,
// their bits carried as they are.
TEST(TypedArguments, BFloat16PairsHoldTwoBFloat16InEachWord) {
  std::vector<float> v(4096);
  fill_typed("bfloat16x2", v.data(), static_cast<int64_t>(v.size()), 3);
  std::set<uint16_t> halves;
  for (float x : v) {
    const auto word = std::bit_cast<uint32_t>(x);
    for (uint16_t h : {static_cast<uint16_t>(word), static_cast<uint16_t>(word >> 16)}) {
      const float f = bf16_value(h);
      ASSERT_TRUE(f >= -1.0f && f < 1.0f) << std::hex << word;
      halves.insert(h);
    }
  }
  EXPECT_GT(halves.size(), 1000u);  // both halves vary (uniform values have ~1400 bfloat16s)
  std::vector<float> w = v;
  store_as("bfloat16x2", w.data(), static_cast<int64_t>(w.size()));
  load_as("bfloat16x2", w.data(), static_cast<int64_t>(w.size()));
  EXPECT_EQ(std::memcmp(w.data(), v.data(), v.size() * 4), 0);
  EXPECT_EQ(arg_dtype_bytes("bfloat16x2"), 4);
}

// The x86 instruction sets of the bfloat16 path this machine runs: vdpbf16ps (AVX512-BF16),
// and the widening sequence with AVX-512, AVX2 and SSE.
std::vector<std::string> runnable_bf16_targets() {
  return runnable({
      {"llvm -mcpu=cooperlake", "avx512bf16"},   // vdpbf16ps zmm
      {"llvm -mcpu=skylake-avx512", "avx512bw"},  // widening, AVX-512
      {"llvm -mcpu=x86-64-v3", "avx2"},           // widening, AVX2
      {"llvm -mcpu=x86-64", "sse2"},              // widening, SSE
  });
}

// matmul_bf16 (a float model's MatMul at --precision bf16: A converted on entry, B as pairs):
// on every instruction set, B packed by the kernel and given packed, default and sampled
// configs, odd K (a zero high half), the epilogues.
class BF16Matmul : public ::testing::TestWithParam<const char*> {};

TEST_P(BF16Matmul, MatchesTheReferenceOnEveryInstructionSet) {
  std::vector<std::string> targets = runnable_bf16_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  expect_matches_on_targets(GetParam(), targets, 41, /*packings=*/true);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BF16Matmul,
                         ::testing::Values("matmul_bf16(M=1,N=1,K=1)", "matmul_bf16(M=16,N=32,K=64)",
                                           "matmul_bf16(M=37,N=45,K=23,epilogue=bias_relu)",
                                           "matmul_bf16(M=5,N=100,K=130,epilogue=relu)"));

// C = A[:, 0] x 1.0 through `op` (matmul_bf16 or matmul_fp16 with M = xs.size(), N = 1,
// K = 2) on target `ts`, default schedule: A[:, 0] = xs, A[:, 1] = 0, B's one word `one` (1.0 in
// its low half, 0 in the high one), so C is each x as the kernel converts it.
struct FirstColumn {
  CompiledKernel k;
  std::vector<float> c;
};
FirstColumn first_column_times_one(const std::string& op, const std::vector<float>& xs, float one, const std::string& ts) {
  const int64_t M = static_cast<int64_t>(xs.size());
  Target t = parse_target(ts);
  FirstColumn r{compile_kernel(parse_workload(str(op, "(M=", M, ",N=1,K=2)")), t, nullptr, "default", ""),
                std::vector<float>(xs.size(), -1.0f)};
  std::unique_ptr<KernelLibrary> lib = testing::build_for(r.k.lowered.func, t);
  std::vector<float> a(static_cast<size_t>(2 * M), 0.0f), b = {one};
  for (size_t i = 0; i < xs.size(); ++i) a[2 * i] = xs[i];
  EXPECT_EQ(lib->call({a.data(), b.data(), r.c.data()}), 0) << op << " on " << ts;
  return r;
}

// got is want, or both are NaN.
void expect_same_value(float got, float want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what;
  } else {
    EXPECT_EQ(got, want) << what;
  }
}

// A's conversion rounds to the nearest bfloat16, ties to even, keeps NaN and infinities, and
// rounds past the largest bfloat16 to infinity: C = A[:, 0] * 1.0 exactly (B's word: 1.0 low,
// 0 high; A[:, 1] = 0), on each instruction set.
TEST(BF16Matmul, TheConversionRoundsToNearestEven) {
  std::vector<std::string> targets = runnable_bf16_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  const float tie_down = 1.0f + 0x1p-8f;               // halfway between 1 and 1 + 2^-7: to 1
  const float tie_up = 1.0f + 0x1p-7f + 0x1p-8f;       // halfway, odd below: up to 1 + 2^-6
  const float above = 1.0f + 0x1p-8f + 0x1p-20f;      // past halfway: up
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<float, float>> cases = {
      {tie_down, 1.0f},     {tie_up, 1.0f + 0x1p-6f}, {above, 1.0f + 0x1p-7f},   {-tie_up, -(1.0f + 0x1p-6f)},
      {0.1f, 0.10009765625f}, {inf, inf},             {-inf, -inf},              {3.4e38f, inf},
      {0.0f, 0.0f},         {-2.5f, -2.5f},           {1e-30f, round_bf16(1e-30f)}, {65504.0f, 65536.0f},
      {std::nanf(""), std::nanf("")}, {7.0f, 7.0f},   {1.0f / 3, 0.333984375f},    {-1.0f / 3, -0.333984375f}};
  std::vector<float> xs;
  for (const auto& [x, want] : cases) xs.push_back(x);
  for (const std::string& ts : targets) {
    const FirstColumn r = first_column_times_one("matmul_bf16", xs, std::bit_cast<float>(uint32_t{0x3F80}), ts);
    for (size_t i = 0; i < cases.size(); ++i) expect_same_value(r.c[i], cases[i].second, str(cases[i].first, " on ", ts));
  }
  for (const auto& [x, want] : cases) {
    if (!std::isnan(want)) {
      EXPECT_EQ(round_bf16(x), want) << x << " (host)";
    }
  }
}

// vdpbf16ps where the CPU has AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4 and 5), the
// widening sequence elsewhere; the sidecar says B holds bfloat16 pairs.
TEST(BF16Matmul, DotProductsUseTheTargetsInstruction) {
  Workload w = parse_workload("matmul_bf16(M=16,N=64,K=64)");
  auto asm_of = [&](const char* spec) {
    return kernel_text(compile_kernel(w, parse_target(spec), nullptr, "default", ""), EmitKind::Asm);
  };
  EXPECT_NE(asm_of("llvm -mtriple=x86_64-linux-gnu -mcpu=cooperlake").find("vdpbf16ps\t%zmm"), std::string::npos);
  EXPECT_NE(asm_of("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4").find("vdpbf16ps"), std::string::npos);
  EXPECT_EQ(asm_of("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512").find("vdpbf16ps"), std::string::npos);
  // Arm with the bfloat16 extension: bfdot; a Cortex-A72 (Raspberry Pi 4) has none.
  EXPECT_NE(asm_of("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1").find("\tbfdot\t"), std::string::npos);
  EXPECT_EQ(asm_of("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72").find("bfdot"), std::string::npos);
  CompiledKernel k = compile_kernel(w, host_target(), nullptr, "default", "");
  EXPECT_EQ(k.graph.arg_dtype(k.graph.inputs[1]), "bfloat16x2");
  EXPECT_EQ(k.graph.arg_dtype(k.graph.inputs[0]), "float32");
}

// conv2d_nchwc_bf16 (a float model's blocked convolution at --precision bf16): on every
// instruction set, padded, strided and 1x1 windows, odd-looking blocks (6), default and
// sampled configs; vdpbf16ps where the CPU has it.
class BF16Conv : public ::testing::TestWithParam<const char*> {};

TEST_P(BF16Conv, MatchesTheReferenceOnEveryInstructionSet) {
  std::vector<std::string> targets = runnable_bf16_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  expect_matches_on_targets(GetParam(), targets, 61);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BF16Conv,
                         ::testing::Values("conv2d_nchwc_bf16(N=1,C=8,H=5,W=7,K=16,R=3,S=3,pad=1,ic_block=8,oc_block=16)",
                                           "conv2d_nchwc_bf16(N=2,C=32,H=9,W=9,K=24,R=3,S=3,stride=2,pad=1,ic_block=16,"
                                           "oc_block=8,epilogue=bias_relu)",
                                           "conv2d_nchwc_bf16(N=1,C=12,H=6,W=6,K=16,R=1,S=1,ic_block=6,oc_block=16)"));

TEST(BF16Conv, OddBlocksAreRefusedAndDotProductsUseVdpbf16ps) {
  expect_user_error([] { parse_workload("conv2d_nchwc_bf16(N=1,C=9,H=5,W=5,K=16,R=3,S=3,ic_block=3,oc_block=16)"); },
                    "ic_block=3 is odd");
  Workload w = parse_workload("conv2d_nchwc_bf16(N=1,C=32,H=8,W=8,K=32,R=3,S=3,pad=1,ic_block=16,oc_block=16)");
  auto asm_of = [&](const char* spec) {
    return kernel_text(compile_kernel(w, parse_target(spec), nullptr, "default", ""), EmitKind::Asm);
  };
  EXPECT_NE(asm_of("llvm -mtriple=x86_64-linux-gnu -mcpu=cooperlake").find("vdpbf16ps\t%zmm"), std::string::npos);
  EXPECT_EQ(asm_of("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512").find("vdpbf16ps"), std::string::npos);
}

// float16 on the host (base/float16.h): to nearest, ties to even, subnormals kept, past 65504
// to infinity (65520 is the tie that rounds away), NaN quiet; every half reads back exactly.
TEST(Float16, HostRoundingCaseByCase) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<float, uint16_t>> cases = {
      {0.0f, 0x0000},          {-0.0f, 0x8000},        {1.0f, 0x3C00},           {-2.0f, 0xC000},
      {1.0f + 0x1p-11f, 0x3C00},                        // halfway between 1 and 1 + 2^-10: even (1)
      {1.0f + 3 * 0x1p-11f, 0x3C02},                    // halfway, odd below: up
      {1.0f + 0x1p-11f + 0x1p-20f, 0x3C01},             // past halfway: up
      {65504.0f, 0x7BFF},      {65519.0f, 0x7BFF},     {65520.0f, 0x7C00},       {1e6f, 0x7C00},
      {inf, 0x7C00},           {-inf, 0xFC00},         {0x1p-14f, 0x0400},       // smallest normal
      {0x1p-24f, 0x0001},      {0x1p-25f, 0x0000},     {0x1.8p-25f, 0x0001},     // subnormals, ties to even
      {3 * 0x1p-25f, 0x0002},  {0x1.ffcp-15f, 0x0400}, {0.1f, 0x2E66},           {-1.0f / 3, 0xB555}};
  for (const auto& [x, want] : cases) {
    EXPECT_EQ(f16_bits(x), want) << x;
    if (!std::isinf(x) && std::fabs(x) <= 65504.0f) {
      EXPECT_LE(std::fabs(f16_value(want) - x), std::fabs(x) * 0x1p-11f + 0x1p-25f) << x;
    }
  }
  EXPECT_EQ(f16_bits(std::nanf("")) & 0x7E00, 0x7E00);
  EXPECT_TRUE(std::isnan(f16_value(f16_bits(-std::nanf("")))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;  // NaNs
    ASSERT_EQ(f16_bits(f16_value(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

// Boards fill float16x2 words with two of the seeded values rounded to float16.
TEST(TypedArguments, Float16PairsHoldTwoFloat16InEachWord) {
  std::vector<float> v(4096), raw(8192);
  fill_typed("float16x2", v.data(), static_cast<int64_t>(v.size()), 3);
  fill_random(raw.data(), static_cast<int64_t>(raw.size()), 3);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(f16_half(v[i], 0), round_f16(raw[2 * i])) << i;
    ASSERT_EQ(f16_half(v[i], 1), round_f16(raw[2 * i + 1])) << i;
  }
  EXPECT_EQ(arg_dtype_bytes("float16x2"), 4);
}

// The x86 instruction sets of the float16 path: F16C conversions with AVX-512 and AVX2, and
// SSE without F16C (integer conversions).
std::vector<std::string> runnable_f16_targets() {
  return runnable({
      {"llvm -mcpu=skylake-avx512", "avx512bw"},  // vcvtph2ps zmm
      {"llvm -mcpu=x86-64-v3", "avx2"},           // vcvtph2ps ymm
      {"llvm -mcpu=x86-64", "sse2"},              // no F16C: shifts, selects, a multiply
  });
}

// matmul_fp16 and conv2d_nchwc_fp16 (--precision fp16): on every instruction set, B packed by
// the kernel and given packed, default and sampled configs, odd K, the epilogues.
class F16Kernels : public ::testing::TestWithParam<const char*> {};

TEST_P(F16Kernels, MatchTheReferenceOnEveryInstructionSet) {
  std::vector<std::string> targets = runnable_f16_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  const std::string spec = GetParam();
  expect_matches_on_targets(spec, targets, 71, /*packings=*/spec.rfind("matmul", 0) == 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, F16Kernels,
                         ::testing::Values("matmul_fp16(M=1,N=1,K=1)", "matmul_fp16(M=16,N=32,K=64)",
                                           "matmul_fp16(M=37,N=45,K=23,epilogue=bias_relu)",
                                           "conv2d_nchwc_fp16(N=1,C=8,H=5,W=7,K=16,R=3,S=3,pad=1,ic_block=8,oc_block=16)",
                                           "conv2d_nchwc_fp16(N=2,C=32,H=9,W=9,K=24,R=3,S=3,stride=2,pad=1,ic_block=16,"
                                           "oc_block=8,epilogue=bias_relu)",
                                           "conv2d_nchwc_fp16(N=1,C=12,H=6,W=6,K=16,R=1,S=1,ic_block=6,oc_block=16)"));

// matmul and batch_matmul of float16 / bfloat16 operands (dtype=...) on CPUs: dense.cpu widens
// them as it reads them (vcvtph2ps with F16C), default and sampled configs, odd shapes.
class Dtype16Dense : public ::testing::TestWithParam<const char*> {};

TEST_P(Dtype16Dense, MatchesTheReferenceOnEveryInstructionSet) {
  std::vector<std::string> targets = runnable_f16_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  expect_matches_on_targets(GetParam(), targets, 79);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Dtype16Dense,
                         ::testing::Values("matmul(M=1,N=1,K=1,dtype=float16)",
                                           "matmul(M=37,N=45,K=23,dtype=float16,epilogue=bias_relu)",
                                           "matmul(M=16,N=32,K=64,dtype=bfloat16)",
                                           "batch_matmul(B=3,M=9,N=20,K=17,dtype=bfloat16)",
                                           "matmul(M=21,N=40,K=19,dtype=float16,trans_b=1,epilogue=bias)",
                                           "batch_matmul(B=2,M=16,N=32,K=24,dtype=bfloat16,trans_b=1)"));

// Convolutions of float16 / bfloat16 data and weights (dtype=...: a cuda model's value stored in
// 16 bits between kernels, computed here as on tensor cores' hosts): conv2d_nchw.cpu and
// conv2d_nhwc.cpu widen them as they read them; padding, strides, the epilogues.
class Dtype16Conv : public ::testing::TestWithParam<const char*> {};

TEST_P(Dtype16Conv, MatchesTheReferenceOnEveryInstructionSet) {
  std::vector<std::string> targets = runnable_f16_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  expect_matches_on_targets(GetParam(), targets, 83);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Dtype16Conv,
                         ::testing::Values("conv2d_nchw(N=1,C=5,H=9,W=7,K=20,R=3,S=3,pad=1,dtype=float16,epilogue=bias_relu)",
                                           "conv2d_nchw(N=2,C=16,H=8,W=8,K=32,R=1,S=1,stride=2,dtype=bfloat16)",
                                           "conv2d_nhwc(N=1,H=7,W=9,C=6,K=24,R=3,S=3,pad=1,dtype=float16,epilogue=bias)"));

// A's conversion in the kernel rounds as f16_bits does, on each instruction set (with F16C and
// without): C = A[:, 0] * 1.0 exactly (B's word: 1.0 low, 0 high; A[:, 1] = 0), subnormals,
// ties, overflow and NaN included; F16C targets convert with vcvtps2ph and vcvtph2ps.
TEST(F16Kernels, TheConversionRoundsAsTheHostDoes) {
  std::vector<std::string> targets = runnable_f16_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> xs = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f, -1e6f, inf, -inf,
                                 0x1p-24f,        0x1.8p-25f,          0x1p-25f, -3 * 0x1p-25f, 0.1f,   -1.0f / 3, 0.0f,
                                 std::nanf(""),   0x1.ffcp-15f,        1e-30f,   -65504.0f,  123.456f};
  for (const std::string& ts : targets) {
    const FirstColumn r = first_column_times_one("matmul_fp16", xs, f16_pair(1.0f, 0.0f), ts);
    for (size_t i = 0; i < xs.size(); ++i) expect_same_value(r.c[i], round_f16(xs[i]), str(xs[i], " on ", ts));
    if (parse_target(ts).has_feature("f16c")) {
      std::string text = kernel_text(r.k, EmitKind::Asm);
      EXPECT_NE(text.find("vcvtps2ph"), std::string::npos) << ts;
      EXPECT_NE(text.find("vcvtph2ps"), std::string::npos) << ts;
    }
  }
  const CompiledKernel k = compile_kernel(parse_workload("matmul_fp16(M=4,N=1,K=2)"), host_target(), nullptr, "default", "");
  EXPECT_EQ(k.graph.arg_dtype(k.graph.inputs[1]), "float16x2");
}

// A float16 model's 16-bit inputs and outputs (uint16 bits; compiler/ir.h kFloatToF16 ...):
// float to bits rounds as the host's f16_bits / bf16_bits do, bits to float is exact, on every
// x86 instruction set this machine runs (with F16C and without), vectors and a scalar tail; the
// same kernels compile to PTX (cvt.rn.f16.f32 / cvt.f32.f16 on NVIDIA GPUs).
TEST(Storage16, ConversionsMatchTheHostOnEveryInstructionSet) {
  std::vector<std::string> targets = runnable_x86_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs = {1.0f + 0x1p-11f,
                           1.0f + 3 * 0x1p-11f,
                           65504.0f,
                           65519.0f,
                           65520.0f,
                           -1e6f,
                           inf,
                           -inf,
                           0x1p-24f,
                           0x1.8p-25f,
                           0x1p-25f,
                           -3 * 0x1p-25f,
                           0.1f,
                           -1.0f / 3,
                           0.0f,
                           -0.0f,
                           std::nanf(""),
                           0x1.ffcp-15f,
                           1e-30f,
                           3e38f,
                           1.00390625f,
                           1.01171875f,
                           -2.5e-40f};
  while (xs.size() % 16 != 5) xs.push_back(static_cast<float>(xs.size()) * -37.3f + 0.001f);
  const int64_t n = static_cast<int64_t>(xs.size());
  for (bool bf16 : {false, true}) {
    ir::Tensor x = ir::placeholder("x", {n});
    ir::Tensor h = ir::compute("h", {n}, {"i"}, [&](const std::vector<ir::Expr>& i) {
      return ir::Call::make(bf16 ? ir::kFloatToBF16 : ir::kFloatToF16, {ir::read(x, i)});
    });
    ir::Tensor hb = ir::placeholder("hb", {n}, Type::uint16());
    ir::Tensor y = ir::compute("y", {n}, {"i"}, [&](const std::vector<ir::Expr>& i) {
      return ir::Call::make(bf16 ? ir::kBF16ToFloat : ir::kF16ToFloat, {ir::read(hb, i)});
    });
    auto vectorized = [](ir::Tensor t, const std::vector<ir::Tensor>& inputs,
                         const std::string& name) {
      ir::Schedule s(t);
      auto [o, in] = s[t].split(s[t].axis("i"), 16);
      s[t].vectorize(in);
      return lower(s, inputs, name).func;
    };
    const ir::LoweredFunc narrow = vectorized(h, {x}, "narrow");
    const ir::LoweredFunc widen = vectorized(y, {hb}, "widen");
    const char* type = bf16 ? "bfloat16" : "float16";
    for (const std::string& ts : targets) {
      std::vector<uint16_t> bits(static_cast<size_t>(n), 0x5A5A);
      ASSERT_EQ(testing::build_for(narrow, parse_target(ts))
                    ->call({xs.data(), reinterpret_cast<float*>(bits.data())}),
                0);
      std::vector<float> back(static_cast<size_t>(n), -7.0f);
      ASSERT_EQ(testing::build_for(widen, parse_target(ts))
                    ->call({reinterpret_cast<float*>(bits.data()), back.data()}),
                0);
      for (size_t k = 0; k < xs.size(); ++k) {
        const uint16_t want = bf16 ? bf16_bits(xs[k]) : f16_bits(xs[k]);
        if (std::isnan(xs[k])) {
          EXPECT_EQ(bits[k] & 0x7FFF, want & 0x7FFF) << type << " NaN on " << ts;
        } else {
          EXPECT_EQ(bits[k], want) << type << " " << xs[k] << " on " << ts;
        }
        expect_same_value(back[k], bf16 ? bf16_value(bits[k]) : f16_value(bits[k]),
                          str(type, " ", bits[k], " on ", ts));
      }
    }
    // On a GPU, as a model's generic kernels are made (compiler/model_codegen.h).
    const Target gpu = parse_target("cuda -arch=sm_80");
    const std::string ptx =
        codegen_llvm(lower_generic_kernel(h, {x}, gpu, "narrow", "narrow"), gpu, CodegenOutput::Asm)
            .data +
        codegen_llvm(lower_generic_kernel(y, {hb}, gpu, "widen", "widen"), gpu, CodegenOutput::Asm)
            .data;
    if (!bf16) {
      EXPECT_NE(ptx.find("cvt.rn.f16.f32"), std::string::npos) << ptx;
      EXPECT_NE(ptx.find("cvt.f32.f16"), std::string::npos) << ptx;
    }
    EXPECT_NE(ptx.find("ld.global.nc.u16"), std::string::npos) << type;
    EXPECT_TRUE(ptx.find("st.global.u16") != std::string::npos ||
                ptx.find("st.global.b16") != std::string::npos)
        << ptx;
  }
}

// rounded(p, x) (compiler/operators.h: how --emulate-gpu's generic kernels round a tensor-core
// product's float32 operands) rounds as the host's precision_rounding does, at TF32 (round_tf32:
// to nearest, ties away from zero, carries into the exponent, infinities and NaN kept), float16
// and bfloat16, on every x86 instruction set this machine runs, vectors and a scalar tail.
TEST(Rounded, EveryPrecisionRoundsAsTheHostDoes) {
  std::vector<std::string> targets = runnable_x86_targets();
  if (targets.empty()) GTEST_SKIP() << "not an x86_64 machine";
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs = {1.0f + 0x1p-11f,  1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-12f, -(1.0f + 0x1p-11f),
                           0x1.fffffep127f,  -0x1.fffffep127f,    inf,             -inf,
                           std::nanf(""),    0.0f,                -0.0f,           1e-40f,
                           0x1.ffep-1f,      65520.0f,            0.1f,            -1.0f / 3,
                           1.00390625f,      3e38f,               0x1p-24f,        123.456f};
  while (xs.size() % 16 != 5) xs.push_back(static_cast<float>(xs.size()) * -37.3f + 0.001f);
  const int64_t n = static_cast<int64_t>(xs.size());
  for (Precision p : {Precision::TF32, Precision::Float16, Precision::BFloat16}) {
    ir::Tensor x = ir::placeholder("x", {n});
    ir::Tensor y = ir::compute("y", {n}, {"i"}, [&](const std::vector<ir::Expr>& i) { return rounded(p, ir::read(x, i)); });
    ir::Schedule s(y);
    auto [o, in] = s[y].split(s[y].axis("i"), 16);
    s[y].vectorize(in);
    const ir::LoweredFunc f = lower(s, {x}, "round").func;
    for (const std::string& ts : targets) {
      std::vector<float> got(static_cast<size_t>(n), -7.0f);
      ASSERT_EQ(testing::build_for(f, parse_target(ts))->call({xs.data(), got.data()}), 0);
      for (size_t k = 0; k < xs.size(); ++k)
        expect_same_value(got[k], precision_rounding(p)(xs[k]), str(precision_name(p), " ", xs[k], " on ", ts));
    }
  }
  // TF32's carry: 1 + 2^-11 (a tie) rounds away to 1 + 2^-10, the largest float to infinity.
  EXPECT_EQ(precision_rounding(Precision::TF32)(1.0f + 0x1p-11f), 1.0f + 0x1p-10f);
  EXPECT_EQ(precision_rounding(Precision::TF32)(0x1.fffffep127f), inf);
}

TEST(BF16Matmul, GpuTargetsSayTheyHaveNoTemplateYet) {
  Workload w = parse_workload("matmul_bf16(M=16,N=64,K=64)");
  expect_user_error([&] { compile_kernel(w, parse_target("cuda -arch=sm_90"), nullptr, "default", ""); },
                    "matmul_bf16");
}

}  // namespace
}  // namespace tf
