#include "tuner/farm_runner.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "compiler/target.h"
#include "runtime/gpu_model/image.h"
#include "runtime/gpu_runtime.h"
#include "runtime/kernel_library.h"
#include "runtime/measure_limits.h"
#include "runtime/model_abi.h"

namespace tf {

namespace pb = tunefarm::v1;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// How often leases are renewed, and for how long.
constexpr int64_t kRenewEveryMs = 20000;
constexpr int64_t kLeaseMs = 90000;

}  // namespace

FarmRunner::FarmRunner(FarmRunnerOptions o) : opts_(std::move(o)), client_(opts_.farm) {
  if (opts_.boards < 1) throw UserError(str("--boards ", opts_.boards, " must be at least 1"));
  renewer_ = std::thread([this] { renew_loop(); });
}

FarmRunner::~FarmRunner() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  renew_cv_.notify_all();
  renewer_.join();
  // Slots release their leases as they go.
}

std::string FarmRunner::connect(const std::string& expected_arch) {
  lease_more(true, expected_arch);
  return board_target();
}

bool FarmRunner::overlaps_builds() const {
  const std::string t = board_target();  // canonical: parse_target read it at the lease
  return !t.empty() && parse_target(t).is_gpu();
}

std::string FarmRunner::board_target() const {
  std::lock_guard<std::mutex> l(mu_);
  return target_;
}

void FarmRunner::renew_loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    renew_cv_.wait_for(l, std::chrono::milliseconds(kRenewEveryMs));
    if (stop_) break;
    for (auto& s : slots_) {
      if (s->lost) continue;
      try {
        s->board->renew(kLeaseMs);
      } catch (const farm::FarmError&) {
        // A lost board shows itself at its next call; the measurement path handles it.
      }
    }
  }
}

// Leases boards until there are opts_.boards; the first waits (must_get_one), the others
// are taken only when free now. Each new board's architecture must be the kernels'.
void FarmRunner::lease_more(bool must_get_one, const std::string& kernel_arch) {
  while (true) {
    size_t have;
    {
      std::lock_guard<std::mutex> l(mu_);
      have = slots_.size();
    }
    if (have >= static_cast<size_t>(opts_.boards)) return;
    bool waiting = must_get_one && have == 0;
    std::unique_ptr<farm::LeasedBoard> b;
    try {
      b = client_.lease(opts_.key, opts_.user, opts_.priority, waiting ? opts_.wait_ms : 0, kLeaseMs,
                        opts_.wait_for_boards, opts_.stop);
    } catch (const farm::FarmError& e) {
      if (waiting || e.code() != grpc::StatusCode::DEADLINE_EXCEEDED) throw;
      return;  // no more free boards now
    }
    auto slot = std::make_unique<Slot>();
    std::string t = b->lease().target();
    // "native" means the board's CPU, which only the board can name: resolved here it would
    // be this machine's.
    if (t.find("native") != std::string::npos) {
      throw farm::FarmError("board " + b->lease().board_id() + " of key '" + opts_.key + "' registered the target '" + t +
                                "', which only the board can resolve; start it with a concrete --target (e.g. "
                                "'llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72')",
                            grpc::StatusCode::INVALID_ARGUMENT);
    }
    std::string board_arch = "unknown";
    try {
      Target parsed = parse_target(t);
      slot->target = parsed.str();
      board_arch = parsed.arch_name();
    } catch (const UserError&) {
      slot->target = t;  // a target this build cannot parse: kept as the board says
    }
    if (!kernel_arch.empty() && board_arch != kernel_arch) {
      throw farm::FarmError("board " + b->lease().board_id() + " of key '" + opts_.key + "' is " + board_arch +
                                " (target " + t + "), but the kernels are built for " + kernel_arch,
                            grpc::StatusCode::INVALID_ARGUMENT);
    }
    slot->board = std::move(b);
    std::lock_guard<std::mutex> l(mu_);
    if (target_.empty()) target_ = slot->target;
    slots_.push_back(std::move(slot));
  }
}

