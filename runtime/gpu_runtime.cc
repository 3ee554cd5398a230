#include "runtime/gpu_runtime.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

namespace tf {
namespace {

// A symbol table filled from a dlopen()ed library; throws when a symbol is missing.
class Library {
 public:
  Library(const std::string& device, const char* what, const std::vector<const char*>& names) {
    for (const char* n : names) {
      handle_ = dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (handle_) return;
      if (error_.empty()) error_ = dlerror();
    }
    throw std::runtime_error(device + ": no " + what + " on this machine: cannot load " + names[0] + " (" + error_ + ")");
  }
  ~Library() {
    // Left loaded: drivers keep threads that outlive their last call.
  }
  template <typename F>
  void get(F*& fn, const char* name) {
    fn = reinterpret_cast<F*>(dlsym(handle_, name));
    if (!fn) throw std::runtime_error(std::string("the GPU driver library lacks ") + name);
  }

 private:
  void* handle_ = nullptr;
  std::string error_;
};

constexpr size_t kGpuFlushBytes = size_t{256} << 20;

// ---- CUDA driver API -------------------------------------------------------------------

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUevent = void*;
using CUstream = void*;
constexpr int kCcMajor = 75, kCcMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*

class CudaRuntime : public GpuRuntime {
 public:
  explicit CudaRuntime(const GpuDeviceSpec& d) : name_("cuda:" + std::to_string(d.index)),
                                                 lib_(name_, "CUDA driver", {"libcuda.so.1", "libcuda.so"}) {
    lib_.get(cuInit, "cuInit");
    lib_.get(cuDeviceGetCount, "cuDeviceGetCount");
    lib_.get(cuDeviceGet, "cuDeviceGet");
    lib_.get(cuDeviceGetName, "cuDeviceGetName");
    lib_.get(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
    lib_.get(cuDeviceGetAttribute, "cuDeviceGetAttribute");
    lib_.get(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    lib_.get(cuCtxSetCurrent, "cuCtxSetCurrent");
    lib_.get(cuCtxSynchronize, "cuCtxSynchronize");
    lib_.get(cuModuleLoadData, "cuModuleLoadData");
    lib_.get(cuModuleGetFunction, "cuModuleGetFunction");
    lib_.get(cuMemAlloc, "cuMemAlloc_v2");
    lib_.get(cuMemFree, "cuMemFree_v2");
    lib_.get(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    lib_.get(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    lib_.get(cuMemsetD8, "cuMemsetD8_v2");
    lib_.get(cuLaunchKernel, "cuLaunchKernel");
    lib_.get(cuEventCreate, "cuEventCreate");
    lib_.get(cuEventRecord, "cuEventRecord");
    lib_.get(cuEventSynchronize, "cuEventSynchronize");
    lib_.get(cuEventElapsedTime, "cuEventElapsedTime");
    lib_.get(cuGetErrorName, "cuGetErrorName");
    check(cuInit(0), "cuInit");
    int count = 0;
    check(cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (d.index >= count) {
      throw std::runtime_error(name_ + ": this machine has " + std::to_string(count) + " CUDA device(s)");
    }
    check(cuDeviceGet(&dev_, d.index), "cuDeviceGet");
    char name[256] = {};
    check(cuDeviceGetName(name, sizeof name - 1, dev_), "cuDeviceGetName");
    size_t mem = 0;
    check(cuDeviceTotalMem(&mem, dev_), "cuDeviceTotalMem");
    int major = 0, minor = 0;
    check(cuDeviceGetAttribute(&major, kCcMajor, dev_), "cuDeviceGetAttribute");
    check(cuDeviceGetAttribute(&minor, kCcMinor, dev_), "cuDeviceGetAttribute");
    info_ = {name, static_cast<int64_t>(mem), "sm_" + std::to_string(major * 10 + minor)};
    check(cuDevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  }

  const GpuDeviceInfo& info() const override { return info_; }

  void load(const std::string& module, const std::vector<std::string>& functions) override {
    check(cuModuleLoadData(&module_, module.c_str()), "cuModuleLoadData");
    for (const std::string& f : functions) {
      check(cuModuleGetFunction(&fns_.emplace_back(), module_, f.c_str()), "cuModuleGetFunction(" + f + ")");
    }
  }

  // Device memory goes with the process (the runner ends after one measurement).
  void* alloc(size_t bytes) override {
    CUdeviceptr p = 0;
    check(cuMemAlloc(&p, bytes), "cuMemAlloc");
    return reinterpret_cast<void*>(p);
  }
  void to_device(void* dst, const void* src, size_t bytes) override {
    check(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, bytes), "cuMemcpyHtoD");
  }
  void to_host(void* dst, void* src, size_t bytes) override {
    check(cuMemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), bytes), "cuMemcpyDtoH");
  }
  void overwrite(void* p, size_t bytes) override { check(cuMemsetD8(reinterpret_cast<CUdeviceptr>(p), 1, bytes), "cuMemsetD8"); }
  double launch_ms(int n, const std::vector<GpuLaunchDims>& kernels, void** params) override {
    if (!start_) {
      check(cuEventCreate(&start_, 0), "cuEventCreate");
      check(cuEventCreate(&stop_, 0), "cuEventCreate");
    }
    check(cuEventRecord(start_, nullptr), "cuEventRecord");
    for (int i = 0; i < n; ++i) {
      for (size_t k = 0; k < kernels.size(); ++k) {
        const GpuLaunchDims& l = kernels[k];
        check(cuLaunchKernel(fns_.at(k), u(l.grid[0]), u(l.grid[1]), u(l.grid[2]), u(l.block[0]), u(l.block[1]),
                             u(l.block[2]), u(l.dynamic_shared_bytes), nullptr, params, nullptr),
              "cuLaunchKernel");
      }
    }
    check(cuEventRecord(stop_, nullptr), "cuEventRecord");
    check(cuEventSynchronize(stop_), "the kernel (cuEventSynchronize)");
    float ms = 0;
    check(cuEventElapsedTime(&ms, start_, stop_), "cuEventElapsedTime");
    return ms;
  }
  void synchronize() override { check(cuCtxSynchronize(), "the kernel (cuCtxSynchronize)"); }

 private:
  static unsigned u(int64_t v) { return static_cast<unsigned>(v); }
  void check(CUresult r, const std::string& call) {
    if (r == 0) return;
    const char* n = nullptr;
    if (cuGetErrorName) cuGetErrorName(r, &n);
    throw std::runtime_error(name_ + ": " + call + " failed: " + (n ? n : "error " + std::to_string(r)));
  }

  std::string name_;
  Library lib_;
  GpuDeviceInfo info_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  std::vector<CUfunction> fns_;
  CUevent start_ = nullptr, stop_ = nullptr;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
};

// ---- HIP (and HSA for the gfx name) ----------------------------------------------------

using hipError_t = int;
struct HsaAgent {
  uint64_t handle;
};
constexpr int kHsaAgentInfoName = 0, kHsaAgentInfoDevice = 17, kHsaDeviceGpu = 1;

// The gfx names of the machine's GPU agents, in HSA's order.
std::vector<std::string> hsa_gpu_names(const std::string& device) {
  Library hsa(device, "ROCm HSA runtime", {"libhsa-runtime64.so.1", "libhsa-runtime64.so"});
  int (*hsa_init)() = nullptr;
  int (*hsa_iterate_agents)(int (*)(HsaAgent, void*), void*) = nullptr;
  int (*hsa_agent_get_info)(HsaAgent, int, void*) = nullptr;
  hsa.get(hsa_init, "hsa_init");
  hsa.get(hsa_iterate_agents, "hsa_iterate_agents");
  hsa.get(hsa_agent_get_info, "hsa_agent_get_info");
  if (hsa_init() != 0) throw std::runtime_error(device + ": hsa_init failed (is /dev/kfd readable?)");
  struct Ctx {
    int (*get)(HsaAgent, int, void*);
    std::vector<std::string> names;
  } ctx{hsa_agent_get_info, {}};
  hsa_iterate_agents(
      [](HsaAgent a, void* p) {
        auto* c = static_cast<Ctx*>(p);
        int type = -1;
        char name[64] = {};
        if (c->get(a, kHsaAgentInfoDevice, &type) == 0 && type == kHsaDeviceGpu &&
            c->get(a, kHsaAgentInfoName, name) == 0) {
          c->names.emplace_back(name);
        }
        return 0;
      },
      &ctx);
  return ctx.names;
}

class HipRuntime : public GpuRuntime {
 public:
  explicit HipRuntime(const GpuDeviceSpec& d) : name_("rocm:" + std::to_string(d.index)),
                                                lib_(name_, "ROCm runtime", {"libamdhip64.so", "libamdhip64.so.6",
                                                                             "libamdhip64.so.5"}) {
    lib_.get(hipInit, "hipInit");
    lib_.get(hipGetDeviceCount, "hipGetDeviceCount");
    lib_.get(hipSetDevice, "hipSetDevice");
    lib_.get(hipDeviceGetName, "hipDeviceGetName");
    lib_.get(hipDeviceTotalMem, "hipDeviceTotalMem");
    lib_.get(hipModuleLoadData, "hipModuleLoadData");
    lib_.get(hipModuleGetFunction, "hipModuleGetFunction");
    lib_.get(hipMalloc, "hipMalloc");
    lib_.get(hipMemcpyHtoD, "hipMemcpyHtoD");
    lib_.get(hipMemcpyDtoH, "hipMemcpyDtoH");
    lib_.get(hipMemset, "hipMemset");
    lib_.get(hipModuleLaunchKernel, "hipModuleLaunchKernel");
    lib_.get(hipEventCreate, "hipEventCreate");
    lib_.get(hipEventRecord, "hipEventRecord");
    lib_.get(hipEventSynchronize, "hipEventSynchronize");
    lib_.get(hipEventElapsedTime, "hipEventElapsedTime");
    lib_.get(hipDeviceSynchronize, "hipDeviceSynchronize");
    lib_.get(hipGetErrorName, "hipGetErrorName");
    check(hipInit(0), "hipInit");
    int count = 0;
    check(hipGetDeviceCount(&count), "hipGetDeviceCount");
    if (d.index >= count) throw std::runtime_error(name_ + ": this machine has " + std::to_string(count) + " ROCm device(s)");
    check(hipSetDevice(d.index), "hipSetDevice");
    char name[256] = {};
    check(hipDeviceGetName(name, sizeof name - 1, d.index), "hipDeviceGetName");
    size_t mem = 0;
    check(hipDeviceTotalMem(&mem, d.index), "hipDeviceTotalMem");
    std::vector<std::string> gfx = hsa_gpu_names(name_);
    if (static_cast<size_t>(d.index) >= gfx.size()) {
      throw std::runtime_error(name_ + ": HSA lists " + std::to_string(gfx.size()) + " GPU agent(s)");
    }
    // HSA names agents "gfx90a"; a name with feature suffixes ("gfx90a:sramecc+:xnack-") keeps the base.
    info_ = {name, static_cast<int64_t>(mem), gfx[static_cast<size_t>(d.index)].substr(0, gfx[static_cast<size_t>(d.index)].find(':'))};
  }

  const GpuDeviceInfo& info() const override { return info_; }

  void load(const std::string& module, const std::vector<std::string>& functions) override {
    check(hipModuleLoadData(&module_, module.data()), "hipModuleLoadData");
    for (const std::string& f : functions) {
      check(hipModuleGetFunction(&fns_.emplace_back(), module_, f.c_str()), "hipModuleGetFunction(" + f + ")");
    }
  }

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    check(hipMalloc(&p, bytes), "hipMalloc");
    return p;
  }
  void to_device(void* dst, const void* src, size_t bytes) override {
    check(hipMemcpyHtoD(dst, const_cast<void*>(src), bytes), "hipMemcpyHtoD");
  }
  void to_host(void* dst, void* src, size_t bytes) override { check(hipMemcpyDtoH(dst, src, bytes), "hipMemcpyDtoH"); }
  void overwrite(void* p, size_t bytes) override { check(hipMemset(p, 1, bytes), "hipMemset"); }
  double launch_ms(int n, const std::vector<GpuLaunchDims>& kernels, void** params) override {
    if (!start_) {
      check(hipEventCreate(&start_), "hipEventCreate");
      check(hipEventCreate(&stop_), "hipEventCreate");
    }
    check(hipEventRecord(start_, nullptr), "hipEventRecord");
    for (int i = 0; i < n; ++i) {
      for (size_t k = 0; k < kernels.size(); ++k) {
        const GpuLaunchDims& l = kernels[k];
        check(hipModuleLaunchKernel(fns_.at(k), u(l.grid[0]), u(l.grid[1]), u(l.grid[2]), u(l.block[0]),
                                    u(l.block[1]), u(l.block[2]), u(l.dynamic_shared_bytes), nullptr, params, nullptr),
              "hipModuleLaunchKernel");
      }
    }
    check(hipEventRecord(stop_, nullptr), "hipEventRecord");
    check(hipEventSynchronize(stop_), "the kernel (hipEventSynchronize)");
    float ms = 0;
    check(hipEventElapsedTime(&ms, start_, stop_), "hipEventElapsedTime");
    return ms;
  }
  void synchronize() override { check(hipDeviceSynchronize(), "the kernel (hipDeviceSynchronize)"); }

 private:
  static unsigned u(int64_t v) { return static_cast<unsigned>(v); }
  void check(hipError_t r, const std::string& call) {
    if (r == 0) return;
    const char* n = hipGetErrorName ? hipGetErrorName(r) : nullptr;
    throw std::runtime_error(name_ + ": " + call + " failed: " + (n ? n : "error " + std::to_string(r)));
  }

  std::string name_;
  Library lib_;
  GpuDeviceInfo info_;
  void* module_ = nullptr;
  std::vector<void*> fns_;
  void *start_ = nullptr, *stop_ = nullptr;
  hipError_t (*hipInit)(unsigned) = nullptr;
  hipError_t (*hipGetDeviceCount)(int*) = nullptr;
  hipError_t (*hipSetDevice)(int) = nullptr;
  hipError_t (*hipDeviceGetName)(char*, int, int) = nullptr;
  hipError_t (*hipDeviceTotalMem)(size_t*, int) = nullptr;
  hipError_t (*hipModuleLoadData)(void**, const void*) = nullptr;
  hipError_t (*hipModuleGetFunction)(void**, void*, const char*) = nullptr;
  hipError_t (*hipMalloc)(void**, size_t) = nullptr;
  hipError_t (*hipMemcpyHtoD)(void*, void*, size_t) = nullptr;
  hipError_t (*hipMemcpyDtoH)(void*, void*, size_t) = nullptr;
  hipError_t (*hipMemset)(void*, int, size_t) = nullptr;
  hipError_t (*hipModuleLaunchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                                      void**, void**) = nullptr;
  hipError_t (*hipEventCreate)(void**) = nullptr;
  hipError_t (*hipEventRecord)(void*, void*) = nullptr;
  hipError_t (*hipEventSynchronize)(void*) = nullptr;
  hipError_t (*hipEventElapsedTime)(float*, void*, void*) = nullptr;
  hipError_t (*hipDeviceSynchronize)() = nullptr;
  const char* (*hipGetErrorName)(hipError_t) = nullptr;
};

}  // namespace

TimingResult GpuRuntime::time(std::vector<std::vector<float>>& bufs, const std::vector<bool>& is_output,
                              const GpuCall& call, const TimingOptions& o) {
  if (call.kernels.empty()) throw std::runtime_error("GpuRuntime::time: no kernel to launch");
  const std::vector<GpuLaunchDims>& launch = call.kernels;
  std::vector<void*> ptrs(bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    ptrs[i] = alloc(std::max<size_t>(bufs[i].size() * sizeof(float), 4));
    if (!is_output[i]) to_device(ptrs[i], bufs[i].data(), bufs[i].size() * sizeof(float));
  }
  // Workspaces after the arguments, uninitialized (each kernel writes what it reads).
  for (int64_t n : call.workspace_elements) ptrs.push_back(alloc(static_cast<size_t>(n) * sizeof(float)));
  // Each kernel parameter points at an 8-byte device address.
  std::vector<void*> params;
  for (void*& p : ptrs) params.push_back(&p);
  void* flush = o.flush_cache ? alloc(kGpuFlushBytes) : nullptr;
  TimingResult r;
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  double best = 1e300, last = 1e300;
  // Warm-up: at least two launches, at least min_warmup_ms, until two in a row are within
  // 25% of the fastest (the CPU rule), or four times the sample length has passed.
  double budget_ms = kWarmupFactor * std::max(o.min_repeat_ms, kMinWarmupMs);
  for (;;) {
    double ms = launch_ms(1, launch, params.data());
    ++r.warmup_calls;
    bool steady = r.warmup_calls >= 2 && ms <= best * 1.25 && last <= best * 1.25;
    last = ms;
    best = std::min(best, ms);
    double spent = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    if (spent >= o.min_warmup_ms && (steady || spent > budget_ms + o.min_warmup_ms)) break;
  }
  int repeat = o.repeat;
  if (o.cut_slower_than_s > 0 && best / 1e3 > o.cut_slower_than_s) {
    repeat = 1;
    r.cut = true;
  }
  int number = std::max(o.number, 1);
  if (o.min_repeat_ms > 0 && best > 0) number = std::max(number, static_cast<int>(std::ceil(o.min_repeat_ms / best)));
  r.number = number;
  for (int i = 0; i < repeat; ++i) {
    if (flush) overwrite(flush, kGpuFlushBytes);
    if (o.cooldown_ms > 0 && i > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.cooldown_ms));
    r.samples_s.push_back(launch_ms(number, launch, params.data()) / 1e3 / number);
  }
  synchronize();
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (is_output[i]) to_host(bufs[i].data(), ptrs[i], bufs[i].size() * sizeof(float));
  }
  return r;
}

GpuDeviceSpec parse_gpu_device(const std::string& text) {
  GpuDeviceSpec d;
  size_t colon = text.find(':');
  d.kind = text.substr(0, colon);
  bool ok = d.kind == "cuda" || d.kind == "rocm";
  if (ok && colon != std::string::npos) {
    std::string idx = text.substr(colon + 1);
    ok = !idx.empty() && idx.size() <= 3 && std::all_of(idx.begin(), idx.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (ok) d.index = std::stoi(idx);
  }
  if (!ok) throw std::runtime_error("--device '" + text + "' is not cpu, cuda:N or rocm:N");
  return d;
}

std::string GpuDeviceInfo::target() const {
  return arch.rfind("sm_", 0) == 0 ? "cuda -arch=" + arch : "rocm -mcpu=" + arch;
}

std::string GpuDeviceInfo::key() const {
  return arch.rfind("sm_", 0) == 0 ? "cuda-sm" + arch.substr(3) : "rocm-" + arch;
}

std::unique_ptr<GpuRuntime> open_gpu_runtime(const std::string& spec) {
  GpuDeviceSpec d = parse_gpu_device(spec);
  if (d.kind == "cuda") return std::make_unique<CudaRuntime>(d);
  return std::make_unique<HipRuntime>(d);
}

std::string gpu_module_kind(const std::string& data) {
  // ELF, little-endian, e_machine EM_AMDGPU (224) at byte 18.
  if (data.size() >= 20 && data.compare(0, 4, "\x7f" "ELF") == 0) {
    uint16_t m;
    std::memcpy(&m, data.data() + 18, sizeof m);
    return m == 224 ? "hsaco" : "";
  }
  // PTX: text with a .version and a .target directive, no NUL bytes.
  if (data.find('\0') == std::string::npos && data.find(".version ") != std::string::npos &&
      data.find(".target sm_") != std::string::npos) {
    return "ptx";
  }
  return "";
}

std::string check_gpu_module(const std::string& data, const std::string& kind) {
  std::string have = gpu_module_kind(data), want = kind == "cuda" ? "ptx" : "hsaco";
  if (have == want) return "";
  return "not a " + want + " module for a " + kind + " board (it is " +
         (have.empty() ? std::string("neither PTX nor an AMDGPU code object") : have) + ")";
}

}  // namespace tf
