// The cost model with real parts: features of real lowered kernels, real XGBoost fits, the
// annealer on a synthetic landscape, transfer from a real SQLite file, and `--strategy xgb`
// end to end with the board's runner, including resume.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "base/error.h"
#include "costmodel/features.h"
#include "costmodel/transfer.h"
#include "costmodel/xgboost_model.h"
#include "db/database.h"
#include "tests/sanitized.h"
#include "tests/temp_dir.h"
#include "tuner/builder.h"
#include "tuner/cost_model_search.h"
#include "tuner/runner.h"
#include "tuner/tune.h"
#include "tuner/tuning_curve.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using costmodel::kNumFeatures;

std::string temp_dir() {
  static tf::testing::TempDir dir("tunefarm-costmodel");
  return dir.path();
}

Target x86_avx512() { return parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512"); }

// ---- Features ---------------------------------------------------------------------------

TEST(Features, SameIrSameFeaturesAndKnobsThatChangeTheLoopsChangeThem) {
  ConfigSpace s(parse_workload("matmul(M=97,N=131,K=67)"), x86_avx512());
  json def = s.to_config(*s.default_index());
  std::vector<float> a = costmodel::config_features(s.graph(), s.target(), def);
  ASSERT_EQ(a.size(), kNumFeatures);
  ASSERT_EQ(costmodel::feature_names().size(), kNumFeatures);
  EXPECT_EQ(a, costmodel::config_features(s.graph(), s.target(), def));
  for (float v : a) EXPECT_TRUE(std::isfinite(v));
  for (const auto& [knob, value] : std::vector<std::pair<std::string, json>>{
           {"tile_m", 4}, {"tile_n", 16}, {"unroll_k", 8}, {"pack_b", !def["pack_b"].get<bool>()}, {"order", "mn"},
           {"vectorize", false}, {"unroll", false}, {"parallel", false}}) {
    json c = def;
    c[knob] = value;
    EXPECT_NE(a, costmodel::config_features(s.graph(), s.target(), c)) << knob << " changed nothing";
  }
  // What the features say is what the loops are: the hottest statement runs M*N*K times
  // (modulo tails), in a nest whose innermost loop is the 32-lane vectorized one.
  const auto& names = costmodel::feature_names();
  auto at = [&](const std::string& n) { return a[std::find(names.begin(), names.end(), n) - names.begin()]; };
  EXPECT_EQ(at("loop0.vectorized"), 1.0f);
  EXPECT_NEAR(at("loop0.extent"), std::log2(33.0), 1e-5);
  EXPECT_NEAR(at("flops"), std::log2(1.0 + 2.0 * 97 * 131 * 67), 1e-3);
  EXPECT_GT(at("parallel.extent"), 0.0f);
  EXPECT_EQ(at("implicit.vector"), 0.0f);  // the innermost loop is vectorized by the schedule
  // A plain scalar column loop is one LLVM vectorizes itself: the store and the loads of B
  // move contiguously along it, A is invariant, and the K tail's guard (67 = 16 x 4 + 3 with
  // unroll_k 4) does not depend on it. 16 lanes on AVX-512: 32 columns -> log2(1 + 32/16).
  json scalar = def;
  scalar["vectorize"] = false;
  scalar["unroll"] = false;
  scalar["unroll_k"] = 4;
  std::vector<float> f = costmodel::config_features(s.graph(), s.target(), scalar);
  float implicit = f[std::find(names.begin(), names.end(), "implicit.vector") - names.begin()];
  EXPECT_NEAR(implicit, std::log2(1.0 + 32.0 / 16), 1e-5);
  EXPECT_GT(f[std::find(names.begin(), names.end(), "hot.guards") - names.begin()], 0.0f) << "no K tail guard";
  // Features are about loops, not names: a conv layer and a depthwise one lower too.
  for (const char* w : {"conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1)",
                        "depthwise_conv2d_nchw(N=1,C=8,H=9,W=9,R=3,S=3,stride=2,pad=1)",
                        "batch_matmul(B=3,M=17,N=33,K=9)", "conv2d_nhwc(N=1,H=7,W=7,C=8,K=16,R=1,S=1)"}) {
    ConfigSpace c(parse_workload(w), x86_avx512());
    std::vector<float> f = costmodel::config_features(c.graph(), c.target(), c.to_config(*c.default_index()));
    EXPECT_EQ(f.size(), kNumFeatures) << w;
  }
  // Prefetching changes no loop around the hot store: its own feature counts the prefetches.
  {
    ConfigSpace c(parse_workload("conv2d_nchwc(N=1,C=64,H=7,W=7,K=64,R=1,S=1,ic_block=16,oc_block=16)"), x86_avx512());
    json on = c.to_config(*c.default_index()), off = on;
    on["prefetch"] = true;
    off["prefetch"] = false;
    std::vector<float> p = costmodel::config_features(c.graph(), c.target(), on);
    std::vector<float> q = costmodel::config_features(c.graph(), c.target(), off);
    const size_t at = std::find(names.begin(), names.end(), "prefetches") - names.begin();
    EXPECT_GT(p[at], 0.0f);
    EXPECT_EQ(q[at], 0.0f);
  }
  // Tensor-core kernels (warp-level products after the tensorize pass) have features too, and
  // their knobs move them.
  ConfigSpace tc(parse_workload("matmul(M=256,N=128,K=64,precision=fp16)"), parse_target("cuda -arch=sm_90"));
  json tc_def = tc.to_config(*tc.default_index());
  std::vector<float> t0 = costmodel::config_features(tc.graph(), tc.target(), tc_def);
  ASSERT_EQ(t0.size(), kNumFeatures);
  for (float v : t0) EXPECT_TRUE(std::isfinite(v));
  for (const auto& [knob, value] : std::vector<std::pair<std::string, json>>{
           {"tiles_m", 1}, {"unroll_k", 4}, {"stages", 1}, {"warps_m", 1}, {"warps_n", 1}, {"split_k", 2},
           {"half_tiles", true}, {"shared", false}}) {
    json c = tc_def;
    c[knob] = value;
    if (knob == "shared") c["stages"] = 1;
    EXPECT_NE(t0, costmodel::config_features(tc.graph(), tc.target(), c)) << knob << " changed nothing";
  }
  // Hopper's wgmma (one product per warpgroup and 16 of K): the same tiles with and without it.
  json wg = tc_def;
  const json warpgroups = {{"warps_m", 4}, {"warps_n", 1}, {"tiles_m", 1}, {"tiles_n", 8},       {"unroll_k", 2},
                           {"stages", 2},  {"split_k", 1}, {"shared", true}, {"half_tiles", true}};
  for (const auto& [knob, value] : warpgroups.items()) wg[knob] = value;
  wg["wgmma"] = false;
  std::vector<float> without = costmodel::config_features(tc.graph(), tc.target(), wg);
  wg["wgmma"] = true;
  std::vector<float> with = costmodel::config_features(tc.graph(), tc.target(), wg);
  for (float v : with) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NE(without, with) << "wgmma changed nothing";
}

// ---- The model --------------------------------------------------------------------------

// Rows whose cost is a known function of a few features: the model must learn the order.
struct Synthetic {
  std::vector<std::vector<float>> rows;
  std::vector<double> costs;
};
Synthetic synthetic(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0, 4);
  Synthetic s;
  for (size_t i = 0; i < n; ++i) {
    std::vector<float> r(kNumFeatures);
    for (float& v : r) v = u(rng);
    s.costs.push_back(1 + r[3] + 0.5 * (r[20] - 2) * (r[20] - 2) + (r[40] > 2 ? 3 : 0));
    s.rows.push_back(std::move(r));
  }
  return s;
}

