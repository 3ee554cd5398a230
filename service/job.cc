#include "service/job.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "base/enum_names.h"
#include "base/error.h"
#include "compiler/target.h"
#include "compiler/workload.h"
#include "graph/pass.h"
#include "tuner/search_strategy.h"

namespace tf {

namespace {
constexpr EnumName<JobState> kJobStates[] = {{JobState::Queued, "queued"},
                                             {JobState::Running, "running"},
                                             {JobState::Done, "done"},
                                             {JobState::Failed, "failed"},
                                             {JobState::Cancelled, "cancelled"}};
}  // namespace

const char* job_state_name(JobState s) { return enum_name(kJobStates, s); }

JobState parse_job_state(const std::string& text) { return enum_from_name(kJobStates, text).value_or(JobState::Failed); }

bool is_over(JobState s) { return s == JobState::Done || s == JobState::Failed || s == JobState::Cancelled; }

using json = nlohmann::json;

namespace {

constexpr int kMaxTasks = 1000;
constexpr int kMaxTrials = 1000000;

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

int get_int(const json& j, const char* field, int lo, int hi) {
  const json& v = j.at(field);
  if (!v.is_number_integer()) throw UserError(str("job field \"", field, "\" must be an integer, not ", shown(v)));
  int64_t x = v.get<int64_t>();
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) x = int64_t{hi} + 1;
  if (x < lo || x > hi) throw UserError(str("job field \"", field, "\" is ", shown(v), ": must be ", lo, "..", hi));
  return static_cast<int>(x);
}

double get_number(const json& j, const char* field, double lo, double hi) {
  const json& v = j.at(field);
  if (!v.is_number()) throw UserError(str("job field \"", field, "\" must be a number, not ", shown(v)));
  double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    throw UserError(str("job field \"", field, "\" is ", shown(v), ": must be ", lo, "..", hi));
  }
  return x;
}

std::string get_string(const json& j, const char* field) {
  const json& v = j.at(field);
  if (!v.is_string()) throw UserError(str("job field \"", field, "\" must be a string, not ", shown(v)));
  std::string s = v.get<std::string>();
  if (s.size() > 4096) throw UserError(str("job field \"", field, "\" is longer than 4096 characters"));
  return s;
}

}  // namespace

