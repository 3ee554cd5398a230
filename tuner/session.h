// One tuning set-up for `tunefarm tune` and the tuning service's jobs (service/job_manager.h):
// where candidates are measured and the target they compile for, and the search of one
// workload, its cost model started from the database's records of other workloads.
//
// Promises: a local session refuses a target this machine cannot run (UserError naming both
// architectures); a farm session leases boards of the key whose architecture is the target's,
// and without a target compiles for the boards' own. The search is the strategy asked for,
// seeded; xgb's cost model starts from up to 4,000 records of other workloads of the same
// template and architecture unless transfer is off, and transfer_note says how it started.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "compiler/target.h"
#include "db/database.h"
#include "tuner/config_space.h"
#include "tuner/farm_runner.h"
#include "tuner/cost_model_search.h"
#include "tuner/runner.h"
#include "tuner/search_strategy.h"

namespace tf {

// Where a tuning run measures.
struct MeasurePlace {
  std::string target;                     // a target string; "": this machine's, or the boards' own
  std::optional<FarmRunnerOptions> farm;  // lease boards of farm->key; nullopt: this machine
  const char* target_name = "target";     // how errors name the target: tune's "--target", a job's "target"
};

struct Session {
  std::unique_ptr<Runner> runner;
  FarmRunner* farm = nullptr;  // the runner, when it is the farm's
  Target target;
};

// `make_local` makes the runner of a local session (LocalRunner, or the service's pooled
// boards). `on_board_lost` (farm) is called from the runner's threads, set before the first
// lease.
Session open_session(const MeasurePlace& place, const std::function<std::unique_ptr<Runner>()>& make_local,
                     std::function<void(const std::string& board, const std::string& why)> on_board_lost = {});

// How a workload is searched: `tune`'s flags, a job's fields.
struct SearchSettings {
  std::string strategy = "xgb";  // search_strategy_names()
  uint64_t seed = 1;
  bool transfer = true;          // xgb: start from the database's records of other workloads
  CostModelSearchOptions model;      // xgb: objective, epsilon, transfer_until, load_model, ...
};

struct Search {
  std::unique_ptr<SearchStrategy> strategy;
  std::string transfer_note;  // xgb: how its cost model starts ("" for other strategies)
};

// The search of `space` (the database may be null: no transfer). Features are computed in
// tunefarm-build-worker next to this program.
Search make_search(const ConfigSpace& space, db::Database* db, const SearchSettings& s);

}  // namespace tf
