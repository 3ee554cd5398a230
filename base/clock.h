// A monotonic clock in seconds, for timing intervals as plain numbers (the tuner's phases, benchmarks).
#pragma once

#include <chrono>

namespace tf {

// Seconds on the steady clock since an unspecified epoch: subtract two readings.
inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace tf
