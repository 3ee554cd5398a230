// Running one measurement in tunefarm-board-runner, a process of its own, with limits.
//
// The server side of the isolation: spawn the runner (posix_spawn, not fork: the server is
// multi-threaded), hand it the request, wait at most `timeout_s`, and turn what happened
// into an error code:
//   the runner's reply               as the runner says (OK, LOAD_ERROR, RUNTIME_ERROR ...)
//   still running at the deadline    TIMEOUT (the process is killed with SIGKILL)
//   killed by a signal               RUNTIME_ERROR naming the signal, or MEMORY_LIMIT when
//                                    its peak resident memory reached 80% of the limit
//   exited without a reply           RUNTIME_ERROR with its exit status
#pragma once

#include <string>

#include "proto/tunefarm.pb.h"

namespace tf::farm {

tunefarm::v1::MeasureReply run_isolated(const std::string& runner, const std::string& module,
                                        const tunefarm::v1::MeasureRequest& req, double timeout_s);

}  // namespace tf::farm