double pairwise_accuracy(const std::vector<float>& scores, const std::vector<double>& costs) {
  size_t right = 0, all = 0;
  for (size_t i = 0; i < costs.size(); ++i) {
    for (size_t j = i + 1; j < costs.size(); ++j) {
      if (costs[i] == costs[j]) continue;
      ++all;
      right += (scores[i] > scores[j]) == (costs[i] < costs[j]);
    }
  }
  return static_cast<double>(right) / static_cast<double>(all);
}

// A GPU GEMM with shared tiles: the cooperative copies bind the block's threads again inside
// the threads' loops. Counted as loops of their own, they multiplied the copy's iterations by
// the block's size and made it the hottest statement, so the features described a copy and
// missed the register tile's unrolling (82% of unroll moves unseen on BERT's 128 x 768 x 768,
// bench_costmodel blind). The hottest statement is the products, run M*N*K times.
TEST(Features, GpuCopiesInsideTheBlocksThreadsAreNotLoopsOfTheirOwn) {
  ConfigSpace s(parse_workload("matmul(M=128,N=768,K=768)"), parse_target("cuda -arch=sm_90"));
  const json c = {{"block_k", 8}, {"lanes_n", 8},  {"shared", true}, {"split_k", 4},    {"stages", 2},   {"tile_m", 4},
                  {"tile_n", 4},  {"unroll", true}, {"vectorize", true}, {"warps_m", 4}, {"warps_n", 2}};
  ASSERT_TRUE(s.index_of(c) && s.valid(*s.index_of(c))) << s.why_pruned(*s.index_of(c));
  const auto& names = costmodel::feature_names();
  std::vector<float> f = costmodel::config_features(s.graph(), s.target(), c);
  auto at = [&](const std::vector<float>& v, const std::string& n) {
    return v[std::find(names.begin(), names.end(), n) - names.begin()];
  };
  EXPECT_NEAR(at(f, "iterations.hot"), std::log2(1.0 + 128.0 * 768 * 768), 1e-3);
  EXPECT_EQ(at(f, "hot.float_ops"), 2.0f);  // the product and the sum
  EXPECT_LT(at(f, "iterations.other"), at(f, "iterations.hot"));
  json rolled = c;
  rolled["unroll"] = false;
  std::vector<float> g = costmodel::config_features(s.graph(), s.target(), rolled);
  EXPECT_NE(f, g);
  EXPECT_GT(at(f, "unrolled.body"), at(g, "unrolled.body"));
}

