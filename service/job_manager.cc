#include "service/job_manager.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include "base/file_io.h"
#include "base/hash.h"
#include "base/error.h"
#include "compiler/target.h"
#include "compiler/workload.h"
#include "proto/credentials.h"
#include "tuner/builder.h"
#include "tuner/farm_runner.h"
#include "tuner/model_comparison.h"
#include "tuner/runner.h"
#include "tuner/task_group.h"
#include "runtime/child_process.h"
#include "tuner/tune.h"
#include "tuner/tuning_records.h"

namespace tf {

namespace pb = tunefarm::v1;
using json = nlohmann::json;

namespace {

constexpr size_t kMaxEventsKept = 512;

// TEST ONLY: TUNEFARM_FAULT=NAME makes the service die (as kill -9 would) when it passes the
// point NAME, so tests can crash it between two steps that no signal hits reliably. Unset in
// normal use; the points are listed where they are called.
void fault_point(const char* name) {
  static const char* fault = std::getenv("TUNEFARM_FAULT");
  if (fault && std::strcmp(fault, name) == 0) {
    std::fprintf(stderr, "TUNEFARM_FAULT: dying at %s\n", name);
    std::fflush(stderr);
    std::_Exit(137);
  }
}

bool is_over(const std::string& state) { return is_over(parse_job_state(state)); }

// A done job's model (JobSpec::model_sha256, kept at `path`) compiled with the database's
// tuned configs and with default schedules, timed on `runner` (tuner/model_comparison.h),
// and the result stored: progress["model"], or {"not_timed": why}.
json time_job_model(const JobSpec& s, const std::string& path, Runner& runner, const Target& t, db::Database& db) {
  std::string name = s.model.empty() ? s.model_sha256.substr(0, 12) + ".onnx" : s.model;
  try {
    graph::Graph g =
        load_model_for_target(path, t, 2, {}, graph::parse_precision(s.precision), s.dims, /*external_data=*/false);
    ModelComparison mc = compare_tuned_and_default(g, t, &db, name, runner);
    if (!mc.error.empty()) return {{"not_timed", mc.error}};
    db.add_model_result(model_result(mc, name, s.model_sha256, t, runner.device_key(), 0));
    return to_json(mc);
  } catch (const std::exception& e) {
    return {{"not_timed", e.what()}};
  }
}

json initial_progress(const JobSpec& s) {
  json tasks = json::array();
  for (const JobTask& t : s.tasks) {
    tasks.push_back({{"workload", t.workload}, {"weight", t.weight}, {"runs", json::array()}, {"trials", 0},
                     {"errors", 0}, {"best_s", 0.0}, {"best_config", nullptr}, {"default_s", 0.0},
                     {"gflops_per_s", 0.0}, {"done", false}, {"stop_reason", ""}});
  }
  return {{"target", s.target}, {"restarts", 0}, {"trials", 0}, {"errors", 0}, {"tasks", tasks}};
}

}  // namespace

// Measurement slots of this machine, handed out first come, first served.
class LocalBoardPool {
 public:
  explicit LocalBoardPool(int n) : free_(n) {}
  void acquire() {
    std::unique_lock<std::mutex> l(mu_);
    uint64_t ticket = next_ticket_++;
    cv_.wait(l, [&] { return ticket == serving_ && free_ > 0; });
    ++serving_;
    --free_;
    cv_.notify_all();
  }
  void release() {
    std::lock_guard<std::mutex> l(mu_);
    ++free_;
    cv_.notify_all();
  }
  // A slot held for one scope: acquired on construction, released when it ends (exceptions too).
  struct Held {
    explicit Held(LocalBoardPool& p) : pool(p) { pool.acquire(); }
    ~Held() { pool.release(); }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    LocalBoardPool& pool;
  };

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;
  uint64_t next_ticket_ = 0, serving_ = 0;
};

namespace {

// A LocalRunner whose measurements each take a slot of the pool; once `stop` is set, the
// batch's remaining candidates are not measured (BOARD_LOST: never recorded, measured again
// when the job resumes).
class PooledLocalRunner : public Runner {
 public:
  PooledLocalRunner(LocalBoardPool& pool, const std::atomic<bool>& stop) : pool_(pool), stop_(stop) {}
  std::string device_key() const override { return "local"; }
  RunResult time_model(const std::string& so_path, const std::string& baseline_so) override {
    LocalBoardPool::Held slot(pool_);
    return runner_.time_model(so_path, baseline_so);
  }
  std::vector<RunResult> run(MeasureContext& ctx, const std::vector<BuildResult>& builds) override {
    std::vector<RunResult> out;
    for (const BuildResult& b : builds) {
      RunResult r;
      if (!b.ok()) {
        r.error = pb::COMPILE_ERROR;
        r.error_msg = b.error_msg;
      } else if (stop_) {
        r.error = pb::BOARD_LOST;
        r.error_msg = "the job was stopped before this candidate ran";
      } else {
        LocalBoardPool::Held slot(pool_);
        r = runner_.run_one(ctx, b.so_path, ctx.graph().workload.op);
      }
      out.push_back(std::move(r));
    }
    return out;
  }

