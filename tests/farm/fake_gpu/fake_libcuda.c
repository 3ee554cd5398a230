// FAKE libcuda.so.1, for tests only: it stands in for the NVIDIA driver so that the farm's
// GPU path (board probe, derived key and target, PTX upload, launch configuration, runner,
// device timing calls, output copy-back) and GPU model libraries (runtime/gpu_model) can be
// exercised on a machine without a GPU. "Device memory" is host memory.
// A launch checks its arguments and logs its grid and block to $TF_FAKE_CUDA_LOG. It runs
// nothing (the outputs stay NaN-filled, so a board's measurement through it is a
// WRONG_ANSWER), unless $TF_FAKE_CUDA_KERNELS names a library of the same kernels compiled to
// run on the CPU (compile --model --emulate-gpu: each function computes its whole grid, split-K
// steps included, in one call): then a launch calls the function of that name there with the
// launch's arguments (their number read from the PTX's .entry), and a <name>_stepN launch does
// nothing. $TF_FAKE_CUDA_ALIASES names a file of "name other" lines: kernels the emulated
// library generated once under the other's name (its sidecar's same_code_as); a line
// "name@GX,GY,GZ other" applies to launches of that grid only, and before the plain ones (a GPU
// library's kernels sharing code on grids of their own: the shape buckets' batch in the grid).
// $TF_FAKE_CUDA_FAIL_LAUNCH=name: launches of that kernel fail (CUDA_ERROR_LAUNCH_FAILED) and
// poison the context, as a real fault does: every later call of the process fails the same
// way. $TF_FAKE_CUDA_HANG_LAUNCH=name: a launch of that kernel never returns (a kernel that
// never ends). Module unloads and frees are logged ("unload", "free") for leak checks.
// $TF_FAKE_CUDA_MEMORY=bytes: larger allocations fail (CUDA_ERROR_OUT_OF_MEMORY).
// $TF_FAKE_CUDA_JIT_MS=N: a PTX module's load takes N ms more, as the driver's PTX JIT does.
// A cubin (ptxas's ELF) loads without it, logged as "cubin BYTES" (PTX as "module BYTES"); its
// functions are those with a .text.NAME section, their parameters counted in .nv.info.NAME.
// $TF_FAKE_CUDA_DRIVER_VERSION=N: what cuDriverGetVersion says (default 13000, CUDA 13.0).
// $TF_FAKE_CUDA_DEVICES=N: N devices (default 1; a host with several GPUs), each named with
// its ordinal; the context's device (cuDevicePrimaryCtxRetain) is logged ("context N").
// A launch with more than 48 KiB of dynamic shared memory fails (CUDA_ERROR_INVALID_VALUE) unless
// cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) allowed the function that much first, and
// the attribute is refused past the 163 KiB of compute capability 8.0, as the driver does
// ($TF_FAKE_CUDA_MAX_SHARED=bytes: past that many instead, a device with less shared memory);
// allowances are logged ("dynamic_shared NAME BYTES").
// The real path is runtime/gpu_runtime.cc and runtime/gpu_model/runtime.c against the real
// driver. Its devices are of compute capability 8.0, named as fakes.
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static char* g_module;
// Set by a failing launch: the context is poisoned, every call fails from then on.
static int g_poisoned;
#define POISON_CHECK() \
  do {                 \
    if (g_poisoned) return 719; \
  } while (0)

