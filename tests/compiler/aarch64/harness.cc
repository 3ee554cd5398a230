// Runs one kernel on an aarch64 system (under qemu-aarch64 here, a Raspberry Pi in the farm):
//   harness KERNEL.so FUNCTION SEED OUT.bin N0 N1 ... NOUT
// Inputs i get fill_random(seed + i) values; the output's floats are written to OUT.bin.
// Exit status: the kernel's return value, or 3 for bad usage.
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
  for (int i = 5; i < argc; ++i) bufs.emplace_back(std::strtoull(argv[i], nullptr, 10));
  for (size_t i = 0; i + 1 < bufs.size(); ++i) {
    tf::fill_random(bufs[i].data(), static_cast<int64_t>(bufs[i].size()), seed + i);
  }
  for (float& x : bufs.back()) x = std::nanf("");
  std::vector<float*> args;
  for (auto& b : bufs) args.push_back(b.data());
  int status = k.call(args);
  std::FILE* f = std::fopen(argv[4], "wb");
  if (!f) return 3;
  std::fwrite(bufs.back().data(), sizeof(float), bufs.back().size(), f);
  std::fclose(f);
  return status;
}
