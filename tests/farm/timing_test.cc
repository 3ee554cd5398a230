// The timing protocol (runtime/kernel_library.h): warm-up, calibration of the calls per sample,
// and the cut of non-contenders, on kernels whose call times are known (kernels/phases.c).
// The kernels wait on the clock, so their calls last at least the stated time; the checks
// leave a wide margin above it for a loaded machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

#include "runtime/kernel_library.h"

namespace tf {
namespace {

// Each kernel counts its calls in a static variable, so each is timed once in this program.
TimingResult time_fresh(const std::string& function, const TimingOptions& o) {
  KernelLibrary k(TF_KERNEL_PHASES, function);
  std::vector<float> in(1, 1.0f), out(1);
  return time_kernel(k, {in.data(), out.data()}, o);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST(Timing, SlowFirstCallsAreWarmUpNotSamples) {
  TimingResult r = time_fresh("settling", {1, 5, 2, false, 0, 0});
  EXPECT_EQ(r.status, 0);
  EXPECT_GE(r.warmup_calls, 6) << "the 40, 20, 10 and 5 ms calls and two steady ones";
  ASSERT_EQ(r.samples_s.size(), 5u);
  EXPECT_LT(median(r.samples_s), 0.004) << "a slow first call was taken as a sample";
  // From the steady speed (0.5 ms: 4 calls for min_repeat_ms 2 on an idle machine), not from
  // the slow first calls (which give 1); no tighter bound, a loaded machine stretches calls.
  EXPECT_GE(r.number, 2) << "calls per sample from the steady speed and min_repeat_ms (2)";
  EXPECT_FALSE(r.cut);
}

TEST(Timing, APlateauOfSlowCallsIsCaughtByTheFirstShortSample) {
  TimingResult r = time_fresh("plateau", {1, 3, 10, false, 0, 0});
  ASSERT_EQ(r.samples_s.size(), 3u);
  // The warm-up stops on the plateau (20 ms, steady), calibrates one call a sample, and the
  // first sample (0.5 ms, under half of min_repeat_ms) sends it back to calibrate: more than
  // one call a sample (about 20 on an idle machine; a loaded one stretches the 0.5 ms calls,
  // so no tighter bound: CI once saw 9).
  EXPECT_GE(r.number, 2);
  EXPECT_GE(r.warmup_calls, 4);
  EXPECT_LT(median(r.samples_s), 0.004);
}

TEST(Timing, ANonContenderGetsOneSample) {
  TimingResult cut = time_fresh("steady3ms", {1, 5, 0, false, 0, 0.001});
  EXPECT_TRUE(cut.cut);
  EXPECT_EQ(cut.samples_s.size(), 1u);
  EXPECT_GE(cut.samples_s[0], 0.003);
  TimingResult full = time_fresh("steady3ms", {1, 5, 0, false, 0, 1.0});
  EXPECT_FALSE(full.cut);
  EXPECT_EQ(full.samples_s.size(), 5u);
}

// A warm-up that ends on a slow plateau (20 ms calls) cuts the kernel; its first sample (0.5 ms
// calls) is within the bound, so it is a contender after all and takes every sample.
TEST(Timing, ACutKernelWhoseSampleIsWithinTheBoundTakesEverySample) {
  TimingResult r = time_fresh("plateau_again", {1, 3, 10, false, 0, 0.010});
  EXPECT_FALSE(r.cut);
  ASSERT_EQ(r.samples_s.size(), 3u);
  EXPECT_LT(median(r.samples_s), 0.004);
}

// Two kernels timed together take turns: after both warm-ups, sample j of each comes before
// sample j+1 of either (the log alternates in runs: warm-up a, warm-up b, then a, b per sample).
TEST(Timing, KernelsTimedTogetherTakeTurnsSampleBySample) {
  KernelLibrary a(TF_KERNEL_PHASES, "log_a"), b(TF_KERNEL_PHASES, "log_b");
  const int capacity = 1 << 16;
  std::vector<float> in(1, static_cast<float>(capacity)), log(capacity, 0.0f);
  std::vector<float*> args{in.data(), log.data()};
  std::vector<TimingResult> r = time_kernels({&a, &b}, {args, args}, {1, 5, 2, false, 0, 0});
  ASSERT_EQ(r.size(), 2u);
  ASSERT_EQ(r[0].status, 0) << "the log overflowed";
  ASSERT_EQ(r[1].status, 0);
  EXPECT_EQ(r[0].samples_s.size(), 5u);
  EXPECT_EQ(r[1].samples_s.size(), 5u);
  int n = static_cast<int>(log[0]), runs = n > 0 ? 1 : 0;
  for (int i = 2; i <= n; ++i) runs += log[static_cast<size_t>(i)] != log[static_cast<size_t>(i - 1)];
  EXPECT_EQ(log[1], 1.0f) << "a is warmed up first";
  EXPECT_EQ(runs, 2 + 2 * 5) << "two warm-ups, then a and b in turn for each of the 5 samples";
}

// With rewarm_ms, each sample of a kernel timed with others starts with untimed calls of that
// kernel: every turn has at least two calls (a rewarm call, then the one-call sample), so no
// run of the call log is a single call. Without it the turns are single calls.
TEST(Timing, InterleavedSamplesStartWarmWithRewarm) {
  for (double rewarm_ms : {0.0, 2.0}) {
    std::vector<int> log;
    std::vector<TimedCall> calls;
    for (int k = 0; k < 2; ++k) {
      calls.push_back([&log, k] {
        log.push_back(k);
        return 0;
      });
    }
    TimingOptions o{1, 4, 0, false, 0, 0, 0, rewarm_ms};
    std::vector<TimingResult> r = time_calls(calls, o);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].samples_s.size(), 4u);
    EXPECT_EQ(r[1].samples_s.size(), 4u);
    std::vector<size_t> runs{1};
    for (size_t i = 1; i < log.size(); ++i) {
      if (log[i] == log[i - 1]) {
        ++runs.back();
      } else {
        runs.push_back(1);
      }
    }
    EXPECT_EQ(runs.size(), 2u + 2 * 4) << "two warm-ups, then a and b in turn for each of the 4 samples";
    size_t shortest = *std::min_element(runs.begin(), runs.end());
    if (rewarm_ms > 0) {
      EXPECT_GE(shortest, 2u) << "a sample without its rewarm";
      EXPECT_GE(r[0].warmup_calls, 2 + 4) << "rewarm calls count as warm-up";
    } else {
      EXPECT_EQ(shortest, 1u);
    }
  }
  // One kernel alone is never rewarmed: nothing ran between its samples.
  int count = 0;
  TimingOptions o{1, 4, 0, false, 0, 0, 0, 1000.0};
  std::vector<TimingResult> r = time_calls({[&count] { return ++count, 0; }}, o);
  EXPECT_EQ(count, r[0].warmup_calls + 4) << "a rewarm of 1000 ms ran for a lone kernel";
}

TEST(Timing, AFailingKernelStopsTheTimingWithItsStatus) {
  KernelLibrary good(TF_KERNEL_PHASES, "steady3ms"), bad(TF_KERNEL_PHASES, "fails");
  std::vector<float> in(1, 1.0f), out(1);
  std::vector<float*> args{in.data(), out.data()};
  std::vector<TimingResult> r = time_kernels({&good, &bad}, {args, args}, {1, 3, 0, false, 0, 0});
  EXPECT_EQ(r[0].status, 0);
  EXPECT_EQ(r[1].status, 3);
  EXPECT_TRUE(r[1].samples_s.empty());
  EXPECT_THROW(time_kernels({&good, &bad}, {args}, {}), std::invalid_argument);
}

}  // namespace
}  // namespace tf
