// Runner: times a batch of built candidates on a device and says how each went.
//
// Promises: run() returns one RunResult per build, in order, as values: a candidate that
// did not build is COMPILE_ERROR, one that crashed, hung, ran out of memory or computed a
// wrong answer (checked against the cached reference, tuner/measure.h) gets that code, and
// none of them throws. A candidate whose board went away is BOARD_LOST only when no other
// board could measure it; callers log BOARD_LOST and never store it as the candidate's
// result. run() throws (FarmError, std::runtime_error) only when the device itself is
// unusable: no board of the key, a refused token, a board of another architecture.
//
// LocalRunner: this machine, the embedded default. Each measurement runs in a
// tunefarm-board-runner process of its own, exactly as on a board (same program, same
// sandbox and limits, runtime/isolated_runner.h), one at a time.
// FarmRunner (tuner/farm_runner.h): leased boards of a farm key.
#pragma once

#include <string>
#include <vector>

#include "tuner/builder.h"
#include "tuner/measure.h"

namespace tf {

class Runner {
 public:
  virtual ~Runner() = default;
  // The records' device_key: "local", or the farm key.
  virtual std::string device_key() const = 0;
  virtual std::vector<RunResult> run(MeasureContext& ctx, const std::vector<BuildResult>& builds) = 0;
  // True when building on this machine while run() measures cannot disturb the timings (the
  // device is not this machine's CPU): the tuner then builds the next candidates meanwhile.
  virtual bool overlaps_builds() const { return false; }
  // How many candidates it measures at once (boards).
  virtual int parallelism() const { return 1; }
  // A compiled model (`tunefarm compile --model`'s library) timed against a second build of
  // it, interleaved on the same inputs (tuner/measure.h model_request): samples_s are the
  // model's, baseline_samples_s the baseline's (RunResult::speedup). A model that fails is a
  // result with its error; a device that cannot be used throws, as run() does. Runners
  // without it say so in the result (RUNTIME_ERROR, "not implemented").
  virtual RunResult time_model(const std::string& so_path, const std::string& baseline_so);
};

struct LocalRunnerOptions {
  std::string runner_path;            // "": tunefarm-board-runner next to this program
  double default_timeout_s = 10;      // raised to cover what the settings ask (measure_limits.h)
  double max_timeout_s = 300;
  int64_t memory_limit_bytes = int64_t{4} << 30;
};

class LocalRunner : public Runner {
 public:
  // Throws std::runtime_error when the runner program cannot be found.
  explicit LocalRunner(LocalRunnerOptions o = {});
  std::string device_key() const override { return "local"; }
  std::vector<RunResult> run(MeasureContext& ctx, const std::vector<BuildResult>& builds) override;
  // One measurement of one library (also `tunefarm run`). With `baseline_so`, that library's
  // `baseline_function` is timed too, interleaved on the same inputs (RunResult::speedup).
  RunResult run_one(MeasureContext& ctx, const std::string& so_path, const std::string& function,
                    const std::string& baseline_so = "", const std::string& baseline_function = "");
  // In a tunefarm-board-runner process, as a board would (within max_timeout_s).
  RunResult time_model(const std::string& so_path, const std::string& baseline_so) override;

 private:
  // `req` (its timeout_s set) in a tunefarm-board-runner process under this runner's memory
  // limit, with `baseline_so` as the baseline library when given.
  tunefarm::v1::MeasureReply isolated(tunefarm::v1::MeasureRequest req, const std::string& so_path,
                                      const std::string& baseline_so) const;
  // `r` as measured here.
  RunResult here(RunResult r) const;

  LocalRunnerOptions opts_;
  std::string device_model_;  // this machine's CPU, read once
};

}  // namespace tf