std::optional<pb::GpuLaunch> launch_from_sidecar(const nlohmann::json& sidecar) {
  if (!sidecar.is_object() || !sidecar.contains("launch")) return std::nullopt;
  const nlohmann::json& l = sidecar["launch"];
  if (!l.is_object()) throw UserError("kernel description: launch is not an object");
  auto dims = [](const nlohmann::json& k, const char* name, const std::string& where) {
    if (!k.contains(name) || !k[name].is_array() || k[name].size() != 3) {
      throw UserError(str("kernel description: ", where, name, " is not three sizes"));
    }
    std::vector<int64_t> v;
    for (const nlohmann::json& x : k[name]) {
      if (!x.is_number_integer() || x.get<int64_t>() < 1) {
        throw UserError(str("kernel description: ", where, name, " holds ", x.dump(), ", not a size of at least 1"));
      }
      v.push_back(x.get<int64_t>());
    }
    return v;
  };
  auto shared = [](const nlohmann::json& k) -> int64_t {
    return k.contains("dynamic_shared_bytes") && k["dynamic_shared_bytes"].is_number_integer()
               ? k["dynamic_shared_bytes"].get<int64_t>()
               : 0;
  };
  pb::GpuLaunch out;
  for (int64_t g : dims(l, "grid", "launch.")) out.add_grid(g);
  for (int64_t b : dims(l, "block", "launch.")) out.add_block(b);
  out.set_dynamic_shared_bytes(shared(l));
  // The kernels the same call launches after the first, and the workspaces they share.
  if (l.contains("then")) {
    if (!l["then"].is_array()) throw UserError("kernel description: launch.then is not a list of kernels");
    for (size_t i = 0; i < l["then"].size(); ++i) {
      const nlohmann::json& k = l["then"][i];
      std::string where = str("launch.then[", i, "].");
      if (!k.is_object() || !k.contains("function") || !k["function"].is_string()) {
        throw UserError(str("kernel description: ", where, "function is not a name"));
      }
      pb::GpuStep* step = out.add_then();
      step->set_function(k["function"].get<std::string>());
      for (int64_t g : dims(k, "grid", where)) step->add_grid(g);
      for (int64_t b : dims(k, "block", where)) step->add_block(b);
      step->set_dynamic_shared_bytes(shared(k));
    }
  }
  if (l.contains("workspace_elements")) {
    if (!l["workspace_elements"].is_array()) throw UserError("kernel description: launch.workspace_elements is not a list");
    for (const nlohmann::json& n : l["workspace_elements"]) {
      if (!n.is_number_integer() || n.get<int64_t>() < 1) {
        throw UserError(str("kernel description: launch.workspace_elements holds ", n.dump(), ", not a size of at least 1"));
      }
      out.add_workspace_elements(n.get<int64_t>());
    }
  }
  if (std::string why = farm::check_gpu_launch(out); !why.empty()) throw UserError("kernel description: " + why);
  return out;
}

namespace {

// Uploads `data` (and the baseline's) to `board`, refusing a library of another
// architecture than the board's; times `req` on them; frees them. The request's baseline
// module id is filled in.
pb::MeasureReply upload_and_measure(farm::LeasedBoard& board, const std::string& data, const std::string& name,
                                    const FarmRunner::Baseline* baseline, pb::MeasureRequest req, const char* what,
                                    double& upload_s) {
  std::string board_arch;
  std::optional<TargetKind> board_gpu;
  try {
    Target t = parse_target(board.lease().target());
    board_arch = t.arch_name();
    if (t.is_gpu()) board_gpu = t.kind;
  } catch (const UserError&) {
    board_arch = "";
  }
  auto check_arch = [&](const std::string& lib, const std::string& lib_name) {
    if (req.model() && board_gpu) {
      // A GPU board reads a compiled model as data: what counts is the GPU it was compiled for.
      GpuModelImage image;
      std::string why = read_gpu_model_image(lib, image);
      if (why.empty() && image.platform == board_gpu) return;
      throw farm::FarmError(std::string(what) + " " + lib_name + " is " +
                                (why.empty() ? "compiled for " + std::string(kind_name(image.platform)) + " GPUs" : why) +
                                ", but board " + board.lease().board_id() + " is a " + std::string(kind_name(*board_gpu)) +
                                " GPU (target " + board.lease().target() +
                                "): compile --model -t '" + board.lease().target() + "'",
                            grpc::StatusCode::INVALID_ARGUMENT);
    }
    std::string arch = kernel_library_arch(lib);
    if (!board_arch.empty() && arch != board_arch) {
      throw farm::FarmError(std::string(what) + " " + lib_name + " is built for " +
                                (arch.empty() ? "no known architecture" : arch) + ", but board " +
                                board.lease().board_id() + " is " + board_arch + " (target " + board.lease().target() + ")",
                            grpc::StatusCode::INVALID_ARGUMENT);
    }
  };
  check_arch(data, name);
  if (baseline) check_arch(baseline->data, baseline->name);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> modules{board.upload(data, name)};
  if (baseline) {
    modules.push_back(board.upload(baseline->data, baseline->name == name ? "baseline-" + name : baseline->name));
    req.set_baseline_module_id(modules.back());
  }
  upload_s = seconds_since(t0);
  pb::MeasureReply reply = board.measure(req, modules[0]);
  for (const std::string& m : modules) {
    try {
      board.free(m);
    } catch (const farm::FarmError&) {
      // The board removes modules with the lease anyway.
    }
  }
  return reply;
}

// Whether `board` runs the cubin `code` that a ptxas of `cuda_version` assembled: its GPU's
// architecture, and a driver of that CUDA major version or newer (compiler/ptxas.h).
bool board_runs_cubin(const std::string& code, int cuda_version, const farm::LeasedBoard& board) {
  const pb::DeviceInfo& d = board.lease().device();
  return cubin_runs_on(cubin_sm(code), d.gpu_arch()).empty() && cuda_version > 0 &&
         d.gpu_driver_version() / 1000 >= cuda_version / 1000;
}

void set_board(RunResult& r, farm::LeasedBoard& board) {
  r.board_id = board.lease().board_id();
  r.device_model = board.lease().device().cpu_model();
  r.board_target = board.lease().target();
}

}  // namespace

