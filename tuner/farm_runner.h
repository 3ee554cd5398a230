// FarmRunner: the Runner (tuner/runner.h) of a farm key.
//
// Leases up to `boards` boards of the key (the first one waits up to wait_ms; more are taken
// only when free), keeps the leases renewed while it lives, and measures a batch on all of
// them at once, one candidate per board at a time. Before a board gets its first upload its
// architecture is compared with the kernels' (a mismatch throws, naming both). When a board
// stops answering it is reported to the tracker and dropped, its candidate goes back to the
// queue for another board (a new lease is taken when none is left), and the loss is logged
// through on_board_lost; only a candidate that exhausted `retries` boards comes back as
// BOARD_LOST. Boards' target strings are canonicalised as compile canonicalises them.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "tuner/farm_client.h"
#include "tuner/runner.h"

namespace tf {

// The "launch" of a GPU kernel's sidecar (compile's .json beside the module) as the board
// protocol carries it; nullopt when the sidecar has none (CPU kernels). Throws UserError for
// a launch that is not three grid and three block sizes of at least 1.
std::optional<tunefarm::v1::GpuLaunch> launch_from_sidecar(const nlohmann::json& sidecar);

struct FarmRunnerOptions {
  farm::FarmEndpoint farm;
  std::string key;
  std::string user = "tunefarm";
  int boards = 1;
  int64_t wait_ms = 60000;       // for the first board (and a replacement)
  bool wait_for_boards = false;  // wait even for a key no board has registered
  int retries = 2;               // boards a candidate may be requeued to after a loss
  int priority = 0;
  // When set, a wait for a board ends as soon as it turns true (a cancelled job).
  const std::atomic<bool>* stop = nullptr;
};

class FarmRunner : public Runner {
 public:
  explicit FarmRunner(FarmRunnerOptions o);
  ~FarmRunner() override;
  std::string device_key() const override { return opts_.key; }
  // GPU boards: the host's cores are not what they time. (A CPU board may be this machine.)
  bool overlaps_builds() const override;
  int parallelism() const override { return std::max(1, opts_.boards); }
  std::vector<RunResult> run(MeasureContext& ctx, const std::vector<BuildResult>& builds) override;
  // Called (from worker threads, one at a time) when a board is lost.
  std::function<void(const std::string& board_id, const std::string& reason)> on_board_lost;
  // Leases the first boards now (waiting for one) and returns their canonical target; with
  // `expected_arch`, a board of another architecture throws (INVALID_ARGUMENT).
  std::string connect(const std::string& expected_arch);
  // The canonical target of the boards leased so far ("" before the first lease).
  std::string board_target() const;
  // One library on one leased board (also `tunefarm farm measure`): refuses a library of
  // another architecture than the board's (INVALID_ARGUMENT, naming both), uploads, times,
  // checks. Throws FarmError like the board calls do; `ctx_mu` guards ctx when shared.
  // `launch`: a GPU kernel's launch configuration (from its sidecar, launch_from_sidecar).
  // `baseline`: a second CPU library uploaded too and timed alongside, interleaved
  // (MeasureRequest.baseline_module_id; RunResult::speedup); refused like the first when its
  // architecture is not the board's. Its `name` (a file name) is uploaded as
  // "baseline-NAME" when it is the measured library's too.
  struct Baseline {
    std::string data, name, function;
    nlohmann::json sidecar = nullptr;  // its description (inputs it takes packed)
  };
  // `sidecar`: the library's description (inputs it takes packed: set_packed_inputs).
  static RunResult measure_on(farm::LeasedBoard& board, MeasureContext& ctx, const std::string& library_data,
                              const std::string& name, const std::string& function, std::mutex* ctx_mu = nullptr,
                              const tunefarm::v1::GpuLaunch* launch = nullptr, const Baseline* baseline = nullptr,
                              const nlohmann::json& sidecar = nullptr);
  // A compiled model on one leased board (also `tunefarm farm measure --model`), with a second
  // build of it timed alongside when `baseline` is given (its function unused): refused like
  // measure_on's libraries when built for another architecture; within the board's largest
  // time limit (a model's call time is not known in advance).
  // `o`: how to sample (default: tuner/measure.h model_request's); its timeout_s, when set,
  // replaces the board's largest.
  static RunResult measure_model_on(farm::LeasedBoard& board, const std::string& library_data, const std::string& name,
                                    const Baseline* baseline = nullptr, const MeasureOptions* o = nullptr);
  // On the first board this runner holds (leasing one when it holds none). A board that stops
  // answering is reported and dropped, and the result is BOARD_LOST.
  RunResult time_model(const std::string& so_path, const std::string& baseline_so) override;

 private:
  struct Slot {
    std::unique_ptr<farm::LeasedBoard> board;
    std::string target;  // canonical
    std::atomic<bool> lost{false};  // stopped answering; dropped after the batch
  };
  void lease_more(bool must_get_one, const std::string& kernel_arch);
  void renew_loop();

  FarmRunnerOptions opts_;
  farm::FarmClient client_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::string target_;
  std::atomic<bool> stop_{false};
  std::condition_variable renew_cv_;
  std::thread renewer_;
};

}  // namespace tf
