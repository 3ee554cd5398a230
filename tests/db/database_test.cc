// The tuning database on :memory: and on files: migrations, atomic batches, lookups in every
// tier, queries, export/import, and every refusal to open a file that is not ours.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <SQLiteCpp/SQLiteCpp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "db/database.h"
#include "db/query_json.h"
#include "db/jsonl.h"
#include "tests/db/db_test_util.h"

namespace tf::db {
namespace {

namespace fs = std::filesystem;
using testing::record;

const char* kX86 = "llvm -mtriple=x86_64-pc-linux-gnu -mcpu=skylake";
const char* kA72 = "llvm -mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a72";
const char* kA53 = "llvm -mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a53";

class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "tunefarm-db-XXXXXX").string();
    path_ = mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, ec);
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

LookupKey key(const MeasureRecord& r, const std::string& target, const std::string& arch) {
  return {r.workload, r.op, r.params, target, arch, ""};
}

TEST(Schema, MigratesAnEmptyFileAndReopens) {
  TempDir dir;
  std::string path = dir.file("t.db");
  open_database(path)->commit({record(8, 8, 8, kX86, 1, 1e-3)});
  {
    SQLite::Database raw(path);
    EXPECT_EQ(raw.execAndGet("PRAGMA user_version").getInt(), schema_version());
    EXPECT_EQ(raw.execAndGet("PRAGMA application_id").getInt(), 0x54464442);
    EXPECT_EQ(raw.execAndGet("PRAGMA journal_mode").getString(), "wal");
    EXPECT_TRUE(raw.tableExists("records"));
  }
  auto db = open_database(path);  // a second open migrates nothing and keeps the data
  EXPECT_EQ(db->stats().records, 1);
  auto ro = open_database(path, OpenMode::ReadOnly);
  EXPECT_EQ(ro->history({}).size(), 1u);
}

// Version 3 lets a run be 'interrupted' (its process died), which version 2's CHECK refused: a
// version 2 file (made here by putting the old table back) migrates with its runs and the
// records that name them.
TEST(Schema, Version2RunsMigrateAndMayBeInterrupted) {
  TempDir dir;
  std::string path = dir.file("v2.db");
  {
    auto db = open_database(path);
    TuningRun run;
    run.uuid = "old-run";
    run.user = "ana";
    run.host = "box";
    run.strategy = "random";
    run.workload = "matmul(M=8,N=8,K=8,epilogue=none)";
    run.target = kX86;
    run.started_at = 1.7e9;
    db->begin_run(run);
    MeasureRecord r = record(8, 8, 8, kX86, 1, 1e-3);
    r.run_uuid = "old-run";
    db->commit({r});
  }
  {
    SQLite::Database raw(path, SQLite::OPEN_READWRITE);
    raw.exec(R"sql(
      CREATE TABLE runs_v2 (id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, user TEXT NOT NULL,
        host TEXT NOT NULL, strategy TEXT NOT NULL, budget INTEGER NOT NULL, workload TEXT NOT NULL,
        target TEXT NOT NULL, started_at REAL NOT NULL, finished_at REAL,
        status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'cancelled')));
      INSERT INTO runs_v2 SELECT * FROM runs;
      DROP TABLE runs;
      ALTER TABLE runs_v2 RENAME TO runs;
      DROP TABLE verdicts;
      DROP TABLE models;
      PRAGMA user_version = 2;)sql");
    EXPECT_THROW(raw.exec("UPDATE runs SET status = 'interrupted'"), SQLite::Exception);
  }
  auto db = open_database(path);
  db->finish_run("old-run", "interrupted", 1.7e9 + 5);
  std::vector<TuningRun> runs = db->runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "interrupted");
  EXPECT_EQ(runs[0].records, 1);
  ASSERT_EQ(db->history({}).size(), 1u);
  EXPECT_EQ(db->history({})[0].run_uuid, "old-run");
  SQLite::Database raw(path);
  EXPECT_EQ(raw.execAndGet("PRAGMA user_version").getInt(), schema_version());
  SQLite::Statement fk(raw, "PRAGMA foreign_key_check");
  EXPECT_FALSE(fk.executeStep());  // no record points at a run that is gone
}

