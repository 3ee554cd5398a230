// `tunefarm import`: an ONNX model's graph after the graph passes, and the tunable tasks
// extracted from it (docs/models.md).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace tf::cli {

struct ImportArgs {
  std::string model;
  int opt_level = 2;
  std::vector<std::string> disable, dump;
  bool json = false, list_passes = false;
  CLI::App* cmd = nullptr;
};

void add_import_command(CLI::App& app, ImportArgs& args);
int run_import(const ImportArgs& args);

}  // namespace tf::cli