 private:
  LocalBoardPool& pool_;
  const std::atomic<bool>& stop_;
  LocalRunner runner_;
};

}  // namespace

struct JobManager::Job {
  db::JobRow row;
  JobSpec spec;
  std::atomic<bool> stop{false};
  std::string cancelled_by;  // set by cancel(); a stop without it is a shutdown
  std::thread thread;
  bool thread_done = false;
  std::deque<std::pair<uint64_t, pb::JobEvent>> events;
  uint64_t last_seq = 0;
  // The row run_job_body wrote with the job's last run, ended; run_job takes it in when it
  // publishes the end (watchers stop at the first sight of an ended job, so the row in memory
  // must not end before the "end" event is published).
  std::optional<db::JobRow> ended;
  bool unsaved = false;  // its row's last write failed (disk full, I/O error): retried
};

JobManager::JobManager(JobManagerOptions o) : opts_(std::move(o)) {
  if (opts_.max_running < 1) throw UserError(str("--max-running ", opts_.max_running, " must be at least 1"));
  if (opts_.local_boards < 0) throw UserError(str("--local-boards ", opts_.local_boards, " must be 0 or more"));
  db_ = db::open_database(opts_.db_path);
  db::quick_check(opts_.db_path);  // a damaged file is said now, not found by a job
  if (opts_.local_boards > 0) pool_ = std::make_unique<LocalBoardPool>(opts_.local_boards);
  for (db::JobRow& row : db_->jobs()) {
    auto job = std::make_unique<Job>();
    job->row = std::move(row);
    try {
      job->spec = parse_job_spec(job->row.spec);
    } catch (const UserError& e) {
      if (!is_over(job->row.state)) {
        job->row.state = job_state_name(JobState::Failed);
        job->row.reason = str("its stored job no longer parses: ", e.what());
        job->row.finished_at = unix_now();
        db_->update_job(job->row);
      }
    }
    if (parse_job_state(job->row.state) == JobState::Running) {
      // The service stopped (or was killed) while it ran: it resumes from the database.
      job->row.state = job_state_name(JobState::Queued);
      job->row.progress["restarts"] = job->row.progress.value("restarts", 0) + 1;
      db_->update_job(job->row);
      // Its runs of that start ended with the process (nobody cancelled them); the resumed job
      // begins new ones for the tasks not done.
      if (job->row.progress.contains("tasks") && job->row.progress["tasks"].is_array()) {
        for (const json& t : job->row.progress["tasks"]) {
          if (!t.contains("runs") || !t["runs"].is_array() || t["runs"].empty() || t.value("done", false)) continue;
          try {
            db_->finish_run(t["runs"].back().get<std::string>(), "interrupted", unix_now());
          } catch (const std::exception&) {
            // Not begun after all: nothing to end.
          }
        }
      }
    }
    jobs_[job->row.id] = std::move(job);
  }
  dispatcher_ = std::thread(&JobManager::dispatch_loop, this);
}

JobManager::~JobManager() {
  {
    std::lock_guard<std::mutex> l(mu_);
    shutting_down_ = true;
    for (auto& [id, job] : jobs_) job->stop = true;
  }
  cv_.notify_all();
  dispatcher_.join();
  for (auto& [id, job] : jobs_) {
    if (job->thread.joinable()) job->thread.join();
  }
}

std::string JobManager::model_path(const std::string& sha256) const {
  return opts_.db_path + ".models/" + sha256 + ".onnx";
}

int64_t JobManager::submit(const std::string& user, JobSpec spec, const std::string& model_onnx) {
  if (!model_onnx.empty()) {
    if (static_cast<int64_t>(model_onnx.size()) > opts_.max_model_bytes) {
      throw JobError(grpc::INVALID_ARGUMENT, str("the model sent with the job has ", model_onnx.size(),
                                                 " bytes; the service takes at most ", opts_.max_model_bytes));
    }
    std::string sha = sha256_hex(model_onnx);
    if (!spec.model_sha256.empty() && spec.model_sha256 != sha) {
      throw JobError(grpc::INVALID_ARGUMENT, str("the job's model_sha256 ", spec.model_sha256,
                                                 " is not the SHA-256 of the model sent with it (", sha, ")"));
    }
    spec.model_sha256 = sha;
    // Kept by content: written under another name, then renamed, so a reader never sees half.
    std::filesystem::path path = model_path(sha);
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (!std::filesystem::exists(path, ec)) {
      try {
        write_file_atomic(path.string(), model_onnx);
      } catch (const std::runtime_error& e) {
        throw JobError(grpc::INTERNAL, str("cannot keep the model: ", e.what()));
      }
    }
  } else if (!spec.model_sha256.empty() && !std::filesystem::exists(model_path(spec.model_sha256))) {
    throw JobError(grpc::INVALID_ARGUMENT, str("the service keeps no model of SHA-256 ", spec.model_sha256,
                                               ": send the model with the job (submit --model M.onnx)"));
  }
  if (spec.key.empty()) {
    if (!pool_) {
      throw JobError(grpc::INVALID_ARGUMENT, "the job names no board key and this service has no local boards "
                                             "(it was started without --local-boards): submit with --key KEY");
    }
    if (!spec.target.empty() && parse_target(spec.target).arch_name() != host_target().arch_name()) {
      throw JobError(grpc::INVALID_ARGUMENT,
                     str("target ", spec.target, " is ", parse_target(spec.target).arch_name(),
                         "; the service's local boards are ", host_target().arch_name(), ": submit with --key KEY"));
    }
  } else {
    if (!opts_.farm) {
      throw JobError(grpc::INVALID_ARGUMENT, str("the job asks for boards of key ", spec.key,
                                                 " but this service has no tracker (start it with --tracker)"));
    }
    pb::SummaryReply sum;
    try {
      sum = farm::FarmClient(*opts_.farm).summary();
    } catch (const farm::FarmError& e) {
      throw JobError(grpc::UNAVAILABLE, str("cannot ask the tracker for boards of key ", spec.key, ": ", e.what()));
    }
    std::string keys;
    bool found = false;
    for (const pb::KeySummary& k : sum.keys()) {
      found |= k.key() == spec.key && k.total() > 0;
      if (k.total() > 0) keys += (keys.empty() ? "" : ", ") + k.key();
    }
    if (!found) {
      throw JobError(grpc::INVALID_ARGUMENT, str("no board of key ", spec.key, " is registered with the tracker (keys: ",
                                                 keys.empty() ? "none" : keys, ")"));
    }
  }
  auto job = std::make_unique<Job>();
  job->spec = spec;
  job->row.user = user;
  job->row.state = job_state_name(JobState::Queued);
  job->row.priority = spec.priority;
  job->row.spec = to_json(spec);
  job->row.progress = initial_progress(spec);
  job->row.submitted_at = unix_now();
  std::lock_guard<std::mutex> l(mu_);
  if (shutting_down_) throw JobError(grpc::UNAVAILABLE, "the service is shutting down");
  int open = 0;
  for (const auto& [id, other] : jobs_) open += other->row.user == user && !is_over(other->row.state);
  if (open >= opts_.max_jobs_per_user) {
    throw JobError(grpc::RESOURCE_EXHAUSTED, str(user, " has ", open, " jobs queued or running, the most one user may "
                                                 "have: wait for some to end, or cancel some"));
  }
  job->row.id = db_->add_job(job->row);
  int64_t id = job->row.id;
  jobs_[id] = std::move(job);
  cv_.notify_all();
  return id;
}

std::vector<pb::JobInfo> JobManager::list() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<pb::JobInfo> out;
  for (const auto& [id, job] : jobs_) out.push_back(info(*job));
  return out;
}

