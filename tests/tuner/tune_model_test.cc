// `tunefarm tune --model`: a small ONNX model (generated here) tuned as a user would, through
// the command, on this machine: every task gets trials from one budget, every measurement is
// in the database, a second run resumes, and bad requests are refused with exit 2 naming the
// problem.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/farm/daemon.h"
#include "tests/graph/onnx_builder.h"
#include "tests/temp_dir.h"

namespace tf::graph {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::ModelBuilder;

std::string temp_dir() {
  static tf::testing::TempDir dir("tunefarm-tune-model");
  return dir.path();
}

struct Result {
  int exit = -1;
  std::string out, err;
};

Result tunefarm(const std::string& args) {
  std::string err = temp_dir() + "/stderr.txt";
  std::string cmd = "cd " + temp_dir() + " && exec " + TF_TUNEFARM + " " + args + " 2> " + err;
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  int status = pclose(p);
  if (WIFEXITED(status)) r.exit = WEXITSTATUS(status);
  std::ifstream f(err);
  std::stringstream ss;
  ss << f.rdbuf();
  r.err = ss.str();
  return r;
}

// A weight of `rows` x `cols` (a flat constant reshaped; import folds it).
void weight(ModelBuilder& b, const std::string& name, int64_t rows, int64_t cols) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7) % 11) / 11.0f - 0.5f;
  b.floats(name + "_flat", v);
  b.ints(name + "_shape", {rows, cols});
  b.node("Reshape", {name + "_flat", name + "_shape"}, {name});
}

// x[4,16] -> MatMul W1[16,8] -> Relu -> MatMul W2[8,8] -> Relu -> MatMul W3[8,8] -> Relu -> y:
// two tasks, the second computing two nodes.
std::string mlp_model() {
  ModelBuilder b(13);
  b.input("x", {4, 16});
  weight(b, "w1", 16, 8);
  weight(b, "w2", 8, 8);
  weight(b, "w3", 8, 8);
  b.node("MatMul", {"x", "w1"}, {"h1"});
  b.node("Relu", {"h1"}, {"r1"});
  b.node("MatMul", {"r1", "w2"}, {"h2"});
  b.node("Relu", {"h2"}, {"r2"});
  b.node("MatMul", {"r2", "w3"}, {"h3"});
  b.node("Relu", {"h3"}, {"y"});
  b.output("y", {4, 8});
  b.save(temp_dir() + "/mlp.onnx");
  return "mlp.onnx";
}

// x[16,32] -> MatMul W1[32,32] -> Relu -> MatMul W2[32,32] -> y: two tasks that differ only
// in the epilogue (relu, none).
std::string siblings_model() {
  ModelBuilder b(13);
  b.input("x", {16, 32});
  weight(b, "w1", 32, 32);
  weight(b, "w2", 32, 32);
  b.node("MatMul", {"x", "w1"}, {"h1"});
  b.node("Relu", {"h1"}, {"r1"});
  b.node("MatMul", {"r1", "w2"}, {"y"});
  b.output("y", {16, 32});
  b.save(temp_dir() + "/siblings.onnx");
  return "siblings.onnx";
}

// A model without a tunable task.
std::string relu_model() {
  ModelBuilder b(13);
  b.input("x", {4, 8});
  b.node("Relu", {"x"}, {"y"});
  b.output("y", {4, 8});
  b.save(temp_dir() + "/relu.onnx");
  return "relu.onnx";
}

int64_t count(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(h);
  int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  sqlite3_close(h);
  return n;
}

// The configs of every record of `workload` in `db`.
std::vector<json> configs_of(const std::string& db, const std::string& workload) {
  sqlite3* h = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(h,
                               "SELECT r.config FROM records r JOIN workloads w ON w.id = r.workload_id "
                               "WHERE w.canonical = ?",
                               -1, &st, nullptr),
            SQLITE_OK);
  sqlite3_bind_text(st, 1, workload.c_str(), -1, SQLITE_TRANSIENT);
  std::vector<json> out;
  while (sqlite3_step(st) == SQLITE_ROW) out.push_back(json::parse(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))));
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

