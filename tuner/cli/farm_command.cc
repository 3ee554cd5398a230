#include "tuner/cli/farm_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "compiler/error.h"
#include "compiler/operators.h"
#include "compiler/reference.h"
#include "db/database.h"
#include "rpc_server/kernel_library.h"
#include "tuner/farm_client.h"
#include "tuner/tuning_records.h"

namespace tf::cli {
namespace {

using json = nlohmann::json;
namespace pb = tunefarm::v1;

farm::FarmEndpoint endpoint(const FarmArgs& a) {
  if (a.tracker.empty()) throw UserError("--tracker HOST:PORT is required");
  farm::FarmEndpoint e;
  e.tracker = a.tracker;
  if (!a.token_file.empty()) {
    try {
      e.token = farm::read_token_file(a.token_file);
    } catch (const farm::ConfigError& err) {
      throw UserError(err.what());
    }
  }
  e.tls = {a.tls_cert, a.tls_key, a.tls_ca};
  return e;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError(std::string("cannot read ") + what + " " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const char* error_name(pb::ErrorCode c) {
  switch (c) {
    case pb::OK: return "ok";
    case pb::COMPILE_ERROR: return "compile_error";
    case pb::LOAD_ERROR: return "load_error";
    case pb::RUNTIME_ERROR: return "runtime_error";
    case pb::TIMEOUT: return "timeout";
    case pb::MEMORY_LIMIT: return "memory_limit";
    case pb::WRONG_ANSWER: return "wrong_answer";
    case pb::BOARD_LOST: return "board_lost";
    default: return "runtime_error";
  }
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

// Compares the board's outputs with the reference computed here on the same seeded inputs.
std::string check_outputs(const Workload& w, const json& args, const pb::MeasureReply& reply, uint64_t seed,
                          double* max_err) {
  std::vector<std::vector<float>> inputs;
  std::vector<const float*> ptrs;
  int64_t out_n = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    int64_t n = 1;
    for (const json& d : args[i]["shape"]) n *= d.get<int64_t>();
    if (args[i]["role"] == "output") {
      out_n = n;
      continue;
    }
    inputs.emplace_back(static_cast<size_t>(n));
    fill_random(inputs.back().data(), n, seed + i);
    ptrs.push_back(inputs.back().data());
  }
  if (reply.outputs_size() != 1 || reply.outputs(0).values().size() != static_cast<size_t>(out_n) * 4) {
    return "unchecked";
  }
  const float* got = reinterpret_cast<const float*>(reply.outputs(0).values().data());
  OutputCheck c = check_against_reference(build_op(w), ptrs, got);
  *max_err = c.max_abs_error;
  return c.ok() ? "ok" : "wrong";
}

int farm_measure(const FarmArgs& a) {
  if (a.module.empty()) throw UserError("--module K.so is required");
  if (a.key.empty()) throw UserError("--key KEY is required");
  if (a.number < 1 || a.repeat < 1) throw UserError("--number and --repeat must be at least 1");
  std::string data = read_file(a.module, "kernel library");
  json meta;
  try {
    meta = json::parse(read_file(a.module + ".json", "kernel description"));
  } catch (const json::parse_error& e) {
    throw UserError("kernel description " + a.module + ".json is not valid JSON: " + e.what());
  }
  if (!meta.contains("args") || !meta.contains("function") || !meta.contains("workload")) {
    throw UserError("kernel description " + a.module + ".json lacks args, function or workload (not written by tunefarm compile?)");
  }
  Workload w = parse_workload(meta["workload"].get<std::string>());
  std::string function = a.function.empty() ? meta["function"].get<std::string>() : a.function;

  pb::MeasureRequest req;
  req.set_function(function);
  int64_t out_bytes = 0;
  for (const json& arg : meta["args"]) {
    pb::ArgSpec* s = req.add_args();
    int64_t n = 1;
    for (const json& d : arg["shape"]) {
      s->add_shape(d.get<int64_t>());
      n *= d.get<int64_t>();
    }
    s->set_is_output(arg["role"] == "output");
    if (s->is_output()) out_bytes += n * 4;
  }
  req.set_number(a.number);
  req.set_repeat(a.repeat);
  req.set_min_repeat_ms(a.min_repeat_ms);
  req.set_flush_cache(a.flush);
  req.set_cooldown_ms(a.cooldown_ms);
  req.set_seed(a.seed);
  req.set_timeout_s(a.timeout_s);
  req.set_outputs(!a.check ? pb::OUTPUT_NONE : out_bytes <= (16 << 20) ? pb::OUTPUT_VALUES : pb::OUTPUT_DIGEST);

  farm::FarmClient client(endpoint(a));
  const char* user_env = std::getenv("USER");
  std::string user = a.user.empty() ? (user_env ? user_env : "tunefarm") : a.user;
  std::unique_ptr<farm::LeasedBoard> board = client.lease(a.key, user, a.priority, a.wait_ms);
  std::string name = std::filesystem::path(a.module).filename().string();
  std::string module = board->upload(data, name);
  pb::MeasureReply reply = board->measure(req, module);
  std::string board_id = board->lease().board_id(), cpu = board->lease().device().cpu_model();
  std::string target = board->lease().target();
  board->release();

  double max_err = 0;
  std::string correctness = reply.error() == pb::OK && a.check ? check_outputs(w, meta["args"], reply, a.seed, &max_err)
                                                               : "unchecked";
  std::vector<double> samples(reply.samples_s().begin(), reply.samples_s().end());
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  double flops = meta.value("flops", 0.0);
  std::string code = error_name(reply.error());
  if (correctness == "wrong") code = "wrong_answer";

  if (!a.no_db) {
    std::unique_ptr<db::Database> database = db::open_database(db::database_path(a.db));
    db::MeasureRecord r;
    r.workload = w.canonical();
    r.op = w.op;
    r.params = workload_params(w);
    r.flops = static_cast<int64_t>(flops);
    r.target = meta.value("target", target);
    r.arch = parse_target(r.target).arch_name();
    r.device_key = a.key;
    r.device_model = cpu;
    r.toolchain = toolchain_version();
    r.template_name = meta.value("template", std::string("unknown"));
    r.config = meta.value("config", json::object());
    r.samples_s = code == "ok" ? samples : std::vector<double>{};
    r.settings = {reply.number() > 0 ? reply.number() : a.number, a.repeat, a.min_repeat_ms, a.flush, a.cooldown_ms};
    r.error_code = code;
    r.error_msg = reply.error_msg();
    r.measured_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    r.correctness = correctness;
    database->commit({r});
  }

  if (a.json) {
    std::printf("%s\n", json{{"board", board_id}, {"key", a.key}, {"workload", w.canonical()}, {"error_code", code},
                              {"error_msg", reply.error_msg()}, {"samples_s", samples}, {"number", reply.number()},
                              {"median_s", median}, {"gflops", median > 0 ? flops / median * 1e-9 : 0},
                              {"check", correctness}, {"max_abs_error", max_err}}
                            .dump(2)
                            .c_str());
  } else {
    std::printf("board     %s (%s, key %s)\nworkload  %s\n", board_id.c_str(), cpu.c_str(), a.key.c_str(),
                w.canonical().c_str());
    if (code == "ok" || code == "wrong_answer") {
      std::printf("time      %.6f ms (median of %zu samples, %d calls each)\nspeed     %.2f GFLOPS\ncheck     %s\n",
                  median * 1e3, samples.size(), reply.number(), flops / median * 1e-9, correctness.c_str());
    } else {
      std::printf("error     %s: %s\n", code.c_str(), reply.error_msg().c_str());
    }
  }
  return code == "ok" ? 0 : 1;
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
    s->add_flag("--json", a.json, "print JSON");
    s->callback([&a, s] { a.sub = s->get_name(); });
  };
  common(farm->add_subcommand("status", "Boards per key (total, free, leased, pending) and each board's state"));
  CLI::App* m = farm->add_subcommand("measure", "Lease a board, upload a kernel library, time it, check it, release");
  common(m);
  m->add_option("--key", a.key, "kind of board, e.g. rpi4")->required();
  m->add_option("--module", a.module, "kernel library written by tunefarm compile (its .json sidecar too)")->required();
  m->add_option("--function", a.function, "function to time (default: the sidecar's)");
  m->add_option("--number", a.number, "calls per sample (grown to reach --min-repeat-ms)")->capture_default_str();
  m->add_option("--repeat", a.repeat, "samples")->capture_default_str();
  m->add_option("--min-repeat-ms", a.min_repeat_ms, "minimum duration of one sample")->capture_default_str();
  m->add_flag("--flush", a.flush, "flush caches before each sample");
  m->add_option("--cooldown-ms", a.cooldown_ms, "pause between samples")->capture_default_str();
  m->add_option("--timeout-s", a.timeout_s, "time limit on the board (0: the board's default)")->capture_default_str();
  m->add_option("--seed", a.seed, "seed of the inputs")->capture_default_str();
  m->add_option("--wait-ms", a.wait_ms, "how long to wait for a free board")->capture_default_str();
  m->add_option("--priority", a.priority, "lease priority (higher first)")->capture_default_str();
  m->add_option("--user", a.user, "lease holder name (default: $USER)");
  m->add_flag("!--no-check", a.check, "do not compare the outputs with the reference");
  m->add_option("--db", a.db, "tuning database to record the measurement in");
  m->add_flag("--no-db", a.no_db, "do not record the measurement");
}

int run_farm(const FarmArgs& a) {
  try {
    if (a.sub == "status") return farm_status(a);
    return farm_measure(a);
  } catch (const farm::FarmError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const farm::ConfigError& e) {
    throw UserError(e.what());
  }
}

}  // namespace tf::cli
