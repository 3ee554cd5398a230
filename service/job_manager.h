// The tuning service's engine: the queue of jobs, the threads that run them, and the boards
// they measure on (docs/service.md).
//
// Promises:
// - Jobs live in the database (db::JobRow); the manager is its only writer of jobs. A job's
//   state and progress are written after every batch, once its records are committed.
// - Start-up requeues the jobs a stopped service left running (kill -9 included). A resumed
//   job continues each workload from what the database holds: configs measured before are
//   never measured again (tuner/tune.h), and the trials it already spent are counted from its
//   runs' records, so the budget is kept across restarts.
// - At most max_running jobs run at once. The next to start is the queued job of the highest
//   priority; among equal priorities, one of the user with the fewest running jobs; then the
//   oldest. Farm jobs lease boards under their submitter's name, so the tracker's fair share
//   applies between users; local boards are handed out first come, first served, one
//   measurement at a time.
// - Jobs tuning the same workload and target at once take turns a batch at a time, and each
//   batch skips configs the other recorded (TuneLoop): no config is measured twice.
// - Cancel stops a job after the measurements in flight (local boards: before the next one
//   starts) and keeps what was measured. Shutdown stops running jobs the same way and leaves
//   them queued, to resume at the next start.
// - A job that cannot run (no board of its key, a target of another architecture, nothing
//   ran correctly) ends failed, with the reason; the service goes on.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "db/database.h"
#include "proto/tunefarm.pb.h"
#include "tuner/farm_client.h"
#include "service/job.h"

namespace tf {

struct JobManagerOptions {
  std::string db_path;
  int local_boards = 0;                   // measurement slots on this machine; 0: farm jobs only
  int max_running = 2;                    // jobs running at once
  std::optional<farm::FarmEndpoint> farm; // the tracker of jobs with a key
  int64_t wait_ms = 600000;               // longest wait for a farm board
  int build_workers = 0;                  // compile processes per job; 0: one per core
  int max_jobs_per_user = 1000;           // queued or running; more are refused (a runaway
                                          // script cannot fill the queue and the database)
  int64_t max_model_bytes = int64_t{256} << 20;  // of a model sent with a job
};

// A refusal of a request, with the gRPC code it maps to.
class JobError : public std::runtime_error {
 public:
  JobError(int code, const std::string& m) : std::runtime_error(m), code(code) {}
  int code;  // grpc::StatusCode
};

class LocalBoardPool;

class JobManager {
 public:
  // Opens the database (creating or migrating it) and requeues jobs left running.
  explicit JobManager(JobManagerOptions o);
  // Stops running jobs (they stay queued) and waits for their threads.
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Queues a job; returns its id. Throws JobError (INVALID_ARGUMENT) when the service cannot
  // run it: no local boards for a job without a key, no tracker or no board of its key, a
  // target this machine cannot measure, a model over max_model_bytes or whose SHA-256 is not
  // the spec's model_sha256, a model_sha256 of no model the service keeps; RESOURCE_EXHAUSTED
  // when the user has max_jobs_per_user jobs queued or running. `model_onnx`: the model the
  // workloads come from, kept (by its SHA-256, beside the database) to be compiled and timed,
  // tuned against default, when the job is done (JobInfo.model_timing).
  int64_t submit(const std::string& user, JobSpec spec, const std::string& model_onnx = "");
  std::vector<tunefarm::v1::JobInfo> list();
  // Throws JobError NOT_FOUND.
  tunefarm::v1::JobInfo get(int64_t id);
  // Throws JobError: NOT_FOUND, PERMISSION_DENIED (another user's job, not admin),
  // FAILED_PRECONDITION (already over).
  tunefarm::v1::JobInfo cancel(int64_t id, const std::string& user, bool admin);
  // Events of job `id` after `*seq` (0: a snapshot first), waiting up to `timeout` for one.
  // Returns false once the job is over and every event was handed out. Throws JobError
  // NOT_FOUND.
  bool next_events(int64_t id, uint64_t* seq, std::vector<tunefarm::v1::JobEvent>* out,
                   std::chrono::milliseconds timeout);
  const std::string& db_path() const { return opts_.db_path; }
  // Where the model of SHA-256 `sha256` is kept.
  std::string model_path(const std::string& sha256) const;

 private:
  struct Job;
  void dispatch_loop();
  void run_job(Job* job);
  void run_job_body(Job* job, db::Database& db);
  // Ends row `r` of `job` (cancelled, failed with `failure`, failed with no working candidate,
  // or done) without writing it. Under mu_.
  static void end_row(db::JobRow& r, const Job& job, const std::string& failure);
  // The next queued job to start, or null. Caller holds mu_.
  Job* next_to_start();
  // Writes the job's row and publishes an event. Caller holds mu_. Never throws: a write that
  // fails (disk full, I/O error) is retried by save_unsaved, and its error returned ("" when
  // written).
  std::string publish(Job* job, const std::string& kind, const std::string& workload = "",
                      const std::string& message = "");
  // Writes the rows whose last write failed; clears db_failure_ once all are written. Caller
  // holds mu_.
  void save_unsaved();
  tunefarm::v1::JobInfo info(const Job& job) const;
  // The lock that makes jobs on one (workload, target) measure a batch at a time.
  std::mutex& workload_lock(const std::string& key);

  JobManagerOptions opts_;
  std::unique_ptr<db::Database> db_;  // the jobs' writer; used under mu_
  std::string db_failure_;            // the last failed write while rows are unsaved (under mu_)
  std::unique_ptr<LocalBoardPool> pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, std::unique_ptr<Job>> jobs_;
  std::map<std::string, std::unique_ptr<std::mutex>> workload_locks_;
  int running_ = 0;
  bool shutting_down_ = false;
  std::thread dispatcher_;
};

}  // namespace tf
