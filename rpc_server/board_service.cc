#include "rpc_server/board_service.h"

#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/hash.h"
#include "proto/farm_limits.h"
#include "runtime/gpu_model/image.h"
#include "runtime/gpu_runtime.h"
#include "runtime/kernel_library.h"
#include "runtime/measure_limits.h"
#include "runtime/pack_layout.h"
#include "proto/credentials.h"
#include "runtime/isolated_runner.h"

namespace tf::farm {
namespace {

namespace fs = std::filesystem;
namespace pb = tunefarm::v1;

constexpr int kMaxRepeat = 10000;
constexpr int kMaxNumber = 1 << 24;
constexpr double kMaxMs = 60000;

grpc::Status invalid(const std::string& m) { return {grpc::StatusCode::INVALID_ARGUMENT, m}; }

std::vector<std::string> runner_command(const BoardOptions& o) {
  std::vector<std::string> argv = o.runner_prefix;
  argv.push_back(o.runner);
  return argv;
}

bool safe_name(const std::string& s, bool allow_dot) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && !(allow_dot && c == '.')) return false;
  }
  return s != "." && s != "..";
}

}  // namespace

pb::DeviceInfo local_device_info(const std::string& server_version) {
  pb::DeviceInfo d;
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    bool model = line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0;
    size_t colon = line.find(':');
    if (model && colon != std::string::npos && d.cpu_model().empty()) {
      size_t start = line.find_first_not_of(' ', colon + 1);
      d.set_cpu_model(truncate_utf8(start == std::string::npos ? "" : line.substr(start), kMaxDeviceNameBytes));
    }
  }
  d.set_cores(static_cast<int32_t>(std::thread::hardware_concurrency()));
  d.set_memory_bytes(int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE));
  utsname u{};
  uname(&u);
  d.set_arch(truncate_utf8(u.machine, kMaxDeviceShortBytes));
  d.set_server_version(truncate_utf8(server_version, kMaxDeviceShortBytes));
  return d;
}

std::string default_cpu_target(const std::string& machine, const std::string& cpuinfo) {
  std::string target = "llvm -mtriple=" + machine + "-linux-gnu";
  if (machine != "x86_64") return target;
  std::set<std::string> flags;
  std::istringstream lines(cpuinfo);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("flags", 0) != 0 || line.find(':') == std::string::npos) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) flags.insert(w);
    break;  // the first CPU's
  }
  // /proc/cpuinfo's name -> LLVM's, in the order -mattr lists them.
  static const std::pair<const char*, const char*> kFeatures[] = {
      {"pni", "sse3"}, {"ssse3", "ssse3"}, {"sse4_1", "sse4.1"}, {"sse4_2", "sse4.2"}, {"popcnt", "popcnt"},
      {"avx", "avx"}, {"avx2", "avx2"}, {"fma", "fma"}, {"f16c", "f16c"}, {"bmi1", "bmi"}, {"bmi2", "bmi2"},
      {"abm", "lzcnt"}, {"movbe", "movbe"}, {"avx512f", "avx512f"}, {"avx512cd", "avx512cd"},
      {"avx512bw", "avx512bw"}, {"avx512dq", "avx512dq"}, {"avx512vl", "avx512vl"}, {"avx512ifma", "avx512ifma"},
      {"avx512vbmi", "avx512vbmi"}, {"avx512_vbmi2", "avx512vbmi2"}, {"avx512_vnni", "avx512vnni"},
      {"avx512_bitalg", "avx512bitalg"}, {"avx512_vpopcntdq", "avx512vpopcntdq"}, {"avx512_bf16", "avx512bf16"},
      {"avx512_fp16", "avx512fp16"}};
  std::string mattr;
  for (const auto& [flag, feature] : kFeatures) {
    if (flags.count(flag)) mattr += (mattr.empty() ? "+" : ",+") + std::string(feature);
  }
  return mattr.empty() ? target : target + " -mattr=" + mattr;
}

BoardService::BoardService(BoardOptions options, std::unique_ptr<pb::Tracker::Stub> tracker)
    : options_(std::move(options)), tracker_(std::move(tracker)), worker_([this] { worker_loop(); }) {}

BoardService::~BoardService() {
  shutdown();
  cv_.notify_all();
  worker_.join();
}

