// The multi-task tuner: several workloads of one target (a model's tasks, a job's workloads)
// sharing one trial budget. `tune --model` and the tuning service's jobs both run it, so a job
// tunes a model exactly as the command line does.
//
// What it owns, per task: the config space, the search (strategy seeded with seed + the task's
// index, its cost model started from the database), a tuning run in the database, the records'
// commit, and the tuning loop (tuner/tune.h). Across tasks:
// - which task measures its next batch: the task scheduler (tuner/task_scheduler.h), seeded
//   with the group's seed; tasks that start from earlier results (resume) come after the
//   others in the first round;
// - siblings: tasks that differ only in the epilogue (a conv with and without its Relu) try
//   each other's new best first (TuneLoop::seed);
// - the budget: the group's trials (those spent by an earlier start of the same job count),
//   the time budget, and the stop flag;
// - the end: each task's search ends with the group's reason, its best few are re-timed
//   (unless stopped), and its run is ended in the database.
// What it leaves to its caller (TaskGroupHooks): progress reports, persistence of a job's own
// state, and holding the service's per-workload lock around a batch.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "db/database.h"
#include "tuner/builder.h"
#include "tuner/config_space.h"
#include "tuner/runner.h"
#include "tuner/session.h"
#include "tuner/task_scheduler.h"
#include "tuner/tune.h"

namespace tf {

// One workload of the group.
struct GroupTask {
  std::string workload;
  double weight = 1;  // how many times the model computes it: the scheduler's weight
  // A job started again (the service): the trials its earlier starts spent on this task, whether
  // it was finished then (nothing of it runs again), and why its search ended then if it ended
  // on its own (exhausted, early stop: it stays ended).
  int trials_before = 0;
  bool done_before = false;
  StopReason ended_before = StopReason::None;
};

struct TaskGroupOptions {
  SearchSettings search;       // each task's search; task i's seed is search.seed + i
  TuneOptions tune;            // each task's loop; tune.trials is the whole group's budget
  double time_budget_s = 0;    // the whole group's; 0: none
  std::string user;            // who the tuning runs are recorded for
};

// What the caller sees of the run, and what it adds. Every hook runs on the group's thread.
class TaskGroupHooks {
 public:
  virtual ~TaskGroupHooks() = default;
  // Task `task`'s tuning run `run` was begun in the database (before its first record).
  virtual void on_run(size_t task, const std::string& run) {}
  // Task `to` will measure `config`, the new best of its sibling `from`, next.
  virtual void on_seed(size_t to, size_t from, const nlohmann::json& config) {}
  // Task `task` measured a batch; `spent` is the group's trials so far (earlier starts too).
  virtual void on_step(size_t task, int spent) {}
  // Task `task`'s search ended on its own before the group's did.
  virtual void on_task_over(size_t task, StopReason why) {}
  // Runs `batch` (one step of task `task`) and returns what it returns: the service holds its
  // per-workload lock around it.
  virtual bool around_step(size_t task, const std::function<bool()>& batch) { return batch(); }
  // Task `task` was re-timed and summarised: ends its run in the database and returns true,
  // or returns false for the group's own end: the run's status "done" (or "cancelled" when
  // stopped).
  virtual bool end_run(size_t task, const TuneSummary& summary) { return false; }
  // The group failed (an exception is on its way out): returns false for the group's own
  // handling, which ends every run begun as "failed" (as far as the database lets it).
  virtual bool on_failure() { return false; }
};

class TaskGroup {
 public:
  // Sets up every task not done before (its space, search, run and loop; the loop's
  // construction reads the database: resume). `db` may be null (nothing recorded or resumed).
  TaskGroup(std::vector<GroupTask> tasks, const Target& target, Builder& builder, Runner& runner,
            db::Database* db, TaskGroupOptions opts, TaskGroupHooks& hooks, const std::atomic<bool>* stop);
  ~TaskGroup();

  // Tunes until the budget is spent, the time budget passes, every search is over or `stop`
  // is set; then ends, re-times and summarises every task (end_run). Returns why it stopped.
  StopReason run();

  size_t size() const { return tasks_.size(); }
  const GroupTask& task(size_t i) const { return tasks_[i].spec; }
  const ConfigSpace& space(size_t i) const { return *tasks_[i].space; }
  // Its loop's state (live tasks only).
  const TuneState& state(size_t i) const { return tasks_[i].loop->state(); }
  // Its trials, earlier starts included.
  int trials(size_t i) const;
  const std::string& run_uuid(size_t i) const { return tasks_[i].run; }
  // Its summary, after run() (live tasks only).
  const TuneSummary& summary(size_t i) const { return tasks_[i].summary; }
  // The group's trials so far, earlier starts included.
  int spent() const;

 private:
  struct Task {
    GroupTask spec;
    std::unique_ptr<ConfigSpace> space;
    Search search;
    std::unique_ptr<CommitRecords> commit;
    std::unique_ptr<TuneLoop> loop;
    std::string run;
    nlohmann::json shared;  // the best it last passed to its siblings
    std::vector<size_t> siblings;
    TuneSummary summary;
  };
  bool stopping() const { return stop_ && *stop_; }
  void share_best(size_t i);
  StopReason search();
  void finish(StopReason reason);

  std::vector<Task> tasks_;
  std::vector<TaskHistory> hist_;
  db::Database* db_;
  TaskGroupOptions opts_;
  TaskGroupHooks& hooks_;
  const std::atomic<bool>* stop_;
};

// GFLOPS of `space`'s workload at `seconds` a call (0 when it has no time).
double gflops(const ConfigSpace& space, double seconds);

}  // namespace tf