RunResult FarmRunner::measure_on(farm::LeasedBoard& board, MeasureContext& ctx, const std::string& data,
                                 const std::string& name, const std::string& function, std::mutex* ctx_mu,
                                 const pb::GpuLaunch* launch, const Baseline* baseline, const nlohmann::json& sidecar) {
  pb::MeasureRequest req = ctx.request(function);
  if (launch) *req.mutable_launch() = *launch;
  set_packed_inputs(req, sidecar, baseline ? baseline->sidecar : nlohmann::json());
  if (baseline) req.set_baseline_function(baseline->function);
  double upload_s = 0;
  pb::MeasureReply reply = upload_and_measure(board, data, name, baseline, req, "kernel library", upload_s);
  RunResult r;
  if (ctx_mu) {
    std::lock_guard<std::mutex> l(*ctx_mu);
    r = ctx.finish(reply);
  } else {
    r = ctx.finish(reply);
  }
  r.upload_s = upload_s;
  set_board(r, board);
  return r;
}

RunResult FarmRunner::measure_model_on(farm::LeasedBoard& board, const std::string& data, const std::string& name,
                                       const Baseline* baseline, const MeasureOptions* o) {
  pb::MeasureRequest req = model_request(o && o->timeout_s > 0 ? o->timeout_s : board.info().max_timeout_s(), o);
  double upload_s = 0;
  RunResult r = result_of(upload_and_measure(board, data, name, baseline, req, "model library", upload_s));
  r.upload_s = upload_s;
  set_board(r, board);
  return r;
}

RunResult FarmRunner::time_model(const std::string& so_path, const std::string& baseline_so) {
  std::string data = read_all(so_path);
  // Not called while run() is (the boards' threads hold slots only there).
  auto first_live = [this]() -> Slot* {
    std::lock_guard<std::mutex> l(mu_);
    slots_.erase(std::remove_if(slots_.begin(), slots_.end(), [](const auto& s) { return s->lost.load(); }), slots_.end());
    return slots_.empty() ? nullptr : slots_.front().get();
  };
  Slot* slot = first_live();
  if (!slot) {
    lease_more(true, kernel_library_arch(data));
    slot = first_live();
    if (!slot) throw farm::FarmError("no board of key '" + opts_.key + "' to time the model on", grpc::StatusCode::UNAVAILABLE);
  }
  std::optional<Baseline> base;
  if (!baseline_so.empty()) base = Baseline{read_all(baseline_so), std::filesystem::path(baseline_so).filename().string(), ""};
  try {
    return measure_model_on(*slot->board, data, std::filesystem::path(so_path).filename().string(),
                            base ? &*base : nullptr);
  } catch (const farm::FarmError& e) {
    if (!e.board_lost()) throw;
    slot->board->report_lost(e.what());
    if (on_board_lost) on_board_lost(slot->board->lease().board_id(), e.what());
    slot->lost = true;
    RunResult r;
    r.error = pb::BOARD_LOST;
    r.error_msg = e.what();
    return r;
  }
}

