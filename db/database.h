// The tuning database: every measurement the farm makes, and the lookups compiles need.
//
// One SQLite file (WAL mode) that many tuner processes write at once. A record is either
// fully committed or absent; a batch commits in one transaction. Schema and versioning are
// documented in docs/database.md; the file stays readable with the plain sqlite3 shell.
//
// Failures of the world (file not a tunefarm database, newer schema, read-only, missing
// directory, disk errors) throw DbError with a message naming the file.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "db/records.h"

namespace tf::db {

class DbError : public std::runtime_error {
 public:
  explicit DbError(const std::string& m) : std::runtime_error(m) {}
};

struct HistoryFilter {
  std::string workload;  // canonical; empty = all
  std::string target;    // empty = all
  int64_t limit = 0;     // 0 = no limit
  std::string run_uuid = {};  // records of this tuning run only; empty = any
  int64_t after_id = 0;  // records with a larger id only (a reader catching up); 0 = all
  // Keyset paging: records after this (measured_at, id) position in history order only.
  std::optional<std::pair<double, int64_t>> after_position = {};
  bool by_id = false;    // in id order rather than history order (measured_at, id)
};

class Database {
 public:
  virtual ~Database() = default;

  // Records a tuning run as started; `run.uuid` must be new.
  virtual void begin_run(const TuningRun& run) = 0;
  // Sets the final status (done, failed, cancelled, interrupted) and end time of a run.
  virtual void finish_run(const std::string& uuid, const std::string& status, double finished_at) = 0;
  // finish_run of `uuid` and update_job of `job` in one transaction: a crash leaves both as
  // they were or both written (the tuning service ends a job's run and records it in the
  // job's progress so; see service/job_manager.cc).
  virtual void finish_run_and_update_job(const std::string& uuid, const std::string& status, double finished_at,
                                         const JobRow& job) = 0;
  // All runs, newest first, with their record counts.
  virtual std::vector<TuningRun> runs() = 0;

  // Stores `records` in one transaction: all of them, or (on any error) none. A record whose
  // identity() is already stored is skipped. Returns how many were added. Throws DbError on
  // an invalid record (naming it) or a failure of the file.
  virtual int64_t commit(const std::vector<MeasureRecord>& records) = 0;

  // Stores a tuning run's verdict (db/records.h): from then on the exact-tier lookups of its
  // (workload, target) answer its config while that config has a correct record. Returns
  // false when the same verdict is stored already (an import). Throws DbError naming the
  // field of an out-of-bounds verdict.
  virtual bool add_verdict(const Verdict& v) = 0;
  // Verdicts in the order they were decided; the filter's workload and target select.
  virtual std::vector<Verdict> verdicts(const HistoryFilter& f) = 0;

  // Stores what tuning bought a model (tune --model --local); DbError naming the field of an
  // out-of-bounds one. model_results lists them, newest first (none in a file older than
  // schema version 4, opened read-only).
  virtual void add_model_result(const ModelResult& m) = 0;
  virtual std::vector<ModelResult> model_results() = 0;

  // The best correct, error-free record for `key`, trying the tiers of MatchTier in order.
  // Returns tier None (and no record) when no tier matches.
  virtual BestResult best(const LookupKey& key) = 0;
  // The best record of every (workload, target) pair, by workload then target.
  virtual std::vector<MeasureRecord> best_per_pair() = 0;
  // The k fastest error-free records of a workload on a target (either may be empty = all).
  virtual std::vector<MeasureRecord> top_k(const std::string& workload, const std::string& target, int64_t k) = 0;
  // Records in the order they were measured (then committed).
  virtual std::vector<MeasureRecord> history(const HistoryFilter& f) = 0;
  // Whether this config of this workload was already measured on this target (any outcome).
  virtual bool measured(const std::string& workload, const std::string& target, const std::string& config_hash) = 0;

  // The tuning service's jobs (one writer: the service). add_job returns the new id;
  // update_job writes state, progress, reason and times (DbError for an unknown id); jobs()
  // lists them all by id (none in a file older than schema version 2, opened read-only).
  virtual int64_t add_job(const JobRow& job) = 0;
  virtual void update_job(const JobRow& job) = 0;
  virtual std::vector<JobRow> jobs() = 0;

  virtual Stats stats() = 0;
  // How many records each device key got since Unix time `since` (any outcome): the farm's
  // measurement rates (the dashboard's farm page).
  virtual std::map<std::string, int64_t> records_per_key_since(double since) = 0;
  // Keeps the `keep` fastest error-free records of each (workload, target) pair and removes
  // the rest (error records included). With dry_run, only reports what would go.
  virtual DistillResult distill(int64_t keep, bool dry_run) = 0;
};

enum class OpenMode { ReadWrite, ReadOnly };

// Opens (creating and migrating when needed, unless ReadOnly) the database at `path`, or an
// in-memory one for ":memory:". A file that is not an SQLite file, is cut short (not whole
// pages, or fewer than its header counts) or is empty (and not being created this moment) is
// refused with a DbError naming it; SQLite's "disk I/O error" and "database or disk is full"
// say how much space the file system has left when it is nearly full.
std::unique_ptr<Database> open_database(const std::string& path, OpenMode mode = OpenMode::ReadWrite);

// SQLite's quick_check of the whole file (it reads every page: seconds for a large
// database), for a service starting; throws DbError naming the file and the first problems.
void quick_check(const std::string& path);

// --db when given, else $TUNEFARM_DB, else ~/.local/share/tunefarm/tuning.db (whose folder is
// created on first use; an explicit path's folder must exist).
std::string database_path(const std::string& flag);

// The schema version this build reads and writes.
int schema_version();

}  // namespace tf::db
