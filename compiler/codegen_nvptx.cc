// The code generator's NVIDIA kind (compiler/codegen_llvm_internal.h): PTX through LLVM's
// NVPTX back end.
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "compiler/codegen_gpu.h"
#include "compiler/simplify.h"
#include "compiler/tensorize.h"

namespace tf::llvm_codegen {
namespace {

std::string libdevice_path() {
  if (const char* p = std::getenv("TUNEFARM_LIBDEVICE"); p && *p) {
    if (!std::filesystem::exists(p)) throw UserError(str("TUNEFARM_LIBDEVICE (--libdevice) names ", p, ", which does not exist"));
    return p;
  }
  std::vector<std::string> roots;
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) roots.push_back(home);
  roots.push_back("/usr/local/cuda");
  roots.push_back("/usr/lib/cuda");  // Debian's nvidia-cuda-toolkit
  for (const std::string& r : roots) {
    std::string p = r + "/nvvm/libdevice/libdevice.10.bc";
    if (std::filesystem::exists(p)) return p;
  }
  throw UserError("this kernel calls exp, log or tanh, which on cuda come from NVIDIA's libdevice (libdevice.10.bc), "
                  "found in none of $CUDA_HOME, /usr/local/cuda, /usr/lib/cuda (under nvvm/libdevice/); point "
                  "--libdevice (or $TUNEFARM_LIBDEVICE) at it");
}

class CodeGenNvptx final : public CodeGenGpu {
 public:
  using CodeGenGpu::CodeGenGpu;

  // libdevice reads __nvvm_reflect, which the NVPTX back end's own pass pipeline resolves
  // (flush-to-zero off).
  void link_vendor_math(llvm::Module& m, const std::set<std::string>& kernels) override {
    link_bitcode(m, kernels, libdevice_path(), "libdevice");
    if (!m.getModuleFlag("nvvm-reflect-ftz")) m.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t{0});
  }