pb::JobInfo JobManager::get(int64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) throw JobError(grpc::NOT_FOUND, str("no job ", id));
  return info(*it->second);
}

pb::JobInfo JobManager::cancel(int64_t id, const std::string& user, bool admin) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) throw JobError(grpc::NOT_FOUND, str("no job ", id));
  Job& job = *it->second;
  if (job.row.user != user && !admin) {
    throw JobError(grpc::PERMISSION_DENIED, str("job ", id, " belongs to ", job.row.user, "; ", user,
                                                " may cancel only their own jobs (or use an admin token)"));
  }
  if (is_over(job.row.state)) throw JobError(grpc::FAILED_PRECONDITION, str("job ", id, " is already ", job.row.state));
  job.cancelled_by = user;
  job.stop = true;
  if (parse_job_state(job.row.state) == JobState::Queued) {
    job.row.state = job_state_name(JobState::Cancelled);
    job.row.reason = str("cancelled by ", user, " before it ran");
    job.row.finished_at = unix_now();
    publish(&job, "end");
  } else {
    publish(&job, "state", "", str("cancel requested by ", user, "; stopping after the measurements in flight"));
  }
  return info(job);
}

bool JobManager::next_events(int64_t id, uint64_t* seq, std::vector<pb::JobEvent>* out,
                             std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) throw JobError(grpc::NOT_FOUND, str("no job ", id));
  Job* job = it->second.get();
  if (*seq == 0) {
    pb::JobEvent e;
    e.set_kind(is_over(job->row.state) ? "end" : "snapshot");
    *e.mutable_job() = info(*job);
    out->push_back(e);
    *seq = job->last_seq;
    return !is_over(job->row.state);
  }
  cv_.wait_for(l, timeout, [&] { return job->last_seq > *seq || shutting_down_; });
  for (const auto& [s, e] : job->events) {
    if (s > *seq) out->push_back(e);
  }
  *seq = job->last_seq;
  return !is_over(job->row.state) && !shutting_down_;
}

