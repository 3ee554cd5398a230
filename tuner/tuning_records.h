// The bridge between the compiler and the tuning database: lookup keys for workloads and
// targets, records for measured kernels, and configs for compiles (tuned or default).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "compiler/driver.h"
#include "db/database.h"

namespace tf {

constexpr const char* kTunefarmVersion = "0.1.0";

db::LookupKey lookup_key(const Workload& w, const Target& t);

// Canonical forms of a workload spec and a target string in any spelling, so that any
// spelling finds the same records; "" stays "" (a filter that takes all). Throw UserError.
std::string canonical_workload(const std::string& w);
std::string canonical_target(const std::string& t);

// The shape parameters of a workload as JSON ({"M": 64, ...}).
nlohmann::json workload_params(const Workload& w);

// This machine's CPU model (from /proc/cpuinfo), for records of local measurements.
std::string local_device_model();

// A new tuning run's id: a random (version 4) UUID.
std::string new_run_uuid();

// This machine's host name, for tuning runs.
std::string host_name();

// Now, in Unix seconds (the database's timestamps).
double unix_now();

// The row of a tuning run starting now on this host (db::Database::begin_run).
db::TuningRun new_tuning_run(const std::string& uuid, const std::string& user, const std::string& strategy,
                             int budget, const std::string& workload, const std::string& target);

// "tunefarm 0.1.0, LLVM 19.1.7".
std::string toolchain_version();

// A record of kernel `k` (its workload, target, template, config), not yet measured.
db::MeasureRecord record_for(const CompiledKernel& k, const std::string& device_key);

// What a compile uses: the best config in `db` for the workload and target (through the
// lookup tiers), or null when nothing matches. `source` says which: "tuned (exact)",
// "tuned (same-arch)", "tuned (nearest-shape)" or "default". A stored config that this
// template version rejects counts as no match.
struct ConfigChoice {
  nlohmann::json config;   // null: use the default
  std::string source = "default";
  nlohmann::json tuned_from;  // tier, workload, target, median_s of the record used
};
ConfigChoice choose_config(db::Database* db, const Workload& w, const Target& t);

}  // namespace tf
