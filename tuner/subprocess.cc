#include "tuner/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "proto/spawn.h"

namespace tf {

ChildResult run_child(const std::vector<std::string>& args, const std::string& input, double timeout_s) {
  ChildResult r;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) {
    r.err = std::strerror(errno);
    return r;
  }
  if (pipe2(out, O_CLOEXEC) != 0) {
    r.err = std::strerror(errno);
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
  // Requests are small (a pipe holds 64 KiB); a child that exits before reading closes it.
  signal(SIGPIPE, SIG_IGN);
  for (size_t done = 0; done < input.size();) {
    ssize_t n = write(in[1], input.data() + done, input.size() - done);
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
    if (ready <= 0) continue;
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (r.out.size() < kMaxChildOutput) r.out.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  if (r.timed_out) kill(-pid, SIGKILL);
  int status = reap_group(pid);  // and whatever it started
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  if (WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
  return r;
}

std::string find_sibling_program(const std::string& name, const std::string& fallback_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (const fs::path& p : {self.parent_path() / name, self.parent_path() / fallback_dir / name}) {
    if (access(p.c_str(), X_OK) == 0) return fs::weakly_canonical(p, ec).string();
  }
  return "";
}

}  // namespace tf