std::string JobManager::publish(Job* job, const std::string& kind, const std::string& workload,
                                const std::string& message) {
  std::string failed;
  try {
    db_->update_job(job->row);
    job->unsaved = false;
  } catch (const db::DbError& e) {
    // The service goes on (it serves what the database holds); the row is written again by
    // the dispatcher until it can be, and no job starts meanwhile.
    failed = e.what();
    job->unsaved = true;
    if (db_failure_.empty()) std::fprintf(stderr, "tunefarm-tuner: cannot write job %lld: %s\n", static_cast<long long>(job->row.id), e.what());
    db_failure_ = failed;
  }
  pb::JobEvent e;
  e.set_kind(kind);
  *e.mutable_job() = info(*job);
  e.set_workload(workload);
  e.set_message(message);
  job->events.push_back({++job->last_seq, std::move(e)});
  while (job->events.size() > kMaxEventsKept) job->events.pop_front();
  cv_.notify_all();
  return failed;
}

void JobManager::save_unsaved() {
  if (db_failure_.empty()) return;
  for (auto& [id, job] : jobs_) {
    if (!job->unsaved) continue;
    try {
      db_->update_job(job->row);
      job->unsaved = false;
    } catch (const db::DbError&) {
      return;  // still failing: db_failure_ stays
    }
  }
  std::fprintf(stderr, "tunefarm-tuner: the database can be written again\n");
  db_failure_.clear();
}

