// GPU code generation without a GPU: what this machine can check.
//   - The GPU schedules' lowering (grid indices, tails, guards) computes the reference's
//     values: the grid's loops run serially on the CPU (serialize_gpu_bindings). This checks
//     the schedule and the loop IR, not the GPU code generator.
//   - NVPTX output assembles with NVIDIA's ptxas (under /usr/local/cuda; skipped with the
//     reason where it is absent, and per architecture where this ptxas dropped it).
//   - AMDGPU output links into a code object with ld.lld, disassembles with llvm-objdump, and
//     stays within each architecture's register and LDS limits with no spills.
//   - check_gpu_kernel rejects what a GPU cannot run, naming the limit and the value.
// Numeric tests on a real GPU need the board runtime (issue 12, not written yet).
#include "compiler/gpu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <utility>

#include "base/error.h"
#include "compiler/attention.h"
#include "compiler/codegen_llvm.h"
#include "compiler/driver.h"
#include "compiler/early_loads.h"
#include "compiler/gpu_reduction.h"
#include "compiler/ir_mutator.h"
#include "compiler/ir_printer.h"
#include "compiler/link.h"
#include "compiler/lower.h"
#include "compiler/merge_barriers.h"
#include "compiler/model_codegen.h"
#include "compiler/schedule_templates.h"
#include "compiler/templates/gpu_gemm.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {
namespace fs = std::filesystem;

// How often `what` occurs in `text`.
using testing::count_of;

const char* kWorkloads[] = {
    "matmul(M=1,N=1,K=1)",
    "matmul(M=97,N=131,K=67)",
    "matmul(M=64,N=64,K=64,epilogue=bias_relu)",
    "matmul(M=5,N=300,K=3,epilogue=relu)",
    "matmul(M=1,N=1000,K=33)",
    "batch_matmul(B=3,M=17,N=33,K=9,epilogue=bias_relu)",
    "batch_matmul(B=12,M=128,N=128,K=64)",
    "conv2d_nchw(N=1,C=3,H=7,W=7,K=5,R=3,S=3)",
    "conv2d_nchw(N=2,C=3,H=13,W=11,K=5,R=3,S=2,stride=2,pad=2,dilation=2,epilogue=bias_relu)",
    "conv2d_nchw(N=1,C=16,H=15,W=15,K=19,R=1,S=1,epilogue=relu)",
    "conv2d_nchw(N=1,C=12,H=9,W=8,K=18,R=3,S=3,pad=1,group=3,epilogue=bias_relu)",
    "conv2d_nchw(N=2,C=6,H=7,W=7,K=12,R=3,S=3,stride=2,group=6)",
    "conv2d_nhwc(N=2,H=11,W=6,C=3,K=33,R=2,S=3,stride=2,pad=1,dilation=1,epilogue=bias_relu)",
    "depthwise_conv2d_nchw(N=1,C=7,H=11,W=13,R=3,S=3,pad=1,epilogue=bias_relu)",
    "depthwise_conv2d_nchw(N=2,C=3,H=17,W=9,R=5,S=3,stride=2,pad=2,dilation=2)",
};

std::string file_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class GpuWorkload : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuWorkload, ScheduleLoweringMatchesReferenceOnCpu) {
  Workload w = parse_workload(GetParam());
  for (const char* spec : {"cuda -arch=sm_80", "rocm -mcpu=gfx906"}) {
    Target t = parse_target(spec);
    int i = 0;
    for (const nlohmann::json& config : testing::sample_configs(w, t, 4)) {
      CompiledKernel k = compile_kernel(w, t, config, "given", "");
      ASSERT_NE(k.launch(), nullptr);
      ir::LoweredFunc f = k.lowered.func;
      f.body = serialize_gpu_bindings(f.body);
      testing::Comparison c = testing::run_and_compare(k.graph, f, 40 + i++);
      EXPECT_TRUE(c.ok()) << w.canonical() << " on " << spec << " config " << config.dump() << ": " << c.str();
    }
  }
}

// The same with each block's threads at once (tests/compiler/kernel_harness.h
// run_gpu_emulated): a thread that runs ahead of the others where a barrier is missing reads or
// overwrites what they have not finished, which the serialized run above cannot show.
TEST_P(GpuWorkload, ThreadsOfABlockAtOnceMatchTheReference) {
  Workload w = parse_workload(GetParam());
  const Target t = parse_target("cuda -arch=sm_80");
  int i = 0;
  for (const nlohmann::json& config : testing::sample_configs(w, t, 2)) {
    CompiledKernel k = compile_kernel(w, t, config, "given", "");
    testing::Comparison c = testing::run_gpu_emulated(k.graph, k.lowered.func, t, 60 + i++, 4096);
    EXPECT_TRUE(c.ok()) << w.canonical() << " config " << config.dump() << ": " << c.str();
  }
}

// The block's barriers of a kernel taken out, or (`reached_by_some`) reached by the threads of
// threadIdx.x below 16 only, where the barrier is inside that loop.
class TamperedBarriers : public ir::IRMutator {
 public:
  explicit TamperedBarriers(bool reached_by_some) : reached_by_some_(reached_by_some) {}
  ir::Stmt mutate_stmt(const ir::Stmt& s) override {
    if (const ir::For* f = s.as<ir::For>(); f && f->for_kind == ir::ForKind::ThreadIdxX) {
      ir::Expr outer = std::exchange(thread_x_, f->var);
      ir::Stmt out = ir::IRMutator::mutate_stmt(s);
      thread_x_ = outer;
      return out;
    }
    const ir::Barrier* b = s.as<ir::Barrier>();
    if (!b || b->sync != ir::Barrier::Kind::Block) return ir::IRMutator::mutate_stmt(s);
    if (reached_by_some_ && !thread_x_) return s;
    ++tampered;
    if (!reached_by_some_) return ir::Block::make({});
    return ir::IfThenElse::make(thread_x_ < ir::Expr(16), s);
  }
  int tampered = 0;

 private:
  bool reached_by_some_;
  ir::Expr thread_x_;
};

// The emulation itself: the threads of a block run as fibers, one after another between
// barriers, so a kernel whose barriers are missing reads shared tiles its block has not
// written (they start as NaN) and fails, and one whose barrier some threads never reach stops
// the program naming the barrier instead of hanging.
TEST(GpuEmulation, AMissingBarrierFailsAndABarrierSomeThreadsSkipIsADeadlock) {
  Workload w = parse_workload("matmul(M=64,N=64,K=64)");
  const Target t = parse_target("cuda -arch=sm_80");
  CompiledKernel k =
      compile_kernel(w, t, nlohmann::json{{"shared", true}, {"stages", 1}}, "given", "");
  EXPECT_TRUE(testing::run_gpu_emulated(k.graph, k.lowered.func, t).ok());
  TamperedBarriers dropped(false);
  ir::LoweredFunc without = k.lowered.func;
  without.body = dropped.mutate_stmt(without.body);
  ASSERT_GE(dropped.tampered, 2);
  testing::Comparison c = testing::run_gpu_emulated(k.graph, without, t);
  EXPECT_FALSE(c.ok()) << "a kernel without its barriers matched: " << c.str();
  TamperedBarriers skipped(true);
  ir::LoweredFunc some = k.lowered.func;
  some.body = skipped.mutate_stmt(some.body);
  ASSERT_GE(skipped.tampered, 1);
  // Past check_gpu_kernel, which refuses a barrier under a condition: the emulation alone. In a
  // child that runs the test again (the linker's thread pool is not in a forked one).
  GpuProgram p = split_gpu_program(some);
  ASSERT_EQ(p.kernels.size(), 1u);
  GpuLaunch launch = check_gpu_kernel(split_gpu_program(k.lowered.func).kernels.at(0), t);
  std::vector<std::vector<float>> bufs = {std::vector<float>(64 * 64, 1.f),
                                          std::vector<float>(64 * 64, 1.f),
                                          std::vector<float>(64 * 64)};
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(testing::emulate_gpu_kernel(p.kernels[0], launch, bufs),
               "an emulated block deadlocked: thread [0-9]+ waits at a barrier of the block, which "
               "[0-9]+ of its 32 "
               "threads reached");
  GTEST_FLAG_SET(death_test_style, style);
}

// What ptxas says about an architecture it does not have (CUDA 13 dropped sm_70).
bool ptxas_lacks(const std::string& out) { return out.find("is not defined for option 'gpu-name'") != std::string::npos; }

TEST_P(GpuWorkload, PtxAssemblesWithPtxas) {
  const std::string ptxas = "/usr/local/cuda/bin/ptxas";
  if (!fs::exists(ptxas)) GTEST_SKIP() << ptxas << " is not installed (NVIDIA's CUDA toolkit): PTX not assembled";
  Workload w = parse_workload(GetParam());
  int assembled = 0;
  for (const char* arch : {"sm_70", "sm_75", "sm_80", "sm_90"}) {
    Target t = parse_target(std::string("cuda -arch=") + arch);
    int i = 0;
    for (const nlohmann::json& config : testing::sample_configs(w, t, 2)) {
      CompiledKernel k = compile_kernel(w, t, config, "given", "");
      std::string base = testing::temp_dir() + "/" + arch + "_" + std::to_string(i++);
      write_kernel(k, EmitKind::SharedLibrary, base + ".ptx");
      std::string ptx = file_text(base + ".ptx");
      EXPECT_NE(ptx.find(".visible .entry " + k.name + "("), std::string::npos) << "not an entry point:\n" << ptx;
      EXPECT_NE(ptx.find(std::string(".target ") + arch), std::string::npos);
      nlohmann::json side = nlohmann::json::parse(file_text(base + ".ptx.json"));
      EXPECT_EQ(side["module"], "ptx");
      EXPECT_EQ(side["launch"]["block"][0].get<int64_t>() * side["launch"]["block"][1].get<int64_t>(),
                k.launch()->threads_per_block());
      CommandResult r = run_command({ptxas, std::string("-arch=") + arch, base + ".ptx", "-o", base + ".cubin"});
      if (r.exit_code != 0 && ptxas_lacks(r.output)) {
        std::printf("note: this ptxas has no %s; its PTX was generated but not assembled\n", arch);
        break;
      }
      EXPECT_EQ(r.exit_code, 0) << w.canonical() << " " << arch << " config " << config.dump() << ":\n" << r.output;
      ++assembled;
    }
  }
  EXPECT_GE(assembled, 6) << "ptxas assembled too few kernels to mean anything";
}

// Per-architecture limits of one work-item (wave64 gfx9 and wave32 gfx10+ without AGPRs).
struct AmdLimits {
  const char* gfx;
  int vgprs, sgprs;
};

