#include "compiler/fp_control.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsAArch64.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>

namespace tf {
namespace {

// MXCSR: DAZ is bit 6, FTZ bit 15. FPCR: FZ is bit 24.
constexpr uint32_t kMxcsrFlush = (1u << 6) | (1u << 15);
constexpr uint64_t kFpcrFlush = uint64_t{1} << 24;

// A 4-byte slot in the entry block of the function being emitted (ldmxcsr and stmxcsr take
// an address).
llvm::Value* slot(llvm::IRBuilderBase& b) {
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::IRBuilder<> at(&f->getEntryBlock(), f->getEntryBlock().getFirstInsertionPt());
  return at.CreateAlloca(at.getInt32Ty());
}

}  // namespace

bool FpControl::exists() const { return x86() || arch_ == "aarch64"; }

llvm::Type* FpControl::type(llvm::IRBuilderBase& b) const {
  return x86() ? b.getInt32Ty() : b.getInt64Ty();
}

llvm::Value* FpControl::read(llvm::IRBuilderBase& b, llvm::Module& m) const {
  if (x86()) {
    llvm::Value* p = slot(b);
    b.CreateCall(llvm::Intrinsic::getDeclaration(&m, llvm::Intrinsic::x86_sse_stmxcsr), {p});
    return b.CreateLoad(b.getInt32Ty(), p);
  }
  if (arch_ == "aarch64")
    return b.CreateCall(llvm::Intrinsic::getDeclaration(&m, llvm::Intrinsic::aarch64_get_fpcr));
  return nullptr;
}

void FpControl::write(llvm::IRBuilderBase& b, llvm::Module& m, llvm::Value* v) const {
  if (x86()) {
    llvm::Value* p = slot(b);
    b.CreateStore(v, p);
    b.CreateCall(llvm::Intrinsic::getDeclaration(&m, llvm::Intrinsic::x86_sse_ldmxcsr), {p});
  } else if (arch_ == "aarch64") {
    b.CreateCall(llvm::Intrinsic::getDeclaration(&m, llvm::Intrinsic::aarch64_set_fpcr), {v});
  }
}

llvm::Value* FpControl::flushing_denormals(llvm::IRBuilderBase& b, llvm::Value* v) const {
  if (x86()) return b.CreateOr(v, b.getInt32(kMxcsrFlush));
  if (arch_ == "aarch64") return b.CreateOr(v, b.getInt64(kFpcrFlush));
  return v;
}

}  // namespace tf