// A line (printf's format and arguments) appended to $TF_FAKE_CUDA_LOG, when it is set.
static void log_line(const char* format, ...) {
  const char* log = getenv("TF_FAKE_CUDA_LOG");
  FILE* out = log ? fopen(log, "a") : NULL;
  if (!out) return;
  va_list args;
  va_start(args, format);
  vfprintf(out, format, args);
  va_end(args);
  fputc('\n', out);
  fclose(out);
}
struct FakeModule {
  struct FakeModule* next;
  size_t size;  // of text, a cubin's bytes or PTX with its NUL
  int cubin;
  char text[];
};
struct FakeModule* tf_fake_cuda_modules;

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
static int device_count(void) {
  const char* n = getenv("TF_FAKE_CUDA_DEVICES");
  int count = n ? atoi(n) : 1;
  return count < 0 ? 0 : count;
}
CUresult cuDeviceGetCount(int* n) { *n = device_count(); return 0; }
CUresult cuDeviceGet(int* d, int i) { *d = i; return i >= 0 && i < device_count() ? 0 : 101; /* CUDA_ERROR_INVALID_DEVICE */ }
CUresult cuDeviceGetName(char* name, int len, int d) {
  if (d == 0)
    snprintf(name, (size_t)len, "FAKE CUDA device (tests/farm/fake_gpu, runs nothing)");
  else
    snprintf(name, (size_t)len, "FAKE CUDA device %d (tests/farm/fake_gpu, runs nothing)", d);
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int d) { *bytes = (size_t)1 << 30; return 0; }
CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
  if (attr == 75) { *v = 8; return 0; }
  if (attr == 76) { *v = 0; return 0; }
  return 1;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int d) {
  *ctx = (void*)1;
  log_line("context %d", d);
  return 0;
}
CUresult cuCtxSetCurrent(void* ctx) { return 0; }
CUresult cuCtxSynchronize(void) { POISON_CHECK(); return 0; }
// A cubin's size: the furthest end of its section headers, program headers and sections
// (ELF64, little-endian), as a driver finds it from the header; 0 when the header is not one.
static size_t cubin_size(const char* elf) {
  unsigned long long shoff, phoff, end;
  unsigned short phentsize, phnum, shentsize, shnum;
  if (elf[4] != 2 || elf[5] != 1) return 0;
  memcpy(&phoff, elf + 0x20, 8);
  memcpy(&shoff, elf + 0x28, 8);
  memcpy(&phentsize, elf + 0x36, 2);
  memcpy(&phnum, elf + 0x38, 2);
  memcpy(&shentsize, elf + 0x3a, 2);
  memcpy(&shnum, elf + 0x3c, 2);
  if (shentsize != 64 || shnum == 0 || shoff > (1ull << 30) || phoff > (1ull << 30)) return 0;
  end = shoff + shnum * 64ull;
  if (phnum && phoff + (unsigned long long)phnum * phentsize > end) end = phoff + (unsigned long long)phnum * phentsize;
  for (unsigned i = 0; i < shnum; ++i) {
    unsigned type;
    unsigned long long o, l;
    memcpy(&type, elf + shoff + i * 64ull + 4, 4);
    memcpy(&o, elf + shoff + i * 64ull + 24, 8);
    memcpy(&l, elf + shoff + i * 64ull + 32, 8);
    if (type == 8 || o > (1ull << 30) || l > (1ull << 30)) continue;  // SHT_NOBITS: no bytes in the file
    if (o + l > end) end = o + l;
  }
  return (size_t)end;
}
// The section of `name` in a cubin of `size` bytes: its offset and size, or 0 when it has none.
static int cubin_section(const char* elf, size_t size, const char* name, size_t* off, size_t* len) {
  unsigned long long shoff;
  unsigned short shnum, shstrndx;
  memcpy(&shoff, elf + 0x28, 8);
  memcpy(&shnum, elf + 0x3c, 2);
  memcpy(&shstrndx, elf + 0x3e, 2);
  if (shstrndx >= shnum) return 0;
  unsigned long long strings, strings_size;
  memcpy(&strings, elf + shoff + shstrndx * 64ull + 24, 8);
  memcpy(&strings_size, elf + shoff + shstrndx * 64ull + 32, 8);
  if (strings > size || strings_size > size - strings) return 0;
  for (unsigned i = 0; i < shnum; ++i) {
    const char* h = elf + shoff + i * 64ull;
    unsigned at;
    unsigned long long o, l;
    memcpy(&at, h, 4);
    memcpy(&o, h + 24, 8);
    memcpy(&l, h + 32, 8);
    if (at >= strings_size || strnlen(elf + strings + at, strings_size - at) != strlen(name) ||
        strcmp(elf + strings + at, name) != 0)
      continue;
    if (o > size || l > size - o) return 0;
    *off = (size_t)o;
    *len = (size_t)l;
    return 1;
  }
  return 0;
}

