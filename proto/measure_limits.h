// The time limit of a measurement, as the board enforces it and the client waits for it.
//
// Both sides compute it with this one function, so a client's deadline is never shorter than
// what the board may take.
#pragma once

#include <algorithm>

#include "proto/kernel_library.h"
#include "proto/tunefarm.pb.h"

namespace tf::farm {

// The wall-clock limit of `req`, seconds: its timeout_s when set; otherwise the board's
// default raised to cover what the request asks for (the warm-up's bound, `repeat` samples
// of at least min_repeat_ms each and two more, and the cooldowns between them, twice over,
// plus 1 s to start and load), never above the board's maximum.
inline double effective_timeout_s(const tunefarm::v1::MeasureRequest& req, double board_default, double board_max) {
  if (req.timeout_s() != 0) return req.timeout_s();
  double warmup_ms = req.min_warmup_ms() + kWarmupFactor * std::max(req.min_repeat_ms(), kMinWarmupMs);
  double asked =
      2 * (warmup_ms + (req.repeat() + 2.0) * req.min_repeat_ms() + req.repeat() * req.cooldown_ms()) / 1e3 + 1;
  return std::min(board_max, std::max(board_default, asked));
}

}  // namespace tf::farm
