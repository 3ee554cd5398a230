// The host side of a compiled model's C ABI (docs/models.md, "C ABI"), without the compiler:
// what a board's runner (runtime/runner_main.cc) and graph::ModelLibrary both load.
//
// A model library exports tf_model_run(inputs, outputs, workspace) and describes its inputs
// and outputs (tf_model_num_inputs, tf_model_input_name/_ndim/_shape/_dtype, the same for
// outputs) and its workspace (tf_model_workspace_bytes). ModelAbi refuses, naming the file
// and the entry point, a library that lacks one, an element type it does not know, and a
// shape with a negative dimension or more than kModelMaxElements elements.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/gpu_model/plan.h"  // TF_DTYPE_*
#include "runtime/kernel_library.h"

namespace tf {

// Element types of model inputs and outputs, by their ONNX codes (what the ABI's _dtype
// entries return). Bools are one byte each, 0 or 1; float16 and bfloat16 two (their bits).
enum class ModelDType : int32_t {
  F32 = TF_DTYPE_FLOAT32,
  I64 = TF_DTYPE_INT64,
  Bool = TF_DTYPE_BOOL,
  F16 = TF_DTYPE_FLOAT16,
  BF16 = TF_DTYPE_BFLOAT16
};
inline int64_t model_dtype_bytes(ModelDType t) { return tf_dtype_bytes(static_cast<int32_t>(t)); }

// The most elements a model input or output may have (each dimension at least 0).
constexpr int64_t kModelMaxElements = int64_t{1} << 36;

struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape;
  ModelDType dtype = ModelDType::F32;
  int64_t elements() const;
  int64_t bytes() const;  // elements x the element's size
};

// The largest int64 a model input may hold, in magnitude: every integer up to it is exact in
// the float32 the kernels compute in. tf_model_run returns -2 for an input beyond it.
constexpr int64_t kModelMaxExactInt = int64_t{1} << 24;

// tf_model_run's statuses besides 0.
constexpr int kModelOutOfMemory = -1;
constexpr int kModelIntOutOfRange = -2;
constexpr int kModelDriverError = -3;  // GPU libraries: the driver is missing or failed
constexpr int kModelNoBucket = -4;     // no shape bucket of the library has the inputs' shapes

// The most shape buckets a library may declare (graph/model_compiler.h kMaxBuckets).
constexpr int kModelMaxBuckets = 64;

// One shape bucket of a library (compiler/model_entry.h, "Shape buckets"): its inputs' and
// outputs' shapes, in the model's order (names and types are the library's tables').
struct ModelBucket {
  std::vector<std::vector<int64_t>> inputs, outputs;
  // Fewer rows of axis 0 may run this bucket padded (tf_model_bucket_padded: compile
  // --pad-batch); false for libraries without that entry point.
  bool padded = false;
};

// A library that cannot be a model, or does not load; the message names the file.
class ModelLoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One kernel call of a library (tf_model_call_function, tf_model_call_bucket): the called
// function's name and the bucket whose run makes it.
struct ModelCall {
  std::string function;
  int bucket = 0;
};

// The most kernel calls a library may list (every bucket's).
constexpr int32_t kModelMaxCalls = 1 << 20;

// A library's profiler: fn(ctx, call, 0) before kernel call `call` (an index into
// ModelAbi::calls()), fn(ctx, call, 1) after it, on the thread that makes the call.
using ModelProfilerFn = void (*)(void* ctx, int32_t call, int32_t end);

