// tunefarm-board-runner: measures one kernel in a process of its own.
//
//   tunefarm-board-runner MODULE SERVER_PID [--emulated | --device=cuda:N | --device=rocm:N]
//       [--baseline=MODULE2] < MeasureRequest (binary protobuf) > MeasureReply
//   tunefarm-board-runner --serve SERVER_PID --device=cuda:N|rocm:N
//       < RunnerJob, RunnerJob, ... > MeasureReply, MeasureReply, ... (each length-prefixed)
//   tunefarm-board-runner --probe cuda:N|rocm:N     prints the GPU as JSON, or why it cannot
//
// --serve is a GPU board's measuring process: it opens the device once (one context, one PTX
// JIT setup) and measures job after job, each module loaded for its job and unloaded after,
// its device memory freed; the limits and promises below hold per job (the CPU-time cap is
// re-armed for each). After any reply that is not OK it ends: a fault poisons a context for
// good, and the board starts a fresh process for the next job (rpc_server/board_service.h).
// CPU boards start a runner per measurement: their kernels run on the host, and nothing of
// one may reach the next.
//
// The rpc_server starts one per measurement, in a process group of its own. The runner first
// ties its life to the server's (it is killed when the server dies, and its CPU time is
// capped from timeout_s, so a hanging kernel never outlives a crashed board), checks the
// library is a complete ELF shared object for this machine, limits its own address space
// (memory_limit_bytes) and core dumps, enters the sandbox (runtime/sandbox.h), then loads
// the library; whatever the kernel does to this process — crash, hang, exhaust memory — the
// server survives and classifies it (see isolated_runner.h). Exit status 0 whenever a reply
// was written.
//
// On a GPU board (--device) MODULE is PTX or a .hsaco code object, which the vendor's driver
// loads (runtime/gpu_runtime.h); no uploaded code runs on the host CPU. The runner then keeps
// the process group, no_new_privs, the CPU-time and core limits, but not the address-space
// limit (drivers reserve terabytes of virtual addresses), Landlock or seccomp (drivers open
// device files and issue ioctls those layers refuse).
//
// --baseline=MODULE2 (CPU only): a second library, checked, allowed by the sandbox and loaded
// like the first; its function (the request's baseline_function) is timed on the same inputs
// (outputs of its own), interleaved with the kernel's samples (runtime/kernel_library.h
// time_kernels).
//
// A request with `model` set (CPU only): MODULE (and MODULE2) is a compiled model, called
// through its C ABI (runtime/model_abi.h) on inputs made from its own description.
#include <google/protobuf/util/json_util.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>

#include "base/bfloat16.h"
#include "base/float16.h"
#include "base/hash.h"
#include "proto/message_limits.h"
#include "proto/tunefarm.pb.h"
#include "runtime/gpu_model/image.h"
#include "runtime/child_process.h"
#include "runtime/gpu_runtime.h"
#include "runtime/kernel_library.h"
#include "runtime/measure_limits.h"
#include "runtime/model_abi.h"
#include "runtime/pack_layout.h"
#include "runtime/sandbox.h"

namespace pb = tunefarm::v1;

