// `tunefarm query`: answers questions about the tuning database, as tables or JSON.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli/common.h"

namespace tf::cli {

struct QueryArgs {
  std::string sub;  // best, top, history, curve, stats, runs, models, export, import, distill
  std::string db, workload, target, file, output;
  int64_t k = 10, keep = 1, limit = 0;
  bool json = false, dry_run = false, csv = false;
  ServerArgs server;  // --server: ask the tuning service instead of opening a file
};


// Adds the `query` subcommand and its subcommands to `app`.
void add_query_command(CLI::App& app, QueryArgs& args);

// Runs it; returns the exit status. Throws UserError for bad workloads or targets.
int run_query(const QueryArgs& args);

}  // namespace tf::cli
