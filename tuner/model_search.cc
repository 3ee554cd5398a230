#include "tuner/model_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "compiler/error.h"
#include "costmodel/features.h"

namespace tf {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A point next to `i`: one knob moved.
uint64_t neighbour(const ConfigSpace& space, uint64_t i, std::mt19937_64& rng) {
  std::vector<size_t> d = space.digits(i);
  const auto& knobs = space.knobs();
  std::uniform_real_distribution<double> coin(0, 1);
  for (int attempt = 0; attempt < 16; ++attempt) {
    size_t k = std::uniform_int_distribution<size_t>(0, knobs.size() - 1)(rng);
    size_t n = knobs[k].candidates.size();
    if (n < 2) continue;
    size_t to = d[k];
    if (knobs[k].kind == KnobKind::Split && coin(rng) < 0.5) {
      to = d[k] == 0 ? 1 : d[k] + 1 == n ? d[k] - 1 : (coin(rng) < 0.5 ? d[k] - 1 : d[k] + 1);
    } else {
      to = std::uniform_int_distribution<size_t>(0, n - 2)(rng);
      if (to >= d[k]) ++to;
    }
    d[k] = to;
    return space.index_of(d);
  }
  return i;
}

}  // namespace

std::vector<uint64_t> anneal(const ConfigSpace& space, const std::vector<uint64_t>& starts,
                             const std::function<std::vector<double>(const std::vector<uint64_t>&)>& score,
                             const std::function<bool(uint64_t)>& keep, size_t want, const AnnealOptions& o,
                             std::mt19937_64& rng) {
  if (starts.empty() || want == 0) return {};
  std::vector<uint64_t> cur = starts;
  std::vector<double> cur_s = score(cur);
  std::map<uint64_t, double> visited;
  for (size_t w = 0; w < cur.size(); ++w) visited[cur[w]] = cur_s[w];
  double mean = 0, var = 0;
  for (double s : cur_s) mean += s / static_cast<double>(cur_s.size());
  for (double s : cur_s) var += (s - mean) * (s - mean) / static_cast<double>(cur_s.size());
  const double scale = var > 0 ? std::sqrt(var) : 1;
  std::uniform_real_distribution<double> coin(0, 1);
  for (size_t step = 0; step < o.steps; ++step) {
    double temp = o.start_temperature * scale * (1 - static_cast<double>(step) / static_cast<double>(o.steps));
    std::vector<uint64_t> next(cur.size());
    for (size_t w = 0; w < cur.size(); ++w) {
      uint64_t n = cur[w];
      for (int attempt = 0; attempt < 8; ++attempt) {
        uint64_t c = neighbour(space, cur[w], rng);
        if (c != cur[w] && space.valid(c)) {
          n = c;
          break;
        }
      }
      next[w] = n;
    }
    std::vector<double> next_s = score(next);
    for (size_t w = 0; w < cur.size(); ++w) {
      visited[next[w]] = next_s[w];
      double gain = next_s[w] - cur_s[w];
      if (gain >= 0 || (temp > 0 && coin(rng) < std::exp(gain / temp))) {
        cur[w] = next[w];
        cur_s[w] = next_s[w];
      }
    }
  }
  std::vector<std::pair<double, uint64_t>> ranked;
  for (const auto& [i, s] : visited) {
    if (keep(i)) ranked.push_back({-s, i});
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<uint64_t> out;
  for (size_t k = 0; k < ranked.size() && out.size() < want; ++k) out.push_back(ranked[k].second);
  return out;
}

ModelSearch::ModelSearch(const ConfigSpace& space, uint64_t seed, ModelSearchOptions o)
    : SearchBase(space, seed), opts_(std::move(o)) {
  if (!(opts_.epsilon >= 0 && opts_.epsilon <= 1)) {
    throw UserError(str("epsilon ", opts_.epsilon, " must be between 0 and 1"));
  }
  opts_.model.seed = seed;
  model_ = std::make_unique<costmodel::XGBoostModel>(opts_.model);
  if (!opts_.load_model.empty()) model_->load(opts_.load_model);
  dirty_ = opts_.transfer.rows() > 0;
}

void ModelSearch::observe(const std::vector<Observation>& results) {
  SearchBase::observe(results);
  for (const Observation& o : results) costs_[o.index] = o.cost_s;
  if (!results.empty()) dirty_ = true;
}

const std::vector<float>& ModelSearch::features(uint64_t index) {
  auto it = features_.find(index);
  if (it != features_.end()) return it->second;
  double start = now_s();
  std::vector<float> f = costmodel::config_features(space_.graph(), space_.target(), space_.to_config(index));
  overhead_.features_s += now_s() - start;
  return features_.emplace(index, std::move(f)).first->second;
}

std::vector<double> ModelSearch::score(const std::vector<uint64_t>& points) {
  std::vector<uint64_t> missing;
  std::vector<float> rows;
  for (uint64_t i : points) {
    if (scores_.count(i) || std::find(missing.begin(), missing.end(), i) != missing.end()) continue;
    const std::vector<float>& f = features(i);
    rows.insert(rows.end(), f.begin(), f.end());
    missing.push_back(i);
  }
  if (!missing.empty()) {
    std::vector<float> s = model_->predict(rows, missing.size());
    for (size_t k = 0; k < missing.size(); ++k) scores_[missing[k]] = s[k];
    overhead_.points_scored += missing.size();
  }
  std::vector<double> out;
  for (uint64_t i : points) out.push_back(scores_.at(i));
  return out;
}

void ModelSearch::refit() {
  std::vector<uint64_t> points;
  size_t correct = 0;
  for (const auto& [i, c] : costs_) {
    points.push_back(i);
    correct += std::isfinite(c) ? 1 : 0;
  }
  if (opts_.transfer.rows() == 0 && correct < opts_.min_observed) return;  // stays dirty
  std::sort(points.begin(), points.end());  // the same rows in the same order for a seed
  std::vector<std::vector<float>> rows;
  std::vector<double> costs;
  for (uint64_t i : points) {
    rows.push_back(features(i));
    costs.push_back(costs_.at(i));
  }
  costmodel::TrainingSet set = opts_.transfer;
  if (set.num_features == 0) set.num_features = costmodel::kNumFeatures;
  set.add_group(rows, costs);
  dirty_ = false;
  if (set.rows() == 0) return;
  double start = now_s();
  model_->fit(set);
  overhead_.fit_s += now_s() - start;
  ++overhead_.fits;
  scores_.clear();
}

std::vector<uint64_t> ModelSearch::propose(size_t n) {
  if (dirty_) refit();
  std::vector<uint64_t> pool;
  if (model_->trained()) {
    double start = now_s();
    double features_before = overhead_.features_s;
    std::vector<std::pair<double, uint64_t>> measured;
    for (const auto& [i, c] : costs_) {
      if (std::isfinite(c)) measured.push_back({c, i});
    }
    std::sort(measured.begin(), measured.end());
    std::vector<uint64_t> starts;
    for (size_t k = 0; k < measured.size() && starts.size() < opts_.anneal.walkers / 2; ++k) {
      starts.push_back(measured[k].second);
    }
    std::uniform_int_distribution<uint64_t> pick(0, space_.size() - 1);
    for (int attempt = 0; attempt < 4000 && starts.size() < opts_.anneal.walkers; ++attempt) {
      uint64_t i = pick(rng_);
      if (space_.valid(i)) starts.push_back(i);
    }
    auto unseen = [&](uint64_t i) { return !seen(i) && !pruned_.count(i); };
    pool = anneal(space_, starts, [&](const std::vector<uint64_t>& p) { return score(p); }, unseen, 4 * n,
                  opts_.anneal, rng_);
    overhead_.anneal_s += now_s() - start - (overhead_.features_s - features_before);
  }
  std::vector<uint64_t> out;
  std::uniform_real_distribution<double> coin(0, 1);
  size_t next = 0;
  while (out.size() < n) {
    std::optional<uint64_t> i;
    if (coin(rng_) >= opts_.epsilon) {
      while (next < pool.size() && !i) {
        if (take(pool[next])) i = pool[next];
        ++next;
      }
    }
    if (!i) i = random_unseen();
    if (!i) break;
    out.push_back(*i);
  }
  return out;
}

void ModelSearch::save_model(const std::string& path) const {
  if (!model_->trained()) {
    throw UserError(str("no cost model to save to ", path, ": too few measurements to fit one"));
  }
  model_->save(path);
}

}  // namespace tf
