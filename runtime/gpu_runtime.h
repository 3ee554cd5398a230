// GPU runtimes for boards: the vendor's driver is loaded at run time (dlopen), so one
// tunefarm-board-runner serves CPU, CUDA and ROCm boards and builds where neither SDK is.
//
//   cuda:N   the CUDA driver API, libcuda.so.1 (comes with the NVIDIA driver); modules are
//            PTX text, compiled for the device by the driver when loaded.
//   rocm:N   HIP, libamdhip64.so (ROCm); modules are .hsaco code objects. The gfx name comes
//            from the HSA runtime (libhsa-runtime64.so.1), whose GPU agents HIP numbers in
//            the same order.
//
// Measurement follows the CPU protocol (runtime/kernel_library.h) with device events: inputs
// are filled on the host with fill_random and copied once; warm-up launches until the time
// per launch is steady; then `repeat` samples of `number` launches timed between two events
// (number raised so that a sample lasts min_repeat_ms); outputs are copied back for the
// correctness check. flush_cache writes a 256 MiB device buffer before each sample (larger
// than any GPU's L2). A kernel that faults surfaces as an error of the launch or the
// synchronisation, and the runner process ends: the next measurement gets a fresh context
// (a fault poisons a context for good). One runtime (one context) serves many measurements
// in a board's measuring process (tunefarm-board-runner --serve): release() after each
// unloads its modules and frees its device memory.
//
// Nothing here was run on a GPU on the machine it was written on (it has none): only the
// paths up to a missing driver are tested there (tests/farm). See docs/farm.md.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/target_kind.h"
#include "runtime/kernel_library.h"

namespace tf {

struct GpuDeviceSpec {
  TargetKind kind = TargetKind::Cuda;  // a GPU kind
  int index = 0;
};

// Parses "cuda:0", "rocm:1" (a missing index is 0); throws std::runtime_error naming the
// text for anything else.
GpuDeviceSpec parse_gpu_device(const std::string& text);

struct GpuDeviceInfo {
  std::string name;          // e.g. "NVIDIA H100 80GB HBM3", "AMD Instinct MI210"
  int64_t memory_bytes = 0;
  std::string arch;          // sm_90, gfx90a
  int devices = 0;           // the platform's devices on this machine (the driver's count)
  int driver_version = 0;    // CUDA: the driver's CUDA version, 1000 x major + 10 x minor (13000); 0 for ROCm
  std::string target() const;  // the compile target: cuda -arch=sm_90, rocm -mcpu=gfx90a
  std::string key() const;     // the default board key: cuda-sm90, rocm-gfx90a
};

struct GpuLaunchDims {
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> block{1, 1, 1};
  int64_t dynamic_shared_bytes = 0;
};

// What one call of a compiled function launches: its kernels in order (those load() found,
// one launch each), all on the arguments followed by the workspaces (device buffers of
// `workspace_elements` floats, allocated once for the measurement; split-K's partial sums).
struct GpuCall {
  std::vector<GpuLaunchDims> kernels;
  std::vector<int64_t> workspace_elements;
};
// What one call may ask: the compiler makes no more (compiler/gpu.h split_gpu_program) and
// boards take no more (runtime/measure_limits.h check_gpu_launch).
constexpr int kMaxGpuKernelsPerCall = 8;
constexpr int64_t kMaxGpuWorkspaceBytes = int64_t{4} << 30;
// Shared memory every CUDA kernel may have without asking (static arrays, or dynamic shared
// memory without cuFuncSetAttribute); past it the compiler makes the buffers dynamic and the
// runtimes allow the function that much (compiler/gpu.h GpuLimits).
constexpr int64_t kGpuStaticSharedBytes = 48 * 1024;

struct GpuModelImage;  // runtime/gpu_model/image.h

// One kernel launch: a function of a loaded module, its grid, and its arguments.
struct GpuLaunchStep {
  void* function = nullptr;
  GpuLaunchDims dims;
  void** params = nullptr;  // pointers to each argument's 8-byte device address
};

class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;
  virtual const GpuDeviceInfo& info() const = 0;
  // Loads a module (PTX text or .hsaco bytes) and finds `functions` (the kernels of one call,
  // in launch order); throws std::runtime_error with the driver's message.
  void load(const std::string& module, const std::vector<std::string>& functions);
  // Copies the inputs (buffers not marked output) to the device, times the kernel, and copies
  // the outputs back into `bufs`. A driver error (a faulting kernel) throws
  // std::runtime_error naming the call and the driver's error. One protocol for every vendor,
  // on the primitives below.
  TimingResult time(std::vector<std::vector<float>>& bufs, const std::vector<bool>& is_output,
                    const GpuCall& call, const TimingOptions& o);

