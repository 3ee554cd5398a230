// What the `tunefarm` subcommands share: where the farm and the tuning service are and how to
// prove who we are, how a farm or service failure becomes an exit status, and how times print.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "service/service_client.h"
#include "tuner/farm_client.h"
#include "tuner/measure.h"

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

// The endpoint of --tracker, --token-file (read here; a bad file is a UserError) and the TLS
// options, as farm and tune take them.
farm::FarmEndpoint farm_endpoint(const std::string& tracker, const std::string& token_file, farm::TlsFiles tls);

// Prints a farm failure and returns its exit status: 2 for the user's mistakes (a refused
// token, an unknown key, an invalid request such as a kernel of another architecture), else 1.
int farm_error_exit(const farm::FarmError& e);

// UTC date and time of Unix seconds `t` ("2026-11-23 09:46:16"); "?" for times no calendar
// shows (the database refuses them, but an old or hand-edited file may hold any number).
std::string utc_time(double t);

// Each line as "warning: LINE" on stderr (what import took differently from the model's own
// declarations: graph::Graph::import_warnings).
void print_warnings(const std::vector<std::string>& lines);

// The measurement flags, bound to `m` (their defaults are MeasureOptions'): --repeat, --number
// and --min-repeat-ms on every subcommand that times kernels, and what else it takes:
enum MeasureFlags : unsigned {
  kSampling = 0,        // --repeat, --number, --min-repeat-ms
  kWarmup = 1,          // --warmup-ms
  kBoardSettings = 2,   // --flush, --cooldown-ms, --timeout-s, --seed (of the inputs)
  kCheck = 4,           // --no-check
};
void add_measure_options(CLI::App* cmd, MeasureOptions& m, unsigned flags);
// Throws UserError naming the flag and the value: --repeat and --number below 1, a negative
// or infinite --min-repeat-ms, --cooldown-ms or --timeout-s, a warm-up outside [0, 60000]
// ms (`warmup_flag` names its flag: --warmup-ms, or tune's --retime-warmup-ms).
void check_measure_options(const MeasureOptions& m, const char* warmup_flag = "--warmup-ms");

}  // namespace tf::cli
