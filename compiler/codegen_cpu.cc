// The code generator's CPU kind (compiler/codegen_llvm_internal.h): x86_64, aarch64, arm.
#include "compiler/codegen_llvm_internal.h"

#include <llvm/Analysis/VectorUtils.h>
#include <llvm/IR/IntrinsicsAArch64.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/TargetParser/Triple.h>

#include <functional>
#include <initializer_list>

namespace tf::llvm_codegen {
namespace {

class CodeGenCpu final : public CodeGen {
 public:
  using CodeGen::CodeGen;

 protected:
  // A status: 0, or -1 when a workspace could not be allocated.
  llvm::Type* return_type() override { return b_.getInt32Ty(); }
  void emit_return() override { b_.CreateRet(b_.getInt32(0)); }
  void mark_kernel(const GpuLaunch&) override { TF_CHECK(false, "codegen: a GPU launch for a CPU target"); }
  llvm::Value* grid_index(ForKind k) override {
    TF_CHECK(false, "codegen: a loop bound to ", for_kind_name(k), " on a CPU target (emulate it: serialize_gpu_bindings)");
    return nullptr;
  }

  // The compare-select gives b when either is NaN (x86: vmaxps a, b), then a where a is NaN:
  // three instructions, as maxnum was; llvm.maximum's lowering also orders signed zeros (six,
  // and ResNet-18's max pool made the model 2% slower).
  llvm::Value* min_max_with_nan(llvm::Value* a, llvm::Value*, llvm::Value* pick, bool) override {
    return b_.CreateSelect(b_.CreateFCmpUNO(a, a), a, pick);
  }

  void on_float_remainder() override { uses_libm = true; }  // frem is a call of fmodf on CPUs

  // F16C on x86 (vcvtph2ps, vcvtps2ph); every aarch64 (fcvtl, fcvtn). Without it LLVM would
  // call compiler-rt's __extendhfsf2, which kernel libraries do not link.
  bool converts_float16() const override {
    if (!converts_float16_) {
      const llvm::Triple tt(target_.triple);
      converts_float16_ = tt.isAArch64() || (tt.isX86() && target_.has_feature("f16c"));
    }
    return *converts_float16_;
  }

  // x86 lowers llvm.fptosi.sat on vectors lane by lane, two compares and branches each: the
  // float-to-uint8 quantization at the entry of an int8 convolution took 0.3 ms for 800 K
  // values (ResNet-50's 256-channel 56x56 input), as long as the convolution's products.
  llvm::Value* float_to_int(llvm::Value* v, llvm::Type* t, bool is_unsigned) override {
    if (v->getType()->isVectorTy() && llvm::Triple(target_.triple).isX86())
      return float_to_int_by_clamps(v, t, is_unsigned);
    return CodeGen::float_to_int(v, t, is_unsigned);
  }

  // Instructions of `lanes` lanes each, widest first (intrinsic ID), as the target has them.
  using Pieces = std::vector<std::pair<unsigned, llvm::Intrinsic::ID>>;

  // acc + dot(a, b) by the widest of `pieces` whose width divides the vectors' lanes: each
  // slice of acc, a and b of that width to `one` (width, ID, acc, a, b), the results
  // concatenated. Null when none fits (a scalar, or an odd lane count).
  llvm::Value* in_pieces(const Pieces& pieces, llvm::Value* acc, llvm::Value* a, llvm::Value* b,
                         const std::function<llvm::Value*(unsigned, llvm::Intrinsic::ID, llvm::Value*, llvm::Value*,
                                                          llvm::Value*)>& one) {
    auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(a->getType());
    const unsigned lanes = vt ? vt->getNumElements() : 1;
    auto fits = std::find_if(pieces.begin(), pieces.end(), [&](const auto& p) { return lanes % p.first == 0; });
    if (fits == pieces.end()) return nullptr;
    const auto [n, id] = *fits;
    auto slice = [&](llvm::Value* v, unsigned from) {
      if (n == lanes) return v;
      std::vector<int> pick;
      for (unsigned i = 0; i < n; ++i) pick.push_back(static_cast<int>(from + i));
      return b_.CreateShuffleVector(v, pick);
    };
    std::vector<llvm::Value*> parts;
    for (unsigned at = 0; at < lanes; at += n) parts.push_back(one(n, id, slice(acc, at), slice(a, at), slice(b, at)));
    return parts.size() == 1 ? parts[0] : llvm::concatenateVectors(b_, parts);
  }

