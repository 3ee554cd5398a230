// What NVIDIA and AMD GPUs share in the code generator (compiler/codegen_llvm_internal.h).
#include "compiler/codegen_gpu.h"

namespace tf::llvm_codegen {

llvm::Value* CodeGenGpu::grid_index(ForKind k) {
  llvm::Intrinsic::ID intrinsic = grid_intrinsics()[static_cast<size_t>(gpu_binding_index(k))];
  return b_.CreateZExt(b_.CreateIntrinsic(b_.getInt32Ty(), intrinsic, {}), b_.getInt64Ty());
}

// A function of the vendor's bitcode library where the back end has no instruction; linked in
// after emission (link_vendor_math).
llvm::Value* CodeGenGpu::math_call(const Call* c, llvm::Intrinsic::ID id) {
  std::string function = vendor_math_function(c->name);
  if (function.empty()) return b_.CreateUnaryIntrinsic(id, expr(c->args[0]));
  uses_vendor_math = true;
  return vendor_math_call(function, c);
}

void CodeGenGpu::annotate_arg(llvm::Argument* a) {
  // GPU buffers come from the driver's allocator (cuMemAlloc, hipMalloc: 256-byte aligned), so
  // LLVM can prove vector accesses at multiples of 4 elements aligned and emit 128-bit loads
  // and stores (ld.global.v4.f32, global_load_dwordx4).
  a->addAttr(llvm::Attribute::getWithAlignment(ctx_, llvm::Align(kGpuBufferAlign)));
}

// max.NaN / min.NaN (sm_80+), v_max_f32 with the NaN checks on AMD.
llvm::Value* CodeGenGpu::min_max_with_nan(llvm::Value* a, llvm::Value* b, llvm::Value*, bool is_max) {
  return is_max ? b_.CreateMaximum(a, b) : b_.CreateMinimum(a, b);
}

// On GPUs the schedule decides what is unrolled: LLVM fully unrolled a 17-trip reduction loop
// of a 4x4 register tile into 1072 FMAs and spilled 54 VGPRs on gfx906.
void CodeGenGpu::mark_loop(llvm::BranchInst* latch, LoopUnroll) {
  llvm::MDNode* disable = llvm::MDNode::get(ctx_, llvm::MDString::get(ctx_, "llvm.loop.unroll.disable"));
  llvm::MDNode* id = llvm::MDNode::getDistinct(ctx_, {nullptr, disable});
  id->replaceOperandWith(0, id);
  latch->setMetadata(llvm::LLVMContext::MD_loop, id);
}

// The alignment of a vector access from element `base` on: on GPUs every buffer starts
// 16-byte aligned (kGpuBufferAlign; shared arrays are declared so), so an index that is a
// multiple of 4 is; LLVM does not always prove it through the index arithmetic (floor
// divisions of thread indices), and NVPTX splits a vector access it cannot prove aligned
// into scalar ones.
llvm::Align CodeGenGpu::vector_align(const Expr& base) const {
  int64_t m = known_multiple(base);
  int64_t elements = m == 0 ? 4 : std::min<int64_t>(m & -m, 4);
  return llvm::Align(static_cast<uint64_t>(4 * elements));
}

void CodeGenGpu::barrier(const Barrier* s) {
  TF_CHECK(s->sync != Barrier::Kind::Emulated, "codegen: an emulated barrier in a GPU kernel");
  TF_CHECK(s->sync != Barrier::Kind::AsyncReads,
           "codegen: an async_reads mark the wgmma_waits pass left");
  if (s->sync == Barrier::Kind::AsyncCommit || s->sync == Barrier::Kind::AsyncWait) return async_group(s);
  block_barrier();
}

bool CodeGenGpu::allocate_shared(const Allocate* a) {
  // One array per block in the shared address space (3 on both NVPTX and AMDGPU); in a kernel
  // whose launch asks for dynamic shared memory (past 48 KiB: compiler/gpu.h), a part of the
  // one dynamic array, at the offset of the shared buffers around it (the sizes
  // check_gpu_kernel added up: gpu_buffer_bytes), so buffers live at once never overlap.
  llvm::Type* elem = type_of(a->elem);
  llvm::Value* base = nullptr;
  const int64_t bytes = gpu_buffer_bytes(a->size, a->elem);
  if (launch_ && launch_->dynamic_shared_bytes > 0) {
    TF_CHECK(dynamic_shared_offset_ + bytes <= launch_->dynamic_shared_bytes, "codegen: shared buffer ", a->buffer,
             " ends at ", dynamic_shared_offset_ + bytes, " of ", launch_->dynamic_shared_bytes, " dynamic bytes");
    base = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), dynamic_shared_array(), static_cast<uint64_t>(dynamic_shared_offset_),
                                         a->buffer);
  } else {
    auto* ty = llvm::ArrayType::get(elem, static_cast<uint64_t>(a->size));
    auto* gv = new llvm::GlobalVariable(m_, ty, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(ty),
                                        name_ + "." + a->buffer, nullptr, llvm::GlobalValue::NotThreadLocal, 3);
    gv->setAlignment(llvm::Align(16));
    base = gv;
  }
  buffers_[a->buffer] = base;
  if (a->async_copies && has_cp_async()) async_buffers_.insert(a->buffer);
  dynamic_shared_offset_ += bytes;
  stmt(a->body);
  dynamic_shared_offset_ -= bytes;
  async_buffers_.erase(a->buffer);
  buffers_.erase(a->buffer);
  return true;
}

// The module's dynamic shared memory: an external shared array of no size, 16-byte aligned
// (PTX `.extern .shared .align 16 .b8 tf_dynamic_shared[]`); every kernel of the module that
// uses it sees its own block's dynamic shared memory there.
llvm::GlobalVariable* CodeGenGpu::dynamic_shared_array() {
  const char* name = "tf_dynamic_shared";
  if (llvm::GlobalVariable* gv = m_.getNamedGlobal(name)) return gv;
  auto* ty = llvm::ArrayType::get(b_.getInt8Ty(), 0);
  auto* gv = new llvm::GlobalVariable(m_, ty, false, llvm::GlobalValue::ExternalLinkage, nullptr, name, nullptr,
                                      llvm::GlobalValue::NotThreadLocal, 3);
  gv->setAlignment(llvm::Align(16));
  return gv;
}

}  // namespace tf::llvm_codegen
