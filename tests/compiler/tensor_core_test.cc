// dense_tc.cuda and conv2d_tc.cuda (compiler/templates/tensor_core_gemm.h): matmul,
// batch_matmul and convolutions with precision=tf32 / fp16 / bf16 on tensor cores. Without a GPU
// here: the kernels run in the threaded emulation of their blocks (each warp's lanes exchange their
// fragments as the hardware's mma.sync does, so a lane holding the wrong fragment gives a wrong C)
// against the reference of the rounded operands, over shapes that the tiles do not divide,
// epilogues, batches and sampled configs; ptxas checks the default configs of the benchmark's
// shapes.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "base/bfloat16.h"
#include "base/error.h"
#include "base/file_io.h"
#include "base/float16.h"
#include "compiler/driver.h"
#include "compiler/gpu.h"
#include "compiler/ir_mutator.h"
#include "compiler/ir_printer.h"
#include "compiler/link.h"
#include "compiler/operators.h"
#include "compiler/schedule_templates.h"
#include "compiler/simplify.h"
#include "compiler/te_rebuild.h"
#include "compiler/tensorize.h"
#include "runtime/kernel_library.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {
namespace fs = std::filesystem;

const char* kPrecisions[] = {"tf32", "fp16", "bf16"};

std::string with_precision(const std::string& w, const char* p) {
  return w.substr(0, w.size() - 1) + ",precision=" + p + ")";
}

TEST(TensorCore, EmulatedBlocksMatchTheReferenceOfRoundedOperands) {
  const Target sm80 = parse_target("cuda -arch=sm_80");
  struct Case {
    const char* workload;
    nlohmann::json config;  // null: the default
  };
  const Case cases[] = {
      {"matmul(M=64,N=32,K=64)", nullptr},
      // Nothing divides: rows, columns and K padded inside the accumulator, C's tails guarded.
      {"matmul(M=50,N=37,K=19,epilogue=bias_relu)", nullptr},
      {"matmul(M=50,N=37,K=40)",
       {{"warps_m", 2}, {"warps_n", 2}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 2}}},
      {"matmul(M=1,N=72,K=48,epilogue=bias)", nullptr},
      {"matmul(M=96,N=48,K=64,epilogue=relu)",
       {{"warps_m", 1}, {"warps_n", 2}, {"tiles_m", 2}, {"tiles_n", 2}, {"unroll_k", 1}}},
      {"batch_matmul(B=3,M=20,N=24,K=24)", nullptr},
      {"batch_matmul(B=2,M=32,N=16,K=32)",
       {{"warps_m", 2}, {"warps_n", 1}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 2}}},
      // Convolutions as implicit GEMMs (conv2d_tc.cuda): padding, strides, dilation, two
      // images, 1x1, odd channel counts, NHWC.
      {"conv2d_nchw(N=2,C=5,H=9,W=7,K=20,R=3,S=3,pad=1,epilogue=bias_relu)", nullptr},
      {"conv2d_nchw(N=1,C=8,H=10,W=10,K=16,R=3,S=3,stride=2,pad=2,dilation=2)",
       {{"warps_m", 1}, {"warps_n", 2}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 2}}},
      {"conv2d_nchw(N=1,C=24,H=6,W=6,K=40,R=1,S=1,epilogue=bias)", nullptr},
      {"conv2d_nhwc(N=2,H=7,W=9,C=6,K=24,R=3,S=3,pad=1,epilogue=relu)", nullptr},
      {"conv2d_nhwc(N=1,H=8,W=8,C=16,K=32,R=3,S=3,stride=2,pad=1)",
       {{"warps_m", 2},
        {"warps_n", 1},
        {"tiles_m", 1},
        {"tiles_n", 2},
        {"unroll_k", 1},
        {"stages", 2}}},
      // Split-K: parts into a workspace, summed with the epilogue by a second kernel; parts
      // that do not divide K (the last one partly past it), batches, convolutions (the
      // im2col tile computed into shared memory).
      {"matmul(M=50,N=37,K=150,epilogue=bias_relu)",
       {{"warps_m", 2}, {"warps_n", 2}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 1},
        {"split_k", 3}}},
      {"matmul(M=16,N=24,K=64)",
       {{"warps_m", 1}, {"warps_n", 1}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 2},
        {"split_k", 2}}},
      {"batch_matmul(B=3,M=20,N=24,K=72)",
       {{"warps_m", 1}, {"warps_n", 2}, {"tiles_m", 2}, {"tiles_n", 1}, {"unroll_k", 1},
        {"split_k", 2}}},
      {"conv2d_nchw(N=2,C=9,H=7,W=7,K=24,R=3,S=3,pad=1,epilogue=bias_relu)",
       {{"warps_m", 1}, {"warps_n", 2}, {"tiles_m", 2}, {"tiles_n", 2}, {"unroll_k", 1},
        {"stages", 2}, {"split_k", 4}}},
  };
  int sample = 0;  // under the sanitizers each case in one precision (tests/sanitized.h)
  for (const char* p : kPrecisions) {
    for (const Case& c : cases) {
      if (!testing::sampled(sample++, 3)) continue;
      Workload w = parse_workload(with_precision(c.workload, p));
      CompiledKernel k = c.config.is_null() ? compile_kernel(w, sm80, nullptr, "default", "")
                                            : compile_kernel(w, sm80, c.config, "given", "");
      EXPECT_EQ(template_name(w, sm80),
                w.op.rfind("conv2d", 0) == 0 ? "conv2d_tc.cuda.v2" : "dense_tc.cuda.v2");
      std::string what = w.canonical() + " config " + k.config.dump();
      testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm80, 11);
      EXPECT_TRUE(r.ok()) << what << ": " << r.str();
    }
  }
}

// Random configs of the tuner's space (the default and 4 more per workload), emulated.
TEST(TensorCore, SampledConfigsMatchTheReference) {
  const Target sm90 = parse_target("cuda -arch=sm_90");
  int sample = 0;
  for (const char* p : kPrecisions) {
    std::vector<std::string> workloads;
    for (const char* shape :
         {"matmul(M=48,N=40,K=48,epilogue=bias)", "batch_matmul(B=2,M=16,N=24,K=40)",
          "conv2d_nchw(N=1,C=6,H=8,W=8,K=24,R=3,S=3,pad=1,epilogue=bias)",
          "conv2d_nhwc(N=1,H=6,W=8,C=8,K=16,R=3,S=3,pad=1)"})
      workloads.push_back(with_precision(shape, p));
    // 16-bit operands, whose type is their precision; float32 data times 16-bit weights.
    if (std::string(p) != "tf32") {
      const std::string t = std::string(p) == "bf16" ? "bfloat16" : "float16";
      workloads.push_back("matmul(M=48,N=40,K=56,dtype=" + t + ")");
      workloads.push_back("matmul(M=48,N=40,K=56,weight_dtype=" + t + ",trans_b=1,epilogue=bias)");
      workloads.push_back("conv2d_nchw(N=1,C=8,H=8,W=8,K=24,R=3,S=3,pad=1,weight_dtype=" + t + ",epilogue=bias)");
    }
    for (const std::string& text : workloads) {
      Workload w = parse_workload(text);
      for (const nlohmann::json& config : testing::sample_configs(w, sm90, 4)) {
        if (!testing::sampled(sample++, 3)) continue;
        CompiledKernel k = compile_kernel(w, sm90, config, "given", "");
        testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm90, 5);
        EXPECT_TRUE(r.ok()) << w.canonical() << " config " << k.config.dump() << ": " << r.str();
      }
    }
  }
}

// Shapes nobody chose: seeded random GEMMs, batches and NCHW/NHWC convolutions (sizes from 1,
// no tile dividing them; strides, dilations, paddings, epilogues) in every tensor-core
// precision and with 16-bit operands, on sm_80 and sm_90, each at its default config and one
// sampled from its space, emulated against the reference. (Session 100 ran 500 such workloads,
// 1,000 kernels, with none wrong; this keeps a sample of them.)
TEST(TensorCore, RandomShapesMatchTheReference) {
  std::mt19937 rng(100);
  auto r = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const char* types[] = {",precision=tf32", ",precision=fp16", ",precision=bf16",
                         ",dtype=float16",  ",dtype=bfloat16", ",weight_dtype=float16"};
  const char* epilogues[] = {"none", "bias", "relu", "bias_relu"};
  const int workloads = testing::sweep(24, 6);
  int tried = 0;
  while (tried < workloads) {
    const std::string t = types[r(0, 5)];
    const std::string ep = std::string(",epilogue=") + epilogues[r(0, 3)];
    std::string spec;
    switch (r(0, 3)) {
      case 0:
        spec = str("matmul(M=", r(1, 140), ",N=", r(1, 140), ",K=", r(1, 200), ",trans_b=", r(0, 1),
                   t, ep, ")");
        break;
      case 1:
        spec = str("batch_matmul(B=", r(1, 3), ",M=", r(1, 70), ",N=", r(1, 70), ",K=", r(1, 100),
                   t, ep, ")");
        break;
      default: {
        const bool nchw = r(0, 1);
        const int n = r(1, 2), c = r(1, 40), h = r(3, 14), w = r(3, 14), k = r(1, 40);
        spec = str(nchw ? "conv2d_nchw(N=" : "conv2d_nhwc(N=", n,
                   nchw ? str(",C=", c, ",H=", h, ",W=", w) : str(",H=", h, ",W=", w, ",C=", c),
                   ",K=", k, ",R=", r(1, 3), ",S=", r(1, 3), ",stride=", r(1, 2), ",pad=", r(0, 1),
                   ",dilation=", r(1, 2), t, ep, ")");
      }
    }
    const Target target = parse_target(r(0, 1) ? "cuda -arch=sm_90" : "cuda -arch=sm_80");
    Workload w;
    try {
      w = parse_workload(spec);
    } catch (const UserError&) {
      continue;  // a window larger than its padded image, a type pair no template takes
    }
    ++tried;
    const std::vector<nlohmann::json> configs =
        testing::sample_configs(w, target, testing::kSanitized ? 0 : 1);
    for (const nlohmann::json& config : configs) {
      CompiledKernel k = compile_kernel(w, target, config, "given", "");
      testing::Comparison c = testing::run_gpu_emulated(k.graph, k.lowered.func, target, 5, 4096);
      EXPECT_TRUE(c.ok()) << spec << " on " << target.str() << " config " << k.config.dump() << ": "
                          << c.str();
    }
  }
}

// The float32 template would be more accurate than the rounded reference allows: the check
// tells the two apart, so the emulated results above are the products' (not float32's).
TEST(TensorCore, RoundedReferenceDiffersFromFloat32) {
  Workload w = parse_workload("matmul(M=32,N=32,K=256,precision=bf16)");
  CompiledKernel fp32 = compile_kernel(parse_workload("matmul(M=32,N=32,K=256)"),
                                       parse_target("cuda -arch=sm_80"), nullptr, "default", "");
  OpGraph g = build_op(w);
  ir::LoweredFunc serial = fp32.lowered.func;
  serial.body = serialize_gpu_bindings(serial.body);
  testing::Comparison r = testing::run_and_compare(g, serial, 3);
  EXPECT_FALSE(r.check.ok()) << "a float32 GEMM passes as a bfloat16 one: " << r.str();
}

int64_t count(const std::string& text, const std::string& what) {
  return static_cast<int64_t>(testing::count_of(text, what));
}

const char* kPtxas = "/usr/local/cuda/bin/ptxas";

// Kernel `k` through ptxas for sm_90 (sm_90a where its PTX is, for wgmma): it assembles with
// no spills and the accumulators in registers (no stack frame); its PTX. With
// `unless_by_choice`, a spill is allowed where ptxas used fewer registers than a thread of the
// block may have (its own trade for occupancy: conv2d_nhwc of bfloat16 data without shared
// tiles, 128 threads, spills 8 bytes at 64 registers and none at 68 without .maxntid), not where
// it ran out of them.
std::string assemble_sm90(const CompiledKernel& k, const std::string& what,
                          bool unless_by_choice = false) {
  std::string path = testing::temp_dir() + "/tc_sm90.ptx";
  write_kernel(k, EmitKind::Asm, path);
  const bool hopper_only = read_file(path).find(".target sm_90a") != std::string::npos;
  CommandResult r = run_command({kPtxas, "-v", hopper_only ? "-arch=sm_90a" : "-arch=sm_90", path, "-o", path + ".cubin"});
  EXPECT_EQ(r.exit_code, 0) << what << ": " << r.output;
  bool clean = r.output.find("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads") !=
               std::string::npos;
  if (!clean && unless_by_choice) {
    std::smatch used;
    const int64_t threads =
        32 * k.config["warps_m"].get<int64_t>() * k.config["warps_n"].get<int64_t>();
    clean = std::regex_search(r.output, used, std::regex("Used ([0-9]+) registers")) &&
            std::stoll(used[1]) < std::min<int64_t>(255, 65536 / threads);
  }
  EXPECT_TRUE(clean) << what << r.output;
  return read_file(path);
}

// The default config of `w` on sm_90 with `knobs` set, compiled and assembled: its PTX, a
// description for messages, and its tiles per warp and steps of K per iteration.
struct AssembledKernel {
  std::string ptx, what;
  int64_t tm, tn, uk;
};
AssembledKernel assemble_default(const Workload& w, const nlohmann::json& knobs) {
  const Target sm90 = parse_target("cuda -arch=sm_90");
  nlohmann::json cfg = compile_kernel(w, sm90, nullptr, "default", "").config;
  for (const auto& [key, value] : knobs.items()) cfg[key] = value;
  CompiledKernel k = compile_kernel(w, sm90, cfg, "given", "");
  AssembledKernel a{"", w.canonical() + " config " + k.config.dump(), k.config["tiles_m"], k.config["tiles_n"],
                    k.config["unroll_k"]};
  a.ptx = assemble_sm90(k, a.what);
  return a;
}