int64_t note_value(const std::string& notes, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(notes, m, std::regex("\\." + key + ":\\s+([0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

TEST_P(GpuWorkload, AmdgpuCodeObjectsLinkAndFit) {
  Workload w = parse_workload(GetParam());
  for (const AmdLimits& lim : {AmdLimits{"gfx906", 256, 102}, AmdLimits{"gfx90a", 512, 102},
                               AmdLimits{"gfx1030", 256, 106}, AmdLimits{"gfx1100", 256, 106}}) {
    Target t = parse_target(std::string("rocm -mcpu=") + lim.gfx);
    int i = 0;
    for (const nlohmann::json& config : testing::sample_configs(w, t, 2)) {
      CompiledKernel k = compile_kernel(w, t, config, "given", "");
      std::string path = testing::temp_dir() + "/" + lim.gfx + "_" + std::to_string(i++) + ".hsaco";
      write_kernel(k, EmitKind::SharedLibrary, path);
      std::string what = w.canonical() + " " + lim.gfx + " config " + config.dump();
      CommandResult dis = run_command({"llvm-objdump-19", "-d", "--mcpu=" + std::string(lim.gfx), path});
      ASSERT_EQ(dis.exit_code, 0) << what << ": " << dis.output;
      EXPECT_NE(dis.output.find("<" + k.name + ">:"), std::string::npos) << what;
      EXPECT_NE(dis.output.find("s_endpgm"), std::string::npos) << what;
      CommandResult notes = run_command({"llvm-readelf-19", "--notes", path});
      ASSERT_EQ(notes.exit_code, 0) << notes.output;
      EXPECT_NE(notes.output.find("amdhsa.target:   amdgcn-amd-amdhsa--" + std::string(lim.gfx)), std::string::npos)
          << what << "\n" << notes.output;
      int64_t vgpr = note_value(notes.output, "vgpr_count"), sgpr = note_value(notes.output, "sgpr_count");
      int64_t lds = note_value(notes.output, "group_segment_fixed_size");
      int64_t spills = note_value(notes.output, "vgpr_spill_count");
      int64_t max_flat = note_value(notes.output, "max_flat_workgroup_size");
      EXPECT_GT(vgpr, 0) << what;
      EXPECT_LE(vgpr, lim.vgprs) << what;
      EXPECT_GT(sgpr, 0) << what;
      EXPECT_LE(sgpr, lim.sgprs) << what;
      EXPECT_GE(lds, 0) << what;
      EXPECT_LE(lds, 65536) << what;
      EXPECT_EQ(spills, 0) << what;
      EXPECT_EQ(max_flat, k.launch()->threads_per_block()) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Workloads, GpuWorkload, ::testing::ValuesIn(kWorkloads));

std::string compile_error(const std::string& workload, const std::string& target, const nlohmann::json& config,
                          EmitKind emit = EmitKind::LoopIR);

// A kernel with a shared-memory stage: the block's region (thread indices relaxed), copied
// cooperatively between two barriers; the same values as the reference, bar.sync in the
// PTX, LDS in the code object.
void check_shared_kernel(const std::string& w, const nlohmann::json& config) {
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  Workload wl = parse_workload(w);
  Target cuda = parse_target("cuda -arch=sm_80");
  CompiledKernel k = compile_kernel(wl, cuda, config, "given", "");
  std::string what = w + " config " + config.dump();
  EXPECT_GT(k.launch()->static_shared_bytes, 0) << what;
  std::string loops = ir::to_string(k.lowered.func);
  EXPECT_NE(loops.find("shared"), std::string::npos) << loops;
  EXPECT_NE(loops.find("barrier"), std::string::npos) << loops;
  ir::LoweredFunc f = k.lowered.func;
  f.body = serialize_gpu_bindings(f.body);
  testing::Comparison c = testing::run_and_compare(k.graph, f, 3);
  EXPECT_TRUE(c.ok()) << what << ": " << c.str();
  std::string base = testing::temp_dir() + "/shared";
  write_kernel(k, EmitKind::SharedLibrary, base + ".ptx");
  std::string ptx = file_text(base + ".ptx");
  EXPECT_NE(ptx.find("bar.sync"), std::string::npos) << what;
  EXPECT_NE(ptx.find(".shared .align 16 .b8"), std::string::npos) << what;
  if (fs::exists(ptxas)) {
    CommandResult r = run_command({ptxas, "-arch=sm_80", base + ".ptx", "-o", base + ".cubin"});
    EXPECT_EQ(r.exit_code, 0) << what << ":\n" << r.output;
  }
  Target amd = parse_target("rocm -mcpu=gfx90a");
  CompiledKernel ka = compile_kernel(wl, amd, config, "given", "");
  write_kernel(ka, EmitKind::SharedLibrary, base + ".hsaco");
  CommandResult notes = run_command({"llvm-readelf-19", "--notes", base + ".hsaco"});
  EXPECT_EQ(note_value(notes.output, "group_segment_fixed_size"), ka.launch()->static_shared_bytes) << what;
  EXPECT_EQ(note_value(notes.output, "vgpr_spill_count"), 0) << what;
  CommandResult dis = run_command({"llvm-objdump-19", "-d", "--mcpu=gfx90a", base + ".hsaco"});
  // A block of one wavefront (64 threads on gfx90a) needs no s_barrier: LLVM drops it.
  if (ka.launch()->threads_per_block() > 64) {
    EXPECT_NE(dis.output.find("s_barrier"), std::string::npos) << what;
  }
  EXPECT_NE(dis.output.find("ds_read"), std::string::npos) << what;
}

// Dense: tiles of A (K-major) and B, block_k deep, per step of K; single and double
// buffered, vectorized copies and scalar ones, odd tiles, K tails, batches, epilogues.
TEST(GpuShared, StagedTilesMatchTheReferenceAndUseBarriers) {
  int sample = 0;
  for (const char* w : {"matmul(M=97,N=131,K=67)", "matmul(M=64,N=64,K=64,epilogue=bias_relu)",
                        "batch_matmul(B=3,M=17,N=33,K=9,epilogue=bias_relu)", "matmul(M=1,N=300,K=40)",
                        "matmul(M=128,N=96,K=36,epilogue=bias)"}) {
    for (const nlohmann::json& config :
         {nlohmann::json{{"shared", true}, {"stages", 2}},
          nlohmann::json{{"shared", true}, {"stages", 1}, {"block_k", 8}, {"vectorize", false}},
          nlohmann::json{{"shared", true}, {"stages", 2}, {"warps_m", 2}, {"warps_n", 1}, {"lanes_n", 4},
                         {"tile_m", 3}, {"tile_n", 2}, {"block_k", 5}},
          nlohmann::json{{"shared", true}, {"stages", 3}, {"warps_m", 1}, {"warps_n", 2}, {"lanes_n", 8},
                         {"tile_m", 4}, {"tile_n", 4}, {"block_k", 4}},
          nlohmann::json{{"shared", true}, {"stages", 4}, {"block_k", 2}}}) {
      if (!testing::sampled(sample++, 2)) continue;  // under the sanitizers half (tests/sanitized.h)
      check_shared_kernel(w, config);
    }
  }
}

// Multi-buffering: the copies of the steps ahead come before the work on this one, a single
// barrier per step, and on sm_80+ they are cp.async (16 bytes where aligned), committed as
// one group per step and waited for before the barrier until at most stages-2 groups are in
// flight; sm_75 copies through registers. The loop IR shows the structure.
TEST(GpuShared, MultiBufferedTilesAreCopiedAhead) {
  const std::string w = "matmul(M=256,N=256,K=256)";
  nlohmann::json config = {{"shared", true}, {"stages", 2}, {"warps_m", 2}, {"warps_n", 1},
                           {"lanes_n", 8}, {"tile_m", 8}, {"tile_n", 8}, {"block_k", 8}};
  auto ptx_of = [&](const char* arch) {
    CompiledKernel k = compile_kernel(parse_workload(w), parse_target(std::string("cuda -arch=") + arch), config, "given", "");
    std::string path = testing::temp_dir() + "/double_" + arch + ".ptx";
    write_kernel(k, EmitKind::Asm, path);
    return std::make_pair(k, file_text(path));
  };
  auto [k90, ptx90] = ptx_of("sm_90");
  std::string loops = ir::to_string(k90.lowered.func);
  EXPECT_NE(loops.find("shared async"), std::string::npos) << loops;
  EXPECT_NE(loops.find("async_wait(0)"), std::string::npos) << loops;
  EXPECT_NE(loops.find("async_commit"), std::string::npos) << loops;
  // Two tiles of A (8 x (64 + 4)) and of B (8 x (64 + 4)).
  EXPECT_EQ(k90.launch()->static_shared_bytes, 2 * 2 * 8 * 68 * 4);
  // The prologue's copy, and one in the loop: B's rows in 16-byte copies, A's transposed
  // elements in 4-byte ones.
  EXPECT_GT(count_of(ptx90, "cp.async.cg.shared.global [%"), 0u) << ptx90;
  EXPECT_GT(count_of(ptx90, "cp.async.ca.shared.global [%"), 0u) << ptx90;
  EXPECT_EQ(count_of(ptx90, "cp.async.wait_group 0"), 1u) << ptx90;
  EXPECT_EQ(count_of(ptx90, "cp.async.commit_group"), 2u) << ptx90;  // the prologue's, the loop's
  EXPECT_EQ(count_of(ptx90, "bar.sync"), 1u) << ptx90;
  auto [k75, ptx75] = ptx_of("sm_75");
  EXPECT_EQ(count_of(ptx75, "cp.async"), 0u);
  EXPECT_EQ(count_of(ptx75, "bar.sync"), 1u) << ptx75;
  EXPECT_GT(count_of(ptx75, "st.shared"), 0u);
  // Four stages: three tiles copied before the loop, each its group; two in flight.
  config["stages"] = 4;
  auto [k4, ptx4] = ptx_of("sm_90");
  EXPECT_EQ(k4.launch()->static_shared_bytes, 4 * 2 * 8 * 68 * 4);
  EXPECT_EQ(count_of(ptx4, "cp.async.wait_group 2"), 1u) << ptx4;
  EXPECT_EQ(count_of(ptx4, "cp.async.commit_group"), 4u) << ptx4;
  EXPECT_EQ(count_of(ptx4, "bar.sync"), 1u) << ptx4;
}

// A multi-buffered loop that runs more than once in a thread (a block whose rows straddle
// groups of a grouped convolution: the whole pipeline again for each group) waits at a barrier
// before its prologue copies, which overwrite the buffers the last run's last iterations read. Run
// with each block's threads at once (a thread ahead of the others would overwrite what they still
// read); a loop that runs once has no such barrier. (Such blocks are no longer in the tuner's
// space nor defaults, GpuGrouped below, but a given config may still ask for one.)
TEST(GpuShared, ALoopRunAgainWaitsBeforeItsPrologueOverwritesItsBuffers) {
  const Target sm80 = parse_target("cuda -arch=sm_80");
  // Blocks of 8 rows, for groups of 6 and 5 filters.
  const nlohmann::json straddling = {{"block_k", 8}, {"lanes_n", 16},  {"shared", true},
                                     {"split_k", 1}, {"stages", 2},    {"tile_m", 4},
                                     {"tile_n", 4},  {"unroll", true}, {"vectorize", true},
                                     {"warps_m", 1}, {"warps_n", 1}};
  for (const char* w :
       {"conv2d_nchw(N=1,C=12,H=9,W=8,K=18,R=3,S=3,pad=1,group=3,epilogue=bias_relu)",
        "conv2d_nchw(N=2,C=8,H=6,W=6,K=20,R=3,S=3,pad=1,group=4)"}) {
    CompiledKernel k = compile_kernel(parse_workload(w), sm80, straddling, "given", "");
    const std::string ir = ir::to_string(k.lowered.func);
    const size_t groups = ir.find("for (b, 0, ");
    ASSERT_NE(groups, std::string::npos) << w << ": no loop over a block's groups\n" << ir;
    EXPECT_NE(ir.find("barrier", groups), std::string::npos) << ir;
    EXPECT_LT(ir.find("barrier", groups), ir.find("async_commit", groups))
        << ir;  // before the prologue's copies
    testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, sm80, 5);
    EXPECT_TRUE(r.ok()) << w << " config " << k.config.dump() << ": " << r.str();
  }
  CompiledKernel once = compile_kernel(parse_workload("matmul(M=64,N=64,K=64)"), sm80,
                                       {{"shared", true}, {"stages", 2}}, "given", "");
  const std::string ir = ir::to_string(once.lowered.func);
  EXPECT_EQ(count_of(ir, "barrier"), 1u) << ir;
}

// A block of a grouped convolution (NCHW) takes at most a group's filters as its rows: the rows
// are the group's filters split off the output channels, and a block of more reaches, for bound
// inference, into the next groups, whose filters and images its shared tiles then held (group=32
// of 4 filters in 8-row blocks: 4,096 floats of weights instead of 128, twice the image data).
// Defaults respect it, and the shared memory a target gives a block (gfx90a's 48 KiB: defaults
// that needed 67-91 KiB failed to compile); the tuner's constraints refuse such a block by name.
TEST(GpuGrouped, ABlocksRowsStayWithinOneGroup) {
  std::mt19937 rng(56);
  auto r = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::string> workloads = {
      "conv2d_nchw(N=2,C=416,H=32,W=32,K=832,R=3,S=3,pad=1,group=52)",
      "conv2d_nchw(N=1,C=92,H=6,W=6,K=1242,R=3,S=3,pad=1,group=46)",
      "conv2d_nchw(N=2,C=8,H=6,W=6,K=20,R=3,S=3,pad=1,group=4)"};
  for (int i = 0; i < testing::sweep(24, 6); ++i) {
    const int g = r(2, 64), h = r(3, 40);
    workloads.push_back(str("conv2d_nchw(N=", r(1, 2), ",C=", g * r(1, 40), ",H=", h, ",W=", h,
                            ",K=", g * r(1, 40), ",R=3,S=3,pad=1,group=", g, ")"));
  }
  for (const char* target : {"cuda -arch=sm_80", "rocm -mcpu=gfx90a"}) {
    const Target t = parse_target(target);
    for (const std::string& text : workloads) {
      const Workload w = parse_workload(text);
      const OpGraph og = build_op(w);
      const nlohmann::json c = default_config(og, t);
      EXPECT_EQ(check_constraints(og, t, c), "") << text << " on " << target << ": " << c.dump();
      CompiledKernel k =
          compile_kernel(w, t, c, "default", "");  // within the target's shared memory
      EXPECT_EQ(ir::to_string(k.lowered.func).find("for (b, 0, "), std::string::npos)
          << text << ": a block that loops over groups";
    }
  }
  const Target sm80 = parse_target("cuda -arch=sm_80");
  const OpGraph og =
      build_op(parse_workload("conv2d_nchw(N=1,C=128,H=56,W=56,K=128,R=3,S=3,pad=1,group=32)"));
  nlohmann::json c = default_config(og, sm80);
  c["tile_m"] = 2;
  c["lanes_n"] = 8;
  c["warps_m"] = 1;
  EXPECT_NE(
      check_constraints(og, sm80, c).find("a block of 8 rows spans more than a group's 4 filters"),
      std::string::npos)
      << check_constraints(og, sm80, c);
  for (const nlohmann::json& sampled : testing::sample_configs(og.workload, sm80, 8)) {
    EXPECT_LE(templates::gemm_hierarchy(sm80, sampled).block_m(), 4) << sampled.dump();
  }
}

// Split-K: one call, two kernels in one module (the partial sums into a workspace, then
// their sum in order and the epilogue), listed in the sidecar with the workspace's size; the
// whole function run serially matches the reference; a split that does not divide K is
// refused by name, and the tuner proposes only splits that do.
TEST(GpuSplitK, PartialSumsThenTheirSumInASecondKernel) {
  const Target t = parse_target("cuda -arch=sm_90");
  Workload w = parse_workload("matmul(M=128,N=768,K=3072,epilogue=bias)");
  nlohmann::json config = {{"warps_m", 2}, {"warps_n", 1}, {"lanes_n", 8}, {"tile_m", 4}, {"tile_n", 4},
                           {"block_k", 8}, {"shared", true}, {"stages", 2}, {"split_k", 8}};
  CompiledKernel k = compile_kernel(w, t, config, "given", "");
  ASSERT_TRUE(k.gpu.has_value());
  ASSERT_EQ(k.gpu->kernels.size(), 2u);
  EXPECT_EQ(k.gpu->kernels[0].function, "matmul");
  EXPECT_EQ(k.gpu->kernels[1].function, "matmul_step2");
  ASSERT_EQ(k.gpu->workspaces.size(), 1u);
  EXPECT_EQ(k.gpu->workspaces[0].second, 8 * 128 * 768);
  // The parts are the first kernel's blockIdx.z; the second has one thread per output.
  EXPECT_EQ(k.gpu->kernels[0].launch.grid[2], 8);
  EXPECT_EQ(k.gpu->kernels[1].launch.grid[0] * k.gpu->kernels[1].launch.threads_per_block(), 128 * 768);
  nlohmann::json side = kernel_metadata(k);
  EXPECT_EQ(side["launch"]["grid"], nlohmann::json(k.launch()->grid));
  EXPECT_EQ(side["launch"]["then"][0]["function"], "matmul_step2");
  EXPECT_EQ(side["launch"]["workspace_elements"], nlohmann::json::array({8 * 128 * 768}));
  std::string ptx = codegen_llvm(k.lowered.func, t, CodegenOutput::Asm).data;
  EXPECT_EQ(count_of(ptx, ".entry matmul("), 1u) << ptx.substr(0, 2000);
  EXPECT_EQ(count_of(ptx, ".entry matmul_step2("), 1u);
  ir::LoweredFunc f = k.lowered.func;
  f.body = serialize_gpu_bindings(f.body);
  testing::Comparison r = testing::run_and_compare(k.graph, f, 3);
  EXPECT_TRUE(r.ok()) << r.str();

  // Without a split: one kernel, no workspace, nothing more in the sidecar.
  config["split_k"] = 1;
  CompiledKernel one = compile_kernel(w, t, config, "given", "");
  EXPECT_EQ(one.gpu->kernels.size(), 1u);
  EXPECT_FALSE(kernel_metadata(one)["launch"].contains("then"));

  config["split_k"] = 5;
  try {
    compile_kernel(w, t, config, "given", "");
    ADD_FAILURE() << "split_k 5 of K 3072 was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("split_k=5: must divide the reduction's extent 3072"), std::string::npos)
        << e.what();
  }
  const ScheduleTemplate& tpl = find_template(parse_workload("matmul(M=1,N=1,K=1)"), t);
  OpGraph g = build_op(w);
  EXPECT_NE(tpl.check_constraints(g, t, complete_config(g, t, config)).find("split_k 5 does not divide"),
            std::string::npos);
  for (const KnobDef& knob : tpl.knobs()) {
    if (std::string(knob.name) != "split_k") continue;
    for (const nlohmann::json& v : tpl.int_candidates(g, t, knob)) EXPECT_EQ(3072 % v.get<int64_t>(), 0) << v;
  }
}

// Blocks emulated with real threads (each copies only its share of a tile, barriers
// synchronize, shared memory starts as NaN): what serialize_gpu_bindings cannot check — that
// the cooperative copies cover the tiles and that the barriers order copies and reads, single
// and double buffered, dense and implicit-GEMM tiles, and the direct depthwise kernel.
TEST(GpuEmulated, BlocksOfThreadsMatchTheReference) {
  struct Case {
    const char* workload;
    nlohmann::json config;
  };
  const nlohmann::json hierarchy = {{"warps_m", 2}, {"warps_n", 1}, {"lanes_n", 8}, {"tile_m", 4}, {"tile_n", 4},
                                    {"block_k", 8}, {"shared", true}};
  auto with = [&](nlohmann::json extra) {
    nlohmann::json c = hierarchy;
    c.update(extra);
    return c;
  };
  const Case cases[] = {
      {"matmul(M=64,N=64,K=40,epilogue=bias_relu)", with({{"stages", 2}})},
      {"matmul(M=64,N=64,K=40)", with({{"stages", 1}})},
      {"matmul(M=50,N=37,K=19)", with({{"stages", 2}, {"block_k", 4}})},
      {"matmul(M=64,N=32,K=72,epilogue=relu)", with({{"stages", 3}})},
      {"matmul(M=32,N=64,K=20)", with({{"stages", 4}, {"block_k", 4}})},
      {"matmul(M=32,N=32,K=8)", with({{"stages", 4}})},
      {"batch_matmul(B=2,M=32,N=32,K=24)", with({{"stages", 2}, {"vectorize", false}})},
      {"conv2d_nchw(N=1,C=6,H=9,W=9,K=32,R=3,S=3,pad=1,epilogue=bias)", with({{"stages", 2}})},
      {"conv2d_nhwc(N=1,C=8,H=8,W=8,K=32,R=3,S=3,stride=2,pad=1)", with({{"stages", 3}})},
      {"depthwise_conv2d_nchw(N=1,C=16,H=9,W=9,R=3,S=3,pad=1)", {{"shared", true}}},
      // Split-K: the partial sums into a workspace, then a second kernel sums them (parts
      // that block_k does not divide, the output as the sum, batches, convolutions).
      {"matmul(M=32,N=32,K=100,epilogue=bias_relu)", with({{"stages", 2}, {"split_k", 4}})},
      {"matmul(M=32,N=64,K=64)", with({{"stages", 1}, {"split_k", 2}})},
      {"batch_matmul(B=2,M=32,N=32,K=48)", with({{"stages", 2}, {"split_k", 3}})},
      {"conv2d_nchw(N=1,C=8,H=6,W=6,K=32,R=3,S=3,pad=1,epilogue=bias)", with({{"stages", 2}, {"split_k", 3}})},
      {"conv2d_nhwc(N=1,C=8,H=6,W=6,K=32,R=3,S=3,pad=1)", with({{"stages", 3}, {"split_k", 2}})},
  };
  for (const Case& c : cases) {
    CompiledKernel k = compile_kernel(parse_workload(c.workload), parse_target("cuda -arch=sm_80"), c.config, "given", "");
    std::string what = std::string(c.workload) + " config " + k.config.dump();
    testing::Comparison r = testing::run_gpu_emulated(k.graph, k.lowered.func, parse_target("cuda -arch=sm_80"), 11);
    EXPECT_TRUE(r.ok()) << what << ": " << r.str();
  }
}

// The default configs the GPU benchmark runs (bench/gpu_bench.py's shapes up to 2048^2 x 1024),
// lowered and run serially on the CPU against the reference: the kernels a GPU would run.
TEST(GpuEmulated, DefaultConfigsOfTheBenchmarkShapesMatchTheReference) {
  int sample = 0;
  for (const char* w : {"matmul(M=1024,N=1024,K=1024)", "matmul(M=128,N=2304,K=768,epilogue=bias)",
                        "matmul(M=128,N=768,K=3072,epilogue=bias)", "batch_matmul(B=12,M=128,N=128,K=64)",
                        "conv2d_nchw(N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3)",
                        "conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)",
                        "conv2d_nchw(N=1,C=512,H=7,W=7,K=512,R=3,S=3,pad=1)",
                        "conv2d_nchw(N=1,C=2048,H=7,W=7,K=512,R=1,S=1)",
                        "conv2d_nhwc(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)",
                        "depthwise_conv2d_nchw(N=1,C=144,H=56,W=56,R=3,S=3,pad=1)"}) {
    if (!testing::sampled(++sample, 3)) continue;  // under the sanitizers a third (tests/sanitized.h)
    CompiledKernel k = compile_kernel(parse_workload(w), parse_target("cuda -arch=sm_90"), nullptr, "default", "");
    ir::LoweredFunc f = k.lowered.func;
    f.body = serialize_gpu_bindings(f.body);
    testing::Comparison c = testing::run_and_compare(k.graph, f, 13);
    EXPECT_TRUE(c.ok()) << w << " config " << k.config.dump() << ": " << c.str();
  }
}

// What `ptxas -v` says about a kernel: registers, spills, stack frame (local memory: arrays
// indexed by a value only known at run time), shared memory.
struct PtxasReport {
  int64_t registers = -1, spill_stores = -1, spill_loads = -1, stack = -1, shared = 0;
  std::string text;
};

// ptxas -v's report of each entry function of a PTX file (its own section of the output).
std::map<std::string, PtxasReport> ptxas_verbose(const std::string& ptxas, const std::string& arch,
                                                 const std::string& ptx_path) {
  CommandResult r = run_command({ptxas, "-v", "-arch=" + arch, ptx_path, "-o", ptx_path + ".cubin"});
  std::map<std::string, PtxasReport> out;
  std::regex entry("Compiling entry function '([A-Za-z0-9_]+)'");
  std::vector<std::pair<std::string, size_t>> starts;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), entry); it != std::sregex_iterator(); ++it) {
    starts.emplace_back((*it)[1], static_cast<size_t>(it->position()));
  }
  for (size_t i = 0; i < starts.size(); ++i) {
    size_t end = i + 1 < starts.size() ? starts[i + 1].second : r.output.size();
    std::string text = r.output.substr(starts[i].second, end - starts[i].second);
    PtxasReport& p = out[starts[i].first];
    p.text = text;
    std::smatch m;
    if (std::regex_search(text, m, std::regex("Used ([0-9]+) registers"))) p.registers = std::stoll(m[1]);
    if (std::regex_search(text, m, std::regex("([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads"))) {
      p.spill_stores = std::stoll(m[1]);
      p.spill_loads = std::stoll(m[2]);
    }
    if (std::regex_search(text, m, std::regex("([0-9]+) bytes stack frame")))
      p.stack = std::stoll(m[1]);
    if (std::regex_search(text, m, std::regex("([0-9]+) bytes smem"))) p.shared = std::stoll(m[1]);
  }
  if (out.empty()) out[""].text = r.output;  // no entry compiled: the failure, for the message
  return out;
}

// The PTX of entry function `name`: from its .entry to the next one.
std::string ptx_function(const std::string& ptx, const std::string& name) {
  size_t begin = ptx.find(".entry " + name + "(");
  if (begin == std::string::npos) return "";
  size_t end = ptx.find(".entry ", begin + 1);
  return ptx.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// The static checks of the GPU templates' default configs on the shapes the CUDA benchmark
// measures (bench/gpu_bench.py: BERT-base and ResNet-50 layers, squares to 4096): ptxas
// finds no spills, registers and shared memory let two blocks share a multiprocessor
// (gpu_arch: 65536 registers on both, 228 KiB of shared memory on sm_90, 164 KiB on sm_80),
// for every kernel of a call (split-K launches two), and the GEMMs' main loops (dense and
// implicit-GEMM convolutions) do at least 8 multiply-adds per shared-memory load.
TEST(GpuStatic, DefaultConfigsFitTwoBlocksPerSmWithoutSpills) {
  const std::string ptxas = "/usr/local/cuda/bin/ptxas";
  if (!fs::exists(ptxas)) GTEST_SKIP() << ptxas << " is not installed (NVIDIA's CUDA toolkit)";
  const char* shapes[] = {
      "matmul(M=1024,N=1024,K=1024)", "matmul(M=2048,N=2048,K=2048)", "matmul(M=4096,N=4096,K=4096)",
      "matmul(M=128,N=2304,K=768,epilogue=bias)", "matmul(M=128,N=768,K=768,epilogue=bias)",
      "matmul(M=128,N=3072,K=768,epilogue=bias)", "matmul(M=128,N=768,K=3072,epilogue=bias)",
      "batch_matmul(B=12,M=128,N=128,K=64)",
      "conv2d_nchw(N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3)",
      "conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)", "conv2d_nchw(N=1,C=128,H=28,W=28,K=128,R=3,S=3,pad=1)",
      "conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1)", "conv2d_nchw(N=1,C=512,H=7,W=7,K=512,R=3,S=3,pad=1)",
      "conv2d_nchw(N=1,C=1024,H=14,W=14,K=256,R=1,S=1)", "conv2d_nchw(N=1,C=2048,H=7,W=7,K=512,R=1,S=1)",
      "conv2d_nchw(N=1,C=64,H=56,W=56,K=256,R=1,S=1)", "depthwise_conv2d_nchw(N=1,C=144,H=56,W=56,R=3,S=3,pad=1)",
  };
  for (const char* arch : {"sm_80", "sm_90"}) {
    const GpuArch sm = gpu_arch(parse_target(std::string("cuda -arch=") + arch));
    EXPECT_EQ(sm.shared_per_sm, std::string(arch) == "sm_90" ? 228 * 1024 : 164 * 1024);
    for (const char* shape : shapes) {
      CompiledKernel k = compile_kernel(parse_workload(shape), parse_target(std::string("cuda -arch=") + arch), nullptr,
                                        "default", "");
      std::string what = std::string(shape) + " on " + arch + " config " + k.config.dump();
      std::string path = testing::temp_dir() + "/static_" + arch + ".ptx";
      write_kernel(k, EmitKind::Asm, path);
      std::map<std::string, PtxasReport> reports = ptxas_verbose(ptxas, arch, path);
      std::string ptx = file_text(path);
      ASSERT_TRUE(k.gpu.has_value());
      // Every kernel of the call (split-K: the partial sums, then their sum).
      for (const GpuKernelLaunch& kl : k.gpu->kernels) {
        ASSERT_TRUE(reports.count(kl.function)) << what << ": ptxas compiled no " << kl.function << ":\n"
                                                << reports.begin()->second.text;
        const PtxasReport& r = reports[kl.function];
        std::string kw = what + " kernel " + kl.function;
        ASSERT_GE(r.registers, 0) << kw << ":\n" << r.text;
        EXPECT_EQ(r.spill_stores, 0) << kw << ":\n" << r.text;
        EXPECT_EQ(r.spill_loads, 0) << kw << ":\n" << r.text;
        EXPECT_EQ(r.stack, 0) << kw << ":\n" << r.text;
        int64_t threads = kl.launch.threads_per_block();
        EXPECT_LE(r.registers * threads * 2, sm.registers_per_sm)
            << kw << ": " << r.registers << " registers x " << threads << " threads";
        EXPECT_EQ(r.shared, kl.launch.static_shared_bytes) << kw;
        EXPECT_LE(2 * r.shared, sm.shared_per_sm) << kw;
        EXPECT_LE(2 * threads, sm.threads_per_sm) << kw;
      }
      // The GEMMs' main loops (dense and implicit-GEMM convolutions: the first kernel), where
      // block_k divides the reduction (else the guarded last step's scalar loads count too:
      // the 7x7 stem's 147).
      std::string op = parse_workload(shape).op;
      if (op == "depthwise_conv2d_nchw") continue;
      int64_t depth = k.graph.acc->reduce_axes[0].extent / k.config["split_k"].get<int64_t>();
      if (depth % k.config["block_k"].get<int64_t>() != 0) continue;
      std::string gemm = ptx_function(ptx, k.gpu->kernels[0].function);
      std::regex fma("\\bfma\\.rn\\.f32\\b"), lds("\\bld\\.shared\\.");
      auto fmas = std::distance(std::sregex_iterator(gemm.begin(), gemm.end(), fma), std::sregex_iterator());
      auto loads = std::distance(std::sregex_iterator(gemm.begin(), gemm.end(), lds), std::sregex_iterator());
      ASSERT_GT(loads, 0) << what << ": the default stages no tile in shared memory";
      EXPECT_GE(fmas, 8 * loads) << what << ": " << fmas << " fma per " << loads << " shared loads";
    }
  }
}

// A register tile stays in registers whatever the config: a GEMM's (dense and implicit-GEMM
// convolutions) with its columns vectorized where a tile's guards differ between columns (C's
// tail: vectorize_loops unrolls them) or not vectorized, its K step unrolled or not, and a
// depthwise convolution's with its window unrolled or not: no kernel has a stack frame.
// Before session 107 each of these but the default indexed the tile by a loop variable, which
// put it in local memory (64 bytes of stack for a 4 x 4 tile): every vectorize=false or
// unroll=false config of the GEMM space, every unroll=false one of the depthwise space, and
// RegNetY's grouped 3 x 3 layers of 7 x 7 and 14 x 14 positions by default.
TEST(GpuStatic, RegisterTilesStayInRegisters) {
  const std::string ptxas = "/usr/local/cuda/bin/ptxas";
  if (!fs::exists(ptxas)) GTEST_SKIP() << ptxas << " is not installed (NVIDIA's CUDA toolkit)";
  const Target t = parse_target("cuda -arch=sm_90");
  int kernels = 0;
  auto check = [&](const std::string& shape, const nlohmann::json& config) {
    CompiledKernel k = compile_kernel(parse_workload(shape), t, config, "given", "");
    std::string what = shape + " config " + k.config.dump();
    std::string path = testing::temp_dir() + "/tiles.ptx";
    write_kernel(k, EmitKind::Asm, path);
    std::map<std::string, PtxasReport> reports = ptxas_verbose(ptxas, "sm_90", path);
    ASSERT_TRUE(k.gpu.has_value());
    for (const GpuKernelLaunch& kl : k.gpu->kernels) {
      ASSERT_TRUE(reports.count(kl.function))
          << what << ": ptxas compiled no " << kl.function << ":\n"
          << reports.begin()->second.text;
      EXPECT_EQ(reports[kl.function].stack, 0) << what << " kernel " << kl.function << ":\n"
                                               << reports[kl.function].text;
      ++kernels;
    }
  };
  for (const char* shape :
       {"matmul(M=97,N=131,K=67)", "matmul(M=512,N=512,K=512)",
        "conv2d_nchw(N=1,C=440,H=7,W=7,K=440,R=3,S=3,pad=1,group=55,epilogue=bias_relu)",
        "conv2d_nchw(N=1,C=440,H=14,W=14,K=440,R=3,S=3,stride=2,pad=1,group=55)"}) {
    for (bool vec : {true, false}) {
      for (bool unroll : {true, false}) {
        check(shape, {{"shared", true},
                      {"stages", 2},
                      {"tile_m", 4},
                      {"tile_n", 4},
                      {"block_k", 8},
                      {"lanes_n", 16},
                      {"unroll", unroll},
                      {"vectorize", vec}});
      }
    }
  }
  for (bool unroll : {true, false}) {
    check("depthwise_conv2d_nchw(N=1,C=144,H=56,W=56,R=3,S=3,pad=1)", {{"threads_k", 8},
                                                                       {"threads_w", 8},
                                                                       {"tile_k", 4},
                                                                       {"tile_w", 4},
                                                                       {"unroll", unroll},
                                                                       {"shared", true}});
  }
  EXPECT_GE(kernels, 18);  // a kernel per config at least (split-K: two)
}

// Convolutions as implicit GEMMs: the weights' tile (K-major) and the im2col tile, computed
// into shared memory with the padding as a predicate; padding, strides, dilation, odd
// channel counts, reductions that block_k does not divide, 1x1, batches, NCHW and NHWC,
// single and double buffered.
TEST(GpuShared, ImplicitGemmConvolutionsMatchTheReference) {
  int sample = 0;
  for (const char* w : {"conv2d_nchw(N=1,C=5,H=11,W=13,K=19,R=3,S=3,pad=1)",
                        "conv2d_nchw(N=2,C=3,H=12,W=9,K=7,R=5,S=3,stride=2,pad=2,dilation=1,epilogue=bias_relu)",
                        "conv2d_nchw(N=1,C=16,H=6,W=6,K=24,R=1,S=1,epilogue=bias)",
                        "conv2d_nhwc(N=1,C=6,H=9,W=10,K=11,R=3,S=3,stride=2,pad=1)",
                        "conv2d_nhwc(N=2,C=8,H=7,W=7,K=16,R=3,S=3,stride=1,pad=2,dilation=2,epilogue=relu)"}) {
    for (const nlohmann::json& config :
         {nlohmann::json{{"shared", true}, {"stages", 2}},
          nlohmann::json{{"shared", true}, {"stages", 1}, {"unroll", false}},
          nlohmann::json{{"shared", true}, {"stages", 2}, {"warps_m", 2}, {"warps_n", 1}, {"lanes_n", 4},
                         {"tile_m", 3}, {"tile_n", 2}, {"block_k", 5}}}) {
      if (!testing::sampled(sample++, 2)) continue;  // under the sanitizers half (tests/sanitized.h)
      check_shared_kernel(w, config);
    }
    // Without shared memory: im2col inlined into the reduction.
    Workload wl = parse_workload(w);
    Target t = parse_target("cuda -arch=sm_90");
    CompiledKernel k = compile_kernel(wl, t, {{"shared", false}, {"stages", 1}}, "given", "");
    EXPECT_EQ(k.launch()->static_shared_bytes, 0);
    ir::LoweredFunc f = k.lowered.func;
    f.body = serialize_gpu_bindings(f.body);
    testing::Comparison c = testing::run_and_compare(k.graph, f, 5);
    EXPECT_TRUE(c.ok()) << w << ": " << c.str();
  }
}

// Depthwise convolutions stay direct: the block's channels' whole windows staged.
TEST(GpuShared, StagedDepthwiseWeightsMatchTheReference) {
  for (const char* w : {"depthwise_conv2d_nchw(N=1,C=19,H=13,W=13,R=3,S=3,pad=1)",
                        "depthwise_conv2d_nchw(N=2,C=8,H=10,W=7,R=5,S=5,stride=2,pad=2)"}) {
    for (const nlohmann::json& config :
         {nlohmann::json{{"shared", true}}, nlohmann::json{{"shared", true}, {"unroll", false}},
          nlohmann::json{{"shared", true}, {"threads_k", 3}, {"threads_w", 5}, {"tile_k", 2}, {"tile_w", 3}}}) {
      check_shared_kernel(w, config);
    }
  }
}

TEST(GpuShared, TilesPastTheSharedMemoryAreRejected) {
  OpGraph g = build_op(parse_workload("matmul(M=1024,N=1024,K=1024)"));
  // AMD (wave32 here, so the tiles are the same as CUDA's): 48 KiB a block.
  Target t = parse_target("rocm -mcpu=gfx1030");
  // Two tiles of (256 + 4) x 32 floats each for A and B.
  nlohmann::json c = complete_config(g, t, {{"shared", true}, {"stages", 2}, {"warps_m", 8}, {"warps_n", 4},
                                            {"lanes_n", 8}, {"tile_m", 8}, {"tile_n", 8}, {"block_k", 16}});
  std::string why = check_constraints(g, t, c);
  EXPECT_NE(why.find("66560 bytes of shared memory per block (the limit is 49152)"), std::string::npos) << why;
  // sm_75 allows a block 64 KiB, sm_90 227 (dynamic shared memory past 48).
  why = check_constraints(g, parse_target("cuda -arch=sm_75"), c);
  EXPECT_NE(why.find("66560 bytes of shared memory per block (the limit is 65536)"), std::string::npos) << why;
  EXPECT_EQ(check_constraints(g, parse_target("cuda -arch=sm_90"), c), "");
  // Given anyway, the kernel is refused where the architecture's opt-in limit is smaller
  // (sm_75: 64 KiB; AMD: the 48 KiB this compiler gives a block); sm_90 runs it from dynamic
  // shared memory (GpuDynamicShared below).
  std::string e = compile_error("matmul(M=1024,N=1024,K=1024)", "cuda -arch=sm_75", c);
  EXPECT_NE(e.find("needs 66560 bytes of shared memory per block"), std::string::npos) << e;
  EXPECT_NE(e.find("the limit is 65536"), std::string::npos) << e;
  e = compile_error("matmul(M=1024,N=1024,K=1024)", "rocm -mcpu=gfx90a", c);
  EXPECT_NE(e.find("the limit is 49152"), std::string::npos) << e;
  e = compile_error("matmul(M=4096,N=4096,K=4096)", "cuda -arch=sm_90",
                    complete_config(g, parse_target("cuda -arch=sm_90"), {{"shared", true}, {"stages", 4}, {"warps_m", 8}, {"warps_n", 4},
                                           {"lanes_n", 8}, {"tile_m", 8}, {"tile_n", 8}, {"block_k", 64}}));
  EXPECT_NE(e.find("the limit is 232448"), std::string::npos) << e;
  // Implicit-GEMM convolutions: the same tiles (K = 512 output channels, 196 positions, a
  // reduction of 392), one buffer of (256 + 4) x 32 and (196 + 4) x 32 floats.
  for (const char* w : {"conv2d_nchw(N=1,C=8,H=14,W=14,K=512,R=7,S=7,pad=3)",
                        "conv2d_nhwc(N=1,C=8,H=14,W=14,K=512,R=7,S=7,pad=3)"}) {
    OpGraph cg = build_op(parse_workload(w));
    nlohmann::json cc = complete_config(cg, t, {{"shared", true}, {"stages", 1}, {"warps_m", 8},
                                                {"warps_n", 4}, {"lanes_n", 8}, {"tile_m", 8}, {"tile_n", 8},
                                                {"block_k", 32}});
    std::string cwhy = check_constraints(cg, t, cc);
    EXPECT_NE(cwhy.find("58880 bytes of shared memory per block (the limit is 49152)"), std::string::npos) << w << ": " << cwhy;
  }
  // Depthwise (direct): 128 x 4 channels of a 7 x 7 window.
  OpGraph dg = build_op(parse_workload("depthwise_conv2d_nchw(N=1,C=512,H=14,W=14,R=7,S=7,pad=3)"));
  nlohmann::json dc = complete_config(dg, t, {{"shared", true}, {"threads_k", 128}, {"threads_w", 2}, {"tile_k", 4},
                                              {"tile_w", 1}});
  std::string dwhy = check_constraints(dg, t, dc);
  EXPECT_NE(dwhy.find("100352 bytes of shared memory per block (the limit is 49152)"), std::string::npos) << dwhy;
}

// Past the static 48 KiB, a kernel's shared buffers are parts of the one dynamic shared array
// (`.extern .shared`), at the offsets of the buffers around them, so no two live at once
// overlap; the launch asks for their sum as dynamic shared memory, which the board's runtime
// allows the function (cuFuncSetAttribute: FarmGpu.FakeCudaBoardCarriesPtxAndItsLaunch).
// Kernels within 48 KiB keep static arrays.
TEST(GpuDynamicShared, BuffersPast48KiBArePartsOfTheDynamicArray) {
  const Target sm90 = parse_target("cuda -arch=sm_90");
  // A and B tiles of 2 stages x (256 + 4) x 16 floats: 33,280 bytes each.
  const nlohmann::json c = {{"shared", true}, {"stages", 2}, {"warps_m", 8}, {"warps_n", 4}, {"lanes_n", 8},
                            {"tile_m", 8}, {"tile_n", 8}, {"block_k", 16}, {"split_k", 1}};
  CompiledKernel k = compile_kernel(parse_workload("matmul(M=1024,N=1024,K=1024)"), sm90, c, "given", "");
  ASSERT_TRUE(k.launch());
  EXPECT_EQ(k.launch()->dynamic_shared_bytes, 2 * 33280);
  EXPECT_EQ(k.launch()->static_shared_bytes, 0);
  const std::string dir = testing::temp_dir();
  write_kernel(k, EmitKind::LLVM, dir + "/dyn.ll");
  const std::string ll = file_text(dir + "/dyn.ll");
  std::set<int64_t> offsets;
  const std::regex at("@tf_dynamic_shared, i64 ([0-9]+)");
  for (auto m = std::sregex_iterator(ll.begin(), ll.end(), at); m != std::sregex_iterator(); ++m) {
    offsets.insert(std::stoll((*m)[1]));
  }
  // A at 0 (the array itself), B after A's 33,280 bytes; nothing at or past the end.
  EXPECT_EQ(offsets, (std::set<int64_t>{33280})) << ll.substr(0, 2000);
  write_kernel(k, EmitKind::Asm, dir + "/dyn.ptx");
  const std::string ptx = file_text(dir + "/dyn.ptx");
  EXPECT_NE(ptx.find(".extern .shared .align 16 .b8 tf_dynamic_shared[];"), std::string::npos) << ptx.substr(0, 1500);
  EXPECT_EQ(ptx.find(".shared .align 16 .b8 matmul"), std::string::npos) << "a static shared array is left";
  // The sidecar carries the size the runtime asks for.
  EXPECT_EQ(k.gpu->to_json()["dynamic_shared_bytes"], 66560);
  // Within 48 KiB: static arrays, no dynamic memory.
  nlohmann::json small = c;
  small["stages"] = 1;
  CompiledKernel s = compile_kernel(parse_workload("matmul(M=1024,N=1024,K=1024)"), sm90, small, "given", "");
  EXPECT_EQ(s.launch()->dynamic_shared_bytes, 0);
  EXPECT_EQ(s.launch()->static_shared_bytes, 33280);
  write_kernel(s, EmitKind::Asm, dir + "/static.ptx");
  EXPECT_EQ(file_text(dir + "/static.ptx").find("tf_dynamic_shared"), std::string::npos);
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (!fs::exists(ptxas)) GTEST_SKIP() << ptxas << " is not installed (NVIDIA's CUDA toolkit)";
  CommandResult r = run_command({ptxas, "-arch=sm_90", "-v", dir + "/dyn.ptx", "-o", dir + "/dyn.cubin"});
  // It assembles (1024 threads of 8 x 8 tiles spill, which is the config's, not the memory's).
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Buffers are assumed 16-byte aligned on GPUs (the drivers allocate at 256), so vectorized
// columns at multiples of 4 become 128-bit accesses (and copies: cp.async.cg of 16 bytes);
// where N is odd nothing can be proved and the global accesses stay scalar (a wrong
// alignment would fault on the GPU); shared tiles, aligned by construction, stay vectors.
TEST(GpuCode, AlignedVectorAccesses) {
  auto asm_of = [](const std::string& w, const std::string& t, const nlohmann::json& config) {
    CompiledKernel k = compile_kernel(parse_workload(w), parse_target(t), config, "given", "");
    std::string path = testing::temp_dir() + "/aligned.s";
    write_kernel(k, EmitKind::Asm, path);
    return file_text(path);
  };
  const nlohmann::json direct = {{"shared", false}, {"stages", 1}};
  std::string ptx = asm_of("matmul(M=1024,N=1024,K=1024)", "cuda -arch=sm_80", direct);
  EXPECT_NE(ptx.find("ld.global.nc.v4.f32"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find("st.global.v4.f32"), std::string::npos) << ptx;
  std::string staged = asm_of("matmul(M=1024,N=1024,K=1024)", "cuda -arch=sm_80", nullptr);
  EXPECT_NE(staged.find("cp.async.cg.shared.global"), std::string::npos) << staged;
  EXPECT_NE(staged.find("ld.shared.v4.f32"), std::string::npos) << staged;
  EXPECT_NE(staged.find("st.global.v4.f32"), std::string::npos) << staged;
  for (const nlohmann::json& c : {direct, nlohmann::json(nullptr)}) {
    std::string amd = asm_of("matmul(M=1024,N=1024,K=1024)", "rocm -mcpu=gfx90a", c);
    EXPECT_NE(amd.find("global_load_dwordx4"), std::string::npos) << amd;
    EXPECT_NE(amd.find("global_store_dwordx4"), std::string::npos) << amd;
  }
  for (const nlohmann::json& c : {direct, nlohmann::json(nullptr)}) {
    std::string odd = asm_of("matmul(M=97,N=131,K=67)", "cuda -arch=sm_80", c);
    for (const char* v : {"ld.global.nc.v4", "ld.global.nc.v2", "st.global.v4", "st.global.v2", "cp.async.cg"}) {
      EXPECT_EQ(odd.find(v), std::string::npos) << v << " in\n" << odd;
    }
  }
}

std::string compile_error(const std::string& workload, const std::string& target, const nlohmann::json& config,
                          EmitKind emit) {
  try {
    CompiledKernel k = compile_kernel(parse_workload(workload), parse_target(target), config, "given", "");
    write_kernel(k, emit, testing::temp_dir() + "/err.out");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(GpuErrors, TooManyThreadsPerBlock) {
  nlohmann::json c = {{"warps_m", 8}, {"warps_n", 8}, {"tile_m", 1}, {"tile_n", 1}};
  std::string e = compile_error("matmul(M=512,N=512,K=64)", "cuda -arch=sm_80", c);
  EXPECT_NE(e.find("2048 threads per block"), std::string::npos) << e;
  EXPECT_NE(e.find("the limit is 1024"), std::string::npos) << e;
  OpGraph g = build_op(parse_workload("matmul(M=512,N=512,K=64)"));
  Target t = parse_target("cuda -arch=sm_80");
  EXPECT_NE(check_constraints(g, t, complete_config(g, t, c)).find("2048 threads"), std::string::npos);
  // The hierarchy's own refusals.
  EXPECT_NE(check_constraints(g, t, complete_config(g, t, {{"shared", false}, {"stages", 2}}))
                .find("stages 2 without shared (nothing to buffer)"),
            std::string::npos);
  EXPECT_NE(check_constraints(g, t, complete_config(g, t, {{"lanes_n", 64}})).find("lanes_n 64 is more than a warp's 32"),
            std::string::npos);
  // Given explicitly, what the tuner never proposes is refused by name.
  std::string lanes = compile_error("matmul(M=64,N=64,K=64)", "cuda -arch=sm_80", {{"lanes_n", 3}});
  EXPECT_NE(lanes.find("lanes_n=3: must divide a warp's 32 threads"), std::string::npos) << lanes;
  std::string stages = compile_error("conv2d_nchw(N=1,C=8,H=8,W=8,K=8,R=3,S=3)", "rocm -mcpu=gfx90a",
                                     {{"shared", false}, {"stages", 3}});
  EXPECT_NE(stages.find("stages=3: pipelines shared-memory tiles, and shared is false"), std::string::npos) << stages;
  OpGraph small = build_op(parse_workload("matmul(M=8,N=8,K=64)"));
  EXPECT_NE(check_constraints(small, t, complete_config(small, t, {{"warps_m", 4}, {"tile_m", 4}}))
                .find("more than twice as large"),
            std::string::npos);
}

TEST(GpuErrors, TooManyThreadsAlongZ) {
  // Only batch_matmul binds z, and to blocks; a hand-written schedule binds threads.
  ir::Tensor a = ir::placeholder("A", {128, 4});
  ir::Tensor c = ir::compute("C", {128, 4}, {"i", "j"},
                              [&](const std::vector<ir::Expr>& i) { return ir::read(a, i) * ir::f32(2); });
  ir::Schedule s(c);
  ir::Stage& st = s[c];
  st.bind(c->axes[0].var, "threadIdx.z");
  st.bind(c->axes[1].var, "threadIdx.x");
  LowerResult r = lower(s, {a}, "k");
  try {
    check_gpu_kernel(r.func, parse_target("cuda -arch=sm_80"));
    FAIL() << "128 threads along z accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("128 threads along threadIdx.z; the limit is 64"), std::string::npos) << e.what();
  }
}

// A kernel that binds nothing but writes only one element (a scalar reduction: a loss, a
// norm) runs as one thread; one that writes more is still refused.
TEST(GpuErrors, ScalarKernelsRunAsOneThread) {
  Target t = parse_target("cuda -arch=sm_90");
  ir::Tensor a = ir::placeholder("A", {64, 32});
  ir::IterVar i = ir::reduce_axis(64, "i"), j = ir::reduce_axis(32, "j");
  ir::Tensor total = ir::compute("total", {}, {}, [&](const std::vector<ir::Expr>&) {
    return ir::sum(ir::read(a, {i.var, j.var}), {i, j});
  }, {i, j});
  ir::Schedule s(total);
  ir::LoweredFunc f = lower(s, {a}, "k").func;
  GpuLaunch l = check_gpu_kernel(f, t);
  EXPECT_EQ(l.grid, (std::array<int64_t, 3>{1, 1, 1}));
  EXPECT_EQ(l.block, (std::array<int64_t, 3>{1, 1, 1}));
  std::string ptx = codegen_llvm(f, t, CodegenOutput::Asm).data;
  EXPECT_NE(ptx.find(".entry k("), std::string::npos);
}

TEST(GpuErrors, UnboundAndParallelLoops) {
  ir::Tensor a = ir::placeholder("A", {64, 32});
  auto make = [&] {
    return ir::compute("C", {64, 32}, {"i", "j"}, [&](const std::vector<ir::Expr>& i) { return ir::read(a, i) + ir::f32(1); });
  };
  Target t = parse_target("rocm -mcpu=gfx90a");
  auto error_of = [&](const std::function<void(ir::Schedule&, const ir::Tensor&)>& schedule) {
    ir::Tensor c = make();
    ir::Schedule s(c);
    schedule(s, c);
    try {
      check_gpu_kernel(lower(s, {a}, "k").func, t);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string none = error_of([](ir::Schedule&, const ir::Tensor&) {});
  EXPECT_NE(none.find("binds no loop to the GPU grid"), std::string::npos) << none;
  std::string outer = error_of([](ir::Schedule& s, const ir::Tensor& c) { s[c].bind(c->axes[1].var, "threadIdx.x"); });
  EXPECT_NE(outer.find("outside the GPU bindings: it would run serially in every thread"), std::string::npos) << outer;
  EXPECT_NE(outer.find("(extent 64)"), std::string::npos) << outer;
  std::string par = error_of([](ir::Schedule& s, const ir::Tensor& c) {
    s[c].parallel(c->axes[0].var);
    s[c].bind(c->axes[1].var, "threadIdx.x");
  });
  EXPECT_NE(par.find("parallel, which means a CPU thread pool"), std::string::npos) << par;
  std::string ok = error_of([](ir::Schedule& s, const ir::Tensor& c) {
    s[c].bind(c->axes[0].var, "blockIdx.x");
    s[c].bind(c->axes[1].var, "threadIdx.x");
  });
  EXPECT_EQ(ok, "");
}

TEST(GpuErrors, BindRejectsBadTagsAndReductions) {
  ir::Tensor a = ir::placeholder("A", {8, 8});
  ir::IterVar k = ir::reduce_axis(8, "k");
  ir::Tensor c = ir::compute("C", {8}, {"i"}, [&](const std::vector<ir::Expr>& i) { return ir::sum(ir::read(a, {i[0], k.var}), {k}); },
                             {k});
  ir::Schedule s(c);
  try {
    s[c].bind(c->axes[0].var, "warpIdx.x");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'warpIdx.x' is not a GPU axis"), std::string::npos) << e.what();
  }
  try {
    s[c].bind(c->reduce_axes[0].var, "threadIdx.x");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("is a reduction loop"), std::string::npos) << e.what();
  }
}

// exp, log and tanh on cuda come from libdevice, linked and inlined (no calls left in the
// PTX); on rocm exp and log are expanded by the back end and tanh comes from ocml. A missing
// library is a clear error.
TEST(GpuMath, LibdeviceOnCudaOcmlOnRocm) {
  ir::Tensor a = ir::placeholder("A", {100});
  auto kernel = [&](bool with_tanh) {
    ir::Tensor c = ir::compute("C", {100}, {"i"}, [&](const std::vector<ir::Expr>& i) {
      ir::Expr v = ir::read(a, i);
      ir::Expr e = ir::exp(v) + ir::log(ir::fabs(v) + ir::f32(1.0));
      return with_tanh ? e - ir::tanh(v) : e;
    });
    ir::Schedule s(c);
    auto [bo, t] = s[c].split(c->axes[0].var, 32);
    s[c].bind(bo, "blockIdx.x");
    s[c].bind(t, "threadIdx.x");
    return lower(s, {a}, "math").func;
  };
  ir::LoweredFunc f = kernel(true);
  std::string libdevice = "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc";
  if (fs::exists(libdevice)) {
    std::string ptx = codegen_llvm(f, parse_target("cuda -arch=sm_80"), CodegenOutput::Asm).data;
    EXPECT_EQ(ptx.find("__nv_"), std::string::npos) << "libdevice not inlined:\n" << ptx;
    EXPECT_EQ(ptx.find("call.uni"), std::string::npos) << ptx;
    EXPECT_NE(ptx.find("ex2.approx"), std::string::npos) << ptx;
    std::string path = testing::temp_dir() + "/math.ptx";
    std::ofstream(path) << ptx;
    if (fs::exists("/usr/local/cuda/bin/ptxas")) {
      CommandResult r = run_command({"/usr/local/cuda/bin/ptxas", "-arch=sm_80", path, "-o", path + ".cubin"});
      EXPECT_EQ(r.exit_code, 0) << r.output;
    }
  } else {
    std::printf("note: no %s here; libdevice linking not exercised\n", libdevice.c_str());
  }
  // The grid run serially on the CPU computes the functions (the host's libm) right.
  ir::LoweredFunc serial = f;
  serial.body = serialize_gpu_bindings(f.body);
  auto lib = testing::build_for_host(serial);
  std::vector<float> xs(100), ys(100, NAN);
  for (int i = 0; i < 100; ++i) xs[i] = static_cast<float>(i - 50) / 11.0f;
  ASSERT_EQ(lib->call({xs.data(), ys.data()}), 0);
  for (int i = 0; i < 100; ++i) {
    double v = xs[i], want = std::exp(v) + std::log(std::fabs(v) + 1) - std::tanh(v);
    EXPECT_NEAR(ys[i], want, 1e-5 * (1 + std::fabs(want))) << v;
  }
  // A libdevice that is not there.
  setenv("TUNEFARM_LIBDEVICE", "/nonexistent/libdevice.10.bc", 1);
  try {
    codegen_llvm(f, parse_target("cuda -arch=sm_90"), CodegenOutput::Asm);
    ADD_FAILURE() << "compiled without libdevice";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("TUNEFARM_LIBDEVICE (--libdevice) names /nonexistent/libdevice.10.bc, which does "
                                         "not exist"),
              std::string::npos)
        << e.what();
  }
  unsetenv("TUNEFARM_LIBDEVICE");
  // rocm: exp and log are expanded by the back end; tanh comes from ocml, linked and inlined
  // for every gfx target (gfx1100 is newer than Debian's oclc_isa_version files).
  std::string amd = codegen_llvm(kernel(false), parse_target("rocm -mcpu=gfx90a"), CodegenOutput::Asm).data;
  EXPECT_NE(amd.find("v_exp_f32"), std::string::npos) << amd;
  const std::string ocml = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ocml.bc";
  if (fs::exists(ocml)) {
    for (const char* gfx : {"gfx906", "gfx90a", "gfx1030", "gfx1100"}) {
      Target t = parse_target(std::string("rocm -mcpu=") + gfx);
      std::string ir = codegen_llvm(f, t, CodegenOutput::LLVM).data;
      EXPECT_EQ(ir.find("@__ocml_"), std::string::npos) << gfx << ": ocml not inlined:\n" << ir;
      EXPECT_EQ(ir.find("@__oclc_"), std::string::npos) << gfx << ": ocml's controls left unresolved:\n" << ir;
      std::string path = testing::temp_dir() + "/math_" + gfx + ".o";
      std::ofstream(path, std::ios::binary) << codegen_llvm(f, t, CodegenOutput::Object).data;
      CommandResult dis = run_command({"llvm-objdump-19", "-d", std::string("--mcpu=") + gfx, path});
      ASSERT_EQ(dis.exit_code, 0) << gfx << ": " << dis.output;
      EXPECT_NE(dis.output.find("s_endpgm"), std::string::npos) << gfx;
      EXPECT_EQ(dis.output.find("s_swappc"), std::string::npos) << gfx << ": a call is left:\n" << dis.output;
    }
  } else {
    std::printf("note: no %s here (Debian's rocm-device-libs); ocml linking not exercised\n", ocml.c_str());
  }
  // Device libraries that are not there.
  setenv("TUNEFARM_ROCM_DEVICE_LIBS", "/nonexistent/bitcode", 1);
  try {
    codegen_llvm(f, parse_target("rocm -mcpu=gfx906"), CodegenOutput::Asm);
    ADD_FAILURE() << "compiled tanh without ocml";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("TUNEFARM_ROCM_DEVICE_LIBS (--rocm-device-libs) names /nonexistent/bitcode, "
                                         "which has no ocml.bc"),
              std::string::npos)
        << e.what();
  }
  unsetenv("TUNEFARM_ROCM_DEVICE_LIBS");
}

TEST(GpuErrors, NoObjectForCudaAndKnobsOfTheTemplate) {
  std::string grid =
      compile_error("depthwise_conv2d_nchw(N=300,C=3,H=300,W=8,R=1,S=1)", "cuda -arch=sm_80", nullptr);
  EXPECT_NE(grid.find("has 90000 blocks along blockIdx.z; the limit is 65535"), std::string::npos) << grid;
  std::string batches = compile_error("batch_matmul(B=70000,M=2,N=2,K=2)", "cuda -arch=sm_80", nullptr);
  EXPECT_NE(batches.find("has 70000 blocks along blockIdx.z; the limit is 65535"), std::string::npos) << batches;
  std::string obj = compile_error("matmul(M=8,N=8,K=8)", "cuda -arch=sm_80", nullptr, EmitKind::Object);
  EXPECT_NE(obj.find("--emit obj: cuda -arch=sm_80 kernels are PTX"), std::string::npos) << obj;
  std::string knob = compile_error("matmul(M=8,N=8,K=8)", "rocm -mcpu=gfx1100", {{"pack_b", true}});
  EXPECT_NE(knob.find("'pack_b' is not a knob of dense.rocm.v4"), std::string::npos) << knob;
  std::string tile = compile_error("matmul(M=8,N=8,K=8)", "cuda -arch=sm_90", {{"tile_m", 17}});
  EXPECT_NE(tile.find("tile_m=17"), std::string::npos) << tile;
}

TEST(GpuErrors, UnknownArchitectures) {
  for (const char* spec : {"cuda -arch=sm_1", "rocm -mcpu=gfx9999", "cuda -arch=80", "rocm -mcpu=906"}) {
    try {
      parse_target(spec);
      ADD_FAILURE() << spec << " accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(spec), std::string::npos) << e.what();
    }
  }
}

// GpuReductionSplitter gives a reduction with few outputs over long rows a block per output:
// the threads' strided partial results in shared memory, combined by a level of fan-in 8 and
// the first thread. Run with every thread of a block at once (real barriers; shared memory starts
// as NaN, so a combination before all partial results are in shows), against a plain loop: sums and
// maxima over one and two axes, with and without a tail, a row that needs the most threads, and a
// function of the row's values (its source is rebuilt with the element).
TEST(GpuReduction, BlockPerOutputMatchesAPlainLoop) {
  const Target t = parse_target("cuda -arch=sm_90");
  struct Case {
    std::vector<int64_t> shape;  // outputs, then the reduced axes
    size_t reduced;
    bool max;
    int64_t threads;  // the block's
  };
  for (const Case& c : {Case{{3, 200}, 1, false, 16 * 2}, Case{{2, 256}, 1, true, 32}, Case{{4, 3, 70}, 2, false, 16 * 2},
                        Case{{2, 5000}, 1, true, 128}, Case{{5, 1, 64}, 2, false, 32}}) {
    ir::Tensor x = ir::placeholder("X", c.shape);
    const size_t outs = c.shape.size() - c.reduced;
    std::vector<int64_t> out_shape(c.shape.begin(), c.shape.begin() + static_cast<int64_t>(outs));
    std::vector<ir::IterVar> rv;
    std::vector<std::string> names;
    int64_t length = 1;
    for (size_t d = outs; d < c.shape.size(); ++d) {
      rv.push_back(ir::reduce_axis(c.shape[d], str("r", d)));
      length *= c.shape[d];
    }
    for (size_t d = 0; d < outs; ++d) names.push_back(str("i", d));
    ir::Tensor r = ir::compute("R", out_shape, names, [&](const std::vector<ir::Expr>& i) {
      std::vector<ir::Expr> at = i;
      for (const ir::IterVar& v : rv) at.push_back(v.var);
      ir::Expr v = ir::read(x, at) * ir::f32(2) + ir::f32(1);
      return c.max ? ir::max_reduce(v, rv) : ir::sum(v, rv);
    }, rv);
    GpuReductionSplitter splitter(1 << 20, 0);
    r = splitter.rebuild(r);
    const GpuReductionSplitter::BlockReduction* b = splitter.block_reduction(r.get());
    ASSERT_NE(b, nullptr) << length;
    EXPECT_EQ(b->threads, c.threads) << length;
    ir::Schedule sch(r);
    schedule_block_reduction(sch, sch[r], *b);
    ir::LoweredFunc f = lower(sch, {x}, "k").func;
    // A thread's elements unrolled (ir::unroll_up_to_8): whole up to 8, else an inner 8.
    const std::string ir_text = ir::to_string(f);
    EXPECT_EQ(ir_text.find("for (rstep,"), std::string::npos) << ir_text;
    EXPECT_EQ(ir_text.find("for (rstep.i,"), std::string::npos) << ir_text;
    GpuLaunch l = check_gpu_kernel(f, t);
    int64_t outputs = 1;
    for (int64_t d : out_shape) outputs *= d;
    EXPECT_EQ(l.grid[0], outputs);
    EXPECT_EQ(l.block[0], b->threads);
    // The partial results and the tree's one level of fan-in 8 (threads/8 values: 4 to 16,
    // which the first thread combines), all live at its last step.
    EXPECT_EQ(l.static_shared_bytes, 4 * (b->threads + b->threads / 8));
    EXPECT_EQ(b->tree.size(), 1u);
    std::string ptx = codegen_llvm(f, t, CodegenOutput::Asm).data;
    EXPECT_NE(ptx.find("st.shared.f32"), std::string::npos);
    // Barriers: after the partial results and after the level (merge_barriers left none right
    // after another, nor the one before the partial results, at the top of the kernel; a
    // halving tree had a barrier a level).
    EXPECT_EQ(count_of(ptx, "bar.sync"), 2u) << ptx;

    std::vector<std::vector<float>> bufs(2);
    bufs[0].resize(static_cast<size_t>(outputs * length));
    fill_random(bufs[0].data(), outputs * length, 5);
    bufs[1].assign(static_cast<size_t>(outputs), std::nanf(""));
    ASSERT_EQ(testing::emulate_gpu_kernel(f, l, bufs), 0);
    for (int64_t o = 0; o < outputs; ++o) {
      double want = c.max ? -INFINITY : 0.0;
      for (int64_t k = 0; k < length; ++k) {
        double v = 2.0 * bufs[0][static_cast<size_t>(o * length + k)] + 1.0;
        want = c.max ? std::max(want, v) : want + v;
      }
      EXPECT_NEAR(bufs[1][static_cast<size_t>(o)], want, 1e-4 * (1 + std::abs(want))) << "output " << o << " of " << length;
    }
  }
}

// merge_barriers drops a block barrier right after another in straight-line code (across
// blocks, allocations, lets reading no memory and into a loop bound to blockIdx) and one
// before anything the kernel does, and keeps every other one: the first in another loop's body
// or a branch, one after a store, an asynchronous copy's wait or a let that loads.
TEST(Barriers, AdjacentBlockBarriersMerge) {
  using namespace ir;
  auto bar = [] { return Barrier::make(); };
  auto store = [](int64_t at) { return Store::make("s", f32(1.0), Expr(at)); };
  const Expr v = Var::make("v"), i = Var::make("i"), b = Var::make("b");
  // Kept barriers numbered; "goes" marks the eight that follow one or start the kernel.
  const Stmt nest = Block::make({
      bar(), bar(),  // goes, goes: the kernel has done nothing yet
      Allocate::make("t", Type::float32(), 4, MemScope::Shared,
                     Block::make({bar(), store(0), bar()})),  // goes, 1
      bar(),                                                  // goes
      LetStmt::make(v, Expr(int64_t{3}),
                    Block::make({bar(), store(1)})),  // goes: the let reads nothing
      bar(),                                          // 2
      LetStmt::make(v, Load::make(Type::float32(), "t", Expr(int64_t{0})),
                    Block::make({bar(), store(2)})),  // 3
      bar(),                                          // 4
      For::make(i, Expr(int64_t{0}), Expr(int64_t{2}), ForKind::Serial,
                Block::make({bar(), bar(), store(3), bar()})),              // 5, goes, 6
      bar(),                                                                // 7
      Barrier::make(Barrier::Kind::AsyncWait, 0), bar(),                    // 8
      IfThenElse::make(i < Expr(int64_t{1}), Block::make({bar(), bar()})),  // 9, goes
      bar(),                                                                // 10
  });
  const std::string before = to_string(nest), after = to_string(merge_barriers(nest));
  auto barriers = [](const std::string& text) { return count_of(text, "barrier\n"); };
  EXPECT_EQ(barriers(before), 17u) << before;
  EXPECT_EQ(barriers(after), 10u) << after;
  EXPECT_EQ(count_of(after, "async_wait(0)"), 1u) << after;
  EXPECT_EQ(count_of(after, "s["), 4u) << after;
  // A block's loop: its body follows what came before it (here nothing: its first barrier
  // goes), and what follows it, its end; a thread's loop starts afresh.
  const Stmt grid = Block::make({
      For::make(b, Expr(int64_t{0}), Expr(int64_t{4}), ForKind::BlockIdxX,
                Block::make({bar(), store(0), bar(),  // goes, 1
                             For::make(i, Expr(int64_t{0}), Expr(int64_t{32}), ForKind::ThreadIdxX,
                                       Block::make({bar(), store(1)})),  // 2
                             bar()})),                                   // 3
      bar(),                                                             // goes
  });
  const std::string grid_after = to_string(merge_barriers(grid));
  EXPECT_EQ(barriers(grid_after), 3u) << grid_after;
  // Nothing to merge: the same statement back.
  const Stmt plain = Block::make({store(0), bar(), store(1), bar()});
  EXPECT_TRUE(merge_barriers(plain).same_as(plain));
}

// early_loads moves to the top of a block the loads of a thread loop after a barrier that read
// inputs nothing before it read, by indices of the loop's variable and what is defined outside
// the block, unconditional or under conditions as movable (then under the same conditions), at
// most kMaxEarlyValues; equal loads share a register. Everything else stays.
TEST(EarlyLoads, OnlyLoadsThatWaitForNothingMove) {
  using namespace ir;
  const Expr b = Var::make("b"), t = Var::make("t"), u = Var::make("u"), w = Var::make("w");
  auto ld = [](const char* buffer, const Expr& at) {
    return Load::make(Type::float32(), buffer, at);
  };
  auto out = [&](int64_t k, const Expr& value) {
    return Store::make("out", value, b * Expr(int64_t{64}) + u + Expr(k));
  };
  auto tloop = [](const Expr& v, const Stmt& body) {
    return For::make(v, Expr(int64_t{0}), Expr(int64_t{64}), ForKind::ThreadIdxX, body);
  };
  std::vector<Stmt> last = {
      // G twice (one register), X read before the barrier (stays), a select's branch (stays).
      out(0,
          ld("G", u) + ld("G", u) + ld("X", u) + select(u < Expr(int64_t{3}), ld("H", u), f32(0))),
      // Under a movable condition: moved under it; under a loaded one: stays.
      IfThenElse::make(u < Expr(int64_t{60}), out(1, ld("C", u + Expr(int64_t{1})))),
      IfThenElse::make(ld("s", Expr(int64_t{0})) < f32(0), out(2, ld("D", u))),
      // An index of a variable the block defines: stays.
      LetStmt::make(w, u * Expr(int64_t{2}), out(3, ld("E", w))),
  };
  // 40 more of one input: 30 move (32 in all with G's and C's), 10 stay.
  for (int64_t k = 0; k < 40; ++k) last.push_back(out(4 + k, ld("F", u + Expr(64 * k))));
  const Stmt kernel = For::make(
      b, Expr(int64_t{0}), Expr(int64_t{4}), ForKind::BlockIdxX,
      Allocate::make("s", Type::float32(), 64, MemScope::Shared,
                     Block::make({tloop(t, Store::make("s", ld("X", b * Expr(int64_t{64}) + t), t)),
                                  Barrier::make(), tloop(u, Block::make(last))})));
  const std::set<std::string> inputs = {"X", "G", "H", "C", "D", "E", "F"};
  const std::string after = to_string(early_loads(kernel, inputs));
  EXPECT_EQ(count_of(after, "G.early["), 4u) << after;  // allocated, stored once, read twice
  EXPECT_NE(after.find("G.early[0] = G[u.early]"), std::string::npos) << after;
  EXPECT_NE(after.find("if ((u.early < 60))"), std::string::npos) << after;
  EXPECT_NE(after.find("C.early[0] = C[(u.early + 1)]"), std::string::npos) << after;
  EXPECT_EQ(count_of(after, "F.early["), 61u) << after;      // allocated, 30 stored, 30 read
  EXPECT_EQ(count_of(after, "= F[(u.early"), 29u) << after;  // and F[u.early]
  for (const char* stays : {"X.early", "H.early", "D.early", "E.early"}) {
    EXPECT_EQ(after.find(stays), std::string::npos) << stays << "\n" << after;
  }
  // The copy comes first in the block, before the barrier and the loads of X.
  EXPECT_LT(after.find("G.early[0] = G["), after.find("barrier")) << after;
  EXPECT_LT(after.find("G.early[0] = G["), after.find("X[")) << after;
  // Nothing moves without a barrier before the loop, after a store outside the kernel's own
  // buffers, or for loads of what is not an input.
  const Stmt no_barrier = For::make(b, Expr(int64_t{0}), Expr(int64_t{4}), ForKind::BlockIdxX,
                                    tloop(u, out(0, ld("G", u))));
  EXPECT_TRUE(early_loads(no_barrier, inputs).same_as(no_barrier));
  const Stmt stored = For::make(b, Expr(int64_t{0}), Expr(int64_t{4}), ForKind::BlockIdxX,
                                Block::make({tloop(t, Store::make("out", f32(0), t)),
                                             Barrier::make(), tloop(u, out(0, ld("G", u)))}));
  EXPECT_TRUE(early_loads(stored, inputs).same_as(stored));
  EXPECT_TRUE(early_loads(kernel, {"Y"}).same_as(kernel));
}

// A LayerNorm's scale and bias, which its reductions do not read, are loaded at the top of its
// kernel, before the barriers (early_loads): in the loop IR and the PTX, with the values of plain
// loops, emulated with every thread of a block at once and serially (where the registers the
// loads fill become a copy per thread), for rows of 200 (a guarded tail: its loads move under
// their guard) and 768.
TEST(GpuReduction, ALayerNormsScaleAndBiasAreLoadedBeforeItsBarriers) {
  const Target target = parse_target("cuda -arch=sm_90");
  for (const int64_t c : {int64_t{200}, int64_t{768}}) {
    const int64_t rows = 6;
    const std::string what = str("a LayerNorm of ", rows, " rows of ", c);
    ir::Tensor x = ir::placeholder("X", {rows, c}), g = ir::placeholder("G", {c}),
               be = ir::placeholder("B", {c});
    auto reduce = [&](const std::string& name,
                      const std::function<ir::Expr(ir::Expr, ir::Expr)>& f) {
      ir::IterVar k = ir::reduce_axis(c, name + "_k");
      return ir::compute(
          name, {rows}, {"i"},
          [&](const std::vector<ir::Expr>& i) { return ir::sum(f(i[0], k.var), {k}); }, {k});
    };
    ir::Tensor mean = reduce("mean", [&](ir::Expr i, ir::Expr k) {
      return ir::read(x, {i, k}) * ir::f32(1.0f / c);
    });
    ir::Tensor var = reduce("var", [&](ir::Expr i, ir::Expr k) {
      ir::Expr d = ir::read(x, {i, k}) - ir::read(mean, {i});
      return d * d * ir::f32(1.0f / c);
    });
    ir::Tensor norm =
        ir::compute("norm", {rows, c}, {"i", "j"}, [&](const std::vector<ir::Expr>& i) {
          return (ir::read(x, i) - ir::read(mean, {i[0]})) /
                     ir::sqrt(ir::read(var, {i[0]}) + ir::f32(1e-5f)) * ir::read(g, {i[1]}) +
                 ir::read(be, {i[1]});
        });
    ir::LoweredFunc f = lower_generic_kernel(norm, {x, g, be}, target, "k", what);
    const std::string ir_text = ir::to_string(f);
    ASSERT_NE(ir_text.find("G.early[0] = G["), std::string::npos) << what << "\n" << ir_text;
    EXPECT_LT(ir_text.find("B.early[0] = B["), ir_text.find("barrier")) << what << "\n" << ir_text;
    // Each thread's elements of the scale and the bias through registers, each read once, and
    // no other load of them.
    const size_t per_thread = count_of(ir_text, "= G[");
    EXPECT_EQ(count_of(ir_text, "G["), per_thread) << what << "\n" << ir_text;
    EXPECT_EQ(count_of(ir_text, "*G.early["), per_thread) << what << "\n" << ir_text;
    EXPECT_EQ(count_of(ir_text, "= B["), per_thread) << what << "\n" << ir_text;
    const GpuLaunch l = check_gpu_kernel(f, target);
    EXPECT_EQ(static_cast<int64_t>(per_thread), (c + l.block[0] - 1) / l.block[0]) << what;
    // In the PTX, no global load after the first barrier where the row's own elements are kept
    // in registers from the partial results to the output (768 = 12 x 64: the same elements;
    // 200's output tile shifted inwards reads a few again), and nothing in local memory.
    const std::string ptx = codegen_llvm(f, target, CodegenOutput::Asm).data;
    const size_t first_barrier = ptx.find("bar.sync");
    ASSERT_NE(first_barrier, std::string::npos) << what;
    if (c == 768) {
      EXPECT_EQ(count_of(ptx.substr(first_barrier), "ld.global"), 0u) << what << "\n" << ptx;
    }
    EXPECT_EQ(count_of(ptx, "ld.local"), 0u) << what;
    auto filled = [&] {
      std::vector<std::vector<float>> bufs(4);
      bufs[0].resize(static_cast<size_t>(rows * c));
      fill_random(bufs[0].data(), rows * c, 9);
      bufs[1].resize(static_cast<size_t>(c));
      fill_random(bufs[1].data(), c, 10);
      bufs[2].resize(static_cast<size_t>(c));
      fill_random(bufs[2].data(), c, 11);
      bufs[3].assign(static_cast<size_t>(rows * c), std::nanf(""));
      return bufs;
    };
    auto check = [&](const std::vector<std::vector<float>>& bufs, const char* how) {
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float* in = bufs[0].data() + r * c;
        double m = 0, v = 0;
        for (int64_t k = 0; k < c; ++k) m += in[k] / double(c);
        for (int64_t k = 0; k < c; ++k) v += (in[k] - m) * (in[k] - m) / c;
        for (int64_t k = 0; k < c; ++k) {
          const double want = (in[k] - m) / std::sqrt(v + 1e-5) * bufs[1][static_cast<size_t>(k)] +
                              bufs[2][static_cast<size_t>(k)];
          worst = std::max(worst, std::abs(bufs[3][static_cast<size_t>(r * c + k)] - want) /
                                      (1e-3 + std::abs(want)));
        }
      }
      EXPECT_LT(worst, 1e-4) << what << " (" << how << ")";
    };
    std::vector<std::vector<float>> threaded = filled();
    ASSERT_EQ(testing::emulate_gpu_kernel(f, l, threaded), 0) << what;
    check(threaded, "a block's threads at once");
    ir::LoweredFunc serial = f;
    serial.body = serialize_gpu_bindings(f.body);
    const std::string serial_text = ir::to_string(serial);
    EXPECT_NE(serial_text.find(str("allocate G.early[float32 * ",
                                   l.block[0] * static_cast<int64_t>(per_thread), "]")),
              std::string::npos)
        << what << "\n"
        << serial_text;
    std::vector<std::vector<float>> serialized = filled();
    std::vector<float*> args;
    for (auto& b : serialized) args.push_back(b.data());
    ASSERT_EQ(testing::build_for_host(serial)->call(args), 0) << what;
    check(serialized, "serially");
  }
}

// A kernel of rows whose reductions are rows of its result (a softmax: the row's max, the sum
// of exponentials; a layer norm: the mean, then the variance around it) is one kernel, a
// block per row: each reduction combined into shared memory by the block's first thread, then
// read by all its threads (lower_generic_kernel: compiler/model_codegen.cc schedule_rows_gpu).
// Run with every thread of a block at once (real barriers, shared memory NaN at each block),
// against plain loops, for rows of 200 (not a multiple of the threads) and 1,000 over two
// leading axes.
TEST(GpuReduction, RowsWithTheirReductionsAreOneKernel) {
  const Target t = parse_target("cuda -arch=sm_90");
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{6, 200}, std::vector<int64_t>{2, 3, 1000}}) {
    const size_t rank = shape.size();
    const int64_t c = shape.back();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < rank; ++d) rows *= shape[d];
    std::vector<int64_t> row_shape(shape.begin(), shape.end() - 1);
    std::vector<std::string> names, row_names;
    for (size_t d = 0; d < rank; ++d) names.push_back(str("i", d));
    row_names.assign(names.begin(), names.end() - 1);
    ir::Tensor x = ir::placeholder("X", shape);
    auto row_of = [&](const std::vector<ir::Expr>& i) { return std::vector<ir::Expr>(i.begin(), i.end() - 1); };
    auto reduce = [&](const std::string& name, bool max, const std::function<ir::Expr(const std::vector<ir::Expr>&)>& f) {
      ir::IterVar k = ir::reduce_axis(c, name + "_k");
      return ir::compute(name, row_shape, row_names, [&](const std::vector<ir::Expr>& i) {
        std::vector<ir::Expr> at = i;
        at.push_back(k.var);
        return max ? ir::max_reduce(f(at), {k}) : ir::sum(f(at), {k});
      }, {k});
    };
    // Softmax.
    ir::Tensor top = reduce("top", true, [&](const std::vector<ir::Expr>& at) { return ir::read(x, at); });
    ir::Tensor e = ir::compute("e", shape, names, [&](const std::vector<ir::Expr>& i) {
      return ir::exp(ir::read(x, i) - ir::read(top, row_of(i)));
    });
    ir::Tensor total = reduce("total", false, [&](const std::vector<ir::Expr>& at) { return ir::read(e, at); });
    ir::Tensor softmax = ir::compute("softmax", shape, names, [&](const std::vector<ir::Expr>& i) {
      return ir::read(e, i) / ir::read(total, row_of(i));
    });
    // Layer norm (no scale): the variance reads the mean.
    ir::Tensor mean = reduce("mean", false, [&](const std::vector<ir::Expr>& at) { return ir::read(x, at) * ir::f32(1.0f / c); });
    ir::Tensor centered = ir::compute("centered", shape, names, [&](const std::vector<ir::Expr>& i) {
      return ir::read(x, i) - ir::read(mean, row_of(i));
    });
    ir::Tensor var = reduce("var", false, [&](const std::vector<ir::Expr>& at) {
      return ir::read(centered, at) * ir::read(centered, at) * ir::f32(1.0f / c);
    });
    ir::Tensor norm = ir::compute("norm", shape, names, [&](const std::vector<ir::Expr>& i) {
      return ir::read(centered, i) / ir::sqrt(ir::read(var, row_of(i)) + ir::f32(1e-5f));
    });
    for (const ir::Tensor& result : {softmax, norm}) {
      const std::string what = str(result->name, " of ", rows, " rows of ", c);
      ir::LoweredFunc f = lower_generic_kernel(result, {x}, t, "k", what);
      // The per-thread loops unrolled (whole up to 8, else an inner 8): the reductions' elements
      // and the row's elements of the output pass.
      const std::string ir_text = ir::to_string(f);
      for (const std::string& loop : {std::string("for (rstep,"), std::string("for (rstep.i,"), str("for (i", rank - 1, ".o,"),
                                      str("for (i", rank - 1, ".o.i,")}) {
        EXPECT_EQ(ir_text.find(loop), std::string::npos) << what << ": " << loop << "\n" << ir_text;
      }
      GpuPlan plan = plan_gpu_program(f, t);
      ASSERT_EQ(plan.kernels.size(), 1u) << what << ": " << plan.to_json().dump();
      const GpuLaunch& l = plan.kernels[0].launch;
      EXPECT_EQ(l.grid[0], rows) << what;
      EXPECT_EQ(codegen_llvm(f, t, CodegenOutput::Asm).data.find("bar.sync") == std::string::npos, false) << what;
      std::vector<std::vector<float>> bufs(2);
      bufs[0].resize(static_cast<size_t>(rows * c));
      fill_random(bufs[0].data(), rows * c, 9);
      bufs[1].assign(static_cast<size_t>(rows * c), std::nanf(""));
      ASSERT_EQ(testing::emulate_gpu_kernel(f, l, bufs), 0) << what;
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float* in = bufs[0].data() + r * c;
        double a = -INFINITY, b = 0;
        if (result == softmax) {
          for (int64_t k = 0; k < c; ++k) a = std::max(a, double(in[k]));
          for (int64_t k = 0; k < c; ++k) b += std::exp(in[k] - a);
        } else {
          for (int64_t k = 0; k < c; ++k) a = (k ? a : 0) + in[k] / double(c);
          for (int64_t k = 0; k < c; ++k) b += (in[k] - a) * (in[k] - a) / c;
        }
        for (int64_t k = 0; k < c; ++k) {
          double want = result == softmax ? std::exp(in[k] - a) / b : (in[k] - a) / std::sqrt(b + 1e-5);
          worst = std::max(worst, std::abs(bufs[1][static_cast<size_t>(r * c + k)] - want) / (1e-3 + std::abs(want)));
        }
      }
      EXPECT_LT(worst, 1e-4) << what;
    }
  }
}

