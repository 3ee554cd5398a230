// Running one measurement in tunefarm-board-runner, a process of its own, with limits.
//
// The server side of the isolation: spawn the runner (posix_spawn, not fork: the server is
// multi-threaded) into a process group of its own, hand it the request, wait at most
// `timeout_s`, kill the whole group (nothing the kernel started survives the measurement),
// and turn what happened into an error code:
//   the runner's reply               as the runner says (OK, LOAD_ERROR, RUNTIME_ERROR ...)
//   still running at the deadline    TIMEOUT (the process is killed with SIGKILL)
//   killed by a signal               RUNTIME_ERROR naming the signal, or MEMORY_LIMIT when
//                                    its peak resident memory reached 80% of the limit
//   exited without a reply           RUNTIME_ERROR with its exit status (an empty reply too: a
//                                    kernel that calls exit() while loading looks like that)
//   a reply of OK but too few samples RUNTIME_ERROR (the baseline's too, when the request
//                                    names a baseline_function and runner_flags its
//                                    --baseline=MODULE2)
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "proto/tunefarm.pb.h"

namespace tf::farm {

// `runner` is the command that starts tunefarm-board-runner: its path, after any prefix words
// (an emulator). `on_start(pid)` is called once the runner runs (pid is also its process
// group) and `on_start(0)` once it is gone, so a board shutting down can kill the measurement.
tunefarm::v1::MeasureReply run_isolated(const std::vector<std::string>& runner, const std::string& module,
                                        const tunefarm::v1::MeasureRequest& req, double timeout_s,
                                        const std::function<void(pid_t)>& on_start = nullptr,
                                        const std::vector<std::string>& runner_flags = {});

}  // namespace tf::farm