void BoardService::shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  if (pid_t pid = running_.load(); pid > 0) kill(-pid, SIGKILL);
  cv_.notify_all();
  cv_.wait(lock, [&] { return !busy_ && jobs_.empty(); });
}

void BoardService::worker_loop() {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      busy_ = false;
      cv_.notify_all();
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
    }
    job();
  }
}

grpc::ServerUnaryReactor* BoardService::enqueue(grpc::CallbackServerContext* ctx, std::function<grpc::Status()> work) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (grpc::Status s = check_token(ctx, incoming_token()); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      reactor->Finish({grpc::StatusCode::UNAVAILABLE, "board shutting down"});
      return reactor;
    }
    jobs_.push_back([this, reactor, work = std::move(work)] {
      grpc::Status s;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) s = {grpc::StatusCode::UNAVAILABLE, "board shutting down"};
      }
      if (s.ok()) {
        try {
          s = work();
        } catch (const std::exception& e) {
          s = {grpc::StatusCode::INTERNAL, e.what()};
        }
      }
      reactor->Finish(s);
    });
  }
  cv_.notify_one();
  return reactor;
}

grpc::Status BoardService::verify(const std::string& lease_token, bool use) {
  if (lease_token.empty()) return {grpc::StatusCode::PERMISSION_DENIED, "no lease token: lease this board first"};
  pb::VerifyRequest req;
  req.set_lease_token(lease_token);
  req.set_board_id(options_.board_id);
  req.set_use(use);
  pb::VerifyReply reply;
  grpc::ClientContext ctx;
  add_token(ctx, options_.token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status s = tracker_->VerifyLease(&ctx, req, &reply);
  if (!s.ok()) {
    // Not UNAVAILABLE: this board answers, so its clients must not take it for a lost board.
    return {grpc::StatusCode::FAILED_PRECONDITION, "cannot verify the lease with the tracker: " + s.error_message()};
  }
  if (!reply.valid()) {
    return {grpc::StatusCode::PERMISSION_DENIED, "the lease is not valid for this board (expired, released, or another board's)"};
  }
  return grpc::Status::OK;
}

std::string BoardService::lease_dir(const std::string& lease_token) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = lease_dirs_.find(lease_token);
  if (it != lease_dirs_.end()) return it->second;
  fs::path dir = fs::path(options_.work_dir) / ("lease-" + sha256_hex(lease_token).substr(0, 16));
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all);
  lease_dirs_[lease_token] = dir.string();
  return dir.string();
}

void BoardService::collect_lease_dirs() {
  std::map<std::string, std::string> dirs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dirs = lease_dirs_;
  }
  for (const auto& [token, dir] : dirs) {
    // A bookkeeping check: it must not renew the lease it looks at.
    if (verify(token, /*use=*/false).error_code() != grpc::StatusCode::PERMISSION_DENIED) continue;
    std::error_code ec;
    fs::remove_all(dir, ec);
    std::lock_guard<std::mutex> lock(mu_);
    lease_dirs_.erase(token);
  }
}

grpc::ServerUnaryReactor* BoardService::GetInfo(grpc::CallbackServerContext* ctx, const pb::InfoRequest*,
                                                pb::InfoReply* reply) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  grpc::Status s = check_token(ctx, incoming_token());
  if (s.ok()) {
    reply->set_board_id(options_.board_id);
    reply->set_key(options_.key);
    reply->set_target(options_.target);
    *reply->mutable_device() = options_.device;
    reply->set_max_upload_bytes(options_.max_upload_bytes);
    reply->set_max_timeout_s(options_.max_timeout_s);
    reply->set_default_timeout_s(options_.default_timeout_s);
    reply->set_max_memory_limit_bytes(options_.default_memory_limit);
    reply->set_sandbox(options_.sandbox);
  }
  reactor->Finish(s);
  return reactor;
}

