#include "compiler/model_entry.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string_view>
#include <unordered_map>

#include "compiler/codegen_llvm.h"
#include "compiler/fp_control.h"
#include "compiler/thread_pool_ir.h"
#include "base/error.h"
#include "runtime/gpu_model/plan.h"

namespace tf {
namespace {

constexpr uint64_t kAlign = 64;
// Past this many bytes of constants in all, they are large data (x86-64: .lrodata, addressed
// with 64 bits), so that a library's code still reaches its own small constants (kernels'
// constant pools in .rodata) with 32-bit offsets: RegNetY-128GF's 2.6 GB of weights in
// .rodata put them 2.5 GB from the code, and the link failed (R_X86_64_PC32 out of range).
constexpr uint64_t kLargeConstants = uint64_t{1} << 30;
constexpr int32_t kNoBucketStatus = -4;  // runtime/model_abi.h kModelNoBucket

// Bytes of one element of an input or output.
uint64_t entry_type_bytes(EntryType t) {
  switch (t) {
    case EntryType::Float32: return 4;
    case EntryType::Int64: return 8;
    case EntryType::Bool: return 1;
    case EntryType::Float16:
    case EntryType::BFloat16: return 2;
  }
  return 4;
}

class EntryGen {
 public:
  EntryGen(llvm::LLVMContext& ctx, llvm::Module& m, const Target& target)
      : ctx_(ctx), m_(m), b_(ctx), fp_control_(target.arch_name()), target_(target) {}

  // The tables describing the inputs and outputs, and the workspace's size.
  void emit_tables(const EntrySpec& s, int64_t workspace_bytes) {
    tensor_table("input", s.inputs);
    tensor_table("output", s.outputs);
    constant_fn("tf_model_workspace_bytes", b_.getInt64(static_cast<uint64_t>(workspace_bytes)));
  }

  // A read-only array of bytes every object of the library sees (hidden), in `section`.
  void bytes_global(const std::string& name, const std::string& data, uint64_t align, const std::string& section) {
    llvm::Constant* init = llvm::ConstantDataArray::getRaw(data, data.size(), b_.getInt8Ty());
    auto* gv = new llvm::GlobalVariable(m_, init->getType(), true, llvm::GlobalValue::ExternalLinkage, init, name);
    gv->setVisibility(llvm::GlobalValue::HiddenVisibility);
    gv->setAlignment(llvm::Align(align));
    gv->setSection(section);
  }

  // One library for every bucket of `buckets` (one bucket: a library as before, plus the bucket
  // table): bucket 0's tables and tf_model_run, the other buckets' runs beside it, constants
  // the buckets share (the same bytes) embedded once, and one workspace cache sized for the
  // largest bucket.
  void emit(const std::vector<EntrySpec>& buckets) {
    TF_CHECK(!buckets.empty(), "codegen_model_entry: no bucket");
    int64_t workspace = 0;
    for (const EntrySpec& s : buckets) workspace = std::max(workspace, s.workspace_bytes);
    emit_tables(buckets[0], workspace);
    // Constants by content: a bucket's weights are the other buckets' too.
    std::unordered_map<std::string_view, llvm::GlobalVariable*> by_bytes;
    std::vector<std::vector<llvm::GlobalVariable*>> bucket_constants;
    for (const EntrySpec& s : buckets) {
      std::vector<llvm::GlobalVariable*> mine;
      for (const std::vector<float>* data : s.constants) {
        auto [it, fresh] = by_bytes.emplace(
            std::string_view(reinterpret_cast<const char*>(data->data()), data->size() * sizeof(float)), nullptr);
        if (fresh) {
          // As bytes: LLVM's printer writes an i8 array in one piece, a float one element by
          // element through APFloat (AlexNet's 240 MiB of weights: 6 s of a 16 s compile).
          llvm::Constant* init =
              llvm::ConstantDataArray::getRaw(it->first, it->first.size(), b_.getInt8Ty());
          it->second = new llvm::GlobalVariable(m_, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init,
                                                "tf_const" + std::to_string(by_bytes.size() - 1));
          it->second->setAlignment(llvm::Align(kAlign));
        }
        mine.push_back(it->second);
      }
      bucket_constants.push_back(std::move(mine));
    }
    // The bytes embedded (each content once) decide the code model of all of them.
    uint64_t embedded = 0;
    for (const auto& [bytes, global] : by_bytes) embedded += bytes.size();
    if (embedded > kLargeConstants) {
      for (const auto& [bytes, global] : by_bytes) global->setCodeModel(llvm::CodeModel::Large);
    }
    cache_ = kept_buffer_slot(m_, "tf_model_workspace_cache");
    free_kept_buffers_at_unload(m_, {cache_}, "tf_model_release_workspace");
    profiler_tables(buckets);
    std::vector<llvm::Function*> runs;
    int64_t first_call = 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
      constants_ = bucket_constants[b];
      const std::string name = b == 0 ? "tf_model_run" : "tf_model_run_bucket_" + std::to_string(b);
      runs.push_back(
          flushing_denormals(run(buckets[b], name + "_kernels", workspace, first_call), name));
      first_call += static_cast<int64_t>(buckets[b].calls.size());
      if (b > 0) runs.back()->setLinkage(llvm::GlobalValue::InternalLinkage);
    }
    bucket_entries(buckets, runs);
  }

  // The bucket table and the entry points that choose a bucket (docs/models.md, "Shape
  // buckets"): tf_model_num_buckets, tf_model_bucket_input_shape(b, i) and _output_shape
  // (NULL out of range; ranks are the tables' for every bucket), tf_model_bucket_of(shapes)
  // (the bucket whose input shapes are these, or -1), tf_model_run_bucket(b, ...) and
  // tf_model_run_shaped(shapes, ...) (-4 when no bucket has those shapes).
  void bucket_entries(const std::vector<EntrySpec>& buckets, const std::vector<llvm::Function*>& runs) {
    llvm::PointerType* ptr = b_.getPtrTy();
    const auto count = static_cast<uint32_t>(buckets.size());
    llvm::Function* of = bucket_tables(buckets);
    // tf_model_run_bucket(b, inputs, outputs, workspace): a switch over the buckets' runs.
    llvm::Function* rb =
        define("tf_model_run_bucket", b_.getInt32Ty(), {b_.getInt32Ty(), ptr, ptr, ptr});
    {
      auto* bad = llvm::BasicBlock::Create(ctx_, "no_such_bucket", rb);
      llvm::SwitchInst* sw = b_.CreateSwitch(rb->getArg(0), bad, count);
      for (size_t bk = 0; bk < runs.size(); ++bk) {
        auto* bb = llvm::BasicBlock::Create(ctx_, str("bucket_", bk), rb);
        sw->addCase(b_.getInt32(static_cast<uint32_t>(bk)), bb);
        b_.SetInsertPoint(bb);
        b_.CreateRet(b_.CreateCall(runs[bk], {rb->getArg(1), rb->getArg(2), rb->getArg(3)}));
      }
      b_.SetInsertPoint(bad);
      b_.CreateRet(b_.getInt32(static_cast<uint32_t>(kNoBucketStatus)));
    }
    llvm::Function* rs = define("tf_model_run_shaped", b_.getInt32Ty(), {ptr, ptr, ptr, ptr});
    llvm::Value* bucket = b_.CreateCall(of, {rs->getArg(0)});
    if (std::none_of(buckets.begin(), buckets.end(), [](const EntrySpec& s) { return s.padded; })) {
      b_.CreateRet(b_.CreateCall(rb, {bucket, rs->getArg(1), rs->getArg(2), rs->getArg(3)}));
      return;
    }
    auto* exact = llvm::BasicBlock::Create(ctx_, "exact", rs);
    auto* look = llvm::BasicBlock::Create(ctx_, "look_padded", rs);
    b_.CreateCondBr(b_.CreateICmpSGE(bucket, b_.getInt32(0)), exact, look);
    b_.SetInsertPoint(exact);
    b_.CreateRet(b_.CreateCall(rb, {bucket, rs->getArg(1), rs->getArg(2), rs->getArg(3)}));
    b_.SetInsertPoint(look);
    run_padded(buckets, rs, rb);
  }

