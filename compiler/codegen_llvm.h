// codegen_llvm: loop IR -> LLVM IR -> object code or assembly, for CPU and GPU targets.
//
// The kernel is `i32 @name(ptr noalias %arg0, ...)`, returning 0, or -1 when a heap buffer
// could not be allocated. Vector IR nodes become LLVM vector types: a Ramp index with stride
// 1 is one contiguous vector load or store, any other vector index is gathered lane by lane.
// Float multiplies and adds carry the `contract` flag, so the backend fuses them into FMA
// where the target has it.
//
// A parallel loop is outlined into a function that runs a static chunk of the iterations on
// each thread of a team from the library's own thread pool (compiler/thread_pool_ir.h,
// emitted into the module), sized by libgomp's omp_get_max_threads(): the shared library
// records libgomp.so.1 as a dependency for that one call and is linked with -z nodelete, so
// a host's dlclose() cannot unmap the pool's code under its threads. Parallel loops nested in
// another parallel loop run serially.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "compiler/target.h"

namespace llvm {
class GlobalVariable;
class IRBuilderBase;
class Module;
class TargetMachine;
class Value;
}  // namespace llvm

namespace tf {

enum class CodegenOutput { LLVM, Asm, Object };

struct CodegenResult {
  std::string data;            // .ll text, assembly text, or object bytes
  bool uses_openmp = false;    // has parallel loops: link against libgomp, -z nodelete
  bool uses_libm = false;      // link against libm
};

// GPU targets (after check_gpu_kernel accepts the kernel, see compiler/gpu.h): the kernel is
// `void @name(ptr %arg0, ...)`, an entry point (NVPTX: nvvm.annotations with its exact block
// size; AMDGPU: the amdgpu_kernel calling convention, global pointers, a flat work-group size
// of exactly the block), and each loop bound to the grid becomes the block or thread index
// (NVPTX %ctaid/%tid, AMDGPU workgroup/workitem ids). Local buffers live in the thread's
// private memory. For cuda, Asm is the PTX module (the CUDA driver compiles it for the
// device) and there is no Object; for rocm, Object is an ELF relocatable that
// link_amdgpu_code_object (compiler/link.h) turns into the .hsaco code object (v5).
//
// Optimizes at O3 for the target and emits `out`.
CodegenResult codegen_llvm(const ir::LoweredFunc& f, const Target& target, CodegenOutput out);
// Several GPU functions (a whole model's kernels) in one module: one PTX text or code object,
// libdevice / ocml linked once.
CodegenResult codegen_llvm(const std::vector<ir::LoweredFunc>& fs, const Target& target, CodegenOutput out);

// The kernel's LLVM IR as code generation first builds it (before optimization), as bitcode,
// under a fixed function name: two kernels of the same key compile to the same code but for
// their names, so a model's repeated layers are generated once (graph/model_compiler.cc).
// For a GPU target, every kernel of the function (split_gpu_program) with its launch bounds,
// named kernel, kernel_step2, ...
std::string llvm_ir_key(const ir::LoweredFunc& f, const Target& target);
// The same module as text (LLVM's assembly), for reading.
std::string llvm_ir_text(const ir::LoweredFunc& f, const Target& target);

// For other code generators over LLVM (compiler/model_entry.h): the target machine of a
// target (PIC, -O3 code generation), and a module emitted as object code or assembly.
std::unique_ptr<llvm::TargetMachine> make_target_machine(const Target& t);
std::string emit_object(llvm::Module& m, llvm::TargetMachine& tm, bool assembly = false);

// Buffers a library keeps between calls (a kernel's heap buffers, a model's workspace), as
// allocating megabytes on every call costs a page fault per page per call: a slot is a global
// pointer holding the buffer of the last call, which a call takes and gives back with atomic
// exchanges, so concurrent calls each get their own.
llvm::GlobalVariable* kept_buffer_slot(llvm::Module& m, const std::string& name);
// Stores `p` (null: takes the buffer) in `slot`, returning what it held.
llvm::Value* exchange_kept_buffer(llvm::IRBuilderBase& b, llvm::GlobalVariable* slot, llvm::Value* p);
// A destructor of the library named `name` (in .fini_array: run at dlclose and exit) that
// frees the buffers of `slots`; nothing when there are none.
void free_kept_buffers_at_unload(llvm::Module& m, const std::vector<llvm::GlobalVariable*>& slots,
                                 const std::string& name);

}  // namespace tf
