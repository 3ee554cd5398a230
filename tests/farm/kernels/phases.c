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
static int plateau_counted(int* calls, float* in, float* out) {
  wait_ms(*calls < 3 ? 20 : 0.5);
  ++*calls;
  out[0] = in[0];
  return 0;
}
int plateau(float* in, float* out) {
  static int calls = 0;
  return plateau_counted(&calls, in, out);
}
/* The same with its own count, for a second test. */
int plateau_again(float* in, float* out) {
  static int calls = 0;
  return plateau_counted(&calls, in, out);
}

/* 3 ms a call. */
int steady3ms(float* in, float* out) {
  wait_ms(3);
  out[0] = in[0];
  return 0;
}

/* Two kernels that log their calls into out[1..]: out[0] counts the entries, in[0] is the
 * log's capacity. 1 for a call of log_a, 2 for log_b; 0.2 ms a call. Returns 7 when full. */
static int log_call(float* in, float* out, float tag) {
  int n = (int)out[0];
  if (n + 1 >= (int)in[0]) return 7;
  wait_ms(0.2);
  out[1 + n] = tag;
  out[0] = (float)(n + 1);
  return 0;
}
int log_a(float* in, float* out) { return log_call(in, out, 1); }
int log_b(float* in, float* out) { return log_call(in, out, 2); }

/* Returns 3 on every call. */
int fails(float* in, float* out) {
  (void)in;
  (void)out;
  return 3;
}
