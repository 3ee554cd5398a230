// Builder: turns a batch of configs of one workload into kernel libraries.
//
// Promises: build() returns one BuildResult per config, in order, and never throws for a
// candidate's failure: a compiler error, a compiler crash or a compile past the time limit is
// that candidate's COMPILE_ERROR, with the reason. Libraries (and their .json sidecars) stay
// on disk until the build() after next or the builder's end (a batch can be measured while
// the next one builds: tuner/tune.h).
//
// LocalBuilder compiles candidates in tunefarm-build-worker processes (--serve), as many at
// once as there are cores by default, each candidate under a time limit. A worker stays up
// across candidates and batches (a process start and LLVM's loading cost more than most
// compiles) and is replaced after kBuildsPerWorker builds; a worker that crashes or hangs
// fails that candidate only and is replaced by a fresh one for the next.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "compiler/target.h"
#include "compiler/workload.h"

namespace tf {

struct BuildResult {
  nlohmann::json config;         // as asked
  std::string so_path;           // the library; empty on error
  std::string error_code = "ok"; // ok or compile_error
  std::string error_msg;
  double compile_s = 0;
  // CUDA targets where the tuner has ptxas (compiler/ptxas.h): the kernel's machine code, which
  // boards that can run it load instead of the PTX at so_path (no JIT there); "" otherwise.
  std::string cubin_path;
  int cubin_cuda_version = 0;  // of the ptxas that assembled it (13000)
  bool ok() const { return error_code == "ok"; }
};

class Builder {
 public:
  virtual ~Builder() = default;
  virtual std::vector<BuildResult> build(const Workload& w, const Target& t,
                                         const std::vector<nlohmann::json>& configs) = 0;
  // How many candidates it builds at once.
  virtual int parallelism() const { return 1; }
};

struct LocalBuilderOptions {
  int workers = 0;           // 0: as many as cores
  double timeout_s = 60;     // per candidate
  std::string worker_path;   // "": tunefarm-build-worker next to this program
};

class ChildWorker;

class LocalBuilder : public Builder {
 public:
  // Throws std::runtime_error when the worker program cannot be found.
  explicit LocalBuilder(LocalBuilderOptions o = {});
  ~LocalBuilder() override;
  std::vector<BuildResult> build(const Workload& w, const Target& t,
                                 const std::vector<nlohmann::json>& configs) override;
  // Its workers.
  int parallelism() const override { return opts_.workers; }
  // Worker processes started so far (a crash, a hang or kBuildsPerWorker builds start another).
  int worker_starts() const;
  // For a CUDA target, a line saying how its kernels reach the boards: assembled by ptxas too
  // (which one), or as PTX alone and why; "" for other targets.
  std::string assembly_note(const Target& t);

 private:
  static constexpr int kBuildsPerWorker = 200;
  LocalBuilderOptions opts_;
  std::vector<std::unique_ptr<ChildWorker>> workers_;
  std::string dir_;
  int batch_ = 0;
  void look_up_ptxas();
  bool ptxas_looked_up_ = false;
  std::string ptxas_path_, no_ptxas_;
  int ptxas_version_ = 0;
};

// The worker's side, for tunefarm-build-worker: reads {"workload", "target", "config",
// "output"} and writes the library and sidecar; returns the reply {"ok", "error",
// "compile_s"}. With "ptxas": {"path", "cuda_version"} (CUDA targets) it assembles the PTX
// into output + ".cubin" too: the reply's "cubin" names it (absent where this ptxas lacks the
// architecture); a kernel ptxas refuses is an error. With {"workload", "target", "features": [config, ...]} it lowers each config
// for the cost model instead and replies {"ok", "features": [[f, ...] or null, ...]} (null:
// the template refused that config).
nlohmann::json build_worker_main(const std::string& request);

}  // namespace tf