TEST(XGBoostModel, LearnsAKnownRankingAndRoundTripsThroughAFile) {
  for (const std::string& objective : costmodel::xgboost_objectives()) {
    costmodel::TrainingSet train;
    for (uint64_t g = 0; g < 6; ++g) {
      Synthetic s = synthetic(100, g);
      train.add_group(s.rows, s.costs);
    }
    ASSERT_EQ(train.rows(), 600u);
    costmodel::XGBoostOptions o;
    o.objective = objective;
    costmodel::XGBoostModel m(o);
    EXPECT_FALSE(m.trained());
    m.fit(train);
    Synthetic test = synthetic(100, 99);
    std::vector<float> flat;
    for (const auto& r : test.rows) flat.insert(flat.end(), r.begin(), r.end());
    std::vector<float> scores = m.predict(flat, test.rows.size());
    EXPECT_GT(pairwise_accuracy(scores, test.costs), 0.85) << objective;

    std::string path = temp_dir() + "/model-" + std::to_string(objective.size()) + ".json";
    m.save(path);
    costmodel::XGBoostModel loaded;
    loaded.load(path);
    EXPECT_EQ(loaded.predict(flat, test.rows.size()), scores) << objective;
  }
}

TEST(XGBoostModel, FailuresRankLastAndGroupsWithoutACorrectRowAreDropped) {
  costmodel::TrainingSet set;
  set.add_group({std::vector<float>(kNumFeatures, 1), std::vector<float>(kNumFeatures, 2)}, {INFINITY, 0});
  EXPECT_EQ(set.rows(), 0u);
  set.add_group({std::vector<float>(kNumFeatures, 1), std::vector<float>(kNumFeatures, 2),
                 std::vector<float>(kNumFeatures, 3)},
                {2e-3, 1e-3, INFINITY});
  ASSERT_EQ(set.rows(), 3u);
  EXPECT_EQ(set.labels, (std::vector<float>{0.5f, 1.0f, 0.0f}));
  EXPECT_EQ(set.groups, (std::vector<unsigned>{3}));
}

TEST(XGBoostModel, BadFilesAndOptionsAreClearErrors) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const UserError& e) {
      return e.what();
    }
    return "(no error)";
  };
  costmodel::XGBoostModel m;
  std::string missing = temp_dir() + "/no-such-model.json";
  EXPECT_NE(message([&] { m.load(missing); }).find("cost model " + missing + ": cannot open"), std::string::npos);
  std::string corrupt = temp_dir() + "/corrupt-model.json";
  std::ofstream(corrupt) << "{\"learner\": [1, 2, garbage";
  EXPECT_NE(message([&] { m.load(corrupt); }).find("cost model " + corrupt + ": not an XGBoost model"),
            std::string::npos);
  std::string binary = temp_dir() + "/binary-model.bin";
  std::ofstream(binary) << std::string("\x00\x01\x02\xff\xfe", 5);
  EXPECT_NE(message([&] { m.load(binary); }).find("cost model " + binary), std::string::npos);
  EXPECT_FALSE(m.trained());
  costmodel::XGBoostOptions o;
  o.objective = "rank:ndcg";
  EXPECT_NE(message([&] { costmodel::XGBoostModel bad(o); }).find("objective 'rank:ndcg'"), std::string::npos);
  ConfigSpace s(parse_workload("matmul(M=8,N=8,K=8)"), x86_avx512());
  CostModelSearch fresh(s, 1, {});
  EXPECT_NE(message([&] { fresh.save_model(temp_dir() + "/x.json"); }).find("no cost model to save"),
            std::string::npos);
}

