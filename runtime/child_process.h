// Running helper programs with a time limit: the tuner's build workers, and the board's
// measurement runner (runtime/isolated_runner.h).
//
// The child runs in a process group of its own with the signal mask cleared; at the
// deadline the whole group is killed with SIGKILL. Nothing the child does (crash, hang,
// garbage on stdout) reaches the caller as anything but a ChildResult.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace tf {

struct ChildResult {
  std::string out;         // what it wrote on stdout (at most ChildOptions::max_output bytes)
  bool out_cut = false;    // it wrote more than that; the rest was read and dropped
  int exit_status = -1;    // when it exited
  int signal = 0;          // when a signal killed it (SIGKILL at the deadline too)
  bool timed_out = false;
  bool started = false;    // false: it could not be started (err says why)
  std::string err;
  rusage usage{};          // the child's, once reaped (ru_maxrss: its peak resident memory)
};

constexpr size_t kMaxChildOutput = 1 << 20;

struct ChildOptions {
  size_t max_output = kMaxChildOutput;
  // Called with the child's pid (also its process group) once it runs, and with 0 once it has
  // ended, before it is reaped (so nobody can be handed a reused pid): a daemon shutting down
  // kills the group of the pid it was last given.
  std::function<void(pid_t)> on_start;
};

// Starts `argv`, writes `input` to its stdin and closes it, reads its stdout until it closes
// or `timeout_s` passes (then kills its group), and reaps it.
ChildResult run_child(const std::vector<std::string>& argv, const std::string& input, double timeout_s,
                      const ChildOptions& options = {});

// A helper that stays up and answers one line per request line (tunefarm-build-worker
// --serve), so a stream of requests does not pay a process start each. A crash, a hang past
// the limit or a reply that is not one line ends the child (its whole group) and fails that
// request only, and failure() says which; the next request starts a fresh child. Writes
// never raise SIGPIPE.
class LineWorker {
 public:
  // How the last failed ask() ended.
  struct Failure {
    bool timed_out = false;  // no reply within the limit (the child was killed)
    int signal = 0;          // the child was killed by this signal
    int exit_status = -1;    // the child exited with this status
  };

  explicit LineWorker(std::vector<std::string> argv) : argv_(std::move(argv)) {}
  ~LineWorker() { stop(); }
  LineWorker(const LineWorker&) = delete;
  LineWorker& operator=(const LineWorker&) = delete;

  // The reply line (without its newline), or false with `*err` saying what went wrong.
  bool ask(const std::string& line, double timeout_s, std::string* reply, std::string* err);
  const Failure& failure() const { return failure_; }
  void stop();
  int starts() const { return starts_; }
  // Requests answered by the child now running (0 when none runs).
  int answered() const { return answered_; }

 private:
  bool start(std::string* err);
  void end(bool kill_first);
  std::vector<std::string> argv_;
  int pid_ = -1;
  int fd_ = -1;  // our end of a socket pair: the child's stdin and stdout
  std::string pending_;
  int starts_ = 0;
  int answered_ = 0;
  Failure failure_;
};

// The program called `name` next to this one's executable (bin/ of the build tree, or where
// they are installed), else "".
std::string find_sibling_program(const std::string& name);

}  // namespace tf
