// Cross-compiled aarch64 kernels, run under qemu-aarch64 (our stand-in for a Raspberry Pi),
// against the reference computed here on the same seeded inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "compiler/driver.h"
#include "compiler/link.h"
#include "compiler/reference.h"
#include "compiler/schedule_templates.h"
#include "runtime/kernel_library.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {

constexpr const char* kPiTarget = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon";

const char* kWorkloads[] = {
    "matmul(M=97,N=131,K=67)",
    "matmul(M=16,N=16,K=16,epilogue=bias_relu)",
    "batch_matmul(B=2,M=7,N=9,K=5,epilogue=relu)",
    "conv2d_nchw(N=1,C=3,H=11,W=13,K=5,R=3,S=3,stride=2,pad=1,epilogue=bias_relu)",
    "conv2d_nhwc(N=1,H=9,W=7,C=4,K=9,R=3,S=3,pad=1,dilation=1,epilogue=bias)",
    "depthwise_conv2d_nchw(N=1,C=6,H=10,W=9,R=3,S=3,pad=2,dilation=2,epilogue=relu)",
    "depthwise_conv2d_nchw(N=1,C=9,H=10,W=9,R=3,S=3,stride=2,pad=1)",
    "conv2d_nchwc(N=1,C=8,H=9,W=7,K=12,R=3,S=3,pad=1,ic_block=4,oc_block=4,epilogue=bias_relu)",
    "depthwise_conv2d_nchwc(N=1,C=8,H=9,W=11,R=3,S=3,stride=2,pad=1,block=4,epilogue=bias)",
    "matmul(M=19,N=37,K=23,dtype=uint8,weight_dtype=int8)",  // int8: widening on a Pi 4
};

// N:DTYPE, the harness's form of an argument.
int64_t elements(const ir::Tensor& t) {
  int64_t n = 1;
  for (int64_t d : t->shape) n *= d;
  return n;
}

// The harness's argument: elements and what they hold (a word type where the kernel has one).
std::string arg_text(const OpGraph& g, const ir::Tensor& t) { return std::to_string(elements(t)) + ":" + g.arg_dtype(t); }

// Runs `k` under qemu and compares with the reference.
void check_under_qemu(const CompiledKernel& k, const std::string& label) {
  static int counter = 0;
  std::string base = testing::temp_dir() + "/a64_" + std::to_string(counter++);
  write_kernel(k, EmitKind::SharedLibrary, base + ".so");
  uint64_t seed = 11;
  // No -L: the aarch64 loader and libraries are Debian's arm64 multiarch ones under / (as for
  // the emulated board). Pairing the cross toolchain's loader (-L /usr/aarch64-linux-gnu) with
  // the multiarch libc.so.6 that the search path then finds hangs the harness.
  std::vector<std::string> argv = {"qemu-aarch64", TF_AARCH64_HARNESS,
                                   base + ".so", k.name, std::to_string(seed), base + ".bin"};
  for (const ir::Tensor& t : k.graph.inputs) argv.push_back(arg_text(k.graph, t));
  argv.push_back(arg_text(k.graph, k.graph.output));
  if (k.target.has_feature("i8mm") || k.target.has_feature("dotprod") || k.target.has_feature("bf16"))
    argv.insert(argv.begin() + 1, {"-cpu", "max"});
  CommandResult r = run_command(argv);
  ASSERT_EQ(r.exit_code, 0) << label << ": " << r.output;

  std::vector<std::vector<float>> inputs;
  std::vector<const float*> ptrs;
  for (size_t i = 0; i < k.graph.inputs.size(); ++i) {
    inputs.emplace_back(static_cast<size_t>(elements(k.graph.inputs[i])));
    fill_typed(k.graph.arg_dtype(k.graph.inputs[i]), inputs.back().data(), elements(k.graph.inputs[i]), seed + i);
    ptrs.push_back(inputs.back().data());
  }
  int64_t n = elements(k.graph.output);
  std::vector<float> got(static_cast<size_t>(n));
  std::ifstream f(base + ".bin", std::ios::binary);
  f.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(n * sizeof(float)));
  ASSERT_TRUE(f) << label << ": short output file";
  OutputCheck c = check_against_reference(k.graph, ptrs, got.data());
  EXPECT_TRUE(c.ok()) << label << ": element " << c.worst_index << " off by " << c.max_abs_error
                      << " (tolerance " << c.tolerance << ")";
}

