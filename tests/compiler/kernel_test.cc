// Every operator and epilogue, compiled with real LLVM codegen, against the reference: odd
// shapes (1, primes, tiles that do not divide), stride, padding, dilation; under the default
// config and under random configs drawn from the template's knob space.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "compiler/codegen_llvm.h"
#include "base/error.h"
#include "base/file_io.h"
#include "compiler/driver.h"
#include "compiler/ir_mutator.h"
#include "compiler/link.h"
#include "compiler/schedule_templates.h"
#include "compiler/winograd.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {

// The largest difference between two references of one output (`a`'s shape), each on its own
// inputs: two layouts or algorithms of the same computation.
double reference_difference(const Workload& a, const std::vector<const float*>& ia, const Workload& b,
                            const std::vector<const float*>& ib) {
  OpGraph g = build_op(a);
  int64_t outs = 1;
  for (int64_t d : g.output->shape) outs *= d;
  std::vector<float> want(static_cast<size_t>(outs)), got(static_cast<size_t>(outs));
  reference_compute(a, ia, want.data());
  reference_compute(b, ib, got.data());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(want[i] - got[i])));
  return worst;
}

const char* kWorkloads[] = {
    "matmul(M=1,N=1,K=1)",
    "matmul(M=97,N=131,K=67)",
    "matmul(M=64,N=64,K=64,epilogue=bias_relu)",
    "matmul(M=5,N=300,K=3,epilogue=relu)",
    "matmul(M=33,N=17,K=129,epilogue=bias)",
    "batch_matmul(B=3,M=17,N=33,K=9,epilogue=bias_relu)",
    "batch_matmul(B=1,M=1,N=7,K=2)",
    "batch_matmul(B=6,M=21,N=37,K=13)",  // columns not whole tiles, batch parallel alone
    "conv2d_nchw(N=1,C=3,H=7,W=7,K=5,R=3,S=3)",
    "conv2d_nchw(N=2,C=3,H=13,W=11,K=5,R=3,S=2,stride=2,pad=2,dilation=2,epilogue=bias_relu)",
    "conv2d_nchw(N=1,C=16,H=15,W=15,K=19,R=1,S=1,epilogue=relu)",
    "conv2d_nchw(N=1,C=12,H=9,W=8,K=18,R=3,S=3,pad=1,group=3,epilogue=bias_relu)",
    "conv2d_nchw(N=2,C=6,H=7,W=7,K=12,R=3,S=3,stride=2,group=6)",
    "conv2d_nhwc(N=1,H=9,W=9,C=5,K=7,R=3,S=3,pad=1,epilogue=bias)",
    "conv2d_nhwc(N=2,H=11,W=6,C=3,K=33,R=2,S=3,stride=2,pad=1,dilation=1,epilogue=bias_relu)",
    "depthwise_conv2d_nchw(N=1,C=7,H=11,W=13,R=3,S=3,pad=1,epilogue=bias_relu)",
    "depthwise_conv2d_nchw(N=2,C=3,H=17,W=9,R=5,S=3,stride=2,pad=2,dilation=2)",
    "depthwise_conv2d_nchw(N=1,C=1,H=1,W=1,R=1,S=1)",
    "depthwise_conv2d_nchw(N=1,C=19,H=12,W=12,R=3,S=3,stride=2,pad=1,epilogue=relu)",
    "conv2d_nchwc(N=1,C=16,H=9,W=11,K=24,R=3,S=3,pad=1,ic_block=8,oc_block=8,epilogue=bias_relu)",
    "conv2d_nchwc(N=2,C=3,H=13,W=7,K=10,R=3,S=2,stride=2,pad=2,dilation=2,ic_block=3,oc_block=5,"
    "epilogue=bias)",
    "conv2d_nchwc(N=1,C=32,H=7,W=7,K=64,R=1,S=1,ic_block=16,oc_block=16)",
    "conv2d_nchwc(N=1,C=8,H=14,W=14,K=8,R=1,S=1,stride=2,ic_block=4,oc_block=4,epilogue=relu)",
    // Grouped: blocks in one group (16 filters a group, two blocks of 8), blocks holding
    // two groups (4 filters a group: the weights block-diagonal), a channel multiplier.
    "conv2d_nchwc(N=1,C=32,H=9,W=7,K=32,R=3,S=3,pad=1,ic_block=8,oc_block=8,group=2,epilogue=bias_"
    "relu)",
    "conv2d_nchwc(N=2,C=16,H=7,W=6,K=16,R=3,S=3,stride=2,pad=1,ic_block=8,oc_block=8,group=4,"
    "epilogue=relu)",
    "conv2d_nchwc(N=1,C=8,H=5,W=9,K=16,R=1,S=1,ic_block=4,oc_block=16,group=8)",
    // Blocks straddling two groups (groups of 24 in blocks of 16; the last block starting
    // early), and 12 filters of 6 channels a group in blocks of 16 reading blocks of 8.
    "conv2d_nchwc(N=1,C=96,H=7,W=9,K=96,R=3,S=3,pad=1,ic_block=16,oc_block=16,group=4,epilogue=bias_relu)",
    "conv2d_nchwc(N=1,C=48,H=5,W=6,K=96,R=1,S=1,ic_block=8,oc_block=16,group=8)",
    "depthwise_conv2d_nchwc(N=1,C=24,H=11,W=13,R=3,S=3,pad=1,block=8,epilogue=bias_relu)",
    "depthwise_conv2d_nchwc(N=2,C=6,H=17,W=9,R=5,S=3,stride=2,pad=2,dilation=2,block=3)",
    "depthwise_conv2d_nchwc(N=1,C=32,H=7,W=7,R=3,S=3,stride=2,pad=1,block=16,epilogue=relu)",
    // Groups of width channels, lane by lane: groups of 4 and 8 in blocks of 16, of 2 in
    // blocks of 8, strided and dilated, rows no tile divides.
    "depthwise_conv2d_nchwc(N=1,C=32,H=9,W=13,R=3,S=3,pad=1,block=16,width=4,epilogue=bias_relu)",
    "depthwise_conv2d_nchwc(N=2,C=48,H=11,W=10,R=3,S=3,stride=2,pad=1,block=16,width=8,epilogue=bias)",
    "depthwise_conv2d_nchwc(N=1,C=16,H=9,W=9,R=3,S=2,pad=2,dilation=2,block=8,width=2)",
    // Winograd: output sizes that are not whole tiles, both tiles, no padding and wide padding.
    "conv2d_winograd_nchwc(N=1,C=16,H=9,W=11,K=24,ic_block=8,oc_block=8,epilogue=bias_relu)",
    "conv2d_winograd_nchwc(N=2,C=6,H=8,W=7,K=10,pad=0,ic_block=3,oc_block=5,tile=2,epilogue=bias)",
    "conv2d_winograd_nchwc(N=1,C=32,H=7,W=7,K=32,pad=2,ic_block=16,oc_block=16,epilogue=relu)",
    "conv2d_winograd_nchwc(N=1,C=4,H=1,W=1,K=4,ic_block=4,oc_block=4)",
    // Dilated: residue classes of unequal sizes (13 rows at dilation 2: 7 and 6), classes
    // that hold part of a tile, a dilation wider than the output, different pads.
    "conv2d_winograd_nchwc(N=1,C=16,H=13,W=10,K=16,pad=2,ic_block=8,oc_block=8,dilation=2,epilogue=bias_relu)",
    "conv2d_winograd_nchwc(N=2,C=6,H=12,W=11,K=10,pad=3,ic_block=3,oc_block=5,tile=2,dilation=3,epilogue=bias)",
    "conv2d_winograd_nchwc(N=1,C=8,H=9,W=14,K=8,pad=1,ic_block=8,oc_block=8,dilation=4)",
    "conv2d_winograd_nchwc(N=1,C=8,H=5,W=6,K=8,pad=6,ic_block=8,oc_block=8,dilation=7,epilogue=relu)",
};

