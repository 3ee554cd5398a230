// The LLVM code generator's entry points and what every kind shares; the generator itself is
// compiler/codegen_llvm_internal.h's CodeGen and its kinds' subclasses (codegen_cpu.cc,
// codegen_gpu.cc, codegen_nvptx.cc, codegen_amdgpu.cc).
#include "compiler/codegen_llvm.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include <memory>
#include <set>

#include "compiler/codegen_llvm_internal.h"

namespace tf {
namespace llvm_codegen {

std::unique_ptr<CodeGen> make_codegen(llvm::LLVMContext& ctx, llvm::Module& m, const Target& t) {
  switch (t.kind) {
    case TargetKind::Llvm: return make_codegen_cpu(ctx, m, t);
    case TargetKind::Cuda: return make_codegen_nvptx(ctx, m, t);
    case TargetKind::Rocm: return make_codegen_amdgpu(ctx, m, t);
  }
  TF_CHECK(false, "codegen: no code generator for target kind ", static_cast<int>(t.kind));
  return nullptr;
}

std::string target_features(const Target& t) { return t.kind == TargetKind::Cuda ? ptx_feature(t.arch) : t.features; }

// Links the functions of a vendor bitcode library that the kernel calls (only those) and
// makes them internal, so the optimizer inlines them and drops the rest.
void link_bitcode(llvm::Module& m, const std::set<std::string>& kernels, const std::string& path, const char* what) {
  llvm::SMDiagnostic err;
  std::unique_ptr<llvm::Module> lib = llvm::parseIRFile(path, err, m.getContext());
  if (!lib) throw UserError(str("cannot read ", what, " ", path, ": ", err.getMessage().str()));
  lib->setTargetTriple(m.getTargetTriple());
  lib->setDataLayout(m.getDataLayout());
  if (llvm::Linker::linkModules(m, std::move(lib), llvm::Linker::Flags::LinkOnlyNeeded)) {
    throw UserError(str("cannot link ", what, " ", path, " into the kernel"));
  }
  for (llvm::Function& fn : m) {
    if (!fn.isDeclaration() && !kernels.count(fn.getName().str())) fn.setLinkage(llvm::GlobalValue::InternalLinkage);
  }
}

}  // namespace llvm_codegen

namespace {

using llvm_codegen::CodeGen;
using llvm_codegen::make_codegen;
using ir::LoweredFunc;

void optimize(llvm::Module& m, llvm::TargetMachine* tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

}  // namespace

std::unique_ptr<llvm::TargetMachine> make_target_machine(const Target& t) {
  std::string err;
  const llvm::Target* lt = llvm::TargetRegistry::lookupTarget(t.triple, err);
  TF_CHECK(lt, "no LLVM target for ", t.triple, ": ", err);
  llvm::TargetOptions opts;
  // Destructors (free_kept_buffers_at_unload) in .fini_array, which the loader runs at dlclose and
  // exit (the default .dtors section is not run by glibc).
  opts.UseInitArray = true;
  return std::unique_ptr<llvm::TargetMachine>(lt->createTargetMachine(
      t.triple, t.chip(), llvm_codegen::target_features(t), opts, llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
}

std::string emit_object(llvm::Module& m, llvm::TargetMachine& tm, bool assembly) {
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  auto kind = assembly ? llvm::CodeGenFileType::AssemblyFile : llvm::CodeGenFileType::ObjectFile;
  TF_CHECK(!tm.addPassesToEmitFile(pm, os, nullptr, kind), "target ", m.getTargetTriple(),
           " cannot emit this file type");
  pm.run(m);
  return std::string(buffer.begin(), buffer.end());
}

llvm::GlobalVariable* kept_buffer_slot(llvm::Module& m, const std::string& name) {
  auto* ptr = llvm::PointerType::get(m.getContext(), 0);
  return new llvm::GlobalVariable(m, ptr, false, llvm::GlobalValue::InternalLinkage,
                                  llvm::ConstantPointerNull::get(ptr), name);
}

llvm::Value* exchange_kept_buffer(llvm::IRBuilderBase& b, llvm::GlobalVariable* slot, llvm::Value* p) {
  if (!p) p = llvm::ConstantPointerNull::get(b.getPtrTy());
  return b.CreateAtomicRMW(llvm::AtomicRMWInst::Xchg, slot, p, llvm::Align(8), llvm::AtomicOrdering::AcquireRelease);
}

void free_kept_buffers_at_unload(llvm::Module& m, const std::vector<llvm::GlobalVariable*>& slots,
                                 const std::string& name) {
  if (slots.empty()) return;
  llvm::LLVMContext& ctx = m.getContext();
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), false),
                                    llvm::Function::InternalLinkage, name, m);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
  llvm::FunctionCallee release =
      m.getOrInsertFunction("free", llvm::FunctionType::get(b.getVoidTy(), {b.getPtrTy()}, false));
  for (llvm::GlobalVariable* slot : slots) b.CreateCall(release, {exchange_kept_buffer(b, slot, nullptr)});
  b.CreateRetVoid();
  llvm::appendToGlobalDtors(m, fn, 65535);
}

namespace {
// The module llvm_ir_key and llvm_ir_text describe: `f` as code generation first builds it,
// named "kernel".
void emit_unoptimized(const LoweredFunc& f, const Target& target, llvm::LLVMContext& ctx, llvm::Module& m) {
  LoweredFunc named = f;
  named.name = "kernel";
  m.setTargetTriple(target.triple);
  if (target.is_gpu()) {
    for (const LoweredFunc& k : split_gpu_program(named).kernels) {
      GpuLaunch launch = check_gpu_kernel(k, target);
      make_codegen(ctx, m, target)->emit(k, &launch);
    }
  } else {
    make_codegen(ctx, m, target)->emit(named, nullptr);
  }
}
}  // namespace

std::string llvm_ir_key(const LoweredFunc& f, const Target& target) {
  llvm::LLVMContext ctx;
  llvm::Module m("kernel", ctx);
  emit_unoptimized(f, target, ctx, m);
  // Bitcode, not text: the same module either way, without the printer (which tracks columns
  // and escapes names), 5% of DenseNet-121's compile CPU when keys were text.
  llvm::SmallVector<char, 0> bytes;
  llvm::raw_svector_ostream os(bytes);
  llvm::WriteBitcodeToFile(m, os);
  return std::string(bytes.data(), bytes.size());
}

std::string llvm_ir_text(const LoweredFunc& f, const Target& target) {
  llvm::LLVMContext ctx;
  llvm::Module m("kernel", ctx);
  emit_unoptimized(f, target, ctx, m);
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os, nullptr);
  os.flush();
  return text;
}