  // The rest of tf_model_run_shaped (`fn`, at its insert point) in a library compiled with
  // --pad-batch, for shapes no bucket has: the bucket tf_model_padded_bucket_of chooses, run on
  // copies of the inputs in zero-filled buffers of its size, whose outputs' first rows are
  // copied out; -4 when there is none, -1 when the copies do not fit in memory.
  void run_padded(const std::vector<EntrySpec>& buckets, llvm::Function* fn, llvm::Function* rb) {
    llvm::Value *shapes = fn->getArg(0), *in = fn->getArg(1), *out = fn->getArg(2),
                *ws = fn->getArg(3);
    llvm::IRBuilder<> entry(&fn->getEntryBlock(), fn->getEntryBlock().begin());
    llvm::AllocaInst* rows = entry.CreateAlloca(b_.getInt64Ty());
    llvm::Value* chosen = b_.CreateCall(padded_of_, {shapes, rows});
    auto* none = llvm::BasicBlock::Create(ctx_, "no_padded_bucket", fn);
    llvm::SwitchInst* sw = b_.CreateSwitch(chosen, none);
    for (size_t bk = 0; bk < buckets.size(); ++bk) {
      if (!buckets[bk].padded) continue;
      auto* pad = llvm::BasicBlock::Create(ctx_, str("pad_to_", bk), fn);
      sw->addCase(b_.getInt32(static_cast<uint32_t>(bk)), pad);
      b_.SetInsertPoint(pad);
      padded_call(buckets[bk], static_cast<int32_t>(bk), rb, b_.CreateLoad(b_.getInt64Ty(), rows),
                  in, out, ws);
    }
    b_.SetInsertPoint(none);
    b_.CreateRet(b_.getInt32(static_cast<uint32_t>(kNoBucketStatus)));
  }

