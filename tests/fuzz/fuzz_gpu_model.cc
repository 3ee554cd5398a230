// libFuzzer target: the .tf_gpu_model section of an uploaded GPU model library, as a GPU
// board reads it (runtime/gpu_model/image.h: counts, offsets, indices, kernel names, literal
// outputs). Damage must be a message, never a crash, a read outside the bytes or an
// allocation without bound. The seeds are a Relu model compiled for cuda (its section only),
// and the same with two shape buckets (--dim batch=1,2: two plans).
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/gpu_model/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tf::GpuModelImage image;
  std::string why = tf::read_gpu_model_section(std::string(reinterpret_cast<const char*>(data), size), image);
  // Whatever it takes is within the limits the reader promises.
  if (why.empty() && (image.launches.size() > static_cast<size_t>(tf::kGpuModelMaxLaunches) ||
                      image.arena_bytes > tf::kGpuModelMaxArenaBytes || image.buckets < 1 ||
                      image.buckets > TF_GPU_MAX_PLANS)) {
    __builtin_trap();
  }
  return 0;
}
