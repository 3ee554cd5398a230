// The Database on SQLite, through SQLiteCpp.
//
// Writers take the write lock up front (BEGIN IMMEDIATE) and wait up to kBusyTimeoutMs for
// it, so concurrent tuners queue instead of failing with "database is locked"; WAL mode lets
// readers run beside them. A batch is one transaction whose destructor rolls back unless it
// committed, so a crash or a bad record leaves nothing of the batch behind.
#include <SQLiteCpp/SQLiteCpp.h>
#include <sqlite3.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "db/database.h"

namespace tf::db {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kApplicationId = 0x54464442;  // "TFDB": marks the file as a tunefarm database
constexpr int kBusyTimeoutMs = 120000;

// Migration N takes a database from version N-1 to N. Never edit a released migration: add
// the next one.
const char* const kMigrations[] = {
    // 1: the first schema.
    R"sql(
CREATE TABLE workloads (
  id        INTEGER PRIMARY KEY,
  canonical TEXT NOT NULL UNIQUE,   -- canonical workload spec
  op        TEXT NOT NULL,
  params    TEXT NOT NULL,          -- JSON object of integer shape parameters
  flops     INTEGER NOT NULL        -- floating point operations of one call
);
CREATE TABLE targets (
  id           INTEGER PRIMARY KEY,
  target       TEXT NOT NULL,       -- canonical target string
  device_key   TEXT NOT NULL,       -- farm key (rpi4, cuda-sm80) or 'local'
  arch         TEXT NOT NULL,       -- x86_64, aarch64, cuda, rocm
  device_model TEXT NOT NULL,       -- CPU or GPU model
  toolchain    TEXT NOT NULL,       -- compiler versions
  UNIQUE (target, device_key, device_model, toolchain)
);
CREATE TABLE runs (
  id          INTEGER PRIMARY KEY,
  uuid        TEXT NOT NULL UNIQUE,
  user        TEXT NOT NULL,
  host        TEXT NOT NULL,
  strategy    TEXT NOT NULL,
  budget      INTEGER NOT NULL,
  workload    TEXT NOT NULL,
  target      TEXT NOT NULL,
  started_at  REAL NOT NULL,        -- Unix seconds
  finished_at REAL,                 -- NULL while running
  status      TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'cancelled'))
);
CREATE TABLE records (
  id            INTEGER PRIMARY KEY,
  identity      TEXT NOT NULL UNIQUE,  -- digest of what identifies the measurement
  run_id        INTEGER REFERENCES runs(id),
  workload_id   INTEGER NOT NULL REFERENCES workloads(id),
  target_id     INTEGER NOT NULL REFERENCES targets(id),
  template      TEXT NOT NULL,         -- schedule template and version
  config        TEXT NOT NULL,         -- JSON object of knobs
  config_hash   TEXT NOT NULL,
  samples       TEXT NOT NULL,         -- JSON array of per-call seconds, one per sample
  median_s      REAL,                  -- median of samples; NULL unless error_code = 'ok'
  number        INTEGER NOT NULL,      -- calls per sample
  repeat        INTEGER NOT NULL,      -- samples
  min_repeat_ms REAL NOT NULL,
  flush         INTEGER NOT NULL,      -- 1 if caches were flushed before each sample
  cooldown_ms   REAL NOT NULL,
  error_code    TEXT NOT NULL,
  error_msg     TEXT NOT NULL,
  compile_s     REAL NOT NULL,
  measured_at   REAL NOT NULL,         -- Unix seconds
  correctness   TEXT NOT NULL CHECK (correctness IN ('ok', 'wrong', 'unchecked'))
);
CREATE INDEX records_best   ON records (workload_id, target_id, median_s);
CREATE INDEX records_config ON records (workload_id, target_id, config_hash);
CREATE INDEX records_time   ON records (measured_at, id);
CREATE VIEW record_view AS
  SELECT r.id, w.canonical AS workload, t.target, t.device_key, r.template, r.config,
         r.median_s, CASE WHEN r.median_s > 0 THEN w.flops / r.median_s / 1e9 END AS gflops,
         r.error_code, r.correctness, datetime(r.measured_at, 'unixepoch') AS measured
  FROM records r JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id;
)sql",
    // 2: the tuning service's jobs (service/job.h, docs/service.md).
    R"sql(
CREATE TABLE jobs (
  id           INTEGER PRIMARY KEY,  -- the job id users see
  user         TEXT NOT NULL,        -- who submitted it (the service's tokens file)
  state        TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
  priority     INTEGER NOT NULL,     -- higher runs first
  spec         TEXT NOT NULL,        -- JSON: the job as submitted
  progress     TEXT NOT NULL,        -- JSON: per workload its runs, trials and best so far
  reason       TEXT NOT NULL,        -- why it failed or was cancelled; empty otherwise
  submitted_at REAL NOT NULL,        -- Unix seconds
  started_at   REAL,                 -- NULL until it first runs
  finished_at  REAL                  -- NULL until it ends
);
CREATE INDEX jobs_state ON jobs (state, priority, submitted_at);
)sql",
    // 3: a run whose process stopped or died before it ended is 'interrupted', not
    // 'cancelled' (which says a user cancelled it). SQLite cannot change a CHECK constraint in
    // place: the table is copied (migrations run with foreign keys off; ids are kept, so the
    // records' run_id stay valid).
    R"sql(
CREATE TABLE runs_v3 (
  id          INTEGER PRIMARY KEY,
  uuid        TEXT NOT NULL UNIQUE,
  user        TEXT NOT NULL,
  host        TEXT NOT NULL,
  strategy    TEXT NOT NULL,
  budget      INTEGER NOT NULL,
  workload    TEXT NOT NULL,
  target      TEXT NOT NULL,
  started_at  REAL NOT NULL,        -- Unix seconds
  finished_at REAL,                 -- NULL while running
  status      TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'cancelled', 'interrupted'))
);
INSERT INTO runs_v3 SELECT id, uuid, user, host, strategy, budget, workload, target, started_at, finished_at, status
  FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v3 RENAME TO runs;
)sql",
    // 4: tuning runs' verdicts (db/records.h, Verdict): the config a run's final re-timing
    // found fastest against the default in the same rounds; lookups take the newest.
    R"sql(
