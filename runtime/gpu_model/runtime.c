/* The runtime of a GPU model library: what its tf_model_run does on a CUDA or ROCm GPU.
 *
 * compile --model for a cuda or rocm target links this object (compiled into tunefarm, see
 * runtime/gpu_model/CMakeLists.txt) with the model's tables (runtime/gpu_model/plan.h) into
 * one shared library for the host. C with only libc, so the library needs nothing the model's
 * users do not have: the vendor's driver is opened at the first call (dlopen: libcuda.so.1,
 * or ROCm's libamdhip64.so), as boards do; no SDK to build or to deploy.
 *
 * The first call loads the code modules (the CUDA driver compiles PTX for its GPU), finds the
 * kernels, allocates the arena (intermediates at the memory plan's offsets, converted inputs,
 * split-K workspaces) and uploads every constant once, on the device tf_model_set_device
 * chose (default 0), in its primary context (the one PyTorch and CuPy use, so their device
 * pointers are valid here). Then each call launches the kernels in order on one stream.
 *
 *   tf_model_run(host inputs, host outputs, workspace)  copies the inputs to device buffers
 *       of the library, runs, copies the outputs back (synchronous); the workspace is unused
 *       (tf_model_workspace_bytes is 0).
 *   tf_model_run_device(device inputs, device outputs, stream)  the same on the caller's
 *       device buffers (CUdeviceptr / hipDeviceptr_t) and stream, without copies: returns once
 *       the kernels are queued (a model with int64 or bool inputs or outputs converts them
 *       through the host, waiting for the stream). Device buffers must be 16-byte aligned.
 *   tf_model_run_bucket(b, ...), tf_model_run_device_bucket(b, ...)  the same for shape
 *       bucket b (compile --model --dim batch=1,8,32: one launch plan per bucket, the same
 *       modules and constants; the two above run bucket 0); tf_model_run_shaped(input shapes,
 *       ...) the bucket of those shapes (tf_model_bucket_of, from the library's tables), or,
 *       compiled with --pad-batch, fewer rows of axis 0 in the next larger bucket, padded on
 *       the host (the device entry points do not pad).
 * All return 0; -1 when device memory ran out; -2 when an int64 input is out of +-2^24;
 * -3 when the driver is missing or failed (a faulting kernel included); -4 for a bucket the
 * library has not: tf_model_last_error() says what. Calls are serialized by a lock (one
 * arena, the largest bucket's); calls on different streams must not overlap on the device. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gpu_model/plan.h"

#define EXPORT __attribute__((visibility("default")))

extern __attribute__((visibility("hidden"))) const unsigned char tf_gpu_model[];

typedef unsigned long long devptr; /* CUdeviceptr; hipDeviceptr_t is a pointer of this size */