// ---- Simulated annealing -----------------------------------------------------------------

TEST(Anneal, FindsTheOptimumOfASyntheticLandscape) {
  ConfigSpace s(parse_workload("matmul(M=512,N=512,K=512)"), x86_avx512());
  std::vector<size_t> target = s.digits(*s.default_index());
  auto cost = [&](uint64_t i) {
    std::vector<size_t> d = s.digits(i);
    double c = 0;
    for (size_t k = 0; k < d.size(); ++k) c += std::pow(double(d[k]) - double(target[k]), 2);
    return c;
  };
  auto score = [&](const std::vector<uint64_t>& p) {
    std::vector<double> out;
    for (uint64_t i : p) out.push_back(-cost(i));
    return out;
  };
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    std::mt19937_64 rng(seed);
    std::vector<uint64_t> starts;
    std::uniform_int_distribution<uint64_t> pick(0, s.size() - 1);
    while (starts.size() < 16) {
      uint64_t i = pick(rng);
      if (s.valid(i)) starts.push_back(i);
    }
    AnnealOptions o;
    o.walkers = 16;
    o.steps = 150;
    std::vector<uint64_t> best = anneal(s, starts, score, [](uint64_t) { return true; }, 5, o, rng);
    ASSERT_FALSE(best.empty());
    EXPECT_EQ(best[0], *s.default_index()) << "seed " << seed << ": ended at distance " << cost(best[0]);
    for (uint64_t i : best) EXPECT_TRUE(s.valid(i));
  }
}

// ---- Features in the worker process ----------------------------------------------------

TEST(CostModelSearch, AConfigThatCrashesTheCompilerIsNeverProposedAndTheTunerLivesOn) {
  // A worker that crashes on every config with tile_m 3 (a compiler bug stands in), the real
  // one otherwise: the annealer visits many such configs; the search goes on without them.
  std::string worker = temp_dir() + "/crashing-feature-worker.sh";
  {
    std::ofstream f(worker);
    // A line server (--serve) made of the one-request mode, crashing on the chosen configs.
    f << "#!/bin/sh\nwhile IFS= read -r req; do\n"
      << "  case \"$req\" in *'\"tile_m\":3,'*) kill -SEGV $$ ;; esac\n"
      << "  printf '%s' \"$req\" | " << TF_BUILD_WORKER << "\ndone\n";
  }
  fs::permissions(worker, fs::perms::owner_all);
  ConfigSpace s(parse_workload("matmul(M=96,N=64,K=32)"), x86_avx512());
  // A model to rank with: fitted on measured-looking rows of this very space.
  CostModelSearchOptions plain;
  plain.epsilon = 0;
  CostModelSearch teacher(s, 3, plain);
  std::vector<Observation> seen;
  for (uint64_t i : teacher.propose(24)) {
    json c = s.to_config(i);
    seen.push_back({i, 1e-3 * (1 + std::abs(c["tile_m"].get<int>() - 3)) * (c["vectorize"].get<bool>() ? 1 : 4)});
  }
  // One worker, and three sharing each annealing step's points (each crash narrowed down
  // within its worker's share). Under the sanitizers the three alone (each worker a sanitized
  // process: 55 s for both there; tests/sanitized.h).
  for (size_t workers : {1, 3}) {
    if (tf::testing::kSanitized && workers == 1) continue;
    CostModelSearchOptions o;
    o.epsilon = 0;
    o.feature_worker = worker;
    o.feature_workers = workers;
    CostModelSearch ms(s, 3, o);
    ms.observe(seen);
    std::vector<uint64_t> p = ms.propose(16);
    EXPECT_EQ(p.size(), 16u) << workers << " workers";
    EXPECT_EQ(ms.overhead().fits, 1);
    EXPECT_GT(ms.overhead().unlowerable, 0u) << "the annealer never met a crashing config";
    for (uint64_t i : p) EXPECT_NE(s.to_config(i)["tile_m"], 3) << s.to_config(i).dump();
    // The same with the real worker: features equal to the in-process ones, so the same
    // proposals.
    CostModelSearchOptions real = o;
    real.feature_worker = TF_BUILD_WORKER;
    CostModelSearch a(s, 3, real), b(s, 3, plain);
    a.observe(seen);
    b.observe(seen);
    EXPECT_EQ(a.propose(8), b.propose(8)) << workers << " workers";
    EXPECT_EQ(a.overhead().unlowerable, 0u);
  }
}

