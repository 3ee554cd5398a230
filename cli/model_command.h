// `tunefarm import`: an ONNX model's graph after the graph passes, and the tunable tasks
// extracted from it; `tunefarm run --model` (docs/models.md).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/target.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "tuner/model_comparison.h"

namespace tf::db {
class Database;
}

namespace tf::cli {

// --dim name=size and --input-shape input=d0,d1,... (repeatable): sizes for a model's dynamic
// input dimensions (graph::InputBinding), on every command that reads an .onnx model.
struct DimArgs {
  std::vector<std::string> dims, shapes;
  graph::InputBinding binding() const { return graph::parse_binding(dims, shapes); }
  // --dim batch=1,8,32: one binding per shape bucket (compile --model, tune --model).
  std::vector<graph::InputBinding> bindings() const { return graph::parse_bindings(dims, shapes); }
  bool given() const { return !dims.empty() || !shapes.empty(); }
};
void add_dim_options(CLI::App* cmd, DimArgs& args);

struct ImportArgs {
  std::string model;
  std::string target = "llvm -mcpu=native";
  int opt_level = 2;
  std::vector<std::string> disable, dump;
  std::string precision = "fp32";
  DimArgs dims;
  bool json = false, list_passes = false;
  CLI::App* cmd = nullptr;
};

void add_import_command(CLI::App& app, ImportArgs& args);
int run_import(const ImportArgs& args);

// `tunefarm quantize M.onnx -o M.int8.onnx`: the model calibrated and written as a QDQ model
// (graph/quantize.h) on its input files or seeded random inputs.
struct QuantizeArgs {
  std::string model, out;
  std::vector<std::string> inputs;  // name=file.npy, repeatable: the k-th of each name is sample k
  int samples = 8;                  // seeded random samples when no --input is given
  uint64_t seed = 1;
  std::string method = "minmax";    // or "percentile"
  double percentile = 99.99;
  bool per_tensor = false, symmetric = false;
  DimArgs dims;  // the calibration's sizes of dynamic dimensions
  CLI::App* cmd = nullptr;
};
void add_quantize_command(CLI::App& app, QuantizeArgs& args);
int run_quantize(const QuantizeArgs& args);

// `tunefarm run --model`: runs a model here: an .onnx file compiled for this machine (or with
// --reference, evaluated by the reference operators), or a library `compile --model` wrote.
struct ModelRunArgs {
  std::string model, expect;
  std::vector<std::string> inputs, outputs;  // name=file.npy, or file.npy for the only one
  std::vector<std::string> disable;          // graph passes
  bool reference = false, json = false;
  bool profile = false;  // --profile: each kernel's time (graph::ModelLibrary::profile)
  int repeat = 1, opt_level = 2;
  int bucket = -1;  // --bucket: a library's shape bucket (-1: by the inputs' shapes, else 0)
  double warmup_ms = 300;  // untimed calls of a compiled model first (--warmup-ms), after one call
  uint64_t seed = 1;
  std::string max_memory;      // --max-memory; empty: graph::default_memory_budget()
  std::string device;          // --device cuda:N / rocm:N: a GPU library's device
  std::string precision = "fp32";  // --precision
  // --tensor-cores: with --reference, products at --precision as a cuda target's tensor cores
  // compute them (graph::PassOptions::tensor_cores), for their accuracy without a GPU.
  bool tensor_cores = false;
  DimArgs dims;                // an .onnx model's dynamic dimensions
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
  std::string precision = "fp32";  // --precision
  DimArgs dims;                    // --dim, --input-shape
  bool pad_batch = false;          // --pad-batch: graph::compile_model's pad_batch
  std::vector<std::string> skip;   // --skip-pass: lowering passes skipped in every kernel
};
// The --max-memory option, on `run` and `compile`.
void add_max_memory_option(CLI::App* cmd, std::string& value);
// The --precision option (graph::parse_precision), on `import`, `run`, `compile` and `tune`.
void add_precision_option(CLI::App* cmd, std::string& value);
// Refuses a --precision other than fp32 given with a workload instead of a model.
void refuse_precision_without_model(const std::string& precision);
int compile_model_file(const ModelCompileArgs& args);

}  // namespace tf::cli