 protected:
  // An entry point the host launches, with the block size it is launched with, so the back
  // end can budget registers for exactly that many threads. NVPTX (LLVM 19) reads kernels and
  // their exact block size from nvvm.annotations. (Kernel pointers are generic: NVPTX lowers
  // them to global itself.)
  void mark_kernel(const GpuLaunch& launch) override {
    llvm::NamedMDNode* md = m_.getOrInsertNamedMetadata("nvvm.annotations");
    auto entry = [&](const char* key, int64_t v) {
      md->addOperand(llvm::MDNode::get(ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, key),
                                              llvm::ConstantAsMetadata::get(b_.getInt32(static_cast<uint32_t>(v)))}));
    };
    entry("kernel", 1);
    entry("maxntidx", launch.block[0]);
    entry("maxntidy", launch.block[1]);
    entry("maxntidz", launch.block[2]);
  }

  const std::array<llvm::Intrinsic::ID, 6>& grid_intrinsics() const override {
    using namespace llvm::Intrinsic;  // NOLINT
    static const std::array<ID, 6> ids = {nvvm_read_ptx_sreg_ctaid_x, nvvm_read_ptx_sreg_ctaid_y,
                                          nvvm_read_ptx_sreg_ctaid_z, nvvm_read_ptx_sreg_tid_x,
                                          nvvm_read_ptx_sreg_tid_y,   nvvm_read_ptx_sreg_tid_z};
    return ids;
  }

  // Transcendentals from libdevice (__nv_expf, ...); the rest are instructions.
  std::string vendor_math_function(const std::string& call) const override {
    bool transcendental = call == "exp" || call == "log" || call == "tanh" || call == "sin" || call == "cos";
    return transcendental ? "__nv_" + call + "f" : "";
  }

  // Whether this target copies global to shared memory asynchronously (cp.async: sm_80+).
  bool has_cp_async() const override { return sm() >= 80; }
  bool converts_bfloat16() const override { return sm() >= 80; }

  // A store into a shared buffer of asynchronous copies (Allocate::async_copies) whose value
  // is a load of a kernel argument: cp.async (sm_80 and later) of the vector's 16, 8 or 4 bytes
  // where its lanes are contiguous and aligned on both sides (4 floats, 8 halves), else of 4
  // bytes per lane of 4-byte elements. The copy bypasses the registers;
  // Barrier::Kind::AsyncCommit groups it and AsyncWait waits for its group. False when the store
  // is of another form, or of 16-bit elements in pieces under 4 bytes (it is then an ordinary
  // store).
  bool async_copy(const Store* s) override {
    const Load* l = s->value.as<Load>();
    if (!l || mask_ || !kernel_args_.count(l->buffer)) return false;
    const Type elem = l->type.element_of();
    if (elem != Type::float32() && elem != Type::int32() && elem != Type::uint16()) return false;
    const int64_t bytes = elem.bytes();
    int lanes = s->value.type().lanes;
    auto global = [&](llvm::Value* p) { return b_.CreateAddrSpaceCast(p, b_.getPtrTy(1)); };
    const Ramp* dr = s->index.as<Ramp>();
    const Ramp* sr = l->index.as<Ramp>();
    const int64_t width = lanes * bytes;
    if ((width == 16 || width == 8 || width == 4) && dr && sr && is_const(dr->stride, 1) && is_const(sr->stride, 1) &&
        known_multiple(dr->base) % lanes == 0 && known_multiple(sr->base) % lanes == 0) {
      using namespace llvm::Intrinsic;  // NOLINT
      const ID id = width == 16 ? nvvm_cp_async_cg_shared_global_16 : width == 8 ? nvvm_cp_async_ca_shared_global_8
                                                                                   : nvvm_cp_async_ca_shared_global_4;
      b_.CreateIntrinsic(id, {}, {element_ptr(s->buffer, expr(dr->base), elem), global(element_ptr(l->buffer, expr(sr->base), elem))});
      return true;
    }
    if (bytes != 4) return false;
    llvm::Value* di = expr(s->index);
    llvm::Value* si = expr(l->index);
    for (int i = 0; i < lanes; ++i) {
      llvm::Value* d = lanes == 1 ? di : b_.CreateExtractElement(di, static_cast<uint64_t>(i));
      llvm::Value* src = si->getType()->isVectorTy() ? b_.CreateExtractElement(si, static_cast<uint64_t>(i)) : si;
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_ca_shared_global_4, {},
                         {element_ptr(s->buffer, d, elem), global(element_ptr(l->buffer, src, elem))});
    }
    return true;
  }

  void async_group(const Barrier* s) override {
    if (!has_cp_async()) return;
    if (s->sync == Barrier::Kind::AsyncCommit) {
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_commit_group, {}, {});
    } else {
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {b_.getInt32(s->pending)});
    }
  }

  // A kernel with warpgroup-level products (wgmma) reads shared memory through the async
  // proxy: each thread fences its generic-proxy writes (stores, cp.async) before the barrier
  // that publishes them (compiler/ir.h kWgmmaF16).
  void begin_kernel(const LoweredFunc& f) override { uses_wgmma_ = !call_named(f.body, is_wgmma).empty(); }

  void block_barrier() override {
    if (uses_wgmma_) asm_statement("fence.proxy.async.shared::cta;");
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  }

  // An inline PTX statement of no operands that orders memory (a compiler barrier too).
  void asm_statement(const std::string& text) {
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), false);
    b_.CreateCall(llvm::InlineAsm::get(fty, text, "~{memory}", /*hasSideEffects=*/true), {});
  }

  // A warpgroup-level product (compiler/ir.h kWgmmaF16, kWgmmaBF16), sm_90 only (PTX's
  // wgmma.mma_async is an sm_90a instruction; the module's target becomes sm_90a:
  // codegen_llvm). LLVM 19 has no intrinsic for it: inline PTX, as MLIR's NVGPU and Triton
  // emit it, the accumulators tied in and out, the two operand descriptors in 64-bit registers;
  // fence, product and commit, not waited for (wgmma_wait below). The fence orders the
  // warpgroup's earlier register accesses before the product's; a product that continues a run
  // into the same accumulators (note_wgmma_runs) goes without it, as PTX orders products of
  // one shape into the same accumulators (CUTLASS fences once per K chunk).
  llvm::Value* wgmma(const Call* c) override {
    if (sm() != 90) {
      throw UserError(str("kernel ", name_, " uses ", c->name, " (Hopper's warpgroup-level tensor cores), which ",
                          target_.str(), " does not have: only sm_90 has it"));
    }
    const int n = wgmma_n(*c), h = n / 2;
    const char* type = c->name == kWgmmaBF16 ? "bf16" : "f16";
    const bool fence = !wgmma_run_continues_.count(c);
    std::string text =
        str("{\n.reg .pred p;\nsetp.ne.b32 p, $", h + 2, ", 0;\n",
            fence ? "wgmma.fence.sync.aligned;\n" : "", "wgmma.mma_async.sync.aligned.m64n", n,
            "k16.f32.", type, ".", type, " {");
    for (int i = 0; i < h; ++i) text += str(i ? ", $" : "$", i);
    text += str("}, $", h, ", $", h + 1, ", p, 1, 1, 0, 0;\nwgmma.commit_group.sync.aligned;\n}");
    // Then the two descriptors and the scale of D (1: D = C + A x B).
    return on_accumulators(text, c, 6, {wgmma_descriptor(c, 0), wgmma_descriptor(c, 3), b_.getInt32(1)}, "l,l,r,");
  }

  // Inline PTX `text` whose outputs $0 .. $(h-1) are the float accumulators `c->args[first ..]`
  // (h of them: c's lanes), each tied to its input, after the inputs `in` ($h on, with
  // `in_constraints`, each followed by a comma); c's value is the outputs as a vector.
  llvm::Value* on_accumulators(const std::string& text, const Call* c, size_t first, std::vector<llvm::Value*> in,
                               const std::string& in_constraints) {
    const unsigned h = static_cast<unsigned>(c->type.lanes);
    std::string constraints;
    for (unsigned i = 0; i < h; ++i) constraints += "=f,";
    constraints += in_constraints;
    std::vector<llvm::Type*> in_types;
    for (llvm::Value* v : in) in_types.push_back(v->getType());
    for (unsigned i = 0; i < h; ++i) {
      constraints += str(i, ",");  // tied to output i
      in_types.push_back(b_.getFloatTy());
      in.push_back(expr(c->args[first + i]));
    }
    constraints += "~{memory}";
    auto* out_type = llvm::StructType::get(ctx_, std::vector<llvm::Type*>(h, b_.getFloatTy()));
    auto* fty = llvm::FunctionType::get(out_type, in_types, false);
    llvm::Value* d = b_.CreateCall(llvm::InlineAsm::get(fty, text, constraints, /*hasSideEffects=*/true), in);
    llvm::Value* out = llvm::PoisonValue::get(type_of(c->type));
    for (unsigned i = 0; i < h; ++i) out = b_.CreateInsertElement(out, b_.CreateExtractValue(d, {i}), uint64_t{i});
    return out;
  }


  // A warp-level product (compiler/ir.h), sm_80 and later. TF32: each of A's and B's operands
  // rounded by cvt.rna.tf32.f32 into a 32-bit register, then
  // mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32. float16 and bfloat16: the operands
  // rounded to the type (fptrunc: cvt.rn) in pairs, one register each (<2 x half>, or the two
  // bfloat16 as an i32), then mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{..}.f32.
  llvm::Value* warp_mma(const Call* c) override {
    if (sm() < 80) {
      throw UserError(str("kernel ", name_, " uses ", c->name, " (tensor cores), which ", target_.str(),
                          " does not have: they need sm_80 or later"));
    }
    const size_t ab = static_cast<size_t>(warp_mma_operands(c->name) - 4);  // A's and B's; then C's 4
    std::vector<llvm::Value*> ops;
    llvm::Intrinsic::ID id = llvm::Intrinsic::nvvm_mma_m16n8k8_row_col_tf32;
    if (c->name == kMmaTF32) {
      for (size_t i = 0; i < ab; ++i) {
        ops.push_back(b_.CreateIntrinsic(llvm::Intrinsic::nvvm_f2tf32_rna, {}, {expr(c->args[i])}));
      }
    } else {
      const bool bf16 = c->name == kMmaBF16;
      auto* pair = llvm::FixedVectorType::get(bf16 ? b_.getBFloatTy() : b_.getHalfTy(), 2);
      const char* widen = bf16 ? kBF16ToFloat : kF16ToFloat;
      for (size_t i = 0; i < ab; i += 2) {
        llvm::Value* v = held_pair(c->args[i], c->args[i + 1], widen);
        if (!v) {
          v = llvm::PoisonValue::get(pair);
          for (uint64_t h = 0; h < 2; ++h) {
            llvm::Value* bits = held_bits(c->args[i + h], widen);
            llvm::Value* x = bits ? b_.CreateBitCast(bits, pair->getElementType())
                                  : b_.CreateFPTrunc(expr(c->args[i + h]), pair->getElementType());
            v = b_.CreateInsertElement(v, x, h);
          }
        }
        ops.push_back(bf16 ? b_.CreateBitCast(v, b_.getInt32Ty()) : b_.CreateBitCast(v, pair));
      }
      id = bf16 ? llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_bf16 : llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_f32_f32;
    }
    for (size_t i = ab; i < ab + 4; ++i) ops.push_back(expr(c->args[i]));
    llvm::Value* d = b_.CreateIntrinsic(id, {}, ops);
    llvm::Value* out = llvm::PoisonValue::get(type_of(c->type));
    for (unsigned i = 0; i < 4; ++i) out = b_.CreateInsertElement(out, b_.CreateExtractValue(d, {i}), uint64_t{i});
    return out;
  }

  // Such an operand's bits as an i16, which the product takes as they are (rounding them again
  // would change nothing); null for any other operand. Under its select as a select of the loop
  // IR, which loads only where its condition holds (codegen select()).
  llvm::Value* held_bits(const Expr& e, const char* widen) {
    Expr cond;
    const Call* w = ir::held_16_bits(e, widen, cond);
    if (!w) return nullptr;
    return expr(cond ? Select::make(cond, w->args[0], IntImm::make_typed(0, Type::uint16())) : w->args[0]);
  }

  // A fragment's pair (operands e and e + 1) held as two consecutive uint16 elements of one
  // buffer from an even element on, under no select or one and the same (a tile's column or row
  // guard): one 32-bit load of both (the low half the first, as the product takes them), or 0
  // where the select's condition fails; null otherwise.
  llvm::Value* held_pair(const Expr& lo, const Expr& hi, const char* widen) {
    Expr c0, c1;
    const Call* w0 = ir::held_16_bits(lo, widen, c0);
    const Call* w1 = ir::held_16_bits(hi, widen, c1);
    if (!w0 || !w1 || bool(c0) != bool(c1) || (c0 && !equal(c0, c1))) return nullptr;
    // The halves of one word of an ldmatrix fragment (tensorize): that register as it is.
    const Call* h0 = w0->args[0].as<Call>();
    const Call* h1 = w1->args[0].as<Call>();
    if (h0 && h1 && h0->name == kWordHalf && h1->name == kWordHalf && equal(h0->args[0], h1->args[0]) &&
        *as_const_int(h0->args[1]) == *as_const_int(h1->args[1]) && *as_const_int(h0->args[2]) == 0 &&
        *as_const_int(h1->args[2]) == 1) {
      llvm::Value* word = b_.CreateExtractElement(expr(h0->args[0]), static_cast<uint64_t>(*as_const_int(h0->args[1])));
      return c0 ? b_.CreateSelect(expr(c0), word, b_.getInt32(0)) : word;
    }
    const Load* l0 = w0->args[0].as<Load>();
    const Load* l1 = w1->args[0].as<Load>();
    if (!l0 || !l1 || l0->buffer != l1->buffer || l0->type != Type::uint16() || l1->type != Type::uint16()) return nullptr;
    const Expr gap = simplify(l1->index - l0->index);  // kept: as_const_int points into it
    const int64_t* step = as_const_int(gap);
    if (!step || *step != 1 || known_multiple(l0->index) % 2 != 0) return nullptr;
    // The word as an int32 element of the buffer (element index / 2: the pair starts at an even
    // one), under the select, which loads only where its condition holds (codegen select()).
    Expr word = Load::make(Type::int32(), l0->buffer, simplify(l0->index / Expr(int64_t{2})));
    if (c0) word = Select::make(c0, word, IntImm::make_typed(0, Type::int32()));
    return expr(word);
  }

  // A warp's fragment loads (compiler/ir.h kLdMatrix):
  // ldmatrix.sync.aligned.m8n8.x{2,4}[.trans].shared.b16 from the row address this lane supplies
  // (its Load's first word, in shared memory).
  llvm::Value* ldmatrix(const Call* c) override {
    // Only the tensor cores' products read fragments so: their limit, not ldmatrix's (sm_75).
    if (sm() < 80) {
      throw UserError(str("kernel ", name_, " uses ", c->name, " (tensor cores' fragment loads), which ", target_.str(),
                          " does not have: they need sm_80 or later"));
    }
    const Load* row = c->args[0].as<Load>();
    const Ramp* r = row->index.as<Ramp>();
    TF_CHECK(r, "codegen: ", c->name, " of a row that is not a Ramp");
    llvm::Value* p = element_ptr(row->buffer, expr(r->base), Type::int32());
    TF_CHECK(p->getType()->getPointerAddressSpace() == 3, "codegen: ", c->name, " of ", row->buffer, ", not in shared memory");
    const int64_t n = *as_const_int(c->args[1]);
    using namespace llvm::Intrinsic;  // NOLINT
    // Overloaded on the pointer's type (LLVM 19: ...x4.b16.p3).
    const ID id = ldmatrix_transposed(*c) ? (n == 4 ? nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16
                                                    : nvvm_ldmatrix_sync_aligned_m8n8_x2_trans_b16)
                                          : (n == 4 ? nvvm_ldmatrix_sync_aligned_m8n8_x4_b16
                                                    : nvvm_ldmatrix_sync_aligned_m8n8_x2_b16);
    llvm::Value* d = b_.CreateIntrinsic(id, {p->getType()}, {p});
    llvm::Value* out = llvm::PoisonValue::get(type_of(c->type));
    for (unsigned i = 0; i < static_cast<unsigned>(n); ++i) out = b_.CreateInsertElement(out, b_.CreateExtractValue(d, {i}), uint64_t{i});
    return out;
  }

  // The accumulators through wgmma.wait_group N, tied in and out: every product issued before
  // but the N most recent is complete, and nothing reads its results earlier.
  llvm::Value* wgmma_wait(const Call* c) override {
    return on_accumulators(str("wgmma.wait_group.sync.aligned ", *as_const_int(c->args[0]), ";"), c,
                           1, {}, "");
  }

  int sm() const { return target_.arch.rfind("sm_", 0) == 0 ? std::atoi(target_.arch.c_str() + 3) : 0; }

 private:
  bool uses_wgmma_ = false;
};

}  // namespace

std::string ptx_feature(const std::string& arch) {
  int sm = std::atoi(arch.c_str() + 3);
  // sm_90a (warpgroup-level products: codegen_llvm ptx_target) needs PTX 8.0, wgmma's.
  if (arch == "sm_90a") return "+ptx80";
  int ptx = sm >= 100 ? 86 : sm >= 90 ? 78 : sm >= 89 ? 78 : sm >= 87 ? 74 : sm >= 86 ? 71 : sm >= 80 ? 70
          : sm >= 75 ? 63 : sm >= 72 ? 61 : 60;
  return "+ptx" + std::to_string(ptx);
}

std::unique_ptr<CodeGen> make_codegen_nvptx(llvm::LLVMContext& ctx, llvm::Module& m, const Target& t) {
  return std::make_unique<CodeGenNvptx>(ctx, m, t);
}

}  // namespace tf::llvm_codegen
