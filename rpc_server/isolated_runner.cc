#include "rpc_server/isolated_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "proto/spawn.h"

namespace tf::farm {
namespace {

namespace pb = tunefarm::v1;

pb::MeasureReply failure(pb::ErrorCode code, const std::string& msg) {
  pb::MeasureReply r;
  r.set_error(code);
  r.set_error_msg(msg);
  return r;
}

}  // namespace

pb::MeasureReply run_isolated(const std::vector<std::string>& runner, const std::string& module, const pb::MeasureRequest& req,
                              double timeout_s, const std::function<void(pid_t)>& on_start,
                              const std::vector<std::string>& runner_flags) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return failure(pb::RUNTIME_ERROR, "pipe failed");
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return failure(pb::RUNTIME_ERROR, "pipe failed");
  }
  // A process group of its own: the board kills the group, whatever the kernel started.
  std::string parent = std::to_string(getpid()), err;
  std::vector<std::string> argv = runner;
  argv.push_back(module);
  argv.push_back(parent);
  argv.insert(argv.end(), runner_flags.begin(), runner_flags.end());
  pid_t pid = spawn_in_group(argv, in[0], out[1], &err);
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    return failure(pb::RUNTIME_ERROR, err);
  }
  if (on_start) on_start(pid);

  // The request is small; a runner that dies before reading it just closes the pipe.
  std::string request;
  req.SerializeToString(&request);
  signal(SIGPIPE, SIG_IGN);
  for (size_t done = 0; done < request.size();) {
    ssize_t n = write(in[1], request.data() + done, request.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(in[1]);

  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string reply_bytes;
  bool timed_out = false;
  char buf[65536];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;  // EOF: the runner finished or died
    reply_bytes.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  if (timed_out) kill(pid, SIGKILL);
  // Its group dies while it is a zombie; it is forgotten (on_start(0)) before it is reaped,
  // so nobody can be given its pid in between.
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  if (on_start) on_start(0);
  rusage usage{};
  int status = reap_group(pid, &usage);

  if (timed_out) {
    return failure(pb::TIMEOUT, "still running after the time limit of " + std::to_string(timeout_s) + " s; killed");
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    int64_t peak = int64_t{usage.ru_maxrss} * 1024;
    if (req.memory_limit_bytes() > 0 && peak >= req.memory_limit_bytes() / 10 * 8) {
      return failure(pb::MEMORY_LIMIT, std::string("killed by ") + strsignal(sig) + " at " + std::to_string(peak >> 20) +
                                           " MiB resident, near the memory limit of " +
                                           std::to_string(req.memory_limit_bytes() >> 20) + " MiB");
    }
    return failure(pb::RUNTIME_ERROR, std::string("kernel crashed: killed by signal ") + std::to_string(sig) + " (" +
                                          strsignal(sig) + ")");
  }
  pb::MeasureReply reply;
  if (WEXITSTATUS(status) == 127 && reply_bytes.empty()) {
    std::string cmd;
    for (const std::string& w : runner) cmd += (cmd.empty() ? "" : " ") + w;
    return failure(pb::RUNTIME_ERROR, "runner '" + cmd + "' could not be executed (exit status 127)");
  }
  // An empty message parses as a valid reply of OK with no samples: a kernel that calls
  // exit(0) while loading ends the runner that way, before it could reply.
  if (WEXITSTATUS(status) != 0 || reply_bytes.empty() || !reply.ParseFromString(reply_bytes)) {
    return failure(pb::RUNTIME_ERROR, "runner exited with status " + std::to_string(WEXITSTATUS(status)) +
                                          " without a reply (did the kernel call exit()?)");
  }
  const bool cut = reply.cut() && req.cut_slower_than_s() > 0;
  if (reply.error() == pb::OK && reply.samples_s_size() != (cut ? 1 : req.repeat())) {
    return failure(pb::RUNTIME_ERROR, "the runner replied with " + std::to_string(reply.samples_s_size()) +
                                          " samples instead of " + std::to_string(cut ? 1 : req.repeat()));
  }
  if (reply.error() == pb::OK && !req.baseline_function().empty() &&
      (reply.baseline_samples_s_size() < 1 || reply.baseline_samples_s_size() > req.repeat())) {
    return failure(pb::RUNTIME_ERROR, "the runner replied with " + std::to_string(reply.baseline_samples_s_size()) +
                                          " baseline samples for " + std::to_string(req.repeat()) + " asked");
  }
  if (reply.error() != pb::OK && reply.error_msg().empty()) reply.set_error_msg("the runner gave no details");
  return reply;
}

}  // namespace tf::farm
