// Runs one kernel on an aarch64 system (under qemu-aarch64 here, a Raspberry Pi in the farm):
//   harness KERNEL.so FUNCTION SEED OUT.bin N0[:DTYPE] N1 ... NOUT[:DTYPE]
// Inputs i get fill_typed(dtype, seed + i) values, passed as their type's elements (float32
// unless a DTYPE is given: int8, uint8, int32); the output's values are written to OUT.bin
// as floats.
// Exit status: the kernel's return value, or 3 for bad usage.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/kernel_library.h"

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s KERNEL.so FUNCTION SEED OUT.bin N0 ... NOUT\n", argv[0]);
    return 3;
  }
  tf::KernelLibrary k(argv[1], argv[2]);
  uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  std::vector<std::vector<float>> bufs;
  std::vector<std::string> dtypes;
  for (int i = 5; i < argc; ++i) {
    std::string a = argv[i];
    size_t colon = a.find(':');
    bufs.emplace_back(std::strtoull(a.substr(0, colon).c_str(), nullptr, 10));
    dtypes.push_back(colon == std::string::npos ? "" : a.substr(colon + 1));
  }
  for (size_t i = 0; i + 1 < bufs.size(); ++i) {
    auto n = static_cast<int64_t>(bufs[i].size());
    tf::fill_typed(dtypes[i], bufs[i].data(), n, seed + i);
    tf::store_as(dtypes[i], bufs[i].data(), n);
  }
  for (float& x : bufs.back()) x = std::nanf("");
  std::vector<float*> args;
  for (auto& b : bufs) args.push_back(b.data());
  int status = k.call(args);
  tf::load_as(dtypes.back(), bufs.back().data(), static_cast<int64_t>(bufs.back().size()));
  std::FILE* f = std::fopen(argv[4], "wb");
  if (!f) return 3;
  std::fwrite(bufs.back().data(), sizeof(float), bufs.back().size(), f);
  std::fclose(f);
  return status;
}
