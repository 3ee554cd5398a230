// Model-based search (--strategy xgb): a cost model ranks the space, simulated annealing
// finds what it ranks best, and only those are measured.
//
// Promises (beyond SearchStrategy's):
// - Each batch: the model is refitted on everything measured so far (this workload's
//   results, failures ranked last, plus the transfer set from other workloads), parallel
//   annealing walkers climb its predicted score from the best measured points and random
//   ones, and the batch takes the highest-scored unmeasured valid points, each slot replaced
//   by a random point with probability epsilon so the model keeps learning where it is wrong.
//   The transfer set takes part only until this workload has transfer_until correct results.
// - Before the model has anything to learn from (no transfer set, no loaded model and fewer
//   than min_observed results), proposals are random.
// - Deterministic for a seed: same observations, same proposals.
// - The time spent on features, fitting and annealing is accounted (overhead()).
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>

#include "costmodel/cost_model.h"
#include "costmodel/xgboost_model.h"
#include "tuner/search_strategy.h"

namespace tf {

struct AnnealOptions {
  size_t walkers = 32;
  size_t steps = 24;
  double start_temperature = 0.2;  // in standard deviations of the walkers' starting scores
};

// Simulated annealing over the knobs' candidate positions: each step moves every walker to a
// neighbour (one knob changed: a split knob to the next candidate up or down, or any knob to a
// random candidate) and accepts it when it scores higher, or with probability
// exp(gain / temperature); the temperature falls linearly to zero. Pruned points are never
// visited. `score` rates a batch of points (higher is better). Returns every visited point
// that `keep` accepts, best first, at most `want`.
std::vector<uint64_t> anneal(const ConfigSpace& space, const std::vector<uint64_t>& starts,
                             const std::function<std::vector<double>(const std::vector<uint64_t>&)>& score,
                             const std::function<bool(uint64_t)>& keep, size_t want, const AnnealOptions& o,
                             std::mt19937_64& rng);

struct CostModelSearchOptions {
  costmodel::XGBoostOptions model;
  AnnealOptions anneal;
  double epsilon = 0.05;              // share of random points in a batch
  size_t min_observed = 4;            // own correct results before the first fit without transfer
  costmodel::TrainingSet transfer;    // groups from other workloads (costmodel/transfer.h)
  // The transfer set is left out of the fit once this workload has this many correct
  // results: other shapes point the first batches the right way, then bias the search away
  // from this shape's own best (measured: docs/results/issue9).
  size_t transfer_until = 24;
  std::string load_model;             // a saved model to rank with until the first fit
  // tunefarm-build-worker: features are computed in it, so that a compiler crash on a config
  // the annealer visits costs that config (never proposed then), not the tuner. Empty: in
  // this process (tests, benchmarks).
  std::string feature_worker;
  double feature_timeout_s = 60;
  // Feature workers run at once, each on its share of an annealing step's new points (each
  // started when first needed, and shared by every search of the process that names the same
  // program, one search at a time); 0: the machine's hardware threads, at most 8. A GPU template's
  // configs take ~0.7 ms each to lower for their features, and a batch's annealing visits ~700:
  // on one worker that was most of the tuner's time between a GPU board's measurements.
  size_t feature_workers = 0;
};

struct SearchOverhead {
  double features_s = 0, fit_s = 0, anneal_s = 0;
  int fits = 0;
  size_t points_scored = 0;
  size_t unlowerable = 0;  // configs whose features could not be computed (never proposed)
  size_t last_fit_rows = 0;  // training rows of the latest fit
  double total_s() const { return features_s + fit_s + anneal_s; }
};

class CostModelSearch : public SearchBase {
 public:
  // Throws UserError for a bad model option or an unreadable model file.
  CostModelSearch(const ConfigSpace& space, uint64_t seed, CostModelSearchOptions o);
  std::string name() const override { return "xgb"; }
  std::vector<uint64_t> propose(size_t n) override;
  void observe(const std::vector<Observation>& results) override;

  const SearchOverhead& overhead() const { return overhead_; }
  // Saves the last fitted (or loaded) model; throws UserError when there is none.
  void save_model(const std::string& path) const;
  const costmodel::CostModel& model() const { return *model_; }

 private:
  // Computes the features of the points not cached yet (in the worker when there is one).
  void compute_features(const std::vector<uint64_t>& points);
  // In the workers, the points split among them; a crash or hang is narrowed down to the
  // configs that cause it, which get no features (an empty vector) and are never scored.
  void features_in_workers(const std::vector<uint64_t>& points);
  std::vector<double> score(const std::vector<uint64_t>& points);
  void refit();

  CostModelSearchOptions opts_;
  std::unique_ptr<costmodel::XGBoostModel> model_;
  std::unordered_map<uint64_t, std::vector<float>> features_;  // empty: cannot be lowered
  std::unordered_map<uint64_t, double> scores_;  // of the current fit
  std::unordered_map<uint64_t, double> costs_;   // latest observed cost per point
  bool dirty_ = false;
  SearchOverhead overhead_;
};

}  // namespace tf