  // x86 with AVX512-VNNI (AVX-VNNI for 256 bits): vpdpbusd, 4, 8 or 16 lanes per instruction;
  // aarch64 with the int8 matrix extension: usdot, 4 lanes; aarch64 with only the dot product
  // (Cortex-A76, Raspberry Pi 5): sdot of signed bytes, twice (below). Other lane counts are
  // split into pieces of the widest that fits; CPUs without any widen (the base class).
  llvm::Value* dot4_u8s8(llvm::Value* acc, llvm::Value* a, llvm::Value* b) override {
    if (!dot_pieces_) dot_pieces_ = dot_instructions();
    llvm::Value* v = in_pieces(*dot_pieces_, acc, a, b, [&](unsigned n, llvm::Intrinsic::ID id, llvm::Value* cv,
                                                          llvm::Value* av, llvm::Value* bv) -> llvm::Value* {
      // usdot and sdot are overloaded on their vector types and take bytes; vpdpbusd takes
      // int32 lanes.
      if (id != llvm::Intrinsic::aarch64_neon_usdot && id != llvm::Intrinsic::aarch64_neon_sdot)
        return b_.CreateIntrinsic(id, {}, {cv, av, bv});
      auto* i32 = llvm::FixedVectorType::get(b_.getInt32Ty(), n);
      auto* i8 = llvm::FixedVectorType::get(b_.getInt8Ty(), n * 4);
      llvm::Value* bb = b_.CreateBitCast(bv, i8);
      if (id == llvm::Intrinsic::aarch64_neon_usdot) return b_.CreateIntrinsic(id, {i32, i8}, {cv, b_.CreateBitCast(av, i8), bb});
      // sdot takes signed bytes on both sides: a - 128 (a ^ 0x80 as int8) is one, and
      // sum a*b = sum (a - 128)*b + 128 * sum b, where -128 * sum b is the sdot of -128s with b
      // (the same b for every row of a register tile: LLVM computes it once per B vector).
      llvm::Value* m128 = llvm::ConstantInt::get(i8, 0x80);
      llvm::Value* shifted = b_.CreateIntrinsic(id, {i32, i8}, {cv, b_.CreateXor(b_.CreateBitCast(av, i8), m128), bb});
      llvm::Value* minus_sum_b = b_.CreateIntrinsic(id, {i32, i8}, {llvm::Constant::getNullValue(i32), m128, bb});
      return b_.CreateSub(shifted, minus_sum_b);
    });
    return v ? v : CodeGen::dot4_u8s8(acc, a, b);
  }

