// `tunefarm farm`: the device farm from the command line (status, measure).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "tuner/farm_client.h"

namespace tf::cli {

struct FarmArgs {
  std::string sub;  // status, measure
  std::string tracker, token_file, tls_ca, tls_cert, tls_key, tls_server_name;
  std::string key, module, function, user, db, baseline;
  int number = 1, repeat = 5, priority = 0, retries = 2;
  double min_repeat_ms = 50, cooldown_ms = 0, timeout_s = 0, warmup_ms = 300;
  uint64_t seed = 1;
  int64_t wait_ms = 60000;
  bool flush = false, check = true, json = false, no_db = false, wait_for_boards = false;
};

void add_farm_command(CLI::App& app, FarmArgs& args);
int run_farm(const FarmArgs& args);

// The endpoint of --tracker, --token-file (read here; a bad file is a UserError) and the TLS
// options, as farm and tune take them.
farm::FarmEndpoint farm_endpoint(const std::string& tracker, const std::string& token_file, farm::TlsFiles tls);

// Prints a farm failure and returns its exit status: 2 for the user's mistakes (a refused
// token, an unknown key, an invalid request such as a kernel of another architecture), else 1.
int farm_error_exit(const farm::FarmError& e);

}  // namespace tf::cli