JobSpec parse_job_spec(const json& j) {
  if (!j.is_object()) throw UserError(str("a job must be a JSON object, not ", shown(j)));
  static const std::set<std::string> known = {
      "workloads",  "model",    "target",          "key",        "trials",        "strategy",
      "early_stop", "priority", "time_budget_min", "batch",      "boards",        "seed",
      "repeat",     "number",   "min_repeat_ms",   "retime_top", "retime_rounds", "retime_drop", "model_sha256",
      "precision",  "dims",     "input_shapes"};
  for (const auto& [k, v] : j.items()) {
    if (!known.count(k)) throw UserError(str("unknown job field \"", k, "\" (docs/service.md lists them)"));
  }
  JobSpec s;
  if (!j.contains("workloads")) throw UserError("a job needs \"workloads\": a list of workload specs");
  const json& ws = j.at("workloads");
  if (!ws.is_array() || ws.empty()) {
    throw UserError(str("job field \"workloads\" must be a non-empty list, not ", shown(ws)));
  }
  if (ws.size() > kMaxTasks) throw UserError(str("a job holds at most ", kMaxTasks, " workloads, not ", ws.size()));
  std::set<std::string> seen;
  for (const json& w : ws) {
    JobTask t;
    std::string spec;
    if (w.is_string()) {
      spec = w.get<std::string>();
    } else if (w.is_object()) {
      for (const auto& [k, v] : w.items()) {
        if (k != "workload" && k != "weight") {
          throw UserError(str("unknown field \"", k, "\" in a job's workload (workload, weight)"));
        }
      }
      if (!w.contains("workload")) throw UserError(str("a job's workload entry needs \"workload\": ", shown(w)));
      spec = get_string(w, "workload");
      if (w.contains("weight")) t.weight = get_number(w, "weight", 1e-6, 1e6);
      if (t.weight <= 0) throw UserError(str("workload weight ", t.weight, " must be positive"));
    } else {
      throw UserError(str("a job's workload must be a spec string or {\"workload\", \"weight\"}, not ", shown(w)));
    }
    try {
      t.workload = parse_workload(spec).canonical();
    } catch (const UserError& e) {
      throw UserError(str("workload ", shown(json(spec)), ": ", e.what()));
    }
    if (!seen.insert(t.workload).second) {
      throw UserError(str("workload ", t.workload, " appears twice in the job: give it one entry with a weight"));
    }
    s.tasks.push_back(t);
  }
  if (j.contains("model")) s.model = get_string(j, "model");
  if (j.contains("model_sha256")) {
    s.model_sha256 = get_string(j, "model_sha256");
    bool hex = s.model_sha256.size() == 64 &&
               std::all_of(s.model_sha256.begin(), s.model_sha256.end(),
                           [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
    if (!s.model_sha256.empty() && !hex) {
      throw UserError(str("job model_sha256 ", shown(json(s.model_sha256)), ": not 64 lower-case hex digits"));
    }
  }
  if (j.contains("precision")) {
    s.precision = get_string(j, "precision");
    try {
      graph::parse_precision(s.precision);
    } catch (const UserError& e) {
      throw UserError(str("job precision ", shown(json(s.precision)), ": ", e.what()));
    }
  }
  // Dynamic dimensions, checked as the command line's --dim and --input-shape are.
  s.dims = graph::binding_from_json(j, "job");
  if (j.contains("key")) s.key = get_string(j, "key");
  if (j.contains("target")) {
    s.target = get_string(j, "target");
    if (!s.target.empty()) {
      try {
        s.target = parse_target(s.target).str();
      } catch (const UserError& e) {
        throw UserError(str("job target ", shown(json(s.target)), ": ", e.what()));
      }
    }
  }
  if (j.contains("trials")) s.tune.trials = get_int(j, "trials", 1, kMaxTrials);
  if (j.contains("strategy")) {
    s.strategy = get_string(j, "strategy");
    const auto& names = search_strategy_names();
    if (std::find(names.begin(), names.end(), s.strategy) == names.end()) {
      throw UserError(str("job strategy ", shown(json(s.strategy)), ": not a search strategy (xgb, random, grid, ga)"));
    }
  }
  if (j.contains("early_stop")) s.tune.early_stop = get_int(j, "early_stop", 0, kMaxTrials);
  if (j.contains("priority")) s.priority = get_int(j, "priority", -1000, 1000);
  if (j.contains("time_budget_min")) s.time_budget_min = get_number(j, "time_budget_min", 0, 1e6);
  if (j.contains("batch")) s.tune.batch = get_int(j, "batch", 1, 256);
  if (j.contains("boards")) s.boards = get_int(j, "boards", 1, 256);
  if (j.contains("seed")) s.seed = static_cast<uint64_t>(get_int(j, "seed", 0, 2147483647));
  // Sampling asked for (either) is kept; else the target's (tuner/tune.h sample_by_target).
  s.tune.sampling_by_target = !j.contains("repeat") && !j.contains("min_repeat_ms");
  if (j.contains("repeat")) s.tune.measure.repeat = get_int(j, "repeat", 1, 1000);
  if (j.contains("number")) s.tune.measure.number = get_int(j, "number", 1, 1000000);
  if (j.contains("min_repeat_ms")) s.tune.measure.min_repeat_ms = get_number(j, "min_repeat_ms", 0, 60000);
  if (j.contains("retime_top")) s.tune.retime_top = get_int(j, "retime_top", 0, 100);
  if (j.contains("retime_rounds")) s.tune.retime_rounds = get_int(j, "retime_rounds", 0, 100);
  if (j.contains("retime_drop")) {
    s.tune.retime_drop = get_number(j, "retime_drop", 0, 1000);
    if (s.tune.retime_drop != 0 && s.tune.retime_drop < 1) {
      throw UserError(
          str("job field \"retime_drop\" is ", s.tune.retime_drop, ": must be 0 (never) or 1..1000"));
    }
  }
  return s;
}

json to_json(const JobSpec& s) {
  json ws = json::array();
  for (const JobTask& t : s.tasks) ws.push_back({{"workload", t.workload}, {"weight", t.weight}});
  json out = {{"workloads", ws},
              {"model", s.model},
              {"target", s.target},
              {"key", s.key},
              {"trials", s.tune.trials},
              {"strategy", s.strategy},
              {"early_stop", s.tune.early_stop},
              {"priority", s.priority},
              {"time_budget_min", s.time_budget_min},
              {"batch", s.tune.batch},
              {"boards", s.boards},
              {"seed", s.seed},
              {"number", s.tune.measure.number},
              {"retime_top", s.tune.retime_top},
              {"retime_rounds", s.tune.retime_rounds},
              {"retime_drop", s.tune.retime_drop},
              {"model_sha256", s.model_sha256},
              {"precision", s.precision},
              {"dims", s.dims.dims},
              {"input_shapes", s.dims.shapes}};
  // Sampling asked for only: without it the board's target decides when the job runs.
  if (!s.tune.sampling_by_target) {
    out["repeat"] = s.tune.measure.repeat;
    out["min_repeat_ms"] = s.tune.measure.min_repeat_ms;
  }
  return out;
}

}  // namespace tf
