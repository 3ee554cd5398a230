#include "cli/service_command.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/json_limits.h"
#include "cli/common.h"
#include "cli/model_command.h"
#include "graph/tasks.h"
#include "service/queries.h"
#include "tuner/farm_client.h"

namespace tf::cli {

namespace pb = tunefarm::v1;
using json = nlohmann::json;

namespace {

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", s * 1e3);
  return buf;
}

std::string best_of(const pb::JobInfo& j) {
  if (j.tasks_size() == 1) {
    const pb::TaskInfo& t = j.tasks(0);
    if (t.best_s() <= 0) return "-";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s ms (%.1f GFLOPS)", ms(t.best_s()).c_str(), t.best_gflops());
    return buf;
  }
  return j.weighted_best_s() > 0 ? ms(j.weighted_best_s()) + " ms weighted" : "-";
}

bool over(const pb::JobInfo& j) { return j.state() == "done" || j.state() == "failed" || j.state() == "cancelled"; }

void print_tasks(const pb::JobInfo& j) {
  std::printf("job %lld (%s): %s%s%s\n", static_cast<long long>(j.id()), j.user().c_str(), j.state().c_str(),
              j.reason().empty() ? "" : ": ", j.reason().c_str());
  std::printf("target %s, %s, %d/%d trials, %d failed%s\n", j.target().empty() ? "-" : j.target().c_str(),
              j.key() == "local" ? "the service's local boards" : ("boards of key " + j.key()).c_str(),
              j.trials_done(), j.trials_total(), j.errors(),
              j.restarts() > 0 ? (", resumed " + std::to_string(j.restarts()) + " times").c_str() : "");
  for (const pb::TaskInfo& t : j.tasks()) {
    char best[96] = "no result", speedup[48] = "";
    if (t.best_s() > 0) std::snprintf(best, sizeof best, "%s ms, %.1f GFLOPS", ms(t.best_s()).c_str(), t.best_gflops());
    if (t.default_s() > 0 && t.best_s() > 0) std::snprintf(speedup, sizeof speedup, ", %.2fx the default", t.default_s() / t.best_s());
    std::printf("  %-44s x%-4g %4d trials  %s%s%s\n", t.workload().c_str(), t.weight(), t.trials(), best, speedup,
                t.stop_reason().empty() ? "" : (" (" + t.stop_reason() + ")").c_str());
  }
  if (j.weighted_best_s() > 0 && j.tasks_size() > 1) {
    std::printf("weighted total %s ms (sum of weight x best)\n", ms(j.weighted_best_s()).c_str());
  }
  // Where its time went, over its tasks (docs/service.md).
  double build = 0, measure = 0, upload = 0, load = 0, run = 0;
  int measurements = 0, cubins = 0, same_code = 0;
  for (const pb::TaskInfo& t : j.tasks()) {
    cubins += t.cubin_loads();
    same_code += t.same_code();
    build += t.build_s();
    measure += t.measure_s();
    measurements += t.measurements();
    upload += t.upload_s();
    load += t.load_s();
    run += t.timing_s();
  }
  if (measurements > 0) {
    const double per = 1e3 / measurements;
    char cubin_note[64] = "";
    if (cubins > 0) std::snprintf(cubin_note, sizeof cubin_note, " (cubins: %d)", cubins);
    std::printf("time      building %.1f s, measuring %.1f s (%d measurements; one: upload %.1f ms, module load %.1f ms%s, "
                "timing %.0f ms)\n",
                build, measure, measurements, upload * per, load * per, cubin_note, run * per);
    if (same_code > 0)
      std::printf(
          "          %d trials built to the code of a config measured before, not measured again\n",
          same_code);
  }
  if (j.has_model_timing()) {
    const pb::ModelTiming& m = j.model_timing();
    if (!m.not_timed().empty()) {
      std::printf("model     not timed: %s\n", m.not_timed().c_str());
    } else {
      std::printf("model     %s ms tuned (%d of %d kernels), %s ms with default schedules: %.2fx (on %s, interleaved)\n",
                  ms(m.tuned_s()).c_str(), m.tuned_kernels(), m.tunable_kernels(), ms(m.default_s()).c_str(),
                  m.speedup(), m.board().c_str());
    }
  }
}

// submit --model M.onnx without -w: the job is the model's tasks. With -w, --model only names
// the model the workloads come from.
bool tunes_model(const ServiceArgs& a) { return !a.model.empty() && a.workloads.empty(); }

json job_from_flags(const ServiceArgs& a) {
  json j = json::object();
  if (!a.job_file.empty()) {
    std::ifstream f(a.job_file);
    if (!f) throw UserError(str("cannot read job file ", a.job_file));
    std::stringstream ss;
    ss << f.rdbuf();
    try {
      j = parse_json_bounded(ss.str());
    } catch (const json::parse_error& e) {
      throw UserError(str("job file ", a.job_file, " is not valid JSON: ", e.what()));
    } catch (const JsonRefused& e) {
      throw UserError(str("job file ", a.job_file, " is refused: ", e.what()));
    }
    if (!j.is_object()) throw UserError(str("job file ", a.job_file, " must hold a JSON object"));
    if (!a.workloads.empty()) throw UserError("give the workloads in the job file or with -w, not both");
  } else if (a.workloads.empty() && !tunes_model(a)) {
    throw UserError("say what to tune: -w WORKLOAD (repeatable), --model M.onnx or a JOB.json file");
  }
  if (!a.weights.empty() && a.weights.size() != a.workloads.size()) {
    throw UserError(str("--weight given ", a.weights.size(), " times for ", a.workloads.size(),
                        " workloads: give one per -w, in order"));
  }
  if (a.dims.given() && a.model.empty())
    throw UserError("--dim and --input-shape are for --model (a workload's sizes are in its spec)");
  if (tunes_model(a)) {
    // The model's tasks, extracted here for the target they will compile for (the job's), as
    // compile --model will compile it: workloads weighted by how many nodes each computes.
    if (!a.job_file.empty()) throw UserError("give the workloads in the job file or with --model, not both");
    Target t = a.target.empty() ? host_target() : parse_target(a.target);
    graph::TaskList list = graph::extract_tasks(load_model_for_target(
        a.model, t, 2, {}, graph::parse_precision(a.precision), a.dims.binding()), t);
    if (list.tasks.empty()) {
      throw UserError(str("model ", a.model, " has no tunable task for ", t.short_str(), " (`tunefarm import ", a.model,
                          "` lists its nodes)"));
    }
    json ws = json::array();
    for (const graph::Task& task : list.tasks) {
      ws.push_back({{"workload", task.workload}, {"weight", static_cast<double>(task.nodes.size())}});
    }
    j["workloads"] = ws;
    j["target"] = t.str();
  }
  if (!a.workloads.empty()) {
    json ws = json::array();
    for (size_t i = 0; i < a.workloads.size(); ++i) {
      json w = {{"workload", a.workloads[i]}};
      if (!a.weights.empty()) w["weight"] = a.weights[i];
      ws.push_back(w);
    }
    j["workloads"] = ws;
  }
  // Flags given on the command line override the file's fields.
  auto given = [&](const char* name) { return a.submit->get_option(name)->count() > 0; };
  if (given("--key")) j["key"] = a.key;
  if (given("--target")) j["target"] = a.target;
  if (given("--trials")) j["trials"] = a.trials;
  if (given("--strategy")) j["strategy"] = a.strategy;
  if (given("--priority")) j["priority"] = a.priority;
  if (given("--early-stop")) j["early_stop"] = a.early_stop;
  if (given("--model")) j["model"] = a.model;
  if (given("--precision")) j["precision"] = a.precision;
  if (a.dims.given()) {
    const graph::InputBinding b = a.dims.binding();
    j["dims"] = b.dims;
    j["input_shapes"] = b.shapes;
  }
  if (given("--batch")) j["batch"] = a.batch;
  if (given("--boards")) j["boards"] = a.boards;
  return j;
}

// Follows a job to its end; returns the exit status.
int watch_job(ServiceClient& c, int64_t id, bool as_json) {
  bool tty = isatty(2) != 0;
  pb::JobInfo last;
  std::string shown;
  c.watch(id, [&](const pb::JobEvent& e) {
    last = e.job();
    const pb::JobInfo& j = e.job();
    if (as_json) {
      std::printf("%s\n", queries::proto_json(e).c_str());
      std::fflush(stdout);
      return true;
    }
    if (e.kind() == "board_lost" || (!e.message().empty() && e.kind() != "progress")) {
      std::fprintf(stderr, "%s%s\n", tty ? "\r\033[K" : "", e.message().c_str());
    }
    std::string line = str("job ", j.id(), " ", j.state(), "  ", j.trials_done(), "/", j.trials_total(), " trials  best ",
                           best_of(j), "  errors ", j.errors());
    if (!e.workload().empty()) line += "  last: " + e.workload();
    if (line == shown) return true;  // nothing new to say (a state event between batches)
    shown = line;
    if (tty) {
      int width = 24, filled = j.trials_total() > 0 ? width * std::min(j.trials_done(), j.trials_total()) / j.trials_total() : 0;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(static_cast<size_t>(width), '.');
      std::fprintf(stderr, "\r\033[K[%s] %s", bar.c_str(), line.c_str());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
    return true;
  });
  if (!as_json) {
    if (tty) std::fprintf(stderr, "\n");
    print_tasks(last);
  }
  if (last.state() == "done") return 0;
  if (!over(last)) {
    std::fprintf(stderr, "error: the service stopped before job %lld ended (it resumes when the service starts again)\n",
                 static_cast<long long>(id));
    return 1;
  }
  std::fprintf(stderr, "job %lld %s%s%s\n", static_cast<long long>(id), last.state().c_str(),
               last.reason().empty() ? "" : ": ", last.reason().c_str());
  return 1;
}

}  // namespace

void add_service_commands(CLI::App& app, ServiceArgs& a) {
  CLI::App* s = app.add_subcommand("submit", "Submit a tuning job to the tuning service (tunefarm-tuner); prints its id");
  a.submit = s;
  add_server_options(s, a.server, false);
  s->add_option("job", a.job_file, "job file (JSON, docs/service.md); or give -w");
  s->add_option("--workload,-w", a.workloads, "workload spec (repeatable: one job tunes them all)");
  s->add_option("--weight", a.weights, "how often each -w occurs in the model, in -w order (default 1)");
  s->add_option("--key", a.key, "measure on farm boards of this key (default: the service's local boards)");
  s->add_option("--target,-t", a.target, "target to compile for (default: the boards' own)");
  s->add_option("--trials", a.trials, "new configs to measure, over all workloads")->capture_default_str();
  s->add_option("--strategy", a.strategy, "search strategy: xgb, random, grid, ga")->capture_default_str();
  s->add_option("--priority", a.priority, "higher runs first (-1000..1000)")->capture_default_str();
  s->add_option("--early-stop", a.early_stop, "stop a workload after this many trials without a better config (0: never)")
      ->capture_default_str();
  s->add_option("--model", a.model,
                "an ONNX model: without -w, tune its tasks (extracted here for --target, default this machine's, "
                "as compile --model will compile it; weights: how many nodes each computes); with -w, only the "
                "name of the model the workloads come from (shown in `tunefarm jobs`)");
  add_precision_option(s, a.precision);
  add_dim_options(s, a.dims);
  s->add_option("--batch", a.batch, "configs built and measured together")->capture_default_str();
  s->add_option("--boards", a.boards, "farm boards to lease at once (with --key)")->capture_default_str();
  s->add_flag("--watch", a.watch, "follow the job after submitting it (as `tunefarm watch`)");
  s->add_flag("--json", a.json, "print JSON");
  s->callback([&a] { a.sub = "submit"; });

  CLI::App* j = app.add_subcommand("jobs", "List the tuning service's jobs: user, state, progress, best so far");
  add_server_options(j, a.server, false);
  j->add_flag("--json", a.json, "print JSON");
  j->callback([&a] { a.sub = "jobs"; });

  CLI::App* w = app.add_subcommand("watch", "Follow a job until it ends: a progress bar, lines when not a terminal, "
                                            "or --json events");
  add_server_options(w, a.server, false);
  w->add_option("id", a.id, "job id")->required();
  w->add_flag("--json", a.json, "print one JSON event per line");
  w->callback([&a] { a.sub = "watch"; });

  CLI::App* c = app.add_subcommand("cancel", "Cancel a job (yours, or any with an admin token); what it measured stays");
  add_server_options(c, a.server, false);
  c->add_option("id", a.id, "job id")->required();
  c->add_flag("--json", a.json, "print JSON");
  c->callback([&a] { a.sub = "cancel"; });
}

int run_service_command(const ServiceArgs& a) {
  try {
    json job;
    if (a.sub == "submit") job = job_from_flags(a);  // bad input fails before any connection
    ServiceClient c(service_endpoint(a.server));
    if (a.sub == "submit") {
      // A model's own tasks: the model goes with them, to be timed when the job is done.
      std::string model_onnx;
      if (tunes_model(a)) {
        std::ifstream f(a.model, std::ios::binary);
        std::stringstream ss;
        ss << f.rdbuf();
        if (!f) throw UserError(str("cannot read model ", a.model, " again to send it"));
        model_onnx = ss.str();
      }
      pb::SubmitReply r = c.submit(job.dump(), model_onnx);
      if (a.json && !a.watch) {
        std::printf("%s\n", queries::proto_json(r).c_str());
      } else if (!a.json) {
        std::printf("%lld\n", static_cast<long long>(r.job_id()));
        std::fflush(stdout);
        std::fprintf(stderr, "job %lld queued for %s; follow it with: tunefarm watch %lld\n",
                     static_cast<long long>(r.job_id()), r.user().c_str(), static_cast<long long>(r.job_id()));
      }
      return a.watch ? watch_job(c, r.job_id(), a.json) : 0;
    }
    if (a.sub == "jobs") {
      std::vector<pb::JobInfo> jobs = c.list();
      if (a.json) {
        pb::ListJobsReply all;
        for (const pb::JobInfo& i : jobs) *all.add_jobs() = i;
        std::printf("%s\n", queries::proto_json(all).c_str());
        return 0;
      }
      std::printf("%-5s %-12s %-10s %-12s %-9s %-30s %s\n", "id", "user", "state", "trials", "workloads", "best so far",
                  "submitted (UTC)");
      for (const pb::JobInfo& i : jobs) {
        std::printf("%-5lld %-12s %-10s %-12s %-9d %-30s %s\n", static_cast<long long>(i.id()), i.user().c_str(),
                    i.state().c_str(), str(i.trials_done(), "/", i.trials_total()).c_str(), i.tasks_size(),
                    best_of(i).c_str(), utc_time(i.submitted_at()).c_str());
      }
      if (jobs.empty()) std::printf("(no jobs)\n");
      return 0;
    }
    if (a.sub == "watch") return watch_job(c, a.id, a.json);
    pb::JobInfo i = c.cancel(a.id);
    if (a.json) std::printf("%s\n", queries::proto_json(i).c_str());
    else std::printf("job %lld: %s\n", static_cast<long long>(i.id()),
                     i.state() == "cancelled" ? "cancelled" : "cancelling (after the measurements in flight)");
    return 0;
  } catch (const farm::FarmError& e) {
    return farm_error_exit(e);
  }
}

}  // namespace tf::cli
