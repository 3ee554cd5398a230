#include "cli/farm_command.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "base/error.h"
#include "compiler/operators.h"
#include "compiler/reference.h"
#include "db/database.h"
#include "base/json_limits.h"
#include "compiler/driver.h"
#include "runtime/gpu_runtime.h"
#include "runtime/kernel_library.h"
#include "tuner/farm_client.h"
#include "tuner/farm_runner.h"
#include "tuner/measure.h"
#include "tuner/tuning_records.h"

namespace tf::cli {
namespace {

using json = nlohmann::json;
namespace pb = tunefarm::v1;

farm::FarmEndpoint endpoint(const FarmArgs& a) {
  return farm_endpoint(a.tracker, a.token_file, {a.tls_cert, a.tls_key, a.tls_ca, a.tls_server_name});
}

std::string read_named_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UserError(std::string(what) + " " + path + " is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError(std::string("cannot read ") + what + " " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A kernel library's sidecar (compiler/driver.h), checked against its own workload: the
// arguments must be exactly the workload's, or the reference check would read past the
// buffers the board filled.
struct Sidecar {
  Workload workload;
  OpGraph graph;  // of `workload`: shapes, FLOPs, the reference
  std::string function, target, template_name;
  json args, config;
  json meta;  // the whole description (a GPU kernel's "launch")
  double flops = 0;
};

Sidecar read_sidecar(const std::string& module) {
  std::string path = module + ".json";
  std::string text = read_named_file(path, "kernel description");
  json meta;
  try {
    meta = parse_json_bounded(text);
  } catch (const json::parse_error& e) {
    throw UserError("kernel description " + path + " is not valid JSON: " + e.what());
  } catch (const JsonRefused& e) {
    throw UserError("kernel description " + path + ": " + e.what());
  }
  auto bad = [&](const std::string& why) {
    return UserError("kernel description " + path + ": " + why + " (not written by tunefarm compile?)");
  };
  if (!meta.is_object()) throw bad("not a JSON object");
  auto string_field = [&](const char* name, bool required) -> std::string {
    if (!meta.contains(name)) {
      if (required) throw bad(std::string("no \"") + name + "\" field");
      return "";
    }
    if (!meta[name].is_string()) throw bad(std::string("\"") + name + "\" is " + meta[name].type_name() + ", not a string");
    return meta[name].get<std::string>();
  };
  Sidecar s;
  try {
    s.workload = parse_workload(string_field("workload", true));
  } catch (const UserError& e) {
    throw bad(e.what());
  }
  s.function = string_field("function", true);
  s.target = string_field("target", false);
  s.template_name = string_field("template", false);
  if (s.template_name.empty()) s.template_name = "unknown";
  if (!meta.contains("args") || !meta["args"].is_array()) throw bad("\"args\" is missing or not an array");
  s.args = meta["args"];
  s.graph = build_op(s.workload);
  json expected = describe_args(s.graph);
  if (s.args != expected) {
    throw bad("its args " + s.args.dump() + " are not those of its workload " + s.workload.canonical() + ": " +
              expected.dump());
  }
  if (meta.contains("flops") && !meta["flops"].is_number()) throw bad("\"flops\" is not a number");
  s.flops = static_cast<double>(s.graph.flops);
  s.meta = meta;
  s.config = meta.contains("config") && meta["config"].is_object() ? meta["config"] : json::object();
  return s;
}

int farm_status(const FarmArgs& a) {
  farm::FarmClient client(endpoint(a));
  pb::SummaryReply s = client.summary();
  if (a.json) {
    json keys = json::array(), boards = json::array();
    for (const auto& k : s.keys()) {
      keys.push_back({{"key", k.key()}, {"total", k.total()}, {"free", k.free()}, {"leased", k.leased()}, {"pending", k.pending()}});
    }
    for (const auto& b : s.boards()) {
      boards.push_back({{"board_id", b.board_id()}, {"address", b.address()}, {"key", b.key()}, {"target", b.target()},
                        {"state", b.state()}, {"lease_holder", b.lease_holder()}, {"cpu_model", b.device().cpu_model()},
                        {"cores", b.device().cores()}, {"memory_bytes", b.device().memory_bytes()},
                        {"last_heartbeat_ms_ago", b.last_heartbeat_ms_ago()}});
    }
    std::printf("%s\n", json{{"keys", keys}, {"boards", boards}}.dump(2).c_str());
    return 0;
  }
  std::printf("%-16s %6s %6s %7s %8s\n", "key", "total", "free", "leased", "pending");
  for (const auto& k : s.keys()) {
    std::printf("%-16s %6d %6d %7d %8d\n", k.key().c_str(), k.total(), k.free(), k.leased(), k.pending());
  }
  std::printf("\n%-20s %-22s %-14s %-7s %-10s %s\n", "board", "address", "key", "state", "holder", "target");
  for (const auto& b : s.boards()) {
    std::printf("%-20s %-22s %-14s %-7s %-10s %s\n", b.board_id().c_str(), b.address().c_str(), b.key().c_str(),
                b.state().c_str(), b.lease_holder().empty() ? "-" : b.lease_holder().c_str(), b.target().c_str());
  }
  if (s.boards().empty()) std::printf("(no boards registered)\n");
  return 0;
}

// Leases a board of --key and runs `measure` on it. A board that does not answer is
// reported, `on_lost` told (with the board's target), and another board of the key tried, up
// to --retries times. `cpu` gets the board's CPU.
RunResult on_a_board(const FarmArgs& a, farm::FarmClient& client, const std::string& user, std::string& cpu,
                     const std::function<RunResult(farm::LeasedBoard&)>& measure,
                     const std::function<void(const RunResult&, const std::string&)>& on_lost) {
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<farm::LeasedBoard> board = client.lease(a.key, user, a.priority, a.wait_ms, 0, a.wait_for_boards);
    cpu = board->lease().device().cpu_model();
    RunResult r;
    try {
      r = measure(*board);
    } catch (const farm::FarmError& e) {
      if (!e.board_lost()) throw;
      board->report_lost(e.what());
      RunResult lost;
      lost.error = tunefarm::v1::BOARD_LOST;
      lost.error_msg = e.what();
      lost.device_model = cpu;
      std::fprintf(stderr, "warning: board %s at %s lost (%s)%s\n", board->lease().board_id().c_str(),
                   board->lease().address().c_str(), e.what(), attempt < a.retries ? "; trying another board" : "");
      on_lost(lost, board->lease().target());
      if (attempt < a.retries) continue;
      throw farm::FarmError("no board of key '" + a.key + "' answered after " + std::to_string(attempt + 1) + " attempt(s)",
                            grpc::StatusCode::UNAVAILABLE);
    }
    // The result stands even when the lease cannot be given back (the tracker restarted).
    if (!board->release()) {
      std::fprintf(stderr, "warning: could not release the lease on %s; it expires by itself\n", r.board_id.c_str());
    }
    return r;
  }
}

std::string lease_user(const FarmArgs& a) {
  const char* user_env = std::getenv("USER");
  return a.user.empty() ? (user_env ? user_env : "tunefarm") : a.user;
}

// farm measure's lines of a baseline timed alongside `what` (the kernel, the model).
void print_baseline(const FarmArgs& a, const RunResult& r, const char* what) {
  std::printf("baseline  %s: %.6f ms, interleaved with the %s's samples\nspeedup   %.3fx over the baseline "
              "(median of the sample pairs' ratios)\n",
              a.baseline.c_str(), r.baseline_median_s() * 1e3, what, r.speedup());
}

// And its part of the JSON, the baseline named as `key` says.
void add_baseline_json(json& out, const FarmArgs& a, const RunResult& r, const char* key) {
  out["baseline"] = {{key, a.baseline}, {"samples_s", r.baseline_samples_s}, {"median_s", r.baseline_median_s()}};
  out["speedup"] = r.speedup();
}

// farm measure --model: a compiled model (tunefarm compile --model), and a second build of it
// with --baseline, timed on one board; nothing is recorded (the database keeps kernels' and
// tune --model's results).
int farm_measure_model(const FarmArgs& a) {
  if (!a.module.empty()) throw UserError("--model and --module exclude each other: time a compiled model or a kernel");
  if (!a.function.empty()) throw UserError("--function is for kernels: a model library has one entry point");
  check_measure_options(a.measure);
  auto read_model = [](const std::string& path, const char* what) {
    std::string data = read_named_file(path, what);
    if (std::string why = check_kernel_library(data, /*this_machine=*/false); !why.empty()) {
      throw UserError(std::string(what) + " " + path + " is " + why);
    }
    return data;
  };
  std::string data = read_model(a.model, "model library");
  std::string name = std::filesystem::path(a.model).filename().string();
  std::optional<FarmRunner::Baseline> baseline;
  if (!a.baseline.empty()) {
    baseline = FarmRunner::Baseline{read_model(a.baseline, "baseline library"),
                                    std::filesystem::path(a.baseline).filename().string(), ""};
  }
  farm::FarmClient client(endpoint(a));
  std::string cpu;
  RunResult r = on_a_board(a, client, lease_user(a), cpu, [&](farm::LeasedBoard& board) {
    return FarmRunner::measure_model_on(board, data, name, baseline ? &*baseline : nullptr, &a.measure);
  }, [](const RunResult&, const std::string&) {});
  std::string code = error_code_name(r.error);
  const bool timed_baseline = baseline && !r.baseline_samples_s.empty();
  if (a.json) {
    json out{{"board", r.board_id}, {"key", a.key}, {"model", a.model}, {"error_code", code},
             {"error_msg", r.error_msg}, {"samples_s", r.samples_s}, {"number", r.number}, {"median_s", r.median_s()}};
    if (timed_baseline) add_baseline_json(out, a, r, "model");
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("board     %s (%s, key %s)\nmodel     %s\n", r.board_id.c_str(), cpu.c_str(), a.key.c_str(),
                a.model.c_str());
    if (r.ok()) {
      std::printf("time      %.6f ms (median of %zu samples, %d calls each)\n", r.median_s() * 1e3, r.samples_s.size(),
                  r.number);
      if (timed_baseline) print_baseline(a, r, "model");
    } else {
      std::printf("error     %s: %s\n", code.c_str(), r.error_msg.c_str());
    }
  }
  return r.ok() ? 0 : 1;
}

int farm_measure(const FarmArgs& a) {
  if (a.key.empty()) throw UserError("--key KEY is required");
  if (!a.model.empty()) return farm_measure_model(a);
  if (a.module.empty()) throw UserError("say what to time: --module K.so (a kernel) or --model M.so (a compiled model)");
  check_measure_options(a.measure);
  std::string data = read_named_file(a.module, "kernel library");
  bool gpu = !gpu_module_kind(data).empty();
  if (std::string why = gpu ? "" : check_kernel_library(data, /*this_machine=*/false); !why.empty()) {
    throw UserError("kernel library " + a.module + " is " + why);
  }
  Sidecar side = read_sidecar(a.module);
  std::optional<tunefarm::v1::GpuLaunch> launch = launch_from_sidecar(side.meta);
  if (gpu && !launch) throw UserError("kernel description " + a.module + ".json has no launch, which a GPU kernel needs");
  std::string function = a.function.empty() ? side.function : a.function;
  // --baseline: a second library of the same workload, timed alongside on the same board.
  std::optional<FarmRunner::Baseline> baseline;
  if (!a.baseline.empty()) {
    if (gpu) throw UserError("--baseline is for CPU kernels; GPU boards do not time a baseline yet");
    std::string base = read_named_file(a.baseline, "baseline library");
    if (std::string why = check_kernel_library(base, /*this_machine=*/false); !why.empty()) {
      throw UserError("baseline library " + a.baseline + " is " + why);
    }
    Sidecar bs = read_sidecar(a.baseline);
    if (bs.workload.canonical() != side.workload.canonical()) {
      throw UserError("baseline " + a.baseline + " computes " + bs.workload.canonical() + ", not " +
                      side.workload.canonical() + " as " + a.module + " does");
    }
    baseline = FarmRunner::Baseline{std::move(base), std::filesystem::path(a.baseline).filename().string(), bs.function,
                                    bs.meta};
  }
  const MeasureOptions& mo = a.measure;
  MeasureContext ctx(side.graph, mo);

  farm::FarmClient client(endpoint(a));
  std::string user = lease_user(a);
  std::unique_ptr<db::Database> database = a.no_db ? nullptr : db::open_database(db::database_path(a.db));
  std::string name = std::filesystem::path(a.module).filename().string();
  // The record's target: the sidecar's (what it was compiled for), else the board's, both
  // canonical as compile writes them.
  auto record_target = [&](const std::string& board_target) {
    std::string t = side.target.empty() ? board_target : side.target;
    try {
      return parse_target(t).str();
    } catch (const UserError&) {
      return t;
    }
  };
  auto record = [&](const RunResult& r, const std::string& board_target) {
    CandidateInfo c{record_target(board_target), side.template_name, side.config, 0, a.key, ""};
    return make_record(side.graph, c, r, mo);
  };

  std::string cpu;
  RunResult r = on_a_board(a, client, user, cpu, [&](farm::LeasedBoard& board) {
    return FarmRunner::measure_on(board, ctx, data, name, function, nullptr, launch ? &*launch : nullptr,
                                  baseline ? &*baseline : nullptr, side.meta);
  }, [&](const RunResult& lost, const std::string& board_target) {
    if (database) database->commit({record(lost, board_target)});
  });
  if (database) database->commit({record(r, r.board_target)});

  const Workload& w = side.workload;
  double median = r.median_s();
  std::string code = error_code_name(r.error);
  const bool timed_baseline = baseline && !r.baseline_samples_s.empty();
  if (a.json) {
    json out{{"board", r.board_id}, {"key", a.key}, {"workload", w.canonical()}, {"error_code", code},
             {"error_msg", r.error_msg}, {"samples_s", r.samples_s}, {"number", r.number},
             {"median_s", median}, {"gflops", median > 0 ? side.flops / median * 1e-9 : 0},
             {"check", r.correctness}, {"max_abs_error", r.max_abs_error}};
    if (timed_baseline) add_baseline_json(out, a, r, "module");
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("board     %s (%s, key %s)\nworkload  %s\n", r.board_id.c_str(), cpu.c_str(), a.key.c_str(),
                w.canonical().c_str());
    if (r.ok() || r.error == tunefarm::v1::WRONG_ANSWER) {
      std::printf("time      %.6f ms (median of %zu samples, %d calls each)\nspeed     %.2f GFLOPS\ncheck     %s\n",
                  median * 1e3, r.samples_s.size(), r.number, side.flops / median * 1e-9, r.correctness.c_str());
      if (timed_baseline) print_baseline(a, r, "kernel");
    } else {
      std::printf("error     %s: %s\n", code.c_str(), r.error_msg.c_str());
    }
  }
  return r.ok() ? 0 : 1;
}

}  // namespace

void add_farm_command(CLI::App& app, FarmArgs& a) {
  CLI::App* farm = app.add_subcommand("farm", "Use the device farm: status of boards, timing kernels on them");
  farm->require_subcommand(1);
  auto common = [&](CLI::App* s) {
    s->add_option("--tracker", a.tracker, "tracker address HOST:PORT")->required();
    s->add_option("--token-file", a.token_file, "file whose first line is the farm's token");
    s->add_option("--tls-ca", a.tls_ca, "PEM CA: use TLS and verify the servers");
    s->add_option("--tls-cert", a.tls_cert, "PEM client certificate (mutual TLS)");
    s->add_option("--tls-key", a.tls_key, "PEM key of --tls-cert");
    s->add_option("--tls-server-name", a.tls_server_name,
                  "name the servers' certificates must carry (default: the host of each address)");
    s->add_flag("--json", a.json, "print JSON");
    s->callback([&a, s] { a.sub = s->get_name(); });
  };
  common(farm->add_subcommand("status", "Boards per key (total, free, leased, pending) and each board's state"));
  CLI::App* m = farm->add_subcommand("measure", "Lease a board, upload a kernel library (or a compiled model), time it, check it, release");
  common(m);
  m->add_option("--key", a.key, "kind of board, e.g. rpi4")->required();
  m->add_option("--module", a.module, "kernel library written by tunefarm compile (its .json sidecar too)");
  m->add_option("--model", a.model, "instead of --module: a model library written by tunefarm compile --model, timed "
                                    "on inputs made from its own description, within the board's largest time limit "
                                    "unless --timeout-s says otherwise (not recorded)");
  m->add_option("--function", a.function, "function to time (default: the sidecar's)");
  m->add_option("--baseline", a.baseline, "a second library of the same workload or model (e.g. compiled with the "
                                          "default configs) timed alongside on the same board, interleaved sample by "
                                          "sample; prints the speedup over it (CPU boards; docs/tuning.md)");
  add_measure_options(m, a.measure, kWarmup | kBoardSettings | kCheck);
  m->add_option("--wait-ms", a.wait_ms, "how long to wait for a free board")->capture_default_str();
  m->add_flag("--wait-for-boards", a.wait_for_boards, "wait even for a key no board has registered yet (default: "
                                                      "such a key fails at once)");
  m->add_option("--retries", a.retries, "other boards to try when a board does not answer (each is recorded as "
                                        "board_lost)")->capture_default_str()->check(CLI::Range(0, 100));
  m->add_option("--priority", a.priority, "lease priority (higher first)")->capture_default_str();
  m->add_option("--user", a.user, "lease holder name (default: $USER)");
  m->add_option("--db", a.db, "tuning database to record the measurement in");
  m->add_flag("--no-db", a.no_db, "do not record the measurement");
}

int run_farm(const FarmArgs& a) {
  try {
    if (a.sub == "status") return farm_status(a);
    return farm_measure(a);
  } catch (const farm::FarmError& e) {
    return farm_error_exit(e);
  } catch (const farm::ConfigError& e) {
    throw UserError(e.what());
  }
}

}  // namespace tf::cli
