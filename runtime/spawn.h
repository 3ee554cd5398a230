// Starting helper processes the way both sides of the farm need them: the board's
// measurement runner (runtime/isolated_runner.h) and the tuner's build workers
// (runtime/child_process.h).
//
// spawn_in_group starts `argv` with stdin/stdout on the given descriptors, the signal mask
// cleared (servers block SIGTERM/SIGINT for sigwait; children must die of them normally),
// in a process group of its own, so killing the group reaches whatever it starts.
// reap_group waits for it to end, kills its group while it is still a zombie (so its pid,
// and with it the group id, cannot have been reused), then reaps it.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace tf {

// The child's pid, or -1 with `*err` set.
pid_t spawn_in_group(const std::vector<std::string>& argv, int stdin_fd, int stdout_fd, std::string* err);

// Waits for `pid` to exit, kills its process group, reaps it; returns the wait status.
int reap_group(pid_t pid, rusage* usage = nullptr);

}  // namespace tf