CREATE TABLE verdicts (
  id          INTEGER PRIMARY KEY,
  workload    TEXT NOT NULL,        -- canonical workload spec
  target      TEXT NOT NULL,        -- canonical target string
  template    TEXT NOT NULL,
  config_hash TEXT NOT NULL,        -- the winner's (records.config_hash)
  run_uuid    TEXT NOT NULL,        -- the run that decided; empty if none
  speedup     REAL NOT NULL,        -- over the default schedule, median of paired ratios
  decided_at  REAL NOT NULL         -- Unix seconds
);
CREATE INDEX verdicts_pair ON verdicts (workload, target, decided_at);
CREATE UNIQUE INDEX verdicts_identity ON verdicts (workload, target, template, config_hash, run_uuid, decided_at);
CREATE TABLE models (
  id              INTEGER PRIMARY KEY,
  model           TEXT NOT NULL,    -- the file as the user named it
  model_hash      TEXT NOT NULL,    -- SHA-256 of its bytes
  target          TEXT NOT NULL,
  device_key      TEXT NOT NULL,
  tuned_s         REAL NOT NULL,    -- median latency with the tuned configs
  default_s       REAL NOT NULL,    -- and with default schedules, timed beside it
  estimate_s      REAL NOT NULL,    -- the tuner's estimate for the tuned build; 0: none
  tuned_kernels   INTEGER NOT NULL,
  tunable_kernels INTEGER NOT NULL,
  configs         TEXT NOT NULL,    -- JSON array: per tuned workload {workload, template, config}
  measured_at     REAL NOT NULL
);
)sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

// The columns every record query selects, in the order read_record reads them.
constexpr const char* kRecordColumns = R"sql(
  r.id, w.canonical, w.op, w.params, w.flops, t.target, t.arch, t.device_key, t.device_model,
  t.toolchain, r.template, r.config, r.samples, r.number, r.repeat, r.min_repeat_ms, r.flush,
  r.cooldown_ms, r.error_code, r.error_msg, r.compile_s, r.measured_at, r.correctness,
  COALESCE(u.uuid, '')
  FROM records r JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id
  LEFT JOIN runs u ON u.id = r.run_id
)sql";

MeasureRecord read_record(SQLite::Statement& q) {
  MeasureRecord r;
  int c = 0;
  r.id = q.getColumn(c++).getInt64();
  r.workload = q.getColumn(c++).getString();
  r.op = q.getColumn(c++).getString();
  r.params = json::parse(q.getColumn(c++).getString());
  r.flops = q.getColumn(c++).getInt64();
  r.target = q.getColumn(c++).getString();
  r.arch = q.getColumn(c++).getString();
  r.device_key = q.getColumn(c++).getString();
  r.device_model = q.getColumn(c++).getString();
  r.toolchain = q.getColumn(c++).getString();
  r.template_name = q.getColumn(c++).getString();
  r.config = json::parse(q.getColumn(c++).getString());
  r.samples_s = json::parse(q.getColumn(c++).getString()).get<std::vector<double>>();
  r.settings.number = q.getColumn(c++).getInt();
  r.settings.repeat = q.getColumn(c++).getInt();
  r.settings.min_repeat_ms = q.getColumn(c++).getDouble();
  r.settings.flush = q.getColumn(c++).getInt() != 0;
  r.settings.cooldown_ms = q.getColumn(c++).getDouble();
  r.error_code = q.getColumn(c++).getString();
  r.error_msg = q.getColumn(c++).getString();
  r.compile_s = q.getColumn(c++).getDouble();
  r.measured_at = q.getColumn(c++).getDouble();
  r.correctness = q.getColumn(c++).getString();
  r.run_uuid = q.getColumn(c++).getString();
  return r;
}

// " (the file system holding PATH has N KiB free)" when it has less than 4 MiB, else "":
// what a "disk I/O error" or "database or disk is full" from SQLite most often means.
std::string space_hint(const std::string& path) {
  fs::path dir = fs::path(path).parent_path();
  struct statvfs st;
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &st) != 0) return "";
  unsigned long long free_bytes = static_cast<unsigned long long>(st.f_bavail) * st.f_frsize;
  if (free_bytes >= (4ull << 20)) return "";
  return " (the file system holding " + path + " has " + std::to_string(free_bytes / 1024) +
         " KiB free: free space there, then retry)";
}

// What is wrong with the header of the SQLite file at `path` against its size now ("" when
// nothing, or when it cannot be read: SQLite then says why).
std::string header_problem(const std::string& path) {
  std::error_code ec;
  uintmax_t size = fs::file_size(path, ec);
  if (ec) return "";
  unsigned char h[100] = {};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  size_t got = std::fread(h, 1, sizeof h, f);
  std::fclose(f);
  if (got < sizeof h || std::memcmp(h, "SQLite format 3", 16) != 0) {
    return path + " is not a tunefarm database (not an SQLite file)";
  }
  auto be = [&](int at, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = v << 8 | h[at + i];
    return v;
  };
  uint64_t page = be(16, 2) == 1 ? 65536 : be(16, 2);
  if (page < 512 || page > 65536 || (page & (page - 1)) != 0) {
    return "database " + path + " is damaged: its header gives a page size of " + std::to_string(page);
  }
  if (size % page != 0) {
    return "database " + path + " is damaged: it has " + std::to_string(size) + " bytes, not a whole number of " +
           std::to_string(page) + "-byte pages (cut short?). Restore it from a backup";
  }
  // The page count in the header is valid when its change counter matches (offsets 24, 92);
  // a WAL being checkpointed by another process may be ahead of the file, so only without one.
  uint64_t pages = be(28, 4);
  bool wal = fs::exists(path + "-wal", ec) && fs::file_size(path + "-wal", ec) > 0;
  if (!wal && pages > 0 && be(24, 4) == be(92, 4) && size < pages * page) {
    return "database " + path + " is damaged: its header counts " + std::to_string(pages) + " pages (" +
           std::to_string(pages * page) + " bytes) but the file has " + std::to_string(size) +
           " bytes (cut short?). Restore it from a backup";
  }
  return "";
}

