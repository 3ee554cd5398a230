// `tunefarm import`: an ONNX model's graph after the graph passes, and the tunable tasks
// extracted from it; `tunefarm run --model` (docs/models.md).
#pragma once

#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/target.h"
#include "graph/graph.h"
#include "tuner/runner.h"

namespace tf::db {
class Database;
}

namespace tf::cli {

struct ImportArgs {
  std::string model;
  std::string target = "llvm -mcpu=native";
  int opt_level = 2;
  std::vector<std::string> disable, dump;
  bool json = false, list_passes = false;
  CLI::App* cmd = nullptr;
};

void add_import_command(CLI::App& app, ImportArgs& args);
int run_import(const ImportArgs& args);

// `tunefarm run --model`: runs a model here: an .onnx file compiled for this machine (or with
// --reference, evaluated by the reference operators), or a library `compile --model` wrote.
struct ModelRunArgs {
  std::string model, expect;
  std::vector<std::string> inputs, outputs;  // name=file.npy, or file.npy for the only one
  std::vector<std::string> disable;          // graph passes
  bool reference = false, json = false;
  int repeat = 1, opt_level = 2;
  double warmup_ms = 300;  // untimed calls of a compiled model first (--warmup-ms), after one call
  uint64_t seed = 1;
  std::string max_memory;      // --max-memory; empty: graph::default_memory_budget()
  db::Database* db = nullptr;  // tuned configs, when compiling
};
void add_model_run_options(CLI::App* run, ModelRunArgs& args);
int run_model(const ModelRunArgs& args);

// `tunefarm compile --model M.onnx -o model.so`: the whole model as one library (C ABI in
// docs/models.md) and its sidecar model.so.json; one warning line for kernels left untuned.
struct ModelCompileArgs {
  std::string model, target, out;
  std::vector<std::string> disable;
  int opt_level = 2;
  bool json = false, quiet_untuned = false;
  db::Database* db = nullptr;
  std::string max_memory;  // --max-memory; empty: graph::default_memory_budget()
  bool emulate_gpu = false;  // --emulate-gpu: graph::compile_model's emulate_gpu
};
// The graph of an .onnx model after the graph passes for target `t` (at `opt_level`, without
// the passes `disable` names): what compile --model compiles and tune --model tunes.
graph::Graph load_model_for_target(const std::string& path, const Target& t, int opt_level,
                                   const std::vector<std::string>& disable);

// The model compiled twice for `t` — with the database's tuned configs and with default
// schedules — and both timed by `runner` (this machine in an isolated process, or a leased
// board) on the same inputs, interleaved (Runner::time_model): medians in seconds, and how
// many of the tunable kernels found a tuned config. `error` says why they were not timed.
struct ModelComparison {
  double tuned_s = 0, default_s = 0;
  double speedup = 0;  // the median of the sample pairs' default / tuned ratios
  int rounds = 0, calls = 0, tuned = 0, tunable = 0;  // rounds: samples of each build; calls: per sample
  std::string board;                                  // where it ran: "local" or a board id
  std::string error;                                  // "" when timed
  nlohmann::json configs = nlohmann::json::array();    // per tuned workload {workload, template, config}
};
ModelComparison compare_tuned_and_default(const graph::Graph& g, const Target& t, db::Database* db,
                                          const std::string& model, Runner& runner);

// The --max-memory option, on `run` and `compile`.
void add_max_memory_option(CLI::App* cmd, std::string& value);
int compile_model_file(const ModelCompileArgs& args);

}  // namespace tf::cli