TEST(Commit, BatchIsAtomic) {
  auto db = open_database(":memory:");
  std::vector<MeasureRecord> batch = {record(8, 8, 8, kX86, 1, 1e-3), record(8, 8, 8, kX86, 2, 2e-3)};
  batch.push_back(record(8, 8, 8, kX86, 3, 3e-3));
  batch.back().error_code = "exploded";
  try {
    db->commit(batch);
    FAIL() << "accepted an unknown error code";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("record 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unknown error_code 'exploded'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(db->stats().records, 0);
  batch.pop_back();
  EXPECT_EQ(db->commit(batch), 2);
  EXPECT_EQ(db->commit(batch), 0);  // committing the same records again adds nothing
  EXPECT_EQ(db->stats().records, 2);
}

TEST(Commit, RejectsEachKindOfBadRecord) {
  auto db = open_database(":memory:");
  auto bad = [&](auto mutate, const std::string& message) {
    MeasureRecord r = record(8, 8, 8, kX86, 1, 1e-3);
    mutate(r);
    try {
      db->commit({r});
      ADD_FAILURE() << "accepted: " << message;
    } catch (const DbError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  bad([](MeasureRecord& r) { r.workload.clear(); }, "workload is empty");
  bad([](MeasureRecord& r) { r.target.clear(); }, "target is empty");
  bad([](MeasureRecord& r) { r.config = 3; }, "config is not a JSON object");
  bad([](MeasureRecord& r) { r.samples_s.clear(); }, "no samples");
  bad([](MeasureRecord& r) { r.samples_s = {-1}; }, "sample -1 is not a time in (0, 1e6] seconds");
  bad([](MeasureRecord& r) { r.samples_s = {1e-3, NAN}; }, "sample nan is not a time");
  bad([](MeasureRecord& r) { r.measured_at = 1e19; }, "measured_at 1e+19 is not in [0, 2.53402e+11]");
  bad([](MeasureRecord& r) { r.measured_at = NAN; }, "measured_at is not set");
  bad([](MeasureRecord& r) { r.compile_s = INFINITY; }, "compile_s inf is not in");
  bad([](MeasureRecord& r) { r.settings.min_repeat_ms = -1; }, "settings.min_repeat_ms -1 is not in");
  bad([](MeasureRecord& r) { r.settings.cooldown_ms = NAN; }, "settings.cooldown_ms nan is not in");
  bad([](MeasureRecord& r) { r.params["M"] = -5; }, "params.M = -5 is not an integer");
  bad([](MeasureRecord& r) { r.params["M"] = "big"; }, "params.M = \"big\" is not an integer");
  bad([](MeasureRecord& r) { r.flops = -1; }, "flops -1 is not in");
  bad([](MeasureRecord& r) { r.device_model = std::string(5000, 'x'); }, "device_model has 5000 characters");
  bad([](MeasureRecord& r) { r.samples_s.assign(100001, 1e-3); }, "100001 samples, over the limit");
  bad([](MeasureRecord& r) { r.correctness = "maybe"; }, "correctness 'maybe'");
  bad([](MeasureRecord& r) { r.settings.repeat = 0; }, "repeat must be at least 1");
  bad([](MeasureRecord& r) { r.measured_at = 0; }, "measured_at is not set");
  EXPECT_EQ(db->stats().records, 0);
}

// An emulated board's timings (qemu: ~100x slower, nothing like the real chip's profile)
// must never pick a real Pi's config, nor a real Pi's pick an emulated board's.
TEST(Lookup, EmulatedAndRealBoardsNeverStandInForEachOther) {
  const std::string qemu = std::string(kA72) + " -model=qemu-cortex-a72";
  auto db = open_database(":memory:");
  MeasureRecord emulated = record(64, 64, 64, qemu, 1, 1e-3, "aarch64");
  db->commit({emulated});
  EXPECT_TRUE(emulated_target(qemu));
  EXPECT_FALSE(emulated_target(kA72));
  EXPECT_EQ(db->best(key(emulated, qemu, "aarch64")).tier, MatchTier::Exact);
  EXPECT_EQ(db->best(key(emulated, kA72, "aarch64")).tier, MatchTier::None);
  EXPECT_EQ(db->best(key(emulated, kA53, "aarch64")).tier, MatchTier::None);

  MeasureRecord real = record(64, 64, 64, kA53, 2, 5e-3, "aarch64");
  db->commit({real});
  BestResult b = db->best(key(emulated, kA72, "aarch64"));
  EXPECT_EQ(b.tier, MatchTier::SameArch);
  EXPECT_EQ(b.record.target, kA53);
  // Another emulated model may stand in for an emulated one, as real boards do for each other.
  b = db->best(key(emulated, std::string(kA53) + " -model=qemu-cortex-a53", "aarch64"));
  EXPECT_EQ(b.tier, MatchTier::SameArch);
  EXPECT_EQ(b.record.target, qemu);
}

TEST(Lookup, EveryTier) {
  auto db = open_database(":memory:");
  MeasureRecord exact_fast = record(64, 64, 64, kA72, 1, 1e-3, "aarch64");
  MeasureRecord exact_slow = record(64, 64, 64, kA72, 2, 5e-3, "aarch64");
  MeasureRecord wrong = record(64, 64, 64, kA72, 3, 1e-4, "aarch64");
  wrong.correctness = "wrong";  // fastest, but computes garbage: never chosen
  MeasureRecord failed = record(64, 64, 64, kA72, 4, 1e-5, "aarch64");
  failed.error_code = "timeout";
  MeasureRecord near = record(128, 64, 64, kA72, 5, 2e-3, "aarch64");
  MeasureRecord far = record(1024, 1024, 1024, kA72, 6, 9e-3, "aarch64");
  db->commit({exact_fast, exact_slow, wrong, failed, near, far});

  BestResult b = db->best(key(exact_fast, kA72, "aarch64"));
  EXPECT_EQ(b.tier, MatchTier::Exact);
  EXPECT_EQ(b.record.config, exact_fast.config);

  b = db->best(key(exact_fast, kA53, "aarch64"));  // another aarch64 CPU
  EXPECT_EQ(b.tier, MatchTier::SameArch);
  EXPECT_EQ(b.record.config, exact_fast.config);
  EXPECT_EQ(b.record.target, kA72);

  MeasureRecord query = record(100, 64, 64, kA72, 0, 1);  // not measured: nearest is M=128
  b = db->best(key(query, kA72, "aarch64"));
  EXPECT_EQ(b.tier, MatchTier::NearestShape);
  EXPECT_EQ(b.record.workload, near.workload);
  EXPECT_NEAR(b.distance, std::log(129.0) - std::log(101.0), 1e-9);

  b = db->best(key(query, kX86, "x86_64"));
  EXPECT_EQ(b.tier, MatchTier::None);

  // Too far from any measured shape: the default, not a guess (M=512 is 4x past M=128 and
  // 2x short of 1024^3 in one dimension, but 16x in the others).
  MeasureRecord distant = record(512, 16, 16, kA72, 0, 1);
  b = db->best(key(distant, kA72, "aarch64"));
  EXPECT_EQ(b.tier, MatchTier::None) << b.record.workload << " at distance " << b.distance;
}

// The ranking of docs/tuning.md: a config's median of medians, not its luckiest record; and
// a config timed once ranks behind re-timed ones unless faster by more than kOnceMargin.
TEST(Lookup, OneLuckyMeasurementDoesNotWin) {
  auto db = open_database(":memory:");
  auto rec = [](int tile, double seconds, int n) {
    MeasureRecord r = record(64, 64, 64, kX86, tile, seconds);
    r.measured_at += n * 1000;  // another measurement of the same config
    return r;
  };
  // Config 1: re-timed four times, one of them lucky (0.9 ms); its statistic is 1.40 ms.
  db->commit({rec(1, 1.40e-3, 0), rec(1, 0.90e-3, 1), rec(1, 1.41e-3, 2), rec(1, 1.39e-3, 3)});
  // Config 2: measured once at 1.36 ms, 3% faster: within the margin, so behind config 1.
  db->commit({rec(2, 1.36e-3, 0)});
  MeasureRecord any = record(64, 64, 64, kX86, 0, 1);
  BestResult b = db->best(key(any, kX86, "x86_64"));
  ASSERT_EQ(b.tier, MatchTier::Exact);
  EXPECT_EQ(b.record.config, rec(1, 1, 0).config);
  EXPECT_EQ(b.measurements, 4);
  EXPECT_NEAR(b.robust_median_s, 1.395e-3, 1e-12);
  // Measured once more (1.37 ms), config 2 is re-timed too and wins on its statistic.
  db->commit({rec(2, 1.37e-3, 1)});
  b = db->best(key(any, kX86, "x86_64"));
  EXPECT_EQ(b.record.config, rec(2, 1, 0).config);
  EXPECT_EQ(b.measurements, 2);
  // A config measured once but faster by more than the margin (1.2 ms against 1.365) wins.
  db->commit({rec(3, 1.20e-3, 0)});
  b = db->best(key(any, kX86, "x86_64"));
  EXPECT_EQ(b.record.config, rec(3, 1, 0).config);
  EXPECT_EQ(b.measurements, 1);
  // Nothing re-timed at all: the fastest single measurement.
  auto only = open_database(":memory:");
  only->commit({rec(4, 2e-3, 0), rec(5, 1.9e-3, 0)});
  EXPECT_EQ(only->best(key(any, kX86, "x86_64")).record.config, rec(5, 1, 0).config);
}

// A run's verdict (the config its re-timing found faster than the default, round by round)
// is the answer over medians measured at other times; the newest verdict wins; a verdict
// whose config turned out wrong, or has no record, is passed over; query best agrees.
TEST(Lookup, TheNewestVerdictWinsWhileItsConfigIsCorrect) {
  TempDir dir;
  std::string path = dir.file("v.db");
  auto db = open_database(path);
  auto rec = [](int tile, double seconds, int n) {
    MeasureRecord r = record(64, 64, 64, kX86, tile, seconds);
    r.measured_at += n * 1000;
    return r;
  };
  // Config 1 was measured twice in a quiet minute, config 2 twice in a busy one.
  db->commit({rec(1, 1.0e-3, 0), rec(1, 1.0e-3, 1), rec(2, 1.3e-3, 0), rec(2, 1.3e-3, 1)});
  MeasureRecord any = record(64, 64, 64, kX86, 0, 1);
  EXPECT_EQ(db->best(key(any, kX86, "x86_64")).record.config, rec(1, 1, 0).config);
  Verdict v{any.workload, kX86, "dense.cpu.v1", config_hash(rec(2, 1, 0).config), "run-a", 1.1, 1.8e9};
  db->add_verdict(v);
  BestResult b = db->best(key(any, kX86, "x86_64"));
  ASSERT_EQ(b.tier, MatchTier::Exact);
  EXPECT_EQ(b.record.config, rec(2, 1, 0).config);
  EXPECT_EQ(b.measurements, 2);
  EXPECT_NEAR(b.robust_median_s, 1.3e-3, 1e-12);
  ASSERT_EQ(db->best_per_pair().size(), 1u);
  EXPECT_EQ(db->best_per_pair()[0].config, rec(2, 1, 0).config);
  // Another template's lookup does not take it.
  LookupKey other = key(any, kX86, "x86_64");
  other.template_name = "dense.cpu.v2";
  EXPECT_EQ(db->best(other).tier, MatchTier::None);
  // A newer verdict for config 1; then config 1 gives a wrong answer: the ranking decides.
  v.config_hash = config_hash(rec(1, 1, 0).config);
  v.decided_at = 1.9e9;
  db->add_verdict(v);
  EXPECT_EQ(db->best(key(any, kX86, "x86_64")).record.config, rec(1, 1, 0).config);
  MeasureRecord wrong = rec(1, 1.0e-3, 2);
  wrong.correctness = "wrong";
  db->commit({wrong});
  EXPECT_EQ(db->best(key(any, kX86, "x86_64")).record.config, rec(2, 1, 0).config);
  // A verdict on a config with no record at all changes nothing.
  v.config_hash = "0123456789abcdef";
  v.decided_at = 2.0e9;
  db->add_verdict(v);
  EXPECT_EQ(db->best(key(any, kX86, "x86_64")).record.config, rec(2, 1, 0).config);
  // Bad verdicts are refused, naming the field.
  Verdict bad = v;
  bad.workload = "";
  try {
    db->add_verdict(bad);
    ADD_FAILURE() << "an empty workload was stored";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("verdict: workload is empty"), std::string::npos) << e.what();
  }
  bad = v;
  bad.speedup = std::nan("");
  EXPECT_THROW(db->add_verdict(bad), DbError);
  bad = v;
  bad.template_name = std::string(kMaxNameLength + 1, 't');
  EXPECT_THROW(db->add_verdict(bad), DbError);
}

// What tuning bought a model: stored whole, listed newest first; bad ones are refused naming
// the field.
TEST(Models, ResultsAreListedNewestFirstAndCheckedOnTheWay) {
  auto db = open_database(":memory:");
  EXPECT_TRUE(db->model_results().empty());
  ModelResult m{0, "resnet18.onnx", std::string(64, 'a'), kX86, "local", 0.020, 0.022, 0.021, 14, 21,
                nlohmann::json::array({{{"workload", "matmul(M=1,N=1000,K=512,epilogue=bias)"},
                                        {"template", "dense.cpu.v1"}, {"config", {{"tile_n", 32}}}}}),
                1.8e9};
  db->add_model_result(m);
  m.model = "mobilenet_v2.onnx";
  m.measured_at = 1.9e9;
  db->add_model_result(m);
  std::vector<ModelResult> all = db->model_results();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].model, "mobilenet_v2.onnx");
  EXPECT_EQ(all[1].model, "resnet18.onnx");
  EXPECT_DOUBLE_EQ(all[1].tuned_s, 0.020);
  EXPECT_DOUBLE_EQ(all[1].default_s, 0.022);
  EXPECT_EQ(all[1].tuned_kernels, 14);
  EXPECT_EQ(all[1].configs[0]["config"]["tile_n"], 32);
  auto refused = [&](ModelResult bad, const std::string& why) {
    try {
      db->add_model_result(bad);
      ADD_FAILURE() << "stored: " << why;
    } catch (const DbError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  ModelResult bad = m;
  bad.model_hash = "";
  refused(bad, "model_hash is empty");
  bad = m;
  bad.tuned_s = -1;
  refused(bad, "tuned_s -1");
  bad = m;
  bad.tuned_kernels = 30;
  refused(bad, "30 tuned of 21 tunable kernels");
  bad = m;
  bad.configs = nlohmann::json::object();
  refused(bad, "configs is not a JSON array");
  EXPECT_EQ(db->model_results().size(), 2u);
}

// A model result travels from the service as query models' JSON: it reads back to the same
// result, and a malformed one is refused naming the field.
TEST(Models, JsonReadsBackAndMalformedOnesAreRefused) {
  ModelResult m{0, "resnet18.onnx", std::string(64, 'a'), kX86, "local", 0.020, 0.022, 0.021, 14, 21,
                nlohmann::json::array({{{"workload", "matmul(M=1,N=1000,K=512,epilogue=bias)"}}}), 1.8e9};
  ModelResult back = model_result_from_json(model_result_json(m));
  EXPECT_EQ(model_result_json(back), model_result_json(m));
  auto refused = [](nlohmann::json j, const std::string& why) {
    try {
      model_result_from_json(j);
      ADD_FAILURE() << "read: " << j.dump();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  nlohmann::json j = model_result_json(m);
  j.erase("target");
  refused(j, "no field target");
  j = model_result_json(m);
  j["tuned_s"] = "fast";
  refused(j, "tuned_s has the wrong type");
  j = model_result_json(m);
  j["tuned_kernels"] = 99;
  refused(j, "99 tuned of 21 tunable kernels");
  refused(nlohmann::json::array(), "not a JSON object");
}

// A version 3 file has no verdicts: read-only it answers by the ranking; opened for writing
// it gains the table.
TEST(Schema, Version3FilesReadWithoutVerdictsAndMigrate) {
  TempDir dir;
  std::string path = dir.file("v3.db");
  open_database(path)->commit({record(8, 8, 8, kX86, 1, 1e-3)});
  {
    SQLite::Database raw(path, SQLite::OPEN_READWRITE);
    raw.exec("DROP TABLE verdicts; DROP TABLE models; PRAGMA user_version = 3;");
  }
  MeasureRecord any = record(8, 8, 8, kX86, 0, 1);
  auto ro = open_database(path, OpenMode::ReadOnly);
  EXPECT_EQ(ro->best(key(any, kX86, "x86_64")).record.config, record(8, 8, 8, kX86, 1, 1).config);
  EXPECT_TRUE(ro->model_results().empty());
  EXPECT_EQ(ro->best_per_pair().size(), 1u);
  auto rw = open_database(path);
  rw->add_verdict({any.workload, kX86, "dense.cpu.v1", config_hash(record(8, 8, 8, kX86, 1, 1).config), "", 1, 1.8e9});
  EXPECT_EQ(rw->best(key(any, kX86, "x86_64")).tier, MatchTier::Exact);
  SQLite::Database raw(path);
  EXPECT_EQ(raw.execAndGet("PRAGMA user_version").getInt(), schema_version());
}

TEST(Queries, TopHistoryMeasuredStatsRuns) {
  auto db = open_database(":memory:");
  TuningRun run;
  run.uuid = "run-1";
  run.user = "ana";
  run.host = "box";
  run.strategy = "random";
  run.budget = 3;
  run.workload = "matmul(M=8,N=8,K=8,epilogue=none)";
  run.target = kX86;
  run.started_at = 1.7e9;
  db->begin_run(run);
  std::vector<MeasureRecord> rs;
  for (int i = 0; i < 5; ++i) {
    rs.push_back(record(8, 8, 8, kX86, i, (5 - i) * 1e-3));
    rs.back().run_uuid = "run-1";
  }
  rs[4].error_code = "runtime_error";
  rs[4].samples_s.clear();
  db->commit(rs);
  db->finish_run("run-1", "done", 1.7e9 + 60);

  auto top = db->top_k("", "", 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].config["tile"], 3);  // 2 ms
  EXPECT_EQ(top[1].config["tile"], 2);
  auto hist = db->history({});
  ASSERT_EQ(hist.size(), 5u);
  for (size_t i = 0; i < hist.size(); ++i) EXPECT_EQ(hist[i].config["tile"], int(i));
  EXPECT_TRUE(db->measured(rs[0].workload, kX86, rs[0].config_hash()));
  EXPECT_FALSE(db->measured(rs[0].workload, kA72, rs[0].config_hash()));
  Stats s = db->stats();
  EXPECT_EQ(s.records, 5);
  EXPECT_EQ(s.errors["ok"], 4);
  EXPECT_EQ(s.errors["runtime_error"], 1);
  EXPECT_EQ(s.per_run["run-1"], 5);
  ASSERT_EQ(s.per_pair.size(), 1u);
  EXPECT_EQ(s.per_pair[0].ok, 4);
  auto runs = db->runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "done");
  EXPECT_EQ(runs[0].records, 5);
  EXPECT_THROW(db->finish_run("no-such-run", "done", 1), DbError);
}

TEST(Distill, KeepsTheBestNPerPair) {
  auto db = open_database(":memory:");
  std::vector<MeasureRecord> rs;
  for (int i = 0; i < 6; ++i) rs.push_back(record(8, 8, 8, kX86, i, (i + 1) * 1e-3));
  for (int i = 0; i < 3; ++i) rs.push_back(record(16, 8, 8, kX86, 10 + i, (i + 1) * 1e-3));
  rs.push_back(record(16, 8, 8, kX86, 20, 1e-6));
  rs.back().error_code = "timeout";
  db->commit(rs);
  DistillResult dry = db->distill(2, /*dry_run=*/true);
  EXPECT_EQ(dry.removed, 4 + 2);  // 4 slow M=8 records; for M=16 one slow and the error
  EXPECT_EQ(dry.kept, 4);
  EXPECT_EQ(db->stats().records, 10);  // nothing removed yet
  DistillResult real = db->distill(2, /*dry_run=*/false);
  EXPECT_EQ(real.removed, dry.removed);
  EXPECT_EQ(db->stats().records, 4);
  auto top = db->top_k(rs[0].workload, kX86, 10);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].config["tile"], 0);
  EXPECT_EQ(top[1].config["tile"], 1);
  EXPECT_THROW(db->distill(0, true), DbError);
}

TEST(Jsonl, RoundTripAndIdempotentImport) {
  auto a = open_database(":memory:");
  std::vector<MeasureRecord> rs;
  for (int i = 0; i < 20; ++i) rs.push_back(record(8 + i % 3, 8, 8, i % 2 ? kX86 : kA72, i, (i + 1) * 1e-4));
  rs[3].error_code = "compile_error";
  rs[3].error_msg = "boom";
  rs[3].samples_s.clear();
  rs[5].run_uuid = "r5";
  a->commit(rs);
  // A verdict for config 7 of the first workload, which ranking alone would not pick.
  Verdict v{rs[7].workload, rs[7].target, rs[7].template_name, rs[7].config_hash(), "r7", 1.2, 1.8e9};
  a->add_verdict(v);
  EXPECT_FALSE(a->add_verdict(v));  // the same verdict again: stored once
  std::stringstream file;
  ExportResult e = export_jsonl(*a, {}, file);
  EXPECT_EQ(e.records, 20);
  EXPECT_EQ(e.verdicts, 1);

  auto b = open_database(":memory:");
  std::string text = file.str();
  std::istringstream in1(text);
  ImportResult r1 = import_jsonl(*b, in1);
  EXPECT_EQ(r1.added, 20);
  EXPECT_EQ(r1.verdicts, 1);
  EXPECT_TRUE(r1.errors.empty());
  std::istringstream in2(text);
  ImportResult r2 = import_jsonl(*b, in2);
  EXPECT_EQ(r2.added, 0);
  EXPECT_EQ(r2.verdicts, 0);
  EXPECT_EQ(r2.duplicates, 21);
  auto ha = a->history({}), hb = b->history({});
  ASSERT_EQ(ha.size(), hb.size());
  for (size_t i = 0; i < ha.size(); ++i) EXPECT_EQ(record_to_json(ha[i]), record_to_json(hb[i])) << i;
  ASSERT_EQ(b->verdicts({}).size(), 1u);
  EXPECT_EQ(verdict_to_json(b->verdicts({})[0]), verdict_to_json(v));
  // The imported verdict decides the imported database's lookups as it did the exporter's.
  LookupKey k = key(rs[7], rs[7].target, rs[7].arch);
  EXPECT_EQ(b->best(k).record.config, rs[7].config);
  EXPECT_EQ(b->best(k).record.config, a->best(k).record.config);
  // Filters select verdicts too; a bad verdict line is refused naming its line.
  std::stringstream other;
  EXPECT_EQ(export_jsonl(*a, {"matmul(M=99,N=8,K=8,epilogue=none)", "", 0}, other).verdicts, 0);
  std::istringstream bad("{\"v\":1,\"kind\":\"verdict\",\"workload\":\"\",\"target\":\"t\",\"template\":\"x\","
                         "\"config_hash\":\"h\",\"run\":\"\",\"speedup\":1,\"decided_at\":1}\n"
                         "{\"v\":1,\"kind\":\"model\"}\n");
  ImportResult r3 = import_jsonl(*b, bad);
  ASSERT_EQ(r3.errors.size(), 2u);
  EXPECT_NE(r3.errors[0].find("line 1: verdict: workload is empty"), std::string::npos) << r3.errors[0];
  EXPECT_NE(r3.errors[1].find("line 2: unknown kind \"model\""), std::string::npos) << r3.errors[1];
}

TEST(Jsonl, MalformedLinesAreRejectedWithTheirNumber) {
  auto db = open_database(":memory:");
  std::string good = record_to_json(record(8, 8, 8, kX86, 1, 1e-3)).dump();
  nlohmann::json no_config = record_to_json(record(8, 8, 8, kX86, 2, 1e-3));
  no_config.erase("config");
  nlohmann::json bad_type = record_to_json(record(8, 8, 8, kX86, 3, 1e-3));
  bad_type["flops"] = "many";
  nlohmann::json bad_version = record_to_json(record(8, 8, 8, kX86, 4, 1e-3));
  bad_version["v"] = 7;
  nlohmann::json bad_code = record_to_json(record(8, 8, 8, kX86, 5, 1e-3));
  bad_code["error_code"] = "meh";
  std::string text = good + "\n" + "{\"v\": 1, \"workload\": \"matmul(\n" + no_config.dump() + "\n\n" +
                     bad_type.dump() + "\n" + bad_version.dump() + "\n" + bad_code.dump() + "\n" +
                     record_to_json(record(8, 8, 8, kX86, 6, 1e-3)).dump() + "\n";
  std::istringstream in(text);
  ImportResult r = import_jsonl(*db, in);
  EXPECT_EQ(r.added, 2);
  ASSERT_EQ(r.errors.size(), 5u);
  EXPECT_NE(r.errors[0].find("line 2: not valid JSON"), std::string::npos) << r.errors[0];
  EXPECT_NE(r.errors[1].find("line 3: missing field 'config'"), std::string::npos) << r.errors[1];
  EXPECT_NE(r.errors[2].find("line 5: field 'flops' is not an integer in"), std::string::npos) << r.errors[2];
  EXPECT_NE(r.errors[3].find("line 6: format version 7"), std::string::npos) << r.errors[3];
  EXPECT_NE(r.errors[4].find("line 7: unknown error_code 'meh'"), std::string::npos) << r.errors[4];
  EXPECT_EQ(db->stats().records, 2);
}

void expect_open_error(const std::string& path, OpenMode mode, const std::string& message) {
  try {
    open_database(path, mode);
    ADD_FAILURE() << "opened " << path;
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(OpenErrors, RefusesWhatIsNotOurs) {
  TempDir dir;
  std::string text = dir.file("notes.txt");
  std::ofstream(text) << "this is not a database, and it must stay as it is\n";
  expect_open_error(text, OpenMode::ReadWrite, "is not a tunefarm database (not an SQLite file)");
  std::ifstream check(text);
  std::string first_line;
  std::getline(check, first_line);
  EXPECT_EQ(first_line, "this is not a database, and it must stay as it is");

  std::string other = dir.file("other.db");
  {
    SQLite::Database raw(other, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    raw.exec("CREATE TABLE invoices (id INTEGER)");
  }
  expect_open_error(other, OpenMode::ReadWrite, "is an SQLite database of something else (tables: invoices)");

  std::string newer = dir.file("newer.db");
  open_database(newer);
  {
    SQLite::Database raw(newer, SQLite::OPEN_READWRITE);
    raw.exec("PRAGMA user_version = 99");
  }
  expect_open_error(newer, OpenMode::ReadWrite, "has schema version 99, newer than the " + std::to_string(schema_version()));

  expect_open_error(dir.file("missing/dir/t.db"), OpenMode::ReadWrite, "directory");
  expect_open_error(dir.file("absent.db"), OpenMode::ReadOnly, "no such file");
  fs::create_directories(dir.file("adir"));
  expect_open_error(dir.file("adir"), OpenMode::ReadWrite, "is a directory");
}

// A file that was a database and is damaged is said at open, by name, rather than used (a file
// cut short reads as if its last pages were never written) or made anew (an empty one).
TEST(OpenErrors, DamagedFilesAreSaidNotUsed) {
  TempDir dir;
  std::string path = dir.file("t.db");
  {
    std::vector<MeasureRecord> batch;
    for (int i = 0; i < 200; ++i) batch.push_back(record(8, 8, 8, kX86, i, 1e-3));
    open_database(path)->commit(batch);
  }
  ASSERT_FALSE(fs::exists(path + "-wal"));  // checkpointed at close
  uintmax_t size = fs::file_size(path);
  ASSERT_GT(size, 4u * 4096);
  std::string copy = dir.file("copy.db");
  auto cut = [&](uintmax_t bytes) {
    fs::copy_file(path, copy, fs::copy_options::overwrite_existing);
    fs::resize_file(copy, bytes);
  };
  cut(size - 1);
  expect_open_error(copy, OpenMode::ReadWrite, "is damaged: it has " + std::to_string(size - 1) + " bytes, not a whole number");
  expect_open_error(copy, OpenMode::ReadOnly, "cut short");
  cut(size - 4096);
  expect_open_error(copy, OpenMode::ReadWrite, "is damaged: its header counts " + std::to_string(size / 4096) + " pages");
  // An empty file: its data is gone, and it is said (one being created right now is new).
  cut(0);
  fs::last_write_time(copy, fs::file_time_type::clock::now() - std::chrono::minutes(1));
  expect_open_error(copy, OpenMode::ReadWrite, "is an empty file (0 bytes)");
  EXPECT_EQ(fs::file_size(copy), 0u) << "it was made anew";
  fs::last_write_time(copy, fs::file_time_type::clock::now());
  EXPECT_NO_THROW(open_database(copy));
  // A page scribbled over: the service's quick check at start says so.
  fs::copy_file(path, copy, fs::copy_options::overwrite_existing);
  {
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 4096 + 8));
    std::string junk(2000, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  try {
    quick_check(copy);
    ADD_FAILURE() << "quick_check passed a damaged file";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("database " + copy + " is damaged (SQLite's quick_check"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(quick_check(path));
}

TEST(OpenErrors, ReadOnlyRefusesWritesClearly) {
  TempDir dir;
  std::string path = dir.file("ro.db");
  open_database(path)->commit({record(8, 8, 8, kX86, 1, 1e-3)});
  auto ro = open_database(path, OpenMode::ReadOnly);
  EXPECT_EQ(ro->stats().records, 1);
  try {
    ro->commit({record(8, 8, 8, kX86, 2, 1e-3)});
    FAIL() << "wrote through a read-only handle";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
  }
  // A fresh file cannot be created read-only.
  std::string empty = dir.file("empty.db");
  { SQLite::Database raw(empty, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE); }
  expect_open_error(empty, OpenMode::ReadOnly, "needs creating but is open read-only");
}

TEST(Paths, FlagThenEnvironmentThenDefault) {
  EXPECT_EQ(database_path("/x/flag.db"), "/x/flag.db");
  setenv("TUNEFARM_DB", "/x/env.db", 1);
  EXPECT_EQ(database_path(""), "/x/env.db");
  unsetenv("TUNEFARM_DB");
  TempDir home;
  std::string saved = std::getenv("HOME") ? std::getenv("HOME") : "";
  setenv("HOME", home.file("").c_str(), 1);
  std::string p = database_path("");
  EXPECT_NE(p.find(".local/share/tunefarm/tuning.db"), std::string::npos) << p;
  EXPECT_TRUE(fs::is_directory(fs::path(p).parent_path()));
  setenv("HOME", saved.c_str(), 1);
}

}  // namespace
}  // namespace tf::db