CUresult cuDriverGetVersion(int* v) {
  const char* version = getenv("TF_FAKE_CUDA_DRIVER_VERSION");
  *v = version ? atoi(version) : 13000;
  return 0;
}

CUresult cuModuleLoadData(void** m, const void* image) {
  POISON_CHECK();
  const char* jit_ms = getenv("TF_FAKE_CUDA_JIT_MS");
  const char* text = (const char*)image;
  const int cubin = memcmp(text, "\x7f" "ELF", 4) == 0;
  size_t n = cubin ? cubin_size(text) : strlen(text) + 1;
  if (cubin && n == 0) return 200;  // CUDA_ERROR_INVALID_IMAGE
  if (!cubin && (strncmp(text, "//", 2) != 0 || !strstr(text, ".version ") || !strstr(text, ".target sm_"))) return 218;  // CUDA_ERROR_INVALID_PTX
  if (!cubin && jit_ms) {
    long ms = atol(jit_ms);
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
  }
  // Kept (reachable from a global list the compiler cannot drop, for LeakSanitizer) as a
  // driver keeps its modules until the context ends.
  struct FakeModule* kept = malloc(sizeof *kept + n);
  if (!kept) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  memcpy(kept->text, text, n);
  kept->size = n;
  kept->cubin = cubin;
  kept->next = tf_fake_cuda_modules;
  tf_fake_cuda_modules = kept;
  g_module = kept->text;
  *m = g_module;
  log_line(cubin ? "cubin %zu" : "module %zu", cubin ? n : n - 1);
  return 0;
}
CUresult cuModuleUnload(void* m) {
  POISON_CHECK();
  for (struct FakeModule** at = &tf_fake_cuda_modules; *at; at = &(*at)->next) {
    if ((*at)->text == m) {
      struct FakeModule* gone = *at;
      *at = gone->next;
      free(gone);
      log_line("unload");
      return 0;
    }
  }
  return 400;  // CUDA_ERROR_INVALID_HANDLE
}

// A function: its name, and how many parameters its .entry takes. Kept on a global list, as
// a driver's functions live as long as their module (a caller may look one up again).
typedef struct Function {
  struct Function* next;
  char name[256];
  int params;
  int max_dynamic_shared;  // bytes cuFuncSetAttribute allowed (0: the static 48 KiB)
} Function;
struct Function* tf_fake_cuda_functions;

CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
  const struct FakeModule* module = NULL;
  for (const struct FakeModule* k = tf_fake_cuda_modules; k; k = k->next)
    if (k->text == m) module = k;
  if (!module) return 400;  // CUDA_ERROR_INVALID_HANDLE
  int params = 0;
  const char* at = NULL;
  char want[300];
  if (module->cubin) {
    size_t off, len;
    snprintf(want, sizeof want, ".text.%s", name);
    if (!cubin_section(module->text, module->size, want, &off, &len)) return 500;  // CUDA_ERROR_NOT_FOUND
    // EIATTR_KPARAM_INFO records (attribute 0x17, of a 2-byte size) in .nv.info.NAME, one a parameter.
    snprintf(want, sizeof want, ".nv.info.%s", name);
    if (cubin_section(module->text, module->size, want, &off, &len)) {
      for (size_t p = off; p + 2 <= off + len;) {
        unsigned char format = (unsigned char)module->text[p], attribute = (unsigned char)module->text[p + 1];
        if (format == 4) {
          unsigned short bytes;
          if (p + 4 > off + len) break;
          memcpy(&bytes, module->text + p + 2, 2);
          params += attribute == 0x17;
          p += 4 + bytes;
        } else {
          p += format == 3 ? 4 : 2;
        }
      }
    }
  } else {
    snprintf(want, sizeof want, ".visible .entry %s(", name);
    at = strstr((const char*)m, want);
    if (!at) return 500;  // CUDA_ERROR_NOT_FOUND
  }
  Function* fn = calloc(1, sizeof(Function));
  if (!fn) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  fn->next = tf_fake_cuda_functions;
  tf_fake_cuda_functions = fn;
  snprintf(fn->name, sizeof fn->name, "%s", name);
  fn->params = params;
  const char* end = at ? strchr(at, ')') : NULL;
  for (const char* p = at; end && (p = strstr(p, ".param")) && p < end; p += 6) ++fn->params;
  *f = fn;
  return 0;
}
CUresult cuFuncSetAttribute(void* f, int attribute, int value) {
  POISON_CHECK();
  Function* fn = (Function*)f;
  const char* most = getenv("TF_FAKE_CUDA_MAX_SHARED");
  const long limit = most ? strtol(most, NULL, 10) : 163 * 1024;
  if (!fn || attribute != 8 || value < 0 || value > limit) return 1;  // CUDA_ERROR_INVALID_VALUE
  fn->max_dynamic_shared = value;
  log_line("dynamic_shared %s %d", fn->name, value);
  return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  POISON_CHECK();
  log_line("alloc %zu", bytes);
  // $TF_FAKE_CUDA_MEMORY: the largest allocation the "device" grants, in bytes.
  const char* limit = getenv("TF_FAKE_CUDA_MEMORY");
  if (limit && bytes > strtoull(limit, NULL, 10)) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  float* f = malloc(bytes);
  if (!f) return 2;
  for (size_t i = 0; i < bytes / sizeof(float); ++i) f[i] = __builtin_nanf("");
  *p = (CUdeviceptr)f;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  POISON_CHECK();
  free((void*)p);
  log_line("free");
  return 0;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) { POISON_CHECK(); memcpy((void*)dst, src, n); return 0; }
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { POISON_CHECK(); memcpy(dst, (void*)src, n); return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* stream) { memcpy((void*)dst, src, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* stream) { memcpy(dst, (void*)src, n); return 0; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* stream) { memmove((void*)dst, (void*)src, n); return 0; }
CUresult cuStreamSynchronize(void* stream) { return 0; }
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { memset((void*)p, v, n); return 0; }
// The emulated kernel named `name` (after the aliases), launched on grid gx x gy x gz, or NULL.
static void* emulated(const char* name, unsigned gx, unsigned gy, unsigned gz) {
  // The library of the path the variable names now (a test may change it between models).
  static void* lib;
  static char loaded[4096];
  const char* path = getenv("TF_FAKE_CUDA_KERNELS");
  if (!path) return NULL;
  if (!lib || strcmp(path, loaded) != 0) {
    if (!(lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
      fprintf(stderr, "fake libcuda: %s\n", dlerror());
      loaded[0] = 0;
      return NULL;
    }
    snprintf(loaded, sizeof loaded, "%s", path);
  }
  char target[256], on_grid[300];
  snprintf(target, sizeof target, "%s", name);
  snprintf(on_grid, sizeof on_grid, "%s@%u,%u,%u", name, gx, gy, gz);
  const char* aliases = getenv("TF_FAKE_CUDA_ALIASES");
  FILE* f = aliases ? fopen(aliases, "r") : NULL;
  char a[300], b[256];
  int grid_matched = 0;
  while (f && fscanf(f, "%299s %255s", a, b) == 2) {
    if (strcmp(a, on_grid) == 0) {
      snprintf(target, sizeof target, "%s", b);
      grid_matched = 1;
    } else if (!grid_matched && strcmp(a, name) == 0) {
      snprintf(target, sizeof target, "%s", b);
    }
  }
  if (f) fclose(f);
  return dlsym(lib, target);
}

// Every emulated kernel is called with kMaxParams pointers, its own first (the x86-64 calling
// convention leaves the rest unread): as many as a GPU library's kernel may take
// (runtime/gpu_model: 256; graph/fusion.h kMaxGroupInputs inputs and the outputs).
enum { kMaxParams = 256 };
#define TF_P8 void*, void*, void*, void*, void*, void*, void*, void*
#define TF_P32 TF_P8, TF_P8, TF_P8, TF_P8
#define TF_A8(i) a[i], a[i + 1], a[i + 2], a[i + 3], a[i + 4], a[i + 5], a[i + 6], a[i + 7]
#define TF_A32(i) TF_A8(i), TF_A8(i + 8), TF_A8(i + 16), TF_A8(i + 24)

// Runs the emulated kernel of `fn` on the launch's arguments (device pointers are host ones).
static CUresult run_emulated(const Function* fn, unsigned gx, unsigned gy, unsigned gz,
                             void** params) {
  const char* step = strstr(fn->name, "_step");
  if (step && step[5] >= '2' && step[5] <= '9') return 0;  // the first launch computed it all
  typedef int (*Kernel)(TF_P32, TF_P32, TF_P32, TF_P32, TF_P32, TF_P32, TF_P32, TF_P32);
  Kernel k = (Kernel)emulated(fn->name, gx, gy, gz);
  if (!k || fn->params > kMaxParams) {
    fprintf(stderr, "fake libcuda: no emulated kernel %s of %d parameters\n", fn->name, fn->params);
    return 719;  // CUDA_ERROR_LAUNCH_FAILED
  }
  void* a[kMaxParams] = {0};
  for (int i = 0; i < fn->params; ++i) a[i] = (void*)*(CUdeviceptr*)params[i];
  int r = k(TF_A32(0), TF_A32(32), TF_A32(64), TF_A32(96), TF_A32(128), TF_A32(160), TF_A32(192),
            TF_A32(224));
  return r == 0 ? 0 : 719;
}

CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  if (!f || !params || gx * gy * gz == 0 || bx * by * bz == 0 || bx * by * bz > 1024) return 1;  // INVALID_VALUE
  POISON_CHECK();
  const Function* fn = (const Function*)f;
  if (shared > 48 * 1024 && (int)shared > fn->max_dynamic_shared) return 1;  // INVALID_VALUE
  const char* failing = getenv("TF_FAKE_CUDA_FAIL_LAUNCH");
  if (failing && strcmp(failing, fn->name) == 0) {
    g_poisoned = 1;
    return 719;
  }
  const char* hanging = getenv("TF_FAKE_CUDA_HANG_LAUNCH");
  if (hanging && strcmp(hanging, fn->name) == 0) {
    for (;;) pause();
  }
  if (getenv("TF_FAKE_CUDA_KERNELS")) {
    CUresult r = run_emulated(fn, gx, gy, gz, params);
    if (r) return r;
  }
  // Each function's first launch (a call of a split-K kernel launches two).
  static const void* logged[256];
  int seen = 0, i = 0;
  for (; i < 256 && logged[i]; ++i) seen |= logged[i] == f;
  if (getenv("TF_FAKE_CUDA_LOG") && !seen && i < 256) {
    log_line("launch %s grid=%u,%u,%u block=%u,%u,%u shared=%u", fn->name, gx, gy, gz, bx, by, bz, shared);
    logged[i] = f;
  }
  return 0;
}
CUresult cuEventCreate(void** e, unsigned flags) { *e = calloc(1, sizeof(double)); return 0; }
CUresult cuEventRecord(void* e, void* stream) { *(double*)e = now_ms(); return 0; }
CUresult cuEventSynchronize(void* e) { POISON_CHECK(); return 0; }
CUresult cuEventElapsedTime(float* ms, void* a, void* b) {
  double d = *(double*)b - *(double*)a;
  *ms = (float)(d > 1e-3 ? d : 1e-3);
  return 0;
}
CUresult cuGetErrorName(CUresult r, const char** s) {
  *s = r == 719 ? "CUDA_ERROR_LAUNCH_FAILED" : r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : r == 1 ? "CUDA_ERROR_INVALID_VALUE" : "FAKE_CUDA_ERROR";
  return 0;
}