// The checks a file gets before SQLite opens it, so that a damaged database is said rather
// than used (SQLite reads a file cut short as if the missing pages were never written) or
// silently made anew (SQLite takes an empty file for a new database). Throws DbError.
void check_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec) || fs::is_directory(path, ec)) return;
  uintmax_t size = fs::file_size(path, ec);
  if (ec) throw DbError("cannot open database " + path + ": " + ec.message());
  if (size == 0) {
    // A file that another process is creating at this moment is empty too, for a moment.
    auto age = fs::file_time_type::clock::now() - fs::last_write_time(path, ec);
    if (!ec && age > std::chrono::seconds(5)) {
      throw DbError("database " + path + " is an empty file (0 bytes): its data is gone. Remove it to start a new "
                    "database, or restore it from a backup");
    }
    return;
  }
  // Another process creating or extending the file writes its header before its pages (a
  // rollback journal beside it while it does), so a snapshot may look cut short for a moment:
  // a problem counts only when it is still there after a few looks.
  std::string problem;
  for (int look = 0; look < 5; ++look) {
    if (look > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    problem = header_problem(path);
    if (problem.empty()) return;
  }
  throw DbError(problem);
}

class SqliteDatabase : public Database {
 public:
  SqliteDatabase(const std::string& path, OpenMode mode)
      : path_(path), read_only_(mode == OpenMode::ReadOnly), db_(open(path, mode)) {
    db_.setBusyTimeout(kBusyTimeoutMs);
    check_and_migrate();
    if (!read_only_) db_.exec("PRAGMA foreign_keys = ON");
    // A fault hook for tests that cannot mount a small file system: the file may not grow past
    // this many pages, and a write that would is SQLITE_FULL, as on a full disk.
    if (const char* pages = std::getenv("TUNEFARM_FAULT_DB_MAX_PAGES"); pages && *pages && !read_only_) {
      db_.exec("PRAGMA max_page_count = " + std::to_string(std::strtoll(pages, nullptr, 10)));
    }
  }

  void begin_run(const TuningRun& run) override {
    write([&] {
      SQLite::Statement q(db_, "INSERT INTO runs (uuid, user, host, strategy, budget, workload, target, "
                               "started_at, finished_at, status) VALUES (?,?,?,?,?,?,?,?,NULL,?)");
      q.bind(1, run.uuid);
      q.bind(2, run.user);
      q.bind(3, run.host);
      q.bind(4, run.strategy);
      q.bind(5, run.budget);
      q.bind(6, run.workload);
      q.bind(7, run.target);
      q.bind(8, run.started_at);
      q.bind(9, run.status);
      q.exec();
    });
  }

  void finish_run(const std::string& uuid, const std::string& status, double finished_at) override {
    write([&] { finish_run_locked(uuid, status, finished_at); });
  }

  void finish_run_and_update_job(const std::string& uuid, const std::string& status, double finished_at,
                                 const JobRow& job) override {
    write([&] {
      finish_run_locked(uuid, status, finished_at);
      update_job_locked(job);
    });
  }

  std::vector<TuningRun> runs() override {
    return read([&] {
      SQLite::Statement q(db_, "SELECT u.uuid, u.user, u.host, u.strategy, u.budget, u.workload, u.target, "
                               "u.started_at, COALESCE(u.finished_at, 0), u.status, "
                               "(SELECT COUNT(*) FROM records r WHERE r.run_id = u.id) "
                               "FROM runs u ORDER BY u.started_at DESC, u.id DESC");
      std::vector<TuningRun> out;
      while (q.executeStep()) {
        TuningRun r;
        r.uuid = q.getColumn(0).getString();
        r.user = q.getColumn(1).getString();
        r.host = q.getColumn(2).getString();
        r.strategy = q.getColumn(3).getString();
        r.budget = q.getColumn(4).getInt64();
        r.workload = q.getColumn(5).getString();
        r.target = q.getColumn(6).getString();
        r.started_at = q.getColumn(7).getDouble();
        r.finished_at = q.getColumn(8).getDouble();
        r.status = q.getColumn(9).getString();
        r.records = q.getColumn(10).getInt64();
        out.push_back(r);
      }
      return out;
    });
  }

  int64_t add_job(const JobRow& j) override {
    int64_t id = 0;
    write([&] {
      SQLite::Statement q(db_, "INSERT INTO jobs (user, state, priority, spec, progress, reason, submitted_at, "
                               "started_at, finished_at) VALUES (?,?,?,?,?,?,?,NULL,NULL)");
      q.bind(1, j.user);
      q.bind(2, j.state);
      q.bind(3, j.priority);
      q.bind(4, j.spec.dump());
      q.bind(5, j.progress.is_null() ? "{}" : j.progress.dump());
      q.bind(6, j.reason);
      q.bind(7, j.submitted_at);
      q.exec();
      id = db_.getLastInsertRowid();
    });
    return id;
  }

  void update_job(const JobRow& j) override {
    write([&] { update_job_locked(j); });
  }

