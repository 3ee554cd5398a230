// `tunefarm submit, jobs, watch, cancel`: tuning jobs on the tuning service (tunefarm-tuner),
// and the --server option that `query` and `compile` share with them.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/common.h"
#include "cli/model_command.h"
#include "service/service_client.h"

namespace tf::cli {


struct ServiceArgs {
  std::string sub;  // submit, jobs, watch, cancel
  ServerArgs server;
  std::string job_file, key, target, strategy = "xgb", model, precision = "fp32";
  DimArgs dims;  // --model: its dynamic dimensions
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
