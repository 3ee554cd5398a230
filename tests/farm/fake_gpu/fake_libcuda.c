// FAKE libcuda.so.1, for tests only: it stands in for the NVIDIA driver so that the farm's
// GPU path (board probe, derived key and target, PTX upload, launch configuration, runner,
// device timing calls, output copy-back) can be exercised on a machine without a GPU.
// It runs nothing: a launch checks its arguments, logs its grid and block to
// $TF_FAKE_CUDA_LOG and leaves the outputs as they were (NaN-filled), so every measurement
// through it is a WRONG_ANSWER. The real path is runtime/gpu_runtime.cc against the real
// driver. It reports one device of compute capability 8.0, named as a fake.
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static char* g_module;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// TF_FAKE_CUDA_HANG set: the driver never answers (a stuck driver at the board's start).
CUresult cuInit(unsigned flags) {
  if (getenv("TF_FAKE_CUDA_HANG")) {
    for (;;) pause();
  }
  return flags == 0 ? 0 : 1;
}
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int i) { *d = i; return i == 0 ? 0 : 101; /* CUDA_ERROR_INVALID_DEVICE */ }
CUresult cuDeviceGetName(char* name, int len, int d) {
  snprintf(name, (size_t)len, "FAKE CUDA device (tests/farm/fake_gpu, runs nothing)");
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int d) { *bytes = (size_t)1 << 30; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
  if (attr == 75) { *v = 8; return 0; }
  if (attr == 76) { *v = 0; return 0; }
  return 1;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int d) { *ctx = (void*)1; return 0; }
CUresult cuCtxSetCurrent(void* ctx) { return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuModuleLoadData(void** m, const void* image) {
  const char* text = (const char*)image;
  if (strncmp(text, "//", 2) != 0 || !strstr(text, ".version ") || !strstr(text, ".target sm_")) return 218;  // CUDA_ERROR_INVALID_PTX
  g_module = strdup(text);
  *m = g_module;
  return 0;
}
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
  char want[300];
  snprintf(want, sizeof want, ".visible .entry %s(", name);
  if (!strstr((const char*)m, want)) return 500;  // CUDA_ERROR_NOT_FOUND
  *f = strdup(name);
  return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  const char* log = getenv("TF_FAKE_CUDA_LOG");
  FILE* out = log ? fopen(log, "a") : NULL;
  if (out) {
    fprintf(out, "alloc %zu\n", bytes);
    fclose(out);
  }
  float* f = malloc(bytes);
  if (!f) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  for (size_t i = 0; i < bytes / sizeof(float); ++i) f[i] = __builtin_nanf("");
  *p = (CUdeviceptr)f;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void*)p); return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) { memcpy((void*)dst, src, n); return 0; }
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { memcpy(dst, (void*)src, n); return 0; }
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { memset((void*)p, v, n); return 0; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  if (!f || !params || gx * gy * gz == 0 || bx * by * bz == 0 || bx * by * bz > 1024) return 1;  // INVALID_VALUE
  const char* log = getenv("TF_FAKE_CUDA_LOG");
  // Each function's first launch (a call of a split-K kernel launches two).
  static const void* logged[8];
  int seen = 0, i = 0;
  for (; i < 8 && logged[i]; ++i) seen |= logged[i] == f;
  if (log && !seen && i < 8) {
    FILE* out = fopen(log, "a");
    if (out) {
      fprintf(out, "launch %s grid=%u,%u,%u block=%u,%u,%u shared=%u\n", (const char*)f, gx, gy, gz, bx, by, bz, shared);
      fclose(out);
    }
    logged[i] = f;
  }
  return 0;
}
CUresult cuEventCreate(void** e, unsigned flags) { *e = calloc(1, sizeof(double)); return 0; }
CUresult cuEventRecord(void* e, void* stream) { *(double*)e = now_ms(); return 0; }
CUresult cuEventSynchronize(void* e) { return 0; }
CUresult cuEventElapsedTime(float* ms, void* a, void* b) {
  double d = *(double*)b - *(double*)a;
  *ms = (float)(d > 1e-3 ? d : 1e-3);
  return 0;
}
CUresult cuGetErrorName(CUresult r, const char** s) { *s = "FAKE_CUDA_ERROR"; return 0; }