// ptxas on the default configs of the shapes bench/gpu_bench.py measures: no spills, two
// blocks per multiprocessor by registers, each iteration of K's loop has the
// tiles_m x tiles_n x unroll_k products the config asks for, and pipelined tiles are copied
// with cp.async.
TEST(TensorCore, DefaultConfigsAssembleWithoutSpills) {
  const std::string ptxas = "/usr/local/cuda/bin/ptxas";
  if (!fs::exists(ptxas)) GTEST_SKIP() << ptxas << " is not installed (NVIDIA's CUDA toolkit)";
  const char* shapes[] = {"matmul(M=4096,N=4096,K=4096)",
                          "matmul(M=128,N=2304,K=768,epilogue=bias)",
                          "matmul(M=128,N=768,K=3072,epilogue=bias)",
                          "batch_matmul(B=12,M=128,N=128,K=64)",
                          "matmul(M=1,N=1000,K=2048,epilogue=bias)",
                          "conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)",
                          "conv2d_nchw(N=1,C=512,H=7,W=7,K=512,R=3,S=3,pad=1)",
                          "conv2d_nchw(N=1,C=1024,H=14,W=14,K=256,R=1,S=1)",
                          "conv2d_nhwc(N=1,H=56,W=56,C=64,K=64,R=3,S=3,pad=1)"};
  int sample = 0;
  for (const char* arch : {"sm_80", "sm_90"}) {
    const Target t = parse_target(std::string("cuda -arch=") + arch);
    const GpuArch sm = gpu_arch(t);
    for (const char* p : kPrecisions) {
      for (const char* shape : shapes) {
        if (!testing::sampled(sample++, 3)) continue;
        Workload w = parse_workload(with_precision(shape, p));
        CompiledKernel k = compile_kernel(w, t, nullptr, "default", "");
        std::string what = w.canonical() + " on " + arch + " config " + k.config.dump();
        std::string path = testing::temp_dir() + "/tc_" + arch + ".ptx";
        write_kernel(k, EmitKind::Asm, path);
        CommandResult r =
            run_command({ptxas, "-v", std::string("-arch=") + arch, path, "-o", path + ".cubin"});
        ASSERT_EQ(r.exit_code, 0) << what << ": " << r.output;
        std::smatch m;
        ASSERT_TRUE(std::regex_search(r.output, m, std::regex("Used ([0-9]+) registers")))
            << r.output;
        const int64_t registers = std::stoll(m[1]);
        EXPECT_NE(r.output.find("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
                  std::string::npos)
            << what << r.output;
        const int64_t threads = k.gpu->kernels.at(0).launch.threads_per_block();
        EXPECT_LE(registers * threads * 2, sm.registers_per_sm)
            << what << ": " << registers << " registers";
        const std::string ptx = read_file(path);
        const int64_t per_step = k.config["tiles_m"].get<int64_t>() *
                                 k.config["tiles_n"].get<int64_t>() *
                                 k.config["unroll_k"].get<int64_t>();
        EXPECT_EQ(count(ptx, "mma.sync.aligned"), per_step) << what;
        // The tiles in flight are copied asynchronously.
        if (k.config["stages"].get<int64_t>() > 1) {
          EXPECT_GT(count(ptx, "cp.async"), 0) << what;
        }
        std::printf("figure: %s: %lld registers, %lld threads, %lld products per iteration\n",
                    what.c_str(), static_cast<long long>(registers),
                    static_cast<long long>(threads), static_cast<long long>(per_step));
      }
    }
  }
}

// Tiles past the static 48 KiB (CUTLASS's 128 x 128 blocks, K chunks of 32, 4 stages) are in
// the space up to the architecture's opt-in limit and run from dynamic shared memory: the
// emulated blocks match the reference, ptxas takes the PTX without spills, and an
// architecture with less shared memory per block refuses the config by name.
TEST(TensorCore, TilesPast48KiBRunFromDynamicSharedMemory) {
  const Target sm90 = parse_target("cuda -arch=sm_90"), sm86 = parse_target("cuda -arch=sm_86");
  const nlohmann::json wide = {{"warps_m", 2}, {"warps_n", 4}, {"tiles_m", 4}, {"tiles_n", 4},
                               {"unroll_k", 2}, {"shared", true},  {"stages", 4},  {"split_k", 1}};
  Workload big = parse_workload("matmul(M=4096,N=4096,K=4096,precision=fp16)");
  OpGraph g = build_op(big);
  EXPECT_EQ(check_constraints(g, sm90, wide), "");
  // 4 x (128 x (32 + 4) + 32 x (128 + 8)) floats.
  EXPECT_EQ(check_constraints(g, sm86, wide),
            "143360 bytes of shared memory per block (the limit of sm_86 is 101376)");
  CompiledKernel k = compile_kernel(big, sm90, wide, "given", "");
  EXPECT_EQ(k.launch()->dynamic_shared_bytes, 143360);
  EXPECT_EQ(k.launch()->static_shared_bytes, 0);
  // The default stays within the static 48 KiB (measured on an H200; larger ones are not yet).
  CompiledKernel d = compile_kernel(big, sm90, nullptr, "default", "");
  EXPECT_EQ(d.launch()->dynamic_shared_bytes, 0);
  EXPECT_GT(d.launch()->static_shared_bytes, 0);
  if (fs::exists(kPtxas)) {
    const std::string ptx = assemble_sm90(k, "the 128 x 128 block in 143,360 bytes");
    EXPECT_EQ(count(ptx, "mma.sync.aligned"), 4 * 4 * 2);
    EXPECT_GT(count(ptx, "cp.async.cg.shared.global"), 0);
    EXPECT_NE(ptx.find(".extern .shared .align 16 .b8 tf_dynamic_shared[]"), std::string::npos);
  }
  // 4 warps of 4 x 4 tiles, 110,592 bytes, over a shape nothing divides, emulated.
  nlohmann::json square = wide;
  square["warps_n"] = 2;
  Workload small = parse_workload("matmul(M=130,N=70,K=100,epilogue=bias,precision=fp16)");
  CompiledKernel e = compile_kernel(small, sm90, square, "given", "");
  EXPECT_EQ(e.launch()->dynamic_shared_bytes, 110592);
  testing::Comparison r = testing::run_gpu_emulated(e.graph, e.lowered.func, sm90, 7);
  EXPECT_TRUE(r.ok()) << r.str();
}

// The defaults of 16-bit products whose operands are inputs (dense_tc) are those an H200 timed
// fastest of the sweep's grid (session 89, compiler/templates/tensor_core_gemm.cc): a BERT
// layer's 128-row GEMMs over K = 768 in 32 x 32 blocks of four stages, float32 activations beside
// 16-bit weights held in 16-bit tiles, its batched products over K <= 128 one step an iteration,
// K = 3,072 still split in four, and 128 x 128 blocks for the large squares of 16-bit operands,
// past the static 48 KiB. TF32 and convolutions keep theirs. Each runs in the emulator over a
// shape nothing divides, and assembles without spills.
TEST(TensorCore, DefaultsOfSixteenBitProductsOfInputsAreTheTimedOnes) {
  const Target sm90 = parse_target("cuda -arch=sm_90");
  auto config = [&](const char* w) {
    const nlohmann::json c = compile_kernel(parse_workload(w), sm90, nullptr, "default", "").config;
    return std::vector<int64_t>{c["warps_m"].get<int64_t>(), c["warps_n"].get<int64_t>(), c["tiles_m"].get<int64_t>(),
                                c["tiles_n"].get<int64_t>(), c["unroll_k"].get<int64_t>(), c["stages"].get<int64_t>(),
                                c["split_k"].get<int64_t>(),  c["half_tiles"].get<bool>()};
  };
  using V = std::vector<int64_t>;
  //        warps_m, warps_n, tiles_m, tiles_n, unroll_k, stages, split_k, half_tiles
  EXPECT_EQ(config("matmul(M=128,N=3072,K=768,trans_b=1,dtype=float32,weight_dtype=float16,epilogue=bias)"),
            (V{2, 2, 1, 2, 2, 4, 1, 1}));
  EXPECT_EQ(config("matmul(M=128,N=768,K=768,trans_b=1,dtype=float16,epilogue=bias)"), (V{2, 2, 1, 2, 2, 4, 1, 0}));
  EXPECT_EQ(config("matmul(M=128,N=768,K=3072,trans_b=1,dtype=float16,epilogue=bias)"), (V{2, 2, 2, 2, 2, 3, 4, 0}));
  EXPECT_EQ(config("batch_matmul(B=12,M=128,N=64,K=128,dtype=float16)"), (V{2, 2, 2, 2, 1, 4, 1, 0}));
  EXPECT_EQ(config("matmul(M=4096,N=4096,K=4096,trans_b=1,dtype=bfloat16)"), (V{2, 4, 4, 4, 2, 3, 1, 0}));
  // Unchanged: both operands float32 (float32 tiles, 128 x 64 blocks within 48 KiB), TF32, a
  // convolution's computed tile (split in 8 parts of 18 steps).
  EXPECT_EQ(config("matmul(M=4096,N=4096,K=4096,precision=fp16)"), (V{2, 2, 4, 4, 1, 2, 1, 0}));
  EXPECT_EQ(config("matmul(M=128,N=768,K=768,precision=tf32)"), (V{2, 2, 2, 2, 2, 3, 4, 0}));
  EXPECT_EQ(config("conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1,precision=fp16)"), (V{2, 2, 2, 2, 2, 3, 8, 0}));
  CompiledKernel wide = compile_kernel(parse_workload("matmul(M=4096,N=4096,K=4096,trans_b=1,dtype=float16)"), sm90,
                                       nullptr, "default", "");
  EXPECT_GT(wide.launch()->dynamic_shared_bytes, 48 * 1024);
  EXPECT_EQ(wide.launch()->static_shared_bytes, 0);
  // The same rules over shapes nothing divides, emulated.
  for (const char* w : {"matmul(M=50,N=300,K=200,trans_b=1,dtype=float32,weight_dtype=float16,epilogue=bias)",
                        "matmul(M=70,N=90,K=100,dtype=bfloat16,epilogue=bias_relu)",
                        "batch_matmul(B=3,M=50,N=40,K=40,dtype=float16)"}) {
    CompiledKernel k = compile_kernel(parse_workload(w), sm90, nullptr, "default", "");
    EXPECT_EQ(k.config["stages"], 4) << w << " " << k.config.dump();
    testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm90, 11);
    EXPECT_TRUE(r.ok()) << w << " " << k.config.dump() << ": " << r.str();
  }
  if (fs::exists(kPtxas)) assemble_sm90(wide, "the 4096^3 default of 16-bit operands");
}

// half_tiles: the tiles of input operands held in 16 bits (rounded as they are copied, K
// innermost, B's tile transposed). Emulated over shapes nothing divides (the padding's selects
// over 16-bit loads), batches, split-K, one stage and several, convolutions (the weights' tile
// copied and the im2col tile computed in 16 bits; NHWC: the weights are B, transposed), against the
// reference of the rounded operands; ptxas: every pair of a fragment one 32-bit shared load
// (none of float32), no rounding but the copies', half the shared memory; and the knob refused
// by name where it has no meaning or would not fit a lane's registers.
TEST(TensorCore, HalfTilesMatchTheReferenceAndLoadFragmentsByLdmatrix) {
  const Target sm80 = parse_target("cuda -arch=sm_80");
  auto with = [](nlohmann::json c) {
    c["half_tiles"] = true;
    c["shared"] = true;
    return c;
  };
  struct Case {
    const char* workload;
    nlohmann::json config;
  };
  const Case cases[] = {
      {"matmul(M=64,N=32,K=64)", with({{"stages", 3}})},
      {"matmul(M=50,N=37,K=40,epilogue=bias_relu)",
       with({{"warps_m", 2}, {"warps_n", 2}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 2}})},
      {"matmul(M=1,N=72,K=48,epilogue=bias)", with({{"stages", 1}})},
      // Ten steps of K through two and three buffers: the copies staged through registers.
      {"matmul(M=40,N=24,K=160,epilogue=bias)",
       with({{"warps_m", 1}, {"warps_n", 2}, {"tiles_m", 2}, {"tiles_n", 1}, {"unroll_k", 1},
             {"stages", 2}})},
      {"matmul(M=40,N=24,K=160)",
       with({{"warps_m", 2}, {"warps_n", 1}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 1},
             {"stages", 3}})},
      {"batch_matmul(B=3,M=20,N=24,K=24)", with({{"stages", 2}})},
      {"matmul(M=50,N=37,K=150)",
       with({{"warps_m", 2}, {"warps_n", 2}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 1},
             {"split_k", 3}})},
      {"conv2d_nchw(N=2,C=5,H=9,W=7,K=20,R=3,S=3,pad=1,epilogue=bias_relu)", with({})},
      {"conv2d_nchw(N=1,C=24,H=6,W=6,K=40,R=1,S=1)", with({{"stages", 2}})},
      {"conv2d_nhwc(N=2,H=7,W=9,C=6,K=24,R=3,S=3,pad=1,epilogue=relu)", with({})},
  };
  int sample = 0;
  for (const char* p : {"fp16", "bf16"}) {
    for (const Case& c : cases) {
      if (!testing::sampled(sample++, 3)) continue;
      Workload w = parse_workload(with_precision(c.workload, p));
      CompiledKernel k = compile_kernel(w, sm80, c.config, "given", "");
      ASSERT_TRUE(k.config["half_tiles"].get<bool>());
      testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm80, 13);
      EXPECT_TRUE(r.ok()) << w.canonical() << " config " << k.config.dump() << ": " << r.str();
    }
  }
  // Refused where it means nothing: TF32 products take float32 operands; no tiles without shared.
  OpGraph tf32 = build_op(parse_workload("matmul(M=64,N=64,K=64,precision=tf32)"));
  nlohmann::json c = complete_config(tf32, sm80, with({}));
  EXPECT_EQ(check_constraints(tf32, sm80, c),
            "half_tiles at precision=tf32 (16-bit tiles are for fp16 and bf16 products)");
  OpGraph fp16 = build_op(parse_workload("matmul(M=64,N=64,K=64,precision=fp16)"));
  c = complete_config(fp16, sm80, {{"half_tiles", true}, {"shared", false}, {"stages", 1}});
  EXPECT_EQ(check_constraints(fp16, sm80, c), "half_tiles without shared (no tiles to hold)");
  // Pipelined, a lane holds its share of the next tiles in registers: 32 x 128 and 128 x 64
  // elements over 64 threads (ptxas spilled this config before the constraint).
  OpGraph big = build_op(parse_workload("matmul(M=1024,N=1024,K=1024,precision=bf16)"));
  c = complete_config(big, sm80,
                      {{"half_tiles", true}, {"stages", 3}, {"tiles_m", 1}, {"tiles_n", 8},
                       {"unroll_k", 8}, {"warps_m", 2}, {"warps_n", 1}, {"split_k", 1}});
  EXPECT_EQ(check_constraints(big, sm80, c),
            "32 accumulators and 192 registers of the next tiles per lane (16-bit tiles) leave fewer "
            "than 64 of the 255 registers a thread of 64 can have for its operands");
  c["half_tiles"] = false;
  EXPECT_EQ(check_constraints(big, sm80, c), "");

  if (!fs::exists(kPtxas)) GTEST_SKIP() << kPtxas << " is not installed (NVIDIA's CUDA toolkit)";
  const Target sm90 = parse_target("cuda -arch=sm_90");
  for (const char* p : {"fp16", "bf16"}) {
    Workload w = parse_workload(with_precision("matmul(M=128,N=768,K=3072,epilogue=bias)", p));
    CompiledKernel full = compile_kernel(w, sm90, nullptr, "default", "");
    nlohmann::json hc = full.config;
    hc["half_tiles"] = true;
    CompiledKernel half = compile_kernel(w, sm90, hc, "given", "");
    std::string what = w.canonical() + " config " + half.config.dump();
    const std::string ptx = assemble_sm90(half, what);
    const int64_t tm = half.config["tiles_m"], tn = half.config["tiles_n"],
                  uk = half.config["unroll_k"];
    EXPECT_EQ(count(ptx, "mma.sync.aligned"), tm * tn * uk) << what;
    // A's fragment is one ldmatrix x4 a tile and step (4 words), B's two tiles' one x4 (an odd
    // one out an x2: pair_fragments); nothing loads a float, or a word alone, from shared memory.
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), tm * uk + tn * uk / 2)
        << what;
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x2.shared.b16"), tn * uk % 2) << what;
    EXPECT_EQ(count(ptx, "ld.shared.b32") + count(ptx, "ld.shared.u32"), 0) << what;
    EXPECT_EQ(count(ptx, "ld.shared.f32") + count(ptx, "ld.shared.v2.f32"), 0) << what;
    // Each value is rounded once, as it is copied: as many roundings as copied floats.
    const int64_t loads = count(ptx, "ld.global.nc.f32") + 4 * count(ptx, "ld.global.nc.v4.f32");
    const std::string cvt = std::string("cvt.rn.") + (std::string(p) == "bf16" ? "bf16" : "f16") + ".f32";
    EXPECT_LE(count(ptx, cvt), loads) << what;
    // One instruction each on sm_90, bfloat16 too (not an integer sequence).
    EXPECT_GT(count(ptx, cvt), 0) << what;
    // Rows of A's block and B's columns, each of the K chunk and 8 elements of padding, 2 bytes.
    const int64_t bm = half.config["warps_m"].get<int64_t>() * 16 * tm,
                  bn = half.config["warps_n"].get<int64_t>() * 8 * tn;
    EXPECT_EQ(half.launch()->static_shared_bytes,
              half.config["stages"].get<int64_t>() * (bm + bn) * (16 * uk + 8) * 2)
        << what;
    EXPECT_LT(2 * half.launch()->static_shared_bytes, full.launch()->static_shared_bytes + 4096)
        << what;
  }
}

