// What the kernel benchmarks share: list flags, the median timing loop and main's error path.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tf::bench {

// Runs a benchmark's main body: an exception (bad input such as a database that cannot be
// opened) becomes one line on stderr naming the benchmark and exit status 2, not an abort.
template <typename F>
int guarded_main(const char* name, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 2;
  }
}

// "1,2,4" -> {1, 2, 4}; anything else is an error naming the item.
inline std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) throw std::invalid_argument("'" + item + "' in '" + s + "' is not an integer");
    out.push_back(v);
  }
  return out;
}

// The median of timed calls of `run` after a warm-up of 20 ms (at least one call): at least 5
// and until `min_ms` have passed, at most 200. The warm-up is for thread pools woken after
// an idle spell: on the 2-core znver5 VM (2026-11-26), a 2-thread 97x131x67 kernel timed
// right after its pool's worker slept ran at its 1-thread speed in about half the runs (the
// worker shared the caller's CPU for the 200 calls), and at 1.45-1.6x OpenBLAS in 9 of 9
// after 20 ms of calls (5 ms: 4 of 9).
// `before` runs ahead of every call, untimed (bench_conv --cold: evicting the caches).
template <typename F, typename G>
double median_seconds(F&& run, double min_ms, G&& before) {
  auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  do run();
  while (std::chrono::steady_clock::now() < warm_until);
  std::vector<double> samples;
  auto start_all = std::chrono::steady_clock::now();
  while (samples.size() < 5 ||
         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_all).count() < min_ms) {
    before();
    auto t0 = std::chrono::steady_clock::now();
    run();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (samples.size() >= 200) break;
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

template <typename F>
double median_seconds(F&& run, double min_ms) {
  return median_seconds(run, min_ms, [] {});
}

}  // namespace tf::bench