class KernelMatchesReference : public ::testing::TestWithParam<const char*> {};

TEST_P(KernelMatchesReference, DefaultConfig) {
  Workload w = parse_workload(GetParam());
  CompiledKernel k = compile_kernel(w, host_target(), nlohmann::json(), "default", "");
  testing::Comparison c = testing::run_and_compare(k.graph, k.lowered.func);
  EXPECT_TRUE(c.ok()) << w.canonical() << ": " << c.str();
}

TEST_P(KernelMatchesReference, RandomConfigs) {
  Workload w = parse_workload(GetParam());
  Target t = host_target();
  OpGraph g = build_op(w);
  std::vector<KnobSpec> space = knob_space(g, t);
  std::mt19937 rng(std::hash<std::string>()(w.canonical()));
  for (int trial = 0; trial < testing::sweep(6, 1); ++trial) {
    nlohmann::json config = nlohmann::json::object();
    for (const KnobSpec& k : space) {
      std::vector<nlohmann::json> small;
      // Integer knobs up to 16 keep the unrolled code small; the code paths are the same.
      for (const auto& c : k.candidates) {
        if (!c.is_number_integer() || c.get<int64_t>() <= 16) small.push_back(c);
      }
      config[k.name] = small[rng() % small.size()];
    }
    CompiledKernel k = compile_kernel(w, t, config, "given", "");
    testing::Comparison c = testing::run_and_compare(k.graph, k.lowered.func, 100 + trial);
    EXPECT_TRUE(c.ok()) << w.canonical() << " config " << config.dump() << ": " << c.str();
  }
}

