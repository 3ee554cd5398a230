// The task scheduler: how several workloads share one trial budget, Ansor's gradient
// scheduler (docs/service.md says how it decides). The service's jobs and `tune --model` use it.
//
// pick_task gives a round to every workload first (those without earlier results first), then
// the next batch to the workload whose improvement is expected to reduce sum(weight x best
// time) the most, with a small share of random picks; workloads whose search ended are never
// picked.
#pragma once

#include <limits>
#include <random>
#include <vector>

namespace tf {

// What the scheduler knows of one workload: after each of its rounds, the job's trials spent
// on it so far and its best time then (infinity while nothing ran correctly).
struct TaskHistory {
  double weight = 1;
  std::vector<int> trials;      // cumulative, one per round
  std::vector<double> best_s;   // one per round
  bool over = false;            // its search ended (exhausted, early stop): never picked
  // It starts from results of earlier runs (tune --model's resume): its first round comes
  // after those of workloads that have none.
  bool resumed = false;
};

struct SchedulerOptions {
  double alpha = 0.2;    // weight of the observed (backward) gradient against the forward guess
  int window = 3;        // rounds the backward gradient looks back
  double epsilon = 0.05; // share of random picks among the live workloads
};

// The index of the workload to tune next, or -1 when all are over.
int pick_task(const std::vector<TaskHistory>& tasks, std::mt19937_64& rng, const SchedulerOptions& o = {});

// The expected reduction of sum(weight x best) per trial spent on `t` (larger: more useful);
// +infinity for a workload without a correct result yet. Exposed for tests and the docs.
double task_priority(const TaskHistory& t, const SchedulerOptions& o = {});

}  // namespace tf