namespace {
// The target LLVM compiles `kernels` for: `target`, except that sm_90's warpgroup-level
// products (compiler/ir.h kWgmmaF16) are sm_90a instructions, which PTX allows only in a
// module for sm_90a (such a module runs on sm_90 GPUs alone, as the instruction does).
Target ptx_target(const std::vector<LoweredFunc>& kernels, const Target& target) {
  if (target.kind != TargetKind::Cuda || target.arch != "sm_90") return target;
  Target t = target;
  for (const LoweredFunc& k : kernels) {
    if (!ir::call_named(k.body, ir::is_wgmma).empty()) t.arch = "sm_90a";
  }
  return t;
}
}  // namespace

CodegenResult codegen_llvm(const LoweredFunc& f, const Target& target, CodegenOutput out) {
  return codegen_llvm(std::vector<LoweredFunc>{f}, target, out);
}

CodegenResult codegen_llvm(const std::vector<LoweredFunc>& fs, const Target& target, CodegenOutput out) {
  TF_CHECK(!fs.empty(), "codegen_llvm: no function");
  TF_CHECK(fs.size() == 1 || target.is_gpu(), "codegen_llvm: several functions in one module are for GPU targets");
  // parse_target initialized LLVM's targets.
  // A GPU function is one or more kernels (compiler/gpu.h split_gpu_program), in one module.
  std::vector<LoweredFunc> kernels;
  std::vector<GpuLaunch> launches;
  for (const LoweredFunc& f : fs) {
    if (!target.is_gpu()) {
      kernels.push_back(f);
      continue;
    }
    for (LoweredFunc& k : split_gpu_program(f).kernels) {
      launches.push_back(check_gpu_kernel(k, target));
      kernels.push_back(std::move(k));
    }
  }
  llvm::LLVMContext ctx;
  auto m = std::make_unique<llvm::Module>(fs.front().name, ctx);
  std::unique_ptr<llvm::TargetMachine> tm = make_target_machine(ptx_target(kernels, target));
  m->setTargetTriple(target.triple);
  m->setDataLayout(tm->createDataLayout());
  CodegenResult result;
  std::unique_ptr<CodeGen> vendor_math;  // a code generator whose kernel calls the vendor's math library
  std::set<std::string> names;
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::unique_ptr<CodeGen> cg = make_codegen(ctx, *m, target);
    cg->emit(kernels[i], launches.empty() ? nullptr : &launches[i]);
    names.insert(kernels[i].name);
    result.uses_openmp |= cg->uses_openmp;
    result.uses_libm |= cg->uses_libm;
    if (cg->uses_vendor_math) vendor_math = std::move(cg);
  }
  std::string verify_errors;
  llvm::raw_string_ostream vos(verify_errors);
  TF_CHECK(!llvm::verifyModule(*m, &vos), "codegen produced invalid LLVM IR: ", verify_errors);
  if (vendor_math) vendor_math->link_vendor_math(*m, names);
  optimize(*m, tm.get());

  if (out == CodegenOutput::LLVM) {
    llvm::raw_string_ostream os(result.data);
    m->print(os, nullptr);
    return result;
  }
  result.data = emit_object(*m, *tm, out == CodegenOutput::Asm);
  return result;
}

}  // namespace tf
