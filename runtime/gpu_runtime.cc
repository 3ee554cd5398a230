#include "runtime/gpu_runtime.h"

#include "runtime/gpu_model/image.h"
#include "runtime/gpu_model/plan.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <optional>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <cstdint>

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
constexpr int kMaxDynamicSharedSizeBytes = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

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
    lib_.get(cuModuleUnload, "cuModuleUnload");
    lib_.get(cuMemAlloc, "cuMemAlloc_v2");
    lib_.get(cuMemFree, "cuMemFree_v2");
    lib_.get(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    lib_.get(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    lib_.get(cuMemsetD8, "cuMemsetD8_v2");
    lib_.get(cuLaunchKernel, "cuLaunchKernel");
    lib_.get(cuFuncSetAttribute, "cuFuncSetAttribute");
    lib_.get(cuEventCreate, "cuEventCreate");
    lib_.get(cuEventRecord, "cuEventRecord");
    lib_.get(cuEventSynchronize, "cuEventSynchronize");
    lib_.get(cuEventElapsedTime, "cuEventElapsedTime");
    lib_.get(cuGetErrorName, "cuGetErrorName");
    lib_.get(cuDriverGetVersion, "cuDriverGetVersion");
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
    int driver = 0;
    check(cuDriverGetVersion(&driver), "cuDriverGetVersion");
    info_ = {name, static_cast<int64_t>(mem), "sm_" + std::to_string(major * 10 + minor), count, driver};
    check(cuDevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  }

  const GpuDeviceInfo& info() const override { return info_; }

  void* load_module(const std::string& module) override {
    CUmodule m = nullptr;
    check(cuModuleLoadData(&m, module.c_str()), "cuModuleLoadData");
    return m;
  }
  void* get_function(void* module, const std::string& name) override {
    CUfunction f = nullptr;
    check(cuModuleGetFunction(&f, module, name.c_str()), "cuModuleGetFunction(" + name + ")");
    return f;
  }

  void unload_module(void* module) override {
    // A later module's function may have the address of one of this one's.
    dynamic_shared_allowed_.clear();
    check(cuModuleUnload(module), "cuModuleUnload");
  }
  void* alloc(size_t bytes) override {
    CUdeviceptr p = 0;
    check(cuMemAlloc(&p, bytes), "cuMemAlloc");
    return reinterpret_cast<void*>(p);
  }
  void free_memory(void* p) override { check(cuMemFree(reinterpret_cast<CUdeviceptr>(p)), "cuMemFree"); }
  void to_device(void* dst, const void* src, size_t bytes) override {
    check(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, bytes), "cuMemcpyHtoD");
  }
  void to_host(void* dst, void* src, size_t bytes) override {
    check(cuMemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), bytes), "cuMemcpyDtoH");
  }
  void overwrite(void* p, size_t bytes) override { check(cuMemsetD8(reinterpret_cast<CUdeviceptr>(p), 1, bytes), "cuMemsetD8"); }
  double launch_ms(int n, const std::vector<GpuLaunchStep>& steps) override {
    if (!start_) {
      check(cuEventCreate(&start_, 0), "cuEventCreate");
      check(cuEventCreate(&stop_, 0), "cuEventCreate");
    }
    check(cuEventRecord(start_, nullptr), "cuEventRecord");
    for (int i = 0; i < n; ++i) {
      for (const GpuLaunchStep& step : steps) {
        const GpuLaunchDims& l = step.dims;
        allow_dynamic_shared(step.function, l.dynamic_shared_bytes);
        check(cuLaunchKernel(step.function, u(l.grid[0]), u(l.grid[1]), u(l.grid[2]), u(l.block[0]), u(l.block[1]),
                             u(l.block[2]), u(l.dynamic_shared_bytes), nullptr, step.params, nullptr),
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
  // A kernel launched with more than 48 KiB of dynamic shared memory needs the function's
  // permission first (compiler/gpu.h: kernels whose shared buffers exceed the static limit);
  // given once per function and size.
  void allow_dynamic_shared(CUfunction f, int64_t bytes) {
    if (bytes <= kGpuStaticSharedBytes) return;
    int64_t& allowed = dynamic_shared_allowed_[f];
    if (allowed >= bytes) return;
    check(cuFuncSetAttribute(f, kMaxDynamicSharedSizeBytes, static_cast<int>(bytes)),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + std::to_string(bytes) + ")");
    allowed = bytes;
  }
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
  CUevent start_ = nullptr, stop_ = nullptr;
  std::map<CUfunction, int64_t> dynamic_shared_allowed_;
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
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
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
    lib_.get(hipModuleUnload, "hipModuleUnload");
    lib_.get(hipMalloc, "hipMalloc");
    lib_.get(hipFree, "hipFree");
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
    info_ = {name, static_cast<int64_t>(mem), gfx[static_cast<size_t>(d.index)].substr(0, gfx[static_cast<size_t>(d.index)].find(':')),
             count};
  }

  const GpuDeviceInfo& info() const override { return info_; }

  void* load_module(const std::string& module) override {
    void* m = nullptr;
    check(hipModuleLoadData(&m, module.data()), "hipModuleLoadData");
    return m;
  }
  void* get_function(void* module, const std::string& name) override {
    void* f = nullptr;
    check(hipModuleGetFunction(&f, module, name.c_str()), "hipModuleGetFunction(" + name + ")");
    return f;
  }

  void unload_module(void* module) override { check(hipModuleUnload(module), "hipModuleUnload"); }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    check(hipMalloc(&p, bytes), "hipMalloc");
    return p;
  }
  void free_memory(void* p) override { check(hipFree(p), "hipFree"); }
  void to_device(void* dst, const void* src, size_t bytes) override {
    check(hipMemcpyHtoD(dst, const_cast<void*>(src), bytes), "hipMemcpyHtoD");
  }
  void to_host(void* dst, void* src, size_t bytes) override { check(hipMemcpyDtoH(dst, src, bytes), "hipMemcpyDtoH"); }
  void overwrite(void* p, size_t bytes) override { check(hipMemset(p, 1, bytes), "hipMemset"); }
  double launch_ms(int n, const std::vector<GpuLaunchStep>& steps) override {
    if (!start_) {
      check(hipEventCreate(&start_), "hipEventCreate");
      check(hipEventCreate(&stop_), "hipEventCreate");
    }
    check(hipEventRecord(start_, nullptr), "hipEventRecord");
    for (int i = 0; i < n; ++i) {
      for (const GpuLaunchStep& step : steps) {
        const GpuLaunchDims& l = step.dims;
        check(hipModuleLaunchKernel(step.function, u(l.grid[0]), u(l.grid[1]), u(l.grid[2]), u(l.block[0]),
                                    u(l.block[1]), u(l.block[2]), u(l.dynamic_shared_bytes), nullptr, step.params, nullptr),
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
  void *start_ = nullptr, *stop_ = nullptr;
  hipError_t (*hipInit)(unsigned) = nullptr;
  hipError_t (*hipGetDeviceCount)(int*) = nullptr;
  hipError_t (*hipSetDevice)(int) = nullptr;
  hipError_t (*hipDeviceGetName)(char*, int, int) = nullptr;
  hipError_t (*hipDeviceTotalMem)(size_t*, int) = nullptr;
  hipError_t (*hipModuleLoadData)(void**, const void*) = nullptr;
  hipError_t (*hipModuleGetFunction)(void**, void*, const char*) = nullptr;
  hipError_t (*hipModuleUnload)(void*) = nullptr;
  hipError_t (*hipMalloc)(void**, size_t) = nullptr;
  hipError_t (*hipFree)(void*) = nullptr;
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

double GpuRuntime::warm_up(const std::vector<GpuLaunchStep>& steps, const TimingOptions& o, TimingResult& r) {
  // At least two launches, at least min_warmup_ms, until two in a row are within 25% of the
  // fastest (the CPU rule), or four times the sample length has passed.
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  double best = 1e300, last = 1e300;
  double budget_ms = kWarmupFactor * std::max(o.min_repeat_ms, kMinWarmupMs);
  for (;;) {
    double ms = launch_ms(1, steps);
    ++r.warmup_calls;
    bool steady = r.warmup_calls >= 2 && ms <= best * 1.25 && last <= best * 1.25;
    last = ms;
    best = std::min(best, ms);
    double spent = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    if (spent >= o.min_warmup_ms && (steady || spent > budget_ms + o.min_warmup_ms)) break;
  }
  r.number = std::max(o.number, 1);
  if (o.min_repeat_ms > 0 && best > 0) r.number = std::max(r.number, static_cast<int>(std::ceil(o.min_repeat_ms / best)));
  return best;
}

void* GpuRuntime::tracked_module(const std::string& module) {
  void* m = load_module(module);
  modules_.push_back(m);
  return m;
}

void* GpuRuntime::tracked_alloc(size_t bytes) {
  void* p = alloc(bytes);
  buffers_.push_back(p);
  return p;
}

void GpuRuntime::release() {
  functions_.clear();
  std::vector<void*> buffers = std::move(buffers_), modules = std::move(modules_);
  buffers_.clear();
  modules_.clear();
  for (void* p : buffers) free_memory(p);
  for (void* m : modules) unload_module(m);
}

void GpuRuntime::load(const std::string& module, const std::vector<std::string>& functions) {
  void* m = tracked_module(module);
  for (const std::string& f : functions) functions_.push_back(get_function(m, f));
}

TimingResult GpuRuntime::time(std::vector<std::vector<float>>& bufs, const std::vector<bool>& is_output,
                              const GpuCall& call, const TimingOptions& o) {
  if (call.kernels.empty() || call.kernels.size() > functions_.size())
    throw std::runtime_error("GpuRuntime::time: " + std::to_string(call.kernels.size()) + " kernels to launch, " +
                             std::to_string(functions_.size()) + " loaded");
  std::vector<void*> ptrs(bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    ptrs[i] = tracked_alloc(std::max<size_t>(bufs[i].size() * sizeof(float), 4));
    if (!is_output[i]) to_device(ptrs[i], bufs[i].data(), bufs[i].size() * sizeof(float));
  }
  // Workspaces after the arguments, uninitialized (each kernel writes what it reads).
  for (int64_t n : call.workspace_elements) ptrs.push_back(tracked_alloc(static_cast<size_t>(n) * sizeof(float)));
  // Each kernel parameter points at an 8-byte device address.
  std::vector<void*> params;
  for (void*& p : ptrs) params.push_back(&p);
  std::vector<GpuLaunchStep> launch;
  for (size_t k = 0; k < call.kernels.size(); ++k) launch.push_back({functions_[k], call.kernels[k], params.data()});
  void* flush = o.flush_cache ? tracked_alloc(kGpuFlushBytes) : nullptr;
  TimingResult r;
  double best = warm_up(launch, o, r);
  int repeat = o.repeat;
  if (o.cut_slower_than_s > 0 && best / 1e3 > o.cut_slower_than_s) {
    repeat = 1;
    r.cut = true;
  }
  const int number = r.number;
  for (int i = 0; i < repeat; ++i) {
    if (flush) overwrite(flush, kGpuFlushBytes);
    if (o.cooldown_ms > 0 && i > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.cooldown_ms));
    r.samples_s.push_back(launch_ms(number, launch) / 1e3 / number);
    // As on CPUs (time_calls): the warm-up timed single launches, whose events cost more than
    // a short kernel; a first sample (`number` launches) within the bound takes every sample.
    if (r.cut && r.samples_s.back() <= o.cut_slower_than_s) {
      r.cut = false;
      repeat = o.repeat;
    }
  }
  synchronize();
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (is_output[i]) to_host(bufs[i].data(), ptrs[i], bufs[i].size() * sizeof(float));
  }
  return r;
}

namespace {

// float32 values as an output of `dtype` (1 float32, 7 int64 toward zero and saturating with
// NaN as 0, 9 bool as x != 0), as the model library converts them.
std::string float_output(const std::vector<float>& f, int32_t dtype) {
  if (dtype == TF_DTYPE_FLOAT32) return std::string(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
  std::string out;
  for (float x : f) {
    if (dtype == TF_DTYPE_BOOL) {
      out.push_back(x != 0.0f ? 1 : 0);
      continue;
    }
    int64_t v = std::isnan(x) ? 0 : x >= 9.2233720368547758e18f ? INT64_MAX : x <= -9.2233720368547758e18f ? INT64_MIN : static_cast<int64_t>(x);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  return out;
}

}  // namespace

std::vector<TimingResult> GpuRuntime::time_models(const std::vector<const GpuModelImage*>& models,
                                                  const std::vector<std::vector<std::string>>& inputs,
                                                  std::vector<std::vector<std::string>>& outputs, const TimingOptions& o) {
  struct State {
    void* arena = nullptr;
    void* constants = nullptr;
    std::vector<void*> in, out;
    std::vector<std::vector<void*>> args, params;
    std::vector<GpuLaunchStep> steps;
  };
  std::vector<State> st(models.size());
  auto padded = [](int64_t bytes) { return static_cast<size_t>(std::max<int64_t>(bytes, 256)); };
  for (size_t m = 0; m < models.size(); ++m) {
    const GpuModelImage& g = *models[m];
    State& s = st[m];
    if (inputs.at(m).size() != g.inputs.size())
      throw std::runtime_error("time_models: " + std::to_string(inputs[m].size()) + " inputs for a model of " +
                               std::to_string(g.inputs.size()));
    std::vector<void*> modules;
    for (const std::string& code : g.modules) modules.push_back(tracked_module(code));
    s.arena = tracked_alloc(padded(g.arena_bytes));
    s.constants = tracked_alloc(padded(static_cast<int64_t>(g.constants.size())));
    if (!g.constants.empty()) to_device(s.constants, g.constants.data(), g.constants.size());
    for (size_t k = 0; k < g.inputs.size(); ++k) {
      const std::string& data = inputs[m][k];
      if (static_cast<int64_t>(data.size()) != g.inputs[k].bytes())
        throw std::runtime_error("time_models: input " + std::to_string(k) + " of " + std::to_string(data.size()) + " bytes");
      s.in.push_back(tracked_alloc(padded(g.inputs[k].bytes())));
      if (!data.empty()) to_device(s.in.back(), data.data(), data.size());
    }
    for (const GpuModelImage::Tensor& t : g.outputs) s.out.push_back(tracked_alloc(padded(t.bytes())));
    for (const GpuModelImage::Conversion& c : g.conversions) {
      const GpuModelImage::Tensor& t = g.inputs[static_cast<size_t>(c.input)];
      const std::string& data = inputs[m][static_cast<size_t>(c.input)];
      std::vector<float> f(static_cast<size_t>(t.elements));
      for (size_t e = 0; e < f.size(); ++e) {
        if (t.dtype == TF_DTYPE_BOOL) {
          f[e] = data[e] != 0 ? 1.0f : 0.0f;
          continue;
        }
        int64_t x;
        std::memcpy(&x, data.data() + 8 * e, 8);
        if (x < -(int64_t{1} << 24) || x > (int64_t{1} << 24))
          throw std::runtime_error("input " + std::to_string(c.input) + " holds an int64 beyond +-2^24 (16777216)");
        f[e] = static_cast<float>(x);
      }
      if (!f.empty()) to_device(static_cast<char*>(s.arena) + c.arena_offset, f.data(), f.size() * sizeof(float));
    }
    auto address = [&](const GpuModelImage::Arg& a) -> void* {
      switch (a.kind) {
        case GpuModelImage::ArgKind::Input: return s.in[static_cast<size_t>(a.index)];
        case GpuModelImage::ArgKind::Output: return s.out[static_cast<size_t>(a.index)];
        case GpuModelImage::ArgKind::Constant: return static_cast<char*>(s.constants) + a.index;
        case GpuModelImage::ArgKind::Arena: return static_cast<char*>(s.arena) + a.index;
      }
      return nullptr;
    };
    s.args.resize(g.launches.size());
    s.params.resize(g.launches.size());
    for (size_t l = 0; l < g.launches.size(); ++l) {
      const GpuModelImage::Launch& launch = g.launches[l];
      for (const GpuModelImage::Arg& a : launch.args) s.args[l].push_back(address(a));
      for (void*& p : s.args[l]) s.params[l].push_back(&p);
      s.steps.push_back({get_function(modules[static_cast<size_t>(launch.module)], launch.function), launch.dims,
                         s.params[l].data()});
    }
  }
  // Warm-up of each (the rule of time()), then the samples, interleaved.
  std::vector<TimingResult> results(models.size());
  int repeat = o.repeat;
  for (size_t m = 0; m < models.size(); ++m) {
    results[m].number = std::max(o.number, 1);
    if (st[m].steps.empty()) continue;  // a model of no kernel
    double best = warm_up(st[m].steps, o, results[m]);
    if (o.cut_slower_than_s > 0 && best / 1e3 > o.cut_slower_than_s) {
      repeat = 1;
      results[m].cut = true;
    }
  }
  void* flush = o.flush_cache ? tracked_alloc(kGpuFlushBytes) : nullptr;
  for (int i = 0; i < repeat; ++i) {
    for (size_t m = 0; m < models.size(); ++m) {
      if (flush) overwrite(flush, kGpuFlushBytes);
      if (o.cooldown_ms > 0 && (i > 0 || m > 0))
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.cooldown_ms));
      if (st[m].steps.empty()) {
        results[m].samples_s.push_back(0);
        continue;
      }
      // Several models: this one's caches and clocks warmed again before its sample.
      if (models.size() > 1 && o.rewarm_ms > 0) {
        using clock = std::chrono::steady_clock;
        auto start = clock::now();
        while (std::chrono::duration<double, std::milli>(clock::now() - start).count() < o.rewarm_ms)
          launch_ms(1, st[m].steps);
      }
      results[m].samples_s.push_back(launch_ms(results[m].number, st[m].steps) / 1e3 / results[m].number);
    }
  }
  synchronize();
  outputs.assign(models.size(), {});
  for (size_t m = 0; m < models.size(); ++m) {
    const GpuModelImage& g = *models[m];
    State& s = st[m];
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      std::string bytes(static_cast<size_t>(g.outputs[k].bytes()), '\0');
      if (!bytes.empty()) to_host(bytes.data(), s.out[k], bytes.size());
      outputs[m].push_back(std::move(bytes));
    }
    for (const GpuModelImage::Copy& c : g.copies) {
      const GpuModelImage::Tensor& t = g.outputs[static_cast<size_t>(c.output)];
      std::string& to = outputs[m][static_cast<size_t>(c.output)];
      if (c.literal) {
        to = c.bytes;
        continue;
      }
      if (t.dtype == TF_DTYPE_FLOAT16 ||
          t.dtype == TF_DTYPE_BFLOAT16) {  // from a buffer of its type (image.cc)
        const auto at = static_cast<size_t>(c.from.index);
        to = c.from.kind == GpuModelImage::ArgKind::Input ? inputs[m][at] : outputs[m][at];
        continue;
      }
      std::vector<float> f(static_cast<size_t>(t.elements));
      size_t n = f.size() * sizeof(float);
      const int64_t at = c.from.index;
      switch (c.from.kind) {
        case GpuModelImage::ArgKind::Input: std::memcpy(f.data(), inputs[m][static_cast<size_t>(at)].data(), n); break;
        case GpuModelImage::ArgKind::Output: std::memcpy(f.data(), outputs[m][static_cast<size_t>(at)].data(), n); break;
        case GpuModelImage::ArgKind::Constant: std::memcpy(f.data(), g.constants.data() + at, n); break;
        case GpuModelImage::ArgKind::Arena:
          if (n > 0) to_host(f.data(), static_cast<char*>(s.arena) + at, n);
          break;
      }
      to = float_output(f, t.dtype);
    }
  }
  return results;
}

GpuDeviceSpec parse_gpu_device(const std::string& text) {
  GpuDeviceSpec d;
  size_t colon = text.find(':');
  std::optional<TargetKind> kind = parse_target_kind(text.substr(0, colon));
  bool ok = kind && kind_info(*kind).gpu;
  if (ok) d.kind = *kind;
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
  if (d.kind == TargetKind::Cuda) return std::make_unique<CudaRuntime>(d);
  return std::make_unique<HipRuntime>(d);
}

std::string gpu_module_kind(const std::string& data) {
  // ELF, little-endian, e_machine at byte 18: EM_CUDA (190) or EM_AMDGPU (224).
  if (data.size() >= 20 && data.compare(0, 4, "\x7f" "ELF") == 0) {
    uint16_t m;
    std::memcpy(&m, data.data() + 18, sizeof m);
    return m == 224 ? "hsaco" : m == 190 ? "cubin" : "";
  }
  // PTX: text with a .version and a .target directive, no NUL bytes.
  if (data.find('\0') == std::string::npos && data.find(".version ") != std::string::npos &&
      data.find(".target sm_") != std::string::npos) {
    return "ptx";
  }
  return "";
}

int cubin_sm(const std::string& data) {
  // A 64-bit little-endian ELF header (64 bytes): EI_OSABI at 7, e_flags at 48. NVIDIA's
  // ABI of CUDA 13 (EI_OSABI 0x41) keeps the SM in bits 8-15 of e_flags, the older one
  // (0x33) in bits 0-7.
  if (data.size() < 64 || gpu_module_kind(data) != "cubin" || data[4] != 2 || data[5] != 1) return 0;
  uint32_t flags;
  std::memcpy(&flags, data.data() + 48, sizeof flags);
  const auto osabi = static_cast<unsigned char>(data[7]);
  const int sm = osabi == 0x41 ? static_cast<int>((flags >> 8) & 0xff) : osabi == 0x33 ? static_cast<int>(flags & 0xff) : 0;
  return sm >= 10 ? sm : 0;
}

std::string cubin_runs_on(int sm, const std::string& device_arch) {
  int device = 0;
  if (device_arch.rfind("sm_", 0) == 0) device = std::atoi(device_arch.c_str() + 3);
  if (sm <= 0) return "its ELF header names no SM";
  if (device <= 0) return "this device (" + device_arch + ") is not an NVIDIA one";
  if (sm / 10 == device / 10 && sm % 10 <= device % 10) return "";
  return "it holds machine code for sm_" + std::to_string(sm) + ", which does not run on " + device_arch;
}

std::string check_gpu_module(const std::string& data, TargetKind kind) {
  std::string have = gpu_module_kind(data), want(kind_info(kind).module_format);
  // CUDA boards take machine code (cubins: no JIT on the board) as well as PTX.
  if (kind_of_module_format(have) == kind) return "";
  return "not a " + want + " module for a " + std::string(kind_name(kind)) + " board (it is " +
         (have.empty() ? std::string("neither PTX, a cubin nor an AMDGPU code object") : have) + ")";
}

}  // namespace tf