pb::JobInfo JobManager::info(const Job& job) const {
  const db::JobRow& r = job.row;
  const json& p = r.progress;
  pb::JobInfo i;
  i.set_id(r.id);
  i.set_user(r.user);
  i.set_state(r.state);
  i.set_reason(r.reason);
  i.set_priority(static_cast<int32_t>(r.priority));
  i.set_model(job.spec.model);
  std::string target = p.value("target", std::string());  // canonical once the job ran
  i.set_target(target.empty() ? job.spec.target : target);
  i.set_key(job.spec.key.empty() ? "local" : job.spec.key);
  i.set_strategy(job.spec.strategy);
  i.set_trials_total(job.spec.tune.trials);
  i.set_trials_done(p.value("trials", 0));
  i.set_errors(p.value("errors", 0));
  i.set_submitted_at(r.submitted_at);
  i.set_started_at(r.started_at);
  i.set_finished_at(r.finished_at);
  i.set_restarts(p.value("restarts", 0));
  double weighted = 0;
  bool all = true;
  if (p.contains("tasks") && p["tasks"].is_array()) {
    for (const json& t : p["tasks"]) {
      pb::TaskInfo* ti = i.add_tasks();
      ti->set_workload(t.value("workload", std::string()));
      ti->set_weight(t.value("weight", 1.0));
      ti->set_trials(t.value("trials", 0));
      ti->set_errors(t.value("errors", 0));
      ti->set_best_s(t.value("best_s", 0.0));
      ti->set_best_gflops(t.value("best_gflops", 0.0));
      if (t.contains("best_config") && !t["best_config"].is_null()) ti->set_best_config(t["best_config"].dump());
      ti->set_default_s(t.value("default_s", 0.0));
      ti->set_done(t.value("done", false));
      if (const json& tm = t.value("time", json::object()); tm.is_object()) {
        ti->set_build_s(tm.value("build_s", 0.0));
        ti->set_measure_s(tm.value("measure_s", 0.0));
        ti->set_measurements(tm.value("measurements", 0));
        ti->set_upload_s(tm.value("upload_s", 0.0));
        ti->set_load_s(tm.value("load_s", 0.0));
        ti->set_timing_s(tm.value("timing_s", 0.0));
        ti->set_cubin_loads(tm.value("cubin_loads", 0));
        ti->set_same_code(tm.value("same_code", 0));
      }
      ti->set_stop_reason(t.value("stop_reason", std::string()));
      if (t.contains("runs") && t["runs"].is_array()) {
        for (const json& u : t["runs"]) {
          if (u.is_string()) ti->add_runs(u.get<std::string>());
        }
      }
      if (ti->best_s() > 0) weighted += ti->weight() * ti->best_s();
      else all = false;
    }
  }
  i.set_weighted_best_s(all ? weighted : 0);
  if (p.contains("model") && p["model"].is_object()) {
    const json& m = p["model"];
    pb::ModelTiming* mt = i.mutable_model_timing();
    mt->set_tuned_s(m.value("tuned_s", 0.0));
    mt->set_default_s(m.value("default_s", 0.0));
    mt->set_speedup(m.value("speedup", 0.0));
    mt->set_board(m.value("board", std::string()));
    mt->set_tuned_kernels(m.value("tuned_kernels", 0));
    mt->set_tunable_kernels(m.value("tunable_kernels", 0));
    mt->set_not_timed(m.value("not_timed", std::string()));
  }
  return i;
}

JobManager::Job* JobManager::next_to_start() {
  std::map<std::string, int> running_of;
  for (const auto& [id, job] : jobs_) {
    if (parse_job_state(job->row.state) == JobState::Running) ++running_of[job->row.user];
  }
  Job* best = nullptr;
  for (const auto& [id, job] : jobs_) {
    if (parse_job_state(job->row.state) != JobState::Queued || job->thread.joinable()) continue;
    if (!best) {
      best = job.get();
      continue;
    }
    const db::JobRow& a = job->row;
    const db::JobRow& b = best->row;
    if (a.priority != b.priority) {
      if (a.priority > b.priority) best = job.get();
      continue;
    }
    int ra = running_of[a.user], rb = running_of[b.user];
    if (ra != rb) {
      if (ra < rb) best = job.get();
      continue;
    }
    // Equal: the older (lower id, as jobs_ is ordered) stays.
  }
  return best;
}

