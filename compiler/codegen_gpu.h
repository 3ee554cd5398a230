// What NVIDIA and AMD GPUs share in the code generator: kernels that return nothing, launched
// with a block size; buffers 16-byte aligned; shared memory; NaN-propagating min and max; no
// unrolling the schedule did not ask for. CodeGenNvptx and CodeGenAmdgpu derive from it.
#pragma once

#include "compiler/codegen_llvm_internal.h"

namespace tf::llvm_codegen {

class CodeGenGpu : public CodeGen {
 public:
  using CodeGen::CodeGen;

 protected:
  llvm::Type* return_type() override { return b_.getVoidTy(); }
  void emit_return() override { b_.CreateRetVoid(); }
  void annotate_arg(llvm::Argument* a) override;
  llvm::Value* min_max_with_nan(llvm::Value* a, llvm::Value* b, llvm::Value* pick, bool is_max) override;
  void mark_loop(llvm::BranchInst* latch, LoopUnroll unroll) override;
  llvm::Align vector_align(const Expr& base) const override;
  void barrier(const Barrier* s) override;
  void prefetch(const Prefetch*) override {}  // a CPU cache hint; GPU kernels go without
  bool allocate_shared(const Allocate* a) override;
  uint64_t local_align() const override { return 16; }
  llvm::Value* grid_index(ForKind k) override;
  llvm::Value* math_call(const Call* c, llvm::Intrinsic::ID id) override;

  // The intrinsics reading the block's index and the thread's along x, y, z (in that order).
  virtual const std::array<llvm::Intrinsic::ID, 6>& grid_intrinsics() const = 0;
  // The function of the vendor's math library computing float `call` ("exp", "tanh", ...), or
  // "" where the back end selects an instruction for it.
  virtual std::string vendor_math_function(const std::string& call) const = 0;

  // __syncthreads: the block's memory operations before it complete before any after it.
  virtual void block_barrier() = 0;
  // Barrier::Kind::AsyncCommit and AsyncWait: nothing where has_cp_async() is false.
  virtual void async_group(const Barrier* s) {}

 private:
  llvm::GlobalVariable* dynamic_shared_array();
  // Bytes of the shared buffers enclosing the statement being emitted (allocate_shared).
  int64_t dynamic_shared_offset_ = 0;
};

}  // namespace tf::llvm_codegen