// The NCHW convolution's two tile shapes (columns or channels vectorized) in both loop orders,
// with tiles that divide nothing.
TEST_P(KernelMatchesReference, EveryConvTileShape) {
  Workload w = parse_workload(GetParam());
  if (w.op != "conv2d_nchw") GTEST_SKIP() << "only conv2d_nchw has vector_axis";
  for (const char* axis : {"w", "k"}) {
    for (const char* order : {"kw", "wk"}) {
      for (int64_t tk : {3, 24}) {
        nlohmann::json config = {{"vector_axis", axis}, {"order", order}, {"tile_k", tk}, {"tile_w", 5}};
        CompiledKernel k = compile_kernel(w, host_target(), config, "given", "");
        testing::Comparison c = testing::run_and_compare(k.graph, k.lowered.func);
        EXPECT_TRUE(c.ok()) << w.canonical() << " config " << config.dump() << ": " << c.str();
      }
    }
  }
}

// The depthwise convolution's two tile shapes (columns, or a vector of channels packed into
// blocks with the border read through selects), with channel counts that fill no block.
TEST_P(KernelMatchesReference, EveryDepthwiseTileShape) {
  Workload w = parse_workload(GetParam());
  if (w.op != "depthwise_conv2d_nchw")
    GTEST_SKIP() << "only depthwise_conv2d_nchw has vector_axis w|c";
  for (const char* axis : {"w", "c"}) {
    for (int64_t tw : {1, 3, 5}) {
      for (bool parallel : {false, true}) {
        nlohmann::json config = {
            {"vector_axis", axis}, {"tile_w", tw}, {"inline_pad", true}, {"parallel", parallel}};
        CompiledKernel k = compile_kernel(w, host_target(), config, "given", "");
        testing::Comparison c = testing::run_and_compare(k.graph, k.lowered.func);
        EXPECT_TRUE(c.ok()) << w.canonical() << " config " << config.dump() << ": " << c.str();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Operators, KernelMatchesReference, ::testing::ValuesIn(kWorkloads));

// The threads of this process (/proc/self/task).
size_t process_threads() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// A parallel loop runs all its iterations whatever the threads: on a team (2 threads; 3, more
// than this machine may have, is capped at its CPUs), on one thread (then the kernel calls its
// loop body directly), and on one thread that belongs to an outer team (each of the team's
// threads runs the whole kernel on its own buffers; the body must not take its share of the
// outer team's iterations). The first call on 2 threads starts the library's pool (a thread
// more in this process: the work is shared, not run alone); between calls the pool's workers
// go to sleep (after 200 us idle) and the next call wakes them.
TEST(KernelThreads, ParallelLoopsRunEveryIterationOnTeamsAndAlone) {
  // The last: parallel loops of fewer iterations than a team's chunks (some chunks empty).
  const char* specs[] = {"matmul(M=97,N=131,K=67)", "conv2d_nchw(N=1,C=5,H=13,W=11,K=17,R=3,S=3,pad=1)",
                         "conv2d_nchw(N=1,C=3,H=3,W=7,K=2,R=3,S=3,pad=1)"};
  int saved = omp_get_max_threads();
  for (const char* spec : specs) {
    Workload w = parse_workload(spec);
    nlohmann::json config = {{"parallel", true}};
    CompiledKernel k = compile_kernel(w, host_target(), config, "given", "");
    ASSERT_TRUE(k.config["parallel"].get<bool>()) << spec;
    std::unique_ptr<KernelLibrary> lib = testing::build_for_host(k.lowered.func);
    size_t before = process_threads();
    for (int threads : {2, 1, 3, 2}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      omp_set_num_threads(threads);
      testing::Comparison c = testing::run_and_compare(k.graph, *lib);
      EXPECT_TRUE(c.ok()) << spec << " on " << threads << " thread(s): " << c.str();
      if (threads == 2) {
        EXPECT_GT(process_threads(), before) << spec << ": no pool thread was started";
      }
    }
    std::string failures[2];
#pragma omp parallel num_threads(2)
    {
      omp_set_num_threads(1);
      testing::Comparison c = testing::run_and_compare(k.graph, *lib, 11 + omp_get_thread_num());
      if (!c.ok()) failures[omp_get_thread_num()] = c.str();
    }
    EXPECT_EQ(failures[0], "") << spec << " on thread 0 of an outer team";
    EXPECT_EQ(failures[1], "") << spec << " on thread 1 of an outer team";
  }
  omp_set_num_threads(saved);
}

// Host threads that call one library at once, each asking for a team: one gets the pool, the
// others run their calls alone; every call computes all of its output.
// Both kernels have heap buffers (B packed; Winograd's stages), which a kernel keeps for its
// next call: concurrent calls must each get their own.
TEST(KernelThreads, CallsFromSeveralHostThreadsAtOnceAllComplete) {
  for (const char* spec : {"matmul(M=97,N=131,K=67)", "conv2d_winograd_nchwc(N=1,C=16,H=9,W=11,K=24,ic_block=8,oc_block=8)"}) {
    Workload w = parse_workload(spec);
    CompiledKernel k = compile_kernel(w, host_target(), nlohmann::json::object(), "default", "");
    std::unique_ptr<KernelLibrary> lib = testing::build_for_host(k.lowered.func);
    std::string failures[3];
    std::vector<std::thread> callers;
    for (int t = 0; t < 3; ++t) {
      callers.emplace_back([&, t] {
        omp_set_num_threads(2);
        for (int round = 0; round < 20 && failures[t].empty(); ++round) {
          testing::Comparison c = testing::run_and_compare(k.graph, *lib, 100 + t * 20 + round);
          if (!c.ok()) failures[t] = c.str();
        }
      });
    }
    for (std::thread& c : callers) c.join();
    for (int t = 0; t < 3; ++t) EXPECT_EQ(failures[t], "") << spec << ": host thread " << t;
  }
}

// fork() after the pool started: the child has none of the parent's workers and must start its
// own rather than wait for them. The child is killed by an alarm if it hangs.
TEST(KernelThreads, AChildForkedAfterParallelCallsRunsKernels) {
  Workload w = parse_workload("matmul(M=97,N=131,K=67)");
  CompiledKernel k = compile_kernel(w, host_target(), {{"parallel", true}}, "given", "");
  std::unique_ptr<KernelLibrary> lib = testing::build_for_host(k.lowered.func);
  int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  ASSERT_TRUE(testing::run_and_compare(k.graph, *lib).ok());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);
    bool ok = testing::run_and_compare(k.graph, *lib, 5).ok() &&
              testing::run_and_compare(k.graph, *lib, 6).ok();
    _exit(ok ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  omp_set_num_threads(saved);
  EXPECT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status)
                                 << " (14: it hung)";
  if (WIFEXITED(status)) {
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's kernel computed a wrong result";
  }
}

TEST(KernelAbi, SidecarDescribesArguments) {
  Workload w = parse_workload("conv2d_nchw(N=1,C=3,H=8,W=8,K=4,R=3,S=3,pad=1,epilogue=bias)");
  CompiledKernel k = compile_kernel(w, host_target(), {{"tile_w", 4}}, "given", "my_conv");
  std::string so = testing::temp_dir() + "/abi.so";
  write_kernel(k, EmitKind::SharedLibrary, so);
  std::ifstream f(so + ".json");
  nlohmann::json meta = nlohmann::json::parse(f);
  EXPECT_EQ(meta["function"], "my_conv");
  EXPECT_EQ(meta["workload"], w.canonical());
  EXPECT_EQ(meta["config_source"], "given");
  EXPECT_EQ(meta["config"]["tile_w"], 4);
  ASSERT_EQ(meta["args"].size(), 4u);
  EXPECT_EQ(meta["args"][0]["name"], "data");
  EXPECT_EQ(meta["args"][2]["name"], "bias");
  EXPECT_EQ(meta["args"][3]["role"], "output");
  EXPECT_EQ(meta["args"][3]["shape"], nlohmann::json({1, 4, 8, 8}));
}

// A register tile the schedule leaves rolled (unroll off) is still promoted to registers only
// if LLVM unrolls every loop indexing it: codegen asks for that on the innermost loops over a
// small local buffer, and only there (a larger tile, or an unrolled one, gets no request).
TEST(Codegen, LoopsOverARegisterTileAreMarkedForFullUnrolling) {
  Workload w = parse_workload(
      "conv2d_nchwc(N=1,C=32,H=14,W=14,K=160,R=3,S=3,pad=1,ic_block=16,oc_block=16,epilogue=bias_relu)");
  Target t = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512");
  auto unroll_requests = [&](int tile_w, int tile_kb, bool unroll) {
    nlohmann::json c = {{"tile_w", tile_w}, {"tile_kb", tile_kb}, {"unroll", unroll}, {"vectorize", true},
                        {"reduce_order", "crs"}, {"inline_pad", false}, {"parallel", true}};
    CompiledKernel k = compile_kernel(w, t, c, "given", "");
    std::string ir = llvm_ir_text(k.lowered.func, t);
    size_t n = 0;
    for (size_t at = ir.find("llvm.loop.unroll.full"); at != std::string::npos;
         at = ir.find("llvm.loop.unroll.full", at + 1))
      ++n;
    return n;
  };
  EXPECT_GT(unroll_requests(14, 1, false), 0u);  // 14 x 16 floats: a register tile
  EXPECT_GT(unroll_requests(7, 2, false), 0u);
  EXPECT_EQ(unroll_requests(14, 1, true), 0u);   // unrolled by the schedule already
  EXPECT_EQ(unroll_requests(14, 5, false), 0u);  // 14 x 5 x 16 = 1120 floats: no register tile
}

// A prefetching kernel's prefetches are instructions on x86 (prefetcht0, one per line of the
// next channel tile's weights at each step); none without the knob.
TEST(Codegen, PrefetchesAreInstructions) {
  Workload w = parse_workload("conv2d_nchwc(N=1,C=64,H=7,W=7,K=64,R=1,S=1,ic_block=16,oc_block=16)");
  Target t = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4");
  for (bool prefetch : {true, false}) {
    CompiledKernel k = compile_kernel(w, t, nlohmann::json{{"prefetch", prefetch}, {"tile_w", 7}, {"tile_kb", 2}},
                                      "given", "");
    std::string path = testing::temp_dir() + "/prefetch.s";
    write_kernel(k, EmitKind::Asm, path);
    const size_t n = testing::count_of(read_file(path), "prefetcht0");
    if (prefetch) {
      EXPECT_GE(n, 32u);
    } else {
      EXPECT_EQ(n, 0u);
    }
  }
}

// Loops around a register tile's updates that enclose further loops (a convolution's channel
// blocks and window, around its block's channels) are kept rolled: LLVM unrolled the 3-tap
// window, GVN kept each broadcast input alive for the next tap reading the same element, and
// with AVX2's 16 vector registers they went to the stack (425 spill accesses here; a 3x3
// layer at 55-71 GFLOPS on Zen 3 instead of 84-93). The innermost loop stays LLVM's.
TEST(Codegen, LoopsAroundARegisterTileAreKeptRolled) {
  Workload w = parse_workload("conv2d_nchwc(N=1,C=16,H=55,W=55,K=64,R=3,S=3,stride=1,pad=1,ic_block=8,oc_block=8)");
  Target t = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver3");
  CompiledKernel k = compile_kernel(w, t, nullptr, "default", "");
  std::string ir = llvm_ir_text(k.lowered.func, t);
  EXPECT_NE(ir.find("llvm.loop.unroll.disable"), std::string::npos);
  std::string path = testing::temp_dir() + "/rolled.s";
  write_kernel(k, EmitKind::Asm, path);
  const std::string text = read_file(path);
  const size_t stack = testing::count_of(text, "(%rsp)");
  EXPECT_LT(stack, 100u) << "stack accesses in the kernel: the window's broadcasts spill again";
  // The window loop's body is 8 channels of a 2 x 5 tile (80 multiply-adds; 160 in all with
  // the peeled last tile's copy), where the unrolled window made 480.
  EXPECT_LE(testing::count_of(text, "vfmadd"), 200u);
}

// A blocked convolution's unrolled tile puts outside whichever of its columns (a broadcast
// each) and its channel blocks (a weight vector each) has fewer operands: 6 columns x 2
// blocks on AVX2 keeps 2 weight vectors live (12 accumulators + 2 + 1 broadcast = 15
// registers); with the columns outside it kept 6 broadcasts live (19) and spilled inside the
// reduction. 3 columns x 4 blocks keeps the 3 broadcasts live (16) and fits too, so the
// tuner's space holds both; 7 x 2 (17) does not fit.
TEST(Codegen, BlockedConvolutionTilesKeepTheFewerOperandsLive) {
  Workload w = parse_workload("conv2d_nchwc(N=1,C=64,H=14,W=14,K=32,R=1,S=1,stride=1,pad=0,ic_block=8,oc_block=8)");
  Target t = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver3");
  auto config = [](int tile_w, int tile_kb) {
    return nlohmann::json{{"tile_w", tile_w}, {"tile_kb", tile_kb}, {"unroll", true},        {"vectorize", true},
                          {"reduce_order", "crs"}, {"inline_pad", false}, {"parallel", true}};
  };
  // Vector accesses to the stack between the first and the last multiply-add.
  auto spills_among_fmas = [&](int tile_w, int tile_kb) {
    CompiledKernel k = compile_kernel(w, t, config(tile_w, tile_kb), "given", "");
    std::string path = testing::temp_dir() + "/tile.s";
    write_kernel(k, EmitKind::Asm, path);
    const std::string text = read_file(path);
    const size_t first = text.find("vfmadd"), last = text.rfind("vfmadd");
    EXPECT_NE(first, std::string::npos);
    size_t n = 0;
    std::istringstream lines(text.substr(first, last - first));
    for (std::string line; std::getline(lines, line);)
      n += line.find("(%rsp)") != std::string::npos && line.find("mm") != std::string::npos;
    return n;
  };
  EXPECT_EQ(spills_among_fmas(6, 2), 0u);
  EXPECT_EQ(spills_among_fmas(3, 4), 0u);
  OpGraph g = build_op(w);
  EXPECT_EQ(check_constraints(g, t, complete_config(g, t, config(6, 2))), "");
  EXPECT_EQ(check_constraints(g, t, complete_config(g, t, config(3, 4))), "");
  const std::string why = check_constraints(g, t, complete_config(g, t, config(7, 2)));
  EXPECT_NE(why.find("needs 17 vector registers"), std::string::npos) << why;
}

// Accesses carry one alias scope per buffer (values loaded from one buffer survive stores to
// another inside parallel loops), and heap buffers kept between calls are freed by a
// destructor of the library.
TEST(Codegen, BuffersHaveAliasScopesAndKeptWorkspacesAreFreedAtUnload) {
  Workload w = parse_workload("conv2d_winograd_nchwc(N=1,C=16,H=9,W=11,K=24,ic_block=8,oc_block=8)");
  Target t = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512");
  CompiledKernel k = compile_kernel(w, t, nlohmann::json::object(), "default", "");
  std::string ir = llvm_ir_text(k.lowered.func, t);
  EXPECT_NE(ir.find("!alias.scope"), std::string::npos);
  EXPECT_NE(ir.find("!noalias"), std::string::npos);
  EXPECT_NE(ir.find("@llvm.global_dtors"), std::string::npos);
  EXPECT_NE(ir.find("winograd_V.cache"), std::string::npos);
  EXPECT_NE(ir.find("atomicrmw xchg"), std::string::npos);
}

// A batch matmul whose columns are not whole register tiles (ViT's attention scores: 197 x 197
// per head) reads B with whole vector loads in every tile under its default schedule: no
// vector load by a computed index, which the backend does lane by lane. (Packed into panels,
// the shifted last tile straddled two and a fused batch loop hid the rest from peeling: every
// tile gathered, 20 GFLOPS.) Packed, the last tile still gathers.
TEST(Codegen, BatchMatmulTailColumnsReadWholeVectors) {
  Workload w = parse_workload("batch_matmul(B=12,M=197,N=197,K=64)");
  Target t = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512");
  auto gathers = [&](const nlohmann::json& c) {
    CompiledKernel k = compile_kernel(w, t, c, "given", "");
    int64_t n = 0, vector_loads = 0;
    ir::post_order(k.lowered.func.body, [&](const ir::Expr& e) {
      const auto* l = e.as<ir::Load>();
      if (!l || l->type.lanes == 1) return;
      ++vector_loads;
      if (!l->index.as<ir::Ramp>() && !l->index.as<ir::Broadcast>()) ++n;
    });
    EXPECT_GT(vector_loads, 0);
    return n;
  };
  EXPECT_EQ(gathers(nlohmann::json::object()), 0);
  nlohmann::json packed = {{"pack_b", true}, {"tile_n", 32}, {"tile_m", 8}, {"order", "nm"}};
  EXPECT_GT(gathers(packed), 0);  // the last tile's (the count's own check)
}

// The Winograd operator with weights transformed by winograd_weight_transform computes the
// direct convolution (both references, in double), dilated or not: the matrices, the
// transform, the tiling of residue classes and the operator's definition agree.
// The product references sum each output's terms over k in order, in double, whatever order
// they visit the outputs in (row by row, rows over threads): bit for bit a plain dot product,
// batched, with a bias and ReLU, and with more rows than cores and fewer.
TEST(Reference, ProductsAreThePlainDotProductsBitForBit) {
  for (const char* spec : {"matmul(M=37,N=29,K=53,epilogue=bias_relu)", "matmul(M=1,N=7,K=300)",
                           "batch_matmul(B=3,M=9,N=11,K=13)"}) {
    Workload w = parse_workload(spec);
    OpGraph g = build_op(w);
    std::vector<std::vector<float>> in;
    std::vector<const float*> ptrs;
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      in.emplace_back(static_cast<size_t>(ir::num_elements(g.inputs[i]->shape)));
      fill_random(in.back().data(), static_cast<int64_t>(in.back().size()), 7 + i);
      ptrs.push_back(in.back().data());
    }
    const int64_t B = w.has("B") ? w.get("B") : 1, M = w.get("M"), N = w.get("N"), K = w.get("K");
    std::vector<float> got(static_cast<size_t>(B * M * N));
    reference_compute(w, ptrs, got.data());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k)
            acc += double(in[0][(b * M + i) * K + k]) * in[1][(b * K + k) * N + j];
          if (w.epilogue == Epilogue::BiasRelu) acc = std::max(acc + in[2][j], 0.0);
          ASSERT_EQ(got[(b * M + i) * N + j], static_cast<float>(acc)) << spec << " at " << b << "," << i << "," << j;
        }
  }
}

