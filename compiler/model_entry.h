// codegen_model_entry: the entry points of a compiled model, as object code for one CPU target.
//
// The kernels of a model are compiled one by one (compiler/codegen_llvm.h); this emits what
// ties them together into one library with a C ABI (docs/models.md has it for users):
//
//   int32_t        tf_model_num_inputs(void);      and tf_model_num_outputs
//   const char*    tf_model_input_name(int32_t i);  NULL when i is out of range
//   int32_t        tf_model_input_ndim(int32_t i);  -1 when i is out of range
//   const int64_t* tf_model_input_shape(int32_t i); NULL when i is out of range
//   int32_t        tf_model_input_dtype(int32_t i); ONNX element type: 1 float32, 7 int64,
//                                                   9 bool (one byte), 10 float16, 16
//                                                   bfloat16 (two bytes); -1 out of range
//   (and the same five for outputs)
//   uint64_t       tf_model_workspace_bytes(void);
//   int32_t        tf_model_run(const void* const* inputs, void* const* outputs, void*
//   workspace);
//
// tf_model_run calls the kernels in order on the caller's input and output buffers (dense
// row-major, in the model's order, each of its dtype), the constants embedded in the
// library, and intermediates at fixed offsets of the workspace (tf_model_workspace_bytes,
// 64-byte aligned); a NULL workspace is allocated and freed within the call. Kernels compute
// in float32: int64 and bool inputs are converted into the workspace first, and an int64
// input must lie within +-2^24 (16777216), where float32 holds every integer. It returns 0;
// -1 when memory ran out; -2 when an int64 input is out of that range (nothing computed; in
// a batch run one image at a time, nothing of that image).
// The outputs are unspecified after an error. Concurrent calls need their own workspaces.
// A bucket of a batch compiled one image at a time (EntrySpec::images, graph/image_loop.h)
// runs its kernels once per slice of axis 0, on a team's threads (each image whole on one
// thread, on a workspace slot of its own) or one after another; the same results either way.
//
// Shape buckets (compile --model --dim batch=1,8,32): one library computes the model at each
// of several sets of input shapes, each with kernels of its own. The tables above and
// tf_model_run are bucket 0's (the first sizes given); tf_model_workspace_bytes is the largest
// bucket's (a workspace of that size serves every bucket). Every library, one bucket or many,
// also exports:
//
//   int32_t        tf_model_num_buckets(void);
//   const int64_t* tf_model_bucket_input_shape(int32_t b, int32_t i);   NULL out of range;
//   const int64_t* tf_model_bucket_output_shape(int32_t b, int32_t i);  ranks as the tables'
//   int32_t        tf_model_bucket_of(const int64_t* const* input_shapes);  -1: no bucket
//   int32_t        tf_model_run_bucket(int32_t b, inputs, outputs, workspace);
//   int32_t        tf_model_run_shaped(const int64_t* const* input_shapes, inputs, outputs,
//                                      workspace);
//
// tf_model_run_shaped runs the bucket whose input shapes are exactly the given ones (each
// input's dimensions, its rank as in the tables); both return -4 when no bucket has them.
//
//   int32_t        tf_model_bucket_padded(int32_t b);   1: bucket b may run fewer rows of
//                                                      axis 0 padded (--pad-batch), else 0
//
//   int32_t        tf_model_padded_bucket_of(const int64_t* const* input_shapes, int64_t* rows);
//
// tf_model_padded_bucket_of is that bucket: of the padded ones, the one of fewest rows whose
// inputs have the given shapes but for more rows of axis 0 (as many in every input, at least 1;
// each input's dimensions of its rank in the tables), the rows to *rows (unless NULL); -1 when
// none. tf_model_run_shaped then runs fewer rows in it: copies of the rows in zero-filled
// buffers of its size (64-byte aligned), the outputs' first rows copied back (-1 when the
// copies do not fit in memory). (The GPU runtime, ModelLibrary and Python ask it, not a copy of
// the rule.)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/target.h"

