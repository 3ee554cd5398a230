// The search strategies of search_strategy.h: random, grid and a genetic algorithm.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "tuner/cost_model_search.h"
#include "tuner/search_strategy.h"

namespace tf {
namespace {

class RandomSearch : public SearchBase {
 public:
  using SearchBase::SearchBase;
  std::string name() const override { return "random"; }
  std::vector<uint64_t> propose(size_t n) override {
    std::vector<uint64_t> out;
    while (out.size() < n) {
      std::optional<uint64_t> i = random_unseen();
      if (!i) break;
      out.push_back(*i);
    }
    return out;
  }
};

class GridSearch : public SearchBase {
 public:
  using SearchBase::SearchBase;
  std::string name() const override { return "grid"; }
  std::vector<uint64_t> propose(size_t n) override {
    std::vector<uint64_t> out;
    for (; out.size() < n && next_ < space_.size(); ++next_) {
      if (take(next_)) out.push_back(next_);
    }
    return out;
  }

 private:
  uint64_t next_ = 0;
};

// Children of the fastest measured points: tournament selection, uniform crossover of the
// knobs' candidate positions, and mutation of each knob with probability 1/knobs. One child
// in ten, and every child when fewer than kMinParents points have a finite cost, is a random
// point instead, so the search keeps exploring.
class GeneticSearch : public SearchBase {
 public:
  using SearchBase::SearchBase;
  std::string name() const override { return "ga"; }
  std::vector<uint64_t> propose(size_t n) override {
    std::vector<Observation> parents;
    for (const Observation& o : observed_) {
      if (std::isfinite(o.cost_s)) parents.push_back(o);
    }
    std::sort(parents.begin(), parents.end(), [](const Observation& a, const Observation& b) {
      return a.cost_s < b.cost_s || (a.cost_s == b.cost_s && a.index < b.index);
    });
    if (parents.size() > kPopulation) parents.resize(kPopulation);
    std::vector<uint64_t> out;
    std::uniform_real_distribution<double> coin(0, 1);
    while (out.size() < n) {
      std::optional<uint64_t> child;
      if (parents.size() >= kMinParents && coin(rng_) >= 0.1) {
        for (int attempt = 0; attempt < 64 && !child; ++attempt) {
          uint64_t c = breed(parents);
          if (take(c)) child = c;
        }
      }
      if (!child) child = random_unseen();
      if (!child) break;
      out.push_back(*child);
    }
    return out;
  }

 private:
  static constexpr size_t kPopulation = 32;
  static constexpr size_t kMinParents = 4;

  const Observation& tournament(const std::vector<Observation>& pop) {
    std::uniform_int_distribution<size_t> pick(0, pop.size() - 1);
    size_t best = pick(rng_);
    for (int i = 0; i < 2; ++i) best = std::min(best, pick(rng_));  // sorted: lower is faster
    return pop[best];
  }

  uint64_t breed(const std::vector<Observation>& pop) {
    std::vector<size_t> a = space_.digits(tournament(pop).index), b = space_.digits(tournament(pop).index);
    std::uniform_real_distribution<double> coin(0, 1);
    const double mutate = 1.0 / static_cast<double>(a.size());
    for (size_t k = 0; k < a.size(); ++k) {
      if (coin(rng_) < 0.5) a[k] = b[k];
      if (coin(rng_) < mutate) {
        a[k] = std::uniform_int_distribution<size_t>(0, space_.knobs()[k].candidates.size() - 1)(rng_);
      }
    }
    return space_.index_of(a);
  }
};

}  // namespace

void SearchBase::observe(const std::vector<Observation>& results) {
  for (const Observation& o : results) {
    seen_.insert(o.index);
    observed_.push_back(o);
  }
}

bool SearchBase::take(uint64_t i) {
  if (seen_.count(i) || pruned_.count(i)) return false;
  if (!space_.valid(i)) {
    pruned_.insert(i);
    return false;
  }
  seen_.insert(i);
  return true;
}

std::optional<uint64_t> SearchBase::random_unseen() {
  if (exhausted_) return std::nullopt;
  std::uniform_int_distribution<uint64_t> pick(0, space_.size() - 1);
  for (int attempt = 0; attempt < 2000; ++attempt) {
    uint64_t i = pick(rng_);
    if (take(i)) return i;
  }
  // Most points are seen or pruned: scan from a random start so the answer is exact.
  uint64_t start = pick(rng_);
  for (uint64_t k = 0; k < space_.size(); ++k) {
    uint64_t i = (start + k) % space_.size();
    if (take(i)) return i;
  }
  exhausted_ = true;
  return std::nullopt;
}

const std::vector<std::string>& search_strategy_names() {
  static const std::vector<std::string> names = {"xgb", "random", "grid", "ga"};
  return names;
}

std::unique_ptr<SearchStrategy> make_search_strategy(const std::string& name, const ConfigSpace& space, uint64_t seed,
                                                     const CostModelSearchOptions* model) {
  if (name == "xgb") return std::make_unique<CostModelSearch>(space, seed, model ? *model : CostModelSearchOptions{});
  if (name == "random") return std::make_unique<RandomSearch>(space, seed);
  if (name == "grid") return std::make_unique<GridSearch>(space, seed);
  if (name == "ga") return std::make_unique<GeneticSearch>(space, seed);
  throw UserError(str("--strategy ", name, ": not a search strategy (xgb, random, grid, ga)"));
}

}  // namespace tf
