// The Board service of tunefarm-rpc-server: runs uploaded kernels for the holder of a lease.
//
// Every call must carry the clients' token; Upload, Measure and Free must also carry a lease
// token that the tracker confirms is valid for this board (fail closed: no tracker, no
// work). Uploads must be complete ELF shared libraries for this machine. Kernels run in
// tunefarm-board-runner under the sandbox of runtime/sandbox.h. Uploads land in a private directory per lease (named by a digest of the lease
// token, never the token itself), which is deleted once the lease is gone. One worker thread
// takes the calls in order, so measurements never overlap and disturb each other's timings.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "proto/tunefarm.grpc.pb.h"

namespace tf::farm {

class MeasuringProcess;

struct BoardOptions {
  std::string token;           // what the board presents to the tracker; empty = none (loopback only)
  std::string client_token;    // what callers must present; empty = `token` (one shared token)
  std::string board_id, key, target;
  std::string sandbox;         // describe_sandbox(), for GetInfo
  tunefarm::v1::DeviceInfo device;
  std::string work_dir;        // an existing private directory for uploads
  std::string runner;          // path of tunefarm-board-runner
  // Words put before the runner's path, e.g. {"/usr/bin/qemu-aarch64"} when the board itself
  // runs under user-mode emulation (no binfmt handler starts a foreign runner directly).
  std::vector<std::string> runner_prefix;
  // "" for a CPU board; cuda:N or rocm:N for a GPU board (runtime/gpu_runtime.h): uploads are
  // then PTX or .hsaco modules, and measurements carry the kernel's launch configuration.
  std::string gpu_device;
  // A GPU board measures in one kept process (runtime/isolated_runner.h MeasuringProcess);
  // false starts a runner per measurement, as CPU boards always do.
  bool gpu_measuring_process = true;
  int64_t max_upload_bytes = 64 << 20;
  double default_timeout_s = 10, max_timeout_s = 120;
  int lease_check_ms = 5000;   // how often directories of ended leases are looked for
  int64_t default_memory_limit = int64_t{1} << 30;  // also the ceiling a request may ask for
  int64_t max_output_value_bytes = 16 << 20;  // cap of OUTPUT_VALUES
};

class BoardService final : public tunefarm::v1::Board::CallbackService {
 public:
  // `tracker` verifies leases; `tracker_token` authenticates us to it.
  BoardService(BoardOptions options, std::unique_ptr<tunefarm::v1::Tracker::Stub> tracker);
  ~BoardService() override;

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const tunefarm::v1::InfoRequest* req,
                                    tunefarm::v1::InfoReply* reply) override;
  grpc::ServerUnaryReactor* Upload(grpc::CallbackServerContext* ctx, const tunefarm::v1::UploadRequest* req,
                                   tunefarm::v1::UploadReply* reply) override;
  grpc::ServerUnaryReactor* Measure(grpc::CallbackServerContext* ctx, const tunefarm::v1::MeasureRequest* req,
                                    tunefarm::v1::MeasureReply* reply) override;
  grpc::ServerUnaryReactor* Free(grpc::CallbackServerContext* ctx, const tunefarm::v1::FreeRequest* req,
                                 tunefarm::v1::FreeReply* reply) override;

  // Deletes the directories of leases the tracker no longer knows; called periodically.
  void collect_lease_dirs();

  // Stops taking work, kills the measurement in progress (its client gets UNAVAILABLE) and
  // fails the queued calls; returns once the worker is idle. Call before shutting the gRPC
  // server down, so a SIGTERM does not wait for a kernel's time limit.
  void shutdown();

 private:
  // Checks the farm token, then runs `work` on the worker thread and finishes with its status.
  grpc::ServerUnaryReactor* enqueue(grpc::CallbackServerContext* ctx, std::function<grpc::Status()> work);
  // OK when the tracker confirms `lease_token` for this board; `use` renews the lease
  // (a call it authorizes), a bookkeeping check passes false.
  grpc::Status verify(const std::string& lease_token, bool use);
  std::string lease_dir(const std::string& lease_token);
  const std::string& incoming_token() const { return options_.client_token.empty() ? options_.token : options_.client_token; }
  grpc::Status measure(const tunefarm::v1::MeasureRequest& req, tunefarm::v1::MeasureReply* reply);
  std::string check_gpu_upload(const std::string& data) const;
  void worker_loop();

  BoardOptions options_;
  std::unique_ptr<tunefarm::v1::Tracker::Stub> tracker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::map<std::string, std::string> lease_dirs_;  // lease token -> directory
  int64_t next_module_ = 1;
  std::atomic<pid_t> running_{0};  // the runner's pid (= its process group) while one runs
  std::unique_ptr<MeasuringProcess> gpu_process_;  // a GPU board's, once it measured
  bool busy_ = false;              // the worker is running a job
  std::thread worker_;
};

// Facts about this machine for registration: CPU model, cores, memory, architecture.
tunefarm::v1::DeviceInfo local_device_info(const std::string& server_version);

// A CPU board's target when --target names none: its architecture (uname's `machine`) and, on
// x86-64, the vector and bit-manipulation features the CPU reports (the flags of `cpuinfo`,
// /proc/cpuinfo's text, under LLVM's names: +avx2,+fma,+avx512f,...), so kernels tuned on it
// use them. Without them LLVM's generic x86-64 is SSE2 only (a 64x64 ResNet-18 ran 3.5x
// slower so). The CPU's name (-mcpu, its scheduling model) only LLVM resolves, which boards
// do not link: --target gives it.
std::string default_cpu_target(const std::string& machine, const std::string& cpuinfo);

}  // namespace tf::farm
