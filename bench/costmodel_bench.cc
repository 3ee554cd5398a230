// Cost model quality and overhead on real tuning records (issue 9, benchmarks 2 and 4).
//
//   bench_costmodel quality --db D [--template dense.cpu.v1] [--arch x86_64] [--min-configs 30]
//     Leave one workload out: train on the records of every other workload of the template,
//     rank the held-out workload's configs, and report TenSet's top-1 and top-5 scores (best
//     true time over the true time of the best of the model's k picks; a failed pick scores
//     0) and the pairwise ranking accuracy, for both objectives. A random pick's expected
//     top-1 score is printed next to it as the floor.
//
//   --rounds, --depth, --eta, --min-child-weight override the model's defaults
//   (costmodel/xgboost_model.h) to compare hyperparameters; --show yes prints the model's
//   pick and the best config of each held-out workload.
//
//   With --within yes: train on a random half of each workload's configs and rank the other
//   half (how well the features describe one shape, the case of a run without transfer).
//
//   bench_costmodel blind --workload W [--target T] [--samples 200] [--seed 1]
//     What the features do not see: valid configs of W's space on T (default this machine)
//     drawn at random, and for each, each knob moved to each other candidate value that keeps
//     the config valid; prints per knob how many such moves left the feature vector
//     unchanged (a knob the model cannot tell apart), and the distinct feature vectors among
//     the sampled configs. No database.
//
//   bench_costmodel overhead --db D --workload W [--rows 200,2000] [--batch-s S]
//     The time xgb spends per batch (refit, annealing, features of new points) with a
//     training set of N database records, and its share of a batch of S seconds.
//
//   bench_costmodel overhead --workload W --target T [--observed 16,64,256] [--batch-s S]
//                            [--feature-worker BUILD/bin/tunefarm-build-worker [--workers N]]
//     Without a database: the run's own batches, after N observations of W's own configs
//     on T (any target: cuda, rocm), each with a synthetic cost (the config's hash: a cost
//     model fit on noise costs as much as one fit on times), one batch of 8 proposed after
//     them: what a tuner spends between a GPU board's measurements. With --feature-worker the
//     features are computed as tune computes them, in N worker processes (0: tune's default).
#include <cmath>
#include <cstdio>
#include <functional>
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "base/clock.h"
#include "base/error.h"
#include "compiler/target.h"
#include "costmodel/features.h"
#include "costmodel/transfer.h"
#include "costmodel/xgboost_model.h"
#include "db/database.h"
#include "tuner/cost_model_search.h"

namespace {

using namespace tf;

std::string arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return def;
}

// A numeric flag; a value that is not a number is an error naming the flag and the value.
double number(int argc, char** argv, const std::string& name, double def) {
  std::string v = arg(argc, argv, name, "");
  if (v.empty()) return def;
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
  }
  if (used != v.size()) throw std::runtime_error(name + " " + v + ": not a number");
  return x;
}

struct TestSet {
  std::vector<std::vector<float>> rows;
  std::vector<double> costs;  // +inf: failed
  std::vector<nlohmann::json> configs;
};

// The held-out workload's configs on its most measured target, each at the median of its
// medians (a failure anywhere: failed).
TestSet test_set(const std::vector<db::MeasureRecord>& recs) {
  std::map<std::string, int> per_target;
  for (const auto& r : recs) ++per_target[r.target];
  std::string target;
  for (const auto& [t, n] : per_target) {
    if (target.empty() || n > per_target[target]) target = t;
  }
  std::map<std::string, std::pair<nlohmann::json, std::vector<double>>> configs;
  for (const auto& r : recs) {
    if (r.target != target || r.error_code == "board_lost") continue;
    auto& c = configs[r.config_hash()];
    c.first = r.config;
    c.second.push_back(r.cost_s());
  }
  TestSet s;
  Target t = parse_target(target);
  OpGraph g = build_op(parse_workload(recs.front().workload));
  for (const auto& [h, c] : configs) {
    s.rows.push_back(costmodel::config_features(g, t, c.first));
    s.costs.push_back(db::combined_cost(c.second));
    s.configs.push_back(c.first);
  }
  return s;
}