// dtype=float16 / bfloat16: the operands are 16-bit in global memory, their tiles copies of
// them as they are (cp.async: A's rows, B's rows of N or of K, whichever it is given as), each
// fragment one ldmatrix (B's given as [K][N] transposed), nothing rounded in the kernel. Emulated
// against the reference over shapes nothing divides, K not a multiple of 8 (A copied an element
// at a time), batches, split-K, 1 to 3 stages and no shared tiles; ptxas on a BERT-sized GEMM.
TEST(TensorCore, SixteenBitOperandsAreCopiedAsTheyAreAndMatchTheReference) {
  const Target sm80 = parse_target("cuda -arch=sm_80");
  // Both operands in 16 bits (dtype=), or float32 data times 16-bit weights (weight_dtype=:
  // A's tile float32, or rounded as it is copied with half_tiles).
  auto with_dtype = [](const std::string& w, const char* key, const char* t) {
    return w.substr(0, w.size() - 1) + "," + key + "=" + t + ")";
  };
  struct Case {
    const char* workload;
    nlohmann::json config;  // null: the default
  };
  const Case cases[] = {
      {"matmul(M=64,N=32,K=64)", nullptr},
      {"matmul(M=50,N=37,K=38,epilogue=bias_relu)", nullptr},
      {"matmul(M=40,N=24,K=160,epilogue=bias)",
       {{"warps_m", 1}, {"warps_n", 2}, {"tiles_m", 2}, {"tiles_n", 1}, {"unroll_k", 1}, {"stages", 2}}},
      {"matmul(M=40,N=24,K=160)",
       {{"warps_m", 2}, {"warps_n", 1}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 1}, {"stages", 3}}},
      {"matmul(M=1,N=72,K=48,epilogue=relu)", {{"stages", 1}}},
      {"matmul(M=33,N=16,K=32)", {{"shared", false}, {"stages", 1}}},
      {"batch_matmul(B=3,M=20,N=24,K=24)", {{"stages", 2}}},
      {"matmul(M=50,N=37,K=150)",
       {{"warps_m", 2}, {"warps_n", 2}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 1}, {"split_k", 3}}},
      // B given as [N][K] (trans_b=1): its tile a copy of its rows too.
      {"matmul(M=50,N=37,K=40,trans_b=1,epilogue=bias_relu)", nullptr},
      {"matmul(M=40,N=24,K=160,trans_b=1)",
       {{"warps_m", 1}, {"warps_n", 2}, {"tiles_m", 2}, {"tiles_n", 1}, {"unroll_k", 1}, {"stages", 3}}},
      {"matmul(M=20,N=30,K=38,trans_b=1)", {{"stages", 2}}},
      {"batch_matmul(B=2,M=20,N=24,K=72,trans_b=1)",
       {{"warps_m", 1}, {"warps_n", 2}, {"tiles_m", 2}, {"tiles_n", 1}, {"unroll_k", 1}, {"split_k", 2}}},
  };
  int sample = 0;
  for (const char* key : {"dtype", "weight_dtype"})
  for (const char* t : {"float16", "bfloat16"}) {
    for (const Case& c : cases) {
      if (!testing::sampled(sample++, 3)) continue;
      Workload w = parse_workload(with_dtype(c.workload, key, t));
      nlohmann::json config = c.config;
      // Mixed: every other case rounds A into a 16-bit tile as it is copied.
      if (std::string(key) == "weight_dtype" && sample % 2 == 0) {
        if (config.is_null()) config = nlohmann::json::object();
        if (config.value("shared", true)) config["half_tiles"] = true;
      }
      CompiledKernel k = config.is_null() ? compile_kernel(w, sm80, nullptr, "default", "")
                                          : compile_kernel(w, sm80, config, "given", "");
      EXPECT_EQ(template_name(w, sm80), "dense_tc.cuda.v2");
      std::string what = w.canonical() + " config " + k.config.dump();
      // Shared 16-bit tiles are read by ldmatrix (guarded where the tiles overhang): the
      // emulated warps exchange its rows as the hardware does, so a wrong row address fails.
      const std::string ir = ir::to_string(k.lowered.func);
      EXPECT_EQ(ir.find("ldmatrix(") != std::string::npos, k.config.value("shared", true)) << what;
      // B's fragments (two tiles' paired: frag_b4): B given as [K][N] keeps that layout, read
      // transposed (ldmatrix(row, 2, 1), ldmatrix(row, 4, 1)).
      int64_t b_loads = 0, transposed = 0;
      std::istringstream lines(ir);
      for (std::string line; std::getline(lines, line);) {
        if (line.find("let frag_b = ldmatrix(") == std::string::npos &&
            line.find("let frag_b4 = ldmatrix(") == std::string::npos)
          continue;
        ++b_loads;
        const std::string trans = ", 1)";
        transposed += line.size() > trans.size() &&
                      line.compare(line.size() - trans.size(), trans.size(), trans) == 0;
      }
      EXPECT_EQ(b_loads > 0, k.config.value("shared", true)) << what;
      EXPECT_EQ(transposed, w.get("trans_b") == 1 ? 0 : b_loads) << what;
      testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm80, 17);
      EXPECT_TRUE(r.ok()) << what << ": " << r.str();
    }
  }
  // half_tiles rounds float32 operands: nothing to do here.
  OpGraph g = build_op(parse_workload("matmul(M=64,N=64,K=64,dtype=float16)"));
  nlohmann::json c = complete_config(g, sm80, {{"half_tiles", true}});
  EXPECT_EQ(check_constraints(g, sm80, c), "half_tiles with float16 operands (their tiles are 16-bit already)");

  if (!fs::exists(kPtxas)) GTEST_SKIP() << kPtxas << " is not installed (NVIDIA's CUDA toolkit)";
  const Target sm90 = parse_target("cuda -arch=sm_90");
  for (const char* w16 : {"matmul(M=128,N=768,K=3072,dtype=float16,epilogue=bias)",
                          "matmul(M=128,N=768,K=3072,dtype=bfloat16,epilogue=bias)",
                          "matmul(M=128,N=768,K=3072,dtype=float16,trans_b=1,epilogue=bias)"}) {
    Workload w = parse_workload(w16);
    const bool tb = w.get("trans_b") == 1;
    CompiledKernel k = compile_kernel(w, sm90, nullptr, "default", "");
    std::string what = w.canonical() + " config " + k.config.dump();
    const std::string ptx = assemble_sm90(k, what);
    const int64_t tm = k.config["tiles_m"], tn = k.config["tiles_n"], uk = k.config["unroll_k"];
    EXPECT_EQ(count(ptx, "mma.sync.aligned"), tm * tn * uk) << what;
    // Each fragment one ldmatrix (A's x4, two of B's one x4, an odd one out an x2; transposed
    // where B is kept as given, [K][N]), no word loaded alone.
    const int64_t b4 = tn * uk / 2, b2 = tn * uk % 2;
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), tm * uk + (tb ? b4 : 0))
        << what;
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"), tb ? 0 : b4) << what;
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x2.shared.b16"), tb ? b2 : 0) << what;
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16"), tb ? 0 : b2) << what;
    EXPECT_EQ(count(ptx, "ld.shared.b32") + count(ptx, "ld.shared.u32"), 0) << what;
    // A's tiles are 16-byte cp.async copies; nothing is rounded or loaded from shared as float.
    EXPECT_GT(count(ptx, "cp.async.cg.shared.global"), 0) << what;
    EXPECT_EQ(count(ptx, "cvt.rn.f16.f32") + count(ptx, "cvt.rn.bf16.f32") + count(ptx, "cvt.rn.f16x2.f32"), 0)
        << what;
    EXPECT_EQ(count(ptx, "ld.shared.f32"), 0) << what;
    // B's tiles, given as [N][K] or as [K][N] (kept so: rows of N padded by 8, read
    // transposed), are copied as A's are (cp.async, no element loaded or stored one by one,
    // nothing in local memory).
    EXPECT_EQ(count(ptx, "ld.local") + count(ptx, "st.local"), 0) << what;
    EXPECT_EQ(count(ptx, "st.shared.u16"), 0) << what;
    EXPECT_EQ(count(ptx, "ld.global.nc.u16") + count(ptx, "ld.global.nc.v4.u16"), 0) << what;
    const int64_t bm = k.config["warps_m"].get<int64_t>() * 16 * tm, bn = k.config["warps_n"].get<int64_t>() * 8 * tn;
    const int64_t b_tile = tb ? bn * (16 * uk + 8) : 16 * uk * (bn + 8);
    EXPECT_EQ(k.launch()->static_shared_bytes,
              k.config["stages"].get<int64_t>() * (bm * (16 * uk + 8) + b_tile) * 2)
        << what;
  }
  // Float32 data times 16-bit weights given as [N][K] (a model's weights stored in 16 bits):
  // B's tiles cp.async copies, never loaded an element at a time; A's tile float32 (rounded as
  // the product reads it), or with half_tiles rounded as it is copied, read by ldmatrix.
  Workload mixed = parse_workload("matmul(M=128,N=768,K=3072,weight_dtype=float16,trans_b=1,epilogue=bias)");
  for (bool half : {false, true}) {
    const auto [ptx, what, tm, tn, uk] = assemble_default(mixed, {{"half_tiles", half}});
    EXPECT_EQ(count(ptx, "mma.sync.aligned"), tm * tn * uk) << what;
    EXPECT_GT(count(ptx, "cp.async.cg.shared.global"), 0) << what;
    EXPECT_EQ(count(ptx, "ld.global.nc.u16") + count(ptx, "ld.global.nc.v4.u16"), 0) << what;
    EXPECT_EQ(count(ptx, "ld.shared.b32") + count(ptx, "ld.shared.u32"), 0) << what;
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
              (half ? tm * uk : 0) + tn * uk / 2)
        << what;
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x2.shared.b16"), tn * uk % 2) << what;
    EXPECT_EQ(count(ptx, "ld.shared.f32") + count(ptx, "ld.shared.v2.f32") > 0, !half) << what;
  }
}

