#include "tuner/cost_model_search.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "costmodel/features.h"
#include "runtime/child_process.h"

namespace tf {
namespace {

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
  double mean = 0, var = 0, n = 0;
  for (double s : cur_s) n += std::isfinite(s) ? 1 : 0;
  for (double s : cur_s) mean += std::isfinite(s) ? s / n : 0;
  for (double s : cur_s) var += std::isfinite(s) ? (s - mean) * (s - mean) / n : 0;
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
      if (!std::isfinite(next_s[w])) continue;  // never step onto a point that cannot be scored
      if (!std::isfinite(cur_s[w]) || gain >= 0 || (temp > 0 && coin(rng) < std::exp(gain / temp))) {
        cur[w] = next[w];
        cur_s[w] = next_s[w];
      }
    }
  }
  std::vector<std::pair<double, uint64_t>> ranked;
  for (const auto& [i, s] : visited) {
    if (std::isfinite(s) && keep(i)) ranked.push_back({-s, i});
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<uint64_t> out;
  for (size_t k = 0; k < ranked.size() && out.size() < want; ++k) out.push_back(ranked[k].second);
  return out;
}

CostModelSearch::CostModelSearch(const ConfigSpace& space, uint64_t seed, CostModelSearchOptions o)
    : SearchBase(space, seed), opts_(std::move(o)) {
  if (!(opts_.epsilon >= 0 && opts_.epsilon <= 1)) {
    throw UserError(str("epsilon ", opts_.epsilon, " must be between 0 and 1"));
  }
  opts_.model.seed = seed;
  model_ = std::make_unique<costmodel::XGBoostModel>(opts_.model);
  if (!opts_.load_model.empty()) model_->load(opts_.load_model);
  dirty_ = opts_.transfer.rows() > 0 && opts_.transfer_until > 0;
}

void CostModelSearch::observe(const std::vector<Observation>& results) {
  SearchBase::observe(results);
  for (const Observation& o : results) costs_[o.index] = o.cost_s;
  if (!results.empty()) dirty_ = true;
}

void CostModelSearch::compute_features(const std::vector<uint64_t>& points) {
  std::vector<uint64_t> missing;
  for (uint64_t i : points) {
    if (!features_.count(i) && std::find(missing.begin(), missing.end(), i) == missing.end()) missing.push_back(i);
  }
  if (missing.empty()) return;
  double start = steady_seconds();
  if (!opts_.feature_worker.empty()) {
    features_in_workers(missing);
  } else {
    for (uint64_t i : missing) {
      try {
        features_[i] = costmodel::config_features(space_.graph(), space_.target(), space_.to_config(i));
      } catch (const UserError&) {
        features_[i] = {};
        ++overhead_.unlowerable;
      }
    }
  }
  overhead_.features_s += steady_seconds() - start;
}

namespace {

// The features of `configs` (points[k]'s config is configs[k]) computed by `worker` into
// `out`; a crash, hang or nonsense answer is narrowed down by halves to the configs that cause
// it, which get an empty vector (counted in *unlowerable). Throws when the worker cannot start.
void features_by(ChildWorker& worker, const CostModelSearchOptions& o, const nlohmann::json& head,
                 const std::vector<uint64_t>& points, const std::vector<nlohmann::json>& configs,
                 std::vector<std::pair<uint64_t, std::vector<float>>>& out, size_t* unlowerable) {
  nlohmann::json req = head;
  req["features"] = configs;
  std::string reply_text, err;
  bool answered = worker.ask(req.dump(), o.feature_timeout_s, &reply_text, &err);
  if (!answered && worker.starts() == 0) throw std::runtime_error("cannot start the feature worker: " + err);
  nlohmann::json reply = answered ? nlohmann::json::parse(reply_text, nullptr, false) : nlohmann::json();
  const nlohmann::json* f = reply.is_object() && reply.contains("features") ? &reply["features"] : nullptr;
  if (f && f->is_array() && f->size() == points.size()) {
    for (size_t k = 0; k < points.size(); ++k) {
      std::vector<float> v;
      if ((*f)[k].is_array() && (*f)[k].size() == costmodel::kNumFeatures) {
        for (const auto& x : (*f)[k]) v.push_back(x.is_number() ? x.get<float>() : 0.0f);
      }
      out.emplace_back(points[k], std::move(v));
    }
    return;
  }
  if (points.size() == 1) {
    out.emplace_back(points[0], std::vector<float>{});
    ++*unlowerable;
    return;
  }
  const auto half = static_cast<std::ptrdiff_t>(points.size() / 2);
  features_by(worker, o, head, {points.begin(), points.begin() + half}, {configs.begin(), configs.begin() + half}, out,
              unlowerable);
  features_by(worker, o, head, {points.begin() + half, points.end()}, {configs.begin() + half, configs.end()}, out,
              unlowerable);
}

// The feature workers of one program, shared by every search of this process (a model's tasks,
// the service's jobs), one search at a time: each request names its workload and target, so any
// worker serves any search, and a model of 60 tasks keeps 8 processes, not 480.
struct WorkerPool {
  std::mutex mu;
  std::vector<std::unique_ptr<ChildWorker>> workers;
};

WorkerPool& feature_pool(const std::string& program) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<WorkerPool>> pools;
  std::lock_guard<std::mutex> l(mu);
  std::unique_ptr<WorkerPool>& p = pools[program];
  if (!p) p = std::make_unique<WorkerPool>();
  return *p;
}

}  // namespace

