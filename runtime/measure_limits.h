// The time limit of a measurement, as the board enforces it and the client waits for it.
//
// Both sides compute it with this one function, so a client's deadline is never shorter than
// what the board may take.
#pragma once

#include <algorithm>
#include <string>

#include "runtime/gpu_runtime.h"
#include "runtime/kernel_library.h"
#include "proto/tunefarm.pb.h"

namespace tf::farm {

// The wall-clock limit of `req`, seconds: its timeout_s when set; otherwise the board's
// default raised to cover what the request asks for (the warm-up's bound, `repeat` samples
// of at least min_repeat_ms each and two more, and the cooldowns between them, twice over,
// plus 1 s to start and load; doubled for a request with a baseline module, which times two
// kernels, each sample after a rewarm_ms), never above the board's maximum. A model's calls
// may take longer than this guess: a tuner times models with an explicit timeout_s.
inline double effective_timeout_s(const tunefarm::v1::MeasureRequest& req, double board_default, double board_max) {
  if (req.timeout_s() != 0) return req.timeout_s();
  double warmup_ms = req.min_warmup_ms() + kWarmupFactor * std::max(req.min_repeat_ms(), kMinWarmupMs);
  bool baseline = !req.baseline_function().empty() || !req.baseline_module_id().empty();
  double kernels = baseline ? 2 : 1;
  double rewarm_ms = baseline ? req.rewarm_ms() : 0;
  double asked = 2 * kernels *
                     (warmup_ms + (req.repeat() + 2.0) * req.min_repeat_ms() +
                      req.repeat() * (req.cooldown_ms() + rewarm_ms)) / 1e3 + 1;
  return std::min(board_max, std::max(board_default, asked));
}

// Why `l` cannot launch a GPU kernel, or "" when it can: three grid and three block sizes of
// at least 1, blocks of at most 1024 threads per axis, grids within 2^31-1, dynamic shared
// memory within 1 MiB; for the kernels after it (kMaxGpuKernelsPerCall in all) the same;
// workspaces of 1 element to kMaxGpuWorkspaceBytes in all (runtime/gpu_runtime.h). Boards
// check it (and every function name) before spawning a runner; runners before launching.
inline std::string check_gpu_dims(const google::protobuf::RepeatedField<int64_t>& grid,
                                  const google::protobuf::RepeatedField<int64_t>& block, int64_t dynamic_shared,
                                  const std::string& what) {
  if (grid.size() != 3 || block.size() != 3) {
    return "a GPU measurement needs " + what + "'s launch (3 grid and 3 block sizes, from its sidecar; got " +
           std::to_string(grid.size()) + " and " + std::to_string(block.size()) + ")";
  }
  for (int d = 0; d < 3; ++d) {
    if (grid[d] < 1 || grid[d] > (int64_t{1} << 31) - 1 || block[d] < 1 || block[d] > 1024) {
      return what + ": launch grid " + std::to_string(grid[d]) + " / block " + std::to_string(block[d]) +
             " out of range in dimension " + std::to_string(d);
    }
  }
  if (dynamic_shared < 0 || dynamic_shared > (int64_t{1} << 20)) {
    return what + ": dynamic_shared_bytes " + std::to_string(dynamic_shared) + " out of range";
  }
  return "";
}

inline std::string check_gpu_launch(const tunefarm::v1::GpuLaunch& l) {
  if (std::string why = check_gpu_dims(l.grid(), l.block(), l.dynamic_shared_bytes(), "the kernel"); !why.empty()) {
    return why;
  }
  constexpr int kMaxSteps = kMaxGpuKernelsPerCall - 1;
  constexpr int64_t kMaxWorkspaceBytes = kMaxGpuWorkspaceBytes;
  if (l.then_size() > kMaxSteps) {
    return "launch has " + std::to_string(l.then_size()) + " kernels after the first; the limit is " +
           std::to_string(kMaxSteps);
  }
  for (const tunefarm::v1::GpuStep& s : l.then()) {
    std::string what = "kernel " + s.function().substr(0, 64);
    if (std::string why = check_gpu_dims(s.grid(), s.block(), s.dynamic_shared_bytes(), what); !why.empty()) {
      return why;
    }
  }
  if (l.workspace_elements_size() > 0 && l.then_size() == 0) return "launch: workspaces without a second kernel";
  if (l.workspace_elements_size() > kMaxSteps) {
    return "launch has " + std::to_string(l.workspace_elements_size()) + " workspaces; the limit is " +
           std::to_string(kMaxSteps);
  }
  int64_t bytes = 0;
  for (int64_t n : l.workspace_elements()) {
    if (n < 1 || n > kMaxWorkspaceBytes / 4) return "launch: workspace of " + std::to_string(n) + " elements out of range";
    bytes += n * 4;
  }
  if (bytes > kMaxWorkspaceBytes) {
    return "launch: workspaces of " + std::to_string(bytes) + " bytes; the limit is " + std::to_string(kMaxWorkspaceBytes);
  }
  return "";
}

}  // namespace tf::farm