  // x86 with AVX512-BF16: vdpbf16ps, 16 lanes (8 and 4 with AVX512VL), in pieces as above;
  // aarch64 with the bfloat16 extension (Neoverse V1/N2, Cortex-A710 and later): bfdot, 4
  // lanes; the widening sequence elsewhere (the base class).
  llvm::Value* dot2_bf16(llvm::Value* acc, llvm::Value* a, llvm::Value* b) override {
    if (!bf16_pieces_) {
      bf16_pieces_.emplace();
      const llvm::Triple tt(target_.triple);
      if (tt.isX86() && target_.has_feature("avx512bf16")) {
        bf16_pieces_->push_back({16, llvm::Intrinsic::x86_avx512bf16_dpbf16ps_512});
        if (target_.has_feature("avx512vl")) {
          bf16_pieces_->push_back({8, llvm::Intrinsic::x86_avx512bf16_dpbf16ps_256});
          bf16_pieces_->push_back({4, llvm::Intrinsic::x86_avx512bf16_dpbf16ps_128});
        }
      } else if (tt.isAArch64() && target_.has_feature("bf16")) {
        bf16_pieces_->push_back({4, llvm::Intrinsic::aarch64_neon_bfdot});
      }
    }
    llvm::Value* v = in_pieces(*bf16_pieces_, acc, a, b, [&](unsigned n, llvm::Intrinsic::ID id, llvm::Value* cv,
                                                           llvm::Value* av, llvm::Value* bv) {
      auto* halves = llvm::FixedVectorType::get(b_.getBFloatTy(), n * 2);
      // bfdot is overloaded on its vector types; vdpbf16ps is not.
      std::vector<llvm::Type*> types;
      if (id == llvm::Intrinsic::aarch64_neon_bfdot) types = {cv->getType(), halves};
      return b_.CreateIntrinsic(id, types, {cv, b_.CreateBitCast(av, halves), b_.CreateBitCast(bv, halves)});
    });
    return v ? v : CodeGen::dot2_bf16(acc, a, b);
  }

  // The target's u8 x s8 dot-product instructions as (int32 lanes, intrinsic), widest first.
  Pieces dot_instructions() const {
    Pieces pieces;
    switch (target_.byte_dot()) {
      case Target::ByteDot::Vnni512:
        pieces.push_back({16, llvm::Intrinsic::x86_avx512_vpdpbusd_512});
        if (target_.has_feature("avx512vl")) {
          pieces.push_back({8, llvm::Intrinsic::x86_avx512_vpdpbusd_256});
          pieces.push_back({4, llvm::Intrinsic::x86_avx512_vpdpbusd_128});
        }
        break;
      case Target::ByteDot::AvxVnni:
        pieces.push_back({8, llvm::Intrinsic::x86_avx512_vpdpbusd_256});
        pieces.push_back({4, llvm::Intrinsic::x86_avx512_vpdpbusd_128});
        break;
      case Target::ByteDot::Usdot: pieces.push_back({4, llvm::Intrinsic::aarch64_neon_usdot}); break;
      case Target::ByteDot::Sdot: pieces.push_back({4, llvm::Intrinsic::aarch64_neon_sdot}); break;
      case Target::ByteDot::None: break;
    }
    return pieces;
  }

  llvm::Value* math_call(const Call* c, llvm::Intrinsic::ID id) override {
    if (c->name == "exp") return exp_inline(expr(c->args[0]));
    if (c->name == "tanh") return tanh_inline(expr(c->args[0]));
    if (c->name == "log") return log_inline(expr(c->args[0]));
    // floor, ceil, roundeven: libm calls where the CPU lacks the instruction (x86 before SSE4.1).
    if (c->name != "sqrt" && c->name != "fabs") uses_libm = true;
    return b_.CreateUnaryIntrinsic(id, expr(c->args[0]));
  }

  // Constants and fused multiply-adds of one float type (a scalar or a vector of lanes) and
  // its same-shaped int32 type, for the inline math below.
  struct FloatMath {
    llvm::IRBuilder<>& b;
    llvm::Type* ft;
    llvm::Type* it;
    FloatMath(llvm::IRBuilder<>& builder, llvm::Type* t)
        : b(builder), ft(t), it(t->getWithNewType(builder.getInt32Ty())) {}
    llvm::Constant* f(double v) const { return llvm::ConstantFP::get(ft, v); }
    llvm::Constant* i(int64_t v) const {
      return llvm::ConstantInt::get(it, static_cast<uint64_t>(v), true);
    }
    llvm::Value* fma(llvm::Value* a, llvm::Value* m, llvm::Value* c) const {
      return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {ft}, {a, m, c});
    }
    // c[0] x^(n-1) + c[1] x^(n-2) + ... + c[n-1], by Horner's rule.
    llvm::Value* horner(llvm::Value* x, std::initializer_list<double> c) const {
      llvm::Value* p = f(*c.begin());
      for (auto k = c.begin() + 1; k != c.end(); ++k) p = fma(p, x, f(*k));
      return p;
    }
  };