// The last JSON line of `out` whose event is `event` (null when none).
json last_event(const std::string& out, const std::string& event) {
  json found;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    json e = json::parse(line);
    if (e["event"] == event) found = e;
  }
  return found;
}

TEST(TuneModel, TunesEveryTaskUnderOneBudgetAndResumes) {
  std::string model = mlp_model(), db = temp_dir() + "/model.db";
  std::string args = "tune --model " + model + " --local --trials 10 --batch 2 --repeat 2 --min-repeat-ms 1 "
                     "--retime-rounds 1 --retime-top 1 --strategy random --json --db " + db;
  Result r = tunefarm(args);
  ASSERT_EQ(r.exit, 0) << r.out << r.err;
  json start, done;
  int progress = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    json e = json::parse(line);
    if (e["event"] == "start") start = e;
    if (e["event"] == "progress") ++progress;
    if (e["event"] == "done") done = e;
  }
  ASSERT_EQ(start["tasks"].size(), 2u) << r.out;
  EXPECT_EQ(start["tasks"][0]["workload"], "matmul(M=4,N=8,K=16,const_b=1,epilogue=relu)");
  EXPECT_EQ(start["tasks"][1]["workload"], "matmul(M=4,N=8,K=8,const_b=1,epilogue=relu)");
  EXPECT_EQ(start["tasks"][1]["weight"], 2);
  EXPECT_GT(progress, 0);
  ASSERT_EQ(done["tasks"].size(), 2u) << r.out;
  int trials = 0;
  for (const json& t : done["tasks"]) {
    EXPECT_GT(t["trials"].get<int>(), 0) << t;  // the scheduler gives every task a round
    EXPECT_GT(t["best_s"].get<double>(), 0) << t;
    // 2MNK: 1024 and 512 FLOPs (the epilogue is not counted), over the best time.
    double flops = t["workload"] == "matmul(M=4,N=8,K=16,const_b=1,epilogue=relu)" ? 1024 : 512;
    EXPECT_NEAR(t["best_gflops"].get<double>(), flops / t["best_s"].get<double>() * 1e-9,
                1e-9 * t["best_gflops"].get<double>()) << t;
    trials += t["trials"].get<int>();
  }
  EXPECT_LE(trials, 10 + 2);  // one budget (a batch may finish past it)
  EXPECT_GT(done["estimate_s"].get<double>(), 0);
  EXPECT_GT(done["speedup_over_default"].get<double>(), 0);
  // The model itself, both builds timed here.
  EXPECT_GT(done["model"]["tuned_s"].get<double>(), 0) << done.dump();
  EXPECT_GT(done["model"]["default_s"].get<double>(), 0) << done.dump();
  EXPECT_EQ(done["model"]["tunable_kernels"], 3) << done.dump();  // three MatMul kernels
  EXPECT_EQ(done["model"]["tuned_kernels"], 3) << done.dump();
  // The model's estimate: the tasks' tuned times plus what the default build spent outside
  // its tasks, or (when the default build ran faster than its tasks timed alone) the tasks'
  // tuned times alone.
  double model_estimate = done["model_estimate_s"].get<double>(), tasks_tuned = done["estimate_s"].get<double>(),
         tasks_default = done["default_estimate_s"].get<double>(), model_default = done["model"]["default_s"];
  EXPECT_GT(model_estimate, 0) << done.dump();
  if (model_default >= tasks_default) {
    EXPECT_NEAR(model_estimate, tasks_tuned + model_default - tasks_default, 1e-12) << done.dump();
  } else {
    EXPECT_NEAR(model_estimate, tasks_tuned, 1e-12) << done.dump();
  }
  // The model's result is in the database: query models lists it.
  Result models = tunefarm("query models --json --db " + db);
  ASSERT_EQ(models.exit, 0) << models.err;
  json listed = json::parse(models.out);
  ASSERT_EQ(listed.size(), 1u) << models.out;
  EXPECT_EQ(listed[0]["model"], model);
  EXPECT_EQ(listed[0]["model_hash"].get<std::string>().size(), 64u);
  EXPECT_EQ(listed[0]["device_key"], "local");
  EXPECT_DOUBLE_EQ(listed[0]["tuned_s"].get<double>(), done["model"]["tuned_s"].get<double>());
  EXPECT_DOUBLE_EQ(listed[0]["default_s"].get<double>(), done["model"]["default_s"].get<double>());
  EXPECT_EQ(listed[0]["tuned_kernels"], 3);
  EXPECT_EQ(listed[0]["configs"].size(), 2u) << models.out;  // two workloads, three kernels
  Result table = tunefarm("query models --db " + db);
  EXPECT_NE(table.out.find(model), std::string::npos) << table.out;
  int64_t records = count(db, "SELECT COUNT(*) FROM records");
  EXPECT_GE(records, trials);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM runs WHERE status = 'done'"), 2);
  // A second run resumes: each of its trials is a config no run measured before.
  const std::string distinct = "SELECT COUNT(*) FROM (SELECT DISTINCT workload_id, config_hash FROM records)";
  int64_t before = count(db, distinct);
  Result again = tunefarm(args);
  ASSERT_EQ(again.exit, 0) << again.out << again.err;
  json done2 = last_event(again.out, "done");
  int64_t trials2 = 0;
  for (const json& t : done2["tasks"]) trials2 += t["trials"].get<int64_t>();
  EXPECT_GT(trials2, 0);
  EXPECT_EQ(count(db, distinct), before + trials2);
  // Without a database there are no tuned configs to build the model with: the summary says
  // why it was not timed, and the tuning's exit status stands.
  Result bare = tunefarm("tune --model " + model + " --local --trials 2 --batch 2 --repeat 2 --min-repeat-ms 1 "
                         "--retime-rounds 1 --retime-top 1 --strategy random --no-db --json");
  ASSERT_EQ(bare.exit, 0) << bare.out << bare.err;
  EXPECT_NE(last_event(bare.out, "done")["model"].value("not_timed", "").find("--no-db"), std::string::npos) << bare.out;
  Result text = tunefarm("tune --model " + model + " --local --trials 2 --batch 2 --repeat 2 --min-repeat-ms 1 "
                         "--retime-rounds 1 --retime-top 1 --strategy random --no-db");
  ASSERT_EQ(text.exit, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("model     not timed: --no-db keeps no tuned configs"), std::string::npos) << text.out;
}

