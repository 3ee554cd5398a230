// The sanitizer pass (scripts/sanitize.sh: AddressSanitizer and UndefinedBehaviorSanitizer,
// built with TF_SANITIZED) runs every test, but not every repetition of one check: there each
// compile costs 3-6x, the kernels tunefarm generates are not instrumented anyway, and a sampled
// config or another node test runs the same host code paths again. The release pass
// (scripts/test.sh) runs them all. This is what keeps CI (.ci/run) within its time.
#pragma once

namespace tf::testing {

#ifdef TF_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// `n` repetitions of a check, or under the sanitizers at most `sanitized` of them.
constexpr int sweep(int n, int sanitized) { return kSanitized && sanitized < n ? sanitized : n; }

// Whether the k-th of many cases runs: all of them, or under the sanitizers every `stride`-th.
constexpr bool sampled(int k, int stride) { return !kSanitized || k % stride == 0; }

}  // namespace tf::testing
