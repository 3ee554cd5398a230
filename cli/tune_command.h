// `tunefarm tune`: search a workload's config space on this machine or on farm boards, record
// every measurement, and report the best config against the default schedule.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "cli/model_command.h"
#include "tuner/builder.h"
#include "tuner/session.h"
#include "tuner/tune.h"

namespace tf::cli {

struct TuneArgs {
  std::string workload, target, db;
  std::string model;  // --model: every tunable task of an ONNX model under one budget
  std::string precision = "fp32";  // --model: its products' precision (--precision)
  DimArgs dims;                    // --model: its dynamic dimensions (--dim, --input-shape)
  bool local = false, json = false, no_db = false;
  std::string save_model;
  std::string tracker, token_file, tls_ca, tls_cert, tls_key, tls_server_name, user;
  double time_budget_min = 0;
  // --transfer-until as given (a negative value is refused naming it), else the default.
  int transfer_until = static_cast<int>(CostModelSearchOptions{}.transfer_until);
  // The settings of each part, with their defaults: the tuning loop and its measurements, the
  // search, the builder, the farm's leases (key, boards, waits).
  TuneOptions tune;
  SearchSettings search;
  LocalBuilderOptions build;
  FarmRunnerOptions farm;
  CLI::App* cmd = nullptr;
};

void add_tune_command(CLI::App& app, TuneArgs& args);
// Exit status: 0 done, 130 interrupted (what was measured is committed), 2 a bad request,
// 1 a failure (no candidate ran correctly, the farm failed).
int run_tune(const TuneArgs& args);

}  // namespace tf::cli