// Shape buckets (--dim batch=2,6): every bucket's tasks in one run under one budget (the
// workloads of batch 2 and of batch 6), their nodes named by bucket; a compile with the
// database then finds a tuned config for every bucket's kernels.
TEST(TuneModel, ShapeBucketsAreTunedInOneRun) {
  ModelBuilder b(13);
  b.input("x", {-1, 16});
  weight(b, "w1", 16, 8);
  b.node("MatMul", {"x", "w1"}, {"h1"});
  b.node("Relu", {"h1"}, {"y"});
  b.output("y");
  b.save(temp_dir() + "/dyn_mlp.onnx");
  const std::string db = temp_dir() + "/buckets.db";
  Result r = tunefarm("tune --model dyn_mlp.onnx --dim batch=2,6 --local --trials 6 --batch 2 --repeat 2 "
                      "--min-repeat-ms 1 --retime-rounds 1 --retime-top 1 --strategy random --json --db " + db);
  ASSERT_EQ(r.exit, 0) << r.out << r.err;
  json start = last_event(r.out, "start");
  ASSERT_EQ(start["tasks"].size(), 2u) << r.out;
  EXPECT_EQ(start["tasks"][0]["workload"], "matmul(M=2,N=8,K=16,const_b=1,epilogue=relu)");
  EXPECT_EQ(start["tasks"][1]["workload"], "matmul(M=6,N=8,K=16,const_b=1,epilogue=relu)");
  const json done = last_event(r.out, "done");
  ASSERT_EQ(done["tasks"].size(), 2u) << r.out;
  for (const json& t : done["tasks"]) EXPECT_GT(t["trials"].get<int>(), 0) << t;
  Result imported = tunefarm("import dyn_mlp.onnx --dim batch=2,6 --json");
  ASSERT_EQ(imported.exit, 0) << imported.err;
  json info = json::parse(imported.out);
  EXPECT_EQ(info["buckets"], json::parse(R"([{"batch": 2}, {"batch": 6}])"));
  ASSERT_EQ(info["tasks"].size(), 2u);
  EXPECT_EQ(info["tasks"][1]["nodes"][0].get<std::string>().rfind("b1/", 0), 0u) << info["tasks"];
  Result built = tunefarm("compile --model dyn_mlp.onnx --dim batch=2,6 --db " + db + " -o dyn_mlp.so --json");
  ASSERT_EQ(built.exit, 0) << built.err;
  json side = json::parse(built.out);
  EXPECT_EQ(side["buckets"].size(), 2u);
  EXPECT_EQ(side["untuned_kernels"], 0) << built.out;
  for (const json& k : side["kernels"])
    if (k.contains("workload")) {
      EXPECT_NE(k["config_source"], "default") << k;
    }
}

