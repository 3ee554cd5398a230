// gpu: what a GPU kernel needs beyond its loop IR: the checks that reject schedules a GPU
// cannot run, and the launch configuration a board needs to run it.
//
// A GPU kernel's loop nest starts with the loops bound to the grid (Stage::bind): every
// statement runs inside them, so each (block, thread) pair runs the body once for its own
// indices. check_gpu_kernel rejects, with a message naming the limit and the value:
//   - a loop marked parallel (that is a CPU thread pool; bind it instead),
//   - a loop that is not bound but encloses the bound ones, or a store outside every bound
//     loop (each thread would repeat that work, or write the same elements as all others);
//     but a kernel that binds nothing and writes only buffers of one element (a scalar
//     output or workspace) is accepted as one thread (grid and block 1),
//   - threads per block, block or grid dimensions past the target's limits,
//   - a block axis bound with two extents, or bound twice on one path (a thread axis bound
//     again inside itself is a cooperative loop: a shared-memory copy, each thread its share;
//     its extent may not exceed the block's). Thread loops one after another may have
//     different extents: the block has the largest, and a shorter loop runs in the first
//     threads only (a block reduction's combining step in thread 0),
//   - shared memory past what a block may have: 48 KiB (CUDA's static limit; AMD has 64 KiB
//     of LDS), or on CUDA the architecture's opt-in limit (227 KiB on sm_90, 163 KiB on
//     sm_80): a kernel past 48 KiB takes its shared buffers from dynamic shared memory
//     (GpuLaunch::dynamic_shared_bytes, which whoever launches it must allow the function:
//     cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)),
//   - a barrier under a condition (threads that skip it would hang the block),
//   - a buffer too large for a thread's registers and local memory (heap allocation).
// (Math: code generation links cuda's exp, log and tanh from NVIDIA's libdevice and rocm's
// tanh from ROCm's ocml; AMDGPU expands exp and log itself.)
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>

#include "compiler/ir.h"
#include "compiler/target.h"
#include "runtime/gpu_runtime.h"

namespace tf {

struct GpuLimits {
  int64_t max_threads_per_block = 1024;
  std::array<int64_t, 3> max_block{1024, 1024, 64};
  std::array<int64_t, 3> max_grid{2147483647, 65535, 65535};
  int64_t max_local_bytes_per_thread = 16 * 1024;  // beyond this, registers spill to memory
  int64_t max_shared_bytes = kGpuStaticSharedBytes;  // static shared memory per block
  // Shared memory a block may have when the launch asks for it as dynamic shared memory and
  // the function allows that much (CUDA's opt-in limit); max_shared_bytes where there is none.
  int64_t max_dynamic_shared_bytes = kGpuStaticSharedBytes;
};

// Bytes a shared (or local) buffer of `elements` of `elem` takes in a kernel: its bytes rounded
// up to 16, as code generation aligns every such buffer (and carves dynamic shared memory).
int64_t gpu_buffer_bytes(int64_t elements, const ir::Type& elem);

// The limits every supported architecture of the target's kind meets (CUDA sm_70 and later;
// ROCm gfx9, gfx10, gfx11), and the target's architecture's opt-in shared memory per block
// (GpuArch::shared_per_block).
GpuLimits gpu_limits(const Target& t);

// What default schedules assume of the target's architecture, as TVM's cuda target carries
// them: per multiprocessor (compute unit on AMD) and for the architecture's common large part
// (an H100 SXM for sm_90, an A100 for sm_80, an MI210 for gfx90a); a smaller part of it runs
// the same code, with fewer blocks at once. Unknown architectures get the most conservative.
struct GpuArch {
  int64_t multiprocessors = 64;
  int64_t warp = 32;                  // threads per warp (wavefront)
  int64_t registers_per_sm = 65536;   // 32-bit registers
  int64_t registers_per_thread = 255; // the most one thread may use
  int64_t shared_per_sm = 64 * 1024;  // bytes
  int64_t threads_per_sm = 1024;
  // The most shared memory one block may have (CUDA: with the opt-in for dynamic shared memory;
  // AMD and unknown architectures: the 48 KiB every one allows).
  int64_t shared_per_block = kGpuStaticSharedBytes;
};
GpuArch gpu_arch(const Target& t);

struct GpuLaunch {
  std::array<int64_t, 3> grid{1, 1, 1};   // blocks along x, y, z
  std::array<int64_t, 3> block{1, 1, 1};  // threads per block along x, y, z
  int64_t dynamic_shared_bytes = 0;
  int64_t static_shared_bytes = 0;   // shared buffers of the kernel itself (cache_read_shared)
  int64_t local_bytes_per_thread = 0;