namespace {

// Writes the reply on stdout (one-shot runner); the exit status.
int reply_and_exit(const pb::MeasureReply& reply) {
  std::string out;
  reply.SerializeToString(&out);
  return tf::write_all(1, out) ? 0 : 3;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

pb::MeasureReply failure_reply(pb::ErrorCode code, const std::string& msg) {
  pb::MeasureReply r;
  r.set_error(code);
  r.set_error_msg(msg);
  return r;
}

// An output as the reply describes it: its bytes (the digest's), its values (sum, L2).
struct OutputView {
  const void* data;
  int64_t elements;
  tf::ModelDType dtype;
  double value(int64_t i) const {
    switch (dtype) {
      case tf::ModelDType::I64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
      case tf::ModelDType::Bool: return static_cast<const uint8_t*>(data)[i];
      case tf::ModelDType::F16:
        return tf::f16_value(static_cast<const uint16_t*>(data)[i]);
      case tf::ModelDType::BF16:
        return tf::bf16_value(static_cast<const uint16_t*>(data)[i]);
      default: return static_cast<const float*>(data)[i];
    }
  }
  size_t bytes() const { return static_cast<size_t>(elements * tf::model_dtype_bytes(dtype)); }
};

// A compiled model (req.model()) and its baseline, if any: inputs and outputs from the
// library, the inputs filled as make_model_buffers says; the baseline must take and give the
// same, and runs on the model's inputs with outputs of its own. Lives until the reply is
// written (the views point into its buffers).
struct ModelRun {
  std::unique_ptr<tf::ModelAbi> model, baseline;
  tf::ModelBuffers bufs, base_bufs;

  // "" or why the libraries cannot be timed (a LOAD_ERROR).
  std::string load(const std::string& path, const std::string& baseline_path, uint64_t seed) {
    try {
      model = std::make_unique<tf::ModelAbi>(path);
      if (!baseline_path.empty()) baseline = std::make_unique<tf::ModelAbi>(baseline_path);
    } catch (const tf::ModelLoadError& e) {
      return e.what();
    }
    if (baseline) {
      if (std::string why = tf::model_signature_mismatch(*model, *baseline); !why.empty()) return "baseline model " + why;
    }
    bufs = tf::make_model_buffers(*model, seed);
    if (baseline) base_bufs = tf::make_model_buffers(*baseline, seed);
    return "";
  }

  // The model's timing, then the baseline's when there is one.
  std::vector<tf::TimingResult> time(const tf::TimingOptions& o) {
    std::vector<tf::TimedCall> calls{[this] { return model->run(bufs.input_ptrs.data(), bufs.output_ptrs.data()); }};
    if (baseline) {
      calls.push_back([this] { return baseline->run(bufs.input_ptrs.data(), base_bufs.output_ptrs.data()); });
    }
    return tf::time_calls(calls, o);
  }

  std::vector<OutputView> outputs() const {
    std::vector<OutputView> v;
    for (size_t i = 0; i < model->outputs().size(); ++i) {
      v.push_back({bufs.output_ptrs[i], model->outputs()[i].elements(), model->outputs()[i].dtype});
    }
    return v;
  }
};

// A GPU model's tensors as the model ABI describes them (a shape of their element count: the
// image keeps no dimensions).
std::vector<tf::ModelTensor> model_tensors(const std::vector<tf::GpuModelImage::Tensor>& ts) {
  std::vector<tf::ModelTensor> out;
  for (const tf::GpuModelImage::Tensor& t : ts) out.push_back({"", {t.elements}, static_cast<tf::ModelDType>(t.dtype)});
  return out;
}

// A GPU model's inputs as make_model_buffers fills a CPU model's: the same seeds, the same
// values.
std::vector<std::string> gpu_model_inputs(const tf::GpuModelImage& m, uint64_t seed) {
  std::vector<tf::ModelTensor> ins = model_tensors(m.inputs);
  tf::ModelBuffers b = tf::make_model_buffers(ins, {}, seed);
  std::vector<std::string> bytes;
  for (size_t k = 0; k < ins.size(); ++k)
    bytes.emplace_back(static_cast<const char*>(b.input_ptrs[k]), static_cast<size_t>(ins[k].bytes()));
  return bytes;
}

}  // namespace

// --probe DEVICE: the board asks what GPU it has before it registers. Prints a GpuProbe as
// JSON; exit status 1 when the device cannot be used.
int probe(const std::string& device) {
  pb::GpuProbe p;
  try {
    std::unique_ptr<tf::GpuRuntime> rt = tf::open_gpu_runtime(device);
    const tf::GpuDeviceInfo& i = rt->info();
    p.set_name(i.name);
    p.set_memory_bytes(i.memory_bytes);
    p.set_arch(i.arch);
    p.set_target(i.target());
    p.set_key(i.key());
    p.set_devices(i.devices);
    p.set_driver_version(i.driver_version);
  } catch (const std::exception& e) {
    p.set_error(e.what());
  }
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(p, &json);
  std::printf("%s\n", json.c_str());
  return p.error().empty() ? 0 : 1;
}

namespace {

// The runner's arguments (see the top of this file).
struct RunnerArgs {
  std::string module, device, baseline;
  bool emulated = false;
  bool serve = false;  // --serve: a GPU board's measuring process
  pid_t server = 0;
};

// A refusal or failure the reply reports: thrown by the parts below, answered by main.
struct Failure {
  pb::ErrorCode code;
  std::string msg;
};

[[noreturn]] void refuse(pb::ErrorCode code, std::string msg) { throw Failure{code, std::move(msg)}; }

// What a measurement gives the reply: the kernel's (or model's) timing, the baseline's
// samples, and the outputs to describe.
struct Measured {
  tf::TimingResult t;
  std::vector<double> base_samples;
  int base_number = 0;
  std::vector<OutputView> views;
  double load_s = 0;  // loading the module(s): MeasureReply.load_s
};

// The arguments, or nullopt after printing the usage.
std::optional<RunnerArgs> parse_args(int argc, char** argv) {
  // --emulated: started through a user-mode emulator (the board's --runner-prefix), which
  // cannot install a seccomp filter for its guest; see runtime/sandbox.h.
  RunnerArgs a;
  bool usage = argc < 3;
  for (int i = 3; i < argc; ++i) {
    std::string f = argv[i];
    if (f == "--emulated") {
      a.emulated = true;
    } else if (f.rfind("--device=", 0) == 0) {
      a.device = f.substr(9);
    } else if (f.rfind("--baseline=", 0) == 0 && f.size() > 11) {
      a.baseline = f.substr(11);
    } else {
      usage = true;
    }
  }
  a.serve = argc >= 2 && std::string(argv[1]) == "--serve";
  if (a.serve && (a.device.empty() || !a.baseline.empty())) usage = true;
  if (usage || (a.emulated && !a.device.empty())) {
    std::fprintf(stderr, "usage: %s MODULE SERVER_PID [--emulated | --device=cuda:N|rocm:N] [--baseline=MODULE2] < request\n"
                         "       %s --serve SERVER_PID --device=cuda:N|rocm:N   < framed RunnerJobs > framed replies\n"
                         "       %s --probe cuda:N|rocm:N\n", argv[0], argv[0], argv[0]);
    return std::nullopt;
  }
  if (!a.serve) a.module = argv[1];
  a.server = static_cast<pid_t>(std::atol(argv[2]));
  return a;
}

// The uploaded module (and baseline), read and checked before the address-space limit:
// reading a library must not count against the kernel's memory (a large library under a small
// limit would read as a crash). A GPU board reads a compiled model as data (`gpu_model`,
// `gpu_baseline`: runtime/gpu_model/image.h), a kernel's PTX or code object into `gpu_module`;
// its host code never runs here. Returns the files the sandbox lets the runner map.
std::vector<std::string> check_modules(const RunnerArgs& a, const pb::MeasureRequest& req, tf::GpuModelImage& gpu_model,
                                       tf::GpuModelImage& gpu_baseline, std::string& gpu_module) {
  if (!a.device.empty() && !a.baseline.empty() && !req.model())
    refuse(pb::LOAD_ERROR, "a baseline kernel is not implemented on GPU boards yet");
  std::string data = read_file(a.module);
  if (!a.device.empty()) {
    tf::TargetKind kind;
    try {
      kind = tf::parse_gpu_device(a.device).kind;
    } catch (const std::exception& e) {
      refuse(pb::LOAD_ERROR, e.what());
    }
    if (!req.model()) {
      if (std::string why = tf::check_gpu_module(data, kind); !why.empty())
        refuse(pb::LOAD_ERROR, "module " + a.module + " is " + why);
      gpu_module = std::move(data);
      return {a.module};
    }
    for (auto [path, image] : {std::pair{a.module, &gpu_model}, std::pair{a.baseline, &gpu_baseline}}) {
      if (path.empty()) continue;
      const char* what = image == &gpu_model ? "model " : "baseline model ";
      std::string bytes = image == &gpu_model ? std::move(data) : read_file(path);
      if (std::string why = tf::read_gpu_model_image(bytes, *image); !why.empty())
        refuse(pb::LOAD_ERROR, what + path + " is " + why);
      if (image->platform != kind) {
        refuse(pb::LOAD_ERROR, what + path + " was compiled for " + std::string(tf::kind_name(image->platform)) +
                                   " GPUs; this board is " + a.device);
      }
    }
    return {a.module};
  }
  if (std::string why = tf::check_kernel_library(data); !why.empty())
    refuse(pb::LOAD_ERROR, "kernel library " + a.module + " is " + why);
  std::vector<std::string> modules{a.module};
  if (!a.baseline.empty()) {
    if (std::string why = tf::check_kernel_library(read_file(a.baseline)); !why.empty())
      refuse(pb::LOAD_ERROR, "baseline library " + a.baseline + " is " + why);
    modules.push_back(a.baseline);
  }
  return modules;
}

// CPU seconds for every core for the whole of the request's time limit.
rlim_t cpu_budget_s(const pb::MeasureRequest& req) {
  return static_cast<rlim_t>(req.timeout_s() * std::max(1u, std::thread::hardware_concurrency()) + 10);
}

// No core dumps; CPU seconds for every core for the whole limit (a backstop to the server's
// wall-clock kill); the address space (CPU boards); then the sandbox (CPU boards) or
// no_new_privs (GPU boards, whose drivers the sandbox would stop).
void limit_and_enter_sandbox(const RunnerArgs& a, const pb::MeasureRequest& req, const std::vector<std::string>& modules) {
  rlimit core{0, 0};
  setrlimit(RLIMIT_CORE, &core);
  if (req.timeout_s() > 0) {
    const rlim_t cpu = cpu_budget_s(req);
    rlimit lim{cpu, cpu};
    setrlimit(RLIMIT_CPU, &lim);
  }
  if (req.memory_limit_bytes() > 0 && a.device.empty()) {
    rlimit as{static_cast<rlim_t>(req.memory_limit_bytes()), static_cast<rlim_t>(req.memory_limit_bytes())};
    setrlimit(RLIMIT_AS, &as);
  }
  if (!a.device.empty()) {
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  } else if (std::string err = tf::farm::enter_sandbox(modules, !a.emulated); !err.empty()) {
    refuse(pb::RUNTIME_ERROR, "runner: cannot enter the sandbox: " + err);
  }
}

// A kernel's buffers: inputs filled from the seed (packed where the request says), outputs
// zero; `outputs` gets the outputs' indices.
std::vector<std::vector<float>> kernel_buffers(const pb::MeasureRequest& req, std::vector<size_t>& outputs) {
  std::vector<std::vector<float>> bufs;
  for (int i = 0; i < req.args_size(); ++i) {
    const pb::ArgSpec& a = req.args(i);
    int64_t n = 1;
    for (int64_t d : a.shape()) n *= d;
    bufs.emplace_back(static_cast<size_t>(n));
    if (a.is_output()) {
      outputs.push_back(static_cast<size_t>(i));
    } else {
      tf::fill_typed(a.dtype(), bufs.back().data(), n, req.seed() + static_cast<uint64_t>(i));
      tf::store_as(a.dtype(), bufs.back().data(), n);
    }
    if (a.pack_block() > 0) {  // checked by the board: an input, pack_dim in range
      std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
      bufs.back() = tf::pack_layout(bufs.back(), shape, static_cast<size_t>(a.pack_dim()), a.pack_block());
    }
    if (bufs.back().size() < static_cast<size_t>(a.min_elements())) bufs.back().resize(static_cast<size_t>(a.min_elements()));
  }
  return bufs;
}

// A compiled model on a GPU board, read as data, through the driver; its outputs land in
// `gpu_outputs`, which the views point into.
Measured time_gpu_model(const RunnerArgs& a, const pb::MeasureRequest& req, tf::GpuRuntime& rt,
                        const tf::GpuModelImage& gpu_model, const tf::GpuModelImage& gpu_baseline,
                        const tf::TimingOptions& o, std::vector<std::vector<std::string>>& gpu_outputs) {
  std::vector<const tf::GpuModelImage*> images{&gpu_model};
  if (!a.baseline.empty()) {
    if (std::string why = tf::model_signature_mismatch(model_tensors(gpu_model.inputs), model_tensors(gpu_model.outputs),
                                                       model_tensors(gpu_baseline.inputs),
                                                       model_tensors(gpu_baseline.outputs), a.module, a.baseline);
        !why.empty())
      refuse(pb::LOAD_ERROR, "baseline model " + why);
    images.push_back(&gpu_baseline);
  }
  std::vector<std::string> inputs = gpu_model_inputs(gpu_model, req.seed());
  std::vector<tf::TimingResult> rs;
  try {
    rs = rt.time_models(images, std::vector<std::vector<std::string>>(images.size(), inputs), gpu_outputs, o);
  } catch (const std::runtime_error& e) {
    refuse(pb::RUNTIME_ERROR, e.what());
  }
  Measured m;
  m.t = rs[0];
  if (rs.size() > 1) {
    m.base_samples = rs[1].samples_s;
    m.base_number = rs[1].number;
  }
  for (size_t k = 0; k < gpu_model.outputs.size(); ++k) {
    const tf::GpuModelImage::Tensor& out = gpu_model.outputs[k];
    m.views.push_back({gpu_outputs[0][k].data(), out.elements, static_cast<tf::ModelDType>(out.dtype)});
  }
  return m;
}

// A compiled model on a CPU board, through its C ABI; `model` holds the buffers the views
// point into.
Measured time_cpu_model(const RunnerArgs& a, const pb::MeasureRequest& req, ModelRun& model, const tf::TimingOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (std::string why = model.load(a.module, a.baseline, req.seed()); !why.empty()) refuse(pb::LOAD_ERROR, why);
  Measured m;
  m.load_s = tf::seconds_since(t0);
  std::vector<tf::TimingResult> rs = model.time(o);
  m.t = rs[0];
  if (rs.size() > 1) {
    if (m.t.status == 0 && rs[1].status != 0)
      refuse(pb::RUNTIME_ERROR, "the baseline model returned " + std::to_string(rs[1].status));
    m.base_samples = rs[1].samples_s;
    m.base_number = rs[1].number;
  }
  m.views = model.outputs();
  return m;
}

// A kernel's PTX or code object on a GPU board: the function's kernel, then those the same
// call launches after it (split-K).
Measured time_gpu_kernel(const pb::MeasureRequest& req, tf::GpuRuntime& rt, const std::string& gpu_module,
                         std::vector<std::vector<float>>& bufs, const std::vector<size_t>& outputs,
                         const tf::TimingOptions& o) {
  const pb::GpuLaunch& l = req.launch();
  if (std::string why = tf::farm::check_gpu_launch(l); !why.empty()) refuse(pb::LOAD_ERROR, why);
  tf::GpuCall call;
  std::vector<std::string> functions{req.function()};
  auto dims = [](const auto& grid, const auto& block, int64_t shared) {
    tf::GpuLaunchDims launch;
    for (int d = 0; d < 3; ++d) {
      launch.grid[static_cast<size_t>(d)] = grid[d];
      launch.block[static_cast<size_t>(d)] = block[d];
    }
    launch.dynamic_shared_bytes = shared;
    return launch;
  };
  call.kernels.push_back(dims(l.grid(), l.block(), l.dynamic_shared_bytes()));
  for (const pb::GpuStep& step : l.then()) {
    functions.push_back(step.function());
    call.kernels.push_back(dims(step.grid(), step.block(), step.dynamic_shared_bytes()));
  }
  call.workspace_elements.assign(l.workspace_elements().begin(), l.workspace_elements().end());
  std::vector<bool> is_output(bufs.size(), false);
  for (size_t i : outputs) is_output[i] = true;
  Measured m;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    rt.load(gpu_module, functions);  // the driver JIT-compiles PTX here
  } catch (const std::exception& e) {
    refuse(pb::LOAD_ERROR, e.what());
  }
  m.load_s = tf::seconds_since(t0);
  try {
    m.t = rt.time(bufs, is_output, call, o);
  } catch (const std::runtime_error& e) {
    refuse(pb::RUNTIME_ERROR, e.what());
  }
  return m;
}

// A kernel library on a CPU board, and its baseline interleaved (outputs of its own: the
// kernel's are what the reply returns).
Measured time_cpu_kernel(const RunnerArgs& a, const pb::MeasureRequest& req, std::vector<std::vector<float>>& bufs,
                         const std::vector<size_t>& outputs, const tf::TimingOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  tf::KernelLibrary lib(a.module, req.function());
  Measured m;
  m.load_s = tf::seconds_since(t0);
  std::vector<float*> args;
  for (auto& b : bufs) args.push_back(b.data());
  if (a.baseline.empty()) {
    m.t = tf::time_kernel(lib, args, o);
    return m;
  }
  std::unique_ptr<tf::KernelLibrary> base;
  try {
    base = std::make_unique<tf::KernelLibrary>(a.baseline, req.baseline_function());
  } catch (const std::exception& e) {
    refuse(pb::LOAD_ERROR, std::string("baseline: ") + e.what());
  }
  std::vector<std::vector<float>> base_outputs;
  base_outputs.reserve(outputs.size());
  std::vector<float*> base_args = args;
  for (size_t i : outputs) {
    base_outputs.emplace_back(bufs[i].size());
    base_args[i] = base_outputs.back().data();
  }
  std::vector<tf::TimingResult> both = tf::time_kernels({&lib, base.get()}, {args, base_args}, o);
  if (both[1].status != 0) refuse(pb::RUNTIME_ERROR, "the baseline kernel returned " + std::to_string(both[1].status));
  m.t = both[0];
  m.base_samples = both[1].samples_s;
  m.base_number = both[1].number;
  return m;
}

// The reply: the samples, the baseline's, and each output's digest, sum and L2 (its values too
// when asked, for kernels).
pb::MeasureReply make_reply(const pb::MeasureRequest& req, const Measured& m) {
  const tf::TimingResult& t = m.t;
  pb::MeasureReply reply;
  reply.set_kernel_status(t.status);
  reply.set_cut(t.cut);
  reply.set_warmup_calls(t.warmup_calls);
  reply.set_number(t.number);
  reply.set_repeat(req.repeat());
  reply.set_min_repeat_ms(req.min_repeat_ms());
  reply.set_flush_cache(req.flush_cache());
  reply.set_cooldown_ms(req.cooldown_ms());
  if (t.status != 0) {
    reply.set_error(t.status == -1 ? pb::MEMORY_LIMIT : pb::RUNTIME_ERROR);
    reply.set_error_msg(std::string(req.model() ? "model" : "kernel") + " returned " + std::to_string(t.status) +
                        (t.status == -1 ? " (could not allocate its buffers)" : ""));
    return reply;
  }
  for (double s : t.samples_s) reply.add_samples_s(s);
  for (double s : m.base_samples) reply.add_baseline_samples_s(s);
  reply.set_baseline_number(m.base_number);
  if (req.outputs() != pb::OUTPUT_NONE) {
    for (const OutputView& v : m.views) {
      std::string raw(static_cast<const char*>(v.data), v.bytes());
      pb::OutputData* o = reply.add_outputs();
      double sum = 0, sq = 0;
      for (int64_t e = 0; e < v.elements; ++e) {
        double x = v.value(e);
        sum += x;
        sq += x * x;
      }
      o->set_sha256(tf::sha256_hex(raw));
      o->set_sum(sum);
      o->set_l2(std::sqrt(sq));
      if (req.outputs() == pb::OUTPUT_VALUES && !req.model()) o->set_values(raw);
    }
  }
  return reply;
}

// The GPU runtime of `device`, or a LOAD_ERROR refusal naming why it cannot be opened.
std::unique_ptr<tf::GpuRuntime> open_runtime(const std::string& device) {
  try {
    return tf::open_gpu_runtime(device);
  } catch (const std::exception& e) {
    refuse(pb::LOAD_ERROR, e.what());
  }
}

// One measurement, after the modules were checked and the limits set: on a GPU board through
// `rt` (the one-shot runner's, or the measuring process's kept context).
pb::MeasureReply measure(const RunnerArgs& a, const pb::MeasureRequest& req, tf::GpuRuntime* rt,
                         const tf::GpuModelImage& gpu_model, const tf::GpuModelImage& gpu_baseline,
                         const std::string& gpu_module) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const tf::TimingOptions o{req.number(),       req.repeat(),          req.min_repeat_ms(),
                              req.flush_cache(),  req.cooldown_ms(),     req.cut_slower_than_s(),
                              req.min_warmup_ms(), req.rewarm_ms()};
    std::vector<size_t> outputs;
    std::vector<std::vector<float>> bufs = kernel_buffers(req, outputs);
    // What the views of the outputs point into, alive until the reply is made.
    ModelRun model;
    std::vector<std::vector<std::string>> gpu_outputs;
    Measured m;
    if (req.model() && rt) {
      m = time_gpu_model(a, req, *rt, gpu_model, gpu_baseline, o, gpu_outputs);
    } else if (req.model()) {
      m = time_cpu_model(a, req, model, o);
    } else if (rt) {
      m = time_gpu_kernel(req, *rt, gpu_module, bufs, outputs, o);
    } else {
      m = time_cpu_kernel(a, req, bufs, outputs, o);
    }
    if (!req.model()) {
      for (size_t i : outputs) {
        tf::load_as(req.args(static_cast<int>(i)).dtype(), bufs[i].data(), static_cast<int64_t>(bufs[i].size()));
        m.views.push_back({bufs[i].data(), static_cast<int64_t>(bufs[i].size()), tf::ModelDType::F32});
      }
    }
    pb::MeasureReply reply = make_reply(req, m);
    reply.set_load_s(m.load_s);
    reply.set_run_s(std::max(0.0, tf::seconds_since(t0) - m.load_s));
    return reply;
  } catch (const Failure& f) {
    return failure_reply(f.code, f.msg);
  } catch (const std::bad_alloc&) {
    return failure_reply(pb::MEMORY_LIMIT,
                         "out of memory under the limit of " + std::to_string(req.memory_limit_bytes()) + " bytes");
  } catch (const std::exception& e) {
    return failure_reply(pb::LOAD_ERROR, e.what());
  }
}

