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
#include "compiler/error.h"
#include "costmodel/features.h"
#include "db/json_limits.h"
#include "tuner/subprocess.h"

namespace tf {

namespace fs = std::filesystem;
using json = nlohmann::json;

LocalBuilder::LocalBuilder(LocalBuilderOptions o) : opts_(std::move(o)) {
  if (opts_.workers <= 0) opts_.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (opts_.worker_path.empty()) opts_.worker_path = find_sibling_program("tunefarm-build-worker", ".");
  if (opts_.worker_path.empty() || access(opts_.worker_path.c_str(), X_OK) != 0) {
    throw std::runtime_error("cannot find tunefarm-build-worker next to this program (" +
                             (opts_.worker_path.empty() ? std::string("not found") : opts_.worker_path) + ")");
  }
  char tmpl[] = "/tmp/tunefarm-build-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error(std::string("cannot create a build folder in /tmp: ") + std::strerror(errno));
  dir_ = tmpl;
}

LocalBuilder::~LocalBuilder() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::vector<BuildResult> LocalBuilder::build(const Workload& w, const Target& t, const std::vector<json>& configs) {
  // The previous batch's libraries go now.
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) fs::remove_all(e.path(), ec);
  ++batch_;
  std::vector<BuildResult> out(configs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < configs.size();) {
      BuildResult& r = out[i];
      r.config = configs[i];
      std::string so = dir_ + "/b" + std::to_string(batch_) + "_" + std::to_string(i) + ".so";
      json req = {{"workload", w.canonical()}, {"target", t.str()}, {"config", configs[i]}, {"output", so}};
      auto start = std::chrono::steady_clock::now();
      ChildResult c = run_child({opts_.worker_path}, req.dump(), opts_.timeout_s);
      r.compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      r.error_code = "compile_error";
      if (!c.started) {
        r.error_msg = c.err;
      } else if (c.timed_out) {
        r.error_msg = "the compile took longer than the limit of " + std::to_string(opts_.timeout_s) + " s; killed";
      } else if (c.signal != 0) {
        r.error_msg = std::string("the compiler crashed: killed by signal ") + std::to_string(c.signal) + " (" +
                      strsignal(c.signal) + ")";
      } else {
        json reply = json::parse(c.out, nullptr, false);
        if (!reply.is_object() || !reply.contains("ok")) {
          r.error_msg = "the build worker exited with status " + std::to_string(c.exit_status) + " without a reply";
        } else if (!reply["ok"].get<bool>()) {
          r.error_msg = reply.value("error", std::string("unknown error"));
        } else {
          r.error_code = "ok";
          r.so_path = so;
          r.compile_s = reply.value("compile_s", r.compile_s);
        }
      }
    }
  };
  std::vector<std::thread> threads;
  int n = std::min<int>(opts_.workers, static_cast<int>(configs.size()));
  for (int i = 0; i < n; ++i) threads.emplace_back(work);
  for (std::thread& th : threads) th.join();
  return out;
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
    write_kernel(k, EmitKind::SharedLibrary, req.at("output").get<std::string>());
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return {{"ok", true}, {"compile_s", s}};
  } catch (const std::exception& e) {
    return {{"ok", false}, {"error", e.what()}};
  }
}

}  // namespace tf