// Convolutions of 16-bit weights (weight_dtype: a cuda model's weights stored in 16 bits) and
// float32 data. NCHW: the weights are A, their tile a copy of their rows (cp.async where C R S
// is a multiple of 8) read by ldmatrix, the im2col tile B float32 (rounded as the product reads
// it) or with half_tiles rounded as it is computed; NHWC: the weights are B, transposed as they
// are copied. Emulated against the reference over padding, strides, dilation, 1x1, odd channel
// counts (C R S not a multiple of 8: copied an element at a time), batches, split-K, stages and
// no shared tiles; ptxas on ResNet-50's layers.
TEST(TensorCore, ConvolutionsOf16BitWeightsMatchTheReference) {
  const Target sm80 = parse_target("cuda -arch=sm_80");
  struct Case {
    const char* workload;
    nlohmann::json config;  // null: the default
  };
  const Case cases[] = {
      {"conv2d_nchw(N=2,C=5,H=9,W=7,K=20,R=3,S=3,pad=1,epilogue=bias_relu)", nullptr},
      {"conv2d_nchw(N=1,C=24,H=6,W=6,K=40,R=1,S=1,epilogue=bias)", nullptr},
      {"conv2d_nchw(N=1,C=8,H=10,W=10,K=24,R=3,S=3,stride=2,pad=2,dilation=2)",
       {{"warps_m", 1}, {"warps_n", 2}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 2}, {"stages", 2},
        {"half_tiles", true}}},
      {"conv2d_nchw(N=2,C=9,H=7,W=7,K=24,R=3,S=3,pad=1,epilogue=bias_relu)",
       {{"warps_m", 1}, {"warps_n", 2}, {"tiles_m", 2}, {"tiles_n", 2}, {"unroll_k", 1}, {"stages", 2},
        {"split_k", 4}}},
      {"conv2d_nchw(N=1,C=16,H=6,W=6,K=16,R=3,S=3,pad=1)", {{"shared", false}, {"stages", 1}}},
      {"conv2d_nchw(N=1,C=32,H=5,W=5,K=48,R=1,S=1,epilogue=relu)",
       {{"warps_m", 1}, {"warps_n", 1}, {"tiles_m", 2}, {"tiles_n", 2}, {"unroll_k", 1}, {"stages", 3},
        {"half_tiles", true}}},
      {"conv2d_nhwc(N=2,H=7,W=9,C=6,K=24,R=3,S=3,pad=1,epilogue=relu)", nullptr},
      {"conv2d_nhwc(N=1,H=8,W=8,C=16,K=32,R=3,S=3,stride=2,pad=1,epilogue=bias)",
       {{"warps_m", 2}, {"warps_n", 1}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 1}, {"stages", 2}}},
  };
  int sample = 0;
  // weight_dtype: the weights in 16 bits; dtype: the data too (a value a model stores in 16 bits
  // between kernels), its im2col tile computed from it and stored in 16 bits.
  for (const char* key : {"weight_dtype", "dtype"})
  for (const char* t : {"float16", "bfloat16"}) {
    for (const Case& c : cases) {
      if (!testing::sampled(sample++, 3)) continue;
      const std::string text = c.workload;
      nlohmann::json config = c.config;
      if (std::string(key) == "dtype" && !config.is_null() && config.value("half_tiles", false)) config["half_tiles"] = false;
      Workload w = parse_workload(text.substr(0, text.size() - 1) + "," + key + "=" + t + ")");
      CompiledKernel k = config.is_null() ? compile_kernel(w, sm80, nullptr, "default", "")
                                          : compile_kernel(w, sm80, config, "given", "");
      EXPECT_EQ(template_name(w, sm80), "conv2d_tc.cuda.v2");
      std::string what = w.canonical() + " config " + k.config.dump();
      EXPECT_EQ(k.graph.inputs[1]->dtype, ir::Type::uint16()) << what;
      EXPECT_EQ(k.graph.inputs[0]->dtype, std::string(key) == "dtype" ? ir::Type::uint16() : ir::Type::float32()) << what;
      EXPECT_EQ(ir::to_string(k.lowered.func).find("ldmatrix(") != std::string::npos, k.config.value("shared", true))
          << what;
      testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm80, 23);
      EXPECT_TRUE(r.ok()) << what << ": " << r.str();
    }
  }
  // CPUs have no template for it (they refuse the rounding by name, as precision=fp16's).
  EXPECT_THROW(compile_kernel(parse_workload("conv2d_nchw(N=1,C=8,H=6,W=6,K=16,R=3,S=3,weight_dtype=float16)"),
                              parse_target("llvm"), nullptr, "default", ""),
               UserError);

  if (!fs::exists(kPtxas)) GTEST_SKIP() << kPtxas << " is not installed (NVIDIA's CUDA toolkit)";
  for (const char* conv : {"conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,weight_dtype=float16,epilogue=bias_relu)",
                           "conv2d_nchw(N=1,C=256,H=14,W=14,K=1024,R=1,S=1,weight_dtype=bfloat16,epilogue=bias)"}) {
    Workload w = parse_workload(conv);
    for (bool half : {false, true}) {
      const auto [ptx, what, tm, tn, uk] = assemble_default(w, {{"half_tiles", half}});
      EXPECT_EQ(count(ptx, "mma.sync.aligned"), tm * tn * uk) << what;
      // The weights' tiles: 16-byte cp.async copies (C R S is a multiple of 8), never a 16-bit
      // element loaded alone, each fragment one ldmatrix.x4.
      EXPECT_GT(count(ptx, "cp.async.cg.shared.global"), 0) << what;
      EXPECT_EQ(count(ptx, "ld.global.nc.u16") + count(ptx, "ld.global.u16"), 0) << what;
      // The im2col tile float32 (loaded as floats), or 16-bit with half_tiles (two tiles'
      // fragments one ldmatrix.x4, an odd one out an x2).
      EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
                tm * uk + (half ? tn * uk / 2 : 0))
          << what;
      EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x2.shared.b16"), half ? tn * uk % 2 : 0)
          << what;
      EXPECT_EQ(count(ptx, "ld.shared.b32") + count(ptx, "ld.shared.u32"), 0) << what;
      EXPECT_EQ(count(ptx, "ld.local") + count(ptx, "st.local"), 0) << what;
    }
  }
  // 16-bit data too: the im2col tile is computed from it into 16 bits (both fragments ldmatrix),
  // nothing rounded in the product (the tile's stores round exactly).
  const auto [ptx, what, tm, tn, uk] =
      assemble_default(parse_workload("conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,dtype=float16,epilogue=bias_relu)"),
                       nlohmann::json::object());
  EXPECT_EQ(count(ptx, "mma.sync.aligned"), tm * tn * uk) << what;
  EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), tm * uk + tn * uk / 2) << what;
  EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x2.shared.b16"), tn * uk % 2) << what;
  EXPECT_EQ(count(ptx, "ld.shared.f32") + count(ptx, "ld.shared.b32") + count(ptx, "ld.shared.u32"), 0) << what;
  EXPECT_EQ(count(ptx, "ld.local") + count(ptx, "st.local"), 0) << what;
}

// A model's product whose output only tensor-core products read stores it in 16 bits
// (graph sixteen-bit-edges: a storage Cast in its tail, ir kFloatToF16 / kFloatToBF16): the
// kernel's 16-bit output is exactly the float32 kernel's output rounded, over the bias and Relu
// epilogue, split-K (the cast in the sum's kernel) and guarded tails.
TEST(TensorCore, AStorageCastTailStoresTheRoundedOutput) {
  const Target sm80 = parse_target("cuda -arch=sm_80");
  struct Case {
    const char* workload;
    nlohmann::json config;
  };
  const Case cases[] = {
      {"conv2d_nchw(N=1,C=8,H=6,W=5,K=20,R=3,S=3,pad=1,dtype=float16,epilogue=bias_relu)", nullptr},
      {"matmul(M=40,N=26,K=32,trans_b=1,dtype=bfloat16,epilogue=bias)", nullptr},
      // One row (a batch-1 MLP's): the default's one 16 x 8 tile a warp.
      {"matmul(M=1,N=32,K=64,trans_b=1,weight_dtype=float16,epilogue=bias_relu)", nullptr},
      {"matmul(M=1,N=10,K=32,trans_b=1,dtype=float16,epilogue=bias)", nullptr},
      {"matmul(M=50,N=37,K=150,weight_dtype=float16,epilogue=relu)",
       {{"warps_m", 2}, {"warps_n", 2}, {"tiles_m", 1}, {"tiles_n", 2}, {"unroll_k", 1}, {"split_k", 3}}},
  };
  int sample = 0;
  for (const Case& c : cases) {
    if (!testing::sampled(sample++, 2)) continue;
    const Workload w = parse_workload(c.workload);
    const bool bf16 = w.types.precision == Precision::BFloat16;
    const OpGraph plain = build_op(w);
    OpGraph cast = plain;
    cast.tail.push_back(cast.output);
    std::vector<std::string> names;
    for (size_t d = 0; d < cast.output->shape.size(); ++d) names.push_back(str("s", d));
    const ir::Tensor out = cast.output;
    cast.output = ir::compute("stored", out->shape, names, [&](const std::vector<ir::Expr>& ax) {
      // Read as a model's elementwise tail reads (graph/node_te.h read_broadcast): a dimension
      // of extent 1 at index 0, so that a one-row product's tail does not depend on the row
      // (the fragment's rows must be computed whole all the same).
      std::vector<ir::Expr> at = ax;
      for (size_t d = 0; d < at.size(); ++d)
        if (out->shape[d] == 1) at[d] = ir::Expr(int64_t{0});
      return ir::Call::make(bf16 ? ir::kFloatToBF16 : ir::kFloatToF16, {ir::read(out, at)});
    });
    std::vector<std::vector<float>> results;
    for (const OpGraph* g : {&plain, static_cast<const OpGraph*>(&cast)}) {
      CompiledKernel k = compile_op_graph(*g, sm80, c.config, c.config.is_null() ? "default" : "given", "k");
      std::string what = w.canonical() + " config " + k.config.dump();
      std::vector<std::vector<float>> bufs;
      for (size_t i = 0; i < g->inputs.size(); ++i) {
        const std::string type = g->arg_dtype(g->inputs[i]);
        bufs.emplace_back(static_cast<size_t>(ir::num_elements(g->inputs[i]->shape)));
        fill_typed(type, bufs.back().data(), static_cast<int64_t>(bufs.back().size()), 31 + i);
        store_as(type, bufs.back().data(), static_cast<int64_t>(bufs.back().size()));
      }
      const int64_t n = ir::num_elements(g->output->shape);
      bufs.emplace_back(static_cast<size_t>(g == &cast ? (n + 1) / 2 : n), std::nanf(""));
      GpuProgram prog = split_gpu_program(k.lowered.func);
      for (const auto& [name, size] : prog.workspaces) bufs.emplace_back(static_cast<size_t>(size), std::nanf(""));
      for (const ir::LoweredFunc& kf : prog.kernels) ASSERT_EQ(testing::emulate_gpu_kernel(kf, check_gpu_kernel(kf, sm80), bufs), 0) << what;
      std::vector<float> got(static_cast<size_t>(n));
      if (g == &cast) {
        std::vector<uint16_t> bits(static_cast<size_t>(n));
        std::memcpy(bits.data(), bufs[g->inputs.size()].data(), bits.size() * 2);
        for (int64_t e = 0; e < n; ++e) got[static_cast<size_t>(e)] = bf16 ? bf16_value(bits[static_cast<size_t>(e)]) : f16_value(bits[static_cast<size_t>(e)]);
      } else {
        got = bufs[g->inputs.size()];
      }
      results.push_back(std::move(got));
    }
    for (size_t e = 0; e < results[0].size(); ++e)
      ASSERT_EQ(results[1][e], bf16 ? round_bf16(results[0][e]) : round_f16(results[0][e])) << c.workload << " at " << e;
  }
}

// A model's product whose tail reads a 16-bit value beside its result (graph sixteen-bit-edges:
// a residual Add reading the skip through a widening Cast, ir kF16ToFloat / kBF16ToFloat):
// each output is exactly the plain kernel's plus the widened value, over mma.sync and wgmma,
// bias epilogues, split-K (the tail in the sum's kernel), NCHW and NHWC convolutions, guarded
// tails of C and the float32 GPU templates.
TEST(TensorCore, ATailReadsASixteenBitResidual) {
  struct Case {
    const char* target;
    const char* workload;
    nlohmann::json config;
  };
  const nlohmann::json wgmma = {{"warps_m", 4},        {"warps_n", 1},           {"tiles_m", 1},
                                {"tiles_n", 4},        {"unroll_k", 2},          {"shared", true},
                                {"stages", 4},         {"split_k", 1},           {"wgmma", true},
                                {"half_tiles", false}, {"wgmma_in_flight", true}};
  const Case cases[] = {
      {"cuda -arch=sm_80", "matmul(M=40,N=26,K=32,trans_b=1,dtype=float16,epilogue=bias)", nullptr},
      {"cuda -arch=sm_80",
       "conv2d_nchw(N=1,C=8,H=6,W=5,K=20,R=3,S=3,pad=1,dtype=bfloat16,epilogue=bias)", nullptr},
      {"cuda -arch=sm_80", "conv2d_nhwc(N=1,H=5,W=6,C=16,K=24,R=1,S=1,dtype=float16)", nullptr},
      {"cuda -arch=sm_80",
       "matmul(M=50,N=37,K=150,weight_dtype=float16,epilogue=bias)",
       {{"warps_m", 2},
        {"warps_n", 2},
        {"tiles_m", 1},
        {"tiles_n", 2},
        {"unroll_k", 1},
        {"split_k", 3}}},
      {"cuda -arch=sm_90", "matmul(M=100,N=64,K=128,trans_b=1,dtype=bfloat16,epilogue=bias)",
       wgmma},
      // float32 templates beside them (a depthwise convolution, grouped, products whose weights
      // float16 cannot hold): the skip read the same way.
      {"cuda -arch=sm_80",
       "depthwise_conv2d_nchw(N=1,C=9,H=10,W=9,R=3,S=3,stride=2,pad=1,epilogue=bias)", nullptr},
      {"cuda -arch=sm_80",
       "conv2d_nchw(N=1,C=12,H=9,W=8,K=18,R=3,S=3,pad=1,group=3,epilogue=bias_relu)", nullptr},
      {"cuda -arch=sm_80", "matmul(M=33,N=70,K=40,epilogue=bias)", nullptr},
  };
  int sample = 0;
  for (const Case& c : cases) {
    if (!testing::sampled(sample++, 2)) continue;
    const Target target = parse_target(c.target);
    const Workload w = parse_workload(c.workload);
    const bool bf16 = w.types.precision == Precision::BFloat16 || sample % 2 == 0;
    const OpGraph plain = build_op(w);
    OpGraph res = plain;
    res.tail.push_back(res.output);
    const ir::Tensor out = res.output;
    const ir::Tensor skip = ir::placeholder("skip", out->shape, ir::Type::uint16());
    res.inputs.push_back(skip);
    res.word_types[skip->name] = bf16 ? "bfloat16" : "float16";
    std::vector<std::string> names;
    for (size_t d = 0; d < out->shape.size(); ++d) names.push_back(str("s", d));
    res.output = ir::compute("residual", out->shape, names, [&](const std::vector<ir::Expr>& ax) {
      return ir::read(out, ax) +
             ir::Call::make(bf16 ? ir::kBF16ToFloat : ir::kF16ToFloat, {ir::read(skip, ax)});
    });
    std::vector<std::vector<float>> results;
    std::vector<float> skip_values;
    for (const OpGraph* g : {&plain, static_cast<const OpGraph*>(&res)}) {
      CompiledKernel k =
          compile_op_graph(*g, target, c.config, c.config.is_null() ? "default" : "given", "k");
      const std::string what = w.canonical() + " config " + k.config.dump();
      std::vector<std::vector<float>> bufs;
      for (size_t i = 0; i < g->inputs.size(); ++i) {
        const std::string type = g->arg_dtype(g->inputs[i]);
        bufs.emplace_back(static_cast<size_t>(ir::num_elements(g->inputs[i]->shape)));
        fill_typed(type, bufs.back().data(), static_cast<int64_t>(bufs.back().size()), 31 + i);
        if (g->inputs[i] == skip) skip_values = bufs.back();
        store_as(type, bufs.back().data(), static_cast<int64_t>(bufs.back().size()));
      }
      const int64_t n = ir::num_elements(g->output->shape);
      bufs.emplace_back(static_cast<size_t>(n), std::nanf(""));
      GpuProgram prog = split_gpu_program(k.lowered.func);
      for (const auto& [name, size] : prog.workspaces)
        bufs.emplace_back(static_cast<size_t>(size), std::nanf(""));
      for (const ir::LoweredFunc& kf : prog.kernels)
        ASSERT_EQ(testing::emulate_gpu_kernel(kf, check_gpu_kernel(kf, target), bufs), 0) << what;
      results.push_back(bufs[g->inputs.size()]);
      if (g != &res || !fs::exists(kPtxas)) continue;
      // The 16-bit loads and conversions assemble (sm_90a where the kernel has wgmma).
      const std::string path = testing::temp_dir() + "/tc_residual.ptx";
      write_kernel(k, EmitKind::Asm, path);
      const bool sm90 = std::string(c.target).find("sm_90") != std::string::npos;
      CommandResult as =
          run_command({kPtxas, sm90 ? "-arch=sm_90a" : "-arch=sm_80", path, "-o", path + ".cubin"});
      EXPECT_EQ(as.exit_code, 0) << what << ": " << as.output;
    }
    ASSERT_EQ(skip_values.size(), results[0].size());
    for (size_t e = 0; e < results[0].size(); ++e)
      ASSERT_EQ(results[1][e], results[0][e] + skip_values[e]) << c.workload << " at " << e;
  }
}

