#include "tuner/builder.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "compiler/driver.h"
#include "compiler/ptxas.h"
#include "base/error.h"
#include "costmodel/features.h"
#include "base/json_limits.h"
#include "runtime/child_process.h"

namespace tf {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Removes the build folders of tuners that died without cleaning up (kill -9, a crash):
// /tmp/tunefarm-build-<pid>-* whose process is gone. A folder whose pid is alive is kept,
// even when the pid was reused by another program.
void remove_abandoned_build_folders() {
  const std::string prefix = "tunefarm-build-";
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/tmp", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    size_t end = name.find('-', prefix.size());
    if (end == std::string::npos || end == prefix.size() || end - prefix.size() > 9) continue;
    std::string digits = name.substr(prefix.size(), end - prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
  }
}

}  // namespace

LocalBuilder::LocalBuilder(LocalBuilderOptions o) : opts_(std::move(o)) {
  if (opts_.workers <= 0) opts_.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (opts_.worker_path.empty()) opts_.worker_path = find_sibling_program("tunefarm-build-worker");
  if (opts_.worker_path.empty() || access(opts_.worker_path.c_str(), X_OK) != 0) {
    throw std::runtime_error("cannot find tunefarm-build-worker next to this program (" +
                             (opts_.worker_path.empty() ? std::string("not found") : opts_.worker_path) + ")");
  }
  remove_abandoned_build_folders();
  std::string tmpl = "/tmp/tunefarm-build-" + std::to_string(getpid()) + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    throw std::runtime_error(std::string("cannot create a build folder in /tmp: ") + std::strerror(errno));
  }
  dir_ = tmpl;
}

LocalBuilder::~LocalBuilder() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::vector<BuildResult> LocalBuilder::build(const Workload& w, const Target& t, const std::vector<json>& configs) {
  // The libraries of the batch before the previous go now (the previous may still be measured).
  std::error_code ec;
  ++batch_;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().filename() != "b" + std::to_string(batch_ - 1)) fs::remove_all(e.path(), ec);
  }
  const std::string batch_dir = dir_ + "/b" + std::to_string(batch_);
  fs::create_directories(batch_dir, ec);
  std::vector<BuildResult> out(configs.size());
  int n = std::min<int>(opts_.workers, static_cast<int>(configs.size()));
  while (static_cast<int>(workers_.size()) < n) {
    workers_.push_back(std::make_unique<ChildWorker>(std::vector<std::string>{opts_.worker_path, "--serve"}));
  }
  json ptxas;
  if (t.kind == TargetKind::Cuda) {
    look_up_ptxas();
    if (!ptxas_path_.empty()) ptxas = {{"path", ptxas_path_}, {"cuda_version", ptxas_version_}};
  }
  std::atomic<size_t> next{0};
  auto work = [&](ChildWorker& worker) {
    for (size_t i; (i = next++) < configs.size();) {
      BuildResult& r = out[i];
      r.config = configs[i];
      std::string so = batch_dir + "/" + std::to_string(i) + ".so";
      json req = {{"workload", w.canonical()}, {"target", t.str()}, {"config", configs[i]}, {"output", so}};
      if (!ptxas.is_null()) req["ptxas"] = ptxas;
      auto start = std::chrono::steady_clock::now();
      std::string line, err;
      bool answered = worker.ask(req.dump(), opts_.timeout_s, &line, &err);
      r.compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      r.error_code = "compile_error";
      const ChildWorker::Failure& f = worker.failure();
      if (!answered && f.timed_out) {
        r.error_msg = "the compile took longer than the limit of " + std::to_string(opts_.timeout_s) + " s; killed";
      } else if (!answered && f.signal != 0) {
        r.error_msg = std::string("the compiler crashed: killed by signal ") + std::to_string(f.signal) + " (" +
                      strsignal(f.signal) + ")";
      } else if (!answered) {
        r.error_msg = "the build worker failed: " + err;
      } else {
        json reply = json::parse(line, nullptr, false);
        if (!reply.is_object() || !reply.contains("ok") || !reply["ok"].is_boolean()) {
          // Out of step with its requests from here on: the next request gets a fresh one.
          worker.stop();
          r.error_msg = "the build worker answered something that is not a reply: " + line.substr(0, 200);
        } else if (!reply["ok"].get<bool>()) {
          r.error_msg = reply.value("error", std::string("unknown error"));
        } else {
          r.error_code = "ok";
          r.so_path = so;
          r.compile_s = reply.value("compile_s", r.compile_s);
          if (reply.contains("cubin") && reply["cubin"].is_string()) {
            r.cubin_path = reply["cubin"].get<std::string>();
            r.cubin_cuda_version = ptxas_version_;
          }
        }
      }
      // A fresh process now and then bounds what LLVM's and lld's global state may keep.
      if (worker.answered() >= kBuildsPerWorker) worker.stop();
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(work, std::ref(*workers_[i]));
  for (std::thread& th : threads) th.join();
  return out;
}

void LocalBuilder::look_up_ptxas() {
  if (ptxas_looked_up_) return;
  ptxas_looked_up_ = true;
  if (std::optional<Ptxas> p = find_ptxas(&no_ptxas_)) {
    ptxas_path_ = p->path;
    ptxas_version_ = p->cuda_version;
  }
}

std::string LocalBuilder::assembly_note(const Target& t) {
  if (t.kind != TargetKind::Cuda) return "";
  look_up_ptxas();
  if (ptxas_path_.empty()) return "kernels go to the boards as PTX, which their drivers JIT: " + no_ptxas_;
  return "kernels are assembled for " + t.arch + " by " + ptxas_path_ + " (CUDA " + std::to_string(ptxas_version_ / 1000) +
         "." + std::to_string(ptxas_version_ % 1000 / 10) + "): boards of that architecture and a CUDA " +
         std::to_string(ptxas_version_ / 1000) + " driver or newer load the machine code without their PTX JIT";
}

int LocalBuilder::worker_starts() const {
  int n = 0;
  for (const auto& w : workers_) n += w->starts();
  return n;
}

json build_worker_main(const std::string& request) {
  try {
    json req = parse_json_bounded(request);
    Workload w = parse_workload(req.at("workload").get<std::string>());
    Target t = parse_target(req.at("target").get<std::string>());
    if (req.contains("features")) {
      OpGraph g = build_op(w);
      json out = json::array();
      for (const json& c : req.at("features")) {
        try {
          out.push_back(costmodel::config_features(g, t, c));
        } catch (const UserError&) {
          out.push_back(nullptr);
        }
      }
      return {{"ok", true}, {"features", out}};
    }
    auto start = std::chrono::steady_clock::now();
    CompiledKernel k = compile_kernel(w, t, req.at("config"), "tuning", "");
    const std::string output = req.at("output").get<std::string>();
    write_kernel(k, EmitKind::SharedLibrary, output);
    json reply = {{"ok", true}};
    if (req.contains("ptxas") && t.kind == TargetKind::Cuda) {
      Ptxas ptxas{req["ptxas"].at("path").get<std::string>(), req["ptxas"].at("cuda_version").get<int>()};
      AssembleResult a = assemble_ptx(ptxas, output, t.arch, output + ".cubin");
      if (a.status == AssembleStatus::Failed) return {{"ok", false}, {"error", a.message}};
      if (a.status == AssembleStatus::Ok) reply["cubin"] = output + ".cubin";
    }
    reply["compile_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return reply;
  } catch (const std::exception& e) {
    return {{"ok", false}, {"error", e.what()}};
  }
}

}  // namespace tf
