/* The launch plan of a GPU model library, as graph::compile_model writes it (compiler/
 * model_entry.cc codegen_gpu_model_entry) and the library's runtime (runtime/gpu_model/runtime.c)
 * reads it. C, so that both sides include it.
 *
 * A GPU model library holds one read-only array, tf_gpu_model, in an ELF section of its own
 * (TF_GPU_MODEL_SECTION), so that a board can read it as data without running the library:
 *   a header of TF_GPU_MODEL_HEADER_BYTES: TF_GPU_MODEL_MAGIC (8 bytes), then little-endian
 *     uint64 pairs of offset (from the array's start) and bytes of the plans, the blob and
 *     the constants;
 *   the plans      int64 words at an 8-byte aligned offset: one plan per shape bucket
 *                  (compile --model --dim batch=1,8,32; usually one), back to back, bucket 0
 *                  first, each TF_GPU_PLAN_WORDS long. Every plan lists the same modules,
 *                  constant bytes and platform; its own tensors, launches and arena. A plan
 *                  is the header below, then the sections in this order:
 *                       inputs       [elements, dtype] each (dtype as ONNX numbers it)
 *                       outputs      [elements, dtype] each
 *                       modules      [blob offset, bytes] each (PTX text NUL-terminated, or
 *                                    a .hsaco code object)
 *                       launches     [module, name offset (in the blob, NUL-terminated),
 *                                     grid x, y, z, block x, y, z, dynamic shared bytes,
 *                                     argument count, then argument count x [kind, index]]
 *                       conversions  [input, arena offset]: a non-float32 input as float32
 *                       copies       [from kind, from index, output, literal offset (in the
 *                                     blob) or -1, literal bytes]
 *   the blob       bytes: modules, kernel names, literal outputs (of every plan)
 *   the constants  bytes: every float constant, each at a 256-byte aligned offset, each
 *                  content once (buckets share their weights)
 * Argument kinds: an input or output of the model (index), a constant (byte offset in
 * the constants), a place in the arena (byte offset: the memory plan's intermediates,
 * converted inputs and split-K workspaces). */
#ifndef TF_RUNTIME_GPU_MODEL_PLAN_H_
#define TF_RUNTIME_GPU_MODEL_PLAN_H_

#define TF_GPU_PLAN_MAGIC 0x314c504d55504754LL /* "TGPUMPL1" */
#define TF_GPU_MODEL_MAGIC "TFGPUMOD"
#define TF_GPU_MODEL_SECTION ".tf_gpu_model"
enum { TF_GPU_MODEL_HEADER_BYTES = 64 };

enum {
  TF_GPU_PLAN_MAGIC_WORD = 0,
  TF_GPU_PLAN_PLATFORM, /* TF_GPU_PLATFORM_* */
  TF_GPU_PLAN_INPUTS,   /* counts of each section */
  TF_GPU_PLAN_OUTPUTS,
  TF_GPU_PLAN_MODULES,
  TF_GPU_PLAN_LAUNCHES,
  TF_GPU_PLAN_CONVERSIONS,
  TF_GPU_PLAN_COPIES,
  TF_GPU_PLAN_ARENA_BYTES, /* device memory for intermediates (the arena serves the
                              plan with the most) */
  TF_GPU_PLAN_CONSTANT_BYTES,
  TF_GPU_PLAN_BLOB_BYTES,
  TF_GPU_PLAN_WORDS, /* the whole plan */
  TF_GPU_PLAN_HEADER_WORDS
};

enum { TF_GPU_PLATFORM_CUDA = 1, TF_GPU_PLATFORM_ROCM = 2 };
/* Element types of inputs and outputs, ONNX's numbering (runtime/model_abi.h ModelDType). */
enum {
  TF_DTYPE_FLOAT32 = 1,
  TF_DTYPE_INT64 = 7,
  TF_DTYPE_BOOL = 9,
  TF_DTYPE_FLOAT16 = 10,
  TF_DTYPE_BFLOAT16 = 16
};
/* Whether t is one of them, and the bytes of one element (bools: one byte, 0 or 1). */
static inline int tf_dtype_known(long long t) {
  return t == TF_DTYPE_FLOAT32 || t == TF_DTYPE_INT64 || t == TF_DTYPE_BOOL ||
         t == TF_DTYPE_FLOAT16 || t == TF_DTYPE_BFLOAT16;
}
static inline long long tf_dtype_bytes(long long t) {
  return t == TF_DTYPE_INT64                               ? 8
         : t == TF_DTYPE_BOOL                              ? 1
         : t == TF_DTYPE_FLOAT16 || t == TF_DTYPE_BFLOAT16 ? 2
                                                           : 4;
}
enum { TF_GPU_ARG_INPUT = 0, TF_GPU_ARG_OUTPUT = 1, TF_GPU_ARG_CONSTANT = 2, TF_GPU_ARG_ARENA = 3 };
enum { TF_GPU_LAUNCH_FIXED_WORDS = 10 };
enum { TF_GPU_CONSTANT_ALIGN = 256 };

/* tf_model_run's statuses beyond the CPU library's (0 done, -1 out of memory, -2 an int64
 * input out of range): the driver is missing or failed; tf_model_last_error() says how. */
enum { TF_GPU_STATUS_DRIVER_ERROR = -3 };
/* tf_model_run_bucket and _shaped: no such bucket (runtime/model_abi.h kModelNoBucket). */
enum { TF_GPU_STATUS_NO_BUCKET = -4 };
/* The most plans (shape buckets) a library holds (graph/onnx_import.h kMaxShapeBuckets). */
enum { TF_GPU_MAX_PLANS = 64 };

#endif