// A config: `base` with `knobs` set over it; a workload with the knobs of its case.
nlohmann::json with_knobs(nlohmann::json base, const nlohmann::json& knobs) {
  for (const auto& [key, value] : knobs.items()) base[key] = value;
  return base;
}
struct KnobCase {
  const char* workload;
  nlohmann::json knobs;
};

// wgmma (Hopper's warpgroup-level products, sm_90): a warpgroup's 64 x 8*tiles_n tile by one
// product per 16 of K, both 16-bit tiles read from shared memory in core matrices. Emulated
// (each warpgroup's 128 threads meet; the product reads the tiles where the descriptors say)
// over tails of C, epilogues, batches, split-K, stages, several warpgroups, 16-bit operands
// given (B transposed as it is copied) and float32 ones rounded (half_tiles); ptxas for sm_90a:
// unroll_k products an iteration, no spills; and the configs it cannot take refused by name.
TEST(TensorCore, WgmmaTilesMatchTheReferenceAndAssemble) {
  const Target sm90 = parse_target("cuda -arch=sm_90");
  const nlohmann::json base = {{"warps_m", 4}, {"warps_n", 1}, {"tiles_m", 1}, {"tiles_n", 4},   {"unroll_k", 2},
                               {"shared", true}, {"stages", 1}, {"split_k", 1}, {"half_tiles", true}, {"wgmma", true}};
  auto with = [&](const nlohmann::json& knobs) { return with_knobs(base, knobs); };
  const KnobCase cases[] = {
      {"matmul(M=64,N=32,K=32,precision=fp16)", nlohmann::json::object()},
      // Tails of C past the blocks (guarded; the tiles' rows past it reach only those).
      {"matmul(M=100,N=72,K=64,precision=bf16,epilogue=bias_relu)", nlohmann::json::object()},
      {"matmul(M=64,N=64,K=192,precision=fp16,epilogue=bias)", {{"tiles_n", 8}, {"stages", 3}}},
      {"matmul(M=128,N=40,K=96,precision=fp16)",
       {{"warps_m", 8}, {"tiles_n", 5}, {"unroll_k", 1}, {"stages", 2}}},
      {"matmul(M=64,N=64,K=128,precision=bf16)", {{"warps_n", 2}, {"split_k", 2}}},
      {"batch_matmul(B=2,M=64,N=48,K=64,precision=fp16)", {{"tiles_n", 6}}},
      // 16-bit operands given: B as [K][N] transposed through registers, or [N][K] as it is.
      {"matmul(M=64,N=64,K=64,dtype=float16)",
       {{"half_tiles", false}, {"stages", 2}, {"tiles_n", 8}}},
      {"matmul(M=70,N=48,K=64,dtype=bfloat16,trans_b=1,epilogue=bias)",
       {{"half_tiles", false}, {"tiles_n", 6}}},
      {"matmul(M=64,N=32,K=96,weight_dtype=float16,trans_b=1)", {{"unroll_k", 3}}},
      // Convolutions: the weights as the GEMM's [K][C R S] matrix, the im2col tile computed
      // into core matrices (NCHW: B; NHWC: A), 3x3 and 1x1, two images.
      {"conv2d_nchw(N=1,C=64,H=8,W=8,K=64,R=3,S=3,pad=1,precision=fp16,epilogue=bias_relu)",
       {{"stages", 2}}},
      {"conv2d_nchw(N=2,C=32,H=6,W=6,K=64,R=1,S=1,weight_dtype=float16,epilogue=bias)",
       nlohmann::json::object()},
      {"conv2d_nhwc(N=1,H=8,W=8,C=32,K=64,R=3,S=3,pad=1,dtype=bfloat16)",
       {{"half_tiles", false}, {"tiles_n", 8}}},
  };
  int sample = 0;
  for (const KnobCase& c : cases) {
    Workload w = parse_workload(c.workload);
    CompiledKernel k = compile_kernel(w, sm90, with(c.knobs), "given", "");
    const std::string what = w.canonical() + " config " + k.config.dump();
    if (testing::sampled(sample++, 3)) {
      testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm90, 7);
      EXPECT_TRUE(r.ok()) << what << ": " << r.str();
    }
    if (!fs::exists(kPtxas)) continue;
    const std::string ptx = assemble_sm90(k, what);
    EXPECT_NE(ptx.find(".target sm_90a"), std::string::npos) << what;
    const int64_t n = 8 * k.config["tiles_n"].get<int64_t>();
    EXPECT_EQ(count(ptx, str("wgmma.mma_async.sync.aligned.m64n", n, "k16.f32.")),
              k.config["unroll_k"].get<int64_t>())
        << what;
    EXPECT_EQ(count(ptx, "mma.sync"), 0) << what;
  }
  // 16-bit operands given as [M][K] and [N][K], pipelined: both tiles' copies are cp.async
  // into the core matrices (16 bytes a lane, consecutive within each), none through registers.
  if (fs::exists(kPtxas)) {
    Workload w = parse_workload("matmul(M=128,N=128,K=256,dtype=float16,trans_b=1)");
    CompiledKernel k = compile_kernel(w, sm90, with({{"half_tiles", false}, {"tiles_n", 16}, {"unroll_k", 4}, {"stages", 3}}),
                                      "given", "");
    const std::string ptx = assemble_sm90(k, w.canonical());
    EXPECT_GT(count(ptx, "cp.async.cg.shared.global"), 0) << ptx;
    EXPECT_EQ(count(ptx, "st.shared"), 0) << ptx;
  }
  // Refused by name where it cannot run or would read what it must not.
  auto refusal = [&](const std::string& workload, const nlohmann::json& knobs, const char* target = "cuda -arch=sm_90") {
    OpGraph g = build_op(parse_workload(workload));
    const Target t = parse_target(target);
    return check_constraints(g, t, complete_config(g, t, with(knobs)));
  };
  const std::string m = "matmul(M=64,N=64,K=64,precision=fp16)";
  const std::pair<std::string, std::string> refused[] = {
      {refusal(m, nlohmann::json::object(), "cuda -arch=sm_80"), "wgmma on sm_80 (Hopper's warpgroup-level products: sm_90 only)"},
      {refusal("matmul(M=64,N=64,K=64,precision=tf32)", {{"half_tiles", false}}), "wgmma at precision=tf32"},
      {refusal(m, {{"half_tiles", false}}), "wgmma with float32 in fp16 operands and no half_tiles (it reads 16-bit tiles)"},
      {refusal(m, {{"tiles_m", 2}}), "wgmma with warps_m 4 and tiles_m 2"},
      {refusal(m, {{"warps_m", 2}, {"warps_n", 2}}), "wgmma with warps_m 2 and tiles_m 1"},
      {refusal("matmul(M=48,N=64,K=64,precision=fp16)", nlohmann::json::object()),
       "wgmma with a block tile of 64 x 32 for C of 48 x 64 (its tiles would be trimmed)"},
      {refusal("matmul(M=64,N=64,K=72,precision=fp16)", nlohmann::json::object()),
       "wgmma with a K of 72 that 1 parts of 96 do not cover exactly"},
      // A ResNet stem's 3 x 7 x 7 = 147 of K.
      {refusal("conv2d_nchw(N=1,C=3,H=32,W=32,K=64,R=7,S=7,stride=2,pad=3,precision=fp16)", nlohmann::json::object()),
       "wgmma with a K of 147 that 1 parts of"},
  };
  for (const auto& [got, want] : refused) EXPECT_NE(got.find(want), std::string::npos) << got;
  // A config given by hand is not filtered by the constraints: compiling it says the same.
  testing::expect_user_error([&] { compile_kernel(parse_workload(m), sm90, {{"wgmma", true}}, "given", ""); },
                             "config knob wgmma=true for matmul(M=64,N=64,K=64,precision=fp16,epilogue=none): "
                             "wgmma with float32 in fp16 operands and no half_tiles");
}