grpc::ServerUnaryReactor* BoardService::Upload(grpc::CallbackServerContext* ctx, const pb::UploadRequest* req,
                                               pb::UploadReply* reply) {
  return enqueue(ctx, [this, req, reply]() -> grpc::Status {
    if (grpc::Status s = verify(req->lease_token(), /*use=*/true); !s.ok()) return s;
    if (static_cast<int64_t>(req->data().size()) > options_.max_upload_bytes) {
      return invalid("upload of " + std::to_string(req->data().size()) + " bytes exceeds this board's limit of " +
                     std::to_string(options_.max_upload_bytes));
    }
    if (req->data().empty()) return invalid("empty upload");
    if (!safe_name(req->name(), true)) return invalid("module name '" + req->name() + "' must be letters, digits, '.', '_', '-'");
    if (sha256_hex(req->data()) != req->sha256()) return invalid("sha256 of the upload does not match (corrupted in transit?)");
    std::string why = options_.gpu_device.empty() ? check_kernel_library(req->data()) : check_gpu_upload(req->data());
    if (!why.empty()) return invalid("upload '" + req->name() + "' is not a kernel library for this board: " + why);
    std::string id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = "m" + std::to_string(next_module_++) + "-" + req->name();
    }
    fs::path path = fs::path(lease_dir(req->lease_token())) / id;
    std::ofstream f(path, std::ios::binary);
    f.write(req->data().data(), static_cast<std::streamsize>(req->data().size()));
    if (!f.flush()) return {grpc::StatusCode::RESOURCE_EXHAUSTED, "cannot store the upload on the board"};
    reply->set_module_id(id);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* BoardService::Free(grpc::CallbackServerContext* ctx, const pb::FreeRequest* req,
                                             pb::FreeReply*) {
  return enqueue(ctx, [this, req]() -> grpc::Status {
    if (grpc::Status s = verify(req->lease_token(), /*use=*/true); !s.ok()) return s;
    if (!safe_name(req->module_id(), true)) return invalid("bad module id '" + req->module_id() + "'");
    fs::path path = fs::path(lease_dir(req->lease_token())) / req->module_id();
    if (!fs::remove(path)) return {grpc::StatusCode::NOT_FOUND, "no module " + req->module_id() + " under this lease"};
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* BoardService::Measure(grpc::CallbackServerContext* ctx, const pb::MeasureRequest* req,
                                                pb::MeasureReply* reply) {
  return enqueue(ctx, [this, req, reply]() -> grpc::Status {
    if (grpc::Status s = verify(req->lease_token(), /*use=*/true); !s.ok()) return s;
    return measure(*req, reply);
  });
}

// A GPU board takes a kernel's module (PTX, .hsaco) or a compiled model for its kind of GPU,
// which it reads as data (runtime/gpu_model/image.h).
std::string BoardService::check_gpu_upload(const std::string& data) const {
  const TargetKind kind = parse_gpu_device(options_.gpu_device).kind;
  std::string why = check_gpu_module(data, kind);
  if (why.empty() && gpu_module_kind(data) == "cubin") {
    // Machine code runs on its own architecture only: refused here with the reason, not left
    // to the driver's "no kernel image is available".
    std::string not_here = cubin_runs_on(cubin_sm(data), options_.device.gpu_arch());
    return not_here.empty() ? "" : "a cubin whose code does not run here: " + not_here + " (upload PTX, or assemble for it)";
  }
  if (why.empty() || data.compare(0, 4, "\x7f" "ELF") != 0) return why;
  GpuModelImage image;
  std::string model_why = read_gpu_model_image(data, image);
  if (!model_why.empty()) return why + " (nor a GPU model: " + model_why + ")";
  if (image.platform != kind) {
    return "a model compiled for " + std::string(kind_name(image.platform)) + " GPUs, not " + std::string(kind_name(kind));
  }
  return "";
}

grpc::Status BoardService::measure(const pb::MeasureRequest& in, pb::MeasureReply* reply) {
  if (!safe_name(in.module_id(), true)) return invalid("bad module id '" + in.module_id() + "'");
  fs::path module = fs::path(lease_dir(in.lease_token())) / in.module_id();
  if (!fs::exists(module)) return {grpc::StatusCode::NOT_FOUND, "no module " + in.module_id() + " under this lease"};
  if (in.model()) {
    // A compiled model: the runner reads its inputs and outputs from the library (on a GPU
    // board, as data: runtime/gpu_model/image.h).
    if (!in.function().empty() || !in.baseline_function().empty() || in.args_size() > 0) {
      return invalid("a model measurement names no function and no arguments: the model library describes them");
    }
    if (in.outputs() == pb::OUTPUT_VALUES) {
      return invalid("a model measurement returns its outputs' digests (OUTPUT_DIGEST), not their values");
    }
  } else if (!safe_name(in.function(), false)) {
    return invalid("function name '" + in.function() + "' is not a C identifier");
  }
  for (const pb::GpuStep& step : in.launch().then()) {
    if (!safe_name(step.function(), false)) {
      return invalid("function name '" + step.function() + "' (launch.then) is not a C identifier");
    }
  }
  fs::path baseline;
  if (!in.baseline_module_id().empty() || !in.baseline_function().empty()) {
    if (!options_.gpu_device.empty() && !in.model()) {
      return invalid("a baseline kernel is not implemented on GPU boards yet (this one is " + options_.gpu_device +
                     "); a baseline model is");
    }
    if (!safe_name(in.baseline_module_id(), true)) return invalid("bad baseline module id '" + in.baseline_module_id() + "'");
    baseline = fs::path(lease_dir(in.lease_token())) / in.baseline_module_id();
    if (!fs::exists(baseline)) return {grpc::StatusCode::NOT_FOUND, "no module " + in.baseline_module_id() + " under this lease"};
    if (!in.model() && !safe_name(in.baseline_function(), false)) {
      return invalid("baseline function name '" + in.baseline_function() + "' is not a C identifier");
    }
  }
  if (!in.model() && (in.args_size() < 1 || in.args_size() > 5)) {
    return invalid("kernels take 1 to 5 arguments, not " + std::to_string(in.args_size()));
  }
  pb::MeasureRequest req = in;
  req.set_timeout_s(effective_timeout_s(req, options_.default_timeout_s, options_.max_timeout_s));
  if (req.memory_limit_bytes() == 0) req.set_memory_limit_bytes(options_.default_memory_limit);
  // Written as !(in range), so NaN is refused too.
  if (!(req.timeout_s() > 0 && req.timeout_s() <= options_.max_timeout_s)) {
    return invalid("timeout_s " + std::to_string(req.timeout_s()) + " is not in (0, " + std::to_string(options_.max_timeout_s) + "]");
  }
  if (req.memory_limit_bytes() < (16 << 20)) return invalid("memory_limit_bytes below 16 MiB leaves no room to load a kernel");
  if (req.memory_limit_bytes() > options_.default_memory_limit) {
    return invalid("memory_limit_bytes " + std::to_string(req.memory_limit_bytes()) + " exceeds this board's limit of " +
                   std::to_string(options_.default_memory_limit));
  }
  int64_t bytes = 0, output_bytes = 0;
  for (const pb::ArgSpec& a : req.args()) {
    int64_t n = 1;
    for (int64_t d : a.shape()) {
      if (d < 1 || d > (int64_t{1} << 34) || n > (int64_t{1} << 34) / d) return invalid("argument shape dimension " + std::to_string(d) + " out of range");
      n *= d;
    }
    if (tf::arg_dtype_bytes(a.dtype()) == 0) {
      return invalid("argument dtype '" + a.dtype().substr(0, 32) +
                     "' is not one of float32, int8, uint8, int32, float16, bfloat16, bfloat16x2, float16x2");
    }
    if (!a.dtype().empty() && a.dtype() != "float32") {
      // GPU kernels take 16-bit float inputs (dtype=float16 workloads), filled as CPU boards fill them.
      const bool gpu_type = !a.is_output() && (a.dtype() == "float16" || a.dtype() == "bfloat16");
      if (!options_.gpu_device.empty() && !gpu_type)
        return invalid("argument dtype " + a.dtype() + " is for CPU kernels; this board runs " + options_.gpu_device);
      // Packing moves whole 4-byte elements (runtime/pack_layout.h): int32 quads of int8 weights.
      if ((a.pack_block() != 0 || a.pack_dim() != 0) && tf::arg_dtype_bytes(a.dtype()) != 4)
        return invalid("an argument of dtype " + a.dtype() + " cannot be packed (only 4-byte elements can)");
    }
    if (a.pack_block() != 0 || a.pack_dim() != 0) {
      if (a.is_output()) return invalid("an output cannot be packed (pack_block " + std::to_string(a.pack_block()) + ")");
      if (!options_.gpu_device.empty()) return invalid("packed inputs are for CPU kernels; this board runs " + options_.gpu_device);
      if (a.pack_block() < 1 || a.pack_block() > kMaxPackBlock) {
        return invalid("pack_block " + std::to_string(a.pack_block()) + " is not in [1, " + std::to_string(kMaxPackBlock) + "]");
      }
      if (a.pack_dim() < 0 || a.pack_dim() >= a.shape_size()) {
        return invalid("pack_dim " + std::to_string(a.pack_dim()) + " is not a dimension of a rank-" + std::to_string(a.shape_size()) + " argument");
      }
      // (Past its end, the packed dimension grows by less than a block: no overflow.)
      n = packed_elements({a.shape().begin(), a.shape().end()}, static_cast<size_t>(a.pack_dim()), a.pack_block());
    }
    if (a.min_elements() < 0 || a.min_elements() > (int64_t{1} << 34)) return invalid("min_elements " + std::to_string(a.min_elements()) + " is out of range");
    if (a.min_elements() > 0 && a.is_output()) return invalid("min_elements is for inputs");
    n = std::max(n, a.min_elements());
    bytes += n * 4;
    if (a.is_output()) output_bytes += n * 4;
  }
  if (!baseline.empty()) bytes += output_bytes;  // the baseline writes outputs of its own
  if (bytes > req.memory_limit_bytes()) {
    return invalid("arguments need " + std::to_string(bytes) + " bytes, over the memory limit of " +
                   std::to_string(req.memory_limit_bytes()));
  }
  if (req.outputs() == pb::OUTPUT_VALUES && output_bytes > options_.max_output_value_bytes) {
    return invalid("outputs of " + std::to_string(output_bytes) + " bytes exceed the cap of " +
                   std::to_string(options_.max_output_value_bytes) + " for OUTPUT_VALUES; ask for OUTPUT_DIGEST");
  }
  if (req.number() < 1 || req.number() > kMaxNumber) return invalid("number " + std::to_string(req.number()) + " is not in [1, 2^24]");
  if (req.repeat() < 1 || req.repeat() > kMaxRepeat) return invalid("repeat " + std::to_string(req.repeat()) + " is not in [1, 10000]");
  struct Bounded {
    const char* name;
    double value, max;
  };
  for (const Bounded& b : {Bounded{"min_repeat_ms", req.min_repeat_ms(), kMaxMs},
                           Bounded{"cooldown_ms", req.cooldown_ms(), kMaxMs},
                           Bounded{"cut_slower_than_s", req.cut_slower_than_s(), kMaxMs / 1e3},
                           Bounded{"min_warmup_ms", req.min_warmup_ms(), kMaxMs},
                           Bounded{"rewarm_ms", req.rewarm_ms(), kMaxMs}}) {
    if (!(b.value >= 0 && b.value <= b.max)) {  // NaN fails too
      return invalid(std::string(b.name) + " " + std::to_string(b.value) + " is not in [0, " +
                     std::to_string(static_cast<int64_t>(b.max)) + "]");
    }
  }
  if (!options_.gpu_device.empty() && !req.model()) {
    if (std::string why = check_gpu_launch(req.launch()); !why.empty()) {
      return invalid("this is a GPU board (" + options_.gpu_device + "): " + why);
    }
  }
  auto on_start = [this](pid_t pid) {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = pid;
    if (pid > 0 && stopping_) kill(-pid, SIGKILL);  // shutdown began while it started
  };
  if (!options_.gpu_device.empty() && options_.gpu_measuring_process) {
    if (!gpu_process_) gpu_process_ = std::make_unique<MeasuringProcess>(runner_command(options_), options_.gpu_device);
    *reply = gpu_process_->measure(module.string(), baseline.string(), req, req.timeout_s(),
                                   lease_dir(req.lease_token()), on_start);
  } else {
    std::vector<std::string> flags;
    if (!options_.runner_prefix.empty()) flags.push_back("--emulated");
    if (!options_.gpu_device.empty()) flags.push_back("--device=" + options_.gpu_device);
    if (!baseline.empty()) flags.push_back("--baseline=" + baseline.string());
    *reply = run_isolated(runner_command(options_), module.string(), req, req.timeout_s(), on_start, flags);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return {grpc::StatusCode::UNAVAILABLE, "board shutting down: the measurement was stopped"};
  return grpc::Status::OK;
}

}  // namespace tf::farm