// Tasks that differ only in the epilogue pass each new best to each other: a config that is
// the relu task's best (made so in the database: 1 ns) and that the other task never measured
// is passed to it (a `seed` event) and measured there; every seed event's config is measured
// by its receiver's next batch. (The mechanism, with fixed configs:
// Tune.SeedsAreMeasuredFirstAfterTheDefault.)
TEST(TuneModel, SiblingTasksTryEachOthersBest) {
  std::string model = siblings_model(), db = temp_dir() + "/siblings.db";
  const std::string args = "tune --model " + model + " --local --trials 16 --batch 2 --repeat 2 --min-repeat-ms 1 "
                           "--retime-rounds 1 --strategy random --json --db " + db;
  Result first = tunefarm(args);
  ASSERT_EQ(first.exit, 0) << first.out << first.err;
  json start = last_event(first.out, "start");
  ASSERT_EQ(start["tasks"].size(), 2u) << first.out;
  const std::string relu = start["tasks"][0]["workload"], none = start["tasks"][1]["workload"];
  EXPECT_EQ(relu, "matmul(M=16,N=32,K=32,const_b=1,epilogue=relu)");
  EXPECT_EQ(none, "matmul(M=16,N=32,K=32,const_b=1,epilogue=none)");
  std::vector<json> of_none = configs_of(db, none);
  json x;
  for (const json& c : configs_of(db, relu)) {
    if (std::find(of_none.begin(), of_none.end(), c) == of_none.end()) x = c;
  }
  ASSERT_FALSE(x.is_null()) << "every config of the relu task was measured by the other too";
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  std::string sql = "UPDATE records SET samples = '[1e-9]', median_s = 1e-9 WHERE config = '" + x.dump() + "'";
  ASSERT_EQ(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(h);
  EXPECT_GE(sqlite3_changes(h), 1);
  sqlite3_close(h);

  Result r = tunefarm(args);
  ASSERT_EQ(r.exit, 0) << r.out << r.err;
  // A seed is measured in its receiver's next batch (seeds first): every seed that a batch of
  // its receiver followed. (One passed as the budget ran out is never measured.)
  std::istringstream lines(r.out);
  bool passed_x = false;
  std::vector<json> pending, due;
  for (std::string line; std::getline(lines, line);) {
    json e = json::parse(line);
    if (e["event"] == "progress") {
      for (auto it = pending.begin(); it != pending.end();) {
        if ((*it)["task"] == e["task"]) {
          due.push_back(*it);
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (e["event"] != "seed") continue;
    EXPECT_NE(e["task"], e["from"]) << line;
    passed_x = passed_x || (e["workload"] == none && e["config"] == x);
    pending.push_back(e);
  }
  EXPECT_FALSE(due.empty()) << r.out;
  for (const json& e : due) {
    std::vector<json> measured = configs_of(db, e["workload"]);
    EXPECT_NE(std::find(measured.begin(), measured.end(), e["config"]), measured.end())
        << "task " << e["task"] << " never measured the config its sibling passed it: " << e.dump();
  }
  EXPECT_TRUE(passed_x) << "the relu task's best " << x.dump() << " was not passed on:\n" << r.out;
}

// submit --model to a real tuning service with a local board: the job is the model's tasks,
// weighted by count, compiled for the target they were extracted for; it runs to the end, and
// the model sent with it is then timed there, tuned against default, and its result kept in
// the service's database.
TEST(TuneModel, SubmitsAModelToTheService) {
  std::string model = mlp_model(), dir = temp_dir();
  tf::farm::Daemon svc({TF_TUNER, "--local-boards", "1", "--port", "0", "--db", dir + "/svc.db"}, dir + "/svc.log");
  int port = svc.port();
  ASSERT_GT(port, 0) << svc.log();
  std::string server = " --server 127.0.0.1:" + std::to_string(port);
  Result r = tunefarm("submit --model " + model + " --trials 4 --batch 2 --strategy random --watch" + server);
  ASSERT_EQ(r.exit, 0) << r.out << r.err;
  Result jobs = tunefarm("jobs --json" + server);
  ASSERT_EQ(jobs.exit, 0) << jobs.err;
  json listed = json::parse(jobs.out);
  ASSERT_EQ(listed["jobs"].size(), 1u) << jobs.out;
  json job = listed["jobs"][0];
  EXPECT_EQ(job["state"], "done") << job.dump();
  EXPECT_EQ(job["model"], model) << job.dump();
  ASSERT_EQ(job["tasks"].size(), 2u) << job.dump();
  EXPECT_EQ(job["tasks"][0]["workload"], "matmul(M=4,N=8,K=16,const_b=1,epilogue=relu)");
  EXPECT_EQ(job["tasks"][1]["weight"], 2) << job.dump();
  EXPECT_NE(r.out.find("model     "), std::string::npos) << r.out;
  const json& m = job["model_timing"];
  ASSERT_TRUE(m.is_object()) << job.dump();
  EXPECT_EQ(m["not_timed"], "") << m.dump();
  EXPECT_GT(m["tuned_s"].get<double>(), 0) << m.dump();
  EXPECT_GT(m["default_s"].get<double>(), 0) << m.dump();
  EXPECT_EQ(m["board"], "local") << m.dump();
  EXPECT_EQ(m["tunable_kernels"], 3) << m.dump();
  Result models = tunefarm("query models --json" + server);
  ASSERT_EQ(models.exit, 0) << models.err;
  json kept = json::parse(models.out);
  ASSERT_EQ(kept.size(), 1u) << models.out;
  EXPECT_EQ(kept[0]["model"], model) << models.out;
  EXPECT_DOUBLE_EQ(kept[0]["tuned_s"].get<double>(), m["tuned_s"].get<double>()) << models.out;
  // A job file naming a model the service never received is refused; so is a digest that is
  // not one.
  std::ofstream(dir + "/job.json") << R"j({"workloads": [{"workload": "matmul(M=4,N=8,K=16)"}], "model_sha256": ")j"
                                   << std::string(64, 'a') << "\"}";
  Result unknown = tunefarm("submit " + dir + "/job.json" + server);
  EXPECT_EQ(unknown.exit, 2) << unknown.out << unknown.err;
  EXPECT_NE(unknown.err.find("keeps no model of SHA-256 aaaa"), std::string::npos) << unknown.err;
  std::ofstream(dir + "/job2.json") << R"j({"workloads": [{"workload": "matmul(M=4,N=8,K=16)"}], "model_sha256": "x"})j";
  Result bad = tunefarm("submit " + dir + "/job2.json" + server);
  EXPECT_EQ(bad.exit, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("not 64 lower-case hex digits"), std::string::npos) << bad.err;
  Result none = tunefarm("submit --model " + relu_model() + server);
  EXPECT_EQ(none.exit, 2) << none.out << none.err;
  EXPECT_NE(none.err.find("model relu.onnx has no tunable task"), std::string::npos) << none.err;
}

TEST(TuneModel, BadRequestsAreClearErrors) {
  std::string model = mlp_model();
  relu_model();
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {Case{"tune --model relu.onnx --local --no-db", "model relu.onnx has no tunable task"},
                        Case{"tune --model " + model + " -w 'matmul(M=1,N=1,K=1)' --local --no-db",
                             "give --workload or --model, not both"},
                        Case{"tune --local --no-db", "give --workload SPEC or --model M.onnx"},
                        Case{"tune --model missing.onnx --local --no-db", "missing.onnx"},
                        Case{"tune --model " + model + " --local --trials 0 --no-db", "--trials 0 must be at least 1"}}) {
    Result r = tunefarm(c.args);
    EXPECT_EQ(r.exit, 2) << c.args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
}  // namespace tf::graph
