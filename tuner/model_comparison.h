// What tuning bought a whole model: the model compiled with the database's tuned configs and
// with default schedules, both timed where its kernels were tuned (Runner::time_model), and
// the result as the database keeps it. `tune --model` and the tuning service's model jobs
// share it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/target.h"
#include "db/database.h"
#include "graph/graph.h"
#include "graph/model_compiler.h"
#include "tuner/runner.h"

namespace tf {

// The graph of an .onnx model after the graph passes for target `t` (at `opt_level`, without
// the passes `disable` names): what compile --model compiles and tune --model tunes. Throws
// UserError for a file that is not a model it can import. `bind`: sizes for its dynamic input
// dimensions (graph/onnx_import.h); `external_data` as graph::load_model's.
graph::Graph load_model_for_target(const std::string& path, const Target& t, int opt_level,
                                   const std::vector<std::string>& disable,
                                   graph::Precision precision = graph::Precision::Float32,
                                   const graph::InputBinding& bind = {}, bool external_data = true);

// `g` compiled for `t` into the library `out`, each kernel with the database's best config
// (choose_config; none without a database), within `memory_budget` bytes.
graph::CompiledModel compile_model_with(const graph::Graph& g, const Target& t, db::Database* db,
                                        const std::string& out, const std::string& model, int64_t memory_budget,
                                        bool emulate_gpu = false);
// The same for a library of shape buckets (graph/model_compiler.h): each bucket's kernels
// with their own tuned configs; `pad_batch` and `lowering` as compile_model's.
graph::CompiledModel compile_model_with(const std::vector<const graph::Graph*>& buckets,
                                        const Target& t, db::Database* db, const std::string& out,
                                        const std::string& model, int64_t memory_budget,
                                        bool emulate_gpu = false, bool pad_batch = false,
                                        const LowerOptions& lowering = {});

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

// A timed comparison as tune --model's `done` event and a service job's progress give it:
// tuned_s, default_s, speedup, board, tuned_kernels, tunable_kernels, rounds, calls.
nlohmann::json to_json(const ModelComparison& c);

// The result the database keeps of a timed comparison: the model as the user named it, the
// SHA-256 of its bytes, where it ran (`device_key`), and the tuner's estimate (0: none).
db::ModelResult model_result(const ModelComparison& c, const std::string& model, const std::string& model_sha256,
                             const Target& t, const std::string& device_key, double estimate_s);

}  // namespace tf