  // tf_model_padded_bucket_of(shapes, rows): of the buckets that may run fewer rows padded, the
  // one of fewest rows whose inputs have the given shapes but for more rows of axis 0 (as many
  // in every input, at least 1), its rows' count to *rows (unless null); -1 when none (always,
  // in a library without padded buckets or inputs). The one definition of that choice: the
  // GPU runtime, ModelLibrary and Python call it.
  llvm::Function* padded_bucket_of(const std::vector<EntrySpec>& buckets) {
    llvm::PointerType* ptr = b_.getPtrTy();
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Function* fn = define("tf_model_padded_bucket_of", b_.getInt32Ty(), {ptr, ptr});
    llvm::Value *shapes = fn->getArg(0), *rows_out = fn->getArg(1);
    const size_t ni = buckets[0].inputs.size();
    auto* none = llvm::BasicBlock::Create(ctx_, "no_padded_bucket", fn);
    auto block = [&](const std::string& name) { return llvm::BasicBlock::Create(ctx_, name, fn); };
    std::vector<size_t> order;  // the padded buckets by their rows, fewest first
    for (size_t bk = 0; bk < buckets.size() && ni > 0; ++bk)
      if (buckets[bk].padded) order.push_back(bk);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return buckets[a].inputs[0].shape.at(0) < buckets[b].inputs[0].shape.at(0);
    });
    if (order.empty()) {
      b_.CreateBr(none);
    } else {
      // Every input's dimensions, and the rows of the first.
      auto* have = block("have_shapes");
      b_.CreateCondBr(b_.CreateIsNull(shapes), none, have);
      b_.SetInsertPoint(have);
      std::vector<llvm::Value*> dims;
      for (size_t k = 0; k < ni; ++k) {
        dims.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, shapes, k)));
        auto* next = block(str("have_shape_", k));
        b_.CreateCondBr(b_.CreateIsNull(dims.back()), none, next);
        b_.SetInsertPoint(next);
      }
      llvm::Value* n = b_.CreateLoad(i64, dims[0]);
      for (size_t bk : order) {
        const EntrySpec& s = buckets[bk];
        const int64_t rows = s.inputs[0].shape.at(0);
        auto* next = block(str("not_padded_", bk));
        auto* found = block(str("padded_", bk));
        llvm::Value* fits = b_.CreateAnd(b_.CreateICmpSGE(n, b_.getInt64(1)),
                                         b_.CreateICmpSLE(n, b_.getInt64(rows)));
        for (size_t k = 0; k < ni; ++k) {
          const std::vector<int64_t>& shape = s.inputs[k].shape;
          for (size_t d = 0; d < shape.size(); ++d) {
            llvm::Value* v = b_.CreateLoad(i64, b_.CreateConstInBoundsGEP1_64(i64, dims[k], d));
            fits = b_.CreateAnd(
                fits,
                b_.CreateICmpEQ(v, d == 0 ? n : b_.getInt64(static_cast<uint64_t>(shape[d]))));
          }
        }
        b_.CreateCondBr(fits, found, next);
        b_.SetInsertPoint(found);
        auto* store = block(str("rows_to_", bk));
        auto* done = block(str("chose_", bk));
        b_.CreateCondBr(b_.CreateIsNull(rows_out), done, store);
        b_.SetInsertPoint(store);
        b_.CreateStore(n, rows_out);
        b_.CreateBr(done);
        b_.SetInsertPoint(done);
        b_.CreateRet(b_.getInt32(static_cast<uint32_t>(bk)));
        b_.SetInsertPoint(next);
      }
      b_.CreateBr(none);
    }
    b_.SetInsertPoint(none);
    b_.CreateRet(b_.getInt32(static_cast<uint32_t>(-1)));
    return fn;
  }

  // Bucket `bk` (`s`) run on `n` rows of the caller's inputs in zero-filled buffers of its
  // size, the outputs' first `n` rows copied to the caller's; returns its status.
  void padded_call(const EntrySpec& s, int32_t bk, llvm::Function* rb, llvm::Value* n,
                   llvm::Value* in, llvm::Value* out, llvm::Value* ws) {
    llvm::PointerType* ptr = b_.getPtrTy();
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Function* fn = b_.GetInsertBlock()->getParent();
    llvm::FunctionCallee alloc =
        m_.getOrInsertFunction("aligned_alloc", llvm::FunctionType::get(ptr, {i64, i64}, false));
    llvm::FunctionCallee release =
        m_.getOrInsertFunction("free", llvm::FunctionType::get(b_.getVoidTy(), {ptr}, false));
    const int64_t rows = s.inputs[0].shape.at(0);
    auto bytes = [](const EntryTensor& t) {
      uint64_t e = entry_type_bytes(t.dtype);
      for (int64_t d : t.shape) e *= static_cast<uint64_t>(d);
      return e;
    };
    // Buffers of the bucket's size, inputs then outputs, zero-filled (64-byte aligned, at least
    // 64 bytes).
    std::vector<const EntryTensor*> tensors;
    for (const EntryTensor& t : s.inputs) tensors.push_back(&t);
    for (const EntryTensor& t : s.outputs) tensors.push_back(&t);
    auto* array_ty = llvm::ArrayType::get(ptr, std::max<size_t>(tensors.size(), 1));
    llvm::Value* buffers = b_.CreateAlloca(array_ty);
    llvm::Value* missing = b_.getFalse();
    std::vector<llvm::Value*> buf;
    for (const EntryTensor* t : tensors) {
      const uint64_t size = std::max<uint64_t>((bytes(*t) + kAlign - 1) / kAlign * kAlign, kAlign);
      llvm::Value* p = b_.CreateCall(alloc, {b_.getInt64(kAlign), b_.getInt64(size)});
      b_.CreateStore(p, b_.CreateConstInBoundsGEP2_64(array_ty, buffers, 0, buf.size()));
      missing = b_.CreateOr(missing, b_.CreateIsNull(p));
      buf.push_back(p);
    }
    auto* oom = llvm::BasicBlock::Create(ctx_, str("pad_out_of_memory_", bk), fn);
    auto* fill = llvm::BasicBlock::Create(ctx_, str("pad_fill_", bk), fn);
    auto free_all = [&] {
      for (llvm::Value* p : buf) b_.CreateCall(release, {p});
    };
    b_.CreateCondBr(missing, oom, fill);
    b_.SetInsertPoint(oom);
    free_all();
    b_.CreateRet(b_.getInt32(static_cast<uint32_t>(-1)));
    b_.SetInsertPoint(fill);
    // A tensor's bytes per row of axis 0, and n rows of them.
    auto rows_bytes = [&](const EntryTensor& t) {
      return b_.CreateMul(n, b_.getInt64(bytes(t) / static_cast<uint64_t>(rows)));
    };
    for (size_t k = 0; k < s.inputs.size(); ++k) {
      b_.CreateMemSet(buf[k], b_.getInt8(0), b_.getInt64(bytes(s.inputs[k])),
                      llvm::MaybeAlign(kAlign));
      llvm::Value* from = b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, in, k));
      b_.CreateMemCpy(buf[k], llvm::MaybeAlign(kAlign), from, llvm::MaybeAlign(1),
                      rows_bytes(s.inputs[k]));
    }
    llvm::Value* ins = b_.CreateConstInBoundsGEP2_64(array_ty, buffers, 0, 0);
    llvm::Value* outs = b_.CreateConstInBoundsGEP2_64(array_ty, buffers, 0, s.inputs.size());
    llvm::Value* status =
        b_.CreateCall(rb, {b_.getInt32(static_cast<uint32_t>(bk)), ins, outs, ws});
    auto* copy = llvm::BasicBlock::Create(ctx_, str("pad_copy_out_", bk), fn);
    auto* done = llvm::BasicBlock::Create(ctx_, str("pad_done_", bk), fn);
    b_.CreateCondBr(b_.CreateICmpEQ(status, b_.getInt32(0)), copy, done);
    b_.SetInsertPoint(copy);
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      llvm::Value* to = b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, out, k));
      b_.CreateMemCpy(to, llvm::MaybeAlign(1), buf[s.inputs.size() + k], llvm::MaybeAlign(kAlign),
                      rows_bytes(s.outputs[k]));
    }
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    free_all();
    b_.CreateRet(status);
  }

  // Per-kernel profiling (docs/models.md, "Profiling"): the kernel calls of every bucket,
  // numbered in order across the buckets (tf_model_num_calls; tf_model_call_function(i) and
  // tf_model_call_bucket(i): the called function's name and its bucket, NULL / -1 out of range),
  // and tf_model_set_profiler(fn, ctx), after which every call i runs between fn(ctx, i, 0) and
  // fn(ctx, i, 1), on the thread that runs it (NULL fn: none; set it between runs, not during
  // one). Off, a call costs one test of a register.
  void profiler_tables(const std::vector<EntrySpec>& buckets) {
    llvm::PointerType* ptr = b_.getPtrTy();
    std::vector<llvm::Constant*> names, of_bucket;
    std::map<std::string, llvm::Constant*> name_strings;  // a function called in several buckets
    for (size_t bk = 0; bk < buckets.size(); ++bk) {
      for (const EntryCall& c : buckets[bk].calls) {
        llvm::Constant*& n = name_strings[c.function];
        if (!n) n = b_.CreateGlobalString(c.function, "tf_call_name", 0, &m_);
        names.push_back(n);
        of_bucket.push_back(b_.getInt32(static_cast<uint32_t>(bk)));
      }
    }
    constant_fn("tf_model_num_calls", b_.getInt32(static_cast<uint32_t>(names.size())));
    if (!names.empty()) {
      table_fn("tf_model_call_function", ptr, names, llvm::ConstantPointerNull::get(ptr));
      table_fn("tf_model_call_bucket", b_.getInt32Ty(), of_bucket,
               b_.getInt32(static_cast<uint32_t>(-1)));
    } else {
      define("tf_model_call_function", ptr, {b_.getInt32Ty()});
      b_.CreateRet(llvm::ConstantPointerNull::get(ptr));
      define("tf_model_call_bucket", b_.getInt32Ty(), {b_.getInt32Ty()});
      b_.CreateRet(b_.getInt32(static_cast<uint32_t>(-1)));
    }
    auto slot = [&](const char* name) {
      return new llvm::GlobalVariable(m_, ptr, false, llvm::GlobalValue::InternalLinkage,
                                      llvm::ConstantPointerNull::get(ptr), name);
    };
    profiler_ = slot("tf_profiler_fn");
    profiler_ctx_ = slot("tf_profiler_ctx");
    llvm::Function* set = define("tf_model_set_profiler", b_.getVoidTy(), {ptr, ptr});
    b_.CreateAlignedStore(set->getArg(1), profiler_ctx_, llvm::Align(8))
        ->setAtomic(llvm::AtomicOrdering::Monotonic);
    b_.CreateAlignedStore(set->getArg(0), profiler_, llvm::Align(8))
        ->setAtomic(llvm::AtomicOrdering::Release);
    b_.CreateRetVoid();
  }

  // The bucket table: tf_model_num_buckets, tf_model_bucket_input_shape and _output_shape, and
  // tf_model_bucket_of, which it returns. (A GPU library's runtime defines the runs.)
  llvm::Function* bucket_tables(const std::vector<EntrySpec>& buckets) {
    llvm::PointerType* ptr = b_.getPtrTy();
    const auto count = static_cast<uint32_t>(buckets.size());
    constant_fn("tf_model_num_buckets", b_.getInt32(count));
    {
      // tf_model_bucket_padded(b): a table of 0 / 1, 0 out of range.
      std::vector<uint8_t> padded;
      for (const EntrySpec& s : buckets) padded.push_back(s.padded ? 1 : 0);
      llvm::Constant* init = llvm::ConstantDataArray::get(ctx_, padded);
      auto* table = new llvm::GlobalVariable(
          m_, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, "tf_bucket_padded");
      llvm::Function* fn = define("tf_model_bucket_padded", b_.getInt32Ty(), {b_.getInt32Ty()});
      auto* yes = llvm::BasicBlock::Create(ctx_, "in_range", fn);
      auto* no = llvm::BasicBlock::Create(ctx_, "out_of_range", fn);
      b_.CreateCondBr(b_.CreateICmpULT(fn->getArg(0), b_.getInt32(count)), yes, no);
      b_.SetInsertPoint(no);
      b_.CreateRet(b_.getInt32(0));
      b_.SetInsertPoint(yes);
      llvm::Value* at = b_.CreateInBoundsGEP(
          init->getType(), table, {b_.getInt64(0), b_.CreateZExt(fn->getArg(0), b_.getInt64Ty())});
      b_.CreateRet(b_.CreateZExt(b_.CreateLoad(b_.getInt8Ty(), at), b_.getInt32Ty()));
    }
    for (const char* role : {"input", "output"}) {
      const bool in = std::string(role) == "input";
      const size_t n = (in ? buckets[0].inputs : buckets[0].outputs).size();
      std::vector<llvm::Constant*> shapes;
      for (const EntrySpec& s : buckets) {
        const std::vector<EntryTensor>& ts = in ? s.inputs : s.outputs;
        TF_CHECK(ts.size() == n, "codegen_model_entry: a bucket with ", ts.size(), " ", role, "s, not ", n);
        for (const EntryTensor& t : ts) shapes.push_back(shape_global(t.shape, str("tf_bucket_", role, "_shape")));
      }
      llvm::Function* fn = define(str("tf_model_bucket_", role, "_shape"), ptr, {b_.getInt32Ty(), b_.getInt32Ty()});
      if (n == 0) {
        b_.CreateRet(llvm::ConstantPointerNull::get(ptr));
        continue;
      }
      auto* ty = llvm::ArrayType::get(ptr, shapes.size());
      auto* table = new llvm::GlobalVariable(m_, ty, true, llvm::GlobalValue::PrivateLinkage,
                                             llvm::ConstantArray::get(ty, shapes), str("tf_bucket_", role, "_shapes"));
      llvm::Value *bucket = fn->getArg(0), *i = fn->getArg(1);
      llvm::Value* ok = b_.CreateAnd(b_.CreateICmpULT(bucket, b_.getInt32(count)),
                                     b_.CreateICmpULT(i, b_.getInt32(static_cast<uint32_t>(n))));
      auto* yes = llvm::BasicBlock::Create(ctx_, "in_range", fn);
      auto* no = llvm::BasicBlock::Create(ctx_, "out_of_range", fn);
      b_.CreateCondBr(ok, yes, no);
      b_.SetInsertPoint(no);
      b_.CreateRet(llvm::ConstantPointerNull::get(ptr));
      b_.SetInsertPoint(yes);
      llvm::Value* at = b_.CreateAdd(b_.CreateMul(b_.CreateZExt(bucket, b_.getInt64Ty()), b_.getInt64(n)),
                                     b_.CreateZExt(i, b_.getInt64Ty()));
      b_.CreateRet(b_.CreateLoad(ptr, b_.CreateInBoundsGEP(ty, table, {b_.getInt64(0), at})));
    }
    // tf_model_bucket_of: the first bucket whose every input dimension is the given one.
    llvm::Function* of = define("tf_model_bucket_of", b_.getInt32Ty(), {ptr});
    {
      llvm::Value* given = of->getArg(0);
      auto* none = llvm::BasicBlock::Create(ctx_, "no_bucket", of);
      auto* null_bb = llvm::BasicBlock::Create(ctx_, "shapes", of);
      b_.CreateCondBr(b_.CreateIsNull(given), none, null_bb);
      b_.SetInsertPoint(null_bb);
      for (size_t bk = 0; bk < buckets.size(); ++bk) {
        auto* next = llvm::BasicBlock::Create(ctx_, str("not_bucket_", bk), of);
        for (size_t i = 0; i < buckets[bk].inputs.size(); ++i) {
          const std::vector<int64_t>& shape = buckets[bk].inputs[i].shape;
          llvm::Value* dims = b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, given, i));
          auto* have = llvm::BasicBlock::Create(ctx_, "have_shape", of);
          b_.CreateCondBr(b_.CreateIsNull(dims), next, have);
          b_.SetInsertPoint(have);
          for (size_t d = 0; d < shape.size(); ++d) {
            llvm::Value* v = b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), dims, d));
            auto* same = llvm::BasicBlock::Create(ctx_, "same_dim", of);
            b_.CreateCondBr(b_.CreateICmpEQ(v, b_.getInt64(static_cast<uint64_t>(shape[d]))), same, next);
            b_.SetInsertPoint(same);
          }
        }
        b_.CreateRet(b_.getInt32(static_cast<uint32_t>(bk)));
        b_.SetInsertPoint(next);
      }
      b_.CreateBr(none);
      b_.SetInsertPoint(none);
      b_.CreateRet(b_.getInt32(static_cast<uint32_t>(-1)));
    }
    padded_of_ = padded_bucket_of(buckets);
    return of;
  }

 private:
  llvm::Function* define(const std::string& name, llvm::Type* ret,
                         std::vector<llvm::Type*> params) {
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(ret, params, false),
                                      llvm::GlobalValue::ExternalLinkage, name, m_);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn));
    return fn;
  }

  void constant_fn(const std::string& name, llvm::Constant* value) {
    define(name, value->getType(), {});
    b_.CreateRet(value);
  }

  // `name(i32 i)`: values[i], or `fallback` when i is out of range.
  void table_fn(const std::string& name, llvm::Type* elem,
                const std::vector<llvm::Constant*>& values, llvm::Constant* fallback) {
    auto* ty = llvm::ArrayType::get(elem, values.size());
    auto* gv = new llvm::GlobalVariable(m_, ty, true, llvm::GlobalValue::PrivateLinkage,
                                        llvm::ConstantArray::get(ty, values), name + ".table");
    llvm::Function* fn = define(name, elem, {b_.getInt32Ty()});
    llvm::Value* i = fn->getArg(0);
    llvm::Value* in_range = b_.CreateICmpULT(i, b_.getInt32(static_cast<uint32_t>(values.size())));
    auto* yes = llvm::BasicBlock::Create(ctx_, "in_range", fn);
    auto* no = llvm::BasicBlock::Create(ctx_, "out_of_range", fn);
    b_.CreateCondBr(in_range, yes, no);
    b_.SetInsertPoint(no);
    b_.CreateRet(fallback);
    b_.SetInsertPoint(yes);
    llvm::Value* p =
        b_.CreateInBoundsGEP(ty, gv, {b_.getInt64(0), b_.CreateZExt(i, b_.getInt64Ty())});
    b_.CreateRet(b_.CreateLoad(elem, p));
  }

  // A shape's dimensions as a read-only int64 array (a valid pointer even for rank 0).
  llvm::GlobalVariable* shape_global(const std::vector<int64_t>& shape, const std::string& name) {
    std::vector<uint64_t> dims(shape.begin(), shape.end());
    if (dims.empty()) dims.push_back(1);
    llvm::Constant* init = llvm::ConstantDataArray::get(ctx_, dims);
    return new llvm::GlobalVariable(m_, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, name);
  }

  void tensor_table(const std::string& role, const std::vector<EntryTensor>& ts) {
    std::vector<llvm::Constant*> names, ndims, shapes, dtypes;
    for (const EntryTensor& t : ts) {
      names.push_back(b_.CreateGlobalString(t.name, "tf_" + role + "_name", 0, &m_));
      ndims.push_back(b_.getInt32(static_cast<uint32_t>(t.shape.size())));
      dtypes.push_back(b_.getInt32(static_cast<uint32_t>(t.dtype)));
      shapes.push_back(shape_global(t.shape, "tf_" + role + "_shape"));
    }
    constant_fn("tf_model_num_" + role + "s", b_.getInt32(static_cast<uint32_t>(ts.size())));
    llvm::PointerType* ptr = b_.getPtrTy();
    if (ts.empty()) return;
    table_fn("tf_model_" + role + "_name", ptr, names, llvm::ConstantPointerNull::get(ptr));
    table_fn("tf_model_" + role + "_ndim", b_.getInt32Ty(), ndims,
             b_.getInt32(static_cast<uint32_t>(-1)));
    table_fn("tf_model_" + role + "_shape", ptr, shapes, llvm::ConstantPointerNull::get(ptr));
    table_fn("tf_model_" + role + "_dtype", b_.getInt32Ty(), dtypes, b_.getInt32(static_cast<uint32_t>(-1)));
  }

  // A loop over i in [0, n) (n > 0) whose body `body(i)` emits; the body may branch out
  // (convert_input_loop's range check) as long as it ends in the block it continues in.
  void loop(const std::string& name, uint64_t n, const std::function<void(llvm::Value*)>& body) {
    llvm::Function* fn = b_.GetInsertBlock()->getParent();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx_, name, fn);
    auto* done = llvm::BasicBlock::Create(ctx_, name + ".done", fn);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i");
    i->addIncoming(b_.getInt64(0), pre);
    body(i);
    llvm::Value* next = b_.CreateAdd(i, b_.getInt64(1));
    i->addIncoming(next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpULT(next, b_.getInt64(n)), head, done);
    b_.SetInsertPoint(done);
  }

  // out[i] = convert(from[i]) for i < n: float32 to the output's type.
  void convert_loop(llvm::Value* out, llvm::Value* from, uint64_t n, EntryType type) {
    loop("convert", n, [&](llvm::Value* i) {
      llvm::Value* x =
          b_.CreateLoad(b_.getFloatTy(), b_.CreateInBoundsGEP(b_.getFloatTy(), from, i));
      if (type == EntryType::Int64) {
        llvm::Type* elem = b_.getInt64Ty();
        llvm::Value* v =
            b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {elem, b_.getFloatTy()}, {x});
        b_.CreateStore(v, b_.CreateInBoundsGEP(elem, out, i));
      } else {
        llvm::Value* v = b_.CreateZExt(
            b_.CreateFCmpUNE(x, llvm::ConstantFP::get(b_.getFloatTy(), 0.0)), b_.getInt8Ty());
        b_.CreateStore(v, b_.CreateInBoundsGEP(b_.getInt8Ty(), out, i));
      }
    });
  }

  // to[i] = float(from[i]) for i < n: an int64 input (branching to `bad` when one is beyond
  // +-kRunnerMaxExactInt) or a bool's byte as 0 / 1.
  void convert_input_loop(llvm::Value* to, llvm::Value* from, uint64_t n, EntryType type,
                          llvm::BasicBlock* bad) {
    loop("convert_input", n, [&](llvm::Value* i) {
      llvm::Value* v;
      if (type == EntryType::Int64) {
        llvm::Value* x =
            b_.CreateLoad(b_.getInt64Ty(), b_.CreateInBoundsGEP(b_.getInt64Ty(), from, i));
        // x + 2^24 in [0, 2^25] as unsigned: one compare for both bounds.
        llvm::Value* shifted =
            b_.CreateAdd(x, b_.getInt64(static_cast<uint64_t>(kRunnerMaxExactInt)));
        llvm::Value* ok =
            b_.CreateICmpULE(shifted, b_.getInt64(2 * static_cast<uint64_t>(kRunnerMaxExactInt)));
        auto* good =
            llvm::BasicBlock::Create(ctx_, "input_in_range", b_.GetInsertBlock()->getParent());
        b_.CreateCondBr(ok, good, bad);
        b_.SetInsertPoint(good);
        v = b_.CreateSIToFP(x, b_.getFloatTy());
      } else {
        llvm::Value* x =
            b_.CreateLoad(b_.getInt8Ty(), b_.CreateInBoundsGEP(b_.getInt8Ty(), from, i));
        v = b_.CreateUIToFP(b_.CreateICmpNE(x, b_.getInt8(0)), b_.getFloatTy());
      }
      b_.CreateStore(v, b_.CreateInBoundsGEP(b_.getFloatTy(), to, i));
    });
  }

  // The run of one bucket, `name(inputs, outputs, workspace)`; a workspace it allocates has
  // `workspace_bytes` (the largest bucket's: one cache serves them all).
  llvm::Function* run(const EntrySpec& s, const std::string& name, int64_t workspace_bytes,
                      int64_t first_call) {
    llvm::PointerType* ptr = b_.getPtrTy();
    llvm::Function* slice = image_function(s, name + "_image", first_call);
    llvm::Function* fn = define(name, b_.getInt32Ty(), {ptr, ptr, ptr});
    llvm::Value *inputs = fn->getArg(0), *outputs = fn->getArg(1), *given = fn->getArg(2);
    llvm::FunctionCallee alloc = m_.getOrInsertFunction(
        "aligned_alloc", llvm::FunctionType::get(ptr, {b_.getInt64Ty(), b_.getInt64Ty()}, false));
    llvm::FunctionCallee release =
        m_.getOrInsertFunction("free", llvm::FunctionType::get(b_.getVoidTy(), {ptr}, false));
    llvm::BasicBlock* entry = b_.GetInsertBlock();
    auto* allocate = llvm::BasicBlock::Create(ctx_, "allocate", fn);
    auto* oom = llvm::BasicBlock::Create(ctx_, "out_of_memory", fn);
    auto* body = llvm::BasicBlock::Create(ctx_, "body", fn);
    bool need = s.workspace_bytes > 0;
    b_.CreateCondBr(need ? b_.CreateIsNull(given) : b_.getFalse(), allocate, body);
    // Without a caller's workspace, the one of the last call is taken (an atomic exchange, so
    // concurrent calls each get their own) or a new one allocated, and given back at the end:
    // allocating megabytes on every call costs a page fault per page per call (ResNet-18's
    // 3.8 MB: 28 ms a call became 42 in a Python process). Freed at unload.
    auto* null = llvm::ConstantPointerNull::get(ptr);
    llvm::GlobalVariable* cache = cache_;
    b_.SetInsertPoint(allocate);
    llvm::Value* cached = exchange_kept_buffer(b_, cache, nullptr);
    auto* fresh_bb = llvm::BasicBlock::Create(ctx_, "allocate_fresh", fn);
    auto* got = llvm::BasicBlock::Create(ctx_, "got_workspace", fn);
    b_.CreateCondBr(b_.CreateIsNull(cached), fresh_bb, got);
    b_.SetInsertPoint(fresh_bb);
    uint64_t bytes = (static_cast<uint64_t>(workspace_bytes) + kAlign - 1) / kAlign * kAlign;
    llvm::Value* fresh =
        b_.CreateCall(alloc, {b_.getInt64(kAlign), b_.getInt64(std::max<uint64_t>(bytes, kAlign))});
    b_.CreateCondBr(b_.CreateIsNull(fresh), oom, got);
    b_.SetInsertPoint(got);
    llvm::PHINode* taken = b_.CreatePHI(ptr, 2, "taken");
    taken->addIncoming(cached, allocate);
    taken->addIncoming(fresh, fresh_bb);
    b_.CreateBr(body);
    b_.SetInsertPoint(oom);
    b_.CreateRet(b_.getInt32(static_cast<uint32_t>(-1)));
    b_.SetInsertPoint(body);
    llvm::PHINode* ws = b_.CreatePHI(ptr, 2, "workspace");
    ws->addIncoming(given, entry);
    ws->addIncoming(taken, got);
    llvm::PHINode* owned = b_.CreatePHI(ptr, 2, "owned");
    owned->addIncoming(null, entry);
    owned->addIncoming(taken, got);
    llvm::Value* status = s.images == 1 ? b_.CreateCall(slice, {inputs, outputs, ws, b_.getInt64(0)})
                                        : run_images(s, slice, inputs, outputs, ws);
    // Gives the workspace this call took back to the cache (freeing the one a concurrent call
    // left there); nothing when the caller gave one.
    auto* back = llvm::BasicBlock::Create(ctx_, "give_back", fn);
    auto* done = llvm::BasicBlock::Create(ctx_, "given_back", fn);
    b_.CreateCondBr(b_.CreateIsNull(owned), done, back);
    b_.SetInsertPoint(back);
    b_.CreateCall(release, {exchange_kept_buffer(b_, cache, owned)});
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    b_.CreateRet(status);
    return fn;
  }

  // The images of a bucket that runs one image at a time (EntrySpec::images): on a team of
  // threads, each image whole on one thread with a workspace slot of its own (the pool's job
  // claims chunks of images; a kernel called inside runs on its thread alone, the pool being
  // busy); else one after another on slot 0, each kernel on the team. The team takes the
  // images where there are at least as many images as threads and a slot for each thread.
  // Returns the first failure's status (0: none).
  llvm::Value* run_images(const EntrySpec& s, llvm::Function* slice, llvm::Value* inputs, llvm::Value* outputs,
                          llvm::Value* ws) {
    llvm::Function* fn = b_.GetInsertBlock()->getParent();
    llvm::Type* i32 = b_.getInt32Ty();
    llvm::Type* i64 = b_.getInt64Ty();
    const auto images = static_cast<uint64_t>(s.images);
    const auto slots = static_cast<uint32_t>(std::max<int64_t>(s.image_slots, 1));
    auto* serial = llvm::BasicBlock::Create(ctx_, "images_serial", fn);
    auto* serial_next = llvm::BasicBlock::Create(ctx_, "images_serial_next", fn);
    auto* team = llvm::BasicBlock::Create(ctx_, "images_team", fn);
    auto* done = llvm::BasicBlock::Create(ctx_, "images_done", fn);
    llvm::BasicBlock* start = b_.GetInsertBlock();
    llvm::Value* threads = b_.CreateCall(m_.getOrInsertFunction("omp_get_max_threads", llvm::FunctionType::get(i32, false)));
    llvm::Value* by_team = b_.CreateAnd(
        b_.CreateICmpSGT(threads, b_.getInt32(1)),
        b_.CreateAnd(b_.CreateICmpULE(b_.CreateZExt(threads, i64), b_.getInt64(images)),
                     b_.CreateICmpULE(threads, b_.getInt32(slots))));
    b_.CreateCondBr(by_team, team, serial);
    // One after another.
    b_.SetInsertPoint(serial);
    llvm::PHINode* image = b_.CreatePHI(i64, 2, "image");
    image->addIncoming(b_.getInt64(0), start);
    llvm::Value* one = b_.CreateCall(slice, {inputs, outputs, ws, image});
    b_.CreateCondBr(b_.CreateICmpNE(one, b_.getInt32(0)), done, serial_next);
    b_.SetInsertPoint(serial_next);
    llvm::Value* next = b_.CreateAdd(image, b_.getInt64(1), "next_image", true, true);
    image->addIncoming(next, serial_next);
    b_.CreateCondBr(b_.CreateICmpULT(next, b_.getInt64(images)), serial, done);
    // On the team: the job's context {inputs, outputs, workspace, status, slot flags}.
    b_.SetInsertPoint(team);
    llvm::StructType* context = image_context_type(slots);
    llvm::Value* c = b_.CreateAlloca(context);
    b_.CreateStore(inputs, b_.CreateStructGEP(context, c, 0));
    b_.CreateStore(outputs, b_.CreateStructGEP(context, c, 1));
    b_.CreateStore(ws, b_.CreateStructGEP(context, c, 2));
    b_.CreateStore(b_.getInt32(0), b_.CreateStructGEP(context, c, 3));
    b_.CreateMemSet(b_.CreateStructGEP(context, c, 4), b_.getInt8(0), 4 * slots, llvm::MaybeAlign(4));
    b_.CreateCall(parallel_launch_function(m_, target_), {image_job(s, slice, context, slots), c});
    llvm::LoadInst* failed = b_.CreateAlignedLoad(i32, b_.CreateStructGEP(context, c, 3), llvm::Align(4));
    failed->setAtomic(llvm::AtomicOrdering::Acquire);
    llvm::BasicBlock* team_end = b_.GetInsertBlock();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    llvm::PHINode* status = b_.CreatePHI(i32, 3, "images_status");
    status->addIncoming(one, serial);
    status->addIncoming(b_.getInt32(0), serial_next);
    status->addIncoming(failed, team_end);
    return status;
  }

  llvm::StructType* image_context_type(uint32_t slots) {
    llvm::PointerType* ptr = b_.getPtrTy();
    return llvm::StructType::get(ctx_, {ptr, ptr, ptr, b_.getInt32Ty(), llvm::ArrayType::get(b_.getInt32Ty(), slots)});
  }

  // The pool's job `void job(ptr context, i32 chunk, i32 chunks)`: images [chunk N / chunks,
  // (chunk + 1) N / chunks), on a workspace slot it claims (a flag it swaps from 0 to 1; at
  // most as many chunks run at once as the team has threads, and the team has no more threads
  // than slots); stops at the first failure (its status in the context, the first written).
  llvm::Function* image_job(const EntrySpec& s, llvm::Function* slice, llvm::StructType* context, uint32_t slots) {
    llvm::IRBuilderBase::InsertPointGuard keep(b_);
    llvm::PointerType* ptr = b_.getPtrTy();
    llvm::Type* i32 = b_.getInt32Ty();
    llvm::Type* i64 = b_.getInt64Ty();
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), {ptr, i32, i32}, false),
                                      llvm::GlobalValue::InternalLinkage, slice->getName() + "_job", m_);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn);
    auto* claim = llvm::BasicBlock::Create(ctx_, "claim", fn);
    auto* try_slot = llvm::BasicBlock::Create(ctx_, "try_slot", fn);
    auto* next_slot = llvm::BasicBlock::Create(ctx_, "next_slot", fn);
    auto* none_free = llvm::BasicBlock::Create(ctx_, "none_free", fn);
    auto* claimed = llvm::BasicBlock::Create(ctx_, "claimed", fn);
    auto* image_bb = llvm::BasicBlock::Create(ctx_, "image", fn);
    auto* ran = llvm::BasicBlock::Create(ctx_, "ran", fn);
    auto* fail = llvm::BasicBlock::Create(ctx_, "fail", fn);
    auto* release = llvm::BasicBlock::Create(ctx_, "release", fn);
    auto* out = llvm::BasicBlock::Create(ctx_, "out", fn);
    b_.SetInsertPoint(entry);
    llvm::Value* c = fn->getArg(0);
    llvm::Value* chunk = b_.CreateZExt(fn->getArg(1), i64);
    llvm::Value* chunks = b_.CreateZExt(fn->getArg(2), i64);
    llvm::Value* n = b_.getInt64(static_cast<uint64_t>(s.images));
    llvm::Value* begin = b_.CreateUDiv(b_.CreateMul(chunk, n), chunks);
    llvm::Value* end = b_.CreateUDiv(b_.CreateMul(b_.CreateAdd(chunk, b_.getInt64(1)), n), chunks);
    llvm::Value* status_at = b_.CreateStructGEP(context, c, 3);
    b_.CreateCondBr(b_.CreateICmpULT(begin, end), claim, out);
    // A free slot: the first flag swapped from 0 to 1 (yielding the CPU when none is free).
    b_.SetInsertPoint(claim);
    b_.CreateBr(try_slot);
    b_.SetInsertPoint(try_slot);
    llvm::PHINode* k = b_.CreatePHI(i32, 2, "slot");
    k->addIncoming(b_.getInt32(0), claim);
    llvm::Value* flag = b_.CreateGEP(context, c, {b_.getInt32(0), b_.getInt32(4), k});
    llvm::Value* swapped = b_.CreateAtomicCmpXchg(flag, b_.getInt32(0), b_.getInt32(1), llvm::MaybeAlign(4),
                                                  llvm::AtomicOrdering::Acquire, llvm::AtomicOrdering::Monotonic);
    b_.CreateCondBr(b_.CreateExtractValue(swapped, 1), claimed, next_slot);
    b_.SetInsertPoint(next_slot);
    llvm::Value* k1 = b_.CreateAdd(k, b_.getInt32(1));
    k->addIncoming(k1, next_slot);
    b_.CreateCondBr(b_.CreateICmpULT(k1, b_.getInt32(slots)), try_slot, none_free);
    b_.SetInsertPoint(none_free);
    b_.CreateCall(m_.getOrInsertFunction("sched_yield", llvm::FunctionType::get(i32, false)));
    b_.CreateBr(claim);
    b_.SetInsertPoint(claimed);
    llvm::LoadInst* base = b_.CreateLoad(ptr, b_.CreateStructGEP(context, c, 2));
    llvm::Value* ws = b_.CreateInBoundsGEP(b_.getInt8Ty(), base,
                                           b_.CreateMul(b_.CreateZExt(k, i64), b_.getInt64(static_cast<uint64_t>(s.slot_bytes))));
    llvm::Value* inputs = b_.CreateLoad(ptr, b_.CreateStructGEP(context, c, 0));
    llvm::Value* outputs = b_.CreateLoad(ptr, b_.CreateStructGEP(context, c, 1));
    b_.CreateBr(image_bb);
    b_.SetInsertPoint(image_bb);
    llvm::PHINode* image = b_.CreatePHI(i64, 2, "image");
    image->addIncoming(begin, claimed);
    llvm::Value* st = b_.CreateCall(slice, {inputs, outputs, ws, image});
    b_.CreateCondBr(b_.CreateICmpEQ(st, b_.getInt32(0)), ran, fail);
    b_.SetInsertPoint(ran);
    llvm::Value* next = b_.CreateAdd(image, b_.getInt64(1), "next_image", true, true);
    image->addIncoming(next, ran);
    b_.CreateCondBr(b_.CreateICmpULT(next, end), image_bb, release);
    b_.SetInsertPoint(fail);
    b_.CreateAtomicCmpXchg(status_at, b_.getInt32(0), st, llvm::MaybeAlign(4), llvm::AtomicOrdering::Release,
                           llvm::AtomicOrdering::Monotonic);
    b_.CreateBr(release);
    b_.SetInsertPoint(release);
    b_.CreateAlignedStore(b_.getInt32(0), flag, llvm::Align(4))->setAtomic(llvm::AtomicOrdering::Release);
    b_.CreateBr(out);
    b_.SetInsertPoint(out);
    b_.CreateRetVoid();
    return fn;
  }

  // `i32 name(ptr inputs, ptr outputs, ptr workspace, i64 image)`: the conversions, calls and
  // copies of slice `image` of every input and output (the whole tensors where the bucket has
  // one image), on `workspace`: 0; -1 when memory ran out, -2 for an int64 input out of range.
  // Its calls are the library's calls first_call, first_call + 1, ... (profiler_tables).
  llvm::Function* image_function(const EntrySpec& s, const std::string& name, int64_t first_call) {
    llvm::PointerType* ptr = b_.getPtrTy();
    auto* fn = llvm::Function::Create(
        llvm::FunctionType::get(b_.getInt32Ty(), {ptr, ptr, ptr, b_.getInt64Ty()}, false),
        llvm::GlobalValue::InternalLinkage, name, m_);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn));
    llvm::Value *inputs = fn->getArg(0), *outputs = fn->getArg(1), *ws = fn->getArg(2), *image = fn->getArg(3);
    auto* failed = llvm::BasicBlock::Create(ctx_, "failed", fn);
    std::map<int64_t, uint64_t> converted;  // input -> workspace offset of its float32 copy
    for (const EntryInputConversion& c : s.conversions)
      converted[c.input] = static_cast<uint64_t>(c.workspace_offset);
    TF_CHECK(s.images >= 1, "run: ", s.images, " images");
    // Elements of one slice of a table's tensor.
    auto slice_elements = [&](const EntryTensor& t) {
      uint64_t n = 1;
      for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
      return n / static_cast<uint64_t>(s.images);
    };
    auto sliced = [&](llvm::Value* base, const EntryTensor& t) -> llvm::Value* {
      if (s.images == 1) return base;
      const uint64_t bytes = slice_elements(t) * entry_type_bytes(t.dtype);
      return b_.CreateInBoundsGEP(b_.getInt8Ty(), base, b_.CreateMul(image, b_.getInt64(bytes)));
    };
    auto buffer = [&](const EntryBuffer& r) -> llvm::Value* {
      switch (r.kind) {
        case EntryBuffer::Kind::Input:
          if (auto it = converted.find(r.index); it != converted.end())
            return b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), ws, it->second);
          return sliced(b_.CreateLoad(
              ptr, b_.CreateConstInBoundsGEP1_64(ptr, inputs, static_cast<uint64_t>(r.index))),
              s.inputs.at(static_cast<size_t>(r.index)));
        case EntryBuffer::Kind::Output:
          return sliced(b_.CreateLoad(
              ptr, b_.CreateConstInBoundsGEP1_64(ptr, outputs, static_cast<uint64_t>(r.index))),
              s.outputs.at(static_cast<size_t>(r.index)));
        case EntryBuffer::Kind::Constant:
          return constants_.at(static_cast<size_t>(r.index));
        case EntryBuffer::Kind::Workspace:
          return b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), ws, static_cast<uint64_t>(r.index));
      }
      return nullptr;
    };
    if (!s.conversions.empty()) {
      auto* bad = llvm::BasicBlock::Create(ctx_, "input_out_of_range", fn);
      for (const EntryInputConversion& c : s.conversions) {
        const EntryTensor& t = s.inputs.at(static_cast<size_t>(c.input));
        const uint64_t n = slice_elements(t);
        llvm::Value* from = sliced(b_.CreateLoad(
            ptr, b_.CreateConstInBoundsGEP1_64(ptr, inputs, static_cast<uint64_t>(c.input))), t);
        llvm::Value* to = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), ws,
                                                        static_cast<uint64_t>(c.workspace_offset));
        if (n > 0) convert_input_loop(to, from, n, t.dtype, bad);
      }
      llvm::BasicBlock* resume = b_.GetInsertBlock();
      b_.SetInsertPoint(bad);
      b_.CreateRet(b_.getInt32(static_cast<uint32_t>(-2)));
      b_.SetInsertPoint(resume);
    }
    // The profiler, read once a run (tf_model_set_profiler).
    llvm::LoadInst* profiler = b_.CreateAlignedLoad(ptr, profiler_, llvm::Align(8), "profiler");
    profiler->setAtomic(llvm::AtomicOrdering::Acquire);
    llvm::LoadInst* profiler_ctx =
        b_.CreateAlignedLoad(ptr, profiler_ctx_, llvm::Align(8), "profiler_ctx");
    profiler_ctx->setAtomic(llvm::AtomicOrdering::Monotonic);
    llvm::Value* profiling = b_.CreateIsNotNull(profiler);
    llvm::FunctionType* hook_type =
        llvm::FunctionType::get(b_.getVoidTy(), {ptr, b_.getInt32Ty(), b_.getInt32Ty()}, false);
    auto tell_profiler = [&](int64_t call, int end) {
      auto* tell = llvm::BasicBlock::Create(ctx_, end ? "profile_end" : "profile_start", fn);
      auto* on = llvm::BasicBlock::Create(ctx_, end ? "profiled_end" : "profiled_start", fn);
      b_.CreateCondBr(profiling, tell, on);
      b_.SetInsertPoint(tell);
      b_.CreateCall(hook_type, profiler,
                    {profiler_ctx, b_.getInt32(static_cast<uint32_t>(call)),
                     b_.getInt32(static_cast<uint32_t>(end))});
      b_.CreateBr(on);
      b_.SetInsertPoint(on);
    };
    for (size_t k = 0; k < s.calls.size(); ++k) {
      const EntryCall& c = s.calls[k];
      std::vector<llvm::Type*> params(c.args.size(), ptr);
      llvm::FunctionCallee kernel = m_.getOrInsertFunction(
          c.function, llvm::FunctionType::get(b_.getInt32Ty(), params, false));
      std::vector<llvm::Value*> args;
      for (const EntryBuffer& a : c.args) args.push_back(buffer(a));
      tell_profiler(first_call + static_cast<int64_t>(k), 0);
      llvm::Value* status = b_.CreateCall(kernel, args);
      tell_profiler(first_call + static_cast<int64_t>(k), 1);
      auto* next = llvm::BasicBlock::Create(ctx_, "after_" + c.function, fn);
      b_.CreateCondBr(b_.CreateICmpNE(status, b_.getInt32(0)), failed, next);
      b_.SetInsertPoint(next);
    }
    for (const EntryCopy& c : s.copies) {
      const EntryTensor& t = s.outputs.at(static_cast<size_t>(c.output));
      const uint64_t n = slice_elements(t);
      llvm::Value* out = buffer({EntryBuffer::Kind::Output, c.output});
      if (!c.literal.empty()) {
        llvm::Constant* init = llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<uint8_t>(c.literal));
        auto* gv = new llvm::GlobalVariable(m_, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init,
                                            "tf_output_literal");
        gv->setAlignment(llvm::Align(8));
        b_.CreateMemCpy(out, llvm::MaybeAlign(1), gv, llvm::MaybeAlign(8), c.literal.size());
      } else if (t.dtype == EntryType::Float32) {
        b_.CreateMemCpy(out, llvm::MaybeAlign(4), buffer(c.from), llvm::MaybeAlign(4), 4 * n);
      } else if (t.dtype == EntryType::Float16 || t.dtype == EntryType::BFloat16) {
        // From a buffer of the same type: the kernels write these outputs
        // (graph/model_compiler.cc).
        b_.CreateMemCpy(out, llvm::MaybeAlign(2), buffer(c.from), llvm::MaybeAlign(2), 2 * n);
      } else if (n > 0) {
        convert_loop(out, buffer(c.from), n, t.dtype);
      }
    }
    b_.CreateRet(b_.getInt32(0));
    b_.SetInsertPoint(failed);
    b_.CreateRet(b_.getInt32(static_cast<uint32_t>(-1)));
    return fn;
  }

  // `name`: `run` with denormals flushed to zero, the caller's floating-point control given
  // back after it (compiler/fp_control.h); `run` becomes internal.
  llvm::Function* flushing_denormals(llvm::Function* run, const std::string& name) {
    run->setLinkage(llvm::GlobalValue::InternalLinkage);
    std::vector<llvm::Type*> params;
    for (llvm::Argument& a : run->args()) params.push_back(a.getType());
    llvm::Function* fn = define(name, run->getReturnType(), params);
    std::vector<llvm::Value*> args;
    for (llvm::Argument& a : fn->args()) args.push_back(&a);
    llvm::Value* callers = fp_control_.read(b_, m_);
    if (callers) fp_control_.write(b_, m_, fp_control_.flushing_denormals(b_, callers));
    llvm::Value* status = b_.CreateCall(run, args);
    if (callers) fp_control_.write(b_, m_, callers);
    b_.CreateRet(status);
    return fn;
  }

  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  FpControl fp_control_;
  const Target& target_;
  std::vector<llvm::GlobalVariable*> constants_;  // the bucket being emitted's, by its index
  llvm::GlobalVariable* cache_ = nullptr;
  llvm::GlobalVariable *profiler_ = nullptr, *profiler_ctx_ = nullptr;  // profiler_tables
  llvm::Function* padded_of_ = nullptr;  // tf_model_padded_bucket_of (bucket_tables)
};

