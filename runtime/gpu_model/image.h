// A GPU model library read as data (runtime/gpu_model/plan.h): what a GPU board times without
// running the library's host code. The board's runner takes the library's tf_gpu_model
// section from the ELF file, checks every count, offset and index in it against the section's
// bytes and the plan's own sizes, and launches the kernels through its own driver runtime
// (runtime/gpu_runtime.h GpuRuntime::time_models), as the library's runtime would.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/gpu_model/plan.h"
#include "runtime/gpu_runtime.h"

namespace tf {

struct GpuModelImage {
  struct Tensor {
    int64_t elements = 0;
    int32_t dtype = TF_DTYPE_FLOAT32;  // TF_DTYPE_* (ONNX numbering)
    int64_t bytes() const { return elements * tf_dtype_bytes(dtype); }
  };
  enum class ArgKind { Input = 0, Output = 1, Constant = 2, Arena = 3 };
  struct Arg {
    ArgKind kind = ArgKind::Arena;
    int64_t index = 0;  // input or output number; byte offset in the constants or the arena
  };
  struct Launch {
    int64_t module = 0;
    std::string function;
    GpuLaunchDims dims;
    std::vector<Arg> args;
  };
  struct Conversion {
    int64_t input = 0, arena_offset = 0;
  };
  struct Copy {
    Arg from;
    int64_t output = 0;
    bool literal = false;
    std::string bytes;  // the literal
  };

  TargetKind platform = TargetKind::Cuda;  // a GPU kind
  std::vector<Tensor> inputs, outputs;
  std::vector<std::string> modules;
  std::vector<Launch> launches;
  std::vector<Conversion> conversions;
  std::vector<Copy> copies;
  int64_t arena_bytes = 0;
  std::string constants;
  // The plans (shape buckets) in the library, each checked; the fields above are bucket 0's,
  // which is what a board times.
  int buckets = 1;
};

// The most a model may ask of a board: launches, arguments per launch, modules, arena.
constexpr int64_t kGpuModelMaxLaunches = 100000;
constexpr int64_t kGpuModelMaxArgs = 256;
constexpr int64_t kGpuModelMaxModules = 64;
constexpr int64_t kGpuModelMaxArenaBytes = int64_t{64} << 30;

// Reads the GPU model in `library` (the bytes of a .so from compile --model for cuda or rocm).
// Returns "" and fills `image`, or says why it is not one ("not a GPU model library (no
// .tf_gpu_model section)", "its plan is damaged: launch 3 reads input 9 of 2", ...).
std::string read_gpu_model_image(const std::string& library, GpuModelImage& image);
// The same from the bytes of the section itself.
std::string read_gpu_model_section(const std::string& section, GpuModelImage& image);

}  // namespace tf