std::vector<RunResult> FarmRunner::run(MeasureContext& ctx, const std::vector<BuildResult>& builds) {
  std::vector<RunResult> out(builds.size());
  std::string kernel_arch;
  std::deque<size_t> queue;
  std::vector<int> losses(builds.size(), 0);
  for (size_t i = 0; i < builds.size(); ++i) {
    if (!builds[i].ok()) {
      out[i].error = pb::COMPILE_ERROR;
      out[i].error_msg = builds[i].error_msg;
      continue;
    }
    if (kernel_arch.empty()) kernel_arch = kernel_library_arch(read_all(builds[i].so_path));
    queue.push_back(i);
  }
  if (queue.empty()) return out;
  lease_more(true, kernel_arch);

  std::mutex qmu;
  std::exception_ptr fatal;
  std::mutex ctx_mu;  // MeasureContext's reference cache is not thread-safe
  auto worker = [&](Slot* slot) {
    while (true) {
      size_t i;
      {
        std::lock_guard<std::mutex> l(qmu);
        if (queue.empty() || fatal) return;
        i = queue.front();
        queue.pop_front();
      }
      // A CUDA kernel's machine code where the board runs it (no JIT there), else its PTX or
      // library.
      std::string data;
      if (!builds[i].cubin_path.empty()) data = read_all(builds[i].cubin_path);
      const bool cubin = !data.empty() && board_runs_cubin(data, builds[i].cubin_cuda_version, *slot->board);
      if (!cubin) data = read_all(builds[i].so_path);
      // The sidecar, read once where it is needed: a GPU kernel's launch (without one it cannot
      // run), inputs passed packed. A sidecar it cannot use is a result, not an exception: this
      // is a worker thread.
      const std::optional<TargetKind> arch_kind = parse_target_kind(kernel_arch);
      const bool gpu = arch_kind && kind_info(*arch_kind).gpu;
      const nlohmann::json side = gpu || !ctx.graph().prepacked.empty() ? read_sidecar_json(builds[i].so_path) : nullptr;
      std::optional<pb::GpuLaunch> launch;
      if (gpu) {
        try {
          launch = launch_from_sidecar(side);
        } catch (const UserError& e) {
          out[i].error_msg = e.what();
        }
        if (!launch) {
          out[i].error = pb::LOAD_ERROR;
          if (out[i].error_msg.empty()) out[i].error_msg = "GPU kernel " + builds[i].so_path + " has no launch in its sidecar";
          continue;
        }
      }
      try {
        std::string name = std::filesystem::path(builds[i].so_path).filename().string();
        RunResult r = measure_on(*slot->board, ctx, data, name, ctx.graph().workload.op, &ctx_mu,
                                 launch ? &*launch : nullptr, nullptr, side);
        r.board_target = slot->target;
        r.cubin = cubin;
        out[i] = std::move(r);
      } catch (const UserError& e) {
        out[i].error = pb::LOAD_ERROR;
        out[i].error_msg = e.what();
      } catch (const farm::FarmError& e) {
        if (!e.board_lost()) {
          std::lock_guard<std::mutex> l(qmu);
          if (!fatal) fatal = std::current_exception();
          return;
        }
        slot->board->report_lost(e.what());
        if (on_board_lost) {
          std::lock_guard<std::mutex> l(qmu);
          on_board_lost(slot->board->lease().board_id(), e.what());
        }
        std::lock_guard<std::mutex> l(qmu);
        if (++losses[i] > opts_.retries) {
          out[i].error = pb::BOARD_LOST;
          out[i].error_msg = e.what();
        } else {
          queue.push_front(i);
        }
        slot->lost = true;  // this board is done for
        return;
      }
    }
  };

  while (true) {
    std::vector<Slot*> live;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& s : slots_) live.push_back(s.get());
    }
    std::vector<std::thread> threads;
    for (Slot* s : live) threads.emplace_back(worker, s);
    for (std::thread& t : threads) t.join();
    {
      std::lock_guard<std::mutex> l(mu_);
      slots_.erase(std::remove_if(slots_.begin(), slots_.end(), [](const auto& s) { return s->lost.load(); }), slots_.end());
    }
    if (fatal) std::rethrow_exception(fatal);
    if (queue.empty()) break;
    // Every board was lost with work left: lease replacements (waiting for the first). When
    // none comes, the rest of the batch is BOARD_LOST, so what was measured still returns.
    try {
      lease_more(true, kernel_arch);
    } catch (const farm::FarmError& e) {
      if (e.code() != grpc::StatusCode::DEADLINE_EXCEEDED && e.code() != grpc::StatusCode::UNAVAILABLE &&
          e.code() != grpc::StatusCode::NOT_FOUND) {
        throw;
      }
      for (size_t i : queue) {
        out[i].error = pb::BOARD_LOST;
        out[i].error_msg = std::string("no board of key '") + opts_.key + "' left to measure it: " + e.what();
      }
      queue.clear();
      return out;
    }
  }
  // Take boards that became free since, for the next batch.
  lease_more(false, kernel_arch);
  return out;
}

}  // namespace tf
