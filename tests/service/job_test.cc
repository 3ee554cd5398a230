// The tuning service's pure parts: the job file format (every field, every refusal), the
// task scheduler's decisions, and the jobs table of the database (schema version 2, and an
// older file read as it is).
#include <gtest/gtest.h>

#include <SQLiteCpp/SQLiteCpp.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <grpcpp/grpcpp.h>
#include <unistd.h>
#include <limits>

#include "base/hash.h"
#include "base/error.h"
#include "db/database.h"
#include "service/job.h"
#include "proto/credentials.h"
#include "service/job_manager.h"
#include "compiler/target.h"
#include "tuner/tune.h"
#include "tuner/task_scheduler.h"
#include "runtime/spawn.h"

#include <fcntl.h>
#include <sys/socket.h>

namespace tf {
namespace {

using json = nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string refusal(const json& j) {
  try {
    parse_job_spec(j);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(JobSpec, ParsesEveryFieldAndRoundTrips) {
  json j = {
      {"workloads", {"matmul(M=8,N=8,K=8)", {{"workload", "matmul(K=4,M=2,N=3)"}, {"weight", 6}}}},
      {"model", "resnet"},
      {"target", "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake"},
      {"key", "cpu"},
      {"trials", 64},
      {"strategy", "random"},
      {"early_stop", 10},
      {"priority", -5},
      {"time_budget_min", 1.5},
      {"batch", 4},
      {"boards", 2},
      {"seed", 9},
      {"repeat", 3},
      {"number", 2},
      {"min_repeat_ms", 1},
      {"retime_top", 2},
      {"retime_rounds", 0},
      {"retime_drop", 1.5},
      {"model_sha256", std::string(64, 'c')},
      {"precision", "bf16"},
      {"dims", {{"batch", 8}}},
      {"input_shapes", {{"mask", {8, 128}}}}};
  JobSpec s = parse_job_spec(j);
  EXPECT_EQ(s.model_sha256, std::string(64, 'c'));
  EXPECT_EQ(s.precision, "bf16");
  EXPECT_EQ(s.dims.dims, (std::map<std::string, int64_t>{{"batch", 8}}));
  EXPECT_EQ(s.dims.shapes.at("mask"), (std::vector<int64_t>{8, 128}));
  ASSERT_EQ(s.tasks.size(), 2u);
  EXPECT_EQ(s.tasks[0].workload, "matmul(M=8,N=8,K=8,epilogue=none)");
  EXPECT_EQ(s.tasks[0].weight, 1);
  EXPECT_EQ(s.tasks[1].workload, "matmul(M=2,N=3,K=4,epilogue=none)");
  EXPECT_EQ(s.tasks[1].weight, 6);
  EXPECT_EQ(s.tune.trials, 64);
  EXPECT_EQ(s.strategy, "random");
  EXPECT_EQ(s.priority, -5);
  EXPECT_EQ(s.boards, 2);
  EXPECT_EQ(s.tune.retime_rounds, 0);
  EXPECT_EQ(s.tune.retime_drop, 1.5);
  EXPECT_NE(s.target.find("x86_64"), std::string::npos);
  EXPECT_FALSE(s.tune.sampling_by_target);  // repeat and min_repeat_ms asked for
  JobSpec again = parse_job_spec(to_json(s));
  EXPECT_EQ(to_json(again), to_json(s));
  EXPECT_EQ(again.tune.measure.repeat, 3);
  EXPECT_EQ(again.tune.measure.min_repeat_ms, 1);
}

TEST(JobSpec, DefaultsAreTuneDefaults) {
  JobSpec s = parse_job_spec({{"workloads", {"matmul(M=8,N=8,K=8)"}}});
  EXPECT_EQ(s.tune.trials, 200);
  EXPECT_EQ(s.strategy, "xgb");
  EXPECT_EQ(s.tune.batch, 8);
  EXPECT_EQ(s.tune.retime_drop, TuneOptions{}.retime_drop);
  // The measurement's defaults are tune's, from the one struct that declares them.
  EXPECT_EQ(s.tune.measure.min_repeat_ms, MeasureOptions{}.min_repeat_ms);
  EXPECT_EQ(s.tune.measure.repeat, 5);
  EXPECT_EQ(s.tune.measure.min_repeat_ms, 10);
  // Not asked for: the board's target decides when the job runs (a GPU's 3 of 5 ms), also
  // after a restart of the service (the stored spec leaves them out).
  EXPECT_TRUE(s.tune.sampling_by_target);
  EXPECT_FALSE(to_json(s).contains("repeat"));
  EXPECT_TRUE(parse_job_spec(to_json(s)).tune.sampling_by_target);
  TuneOptions gpu = s.tune, cpu = s.tune;
  sample_by_target(gpu, parse_target("cuda -arch=sm_90"));
  sample_by_target(cpu, parse_target("llvm"));
  EXPECT_EQ(gpu.measure.repeat, 3);
  EXPECT_EQ(gpu.measure.min_repeat_ms, 5);
  EXPECT_EQ(cpu.measure.repeat, 5);
  EXPECT_EQ(cpu.measure.min_repeat_ms, 10);
  EXPECT_EQ(gpu.retime_warmup_ms, 50);  // and the re-timing's warm-up, whether or not sampling was asked for
  EXPECT_EQ(cpu.retime_warmup_ms, 300);
  // Either asked for: both kept as they are.
  TuneOptions asked = parse_job_spec({{"workloads", {"matmul(M=8,N=8,K=8)"}}, {"min_repeat_ms", 2}}).tune;
  sample_by_target(asked, parse_target("cuda -arch=sm_90"));
  EXPECT_EQ(asked.measure.repeat, 5);
  EXPECT_EQ(asked.measure.min_repeat_ms, 2);
  EXPECT_EQ(asked.retime_warmup_ms, 50);
  EXPECT_TRUE(s.key.empty());
  EXPECT_TRUE(s.target.empty());
  EXPECT_EQ(s.precision, "fp32");
}

TEST(JobSpec, PrecisionsThatAreNotImplementedAreRefusedByName) {
  const json w = {"matmul(M=8,N=8,K=8)"};
  // tf32 is a precision of cuda targets' tensor cores: the job's board decides (a CPU key
  // refuses it when the job loads its model: graph/pass_auto_mixed_precision.cc).
  EXPECT_EQ(refusal({{"workloads", w}, {"precision", "tf32"}}), "(accepted)");
  EXPECT_NE(refusal({{"workloads", w}, {"precision", "int3"}}).find("is not one of fp32, bf16, fp16, tf32"), std::string::npos);
  EXPECT_NE(refusal({{"workloads", w}, {"precision", 16}}).find("precision"), std::string::npos);
}

// A model's dynamic dimensions (--dim, --input-shape on submit): sizes checked as the
// command line checks them.
TEST(JobSpec, DimsAreSizesByName) {
  const json w = {"matmul(M=8,N=8,K=8)"};
  EXPECT_NE(refusal({{"workloads", w}, {"dims", {{"batch", 0}}}})
                .find("--dim batch=0: '0' is not a size"),
            std::string::npos);
  EXPECT_NE(refusal({{"workloads", w}, {"dims", {{"batch", "8"}}}})
                .find("job dims \"batch\": \"8\" is not a size"),
            std::string::npos);
  EXPECT_NE(refusal({{"workloads", w}, {"dims", json::array({8})}})
                .find("job field \"dims\" must be an object"),
            std::string::npos);
  EXPECT_NE(refusal({{"workloads", w}, {"input_shapes", {{"x", 3}}}})
                .find("job input_shapes \"x\": 3 is not a shape"),
            std::string::npos);
  EXPECT_NE(
      refusal({{"workloads", w}, {"input_shapes", {{"x", {1, -2}}}}}).find("'-2' is not a size"),
      std::string::npos);
}

TEST(JobSpec, RefusalsNameTheFieldAndTheValue) {
  json ok = {{"workloads", {"matmul(M=8,N=8,K=8)"}}};
  auto with = [&](const char* k, json v) {
    json j = ok;
    j[k] = v;
    return refusal(j);
  };
  EXPECT_NE(refusal(json::array()).find("must be a JSON object"), std::string::npos);
  EXPECT_NE(refusal(json::object()).find("needs \"workloads\""), std::string::npos);
  EXPECT_NE(with("workloads", json::array()).find("non-empty list"), std::string::npos);
  EXPECT_NE(with("workloads", "matmul(M=8,N=8,K=8)").find("non-empty list"), std::string::npos);
  EXPECT_NE(with("workloads", {42}).find("spec string"), std::string::npos);
  EXPECT_NE(with("workloads", {"conv9d(X=1)"}).find("conv9d"), std::string::npos);
  EXPECT_NE(with("workloads", {"matmul(M=0,N=8,K=8)"}).find("M=0"), std::string::npos) << with("workloads", {"matmul(M=0,N=8,K=8)"});
  EXPECT_NE(with("workloads", {"matmul(M=8,N=8,K=8)", "matmul(K=8,N=8,M=8)"}).find("appears twice"), std::string::npos);
  json w = {{"workload", "matmul(M=8,N=8,K=8)"}, {"weight", -1}};
  EXPECT_NE(with("workloads", {w}).find("\"weight\" is -1"), std::string::npos);
  w["weight"] = "many";
  EXPECT_NE(with("workloads", {w}).find("must be a number"), std::string::npos);
  w = {{"workload", "matmul(M=8,N=8,K=8)"}, {"wieght", 2}};
  EXPECT_NE(with("workloads", {w}).find("unknown field \"wieght\""), std::string::npos);
  EXPECT_NE(with("trails", 5).find("unknown job field \"trails\""), std::string::npos);
  EXPECT_NE(with("trials", 0).find("\"trials\" is 0"), std::string::npos);
  EXPECT_NE(with("trials", 1e12).find("must be an integer"), std::string::npos);
  EXPECT_NE(with("trials", uint64_t{1} << 63).find("\"trials\" is"), std::string::npos);
  EXPECT_NE(with("trials", "10").find("must be an integer"), std::string::npos);
  EXPECT_NE(with("priority", 5000).find("-1000..1000"), std::string::npos);
  EXPECT_NE(with("strategy", "magic").find("magic"), std::string::npos);
  EXPECT_NE(with("target", "gpu9000").find("gpu9000"), std::string::npos);
  EXPECT_NE(with("key", 7).find("must be a string"), std::string::npos);
  EXPECT_NE(with("time_budget_min", -1).find("time_budget_min"), std::string::npos);
  EXPECT_NE(with("retime_drop", 0.5).find("\"retime_drop\" is 0.5: must be 0 (never) or 1..1000"),
            std::string::npos)
      << with("retime_drop", 0.5);
  EXPECT_NE(with("retime_drop", "1.2").find("must be a number"), std::string::npos);
  EXPECT_NE(with("model", std::string(5000, 'x')).find("longer than 4096"), std::string::npos);
  EXPECT_NE(with("model_sha256", std::string(64, 'C')).find("not 64 lower-case hex digits"), std::string::npos);
  EXPECT_NE(with("model_sha256", "../etc/passwd").find("not 64 lower-case hex digits"), std::string::npos);
  json many = ok;
  many["workloads"] = json::array();
  for (int i = 1; i <= 1001; ++i) many["workloads"].push_back("matmul(M=" + std::to_string(i) + ",N=8,K=8)");
  EXPECT_NE(refusal(many).find("at most 1000"), std::string::npos);
}

// A model sent with a job is kept by its SHA-256; one larger than the service takes, or whose
// digest is not the job's model_sha256, is refused before anything is written.
TEST(JobManager, ModelsSentWithJobsAreCheckedAndKeptByDigest) {
  std::string dir = (std::filesystem::temp_directory_path() / ("tunefarm-job-models-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  JobManagerOptions o;
  o.db_path = dir + "/svc.db";
  o.local_boards = 1;
  o.max_model_bytes = 64;
  std::string model = "not really ONNX, but bytes to keep";
  std::string sha = sha256_hex(model);
  {
    JobManager m(o);
    JobSpec s = parse_job_spec({{"workloads", {"matmul(M=8,N=8,K=8)"}}, {"trials", 1}});
    auto refusal_of = [&](const JobSpec& spec, const std::string& bytes) -> std::string {
      try {
        m.submit("u", spec, bytes);
      } catch (const JobError& e) {
        EXPECT_EQ(e.code, grpc::INVALID_ARGUMENT);
        return e.what();
      }
      return "(accepted)";
    };
    EXPECT_NE(refusal_of(s, std::string(65, 'x')).find("has 65 bytes; the service takes at most 64"), std::string::npos);
    JobSpec other = s;
    other.model_sha256 = std::string(64, 'a');
    EXPECT_NE(refusal_of(other, model).find("is not the SHA-256 of the model sent with it"), std::string::npos);
    EXPECT_NE(refusal_of(other, "").find("keeps no model of SHA-256 aaaa"), std::string::npos);
    EXPECT_FALSE(std::filesystem::exists(m.model_path(sha)));
    m.submit("u", s, model);
    ASSERT_TRUE(std::filesystem::exists(m.model_path(sha)));
    std::ifstream f(m.model_path(sha), std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), model);
    // Named by its digest alone, a kept model is taken.
    JobSpec again = s;
    again.model_sha256 = sha;
    EXPECT_EQ(refusal_of(again, "").find("keeps no model"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TaskHistory history(double weight, std::vector<int> trials, std::vector<double> best) {
  TaskHistory t;
  t.weight = weight;
  t.trials = std::move(trials);
  t.best_s = std::move(best);
  return t;
}

TEST(Scheduler, EveryWorkloadGetsARoundFirst) {
  std::mt19937_64 rng(1);
  std::vector<TaskHistory> ts = {history(1, {8}, {1e-3}), history(1, {}, {}), history(1, {}, {})};
  EXPECT_EQ(pick_task(ts, rng), 1);
  ts[1] = history(1, {8}, {1e-3});
  EXPECT_EQ(pick_task(ts, rng), 2);
  // Workloads that start from earlier runs' results (a resumed tune --model) get their round
  // after those that know nothing (a task new to the model's database).
  ts = {history(1, {}, {}), history(1, {}, {}), history(1, {}, {})};
  ts[0].resumed = ts[1].resumed = true;
  EXPECT_EQ(pick_task(ts, rng), 2);
  ts[2] = history(1, {8}, {1e-3});
  EXPECT_EQ(pick_task(ts, rng), 0);
}

TEST(Scheduler, PrefersTheWorkloadWhoseImprovementCountsMost) {
  SchedulerOptions o;
  o.epsilon = 0;
  std::mt19937_64 rng(1);
  // Same history, one occurs ten times in the model: it counts ten times as much.
  std::vector<TaskHistory> ts = {history(1, {8, 16}, {2e-3, 1e-3}), history(10, {8, 16}, {2e-3, 1e-3})};
  EXPECT_EQ(pick_task(ts, rng, o), 1);
  EXPECT_NEAR(task_priority(ts[1], o), 10 * task_priority(ts[0], o), 1e-12);
  // A slow kernel still improving beats a fast one that stalled.
  ts = {history(1, {8, 16, 24, 32}, {1e-4, 1e-4, 1e-4, 1e-4}), history(1, {8, 16, 24, 32}, {8e-3, 6e-3, 4e-3, 2e-3})};
  EXPECT_EQ(pick_task(ts, rng, o), 1);
  EXPECT_GT(task_priority(ts[1], o), task_priority(ts[0], o));
  // Priorities are expected reductions: never negative for a working workload.
  EXPECT_GE(task_priority(ts[0], o), 0);
}

TEST(Scheduler, FailingWorkloadsWaitAndOverOnesAreNeverPicked) {
  SchedulerOptions o;
  o.epsilon = 0;
  std::mt19937_64 rng(1);
  std::vector<TaskHistory> ts = {history(1, {8}, {kInf}), history(1, {8}, {1e-3})};
  EXPECT_EQ(pick_task(ts, rng, o), 0);  // a few rounds to find a working config
  ts[0] = history(1, {8, 16, 24}, {kInf, kInf, kInf});
  EXPECT_EQ(pick_task(ts, rng, o), 1);
  ts[1].over = true;
  EXPECT_EQ(pick_task(ts, rng, o), 0);
  ts[0].over = true;
  EXPECT_EQ(pick_task(ts, rng, o), -1);
  EXPECT_EQ(pick_task({}, rng, o), -1);
}

TEST(Scheduler, EpsilonPicksEveryLiveWorkloadSometimes) {
  SchedulerOptions o;
  o.epsilon = 0.5;
  std::mt19937_64 rng(3);
  std::vector<TaskHistory> ts = {history(1, {8}, {1e-3}), history(100, {8}, {1e-3}), history(1, {8}, {1e-3})};
  ts[2].over = true;
  int picks[3] = {0, 0, 0};
  for (int i = 0; i < 400; ++i) ++picks[pick_task(ts, rng, o)];
  EXPECT_GT(picks[0], 50);
  EXPECT_GT(picks[1], picks[0]);
  EXPECT_EQ(picks[2], 0);
}

std::string temp_db(const char* name) {
  auto p = std::filesystem::temp_directory_path() / (std::string("tunefarm-job-test-") + name + ".db");
  std::filesystem::remove(p);
  std::filesystem::remove(p.string() + "-wal");
  std::filesystem::remove(p.string() + "-shm");
  return p.string();
}

TEST(JobsTable, AddUpdateListSurviveReopening) {
  std::string path = temp_db("jobs");
  {
    auto db = db::open_database(path);
    db::JobRow j;
    j.user = "alice";
    j.priority = 3;
    j.spec = {{"workloads", {"matmul(M=8,N=8,K=8)"}}};
    j.progress = {{"trials", 0}};
    j.submitted_at = 1.7e9;
    j.id = db->add_job(j);
    EXPECT_GT(j.id, 0);
    j.state = "running";
    j.started_at = 1.7e9 + 1;
    j.progress["trials"] = 12;
    db->update_job(j);
    db::JobRow ghost = j;
    ghost.id = 999;
    EXPECT_THROW(db->update_job(ghost), db::DbError);
    ghost.state = "exploded";
    ghost.id = j.id;
    EXPECT_THROW(db->update_job(ghost), db::DbError);  // the CHECK constraint
  }
  auto db = db::open_database(path, db::OpenMode::ReadOnly);
  auto jobs = db->jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].user, "alice");
  EXPECT_EQ(jobs[0].state, "running");
  EXPECT_EQ(jobs[0].priority, 3);
  EXPECT_EQ(jobs[0].progress["trials"], 12);
  EXPECT_EQ(jobs[0].started_at, 1.7e9 + 1);
  EXPECT_EQ(jobs[0].finished_at, 0);
}

TEST(JobsTable, AVersionOneFileIsReadableAsItIsAndMigratedOnWrite) {
  std::string path = temp_db("v1");
  {
    auto db = db::open_database(path);
  }
  {
    // Turn it back into a version 1 file, as an older tunefarm left it.
    SQLite::Database raw(path, SQLite::OPEN_READWRITE);
    raw.exec("DROP TABLE jobs");
    raw.exec("DROP TABLE verdicts");
    raw.exec("DROP TABLE models");
    raw.exec("PRAGMA user_version = 1");
  }
  {
    auto ro = db::open_database(path, db::OpenMode::ReadOnly);
    EXPECT_TRUE(ro->jobs().empty());
    EXPECT_EQ(ro->stats().records, 0);
  }
  auto rw = db::open_database(path);
  EXPECT_TRUE(rw->jobs().empty());
  db::JobRow j;
  j.user = "bob";
  j.spec = json::object();
  EXPECT_GT(rw->add_job(j), 0);
  SQLite::Database raw(path, SQLite::OPEN_READONLY);
  EXPECT_EQ(raw.execAndGet("PRAGMA user_version").getInt(), db::schema_version());
}

}  // namespace
}  // namespace tf

// What the service starts (build workers, board runners) gets stdin, stdout and stderr only:
// a socket opened without close-on-exec (the dashboard's was) does not reach it.
TEST(Spawn, ChildrenGetOnlyTheStandardDescriptors) {
  int leaky = ::socket(AF_INET, SOCK_STREAM, 0);  // no SOCK_CLOEXEC, on purpose
  ASSERT_GE(leaky, 0);
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::string err;
  pid_t pid = tf::spawn_in_group({"/bin/sh", "-c", "ls -l /proc/$$/fd"}, in, out[1], &err);
  ASSERT_GT(pid, 0) << err;
  ::close(out[1]);
  std::string listing;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) listing.append(buf, static_cast<size_t>(n));
  int status = tf::reap_group(pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << listing;
  EXPECT_NE(listing.find(" 1 -> pipe:"), std::string::npos) << listing;  // the listing is real
  EXPECT_EQ(listing.find("socket:"), std::string::npos) << "the child inherited fd " << leaky << ":\n" << listing;
  ::close(out[0]);
  ::close(in);
  ::close(leaky);
}