// wgmma_in_flight: each iteration's products run on while the next one copies and issues its
// own. The loop IR: the copies stages - 2 tiles ahead (waiting for all but stages - 3 groups of
// them), the products waited for at the end of each iteration with that iteration's unroll_k
// still pending, and for all after the loop, before anything reads the accumulators.
// Emulated over stages 3 and 4, both types, B staged through registers, split-K, a
// convolution: the emulator's products read at once, but each wait checks that what the
// products it retires read is still there (kernel_harness.cc tunefarm_emulated_wgmma_wait: a
// copy into a tile still in flight stops the program, as the copies run stages - 1 ahead do);
// ptxas assembles each without injecting waits of its own (it does, and says so, where
// anything but a product touches accumulators in flight) and with the two waits in the PTX, and
// one wgmma.fence an iteration (before its first product; none between products since session 94).
// Refused by name without wgmma or with fewer than 3 stages.
TEST(TensorCore, WgmmaProductsStayInFlightAcrossTheNextIteration) {
  const Target sm90 = parse_target("cuda -arch=sm_90");
  const nlohmann::json base = {{"warps_m", 4},  {"warps_n", 1},           {"tiles_m", 1},
                               {"tiles_n", 4},  {"unroll_k", 2},          {"shared", true},
                               {"stages", 3},   {"split_k", 1},           {"half_tiles", true},
                               {"wgmma", true}, {"wgmma_in_flight", true}};
  auto with = [&](const nlohmann::json& knobs) { return with_knobs(base, knobs); };
  const KnobCase cases[] = {
      {"matmul(M=64,N=64,K=192,precision=fp16,epilogue=bias)", {{"tiles_n", 8}}},
      {"matmul(M=100,N=72,K=256,precision=bf16,epilogue=bias_relu)",
       {{"stages", 4}, {"unroll_k", 1}}},
      {"matmul(M=128,N=64,K=256,dtype=float16,trans_b=1)",
       {{"warps_m", 8}, {"tiles_n", 8}, {"half_tiles", false}, {"stages", 4}}},
      // B given as [K][N]: its tiles transposed through registers, stored after the products.
      {"matmul(M=64,N=64,K=128,dtype=bfloat16)", {{"half_tiles", false}, {"tiles_n", 8}}},
      {"matmul(M=64,N=64,K=256,precision=fp16)", {{"warps_n", 2}, {"split_k", 2}}},
      // K of one chunk: the loop of one iteration is inlined, its marks and waits stay.
      {"batch_matmul(B=2,M=64,N=64,K=32,precision=fp16)", {{"tiles_n", 8}}},
      {"conv2d_nchw(N=1,C=64,H=8,W=8,K=64,R=3,S=3,pad=1,precision=fp16,epilogue=bias_relu)",
       {{"stages", 4}}},
  };
  for (const KnobCase& c : cases) {
    Workload w = parse_workload(c.workload);
    CompiledKernel k = compile_kernel(w, sm90, with(c.knobs), "given", "");
    const std::string what = w.canonical() + " config " + k.config.dump();
    const int64_t stages = k.config["stages"], uk = k.config["unroll_k"];
    const std::string ir = ir::to_string(k.lowered.func);
    EXPECT_EQ(count(ir, str("async_wait(", stages - 3, ")")), 1) << what << "\n" << ir;
    EXPECT_EQ(count(ir, str("wgmma_wait(", uk, ", ")), 1) << what << "\n" << ir;
    EXPECT_EQ(count(ir, "wgmma_wait(0, "), 1) << what << "\n" << ir;
    EXPECT_EQ(count(ir, "async_reads"), 0) << what;  // the marks are gone
    // The wait with none pending after the loop, the one with unroll_k pending inside it.
    EXPECT_LT(ir.find(str("wgmma_wait(", uk, ", ")), ir.find("wgmma_wait(0, ")) << what;
    testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm90, 11);
    EXPECT_TRUE(r.ok()) << what << ": " << r.str();
    if (!fs::exists(kPtxas)) continue;
    std::string path = testing::temp_dir() + "/tc_in_flight.ptx";
    write_kernel(k, EmitKind::Asm, path);
    CommandResult as = run_command({kPtxas, "-v", "-arch=sm_90a", path, "-o", path + ".cubin"});
    EXPECT_EQ(as.exit_code, 0) << what << ": " << as.output;
    EXPECT_EQ(as.output.find("injected"), std::string::npos) << what << ": " << as.output;
    EXPECT_EQ(as.output.find("serialized"), std::string::npos) << what << ": " << as.output;
    const std::string ptx = read_file(path);
    EXPECT_EQ(count(ptx, str("wgmma.wait_group.sync.aligned ", uk, ";")), 1) << what;
    EXPECT_EQ(count(ptx, "wgmma.wait_group.sync.aligned 0;"), 1) << what;
    // One fence for the iteration's run of unroll_k products (PTX orders products of one shape
    // into the same accumulators), before its first.
    EXPECT_EQ(count(ptx, "wgmma.mma_async"), uk) << what;
    EXPECT_EQ(count(ptx, "wgmma.fence.sync.aligned;"), 1) << what;
    EXPECT_LT(ptx.find("wgmma.fence.sync.aligned;"), ptx.find("wgmma.mma_async")) << what;
  }
  // ptxas's check is a real one: a product's accumulator added to while in flight gets a wait.
  if (fs::exists(kPtxas)) {
    CompiledKernel k =
        compile_kernel(parse_workload(cases[0].workload), sm90, with(cases[0].knobs), "given", "");
    std::string path = testing::temp_dir() + "/tc_in_flight_touched.ptx";
    write_kernel(k, EmitKind::Asm, path);
    std::string ptx = read_file(path);
    const size_t commit = ptx.find("wgmma.commit_group.sync.aligned;");
    ASSERT_NE(commit, std::string::npos);
    const size_t acc = ptx.find("{%f", ptx.rfind("wgmma.mma_async", commit));
    const std::string reg = ptx.substr(acc + 1, ptx.find_first_of(",}", acc) - acc - 1);
    ptx.insert(ptx.find('\n', commit) + 1, str("add.f32 ", reg, ", ", reg, ", ", reg, ";\n"));
    write_file(path, ptx);
    CommandResult as = run_command({kPtxas, "-v", "-arch=sm_90a", path, "-o", path + ".cubin"});
    EXPECT_NE(as.output.find("injected"), std::string::npos) << as.output;
  }
  auto refusal = [&](const nlohmann::json& knobs) {
    OpGraph g = build_op(parse_workload("matmul(M=64,N=64,K=256,precision=fp16)"));
    return check_constraints(g, sm90, complete_config(g, sm90, with(knobs)));
  };
  EXPECT_NE(
      refusal({{"wgmma", false}, {"half_tiles", false}}).find("wgmma_in_flight without wgmma"),
      std::string::npos);
  EXPECT_NE(refusal({{"stages", 2}}).find("wgmma_in_flight with stages 2 (it needs 3 or more"),
            std::string::npos);
  testing::expect_user_error(
      [&] {
        compile_kernel(parse_workload("matmul(M=64,N=64,K=256,precision=fp16)"), sm90,
                       with({{"stages", 1}}), "given", "");
      },
      "config knob wgmma_in_flight=true for matmul(M=64,N=64,K=256,precision=fp16,epilogue=none): "
      "wgmma_in_flight with "
      "stages 1");
}

// Config `c.knobs` of `c.workload` on `t`: the constraints take it (the tuner may reach it) and
// its kernel matches the reference emulated. The kernel, for more checks.
CompiledKernel admitted_and_matching(const KnobCase& c, const Target& t) {
  Workload w = parse_workload(c.workload);
  OpGraph g = build_op(w);
  EXPECT_EQ(check_constraints(g, t, complete_config(g, t, c.knobs)), "") << c.workload;
  CompiledKernel k = compile_kernel(w, t, c.knobs, "given", "");
  testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, t, 7);
  EXPECT_TRUE(r.ok()) << w.canonical() << " config " << k.config.dump() << ": " << r.str();
  return k;
}

// Deep pipelines (6 to 12 buffers, as cuBLAS keeps a short K's chunks in flight): the copies
// run stages - 1 tiles ahead (the loop waits for all but stages - 2 groups), the buffers rotate
// through every tile, and the kernels match the reference emulated: 16-bit operands given
// either way, TF32, split-K, a batch; ptxas assembles them without spills. More than 4 buffers
// are refused where the loop has fewer tiles to fill them, and where a tile is staged through
// registers (loaded one iteration ahead whatever the depth); a convolution's space has none.
// The tuner's seeds carry them for GEMMs of 16-bit inputs.
TEST(TensorCore, DeepPipelinesKeepAShortKsChunksInFlight) {
  const Target sm80 = parse_target("cuda -arch=sm_80"), sm90 = parse_target("cuda -arch=sm_90");
  const nlohmann::json base = {{"warps_m", 2},  {"warps_n", 2},   {"tiles_m", 1}, {"tiles_n", 2},
                               {"unroll_k", 1}, {"shared", true}, {"stages", 8},  {"split_k", 1}};
  const KnobCase cases[] = {
      {"matmul(M=50,N=37,K=200,dtype=float16,trans_b=1,epilogue=bias)", {{"stages", 12}}},
      {"matmul(M=40,N=24,K=160,dtype=bfloat16)", {}},
      {"matmul(M=64,N=64,K=832,dtype=float16,trans_b=1)",
       {{"tiles_m", 2}, {"tiles_n", 4}, {"unroll_k", 4}, {"stages", 6}, {"split_k", 2}}},
      {"batch_matmul(B=2,M=20,N=24,K=120,precision=tf32)", {{"stages", 12}}},
  };
  for (const Target& t : {sm80, sm90}) {
    for (const KnobCase& c : cases) {
      CompiledKernel k = admitted_and_matching({c.workload, with_knobs(base, c.knobs)}, t);
      const std::string what = std::string(c.workload) + " config " + k.config.dump();
      const int64_t stages = k.config["stages"];
      const std::string ir = ir::to_string(k.lowered.func);
      EXPECT_EQ(count(ir, str("async_wait(", stages - 2, ")")), 1) << what << "\n" << ir;
      // One group committed per tile copied ahead, and one an iteration.
      EXPECT_EQ(count(ir, "async_commit"), stages) << what << "\n" << ir;
      if (t.arch == "sm_90" && fs::exists(kPtxas)) {
        const std::string ptx = assemble_sm90(k, what);
        EXPECT_EQ(count(ptx, str("cp.async.wait_group ", stages - 2, ";")), 1) << what;
      }
    }
  }
  auto refusal = [&](const char* workload, const nlohmann::json& knobs) {
    OpGraph g = build_op(parse_workload(workload));
    return check_constraints(g, sm90, complete_config(g, sm90, with_knobs(base, knobs)));
  };
  EXPECT_EQ(refusal("matmul(M=64,N=64,K=96,dtype=float16)", {}),
            "stages 8 for 6 iterations of K (96 in chunks of 16): more than 4 buffers only where "
            "each is a "
            "tile the loop copies");
  EXPECT_EQ(refusal("matmul(M=64,N=64,K=256,dtype=float16)", {{"stages", 12}, {"split_k", 2}}),
            "stages 12 for 8 iterations of K (128 in chunks of 16): more than 4 buffers only where "
            "each is a "
            "tile the loop copies");
  EXPECT_EQ(refusal("matmul(M=64,N=64,K=112,dtype=float16)", {}), "");
  // A tile staged through registers (rounded as it is copied, or computed) is loaded one
  // iteration ahead at any depth.
  EXPECT_EQ(refusal("matmul(M=64,N=64,K=256,weight_dtype=float16)", {{"half_tiles", true}}),
            "stages 8 with A's tile staged through registers (loaded one iteration ahead whatever "
            "the depth: "
            "more than 4 buffers only where both tiles are cp.async copies)");
  auto stage_candidates = [&](const char* workload) {
    OpGraph g = build_op(parse_workload(workload));
    const ScheduleTemplate& tpl = find_template(g.workload, sm90);
    for (const KnobDef& k : tpl.knobs()) {
      if (std::string(k.name) == "stages")
        return nlohmann::json(tpl.int_candidates(g, sm90, k)).dump();
    }
    return std::string("no stages knob");
  };
  EXPECT_EQ(stage_candidates("matmul(M=128,N=768,K=768,precision=tf32)"), "[1,2,3,4,6,8,12]");
  EXPECT_EQ(stage_candidates("conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,dtype=float16)"),
            "[1,2,3,4]");
  // Four buffers stay where they were: more than the loop's tiles, as before deep pipelines.
  EXPECT_EQ(refusal("matmul(M=64,N=64,K=32,dtype=float16)", {{"stages", 4}}), "");

  // The seeds: a BERT layer's 128-row GEMMs of 16-bit inputs get the default made deep and 64 x
  // 64 blocks of K chunks of 64 as deep as shared memory holds (split along K where 24 blocks
  // would leave the multiprocessors idle); with float32 activations (rounded through
  // registers) none.
  auto deep_seeds = [&](const char* workload) {
    OpGraph g = build_op(parse_workload(workload));
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& c : seed_configs(g, sm90)) {
      if (c["stages"].get<int64_t>() <= 4) continue;
      EXPECT_EQ(check_constraints(g, sm90, c), "") << workload << " " << c.dump();
      out.push_back(c);
    }
    return out;
  };
  std::vector<nlohmann::json> wide =
      deep_seeds("matmul(M=128,N=3072,K=768,trans_b=1,dtype=float16,epilogue=bias)");
  ASSERT_EQ(wide.size(), 2u);
  EXPECT_EQ(wide[0]["stages"], 12) << wide[0].dump();
  EXPECT_EQ(wide[1]["tiles_n"], 4) << wide[1].dump();
  EXPECT_EQ(wide[1]["unroll_k"], 4) << wide[1].dump();
  EXPECT_EQ(wide[1]["split_k"], 1) << wide[1].dump();
  EXPECT_EQ(wide[1]["stages"], 12) << wide[1].dump();  // K's 12 chunks, 221,184 bytes
  std::vector<nlohmann::json> narrow =
      deep_seeds("matmul(M=128,N=768,K=768,trans_b=1,dtype=float16,epilogue=bias)");
  ASSERT_FALSE(narrow.empty());
  EXPECT_EQ(narrow.back()["split_k"], 2) << narrow.back().dump();
  EXPECT_EQ(narrow.back()["stages"], 6) << narrow.back().dump();
  // Float32 activations beside 16-bit weights: the default rounds A into a 16-bit tile as it is
  // copied (half_tiles, through registers), so only the 64 x 64 blocks, whose float32 tile of A
  // is a cp.async copy rounded as its fragments are read; TF32 takes both.
  std::vector<nlohmann::json> mixed = deep_seeds(
      "matmul(M=128,N=3072,K=768,trans_b=1,dtype=float32,weight_dtype=float16,epilogue=bias)");
  ASSERT_EQ(mixed.size(), 1u);
  EXPECT_EQ(mixed[0]["half_tiles"], false) << mixed[0].dump();
  EXPECT_EQ(mixed[0]["tiles_n"], 4) << mixed[0].dump();
  EXPECT_EQ(deep_seeds("matmul(M=128,N=3072,K=768,trans_b=1,precision=tf32,epilogue=bias)").size(),
            2u);
  // None where an operand is computed (a convolution's im2col tile).
  EXPECT_TRUE(
      deep_seeds("conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1,dtype=float16)").empty());
  // Nor where 64 x 64 blocks would be more than one a multiprocessor (BERT at batch 8).
  EXPECT_TRUE(
      deep_seeds("matmul(M=1024,N=3072,K=768,trans_b=1,dtype=float16,epilogue=bias)").empty());
}

// A convolution's K chunks of its R x S filter taps (unroll_k = R x S): each im2col element's
// channel and tap are decoded once a kernel, so the K loop's variable appears once in an
// element's computation (the chunk's channel offset), where 2 steps an iteration divide it by
// R x S, S and W in every element. Emulated against the reference: NCHW and NHWC, 16-bit data,
// 16-bit weights, TF32, stride 2, split-K; ptxas on one.
TEST(TensorCore, FilterAlignedChunksDecodeTheirRowsOnce) {
  const Target sm90 = parse_target("cuda -arch=sm_90");
  const KnobCase cases[] = {
      {"conv2d_nchw(N=1,C=32,H=8,W=8,K=32,R=3,S=3,pad=1,dtype=float16,epilogue=bias_relu)",
       {{"unroll_k", 9}}},
      {"conv2d_nhwc(N=2,H=6,W=6,C=32,K=32,R=3,S=3,pad=1,dtype=bfloat16)",
       {{"unroll_k", 9}, {"stages", 2}}},
      {"conv2d_nchw(N=1,C=16,H=9,W=9,K=32,R=3,S=3,stride=2,pad=1,weight_dtype=float16)",
       {{"unroll_k", 9}}},
      {"conv2d_nchw(N=1,C=32,H=6,W=6,K=32,R=3,S=3,pad=1,precision=tf32)",
       {{"unroll_k", 9}, {"split_k", 2}}},
  };
  for (const KnobCase& c : cases) admitted_and_matching(c, sm90);
  // The im2col elements each iteration computes (into registers, stored after its products):
  // the K loop's variable once in each (the chunk's 16 channels of 64 values: q*1024), at 9
  // steps; more than once at 2.
  auto k_var_uses = [&](int64_t steps) {
    Workload w = parse_workload("conv2d_nchw(N=1,C=64,H=8,W=8,K=32,R=3,S=3,pad=1,dtype=float16)");
    CompiledKernel k =
        compile_kernel(w, sm90, {{"unroll_k", steps}, {"split_k", 1}, {"stages", 2}}, "given", "");
    const std::string ir = ir::to_string(k.lowered.func.body);
    std::smatch loop;
    EXPECT_TRUE(std::regex_search(
        ir, loop,
        std::regex(R"(for \(([a-z.]+), 0, [0-9]+\) \{\s*(allocate [^\n]*\s*)?async_wait)")))
        << ir;
    std::vector<int64_t> uses;
    std::istringstream lines(ir);
    for (std::string line; std::getline(lines, line);) {
      const size_t at = line.find("col.regs[");
      if (at != std::string::npos && at == line.find_first_not_of(' '))  // an element computed
        uses.push_back(count(line, std::string(loop[1]) + ")") +
                       count(line, std::string(loop[1]) + "*"));
    }
    return uses;
  };
  const std::vector<int64_t> aligned = k_var_uses(9), plain = k_var_uses(2);
  ASSERT_FALSE(aligned.empty());
  for (int64_t n : aligned) EXPECT_EQ(n, 1);
  ASSERT_FALSE(plain.empty());
  for (int64_t n : plain) EXPECT_GT(n, 1);
  if (fs::exists(kPtxas)) {
    Workload w =
        parse_workload("conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1,dtype=float16)");
    assemble_sm90(compile_kernel(w, sm90, {{"unroll_k", 9}}, "given", ""),
                  w.canonical() + " unroll_k 9");
  }
}