  std::vector<JobRow> jobs() override {
    if (version_ < 2) return {};
    return read([&] {
      SQLite::Statement q(db_, "SELECT id, user, state, priority, spec, progress, reason, submitted_at, "
                               "COALESCE(started_at, 0), COALESCE(finished_at, 0) FROM jobs ORDER BY id");
      std::vector<JobRow> out;
      while (q.executeStep()) {
        JobRow j;
        j.id = q.getColumn(0).getInt64();
        j.user = q.getColumn(1).getString();
        j.state = q.getColumn(2).getString();
        j.priority = q.getColumn(3).getInt64();
        j.spec = json::parse(q.getColumn(4).getString(), nullptr, false);
        j.progress = json::parse(q.getColumn(5).getString(), nullptr, false);
        j.reason = q.getColumn(6).getString();
        j.submitted_at = q.getColumn(7).getDouble();
        j.started_at = q.getColumn(8).getDouble();
        j.finished_at = q.getColumn(9).getDouble();
        if (j.spec.is_discarded() || j.progress.is_discarded()) {
          throw DbError("job " + std::to_string(j.id) + " in " + path_ + " holds malformed JSON");
        }
        out.push_back(std::move(j));
      }
      return out;
    });
  }

  int64_t commit(const std::vector<MeasureRecord>& records) override {
    for (size_t i = 0; i < records.size(); ++i) {
      try {
        check_record(records[i]);
      } catch (const std::invalid_argument& e) {
        throw DbError("record " + std::to_string(i) + " (" + records[i].workload + "): " + e.what());
      }
    }
    int64_t added = 0;
    write([&] {
      SQLite::Statement ins_w(db_, "INSERT INTO workloads (canonical, op, params, flops) VALUES (?,?,?,?) "
                                   "ON CONFLICT (canonical) DO NOTHING");
      SQLite::Statement get_w(db_, "SELECT id FROM workloads WHERE canonical = ?");
      SQLite::Statement ins_t(db_, "INSERT INTO targets (target, device_key, arch, device_model, toolchain) "
                                   "VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING");
      SQLite::Statement get_t(db_, "SELECT id FROM targets WHERE target = ? AND device_key = ? AND "
                                   "device_model = ? AND toolchain = ?");
      SQLite::Statement ins_u(db_, "INSERT INTO runs (uuid, user, host, strategy, budget, workload, target, "
                                   "started_at, finished_at, status) VALUES (?, '', '', 'imported', 0, '', '', ?, ?, 'done') "
                                   "ON CONFLICT (uuid) DO NOTHING");
      SQLite::Statement get_u(db_, "SELECT id FROM runs WHERE uuid = ?");
      SQLite::Statement ins_r(db_, R"sql(INSERT INTO records (identity, run_id, workload_id, target_id, template,
          config, config_hash, samples, median_s, number, repeat, min_repeat_ms, flush, cooldown_ms, error_code,
          error_msg, compile_s, measured_at, correctness)
          VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (identity) DO NOTHING)sql");
      for (const MeasureRecord& r : records) {
        ins_w.bind(1, r.workload);
        ins_w.bind(2, r.op);
        ins_w.bind(3, r.params.dump());
        ins_w.bind(4, r.flops);
        ins_w.exec();
        ins_w.reset();
        int64_t wid = lookup_id(get_w, {r.workload});
        std::string key = r.device_key.empty() ? "local" : r.device_key;
        ins_t.bind(1, r.target);
        ins_t.bind(2, key);
        ins_t.bind(3, r.arch);
        ins_t.bind(4, r.device_model);
        ins_t.bind(5, r.toolchain);
        ins_t.exec();
        ins_t.reset();
        int64_t tid = lookup_id(get_t, {r.target, key, r.device_model, r.toolchain});
        int c = 1;
        ins_r.bind(c++, r.identity());
        if (r.run_uuid.empty()) {
          ins_r.bind(c++);
        } else {
          ins_u.bind(1, r.run_uuid);
          ins_u.bind(2, r.measured_at);
          ins_u.bind(3, r.measured_at);
          ins_u.exec();
          ins_u.reset();
          ins_r.bind(c++, lookup_id(get_u, {r.run_uuid}));
        }
        ins_r.bind(c++, wid);
        ins_r.bind(c++, tid);
        ins_r.bind(c++, r.template_name);
        ins_r.bind(c++, r.config.dump());
        ins_r.bind(c++, r.config_hash());
        ins_r.bind(c++, json(r.samples_s).dump());
        if (r.error_code == "ok") ins_r.bind(c++, *r.median_s());
        else ins_r.bind(c++);
        ins_r.bind(c++, r.settings.number);
        ins_r.bind(c++, r.settings.repeat);
        ins_r.bind(c++, r.settings.min_repeat_ms);
        ins_r.bind(c++, r.settings.flush ? 1 : 0);
        ins_r.bind(c++, r.settings.cooldown_ms);
        ins_r.bind(c++, r.error_code);
        ins_r.bind(c++, r.error_msg);
        ins_r.bind(c++, r.compile_s);
        ins_r.bind(c++, r.measured_at);
        ins_r.bind(c++, r.correctness);
        added += ins_r.exec();
        ins_r.reset();
      }
    });
    return added;
  }

  bool add_verdict(const Verdict& v) override {
    refuse_invalid([&] { check_verdict(v); });
    bool added = false;
    write([&] {
      SQLite::Statement q(db_, "INSERT OR IGNORE INTO verdicts (workload, target, template, config_hash, run_uuid, "
                               "speedup, decided_at) VALUES (?, ?, ?, ?, ?, ?, ?)");
      q.bind(1, v.workload);
      q.bind(2, v.target);
      q.bind(3, v.template_name);
      q.bind(4, v.config_hash);
      q.bind(5, v.run_uuid);
      q.bind(6, v.speedup);
      q.bind(7, v.decided_at);
      added = q.exec() > 0;
    });
    return added;
  }

  std::vector<Verdict> verdicts(const HistoryFilter& f) override {
    return read([&] {
      std::vector<Verdict> out;
      if (version_ < 4) return out;
      std::string where = " WHERE 1";
      std::vector<std::string> args;
      if (!f.workload.empty()) {
        where += " AND workload = ?";
        args.push_back(f.workload);
      }
      if (!f.target.empty()) {
        where += " AND target = ?";
        args.push_back(f.target);
      }
      SQLite::Statement q(db_, "SELECT workload, target, template, config_hash, run_uuid, speedup, decided_at "
                               "FROM verdicts" + where + " ORDER BY decided_at, id");
      for (size_t i = 0; i < args.size(); ++i) q.bind(static_cast<int>(i + 1), args[i]);
      while (q.executeStep()) {
        out.push_back({q.getColumn(0).getString(), q.getColumn(1).getString(), q.getColumn(2).getString(),
                       q.getColumn(3).getString(), q.getColumn(4).getString(), q.getColumn(5).getDouble(),
                       q.getColumn(6).getDouble()});
      }
      return out;
    });
  }

  void add_model_result(const ModelResult& m) override {
    refuse_invalid([&] { check_model_result(m); });
    write([&] {
      SQLite::Statement q(db_, "INSERT INTO models (model, model_hash, target, device_key, tuned_s, default_s, "
                               "estimate_s, tuned_kernels, tunable_kernels, configs, measured_at) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
      int c = 1;
      for (const std::string* v : {&m.model, &m.model_hash, &m.target, &m.device_key}) q.bind(c++, *v);
      for (double v : {m.tuned_s, m.default_s, m.estimate_s}) q.bind(c++, v);
      q.bind(c++, m.tuned_kernels);
      q.bind(c++, m.tunable_kernels);
      q.bind(c++, m.configs.dump());
      q.bind(c++, m.measured_at);
      q.exec();
    });
  }

  std::vector<ModelResult> model_results() override {
    return read([&] {
      std::vector<ModelResult> out;
      if (version_ < 4) return out;
      SQLite::Statement q(db_, "SELECT id, model, model_hash, target, device_key, tuned_s, default_s, estimate_s, "
                               "tuned_kernels, tunable_kernels, configs, measured_at FROM models "
                               "ORDER BY measured_at DESC, id DESC");
      while (q.executeStep()) {
        ModelResult m;
        m.id = q.getColumn(0).getInt64();
        m.model = q.getColumn(1).getString();
        m.model_hash = q.getColumn(2).getString();
        m.target = q.getColumn(3).getString();
        m.device_key = q.getColumn(4).getString();
        m.tuned_s = q.getColumn(5).getDouble();
        m.default_s = q.getColumn(6).getDouble();
        m.estimate_s = q.getColumn(7).getDouble();
        m.tuned_kernels = q.getColumn(8).getInt64();
        m.tunable_kernels = q.getColumn(9).getInt64();
        m.configs = json::parse(q.getColumn(10).getString(), nullptr, false);
        m.measured_at = q.getColumn(11).getDouble();
        out.push_back(std::move(m));
      }
      return out;
    });
  }

  BestResult best(const LookupKey& key) override {
    return read([&] {
      // Candidates of one tier: correct records, and wrong answers (which rule a config out).
      std::string tmpl = key.template_name.empty() ? "" : " AND r.template = ?";
      auto pick = [&](const std::string& where, std::vector<std::string> args,
                      const std::optional<Verdict>& verdict = std::nullopt) -> std::optional<BestResult> {
        if (!key.template_name.empty()) args.push_back(key.template_name);
        return robust_best(all(std::string("SELECT ") + kRecordColumns + where + tmpl +
                                   " AND (r.error_code = 'ok' OR r.correctness = 'wrong' OR r.error_code = 'wrong_answer')"
                                   " ORDER BY r.id",
                               args),
                           verdict ? &*verdict : nullptr);
      };
      BestResult res;
      if (auto b = pick(" WHERE w.canonical = ? AND t.target = ?", {key.workload, key.target},
                        newest_verdict(key.workload, key.target, key.template_name))) {
        res = *b;
        res.tier = MatchTier::Exact;
        return res;
      }
      // Same workload, same architecture: the targets are ranked separately, then together.
      // Emulated boards' timings and real ones never stand in for each other.
      std::string emulated = emulated_target(key.target) ? " AND instr(t.target, ?) > 0" : " AND instr(t.target, ?) = 0";
      if (auto b = pick(" WHERE w.canonical = ? AND t.arch = ?" + emulated,
                        {key.workload, key.arch, kEmulatedTargetMarker})) {
        res = *b;
        res.tier = MatchTier::SameArch;
        return res;
      }
      // Nearest shape of the same operator on the same target: distance in C++.
      std::vector<std::string> args = {key.op, key.target};
      if (!key.template_name.empty()) args.push_back(key.template_name);
      SQLite::Statement q(db_, "SELECT DISTINCT w.canonical, w.params FROM records r "
                               "JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id "
                               "WHERE w.op = ? AND t.target = ? AND r.error_code = 'ok' AND r.correctness != 'wrong'" + tmpl);
      for (size_t i = 0; i < args.size(); ++i) q.bind(static_cast<int>(i + 1), args[i]);
      std::vector<std::pair<double, std::string>> near;
      while (q.executeStep()) {
        near.push_back({shape_distance(key.params, json::parse(q.getColumn(1).getString())), q.getColumn(0).getString()});
      }
      std::sort(near.begin(), near.end());
      for (const auto& [d, w] : near) {
        if (d > kMaxShapeDistance) break;
        if (auto b = pick(" WHERE w.canonical = ? AND t.target = ?", {w, key.target})) {
          res = *b;
          res.tier = MatchTier::NearestShape;
          res.distance = d;
          return res;
        }
      }
      return res;
    });
  }

  std::vector<MeasureRecord> best_per_pair() override {
    return read([&] {
      std::vector<MeasureRecord> rs = all(std::string("SELECT ") + kRecordColumns +
                                              " WHERE (r.error_code = 'ok' OR r.correctness = 'wrong' OR "
                                              "r.error_code = 'wrong_answer') ORDER BY w.canonical, t.target, r.id",
                                          {});
      // Every pair's newest verdict, read at once (the later of a pair's overwrites the earlier).
      std::map<std::pair<std::string, std::string>, Verdict> newest;
      for (Verdict& v : verdicts({})) newest[{v.workload, v.target}] = std::move(v);
      std::vector<MeasureRecord> out;
      for (size_t i = 0; i < rs.size();) {
        size_t j = i;
        while (j < rs.size() && rs[j].workload == rs[i].workload && rs[j].target == rs[i].target) ++j;
        auto v = newest.find({rs[i].workload, rs[i].target});
        if (auto b = robust_best({rs.begin() + static_cast<std::ptrdiff_t>(i), rs.begin() + static_cast<std::ptrdiff_t>(j)},
                                 v != newest.end() ? &v->second : nullptr)) {
          out.push_back(b->record);
        }
        i = j;
      }
      return out;
    });
  }

  std::vector<MeasureRecord> top_k(const std::string& workload, const std::string& target, int64_t k) override {
    return read([&] {
      auto [where, args] = filter(workload, target);
      return all(std::string("SELECT ") + kRecordColumns + where + (where.empty() ? " WHERE" : " AND") +
                     " r.error_code = 'ok' ORDER BY r.median_s, r.id LIMIT " + std::to_string(k),
                 args);
    });
  }

  std::vector<MeasureRecord> history(const HistoryFilter& f) override {
    return read([&] {
      auto [where, args] = filter(f.workload, f.target);
      if (!f.run_uuid.empty()) {
        where += where.empty() ? " WHERE u.uuid = ?" : " AND u.uuid = ?";
        args.push_back(f.run_uuid);
      }
      if (f.after_id > 0) where += (where.empty() ? " WHERE r.id > " : " AND r.id > ") + std::to_string(f.after_id);
      if (f.after_position) {
        char at[64];
        std::snprintf(at, sizeof at, "%.17g", f.after_position->first);
        where += std::string(where.empty() ? " WHERE " : " AND ") + "(r.measured_at, r.id) > (" + at + ", " +
                 std::to_string(f.after_position->second) + ")";
      }
      std::string limit = f.limit > 0 ? " LIMIT " + std::to_string(f.limit) : "";
      return all(std::string("SELECT ") + kRecordColumns + where + (f.by_id ? " ORDER BY r.id" : " ORDER BY r.measured_at, r.id") +
                     limit,
                 args);
    });
  }

  bool measured(const std::string& workload, const std::string& target, const std::string& hash) override {
    return read([&] {
      SQLite::Statement q(db_, "SELECT 1 FROM records r JOIN workloads w ON w.id = r.workload_id "
                               "JOIN targets t ON t.id = r.target_id "
                               "WHERE w.canonical = ? AND t.target = ? AND r.config_hash = ? LIMIT 1");
      q.bind(1, workload);
      q.bind(2, target);
      q.bind(3, hash);
      return q.executeStep();
    });
  }

  Stats stats() override {
    return read([&] {
      Stats s;
      s.records = db_.execAndGet("SELECT COUNT(*) FROM records").getInt64();
      s.workloads = db_.execAndGet("SELECT COUNT(DISTINCT workload_id) FROM records").getInt64();
      s.targets = db_.execAndGet("SELECT COUNT(DISTINCT target) FROM targets WHERE id IN "
                                 "(SELECT target_id FROM records)").getInt64();
      s.runs = db_.execAndGet("SELECT COUNT(*) FROM runs").getInt64();
      SQLite::Statement pairs(db_, "SELECT w.canonical, t.target, COUNT(*), SUM(r.error_code = 'ok') "
                                   "FROM records r JOIN workloads w ON w.id = r.workload_id "
                                   "JOIN targets t ON t.id = r.target_id GROUP BY w.canonical, t.target "
                                   "ORDER BY w.canonical, t.target");
      while (pairs.executeStep()) {
        s.per_pair.push_back({pairs.getColumn(0).getString(), pairs.getColumn(1).getString(),
                              pairs.getColumn(2).getInt64(), pairs.getColumn(3).getInt64()});
      }
      SQLite::Statement errs(db_, "SELECT error_code, COUNT(*) FROM records GROUP BY error_code");
      while (errs.executeStep()) s.errors[errs.getColumn(0).getString()] = errs.getColumn(1).getInt64();
      SQLite::Statement per_run(db_, "SELECT COALESCE(u.uuid, ''), COUNT(*) FROM records r "
                                     "LEFT JOIN runs u ON u.id = r.run_id GROUP BY 1");
      while (per_run.executeStep()) s.per_run[per_run.getColumn(0).getString()] = per_run.getColumn(1).getInt64();
      s.file_bytes = db_.execAndGet("PRAGMA page_count").getInt64() * db_.execAndGet("PRAGMA page_size").getInt64();
      return s;
    });
  }

  std::map<std::string, int64_t> records_per_key_since(double since) override {
    return read([&] {
      std::map<std::string, int64_t> out;
      SQLite::Statement q(db_, "SELECT t.device_key, COUNT(*) FROM records r JOIN targets t ON t.id = r.target_id "
                               "WHERE r.measured_at >= ? GROUP BY t.device_key");
      q.bind(1, since);
      while (q.executeStep()) out[q.getColumn(0).getString()] = q.getColumn(1).getInt64();
      return out;
    });
  }

  DistillResult distill(int64_t keep, bool dry_run) override {
    if (keep < 1) throw DbError("distill must keep at least 1 record per workload and target, not " + std::to_string(keep));
    DistillResult res;
    auto body = [&] {
      db_.exec("CREATE TEMP TABLE IF NOT EXISTS doomed (id INTEGER PRIMARY KEY)");
      db_.exec("DELETE FROM doomed");
      SQLite::Statement mark(db_, R"sql(INSERT INTO doomed SELECT id FROM (
          SELECT r.id, r.error_code, r.correctness, ROW_NUMBER() OVER (PARTITION BY r.workload_id, t.target
                 ORDER BY r.error_code != 'ok', r.correctness = 'wrong', r.median_s, r.id) AS rank
          FROM records r JOIN targets t ON t.id = r.target_id)
          WHERE rank > ? OR error_code != 'ok' OR correctness = 'wrong')sql");
      mark.bind(1, keep);
      mark.exec();
      SQLite::Statement per(db_, "SELECT w.canonical, t.target, COUNT(*) FROM doomed d JOIN records r ON r.id = d.id "
                                 "JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id "
                                 "GROUP BY 1, 2 ORDER BY 1, 2");
      while (per.executeStep()) {
        res.removed_per_pair.push_back({per.getColumn(0).getString(), per.getColumn(1).getString(),
                                        per.getColumn(2).getInt64(), 0});
        res.removed += per.getColumn(2).getInt64();
      }
      res.kept = db_.execAndGet("SELECT COUNT(*) FROM records").getInt64() - res.removed;
      if (!dry_run) db_.exec("DELETE FROM records WHERE id IN (SELECT id FROM doomed)");
      db_.exec("DROP TABLE doomed");
    };
    if (dry_run) {
      // A temp table is private to this connection: a dry run writes nothing shared.
      read([&] { body(); return 0; });
    } else {
      write(body);
    }
    return res;
  }

 private:
  static SQLite::Database open(const std::string& path, OpenMode mode) {
    if (path != ":memory:") {
      fs::path parent = fs::path(path).parent_path();
      if (!parent.empty() && !fs::is_directory(parent)) {
        throw DbError("cannot open database " + path + ": directory " + parent.string() + " does not exist");
      }
      if (mode == OpenMode::ReadOnly && !fs::exists(path)) {
        throw DbError("cannot open database " + path + ": no such file");
      }
      if (fs::is_directory(path)) throw DbError("cannot open database " + path + ": it is a directory");
      check_file(path);
    }
    int flags = mode == OpenMode::ReadOnly ? SQLite::OPEN_READONLY : SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE;
    try {
      return SQLite::Database(path, flags);
    } catch (const SQLite::Exception& e) {
      throw DbError("cannot open database " + path + ": " + e.what() + space_hint(path));
    }
  }

  struct SchemaState {
    int app_id = 0, version = 0;
    std::vector<std::string> tables;
  };

  // application_id, user_version and the tables, read in one transaction so they are one
  // snapshot: read separately, another process creating the file in between looks like a
  // foreign database (application id 0 but tables present).
  SchemaState read_schema_state() {
    SchemaState st;
    st.app_id = db_.execAndGet("PRAGMA application_id").getInt();
    st.version = db_.execAndGet("PRAGMA user_version").getInt();
    SQLite::Statement q(db_, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
    while (q.executeStep()) st.tables.push_back(q.getColumn(0).getString());
    return st;
  }

  // Refuses files that are not tunefarm databases or are newer than this build.
  void check_schema_state(const SchemaState& st) {
    if (st.app_id != 0 && st.app_id != kApplicationId) {
      throw DbError(path_ + " is not a tunefarm database (SQLite application id " + std::to_string(st.app_id) + ")");
    }
    if (st.app_id == 0 && !st.tables.empty()) {
      std::string names;
      for (const std::string& t : st.tables) names += (names.empty() ? "" : ", ") + t;
      throw DbError(path_ + " is an SQLite database of something else (tables: " + names +
                    "); refusing to modify it");
    }
    if (st.version > kSchemaVersion) {
      throw DbError(path_ + " has schema version " + std::to_string(st.version) + ", newer than the " +
                    std::to_string(kSchemaVersion) + " this tunefarm knows: upgrade tunefarm");
    }
  }

  // Verifies the file is a tunefarm database of a version we know, creating or migrating it.
  // Creating and migrating happen in one write transaction that re-reads the state under the
  // write lock, so any number of processes may open (and create) one new file at once.
  //
  // Some of SQLite's steps on a file being created by another connection (switching it to
  // WAL, its first read of a fresh WAL index) answer SQLITE_BUSY at once instead of calling
  // the busy handler; those are retried here, for as long as the busy timeout.
  void check_and_migrate() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
    for (int attempt = 0;; ++attempt) {
      try {
        check_and_migrate_once();
        return;
      } catch (const SQLite::Exception& e) {
        bool busy = (e.getErrorCode() & 0xff) == SQLITE_BUSY || (e.getErrorCode() & 0xff) == SQLITE_LOCKED;
        if (!busy || std::chrono::steady_clock::now() > deadline) {
          if (e.getErrorCode() == SQLITE_NOTADB) throw DbError(path_ + " is not a tunefarm database (not an SQLite file)");
          throw DbError("cannot initialize database " + path_ + ": " + e.what() + space_hint(path_));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5 + (getpid() + attempt * 7) % 20));
      }
    }
  }

  // One attempt of check_and_migrate; SQLite errors propagate as SQLite::Exception.
  void check_and_migrate_once() {
    SchemaState st;
    {
      SQLite::Transaction snapshot(db_, SQLite::TransactionBehavior::DEFERRED);
      st = read_schema_state();
      snapshot.commit();
    }
    check_schema_state(st);
    version_ = st.version;
    if (st.version == kSchemaVersion && st.app_id == kApplicationId) return;
    // An older file is readable as it is: what it lacks (the jobs of version 2) reads as empty.
    if (read_only_ && st.app_id == kApplicationId && st.version >= 1) return;
    if (read_only_) {
      throw DbError(path_ + " needs " + (st.app_id == 0 ? "creating" : "migrating from version " + std::to_string(st.version)) +
                    " but is open read-only");
    }
    db_.exec("PRAGMA journal_mode = WAL");
    SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
    // Another process may have created or migrated the file while we waited for the lock.
    st = read_schema_state();
    check_schema_state(st);
    for (int v = st.version; v < kSchemaVersion; ++v) db_.exec(kMigrations[v]);
    db_.exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
    db_.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
    tx.commit();
    version_ = kSchemaVersion;
  }

  // Inside a write transaction.
  void finish_run_locked(const std::string& uuid, const std::string& status, double finished_at) {
    SQLite::Statement q(db_, "UPDATE runs SET status = ?, finished_at = ? WHERE uuid = ?");
    q.bind(1, status);
    q.bind(2, finished_at);
    q.bind(3, uuid);
    if (q.exec() == 0) throw DbError("no tuning run " + uuid + " in " + path_);
  }

  void update_job_locked(const JobRow& j) {
    SQLite::Statement q(db_, "UPDATE jobs SET state = ?, progress = ?, reason = ?, started_at = ?, finished_at = ? "
                             "WHERE id = ?");
    q.bind(1, j.state);
    q.bind(2, j.progress.is_null() ? "{}" : j.progress.dump());
    q.bind(3, j.reason);
    if (j.started_at > 0) q.bind(4, j.started_at);
    else q.bind(4);
    if (j.finished_at > 0) q.bind(5, j.finished_at);
    else q.bind(5);
    q.bind(6, j.id);
    if (q.exec() == 0) throw DbError("no job " + std::to_string(j.id) + " in " + path_);
  }

  // The newest verdict on (workload, target), of `template_name` when one is given; none in
  // a file older than schema version 4 (opened read-only).
  std::optional<Verdict> newest_verdict(const std::string& workload, const std::string& target,
                                        const std::string& template_name) {
    std::optional<Verdict> newest;
    for (Verdict& v : verdicts({workload, target, 0})) {  // in the order they were decided
      if (template_name.empty() || v.template_name == template_name) newest = std::move(v);
    }
    return newest;
  }

  // Runs a check of something to store; what it refuses becomes a DbError naming the file.
  template <typename F>
  void refuse_invalid(F&& check) {
    try {
      check();
    } catch (const std::invalid_argument& e) {
      throw DbError(std::string(e.what()) + " (not stored in " + path_ + ")");
    }
  }

  // Runs `f` in one write transaction; SQLite errors become DbError naming the file.
  template <typename F>
  void write(F&& f) {
    if (read_only_) throw DbError("database " + path_ + " is open read-only");
    try {
      SQLite::Transaction tx(db_, SQLite::TransactionBehavior::IMMEDIATE);
      f();
      tx.commit();
    } catch (const SQLite::Exception& e) {
      int code = e.getErrorCode();
      if (code == SQLITE_BUSY) {
        throw DbError("database " + path_ + " stayed locked by another writer for " +
                      std::to_string(kBusyTimeoutMs / 1000) + " s");
      }
      if (code == SQLITE_READONLY) throw DbError("database " + path_ + " is read-only: " + e.what());
      throw DbError("database " + path_ + ": " + e.what() + space_hint(path_));
    }
  }

  template <typename F>
  auto read(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const SQLite::Exception& e) {
      throw DbError("database " + path_ + ": " + e.what());
    }
  }

  int64_t lookup_id(SQLite::Statement& q, const std::vector<std::string>& args) {
    for (size_t i = 0; i < args.size(); ++i) q.bind(static_cast<int>(i + 1), args[i]);
    if (!q.executeStep()) throw DbError("database " + path_ + ": a row vanished inside a transaction");
    int64_t id = q.getColumn(0).getInt64();
    q.reset();
    return id;
  }

  std::pair<std::string, std::vector<std::string>> filter(const std::string& workload, const std::string& target) {
    std::string where;
    std::vector<std::string> args;
    if (!workload.empty()) {
      where = " WHERE w.canonical = ?";
      args.push_back(workload);
    }
    if (!target.empty()) {
      where += where.empty() ? " WHERE t.target = ?" : " AND t.target = ?";
      args.push_back(target);
    }
    return {where, args};
  }

  std::vector<MeasureRecord> all(const std::string& sql, const std::vector<std::string>& args) {
    SQLite::Statement q(db_, sql);
    for (size_t i = 0; i < args.size(); ++i) q.bind(static_cast<int>(i + 1), args[i]);
    std::vector<MeasureRecord> out;
    while (q.executeStep()) out.push_back(read_record(q));
    return out;
  }

  std::optional<MeasureRecord> first(const std::string& sql, const std::vector<std::string>& args) {
    std::vector<MeasureRecord> v = all(sql, args);
    if (v.empty()) return std::nullopt;
    return v[0];
  }

  std::string path_;
  bool read_only_;
  int version_ = 0;  // the file's schema version (older than ours only when read-only)
  SQLite::Database db_;
};

}  // namespace

