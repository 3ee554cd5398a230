// A job of the tuning service: what to tune (workloads with weights), where (a farm key or the
// service's own boards), how much (one trial budget for all its workloads), and the task
// scheduler that shares that budget between the workloads.
//
// Promises:
// - parse_job_spec accepts exactly the job file format of docs/service.md and refuses
//   anything else with a UserError naming the field and the value: unknown fields, wrong
//   types, out-of-range numbers, unparsable or repeated workloads, unknown strategies. Its
//   result's to_json parses back to the same job.
// - Its workloads share the budget through the multi-task tuner (tuner/task_group.h), as
//   `tune --model` shares it between a model's tasks.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graph/onnx_import.h"
#include "tuner/session.h"
#include "tuner/tune.h"

namespace tf {

// A job's state; stored (db::JobRow::state) and shown as job_state_name's text.
enum class JobState { Queued, Running, Done, Failed, Cancelled };
// "queued", "running", "done", "failed", "cancelled".
const char* job_state_name(JobState s);
// The state named `text`; Failed for text no state has (a row written by a newer version).
JobState parse_job_state(const std::string& text);
// Done, failed or cancelled: nothing of it runs again.
bool is_over(JobState s);

struct JobTask {
  std::string workload;  // canonical
  double weight = 1;     // times it occurs in the model: its time counts this often
};

struct JobSpec {
  std::vector<JobTask> tasks;
  std::string model;          // the model the workloads come from (informative)
  // The SHA-256 (hex) of the ONNX model sent with the job (SubmitRequest.model_onnx): when the
  // job is done its tuned and default builds are timed. "": none.
  std::string model_sha256;
  // The model's precision (--precision: "fp32", "bf16" or "fp16"): the timing of a done job compiles
  // the model so, as the client extracted its tasks.
  std::string precision = "fp32";
  // The model's dynamic dimensions (--dim, --input-shape: graph::InputBinding), as the client
  // extracted its tasks; job fields "dims" {name: size} and "input_shapes" {input: [sizes]}.
  graph::InputBinding dims;
  std::string target;         // compile target; "": the boards' own (or the service machine's)
  std::string key;            // farm key to measure on; "": the service's local boards
  std::string strategy = SearchSettings{}.strategy;
  int priority = 0;           // higher runs first; -1000..1000
  double time_budget_min = 0; // the whole job; 0: none
  int boards = 1;             // farm boards leased at once (with key)
  uint64_t seed = 1;
  // As `tunefarm tune`'s flags of the same names, with their defaults: trials (new configs
  // over all workloads), early_stop (per workload), batch, retime_top, retime_rounds,
  // retime_drop, and the measurement's repeat, number and min_repeat_ms.
  TuneOptions tune;
};

// Throws UserError naming the field and the value.
JobSpec parse_job_spec(const nlohmann::json& j);
nlohmann::json to_json(const JobSpec& s);

}  // namespace tf