// block_swizzle: the rows of blocks in groups, each group's blocks launched column by column
// (one blockIdx.x over the three: row group, column, row in the group). Emulated against the
// reference with groups of 2 to 8 rows (mma.sync, TF32, wgmma, batches, split-K), ptxas on one;
// a group size that does not divide the rows of blocks refused by name, given by hand too.
TEST(TensorCore, SwizzledBlocksMatchTheReference) {
  const Target sm90 = parse_target("cuda -arch=sm_90");
  const nlohmann::json small = {{"warps_m", 1},  {"warps_n", 2},   {"tiles_m", 1}, {"tiles_n", 2},
                                {"unroll_k", 1}, {"shared", true}, {"stages", 2},  {"split_k", 1}};
  const KnobCase cases[] = {
      {"matmul(M=128,N=48,K=64,dtype=float16,trans_b=1,epilogue=bias)",
       with_knobs(small, {{"block_swizzle", 4}})},
      {"matmul(M=96,N=40,K=48,precision=tf32)",
       with_knobs(small, {{"block_swizzle", 2}, {"tiles_n", 1}})},
      {"batch_matmul(B=2,M=64,N=32,K=32,dtype=bfloat16)",
       with_knobs(small, {{"block_swizzle", 2}})},
      {"matmul(M=128,N=32,K=128,dtype=float16,trans_b=1)",
       with_knobs(small, {{"block_swizzle", 8}, {"split_k", 2}})},
      {"matmul(M=128,N=64,K=64,dtype=float16,trans_b=1)",
       {{"warps_m", 4},
        {"warps_n", 1},
        {"tiles_m", 1},
        {"tiles_n", 4},
        {"unroll_k", 2},
        {"shared", true},
        {"stages", 2},
        {"split_k", 1},
        {"wgmma", true},
        {"block_swizzle", 2}}},
  };
  for (const KnobCase& c : cases) {
    CompiledKernel k = admitted_and_matching(c, sm90);
    const std::string ir = ir::to_string(k.lowered.func.body);
    EXPECT_EQ(count(ir, "blockIdx.y"), 0) << c.workload << ir;
  }
  // The first case's order: block b computes rows of blocks (b / 8) * 4 + b % 4 (16 rows, 768
  // elements of C each) and column (b / 4) % 2 (32 columns): 4 rows of a column, then the next.
  {
    CompiledKernel k =
        compile_kernel(parse_workload(cases[0].workload), sm90, cases[0].knobs, "given", "");
    const std::string ir = ir::to_string(k.lowered.func.body);
    std::smatch b;
    ASSERT_TRUE(std::regex_search(ir, b, std::regex(R"(blockIdx\.x \(([a-z.]+), 0, 16\))"))) << ir;
    const std::string v = b[1];
    for (const std::string& term :
         {"((" + v + "/8)*3072)", "((" + v + " % 4)*768)", "(((" + v + "/4) % 2)*32)"})
      EXPECT_NE(ir.find(term), std::string::npos) << term << " in " << ir;
  }
  if (fs::exists(kPtxas)) {
    Workload w = parse_workload("matmul(M=4096,N=4096,K=4096,dtype=float16,trans_b=1)");
    assemble_sm90(compile_kernel(w, sm90, {{"block_swizzle", 8}}, "given", ""),
                  w.canonical() + " block_swizzle 8");
  }
  const std::string m = "matmul(M=300,N=256,K=64,dtype=float16)";
  OpGraph g = build_op(parse_workload(m));
  EXPECT_EQ(check_constraints(g, sm90, complete_config(g, sm90, {{"block_swizzle", 4}})),
            "block_swizzle 4 with 5 rows of blocks (M 300, 64 rows a block): the groups must "
            "divide them");
  testing::expect_user_error(
      [&] {
        compile_kernel(parse_workload(m), sm90, {{"block_swizzle", 4}}, "given", "");
      },
      "config knob block_swizzle=4 for matmul(M=300,N=256,K=64,dtype=float16,epilogue=none): "
      "block_swizzle 4 "
      "with 5 rows of blocks (M 300, 64 rows a block): the groups must divide them");
}

// The largest warp tiles the space holds, 64 x 64 (4 x 8 or 8 x 4 tiles of mma.sync: 128
// accumulators a lane, CUTLASS's warp tile) and wgmma's N = 256: the constraints take them,
// they match the reference emulated, and ptxas keeps every accumulator in registers: no stack
// frame, no spill (their initialization, a loop over the tiles before, indexed them by a
// variable: a 512-byte stack frame, and 1,520 bytes of spills for wgmma's N = 256).
// TF32's fragments of K-major shared tiles are read by ldmatrix too: a 16-byte row holds four
// float32 values and lane (g, t) takes word t of row g, as the m16n8k8 TF32 fragments lie (A's
// four operands one x4, word_float taking each as it is; the product rounds it). Emulated (a
// wrong word fails: tiles that overhang M and N guard the words and clamp the rows) and in PTX:
// A's tiles one ldmatrix.x4 a tile and step instead of four ld.shared.f32 a lane; B kept as
// [K][N] (its values a row apart: ldmatrix.trans moves 16-bit halves, not 32-bit words) keeps its
// two loads.
TEST(TensorCore, Tf32FragmentsOfKMajorTilesAreReadByLdmatrix) {
  const Target sm90 = parse_target("cuda -arch=sm_90");
  for (const char* text : {"matmul(M=50,N=37,K=40,precision=tf32,epilogue=bias)",
                           "batch_matmul(B=2,M=32,N=24,K=48,precision=tf32)",
                           "conv2d_nchw(N=1,C=8,H=7,W=7,K=40,R=3,S=3,pad=1,precision=tf32)",
                           "conv2d_nhwc(N=1,H=6,W=6,C=8,K=24,R=3,S=3,pad=1,precision=tf32)",
                           // B given as [N][K] (a model's TF32 weights): its tile K-major too.
                           "matmul(M=50,N=37,K=40,trans_b=1,precision=tf32,epilogue=bias)",
                           "batch_matmul(B=2,M=32,N=24,K=44,trans_b=1,precision=tf32)"}) {
    Workload w = parse_workload(text);
    CompiledKernel k = compile_kernel(w, sm90, nullptr, "default", "");
    const std::string ir = ir::to_string(k.lowered.func);
    EXPECT_NE(ir.find("word_float(frag_a, 3)"), std::string::npos) << text << "\n" << ir;
    if (w.flag("trans_b")) {
      EXPECT_NE(ir.find("word_float(frag_b"), std::string::npos) << text << "\n" << ir;
    }
    testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm90, 23);
    EXPECT_TRUE(r.ok()) << text << ": " << r.str();
  }
  if (!fs::exists(kPtxas)) GTEST_SKIP() << kPtxas << " is not installed (NVIDIA's CUDA toolkit)";
  {
    const auto [ptx, what, tm, tn, uk] =
        assemble_default(parse_workload("matmul(M=4096,N=4096,K=4096,precision=tf32)"), {});
    EXPECT_EQ(count(ptx, "mma.sync.aligned.m16n8k8"), tm * tn * uk) << what;
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), tm * uk) << what;
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x2"), 0) << what;
    EXPECT_EQ(count(ptx, "ld.shared.f32"), 2 * tn * uk) << what;
  }
  {
    // B given as [N][K]: both operands' fragments by ldmatrix (B's two matrices a tile paired
    // into fours), no scalar shared load.
    const auto [ptx, what, tm, tn, uk] = assemble_default(
        parse_workload("matmul(M=4096,N=4096,K=4096,trans_b=1,precision=tf32)"), {});
    EXPECT_EQ(count(ptx, "mma.sync.aligned.m16n8k8"), tm * tn * uk) << what;
    EXPECT_EQ(4 * count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16") +
                  2 * count(ptx, "ldmatrix.sync.aligned.m8n8.x2"),
              4 * tm * uk + 2 * tn * uk)
        << what;
    EXPECT_EQ(count(ptx, "ld.shared.f32"), 0) << what;
  }
  const auto [ptx, what, tm, tn, uk] = assemble_default(
      parse_workload("conv2d_nchw(N=1,C=128,H=28,W=28,K=128,R=3,S=3,pad=1,precision=tf32)"), {});
  EXPECT_EQ(count(ptx, "mma.sync.aligned.m16n8k8"), tm * tn * uk) << what;
  EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), tm * uk)
      << what;  // the weights
}

// pair_fragment_loads on a block as unrolling leaves it: two distinct two-matrix loads of B's
// tile become one four-matrix load whose lanes 0-15 supply the first's rows and 16-31 the
// second's (a row that does not repeat every 16 lanes taken at lane - 16), each product reading
// its words from it; a store to the tile or a barrier between them keeps them apart.
TEST(TensorCore, PairedFragmentLoadsTakeEachHalfOfTheLanes) {
  using namespace ir;  // NOLINT
  const Expr x = Var::make("tx");
  const Expr t = x % Expr(int64_t{32});
  // As tensorize builds them: lane l supplies row l % 8 of matrix l / 8 % 2 (periodic), and one
  // whose upper lanes' rows differ from the lower lanes' (they supply none for an x2).
  const Expr row_a = t % Expr(int64_t{8}) * Expr(int64_t{40}) +
                     t / Expr(int64_t{8}) % Expr(int64_t{2}) * Expr(int64_t{8});
  const Expr row_b = t * Expr(int64_t{8}) + Expr(int64_t{640});
  auto load = [](const Expr& row, int64_t trans, const char* buffer = "B.shared") {
    std::vector<Expr> args = {Load::make(Type::int32().with_lanes(4), buffer,
                                         Ramp::make(row / Expr(int64_t{2}), Expr(int64_t{1}), 4)),
                              Expr(int64_t{2})};
    if (trans) args.push_back(Expr(trans));
    return Call::make(kLdMatrix, args);
  };
  auto product = [&](const Expr& call, int64_t acc,
                     int64_t word) {  // acc[a] = f16(word_half(v, word, 0))
    const Expr v = Var::make("frag_b", Type::int32().with_lanes(2));
    return LetStmt::make(
        v, call,
        Store::make(
            "acc",
            Call::make(kF16ToFloat, {Call::make(kWordHalf, {v, Expr(word), Expr(int64_t{0})})}),
            Expr(acc)));
  };
  auto kernel = [&](std::vector<Stmt> body) {
    return For::make(x, Expr(int64_t{0}), Expr(int64_t{64}), ForKind::ThreadIdxX,
                     Block::make(std::move(body)));
  };
  auto calls = [](const Stmt& s, int64_t matrices) {
    int n = 0;
    post_order(s, [&](const Expr& e) {
      const Call* c = e.as<Call>();
      n += c && c->name == kLdMatrix && *as_const_int(c->args[1]) == matrices;
    });
    return n;
  };
  for (int64_t trans : {0, 1}) {
    const Expr a = load(row_a, trans), b = load(row_b, trans);
    const Stmt paired =
        pair_fragment_loads(kernel({product(a, 0, 0), product(b, 1, 1), product(a, 2, 1)}));
    EXPECT_EQ(calls(paired, 4), 1) << to_string(paired);
    EXPECT_EQ(calls(paired, 2), 0) << to_string(paired);
    // The products read words 0, 2 + 1 and 1 of it.
    std::vector<int64_t> words;
    const Call* x4 = nullptr;
    post_order(paired, [&](const Expr& e) {
      const Call* c = e.as<Call>();
      if (c && c->name == kWordHalf) words.push_back(*as_const_int(c->args[1]));
      if (c && c->name == kLdMatrix) x4 = c;
    });
    EXPECT_EQ(words, (std::vector<int64_t>{0, 3, 1})) << to_string(paired);
    ASSERT_NE(x4, nullptr);
    EXPECT_EQ(ldmatrix_transposed(*x4), trans == 1);
    // Lane by lane (warps 0 and 1): the first load's rows, then the second's at lane - 16.
    const Expr row = x4->args[0].as<Load>()->index.as<Ramp>()->base;
    for (int64_t w : {0, 1}) {
      for (int64_t l = 0; l < 32; ++l) {
        const Expr at = Expr(32 * w + l);
        const Expr want = l < 16 ? substitute(row_a, VarMap{{x.get(), at}})
                                 : substitute(row_b, VarMap{{x.get(), Expr(32 * w + l - 16)}});
        EXPECT_EQ(to_string(simplify(substitute(row, VarMap{{x.get(), at}}))),
                  to_string(simplify(want / Expr(int64_t{2}))))
            << "lane " << l << " of warp " << w;
      }
    }
    // A store to the tile, or a barrier, between them: each keeps its own load.
    for (const Stmt& between :
         {Store::make("B.shared", IntImm::make_typed(0, Type::int32()), x), Barrier::make()}) {
      const Stmt apart = pair_fragment_loads(kernel({product(a, 0, 0), between, product(b, 1, 1)}));
      EXPECT_EQ(calls(apart, 4), 0) << to_string(apart);
      EXPECT_EQ(calls(apart, 2), 2) << to_string(apart);
    }
    // Loads of another buffer, or one transposed and one not, stay apart; an odd one stays.
    const Stmt other = pair_fragment_loads(
        kernel({product(a, 0, 0), product(load(row_b, trans, "A.shared"), 1, 1)}));
    EXPECT_EQ(calls(other, 2), 2) << to_string(other);
    const Stmt mixed =
        pair_fragment_loads(kernel({product(a, 0, 0), product(load(row_b, 1 - trans), 1, 1)}));
    EXPECT_EQ(calls(mixed, 2), 2) << to_string(mixed);
    const Stmt odd =
        pair_fragment_loads(kernel({product(a, 0, 0), product(b, 1, 0),
                                    product(load(row_a + Expr(int64_t{16}), trans), 2, 0)}));
    EXPECT_EQ(calls(odd, 4), 1) << to_string(odd);
    EXPECT_EQ(calls(odd, 2), 1) << to_string(odd);
  }
}

