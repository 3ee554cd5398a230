#include "cli/tune_command.h"

#include "base/hash.h"
#include "cli/common.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <tuple>

#include "base/error.h"
#include "costmodel/transfer.h"
#include "costmodel/xgboost_model.h"
#include "db/database.h"
#include "proto/credentials.h"
#include "tuner/builder.h"
#include "tuner/config_space.h"
#include "tuner/farm_runner.h"
#include "tuner/runner.h"
#include "tuner/cost_model_search.h"
#include "tuner/search_strategy.h"
#include "runtime/child_process.h"
#include "tuner/tune.h"
#include "tuner/task_group.h"
#include "tuner/tuning_records.h"
#include "cli/model_command.h"
#include "graph/tasks.h"

namespace tf::cli {
namespace {

using json = nlohmann::json;

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop = true; }

std::string duration(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

// A run's time neither building nor measuring (the search, the database), and its rate.
double other_s(const TuneState& st) { return std::max(0.0, st.elapsed_s - st.build_s - st.measure_s + st.overlap_s); }
double candidates_per_s(const TuneState& st) { return st.elapsed_s > 0 ? st.trials_done / st.elapsed_s : 0.0; }
// The rate of the search alone (the run less its re-timing at the end, which takes the same
// time whatever the trials).
double search_candidates_per_s(const TuneState& st) {
  const double search_s = st.elapsed_s - st.retime_s;
  return search_s > 0 ? st.trials_done / search_s : 0.0;
}

// A measurement's parts on average, in milliseconds (TuneState: upload, load, run).
double per_measurement_ms(const TuneState& st, double sum_s) { return st.measured > 0 ? 1e3 * sum_s / st.measured : 0.0; }

// Where a run's time went (TuneState), for --json.
json time_report(const TuneState& st) {
  return {{"build_s", st.build_s},
          {"measure_s", st.measure_s},
          {"overlap_s", st.overlap_s},
          {"other_s", other_s(st)},
          {"candidates_per_s", candidates_per_s(st)},
          {"search_candidates_per_s", search_candidates_per_s(st)},
          {"retime_s", st.retime_s},
          {"retime_dropped", st.retime_dropped},
          {"search_ahead_s", st.search_ahead_s},
          {"measurements", st.measured},
          {"upload_ms", per_measurement_ms(st, st.upload_s)},
          {"load_ms", per_measurement_ms(st, st.load_s)},
          {"cubin_loads", st.cubin_loads},
          {"run_ms", per_measurement_ms(st, st.run_s)}};
}

// The same as a line: "12.3 s: building 4.0 s, measuring 8.0 s (2.0 s of it beside builds; a
// measurement: upload 3 ms, module load 40 ms, timing 120 ms), search and database 2.3 s; 6.5
// candidates/s (the search 8.1/s, the re-timing 2.5 s)"; the load says "(cubins: 12 of 12)"
// where CUDA boards loaded machine code, the search "(and 1.9 s beside the measuring)" where it
// proposed ahead, the re-timing ", 3 configs dropped after a round" where it did.
std::string time_line(const TuneState& st) {
  char buf[560], cubins[64] = "", retime[140] = "", dropped[64] = "", ahead[64] = "";
  if (st.search_ahead_s > 0)
    std::snprintf(ahead, sizeof ahead, " (and %.1f s beside the measuring)", st.search_ahead_s);
  if (st.cubin_loads > 0) std::snprintf(cubins, sizeof cubins, " (cubins: %d of %d)", st.cubin_loads, st.measured);
  if (st.retime_dropped > 0)
    std::snprintf(dropped, sizeof dropped, ", %d configs dropped after a round", st.retime_dropped);
  if (st.retime_s > 0) {
    std::snprintf(retime, sizeof retime, " (the search %.2f/s, the re-timing %.1f s%s)",
                  search_candidates_per_s(st), st.retime_s, dropped);
  }
  std::snprintf(
      buf, sizeof buf,
      "%.1f s: building %.1f s, measuring %.1f s (%.1f s of it beside builds; a measurement: "
      "upload %.1f ms, module load %.1f ms%s, timing %.0f ms), search and database %.1f s%s; "
      "%.2f candidates/s%s",
      st.elapsed_s, st.build_s, st.measure_s, st.overlap_s, per_measurement_ms(st, st.upload_s),
      per_measurement_ms(st, st.load_s), cubins, per_measurement_ms(st, st.run_s), other_s(st),
      ahead, candidates_per_s(st), retime);
  return buf;
}

// Progress: a bar on a terminal, a line per batch otherwise (stderr), or JSON events (stdout).
class Progress : public MeasureCallback {
 public:
  Progress(const ConfigSpace& s, bool as_json) : space_(s), json_(as_json), tty_(isatty(2) != 0) {}

  void on_results(const TuneState& st, const std::vector<Trial>& trials) override {
    if (json_) {
      for (const Trial& t : trials) {
        if (t.same_code_as) {
          std::printf("%s\n", json{{"event", "same_code"}, {"config", t.config},
                                    {"same_code_as", space_.to_config(*t.same_code_as)}, {"compile_s", t.build.compile_s}}
                                   .dump()
                                   .c_str());
          continue;
        }
        json e = {{"event", t.lost() ? "board_lost" : t.retime ? "retime" : "trial"},
                  {"config", t.config},
                  {"error_code", error_code_name(t.result.error)},
                  {"board", t.result.board_id},
                  {"remeasure", t.remeasure},
                  {"cut", t.result.cut},
                  {"compile_s", t.build.compile_s},
                  {"upload_ms", 1e3 * t.result.upload_s},
                  {"load_ms", 1e3 * t.result.load_s},
                  {"run_ms", 1e3 * t.result.run_s}};
        if (t.result.ok()) {
          e["median_s"] = t.result.median_s();
          e["gflops"] = gflops(space_, t.result.median_s());
          e["number"] = t.result.number;
          e["warmup_calls"] = t.result.warmup_calls;
        } else {
          e["error_msg"] = t.result.error_msg;
        }
        std::printf("%s\n", e.dump().c_str());
      }
      std::printf("%s\n", json{{"event", "progress"}, {"phase", st.phase}, {"done", st.trials_done},
                               {"total", st.trials_total}, {"errors", st.errors},
                               {"best_s", std::isfinite(st.best_s) ? st.best_s : 0.0},
                               {"best_gflops", std::isfinite(st.best_s) ? gflops(space_, st.best_s) : 0.0},
                               {"elapsed_s", st.elapsed_s}}
                              .dump()
                              .c_str());
      std::fflush(stdout);
      return;
    }
    for (const Trial& t : trials) {
      if (t.lost()) std::fprintf(stderr, "%swarning: board %s lost (%s); its candidate goes to another board\n",
                                 tty_ ? "\r\033[K" : "", t.result.board_id.c_str(), t.result.error_msg.c_str());
    }
    char line[256];
    if (st.phase == "retime") {
      std::snprintf(line, sizeof line, "re-timing the best configs in fresh processes...");
    } else {
      double eta = st.trials_done > 0 ? st.elapsed_s / st.trials_done * (st.trials_total - st.trials_done) : 0;
      std::snprintf(line, sizeof line, "%d/%d trials  best %.1f GFLOPS  errors %d  elapsed %s  ETA %s",
                    st.trials_done, st.trials_total, std::isfinite(st.best_s) ? gflops(space_, st.best_s) : 0.0,
                    st.errors, duration(st.elapsed_s).c_str(), duration(eta).c_str());
    }
    if (tty_) {
      int width = 24, filled = st.trials_total > 0 ? width * st.trials_done / st.trials_total : 0;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(static_cast<size_t>(width), '.');
      std::fprintf(stderr, "\r\033[K[%s] %s", bar.c_str(), line);
    } else {
      std::fprintf(stderr, "%s\n", line);
    }
    std::fflush(stderr);
  }

  void end() {
    if (!json_ && tty_) std::fprintf(stderr, "\n");
  }

 private:
  const ConfigSpace& space_;
  bool json_, tty_;
};

void check_args(const TuneArgs& a) {
  const TuneOptions& o = a.tune;
  const SearchSettings& se = a.search;
  if (a.workload.empty() == a.model.empty()) {
    throw UserError(a.model.empty() ? "tune: give --workload SPEC or --model M.onnx"
                                    : "tune: give --workload or --model, not both");
  }
  if (a.local == !a.tracker.empty()) {
    throw UserError(a.local ? "--local and --tracker exclude each other: measure here or on the farm"
                            : "say where to measure: --local, or --tracker HOST:PORT --key KEY");
  }
  if (!a.tracker.empty() && a.farm.key.empty()) throw UserError("--tracker needs --key KEY (the kind of board)");
  if (o.trials < 1) throw UserError(str("--trials ", o.trials, " must be at least 1"));
  if (o.batch < 1) throw UserError(str("--batch ", o.batch, " must be at least 1"));
  if (a.farm.boards < 1) throw UserError(str("--boards ", a.farm.boards, " must be at least 1"));
  if (o.early_stop < 0) throw UserError(str("--early-stop ", o.early_stop, " must be 0 (never) or more"));
  check_measure_options(o.measure, "--retime-warmup-ms");
  if (o.retime_warmup_ms && !(*o.retime_warmup_ms >= 0 && *o.retime_warmup_ms <= 60000)) {
    throw UserError(str("--retime-warmup-ms ", *o.retime_warmup_ms, " is not in [0, 60000]"));
  }
  if (o.retime_top < 0 || o.retime_rounds < 0) throw UserError("--retime-top and --retime-rounds must be 0 or more");
  for (auto [name, v] : {std::pair<const char*, double>{"--time-budget", a.time_budget_min},
                         {"--max-spread", o.max_spread}, {"--slow-factor", o.slow_factor}}) {
    if (!std::isfinite(v) || v < 0) throw UserError(str(name, " ", v, " must be a finite number >= 0"));
  }
  // Factors that are off at 0.
  for (auto [name, v, off] : {std::tuple<const char*, double, const char*>{"--retime-drop", o.retime_drop,
                                                                            "time every round in full"},
                              {"--cut-factor", o.cut_factor, "never cut"}}) {
    if (!std::isfinite(v) || (v != 0 && v < 1))
      throw UserError(str(name, " ", v, " must be 0 (", off, ") or a finite number >= 1"));
  }
  if (!std::isfinite(a.build.timeout_s) || a.build.timeout_s <= 0) {
    throw UserError(str("--build-timeout-s ", a.build.timeout_s, " must be a positive number"));
  }
  bool known = false;
  for (const std::string& s : search_strategy_names()) known |= s == se.strategy;
  if (!known) throw UserError(str("--strategy ", se.strategy, ": not a search strategy (xgb, random, grid, ga)"));
  if (se.strategy != "xgb") {
    for (auto [flag, given] : {std::pair<const char*, bool>{"--load-model", !se.model.load_model.empty()},
                               {"--save-model", !a.save_model.empty()}, {"--no-transfer", !se.transfer}}) {
      if (given) throw UserError(str(flag, " needs --strategy xgb (the cost model); --strategy is ", se.strategy));
    }
  }
  const auto& objectives = costmodel::xgboost_objectives();
  if (std::find(objectives.begin(), objectives.end(), se.model.model.objective) == objectives.end()) {
    throw UserError(str("--objective ", se.model.model.objective, ": not one of rank:pairwise, reg:squarederror"));
  }
  if (!(se.model.epsilon >= 0 && se.model.epsilon <= 1)) {
    throw UserError(str("--epsilon ", se.model.epsilon, " must be between 0 and 1"));
  }
  if (a.transfer_until < 0) throw UserError(str("--transfer-until ", a.transfer_until, " must be 0 or more"));
  if (!a.save_model.empty()) {
    std::filesystem::path dir = std::filesystem::absolute(a.save_model).parent_path();
    if (!std::filesystem::is_directory(dir) || access(dir.c_str(), W_OK) != 0) {
      throw UserError(str("--save-model ", a.save_model, ": cannot write in ", dir.string()));
    }
  }
}

// Whether the command line asks for the sampling (--repeat or --min-repeat-ms): else the
// target's (tuner/tune.h sample_by_target).
bool sampling_given(const TuneArgs& a) {
  return a.cmd && (a.cmd->count("--repeat") > 0 || a.cmd->count("--min-repeat-ms") > 0);
}

// How a run times its candidates (o resolved by sample_by_target), for its first lines.
std::string sampling_line(const TuneOptions& o, const Target& t) {
  return str("measuring ", o.measure.repeat, " samples of at least ", o.measure.min_repeat_ms,
             " ms each; the re-timing warms up ", *o.retime_warmup_ms, " ms",
             t.is_gpu() ? " (GPU board defaults unless given: 3, 5 ms, 50 ms)" : "");
}

}  // namespace

void add_tune_command(CLI::App& app, TuneArgs& a) {
  CLI::App* t = app.add_subcommand("tune", "Search a workload's schedules on this machine (--local) or on farm boards, "
                                           "recording every measurement");
  a.cmd = t;
  TuneOptions& o = a.tune;
  SearchSettings& se = a.search;
  t->add_option("--workload,-w", a.workload, "workload spec, e.g. 'matmul(M=512,N=512,K=512)'");
  t->add_option("--model", a.model,
                "an ONNX model: tune every tunable task of it, as compile --model will compile it for the target, "
                "under one --trials budget that the task scheduler shares out by each task's share of the "
                "model's time (instead of --workload)");
  add_precision_option(t, a.precision);
  add_dim_options(t, a.dims);
  t->add_option("--target,-t", a.target, "target (default: this machine with --local, the boards' own with --tracker)");
  t->add_flag("--local", a.local, "measure on this machine, each kernel in an isolated process (no daemons)");
  t->add_option("--tracker", a.tracker, "measure on farm boards leased from this tracker, HOST:PORT");
  t->add_option("--key", a.farm.key, "kind of board to lease (with --tracker)");
  t->add_option("--token-file", a.token_file, "file whose first line is the farm's client token");
  t->add_option("--tls-ca", a.tls_ca, "PEM CA: use TLS and verify the servers");
  t->add_option("--tls-cert", a.tls_cert, "PEM client certificate (mutual TLS)");
  t->add_option("--tls-key", a.tls_key, "PEM key of --tls-cert");
  t->add_option("--tls-server-name", a.tls_server_name, "name the servers' certificates must carry");
  t->add_option("--boards", a.farm.boards, "boards to measure on at once (with --tracker)")->capture_default_str();
  t->add_option("--wait-ms", a.farm.wait_ms, "how long to wait for a free board")->capture_default_str();
  t->add_flag("--wait-for-boards", a.farm.wait_for_boards, "wait even for a key no board has registered yet");
  t->add_option("--user", a.user, "lease holder name (default: $USER)");
  t->add_option("--trials", o.trials, "new configs to measure")->capture_default_str();
  t->add_option("--strategy", se.strategy, "search strategy: xgb (cost model + simulated annealing), random, grid, ga")
      ->capture_default_str();
  t->add_option("--objective", se.model.model.objective, "xgb: cost model objective, rank:pairwise or reg:squarederror")
      ->capture_default_str();
  t->add_option("--epsilon", se.model.epsilon, "xgb: share of random configs in each batch")->capture_default_str();
  t->add_flag("!--no-transfer", se.transfer, "xgb: do not learn from the database's records of other workloads");
  t->add_option("--transfer-until", a.transfer_until,
                "xgb: correct results of this workload after which the other workloads' records leave the fit")
      ->capture_default_str();
  t->add_option("--load-model", se.model.load_model, "xgb: rank with this saved model until the first fit");
  t->add_option("--save-model", a.save_model, "xgb: save the cost model to this file at the end");
  t->add_option("--early-stop", o.early_stop, "stop after this many trials without a better config (0: never)")
      ->capture_default_str();
  t->add_option("--time-budget", a.time_budget_min, "stop after this many minutes (0: no limit)")->capture_default_str();
  t->add_option("--seed", se.seed, "seed of the search (the inputs' seed is fixed)")->capture_default_str();
  t->add_option("--batch", o.batch, "configs built and measured together")->capture_default_str();
  t->add_option("--workers", a.build.workers, "parallel compile processes (0: one per core)")->capture_default_str();
  t->add_option("--build-timeout-s", a.build.timeout_s, "time limit of one compile")->capture_default_str();
  add_measure_options(t, o.measure, kSampling);
  // GPU boards sample less unless asked (tuner/tune.h sample_by_target).
  t->get_option("--repeat")->description(
      "timed samples per measurement (GPU boards: 3 unless this or --min-repeat-ms is given)");
  t->get_option("--min-repeat-ms")->description(
      "minimum duration of one sample (GPU boards: 5 unless this or --repeat is given)");
  t->add_flag("--flush", o.measure.flush,
              "overwrite 64 MiB of memory before each sample (with --number 1 --min-repeat-ms 0: before each call), "
              "so that kernels read their data from memory, as in a model whose weights do not fit the caches");
  t->add_option("--max-spread", o.max_spread, "re-measure when (max - min) / median of the samples exceeds this")
      ->capture_default_str();
  t->add_option("--slow-factor", o.slow_factor, "stop a candidate whose call takes this many times the best so far "
                                               "(0: only the runner's time limit)")->capture_default_str();
  t->add_option("--cut-factor", o.cut_factor, "time a candidate whose warm-up is this many times slower than the best "
                                             "so far with one sample, not --repeat (0: never)")->capture_default_str();
  t->add_option("--retime-top", o.retime_top, "best configs re-timed at the end, with the default")->capture_default_str();
  t->add_option("--retime-rounds", o.retime_rounds, "interleaved rounds of the re-timing, each in fresh processes")
      ->capture_default_str();
  t->add_option("--retime-drop", o.retime_drop,
                "after a round of the re-timing, stop timing configs more than this many times "
                "slower than the default (0: never)")
      ->capture_default_str();
  t->add_flag(
      "!--no-search-ahead", o.search_ahead,
      "on GPU boards, propose the next batch only after a batch measured, not while it measures "
      "(docs/tuning.md, Pipelining)");
  t->add_option_function<double>(
      "--retime-warmup-ms", [&o](const double& ms) { o.retime_warmup_ms = ms; },
      "shortest warm-up of each re-timing (default: 300 on CPU boards, 50 on GPU boards; docs/tuning.md)");
  t->add_option("--db", a.db, "tuning database (default: $TUNEFARM_DB, else ~/.local/share/tunefarm/tuning.db)");
  t->add_flag("--no-db", a.no_db, "record nothing (and resume nothing)");
  t->add_flag("--json", a.json, "print one JSON event per line on stdout");
}

int run_tune_impl(const TuneArgs& a);

int run_tune(const TuneArgs& a) {
  try {
    return run_tune_impl(a);
  } catch (const farm::FarmError& e) {
    return farm_error_exit(e);
  } catch (const farm::ConfigError& e) {
    throw UserError(e.what());
  }
}

namespace {
Session open_tune_session(const TuneArgs& a, const char* lost_lead);
void stop_on_signals();
int run_tune_model(const TuneArgs& a);
}  // namespace

int run_tune_impl(const TuneArgs& a) {
  check_args(a);
  if (a.model.empty()) refuse_precision_without_model(a.precision);
  if (a.model.empty() && a.dims.given())
    throw UserError("--dim and --input-shape are for --model (a workload's sizes are in its spec)");
  if (!a.model.empty()) return run_tune_model(a);
  Workload w = parse_workload(a.workload);
  // The database first: a bad --db fails before any work.
  std::unique_ptr<db::Database> database = a.no_db ? nullptr : db::open_database(db::database_path(a.db));

  // Board losses print a line of their own after the progress bar's.
  Session session = open_tune_session(a, "\n");
  Runner* runner = session.runner.get();
  const Target& t = session.target;
  ConfigSpace space(w, t);
  SearchSettings search = a.search;
  search.model.transfer_until = static_cast<size_t>(a.transfer_until);
  Search found = make_search(space, database.get(), search);
  std::unique_ptr<SearchStrategy>& strategy = found.strategy;
  const std::string& transfer_note = found.transfer_note;
  LocalBuilder builder(a.build);
  const std::string assembly = builder.assembly_note(t);

  TuneOptions opts = a.tune;
  opts.sampling_by_target = !sampling_given(a);
  sample_by_target(opts, t);
  opts.time_budget_s = a.time_budget_min * 60;
  opts.run_uuid = database ? new_run_uuid() : "";

  Progress progress(space, a.json);
  CommitRecords commit(database.get(), space, runner->device_key(), opts.run_uuid, opts.measure);
  if (database) {
    const char* user = std::getenv("USER");
    database->begin_run(
        new_tuning_run(opts.run_uuid, user ? user : "", a.search.strategy, a.tune.trials, w.canonical(), t.str()));
  }
  if (a.json) {
    std::printf("%s\n", json{{"event", "start"}, {"workload", w.canonical()}, {"target", t.str()},
                             {"device", runner->device_key()}, {"template", space.template_id()},
                             {"space_size", space.size()}, {"strategy", a.search.strategy}, {"trials", a.tune.trials},
                             {"run", opts.run_uuid}, {"model", transfer_note}, {"assembly", assembly},
                             {"retime_warmup_ms", *opts.retime_warmup_ms},
                             {"repeat", opts.measure.repeat}, {"min_repeat_ms", opts.measure.min_repeat_ms}}
                            .dump()
                            .c_str());
  } else {
    std::fprintf(stderr, "tuning %s on %s (%s): %s, %llu points, strategy %s, %d trials\n", w.canonical().c_str(),
                 t.short_str().c_str(), runner->device_key().c_str(), space.template_id().c_str(),
                 static_cast<unsigned long long>(space.size()), a.search.strategy.c_str(), a.tune.trials);
    if (!transfer_note.empty()) std::fprintf(stderr, "%s\n", transfer_note.c_str());
    std::fprintf(stderr, "%s\n", sampling_line(opts, t).c_str());
    if (!assembly.empty()) std::fprintf(stderr, "%s\n", assembly.c_str());
  }

  stop_on_signals();

  TuneSummary sum;
  std::string status = "done";
  try {
    sum = tune(space, *strategy, builder, *runner, database.get(), opts, {&commit, &progress}, &g_stop);
  } catch (...) {
    progress.end();
    if (database) database->finish_run(opts.run_uuid, "failed", unix_now());
    throw;
  }
  progress.end();
  status = sum.interrupted ? "cancelled" : "done";
  json model_report;
  if (const auto* ms = dynamic_cast<const CostModelSearch*>(strategy.get())) {
    const SearchOverhead& o = ms->overhead();
    double share = sum.state.elapsed_s > 0 ? o.total_s() / sum.state.elapsed_s : 0;
    model_report = {{"fits", o.fits}, {"features_s", o.features_s}, {"fit_s", o.fit_s}, {"anneal_s", o.anneal_s},
                    {"points_scored", o.points_scored}, {"unlowerable", o.unlowerable}, {"share_of_run", share}};
    if (!a.json) {
      std::fprintf(stderr, "cost model: %d fits, %zu configs scored; features %.2f s, fitting %.2f s, annealing %.2f s "
                           "= %.1f%% of the run\n", o.fits, o.points_scored, o.features_s, o.fit_s, o.anneal_s,
                   100 * share);
      if (o.unlowerable > 0) {
        std::fprintf(stderr, "warning: %zu configs could not be lowered for the cost model (never proposed); "
                             "a compiler bug: please report the workload\n", o.unlowerable);
      }
    }
    if (!a.save_model.empty()) {
      ms->save_model(a.save_model);
      if (!a.json) std::fprintf(stderr, "cost model saved to %s\n", a.save_model.c_str());
    }
  }
  if (database) database->finish_run(opts.run_uuid, status, unix_now());

  const TuneState& st = sum.state;
  double speedup = sum.default_s > 0 && sum.best_s > 0 ? sum.default_s / sum.best_s : 0;
  if (a.json) {
    json retimed = json::array();
    for (const RetimeResult& r : sum.retimed) {
      retimed.push_back({{"config", r.config}, {"medians_s", r.medians_s}, {"median_of_medians_s", r.median_of_medians_s},
                         {"default", r.is_default}, {"ratio_to_default", r.ratio_to_default}});
    }
    std::printf("%s\n", json{{"event", "done"}, {"status", status}, {"stop_reason", stop_reason_name(sum.stop_reason)},
                             {"trials", st.trials_done}, {"errors", st.errors}, {"known", st.known},
                             {"same_code", st.same_code}, {"boards_lost", st.boards_lost},
                             {"best_config", sum.best_config}, {"best_s", sum.best_s},
                             {"best_gflops", gflops(space, sum.best_s)}, {"best_measurements", sum.best_measurements},
                             {"default_s", sum.default_s},
                             {"speedup_over_default", speedup}, {"retimed", retimed},
                             {"records", commit.committed()}, {"run", opts.run_uuid}, {"elapsed_s", st.elapsed_s},
                             {"time", time_report(st)}, {"model", model_report}}
                            .dump()
                            .c_str());
  } else {
    std::printf("workload  %s\ntarget    %s (%s)\ntrials    %d new (%d failed), %d known from earlier runs; stopped: %s\n",
                w.canonical().c_str(), t.short_str().c_str(), runner->device_key().c_str(), st.trials_done, st.errors,
                st.known, stop_reason_name(sum.stop_reason));
    if (st.same_code > 0) {
      std::printf("          %d of the new built to the code of a config measured before, not measured again\n",
                  st.same_code);
    }
    if (!sum.best_config.is_null()) {
      std::string how = sum.best_measurements > 0
                            ? str(" (median of its ", sum.best_measurements, " measurements, as compile will pick it)")
                            : "";
      std::printf("best      %.4f ms, %.1f GFLOPS%s\n          %s\n", sum.best_s * 1e3, gflops(space, sum.best_s),
                  how.c_str(), sum.best_config.dump().c_str());
    }
    if (sum.default_s > 0) {
      std::printf("default   %.4f ms, %.1f GFLOPS; speedup %.2fx\n", sum.default_s * 1e3, gflops(space, sum.default_s),
                  speedup);
    }
    std::printf("time      %s\n", time_line(st).c_str());
    if (database) {
      std::printf("recorded  %lld records in %s (run %s)\n", static_cast<long long>(commit.committed()),
                  db::database_path(a.db).c_str(), opts.run_uuid.c_str());
    }
  }
  if (sum.interrupted) {
    std::fprintf(stderr, "interrupted: what was measured is recorded; run the same command again to resume\n");
    return 130;
  }
  if (sum.best_config.is_null()) {
    std::fprintf(stderr, "error: no candidate of %s ran correctly (%d failed)\n", w.canonical().c_str(), st.errors);
    return 1;
  }
  return 0;
}

namespace {

std::string fmt_ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g ms", seconds * 1e3);
  return buf;
}

// Where `tune` measures, from its flags (the workload and the model flows alike): this machine
// or leased farm boards. A lost board is a `board_lost` event, or a warning line starting
// with `lost_lead`.
Session open_tune_session(const TuneArgs& a, const char* lost_lead) {
  MeasurePlace place{a.target, std::nullopt, "--target"};
  if (!a.local) {
    FarmRunnerOptions o = a.farm;
    o.farm = farm_endpoint(a.tracker, a.token_file, {a.tls_cert, a.tls_key, a.tls_ca, a.tls_server_name});
    const char* user = std::getenv("USER");
    o.user = !a.user.empty() ? a.user : user ? user : "tunefarm";
    place.farm = std::move(o);
  }
  std::string lead = lost_lead;
  return open_session(place, [] { return std::make_unique<LocalRunner>(); },
                      [json_events = a.json, lead](const std::string& id, const std::string& why) {
                        if (json_events) {
                          std::printf("%s\n", json{{"event", "board_lost"}, {"board", id}, {"reason", why}}.dump().c_str());
                        } else {
                          std::fprintf(stderr, "%swarning: board %s lost (%s); its candidate goes to another board\n",
                                       lead.c_str(), id.c_str(), why.c_str());
                        }
                      });
}

// Ctrl-C (and SIGTERM) end the run after the batch in flight; a second one kills at once.
void stop_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// tune --model: the model's tasks, each with its own search and tuning loop (as a workload's
// tune), under one trial budget the task scheduler shares out by weight (the number of nodes
// a task computes). At the end each task's best is re-timed, and the tasks' part of the
// model's time is estimated as sum(weight x best time), against the same with the defaults.
int run_tune_model(const TuneArgs& a) {
  std::unique_ptr<db::Database> database = a.no_db ? nullptr : db::open_database(db::database_path(a.db));
  Session session = open_tune_session(a, "");
  const Target& t = session.target;
  // Shape buckets (--dim batch=1,8,32): every bucket's tasks in one run, a workload that
  // several buckets share tuned once; the timed comparison at the end is bucket 0's.
  const std::vector<graph::InputBinding> bindings = a.dims.bindings();
  graph::Graph g = load_model_for_target(a.model, t, 2, {}, graph::parse_precision(a.precision), bindings[0]);
  print_warnings(g.import_warnings);
  std::vector<graph::TaskList> bucket_tasks{graph::extract_tasks(g, t)};
  for (size_t b = 1; b < bindings.size(); ++b) {
    bucket_tasks.push_back(graph::extract_tasks(
        load_model_for_target(a.model, t, 2, {}, graph::parse_precision(a.precision), bindings[b]), t));
  }
  graph::TaskList list = graph::merge_bucket_tasks(bucket_tasks);
  if (list.tasks.empty()) {
    throw UserError(str("model ", a.model, " has no tunable task for ", t.short_str(), " (", list.untunable.size(),
                        " anchors no workload expresses; `tunefarm import ", a.model, "` lists them)"));
  }
  LocalBuilder builder(a.build);
  const std::string assembly = builder.assembly_note(t);
  const int budget = a.tune.trials;
  std::vector<GroupTask> specs;
  std::vector<double> weights;
  for (const graph::Task& task : list.tasks) {
    specs.push_back({task.workload, static_cast<double>(task.nodes.size())});
    weights.push_back(specs.back().weight);
  }
  TaskGroupOptions go;
  go.search = a.search;
  go.search.model.transfer_until = static_cast<size_t>(a.transfer_until);
  go.tune = a.tune;
  go.tune.sampling_by_target = !sampling_given(a);
  go.time_budget_s = a.time_budget_min * 60;
  const char* user_env = std::getenv("USER");
  go.user = user_env ? user_env : "";

  // Progress: a line per batch (stderr) or JSON events (stdout), with the estimate of the
  // tasks' part of the model's time (a task and its alternatives, graph::Task, counted at the
  // fastest).
  struct Hooks : TaskGroupHooks {
    const TuneArgs& a;
    const graph::TaskList& list;
    const std::vector<double>& weights;
    const int budget;
    TaskGroup* group = nullptr;
    Hooks(const TuneArgs& a, const graph::TaskList& list, const std::vector<double>& weights, int budget)
        : a(a), list(list), weights(weights), budget(budget) {}
    void on_seed(size_t to, size_t from, const json& config) override {
      if (a.json) {
        std::printf("%s\n", json{{"event", "seed"}, {"task", to}, {"workload", group->task(to).workload},
                                 {"from", from}, {"config", config}}
                                .dump()
                                .c_str());
      } else {
        std::fprintf(stderr, "task %zu (%s) tries the new best of task %zu, its sibling\n", to,
                     group->task(to).workload.c_str(), from);
      }
    }
    void on_step(size_t i, int spent) override {
      std::vector<double> best;
      for (size_t k = 0; k < group->size(); ++k) best.push_back(group->state(k).best_s);
      const double est = graph::tasks_time(list, weights, best, true);
      const TuneState& st = group->state(i);
      if (a.json) {
        std::printf("%s\n", json{{"event", "progress"}, {"task", i}, {"workload", group->task(i).workload},
                                 {"trials", spent}, {"total", budget}, {"task_trials", st.trials_done},
                                 {"task_best_s", std::isfinite(st.best_s) ? st.best_s : 0.0},
                                 {"estimate_s", std::isfinite(est) ? est : 0.0}}
                                .dump()
                                .c_str());
        std::fflush(stdout);
      } else {
        std::fprintf(stderr, "%d/%d trials  task %zu (%s)  best %.4g ms  tasks' estimate %s\n", spent, budget, i,
                     group->task(i).workload.c_str(), std::isfinite(st.best_s) ? st.best_s * 1e3 : 0.0,
                     std::isfinite(est) ? fmt_ms(est).c_str() : "(a task has no correct result yet)");
      }
    }
  } hooks(a, list, weights, budget);
  TaskGroup group(std::move(specs), t, builder, *session.runner, database.get(), go, hooks, &g_stop);
  hooks.group = &group;
  TuneOptions sampled = go.tune;  // as each task's run measures (TaskGroup)
  sample_by_target(sampled, t);
  if (a.json) {
    json ts = json::array();
    for (size_t i = 0; i < group.size(); ++i) {
      ts.push_back({{"workload", group.task(i).workload}, {"weight", group.task(i).weight},
                    {"template", group.space(i).template_id()}});
    }
    std::printf("%s\n", json{{"event", "start"}, {"model", a.model}, {"target", t.str()},
                             {"device", session.runner->device_key()}, {"tasks", ts},
                             {"untunable", list.untunable.size()}, {"trials", budget}, {"assembly", assembly},
                             {"retime_warmup_ms", *sampled.retime_warmup_ms},
                             {"repeat", sampled.measure.repeat}, {"min_repeat_ms", sampled.measure.min_repeat_ms}}
                            .dump()
                            .c_str());
  } else {
    std::fprintf(stderr, "tuning %s on %s (%s): %zu tasks (%zu anchors untunable), %d trials in all\n", a.model.c_str(),
                 t.short_str().c_str(), session.runner->device_key().c_str(), group.size(), list.untunable.size(),
                 budget);
    std::fprintf(stderr, "%s\n", sampling_line(sampled, t).c_str());
    if (!assembly.empty()) std::fprintf(stderr, "%s\n", assembly.c_str());
  }

  stop_on_signals();
  const auto run_start = std::chrono::steady_clock::now();
  const StopReason stopped = group.run();
  const std::string reason = stop_reason_name(stopped);
  // Where the group's time went: its tasks' building and measuring, over its wall time.
  TuneState total;
  total.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  for (size_t i = 0; i < group.size(); ++i) {
    const TuneState& st = group.summary(i).state;
    total.trials_done += st.trials_done;
    total.same_code += st.same_code;
    total.build_s += st.build_s;
    total.measure_s += st.measure_s;
    total.overlap_s += st.overlap_s;
    total.retime_s += st.retime_s;
    total.retime_dropped += st.retime_dropped;
    total.search_ahead_s += st.search_ahead_s;
    total.measured += st.measured;
    total.upload_s += st.upload_s;
    total.load_s += st.load_s;
    total.run_s += st.run_s;
    total.cubin_loads += st.cubin_loads;
  }
  // The tasks' best and default times (re-timed medians), weighted by their counts; the
  // default build compiles the alternative (Winograd) task where there is one.
  std::vector<double> bests, defaults;
  for (size_t i = 0; i < group.size(); ++i) {
    bests.push_back(group.summary(i).best_s);
    defaults.push_back(group.summary(i).default_s);
  }
  const double tuned = graph::tasks_time(list, weights, bests, true);
  const double deflt = graph::tasks_time(list, weights, defaults, false);
  const bool all_tuned = std::isfinite(tuned), all_default = std::isfinite(deflt);
  json rows = json::array();
  for (size_t i = 0; i < group.size(); ++i) {
    const TuneSummary& sum = group.summary(i);
    rows.push_back({{"workload", group.task(i).workload}, {"weight", group.task(i).weight},
                    {"alternative_to", list.tasks[i].alternative_to}, {"trials", sum.state.trials_done},
                    {"errors", sum.state.errors}, {"best_s", sum.best_s}, {"default_s", sum.default_s},
                    {"best_gflops", gflops(group.space(i), sum.best_s)}, {"best_config", sum.best_config},
                    {"stop_reason", stop_reason_name(sum.stop_reason)}});
  }
  const bool interrupted = stopped == StopReason::Interrupted;
  // What it bought the model: both builds timed where the tasks were (this machine, or a board
  // of the key), interleaved.
  std::optional<ModelComparison> mc;
  std::string not_timed;  // why the model was not timed
  if (!database) {
    not_timed = "--no-db keeps no tuned configs to compile it with";
  } else if (interrupted) {
    not_timed = "interrupted";
  } else if (!all_tuned) {
    not_timed = "a task has no correct result";
  } else {
    mc = compare_tuned_and_default(g, t, database.get(), a.model, *session.runner);
    if (!mc->error.empty()) {
      not_timed = mc->error;
      mc.reset();
    }
  }
  // The model's estimate: the tasks' tuned times plus the rest of the model (untunable
  // kernels, the pool's joins), which is the default build's measured time less its tasks'.
  // When the default build ran faster than its tasks timed alone (BERT: 23.3 against 24.2
  // ms; ResNet-18 with Winograd tasks 12.2 against 14.9), the rest counts as nothing: the
  // tasks' tuned times alone. Scaling the default build's time by the tasks' speedup instead
  // had measured 1.06x (BERT) and 1.20x (ResNet-18) of its estimate, this 1.02x and 0.99x.
  double model_estimate = 0;
  if (mc && all_tuned && all_default && deflt > 0) model_estimate = tuned + std::max(0.0, mc->default_s - deflt);
  if (mc && database) {
    std::ifstream f(a.model, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) {
      std::fprintf(stderr, "warning: cannot read %s again to hash it; the model's result is not stored\n",
                   a.model.c_str());
    } else {
      database->add_model_result(
          model_result(*mc, a.model, sha256_hex(bytes), t, session.runner->device_key(), model_estimate));
    }
  }
  if (a.json) {
    std::printf("%s\n", json{{"event", "done"}, {"status", interrupted ? "cancelled" : "done"},
                             {"stop_reason", reason}, {"tasks", rows}, {"same_code", total.same_code},
                             {"model_estimate_s", model_estimate},
                             {"estimate_s", all_tuned ? tuned : 0.0}, {"default_estimate_s", all_default ? deflt : 0.0},
                             {"speedup_over_default", all_tuned && all_default && tuned > 0 ? deflt / tuned : 0.0},
                             {"time", time_report(total)},
                             {"model", mc ? to_json(*mc) : json{{"not_timed", not_timed}}}}
                            .dump()
                            .c_str());
  } else {
    std::printf("model     %s\ntarget    %s (%s)\nstopped   %s\n", a.model.c_str(), t.short_str().c_str(),
                session.runner->device_key().c_str(), reason.c_str());
    // GFLOPS: the task's own arithmetic over its best time (a Winograd task counts what it
    // computes, fewer FLOPs than the direct task it replaces).
    std::printf("%-70s %6s %7s %11s %11s %8s %8s\n", "task", "count", "trials", "best ms", "default ms", "speedup",
                "GFLOPS");
    for (size_t i = 0; i < group.size(); ++i) {
      const TuneSummary& sum = group.summary(i);
      char speedup[32] = "-", rate[32] = "-";
      if (sum.best_s > 0 && sum.default_s > 0) std::snprintf(speedup, sizeof speedup, "%.2f", sum.default_s / sum.best_s);
      if (sum.best_s > 0 && std::isfinite(sum.best_s)) std::snprintf(rate, sizeof rate, "%.1f", gflops(group.space(i), sum.best_s));
      std::printf("%-70s %6.0f %7d %11.4g %11.4g %8s %8s\n", group.task(i).workload.c_str(), group.task(i).weight,
                  sum.state.trials_done, sum.best_s * 1e3, sum.default_s * 1e3, speedup, rate);
    }
    std::printf("time      %s\n", time_line(total).c_str());
    if (total.same_code > 0) {
      std::printf("          %d of the trials built to the code of a config measured before, not measured again\n",
                  total.same_code);
    }
    if (all_tuned && all_default) {
      std::printf("tasks     %s tuned, %s with default schedules (%.2fx), summed by count; the rest of the model "
                  "(untunable kernels, joins) is not in it\n", fmt_ms(tuned).c_str(), fmt_ms(deflt).c_str(), deflt / tuned);
    } else {
      std::printf("tasks     no estimate: %s\n", all_tuned ? "a default config did not run" : "a task has no correct result");
    }
    if (mc) {
      std::printf("model     %s tuned (%d of %d kernels), %s with default schedules: %.2fx (on %s: medians of %d "
                  "interleaved samples of %d calls each)\n", fmt_ms(mc->tuned_s).c_str(), mc->tuned, mc->tunable,
                  fmt_ms(mc->default_s).c_str(), mc->speedup, mc->board.c_str(), mc->rounds, mc->calls);
      if (model_estimate > 0 && mc->default_s >= deflt) {
        std::printf("estimate  %s: the tasks' tuned times and the rest of the model as the default build ran it (%s); "
                    "measured %.2fx of it\n", fmt_ms(model_estimate).c_str(), fmt_ms(mc->default_s - deflt).c_str(),
                    mc->tuned_s / model_estimate);
      } else if (model_estimate > 0) {
        std::printf("estimate  %s: the tasks' tuned times (the default build ran faster than its tasks timed alone); "
                    "measured %.2fx of it\n", fmt_ms(model_estimate).c_str(), mc->tuned_s / model_estimate);
      }
    } else {
      std::printf("model     not timed: %s\n", not_timed.c_str());
    }
  }
  if (interrupted) return 130;
  return all_tuned ? 0 : 1;
}

}  // namespace

}  // namespace tf::cli
