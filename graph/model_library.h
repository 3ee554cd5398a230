// model_library: a compiled model loaded into this process through its C ABI
// (compiler/model_entry.h; loaded by runtime/model_abi.h), for `tunefarm run --model`,
// the Python package and the tests.
//
// What it promises: open() refuses, naming the file, a library that does not load or lacks a
// tf_model_* entry point; run() checks the count and sizes of what it is given against the
// model's own description before calling it, and turns a failed call into an error.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "runtime/model_abi.h"

namespace tf::graph {

struct TensorInfo {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
};

// One kernel call of a library as ModelLibrary::profile timed it: in all the model's calls it
// profiled, `calls` of it (0: its bucket did not run) took `seconds` in all, summed over the
// threads that made them (a bucket whose images run side by side makes them on several).
// Where the library's sidecar (<library>.json) describes its calls: `function` is the kernel's
// own name (a kernel built to another's code calls that one), `what` its workload or else the
// nodes it computes, and `flops` the workload's arithmetic a call (0: none, or not known).
// Without it, `function` is the function called and the rest empty.
struct KernelTime {
  std::string function, kind;  // kind: the name less tf_k<n>_ / tf_b<b>_k<n>_ ("conv2d_nchwc")
  std::string what;
  int64_t flops = 0;
  int bucket = 0;
  int64_t calls = 0;
  double seconds = 0;
};

// What ModelLibrary::profile measured.
struct ModelProfile {
  double seconds = 0;             // the profiled `run`'s own time, end to end
  std::vector<KernelTime> calls;  // every kernel call, in tf_model_call_function's order
  // Why a sidecar beside the library could not describe the calls ("" when it did, or there is
  // none).
  std::string sidecar_problem;
  // The calls that ran (a bucket that did not run made none), the longest first.
  std::vector<KernelTime> ran_longest_first() const;
};

class ModelLibrary {
 public:
  explicit ModelLibrary(const std::string& path);  // throws UserError
  ~ModelLibrary();
  ModelLibrary(const ModelLibrary&) = delete;
  ModelLibrary& operator=(const ModelLibrary&) = delete;

  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  uint64_t workspace_bytes() const { return abi_->workspace_bytes(); }

  // Shape buckets (compile --model --dim batch=1,8,32): at least one; bucket 0's shapes are
  // inputs()' and outputs()'. bucket_of: the bucket taking inputs of these shapes, or -1.
  int num_buckets() const;
  std::vector<TensorInfo> bucket_inputs(int b) const;
  std::vector<TensorInfo> bucket_outputs(int b) const;
  int bucket_of(const std::vector<Shape>& input_shapes) const;
  // The bucket inputs of these shapes run padded (compile --pad-batch): of the buckets that
  // may run padded, whose inputs have these shapes but for more rows of axis 0 (the same
  // count in every input), the one of fewest rows; -1 when none. `rows`: the inputs' rows.
  // The library's own choice (tf_model_padded_bucket_of: ModelAbi::padded_bucket_of).
  int padded_bucket_of(const std::vector<Shape>& input_shapes, int64_t* rows = nullptr) const;
  // Whether fewer rows may run bucket `b` padded.
  bool bucket_padded(int b) const { return abi_->buckets().at(static_cast<size_t>(b)).padded; }
  // The rows of axis 0 of the buckets fewer rows may run padded, "3, 8" ("" for none): what
  // messages refusing a shape list.
  std::string padded_sizes() const;

  // Runs the model on inputs in the model's order, in the bucket of their shapes, or padded up
  // to padded_bucket_of's (zero rows after the inputs'; the outputs' first rows kept); UserError
  // naming the shapes and the buckets' when none takes them. `outputs` are resized to fit.
  void run(const std::vector<const HostTensor*>& inputs, std::vector<HostTensor>& outputs,
           void* workspace = nullptr) const;

  // Runs the model on buffers already in the ABI's layout (contiguous; float32, int64, float16 and
  // bfloat16 bits, one byte per bool), which the caller checked against inputs() and outputs() (the
  // Python package passes NumPy arrays and PyTorch tensors so, without copies). UserError naming
  // the problem for an int64 input past what the kernels hold exactly; std::runtime_error when the
  // model runs out of memory or (a GPU library) its driver is missing or fails.
  // `bucket`: whose shapes the buffers have (bucket_inputs, bucket_outputs).
  void run_raw(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
               void* workspace = nullptr, int bucket = 0) const;

  // A GPU library's call on device buffers and a stream (tf_model_run_device: PyTorch's CUDA
  // tensors, no copies), whose shapes are `bucket`'s; returns once the kernels are queued.
  // Errors as run_raw's.
  void run_device(const std::vector<uint64_t>& inputs, const std::vector<uint64_t>& outputs,
                  void* stream, int bucket = 0) const;

  // A GPU library's kind ("cuda", "rocm"; "" for CPU libraries) and device (before the first
  // run; std::runtime_error with the library's reason when it refuses).
  const std::string& device_kind() const { return abi_->device_kind(); }
  void set_device(int index) const { abi_->set_device(index); }

  // Nothing for a library with a per-kernel profiler; UserError naming why for one without
  // (a GPU one, one compiled before it).
  void check_profiler() const;
  // Calls `run` (which runs the model) with the library's per-kernel profiler on, and returns
  // the time of each of its kernel calls (every bucket's in turn), described by the sidecar
  // where it can be. UserError as check_profiler says.
  ModelProfile profile(const std::function<void()>& run) const;

 private:
  // Nothing for status 0; else throws what the run's status means: UserError for an int64
  // input out of range, std::runtime_error (the library's own message where it has one).
  void check_status(int status) const;
  void run_padded(const std::vector<const HostTensor*>& inputs, std::vector<HostTensor>& outputs,
                  void* workspace, int bucket, int64_t rows) const;

  std::string path_;
  std::unique_ptr<ModelAbi> abi_;
  std::vector<TensorInfo> inputs_, outputs_;
};

}  // namespace tf::graph