TEST(CostModelSearch, TheTransferSetHelpsOnlyUntilTheWorkloadHasResultsOfItsOwn) {
  ConfigSpace s(parse_workload("matmul(M=64,N=48,K=40)"), x86_avx512());
  // A transfer group: 20 configs of this space with made-up times (only the plumbing counts).
  std::vector<std::vector<float>> rows;
  std::vector<double> costs;
  for (uint64_t i = 0; rows.size() < 20; i += 977) {
    if (!s.valid(i % s.size())) continue;
    rows.push_back(costmodel::config_features(s.graph(), s.target(), s.to_config(i % s.size())));
    costs.push_back(1e-3 * static_cast<double>(1 + rows.size()));
  }
  CostModelSearchOptions o;
  o.transfer.add_group(rows, costs);
  o.transfer_until = 8;
  CostModelSearch ms(s, 1, o);
  ms.propose(4);
  EXPECT_EQ(ms.overhead().last_fit_rows, 20u);  // transfer alone before any result
  std::vector<Observation> own;
  for (uint64_t i : ms.propose(7)) own.push_back({i, 1e-3});
  ms.observe(own);
  ms.propose(4);
  EXPECT_EQ(ms.overhead().last_fit_rows, 27u);  // transfer and 7 own
  own.clear();
  for (uint64_t i : ms.propose(3)) own.push_back({i, 2e-3});
  ms.observe(own);
  ms.propose(4);
  EXPECT_EQ(ms.overhead().last_fit_rows, 10u);  // 10 own results: transfer left out
}

// ---- Tuning curves ----------------------------------------------------------------------

TEST(TuningCurve, OneCurvePerRunOnePointPerNewConfig) {
  auto rec = [](const std::string& run, int tile, double median, const std::string& error = "ok") {
    db::MeasureRecord r;
    r.run_uuid = run;
    r.flops = 2'000'000'000;
    r.target = "llvm";
    r.config = {{"tile_m", tile}};
    r.error_code = error;
    if (error == "ok") r.samples_s = {median};
    return r;
  };
  std::vector<db::MeasureRecord> recs = {rec("a", 1, 2.0), rec("b", 1, 4.0), rec("a", 2, 0, "compile_error"),
                                         rec("a", 3, 1.0), rec("a", 3, 0.5), rec("a", 4, 3.0)};
  std::vector<TuningCurve> c = tuning_curves(recs, {{"a", "", "", "xgb", 10, "", "", 0, 0, "done", 0}});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].run, "a");
  EXPECT_EQ(c[0].strategy, "xgb");
  ASSERT_EQ(c[0].points.size(), 4u);
  std::vector<double> best;
  for (const CurvePoint& p : c[0].points) best.push_back(p.best_s);
  EXPECT_EQ(best, (std::vector<double>{2.0, 2.0, 0.5, 0.5}));  // the re-measure of 3 lowers the best
  EXPECT_EQ(c[0].points[1].config_s, 0);                        // the failure
  EXPECT_NEAR(c[0].points[3].best_gflops, 4.0, 1e-9);
  EXPECT_EQ(c[1].points.size(), 1u);
  EXPECT_NE(curves_csv(c).find("a,xgb,\"llvm\",3,1,0.5,4\n"), std::string::npos) << curves_csv(c);
}

// ---- xgb end to end ---------------------------------------------------------------------

