// `tunefarm submit, jobs, watch, cancel`: tuning jobs on the tuning service (tunefarm-tuner),
// and the --server option that `query` and `compile` share with them.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tuner/service_client.h"

namespace tf::cli {

// Where the service is and how to prove who we are: --server (default $TUNEFARM_SERVER, else
// 127.0.0.1:9192), --token-file (default $TUNEFARM_TOKEN_FILE) and TLS.
struct ServerArgs {
  std::string server, token_file, tls_ca, tls_cert, tls_key, tls_server_name;
  std::vector<CLI::Option*> server_opts;  // --server of each subcommand these args serve
  bool optional_value = false;
  // Whether --server was given (query and compile use the service only then).
  bool given() const {
    for (CLI::Option* o : server_opts) {
      if (o->count() > 0) return true;
    }
    return false;
  }
};

// Adds --server and its companions to `cmd`; `optional_value`: --server may stand alone
// (then $TUNEFARM_SERVER names the service), as query and compile take it.
void add_server_options(CLI::App* cmd, ServerArgs& a, bool optional_value);
// Throws UserError for an unreadable token file or no address at all.
ServiceEndpoint service_endpoint(const ServerArgs& a);

struct ServiceArgs {
  std::string sub;  // submit, jobs, watch, cancel
  ServerArgs server;
  std::string job_file, key, target, strategy = "xgb", model;
  std::vector<std::string> workloads;
  std::vector<double> weights;
  int trials = 200, priority = 0, early_stop = 0, batch = 8, boards = 1;
  int64_t id = 0;
  bool json = false, watch = false;
  CLI::App* submit = nullptr;
};

void add_service_commands(CLI::App& app, ServiceArgs& args);
// Exit status: 0 (watch: the job is done), 1 the job failed or was cancelled, 2 a refused
// request (bad job, wrong token, another user's job), 1 an unreachable service.
int run_service_command(const ServiceArgs& args);

}  // namespace tf::cli
