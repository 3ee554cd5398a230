#include "cli/common.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "base/error.h"
#include "db/database.h"

namespace tf::cli {

void add_server_options(CLI::App* cmd, ServerArgs& a, bool optional_value) {
  a.optional_value = optional_value;
  if (optional_value) {
    a.server_opts.push_back(cmd->add_option("--server", a.server, "use the tuning service at HOST:PORT instead of a local file "
                                                        "(alone: $TUNEFARM_SERVER)")
                                ->expected(0, 1));
  } else {
    a.server_opts.push_back(cmd->add_option("--server", a.server, "the tuning service, HOST:PORT (default: "
                                                                 "$TUNEFARM_SERVER, else 127.0.0.1:9192)"));
  }
  cmd->add_option("--token-file", a.token_file, "file whose first line is your token for the service "
                                                "(default: $TUNEFARM_TOKEN_FILE)");
  cmd->add_option("--tls-ca", a.tls_ca, "PEM CA: use TLS and verify the service");
  cmd->add_option("--tls-cert", a.tls_cert, "PEM client certificate (mutual TLS)");
  cmd->add_option("--tls-key", a.tls_key, "PEM key of --tls-cert");
  cmd->add_option("--tls-server-name", a.tls_server_name, "name the service's certificate must carry");
}

ServiceEndpoint service_endpoint(const ServerArgs& a) {
  ServiceEndpoint e;
  e.address = a.server;
  if (e.address.empty()) {
    const char* env = std::getenv("TUNEFARM_SERVER");
    if (env && *env) e.address = env;
    else if (a.optional_value) {
      throw UserError("--server without an address needs $TUNEFARM_SERVER (HOST:PORT of tunefarm-tuner)");
    } else {
      e.address = "127.0.0.1:9192";
    }
  }
  std::string token_file = a.token_file;
  if (token_file.empty()) {
    const char* env = std::getenv("TUNEFARM_TOKEN_FILE");
    if (env) token_file = env;
  }
  if (!token_file.empty()) {
    try {
      e.token = farm::read_token_file(token_file);
    } catch (const farm::ConfigError& err) {
      throw UserError(err.what());
    }
  }
  e.tls = {a.tls_cert, a.tls_key, a.tls_ca, a.tls_server_name};
  return e;
}

farm::FarmEndpoint farm_endpoint(const std::string& tracker, const std::string& token_file, farm::TlsFiles tls) {
  if (tracker.empty()) throw UserError("--tracker HOST:PORT is required");
  farm::FarmEndpoint e;
  e.tracker = tracker;
  if (!token_file.empty()) {
    try {
      e.token = farm::read_token_file(token_file);
    } catch (const farm::ConfigError& err) {
      throw UserError(err.what());
    }
  }
  e.tls = std::move(tls);
  return e;
}

void print_warnings(const std::vector<std::string>& lines) {
  for (const std::string& l : lines) std::fprintf(stderr, "warning: %s\n", l.c_str());
}

int farm_error_exit(const farm::FarmError& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  // A wrong token, an unknown key, a malformed request: the user's mistake (2). A well-formed
  // request the farm or the service refuses by its state or its rules (another user's job, a
  // lease that ended, a job already over) is 1, as README's exit statuses say.
  switch (e.code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
      return 2;
    default:
      return 1;
  }
}

std::string utc_time(double t) {
  if (!std::isfinite(t) || t < 0 || t > db::kMaxTimestamp) return "?";
  std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  if (!gmtime_r(&s, &tm)) return "?";
  char buf[32];
  if (std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm) == 0) return "?";
  return buf;
}

void add_measure_options(CLI::App* cmd, MeasureOptions& m, unsigned flags) {
  cmd->add_option("--repeat", m.repeat, "timed samples per measurement")->capture_default_str();
  cmd->add_option("--number", m.number, "calls per sample (grown to reach --min-repeat-ms)")->capture_default_str();
  cmd->add_option("--min-repeat-ms", m.min_repeat_ms, "minimum duration of one sample")->capture_default_str();
  if (flags & kWarmup) {
    cmd->add_option("--warmup-ms", m.min_warmup_ms, "shortest warm-up before the samples (docs/tuning.md)")
        ->capture_default_str();
  }
  if (flags & kBoardSettings) {
    cmd->add_flag("--flush", m.flush, "flush caches before each sample");
    cmd->add_option("--cooldown-ms", m.cooldown_ms, "pause between samples")->capture_default_str();
    cmd->add_option("--timeout-s", m.timeout_s, "time limit on the board (0: the board's default)")->capture_default_str();
    cmd->add_option("--seed", m.seed, "seed of the inputs")->capture_default_str();
  }
  if (flags & kCheck) cmd->add_flag("!--no-check", m.check, "do not compare the outputs with the reference");
}

void check_measure_options(const MeasureOptions& m, const char* warmup_flag) {
  if (m.repeat < 1) throw UserError(str("--repeat ", m.repeat, " must be at least 1"));
  if (m.number < 1) throw UserError(str("--number ", m.number, " must be at least 1"));
  for (auto [name, v] : {std::pair<const char*, double>{"--min-repeat-ms", m.min_repeat_ms},
                         {"--cooldown-ms", m.cooldown_ms}, {"--timeout-s", m.timeout_s}}) {
    if (!std::isfinite(v) || v < 0) throw UserError(str(name, " ", v, " must be a finite number >= 0"));
  }
  if (!(m.min_warmup_ms >= 0 && m.min_warmup_ms <= 60000)) {
    throw UserError(str(warmup_flag, " ", m.min_warmup_ms, " is not in [0, 60000]"));
  }
}

}  // namespace tf::cli