TEST(Winograd, TransformedWeightsGiveTheDirectConvolution) {
  const char* shapes[] = {"N=1,C=8,H=9,W=11,K=12,pad=1,ic_block=4,oc_block=4",
                          "N=2,C=3,H=6,W=5,K=5,pad=0,ic_block=3,oc_block=5",
                          "N=1,C=16,H=7,W=7,K=16,pad=2,ic_block=8,oc_block=16",
                          "N=1,C=8,H=13,W=10,K=8,pad=2,ic_block=4,oc_block=4,dilation=2",
                          "N=2,C=4,H=11,W=16,K=4,pad=4,ic_block=4,oc_block=4,dilation=4",
                          "N=1,C=4,H=9,W=8,K=4,pad=0,ic_block=4,oc_block=4,dilation=3"};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(-1, 1);
  for (const char* shape : shapes) {
    for (int m : {2, 4}) {
      Workload direct = parse_workload(str("conv2d_nchwc(", shape, ",R=3,S=3,epilogue=bias_relu)"));
      Workload wino = parse_workload(str("conv2d_winograd_nchwc(", shape, ",tile=", m, ",epilogue=bias_relu)"));
      int64_t N = direct.get("N"), C = direct.get("C"), H = direct.get("H"), W = direct.get("W"), K = direct.get("K");
      std::vector<float> data(static_cast<size_t>(N * C * H * W)), weight(static_cast<size_t>(K * C * 9)),
          bias(static_cast<size_t>(K));
      for (auto* v : {&data, &weight, &bias})
        for (float& x : *v) x = unit(rng);
      std::vector<float> u = winograd_weight_transform(weight.data(), K, C, direct.get("ic_block"),
                                                       direct.get("oc_block"), m);
      EXPECT_EQ(u.size(), static_cast<size_t>((m + 2) * (m + 2) * K * C));
      EXPECT_LT(reference_difference(direct, {data.data(), weight.data(), bias.data()}, wino,
                                     {data.data(), u.data(), bias.data()}),
                1e-4)
          << wino.canonical();
    }
  }
}

