#include "runtime/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "runtime/spawn.h"

namespace tf {

ChildResult run_child(const std::vector<std::string>& args, const std::string& input, double timeout_s,
                      const ChildOptions& options) {
  ChildResult r;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) {
    r.err = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  if (pipe2(out, O_CLOEXEC) != 0) {
    r.err = std::string("pipe: ") + std::strerror(errno);
    close(in[0]);
    close(in[1]);
    return r;
  }
  pid_t pid = spawn_in_group(args, in[0], out[1], &r.err);
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    return r;
  }
  r.started = true;
  if (options.on_start) options.on_start(pid);
  // Requests are small (a pipe holds 64 KiB); a child that exits before reading closes it.
  signal(SIGPIPE, SIG_IGN);
  write_all(in[1], input);
  close(in[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[65536];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready <= 0) continue;  // nothing yet, or EINTR
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child finished or died
    size_t room = options.max_output - std::min(options.max_output, r.out.size());
    if (static_cast<size_t>(n) > room) r.out_cut = true;
    r.out.append(buf, std::min(room, static_cast<size_t>(n)));
  }
  close(out[0]);
  if (r.timed_out) kill(-pid, SIGKILL);
  if (options.on_start) {
    siginfo_t info{};
    while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
    options.on_start(0);
  }
  int status = reap_group(pid, &r.usage);  // and whatever it started
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  if (WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
  return r;
}

std::string find_sibling_program(const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  fs::path p = self.parent_path() / name;
  if (access(p.c_str(), X_OK) != 0) return "";
  return fs::weakly_canonical(p, ec).string();
}

bool ChildWorker::start(std::string* err) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    *err = std::string("socketpair: ") + std::strerror(errno);
    return false;
  }
  pid_t pid = spawn_in_group(argv_, sv[1], sv[1], err);
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    return false;
  }
  pid_ = pid;
  fd_ = sv[0];
  pending_.clear();
  ++starts_;
  return true;
}

void ChildWorker::stop() { end(true); }

// Ends the child. kill_first: it may still run (a hang, or we are done with it); otherwise it
// closed its end and is dying on its own, and its own exit status is what failure() reports
// (it gets 2 s to exit before it is killed).
void ChildWorker::end(bool kill_first) {
  if (pid_ < 0) return;
  close(fd_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  siginfo_t info{};
  while (!kill_first && std::chrono::steady_clock::now() < deadline) {
    info.si_pid = 0;
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) break;
    usleep(2000);
  }
  if (kill_first || info.si_pid == 0) kill(-pid_, SIGKILL);
  if (on_end_) {
    while (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
    on_end_();
  }
  int status = reap_group(pid_);
  if (WIFSIGNALED(status)) failure_.signal = WTERMSIG(status);
  if (WIFEXITED(status)) failure_.exit_status = WEXITSTATUS(status);
  pid_ = -1;
  fd_ = -1;
  answered_ = 0;
}

bool ChildWorker::ensure_started(std::string* err) {
  if (pid_ >= 0) {
    // One that ended while idle (killed from outside, a crash of its own) is replaced now,
    // not found dead by the next request.
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) end(false);
  }
  return pid_ >= 0 || start(err);
}

namespace {

std::string length_prefix(size_t n) {
  std::string p(4, '\0');
  for (int b = 0; b < 4; ++b) p[static_cast<size_t>(b)] = static_cast<char>((n >> (8 * b)) & 0xff);
  return p;
}

uint32_t read_length(const char* p) {
  uint32_t n = 0;
  for (int b = 3; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(p[b]);
  return n;
}

}  // namespace

bool ChildWorker::take_reply(std::string* reply, bool* too_long) {
  if (framing_ == Framing::Line) {
    size_t nl = pending_.find('\n');
    if (nl == std::string::npos) {
      *too_long = pending_.size() > max_reply_;
      return false;
    }
    *reply = pending_.substr(0, nl);
    pending_.erase(0, nl + 1);
    return true;
  }
  if (pending_.size() < 4) return false;
  size_t n = read_length(pending_.data());
  if (n > max_reply_) {
    *too_long = true;
    return false;
  }
  if (pending_.size() < 4 + n) return false;
  *reply = pending_.substr(4, n);
  pending_.erase(0, 4 + n);
  return true;
}

bool ChildWorker::ask(const std::string& request, double timeout_s, std::string* reply, std::string* err) {
  failure_ = Failure{};
  if (pid_ < 0 && !start(err)) return false;
  std::string out = framing_ == Framing::Line ? request + "\n" : length_prefix(request.size()) + request;
  for (size_t sent = 0; sent < out.size();) {
    ssize_t n = send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *err = "the worker stopped reading";
      stop();
      return false;
    }
    sent += static_cast<size_t>(n);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    bool too_long = false;
    if (take_reply(reply, &too_long)) {
      ++answered_;
      return true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || too_long) {
      *err = left.count() <= 0 ? "the worker did not answer in time"
                               : "the worker's answer is over " + std::to_string(max_reply_) + " bytes";
      failure_.timed_out = left.count() <= 0;
      stop();
      return false;
    }
    pollfd p{fd_, POLLIN, 0};
    int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) {
      *err = std::string("poll: ") + std::strerror(errno);
      stop();
      return false;
    }
    if (ready <= 0) continue;
    char buf[65536];
    ssize_t n = read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      end(false);
      *err = failure_.signal != 0 ? "the worker was killed by signal " + std::to_string(failure_.signal) + " (" +
                                        strsignal(failure_.signal) + ")"
                                  : "the worker exited with status " + std::to_string(failure_.exit_status);
      return false;
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

namespace {

// All of `n` bytes, or false at end of input or on an error.
bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

bool read_framed(int fd, std::string* message, size_t max_bytes) {
  char head[4];
  if (!read_all(fd, head, 4)) return false;
  size_t n = read_length(head);
  if (n > max_bytes) return false;
  message->assign(n, '\0');
  return read_all(fd, message->data(), n);
}

bool write_all(int fd, const std::string& data) {
  for (size_t done = 0; done < data.size();) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool write_framed(int fd, const std::string& message) { return write_all(fd, length_prefix(message.size()) + message); }

}  // namespace tf