void CostModelSearch::features_in_workers(const std::vector<uint64_t>& points) {
  const nlohmann::json head = {{"workload", space_.workload().canonical()}, {"target", space_.target().str()}};
  size_t most = opts_.feature_workers;
  if (most == 0) most = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  // At least 4 points a worker: fewer would spend more on the round trip than on lowering.
  const size_t shards = std::clamp<size_t>(points.size() / 4, 1, most);
  WorkerPool& pool = feature_pool(opts_.feature_worker);
  std::lock_guard<std::mutex> held(pool.mu);
  std::vector<std::unique_ptr<ChildWorker>>& workers = pool.workers;
  while (workers.size() < shards) {
    workers.push_back(std::make_unique<ChildWorker>(std::vector<std::string>{opts_.feature_worker, "--serve"}));
  }
  std::vector<std::vector<uint64_t>> shard_points(shards);
  std::vector<std::vector<nlohmann::json>> shard_configs(shards);
  for (size_t k = 0; k < points.size(); ++k) {
    shard_points[k % shards].push_back(points[k]);
    shard_configs[k % shards].push_back(space_.to_config(points[k]));
  }
  std::vector<std::vector<std::pair<uint64_t, std::vector<float>>>> got(shards);
  std::vector<size_t> unlowerable(shards, 0);
  std::vector<std::exception_ptr> errors(shards);
  auto work = [&](size_t w) {
    try {
      features_by(*workers[w], opts_, head, shard_points[w], shard_configs[w], got[w], &unlowerable[w]);
    } catch (...) {
      errors[w] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t w = 1; w < shards; ++w) threads.emplace_back(work, w);
  work(0);
  for (std::thread& t : threads) t.join();
  for (size_t w = 0; w < shards; ++w) {
    if (errors[w]) std::rethrow_exception(errors[w]);
    for (auto& [i, v] : got[w]) features_[i] = std::move(v);
    overhead_.unlowerable += unlowerable[w];
  }
}

std::vector<double> CostModelSearch::score(const std::vector<uint64_t>& points) {
  compute_features(points);
  std::vector<uint64_t> missing;
  std::vector<float> rows;
  for (uint64_t i : points) {
    if (scores_.count(i) || std::find(missing.begin(), missing.end(), i) != missing.end()) continue;
    const std::vector<float>& f = features_.at(i);
    if (f.empty()) {
      scores_[i] = -INFINITY;  // cannot be lowered: never worth proposing
      continue;
    }
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

void CostModelSearch::refit() {
  std::vector<uint64_t> points;
  size_t correct = 0;
  for (const auto& [i, c] : costs_) {
    points.push_back(i);
    correct += std::isfinite(c) ? 1 : 0;
  }
  const bool use_transfer = opts_.transfer.rows() > 0 && correct < opts_.transfer_until;
  if (!use_transfer && correct < opts_.min_observed) return;  // stays dirty
  std::sort(points.begin(), points.end());  // the same rows in the same order for a seed
  compute_features(points);
  std::vector<std::vector<float>> rows;
  std::vector<double> costs;
  for (uint64_t i : points) {
    if (features_.at(i).empty()) continue;
    rows.push_back(features_.at(i));
    costs.push_back(costs_.at(i));
  }
  costmodel::TrainingSet set;
  if (use_transfer) set = opts_.transfer;
  if (set.num_features == 0) set.num_features = costmodel::kNumFeatures;
  // Every group weighs the same. (Weighing this workload's group up by the transfer set's
  // size was tried: XGBoost normalises group weights, the transfer groups then fell under
  // min_child_weight, and the first batches of a new shape were as poor as a cold start.)
  set.add_group(rows, costs);
  dirty_ = false;
  if (set.rows() == 0) return;
  double start = steady_seconds();
  model_->fit(set);
  overhead_.last_fit_rows = set.rows();
  overhead_.fit_s += steady_seconds() - start;
  ++overhead_.fits;
  scores_.clear();
}

std::vector<uint64_t> CostModelSearch::propose(size_t n) {
  if (dirty_) refit();
  std::vector<uint64_t> pool;
  if (model_->trained()) {
    double start = steady_seconds();
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
    overhead_.anneal_s += steady_seconds() - start - (overhead_.features_s - features_before);
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

void CostModelSearch::save_model(const std::string& path) const {
  if (!model_->trained()) {
    throw UserError(str("no cost model to save to ", path, ": too few measurements to fit one"));
  }
  model_->save(path);
}

}  // namespace tf
