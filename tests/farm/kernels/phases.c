/* Kernels whose speed changes from call to call, for the timing protocol's tests
 * (tests/farm/timing_test.cc). Each waits on the monotonic clock, so a call lasts at least
 * its stated time however the machine is loaded. */
#include <time.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void wait_ms(double ms) {
  double end = now_ms() + ms;
  while (now_ms() < end) {
  }
}

/* 40, 20, 10 and 5 ms, then 0.5 ms a call: a kernel that settles. */
int settling(float* in, float* out) {
  static int calls = 0;
  static const double first[] = {40, 20, 10, 5};
  wait_ms(calls < 4 ? first[calls] : 0.5);
  ++calls;
  out[0] = in[0];
  return 0;
}

/* 20 ms for three calls, then 0.5 ms: a plateau that looks steady. */
int plateau(float* in, float* out) {
  static int calls = 0;
  wait_ms(calls < 3 ? 20 : 0.5);
  ++calls;
  out[0] = in[0];
  return 0;
}

/* 3 ms a call. */
int steady3ms(float* in, float* out) {
  wait_ms(3);
  out[0] = in[0];
  return 0;
}
