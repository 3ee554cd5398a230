// libFuzzer target: .npy files as `run --model --input` reads them (hostile headers: shapes,
// keys, padding, sizes). Bad input must be a UserError, never a crash or an allocation
// without bound.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "graph/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tf::graph::parse_npy(std::string(reinterpret_cast<const char*>(data), size), "fuzz.npy");
  } catch (const tf::UserError&) {
  }
  return 0;
}
