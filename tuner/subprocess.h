// Running a helper program with a time limit: the tuner's build workers.
//
// The child runs in a process group of its own with the signal mask cleared; at the
// deadline the whole group is killed with SIGKILL. Nothing the child does (crash, hang,
// garbage on stdout) reaches the caller as anything but a ChildResult.
#pragma once

#include <string>
#include <vector>

namespace tf {

struct ChildResult {
  std::string out;         // what it wrote on stdout (at most kMaxChildOutput bytes)
  int exit_status = -1;    // when it exited
  int signal = 0;          // when a signal killed it (SIGKILL at the deadline too)
  bool timed_out = false;
  bool started = false;    // false: it could not be started (err says why)
  std::string err;
};

constexpr size_t kMaxChildOutput = 1 << 20;

ChildResult run_child(const std::vector<std::string>& argv, const std::string& input, double timeout_s);

// The program next to this one's executable called `name`, else in `fallback_dir` relative to
// it (the build tree's layout), else "".
std::string find_sibling_program(const std::string& name, const std::string& fallback_dir);

}  // namespace tf