/* The driver's entry points, CUDA's or HIP's (whose module API has the same shapes). */
static struct {
  void* handle;
  int (*init)(unsigned);
  int (*device_get)(int*, int);                 /* CUDA */
  int (*primary_ctx_retain)(void**, int);       /* CUDA */
  int (*ctx_set_current)(void*);                /* CUDA */
  int (*set_device)(int);                       /* HIP */
  int (*module_load_data)(void**, const void*);
  int (*module_get_function)(void**, void*, const char*);
  int (*mem_alloc)(devptr*, size_t);
  int (*mem_free)(devptr);
  int (*memcpy_htod)(devptr, const void*, size_t);
  int (*memcpy_dtoh)(void*, devptr, size_t);
  int (*memcpy_htod_async)(devptr, const void*, size_t, void*);
  int (*memcpy_dtoh_async)(void*, devptr, size_t, void*);
  int (*memcpy_dtod_async)(devptr, devptr, size_t, void*);
  int (*stream_synchronize)(void*);
  int (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
  int (*func_set_attribute)(void*, int, int);   /* CUDA */
  int (*error_name)(int, const char**);         /* CUDA */
  const char* (*error_string)(int);             /* HIP */
} drv;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_error[1024];
static int g_device = 0;
static int g_ready = 0;
static void* g_context;
static void** g_modules; /* loaded ones, kept across a failed first call */
static devptr g_arena, g_constants;
/* Per plan (shape bucket). */
static struct {
  void** functions;   /* per launch */
  int64_t* launch_at; /* word of each launch in the plan */
  devptr* io;         /* tf_model_run's device buffers: inputs, then outputs */
} g_bucket[TF_GPU_MAX_PLANS];

enum { OUT_OF_MEMORY = 2 }; /* CUDA_ERROR_OUT_OF_MEMORY, hipErrorOutOfMemory */

/* The plans (one per shape bucket, back to back), blob and constants in tf_gpu_model
   (plan.h). A plan section too short for one plan leaves a header of zeros, which
   initialize() finds damaged. */
static const int64_t* g_plan[TF_GPU_MAX_PLANS];
static int g_plans;
static const int64_t kNoPlan[TF_GPU_PLAN_HEADER_WORDS];
static const int64_t* P; /* plan 0 */
static const char* tf_gpu_blob;
static const unsigned char* tf_gpu_constants;

static void locate(void) {
  if (P) return;
  uint64_t h[7];
  memcpy(h, tf_gpu_model + 8, sizeof h);
  const int64_t* words = (const int64_t*)(const void*)(tf_gpu_model + h[0]);
  uint64_t n = h[1] / 8, at = 0;
  while (g_plans < TF_GPU_MAX_PLANS && at + TF_GPU_PLAN_HEADER_WORDS <= n) {
    int64_t size = words[at + TF_GPU_PLAN_WORDS];
    if (size < TF_GPU_PLAN_HEADER_WORDS || (uint64_t)size > n - at) break;
    g_plan[g_plans++] = words + at;
    at += (uint64_t)size;
  }
  tf_gpu_blob = (const char*)tf_gpu_model + h[2];
  tf_gpu_constants = tf_gpu_model + h[4];
  P = g_plans ? g_plan[0] : kNoPlan;
}

static int64_t H(int word) {
  locate();
  return P[word];
}
/* Where each section of plan p starts (in words from p). */
static int64_t inputs_at(const int64_t* p) {
  (void)p;
  return TF_GPU_PLAN_HEADER_WORDS;
}
static int64_t outputs_at(const int64_t* p) { return inputs_at(p) + 2 * p[TF_GPU_PLAN_INPUTS]; }
static int64_t modules_at(const int64_t* p) { return outputs_at(p) + 2 * p[TF_GPU_PLAN_OUTPUTS]; }
static int64_t launches_at(const int64_t* p) { return modules_at(p) + 2 * p[TF_GPU_PLAN_MODULES]; }

static int platform_cuda(void) { return H(TF_GPU_PLAN_PLATFORM) == TF_GPU_PLATFORM_CUDA; }
static const char* platform_name(void) { return platform_cuda() ? "cuda" : "rocm"; }

static int fail(int status, const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  vsnprintf(g_error, sizeof g_error, format, ap);
  va_end(ap);
  return status;
}

static const char* driver_message(int r) {
  const char* s = NULL;
  if (drv.error_name && drv.error_name(r, &s) == 0 && s) return s;
  if (drv.error_string && (s = drv.error_string(r))) return s;
  return "unknown error";
}

/* A driver call's result as a status: -1 for out of memory, -3 for any other error. */
static int driver_failed(int r, const char* what) {
  fail(r == OUT_OF_MEMORY ? -1 : TF_GPU_STATUS_DRIVER_ERROR, "%s:%d %s failed: %s (error %d)", platform_name(),
       g_device, what, driver_message(r), r);
  return r == OUT_OF_MEMORY ? -1 : TF_GPU_STATUS_DRIVER_ERROR;
}
#define CHECK(call, what)                    \
  do {                                       \
    int r_ = (call);                         \
    if (r_ != 0) return driver_failed(r_, what); \
  } while (0)

static void* symbol(const char* name, int* missing) {
  void* p = dlsym(drv.handle, name);
  if (!p && !*missing) {
    *missing = 1;
    fail(TF_GPU_STATUS_DRIVER_ERROR, "the %s driver has no %s", platform_name(), name);
  }
  return p;
}

static int open_driver(void) {
  if (drv.handle) return 0;
  const char* cuda[] = {"libcuda.so.1", NULL};
  const char* rocm[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", NULL};
  const char** names = platform_cuda() ? cuda : rocm;
  for (const char** n = names; *n && !drv.handle; ++n) drv.handle = dlopen(*n, RTLD_NOW | RTLD_LOCAL);
  if (!drv.handle) {
    return fail(TF_GPU_STATUS_DRIVER_ERROR,
                "this model runs on %s GPUs and the driver's library (%s) did not load: %s", platform_name(),
                names[0], dlerror());
  }
  int missing = 0;
#define SYM(field, name) *(void**)&drv.field = symbol(name, &missing)
  if (platform_cuda()) {
    SYM(init, "cuInit");
    SYM(device_get, "cuDeviceGet");
    SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    SYM(ctx_set_current, "cuCtxSetCurrent");
    SYM(module_load_data, "cuModuleLoadData");
    SYM(module_get_function, "cuModuleGetFunction");
    SYM(mem_alloc, "cuMemAlloc_v2");
    SYM(mem_free, "cuMemFree_v2");
    SYM(memcpy_htod, "cuMemcpyHtoD_v2");
    SYM(memcpy_dtoh, "cuMemcpyDtoH_v2");
    SYM(memcpy_htod_async, "cuMemcpyHtoDAsync_v2");
    SYM(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2");
    SYM(memcpy_dtod_async, "cuMemcpyDtoDAsync_v2");
    SYM(stream_synchronize, "cuStreamSynchronize");
    SYM(launch, "cuLaunchKernel");
    SYM(func_set_attribute, "cuFuncSetAttribute");
    SYM(error_name, "cuGetErrorName");
  } else {
    SYM(init, "hipInit");
    SYM(set_device, "hipSetDevice");
    SYM(module_load_data, "hipModuleLoadData");
    SYM(module_get_function, "hipModuleGetFunction");
    SYM(mem_alloc, "hipMalloc");
    SYM(mem_free, "hipFree");
    SYM(memcpy_htod, "hipMemcpyHtoD");
    SYM(memcpy_dtoh, "hipMemcpyDtoH");
    SYM(memcpy_htod_async, "hipMemcpyHtoDAsync");
    SYM(memcpy_dtoh_async, "hipMemcpyDtoHAsync");
    SYM(memcpy_dtod_async, "hipMemcpyDtoDAsync");
    SYM(stream_synchronize, "hipStreamSynchronize");
    SYM(launch, "hipModuleLaunchKernel");
    SYM(error_string, "hipGetErrorString");
  }
#undef SYM
  if (missing) {
    dlclose(drv.handle);
    memset(&drv, 0, sizeof drv);
    return TF_GPU_STATUS_DRIVER_ERROR;
  }
  return 0;
}

/* Makes the device current for this thread (each call: the caller's thread may change). */
static int enter_device(void) {
  if (platform_cuda()) {
    CHECK(drv.ctx_set_current(g_context), "cuCtxSetCurrent");
  } else {
    CHECK(drv.set_device(g_device), "hipSetDevice");
  }
  return 0;
}

static size_t dtype_bytes(int64_t dtype) { return (size_t)tf_dtype_bytes(dtype); }
static size_t padded(size_t bytes) { return bytes < 256 ? 256 : bytes; } /* drivers refuse 0 */

/* The kernels of plan b, found in the loaded modules: g_bucket[b]'s functions and launch_at. */
static int find_kernels(int b) {
  const int64_t* p = g_plan[b];
  int64_t launches = p[TF_GPU_PLAN_LAUNCHES];
  void** functions = calloc((size_t)launches + 1, sizeof(void*));
  int64_t* at = calloc((size_t)launches + 1, sizeof(int64_t));
  if (!functions || !at) {
    free(functions), free(at);
    return fail(-1, "out of host memory");
  }
  int64_t word = launches_at(p);
  for (int64_t l = 0; l < launches; ++l) {
    const int64_t* w = p + word;
    at[l] = word;
    const char* name = tf_gpu_blob + w[1];
    int r = drv.module_get_function(&functions[l], g_modules[w[0]], name);
    if (r) {
      free(functions), free(at);
      driver_failed(r, "finding a kernel");
      return fail(TF_GPU_STATUS_DRIVER_ERROR, "%s:%d: kernel %s is not in the model's code: %s", platform_name(), g_device,
                  name, driver_message(r));
    }
    /* A kernel whose shared buffers exceed the static 48 KiB takes them from dynamic shared
       memory (compiler/gpu.h), which the function must be allowed first
       (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8). */
    if (platform_cuda() && w[8] > 48 * 1024 && (r = drv.func_set_attribute(functions[l], 8, (int)w[8]))) {
      free(functions), free(at);
      driver_failed(r, "allowing dynamic shared memory");
      return fail(TF_GPU_STATUS_DRIVER_ERROR, "%s:%d: kernel %s needs %lld bytes of shared memory, which the device refused: %s",
                  platform_name(), g_device, name, (long long)w[8], driver_message(r));
    }
    word += TF_GPU_LAUNCH_FIXED_WORDS + 2 * w[9];
  }
  g_bucket[b].functions = functions;
  g_bucket[b].launch_at = at;
  return 0;
}

static void forget_kernels(void) {
  for (int b = 0; b < g_plans; ++b) {
    free(g_bucket[b].functions), free(g_bucket[b].launch_at);
    g_bucket[b].functions = NULL;
    g_bucket[b].launch_at = NULL;
  }
}

static int initialize(void) {
  if (g_ready) return 0;
  locate();
  if (memcmp(tf_gpu_model, TF_GPU_MODEL_MAGIC, 8) != 0 ||
      P[TF_GPU_PLAN_MAGIC_WORD] != TF_GPU_PLAN_MAGIC)
    return fail(TF_GPU_STATUS_DRIVER_ERROR, "the library's launch plan is damaged");
  int status = open_driver();
  if (status) return status;
  CHECK(drv.init(0), platform_cuda() ? "cuInit" : "hipInit");
  if (platform_cuda() && !g_context) {
    int dev = 0;
    CHECK(drv.device_get(&dev, g_device), "cuDeviceGet");
    CHECK(drv.primary_ctx_retain(&g_context, dev), "cuDevicePrimaryCtxRetain");
  }
  if ((status = enter_device())) return status;
  /* Every plan lists the same modules (plan.h): plan 0's are loaded. */
  int64_t modules = H(TF_GPU_PLAN_MODULES);
  /* Modules stay loaded for the life of the process (the driver keeps them until the context
     ends): a call after a failed first one loads only those still missing. */
  if (!g_modules && !(g_modules = calloc((size_t)modules + 1, sizeof(void*))))
    return fail(-1, "out of host memory");
  for (int64_t m = 0; m < modules; ++m) {
    const int64_t* w = P + modules_at(P) + 2 * m;
    int r = g_modules[m] ? 0 : drv.module_load_data(&g_modules[m], tf_gpu_blob + w[0]);
    if (r) {
      g_modules[m] = NULL;
      return driver_failed(r, platform_cuda()
                                  ? "loading the model's PTX (cuModuleLoadData)"
                                  : "loading the model's code object (hipModuleLoadData)");
    }
  }
  int64_t arena_bytes = 0;
  for (int b = 0; b < g_plans; ++b) {
    if ((status = find_kernels(b))) {
      forget_kernels();
      return status;
    }
    if (g_plan[b][TF_GPU_PLAN_ARENA_BYTES] > arena_bytes)
      arena_bytes = g_plan[b][TF_GPU_PLAN_ARENA_BYTES];
  }
  /* One arena, the largest plan's: one call runs at a time. */
  devptr arena = 0, constants = 0;
  int r = drv.mem_alloc(&arena, padded((size_t)arena_bytes));
  if (!r) r = drv.mem_alloc(&constants, padded((size_t)H(TF_GPU_PLAN_CONSTANT_BYTES)));
  if (!r && H(TF_GPU_PLAN_CONSTANT_BYTES) > 0)
    r = drv.memcpy_htod(constants, tf_gpu_constants, (size_t)H(TF_GPU_PLAN_CONSTANT_BYTES));
  if (r) {
    if (arena) drv.mem_free(arena);
    if (constants) drv.mem_free(constants);
    forget_kernels();
    return driver_failed(r, "allocating the model's device memory (arena and constants)");
  }
  g_arena = arena;
  g_constants = constants;
  g_ready = 1;
  return 0;
}

static int64_t tensor_elements(const int64_t* p, int output, int64_t k) {
  return p[(output ? outputs_at(p) : inputs_at(p)) + 2 * k];
}
static int64_t tensor_dtype(const int64_t* p, int output, int64_t k) {
  return p[(output ? outputs_at(p) : inputs_at(p)) + 2 * k + 1];
}

static devptr where(int64_t kind, int64_t index, const devptr* in, const devptr* out) {
  switch (kind) {
    case TF_GPU_ARG_INPUT: return in[index];
    case TF_GPU_ARG_OUTPUT: return out[index];
    case TF_GPU_ARG_CONSTANT: return g_constants + (devptr)index;
    default: return g_arena + (devptr)index;
  }
}

/* An int64 or bool input of the caller, on the device, as float32 in the arena. */
static int convert_input(const int64_t* p, int64_t input, int64_t offset, const devptr* in,
                         void* stream) {
  int64_t n = tensor_elements(p, 0, input), dtype = tensor_dtype(p, 0, input);
  if (n == 0) return 0;
  size_t from_bytes = (size_t)n * dtype_bytes(dtype);
  unsigned char* host = malloc(from_bytes + (size_t)n * 4);
  if (!host) return fail(-1, "out of host memory");
  float* to = (float*)(host + from_bytes);
  int status = 0, r = drv.memcpy_dtoh_async(host, in[input], from_bytes, stream);
  if (!r) r = drv.stream_synchronize(stream);
  if (r) status = driver_failed(r, "reading an int64 or bool input");
  for (int64_t i = 0; !status && i < n; ++i) {
    if (dtype == TF_DTYPE_INT64) {
      int64_t x;
      memcpy(&x, host + 8 * i, 8);
      if (x < -(INT64_C(1) << 24) || x > (INT64_C(1) << 24)) status = -2;
      to[i] = (float)x;
    } else {
      to[i] = host[i] != 0 ? 1.0f : 0.0f;
    }
  }
  if (status == -2) fail(-2, "input %lld holds an int64 beyond +-2^24 (16777216)", (long long)input);
  if (!status) {
    r = drv.memcpy_htod_async(g_arena + (devptr)offset, to, (size_t)n * 4, stream);
    if (!r) r = drv.stream_synchronize(stream);
    if (r) status = driver_failed(r, "writing a converted input");
  }
  free(host);
  return status;
}

/* Output `output` (not float32) from the float32 values at `from`, converted on the host. */
static int convert_output(const int64_t* p, int64_t output, devptr from, const devptr* out,
                          void* stream) {
  int64_t n = tensor_elements(p, 1, output), dtype = tensor_dtype(p, 1, output);
  if (n == 0) return 0;
  size_t to_bytes = (size_t)n * dtype_bytes(dtype);
  unsigned char* host = malloc((size_t)n * 4 + to_bytes);
  if (!host) return fail(-1, "out of host memory");
  float* f = (float*)host;
  unsigned char* to = host + (size_t)n * 4;
  int status = 0, r = drv.memcpy_dtoh_async(f, from, (size_t)n * 4, stream);
  if (!r) r = drv.stream_synchronize(stream);
  if (r) status = driver_failed(r, "reading an output to convert");
  for (int64_t i = 0; !status && i < n; ++i) {
    if (dtype == TF_DTYPE_INT64) {
      /* Toward zero, saturating, NaN as 0: as the CPU library's fptosi.sat. */
      float x = f[i];
      int64_t v = x != x ? 0 : x >= 9.2233720368547758e18f ? INT64_MAX : x <= -9.2233720368547758e18f ? INT64_MIN : (int64_t)x;
      memcpy(to + 8 * i, &v, 8);
    } else {
      to[i] = f[i] != 0.0f;
    }
  }
  if (!status) {
    r = drv.memcpy_htod_async(out[output], to, to_bytes, stream);
    if (!r) r = drv.stream_synchronize(stream);
    if (r) status = driver_failed(r, "writing a converted output");
  }
  free(host);
  return status;
}

/* Plan b on the device buffers in and out, queued on stream. */
static int run_on_device(int b, const devptr* in, const devptr* out, void* stream) {
  const int64_t* p = g_plan[b];
  int64_t word = launches_at(p);
  for (int64_t l = 0; l < p[TF_GPU_PLAN_LAUNCHES]; ++l)
    word += TF_GPU_LAUNCH_FIXED_WORDS + 2 * p[word + 9];
  for (int64_t c = 0; c < p[TF_GPU_PLAN_CONVERSIONS]; ++c, word += 2) {
    int status = convert_input(p, p[word], p[word + 1], in, stream);
    if (status) return status;
  }
  int64_t copies_at = word;
  for (int64_t l = 0; l < p[TF_GPU_PLAN_LAUNCHES]; ++l) {
    const int64_t* w = p + g_bucket[b].launch_at[l];
    int64_t nargs = w[9];
    devptr values[256];
    void* params[256];
    if (nargs > 256) return fail(TF_GPU_STATUS_DRIVER_ERROR, "a kernel takes %lld arguments (at most 256)", (long long)nargs);
    for (int64_t a = 0; a < nargs; ++a) {
      values[a] = where(w[10 + 2 * a], w[11 + 2 * a], in, out);
      params[a] = &values[a];
    }
    int r = drv.launch(g_bucket[b].functions[l], (unsigned)w[2], (unsigned)w[3], (unsigned)w[4],
                       (unsigned)w[5], (unsigned)w[6], (unsigned)w[7], (unsigned)w[8], stream,
                       params, NULL);
    if (r) {
      driver_failed(r, "launch");
      return fail(TF_GPU_STATUS_DRIVER_ERROR, "%s:%d: launching kernel %s failed: %s (error %d)", platform_name(), g_device,
                  tf_gpu_blob + w[1], driver_message(r), r);
    }
  }
  word = copies_at;
  for (int64_t c = 0; c < p[TF_GPU_PLAN_COPIES]; ++c, word += 5) {
    const int64_t* w = p + word;
    int64_t output = w[2], n = tensor_elements(p, 1, output), dtype = tensor_dtype(p, 1, output);
    int r = 0;
    if (w[3] >= 0) {
      if (w[4] > 0) r = drv.memcpy_htod_async(out[output], tf_gpu_blob + w[3], (size_t)w[4], stream);
      if (!r) r = drv.stream_synchronize(stream);
    } else if (dtype == TF_DTYPE_FLOAT32 || dtype == TF_DTYPE_FLOAT16 ||
               dtype == TF_DTYPE_BFLOAT16) {
      /* (a 16-bit float output from a buffer of its type: graph/model_compiler.cc) */
      if (n > 0)
        r = drv.memcpy_dtod_async(out[output], where(w[0], w[1], in, out),
                                  (size_t)n * dtype_bytes(dtype), stream);
    } else {
      int status = convert_output(p, output, where(w[0], w[1], in, out), out, stream);
      if (status) return status;
    }
    if (r) return driver_failed(r, "copying an output");
  }
  return 0;
}

/* The kernels assume 16-byte aligned buffers (compiler/codegen_llvm.cc kGpuBufferAlign: their
 * 128-bit accesses); the drivers' allocations are 256-byte aligned, a view into one may not be. */
static int check_aligned(const unsigned long long* p, int64_t n, const char* what) {
  for (int64_t k = 0; k < n; ++k) {
    if (p[k] % 16 != 0)
      return fail(TF_GPU_STATUS_DRIVER_ERROR, "%s %lld at 0x%llx is not 16-byte aligned (the kernels' vector accesses need it)",
                  what, (long long)k, p[k]);
  }
  return 0;
}

/* Whether the library has plan b; the status of a call for one it has not. (Bucket 0 of a
   library without a plan is initialize()'s to refuse: its plan is damaged.) */
static int no_bucket(int32_t b) {
  locate();
  if ((b >= 0 && b < g_plans) || (b == 0 && g_plans == 0)) return 0;
  return fail(TF_GPU_STATUS_NO_BUCKET, "no shape bucket %d: the library has %d (0 to %d)", (int)b,
              g_plans, g_plans - 1);
}

EXPORT int32_t tf_model_run_device_bucket(int32_t b, const unsigned long long* inputs,
                                          const unsigned long long* outputs, void* stream) {
  pthread_mutex_lock(&g_lock);
  int status = no_bucket(b);
  if (!status) status = initialize();
  if (!status) status = check_aligned(inputs, g_plan[b][TF_GPU_PLAN_INPUTS], "input");
  if (!status) status = check_aligned(outputs, g_plan[b][TF_GPU_PLAN_OUTPUTS], "output");
  if (!status) status = enter_device();
  if (!status) status = run_on_device(b, inputs, outputs, stream);
  pthread_mutex_unlock(&g_lock);
  return status;
}

EXPORT int32_t tf_model_run_device(const unsigned long long* inputs,
                                   const unsigned long long* outputs, void* stream) {
  return tf_model_run_device_bucket(0, inputs, outputs, stream);
}

/* tf_model_run's device buffers of plan b, allocated at its first call. */
static int host_buffers(int b) {
  if (g_bucket[b].io) return 0;
  const int64_t* p = g_plan[b];
  int64_t ni = p[TF_GPU_PLAN_INPUTS], no = p[TF_GPU_PLAN_OUTPUTS];
  devptr* io = calloc((size_t)(ni + no) + 1, sizeof(devptr));
  if (!io) return fail(-1, "out of host memory");
  for (int64_t k = 0; k < ni + no; ++k) {
    int output = k >= ni;
    int64_t t = output ? k - ni : k;
    int r = drv.mem_alloc(&io[k], padded((size_t)tensor_elements(p, output, t) *
                                         dtype_bytes(tensor_dtype(p, output, t))));
    if (r) {
      for (int64_t j = 0; j < k; ++j) drv.mem_free(io[j]);
      free(io);
      return driver_failed(r, "allocating the model's input and output buffers");
    }
  }
  g_bucket[b].io = io;
  return 0;
}

/* Plan b on host buffers: the inputs copied to its device buffers, run, the outputs copied back. */
static int run_on_host_buffers(int b, const void* const* inputs, void* const* outputs) {
  int status = host_buffers(b);
  if (status) return status;
  const int64_t* p = g_plan[b];
  int64_t ni = p[TF_GPU_PLAN_INPUTS], no = p[TF_GPU_PLAN_OUTPUTS];
  devptr* io = g_bucket[b].io;
  for (int64_t k = 0; k < ni; ++k) {
    size_t bytes = (size_t)tensor_elements(p, 0, k) * dtype_bytes(tensor_dtype(p, 0, k));
    int r = bytes ? drv.memcpy_htod(io[k], inputs[k], bytes) : 0;
    if (r) return driver_failed(r, "copying an input to the device");
  }
  if ((status = run_on_device(b, io, io + ni, NULL))) return status;
  for (int64_t k = 0; k < no; ++k) {
    size_t bytes = (size_t)tensor_elements(p, 1, k) * dtype_bytes(tensor_dtype(p, 1, k));
    /* Synchronous: a kernel's fault surfaces here. */
    int r = bytes ? drv.memcpy_dtoh(outputs[k], io[ni + k], bytes) : drv.stream_synchronize(NULL);
    if (r) return driver_failed(r, "running the model (copying an output back)");
  }
  return 0;
}

EXPORT int32_t tf_model_run_bucket(int32_t b, const void* const* inputs, void* const* outputs,
                                   void* workspace) {
  (void)workspace;
  pthread_mutex_lock(&g_lock);
  int status = no_bucket(b);
  if (!status) status = initialize();
  if (!status) status = enter_device();
  if (!status) status = run_on_host_buffers(b, inputs, outputs);
  pthread_mutex_unlock(&g_lock);
  return status;
}

EXPORT int32_t tf_model_run(const void* const* inputs, void* const* outputs, void* workspace) {
  return tf_model_run_bucket(0, inputs, outputs, workspace);
}

/* The bucket table's (compiler/model_entry.cc, in the library's other object). */
extern int32_t tf_model_bucket_of(const int64_t* const* input_shapes);
extern const int64_t* tf_model_bucket_input_shape(int32_t b, int32_t i);
/* Compiled with --pad-batch: the padded bucket these shapes run in, or -1; *rows: the inputs'
   rows (the library's own choice, compiler/model_entry.h). */
extern int32_t tf_model_padded_bucket_of(const int64_t* const* input_shapes, int64_t* rows);

/* Bucket b on `rows` rows of the caller's host buffers, through zero-filled copies of its size:
   the outputs' first rows copied back. */
static int32_t run_padded(int b, int64_t rows, const void* const* inputs, void* const* outputs,
                          void* workspace) {
  pthread_mutex_lock(&g_lock);
  locate();
  pthread_mutex_unlock(&g_lock);
  if (b >= g_plans) return tf_model_run_bucket(b, inputs, outputs, workspace); /* its error */
  const int64_t* p = g_plan[b];
  int64_t ni = p[TF_GPU_PLAN_INPUTS], no = p[TF_GPU_PLAN_OUTPUTS];
  int64_t bucket_rows = tf_model_bucket_input_shape(b, 0)[0];
  void** buffers = calloc((size_t)(ni + no) + 1, sizeof(void*));
  int status = buffers ? 0 : -1;
  for (int64_t k = 0; !status && k < ni + no; ++k) {
    int output = k >= ni;
    int64_t t = output ? k - ni : k;
    size_t bytes = (size_t)tensor_elements(p, output, t) * dtype_bytes(tensor_dtype(p, output, t));
    if (!(buffers[k] = calloc(bytes ? bytes : 1, 1)))
      status = -1;
    else if (!output)
      memcpy(buffers[k], inputs[k], bytes / (size_t)bucket_rows * (size_t)rows);
  }
  if (status) {
    pthread_mutex_lock(&g_lock);
    fail(-1, "out of host memory (padding %lld rows up to %lld)", (long long)rows,
         (long long)bucket_rows);
    pthread_mutex_unlock(&g_lock);
  } else {
    status = tf_model_run_bucket(b, (const void* const*)buffers, buffers + ni, workspace);
  }
  for (int64_t k = 0; !status && k < no; ++k) {
    size_t bytes = (size_t)tensor_elements(p, 1, k) * dtype_bytes(tensor_dtype(p, 1, k));
    memcpy(outputs[k], buffers[ni + k], bytes / (size_t)bucket_rows * (size_t)rows);
  }
  for (int64_t k = 0; buffers && k < ni + no; ++k) free(buffers[k]);
  free(buffers);
  return status;
}

EXPORT int32_t tf_model_run_shaped(const int64_t* const* input_shapes, const void* const* inputs,
                                   void* const* outputs, void* workspace) {
  int32_t b = tf_model_bucket_of(input_shapes);
  int64_t rows = 0;
  int padded = b < 0 ? tf_model_padded_bucket_of(input_shapes, &rows) : -1;
  if (padded >= 0) return run_padded(padded, rows, inputs, outputs, workspace);
  if (b < 0) {
    pthread_mutex_lock(&g_lock);
    locate();
    fail(TF_GPU_STATUS_NO_BUCKET, "no shape bucket of the library's %d has these input shapes",
         g_plans);
    pthread_mutex_unlock(&g_lock);
    return TF_GPU_STATUS_NO_BUCKET;
  }
  return tf_model_run_bucket(b, inputs, outputs, workspace);
}

EXPORT int32_t tf_model_set_device(int32_t ordinal) {
  pthread_mutex_lock(&g_lock);
  int status = 0;
  if (ordinal < 0) {
    status = fail(TF_GPU_STATUS_DRIVER_ERROR, "device %d does not exist", ordinal);
  } else if ((g_ready || g_context || g_modules) && ordinal != g_device) {
    /* (After a failed first call too: its context and modules are the device's.) */
    status = fail(TF_GPU_STATUS_DRIVER_ERROR, "the model already runs on %s:%d; choose its device before the first call",
                  platform_name(), g_device);
  } else {
    g_device = ordinal;
  }
  pthread_mutex_unlock(&g_lock);
  return status;
}

EXPORT const char* tf_model_device_kind(void) { return platform_name(); }
EXPORT const char* tf_model_last_error(void) { return g_error; }
