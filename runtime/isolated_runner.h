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
#include "runtime/child_process.h"

namespace tf::farm {

// `runner` is the command that starts tunefarm-board-runner: its path, after any prefix words
// (an emulator). `on_start(pid)` is called once the runner runs (pid is also its process
// group) and `on_start(0)` once it is gone, so a board shutting down can kill the measurement.
tunefarm::v1::MeasureReply run_isolated(const std::vector<std::string>& runner, const std::string& module,
                                        const tunefarm::v1::MeasureRequest& req, double timeout_s,
                                        const std::function<void(pid_t)>& on_start = nullptr,
                                        const std::vector<std::string>& runner_flags = {});

// A GPU board's measuring process (tunefarm-board-runner --serve): started at the first
// measurement and kept, so candidates after the first pay neither a process start nor a
// device context (the CUDA/HIP context, the driver's JIT state). Each measurement loads its
// module and unloads it after, its device memory freed. The promises of run_isolated hold per
// measurement: process group, no_new_privs, no core dumps, CPU time capped per measurement, the
// wall-clock limit (at the deadline the process, its group, is killed: TIMEOUT), and the same
// replies for the same failures. A fresh process is started after any measurement that failed
// (the runner ends itself then: a fault poisons its context for good), and when the lease
// changes (nothing of one lease holder's measurement, not even freed device memory, is
// reachable from the next's).
class MeasuringProcess {
 public:
  // `runner` as for run_isolated; `device` cuda:N or rocm:N.
  MeasuringProcess(const std::vector<std::string>& runner, const std::string& device);
  // As run_isolated (module, request, limit, on_start), for the lease `owner` (an opaque name of
  // the lease: a change starts a fresh process); `baseline` the baseline model's path or "".
  tunefarm::v1::MeasureReply measure(const std::string& module, const std::string& baseline,
                                     const tunefarm::v1::MeasureRequest& req, double timeout_s, const std::string& owner,
                                     const std::function<void(pid_t)>& on_start = nullptr);

 private:
  ChildWorker worker_;
  std::vector<std::string> runner_;  // the runner's words, for messages
  std::string owner_;
};

}  // namespace tf::farm
