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

// A helper that stays up and answers each request with one reply, so a stream of requests
// does not pay a process start each: the tuner's build and feature workers
// (tunefarm-build-worker --serve: a line each way) and a GPU board's measuring process
// (tunefarm-board-runner --serve: length-prefixed binary messages, Framing::Length). A crash,
// a hang past the limit or a reply that is not one (no newline within max_reply bytes; a
// length over max_reply) ends the child (its whole group) and fails that request only, and
// failure() says which; the next request starts a fresh child. Writes never raise SIGPIPE.
class ChildWorker {
 public:
  enum class Framing {
    Line,    // a request line, a reply line (neither holds a newline)
    Length,  // each message a 4-byte little-endian length, then that many bytes
  };
  // How the last failed ask() ended.
  struct Failure {
    bool timed_out = false;  // no reply within the limit (the child was killed)
    int signal = 0;          // the child was killed by this signal
    int exit_status = -1;    // the child exited with this status
  };

  explicit ChildWorker(std::vector<std::string> argv, Framing framing = Framing::Line,
                       size_t max_reply = kMaxChildOutput)
      : argv_(std::move(argv)), framing_(framing), max_reply_(max_reply) {}
  ~ChildWorker() { stop(); }
  ChildWorker(const ChildWorker&) = delete;
  ChildWorker& operator=(const ChildWorker&) = delete;

  // The reply (a line without its newline, or a message's bytes), or false with `*err` saying
  // what went wrong.
  bool ask(const std::string& request, double timeout_s, std::string* reply, std::string* err);
  const Failure& failure() const { return failure_; }
  // Ends the child now (killing its group), if one runs.
  void stop();
  // Starts the child now unless one runs (ask() does when needed), replacing one that ended
  // while idle; false with `*err` when it cannot be started.
  bool ensure_started(std::string* err);
  int starts() const { return starts_; }
  // Requests answered by the child now running (0 when none runs).
  int answered() const { return answered_; }
  // The running child's pid (also its process group), or -1.
  int pid() const { return pid_; }
  // Called when the child has ended, before it is reaped (as ChildOptions::on_start(0)).
  void set_on_end(std::function<void()> on_end) { on_end_ = std::move(on_end); }

 private:
  bool start(std::string* err);
  void end(bool kill_first);
  // A whole reply at the front of pending_: moved to `*reply`. Sets `*too_long` when what is
  // pending can no longer be one.
  bool take_reply(std::string* reply, bool* too_long);
  std::vector<std::string> argv_;
  Framing framing_;
  size_t max_reply_;
  int pid_ = -1;
  int fd_ = -1;  // our end of a socket pair: the child's stdin and stdout
  std::string pending_;
  int starts_ = 0;
  int answered_ = 0;
  Failure failure_;
  std::function<void()> on_end_;
};

// Writes all of `data` to `fd`, retrying interrupted writes; false when the reader is gone or
// on another error.
bool write_all(int fd, const std::string& data);

// Length framing (ChildWorker::Framing::Length) for the child's side: reads one message from
// `fd` (false at end of input, or on a length over `max_bytes`), writes one (false when the
// reader is gone).
bool read_framed(int fd, std::string* message, size_t max_bytes);
bool write_framed(int fd, const std::string& message);

// The program called `name` next to this one's executable (bin/ of the build tree, or where
// they are installed), else "".
std::string find_sibling_program(const std::string& name);

}  // namespace tf
