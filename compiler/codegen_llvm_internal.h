// The LLVM code generator's inside, shared by its kinds (Halide's CodeGen_LLVM and its
// CodeGen_X86 / CodeGen_PTX_Dev / ... in one class each): CodeGen emits a lowered function
// into an LLVM module, asking its subclass wherever a kind of target does things its own way.
//   codegen_cpu.cc     CodeGenCpu: x86_64, aarch64, arm (a status return, inline exp, libm,
//                      register tiles unrolled, emulated barriers)
//   codegen_gpu.cc     CodeGenGpu: what NVIDIA and AMD GPUs share (kernels, launches, shared
//                      memory, aligned vector accesses, no unrolling the schedule did not ask for)
//   codegen_nvptx.cc   CodeGenNvptx: NVVM annotations and intrinsics, libdevice, cp.async
//   codegen_amdgpu.cc  CodeGenAmdgpu: kernel calling convention, workgroup intrinsics, ocml
// Only compiler/codegen_*.cc include this file; the interface is compiler/codegen_llvm.h.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "compiler/codegen_llvm.h"
#include "compiler/gpu.h"
#include "compiler/ir_mutator.h"
#include "compiler/simplify.h"
#include "compiler/thread_pool_ir.h"

namespace tf::llvm_codegen {

using namespace ir;  // NOLINT

// Strided vector loads up to this stride load the whole span and shuffle; wider strides
// gather lane by lane.
constexpr int64_t kMaxShuffleStride = 4;
// Vector loads whose lanes lie at other constant offsets within this many vectors' span load
// the span and shuffle.
constexpr int64_t kMaxShuffleSpanVectors = 2;

// The alignment GPU kernels assume of their buffers (the drivers give 256).
constexpr uint64_t kGpuBufferAlign = 16;

// What a serial loop asks of LLVM's unroller: its own choice, a full unroll, or none.
enum class LoopUnroll { Default, Full, Disable };

class CodeGen {
 public:
  CodeGen(llvm::LLVMContext& ctx, llvm::Module& m, const Target& t) : ctx_(ctx), m_(m), target_(t), b_(ctx) {
    llvm::FastMathFlags fmf;
    fmf.setAllowContract(true);
    b_.setFastMathFlags(fmf);
  }

  virtual ~CodeGen() = default;

  bool uses_openmp = false;
  bool uses_libm = false;
  // A call of the vendor's bitcode math library (libdevice, ocml): link_vendor_math links it.
  bool uses_vendor_math = false;

  // Links the vendor's math library into `m` after every kernel of the module was emitted
  // (`kernels`: their names, kept external). Nothing for targets without one.
  virtual void link_vendor_math(llvm::Module& m, const std::set<std::string>& kernels) {}

  // `launch`: for GPU targets, the kernel's launch configuration.
  void emit(const LoweredFunc& f, const GpuLaunch* launch = nullptr) {
    name_ = f.name;
    begin_kernel(f);
    std::vector<llvm::Type*> params(f.args.size(), b_.getPtrTy(arg_address_space()));
    auto* fty = llvm::FunctionType::get(return_type(), params, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, f.name, m_);
    set_attributes(fn_);
    launch_ = launch;
    if (launch) mark_kernel(*launch);
    // A block's threads emulated at once (compiler/gpu.h emulate_gpu_thread: the argument
    // tf_emu_ids) share the buffers, which the other threads write while this one waits at an
    // emulated barrier: noalias would let LLVM keep a value loaded before the barrier, or move a
    // load above it, as if the call could not change it.
    const bool threads_share = std::any_of(f.args.begin(), f.args.end(),
                                           [](const auto& a) { return a.name == "tf_emu_ids"; });
    for (size_t i = 0; i < f.args.size(); ++i) {
      llvm::Argument* a = fn_->getArg(static_cast<unsigned>(i));
      a->setName(f.args[i].name);
      if (!threads_share) a->addAttr(llvm::Attribute::NoAlias);
      a->addAttr(llvm::Attribute::NoCapture);
      annotate_arg(a);
      buffers_[f.args[i].name] = a;
      kernel_args_.insert(f.args[i].name);
    }
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry_);
    stmt(f.body);
    emit_return();
    attach_alias_scopes();
    free_kept_buffers_at_unload(m_, workspaces_, name_ + ".release_workspaces");
    workspaces_.clear();
  }

 protected:
  // ---- what each kind of target does its own way (codegen_cpu.cc, codegen_nvptx.cc,
  // codegen_amdgpu.cc) ----