TEST(TensorCore, LargestWarpTilesKeepTheirAccumulatorsInRegisters) {
  const Target sm90 = parse_target("cuda -arch=sm_90");
  const nlohmann::json warp64 = {{"warps_m", 2},  {"warps_n", 2},   {"tiles_m", 4}, {"tiles_n", 8},
                                 {"unroll_k", 2}, {"shared", true}, {"stages", 3},  {"split_k", 1}};
  const nlohmann::json wide = {{"warps_m", 4},  {"warps_n", 1},  {"tiles_m", 1},
                               {"tiles_n", 32}, {"unroll_k", 2}, {"shared", true},
                               {"stages", 3},   {"split_k", 1},  {"wgmma", true}};
  const KnobCase cases[] = {
      {"matmul(M=128,N=128,K=96,dtype=float16,trans_b=1,epilogue=bias)", warp64},
      {"matmul(M=128,N=256,K=64,dtype=bfloat16,trans_b=1)", with_knobs(warp64, {{"warps_n", 4}})},
      {"matmul(M=128,N=128,K=64,precision=tf32)",
       with_knobs(warp64, {{"tiles_m", 8}, {"tiles_n", 4}, {"stages", 2}})},
      {"batch_matmul(B=2,M=128,N=64,K=64,dtype=float16,trans_b=1)",
       with_knobs(warp64, {{"warps_n", 1}, {"unroll_k", 1}})},
      {"matmul(M=64,N=256,K=64,dtype=float16,trans_b=1)", wide},
      {"matmul(M=128,N=256,K=128,dtype=bfloat16,trans_b=1,epilogue=bias_relu)",
       with_knobs(wide,
                  {{"warps_m", 8}, {"unroll_k", 4}, {"stages", 4}, {"wgmma_in_flight", true}})},
  };
  for (const KnobCase& c : cases) {
    Workload w = parse_workload(c.workload);
    OpGraph g = build_op(w);
    EXPECT_EQ(check_constraints(g, sm90, complete_config(g, sm90, c.knobs)), "")
        << c.workload << " " << c.knobs.dump();
    CompiledKernel k = compile_kernel(w, sm90, c.knobs, "given", "");
    const std::string what = w.canonical() + " config " + k.config.dump();
    testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm90, 7);
    EXPECT_TRUE(r.ok()) << what << ": " << r.str();
    if (fs::exists(kPtxas)) assemble_sm90(k, what);
  }
  // Past a lane's registers: 128 accumulators beside the next tiles a float32 operand's rounding
  // copy holds (half_tiles, pipelined), or 8 x 8 tiles.
  auto refusal = [&](const std::string& workload, const nlohmann::json& knobs) {
    OpGraph g = build_op(parse_workload(workload));
    return check_constraints(g, sm90, complete_config(g, sm90, knobs));
  };
  EXPECT_EQ(refusal("matmul(M=128,N=128,K=128,precision=fp16)",
                    with_knobs(warp64, {{"half_tiles", true}})),
            "128 accumulators and 64 registers of the next tiles per lane (16-bit tiles) leave "
            "fewer than 64 of the "
            "255 registers a thread of 128 can have for its operands");
  EXPECT_EQ(
      refusal("matmul(M=256,N=128,K=128,dtype=float16)", with_knobs(warp64, {{"tiles_m", 8}})),
      "256 accumulators per lane (over 128)");
}

// A sample of the tuner's space (configs that pass the constraints) assembles without spills
// or a stack frame too, but where ptxas chose to (assemble_sm90): the constraints keep what
// would not fit a thread's registers (more than 128 accumulators; a pipelined im2col tile's
// next values beside its accumulators) out of the search.
TEST(TensorCore, SampledConfigsAssembleWithoutSpills) {
  if (!fs::exists(kPtxas)) GTEST_SKIP() << kPtxas << " is not installed (NVIDIA's CUDA toolkit)";
  const Target t = parse_target("cuda -arch=sm_90");
  std::vector<std::string> workloads;
  for (const char* p : kPrecisions) workloads.push_back(with_precision("matmul(M=1024,N=1024,K=1024,epilogue=bias)", p));
  workloads.push_back("matmul(M=1024,N=1024,K=1024,dtype=float16,epilogue=bias)");  // B's tiles staged
  // A model's convolutions at fp16: 16-bit weights (the im2col tile float32, or 16-bit with
  // half_tiles), 16-bit data too (the im2col tile computed into 16 bits), NHWC's weights staged.
  workloads.push_back("conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,weight_dtype=float16,epilogue=bias_relu)");
  workloads.push_back("conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1,dtype=float16,epilogue=bias_relu)");
  workloads.push_back("conv2d_nhwc(N=1,H=28,W=28,C=128,K=128,R=3,S=3,pad=1,dtype=bfloat16)");
  for (const std::string& text : workloads) {
    Workload w = parse_workload(text);
    for (const nlohmann::json& config : testing::sample_configs(w, t, 8)) {
      CompiledKernel k = compile_kernel(w, t, config, "given", "");
      assemble_sm90(k, w.canonical() + " config " + k.config.dump(), /*unless_by_choice=*/true);
    }
  }
}

// A model's product reading its operands through the views that make them (graph pass
// read-views-in-products: attention's Q and K^T sliced out of wider values, a scaling between;
// the heads merged back before a projection): the operands are views in the workload's shapes
// over other tensors, their stages (OpGraph::prologue) inlined into them, and the templates
// stage them as computed operands. Emulated (tensor cores with the warps' real fragment
// layouts; the float32 template too), every element equals that of the same product given the
// same operands whole, under the same config: a view read at the wrong element, or a 16-bit
// operand rounded twice or widened wrongly, fails it.
TEST(TensorCore, OperandsReadThroughViewsEqualTheSameOperandsGivenWhole) {
  const Target sm80 = parse_target("cuda -arch=sm_80");
  struct Case {
    const char* workload;
    nlohmann::json knobs;
  };
  const Case cases[] = {
      {"batch_matmul(B=3,M=20,N=24,K=16,dtype=float16)", nullptr},
      {"batch_matmul(B=3,M=20,N=24,K=16,dtype=bfloat16)", {{"split_k", 1}, {"stages", 2}}},
      {"batch_matmul(B=3,M=20,N=24,K=16,precision=tf32)", nullptr},
      {"batch_matmul(B=3,M=20,N=24,K=16,precision=fp16)", {{"half_tiles", true}}},
      {"batch_matmul(B=3,M=20,N=24,K=16)", nullptr},  // float32: dense.cuda
      {"batch_matmul(B=3,M=20,N=24,K=16)", {{"shared", false}, {"stages", 1}}},
      {"matmul(M=20,N=24,K=48,dtype=float16)", nullptr},
      {"matmul(M=20,N=24,K=48)", {{"split_k", 2}}},
  };
  int sample = 0;
  for (const Case& c : cases) {
    if (!testing::sampled(sample++, 2)) continue;
    const Workload w = parse_workload(c.workload);
    const bool batched = w.op == "batch_matmul";
    const int64_t B = batched ? w.get("B") : 1, M = w.get("M"), N = w.get("N"), K = w.get("K");
    const OpGraph whole = build_op(w);
    const ir::Tensor& a = whole.inputs[0];
    const ir::Tensor& b = whole.inputs[1];
    const std::string type = whole.arg_dtype(a);
    const bool bits = a->dtype != ir::Type::float32();
    // Sources: S [M][2BK] (A's K-wide slices at column b*K, a scaling by 2 computed first, in
    // float32, then stored back to the operands' type); batched, T [N][BK] holds B transposed
    // (K^T's view); else O [3][M][K/3] holds A's rows split in three heads and B is given.
    const int64_t sw = batched ? 2 * B * K : K;
    const ir::Tensor S = ir::placeholder(
        "S", batched ? std::vector<int64_t>{M, sw} : std::vector<int64_t>{3, M, K / 3}, a->dtype);
    const ir::Tensor T = batched ? ir::placeholder("T", {N, B * K}, b->dtype) : b;
    const bool bf16 = w.types.data == DType::BFloat16;
    std::vector<std::string> sn;
    for (size_t d = 0; d < S->shape.size(); ++d) sn.push_back(str("s", d));
    const ir::Tensor scaled =
        ir::compute("scaled", S->shape, sn, [&](const std::vector<ir::Expr>& i) {
          ir::Expr v = widened(w.types, ir::read(S, i)) * ir::f32(2.0);
          return bits ? ir::Call::make(bf16 ? ir::kFloatToBF16 : ir::kFloatToF16, {v}) : v;
        });
    const ir::Tensor av = ir::compute(
        "A_view", a->shape,
        batched ? std::vector<std::string>{"b", "m", "k"} : std::vector<std::string>{"m", "k"},
        [&](const std::vector<ir::Expr>& i) {
          if (batched) return ir::read(scaled, {i[1], i[0] * ir::Expr(K) + i[2]});
          return ir::read(scaled, {i[1] / ir::Expr(K / 3), i[0], i[1] % ir::Expr(K / 3)});
        });
    OpGraph viewed = whole;
    std::map<const ir::Operation*, ir::Tensor> views{{a.get(), av}};
    if (batched) {
      views[b.get()] =
          ir::compute("B_view", b->shape, {"b", "k", "n"}, [&](const std::vector<ir::Expr>& i) {
            return ir::read(T, {i[2], i[0] * ir::Expr(K) + i[1]});
          });
    }
    ir::StageRebuilder rebuild(views);
    viewed.output = rebuild.rebuild(whole.output);
    viewed.acc = rebuild.rebuild(whole.acc);
    viewed.inputs = {S, T};
    viewed.prologue = {scaled};
    viewed.word_types.erase(a->name);
    if (bits) viewed.word_types[S->name] = type;
    if (batched && bits) {
      viewed.word_types.erase(b->name);
      viewed.word_types[T->name] = whole.arg_dtype(b);
    }
    // The same values both ways: S and T random, A and B made of them on the host.
    std::vector<float> sv(static_cast<size_t>(ir::num_elements(S->shape))),
        tv(static_cast<size_t>(ir::num_elements(T->shape)));
    fill_typed(type, sv.data(), static_cast<int64_t>(sv.size()), 41);
    fill_typed(whole.arg_dtype(b), tv.data(), static_cast<int64_t>(tv.size()), 43);
    std::vector<float> av_host(static_cast<size_t>(B * M * K)),
        bv_host(static_cast<size_t>(ir::num_elements(b->shape)));
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t from =
              batched ? m * sw + bb * K + k : ((k / (K / 3)) * M + m) * (K / 3) + k % (K / 3);
          av_host[static_cast<size_t>((bb * M + m) * K + k)] = 2.0f * sv[static_cast<size_t>(from)];
        }
    if (batched) {
      for (int64_t bb = 0; bb < B; ++bb)
        for (int64_t k = 0; k < K; ++k)
          for (int64_t n = 0; n < N; ++n)
            bv_host[static_cast<size_t>((bb * K + k) * N + n)] =
                tv[static_cast<size_t>(n * B * K + bb * K + k)];
    } else {
      bv_host = tv;
    }
    CompiledKernel kw =
        compile_op_graph(whole, sm80, c.knobs, c.knobs.is_null() ? "default" : "given", "k");
    CompiledKernel kv = compile_op_graph(viewed, sm80, kw.config, "given", "k");
    const std::string what = w.canonical() + " config " + kw.config.dump();
    std::vector<std::vector<float>> results;
    for (auto [g, k, ins] :
         {std::tuple{&whole, &kw, std::vector<std::vector<float>>{av_host, bv_host}},
          std::tuple{static_cast<const OpGraph*>(&viewed), &kv,
                     std::vector<std::vector<float>>{sv, tv}}}) {
      std::vector<std::vector<float>> bufs = ins;
      for (size_t i = 0; i < bufs.size(); ++i)
        store_as(g->arg_dtype(g->inputs[i]), bufs[i].data(), static_cast<int64_t>(bufs[i].size()));
      const int64_t n = ir::num_elements(g->output->shape);
      bufs.emplace_back(static_cast<size_t>(n), std::nanf(""));
      GpuProgram prog = split_gpu_program(k->lowered.func);
      for (const auto& [name, size] : prog.workspaces)
        bufs.emplace_back(static_cast<size_t>(size), std::nanf(""));
      for (const ir::LoweredFunc& kf : prog.kernels)
        ASSERT_EQ(testing::emulate_gpu_kernel(kf, check_gpu_kernel(kf, sm80), bufs), 0) << what;
      results.push_back(bufs[g->inputs.size()]);
    }
    for (size_t e = 0; e < results[0].size(); ++e) {
      ASSERT_FALSE(std::isnan(results[0][e])) << what << " at " << e;
      ASSERT_EQ(results[1][e], results[0][e]) << what << " at " << e;
    }
    // The operands' views are staged as computed operands (no input is read as A or B), and the
    // scaling is inlined into them: no kernel computes it apart.
    EXPECT_EQ(ir::to_string(kv.lowered.func.body).find("scaled"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace tf
