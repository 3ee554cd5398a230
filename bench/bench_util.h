// What the kernel benchmarks share: list flags, the median timing loop and main's error path.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <sstream>
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

// "1,2,4" -> {1, 2, 4}.
inline std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// The median of timed calls of `run` after one warm-up: at least 5 and until `min_ms` have
// passed, at most 200.
template <typename F>
double median_seconds(F&& run, double min_ms) {
  run();  // warm-up
  std::vector<double> samples;
  auto start_all = std::chrono::steady_clock::now();
  while (samples.size() < 5 ||
         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_all).count() < min_ms) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (samples.size() >= 200) break;
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace tf::bench