  // Called first by emit(): what the target wants to know of the whole kernel before it is emitted.
  virtual void begin_kernel(const LoweredFunc& f) {}
  // The address space of the kernel's buffer arguments.
  virtual unsigned arg_address_space() const { return 0; }
  // A CPU kernel returns a status (0, or -1 when out of memory); a GPU kernel nothing.
  virtual llvm::Type* return_type() = 0;
  virtual void emit_return() = 0;
  // A GPU entry point the host launches with `launch`.
  virtual void mark_kernel(const GpuLaunch& launch) = 0;
  // Attributes of a buffer argument beyond noalias and nocapture.
  virtual void annotate_arg(llvm::Argument* a) {}
  // The index of this block or thread along a bound loop's axis, as i64 (GPUs).
  virtual llvm::Value* grid_index(ForKind k) = 0;
  // NaN-propagating float min or max of a and b, neither a constant; `pick` is the
  // compare-select of the two (b when either is NaN).
  virtual llvm::Value* min_max_with_nan(llvm::Value* a, llvm::Value* b, llvm::Value* pick, bool is_max) = 0;
  // A float remainder (frem) was emitted.
  virtual void on_float_remainder() {}
  // A call of a float math function, `id` its LLVM intrinsic.
  virtual llvm::Value* math_call(const Call* c, llvm::Intrinsic::ID id) = 0;
  // Whether innermost loops indexing a register tile are unrolled fully, and loops around
  // one that enclose other loops are kept rolled (CPUs; see LoopUnroll).
  virtual bool unrolls_register_tiles() const { return false; }
  // Loop metadata on a serial loop's latch.
  virtual void mark_loop(llvm::BranchInst* latch, LoopUnroll unroll) = 0;
  // The alignment of a vector access from element `base` on.
  virtual llvm::Align vector_align(const Expr& base) const { return llvm::Align(4); }
  // Whether this target copies global to shared memory asynchronously (cp.async).
  virtual bool has_cp_async() const { return false; }
  // A store into an asynchronously filled shared buffer, as an asynchronous copy; false when
  // it is of another form (an ordinary store then).
  virtual bool async_copy(const Store* s) { return false; }
  virtual void barrier(const Barrier* s) = 0;
  // A cache hint (ir::Prefetch): llvm.prefetch of the element's address, a read kept in
  // every cache level. GPU targets override it with nothing.
  virtual void prefetch(const Prefetch* p) {
    llvm::Value* ptr = element_ptr(p->buffer, expr(p->index), p->elem);
    b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {ptr->getType()},
                       {ptr, b_.getInt32(0), b_.getInt32(3), b_.getInt32(1)});
  }
  // A shared buffer (one per block) for `a`, or false where this target has no shared memory.
  virtual bool allocate_shared(const Allocate* a) { return false; }
  // The alignment of a local (stack or private) buffer.
  virtual uint64_t local_align() const = 0;
  // Float `v` converted to integer type `t` saturating: NaN gives 0, values past the type's
  // range its bound (llvm.fptosi.sat / fptoui.sat, one instruction on aarch64 and PTX).
  virtual llvm::Value* float_to_int(llvm::Value* v, llvm::Type* t, bool is_unsigned) {
    return b_.CreateIntrinsic(is_unsigned ? llvm::Intrinsic::fptoui_sat : llvm::Intrinsic::fptosi_sat,
                              {t, v->getType()}, {v});
  }
  // The same by compares and selects around a plain conversion: NaN to 0, then clamped to the
  // widest floats inside the type's range (rounded toward zero), then the type's maximum where
  // v was above that float. Whole vectors where the intrinsic is lowered lane by lane.
  llvm::Value* float_to_int_by_clamps(llvm::Value* v, llvm::Type* t, bool is_unsigned) {
    const unsigned bits = t->getScalarSizeInBits();
    const llvm::fltSemantics& sem = v->getType()->getScalarType()->getFltSemantics();
    auto bound = [&](const llvm::APInt& i) {
      llvm::APFloat f(sem);
      f.convertFromAPInt(i, !is_unsigned, llvm::APFloat::rmTowardZero);
      return llvm::ConstantFP::get(v->getType(), f);
    };
    const llvm::APInt lo = is_unsigned ? llvm::APInt::getMinValue(bits) : llvm::APInt::getSignedMinValue(bits);
    const llvm::APInt hi = is_unsigned ? llvm::APInt::getMaxValue(bits) : llvm::APInt::getSignedMaxValue(bits);
    llvm::Constant* flo = bound(lo);
    llvm::Constant* fhi = bound(hi);
    // Unsigned: NaN and what is below 0 to 0 in one compare (x86: one vmaxps).
    llvm::Value* x = is_unsigned ? b_.CreateSelect(b_.CreateFCmpOGT(v, flo), v, flo)
                                 : b_.CreateSelect(b_.CreateFCmpUNO(v, v), llvm::Constant::getNullValue(v->getType()), v);
    if (!is_unsigned) x = b_.CreateSelect(b_.CreateFCmpOLT(x, flo), flo, x);
    llvm::Value* above = b_.CreateFCmpOGT(x, fhi);
    x = b_.CreateSelect(above, fhi, x);
    llvm::Value* k = is_unsigned ? b_.CreateFPToUI(x, t) : b_.CreateFPToSI(x, t);
    // A maximum the float holds exactly (8 and 16 bits) is what the conversion of fhi gives.
    if (bits < 24) return k;
    return b_.CreateSelect(above, llvm::ConstantInt::get(t, hi), k);
  }

  void set_attributes(llvm::Function* fn) {
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    fn->addFnAttr("target-cpu", target_.chip());
    if (!target_.features.empty()) fn->addFnAttr("target-features", target_.features);
  }

  llvm::Type* type_of(const Type& t) {
    llvm::Type* s = t.is_float() ? b_.getFloatTy() : t.is_bool() ? b_.getInt1Ty() : b_.getIntNTy(static_cast<unsigned>(t.bits));
    if (t.lanes == 1) return s;
    return llvm::FixedVectorType::get(s, static_cast<unsigned>(t.lanes));
  }

  // ---- expressions ----

  // Float min and max propagate NaN (IEEE 754-2019 minimum/maximum, PyTorch's rule: a NaN
  // operand gives NaN; maxnum would drop it, and Relu turned NaN into 0). Against a constant
  // that is not NaN, one compare and select suffices: only the other side can be NaN, and the
  // select gives it when the compare is false (x86: one vmaxps with the constant first).
  // max(-0, +0) may be either zero.
  llvm::Value* float_min_max(llvm::Value* a, llvm::Value* b, bool is_max) {
    auto non_nan_constant = [](llvm::Value* v) {
      auto* c = llvm::dyn_cast<llvm::Constant>(v);
      if (c && c->getType()->isVectorTy()) c = c->getSplatValue();
      auto* f = llvm::dyn_cast_or_null<llvm::ConstantFP>(c);
      return f && !f->isNaN();
    };
    if (non_nan_constant(b)) std::swap(a, b);
    llvm::Value* pick = b_.CreateSelect(is_max ? b_.CreateFCmpOGT(a, b) : b_.CreateFCmpOLT(a, b), a, b);
    if (non_nan_constant(a)) return pick;
    return min_max_with_nan(a, b, pick, is_max);
  }

  llvm::Value* floor_div_mod(llvm::Value* a, llvm::Value* bv, bool is_div) {
    // Truncating division, then a correction where the signs of remainder and divisor differ.
    llvm::Value* q = b_.CreateSDiv(a, bv);
    llvm::Value* r = b_.CreateSRem(a, bv);
    llvm::Value* zero = llvm::Constant::getNullValue(a->getType());
    llvm::Value* adjust = b_.CreateAnd(b_.CreateICmpNE(r, zero),
                                       b_.CreateICmpSLT(b_.CreateXor(r, bv), zero));
    if (is_div) return b_.CreateSub(q, b_.CreateZExt(adjust, a->getType()));
    return b_.CreateSelect(adjust, b_.CreateAdd(r, bv), r);
  }

  // The address of element `index` of `buffer`, whose elements are of type `elem` (a Load's
  // or a Store's element type: the buffer's, as lowering made them).
  llvm::Value* element_ptr(const std::string& buffer, llvm::Value* index, const Type& elem) {
    auto it = buffers_.find(buffer);
    TF_CHECK(it != buffers_.end(), "codegen: unknown buffer ", buffer);
    return b_.CreateInBoundsGEP(type_of(elem.element_of()), it->second, index);
  }
  static llvm::Align elem_align(const Type& t) { return llvm::Align(static_cast<uint64_t>(t.bytes())); }

  // Remembers that `access` (a load or store) reads or writes `buffer`; attach_alias_scopes
  // then tells LLVM that accesses to different buffers never overlap.
  llvm::Value* tag(llvm::Value* access, const std::string& buffer) {
    if (auto* i = llvm::dyn_cast<llvm::Instruction>(access)) accesses_.emplace_back(i, buffer);
    return access;
  }

  // Distinct buffers of a kernel never overlap: its arguments are distinct tensors (declared
  // noalias) and every other buffer is its own allocation. Inside the functions outlined for
  // parallel loops the pointers come out of a closure, where LLVM cannot see that; without
  // it, a store to one buffer ends the reuse of every value loaded from another. One alias
  // scope per buffer, each access in its buffer's scope and noalias with all the others.
  void attach_alias_scopes() {
    if (accesses_.empty()) return;
    llvm::MDBuilder md(ctx_);
    llvm::MDNode* domain = md.createAnonymousAliasScopeDomain(name_);
    std::map<std::string, llvm::MDNode*> scopes;
    for (const auto& [inst, buffer] : accesses_) {
      if (!scopes.count(buffer)) scopes[buffer] = md.createAnonymousAliasScope(domain, buffer);
    }
    std::map<std::string, std::pair<llvm::MDNode*, llvm::MDNode*>> tags;
    for (const auto& [buffer, scope] : scopes) {
      std::vector<llvm::Metadata*> others;
      for (const auto& [b, o] : scopes) {
        if (b != buffer) others.push_back(o);
      }
      tags[buffer] = {llvm::MDNode::get(ctx_, {scope}), llvm::MDNode::get(ctx_, others)};
    }
    for (const auto& [inst, buffer] : accesses_) {
      const auto& [scope, noalias] = tags.at(buffer);
      inst->setMetadata(llvm::LLVMContext::MD_alias_scope, scope);
      inst->setMetadata(llvm::LLVMContext::MD_noalias, noalias);
    }
    accesses_.clear();
  }

  llvm::Value* load(const Load* l) {
    int lanes = l->type.lanes;
    const Type elem = l->type.element_of();
    llvm::Type* et = type_of(elem);
    const llvm::Align align = elem_align(elem);
    if (lanes == 1)
      return tag(b_.CreateAlignedLoad(et, element_ptr(l->buffer, expr(l->index), elem), align), l->buffer);
    if (mask_) return tag(masked_load(l), l->buffer);
    if (const Ramp* r = l->index.as<Ramp>(); r && is_const(r->stride, 1)) {
      llvm::Value* p = element_ptr(l->buffer, expr(r->base), elem);
      return tag(b_.CreateAlignedLoad(type_of(l->type), p, elem.is_float() ? vector_align(r->base) : align), l->buffer);
    }
    if (const Broadcast* bc = l->index.as<Broadcast>()) {
      llvm::Value* v =
          tag(b_.CreateAlignedLoad(et, element_ptr(l->buffer, expr(bc->value), elem), align), l->buffer);
      return b_.CreateVectorSplat(static_cast<unsigned>(lanes), v);
    }
    if (const Ramp* r = l->index.as<Ramp>()) {
      // A small constant stride: one contiguous load of exactly the elements from the first
      // lane to the last, then a shuffle that keeps every stride-th one.
      const int64_t* s = as_const_int(r->stride);
      if (s && *s > 1 && *s <= kMaxShuffleStride) {
        auto span = static_cast<unsigned>((lanes - 1) * *s + 1);
        llvm::Value* p = element_ptr(l->buffer, expr(r->base), elem);
        llvm::Value* wide = tag(b_.CreateAlignedLoad(llvm::FixedVectorType::get(et, span), p, align), l->buffer);
        return b_.CreateShuffleVector(wide, every_stride(lanes, *s));
      }
    }
    if (std::optional<LaneOffsets> lo = lane_offsets(l->index)) {
      // Lanes at constant offsets within a short span (a group's channels repeated across a
      // block: lane k reads (k / g) * g + i): one contiguous load of the span, then a shuffle.
      // The first lane's constant part joins the offsets: lanes that lie in one aligned
      // vector of the buffer (its scalar part a multiple of the lanes) load that vector, so
      // that loads differing only there (a group's channel i) are one load, shuffled apart.
      // The vector may hold elements no lane of this load reads: it is the buffer's vector of
      // `lanes` elements from a multiple of `lanes` (at most 64 bytes), which the loads that
      // make such indices read whole among them (a blocked layout whose block is the vector:
      // the group's other channels i), and which buffers hold whole (the arena's slots and
      // heap buffers are 64-byte aligned and blocked tensors whole blocks long).
      Expr base = lo->first;
      int64_t c = 0;
      if (const Binary* add = base.kind() == ExprKind::Add ? base.as<Binary>() : nullptr) {
        if (const int64_t* k = as_const_int(add->b)) {
          c = *k;
          base = add->a;
        }
      }
      std::vector<int64_t> offs = lo->offsets;
      for (int64_t& o : offs) o += c;
      const auto [lo_it, hi_it] = std::minmax_element(offs.begin(), offs.end());
      int64_t first = *lo_it, span = *hi_it - *lo_it + 1;
      const int64_t block = (first >= 0 ? first : first - lanes + 1) / lanes * lanes;
      if (known_multiple(base) % lanes == 0 && *hi_it < block + lanes && lanes * elem.bytes() <= 64) {
        first = block;
        span = lanes;
      }
      if (span <= kMaxShuffleSpanVectors * lanes) {
        llvm::Value* p = element_ptr(l->buffer, expr(simplify(base + IntImm::make(first))), elem);
        auto* vt = llvm::FixedVectorType::get(et, static_cast<unsigned>(span));
        llvm::Value* wide = tag(b_.CreateAlignedLoad(vt, p, align), l->buffer);
        std::vector<int> pick;
        for (int64_t o : offs) pick.push_back(static_cast<int>(o - first));
        return b_.CreateShuffleVector(wide, pick);
      }
    }
    llvm::Value* idx = expr(l->index);
    llvm::Value* out = llvm::PoisonValue::get(type_of(l->type));
    for (int i = 0; i < lanes; ++i) {
      llvm::Value* li = b_.CreateExtractElement(idx, static_cast<uint64_t>(i));
      llvm::Value* v = tag(b_.CreateAlignedLoad(et, element_ptr(l->buffer, li, elem), align), l->buffer);
      out = b_.CreateInsertElement(out, v, static_cast<uint64_t>(i));
    }
    return out;
  }

  // The shuffle indices 0, stride, 2 stride, ...: lane i of a strided load from a contiguous one.
  static std::vector<int> every_stride(int lanes, int64_t stride) {
    std::vector<int> pick;
    for (int i = 0; i < lanes; ++i) pick.push_back(static_cast<int>(i * stride));
    return pick;
  }

  // A vector load under a select: lanes outside mask_ are not read (they may be out of bounds).
  llvm::Value* masked_load(const Load* l) {
    llvm::Type* vt = type_of(l->type);
    const Type elem = l->type.element_of();
    llvm::Value* zero = llvm::Constant::getNullValue(vt);
    const Ramp* r = l->index.as<Ramp>();
    const int64_t* st = r ? as_const_int(r->stride) : nullptr;
    if (st && *st >= 1 && *st <= kMaxShuffleStride) {
      llvm::Value* p = element_ptr(l->buffer, expr(r->base), elem);
      if (*st == 1) return b_.CreateMaskedLoad(vt, p, elem_align(elem), mask_, zero);
      // A small constant stride (a stride-2 window over columns): a masked load of lanes x
      // stride elements from the first lane's, the mask's lane k at element k * stride (the
      // elements between and after are not read), then a shuffle that keeps every stride-th.
      // Lanes x stride, not (lanes - 1) x stride + 1: at strides 2 and 4 a power of two, which
      // LLVM loads masked whole (the 31 elements of 16 lanes at stride 2 were scalarized).
      const int lanes = l->type.lanes;
      const std::vector<int> pick = every_stride(lanes, *st);
      std::vector<int> spread(static_cast<size_t>(lanes * *st), lanes);  // `lanes`: a false lane
      for (int i = 0; i < lanes; ++i) spread[static_cast<size_t>(pick[static_cast<size_t>(i)])] = i;
      llvm::Value* wide_mask = b_.CreateShuffleVector(mask_, llvm::Constant::getNullValue(mask_->getType()), spread);
      auto* wt = llvm::FixedVectorType::get(vt->getScalarType(), static_cast<unsigned>(spread.size()));
      llvm::Value* wide = b_.CreateMaskedLoad(wt, p, elem_align(elem), wide_mask, llvm::Constant::getNullValue(wt));
      return b_.CreateShuffleVector(wide, pick);
    }
    llvm::Value* idx = expr(l->index);
    if (!idx->getType()->isVectorTy()) idx = b_.CreateVectorSplat(static_cast<unsigned>(l->type.lanes), idx);
    llvm::Value* ptrs = element_ptr(l->buffer, idx, elem);
    return b_.CreateMaskedGather(vt, ptrs, elem_align(elem), mask_, zero);
  }

  static bool contains_load(const Expr& e) {
    bool found = false;
    post_order(e, [&](const Expr& x) { found |= x.kind() == ExprKind::Load; });
    return found;
  }

  // Whether every load `side` makes, the condition `cond_loads` came from makes too (same
  // buffer, same index): those lanes are read already, so the side may read them unmasked.
  static bool reads_only(const Expr& side, const std::vector<Expr>& cond_loads) {
    bool covered = true;
    post_order(side, [&](const Expr& x) {
      if (!covered || x.kind() != ExprKind::Load) return;
      covered = std::any_of(cond_loads.begin(), cond_loads.end(), [&](const Expr& l) { return equal(l, x); });
    });
    return covered;
  }

  // select(c, t, f) reads memory only on the side its condition picks: a select over loads
  // whose condition is one value for all lanes becomes a branch (then each side loads whole
  // vectors), one with a condition per lane evaluates each side under a mask, unless both
  // sides read only what the condition reads: then they are plain values (erf's
  // select(x < 0, -y, y) computes y once, not once per side under masks: LLVM merges the two).
  llvm::Value* select(const Select* s) {
    llvm::Value* c = expr(s->cond);
    if (!contains_load(s->t) && !contains_load(s->f)) return b_.CreateSelect(c, expr(s->t), expr(s->f));
    // A scalar select inside a vector one (in the index of a broadcast load: a gather by a
    // computed index under a Concat's select) is lane-invariant: it branches like one outside,
    // its scalar loads under no lane mask.
    if (!c->getType()->isVectorTy() && (!mask_ || s->type.lanes == 1)) {
      llvm::Value* outer = mask_;
      mask_ = nullptr;
      auto* then_bb = llvm::BasicBlock::Create(ctx_, "sel.then", fn_);
      auto* else_bb = llvm::BasicBlock::Create(ctx_, "sel.else", fn_);
      auto* merge = llvm::BasicBlock::Create(ctx_, "sel.end", fn_);
      b_.CreateCondBr(c, then_bb, else_bb);
      b_.SetInsertPoint(then_bb);
      llvm::Value* tv = expr(s->t);
      llvm::BasicBlock* then_end = b_.GetInsertBlock();
      b_.CreateBr(merge);
      b_.SetInsertPoint(else_bb);
      llvm::Value* fv = expr(s->f);
      llvm::BasicBlock* else_end = b_.GetInsertBlock();
      b_.CreateBr(merge);
      b_.SetInsertPoint(merge);
      llvm::PHINode* phi = b_.CreatePHI(tv->getType(), 2);
      phi->addIncoming(tv, then_end);
      phi->addIncoming(fv, else_end);
      mask_ = outer;
      return phi;
    }
    if (!c->getType()->isVectorTy()) c = b_.CreateVectorSplat(static_cast<unsigned>(s->type.lanes), c);
    std::vector<Expr> cond_loads;
    post_order(s->cond, [&](const Expr& x) {
      if (x.kind() == ExprKind::Load) cond_loads.push_back(x);
    });
    if (!cond_loads.empty() && reads_only(s->t, cond_loads) && reads_only(s->f, cond_loads)) {
      return b_.CreateSelect(c, expr(s->t), expr(s->f));  // under the mask the condition read under
    }
    llvm::Value* outer = mask_;
    mask_ = outer ? b_.CreateAnd(outer, c) : c;
    llvm::Value* tv = expr(s->t);
    llvm::Value* not_c = b_.CreateNot(c);
    mask_ = outer ? b_.CreateAnd(outer, not_c) : not_c;
    llvm::Value* fv = expr(s->f);
    mask_ = outer;
    return b_.CreateSelect(c, tv, fv);
  }

  llvm::Value* compare(ExprKind k, llvm::Value* a, llvm::Value* bv, bool is_float, bool is_unsigned) {
    using P = llvm::CmpInst::Predicate;
    P p;
    switch (k) {
      case ExprKind::EQ: p = is_float ? P::FCMP_OEQ : P::ICMP_EQ; break;
      case ExprKind::NE: p = is_float ? P::FCMP_UNE : P::ICMP_NE; break;
      case ExprKind::LT: p = is_float ? P::FCMP_OLT : is_unsigned ? P::ICMP_ULT : P::ICMP_SLT; break;
      default: p = is_float ? P::FCMP_OLE : is_unsigned ? P::ICMP_ULE : P::ICMP_SLE; break;
    }
    return is_float ? b_.CreateFCmp(p, a, bv) : b_.CreateICmp(p, a, bv);
  }

  // Index arithmetic (int64) cannot overflow (no signed wrap); integer data wraps.
  llvm::Value* binary(const Expr& e) {
    const Binary* n = e.as<Binary>();
    const Type& t = n->a.type();
    if (e.kind() == ExprKind::Add && t.is_int() && !t.is_index()) {
      // acc + dot4_u8s8(a, b): one accumulating dot product where the CPU has it.
      for (auto [acc, d] : {std::pair{n->a, n->b}, std::pair{n->b, n->a}}) {
        const Call* c = d.as<Call>();
        if (c && c->name == kDot4U8S8) return dot4_u8s8(expr(acc), expr(c->args[0]), expr(c->args[1]));
      }
    }
    if (e.kind() == ExprKind::Add && t.is_float()) {
      // acc + dot2_bf16(a, b): one accumulating bfloat16 dot product where the CPU has it.
      for (auto [acc, d] : {std::pair{n->a, n->b}, std::pair{n->b, n->a}}) {
        const Call* c = d.as<Call>();
        if (c && c->name == kDot2BF16) return dot2_bf16(expr(acc), expr(c->args[0]), expr(c->args[1]));
        if (c && c->name == kDot2F16) return dot2_f16(expr(acc), c);
      }
    }
    llvm::Value* a = expr(n->a);
    llvm::Value* bv = expr(n->b);
    bool fl = t.is_float(), nsw = t.is_index(), u = t.is_uint();
    switch (e.kind()) {
      case ExprKind::Add: return fl ? b_.CreateFAdd(a, bv) : b_.CreateAdd(a, bv, "", false, nsw);
      case ExprKind::Sub: return fl ? b_.CreateFSub(a, bv) : b_.CreateSub(a, bv, "", false, nsw);
      case ExprKind::Mul: return fl ? b_.CreateFMul(a, bv) : b_.CreateMul(a, bv, "", false, nsw);
      case ExprKind::Div:
        TF_CHECK(fl || t.is_index(), "codegen: integer division of ", t.str());
        return fl ? b_.CreateFDiv(a, bv) : floor_div_mod(a, bv, true);
      case ExprKind::Mod:
        TF_CHECK(fl || t.is_index(), "codegen: integer remainder of ", t.str());
        if (!fl) return floor_div_mod(a, bv, false);
        on_float_remainder();
        return b_.CreateFRem(a, bv);
      case ExprKind::Min:
        return fl ? float_min_max(a, bv, false) : b_.CreateSelect(u ? b_.CreateICmpULT(a, bv) : b_.CreateICmpSLT(a, bv), a, bv);
      case ExprKind::Max:
        return fl ? float_min_max(a, bv, true) : b_.CreateSelect(u ? b_.CreateICmpUGT(a, bv) : b_.CreateICmpSGT(a, bv), a, bv);
      case ExprKind::And: return b_.CreateAnd(a, bv);
      case ExprKind::Or: return b_.CreateOr(a, bv);
      default: return compare(e.kind(), a, bv, fl, u);
    }
  }

  // acc + dot4_u8s8(a, b) on int32 lanes (compiler/ir.h): by default the widening sequence
  // (each byte extended to int32, multiplied, the four products of a lane added); CPUs with a
  // dot-product instruction override it.
  virtual llvm::Value* dot4_u8s8(llvm::Value* acc, llvm::Value* a, llvm::Value* b) {
    return b_.CreateAdd(acc, dot4_u8s8_widening(a, b));
  }
  llvm::Value* dot4_u8s8_widening(llvm::Value* a, llvm::Value* b) {
    unsigned lanes = 1;
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(a->getType())) lanes = vt->getNumElements();
    auto* bytes = llvm::FixedVectorType::get(b_.getInt8Ty(), lanes * 4);
    auto* wide = llvm::FixedVectorType::get(b_.getInt32Ty(), lanes * 4);
    llvm::Value* prod = b_.CreateMul(b_.CreateZExt(b_.CreateBitCast(a, bytes), wide),
                                     b_.CreateSExt(b_.CreateBitCast(b, bytes), wide));
    llvm::Value* sum = nullptr;
    for (unsigned t = 0; t < 4; ++t) {
      std::vector<int> pick;
      for (unsigned i = 0; i < lanes; ++i) pick.push_back(static_cast<int>(i * 4 + t));
      llvm::Value* part = b_.CreateShuffleVector(prod, pick);
      sum = sum ? b_.CreateAdd(sum, part) : part;
    }
    if (lanes == 1) sum = b_.CreateExtractElement(sum, uint64_t{0});
    return sum;
  }

  // acc + dot2_bf16(a, b) on float lanes (compiler/ir.h): by default each half widened to
  // float (a shift or a mask of the int32 word), the high halves' product added first, as
  // vdpbf16ps does; CPUs with the instruction override it.
  virtual llvm::Value* dot2_bf16(llvm::Value* acc, llvm::Value* a, llvm::Value* b) {
    llvm::Type* ft = acc->getType();
    llvm::Type* it = ft->getWithNewType(b_.getInt32Ty());
    auto half = [&](llvm::Value* w, bool high) {
      llvm::Value* bits = high ? b_.CreateAnd(w, llvm::ConstantInt::get(it, 0xFFFF0000u)) : b_.CreateShl(w, 16);
      return b_.CreateBitCast(bits, ft);
    };
    auto fma = [&](llvm::Value* x, llvm::Value* y, llvm::Value* z) {
      return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {ft}, {x, y, z});
    };
    return fma(half(a, false), half(b, false), fma(half(a, true), half(b, true), acc));
  }

  // Whether this target converts between float16 and float32 in one instruction (x86's F16C,
  // every aarch64 and GPU); elsewhere the conversions are integer sequences.
  virtual bool converts_float16() const { return true; }
  // Whether float to bfloat16 is one instruction (LLVM's fptrunc to bfloat: cvt.rn.bf16.f32 on
  // sm_80 and later, which rounds to nearest, ties to even, as the integer sequence does).
  virtual bool converts_bfloat16() const { return false; }

  // A warp-level product (kMmaTF32, kMmaF16, kMmaBF16: compiler/ir.h): a float32x4. Only
  // NVIDIA GPUs of sm_80 and later and the threaded emulation of a block have them; elsewhere
  // a UserError naming the target.
  virtual llvm::Value* warp_mma(const Call* c) {
    throw UserError(str("kernel ", name_, " uses ", c->name, " (NVIDIA tensor cores), which ", target_.str(),
                        " does not have (cuda -arch=sm_80 and later)"));
  }

  // A warp's fragment loads (kLdMatrix: compiler/ir.h): an int32 x n. NVIDIA GPUs and the
  // threaded emulation of a block; elsewhere a UserError naming the target.
  virtual llvm::Value* ldmatrix(const Call* c) {
    throw UserError(str("kernel ", name_, " uses ", c->name, " (NVIDIA's warp-level fragment loads), which ",
                        target_.str(), " does not have (cuda targets)"));
  }

  // A warpgroup-level product (kWgmmaF16, kWgmmaBF16: compiler/ir.h): a float32 x N/2. Only
  // NVIDIA's sm_90 and the threaded emulation of a block have it; elsewhere a UserError naming
  // the target.
  virtual llvm::Value* wgmma(const Call* c) {
    throw UserError(str("kernel ", name_, " uses ", c->name, " (Hopper's warpgroup-level tensor cores), which ",
                        target_.str(), " does not have (cuda -arch=sm_90 only)"));
  }

  // kWgmmaWait: the accumulators once the warpgroup-level products are complete; on targets
  // whose products are synchronous (the threaded emulation), the values themselves.
  virtual llvm::Value* wgmma_wait(const Call* c) {
    llvm::Value* out = llvm::PoisonValue::get(type_of(c->type));
    for (size_t i = 1; i < c->args.size(); ++i)
      out = b_.CreateInsertElement(out, expr(c->args[i]), uint64_t{i - 1});
    return out;
  }

  // The 64-bit shared-memory matrix descriptor of a wgmma operand (arguments `at` .. `at` + 2 of
  // `c`: the Load of its first element, its leading and stride byte offsets), as PTX defines it:
  // bits 0-13 the start address, 16-29 the leading byte offset, 32-45 the stride byte offset,
  // each as (x & 0x3FFFF) >> 4; no base offset, no swizzling (bits 62-63 zero). On a CPU (the
  // threaded emulation) the address is the element's, of which only the low 18 bits are kept,
  // as on the GPU, where they are the shared window's.
  llvm::Value* wgmma_descriptor(const Call* c, size_t at) {
    const Load* l = c->args[at].as<Load>();
    llvm::Value* p = element_ptr(l->buffer, expr(l->index), l->type);
    llvm::Value* addr = b_.CreatePtrToInt(p, b_.getInt64Ty());
    auto field = [&](llvm::Value* x, unsigned shift) {
      return b_.CreateShl(b_.CreateLShr(b_.CreateAnd(x, b_.getInt64(0x3FFFF)), 4), shift);
    };
    llvm::Value* lbo = b_.getInt64(static_cast<uint64_t>(*as_const_int(c->args[at + 1])));
    llvm::Value* sbo = b_.getInt64(static_cast<uint64_t>(*as_const_int(c->args[at + 2])));
    return b_.CreateOr(b_.CreateOr(field(addr, 0), field(lbo, 16)), field(sbo, 32));
  }

  // word_half(v, j, h) (compiler/ir.h): half h of element j of int32 vector v, as an i16.
  llvm::Value* word_half(const Call* c) {
    llvm::Value* word = b_.CreateExtractElement(expr(c->args[0]), static_cast<uint64_t>(*as_const_int(c->args[1])));
    if (*as_const_int(c->args[2]) == 1) word = b_.CreateLShr(word, 16);
    return b_.CreateTrunc(word, b_.getInt16Ty());
  }

  // word_float(v, j) (compiler/ir.h): element j of int32 vector v, its bits as a float.
  llvm::Value* word_float(const Call* c) {
    return b_.CreateBitCast(
        b_.CreateExtractElement(expr(c->args[0]), static_cast<uint64_t>(*as_const_int(c->args[1]))),
        b_.getFloatTy());
  }

  // The float16 in the low 16 bits of each int32 lane of `bits`, as float32 (exact).
  llvm::Value* float16_to_float(llvm::Value* bits, llvm::Type* ft) {
    llvm::Type* it = bits->getType();
    auto k = [&](uint32_t v) { return llvm::ConstantInt::get(it, v); };
    if (converts_float16()) {
      llvm::Value* h = b_.CreateTrunc(bits, it->getWithNewType(b_.getInt16Ty()));
      return b_.CreateFPExt(b_.CreateBitCast(h, it->getWithNewType(b_.getHalfTy())), ft);
    }
    // Exponent and fraction shifted into a float's places are the value times 2^-112 (a
    // subnormal half becomes a subnormal float): times 2^112 is exact. Infinities and NaNs
    // take the float's all-ones exponent instead.
    llvm::Value* em = b_.CreateAnd(bits, k(0x7FFF));
    llvm::Value* scaled = b_.CreateFMul(b_.CreateBitCast(b_.CreateShl(em, 13), ft), llvm::ConstantFP::get(ft, 0x1p112));
    llvm::Value* special = b_.CreateOr(b_.CreateShl(em, 13), k(0x7F800000));
    llvm::Value* mag = b_.CreateSelect(b_.CreateICmpUGE(em, k(0x7C00)), special, b_.CreateBitCast(scaled, it));
    return b_.CreateBitCast(b_.CreateOr(mag, b_.CreateShl(b_.CreateAnd(bits, k(0x8000)), 16)), ft);
  }

  // Float lanes `x` rounded to float16 (to nearest, ties to even), in the low 16 bits of int32
  // lanes (the high bits zero): base/float16.h f16_bits, lane by lane.
  llvm::Value* float_to_float16(llvm::Value* x) {
    llvm::Type* it = x->getType()->getWithNewType(b_.getInt32Ty());
    auto k = [&](uint32_t v) { return llvm::ConstantInt::get(it, v); };
    if (converts_float16()) {
      llvm::Value* h = b_.CreateFPTrunc(x, x->getType()->getWithNewType(b_.getHalfTy()));
      return b_.CreateZExt(b_.CreateBitCast(h, it->getWithNewType(b_.getInt16Ty())), it);
    }
    llvm::Value* bits = b_.CreateBitCast(x, it);
    llvm::Value* sign = b_.CreateAnd(b_.CreateLShr(bits, 16), k(0x8000));
    llvm::Value* f = b_.CreateAnd(bits, k(0x7FFFFFFF));
    llvm::Value* nan = b_.CreateOr(k(0x7E00), b_.CreateAnd(b_.CreateLShr(f, 13), k(0x3FF)));
    // Below 2^-14: adding 0.5 leaves the half's subnormal units (2^-24) as the sum's last
    // bits, rounded to even by the float addition.
    llvm::Value* half = llvm::ConstantFP::get(x->getType(), 0.5);
    llvm::Value* sub = b_.CreateSub(b_.CreateBitCast(b_.CreateFAdd(b_.CreateBitCast(f, x->getType()), half), it), k(0x3F000000));
    llvm::Value* r = b_.CreateSub(f, k(112u << 23));
    llvm::Value* normal = b_.CreateLShr(b_.CreateAdd(b_.CreateAdd(r, k(0xFFF)), b_.CreateAnd(b_.CreateLShr(r, 13), k(1))), 13);
    llvm::Value* mag = b_.CreateSelect(b_.CreateICmpULT(f, k(0x38800000)), sub, normal);
    mag = b_.CreateSelect(b_.CreateICmpUGE(f, k(0x477FF000)), k(0x7C00), mag);
    mag = b_.CreateSelect(b_.CreateICmpUGT(f, k(0x7F800000)), nan, mag);
    return b_.CreateOr(mag, sign);
  }

  // acc + dot2_f16(a0, a1, b) on float lanes (compiler/ir.h): b's halves widened to float
  // (exact), a0's product added first.
  llvm::Value* dot2_f16(llvm::Value* acc, const Call* c) {
    TF_CHECK(c->args.size() == 3, "codegen: ", kDot2F16, " takes three arguments");
    llvm::Value* a0 = expr(c->args[0]);
    llvm::Value* a1 = expr(c->args[1]);
    llvm::Value* b = expr(c->args[2]);
    llvm::Type* ft = acc->getType();
    llvm::Type* it = ft->getWithNewType(b_.getInt32Ty());
    llvm::Value* lo = float16_to_float(b_.CreateAnd(b, llvm::ConstantInt::get(it, 0xFFFF)), ft);
    llvm::Value* hi = float16_to_float(b_.CreateLShr(b, 16), ft);
    auto fma = [&](llvm::Value* x, llvm::Value* y, llvm::Value* z) {
      return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {ft}, {x, y, z});
    };
    return fma(a1, hi, fma(a0, lo, acc));
  }

  // bf16x2(lo, hi) (compiler/ir.h): each float rounded to the nearest bfloat16, ties to even
  // (the carry of adding 0x7FFF plus the kept part's lowest bit), a NaN made quiet with its
  // sign and top payload kept; lo in the low half of the int32 lane, hi in the high half.
  llvm::Value* bf16x2(llvm::Value* lo, llvm::Value* hi) {
    return b_.CreateOr(b_.CreateShl(float_to_bfloat16(hi), 16), float_to_bfloat16(lo));
  }

  // Float lanes `x` rounded to bfloat16 as bf16x2 rounds each, in the low 16 bits of int32
  // lanes (the high bits zero).
  llvm::Value* float_to_bfloat16(llvm::Value* x) {
    llvm::Type* it = x->getType()->getWithNewType(b_.getInt32Ty());
    auto k = [&](uint32_t v) { return llvm::ConstantInt::get(it, v); };
    if (converts_bfloat16()) {
      llvm::Value* h = b_.CreateFPTrunc(x, x->getType()->getWithNewType(b_.getBFloatTy()));
      return b_.CreateZExt(b_.CreateBitCast(h, it->getWithNewType(b_.getInt16Ty())), it);
    }
    llvm::Value* bits = b_.CreateBitCast(x, it);
    llvm::Value* lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), k(1));
    llvm::Value* r = b_.CreateLShr(b_.CreateAdd(b_.CreateAdd(bits, k(0x7FFF)), lsb), 16);
    llvm::Value* nan = b_.CreateOr(b_.CreateLShr(bits, 16), k(0x40));
    return b_.CreateSelect(b_.CreateFCmpUNO(x, x), nan, r);
  }

  // kF16ToFloat ... (compiler/ir.h): single 16-bit floats as uint16 bits, to and from float.
  llvm::Value* storage16(const Call* c) {
    TF_CHECK(c->args.size() == 1, "codegen: ", c->name, " takes one argument");
    llvm::Value* x = expr(c->args[0]);
    llvm::Type* ft = type_of(Type::float32().with_lanes(c->type.lanes));
    llvm::Type* it32 = ft->getWithNewType(b_.getInt32Ty());
    llvm::Type* it16 = ft->getWithNewType(b_.getInt16Ty());
    if (c->name == kF16ToFloat) return float16_to_float(b_.CreateZExt(x, it32), ft);
    if (c->name == kBF16ToFloat)
      return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(x, it32), 16), ft);
    llvm::Value* bits = c->name == kFloatToF16 ? float_to_float16(x) : float_to_bfloat16(x);
    return b_.CreateTrunc(bits, it16);
  }

  llvm::Value* cast(const Cast* c) {
    llvm::Value* v = expr(c->value);
    const Type& from = c->value.type();
    const Type& to = c->type;
    llvm::Type* t = type_of(to);
    if (to.is_float()) return from.is_bool() || from.is_uint() ? b_.CreateUIToFP(v, t) : b_.CreateSIToFP(v, t);
    if (to.is_bool()) {
      return from.is_float() ? b_.CreateFCmpUNE(v, llvm::Constant::getNullValue(v->getType()))
                             : b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
    }
    // Saturating: a NaN or out-of-range float (a hostile index read from data) gives 0 or the
    // type's bound, not LLVM's poison, so the clamps after it keep addresses in bounds.
    if (from.is_float()) return float_to_int(v, t, to.is_uint());
    if (from.is_bool() || from.is_uint()) return b_.CreateZExtOrTrunc(v, t);
    return b_.CreateSExtOrTrunc(v, t);
  }

  llvm::Value* call(const Call* c) {
    static const std::map<std::string, llvm::Intrinsic::ID> kIntrinsics = {
        {"exp", llvm::Intrinsic::exp},   {"log", llvm::Intrinsic::log},
        {"sqrt", llvm::Intrinsic::sqrt}, {"fabs", llvm::Intrinsic::fabs},
        {"tanh", llvm::Intrinsic::tanh}, {"floor", llvm::Intrinsic::floor},
        {"ceil", llvm::Intrinsic::ceil}, {"roundeven", llvm::Intrinsic::roundeven},
        {"sin", llvm::Intrinsic::sin},   {"cos", llvm::Intrinsic::cos},
    };
    if (c->name == kDot4U8S8) {
      TF_CHECK(c->args.size() == 2, "codegen: ", kDot4U8S8, " takes two arguments");
      return dot4_u8s8_widening(expr(c->args[0]), expr(c->args[1]));
    }
    if (c->name == kDot2BF16) {
      TF_CHECK(c->args.size() == 2, "codegen: ", kDot2BF16, " takes two arguments");
      llvm::Value* a = expr(c->args[0]);
      return CodeGen::dot2_bf16(llvm::Constant::getNullValue(type_of(c->type)), a, expr(c->args[1]));
    }
    if (c->name == kDot2F16) return dot2_f16(llvm::Constant::getNullValue(type_of(c->type)), c);
    if (is_warp_mma(c->name)) return warp_mma(c);
    if (is_wgmma(c->name)) return wgmma(c);
    if (c->name == kWgmmaWait) return wgmma_wait(c);
    if (c->name == kLdMatrix) return ldmatrix(c);
    if (c->name == kWordHalf) return word_half(c);
    if (c->name == kWordFloat) return word_float(c);
    if (c->name == kRoundF16) {
      TF_CHECK(c->args.size() == 1, "codegen: ", kRoundF16, " takes one argument");
      llvm::Value* x = expr(c->args[0]);
      return float16_to_float(float_to_float16(x), x->getType());
    }
    if (c->name == kRoundTF32) {
      TF_CHECK(c->args.size() == 1, "codegen: ", kRoundTF32, " takes one argument");
      llvm::Value* x = expr(c->args[0]);
      llvm::Type* it = x->getType()->getWithNewType(b_.getInt32Ty());
      auto k = [&](uint32_t v) { return llvm::ConstantInt::get(it, v); };
      llvm::Value* bits = b_.CreateAnd(b_.CreateAdd(b_.CreateBitCast(x, it), k(0x1000)), k(~0x1FFFu));
      llvm::Value* finite = b_.CreateFCmpOLT(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x),
                                             llvm::ConstantFP::getInfinity(x->getType()));
      return b_.CreateSelect(finite, b_.CreateBitCast(bits, x->getType()), x);
    }
    if (c->name == kF16ToFloat || c->name == kBF16ToFloat || c->name == kFloatToF16 ||
        c->name == kFloatToBF16)
      return storage16(c);
    if (c->name == kBF16x2) {
      TF_CHECK(c->args.size() == 2, "codegen: ", kBF16x2, " takes two arguments");
      llvm::Value* lo = expr(c->args[0]);
      return bf16x2(lo, expr(c->args[1]));
    }
    auto it = kIntrinsics.find(c->name);
    TF_CHECK(it != kIntrinsics.end() && c->args.size() == 1, "codegen: unknown call ", c->name);
    return math_call(c, it->second);
  }

  // A float function from the vendor's bitcode library (NVIDIA libdevice's __nv_expf ..., ROCm
  // ocml's __ocml_tanh_f32), linked in after emission; the back ends select no instruction for
  // it. Vector arguments are done lane by lane (GPU threads are scalar anyway).
  llvm::Value* vendor_math_call(const std::string& name, const Call* c) {
    llvm::FunctionCallee fn = runtime(name.c_str(), b_.getFloatTy(), {b_.getFloatTy()});
    llvm::Value* x = expr(c->args[0]);
    if (!x->getType()->isVectorTy()) return b_.CreateCall(fn, {x});
    llvm::Value* out = llvm::PoisonValue::get(x->getType());
    for (int i = 0; i < c->type.lanes; ++i) {
      llvm::Value* lane = b_.CreateCall(fn, {b_.CreateExtractElement(x, static_cast<uint64_t>(i))});
      out = b_.CreateInsertElement(out, lane, static_cast<uint64_t>(i));
    }
    return out;
  }

  llvm::Value* expr(const Expr& e) {
    switch (e.kind()) {
      case ExprKind::IntImm: {
        int64_t v = e.as<IntImm>()->value;
        if (e.type().is_bool()) return b_.getInt1(v != 0);
        return b_.getIntN(static_cast<unsigned>(e.type().bits), static_cast<uint64_t>(v));
      }
      case ExprKind::FloatImm:
        return llvm::ConstantFP::get(b_.getFloatTy(), e.as<FloatImm>()->value);
      case ExprKind::Var: {
        auto it = vars_.find(e.get());
        TF_CHECK(it != vars_.end(), "codegen: unbound variable ", e.as<Var>()->name);
        return it->second;
      }
      case ExprKind::Not: return b_.CreateNot(expr(e.as<Not>()->a));
      case ExprKind::Select: return select(e.as<Select>());
      case ExprKind::Cast: return cast(e.as<Cast>());
      case ExprKind::Load: return load(e.as<Load>());
      case ExprKind::Ramp: {
        const Ramp* r = e.as<Ramp>();
        auto n = static_cast<unsigned>(r->lanes);
        std::vector<llvm::Constant*> steps;
        for (unsigned i = 0; i < n; ++i) steps.push_back(b_.getInt64(i));
        llvm::Value* base = b_.CreateVectorSplat(n, expr(r->base));
        llvm::Value* stride = b_.CreateVectorSplat(n, expr(r->stride));
        return b_.CreateAdd(base, b_.CreateMul(stride, llvm::ConstantVector::get(steps)));
      }
      case ExprKind::Broadcast: {
        const Broadcast* bc = e.as<Broadcast>();
        return b_.CreateVectorSplat(static_cast<unsigned>(bc->lanes), expr(bc->value));
      }
      case ExprKind::Call: return call(e.as<Call>());
      case ExprKind::Let: {
        const Let* l = e.as<Let>();
        vars_[l->var.get()] = expr(l->value);
        llvm::Value* v = expr(l->body);
        vars_.erase(l->var.get());
        return v;
      }
      case ExprKind::TensorRead:
      case ExprKind::Reduce:
        TF_CHECK(false, "codegen: tensor expression left in loop IR");
        return nullptr;
      default:
        return binary(e);
    }
  }

  // ---- statements ----

  void store(const Store* s) {
    if (async_buffers_.count(s->buffer) && async_copy(s)) return;
    llvm::Value* v = expr(s->value);
    int lanes = s->value.type().lanes;
    const Type elem = s->value.type().element_of();
    const llvm::Align align = elem_align(elem);
    if (lanes == 1) {
      tag(b_.CreateAlignedStore(v, element_ptr(s->buffer, expr(s->index), elem), align), s->buffer);
      return;
    }
    if (const Ramp* r = s->index.as<Ramp>(); r && is_const(r->stride, 1)) {
      tag(b_.CreateAlignedStore(v, element_ptr(s->buffer, expr(r->base), elem),
                                elem.is_float() ? vector_align(r->base) : align),
          s->buffer);
      return;
    }
    llvm::Value* idx = expr(s->index);
    for (int i = 0; i < lanes; ++i) {
      llvm::Value* li = b_.CreateExtractElement(idx, static_cast<uint64_t>(i));
      llvm::Value* vi = b_.CreateExtractElement(v, static_cast<uint64_t>(i));
      tag(b_.CreateAlignedStore(vi, element_ptr(s->buffer, li, elem), align), s->buffer);
    }
  }

  // for (var = begin; var < end; ++var) body
  // A CPU register tile (a small local buffer) stays in registers only if LLVM's SROA sees
  // every access at a constant index, that is, after every loop indexing it is fully unrolled.
  // LLVM decides that by the loop body's cost: a tile's copy-out loop with a fused residual Add
  // and Relu was unrolled by 4, so the tile stayed on the stack and every FMA of the
  // reduction stored its accumulator (a 128-channel 3x3 layer ran at 2.2x its time). An
  // innermost loop of constant trip count indexing such a buffer by its variable is marked
  // for full unrolling; the schedule's own unroll knobs are untouched.
  //
  // The other way round, a loop around a register tile's updates that encloses further loops
  // (a convolution's channel blocks and window, rco / rr / rs, around its block's channels)
  // is kept rolled: LLVM fully unrolled a 3-tap window around the unrolled tile, GVN then kept
  // each broadcast input alive for the next tap that reads the same element, and with 16
  // vector registers those values went to the stack (425 spill accesses in a 16-channel 3x3
  // layer; 3x3 layers on Zen 3 ran at 55-71 GFLOPS instead of 84-94). The innermost loop
  // around the tile stays LLVM's to unroll.
  LoopUnroll register_tile_unroll(const For* f) const {
    constexpr int64_t kMaxTrips = 64;
    if (!unrolls_register_tiles() || register_tiles_.empty()) return LoopUnroll::Default;
    bool innermost = true, indexes = false, updates = false;
    auto tile_index = [&](const std::string& buffer, const Expr& index, bool store) {
      if (!register_tiles_.count(buffer)) return;
      if (uses_var(index, f->var)) indexes = true;
      updates |= store;
    };
    post_order(
        f->body,
        [&](const Expr& e) {
          if (const Load* l = e.as<Load>()) tile_index(l->buffer, l->index, false);
        },
        [&](const Stmt& st) {
          if (st.kind() == StmtKind::For) innermost = false;
          if (const Store* s = st.as<Store>()) tile_index(s->buffer, s->index, true);
        });
    const auto* n = f->extent.as<IntImm>();
    if (innermost && indexes && n && n->value <= kMaxTrips) return LoopUnroll::Full;
    if (!innermost && !indexes && updates) return LoopUnroll::Disable;
    return LoopUnroll::Default;
  }

  void serial_loop(const Expr& var, llvm::Value* begin, llvm::Value* end, const Stmt& body,
                   LoopUnroll unroll = LoopUnroll::Default) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, var.as<Var>()->name + ".header", fn_);
    auto* loop_body = llvm::BasicBlock::Create(ctx_, var.as<Var>()->name + ".body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, var.as<Var>()->name + ".end", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* phi = b_.CreatePHI(b_.getInt64Ty(), 2, var.as<Var>()->name);
    phi->addIncoming(begin, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(phi, end), loop_body, exit);
    b_.SetInsertPoint(loop_body);
    vars_[var.get()] = phi;
    stmt(body);
    vars_.erase(var.get());
    llvm::Value* next = b_.CreateAdd(phi, b_.getInt64(1), "", false, true);
    phi->addIncoming(next, b_.GetInsertBlock());
    llvm::BranchInst* latch = b_.CreateBr(header);
    mark_loop(latch, unroll);
    b_.SetInsertPoint(exit);
  }

  llvm::FunctionCallee runtime(const char* name, llvm::Type* ret, std::vector<llvm::Type*> args) {
    return m_.getOrInsertFunction(name, llvm::FunctionType::get(ret, args, false));
  }

  // Runs the iterations of `f` on the library's thread pool (compiler/thread_pool_ir.h): the
  // body is outlined into a function of (closure, c, n) that receives every value in scope
  // through a closure array of 8-byte slots and runs the c-th of the n chunks of its range
  // (several a thread, claimed by whichever thread is free). A chunk is a run of consecutive
  // iterations, or with f->parallel_inner = I the c-th slice of [0, I) for every outer
  // iteration o in turn (iteration min + o * I + i): with n = 1 both are the whole range in order.
  void parallel_loop(const For* f) {
    uses_openmp = true;
    llvm::Value* mn = expr(f->min);
    llvm::Value* ext = expr(f->extent);
    std::vector<std::pair<const ExprNode*, llvm::Value*>> vars(vars_.begin(), vars_.end());
    std::vector<std::pair<std::string, llvm::Value*>> bufs(buffers_.begin(), buffers_.end());
    size_t slots = vars.size() + bufs.size() + 2;
    llvm::IRBuilder<> entry(entry_, entry_->begin());
    llvm::AllocaInst* closure = entry.CreateAlloca(llvm::ArrayType::get(b_.getInt64Ty(), slots));
    std::vector<llvm::Value*> values = {mn, ext};
    for (auto& v : vars) values.push_back(v.second);
    for (auto& v : bufs) values.push_back(v.second);
    for (size_t i = 0; i < values.size(); ++i) {
      b_.CreateStore(values[i], b_.CreateConstInBoundsGEP2_64(closure->getAllocatedType(), closure, 0, i));
    }

    auto* fty = llvm::FunctionType::get(b_.getVoidTy(),
                                        {b_.getPtrTy(), b_.getInt32Ty(), b_.getInt32Ty()}, false);
    auto* outlined = llvm::Function::Create(fty, llvm::Function::InternalLinkage,
                                            name_ + ".parallel." + std::to_string(outlined_++), m_);
    set_attributes(outlined);
    // Save the caller's state; the outlined body gets its own.
    llvm::IRBuilderBase::InsertPoint saved_ip = b_.saveIP();
    llvm::Function* saved_fn = fn_;
    llvm::BasicBlock* saved_entry = entry_;
    auto saved_vars = vars_;
    auto saved_bufs = buffers_;

    fn_ = outlined;
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", outlined);
    b_.SetInsertPoint(entry_);
    llvm::Value* arg = outlined->getArg(0);
    auto slot = [&](size_t i, llvm::Type* t) {
      return b_.CreateLoad(t, b_.CreateConstInBoundsGEP2_64(closure->getAllocatedType(), arg, 0, i));
    };
    llvm::Value* omn = slot(0, mn->getType());
    llvm::Value* oext = slot(1, ext->getType());
    vars_.clear();
    buffers_.clear();
    for (size_t i = 0; i < vars.size(); ++i)
      vars_[vars[i].first] = slot(2 + i, vars[i].second->getType());
    for (size_t i = 0; i < bufs.size(); ++i) {
      buffers_[bufs[i].first] = slot(2 + vars.size() + i, b_.getPtrTy());
    }
    llvm::Value* tid = b_.CreateSExt(outlined->getArg(1), b_.getInt64Ty());
    llvm::Value* nth = b_.CreateSExt(outlined->getArg(2), b_.getInt64Ty());
    // The k-th of n runs of [0, count): [k * count / n, (k + 1) * count / n), sizes differing
    // by at most one, so each thread's 4 chunks hold its share (empty for k >= n).
    auto run_of = [&](llvm::Value* count, llvm::Value* n, llvm::Value* k) {
      auto bound = [&](llvm::Value* j) {
        llvm::Value* v = b_.CreateSDiv(b_.CreateMul(j, count), n);
        return b_.CreateSelect(b_.CreateICmpSLT(v, count), v, count);
      };
      return std::pair{bound(k), bound(b_.CreateAdd(k, b_.getInt64(1)))};
    };
    ++parallel_depth_;
    if (const int64_t inner = f->parallel_inner) {
      // P = min(n, I) slices of the inner range and Q = n / P parts of the outer one (1 unless
      // the team has more chunks than I has iterations): chunk c runs slice c % P of part c / P
      // (nothing for c >= P * Q), for o in its part: for i in its slice: body(min + o * I + i).
      // The bounds enter the IR as variables bound to their values here.
      const int64_t outer = *as_const_int(f->extent) / inner;
      llvm::Value* parts_p = b_.CreateSelect(b_.CreateICmpSLT(nth, b_.getInt64(inner)), nth, b_.getInt64(inner));
      llvm::Value* parts_q = b_.CreateSDiv(nth, parts_p);
      auto [lo, hi] = run_of(b_.getInt64(inner), parts_p, b_.CreateSRem(tid, parts_p));
      auto [olo, ohi] = run_of(b_.getInt64(outer), parts_q, b_.CreateSDiv(tid, parts_p));
      const std::string& name = f->var.as<Var>()->name;
      Expr o = Var::make(name + ".slices.outer"), i = Var::make(name + ".slices.inner");
      Expr lo_v = Var::make(name + ".slice.begin"), hi_v = Var::make(name + ".slice.end");
      Expr olo_v = Var::make(name + ".part.begin"), ohi_v = Var::make(name + ".part.end");
      Expr mn_v = Var::make(name + ".min");
      vars_[lo_v.get()] = lo;
      vars_[hi_v.get()] = hi;
      vars_[olo_v.get()] = olo;
      vars_[ohi_v.get()] = ohi;
      vars_[mn_v.get()] = omn;
      Stmt body = LetStmt::make(f->var, mn_v + o * Expr(inner) + i, f->body);
      stmt(For::make(o, olo_v, ohi_v - olo_v, ForKind::Serial, For::make(i, lo_v, hi_v - lo_v, ForKind::Serial, body)));
    } else {
      auto [begin, end] = run_of(oext, nth, tid);
      serial_loop(f->var, b_.CreateAdd(begin, omn), b_.CreateAdd(end, omn), f->body);
    }
    --parallel_depth_;
    b_.CreateRetVoid();

    fn_ = saved_fn;
    entry_ = saved_entry;
    vars_ = std::move(saved_vars);
    buffers_ = std::move(saved_bufs);
    b_.restoreIP(saved_ip);
    b_.CreateCall(parallel_launch_function(m_, target_), {outlined, closure});
  }

  // One iteration per block or thread: the launch size is the extent (check_gpu_kernel). A
  // thread loop inside a loop bound to the same axis is a cooperative one (a shared-memory
  // copy): each thread runs its own index, those past the loop's extent nothing.
  void bound_loop(const For* f) {
    auto slot = static_cast<size_t>(gpu_binding_index(f->for_kind));
    bool cooperative = active_[slot];
    llvm::Value* idx = grid_index(f->for_kind);
    vars_[f->var.get()] = b_.CreateAdd(expr(f->min), idx, "", false, true);
    const int64_t* n = as_const_int(f->extent);
    int64_t size = launch_->block[static_cast<size_t>(gpu_binding_dim(f->for_kind))];
    active_[slot] = true;
    // A thread loop shorter than the block (cooperative, or after a longer one) runs in the
    // first threads only.
    if (is_thread_binding(f->for_kind) && n && *n < size) {
      auto* then_bb = llvm::BasicBlock::Create(ctx_, "coop", fn_);
      auto* merge = llvm::BasicBlock::Create(ctx_, "coop.end", fn_);
      b_.CreateCondBr(b_.CreateICmpSLT(idx, b_.getInt64(static_cast<uint64_t>(*n))), then_bb, merge);
      b_.SetInsertPoint(then_bb);
      stmt(f->body);
      b_.CreateBr(merge);
      b_.SetInsertPoint(merge);
    } else {
      stmt(f->body);
    }
    active_[slot] = cooperative;
    vars_.erase(f->var.get());
  }

  void allocate(const Allocate* a) {
    if (a->scope == MemScope::Shared && allocate_shared(a)) return;
    if (a->scope == MemScope::Local || a->scope == MemScope::Shared) {
      // In the data layout's alloca address space: the stack, or a GPU thread's private memory.
      llvm::IRBuilder<> entry(entry_, entry_->begin());
      llvm::AllocaInst* p = entry.CreateAlloca(llvm::ArrayType::get(type_of(a->elem), static_cast<uint64_t>(a->size)));
      p->setAlignment(llvm::Align(local_align()));
      buffers_[a->buffer] = p;
      bool tile = a->scope == MemScope::Local && a->size <= kMaxRegisterTile;
      if (tile) register_tiles_.insert(a->buffer);
      stmt(a->body);
      if (tile) register_tiles_.erase(a->buffer);
      buffers_.erase(a->buffer);
      return;
    }
    uint64_t bytes = (static_cast<uint64_t>(a->size) * static_cast<uint64_t>(a->elem.bytes()) + 63) / 64 * 64;
    // The buffer of the last call is kept for the next one (one per allocation, taken and
    // given back with atomic exchanges, so concurrent calls each get their own): allocating
    // megabytes on every call costs page faults on every call (glibc returns large blocks
    // to the system on free), a third of a Winograd kernel's time. Freed when the library
    // is unloaded (free_kept_buffers_at_unload).
    llvm::GlobalVariable* cache = kept_buffer_slot(m_, name_ + "." + a->buffer + ".cache");
    workspaces_.push_back(cache);
    llvm::Value* cached = exchange_kept_buffer(b_, cache, nullptr);
    llvm::BasicBlock* from = b_.GetInsertBlock();
    auto* fresh_bb = llvm::BasicBlock::Create(ctx_, a->buffer + ".alloc", fn_);
    auto* ok = llvm::BasicBlock::Create(ctx_, a->buffer + ".ok", fn_);
    b_.CreateCondBr(b_.CreateIsNull(cached), fresh_bb, ok);
    b_.SetInsertPoint(fresh_bb);
    llvm::Value* fresh = b_.CreateCall(runtime("aligned_alloc", b_.getPtrTy(), {b_.getInt64Ty(), b_.getInt64Ty()}),
                                       {b_.getInt64(64), b_.getInt64(bytes)});
    auto* fail = llvm::BasicBlock::Create(ctx_, a->buffer + ".oom", fn_);
    llvm::BasicBlock* fresh_end = b_.GetInsertBlock();
    b_.CreateCondBr(b_.CreateIsNull(fresh), fail, ok);
    b_.SetInsertPoint(fail);
    if (parallel_depth_ == 0) {
      b_.CreateRet(b_.getInt32(-1));  // the kernel's documented out-of-memory result
    } else {
      // No way to return a status from a pool thread: stop loudly rather than corrupt memory.
      b_.CreateIntrinsic(llvm::Intrinsic::trap, {}, {});
      b_.CreateUnreachable();
    }
    b_.SetInsertPoint(ok);
    llvm::PHINode* p = b_.CreatePHI(b_.getPtrTy(), 2);
    p->addIncoming(cached, from);
    p->addIncoming(fresh, fresh_end);
    buffers_[a->buffer] = p;
    stmt(a->body);
    buffers_.erase(a->buffer);
    llvm::Value* old = exchange_kept_buffer(b_, cache, p);
    b_.CreateCall(runtime("free", b_.getVoidTy(), {b_.getPtrTy()}), {old});  // free(NULL) does nothing
  }

  void stmt(const Stmt& s) {
    switch (s.kind()) {
      case StmtKind::For: {
        const For* f = s.as<For>();
        if (is_gpu_binding(f->for_kind)) return bound_loop(f);
        if (f->for_kind == ForKind::Parallel && parallel_depth_ == 0) return parallel_loop(f);
        llvm::Value* mn = expr(f->min);
        return serial_loop(f->var, mn, b_.CreateAdd(mn, expr(f->extent)), f->body, register_tile_unroll(f));
      }
      case StmtKind::Store: return store(s.as<Store>());
      case StmtKind::LetStmt: {
        const LetStmt* l = s.as<LetStmt>();
        vars_[l->var.get()] = expr(l->value);
        stmt(l->body);
        vars_.erase(l->var.get());
        return;
      }
      case StmtKind::IfThenElse: {
        const IfThenElse* i = s.as<IfThenElse>();
        auto* then_bb = llvm::BasicBlock::Create(ctx_, "then", fn_);
        auto* else_bb = llvm::BasicBlock::Create(ctx_, "else", fn_);
        auto* merge = llvm::BasicBlock::Create(ctx_, "endif", fn_);
        b_.CreateCondBr(expr(i->cond), then_bb, else_bb);
        b_.SetInsertPoint(then_bb);
        stmt(i->then_case);
        b_.CreateBr(merge);
        b_.SetInsertPoint(else_bb);
        if (i->else_case) stmt(i->else_case);
        b_.CreateBr(merge);
        b_.SetInsertPoint(merge);
        return;
      }
      case StmtKind::Allocate: return allocate(s.as<Allocate>());
      case StmtKind::Barrier: return barrier(s.as<Barrier>());
      case StmtKind::Prefetch: return prefetch(s.as<Prefetch>());
      case StmtKind::Block: {
        const std::vector<Stmt>& stmts = s.as<Block>()->stmts;
        note_wgmma_runs(stmts);
        for (const Stmt& c : stmts) stmt(c);
        return;
      }
    }
  }

  // The warpgroup-level products (compiler/ir.h kWgmmaF16) of `stmts` that continue a run: each
  // stores the accumulators the statement before it stored by such a product (as an unrolled K
  // chunk leaves them). PTX orders products of one shape into the same accumulators by itself,
  // so only a run's first product needs wgmma.fence (codegen_nvptx.cc).
  void note_wgmma_runs(const std::vector<Stmt>& stmts) {
    for (size_t i = 1; i < stmts.size(); ++i) {
      const Store* prev = wgmma_store(stmts[i - 1]);
      const Store* st = wgmma_store(stmts[i]);
      if (prev && st && same_accumulators(*prev, *st)) wgmma_run_continues_.insert(st->value.get());
    }
  }
  // Products that continue a run (note_wgmma_runs).
  std::set<const ExprNode*> wgmma_run_continues_;

  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  const Target& target_;
  llvm::IRBuilder<> b_;
  std::string name_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  std::map<const ExprNode*, llvm::Value*> vars_;
  std::map<std::string, llvm::Value*> buffers_;
  // Local buffers small enough to be a register tile: twice AVX-512's 32 registers of 16 floats
  // (a larger one is not promoted to registers, unrolled or not).
  static constexpr int64_t kMaxRegisterTile = 1024;
  std::set<std::string> register_tiles_;
  std::set<std::string> kernel_args_;    // the kernel's arguments: global memory on a GPU
  std::set<std::string> async_buffers_;  // shared buffers filled with cp.async (see async_copy)
  std::vector<std::pair<llvm::Instruction*, std::string>> accesses_;  // see tag()
  std::vector<llvm::GlobalVariable*> workspaces_;                     // see allocate()
  const GpuLaunch* launch_ = nullptr;
  std::array<bool, 6> active_{};  // GPU axes bound by an enclosing loop (blockIdx x,y,z, threadIdx x,y,z)
  int parallel_depth_ = 0;
  int outlined_ = 0;
  llvm::Value* mask_ = nullptr;  // inside a vector select: the lanes that may touch memory
};

// The code generator for `t`'s kind.
std::unique_ptr<CodeGen> make_codegen(llvm::LLVMContext& ctx, llvm::Module& m, const Target& t);
std::unique_ptr<CodeGen> make_codegen_cpu(llvm::LLVMContext& ctx, llvm::Module& m, const Target& t);
std::unique_ptr<CodeGen> make_codegen_nvptx(llvm::LLVMContext& ctx, llvm::Module& m, const Target& t);
std::unique_ptr<CodeGen> make_codegen_amdgpu(llvm::LLVMContext& ctx, llvm::Module& m, const Target& t);

// The LLVM target features of `t`: -mattr for CPUs, the PTX ISA version for cuda, none for rocm.
std::string target_features(const Target& t);
// The lowest PTX ISA version that has the architecture (codegen_nvptx.cc).
std::string ptx_feature(const std::string& arch);

// Links the functions of a vendor bitcode library that the kernels call (only those) and
// makes them internal, so the optimizer inlines them and drops the rest.
void link_bitcode(llvm::Module& m, const std::set<std::string>& kernels, const std::string& path, const char* what);

}  // namespace tf::llvm_codegen