int quality(int argc, char** argv) {
  std::string path = arg(argc, argv, "--db", "");
  std::string templ = arg(argc, argv, "--template", "dense.cpu.v1");
  std::string arch = arg(argc, argv, "--arch", host_target().arch_name());
  size_t min_configs = std::stoul(arg(argc, argv, "--min-configs", "30"));
  bool within = arg(argc, argv, "--within", "no") == "yes";
  bool show = arg(argc, argv, "--show", "no") == "yes";
  costmodel::XGBoostOptions base;
  base.rounds = static_cast<int>(number(argc, argv, "--rounds", base.rounds));
  base.max_depth = static_cast<int>(number(argc, argv, "--depth", base.max_depth));
  base.eta = number(argc, argv, "--eta", base.eta);
  base.min_child_weight = number(argc, argv, "--min-child-weight", base.min_child_weight);
  auto db = db::open_database(path, db::OpenMode::ReadOnly);
  std::map<std::string, std::vector<db::MeasureRecord>> by_workload;
  for (auto& r : db->history({})) {
    if (r.template_name == templ && r.arch == arch) by_workload[r.workload].push_back(std::move(r));
  }
  std::printf("cost model quality, %s on %s: %zu workloads in %s\n", templ.c_str(), arch.c_str(), by_workload.size(),
              path.c_str());
  for (const std::string& objective : costmodel::xgboost_objectives()) {
    double sum1 = 0, sum5 = 0, sum_pair = 0, sum_random = 0;
    int n = 0;
    for (const auto& [w, recs] : by_workload) {
      TestSet test = test_set(recs);
      if (test.rows.size() < min_configs) continue;
      costmodel::TransferData train;
      if (within) {
        // Train on a random half of this workload's own configs, test on the other half.
        std::mt19937_64 rng(1);
        std::vector<size_t> idx(test.rows.size());
        for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
        std::shuffle(idx.begin(), idx.end(), rng);
        TestSet a, b;
        for (size_t k = 0; k < idx.size(); ++k) {
          TestSet& dst = k < idx.size() / 2 ? a : b;
          dst.rows.push_back(test.rows[idx[k]]);
          dst.costs.push_back(test.costs[idx[k]]);
          dst.configs.push_back(test.configs[idx[k]]);
        }
        train.set.add_group(a.rows, a.costs);
        train.configs = train.set.rows();
        train.workloads = 1;
        test = b;
      } else {
        train = costmodel::transfer_from_database(*db, templ, arch, w, 0);
      }
      if (train.set.rows() == 0) continue;
      costmodel::XGBoostOptions o = base;
      o.objective = objective;
      costmodel::XGBoostModel m(o);
      m.fit(train.set);
      std::vector<float> flat;
      for (const auto& r : test.rows) flat.insert(flat.end(), r.begin(), r.end());
      std::vector<float> scores = m.predict(flat, test.rows.size());
      std::vector<size_t> order(test.rows.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
      double best = *std::min_element(test.costs.begin(), test.costs.end());
      auto top = [&](size_t k) {
        double t = INFINITY;
        for (size_t i = 0; i < k && i < order.size(); ++i) t = std::min(t, test.costs[order[i]]);
        return std::isfinite(t) ? best / t : 0.0;
      };
      size_t right = 0, pairs = 0;
      double random = 0;
      for (size_t i = 0; i < test.costs.size(); ++i) {
        random += std::isfinite(test.costs[i]) ? best / test.costs[i] : 0;
        for (size_t j = i + 1; j < test.costs.size(); ++j) {
          if (test.costs[i] == test.costs[j]) continue;
          ++pairs;
          right += (scores[i] > scores[j]) == (test.costs[i] < test.costs[j]);
        }
      }
      random /= static_cast<double>(test.costs.size());
      double pair = pairs ? static_cast<double>(right) / static_cast<double>(pairs) : 0;
      std::printf("  %-17s %s %-45s train %5zu configs of %zu workloads, test %4zu: top-1 %.3f  top-5 %.3f  "
                  "pairwise %.3f  (random pick %.3f)\n",
                  objective.c_str(), within ? "half of " : "held out", w.c_str(), train.configs, train.workloads, test.rows.size(), top(1), top(5), pair,
                  random);
      if (show) {
        size_t best_i = static_cast<size_t>(std::min_element(test.costs.begin(), test.costs.end()) - test.costs.begin());
        std::printf("      model's pick %.4f ms %s\n      best         %.4f ms %s\n", test.costs[order[0]] * 1e3,
                    test.configs[order[0]].dump().c_str(), best * 1e3, test.configs[best_i].dump().c_str());
      }
      sum1 += top(1);
      sum5 += top(5);
      sum_pair += pair;
      sum_random += random;
      ++n;
    }
    if (n) {
      std::printf("  %-17s mean over %d workloads: top-1 %.3f (goal >= 0.85)  top-5 %.3f  pairwise %.3f  "
                  "(random pick %.3f)\n",
                  objective.c_str(), n, sum1 / n, sum5 / n, sum_pair / n, sum_random / n);
    }
  }
  return 0;
}

// overhead without a database: the search's own observations (synthetic costs) on any target.
int overhead_observed(int argc, char** argv) {
  const Workload w = parse_workload(arg(argc, argv, "--workload", "matmul(M=97,N=131,K=67)"));
  const std::string tspec = arg(argc, argv, "--target", "");
  const Target t = tspec.empty() ? host_target() : parse_target(tspec);
  const double batch_s = number(argc, argv, "--batch-s", 0);
  ConfigSpace space(w, t);
  std::stringstream observed_arg(arg(argc, argv, "--observed", "16,64,256"));
  for (std::string item; std::getline(observed_arg, item, ',');) {
    const size_t want = std::stoul(item);
    if (want < 1 || want > 100000) throw std::runtime_error("--observed " + item + ": not in [1, 100000]");
    CostModelSearchOptions mo;
    mo.feature_worker = arg(argc, argv, "--feature-worker", "");
    mo.feature_workers = static_cast<size_t>(number(argc, argv, "--workers", 0));
    CostModelSearch ms(space, 1, mo);
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<uint64_t> pick(0, space.size() - 1);
    std::vector<Observation> obs;
    for (size_t tries = 0; obs.size() < want && tries < 200 * want; ++tries) {
      const uint64_t i = pick(rng);
      if (space.valid(i)) obs.push_back({i, 1e-4 * (1 + static_cast<double>(std::hash<uint64_t>{}(i) % 1000) / 100)});
    }
    ms.observe(obs);
    const SearchOverhead before = ms.overhead();
    const double b0 = steady_seconds();
    ms.propose(8);
    const double per_batch = steady_seconds() - b0;
    const SearchOverhead& o = ms.overhead();
    std::printf("%s on %s after %zu observations: a batch of 8 %.3f s (fit %.3f s, annealing %.3f s, features %.3f s, "
                "%zu configs scored)",
                w.canonical().c_str(), t.short_str().c_str(), obs.size(), per_batch, o.fit_s - before.fit_s,
                o.anneal_s - before.anneal_s, o.features_s - before.features_s, o.points_scored - before.points_scored);
    if (batch_s > 0) std::printf(" = %.1f%% of a %.2f s batch", 100 * per_batch / (batch_s + per_batch), batch_s);
    std::printf("\n");
  }
  return 0;
}

int overhead(int argc, char** argv) {
  std::string path = arg(argc, argv, "--db", "");
  if (path.empty()) return overhead_observed(argc, argv);
  Workload w = parse_workload(arg(argc, argv, "--workload", "matmul(M=97,N=131,K=67)"));
  double batch_s = std::stod(arg(argc, argv, "--batch-s", "0"));
  auto db = db::open_database(path, db::OpenMode::ReadOnly);
  ConfigSpace space(w, host_target());
  std::stringstream rows_arg(arg(argc, argv, "--rows", "200,2000"));
  std::string item;
  while (std::getline(rows_arg, item, ',')) {
    size_t want = std::stoul(item);
    double t0 = steady_seconds();
    costmodel::TransferData td =
        costmodel::transfer_from_database(*db, space.template_id(), space.target().arch_name(), "", want);
    double load_s = steady_seconds() - t0;
    // One batch as a run makes it: refit on everything, anneal, pick 8.
    double per_batch = 0;
    SearchOverhead last;
    const int reps = 3;
    for (int rep = 0; rep < reps; ++rep) {
      CostModelSearchOptions mo;
      mo.transfer = td.set;
      CostModelSearch ms(space, static_cast<uint64_t>(rep + 1), mo);
      double b0 = steady_seconds();
      ms.propose(8);
      per_batch += (steady_seconds() - b0) / reps;
      last = ms.overhead();
    }
    std::printf("overhead with %zu records (%zu configs of %zu workloads): loading them %.2f s once per run; per batch "
                "%.3f s (fit %.3f s, annealing %.3f s, features %.3f s, %zu configs scored)",
                td.records, td.configs, td.workloads, load_s, per_batch, last.fit_s, last.anneal_s, last.features_s,
                last.points_scored);
    if (batch_s > 0) std::printf(" = %.1f%% of a %.2f s batch", 100 * per_batch / (batch_s + per_batch), batch_s);
    std::printf("\n");
  }
  return 0;
}

int blind(int argc, char** argv) {
  const std::string spec = arg(argc, argv, "--workload", "");
  if (spec.empty()) throw std::runtime_error("blind needs --workload");
  const std::string tspec = arg(argc, argv, "--target", "");
  const Target t = tspec.empty() ? host_target() : parse_target(tspec);
  const int samples = static_cast<int>(number(argc, argv, "--samples", 200));
  if (samples < 1 || samples > 100000) {
    throw std::runtime_error("--samples " + std::to_string(samples) + ": not in [1, 100000]");
  }
  ConfigSpace space(parse_workload(spec), t);
  std::mt19937_64 rng(static_cast<uint64_t>(number(argc, argv, "--seed", 1)));
  std::uniform_int_distribution<uint64_t> pick(0, space.size() - 1);
  std::vector<uint64_t> points;
  for (int tries = 0; points.size() < static_cast<size_t>(samples) && tries < 200 * samples; ++tries) {
    uint64_t i = pick(rng);
    if (space.valid(i)) points.push_back(i);
  }
  if (points.empty()) {
    throw std::runtime_error("no valid config of " + spec + " found in " + std::to_string(200 * samples) + " draws");
  }
  auto features = [&](uint64_t i) { return costmodel::config_features(space.graph(), t, space.to_config(i)); };
  const std::vector<KnobSpec>& knobs = space.knobs();
  std::vector<int> moves(knobs.size(), 0), unseen(knobs.size(), 0);
  std::set<std::vector<float>> distinct;
  for (uint64_t i : points) {
    const std::vector<float> f = features(i);
    distinct.insert(f);
    const std::vector<size_t> d = space.digits(i);
    for (size_t k = 0; k < knobs.size(); ++k) {
      for (size_t v = 0; v < knobs[k].candidates.size(); ++v) {
        if (v == d[k]) continue;
        std::vector<size_t> moved = d;
        moved[k] = v;
        const uint64_t j = space.index_of(moved);
        if (!space.valid(j)) continue;
        ++moves[k];
        if (features(j) == f) ++unseen[k];
      }
    }
  }
  std::printf("%s on %s: %s, %zu valid configs sampled, %zu distinct feature vectors\n",
              space.workload().canonical().c_str(), t.str().c_str(), space.template_id().c_str(), points.size(),
              distinct.size());
  for (size_t k = 0; k < knobs.size(); ++k) {
    std::printf("  %-12s %5d moves, %5d unseen by the features (%.0f%%)\n", knobs[k].name.c_str(), moves[k], unseen[k],
                moves[k] ? 100.0 * unseen[k] / moves[k] : 0.0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "quality") return quality(argc, argv);
    if (cmd == "overhead") return overhead(argc, argv);
    if (cmd == "blind") return blind(argc, argv);
    std::fprintf(stderr,
                 "usage: bench_costmodel quality --db D [--template T] | overhead [--db D] --workload W "
                 "[--target T] | blind --workload W "
                 "[--target T]\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_costmodel: %s\n", e.what());
    return 1;
  }
}
