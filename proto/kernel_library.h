// Loading and calling compiled kernels: the host side of the kernel ABI.
//
// A kernel library is a `.so` exporting `int F(float* a0, ..., float* an)`: inputs, then the
// output, all contiguous row-major float32 (compiler/driver.h writes them). Boards
// (tunefarm-board-runner) and the tuner's local runner both load and time kernels with it;
// it has no compiler or gRPC dependency, so a board never links LLVM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tf {

// The most arguments a kernel may take (data, weight, bias, output).
constexpr size_t kMaxKernelArgs = 8;

class KernelLibrary {
 public:
  // Throws std::runtime_error with dlerror()'s text when the library or symbol is missing.
  KernelLibrary(const std::string& path, const std::string& function);
  ~KernelLibrary();
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;

  // Calls the kernel; returns its status (0 is success).
  int call(const std::vector<float*>& args) const;

 private:
  void* handle_ = nullptr;
  void* fn_ = nullptr;
};

struct TimingOptions {
  int number = 1;            // calls per sample (grown until a sample lasts min_repeat_ms)
  int repeat = 3;            // samples
  double min_repeat_ms = 0;  // lower bound on one sample's duration
  bool flush_cache = false;  // overwrite kFlushBytes of memory before each sample
  double cooldown_ms = 0;    // sleep between samples
};

// Bytes written before each sample to push the kernel's data out of the caches.
constexpr size_t kFlushBytes = 64 << 20;

struct TimingResult {
  std::vector<double> samples_s;  // per-call time in seconds, one per sample
  int number = 0;                 // calls per sample actually used
  int status = 0;                 // the kernel's return value; nonzero stops timing
};

// One discarded warm-up call, then `repeat` samples of `number` calls each; `number` grows
// (during the first sample only) until a sample lasts at least min_repeat_ms.
TimingResult time_kernel(const KernelLibrary& k, const std::vector<float*>& args, const TimingOptions& o);

// Why `data` cannot be a kernel library, or "" when it can: a little-endian ELF shared
// object (ET_DYN) whose headers and loadable segments lie within the file; with
// `this_machine`, also of this machine's class and architecture. A truncated library would
// otherwise crash the loader (SIGBUS) and read as a kernel crash.
std::string check_kernel_library(const std::string& data, bool this_machine = true);

// The architecture a (little-endian ELF) library was built for, as Target::arch_name() names
// it (x86_64, aarch64, arm), "another architecture" for others, "" when it is not ELF.
std::string kernel_library_arch(const std::string& data);

// Deterministic inputs in [-1, 1) from a seed (splitmix64), the same on every board.
void fill_random(float* data, int64_t n, uint64_t seed);

}  // namespace tf