// CPU seconds for every core for the whole limit from now (a backstop to the server's
// wall-clock kill): the soft limit, raised or lowered per measurement in the measuring
// process, whose earlier measurements count too.
void limit_cpu_time(const pb::MeasureRequest& req) {
  if (req.timeout_s() <= 0) return;
  rusage used{};
  getrusage(RUSAGE_SELF, &used);
  rlimit lim{};
  getrlimit(RLIMIT_CPU, &lim);
  lim.rlim_cur = static_cast<rlim_t>(used.ru_utime.tv_sec + used.ru_stime.tv_sec) + cpu_budget_s(req);
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_cur > lim.rlim_max) lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_CPU, &lim);
}

// --serve: a GPU board's measuring process (see the top of this file).
int serve(const RunnerArgs& a) {
  rlimit core{0, 0};
  setrlimit(RLIMIT_CORE, &core);
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  std::unique_ptr<tf::GpuRuntime> rt;
  std::string open_error;
  try {
    rt = tf::open_gpu_runtime(a.device);
  } catch (const std::exception& e) {
    open_error = e.what();
  }
  for (std::string frame; tf::read_framed(0, &frame, tf::farm::kMaxMessageBytes);) {
    pb::RunnerJob job;
    pb::MeasureReply reply;
    if (!job.ParseFromString(frame)) {
      reply = failure_reply(pb::RUNTIME_ERROR, "runner: unreadable request");
    } else if (!rt) {
      reply = failure_reply(pb::LOAD_ERROR, open_error);
    } else {
      RunnerArgs one = a;
      one.module = job.module();
      one.baseline = job.baseline();
      const pb::MeasureRequest& req = job.request();
      limit_cpu_time(req);
      try {
        tf::GpuModelImage gpu_model, gpu_baseline;
        std::string gpu_module;
        check_modules(one, req, gpu_model, gpu_baseline, gpu_module);
        reply = measure(one, req, rt.get(), gpu_model, gpu_baseline, gpu_module);
        if (reply.error() == pb::OK) rt->release();
      } catch (const Failure& f) {
        reply = failure_reply(f.code, f.msg);
      } catch (const std::exception& e) {  // release() failed: the context is not to be trusted
        reply = failure_reply(pb::RUNTIME_ERROR, std::string("after the measurement: ") + e.what());
      }
    }
    std::string out;
    reply.SerializeToString(&out);
    if (!tf::write_framed(1, out)) return 3;
    // A failed measurement may have poisoned the context (a fault does, for good): the process
    // ends, and the board starts a fresh one for the next.
    if (reply.error() != pb::OK) return 0;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--probe") return probe(argv[2]);
  std::optional<RunnerArgs> args = parse_args(argc, argv);
  if (!args) return 2;
  const RunnerArgs& a = *args;
  // Die with the server; if it is already gone, do not start.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != a.server) return 4;
  if (a.serve) return serve(a);
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  pb::MeasureRequest req;
  if (!req.ParseFromString(input)) return reply_and_exit(failure_reply(pb::RUNTIME_ERROR, "runner: unreadable request"));
  try {
    tf::GpuModelImage gpu_model, gpu_baseline;
    std::string gpu_module;
    limit_and_enter_sandbox(a, req, check_modules(a, req, gpu_model, gpu_baseline, gpu_module));
    std::unique_ptr<tf::GpuRuntime> rt;
    if (!a.device.empty()) rt = open_runtime(a.device);
    return reply_and_exit(measure(a, req, rt.get(), gpu_model, gpu_baseline, gpu_module));
  } catch (const Failure& f) {
    return reply_and_exit(failure_reply(f.code, f.msg));
  }
}
