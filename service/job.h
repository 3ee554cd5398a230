// A job of the tuning service: what to tune (workloads with weights), where (a farm key or the
// service's own boards), how much (one trial budget for all its workloads), and the task
// scheduler that shares that budget between the workloads.
//
// Promises:
// - parse_job_spec accepts exactly the job file format of docs/service.md and refuses
//   anything else with a UserError naming the field and the value: unknown fields, wrong
//   types, out-of-range numbers, unparsable or repeated workloads, unknown strategies. Its
//   result's to_json parses back to the same job.
// - pick_task is Ansor's gradient task scheduler (docs/service.md says how it decides): a
//   round each for every workload first, then the workload whose next batch is expected to
//   reduce sum(weight x best time) the most, with a small share of random picks.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tuner/session.h"
#include "tuner/tune.h"

namespace tf {

struct JobTask {
  std::string workload;  // canonical
  double weight = 1;     // times it occurs in the model: its time counts this often
};

struct JobSpec {
  std::vector<JobTask> tasks;
  std::string model;          // the model the workloads come from (informative)
  std::string target;         // compile target; "": the boards' own (or the service machine's)
  std::string key;            // farm key to measure on; "": the service's local boards
  std::string strategy = SearchSettings{}.strategy;
  int priority = 0;           // higher runs first; -1000..1000
  double time_budget_min = 0; // the whole job; 0: none
  int boards = 1;             // farm boards leased at once (with key)
  uint64_t seed = 1;
  // As `tunefarm tune`'s flags of the same names, with their defaults: trials (new configs
  // over all workloads), early_stop (per workload), batch, retime_top, retime_rounds, and the
  // measurement's repeat, number and min_repeat_ms.
  TuneOptions tune;
};

// Throws UserError naming the field and the value.
JobSpec parse_job_spec(const nlohmann::json& j);
nlohmann::json to_json(const JobSpec& s);

// What the scheduler knows of one workload: after each of its rounds, the job's trials spent
// on it so far and its best time then (infinity while nothing ran correctly).
struct TaskHistory {
  double weight = 1;
  std::vector<int> trials;      // cumulative, one per round
  std::vector<double> best_s;   // one per round
  bool over = false;            // its search ended (exhausted, early stop): never picked
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
