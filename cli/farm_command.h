// `tunefarm farm`: the device farm from the command line (status, measure).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "cli/common.h"

namespace tf::cli {

struct FarmArgs {
  std::string sub;  // status, measure
  std::string tracker, token_file, tls_ca, tls_cert, tls_key, tls_server_name;
  std::string key, module, model, function, user, db, baseline;
  int priority = 0, retries = 2;
  MeasureOptions measure;
  int64_t wait_ms = 60000;
  bool json = false, no_db = false, wait_for_boards = false;
};

void add_farm_command(CLI::App& app, FarmArgs& args);
int run_farm(const FarmArgs& args);


}  // namespace tf::cli