// A short reduction stays a thread per output (a 3x3 max pool over 4 x 12 x 12),
// its innermost axis unrolled (the window's row: ir::unroll_up_to_8) and the outer one a
// loop; against a plain loop.
TEST(GpuReduction, AThreadsShortReductionIsUnrolled) {
  const Target t = parse_target("cuda -arch=sm_90");
  const int64_t C = 4, H = 12, W = 12;
  ir::Tensor x = ir::placeholder("X", {C, H + 2, W + 2});
  ir::IterVar r = ir::reduce_axis(3, "r"), s = ir::reduce_axis(3, "s");
  ir::Tensor pool = ir::compute("pool", {C, H, W}, {"c", "h", "w"}, [&](const std::vector<ir::Expr>& i) {
    return ir::max_reduce(ir::read(x, {i[0], i[1] + r.var, i[2] + s.var}), {r, s});
  }, {r, s});
  ir::LoweredFunc f = lower_generic_kernel(pool, {x}, t, "pool", "pool");
  const std::string ir_text = ir::to_string(f);
  EXPECT_EQ(ir_text.find("for (s,"), std::string::npos) << ir_text;
  EXPECT_NE(ir_text.find("for (r, 0, 3)"), std::string::npos) << ir_text;
  std::vector<std::vector<float>> bufs(2);
  bufs[0].resize(static_cast<size_t>(C * (H + 2) * (W + 2)));
  fill_random(bufs[0].data(), static_cast<int64_t>(bufs[0].size()), 13);
  bufs[1].assign(static_cast<size_t>(C * H * W), std::nanf(""));
  ASSERT_EQ(testing::emulate_gpu_kernel(f, check_gpu_kernel(f, t), bufs), 0);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        float want = -INFINITY;
        for (int64_t dr = 0; dr < 3; ++dr)
          for (int64_t ds = 0; ds < 3; ++ds)
            want = std::max(want, bufs[0][static_cast<size_t>((c * (H + 2) + h + dr) * (W + 2) + w + ds)]);
        ASSERT_EQ(bufs[1][static_cast<size_t>((c * H + h) * W + w)], want) << c << " " << h << " " << w;
      }
}

