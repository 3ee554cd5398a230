#include "runtime/isolated_runner.h"

#include <unistd.h>

#include <cstring>

#include "proto/credentials.h"
#include "runtime/child_process.h"

namespace tf::farm {
namespace {

namespace pb = tunefarm::v1;

pb::MeasureReply failure(pb::ErrorCode code, const std::string& msg) {
  pb::MeasureReply r;
  r.set_error(code);
  r.set_error_msg(msg);
  return r;
}

// How a runner that gave no reply ended, as both ways of running it say it.
pb::MeasureReply killed_at_limit(double timeout_s) {
  return failure(pb::TIMEOUT, "still running after the time limit of " + std::to_string(timeout_s) + " s; killed");
}

pb::MeasureReply crashed(int sig) {
  return failure(pb::RUNTIME_ERROR,
                 std::string("kernel crashed: killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")");
}

pb::MeasureReply not_executed(const std::vector<std::string>& runner) {
  std::string cmd;
  for (const std::string& w : runner) cmd += (cmd.empty() ? "" : " ") + w;
  return failure(pb::RUNTIME_ERROR, "runner '" + cmd + "' could not be executed (exit status 127)");
}

// The reply as the caller gets it: one that says OK with the wrong number of samples (or
// baseline samples) is a RUNTIME_ERROR; an error without a message gets one.
pb::MeasureReply checked(const pb::MeasureRequest& req, pb::MeasureReply reply) {
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

}  // namespace

pb::MeasureReply run_isolated(const std::vector<std::string>& runner, const std::string& module, const pb::MeasureRequest& req,
                              double timeout_s, const std::function<void(pid_t)>& on_start,
                              const std::vector<std::string>& runner_flags) {
  std::vector<std::string> argv = runner;
  argv.push_back(module);
  argv.push_back(std::to_string(getpid()));
  argv.insert(argv.end(), runner_flags.begin(), runner_flags.end());
  std::string request;
  req.SerializeToString(&request);
  // A process group of its own: the board kills the group, whatever the kernel started. The
  // reply is read up to the largest message the farm carries; a longer one is no reply.
  ChildOptions options;
  options.max_output = kMaxMessageBytes;
  options.on_start = on_start;
  ChildResult child = run_child(argv, request, timeout_s, options);
  if (!child.started) return failure(pb::RUNTIME_ERROR, child.err);
  if (child.timed_out) return killed_at_limit(timeout_s);
  if (child.signal != 0) {
    int sig = child.signal;
    int64_t peak = int64_t{child.usage.ru_maxrss} * 1024;
    if (req.memory_limit_bytes() > 0 && peak >= req.memory_limit_bytes() / 10 * 8) {
      return failure(pb::MEMORY_LIMIT, std::string("killed by ") + strsignal(sig) + " at " + std::to_string(peak >> 20) +
                                           " MiB resident, near the memory limit of " +
                                           std::to_string(req.memory_limit_bytes() >> 20) + " MiB");
    }
    return crashed(sig);
  }
  pb::MeasureReply reply;
  if (child.exit_status == 127 && child.out.empty()) return not_executed(runner);
  if (child.out_cut) {
    return failure(pb::RUNTIME_ERROR, "the runner's reply is over " + std::to_string(kMaxMessageBytes >> 20) + " MiB");
  }
  // An empty message parses as a valid reply of OK with no samples: a kernel that calls
  // exit(0) while loading ends the runner that way, before it could reply.
  if (child.exit_status != 0 || child.out.empty() || !reply.ParseFromString(child.out)) {
    return failure(pb::RUNTIME_ERROR, "runner exited with status " + std::to_string(child.exit_status) +
                                          " without a reply (did the kernel call exit()?)");
  }
  return checked(req, std::move(reply));
}

MeasuringProcess::MeasuringProcess(const std::vector<std::string>& runner, const std::string& device)
    : worker_(
          [&] {
            std::vector<std::string> argv = runner;
            argv.insert(argv.end(), {"--serve", std::to_string(getpid()), "--device=" + device});
            return argv;
          }(),
          ChildWorker::Framing::Length, static_cast<size_t>(kMaxMessageBytes)),
      runner_(runner) {}

pb::MeasureReply MeasuringProcess::measure(const std::string& module, const std::string& baseline,
                                           const pb::MeasureRequest& req, double timeout_s, const std::string& owner,
                                           const std::function<void(pid_t)>& on_start) {
  if (owner != owner_) worker_.stop();
  owner_ = owner;
  pb::RunnerJob job;
  job.set_module(module);
  job.set_baseline(baseline);
  *job.mutable_request() = req;
  std::string request, out, err;
  job.SerializeToString(&request);
  if (!worker_.ensure_started(&err)) return failure(pb::RUNTIME_ERROR, err);
  if (on_start) {
    on_start(worker_.pid());
    worker_.set_on_end([&] { on_start(0); });  // it may end during the measurement
  }
  const bool answered = worker_.ask(request, timeout_s, &out, &err);
  worker_.set_on_end(nullptr);
  if (on_start) on_start(0);
  if (!answered) {
    const ChildWorker::Failure& f = worker_.failure();
    if (f.timed_out) return killed_at_limit(timeout_s);
    if (f.signal != 0) return crashed(f.signal);
    if (f.exit_status == 127) return not_executed(runner_);
    return failure(pb::RUNTIME_ERROR, "the measuring process ended without a reply: " + err);
  }
  pb::MeasureReply reply;
  if (!reply.ParseFromString(out)) {
    worker_.stop();
    return failure(pb::RUNTIME_ERROR, "the measuring process's reply is not a MeasureReply");
  }
  // It ends itself after a failure; the next measurement starts a fresh one either way.
  if (reply.error() != pb::OK) worker_.stop();
  return checked(req, std::move(reply));
}

}  // namespace tf::farm