  // Times compiled GPU models (read as data: runtime/gpu_model/image.h), interleaved sample by
  // sample as the CPU protocol times several (time_calls, with rewarm_ms). Each model's
  // modules are loaded, its constants and inputs (`inputs[m]`: its tensors' bytes in the ABI's
  // layout; int64 and bool ones converted to float32 into its arena, once) copied to the
  // device once; a call launches its kernels in order. After timing, `outputs[m]` gets its
  // outputs' bytes, its copies applied. Throws like time(), and std::bad_alloc-free
  // std::runtime_error when an int64 input is beyond +-2^24.
  std::vector<TimingResult> time_models(const std::vector<const GpuModelImage*>& models,
                                        const std::vector<std::vector<std::string>>& inputs,
                                        std::vector<std::vector<std::string>>& outputs, const TimingOptions& o);

  // Unloads every module load() and time_models() loaded and frees the device memory they
  // allocated, so the next measurement starts where the first did. Throws like the rest
  // (after a fault the context cannot be trusted: end the process instead).
  void release();

 protected:
  // The vendor's calls; each throws std::runtime_error naming the call on a driver error.
  virtual void* load_module(const std::string& module) = 0;
  virtual void* get_function(void* module, const std::string& name) = 0;
  virtual void unload_module(void* module) = 0;
  virtual void* alloc(size_t bytes) = 0;                                // device memory
  virtual void free_memory(void* p) = 0;
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void to_host(void* dst, void* src, size_t bytes) = 0;
  virtual void overwrite(void* p, size_t bytes) = 0;                    // every byte set to 1
  // Launches the steps in turn, n times over, between two device events, waits for the
  // second, and returns the milliseconds between them.
  virtual double launch_ms(int n, const std::vector<GpuLaunchStep>& steps) = 0;
  virtual void synchronize() = 0;

 private:
  // Launches `steps` until their time is steady (the warm-up rule of time()); sets
  // r.warmup_calls and r.number (calls per sample, min_repeat_ms long); the fastest ms.
  double warm_up(const std::vector<GpuLaunchStep>& steps, const TimingOptions& o, TimingResult& r);

  // load_module() and alloc() that release() undoes.
  void* tracked_module(const std::string& module);
  void* tracked_alloc(size_t bytes);

  std::vector<void*> functions_;  // what load() found, in order
  std::vector<void*> modules_, buffers_;  // what release() unloads and frees
};

// Opens device `spec` through its vendor's driver. Throws std::runtime_error when the driver
// library is missing ("cuda:0: no CUDA driver on this machine: cannot load libcuda.so.1
// (...)"), when it fails to start, or when there is no such device.
std::unique_ptr<GpuRuntime> open_gpu_runtime(const std::string& spec);

// "ptx" for PTX text, "cubin" for an NVIDIA ELF of machine code (ptxas's output), "hsaco" for
// an AMDGPU code object, "" for anything else.
std::string gpu_module_kind(const std::string& data);

// The SM a cubin holds machine code for (90 for sm_90 and sm_90a), read from its ELF header
// (both the ELF ABI of CUDA 12 and that of CUDA 13); 0 when `data` is not a cubin whose
// header says.
int cubin_sm(const std::string& data);

// Why a cubin for `sm` does not run on a device of `device_arch` (sm_90), or "" when it does:
// machine code runs on devices of its major version and a minor version at least its own.
std::string cubin_runs_on(int sm, const std::string& device_arch);

// Why `data` is not a module for a `kind` (cuda, rocm) board, or "" when it is.
std::string check_gpu_module(const std::string& data, TargetKind kind);

}  // namespace tf