class Aarch64UnderQemu : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (run_command({"qemu-aarch64", "-version"}).exit_code != 0) {
      GTEST_SKIP() << "qemu-aarch64 is not installed (Debian package qemu-user)";
    }
  }
};

TEST_P(Aarch64UnderQemu, DefaultAndRandomConfigs) {
  Workload w = parse_workload(GetParam());
  Target t = parse_target(kPiTarget);
  check_under_qemu(compile_kernel(w, t, nlohmann::json(), "default", ""), w.canonical() + " default");
  OpGraph g = build_op(w);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 2; ++trial) {
    nlohmann::json config = nlohmann::json::object();
    for (const KnobSpec& k : knob_space(g, t)) {
      std::vector<nlohmann::json> small;
      for (const auto& c : k.candidates) {
        if (!c.is_number_integer() || c.get<int64_t>() <= 8) small.push_back(c);
      }
      config[k.name] = small[rng() % small.size()];
    }
    check_under_qemu(compile_kernel(w, t, config, "given", "kern"), w.canonical() + " " + config.dump());
  }
}

INSTANTIATE_TEST_SUITE_P(Operators, Aarch64UnderQemu, ::testing::ValuesIn(kWorkloads));

// bfloat16 dot products on an Arm CPU with the bfloat16 extension (bfdot; qemu's `max` CPU
// has it), against the reference of the same rounded operands.
TEST(Aarch64BF16, BfdotKernelsMatchTheReferenceUnderQemu) {
  if (run_command({"qemu-aarch64", "-version"}).exit_code != 0) GTEST_SKIP() << "qemu-aarch64 is not installed";
  Target t = parse_target("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n2");
  for (const char* spec : {"matmul_bf16(M=19,N=37,K=23,epilogue=bias_relu)",
                           "conv2d_nchwc_bf16(N=1,C=8,H=6,W=7,K=8,R=3,S=3,pad=1,ic_block=4,oc_block=4)"}) {
    Workload w = parse_workload(spec);
    CompiledKernel k = compile_kernel(w, t, nlohmann::json(), "default", "");
    ASSERT_NE(kernel_text(k, EmitKind::Asm).find("\tbfdot\t"), std::string::npos) << spec;
    check_under_qemu(k, w.canonical() + " on " + t.str());
  }
}

// int8 dot products on an Arm CPU with the int8 matrix extension (usdot) and on one with only
// the dot product (Cortex-A76, Raspberry Pi 5: sdot of a - 128, plus 128 * sum b by a second
// sdot); qemu's `max` CPU has both. Exact against the reference, matmul and convolution.
TEST(Aarch64Int8, DotProductKernelsAreExactUnderQemu) {
  if (run_command({"qemu-aarch64", "-version"}).exit_code != 0) GTEST_SKIP() << "qemu-aarch64 is not installed";
  for (const auto& [spec_t, instruction] : {std::pair{"llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n2 -mattr=+i8mm", "usdot"},
                                            std::pair{"llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", "sdot"}}) {
    Target t = parse_target(spec_t);
    for (const char* spec : {"matmul(M=19,N=37,K=23,dtype=uint8,weight_dtype=int8)",
                             "matmul(M=8,N=64,K=64,dtype=uint8,weight_dtype=int8)",
                             "qconv2d_nchwc(N=1,C=8,H=6,W=7,K=8,R=3,S=3,pad=1,ic_block=4,oc_block=4)"}) {
      Workload w = parse_workload(spec);
      CompiledKernel k = compile_kernel(w, t, nlohmann::json(), "default", "");
      const std::string text = kernel_text(k, EmitKind::Asm);
      ASSERT_NE(text.find(std::string("\t") + instruction + "\t"), std::string::npos) << spec << " on " << spec_t;
      if (std::string(instruction) == "sdot") {
        EXPECT_EQ(text.find("usdot"), std::string::npos) << spec;
      }
      check_under_qemu(k, w.canonical() + " on " + t.str());
    }
  }
}

}  // namespace
}  // namespace tf