TEST(CostModelSearch, TunesARealKernelLearnsFromOtherShapesAndResumes) {
  std::string path = temp_dir() + "/xgb.db";
  auto db = db::open_database(path);
  Target t = host_target();
  LocalBuilderOptions bo;
  bo.worker_path = TF_BUILD_WORKER;
  LocalBuilder b(bo);
  LocalRunnerOptions ro;
  ro.runner_path = TF_BOARD_RUNNER;
  LocalRunner r(ro);
  TuneOptions o;
  o.batch = 6;
  o.measure.repeat = 2;
  o.measure.min_repeat_ms = 1;
  o.retime_rounds = 0;

  // Records of another shape of the same template: the transfer set.
  Workload other = parse_workload("matmul(M=16,N=48,K=16)");
  ConfigSpace other_space(other, t);
  o.trials = 12;
  auto random = make_search_strategy("random", other_space, 5);
  CommitRecords c1(db.get(), other_space, "local", "", o.measure);
  tune(other_space, *random, b, r, db.get(), o, {&c1});

  Workload w = parse_workload("matmul(M=24,N=40,K=20)");
  ConfigSpace space(w, t);
  costmodel::TransferData td = costmodel::transfer_from_database(*db, space.template_id(), t.arch_name(), w.canonical());
  EXPECT_EQ(td.workloads, 1u);
  EXPECT_GE(td.configs, 12u);
  EXPECT_EQ(td.skipped, 0u);
  EXPECT_EQ(costmodel::transfer_from_database(*db, space.template_id(), t.arch_name(), other.canonical()).configs, 0u);
  EXPECT_EQ(costmodel::transfer_from_database(*db, space.template_id(), "aarch64", w.canonical()).configs, 0u);
  EXPECT_EQ(costmodel::transfer_from_database(*db, "dense.cpu.v0", t.arch_name(), w.canonical()).configs, 0u);
  // An emulated board's records and a real board's never teach each other's models.
  EXPECT_EQ(costmodel::transfer_from_database(*db, space.template_id(), t.arch_name(), w.canonical(), 4000, true).configs,
            0u);
  std::vector<db::MeasureRecord> emulated = db->history({});
  for (db::MeasureRecord& e : emulated) e.target += " -model=qemu-test";
  db->commit(emulated);
  EXPECT_EQ(costmodel::transfer_from_database(*db, space.template_id(), t.arch_name(), w.canonical()).workloads, 1u);
  costmodel::TransferData te =
      costmodel::transfer_from_database(*db, space.template_id(), t.arch_name(), w.canonical(), 4000, true);
  EXPECT_EQ(te.workloads, 1u);
  EXPECT_EQ(te.configs, td.configs);

  CostModelSearchOptions mo;
  mo.transfer = td.set;
  CostModelSearch first(space, 7, mo);
  CommitRecords c2(db.get(), space, "local", "", o.measure);
  o.trials = 13;
  TuneSummary s1 = tune(space, first, b, r, db.get(), o, {&c2});
  EXPECT_EQ(s1.state.trials_done, 13);
  EXPECT_FALSE(s1.best_config.is_null());
  // Warm from the other shape, the model was fitted before the first proposed batch.
  EXPECT_EQ(first.overhead().fits, 2);
  EXPECT_GT(first.overhead().points_scored, 0u);
  std::string model_path = temp_dir() + "/xgb-model.json";
  first.save_model(model_path);

  // Resume with the saved model: nothing measured twice. (Configs built to the code of one
  // measured before are trials without records: TuneLoop's "Same code".)
  std::set<std::string> before;
  for (const auto& rec : db->history({w.canonical(), t.str(), 0})) before.insert(rec.config_hash());
  const size_t first_measured = static_cast<size_t>(s1.state.trials_done - s1.state.same_code);
  EXPECT_EQ(before.size(), first_measured);
  CostModelSearchOptions again;
  again.load_model = model_path;
  CostModelSearch second(space, 7, again);
  TuneSummary s2 = tune(space, second, b, r, db.get(), o, {&c2});
  EXPECT_EQ(s2.state.known, static_cast<int>(first_measured));
  EXPECT_EQ(s2.state.trials_done, 13);
  std::set<std::string> after;
  size_t records = 0;
  for (const auto& rec : db->history({w.canonical(), t.str(), 0})) {
    after.insert(rec.config_hash());
    ++records;
  }
  const size_t measured = first_measured + static_cast<size_t>(s2.state.trials_done - s2.state.same_code);
  EXPECT_EQ(after.size(), measured);
  EXPECT_GE(records, measured);
}

}  // namespace
}  // namespace tf