namespace tf {

// Element types as ONNX's TensorProto numbers them.
// Float16 and BFloat16: a float16 model's inputs and outputs, whose kernels read and write their
// 16-bit bits (graph/graph.h); the entry point only copies them.
enum class EntryType : int32_t { Float32 = 1, Int64 = 7, Bool = 9, Float16 = 10, BFloat16 = 16 };

struct EntryTensor {
  std::string name;
  std::vector<int64_t> shape;
  EntryType dtype = EntryType::Float32;
};

// A buffer a kernel reads or writes.
struct EntryBuffer {
  enum class Kind { Input, Output, Constant, Workspace };
  Kind kind;
  int64_t index;  // input, output or constant number; the workspace's byte offset
};

struct EntryCall {
  std::string function;  // `i32 function(ptr...)` returning 0, or -1 when out of memory
  std::vector<EntryBuffer> args;
};

// After the calls: output `output` gets a copy of `from` (outputs that are inputs, constants
// or other outputs of the model), float32 data converted to the output's dtype (an int64 by
// rounding toward zero, saturating, NaN as 0; a bool as x != 0); or, with `literal`, those
// bytes as they are (a constant output of another dtype than float32).
struct EntryCopy {
  EntryBuffer from;
  int64_t output;
  std::vector<uint8_t> literal;
};

// Before the calls: a non-float32 input converted to float32 at this workspace offset, where
// the kernels read it.
struct EntryInputConversion {
  int64_t input;
  int64_t workspace_offset;
};

// The largest int64 an input may hold (in magnitude): every integer up to it is a float32.
constexpr int64_t kRunnerMaxExactInt = int64_t{1} << 24;

struct EntrySpec {
  std::vector<EntryTensor> inputs, outputs;
  std::vector<EntryInputConversion> conversions;
  std::vector<const std::vector<float>*> constants;  // embedded, read-only, 64-byte aligned
  std::vector<EntryCall> calls;
  std::vector<EntryCopy> copies;
  int64_t workspace_bytes = 0;
  // The conversions, calls and copies compute one slice of axis 0 of every input and output
  // (inputs and outputs hold `images` of them, the shapes above are the whole tensors'): the
  // run repeats them for each slice in turn on the same workspace (graph/image_loop.h).
  int64_t images = 1;
  // With images > 1: workspace slots of slot_bytes each (workspace_bytes covers them all). A
  // team of threads runs the images on threads of their own, one slot a thread, where it has
  // no more threads than slots (and than images); otherwise the images run one after another on
  // slot 0, each kernel on the team.
  int64_t image_slots = 1;
  int64_t slot_bytes = 0;
  // Calls with fewer rows of axis 0 (every input's and output's) may run this bucket padded:
  // compiled with --pad-batch, where the model keeps those rows apart (graph/image_loop.h).
  bool padded = false;
};

// Object code defining the tf_model_* functions of a library serving `buckets` (one or more,
// bucket 0 first; the same inputs and outputs but for their sizes); the kernels are external
// symbols. Constants with the same bytes in several buckets are embedded once.
std::string codegen_model_entry(const std::vector<EntrySpec>& buckets, const Target& target);

// A model for a GPU (compile_model for cuda, rocm): each call of the EntrySpec is one or more
// kernel launches (split-K: the partial sums, then their sum) of a code module, each on the
// call's arguments followed by its workspaces (places in the arena).
struct GpuEntryKernel {
  std::string function;
  std::array<int64_t, 3> grid{1, 1, 1}, block{1, 1, 1};
  int64_t dynamic_shared_bytes = 0;
};
struct GpuEntryCall {
  int64_t module = 0;
  std::vector<GpuEntryKernel> kernels;
  std::vector<int64_t> workspace_offsets;  // byte offsets in the arena
};
struct GpuEntrySpec {
  TargetKind platform = TargetKind::Cuda;  // cuda, rocm
  std::vector<std::string> modules;   // PTX text, or .hsaco code objects
  std::vector<GpuEntryCall> calls;    // one per EntrySpec call, every bucket's in order
};

// Object code for `host` (the machine the library runs on): the tf_model_* tables of `buckets`
// (bucket 0's, and the bucket table of every bucket; tf_model_workspace_bytes 0: a bucket's
// workspace_bytes is its device arena) and the launch plans (one per bucket), code modules and
// constants of runtime/gpu_model/plan.h. `gpu.calls` are every bucket's calls in order. Linked
// with gpu_model_runtime_object(), which defines tf_model_run and the other runs.
std::string codegen_gpu_model_entry(const std::vector<EntrySpec>& buckets, const GpuEntrySpec& gpu,
                                    const Target& host);

// The object file of runtime/gpu_model/runtime.c for this machine (embedded at build time).
std::string_view gpu_model_runtime_object();

}  // namespace tf
