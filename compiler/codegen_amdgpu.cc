// The code generator's AMD kind (compiler/codegen_llvm_internal.h): code objects through LLVM's
// AMDGPU back end.
#include <llvm/IR/IntrinsicsAMDGPU.h>

#include <cstdlib>
#include <filesystem>

#include "compiler/codegen_gpu.h"

namespace tf::llvm_codegen {
namespace {

// The directory of the ROCm device libraries' bitcode (ocml.bc, ockl.bc, oclc_*.bc).
std::string rocm_device_libs_dir() {
  auto has_ocml = [](const std::string& d) { return std::filesystem::exists(d + "/ocml.bc"); };
  if (const char* p = std::getenv("TUNEFARM_ROCM_DEVICE_LIBS"); p && *p) {
    if (!has_ocml(p)) {
      throw UserError(str("TUNEFARM_ROCM_DEVICE_LIBS (--rocm-device-libs) names ", p, ", which has no ocml.bc"));
    }
    return p;
  }
  std::vector<std::string> dirs;
  if (const char* r = std::getenv("ROCM_PATH"); r && *r) dirs.push_back(std::string(r) + "/amdgcn/bitcode");
  dirs.push_back("/opt/rocm/amdgcn/bitcode");
  dirs.push_back("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode");  // Debian's rocm-device-libs
  dirs.push_back("/usr/lib/aarch64-linux-gnu/amdgcn/bitcode");
  for (const std::string& d : dirs) {
    if (has_ocml(d)) return d;
  }
  throw UserError("this kernel calls tanh, which on rocm comes from the ROCm device libraries (ocml.bc), found in "
                  "none of $ROCM_PATH/amdgcn/bitcode, /opt/rocm/amdgcn/bitcode, /usr/lib/<arch>-linux-gnu/amdgcn/"
                  "bitcode (Debian's rocm-device-libs); point --rocm-device-libs (or $TUNEFARM_ROCM_DEVICE_LIBS) at "
                  "the directory");
}

// ocml's control variables, which clang takes from the oclc_*.bc files. They are defined
// here for the target instead: the same values as clang's defaults without fast-math (IEEE
// denormals, correctly rounded sqrt), and the ISA version for any gfx name, including those
// newer than the installed library's oclc_isa_version files.
void define_ocml_controls(llvm::Module& m, const std::string& gfx) {
  // gfx<major><minor><stepping>: the last two characters are hex digits.
  std::string digits = gfx.substr(3);
  int major = std::atoi(digits.substr(0, digits.size() - 2).c_str());
  int minor = std::stoi(digits.substr(digits.size() - 2, 1), nullptr, 16);
  int stepping = std::stoi(digits.substr(digits.size() - 1), nullptr, 16);
  const std::pair<const char*, int> controls[] = {
      {"__oclc_finite_only_opt", 0},          {"__oclc_unsafe_math_opt", 0},
      {"__oclc_daz_opt", 0},                  {"__oclc_correctly_rounded_sqrt32", 1},
      {"__oclc_wavefrontsize64", major < 10}, {"__oclc_ISA_version", major * 1000 + minor * 100 + stepping},
      {"__oclc_ABI_version", 500},
  };
  llvm::Type* i8 = llvm::Type::getInt8Ty(m.getContext());
  llvm::Type* i32 = llvm::Type::getInt32Ty(m.getContext());
  for (const auto& [name, value] : controls) {
    llvm::GlobalVariable* g = m.getGlobalVariable(name, true);
    if (!g || !g->isDeclaration()) continue;  // not read by what was linked
    llvm::Type* t = g->getValueType()->isIntegerTy(8) ? i8 : i32;
    g->setInitializer(llvm::ConstantInt::get(t, static_cast<uint64_t>(value)));
    g->setConstant(true);
    g->setLinkage(llvm::GlobalValue::InternalLinkage);
  }
}

class CodeGenAmdgpu final : public CodeGenGpu {
 public:
  CodeGenAmdgpu(llvm::LLVMContext& ctx, llvm::Module& m, const Target& t) : CodeGenGpu(ctx, m, t) {
    // Code object v5, what ROCm 5.x-6.x runtimes load.
    if (!m.getModuleFlag("amdgpu_code_object_version")) {
      m.addModuleFlag(llvm::Module::Error, "amdgpu_code_object_version", 500);
    }
  }

  void link_vendor_math(llvm::Module& m, const std::set<std::string>& kernels) override {
    link_bitcode(m, kernels, rocm_device_libs_dir() + "/ocml.bc", "ROCm ocml");
    define_ocml_controls(m, target_.cpu);
  }

 protected:
  // AMD kernels take global (addrspace 1) pointers.
  unsigned arg_address_space() const override { return 1; }

  // A kernel of exactly the block size it is launched with, so the back end can budget
  // registers for that many threads.
  void mark_kernel(const GpuLaunch& launch) override {
    std::string threads = std::to_string(launch.threads_per_block());
    fn_->setCallingConv(llvm::CallingConv::AMDGPU_KERNEL);
    fn_->addFnAttr("amdgpu-flat-work-group-size", threads + "," + threads);
    fn_->addFnAttr("uniform-work-group-size", "true");
  }

  const std::array<llvm::Intrinsic::ID, 6>& grid_intrinsics() const override {
    using namespace llvm::Intrinsic;  // NOLINT
    static const std::array<ID, 6> ids = {amdgcn_workgroup_id_x, amdgcn_workgroup_id_y, amdgcn_workgroup_id_z,
                                          amdgcn_workitem_id_x,  amdgcn_workitem_id_y,  amdgcn_workitem_id_z};
    return ids;
  }

  // tanh from ocml; the back end selects the others.
  std::string vendor_math_function(const std::string& call) const override {
    return call == "tanh" ? "__ocml_tanh_f32" : "";
  }

  void block_barrier() override {
    b_.CreateFence(llvm::AtomicOrdering::Release, ctx_.getOrInsertSyncScopeID("workgroup"));
    b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_s_barrier, {}, {});
    b_.CreateFence(llvm::AtomicOrdering::Acquire, ctx_.getOrInsertSyncScopeID("workgroup"));
  }
};

}  // namespace

std::unique_ptr<CodeGen> make_codegen_amdgpu(llvm::LLVMContext& ctx, llvm::Module& m, const Target& t) {
  return std::make_unique<CodeGenAmdgpu>(ctx, m, t);
}

}  // namespace tf::llvm_codegen
