// Loading and calling compiled kernels: the host side of the kernel ABI.
//
// A kernel library is a `.so` exporting `int F(float* a0, ..., float* an)`: inputs, then the
// output, all contiguous row-major float32 (compiler/driver.h writes them). Boards
// (tunefarm-board-runner) and the tuner's local runner both load and time kernels with it;
// it has no compiler or gRPC dependency, so a board never links LLVM.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
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

// Seconds on the steady clock since `t`.
double seconds_since(std::chrono::steady_clock::time_point t);

struct TimingOptions {
  int number = 1;            // calls per sample, at least (raised to reach min_repeat_ms)
  int repeat = 3;            // samples
  double min_repeat_ms = 0;  // lower bound on one sample's duration
  bool flush_cache = false;  // overwrite kFlushBytes of memory before each sample
  double cooldown_ms = 0;    // sleep between samples
  // > 0: a kernel whose fastest warm-up call took longer than this (seconds) gets one sample
  // instead of `repeat`: it cannot be a contender, and its rank needs no more. Unless that
  // sample (`number` calls, not one) is within the bound: then it takes all `repeat`.
  double cut_slower_than_s = 0;
  // The warm-up lasts at least this long (ms) before its steadiness counts.
  double min_warmup_ms = 0;
  // Several kernels interleaved (time_calls): each sample after the first round starts with
  // untimed calls of the same kernel for at least this long (ms), so that a kernel whose
  // threads slept during the others' samples is awake again when its sample starts.
  double rewarm_ms = 0;
};

// Bytes written before each sample to push the kernel's data out of the caches.
constexpr size_t kFlushBytes = 64 << 20;

struct TimingResult {
  std::vector<double> samples_s;  // per-call time in seconds, one per sample
  int number = 0;                 // calls per sample actually used
  int status = 0;                 // the kernel's return value; nonzero stops timing
  int warmup_calls = 0;           // calls discarded as warm-up
  bool cut = false;               // one sample only (cut_slower_than_s)
};

// The warm-up: calls are discarded for at least min_warmup_ms, then until the kernel runs at
// its steady speed: until two calls in a row came within 25% of the fastest so far without
// beating it by more than 20%, or the warm-up has run kWarmupFactor x max(min_repeat_ms,
// kMinWarmupMs) more; at least two calls. (Measured on the 2-core VM: a fresh process's first
// 3 calls of a 0.7 ms conv at 2 threads took 23, 11 and 5 ms, and one discarded call left
// them in the samples; and a fresh runner runs a 1-thread 1.4 ms matmul at 1.7-2.4 ms for its
// first 100-300 ms, which the steady test misses and a 300 ms min_warmup_ms removes.)
constexpr double kWarmupFactor = 4;
constexpr double kMinWarmupMs = 50;
constexpr int kMaxRecalibrations = 3;

// The warm-up, then `repeat` samples of `number` calls each, `number` raised so that a sample
// of the fastest warm-up call's speed lasts min_repeat_ms. A sample shorter than half of
// min_repeat_ms means the warm-up stopped too early: it is discarded and `number` raised (at
// most kMaxRecalibrations times); every other sample is kept.
TimingResult time_kernel(const KernelLibrary& k, const std::vector<float*>& args, const TimingOptions& o);

// Several kernels, interleaved: kernel i is called on args[i] (the same inputs, outputs of its
// own, so each leaves its own result), each is warmed up in turn, then sample j of every
// kernel is taken before sample j+1 of any, so that a slow drift of the machine's
// speed (a neighbour's load, the clock) touches all of them alike and their ratio, sample by
// sample, stays steady where their absolute times do not (docs/tuning.md, "Fidelity"). A
// kernel that fails stops the timing; its result carries the status, the others' what they
// had. One result per kernel, in order.
std::vector<TimingResult> time_kernels(const std::vector<const KernelLibrary*>& ks,
                                       const std::vector<std::vector<float*>>& args, const TimingOptions& o);

// What time_kernels does, for any calls: calls[i]() is one call of kernel i, returning its
// status (0 is success). Compiled models are timed so (runtime/model_abi.h).
using TimedCall = std::function<int()>;
std::vector<TimingResult> time_calls(const std::vector<TimedCall>& calls, const TimingOptions& o);

// Why `data` cannot be a kernel library, or "" when it can: a little-endian ELF shared
// object (ET_DYN) whose headers and loadable segments lie within the file; with
// `this_machine`, also of this machine's class and architecture. A truncated library would
// otherwise crash the loader (SIGBUS) and read as a kernel crash.
std::string check_kernel_library(std::string_view data, bool this_machine = true);

// The architecture a (little-endian ELF) library was built for, as Target::arch_name() names
// it (x86_64, aarch64, arm; rocm for an AMDGPU code object, cuda for PTX text), "another
// architecture" for others, "" when it is neither ELF nor PTX.
std::string kernel_library_arch(const std::string& data);

// Deterministic inputs in [-1, 1) from a seed (splitmix64), the same on every board.
void fill_random(float* data, int64_t n, uint64_t seed);

// Element types of a kernel argument as boards are told them (ArgSpec.dtype): "" (float32),
// "float32", "int8", "uint8", "int32", "float16", "bfloat16" (each value's 16 bits), and
// "bfloat16x2" and "float16x2" (int32 words of two bfloat16 or float16, low half first:
// compiler/operators.h kBFloat16Pairs, kFloat16Pairs). The bytes of one element; 0 for an
// unknown name.
int arg_dtype_bytes(const std::string& dtype);
// fill_random's values made values of `dtype`, still as floats: v in [-1, 1) becomes
// floor(v * 128) for int8 and int32 and floor((v + 1) * 128) for uint8, so every int8 and
// uint8 value occurs and a reference reading them as floats sees them exactly; float16 and
// bfloat16 rounds them to the type (to nearest, ties to even). bfloat16x2
// words hold two of fill_random's values truncated to bfloat16, float16x2 words two rounded
// to float16, their bits in the float (store_as and load_as leave them as they are).
void fill_typed(const std::string& dtype, float* data, int64_t n, uint64_t seed);
// Rewrites n floats holding values of `dtype` in place as that type's elements (what a kernel
// with such an argument reads), and back (what it wrote, as floats).
void store_as(const std::string& dtype, float* data, int64_t n);
void load_as(const std::string& dtype, float* data, int64_t n);

}  // namespace tf
