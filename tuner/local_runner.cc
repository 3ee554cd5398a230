#include <unistd.h>

#include <stdexcept>

#include "runtime/measure_limits.h"
#include "runtime/isolated_runner.h"
#include "tuner/runner.h"
#include "runtime/child_process.h"
#include "tuner/tuning_records.h"

namespace tf {

namespace pb = tunefarm::v1;

LocalRunner::LocalRunner(LocalRunnerOptions o) : opts_(std::move(o)), device_model_(local_device_model()) {
  if (opts_.runner_path.empty()) {
    opts_.runner_path = find_sibling_program("tunefarm-board-runner");
  }
  if (opts_.runner_path.empty() || access(opts_.runner_path.c_str(), X_OK) != 0) {
    throw std::runtime_error("cannot find tunefarm-board-runner next to this program (" +
                             (opts_.runner_path.empty() ? std::string("not found") : opts_.runner_path) + ")");
  }
}

pb::MeasureReply LocalRunner::isolated(pb::MeasureRequest req, const std::string& so_path,
                                       const std::string& baseline_so) const {
  req.set_memory_limit_bytes(opts_.memory_limit_bytes);
  std::vector<std::string> flags;
  if (!baseline_so.empty()) flags.push_back("--baseline=" + baseline_so);
  return farm::run_isolated({opts_.runner_path}, so_path, req, req.timeout_s(), nullptr, flags);
}

RunResult LocalRunner::here(RunResult r) const {
  r.board_id = "local";
  r.device_model = device_model_;
  return r;
}

RunResult LocalRunner::run_one(MeasureContext& ctx, const std::string& so_path, const std::string& function,
                               const std::string& baseline_so, const std::string& baseline_function) {
  pb::MeasureRequest req = ctx.request(function);
  if (!baseline_so.empty()) req.set_baseline_function(baseline_function);
  if (!ctx.graph().prepacked.empty()) {
    // Inputs passed packed (a model's constant weights): as the kernels' descriptions say.
    try {
      set_packed_inputs(req, read_sidecar_json(so_path), baseline_so.empty() ? nlohmann::json() : read_sidecar_json(baseline_so));
    } catch (const std::exception& e) {
      RunResult r;
      r.error = pb::LOAD_ERROR;
      r.error_msg = e.what();
      return here(std::move(r));
    }
  }
  req.set_timeout_s(farm::effective_timeout_s(req, opts_.default_timeout_s, opts_.max_timeout_s));
  return here(ctx.finish(isolated(req, so_path, baseline_so)));
}

RunResult Runner::time_model(const std::string&, const std::string&) {
  RunResult r;
  r.error = pb::RUNTIME_ERROR;
  r.error_msg = "timing a whole model is not implemented on " + device_key() + " yet";
  return r;
}

RunResult LocalRunner::time_model(const std::string& so_path, const std::string& baseline_so) {
  return here(result_of(isolated(model_request(opts_.max_timeout_s), so_path, baseline_so)));
}

std::vector<RunResult> LocalRunner::run(MeasureContext& ctx, const std::vector<BuildResult>& builds) {
  std::vector<RunResult> out;
  for (const BuildResult& b : builds) {
    if (!b.ok()) {
      RunResult r;
      r.error = pb::COMPILE_ERROR;
      r.error_msg = b.error_msg;
      out.push_back(r);
      continue;
    }
    out.push_back(run_one(ctx, b.so_path, ctx.graph().workload.op));
  }
  return out;
}

}  // namespace tf
