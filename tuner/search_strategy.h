// SearchStrategy: decides which configs of a ConfigSpace to measure next.
//
// Promises: propose() returns indices of points that pass the space's constraints and were
// never proposed to nor observed by this strategy (so no config is measured twice, and a
// resumed run that observed the database's earlier results goes on where it stopped); it
// returns fewer than asked, or none, only when no such point is left. observe() takes
// measured costs (median seconds; +inf for a point that failed) of any points, proposed or
// not. With the same seed and the same observations, a strategy proposes the same points.
//
// Strategies here: random (uniform over unmeasured points), grid (index order), ga (a
// genetic algorithm over the knobs' candidate positions), xgb (a cost model ranks the space
// and simulated annealing picks what to measure: tuner/cost_model_search.h).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "tuner/config_space.h"

namespace tf {

struct Observation {
  uint64_t index = 0;
  double cost_s = 0;  // median seconds; +inf when the point failed (error, wrong answer)
};

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  virtual std::string name() const = 0;
  virtual std::vector<uint64_t> propose(size_t n) = 0;
  virtual void observe(const std::vector<Observation>& results) = 0;
};

// xgb, random, grid, ga.
const std::vector<std::string>& search_strategy_names();

struct CostModelSearchOptions;

// Throws UserError naming the strategy and the known ones when `name` is not one of them.
// `model` configures xgb (null: defaults, no transfer).
std::unique_ptr<SearchStrategy> make_search_strategy(const std::string& name, const ConfigSpace& space,
                                                     uint64_t seed, const CostModelSearchOptions* model = nullptr);

// What the strategies share: the points already seen, and random unseen valid points.
class SearchBase : public SearchStrategy {
 public:
  SearchBase(const ConfigSpace& space, uint64_t seed) : space_(space), rng_(seed) {}
  void observe(const std::vector<Observation>& results) override;

 protected:
  bool seen(uint64_t i) const { return seen_.count(i) != 0; }
  // Marks and returns true when `i` is unseen and valid.
  bool take(uint64_t i);
  // A uniformly random unseen valid point, or nothing when none is left.
  std::optional<uint64_t> random_unseen();

  const ConfigSpace& space_;
  std::mt19937_64 rng_;
  std::unordered_set<uint64_t> seen_;
  std::unordered_set<uint64_t> pruned_;
  std::vector<Observation> observed_;
  bool exhausted_ = false;
};

}  // namespace tf
