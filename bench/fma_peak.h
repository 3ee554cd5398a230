// The machine's fp32 multiply-add peak, measured: the ceiling that puts the benchmarks' ratios
// in proportion (when a peer runs at 85% of it, nothing can be 1.2x faster).
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

namespace tf::bench {

// Whether /proc/cpuinfo lists the CPU flag. (__builtin_cpu_supports cannot be trusted here:
// the LLVM libraries linked in bring a cpu model of another layout.)
inline bool cpu_has(const std::string& flag) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  }
  return false;
}

#if defined(__x86_64__)
// One thread's fp32 multiply-add peak, measured: 12 independent chains of vector FMAs (enough
// to cover the latency of two FMA pipes), 20M steps each: 40 ms at 200 GFLOPS.
inline constexpr long kPeakSteps = 20'000'000;
// Twelve named accumulators, not an array: GCC kept an array in memory (58 GFLOPS where the
// registers give 211).
#define TF_FMA_PEAK(V, SET1, FMA, LANES)                                                     \
  V a0 = SET1(1.0f), a1 = SET1(2.0f), a2 = SET1(3.0f), a3 = SET1(4.0f), a4 = SET1(5.0f),     \
    a5 = SET1(6.0f), a6 = SET1(7.0f), a7 = SET1(8.0f), a8 = SET1(9.0f), a9 = SET1(10.0f),    \
    a10 = SET1(11.0f), a11 = SET1(12.0f);                                                    \
  V b = SET1(1.0000001f), c = SET1(1e-7f);                                                   \
  auto t0 = std::chrono::steady_clock::now();                                                \
  for (long i = 0; i < kPeakSteps; ++i) {                                                    \
    a0 = FMA(a0, b, c), a1 = FMA(a1, b, c), a2 = FMA(a2, b, c), a3 = FMA(a3, b, c);          \
    a4 = FMA(a4, b, c), a5 = FMA(a5, b, c), a6 = FMA(a6, b, c), a7 = FMA(a7, b, c);          \
    a8 = FMA(a8, b, c), a9 = FMA(a9, b, c), a10 = FMA(a10, b, c), a11 = FMA(a11, b, c);      \
  }                                                                                          \
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();   \
  V sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;                       \
  float keep[LANES];                                                                         \
  std::memcpy(keep, &sum, sizeof keep);                                                      \
  volatile float sink = keep[0];                                                             \
  (void)sink;                                                                                \
  return 12.0 * kPeakSteps * LANES * 2 / s * 1e-9;

__attribute__((target("avx512f"))) inline double fma_peak_avx512() {
  TF_FMA_PEAK(__m512, _mm512_set1_ps, _mm512_fmadd_ps, 16)
}
__attribute__((target("avx2,fma"))) inline double fma_peak_avx2() {
  TF_FMA_PEAK(__m256, _mm256_set1_ps, _mm256_fmadd_ps, 8)
}
#undef TF_FMA_PEAK
#endif

// A single thread's fp32 FMA peak in GFLOPS (the best of three), or 0 where this build cannot
// measure it.
inline double fma_peak_gflops() {
  double best = 0;
#if defined(__x86_64__)
  for (int i = 0; i < 3; ++i) {
    if (cpu_has("avx512f")) best = std::max(best, fma_peak_avx512());
    else if (cpu_has("avx2") && cpu_has("fma")) best = std::max(best, fma_peak_avx2());
  }
#endif
  return best;
}

}  // namespace tf::bench
