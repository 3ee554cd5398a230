// `tunefarm import`: an ONNX model's graph after the graph passes, and the tunable tasks
// extracted from it; `tunefarm run --model` (docs/models.md).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
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

// `tunefarm run --model`: runs a model here. Only the reference evaluation exists so far
// (--reference); compiling whole models is not implemented yet and says so.
struct ModelRunArgs {
  std::string model, expect;
  std::vector<std::string> inputs, outputs;  // name=file.npy, or file.npy for the only one
  bool reference = false, json = false;
  int repeat = 1, opt_level = 2;
  uint64_t seed = 1;
};
void add_model_run_options(CLI::App* run, ModelRunArgs& args);
int run_model(const ModelRunArgs& args);

}  // namespace tf::cli