// The launch plan, blob and constants of runtime/gpu_model/plan.h.
struct GpuPlanData {
  std::vector<int64_t> plan;
  std::string blob, constants;
};

// The plans of `buckets` (one each, back to back), whose calls are `gpu.calls` in order, and
// the blob and constants they share: modules, kernel names and constants each once.
GpuPlanData encode_gpu_plans(const std::vector<EntrySpec>& buckets, const GpuEntrySpec& gpu) {
  size_t calls = 0;
  for (const EntrySpec& s : buckets) calls += s.calls.size();
  TF_CHECK(gpu.calls.size() == calls, "codegen_gpu_model_entry: ", gpu.calls.size(),
           " GPU calls for ", calls, " calls");
  TF_CHECK(!buckets.empty() && buckets.size() <= TF_GPU_MAX_PLANS,
           "codegen_gpu_model_entry: ", buckets.size(), " buckets");
  TF_CHECK(kind_info(gpu.platform).gpu, "codegen_gpu_model_entry: platform ", kind_name(gpu.platform));
  GpuPlanData d;
  auto blob = [&](const std::string& bytes, bool terminate) {
    auto at = static_cast<int64_t>(d.blob.size());
    d.blob += bytes;
    if (terminate) d.blob.push_back('\0');
    return at;
  };
  std::vector<int64_t> module_at;
  for (const std::string& m : gpu.modules)
    module_at.push_back(blob(m, gpu.platform == TargetKind::Cuda));
  std::map<std::string, int64_t> name_at;
  auto name = [&](const std::string& n) {
    auto [it, fresh] = name_at.emplace(n, 0);
    if (fresh) it->second = blob(n, true);
    return it->second;
  };
  std::unordered_map<std::string_view, int64_t> constant_bytes_at;  // by content
  std::vector<size_t> plan_at;
  size_t first_call = 0;
  for (const EntrySpec& s : buckets) {
    std::vector<int64_t> p(TF_GPU_PLAN_HEADER_WORDS, 0);
    std::vector<int64_t> constant_at;
    for (const std::vector<float>* c : s.constants) {
      auto [it, fresh] = constant_bytes_at.emplace(
          std::string_view(reinterpret_cast<const char*>(c->data()), c->size() * sizeof(float)), 0);
      if (fresh) {
        d.constants.resize((d.constants.size() + TF_GPU_CONSTANT_ALIGN - 1) /
                           TF_GPU_CONSTANT_ALIGN * TF_GPU_CONSTANT_ALIGN);
        it->second = static_cast<int64_t>(d.constants.size());
        d.constants.append(it->first);
      }
      constant_at.push_back(it->second);
    }
    auto elements = [](const EntryTensor& t) {
      int64_t n = 1;
      for (int64_t x : t.shape) n *= x;
      return n;
    };
    for (const std::vector<EntryTensor>* side : {&s.inputs, &s.outputs}) {
      for (const EntryTensor& t : *side)
        p.insert(p.end(), {elements(t), static_cast<int64_t>(t.dtype)});
    }
    for (size_t m = 0; m < gpu.modules.size(); ++m)
      p.insert(p.end(), {module_at[m], static_cast<int64_t>(gpu.modules[m].size())});
    std::map<int64_t, int64_t> converted;  // input -> arena offset of its float32 copy
    for (const EntryInputConversion& c : s.conversions) converted[c.input] = c.workspace_offset;
    auto arg = [&](const EntryBuffer& r) -> std::array<int64_t, 2> {
      switch (r.kind) {
        case EntryBuffer::Kind::Input:
          if (auto it = converted.find(r.index); it != converted.end())
            return {TF_GPU_ARG_ARENA, it->second};
          return {TF_GPU_ARG_INPUT, r.index};
        case EntryBuffer::Kind::Output:
          return {TF_GPU_ARG_OUTPUT, r.index};
        case EntryBuffer::Kind::Constant:
          return {TF_GPU_ARG_CONSTANT, constant_at.at(static_cast<size_t>(r.index))};
        case EntryBuffer::Kind::Workspace:
          return {TF_GPU_ARG_ARENA, r.index};
      }
      return {};
    };
    int64_t launches = 0;
    for (size_t c = 0; c < s.calls.size(); ++c) {
      const GpuEntryCall& g = gpu.calls[first_call + c];
      TF_CHECK(g.module >= 0 && g.module < static_cast<int64_t>(gpu.modules.size()),
               "codegen_gpu_model_entry: call ", first_call + c, " of module ", g.module);
      for (const GpuEntryKernel& k : g.kernels) {
        p.insert(p.end(),
                 {g.module, name(k.function), k.grid[0], k.grid[1], k.grid[2], k.block[0],
                  k.block[1], k.block[2], k.dynamic_shared_bytes,
                  static_cast<int64_t>(s.calls[c].args.size() + g.workspace_offsets.size())});
        for (const EntryBuffer& a : s.calls[c].args) {
          std::array<int64_t, 2> w = arg(a);
          p.insert(p.end(), w.begin(), w.end());
        }
        for (int64_t off : g.workspace_offsets) p.insert(p.end(), {TF_GPU_ARG_ARENA, off});
        ++launches;
      }
    }
    first_call += s.calls.size();
    for (const EntryInputConversion& c : s.conversions)
      p.insert(p.end(), {c.input, c.workspace_offset});
    for (const EntryCopy& c : s.copies) {
      std::array<int64_t, 2> from = c.literal.empty() ? arg(c.from) : std::array<int64_t, 2>{0, 0};
      int64_t literal = -1;
      if (!c.literal.empty())
        literal = blob(std::string(c.literal.begin(), c.literal.end()), false);
      p.insert(p.end(),
               {from[0], from[1], c.output, literal, static_cast<int64_t>(c.literal.size())});
    }
    p[TF_GPU_PLAN_MAGIC_WORD] = TF_GPU_PLAN_MAGIC;
    p[TF_GPU_PLAN_PLATFORM] =
        gpu.platform == TargetKind::Cuda ? TF_GPU_PLATFORM_CUDA : TF_GPU_PLATFORM_ROCM;
    p[TF_GPU_PLAN_INPUTS] = static_cast<int64_t>(s.inputs.size());
    p[TF_GPU_PLAN_OUTPUTS] = static_cast<int64_t>(s.outputs.size());
    p[TF_GPU_PLAN_MODULES] = static_cast<int64_t>(gpu.modules.size());
    p[TF_GPU_PLAN_LAUNCHES] = launches;
    p[TF_GPU_PLAN_CONVERSIONS] = static_cast<int64_t>(s.conversions.size());
    p[TF_GPU_PLAN_COPIES] = static_cast<int64_t>(s.copies.size());
    p[TF_GPU_PLAN_ARENA_BYTES] = s.workspace_bytes;
    p[TF_GPU_PLAN_WORDS] = static_cast<int64_t>(p.size());
    plan_at.push_back(d.plan.size());
    d.plan.insert(d.plan.end(), p.begin(), p.end());
  }
  // The shared sections' sizes, known once every plan is written.
  for (size_t at : plan_at) {
    d.plan[at + TF_GPU_PLAN_CONSTANT_BYTES] = static_cast<int64_t>(d.constants.size());
    d.plan[at + TF_GPU_PLAN_BLOB_BYTES] = static_cast<int64_t>(d.blob.size());
  }
  return d;
}

}  // namespace