void JobManager::dispatch_loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    for (auto& [id, job] : jobs_) {
      if (job->thread_done && job->thread.joinable()) {
        job->thread.join();
        job->thread_done = false;
      }
    }
    if (shutting_down_) return;
    save_unsaved();
    while (db_failure_.empty() && running_ < opts_.max_running) {
      Job* job = next_to_start();
      if (!job) break;
      job->row.state = job_state_name(JobState::Running);
      if (job->row.started_at == 0) job->row.started_at = unix_now();
      job->stop = false;
      ++running_;
      publish(job, "state");
      job->thread = std::thread(&JobManager::run_job, this, job);
    }
    cv_.wait_for(l, std::chrono::seconds(1));
  }
}

void JobManager::end_row(db::JobRow& r, const Job& job, const std::string& failure) {
  if (!job.cancelled_by.empty()) {
    r.state = job_state_name(JobState::Cancelled);
    r.reason = str("cancelled by ", job.cancelled_by);
  } else if (!failure.empty()) {
    r.state = job_state_name(JobState::Failed);
    r.reason = failure;
  } else {
    r.state = job_state_name(JobState::Done);
    std::string none;
    for (const json& t : r.progress["tasks"]) {
      if (t.value("best_s", 0.0) <= 0) none += (none.empty() ? "" : ", ") + t.value("workload", std::string());
    }
    if (!none.empty()) {
      r.state = job_state_name(JobState::Failed);
      r.reason = str("no candidate ran correctly for ", none);
    }
  }
  r.finished_at = unix_now();
}

void JobManager::run_job(Job* job) {
  std::string failure;
  try {
    std::unique_ptr<db::Database> db = db::open_database(opts_.db_path);
    run_job_body(job, *db);
  } catch (const db::DbError& e) {
    failure = str("the database could not be written: ", e.what(),
                  ". The measurements committed before it are kept: submit the job again once it can be written");
  } catch (const std::exception& e) {
    failure = e.what();
  }
  std::lock_guard<std::mutex> l(mu_);
  db::JobRow& r = job->row;
  bool shutdown = job->stop && job->cancelled_by.empty();
  if (job->ended) {
    r = *job->ended;  // ended, with its last run, by run_job_body's last transaction
    job->ended.reset();
    publish(job, "end");
  } else if (shutdown) {
    r.state = job_state_name(JobState::Queued);  // resumes at the next start
    publish(job, "state", "", "the service is stopping; the job resumes when it starts again");
  } else {
    end_row(r, *job, failure);
    publish(job, "end");
  }
  --running_;
  job->thread_done = true;
  cv_.notify_all();
}

std::mutex& JobManager::workload_lock(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  std::unique_ptr<std::mutex>& m = workload_locks_[key];
  if (!m) m = std::make_unique<std::mutex>();
  return *m;
}

