#include "tuner/model_comparison.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "base/error.h"
#include "graph/memory_budget.h"
#include "tuner/measure.h"
#include "tuner/tuning_records.h"

namespace tf {

graph::Graph load_model_for_target(const std::string& path, const Target& t, int opt_level,
                                   const std::vector<std::string>& disable,
                                   graph::Precision precision, const graph::InputBinding& bind,
                                   bool external_data) {
  return graph::load_model(path, opt_level, disable, graph::channel_block(t), precision,
                           graph::tensor_cores(t), bind, external_data);
}

graph::CompiledModel compile_model_with(const graph::Graph& g, const Target& t, db::Database* db,
                                        const std::string& out, const std::string& model, int64_t memory_budget,
                                        bool emulate_gpu) {
  return compile_model_with(std::vector<const graph::Graph*>{&g}, t, db, out, model, memory_budget, emulate_gpu);
}

graph::CompiledModel compile_model_with(const std::vector<const graph::Graph*>& buckets,
                                        const Target& t, db::Database* db, const std::string& out,
                                        const std::string& model, int64_t memory_budget,
                                        bool emulate_gpu, bool pad_batch,
                                        const LowerOptions& lowering) {
  graph::ConfigLookup lookup = [db](const Workload& w, const Target& target) {
    ConfigChoice c = choose_config(db, w, target);
    return graph::KernelConfig{c.config, c.source, c.tuned_from};
  };
  return graph::compile_model(buckets, t, lookup, out, model, memory_budget, emulate_gpu, pad_batch,
                              lowering);
}

ModelComparison compare_tuned_and_default(const graph::Graph& g, const Target& t, db::Database* db,
                                          const std::string& model, Runner& runner) {
  ModelComparison c;
  // A folder of its own: the service compares the models of two jobs at once.
  std::string tmpl = (std::filesystem::temp_directory_path() / "tunefarm-compare-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) {
    c.error = str("cannot make a folder for the two builds in ", std::filesystem::temp_directory_path().string());
    return c;
  }
  struct Cleanup {
    std::filesystem::path d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{tmpl};
  // What the model cannot do here (a target whole models do not compile for yet, a board that
  // refuses it or went away) is the comparison's error: the tuning it follows stands.
  try {
    const int64_t budget = graph::default_memory_budget();
    const std::string tuned_so = tmpl + "/tuned.so", default_so = tmpl + "/default.so";
    graph::CompiledModel tuned = compile_model_with(g, t, db, tuned_so, model, budget);
    compile_model_with(g, t, nullptr, default_so, model, budget);
    c.tunable = tuned.tunable();
    c.tuned = tuned.tunable() - tuned.untuned();
    std::set<std::string> seen;
    for (const graph::ModelKernel& k : tuned.kernels) {
      if (k.workload.empty() || k.config.source.rfind("tuned", 0) != 0 || !seen.insert(k.workload).second) continue;
      c.configs.push_back({{"workload", k.workload}, {"template", k.template_name}, {"config", k.config.config}});
    }
    RunResult r = runner.time_model(tuned_so, default_so);
    if (!r.ok() || r.samples_s.empty() || r.baseline_samples_s.empty()) {
      c.error = r.ok() ? "the board returned no samples" : str(error_code_name(r.error), ": ", r.error_msg);
      return c;
    }
    c.tuned_s = r.median_s();
    c.default_s = r.baseline_median_s();
    c.speedup = r.speedup();
    c.rounds = static_cast<int>(r.samples_s.size());
    c.calls = r.number;
    c.board = r.board_id;
  } catch (const std::exception& e) {
    c.error = e.what();
  }
  return c;
}

nlohmann::json to_json(const ModelComparison& c) {
  return {{"tuned_s", c.tuned_s},         {"default_s", c.default_s},         {"speedup", c.speedup},
          {"board", c.board},             {"tuned_kernels", c.tuned},         {"tunable_kernels", c.tunable},
          {"rounds", c.rounds},           {"calls", c.calls}};
}

db::ModelResult model_result(const ModelComparison& c, const std::string& model, const std::string& model_sha256,
                             const Target& t, const std::string& device_key, double estimate_s) {
  return {0, model, model_sha256, t.str(), device_key, c.tuned_s, c.default_s, estimate_s, c.tuned, c.tunable,
          c.configs, unix_now()};
}

}  // namespace tf
