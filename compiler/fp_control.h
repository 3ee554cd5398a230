// fp_control: the CPU's floating-point control register (x86's MXCSR, AArch64's FPCR) read
// and written by emitted code.
//
// A compiled model's entry points run its kernels with denormals flushed to zero (x86: FTZ and
// DAZ; AArch64: FZ) and give the caller's control back on return; the thread pool's workers
// take the launching thread's control with each job (compiler/thread_pool_ir.h), so every chunk
// of a parallel loop computes alike. Why: a denormal operand or result costs a microcode assist
// of about 100 cycles on x86 cores, and a model can make many of them (Swin-T's masked window
// attention: exp(-100) is a denormal, and the matmul after the softmax multiplies by them:
// 160 -> 110 ms a call at 1 thread). The values lost are below 1.2e-38, 2^-126.
#pragma once

#include <string>

namespace llvm {
class IRBuilderBase;
class Module;
class Type;
class Value;
}  // namespace llvm

namespace tf {

class FpControl {
 public:
  // The register of CPU architecture `arch` (Target::arch_name()); none elsewhere, where the
  // functions below emit nothing and read() gives null.
  explicit FpControl(std::string arch) : arch_(std::move(arch)) {}
  bool exists() const;
  // Its type: i32 (MXCSR) or i64 (FPCR).
  llvm::Type* type(llvm::IRBuilderBase& b) const;
  llvm::Value* read(llvm::IRBuilderBase& b, llvm::Module& m) const;
  void write(llvm::IRBuilderBase& b, llvm::Module& m, llvm::Value* v) const;
  // `v` with denormal inputs and results taken as zero.
  llvm::Value* flushing_denormals(llvm::IRBuilderBase& b, llvm::Value* v) const;

 private:
  bool x86() const { return arch_ == "x86_64" || arch_ == "x86"; }
  std::string arch_;
};

}  // namespace tf
