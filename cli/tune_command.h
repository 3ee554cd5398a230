// `tunefarm tune`: search a workload's config space on this machine or on farm boards, record
// every measurement, and report the best config against the default schedule.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace tf::cli {

struct TuneArgs {
  std::string workload, target, strategy = "xgb", db;
  bool local = false, json = false, no_db = false, wait_for_boards = false, no_transfer = false;
  std::string objective = "rank:pairwise", load_model, save_model;
  double epsilon = 0.05;
  std::string tracker, key, token_file, tls_ca, tls_cert, tls_key, tls_server_name, user;
  int boards = 1, trials = 200, early_stop = 0, batch = 8, workers = 0, repeat = 5, number = 1;
  int retime_top = 3, retime_rounds = 3, transfer_until = 24;
  double time_budget_min = 0, min_repeat_ms = 10, build_timeout_s = 60, max_spread = 0.10, slow_factor = 20;
  double cut_factor = 2, retime_warmup_ms = 300;
  uint64_t seed = 1;
  int64_t wait_ms = 60000;
  CLI::App* cmd = nullptr;
};

void add_tune_command(CLI::App& app, TuneArgs& args);
// Exit status: 0 done, 130 interrupted (what was measured is committed), 2 a bad request,
// 1 a failure (no candidate ran correctly, the farm failed).
int run_tune(const TuneArgs& args);

}  // namespace tf::cli