// A depthwise convolution of width g computes the grouped convolution of groups of g
// channels in and out (conv2d_nchwc group=C/g, blocks holding whole groups, its weights zero
// where a filter meets another group's channel), from the same filters laid out
// [C/b][g][R][S][b] (both references, in double; the layouts graph/pass_transform_conv_layout
// makes).
TEST(DepthwiseWidth, GivesTheGroupedConvolution) {
  struct Case {
    const char* shape;  // N, C, H, W, window, stride, pad, dilation
    int64_t b, g;
  };
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> unit(-1, 1);
  for (const Case& k : {Case{"N=1,C=32,H=7,W=9,R=3,S=3,pad=1", 16, 4}, Case{"N=2,C=16,H=8,W=6,R=3,S=3,stride=2,pad=1", 16, 8},
                        Case{"N=1,C=16,H=9,W=9,R=3,S=2,pad=2,dilation=2", 8, 2}}) {
    Workload lanes = parse_workload(str("depthwise_conv2d_nchwc(", k.shape, ",block=", k.b, ",width=", k.g, ",epilogue=bias)"));
    Workload grouped = parse_workload(str("conv2d_nchwc(", k.shape, ",K=", lanes.get("C"), ",ic_block=", k.b, ",oc_block=", k.b,
                                          ",group=", lanes.get("C") / k.g, ",epilogue=bias)"));
    const int64_t N = lanes.get("N"), C = lanes.get("C"), H = lanes.get("H"), W = lanes.get("W");
    const int64_t R = lanes.get("R"), S = lanes.get("S"), b = k.b, g = k.g;
    std::vector<float> data(static_cast<size_t>(N * C * H * W)), filters(static_cast<size_t>(C * g * R * S)),
        bias(static_cast<size_t>(C));
    for (auto* v : {&data, &filters, &bias})
      for (float& x : *v) x = unit(rng);
    // [C][g][R][S] as [C/b][g][R][S][b], and as [K/b][1][R][S][b][b] zero off the groups.
    std::vector<float> wl(filters.size()), wg(static_cast<size_t>(C * b * R * S), 0.0f);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < g; ++i)
        for (int64_t p = 0; p < R * S; ++p) {
          const float f = filters[static_cast<size_t>((c * g + i) * R * S + p)];
          wl[static_cast<size_t>((((c / b) * g + i) * R * S + p) * b + c % b)] = f;
          const int64_t ci = c % b / g * g + i;  // the input lane within the block
          wg[static_cast<size_t>((((c / b) * R * S + p) * b + ci) * b + c % b)] = f;
        }
    EXPECT_LT(reference_difference(grouped, {data.data(), wg.data(), bias.data()}, lanes,
                                   {data.data(), wl.data(), bias.data()}),
              1e-5)
        << lanes.canonical();
  }
}

// The in-process linker (lld's library): its error text reaches the user, and a failed link
// leaves it usable for the next one.
TEST(Link, InProcessErrorsNameTheProblemAndTheLinkerStaysUsable) {
  std::string dir = testing::temp_dir();
  try {
    link_shared_library(dir + "/no-such-object.o", dir + "/never.so", host_target(), false, false);
    ADD_FAILURE() << "linked a missing object";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("linking failed"), std::string::npos) << what;
    EXPECT_NE(what.find("no-such-object.o"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/never.so"));
  CompiledKernel k = compile_kernel(parse_workload("matmul(M=4,N=4,K=4)"), host_target(), nlohmann::json::object(), "default", "");
  write_kernel(k, EmitKind::SharedLibrary, dir + "/after_error.so");
  EXPECT_TRUE(std::filesystem::exists(dir + "/after_error.so"));
}

}  // namespace
}  // namespace tf
