#include "tuner/task_group.h"

#include <chrono>
#include <cmath>
#include <map>

#include "base/error.h"
#include "tuner/tuning_records.h"

namespace tf {

double gflops(const ConfigSpace& space, double seconds) {
  return seconds > 0 && std::isfinite(seconds) ? static_cast<double>(space.graph().flops) / seconds * 1e-9 : 0;
}

TaskGroup::TaskGroup(std::vector<GroupTask> specs, const Target& target, Builder& builder, Runner& runner,
                     db::Database* db, TaskGroupOptions opts, TaskGroupHooks& hooks, const std::atomic<bool>* stop)
    : tasks_(specs.size()), hist_(specs.size()), db_(db), opts_(std::move(opts)), hooks_(hooks), stop_(stop) {
  for (size_t i = 0; i < tasks_.size(); ++i) {
    Task& k = tasks_[i];
    k.spec = std::move(specs[i]);
    hist_[i].weight = k.spec.weight;
    k.space = std::make_unique<ConfigSpace>(parse_workload(k.spec.workload), target);
    if (k.spec.done_before) {
      // Its search, re-timing and run ended in an earlier start: nothing of it runs again.
      hist_[i].over = true;
      continue;
    }
    SearchSettings se = opts_.search;
    se.seed = opts_.search.seed + i;
    k.search = make_search(*k.space, db_, se);
    if (db_) {
      k.run = new_run_uuid();
      db_->begin_run(new_tuning_run(k.run, opts_.user, se.strategy, opts_.tune.trials, k.space->workload().canonical(),
                                    target.str()));
      hooks_.on_run(i, k.run);
    }
    TuneOptions o = opts_.tune;
    sample_by_target(o, target);
    o.run_uuid = k.run;
    k.commit = std::make_unique<CommitRecords>(db_, *k.space, runner.device_key(), k.run, o.measure);
    k.loop = std::make_unique<TuneLoop>(*k.space, *k.search.strategy, builder, runner, db_, o,
                                        std::vector<MeasureCallback*>{k.commit.get()}, stop_);
    // Results of earlier runs: its first round comes after those of tasks that have none.
    hist_[i].resumed = k.loop->state().known > 0;
    // A search that ended for its own reasons before a restart stays ended.
    if (k.spec.ended_before == StopReason::Exhausted || k.spec.ended_before == StopReason::EarlyStop) {
      k.loop->end_search(k.spec.ended_before);
      hist_[i].over = true;
    }
    if (k.spec.trials_before > 0) {
      hist_[i].trials.push_back(k.spec.trials_before);
      hist_[i].best_s.push_back(k.loop->state().best_s);
    }
  }
  // Tasks that differ only in the epilogue (a conv with and without its Relu) are siblings.
  std::map<std::string, std::vector<size_t>> by_key;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    Workload w = tasks_[i].space->workload();
    w.epilogue = Epilogue::None;
    by_key[tasks_[i].space->template_id() + "/" + w.canonical()].push_back(i);
  }
  for (const auto& [key, members] : by_key) {
    for (size_t i : members) {
      for (size_t j : members) {
        if (i != j) tasks_[i].siblings.push_back(j);
      }
    }
  }
}

TaskGroup::~TaskGroup() = default;

int TaskGroup::trials(size_t i) const {
  const Task& k = tasks_[i];
  return k.spec.trials_before + (k.loop ? k.loop->state().trials_done : 0);
}

int TaskGroup::spent() const {
  int n = 0;
  for (size_t i = 0; i < tasks_.size(); ++i) n += trials(i);
  return n;
}

// A new best of task i is measured on its siblings next, as a strong start.
void TaskGroup::share_best(size_t i) {
  const TuneState& st = tasks_[i].loop->state();
  if (st.best_config.is_null() || st.best_config == tasks_[i].shared) return;
  tasks_[i].shared = st.best_config;
  for (size_t j : tasks_[i].siblings) {
    if (!tasks_[j].loop || tasks_[j].loop->seed({st.best_config}) == 0) continue;
    hooks_.on_seed(j, i, st.best_config);
  }
}

StopReason TaskGroup::search() {
  const int budget = opts_.tune.trials;
  std::mt19937_64 rng(opts_.search.seed);
  const auto start = std::chrono::steady_clock::now();
  while (!stopping()) {
    const int spent_now = spent();
    if (spent_now >= budget) return StopReason::Trials;
    if (opts_.time_budget_s > 0 &&
        std::chrono::steady_clock::now() - start >= std::chrono::duration<double>(opts_.time_budget_s)) {
      return StopReason::TimeBudget;
    }
    int picked = pick_task(hist_, rng);
    if (picked < 0) return StopReason::Exhausted;
    const size_t i = static_cast<size_t>(picked);
    TuneLoop& loop = *tasks_[i].loop;
    if (!hooks_.around_step(i, [&] { return loop.step(budget - spent_now); })) {
      hist_[i].over = true;
      if (!stopping()) hooks_.on_task_over(i, loop.stop_reason());
      continue;
    }
    share_best(i);
    hist_[i].trials.push_back(trials(i));
    hist_[i].best_s.push_back(loop.state().best_s);
    hooks_.on_step(i, spent());
  }
  return StopReason::Interrupted;
}

void TaskGroup::finish(StopReason reason) {
  for (size_t i = 0; i < tasks_.size(); ++i) {
    Task& k = tasks_[i];
    if (!k.loop) continue;
    k.loop->end_search(reason);
    k.summary = k.loop->finish();
    if (!hooks_.end_run(i, k.summary) && db_) {
      db_->finish_run(k.run, k.summary.interrupted ? "cancelled" : "done", unix_now());
    }
  }
}

StopReason TaskGroup::run() {
  try {
    StopReason reason = search();
    if (stopping()) reason = StopReason::Interrupted;
    finish(reason);
    return reason;
  } catch (...) {
    if (!hooks_.on_failure() && db_) {
      for (const Task& k : tasks_) {
        if (k.run.empty()) continue;
        try {
          db_->finish_run(k.run, "failed", unix_now());
        } catch (const std::exception&) {
          // The database that failed the group may fail this too: the run stays open.
        }
      }
    }
    throw;
  }
}

}  // namespace tf
