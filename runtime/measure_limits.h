// The time limit of a measurement, as the board enforces it and the client waits for it.
//
// Both sides compute it with this one function, so a client's deadline is never shorter than
// what the board may take.
#pragma once

#include <algorithm>
#include <string>

#include "runtime/kernel_library.h"
#include "proto/tunefarm.pb.h"

namespace tf::farm {

// The wall-clock limit of `req`, seconds: its timeout_s when set; otherwise the board's
// default raised to cover what the request asks for (the warm-up's bound, `repeat` samples
// of at least min_repeat_ms each and two more, and the cooldowns between them, twice over,
// plus 1 s to start and load; doubled for a request with a baseline module, which times two
// kernels), never above the board's maximum.
inline double effective_timeout_s(const tunefarm::v1::MeasureRequest& req, double board_default, double board_max) {
  if (req.timeout_s() != 0) return req.timeout_s();
  double warmup_ms = req.min_warmup_ms() + kWarmupFactor * std::max(req.min_repeat_ms(), kMinWarmupMs);
  double kernels = req.baseline_function().empty() ? 1 : 2;
  double asked =
      2 * kernels * (warmup_ms + (req.repeat() + 2.0) * req.min_repeat_ms() + req.repeat() * req.cooldown_ms()) / 1e3 + 1;
  return std::min(board_max, std::max(board_default, asked));
}

// Why `l` cannot launch a GPU kernel, or "" when it can: three grid and three block sizes of
// at least 1, blocks of at most 1024 threads per axis, grids within 2^31-1, dynamic shared
// memory within 1 MiB. Boards check it before spawning a runner; runners before launching.
inline std::string check_gpu_launch(const tunefarm::v1::GpuLaunch& l) {
  if (l.grid_size() != 3 || l.block_size() != 3) {
    return "a GPU measurement needs the kernel's launch (3 grid and 3 block sizes, from its sidecar; got " +
           std::to_string(l.grid_size()) + " and " + std::to_string(l.block_size()) + ")";
  }
  for (int d = 0; d < 3; ++d) {
    if (l.grid(d) < 1 || l.grid(d) > (int64_t{1} << 31) - 1 || l.block(d) < 1 || l.block(d) > 1024) {
      return "launch grid " + std::to_string(l.grid(d)) + " / block " + std::to_string(l.block(d)) +
             " out of range in dimension " + std::to_string(d);
    }
  }
  if (l.dynamic_shared_bytes() < 0 || l.dynamic_shared_bytes() > (int64_t{1} << 20)) {
    return "dynamic_shared_bytes " + std::to_string(l.dynamic_shared_bytes()) + " out of range";
  }
  return "";
}

}  // namespace tf::farm