// A module for `target` that `fill` defines, verified and emitted as object code.
static std::string emit_entry_object(const Target& target, const char* name, const std::function<void(EntryGen&)>& fill) {
  llvm::LLVMContext ctx;
  llvm::Module m(name, ctx);
  std::unique_ptr<llvm::TargetMachine> tm = make_target_machine(target);
  m.setTargetTriple(target.triple);
  m.setDataLayout(tm->createDataLayout());
  EntryGen gen(ctx, m, target);
  fill(gen);
  std::string errors;
  llvm::raw_string_ostream os(errors);
  TF_CHECK(!llvm::verifyModule(m, &os), name, ": code generation produced invalid LLVM IR: ", errors);
  return emit_object(m, *tm);
}

std::string codegen_gpu_model_entry(const std::vector<EntrySpec>& buckets, const GpuEntrySpec& gpu,
                                    const Target& host) {
  TF_CHECK(host.is_cpu(), "codegen_gpu_model_entry: the host is a CPU target, not ", host.str());
  GpuPlanData d = encode_gpu_plans(buckets, gpu);
  // One array: header, plan, blob, constants (runtime/gpu_model/plan.h).
  std::string image(TF_GPU_MODEL_HEADER_BYTES, '\0');
  std::memcpy(image.data(), TF_GPU_MODEL_MAGIC, 8);
  uint64_t header[6];
  auto append = [&](const std::string& bytes, size_t align, int field) {
    image.resize((image.size() + align - 1) / align * align);
    header[2 * field] = image.size();
    header[2 * field + 1] = bytes.size();
    image += bytes;
  };
  append(std::string(reinterpret_cast<const char*>(d.plan.data()), d.plan.size() * sizeof(int64_t)), 8, 0);
  append(d.blob, 8, 1);
  append(d.constants, TF_GPU_CONSTANT_ALIGN, 2);
  std::memcpy(image.data() + 8, header, sizeof header);
  return emit_entry_object(host, "tf_gpu_model", [&](EntryGen& gen) {
    gen.emit_tables(buckets.at(0), 0);
    gen.bucket_tables(buckets);
    gen.bytes_global("tf_gpu_model", image, TF_GPU_CONSTANT_ALIGN, TF_GPU_MODEL_SECTION);
  });
}

std::string codegen_model_entry(const std::vector<EntrySpec>& buckets, const Target& target) {
  TF_CHECK(target.is_cpu(), "codegen_model_entry: CPU targets only, not ", target.str());
  return emit_entry_object(target, "tf_model", [&](EntryGen& gen) { gen.emit(buckets); });
}

}  // namespace tf