  int64_t threads_per_block() const { return block[0] * block[1] * block[2]; }
  nlohmann::json to_json() const;
};

// Checks a lowered kernel for a GPU target and returns its launch configuration; throws
// UserError for a schedule the GPU cannot run (see above).
GpuLaunch check_gpu_kernel(const ir::LoweredFunc& f, const Target& t);

// A GPU function as the kernels one call launches in turn. A function whose schedule has
// several stages at root (split-K: the partial sums, then their sum) is one kernel per root
// stage, in order; the buffers of the intermediate ones (heap buffers at the top of the
// function) are workspaces in global memory, which the caller allocates (uninitialized: each
// is written whole before it is read) and passes after the function's own arguments to every
// kernel. A function of one root stage is one kernel, the function itself.
struct GpuProgram {
  // Launch order; the first is named as the function, the others <name>_step2, _step3, ...
  std::vector<ir::LoweredFunc> kernels;
  std::vector<std::pair<std::string, int64_t>> workspaces;  // name, elements
};
GpuProgram split_gpu_program(const ir::LoweredFunc& f);

// At most kMaxGpuKernelsPerCall kernels per call and kMaxGpuWorkspaceBytes of workspace
// (runtime/gpu_runtime.h: boards refuse more).

// The kernels of `f` (split_gpu_program), each checked (check_gpu_kernel), with the launch
// of each: what the sidecar lists and a board launches.
struct GpuKernelLaunch {
  std::string function;
  GpuLaunch launch;
};
struct GpuPlan {
  std::vector<GpuKernelLaunch> kernels;
  std::vector<std::pair<std::string, int64_t>> workspaces;
  nlohmann::json to_json() const;  // the first's launch, with "then" and "workspace_elements"
};
GpuPlan plan_gpu_program(const ir::LoweredFunc& f, const Target& t);

// The kernel with every loop bound to the grid turned back into a serial loop: what the whole
// grid computes, as one CPU thread would run it (blocks and threads in order). Tests use it
// to check a GPU schedule's lowering (indices, tails, guards) against the reference on a
// machine without a GPU; it says nothing about the GPU code generator. A thread's local buffer
// allocated in a block outside its loops over threadIdx.x (compiler/early_loads.h) gets a copy
// per iteration of those loops.
ir::Stmt serialize_gpu_bindings(const ir::Stmt& s);

// The kernel as one thread of one block runs it, for tests that emulate a block with as many
// CPU threads, all running this function at once (tests/compiler/kernel_harness.h:
// run_gpu_emulated): unlike serialize_gpu_bindings, each thread copies only its share of a
// shared tile, and the barriers synchronize. A loop bound to an axis runs the caller's
// iteration, if it has one (its index read from the argument tf_emu_ids: 6 floats, blockIdx
// x, y, z and threadIdx x, y, z); shared buffers become arguments (one per block, shared by
// its threads); Block barriers become Emulated ones. Asynchronous copies are synchronous.
struct EmulatedKernel {
  ir::LoweredFunc func;  // the kernel's arguments, then the shared buffers, then tf_emu_ids
  std::vector<std::pair<std::string, int64_t>> shared;  // name, elements
};
EmulatedKernel emulate_gpu_thread(const ir::LoweredFunc& f);

}  // namespace tf