class ModelAbi {
 public:
  explicit ModelAbi(const std::string& path);  // throws ModelLoadError
  ~ModelAbi();
  ModelAbi(const ModelAbi&) = delete;
  ModelAbi& operator=(const ModelAbi&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<ModelTensor>& inputs() const { return inputs_; }
  const std::vector<ModelTensor>& outputs() const { return outputs_; }
  uint64_t workspace_bytes() const { return workspace_bytes_; }  // enough for every bucket

  // Every library has at least one bucket; bucket 0's shapes are inputs()' and outputs'.
  // Libraries from before buckets have that one.
  const std::vector<ModelBucket>& buckets() const { return buckets_; }
  // The bucket whose input shapes are exactly `shapes` (one per input), or -1.
  int bucket_of(const std::vector<std::vector<int64_t>>& shapes) const;
  // The bucket that inputs of `shapes` run padded in (compile --pad-batch), as the library's
  // tf_model_padded_bucket_of chooses it (compiler/model_entry.h), its rows to *rows; -1 when
  // none (shapes of another count or rank than the inputs' too).
  int padded_bucket_of(const std::vector<std::vector<int64_t>>& shapes,
                       int64_t* rows = nullptr) const;
  // The inputs and outputs of bucket `b` (names and types as inputs()' and outputs()').
  std::vector<ModelTensor> bucket_inputs(int b) const;
  std::vector<ModelTensor> bucket_outputs(int b) const;

  // One call: buffers in the model's order, laid out as the ABI says (contiguous; float32,
  // int64, one byte per bool). `workspace` null: the library's own, kept between calls.
  // Returns tf_model_run's status (0, kModelOutOfMemory, kModelIntOutOfRange,
  // kModelDriverError).
  int run(const void* const* inputs, void* const* outputs, void* workspace = nullptr) const;
  // The same for bucket `b`'s shapes (kModelNoBucket for a bucket the library does not have).
  int run_bucket(int b, const void* const* inputs, void* const* outputs, void* workspace = nullptr) const;

  // A GPU library's call on device buffers (CUdeviceptr / hipDeviceptr_t) and a stream
  // (tf_model_run_device, or tf_model_run_device_bucket for bucket `b` > 0): its status
  // (kModelNoBucket for a bucket the library does not have); std::runtime_error for a CPU
  // library.
  int run_device(const uint64_t* inputs, const uint64_t* outputs, void* stream, int b = 0) const;

  // Per-kernel profiling (docs/models.md, "Profiling"): CPU libraries compiled since it
  // (2026-12-07) have it; GPU libraries do not. calls(): empty without it.
  bool can_profile() const { return set_profiler_ != nullptr; }
  const std::vector<ModelCall>& calls() const { return calls_; }
  // Why the library cannot be profiled, naming it ("" when it can).
  std::string why_no_profiler() const;
  // `fn` called around every kernel call from now on (nullptr: none); set it between runs,
  // not during one. std::runtime_error (why_no_profiler) when !can_profile().
  void set_profiler(ModelProfilerFn fn, void* ctx) const;

  // GPU model libraries (runtime/gpu_model/runtime.c): "cuda" or "rocm"; "" for a CPU one.
  const std::string& device_kind() const { return device_kind_; }
  // What went wrong in the last failed call, as the library says it ("" when it does not).
  std::string last_error() const;
  // A GPU library's device, before its first call; throws std::runtime_error with the
  // library's message when it refuses, or for a CPU library and an index other than 0.
  void set_device(int index) const;

 private:
  std::string path_;
  void* handle_ = nullptr;
  int (*run_)(const void* const*, void* const*, void*) = nullptr;
  int32_t (*run_bucket_)(int32_t, const void* const*, void* const*, void*) = nullptr;
  int32_t (*padded_bucket_of_)(const int64_t* const*, int64_t*) = nullptr;
  std::vector<ModelBucket> buckets_;
  const char* (*last_error_)() = nullptr;
  int32_t (*set_device_)(int32_t) = nullptr;
  int32_t (*run_device_)(const uint64_t*, const uint64_t*, void*) = nullptr;
  int32_t (*run_device_bucket_)(int32_t, const uint64_t*, const uint64_t*, void*) = nullptr;
  void (*set_profiler_)(ModelProfilerFn, void*) = nullptr;
  std::vector<ModelCall> calls_;
  std::string device_kind_;
  std::vector<ModelTensor> inputs_, outputs_;
  uint64_t workspace_bytes_ = 0;
};

// Inputs and outputs for calls of `m` when nobody gave inputs, the same on every board:
// float32 input i filled by fill_random(seed + i), int64 inputs zeros (valid indices), bool
// inputs true where fill_random(seed + i) is negative. Throws std::bad_alloc when they do not
// fit the process's memory limit.
struct ModelBuffers {
  std::vector<std::vector<uint64_t>> inputs, outputs;  // 8-byte aligned storage
  std::vector<const void*> input_ptrs;
  std::vector<void*> output_ptrs;
};
ModelBuffers make_model_buffers(const ModelAbi& m, uint64_t seed);
ModelBuffers make_model_buffers(const std::vector<ModelTensor>& inputs, const std::vector<ModelTensor>& outputs,
                                uint64_t seed);

// Why two models cannot be timed on the same buffers ("" when they can): their inputs and
// outputs differ in number, shape or type (names may differ).
std::string model_signature_mismatch(const ModelAbi& a, const ModelAbi& b);
// The same for models described by their tensors, named `a` and `b` in the message.
std::string model_signature_mismatch(const std::vector<ModelTensor>& a_inputs, const std::vector<ModelTensor>& a_outputs,
                                     const std::vector<ModelTensor>& b_inputs, const std::vector<ModelTensor>& b_outputs,
                                     const std::string& a, const std::string& b);

// How a model is timed against another build of it (tune --model's "what it bought"),
// locally and on boards alike: `rounds` samples of each, interleaved, each sample the mean of
// `calls` calls (more where they take under min_repeat_ms) after `rewarm_ms` of untimed ones. Each library has its own thread pool
// (compiler/thread_pool_ir.h): after the other's calls its workers sleep, and a woken pool
// can take up to about 20 ms of calls before its worker runs beside the caller, so every
// sample starts warm.
struct ModelTimingSettings {
  int rounds = 10;
  int calls = 3;
  double min_repeat_ms = 1;
  double rewarm_ms = 50;
  double min_warmup_ms = 300;
};
TimingOptions model_timing_options(const ModelTimingSettings& s = {});

}  // namespace tf