int schema_version() { return kSchemaVersion; }

void quick_check(const std::string& path) {
  if (path == ":memory:") return;
  std::string problems;
  try {
    SQLite::Database d(path, SQLite::OPEN_READONLY);
    d.setBusyTimeout(kBusyTimeoutMs);
    SQLite::Statement q(d, "PRAGMA quick_check(5)");
    while (q.executeStep()) {
      std::string line = q.getColumn(0).getString();
      if (line != "ok") problems += (problems.empty() ? "" : "; ") + line;
    }
  } catch (const SQLite::Exception& e) {
    problems = e.what();
  }
  if (!problems.empty()) {
    throw DbError("database " + path + " is damaged (SQLite's quick_check: " + problems.substr(0, 500) +
                  "). Restore it from a backup");
  }
}

std::unique_ptr<Database> open_database(const std::string& path, OpenMode mode) {
  return std::make_unique<SqliteDatabase>(path, mode);
}

std::string database_path(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("TUNEFARM_DB"); env && *env) return env;
  const char* home = std::getenv("HOME");
  fs::path dir = fs::path(home && *home ? home : "/tmp") / ".local/share/tunefarm";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw DbError("cannot create " + dir.string() + " for the default database: " + ec.message());
  return (dir / "tuning.db").string();
}

}  // namespace tf::db