// Outputs of rank 0 and rows longer than a block's threads take (256 each) are split in two
// kernels instead; a budget of no extra kernel leaves them as they were.
TEST(GpuReduction, LongRowsAndScalarsAreSplitWithinTheBudget) {
  ir::Tensor x = ir::placeholder("X", {2, 40000});
  ir::IterVar k = ir::reduce_axis(40000, "k");
  auto rows = [&] {
    return ir::compute("R", {2}, {"i"}, [&](const std::vector<ir::Expr>& i) { return ir::sum(ir::read(x, {i[0], k.var}), {k}); }, {k});
  };
  GpuReductionSplitter one(1 << 20, 1);
  ir::Tensor split = one.rebuild(rows());
  EXPECT_EQ(one.block_reduction(split.get()), nullptr);
  ASSERT_EQ(ir::inputs_of(split).size(), 1u);
  EXPECT_EQ(ir::inputs_of(split)[0]->name, "R_part");
  GpuReductionSplitter none(1 << 20, 0);
  ir::Tensor kept = none.rebuild(rows());
  EXPECT_EQ(ir::inputs_of(kept)[0]->name, "X");
  ir::IterVar a = ir::reduce_axis(2, "a"), b = ir::reduce_axis(300, "b");
  ir::Tensor all = ir::compute("S", {}, {}, [&](const std::vector<ir::Expr>&) { return ir::sum(ir::read(x, {a.var, b.var}), {a, b}); }, {a, b});
  GpuReductionSplitter scalar(1 << 20, 1);
  EXPECT_EQ(ir::inputs_of(scalar.rebuild(all))[0]->name, "S_part");
}


