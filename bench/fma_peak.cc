// The machine's fp32 multiply-add peak with N threads at once, measured (each thread runs the
// single-thread probe of fma_peak.h; the figure is their sum): the ceiling bench/model_bench.py
// holds a model's time against.
//
//   bench_fma_peak [--threads 1,2] [--json]
//
// Prints one line per thread count, or with --json one object per line:
// {"threads": 2, "gflops": 234.9}. Exits 1 where this build cannot measure it (not x86-64, or
// no AVX2+FMA).
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/fma_peak.h"

int main(int argc, char** argv) {
  return tf::bench::guarded_main("bench_fma_peak", [&] {
    std::vector<int> threads = {1, 2};
    bool json = false;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--json") {
        json = true;
      } else if (a == "--threads" && i + 1 < argc) {
        threads = tf::bench::parse_list(argv[++i]);
      } else {
        std::fprintf(stderr, "bench_fma_peak: unknown argument %s (usage: bench_fma_peak [--threads 1,2] [--json])\n",
                     a.c_str());
        return 2;
      }
    }
    for (int n : threads) {
      if (n < 1 || n > 1024) {
        std::fprintf(stderr, "bench_fma_peak: --threads: %d is not between 1 and 1024\n", n);
        return 2;
      }
    }
    if (tf::bench::fma_peak_gflops() <= 0) {
      std::fprintf(stderr, "bench_fma_peak: this build cannot measure the FMA peak (x86-64 with AVX2+FMA only)\n");
      return 1;
    }
    for (int n : threads) {
      std::vector<double> each(n);
      std::vector<std::thread> pool;
      for (int t = 0; t < n; ++t) pool.emplace_back([&each, t] { each[t] = tf::bench::fma_peak_gflops(); });
      for (auto& t : pool) t.join();
      double sum = 0;
      for (double g : each) sum += g;
      if (json) std::printf("{\"threads\": %d, \"gflops\": %.1f}\n", n, sum);
      else std::printf("fp32 FMA peak, %d thread%s at once, measured: %.1f GFLOPS\n", n, n == 1 ? "" : "s", sum);
    }
    return 0;
  });
}