void JobManager::run_job_body(Job* job, db::Database& db) {
  const JobSpec& s = job->spec;
  std::string user;
  json progress;
  {
    std::lock_guard<std::mutex> l(mu_);
    user = job->row.user;
    progress = job->row.progress;
  }
  auto save = [&](const std::string& kind, const std::string& workload, const std::string& message = "") {
    std::lock_guard<std::mutex> l(mu_);
    job->row.progress = progress;
    std::string failed = publish(job, kind, workload, message);
    if (!failed.empty()) throw db::DbError(failed);  // the job cannot keep its progress: it stops
  };

  // Where it measures.
  MeasurePlace place{s.target, std::nullopt};
  if (s.key.empty()) {
    if (!pool_) throw UserError("the service has no local boards any more (restarted without --local-boards)");
  } else {
    if (!opts_.farm) throw UserError(str("the service has no tracker any more: key ", s.key, " cannot be leased"));
    FarmRunnerOptions fo;
    fo.farm = *opts_.farm;
    fo.key = s.key;
    fo.user = user;
    fo.boards = s.boards;
    fo.wait_ms = opts_.wait_ms;
    fo.stop = &job->stop;
    place.farm = std::move(fo);
  }
  // From the runner's threads, while this one may be saving progress: the event carries the
  // job as last saved.
  Session session = open_session(
      place, [&] { return std::make_unique<PooledLocalRunner>(*pool_, job->stop); },
      [this, job](const std::string& id, const std::string& why) {
        std::lock_guard<std::mutex> l(mu_);
        publish(job, "board_lost", "", str("board ", id, " lost (", why, "); its candidate goes to another board"));
      });
  std::unique_ptr<Runner>& runner = session.runner;
  const Target& target = session.target;
  progress["target"] = target.str();

  LocalBuilderOptions bo;
  bo.workers = opts_.build_workers;
  LocalBuilder builder(bo);

  // The job's tasks for the multi-task tuner (tuner/task_group.h), as `tune --model` runs them,
  // with what earlier starts of this job did: their runs' trials, done tasks, ended searches.
  std::vector<GroupTask> specs(s.tasks.size());
  for (size_t i = 0; i < s.tasks.size(); ++i) {
    json& tp = progress["tasks"][i];
    Workload w = parse_workload(s.tasks[i].workload);
    specs[i].workload = s.tasks[i].workload;
    specs[i].weight = s.tasks[i].weight;
    // Trials spent by earlier starts of this job: the configs its runs measured.
    std::set<std::string> runs;
    for (const json& u : tp["runs"]) runs.insert(u.get<std::string>());
    if (!runs.empty()) {
      std::set<std::string> configs;
      for (const db::MeasureRecord& r : db.history({w.canonical(), target.str(), 0})) {
        if (runs.count(r.run_uuid)) configs.insert(r.config_hash());
      }
      specs[i].trials_before = static_cast<int>(configs.size());
    }
    specs[i].done_before = tp.value("done", false);
    specs[i].ended_before = parse_stop_reason(tp.value("stop_reason", std::string()));
  }
  TaskGroupOptions go;
  go.search.strategy = s.strategy;
  go.search.seed = s.seed;
  go.tune = s.tune;
  go.time_budget_s = s.time_budget_min * 60;
  go.user = user;

  // Progress: the job's row (its progress JSON) saved after each batch, and each task's end
  // written with its run's in one transaction.
  struct Hooks : TaskGroupHooks {
    JobManager& jm;
    Job* job;
    const JobSpec& s;
    json& progress;
    const Target& target;
    Runner& runner;
    db::Database& db;
    const std::function<void(const std::string&, const std::string&, const std::string&)>& save;
    TaskGroup* group = nullptr;
    Hooks(JobManager& jm, Job* job, const JobSpec& s, json& progress, const Target& target, Runner& runner,
          db::Database& db, const std::function<void(const std::string&, const std::string&, const std::string&)>& save)
        : jm(jm), job(job), s(s), progress(progress), target(target), runner(runner), db(db), save(save) {}

    void on_run(size_t i, const std::string& run) override { progress["tasks"][i]["runs"].push_back(run); }
    bool around_step(size_t i, const std::function<bool()>& batch) override {
      // One batch at a time per workload and target across jobs: the batch then sees what the
      // other job's last batch recorded, and no config is measured by both.
      std::lock_guard<std::mutex> one(jm.workload_lock(s.tasks[i].workload + "\n" + target.str()));
      return batch();
    }
    void on_task_over(size_t i, StopReason why) override {
      progress["tasks"][i]["stop_reason"] = stop_reason_name(why);
    }
    void on_seed(size_t to, size_t from, const json& config) override {
      save("seed", s.tasks[to].workload,
           str(s.tasks[to].workload, " tries the new best of ", s.tasks[from].workload, ", its sibling"));
    }
    // Each task's time in the job's earlier starts, which its time now adds to.
    std::vector<json> time_before;
    void update(size_t i) {
      const TuneState& st = group->state(i);
      json& tp = progress["tasks"][i];
      tp["trials"] = group->trials(i);
      const json& before = time_before.at(i);
      tp["time"] = {{"build_s", before.value("build_s", 0.0) + st.build_s},
                    {"measure_s", before.value("measure_s", 0.0) + st.measure_s},
                    {"measurements", before.value("measurements", 0) + st.measured},
                    {"upload_s", before.value("upload_s", 0.0) + st.upload_s},
                    {"load_s", before.value("load_s", 0.0) + st.load_s},
                    {"timing_s", before.value("timing_s", 0.0) + st.run_s},
                    {"cubin_loads", before.value("cubin_loads", 0) + st.cubin_loads},
                    {"same_code", before.value("same_code", 0) + st.same_code}};
      tp["errors"] = st.errors;
      if (std::isfinite(st.best_s)) {
        tp["best_s"] = st.best_s;
        tp["best_config"] = st.best_config;
        tp["best_gflops"] = gflops(group->space(i), st.best_s);
      }
      int trials = 0, errors = 0;
      for (const json& t : progress["tasks"]) {
        trials += t.value("trials", 0);
        errors += t.value("errors", 0);
      }
      progress["trials"] = trials;
      progress["errors"] = errors;
    }
    void on_step(size_t i, int) override {
      update(i);
      save("progress", s.tasks[i].workload, "");
    }
    // The task's best re-timed in fresh processes (unless the job was stopped). Its run's end
    // and the task's "done" (with the job's end, after the last task) are one transaction: a
    // crash leaves the task to re-time again or done, never a done run in a job that re-times
    // it at its next start.
    bool end_run(size_t i, const TuneSummary& sum) override {
      update(i);
      json& tp = progress["tasks"][i];
      tp["stop_reason"] = stop_reason_name(sum.stop_reason);
      if (!sum.best_config.is_null() && sum.best_s > 0) {
        tp["best_s"] = sum.best_s;
        tp["best_config"] = sum.best_config;
        tp["best_gflops"] = gflops(group->space(i), sum.best_s);
      }
      tp["default_s"] = sum.default_s;
      tp["done"] = !sum.interrupted;
      std::string status = !sum.interrupted ? "done" : job->cancelled_by.empty() ? "interrupted" : "cancelled";
      bool all_done = true;
      for (const json& task : progress["tasks"]) all_done = all_done && task.value("done", false);
      if (all_done && !job->stop && !s.model_sha256.empty()) {
        // What tuning bought the model, before the job's end is written: a service stopped
        // while timing it times it again when it resumes.
        save("state", "", "timing the model: its tuned and default builds, interleaved");
        progress["model"] = time_job_model(s, jm.model_path(s.model_sha256), runner, target, db);
      }
      {
        std::lock_guard<std::mutex> l(jm.mu_);
        job->row.progress = progress;
        db::JobRow row = job->row;
        if (all_done && !job->stop) end_row(row, *job, "");
        db.finish_run_and_update_job(group->run_uuid(i), status, unix_now(), row);
        if (is_over(row.state)) job->ended = row;
      }
      fault_point("run-finished");
      // An ended job's last event is run_job's "end" (watchers stop at the first event of an
      // ended job).
      if (!all_done || job->stop) save("progress", s.tasks[i].workload, "");
      return true;
    }
    // A failed job's runs stay as they are: run_job writes the job's failure, and the runs of
    // an interrupted start are taken up by the next (they are the task's "runs").
    bool on_failure() override { return true; }
  };
  std::function<void(const std::string&, const std::string&, const std::string&)> save3 =
      [&](const std::string& kind, const std::string& workload, const std::string& message) {
        save(kind, workload, message);
      };
  Hooks hooks(*this, job, s, progress, target, *runner, db, save3);
  TaskGroup group(std::move(specs), target, builder, *runner, &db, go, hooks, &job->stop);
  hooks.group = &group;
  for (size_t i = 0; i < s.tasks.size(); ++i) {
    const json& tp = progress["tasks"][i];
    hooks.time_before.push_back(tp.contains("time") && tp["time"].is_object() ? tp["time"] : json::object());
  }
  save("state", "");  // the runs are known before their first record
  group.run();
}

}  // namespace tf
