#include "runtime/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
  for (size_t done = 0; done < input.size();) {
    ssize_t n = write(in[1], input.data() + done, input.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
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

bool LineWorker::start(std::string* err) {
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

void LineWorker::stop() { end(true); }

// Ends the child. kill_first: it may still run (a hang, or we are done with it); otherwise it
// closed its end and is dying on its own, and its own exit status is what failure() reports
// (it gets 2 s to exit before it is killed).
void LineWorker::end(bool kill_first) {
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
  int status = reap_group(pid_);
  if (WIFSIGNALED(status)) failure_.signal = WTERMSIG(status);
  if (WIFEXITED(status)) failure_.exit_status = WEXITSTATUS(status);
  pid_ = -1;
  fd_ = -1;
  answered_ = 0;
}

bool LineWorker::ask(const std::string& line, double timeout_s, std::string* reply, std::string* err) {
  failure_ = Failure{};
  if (pid_ < 0 && !start(err)) return false;
  std::string out = line + "\n";
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
    size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      *reply = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      ++answered_;
      return true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || pending_.size() > kMaxChildOutput) {
      *err = left.count() <= 0 ? "the worker did not answer in time" : "the worker's answer is too long";
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

}  // namespace tf