// Attention as one kernel (compiler/attention.h): the scores, the rows' max and sum and the
// probabilities of a block's query rows in shared memory, barriers between them. Run with a CPU
// thread per GPU thread (each computes only its share of every shared stage; shared memory
// starts as NaN, so a stage read before it is whole shows) against attention in doubles: 10
// queries at 4 rows a block (a tail), 37 keys (fewer than the 128 threads), a mask broadcast
// over heads and queries, and a scale; the PTX has its barriers and assembles.
TEST(GpuAttention, OneKernelMatchesAttentionInDoubles) {
  const int64_t B = 2, H = 3, Sq = 10, Sk = 37, D = 8, Dv = 6;
  ir::Tensor q = ir::placeholder("q", {B, H, Sq, D}), kt = ir::placeholder("kt", {B, H, D, Sk}),
             v = ir::placeholder("v", {B, H, Sk, Dv}), mask = ir::placeholder("mask", {B, 1, 1, Sk});
  AttentionSpec spec;
  spec.batch = {B, H};
  spec.queries = Sq;
  spec.keys = Sk;
  spec.depth = D;
  spec.value_depth = Dv;
  auto reader = [](const ir::Tensor& t) {
    return [t](const std::vector<ir::Expr>& i) { return ir::read(t, i); };
  };
  spec.q = reader(q);
  spec.kt = reader(kt);
  spec.v = reader(v);
  spec.mask = [&](const std::vector<ir::Expr>& i) { return ir::read(mask, {i[0], 0, 0, i[3]}); };
  spec.scale = 0.5;
  const Target t = parse_target("cuda -arch=sm_80");
  EXPECT_EQ(attention_rows_per_block(spec.batch, Sq, Sk, t), 4);
  ir::LoweredFunc f = lower_attention_gpu(attention(spec, "att"), {q, kt, v, mask}, t, "attention");
  // Unrolled: the scores' 8 depths, each lane's 2 chunks of keys, an inner 8 of the 32 lanes a
  // row's max and sum combine (the output's 37 keys divide by nothing: a loop).
  const std::string ir_text = ir::to_string(f);
  for (const char* loop : {"for (d", "for (k", "for (l,", "for (l.i,"}) EXPECT_EQ(ir_text.find(loop), std::string::npos) << loop << "\n" << ir_text;
  EXPECT_EQ(count_of(ir_text, "for (l.o, 0, 4)"), 2) << ir_text;
  GpuLaunch l = check_gpu_kernel(f, t);
  EXPECT_EQ(l.grid[0], B * H * 3);
  EXPECT_EQ(l.block[0], kAttentionThreads);
  // Scores, probabilities, max, sum, and the lanes' parts of max, then of sum (one buffer:
  // the max's parts are dead when the sum's are written).
  EXPECT_EQ(l.static_shared_bytes, 4 * (2 * 4 * Sk + 2 * 4 + 4 * kAttentionRowLanes));
  const std::string ptx = codegen_llvm(f, t, CodegenOutput::Asm).data;
  EXPECT_GE(count_of(ptx, "bar.sync"), 4);
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (fs::exists(ptxas)) {
    const std::string dir = testing::temp_dir();
    std::ofstream(dir + "/att.ptx") << ptx;
    CommandResult r = run_command({ptxas, "-arch=sm_80", dir + "/att.ptx", "-o", dir + "/att.cubin"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  std::vector<std::vector<float>> bufs(5);
  const std::vector<int64_t> sizes = {B * H * Sq * D, B * H * D * Sk, B * H * Sk * Dv, B * Sk};
  for (size_t k = 0; k < sizes.size(); ++k) {
    bufs[k].resize(static_cast<size_t>(sizes[k]));
    fill_random(bufs[k].data(), sizes[k], 11 + static_cast<uint32_t>(k));
  }
  for (int64_t j = 0; j < Sk; j += 4) bufs[3][static_cast<size_t>(j)] = -1e4f;  // masked keys
  bufs[4].assign(static_cast<size_t>(B * H * Sq * Dv), std::nanf(""));
  ASSERT_EQ(testing::emulate_gpu_kernel(f, l, bufs), 0);
  // The attention of bufs' operands in doubles, the scaled scores soft-capped when softcap > 0
  // (before the mask), compared with `got` [B, H, Sq, Dv].
  auto expect_attention = [&](const std::vector<float>& got, double softcap) {
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H;
      for (int64_t i = 0; i < Sq; ++i) {
        std::vector<double> x(static_cast<size_t>(Sk));
        double top = -INFINITY, sum = 0;
        for (int64_t j = 0; j < Sk; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d)
            s += double(bufs[0][static_cast<size_t>((bh * Sq + i) * D + d)]) * bufs[1][static_cast<size_t>((bh * D + d) * Sk + j)];
          s *= 0.5;
          if (softcap > 0) s = softcap * std::tanh(s / softcap);
          x[static_cast<size_t>(j)] = s + bufs[3][static_cast<size_t>(b * Sk + j)];
          top = std::max(top, x[static_cast<size_t>(j)]);
        }
        for (double& e : x) sum += (e = std::exp(e - top));
        for (int64_t e = 0; e < Dv; ++e) {
          double want = 0;
          for (int64_t j = 0; j < Sk; ++j) want += x[static_cast<size_t>(j)] / sum * bufs[2][static_cast<size_t>((bh * Sk + j) * Dv + e)];
          EXPECT_NEAR(got[static_cast<size_t>((bh * Sq + i) * Dv + e)], want, 1e-5) << bh << " " << i << " " << e;
        }
      }
    }
  };
  expect_attention(bufs[4], 0);
  // The same written in another order (out_perm: [Sq, B, Dv, H], the Transpose merging heads
  // back taken in): the same values, moved.
  AttentionSpec permuted = spec;
  permuted.out_perm = {2, 0, 3, 1};
  ir::LoweredFunc fp = lower_attention_gpu(attention(permuted, "att"), {q, kt, v, mask}, t, "permuted");
  std::vector<std::vector<float>> pbufs = bufs;
  pbufs[4].assign(pbufs[4].size(), std::nanf(""));
  ASSERT_EQ(testing::emulate_gpu_kernel(fp, check_gpu_kernel(fp, t), pbufs), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t e = 0; e < Dv; ++e)
          EXPECT_EQ(pbufs[4][static_cast<size_t>(((i * B + b) * Dv + e) * H + h)], bufs[4][static_cast<size_t>(((b * H + h) * Sq + i) * Dv + e)])
              << b << " " << h << " " << i << " " << e;
  // zero_masked_rows (ONNX Attention's fully masked rows): batch 1's mask -inf at every key gives
  // zeros there, not NaN; batch 0 as before.
  AttentionSpec guarded = spec;
  guarded.zero_masked_rows = true;
  ir::LoweredFunc fg = lower_attention_gpu(attention(guarded, "att"), {q, kt, v, mask}, t, "guarded");
  if (fs::exists(ptxas)) {  // the select assembles
    const std::string dir = testing::temp_dir();
    std::ofstream(dir + "/guarded.ptx") << codegen_llvm(fg, t, CodegenOutput::Asm).data;
    CommandResult r = run_command({ptxas, "-arch=sm_80", dir + "/guarded.ptx", "-o", dir + "/guarded.cubin"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  std::vector<std::vector<float>> gbufs = bufs;
  for (int64_t j = 0; j < Sk; ++j) gbufs[3][static_cast<size_t>(Sk + j)] = -INFINITY;
  gbufs[4].assign(gbufs[4].size(), std::nanf(""));
  ASSERT_EQ(testing::emulate_gpu_kernel(fg, check_gpu_kernel(fg, t), gbufs), 0);
  for (int64_t k = 0; k < B * H * Sq * Dv; ++k) {
    const size_t at = static_cast<size_t>(k);
    if (k < H * Sq * Dv)
      EXPECT_EQ(gbufs[4][at], bufs[4][at]) << k;
    else
      EXPECT_EQ(gbufs[4][at], 0.0f) << k;
  }
  // A soft cap (ONNX Attention's softcap): scores * 0.5 as 2 tanh(. / 2), then the mask.
  AttentionSpec capped = spec;
  capped.softcap = 2.0;
  ir::LoweredFunc fc = lower_attention_gpu(attention(capped, "att"), {q, kt, v, mask}, t, "capped");
  std::vector<std::vector<float>> cbufs = bufs;
  cbufs[4].assign(cbufs[4].size(), std::nanf(""));
  ASSERT_EQ(testing::emulate_gpu_kernel(fc, check_gpu_kernel(fc, t), cbufs), 0);
  expect_attention(cbufs[4], 2.0);
  // Keys whose one row of scores a block cannot hold are refused by name (the graph pass keeps
  // such chains unfused; a model naming FusedAttention itself meets this).
  EXPECT_EQ(max_attention_keys(), 3055);
  AttentionSpec wide = spec;
  wide.keys = 3072;
  ir::Tensor kw = ir::placeholder("kt", {B, H, D, 3072}), vw = ir::placeholder("v", {B, H, 3072, Dv});
  wide.kt = reader(kw);
  wide.v = reader(vw);
  wide.mask = nullptr;
  EXPECT_EQ(attention_rows_per_block(wide.batch, Sq, 3072, t), 0);
  testing::expect_user_error([&] { lower_attention_gpu(attention(wide, "att"), {q, kw, vw}, t, "wide"); },
                             "wide: attention over 3072 keys: one row of its scores does not fit a block's 48 KiB");
}

}  // namespace
}  // namespace tf
