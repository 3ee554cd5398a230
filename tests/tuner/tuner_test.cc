// The tuner with real parts: config spaces of the real templates, the search strategies, the
// builder's worker processes (with faults injected at the process boundary), the local runner
// (the board's own runner program), the tuning loop on a real SQLite file, resume and
// interrupt, and the lookup a compile makes afterwards.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/file_io.h"
#include "compiler/driver.h"
#include "compiler/ptxas.h"
#include "db/database.h"
#include "runtime/gpu_runtime.h"
#include "tests/temp_dir.h"
#include "tuner/builder.h"
#include "tuner/config_space.h"
#include "tuner/runner.h"
#include "tuner/search_strategy.h"
#include "tuner/tune.h"
#include "tuner/tuning_records.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string temp_dir() {
  static tf::testing::TempDir dir("tunefarm-tuner");
  return dir.path();
}

Target x86_avx512() { return parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512"); }

LocalBuilder builder(const std::string& worker = TF_BUILD_WORKER, double timeout_s = 60) {
  LocalBuilderOptions o;
  o.worker_path = worker;
  o.timeout_s = timeout_s;
  return LocalBuilder(o);
}

LocalRunner runner() {
  LocalRunnerOptions o;
  o.runner_path = TF_BOARD_RUNNER;
  return LocalRunner(o);
}

// ---- Config spaces --------------------------------------------------------------------

TEST(ConfigSpace, IndicesAndConfigsMapBothWays) {
  ConfigSpace s(parse_workload("matmul(M=97,N=131,K=67)"), x86_avx512());
  uint64_t product = 1;
  for (const KnobSpec& k : s.knobs()) product *= k.candidates.size();
  EXPECT_EQ(s.size(), product);
  for (uint64_t i = 0; i < s.size(); i += 997) {
    json c = s.to_config(i);
    ASSERT_EQ(s.index_of(c), i) << c.dump();
    EXPECT_EQ(s.index_of(s.digits(i)), i);
  }
  EXPECT_EQ(s.to_config(s.size() - 1), s.to_config(s.index_of(s.digits(s.size() - 1))));
  EXPECT_TRUE(s.default_index().has_value());
  EXPECT_EQ(s.template_id(), "dense.cpu.v1");
  // A legal config outside the candidates has no index.
  EXPECT_FALSE(s.index_of(json{{"tile_m", 63}}).has_value());
  EXPECT_FALSE(s.index_of(json{{"tile_q", 1}}).has_value());
}

TEST(ConfigSpace, SplitCandidatesComeFromTheExtent) {
  Target t = x86_avx512();
  ConfigSpace odd(parse_workload("matmul(M=97,N=131,K=67)"), t);
  for (const KnobSpec& k : odd.knobs()) {
    if (k.name != "tile_n") continue;
    std::set<int64_t> c;
    for (const json& v : k.candidates) c.insert(v.get<int64_t>());
    EXPECT_TRUE(c.count(131)) << "the whole extent";
    EXPECT_TRUE(c.count(128) && c.count(112)) << "multiples of the 16 lanes";
    EXPECT_EQ(*c.rbegin(), 131) << "nothing wider than the extent";
    EXPECT_EQ(k.kind, KnobKind::Split);
  }
  ConfigSpace wide(parse_workload("matmul(M=512,N=512,K=512)"), t);
  for (const KnobSpec& k : wide.knobs()) {
    if (k.name != "tile_n") continue;
    std::set<int64_t> c;
    for (const json& v : k.candidates) c.insert(v.get<int64_t>());
    EXPECT_TRUE(c.count(80) && c.count(160) && c.count(256)) << "tiles from 65 to 256 are proposed";
  }
  ConfigSpace skinny(parse_workload("matmul(M=1,N=1000,K=1024)"), t);
  EXPECT_EQ(skinny.knobs()[0].candidates, std::vector<json>{1}) << "tile_m of an extent of 1";
}

TEST(ConfigSpace, ConstraintsPrunePointsThatWouldSpillOrBloat) {
  Target avx512 = x86_avx512(), avx2 = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell");
  ConfigSpace s(parse_workload("matmul(M=512,N=512,K=512)"), avx512);
  auto idx = [&](const ConfigSpace& sp, json c) { return *sp.index_of(c); };
  // 16 rows x 16 vectors of accumulators: far past 32 registers.
  std::string why = s.why_pruned(idx(s, {{"tile_m", 16}, {"tile_n", 256}}));
  EXPECT_NE(why.find("vector registers"), std::string::npos) << why;
  EXPECT_TRUE(s.valid(*s.default_index()));
  // 8 x 2 vectors fits 32 registers but not AVX2's 16.
  ConfigSpace s2(parse_workload("matmul(M=512,N=512,K=512)"), avx2);
  EXPECT_TRUE(s.valid(idx(s, {{"tile_m", 8}, {"tile_n", 32}})));
  EXPECT_FALSE(s2.valid(idx(s2, {{"tile_m", 8}, {"tile_n", 16}})));
  EXPECT_TRUE(s2.valid(*s2.default_index()));
  // Unrolled scalar code past the statement budget.
  why = s.why_pruned(idx(s, {{"tile_m", 64}, {"tile_n", 256}, {"unroll_k", 64}, {"vectorize", false}}));
  EXPECT_NE(why.find("unrolled body"), std::string::npos) << why;
  // Vectorized within the registers, but 7 x 3 vectors x 64 unrolled steps: measured 24 s
  // to compile, at a twentieth of the best speed.
  why = s.why_pruned(idx(s, {{"tile_m", 7}, {"tile_n", 48}, {"unroll_k", 64}, {"unroll", true}}));
  EXPECT_NE(why.find("unrolled body of 1344"), std::string::npos) << why;
  EXPECT_TRUE(s.valid(idx(s, {{"tile_m", 7}, {"tile_n", 48}, {"unroll_k", 16}, {"unroll", true}})));
  EXPECT_LT(s.valid_size(), s.size());
  EXPECT_GT(s.valid_size(), 0u);
}

// The default config is a point of every space, even where its tile is no candidate the
// template derives (MobileNet-v2's stride-2 depthwise layer: tile_w 19 of 56 columns), so
// every run measures it and re-times its best beside it.
TEST(ConfigSpace, TheDefaultIsAlwaysAPointOfTheSpace) {
  for (const char* w : {"depthwise_conv2d_nchwc(N=1,C=96,H=112,W=112,R=3,S=3,stride=2,pad=1,dilation=1,block=16,"
                        "epilogue=bias)",
                        "depthwise_conv2d_nchwc(N=1,C=144,H=56,W=56,R=3,S=3,stride=1,pad=1,dilation=1,block=16,"
                        "epilogue=bias)",
                        "conv2d_nchwc(N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3,dilation=1,ic_block=3,"
                        "oc_block=16,epilogue=bias_relu)",
                        "matmul(M=1,N=1000,K=1280,epilogue=bias)", "matmul(M=97,N=131,K=67)"}) {
    for (const Target& t : {x86_avx512(), parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell"),
                            parse_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72")}) {
      ConfigSpace s(parse_workload(w), t);
      ASSERT_TRUE(s.default_index().has_value()) << w << " on " << t.str();
      EXPECT_EQ(s.to_config(*s.default_index()), default_config(build_op(parse_workload(w)), t)) << w;
    }
  }
}

TEST(ConfigSpace, EveryOperatorHasATemplateOnCpusAndGpus) {
  for (const char* w : {"batch_matmul(B=2,M=8,N=8,K=8)", "conv2d_nchw(N=1,C=8,H=8,W=8,K=8,R=3,S=3,pad=1)",
                        "conv2d_nhwc(N=1,H=8,W=8,C=8,K=8,R=3,S=3)", "depthwise_conv2d_nchw(N=1,C=8,H=8,W=8,R=3,S=3)"}) {
    ConfigSpace s(parse_workload(w), x86_avx512());
    EXPECT_GT(s.size(), 1u) << w;
    EXPECT_TRUE(s.valid(*s.default_index())) << w;
  }
  for (const char* t : {"cuda -arch=sm_80", "rocm -mcpu=gfx906"}) {
    ConfigSpace dense(parse_workload("matmul(M=300,N=200,K=64)"), parse_target(t));
    EXPECT_GT(dense.valid_size(), 100u) << t;
    EXPECT_TRUE(dense.valid(*dense.default_index())) << t;
    ConfigSpace conv(parse_workload("conv2d_nchw(N=1,C=8,H=28,W=28,K=64,R=3,S=3,pad=1)"), parse_target(t));
    EXPECT_GT(conv.valid_size(), 100u) << t;
    EXPECT_TRUE(conv.valid(*conv.default_index())) << t;
    std::string kind = t[0] == 'c' ? "cuda" : "rocm";
    EXPECT_EQ(dense.template_id(), "dense." + kind + ".v4");
    EXPECT_EQ(conv.template_id(), "conv2d." + kind + ".v4");
    ConfigSpace dw(parse_workload("depthwise_conv2d_nchw(N=1,C=32,H=28,W=28,R=3,S=3,pad=1)"), parse_target(t));
    EXPECT_GT(dw.valid_size(), 100u) << t;
    EXPECT_TRUE(dw.valid(*dw.default_index())) << t;
    EXPECT_EQ(dw.template_id(), "depthwise_conv2d." + kind + ".v2");
  }
}

// ---- Search strategies ----------------------------------------------------------------

// A synthetic cost over a real space: a smooth bowl around one point of the digits.
struct Bowl {
  const ConfigSpace& s;
  std::vector<size_t> best;
  double operator()(uint64_t i) const {
    std::vector<size_t> d = s.digits(i);
    double c = 1;
    for (size_t k = 0; k < d.size(); ++k) c += std::pow(double(d[k]) - double(best[k]), 2);
    return c;
  }
};

// Runs a strategy for `budget` points; returns the best cost found and checks no point was
// proposed twice or pruned.
double search(SearchStrategy& st, const ConfigSpace& s, const Bowl& f, size_t budget, size_t batch = 8) {
  std::set<uint64_t> seen;
  double best = INFINITY;
  while (seen.size() < budget) {
    std::vector<uint64_t> p = st.propose(std::min(batch, budget - seen.size()));
    if (p.empty()) break;
    std::vector<Observation> obs;
    for (uint64_t i : p) {
      EXPECT_TRUE(seen.insert(i).second) << st.name() << " proposed " << i << " twice";
      EXPECT_TRUE(s.valid(i)) << st.name() << " proposed a pruned point";
      obs.push_back({i, f(i)});
      best = std::min(best, f(i));
    }
    st.observe(obs);
  }
  return best;
}

TEST(SearchStrategy, EachFindsTheOptimumOfASmallSpace) {
  // Few points: every strategy must end up measuring the optimum, and then run dry.
  ConfigSpace s(parse_workload("depthwise_conv2d_nchw(N=1,C=4,H=6,W=6,R=3,S=3)"), x86_avx512());
  Bowl f{s, s.digits(s.size() / 3)};
  ASSERT_TRUE(s.valid(s.size() / 3));
  for (const std::string& name : search_strategy_names()) {
    auto st = make_search_strategy(name, s, 7);
    EXPECT_EQ(search(*st, s, f, s.size() + 5), 1.0) << name;
    EXPECT_TRUE(st->propose(4).empty()) << name << " proposes after the space ran out";
  }
}

TEST(SearchStrategy, GeneticSearchBeatsRandomOnALargerSpace) {
  ConfigSpace s(parse_workload("matmul(M=512,N=512,K=512)"), x86_avx512());
  Bowl f{s, s.digits(*s.default_index())};
  double ga = 0, random = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    auto g = make_search_strategy("ga", s, seed);
    auto r = make_search_strategy("random", s, seed);
    ga += search(*g, s, f, 300);
    random += search(*r, s, f, 300);
  }
  EXPECT_LT(ga, random) << "ga " << ga / 3 << " random " << random / 3;
  EXPECT_LE(ga / 3, 2.0) << "ga did not get next to the optimum";
}

TEST(SearchStrategy, SameSeedSameProposalsAndObservedPointsAreSkipped) {
  ConfigSpace s(parse_workload("matmul(M=64,N=64,K=64)"), x86_avx512());
  for (const std::string& name : search_strategy_names()) {
    auto a = make_search_strategy(name, s, 42), b = make_search_strategy(name, s, 42);
    EXPECT_EQ(a->propose(16), b->propose(16)) << name;
    auto c = make_search_strategy(name, s, 42);
    std::vector<uint64_t> first = make_search_strategy(name, s, 42)->propose(16);
    std::vector<Observation> known;
    for (uint64_t i : first) known.push_back({i, 1.0});
    c->observe(known);
    for (uint64_t i : c->propose(64)) {
      EXPECT_EQ(std::count(first.begin(), first.end(), i), 0) << name << " re-proposed a measured point";
    }
  }
  try {
    make_search_strategy("annealing", s, 1);
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--strategy annealing"), std::string::npos);
  }
}

// ---- Builder ---------------------------------------------------------------------------

// A worker (--serve: a request per line) that crashes on one config, hangs on another and
// answers garbage to a third, the real one otherwise: faults injected at the process
// boundary the builder promises to contain.
std::string faulty_worker() {
  std::string path = temp_dir() + "/faulty-worker.sh";
  std::ofstream f(path);
  f << "#!/bin/sh\nwhile IFS= read -r req; do\n"
    << "case \"$req\" in *'\"tile_m\":3}'*) kill -SEGV $$ ;; *'\"tile_m\":5}'*) sleep 60 ;;"
    << " *'\"tile_m\":6}'*) echo 'LLVM ERROR: garbage'; continue ;; esac\n"
    << "printf '%s' \"$req\" | " << TF_BUILD_WORKER << "\ndone\n";
  f.close();
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

TEST(Builder, CrashesHangsAndErrorsAreCompileErrorsOfThatCandidateOnly) {
  LocalBuilder b = builder(faulty_worker(), 3);
  Workload w = parse_workload("matmul(M=16,N=16,K=16)");
  std::vector<json> configs = {{{"tile_m", 2}}, {{"tile_m", 3}}, {{"tile_m", 5}}, {{"tile_m", 0}},
                               {{"tile_m", 4}}, {{"tile_m", 6}}, {{"tile_m", 8}}};
  std::vector<BuildResult> r = b.build(w, host_target(), configs);
  ASSERT_EQ(r.size(), configs.size());
  EXPECT_TRUE(r[0].ok()) << r[0].error_msg;
  EXPECT_TRUE(fs::exists(r[0].so_path) && fs::exists(r[0].so_path + ".json"));
  EXPECT_EQ(r[1].error_code, "compile_error");
  EXPECT_NE(r[1].error_msg.find("compiler crashed"), std::string::npos) << r[1].error_msg;
  EXPECT_NE(r[2].error_msg.find("longer than the limit"), std::string::npos) << r[2].error_msg;
  EXPECT_NE(r[3].error_msg.find("tile_m=0"), std::string::npos) << r[3].error_msg;
  EXPECT_TRUE(r[4].ok()) << r[4].error_msg;
  EXPECT_NE(r[5].error_msg.find("not a reply: LLVM ERROR: garbage"), std::string::npos) << r[5].error_msg;
  EXPECT_TRUE(r[6].ok()) << r[6].error_msg;
  // The next batch keeps the last one's files (they may be measuring: tuner/tune.h's
  // pipelining); the one after replaces them.
  std::vector<BuildResult> again = b.build(w, host_target(), {json::object()});
  EXPECT_TRUE(again[0].ok());
  EXPECT_TRUE(fs::exists(r[0].so_path));
  std::vector<BuildResult> third = b.build(w, host_target(), {json::object()});
  EXPECT_TRUE(third[0].ok());
  EXPECT_FALSE(fs::exists(r[0].so_path));
  EXPECT_TRUE(fs::exists(again[0].so_path));
}

TEST(Builder, WorkersStayUpAcrossCandidatesAndBatches) {
  LocalBuilderOptions o;
  o.worker_path = TF_BUILD_WORKER;
  o.workers = 2;
  LocalBuilder b(o);
  Workload w = parse_workload("matmul(M=16,N=16,K=16)");
  for (int batch = 0; batch < 2; ++batch) {
    std::vector<BuildResult> r = b.build(w, host_target(), {{{"tile_m", 2}}, {{"tile_m", 4}}, {{"tile_m", 0}}, json::object()});
    EXPECT_TRUE(r[0].ok() && r[1].ok() && r[3].ok()) << r[0].error_msg << r[1].error_msg << r[3].error_msg;
    EXPECT_NE(r[2].error_msg.find("tile_m=0"), std::string::npos) << r[2].error_msg;
  }
  // A compiler error is an answer, not a reason for a new process.
  EXPECT_EQ(b.worker_starts(), 2);
}

TEST(Builder, AMissingWorkerIsAClearError) {
  LocalBuilderOptions o;
  o.worker_path = temp_dir() + "/no-such-worker";
  try {
    LocalBuilder b(o);
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tunefarm-build-worker"), std::string::npos) << e.what();
  }
}

// A stand-in for ptxas (a script): says its version, then `then` for each kernel (shell).
std::string stand_in_ptxas(const std::string& name, const std::string& then) {
  std::string path = temp_dir() + "/" + name;
  std::ofstream f(path);
  f << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Cuda compilation tools, release 12.4, V12.4.131'; exit 0; fi\n"
    << then << "\n";
  f.close();
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

// CUDA kernels are assembled into cubins in the build (its workers, its time limit) where the
// tuner has ptxas; a kernel ptxas refuses is that candidate's compile error, an architecture
// it lacks leaves the PTX, and no ptxas (or TF_PTXAS=off) says why.
TEST(Builder, CudaKernelsAreAssembledWhereTheTunerHasPtxas) {
  EXPECT_EQ(ptxas_cuda_version("Cuda compilation tools, release 13.0, V13.0.88"), 13000);
  EXPECT_EQ(ptxas_cuda_version("release 12.4, V12.4.131"), 12040);
  EXPECT_EQ(ptxas_cuda_version("ptxas: unknown option"), 0);
  Workload w = parse_workload("matmul(M=64,N=48,K=32)");
  const Target sm80 = parse_target("cuda -arch=sm_80");
  const char* before = std::getenv("TF_PTXAS");
  const std::string saved = before ? before : "";
  struct Case {
    std::string ptxas;  // TF_PTXAS
    std::string note;   // in assembly_note
    const char* error;  // the candidate's compile error; nullptr: it builds
    bool cubin;
  };
  const std::vector<Case> cases = {
      {"off", "as PTX, which their drivers JIT: TF_PTXAS=off", nullptr, false},
      {temp_dir() + "/no-such-ptxas", "does not say its version", nullptr, false},
      {stand_in_ptxas("refusing-ptxas", "echo \"ptxas error   : Entry function 'matmul' uses too much shared data\"; exit 255"),
       "by " + temp_dir() + "/refusing-ptxas (CUDA 12.4)", "refused the kernel: ptxas error   : Entry function 'matmul' uses too much shared data", false},
      {stand_in_ptxas("archless-ptxas", "echo \"ptxas fatal   : Value 'sm_80' is not defined for option 'gpu-name'\"; exit 255"),
       "CUDA 12.4", nullptr, false},
  };
  for (const Case& k : cases) {
    setenv("TF_PTXAS", k.ptxas.c_str(), 1);
    LocalBuilder b = builder();
    EXPECT_NE(b.assembly_note(sm80).find(k.note), std::string::npos) << b.assembly_note(sm80);
    EXPECT_EQ(b.assembly_note(x86_avx512()), "");
    std::vector<BuildResult> r = b.build(w, sm80, {json::object()});
    if (k.error) {
      EXPECT_EQ(r[0].error_code, "compile_error") << k.ptxas;
      EXPECT_NE(r[0].error_msg.find(k.error), std::string::npos) << r[0].error_msg;
    } else {
      EXPECT_TRUE(r[0].ok()) << r[0].error_msg;
      EXPECT_EQ(r[0].cubin_path, "") << k.ptxas;
    }
  }
  if (before) setenv("TF_PTXAS", saved.c_str(), 1); else unsetenv("TF_PTXAS");
  // The real ptxas, where this machine has NVIDIA's toolkit.
  std::string why;
  std::optional<Ptxas> ptxas = find_ptxas(&why);
  if (!ptxas) {
    std::printf("note: %s: no cubin assembled\n", why.c_str());
    return;
  }
  LocalBuilder b = builder();
  EXPECT_NE(b.assembly_note(sm80).find("by " + ptxas->path), std::string::npos) << b.assembly_note(sm80);
  std::vector<BuildResult> r = b.build(w, sm80, {json::object()});
  ASSERT_TRUE(r[0].ok()) << r[0].error_msg;
  ASSERT_NE(r[0].cubin_path, "");
  EXPECT_EQ(r[0].cubin_cuda_version, ptxas->cuda_version);
  auto bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const std::string code = bytes(r[0].cubin_path);
  EXPECT_EQ(gpu_module_kind(code), "cubin");
  EXPECT_EQ(cubin_sm(code), 80);
  EXPECT_EQ(cubin_runs_on(80, "sm_86"), "");
  EXPECT_NE(cubin_runs_on(80, "sm_90").find("holds machine code for sm_80, which does not run on sm_90"), std::string::npos);
  EXPECT_EQ(gpu_module_kind(bytes(r[0].so_path)), "ptx");  // the PTX stays, for boards that JIT it
}

// ---- Local runner ----------------------------------------------------------------------

// Three samples of at least 1 ms each, no warm-up.
MeasureContext quick_context(const Workload& w) {
  MeasureOptions mo;
  mo.repeat = 3;
  mo.min_repeat_ms = 1;
  mo.min_warmup_ms = 0;
  return MeasureContext(build_op(w), mo);
}

TEST(LocalRunner, TimesChecksAndClassifiesFailures) {
  LocalBuilder b = builder();
  LocalRunner r = runner();
  Workload w = parse_workload("matmul(M=24,N=20,K=12)");
  MeasureContext ctx = quick_context(w);
  std::vector<BuildResult> builds = b.build(w, host_target(), {json::object(), {{"tile_m", 0}}});
  std::vector<RunResult> res = r.run(ctx, builds);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_TRUE(res[0].ok()) << res[0].error_msg;
  EXPECT_EQ(res[0].correctness, "ok");
  EXPECT_EQ(res[0].samples_s.size(), 3u);
  EXPECT_GT(res[0].median_s(), 0);
  EXPECT_EQ(res[1].error, tunefarm::v1::COMPILE_ERROR);

  // A kernel that crashes at run time.
  RunResult crash = r.run_one(ctx, TF_KERNEL_SEGV, "crash");
  EXPECT_EQ(crash.error, tunefarm::v1::RUNTIME_ERROR) << crash.error_msg;
  EXPECT_NE(crash.error_msg.find("signal 11"), std::string::npos) << crash.error_msg;

  // A kernel that computes something else: relu'd output checked as a plain matmul.
  Workload relu = parse_workload("matmul(M=24,N=20,K=12,epilogue=relu)");
  std::vector<BuildResult> wrong = b.build(relu, host_target(), {json::object()});
  RunResult bad = r.run_one(ctx, wrong[0].so_path, "matmul");
  EXPECT_EQ(bad.error, tunefarm::v1::WRONG_ANSWER) << bad.error_msg;
  EXPECT_EQ(bad.correctness, "wrong");
}

// A baseline timed with the kernel (`run --baseline`): samples of its own, interleaved, on
// the same inputs but outputs of its own, so the kernel's output is the one checked.
TEST(LocalRunner, TimesABaselineAlongsideAndChecksOnlyTheKernel) {
  LocalBuilder b = builder();
  LocalRunner r = runner();
  Workload w = parse_workload("matmul(M=24,N=20,K=12)");
  MeasureContext ctx = quick_context(w);
  std::vector<BuildResult> plain = b.build(w, host_target(), {json::object()});
  ASSERT_TRUE(plain[0].ok()) << plain[0].error_msg;
  // The next batch replaces this one's files.
  std::string kept = temp_dir() + "/plain_matmul.so";
  std::filesystem::copy_file(plain[0].so_path, kept, std::filesystem::copy_options::overwrite_existing);
  plain[0].so_path = kept;
  std::vector<BuildResult> relu = b.build(parse_workload("matmul(M=24,N=20,K=12,epilogue=relu)"), host_target(), {json::object()});
  ASSERT_TRUE(relu[0].ok()) << relu[0].error_msg;

  RunResult ok = r.run_one(ctx, plain[0].so_path, "matmul", relu[0].so_path, "matmul");
  ASSERT_TRUE(ok.ok()) << ok.error_msg;
  EXPECT_EQ(ok.correctness, "ok") << "the baseline's (relu'd) output was checked instead of the kernel's";
  EXPECT_EQ(ok.samples_s.size(), 3u);
  EXPECT_EQ(ok.baseline_samples_s.size(), 3u);
  EXPECT_GT(ok.speedup(), 0);
  RunResult wrong = r.run_one(ctx, relu[0].so_path, "matmul", plain[0].so_path, "matmul");
  EXPECT_EQ(wrong.error, tunefarm::v1::WRONG_ANSWER) << wrong.error_msg;

  // Without a baseline there is no speedup.
  RunResult alone = r.run_one(ctx, plain[0].so_path, "matmul");
  EXPECT_TRUE(alone.baseline_samples_s.empty());
  EXPECT_EQ(alone.speedup(), 0);

  // A baseline that crashes, is not a library, or lacks the function fails the measurement,
  // saying it was the baseline.
  RunResult crash = r.run_one(ctx, plain[0].so_path, "matmul", TF_KERNEL_SEGV, "crash");
  EXPECT_EQ(crash.error, tunefarm::v1::RUNTIME_ERROR) << crash.error_msg;
  EXPECT_NE(crash.error_msg.find("signal 11"), std::string::npos) << crash.error_msg;
  std::string text = temp_dir() + "/not-a-library.so";
  std::ofstream(text) << "not an ELF file";
  RunResult junk = r.run_one(ctx, plain[0].so_path, "matmul", text, "matmul");
  EXPECT_EQ(junk.error, tunefarm::v1::LOAD_ERROR) << junk.error_msg;
  EXPECT_NE(junk.error_msg.find("baseline library " + text), std::string::npos) << junk.error_msg;
  RunResult nofn = r.run_one(ctx, plain[0].so_path, "matmul", plain[0].so_path, "no_such_kernel");
  EXPECT_EQ(nofn.error, tunefarm::v1::LOAD_ERROR) << nofn.error_msg;
  EXPECT_NE(nofn.error_msg.find("baseline: "), std::string::npos) << nofn.error_msg;
  EXPECT_NE(nofn.error_msg.find("no_such_kernel"), std::string::npos) << nofn.error_msg;
}

// A matmul whose B is a constant of the caller (const_b=1, as a model's weights) takes B
// packed: the board fills B as usual and packs it as the kernel's description says, so the
// kernel is timed without packing it and checked against the same reference. N = 20 leaves a
// partial block (zeros past the end); a baseline packing B in other blocks reads its own
// layout of the same (large enough) buffer.
TEST(LocalRunner, ConstantWeightsArePassedPacked) {
  LocalBuilder b = builder();
  LocalRunner r = runner();
  Workload w = parse_workload("matmul(M=24,N=20,K=12,const_b=1)");
  MeasureContext ctx = quick_context(w);
  std::vector<BuildResult> builds =
      b.build(w, host_target(), {{{"pack_b", true}, {"tile_n", 16}}, {{"pack_b", true}, {"tile_n", 32}}, {{"pack_b", false}}});
  std::vector<json> packed;
  for (const BuildResult& k : builds) {
    ASSERT_TRUE(k.ok()) << k.error_msg;
    packed.push_back(read_sidecar_json(k.so_path).value("packed", json::array()));
  }
  ASSERT_EQ(packed[0].size(), 1u) << packed[0].dump();
  EXPECT_EQ(packed[0][0]["arg"], 1);
  EXPECT_EQ(packed[0][0]["block"], 16);
  EXPECT_TRUE(packed[2].empty()) << "pack_b=false reads B as it is";
  std::vector<RunResult> res = r.run(ctx, builds);
  for (const RunResult& x : res) {
    EXPECT_TRUE(x.ok()) << x.error_msg;
    EXPECT_EQ(x.correctness, "ok");
  }
  // Another packing as the baseline: the argument has room for both.
  std::string kept = temp_dir() + "/packed16.so";
  std::filesystem::copy_file(builds[0].so_path, kept, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(builds[0].so_path + ".json", kept + ".json", std::filesystem::copy_options::overwrite_existing);
  RunResult both = r.run_one(ctx, kept, "matmul", builds[1].so_path, "matmul");
  EXPECT_TRUE(both.ok()) << both.error_msg;
  EXPECT_EQ(both.correctness, "ok");
  tunefarm::v1::MeasureRequest req = ctx.request("matmul");
  set_packed_inputs(req, read_sidecar_json(kept), read_sidecar_json(builds[1].so_path));
  EXPECT_EQ(req.args(1).pack_block(), 16);
  EXPECT_EQ(req.args(1).min_elements(), 12 * 32);
  // A description that packs an output, or a dimension B does not have, is refused.
  EXPECT_THROW(set_packed_inputs(req, json{{"packed", {{{"arg", 2}, {"dim", 0}, {"block", 4}}}}}), UserError);
  EXPECT_THROW(set_packed_inputs(req, json{{"packed", {{{"arg", 1}, {"dim", 2}, {"block", 4}}}}}), UserError);
}

// ---- The tuning loop -------------------------------------------------------------------

// A builder that hands one candidate a kernel that crashes at run time.
class CrashingOne : public Builder {
 public:
  explicit CrashingOne(Builder& inner) : inner_(inner) {}
  std::vector<BuildResult> build(const Workload& w, const Target& t, const std::vector<json>& configs) override {
    std::vector<BuildResult> r = inner_.build(w, t, configs);
    if (!done_ && r.size() > 2 && r[2].ok()) {
      r[2].so_path = crash_copy(r[2].so_path);
      crashed = r[2].config;
      done_ = true;
    }
    return r;
  }
  json crashed;

 private:
  // The segv kernel under the function name the runner calls.
  std::string crash_copy(const std::string& so) {
    std::string src = temp_dir() + "/crash_matmul.c", out = temp_dir() + "/crash_matmul.so";
    std::ofstream(src) << "int matmul(float* a, float* b, float* c) { *(volatile int*)0 = 1; return 0; }\n";
    EXPECT_EQ(std::system(("cc -shared -fPIC -o " + out + " " + src).c_str()), 0);
    return out;
  }
  Builder& inner_;
  bool done_ = false;
};

class Collect : public MeasureCallback {
 public:
  void on_results(const TuneState&, const std::vector<Trial>& t) override { trials.insert(trials.end(), t.begin(), t.end()); }
  std::vector<Trial> trials;
};

class StopAfter : public MeasureCallback {
 public:
  StopAfter(std::atomic<bool>& flag, int batches) : flag_(flag), left_(batches) {}
  void on_results(const TuneState&, const std::vector<Trial>&) override {
    if (--left_ <= 0) flag_ = true;
  }

 private:
  std::atomic<bool>& flag_;
  int left_;
};

TEST(Tune, RecordsEveryTrialResumesWithoutRemeasuringAndCompileUsesTheBest) {
  std::string path = temp_dir() + "/tune.db";
  auto db = db::open_database(path);
  Workload w = parse_workload("matmul(M=48,N=40,K=32)");
  Target t = host_target();
  ConfigSpace space(w, t);
  LocalBuilder lb = builder();
  CrashingOne b(lb);
  LocalRunner r = runner();
  TuneOptions o;
  o.trials = 12;
  o.batch = 6;
  o.measure.repeat = 3;
  o.measure.min_repeat_ms = 2;
  o.run_uuid = "run-1";
  db->begin_run({"run-1", "tester", "host", "random", 12, w.canonical(), t.str(), 1, 0, "running", 0});
  CommitRecords commit(db.get(), space, "local", "run-1", o.measure);

  // Interrupted after two batches (the default alone, then six): what was measured is
  // committed, no re-timing.
  std::atomic<bool> stop{false};
  StopAfter stopper(stop, 2);
  auto st1 = make_search_strategy("random", space, 3);
  TuneSummary first = tune(space, *st1, b, r, db.get(), o, {&commit, &stopper}, &stop);
  EXPECT_TRUE(first.interrupted);
  EXPECT_EQ(first.state.trials_done, 7);
  EXPECT_TRUE(first.retimed.empty());
  std::vector<db::MeasureRecord> after1 = db->history({w.canonical(), t.str(), 0});
  EXPECT_GE(after1.size(), 7u);
  // The crashing candidate is a runtime error on record, never a best.
  bool crash_recorded = false;
  for (const auto& rec : after1) crash_recorded |= rec.config == b.crashed && rec.error_code == "runtime_error";
  EXPECT_TRUE(crash_recorded) << b.crashed.dump();
  EXPECT_EQ(first.state.errors, 1);

  // Resume: the seven known configs are not measured again.
  std::set<std::string> before;
  for (const auto& rec : after1) before.insert(rec.config_hash());
  auto st2 = make_search_strategy("random", space, 3);
  Collect seen;
  TuneSummary second = tune(space, *st2, lb, r, db.get(), o, {&commit, &seen});
  EXPECT_FALSE(second.interrupted);
  EXPECT_EQ(second.state.known, 7);
  EXPECT_EQ(second.state.trials_done, 12);
  std::set<std::string> searched;
  for (const Trial& tr : seen.trials) {
    if (tr.retime) continue;
    EXPECT_EQ(before.count(db::config_hash(tr.config)), 0u) << "measured again: " << tr.config.dump();
    searched.insert(db::config_hash(tr.config));
  }
  EXPECT_EQ(searched.size(), 12u);
  // Non-contenders (a warm-up over 2x the best so far) get one sample; the re-timing never cuts.
  int cut = 0;
  for (const Trial& tr : seen.trials) {
    if (!tr.result.ok()) continue;
    EXPECT_EQ(tr.result.samples_s.size(), tr.result.cut ? 1u : 3u) << tr.config.dump();
    EXPECT_FALSE(tr.retime && tr.result.cut) << tr.config.dump();
    cut += tr.result.cut;
  }
  EXPECT_GT(cut, 0) << "random configs of this matmul are mostly over 2x slower than the best (11 of 24 cut here)";
  EXPECT_GT(db->history({w.canonical(), t.str(), 0}).size(), after1.size() + 12);
  // The re-timing: the best few and the default, several rounds each, all recorded.
  ASSERT_GE(second.retimed.size(), 2u);
  EXPECT_EQ(second.retimed[0].medians_s.size(), 3u);
  EXPECT_GT(second.best_s, 0);
  EXPECT_GT(second.default_s, 0);
  EXPECT_FALSE(second.best_config.is_null());

  // A compile now takes the tuned record: the config with the best median of medians.
  ConfigChoice c = choose_config(db.get(), w, t);
  EXPECT_EQ(c.source, "tuned (exact)");
  db::BestResult best = db->best(lookup_key(w, t));
  EXPECT_EQ(c.config, best.record.config);
  EXPECT_GE(best.measurements, 1);
  EXPECT_NE(c.config, b.crashed);
  // The run's reported best is the config compile takes: the re-timing's winner against the
  // default (the default itself unless one beat it by the margin), with the median it had in
  // those rounds, beside the default's.
  EXPECT_EQ(second.best_config, best.record.config);
  EXPECT_EQ(second.best_config, second.retimed[0].config);
  if (second.retimed[0].is_default) {
    EXPECT_DOUBLE_EQ(second.best_s, second.default_s);
  } else {
    EXPECT_DOUBLE_EQ(second.best_s, second.default_s * second.retimed[0].ratio_to_default);
  }
  EXPECT_EQ(second.best_measurements, best.measurements);
  for (const RetimeResult& r : second.retimed) {
    EXPECT_GT(r.ratio_to_default, 0) << r.config.dump();
    if (r.is_default) {
      EXPECT_DOUBLE_EQ(r.ratio_to_default, 1.0);
    }
    if (!second.retimed[0].is_default) {
      EXPECT_LE(second.retimed[0].ratio_to_default, 1 - kVerdictMargin);
    }
  }
}

// Seeds (a sibling task's best) are measured right after the default, in the order given,
// before anything the strategy proposes; the default, configs already measured, repeated,
// pruned or of another space are skipped.
TEST(Tune, SeedsAreMeasuredFirstAfterTheDefault) {
  Workload w = parse_workload("matmul(M=16,N=32,K=16,epilogue=relu)");
  ConfigSpace space(w, host_target());
  LocalBuilder b = builder();
  LocalRunner r = runner();
  TuneOptions o;
  o.trials = 6;
  o.batch = 3;
  o.measure.repeat = 1;
  o.measure.min_repeat_ms = 0;
  o.retime_rounds = 0;
  auto st = make_search_strategy("random", space, 7);
  Collect seen;
  TuneLoop loop(space, *st, b, r, nullptr, o, {&seen});
  nlohmann::json x = {{"tile_m", 2}, {"tile_n", 16}, {"unroll_k", 2}, {"parallel", false}};
  nlohmann::json y = {{"tile_m", 4}, {"tile_n", 8}, {"unroll_k", 1}, {"parallel", true}};
  nlohmann::json def = space.to_config(*space.default_index());
  EXPECT_EQ(loop.seed({x, y, x, def, {{"tile_w", 3}}, {{"tile_m", 1000000}}}), 2);  // x and y
  ASSERT_TRUE(loop.step());  // the default, alone
  ASSERT_EQ(seen.trials.size(), 1u);
  EXPECT_EQ(seen.trials[0].config, def);
  ASSERT_TRUE(loop.step());  // x and y, then one proposal
  ASSERT_EQ(seen.trials.size(), 4u);
  EXPECT_EQ(seen.trials[1].config, complete_config(build_op(w), host_target(), x));
  EXPECT_EQ(seen.trials[2].config, complete_config(build_op(w), host_target(), y));
  EXPECT_NE(seen.trials[3].config, seen.trials[1].config);
  EXPECT_EQ(loop.seed({x}), 0);  // measured already
  EXPECT_EQ(loop.state().trials_done, 4);
}

// A template's seed configs (ScheduleTemplate::seed_configs) are queued when a loop starts:
// at fp16 or bf16, dense_tc.cuda's mma.sync 64 x 64 warp tiles where both operands are 16-bit
// inputs and the blocks fill the GPU; deep pipelines where they do not, at any precision (6 to
// 12 stages: the default deeper and 64 x 64 blocks of K chunks of 64), and on sm_90 its wgmma
// corners (several knobs that must agree, products in flight), those its constraints take;
// conv2d_tc.cuda's K chunks of a filter's taps at any precision; none elsewhere (CPUs).
TEST(Tune, TemplateSeedsAreQueuedWhenTheLoopStarts) {
  LocalBuilder b = builder();
  LocalRunner r = runner();
  TuneOptions o;
  auto queued = [&](const std::string& workload, const Target& t) {
    ConfigSpace space(parse_workload(workload), t);
    for (const nlohmann::json& c : space.template_seeds()) {
      if (c["wgmma"].get<bool>()) {
        EXPECT_TRUE(c["wgmma_in_flight"].get<bool>())
            << c.dump();  // 4 stages, a chunk's products in flight
      } else if (c["stages"].get<int64_t>() > 4) {
        EXPECT_EQ(space.workload().op.rfind("conv2d", 0), std::string::npos) << c.dump();  // inputs
      } else if (c["unroll_k"].get<int64_t>() == 9) {
        EXPECT_EQ(space.workload().op.rfind("conv2d", 0), 0u) << c.dump();  // a 3x3 filter's taps
      } else {
        EXPECT_EQ(4 * c["tiles_m"].get<int64_t>() * c["tiles_n"].get<int64_t>(), 128) << c.dump();
      }
    }
    auto st = make_search_strategy("random", space, 7);
    TuneLoop loop(space, *st, b, r, nullptr, o, {});
    return loop.seeds_queued();
  };
  const Target sm90 = parse_target("cuda -arch=sm_90"), sm80 = parse_target("cuda -arch=sm_80");
  // BERT's 128-row products: the wgmma blocks fit (split along K to fill the GPU); 128 x 256 not
  // where the float32 operands' rounding copies take a lane's registers; no mma.sync seed (too
  // few blocks); two deep pipelines (their tiles copied by cp.async; any precision).
  EXPECT_EQ(queued("matmul(M=128,N=768,K=768,precision=fp16,epilogue=bias)", sm90), 5u);
  EXPECT_EQ(queued("matmul(M=128,N=3072,K=768,dtype=bfloat16,trans_b=1)", sm90), 6u);
  EXPECT_EQ(queued("matmul(M=128,N=3072,K=768,dtype=float16,trans_b=1)", sm80), 2u);
  // 64 rows: the 128-row blocks would be trimmed; K of 40: no whole 64-deep chunk.
  // The default deeper (8 chunks of 32); 64-deep chunks are too few for 6 stages.
  EXPECT_EQ(queued("matmul(M=64,N=256,K=256,precision=fp16)", sm90), 3u);
  EXPECT_EQ(queued("matmul(M=128,N=128,K=40,precision=fp16)", sm90), 0u);
  // A large GEMM of 16-bit operands: both mma.sync seeds, on sm_80 too; no deep pipelines (its
  // blocks fill the GPU).
  EXPECT_EQ(queued("matmul(M=4096,N=4096,K=4096,dtype=float16,trans_b=1)", sm90), 6u);
  EXPECT_EQ(queued("matmul(M=4096,N=4096,K=4096,dtype=float16,trans_b=1)", sm80), 2u);
  // sm_80: float32 tiles of 64 x 64 x 64 at 6 stages (209 KiB) past its 163 KiB; the default
  // deeper.
  EXPECT_EQ(queued("matmul(M=128,N=768,K=768,precision=fp16)", sm80), 1u);
  EXPECT_EQ(queued("matmul(M=128,N=768,K=768,precision=tf32)", sm90), 2u);
  // A 3x3 convolution: K chunks of its 9 taps (at tf32 and on sm_80 too), beside wgmma's on sm_90.
  EXPECT_EQ(queued("conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,precision=tf32)", sm90), 1u);
  EXPECT_EQ(queued("conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,dtype=float16)", sm80), 1u);
  EXPECT_EQ(queued("conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=1,S=1,dtype=float16)", sm80), 0u);
  EXPECT_EQ(queued("matmul(M=128,N=768,K=768)", host_target()), 0u);
}

// A tuner killed with -9 leaves its build folder: the next builder removes the folders of
// processes that are gone, and keeps those of live ones (its own, another tuner's).
TEST(Builder, RemovesTheBuildFoldersOfDeadTuners) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  namespace fs = std::filesystem;
  fs::path dead = "/tmp/tunefarm-build-" + std::to_string(child) + "-test", live =
      "/tmp/tunefarm-build-" + std::to_string(getpid()) + "-test", other = "/tmp/tunefarm-build-x1-test";
  for (const fs::path& p : {dead, live, other}) {
    fs::create_directories(p);
    std::ofstream(p / "b1_0.so") << "x";
  }
  {
    LocalBuilder b = builder();
    EXPECT_FALSE(fs::exists(dead));
    EXPECT_TRUE(fs::exists(live));
    EXPECT_TRUE(fs::exists(other));  // not a name the builder makes
  }
  fs::remove_all(live);
  fs::remove_all(other);
}

TEST(Tune, ASpaceSmallerThanTheTrialsRunsDry) {
  Workload w = parse_workload("depthwise_conv2d_nchw(N=1,C=2,H=4,W=4,R=3,S=3)");
  ConfigSpace space(w, host_target());
  LocalBuilder b = builder();
  LocalRunner r = runner();
  TuneOptions o;
  o.trials = static_cast<int>(space.valid_size()) + 10;
  o.measure.repeat = 2;
  o.measure.min_repeat_ms = 0;
  o.retime_rounds = 1;
  auto st = make_search_strategy("grid", space, 1);
  TuneSummary s = tune(space, *st, b, r, nullptr, o, {});
  EXPECT_EQ(s.stop_reason, StopReason::Exhausted);
  EXPECT_EQ(s.state.trials_done, static_cast<int>(space.valid_size()));
}

// Wall-clock intervals of calls, shared by the two wrappers below.
struct Intervals {
  std::mutex mu;
  std::vector<std::pair<double, double>> builds, runs;
  bool files_missing = false;
  // Whether any build ran while any measurement did.
  bool overlapped() {
    std::lock_guard<std::mutex> l(mu);
    for (auto [b0, b1] : builds)
      for (auto [r0, r1] : runs) if (std::min(b1, r1) > std::max(b0, r0)) return true;
    return false;
  }
};

class RecordingBuilder : public Builder {
 public:
  // `workers`: the parallelism it reports (0: the inner builder's).
  RecordingBuilder(Builder& inner, Intervals& iv, int workers = 0) : inner_(inner), iv_(iv), workers_(workers) {}
  std::vector<BuildResult> build(const Workload& w, const Target& t, const std::vector<json>& configs) override {
    double start = tf::steady_seconds();
    std::vector<BuildResult> r = inner_.build(w, t, configs);
    std::lock_guard<std::mutex> l(iv_.mu);
    iv_.builds.emplace_back(start, tf::steady_seconds());
    return r;
  }
  int parallelism() const override { return workers_ > 0 ? workers_ : inner_.parallelism(); }

 private:
  Builder& inner_;
  Intervals& iv_;
  int workers_;
};

// Measures on this machine, but says (as a GPU board's runner would) that builds may overlap,
// and takes long enough that they do; checks each library is still on disk when measured.
class SlowRunner : public Runner {
 public:
  SlowRunner(LocalRunner& inner, Intervals& iv, bool overlaps, int boards)
      : inner_(inner), iv_(iv), overlaps_(overlaps), boards_(boards) {}
  std::string device_key() const override { return "local"; }
  bool overlaps_builds() const override { return overlaps_; }
  int parallelism() const override { return boards_; }
  std::vector<RunResult> run(MeasureContext& ctx, const std::vector<BuildResult>& builds) override {
    double start = tf::steady_seconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    for (const BuildResult& b : builds) {
      if (b.ok() && !fs::exists(b.so_path)) iv_.files_missing = true;
    }
    std::vector<RunResult> r = inner_.run(ctx, builds);
    std::lock_guard<std::mutex> l(iv_.mu);
    iv_.runs.emplace_back(start, tf::steady_seconds());
    return r;
  }

 private:
  LocalRunner& inner_;
  Intervals& iv_;
  bool overlaps_;
  int boards_;
};

// Where the runner allows it (GPU boards), a batch's next candidates build while the last ones
// measure, in chunks that keep every builder worker and every board busy, at most half the
// batch (a builder of 16 workers still overlaps a batch of 8); each result stays with its
// config, and the state says how long they overlapped. Where it does not (this CPU, CPU
// boards), nothing builds while something measures.
TEST(Tune, BuildsOverlapMeasurementsOnlyWhereTheRunnerAllows) {
  Workload w = parse_workload("matmul(M=32,N=32,K=16)");
  ConfigSpace space(w, host_target());
  LocalBuilderOptions bo;
  bo.worker_path = TF_BUILD_WORKER;
  bo.workers = 2;
  LocalBuilder lb(bo);
  LocalRunner lr = runner();
  struct Case {
    bool overlaps;
    int boards;
    size_t runs;  // the default alone, then the batch of eight in chunks
    int workers;  // the builder's parallelism as it reports it (0: its two workers)
  };
  for (const Case& c :
       {Case{true, 1, 1 + 4, 0}, Case{true, 4, 1 + 2, 0}, Case{false, 1, 2, 0}, Case{true, 1, 1 + 2, 16}}) {
    const bool overlaps = c.overlaps;
    SCOPED_TRACE(str(c.boards, " boards, ", c.workers, " workers"));
    Intervals iv;
    RecordingBuilder b(lb, iv, c.workers);
    SlowRunner r(lr, iv, overlaps, c.boards);
    TuneOptions o;
    o.trials = 9;
    o.batch = 8;
    o.measure.repeat = 2;
    o.measure.min_repeat_ms = 0;
    o.retime_rounds = 0;
    o.max_spread = 1e9;  // no re-measuring of disturbed candidates: the runs counted below are all
    Collect seen;
    auto st = make_search_strategy("random", space, 4);
    TuneSummary s = tune(space, *st, b, r, nullptr, o, {&seen});
    EXPECT_EQ(s.state.trials_done, 9);
    EXPECT_EQ(s.state.errors, 0);
    EXPECT_FALSE(iv.files_missing) << "a library was deleted before it was measured";
    for (const Trial& t : seen.trials) {
      EXPECT_EQ(t.build.config, t.config);
      EXPECT_TRUE(t.result.ok()) << t.result.error_msg;
    }
    EXPECT_EQ(iv.overlapped(), overlaps) << "overlaps_builds " << overlaps;
    // Chunks of the builder's two workers, or of the runner's four boards, or half the batch.
    EXPECT_EQ(iv.runs.size(), c.runs);
    if (overlaps) {
      EXPECT_GT(s.state.overlap_s, 0);
    } else {
      EXPECT_EQ(s.state.overlap_s, 0);
    }
    EXPECT_GT(s.state.build_s, 0);
    EXPECT_GE(s.state.measure_s, 0.4 * static_cast<double>(iv.runs.size()));
    EXPECT_LE(s.state.build_s + s.state.measure_s - s.state.overlap_s, s.state.elapsed_s + 1e-3);
    // The measurements' parts: on this machine nothing is uploaded; each runner process loads
    // its library and times it, within the measuring (one at a time here).
    EXPECT_EQ(s.state.measured, 9);
    EXPECT_EQ(s.state.upload_s, 0);
    EXPECT_GT(s.state.load_s, 0);
    EXPECT_GT(s.state.run_s, 0);
    EXPECT_LE(s.state.load_s + s.state.run_s, s.state.measure_s);
  }
}

// Records when the inner strategy proposed and what it had observed by then.
class RecordingStrategy : public SearchStrategy {
 public:
  explicit RecordingStrategy(SearchStrategy& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  std::vector<uint64_t> propose(size_t n) override {
    const double start = tf::steady_seconds();
    std::vector<uint64_t> r = inner_.propose(n);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a cost model's time
    std::lock_guard<std::mutex> l(mu);
    proposals.emplace_back(start, tf::steady_seconds());
    for (uint64_t i : r) EXPECT_TRUE(proposed.insert(i).second) << "proposed twice: " << i;
    return r;
  }
  void observe(const std::vector<Observation>& r) override {
    std::lock_guard<std::mutex> l(mu);
    inner_.observe(r);
  }
  std::mutex mu;
  std::vector<std::pair<double, double>> proposals;
  std::set<uint64_t> proposed;

 private:
  SearchStrategy& inner_;
};

// Where the runner's timings cannot be disturbed by this machine's work (GPU boards), the
// strategy proposes the next batch while a batch measures; every proposal is measured once, in
// order, and the trials come out as asked. Elsewhere, or with search_ahead false (tune
// --no-search-ahead), nothing is proposed while something measures.
TEST(Tune, TheNextBatchIsProposedWhileABatchMeasuresOnlyWhereTheRunnerAllows) {
  Workload w = parse_workload("matmul(M=32,N=32,K=16)");
  ConfigSpace space(w, host_target());
  LocalBuilder lb = builder();
  LocalRunner lr = runner();
  for (auto [runner_overlaps, ahead] :
       {std::pair{true, true}, std::pair{false, true}, std::pair{true, false}}) {
    const bool overlaps = runner_overlaps && ahead;
    SCOPED_TRACE(str("overlaps_builds ", runner_overlaps, ", search_ahead ", ahead));
    Intervals iv;
    RecordingBuilder b(lb, iv);
    SlowRunner r(lr, iv, runner_overlaps, 1);
    TuneOptions o;
    o.search_ahead = ahead;
    o.trials = 21;  // the default alone, then batches of 8, 8 and 4
    o.batch = 8;
    o.measure.repeat = 2;
    o.measure.min_repeat_ms = 0;
    o.retime_rounds = 0;
    o.max_spread = 1e9;
    Collect seen;
    auto inner =
        make_search_strategy("xgb", space, 4);  // its cost model fits in the proposing thread
    RecordingStrategy st(*inner);
    TuneSummary s = tune(space, st, b, r, nullptr, o, {&seen});
    EXPECT_EQ(s.state.trials_done, 21);
    EXPECT_EQ(s.state.errors, 0);
    std::set<uint64_t> measured;
    for (const Trial& t : seen.trials) {
      EXPECT_TRUE(measured.insert(t.index).second) << "measured twice: " << t.config.dump();
      EXPECT_TRUE(t.index == space.default_index() || st.proposed.count(t.index))
          << t.config.dump();
    }
    EXPECT_EQ(measured.size(), 21u);
    // The proposals beside the measuring (its builds or runs): batch 1's during the default's,
    // 2's during batch 1's, 3's during batch 2's.
    int beside = 0;
    for (auto [p0, p1] : st.proposals) {
      bool any = false;
      for (const auto* calls : {&iv.builds, &iv.runs})
        for (auto [c0, c1] : *calls) any = any || std::min(p1, c1) > std::max(p0, c0);
      beside += any ? 1 : 0;
    }
    EXPECT_EQ(st.proposals.size(), 3u);
    if (overlaps) {
      EXPECT_EQ(beside, 3);
      EXPECT_GE(s.state.search_ahead_s, 0.3);
      EXPECT_EQ(st.proposed.size(), 20u) << "nothing proposed beyond the trials";
    } else {
      EXPECT_EQ(beside, 0);
      EXPECT_EQ(s.state.search_ahead_s, 0);
    }
  }
}

// Measures on this machine (a real, checked run), then reports each config's time as scripted:
// the first config it sees (the default) 1 ms, the second `second` ms, every other 2 ms.
class ScriptedTimes : public Runner {
 public:
  ScriptedTimes(LocalRunner& inner, double second) : inner_(inner), second_(second) {}
  std::string device_key() const override { return "local"; }
  std::vector<RunResult> run(MeasureContext& ctx, const std::vector<BuildResult>& builds) override {
    std::vector<RunResult> r = inner_.run(ctx, builds);
    for (size_t k = 0; k < r.size(); ++k) {
      const std::string c = builds[k].config.dump();
      if (!ms_.count(c)) ms_[c] = ms_.empty() ? 1.0 : ms_.size() == 1 ? second_ : 2.0;
      if (r[k].ok()) r[k].samples_s.assign(r[k].samples_s.size(), ms_[c] / 1e3);
    }
    return r;
  }
  std::map<std::string, double> ms_;

 private:
  LocalRunner& inner_;
  double second_;
};

// The re-timing is sequential: after a round, configs whose ratio to the default is above
// retime_drop are not timed again, and it ends once only the default is left; with
// retime_drop 0 every round times every config.
TEST(Tune, TheRetimingStopsTimingConfigsThatCannotWin) {
  Workload w = parse_workload("matmul(M=48,N=40,K=32)");
  ConfigSpace space(w, host_target());
  LocalBuilder b = builder();
  LocalRunner lr = runner();
  struct Case {
    double second;     // the second config's ms (the default's is 1, the others' 2)
    double drop;       // retime_drop
    size_t retimings;  // measurements in the re-timing
    int dropped;
    bool default_wins;
  };
  // The re-timed: the search's three best (the default among them) and the default.
  for (const Case& c : {Case{0.9, 1.25, 3 + 2 + 2, 1, false}, Case{1.1, 1.25, 3 + 2 + 2, 1, true},
                        Case{2.5, 1.25, 3, 2, true}, Case{2.5, 0, 3 * 3, 0, true}}) {
    SCOPED_TRACE(str("second ", c.second, " ms, retime_drop ", c.drop));
    ScriptedTimes r(lr, c.second);
    TuneOptions o;
    o.trials = 12;  // a few build to the same code, never to fewer than three
    o.batch = 11;
    o.measure.repeat = 2;
    o.measure.min_repeat_ms = 0;
    o.retime_warmup_ms = 0;
    o.retime_drop = c.drop;
    o.cut_factor = 0;
    o.max_spread = 1e9;
    Collect seen;
    auto st = make_search_strategy("random", space, 4);
    TuneSummary s = tune(space, *st, b, r, nullptr, o, {&seen});
    size_t retimings = 0;
    for (const Trial& t : seen.trials) retimings += t.retime ? 1 : 0;
    EXPECT_EQ(retimings, c.retimings);
    EXPECT_EQ(s.state.retime_dropped, c.dropped);
    ASSERT_EQ(s.retimed.size(), 3u);
    EXPECT_EQ(s.retimed[0].is_default, c.default_wins);
    const size_t rounds =
        c.retimings == 3 ? 1 : 3;  // the default's: as long as anything else is timed
    for (const RetimeResult& rt : s.retimed) {
      const double ms = r.ms_.at(rt.config.dump());
      const bool dropped = c.drop > 0 && ms / 1.0 > c.drop;
      EXPECT_EQ(rt.medians_s.size(), dropped ? 1 : rounds)
          << rt.config.dump() << " " << ms << " ms";
      EXPECT_NEAR(rt.ratio_to_default, ms, 1e-9);
    }
    if (!c.default_wins) {
      EXPECT_NEAR(s.best_s, 0.9e-3, 1e-12);
    } else {
      EXPECT_EQ(s.best_config, space.to_config(*space.default_index()));
    }
  }
}

TEST(Measure, EveryErrorCodeIsADatabaseErrorCode) {
  const auto& codes = db::error_codes();
  for (int c = tunefarm::v1::ErrorCode_MIN; c <= tunefarm::v1::ErrorCode_MAX; ++c) {
    if (!tunefarm::v1::ErrorCode_IsValid(c)) continue;
    std::string name = error_code_name(static_cast<tunefarm::v1::ErrorCode>(c));
    EXPECT_NE(std::find(codes.begin(), codes.end(), name), codes.end()) << name;
    EXPECT_EQ(name, tunefarm::v1::ErrorCode_Name(static_cast<tunefarm::v1::ErrorCode>(c)) == "OK"
                        ? "ok"
                        : [&] {
                            std::string n = tunefarm::v1::ErrorCode_Name(static_cast<tunefarm::v1::ErrorCode>(c));
                            for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                            return n;
                          }());
  }
}

// Ctrl-C on the command line: exit 130, what was measured is on record, and the same
// command resumes without measuring those configs again.
// tune --flush: every sample starts with the caches overwritten, and the records say so
// (with --number 1 and no minimum duration, every call is such a sample).
TEST(TuneCli, FlushIsRecordedWithEachMeasurement) {
  std::string dir = temp_dir();
  for (bool flush : {true, false}) {
    std::string db = dir + (flush ? "/flush.db" : "/warm.db");
    std::string cmd = std::string(TF_TUNEFARM) + " tune -w 'matmul(M=16,N=16,K=16)' --local --trials 3 --repeat 2 " +
                      "--number 1 --min-repeat-ms 0 --retime-rounds 0 --strategy random --db " + db +
                      (flush ? " --flush" : "") + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto database = db::open_database(db, db::OpenMode::ReadOnly);
    std::vector<db::MeasureRecord> records = database->history({});
    ASSERT_FALSE(records.empty());
    for (const auto& r : records) EXPECT_EQ(r.settings.flush, flush);
  }
}

// --json: each measurement says where its time went and how it was sampled, and the summary
// splits the re-timing at the end from the search (whose rate is the higher one).
TEST(TuneCli, TimeReportSplitsTheRetimingFromTheSearch) {
  std::string dir = temp_dir(), out = dir + "/time.jsonl";
  std::string cmd =
      std::string(TF_TUNEFARM) + " tune -w 'matmul(M=32,N=32,K=32)' --local --trials 6 --batch 3 " +
      "--repeat 2 --min-repeat-ms 1 --retime-top 2 --retime-rounds 2 --retime-warmup-ms 20 " +
      "--retime-drop 0 --strategy random --no-db --json > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  json start, done;
  int trials = 0, retimes = 0;
  for (std::string line; std::getline(f, line);) {
    json e = json::parse(line);
    if (e["event"] == "start") start = e;
    if (e["event"] == "done") done = e;
    if (e["event"] != "trial" && e["event"] != "retime") continue;
    (e["event"] == "trial" ? trials : retimes) += 1;
    EXPECT_GT(e["run_ms"].get<double>(), 0) << line;
    EXPECT_GE(e["load_ms"].get<double>(), 0) << line;
    if (e["error_code"] == "ok") {
      EXPECT_GE(e["number"].get<int>(), 1) << line;
      EXPECT_GE(e["warmup_calls"].get<int>(), 2) << line;  // at least two calls, always
    }
    // The re-timing's warm-up lasts --retime-warmup-ms at least.
    if (e["event"] == "retime") {
      EXPECT_GE(e["run_ms"].get<double>(), 20) << line;
    }
  }
  ASSERT_TRUE(done.is_object());
  EXPECT_EQ(start.value("retime_warmup_ms", 0.0), 20) << start.dump();
  EXPECT_GE(trials, 6);
  EXPECT_GE(retimes, 4);  // 2 rounds of the best 2 (and the default, unless it is one of them)
  const json& t = done["time"];
  const double elapsed = done["elapsed_s"].get<double>(), retime = t.at("retime_s").get<double>();
  EXPECT_GT(retime, 0) << t.dump();
  EXPECT_LT(retime, elapsed) << t.dump();
  EXPECT_EQ(t.at("retime_dropped").get<int>(), 0)
      << t.dump();  // --retime-drop 0: every round times all
  EXPECT_EQ(t.at("search_ahead_s").get<double>(), 0)
      << t.dump();  // nothing searches beside a CPU's timing
  EXPECT_NEAR(t.at("search_candidates_per_s").get<double>(), 6 / (elapsed - retime), 1e-6 * 6 / (elapsed - retime))
      << t.dump();
  EXPECT_GT(t.at("search_candidates_per_s").get<double>(), t.at("candidates_per_s").get<double>()) << t.dump();
}

// The re-timing's warm-up by default: 300 ms on CPUs (a fresh runner process is slow for its
// first 100-300 ms), 50 on GPUs (their board's one measuring process is warm from the search).
TEST(Tune, RetimingWarmsUpByTheTargetUnlessTold) {
  EXPECT_EQ(retime_warmup_ms_for(parse_target("llvm")), 300);
  EXPECT_EQ(retime_warmup_ms_for(parse_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72")), 300);
  EXPECT_EQ(retime_warmup_ms_for(parse_target("cuda -arch=sm_90")), 50);
  EXPECT_EQ(retime_warmup_ms_for(parse_target("rocm -mcpu=gfx90a")), 50);
  // A local tune without the flag says 300 and re-times with it (each re-timing runs that long).
  // (The two best and the default: with --retime-top 1 a default that came out best would be
  // the only config, and nothing would be re-timed.)
  std::string out = temp_dir() + "/warm.jsonl";
  std::string cmd = std::string(TF_TUNEFARM) + " tune -w 'matmul(M=16,N=16,K=16)' --local --trials 3 --batch 3 " +
                    "--repeat 1 --min-repeat-ms 1 --retime-top 2 --retime-rounds 1 --strategy random --no-db --json > " +
                    out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  int retimes = 0;
  for (std::string line; std::getline(f, line);) {
    json e = json::parse(line);
    if (e["event"] == "start") {
      EXPECT_EQ(e.value("retime_warmup_ms", 0.0), 300) << line;
    }
    if (e["event"] != "retime") continue;
    ++retimes;
    EXPECT_GE(e["run_ms"].get<double>(), 300) << line;
  }
  EXPECT_GE(retimes, 1);
}

// Configs that build to the code of a config measured before (a 3x3 NCHWc convolution's knobs
// that change nothing here: unroll of a 1-wide tile, chunk of a small input) are not measured
// again: each is a same_code event naming its twin, counts as a trial, and leaves no record.
// Each pair compiles, on its own, to the same library byte for byte.
TEST(TuneCli, ConfigsBuiltToMeasuredCodeAreNotMeasuredAgain) {
  const std::string dir = temp_dir(), db = dir + "/same.db", out = dir + "/same.jsonl";
  const std::string w = "conv2d_nchwc(N=1,C=16,H=16,W=16,K=16,R=3,S=3,pad=1,ic_block=16,oc_block=16)";
  std::string cmd = std::string(TF_TUNEFARM) + " tune -w '" + w + "' --local --trials 12 --strategy grid --repeat 2 " +
                    "--min-repeat-ms 1 --retime-rounds 0 --json --db " + db + " > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  json done;
  std::vector<std::pair<json, json>> pairs;
  std::set<std::string> measured;
  int trials = 0, remeasured = 0;
  for (std::string line; std::getline(f, line);) {
    json e = json::parse(line);
    if (e["event"] == "done") done = e;
    if (e["event"] == "trial") {
      (e["remeasure"].get<bool>() ? remeasured : trials) += 1;
      measured.insert(e["config"].dump());
    }
    if (e["event"] == "same_code") pairs.push_back({e["config"], e["same_code_as"]});
  }
  ASSERT_TRUE(done.is_object());
  ASSERT_FALSE(pairs.empty()) << "no same-code config among the first 12 of the grid";
  EXPECT_EQ(done["same_code"].get<int>(), static_cast<int>(pairs.size()));
  EXPECT_EQ(trials + static_cast<int>(pairs.size()), 12);
  EXPECT_EQ(done["trials"].get<int>(), 12);
  // Only what was measured is on record.
  EXPECT_EQ(done["records"].get<int>(), trials + remeasured);
  auto database = db::open_database(db, db::OpenMode::ReadOnly);
  EXPECT_EQ(database->history({}).size(), static_cast<size_t>(trials + remeasured));
  for (const auto& [config, twin] : pairs) {
    EXPECT_NE(config, twin);
    EXPECT_EQ(measured.count(twin.dump()), 1u) << "its twin was not measured: " << twin.dump();
    EXPECT_EQ(measured.count(config.dump()), 0u) << config.dump();
  }
  const auto& [config, twin] = pairs.front();
  std::string libs[2];
  for (int k = 0; k < 2; ++k) {
    const std::string so = dir + "/same" + std::to_string(k) + ".so";
    const std::string c = (k == 0 ? config : twin).dump();
    ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w '" + w + "' --no-db -c '" + c + "' -o " + so +
                           " > /dev/null").c_str()),
              0);
    libs[k] = read_file(so);
  }
  EXPECT_FALSE(libs[0].empty());
  EXPECT_EQ(libs[0], libs[1]) << config.dump() << " vs " << twin.dump();
}

TEST(TuneCli, InterruptCommitsAndTheSameCommandResumes) {
  std::string dir = temp_dir(), db = dir + "/cli.db", out = dir + "/cli.jsonl";
  std::string cmd = std::string(TF_TUNEFARM) + " tune -w 'matmul(M=40,N=24,K=16)' --local --batch 4 " +
                    "--repeat 2 --min-repeat-ms 1 --strategy random --seed 5 --json --db " + db;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd + " --trials 40 > " + out + " 2>/dev/null").c_str(), nullptr);
    _exit(127);
  }
  auto events = [&] {
    std::ifstream f(out);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  for (int i = 0; i < 600 && events().find("\"event\":\"progress\"") == std::string::npos; ++i) usleep(20000);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130) << events();
  auto database = db::open_database(db, db::OpenMode::ReadOnly);
  std::vector<db::MeasureRecord> first = database->history({});
  ASSERT_FALSE(first.empty());
  EXPECT_LT(first.size(), 40u);
  EXPECT_EQ(database->runs().at(0).status, "cancelled");
  std::set<std::string> measured;
  for (const auto& r : first) measured.insert(r.config_hash());
  database.reset();
  ASSERT_EQ(std::system((cmd + " --trials 8 --retime-rounds 0 > " + out).c_str()), 0);
  std::string resumed = events();
  EXPECT_NE(resumed.find("\"known\":" + std::to_string(measured.size())), std::string::npos) << resumed;
  std::stringstream lines(resumed);
  for (std::string line; std::getline(lines, line);) {
    json e = json::parse(line);
    if (e["event"] == "trial") {
      EXPECT_EQ(measured.count(db::config_hash(e["config"])), 0u) << line;
    }
  }
}

TEST(Tune, DisturbedMeasurementsAreSpotted) {
  EXPECT_FALSE(disturbed({1.0, 1.02, 0.99}, 0.1));
  EXPECT_TRUE(disturbed({1.0, 1.5, 0.99}, 0.1));
  EXPECT_FALSE(disturbed({1.0}, 0.1));
}

}  // namespace
}  // namespace tf