  // exp on CPUs, inline, so a vector of lanes stays a vector: LLVM's llvm.exp becomes one
  // libm expf call per lane there (softmax, GELU's erf and sigmoid spent most of their time in
  // those calls). Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, Cephes' degree-5
  // polynomial for e^r (within 2 ulp of expf), then 2^n applied in two halves so that
  // results below the smallest normal float come out as denormals and those past the largest
  // as infinity. x is clamped to [-104, 89] first (beyond, the result is 0 or infinity
  // anyway) with compares that let a NaN through; a NaN n is made 0 before its conversion.
  llvm::Value* exp_inline(llvm::Value* x) {
    const FloatMath m(b_, x->getType());
    x = b_.CreateSelect(b_.CreateFCmpOLT(x, m.f(-104.0)), m.f(-104.0), x);
    x = b_.CreateSelect(b_.CreateFCmpOGT(x, m.f(89.0)), m.f(89.0), x);
    // n = x / ln2 rounded to nearest by adding and subtracting 1.5 * 2^23 (no floor: that is a
    // libm call on x86 without SSE4.1).
    llvm::Value* n =
        b_.CreateFSub(m.fma(x, m.f(1.44269504088896341), m.f(12582912.0)), m.f(12582912.0));
    llvm::Value* r = m.fma(n, m.f(-0.693359375), x);
    r = m.fma(n, m.f(2.12194440e-4), r);
    llvm::Value* p = m.horner(r, {1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                  4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1});
    llvm::Value* y = m.fma(b_.CreateFMul(p, r), r, b_.CreateFAdd(r, m.f(1.0)));
    // n is within [-150, 128] after the clamps, or NaN: a NaN becomes 0 (the result is NaN
    // anyway), so a plain conversion is defined. (llvm.fptosi.sat, which also keeps NaN from
    // being poison, is done lane by lane on x86, two compares and a move per lane: a third of
    // BERT's FFN matmul with its fused GELU went to it.)
    llvm::Value* n_defined = b_.CreateSelect(b_.CreateFCmpUNO(n, n), m.f(0.0), n);
    llvm::Value* k = b_.CreateFPToSI(n_defined, m.it);
    llvm::Value* k1 = b_.CreateAShr(k, m.i(1));
    llvm::Value* k2 = b_.CreateSub(k, k1);
    auto pow2 = [&](llvm::Value* e) {
      return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(e, m.i(127)), m.i(23)), m.ft);
    };
    return b_.CreateFMul(b_.CreateFMul(y, pow2(k1)), pow2(k2));
  }

  // tanh on CPUs, inline for the same reason as exp (LSTM and GRU gates, GELU's tanh form,
  // Mish: an LSTM's steps spent an eighth of their time in libm's tanhf and expm1f, lane by
  // lane). Cephes' tanhf: for |x| < 0.625 its odd polynomial x + x^3 P(x^2), else
  // 1 - 2 / (e^2|x| + 1) (exp_inline: e^2|x| overflows to infinity past |x| ~ 44, giving 1),
  // both of |x|, one selected and given the sign of x: -0 stays -0, and a NaN takes the
  // second, which keeps it NaN.
  llvm::Value* tanh_inline(llvm::Value* x) {
    const FloatMath m(b_, x->getType());
    llvm::Value* ax = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
    llvm::Value* z = b_.CreateFMul(ax, ax);
    llvm::Value* p = m.horner(z, {-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                                  1.33314422036e-1, -3.33332819422e-1});
    llvm::Value* small = m.fma(b_.CreateFMul(p, z), ax, ax);
    llvm::Value* e = exp_inline(b_.CreateFAdd(ax, ax));
    llvm::Value* large =
        b_.CreateFSub(m.f(1.0), b_.CreateFDiv(m.f(2.0), b_.CreateFAdd(e, m.f(1.0))));
    llvm::Value* t = b_.CreateSelect(b_.CreateFCmpOLT(ax, m.f(0.625)), small, large);
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, t, x);
  }

  // log on CPUs, inline too (Softplus and Mish per element, LogSoftmax, Pow of a fractional
  // exponent). Cephes' logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)) (a denormal x scaled by
  // 2^23 first), log(m) = f - f^2/2 + f^3 P(f) for f = m - 1, plus e ln2 in two parts. The
  // exponent and mantissa come from the bits, so vector lanes stay vectors. log(0) = -inf,
  // log(inf) = inf, and a negative x or NaN gives NaN.
  llvm::Value* log_inline(llvm::Value* x) {
    const FloatMath m(b_, x->getType());
    llvm::Value* denormal = b_.CreateFCmpOLT(x, m.f(0x1p-126));
    llvm::Value* xs = b_.CreateSelect(denormal, b_.CreateFMul(x, m.f(0x1p23)), x);
    llvm::Value* bits = b_.CreateBitCast(xs, m.it);
    // The mantissa in [0.5, 1) and its exponent, then [sqrt(1/2), sqrt(2)).
    llvm::Value* e = b_.CreateSub(b_.CreateLShr(bits, m.i(23)), m.i(126));
    e = b_.CreateSub(e, b_.CreateSelect(denormal, m.i(23), m.i(0)));
    llvm::Value* mant =
        b_.CreateBitCast(b_.CreateOr(b_.CreateAnd(bits, m.i(0x007fffff)), m.i(0x3f000000)), m.ft);
    llvm::Value* low = b_.CreateFCmpOLT(mant, m.f(0.707106781186547524));
    e = b_.CreateSub(e, b_.CreateZExt(low, m.it));
    llvm::Value* fr =
        b_.CreateFSub(b_.CreateSelect(low, b_.CreateFAdd(mant, mant), mant), m.f(1.0));
    llvm::Value* ef = b_.CreateSIToFP(e, m.ft);
    llvm::Value* z = b_.CreateFMul(fr, fr);
    llvm::Value* p = m.horner(
        fr, {7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
             -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1});
    llvm::Value* y = b_.CreateFMul(b_.CreateFMul(p, fr), z);
    y = m.fma(ef, m.f(-2.12194440e-4), y);
    y = m.fma(z, m.f(-0.5), y);
    llvm::Value* r = m.fma(ef, m.f(0.693359375), b_.CreateFAdd(fr, y));
    // x > 0 and finite takes r; +inf (and the largest exponent's NaNs) take x itself, 0 takes
    // -inf, and a negative x or NaN takes NaN.
    llvm::Value* finite_positive = b_.CreateAnd(
        b_.CreateFCmpOGT(x, m.f(0.0)), b_.CreateFCmpOLT(x, llvm::ConstantFP::getInfinity(m.ft)));
    llvm::Value* other = b_.CreateSelect(
        b_.CreateFCmpOEQ(x, m.f(0.0)), llvm::ConstantFP::getInfinity(m.ft, true),
        b_.CreateSelect(b_.CreateFCmpOGE(x, m.f(0.0)), x, llvm::ConstantFP::getNaN(m.ft)));
    return b_.CreateSelect(finite_positive, r, other);
  }

  bool unrolls_register_tiles() const override { return true; }

  void mark_loop(llvm::BranchInst* latch, LoopUnroll unroll) override {
    if (unroll == LoopUnroll::Default) return;
    const char* what = unroll == LoopUnroll::Full ? "llvm.loop.unroll.full" : "llvm.loop.unroll.disable";
    llvm::MDNode* full = llvm::MDNode::get(ctx_, llvm::MDString::get(ctx_, what));
    llvm::MDNode* id = llvm::MDNode::getDistinct(ctx_, {nullptr, full});
    id->replaceOperandWith(0, id);
    latch->setMetadata(llvm::LLVMContext::MD_loop, id);
  }

  // One CPU thread runs a whole (emulated) block in order: only an emulated barrier, which
  // hands over to the block's other threads, does anything.
  void barrier(const Barrier* s) override {
    if (s->sync == Barrier::Kind::Emulated) {
      b_.CreateCall(runtime("tunefarm_emulated_barrier", b_.getVoidTy(), {}), {});
    }
  }

  uint64_t local_align() const override { return 64; }

  // A warp-level product (compiler/ir.h) in the threaded emulation of a block (its kernel has
  // the argument tf_emu_ids: compiler/gpu.h emulate_gpu_thread): a call of
  // tunefarm_emulated_<name>(operands, result), which the emulating program defines
  // (tests/compiler/kernel_harness.cc): the threads of a warp meet there, exchange their
  // fragments and each takes its part of D.
  llvm::Value* warp_mma(const Call* c) override {
    if (!kernel_args_.count("tf_emu_ids")) {
      throw UserError(str("kernel ", name_, " uses ", c->name, " (NVIDIA tensor cores): it runs on a GPU, or in "
                          "the threaded emulation of a block, not on ", target_.str(),
                          " (nor serialized, as --emulate-gpu runs kernels)"));
    }
    const unsigned n = static_cast<unsigned>(warp_mma_operands(c->name));
    llvm::IRBuilder<> entry(entry_, entry_->begin());
    llvm::AllocaInst* in = entry.CreateAlloca(llvm::ArrayType::get(b_.getFloatTy(), n));
    llvm::AllocaInst* out = entry.CreateAlloca(llvm::ArrayType::get(b_.getFloatTy(), 4));
    out->setAlignment(llvm::Align(16));  // read back as one <4 x float>
    for (unsigned i = 0; i < n; ++i) {
      b_.CreateStore(expr(c->args[i]), b_.CreateConstInBoundsGEP2_32(in->getAllocatedType(), in, 0, i));
    }
    const std::string fn = "tunefarm_emulated_" + c->name;
    llvm::FunctionCallee mma = runtime(fn.c_str(), b_.getVoidTy(), {b_.getPtrTy(), b_.getPtrTy()});
    b_.CreateCall(mma, {in, out});
    return b_.CreateAlignedLoad(type_of(c->type), out, llvm::Align(16));
  }

  // A warpgroup-level product (kWgmmaF16, kWgmmaBF16) in the same emulation: a call of
  // tunefarm_emulated_<name>(a, b, descriptors, accumulators, result, N): the addresses of A's
  // and B's first elements, their descriptors as the GPU's (wgmma_descriptor: the emulator
  // decodes the address's low bits and the byte offsets from them), the thread's N / 2
  // accumulators, where its N / 2 elements of D go, and N. The warpgroup's threads meet there.
  llvm::Value* wgmma(const Call* c) override {
    if (!kernel_args_.count("tf_emu_ids")) {
      throw UserError(str("kernel ", name_, " uses ", c->name, " (Hopper's warpgroup-level tensor cores): it runs on a "
                          "GPU, or in the threaded emulation of a block, not on ", target_.str(),
                          " (nor serialized, as --emulate-gpu runs kernels)"));
    }
    const unsigned h = static_cast<unsigned>(wgmma_n(*c) / 2);
    llvm::IRBuilder<> entry(entry_, entry_->begin());
    llvm::AllocaInst* desc = entry.CreateAlloca(llvm::ArrayType::get(b_.getInt64Ty(), 2));
    llvm::AllocaInst* in = entry.CreateAlloca(llvm::ArrayType::get(b_.getFloatTy(), h));
    llvm::AllocaInst* out = entry.CreateAlloca(type_of(c->type));
    out->setAlignment(llvm::Align(16));
    for (unsigned i = 0; i < 2; ++i) {
      b_.CreateStore(wgmma_descriptor(c, 3 * i), b_.CreateConstInBoundsGEP2_32(desc->getAllocatedType(), desc, 0, i));
    }
    for (unsigned i = 0; i < h; ++i) {
      b_.CreateStore(expr(c->args[6 + i]), b_.CreateConstInBoundsGEP2_32(in->getAllocatedType(), in, 0, i));
    }
    auto address = [&](size_t at) {
      const Load* l = c->args[at].as<Load>();
      return element_ptr(l->buffer, expr(l->index), l->type);
    };
    const std::string fn = "tunefarm_emulated_" + c->name;
    llvm::FunctionCallee mma = runtime(fn.c_str(), b_.getVoidTy(),
                                       {b_.getPtrTy(), b_.getPtrTy(), b_.getPtrTy(), b_.getPtrTy(), b_.getPtrTy(),
                                        b_.getInt64Ty()});
    b_.CreateCall(mma, {address(0), address(3), desc, in, out, b_.getInt64(2 * h)});
    return b_.CreateAlignedLoad(type_of(c->type), out, llvm::Align(16));
  }

  // The wait for warpgroup-level products (kWgmmaWait) in the same emulation: a call of
  // tunefarm_emulated_wgmma_wait(pending), where the emulator retires the thread's products but
  // the `pending` latest (and checks that nothing wrote what they read while they were in
  // flight, as the GPU may read it until then); the accumulators as they are.
  llvm::Value* wgmma_wait(const Call* c) override {
    if (kernel_args_.count("tf_emu_ids")) {
      llvm::FunctionCallee wait =
          runtime("tunefarm_emulated_wgmma_wait", b_.getVoidTy(), {b_.getInt64Ty()});
      b_.CreateCall(wait, {b_.getInt64(*as_const_int(c->args[0]))});
    }
    return CodeGen::wgmma_wait(c);
  }

  // A warp's fragment loads (kLdMatrix) in the same emulation: tunefarm_emulated_ldmatrix_x<n>(row,
  // result) (_x<n>_trans transposed), where the lanes meet, each leaves the 16 bytes it supplies
  // and takes its words.
  llvm::Value* ldmatrix(const Call* c) override {
    if (!kernel_args_.count("tf_emu_ids")) {
      throw UserError(str("kernel ", name_, " uses ", c->name, " (NVIDIA's warp-level fragment loads): it runs on a GPU, "
                          "or in the threaded emulation of a block, not on ", target_.str()));
    }
    const int64_t n = *as_const_int(c->args[1]);
    llvm::IRBuilder<> entry(entry_, entry_->begin());
    llvm::AllocaInst* row = entry.CreateAlloca(type_of(c->args[0].type()));
    llvm::AllocaInst* out = entry.CreateAlloca(type_of(c->type));
    row->setAlignment(llvm::Align(16));
    out->setAlignment(llvm::Align(16));
    b_.CreateAlignedStore(expr(c->args[0]), row, llvm::Align(16));
    const std::string fn =
        str("tunefarm_emulated_", c->name, "_x", n, ldmatrix_transposed(*c) ? "_trans" : "");
    b_.CreateCall(runtime(fn.c_str(), b_.getVoidTy(), {b_.getPtrTy(), b_.getPtrTy()}), {row, out});
    return b_.CreateAlignedLoad(type_of(c->type), out, llvm::Align(16));
  }

 private:
  // dot_instructions(), dot2_bf16's and converts_float16(), asked once per kernel (the
  // target's features come from LLVM's tables).
  std::optional<Pieces> dot_pieces_, bf16_pieces_;
  mutable std::optional<bool> converts_float16_;
};

}  // namespace

std::unique_ptr<CodeGen> make_codegen_cpu(llvm::LLVMContext& ctx, llvm::Module& m, const Target& t) {
  return std::make_unique<CodeGenCpu>(ctx, m, t);
}

}  // namespace tf::llvm_codegen
