#include "compiler/thread_pool_ir.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsAArch64.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>

#include <array>
#include <string>

#include "compiler/fp_control.h"
#include "compiler/target.h"

namespace tf {
namespace {

constexpr const char* kLaunch = "tf_parallel_launch";
constexpr int kMaxThreads = 64;
// How long an idle worker spins before it sleeps, and how often it reads the clock.
constexpr int64_t kSpinNs = 200'000;
constexpr uint32_t kClockEvery = 256;
// Reads of the counter the launching thread makes before it yields its CPU between reads.
constexpr uint32_t kJoinSpins = 1024;
// Chunks of a parallel loop per thread of the team (thread_pool_ir.h): claimed one at a time.
constexpr int kChunksPerThread = 4;
// sizeof(pthread_mutex_t) and sizeof(pthread_cond_t) are at most 48 bytes on glibc's targets;
// all-zero bytes are their static initializers.
constexpr uint64_t kSyncBytes = 64;
constexpr int kClockMonotonic = 1;

class PoolEmitter {
 public:
  PoolEmitter(llvm::Module& m, const Target& t)
      : m_(m),
        ctx_(m.getContext()),
        arch_(t.arch_name()),
        fp_control_(t.arch_name()),
        b_(ctx_),
        i32_(b_.getInt32Ty()),
        i64_(b_.getInt64Ty()),
        ptr_(b_.getPtrTy()),
        intptr_(m.getDataLayout().getIntPtrType(ctx_)) {}

  llvm::Function* emit() {
    lock_ = global("tf_pool_lock", i32_);
    word_ = global("tf_pool_word", i64_);
    // One word a segment, each on a cache line of its own.
    segments_ = global("tf_pool_segments",
                       llvm::ArrayType::get(llvm::ArrayType::get(i64_, 8), kMaxThreads));
    done_ = global("tf_pool_done", i32_);
    sleepers_ = global("tf_pool_sleepers", i32_);
    job_fn_ = global("tf_pool_job_fn", ptr_);
    job_data_ = global("tf_pool_job_data", ptr_);
    job_n_ = global("tf_pool_job_n", i32_);
    created_ = global("tf_pool_created", i32_);
    cpus_ = global("tf_pool_cpus", i32_);
    if (fp_control_.exists()) job_fp_ = global("tf_pool_job_fp", fp_control_.type(b_));
    mutex_ = global("tf_pool_mutex", llvm::ArrayType::get(b_.getInt8Ty(), kSyncBytes));
    cond_ = global("tf_pool_cond", llvm::ArrayType::get(b_.getInt8Ty(), kSyncBytes));
    now_ = emit_now();
    work_ = emit_work();
    worker_ = emit_worker();
    forget_ = emit_forget();
    return emit_launch();
  }

 private:
  // Shared by every object of a library (the linker keeps one), each on a cache line of its
  // own so that the workers' spinning reads do not contend with the counters they write.
  llvm::GlobalVariable* global(const char* name, llvm::Type* t) {
    auto* g = new llvm::GlobalVariable(m_, t, false, llvm::GlobalValue::WeakAnyLinkage,
                                       llvm::Constant::getNullValue(t), name);
    g->setVisibility(llvm::GlobalValue::HiddenVisibility);
    g->setAlignment(llvm::Align(64));
    return g;
  }

  llvm::Function* function(
      const char* name, llvm::Type* ret, std::vector<llvm::Type*> args,
      llvm::GlobalValue::LinkageTypes linkage = llvm::GlobalValue::InternalLinkage) {
    auto* f = llvm::Function::Create(llvm::FunctionType::get(ret, args, false), linkage, name, m_);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    if (linkage != llvm::GlobalValue::InternalLinkage)
      f->setVisibility(llvm::GlobalValue::HiddenVisibility);
    return f;
  }

  llvm::FunctionCallee libc(const char* name, llvm::Type* ret, std::vector<llvm::Type*> args) {
    return m_.getOrInsertFunction(name, llvm::FunctionType::get(ret, args, false));
  }

  llvm::BasicBlock* block(const char* name, llvm::Function* f) {
    return llvm::BasicBlock::Create(ctx_, name, f);
  }

  // Blocks of `f` in the order named (a braced list is evaluated left to right).
  template <typename... Names>
  std::array<llvm::BasicBlock*, sizeof...(Names)> blocks(llvm::Function* f, Names... names) {
    return {block(names, f)...};
  }

  // Atomic accesses to the pool's globals, at the globals' own (cache-line) alignment.
  llvm::LoadInst* load_atomic(llvm::GlobalVariable* g, llvm::AtomicOrdering order) {
    llvm::LoadInst* l = b_.CreateAlignedLoad(g->getValueType(), g, g->getAlign());
    l->setAtomic(order);
    return l;
  }

  void store_atomic(llvm::Value* v, llvm::GlobalVariable* g, llvm::AtomicOrdering order) {
    b_.CreateAlignedStore(v, g, g->getAlign())->setAtomic(order);
  }

  // The generation in the job word's upper half.
  llvm::Value* generation(llvm::Value* word) {
    return b_.CreateTrunc(b_.CreateLShr(word, 32), i32_);
  }

  void add_atomic(llvm::GlobalVariable* g, int delta, llvm::AtomicOrdering order) {
    b_.CreateAtomicRMW(delta > 0 ? llvm::AtomicRMWInst::Add : llvm::AtomicRMWInst::Sub, g,
                       b_.getInt32(static_cast<uint32_t>(delta > 0 ? delta : -delta)),
                       g->getAlign(), order);
  }

  // A spin-wait hint: x86 `pause`, AArch64 `yield`; nothing elsewhere.
  void pause() {
    if (arch_ == "x86_64" || arch_ == "x86") {
      b_.CreateCall(llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_sse2_pause));
    } else if (arch_ == "aarch64") {
      b_.CreateCall(llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::aarch64_hint),
                    {b_.getInt32(1)});
    }
  }

  llvm::Value* min(llvm::Value* a, llvm::Value* b) {
    return b_.CreateSelect(b_.CreateICmpSLT(a, b), a, b);
  }

  // i64 tf_pool_now(): CLOCK_MONOTONIC in nanoseconds (struct timespec is two longs).
  llvm::Function* emit_now() {
    llvm::Function* f = function("tf_pool_now", i64_, {});
    b_.SetInsertPoint(block("entry", f));
    llvm::AllocaInst* ts = b_.CreateAlloca(intptr_, b_.getInt32(2));
    b_.CreateCall(libc("clock_gettime", i32_, {i32_, ptr_}), {b_.getInt32(kClockMonotonic), ts});
    llvm::Value* sec = b_.CreateSExt(b_.CreateLoad(intptr_, ts), i64_);
    llvm::Value* nsec =
        b_.CreateSExt(b_.CreateLoad(intptr_, b_.CreateConstGEP1_32(intptr_, ts, 1)), i64_);
    b_.CreateRet(b_.CreateAdd(b_.CreateMul(sec, b_.getInt64(1'000'000'000)), nsec));
    return f;
  }

  // The word of segment s: generation and next chunk of the chunks [4s, 4s + 4).
  llvm::Value* segment(llvm::Value* s) {
    return b_.CreateInBoundsGEP(segments_->getValueType(), segments_,
                                {b_.getInt32(0), s, b_.getInt32(0)});
  }

  // void tf_pool_work(i32 g, ptr fn, ptr data, i32 n, i32 self): runs chunks of generation g
  // until none is left or the generation has changed. The n chunks are n / 4 segments of 4,
  // one a thread of the team; thread `self` claims from its own segment first, then from the
  // next ones in turn (each claim one compare-and-swap of the segment's word, generation and
  // next chunk together). So thread t runs chunks [4t, 4t + 4) of every parallel loop unless
  // another thread was faster: the same part of each loop's range on the same core, call
  // after call. A claim that succeeds proves the job is still running, so the job fields
  // read after seeing g were g's: the launcher writes the next job's only after every chunk
  // of this one is done.
  llvm::Function* emit_work() {
    llvm::Function* f = function("tf_pool_work", b_.getVoidTy(), {i32_, ptr_, ptr_, i32_, i32_});
    llvm::Value* g = f->getArg(0);
    llvm::Value* n = f->getArg(3);
    auto [entry, segment_loop, claim, attempt, run, next_segment, out] =
        blocks(f, "entry", "segment", "claim", "attempt", "run", "segment.next", "out");
    b_.SetInsertPoint(entry);
    llvm::Value* count = b_.CreateUDiv(n, b_.getInt32(kChunksPerThread));
    b_.CreateBr(segment_loop);

    b_.SetInsertPoint(segment_loop);
    llvm::PHINode* i = b_.CreatePHI(i32_, 2);
    i->addIncoming(b_.getInt32(0), entry);
    llvm::Value* s = b_.CreateURem(b_.CreateAdd(f->getArg(4), i), count);
    llvm::Value* word = segment(s);
    llvm::Value* end = b_.CreateMul(b_.CreateAdd(s, b_.getInt32(1)), b_.getInt32(kChunksPerThread));
    b_.CreateBr(claim);

    b_.SetInsertPoint(claim);
    llvm::LoadInst* w = b_.CreateAlignedLoad(i64_, word, llvm::Align(64));
    w->setAtomic(llvm::AtomicOrdering::Acquire);
    llvm::Value* next = b_.CreateTrunc(w, i32_);
    b_.CreateCondBr(b_.CreateAnd(b_.CreateICmpEQ(generation(w), g), b_.CreateICmpULT(next, end)),
                    attempt, next_segment);
    b_.SetInsertPoint(attempt);
    llvm::Value* pair =
        b_.CreateAtomicCmpXchg(word, w, b_.CreateAdd(w, b_.getInt64(1)), llvm::Align(64),
                               llvm::AtomicOrdering::AcquireRelease, llvm::AtomicOrdering::Acquire);
    b_.CreateCondBr(b_.CreateExtractValue(pair, 1), run, claim);
    b_.SetInsertPoint(run);
    b_.CreateCall(job_type(), f->getArg(1), {f->getArg(2), next, n});
    add_atomic(done_, 1, llvm::AtomicOrdering::Release);
    b_.CreateBr(claim);

    b_.SetInsertPoint(next_segment);
    llvm::Value* more = b_.CreateAdd(i, b_.getInt32(1));
    i->addIncoming(more, next_segment);
    b_.CreateCondBr(b_.CreateICmpULT(more, count), segment_loop, out);
    b_.SetInsertPoint(out);
    b_.CreateRetVoid();
    return f;
  }

  // ptr tf_pool_worker(ptr k): worker k (its number in the team, passed as the pointer)
  // waits for a generation other than the last it saw and works on it. A worker that comes
  // late (started, woken or scheduled after the job's chunks were all claimed) finds nothing
  // to claim and touches nothing of the job.
  llvm::Function* emit_worker() {
    llvm::Function* f = function("tf_pool_worker", ptr_, {ptr_});
    auto [entry, wait, spin, spun, clock, sleep, sleep_check, sleep_wait, woken, job] =
        blocks(f, "entry", "wait", "spin", "spun", "clock", "sleep", "sleep.check", "sleep.wait",
               "woken", "job");

    b_.SetInsertPoint(entry);
    // The worker's number in the team (1, 2, ...: the launching thread is 0).
    llvm::Value* self = b_.CreateTrunc(b_.CreatePtrToInt(f->getArg(0), i64_), i32_);
    b_.CreateBr(wait);

    b_.SetInsertPoint(wait);
    llvm::PHINode* seen = b_.CreatePHI(i32_, 3);
    seen->addIncoming(b_.getInt32(0), entry);
    llvm::Value* t0 = b_.CreateCall(now_);
    b_.CreateBr(spin);

    b_.SetInsertPoint(spin);
    llvm::PHINode* spins = b_.CreatePHI(i32_, 3);
    spins->addIncoming(b_.getInt32(0), wait);
    llvm::Value* g = generation(load_atomic(word_, llvm::AtomicOrdering::Acquire));
    b_.CreateCondBr(b_.CreateICmpNE(g, seen), job, spun);

    b_.SetInsertPoint(spun);
    pause();
    llvm::Value* next = b_.CreateAdd(spins, b_.getInt32(1));
    spins->addIncoming(next, spun);
    b_.CreateCondBr(
        b_.CreateICmpEQ(b_.CreateAnd(next, b_.getInt32(kClockEvery - 1)), b_.getInt32(0)), clock,
        spin);

    b_.SetInsertPoint(clock);
    spins->addIncoming(next, clock);
    llvm::Value* idle = b_.CreateSub(b_.CreateCall(now_), t0);
    b_.CreateCondBr(b_.CreateICmpSGT(idle, b_.getInt64(kSpinNs)), sleep, spin);

    // Sleep: counted among the sleepers before the word is read again (both sequentially
    // consistent, as the launcher's write of the word and read of the sleepers), so either
    // this read sees the new generation or the launcher sees a sleeper and broadcasts under
    // the mutex.
    b_.SetInsertPoint(sleep);
    b_.CreateCall(libc("pthread_mutex_lock", i32_, {ptr_}), {mutex_});
    add_atomic(sleepers_, 1, llvm::AtomicOrdering::SequentiallyConsistent);
    b_.CreateBr(sleep_check);
    b_.SetInsertPoint(sleep_check);
    llvm::Value* g2 = generation(load_atomic(word_, llvm::AtomicOrdering::SequentiallyConsistent));
    b_.CreateCondBr(b_.CreateICmpEQ(g2, seen), sleep_wait, woken);
    b_.SetInsertPoint(sleep_wait);
    b_.CreateCall(libc("pthread_cond_wait", i32_, {ptr_, ptr_}), {cond_, mutex_});
    b_.CreateBr(sleep_check);
    b_.SetInsertPoint(woken);
    add_atomic(sleepers_, -1, llvm::AtomicOrdering::SequentiallyConsistent);
    b_.CreateCall(libc("pthread_mutex_unlock", i32_, {ptr_}), {mutex_});
    seen->addIncoming(seen, woken);
    b_.CreateBr(wait);

    b_.SetInsertPoint(job);
    // The launching thread's floating-point control (denormals flushed in a model's call).
    if (job_fp_) fp_control_.write(b_, m_, load_atomic(job_fp_, llvm::AtomicOrdering::Monotonic));
    llvm::Value* fn = load_atomic(job_fn_, llvm::AtomicOrdering::Monotonic);
    llvm::Value* data = load_atomic(job_data_, llvm::AtomicOrdering::Monotonic);
    llvm::Value* n = load_atomic(job_n_, llvm::AtomicOrdering::Monotonic);
    b_.CreateCall(work_, {g, fn, data, n, self});
    seen->addIncoming(g, job);
    b_.CreateBr(wait);
    return f;
  }

  // The child's side of fork(): the parent's workers do not exist here.
  llvm::Function* emit_forget() {
    llvm::Function* f = function("tf_pool_forget", b_.getVoidTy(), {});
    b_.SetInsertPoint(block("entry", f));
    for (llvm::GlobalVariable* g : {created_, lock_, sleepers_}) b_.CreateStore(b_.getInt32(0), g);
    for (llvm::GlobalVariable* g : {mutex_, cond_})
      b_.CreateMemSet(g, b_.getInt8(0), kSyncBytes, llvm::Align(64));
    b_.CreateRetVoid();
    return f;
  }

  llvm::FunctionType* job_type() {
    return llvm::FunctionType::get(b_.getVoidTy(), {ptr_, i32_, i32_}, false);
  }

  // The CPUs this process may run on (sched_getaffinity; 64 if it fails).
  llvm::Value* count_cpus(llvm::Value* mask) {
    b_.CreateMemSet(mask, b_.getInt8(0), 128, llvm::Align(8));
    llvm::Value* rc = b_.CreateCall(libc("sched_getaffinity", i32_, {i32_, intptr_, ptr_}),
                                    {b_.getInt32(0), llvm::ConstantInt::get(intptr_, 128), mask});
    llvm::Value* sum = b_.getInt64(0);
    for (int i = 0; i < 16; ++i) {
      llvm::Value* word =
          b_.CreateLoad(i64_, b_.CreateConstGEP1_32(i64_, mask, static_cast<unsigned>(i)));
      sum = b_.CreateAdd(sum, b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, word));
    }
    sum = b_.CreateTrunc(sum, i32_);
    llvm::Value* known =
        b_.CreateAnd(b_.CreateICmpEQ(rc, b_.getInt32(0)), b_.CreateICmpSGT(sum, b_.getInt32(0)));
    return b_.CreateSelect(known, sum, b_.getInt32(kMaxThreads));
  }

  llvm::Function* emit_launch() {
    llvm::Function* f =
        function(kLaunch, b_.getVoidTy(), {ptr_, ptr_}, llvm::GlobalValue::WeakODRLinkage);
    llvm::Value* fn = f->getArg(0);
    llvm::Value* data = f->getArg(1);
    auto [entry, serial, try_lock, locked, count, sized, create_check, create, started, team,
          launch, segments, publish, wake, own, join, join_wait, join_yield, join_pause, done,
          unlock_serial] =
        blocks(f, "entry", "serial", "try.lock", "locked", "count", "sized", "create.check",
               "create", "started", "team", "launch", "segments", "publish", "wake", "own",
               "join", "join.wait", "join.yield", "join.pause", "done", "unlock.serial");
    auto seq_cst = llvm::AtomicOrdering::SequentiallyConsistent;

    b_.SetInsertPoint(entry);
    llvm::AllocaInst* thread = b_.CreateAlloca(intptr_);
    llvm::AllocaInst* mask = b_.CreateAlloca(i64_, b_.getInt32(16));
    llvm::Value* want = b_.CreateCall(libc("omp_get_max_threads", i32_, {}));
    b_.CreateCondBr(b_.CreateICmpSGT(want, b_.getInt32(1)), try_lock, serial);

    b_.SetInsertPoint(serial);
    b_.CreateCall(job_type(), fn, {data, b_.getInt32(0), b_.getInt32(1)});
    b_.CreateRetVoid();

    // Busy (another caller, or a call from a pool thread): run alone.
    b_.SetInsertPoint(try_lock);
    llvm::Value* pair =
        b_.CreateAtomicCmpXchg(lock_, b_.getInt32(0), b_.getInt32(1), lock_->getAlign(),
                               llvm::AtomicOrdering::Acquire, llvm::AtomicOrdering::Monotonic);
    b_.CreateCondBr(b_.CreateExtractValue(pair, 1), locked, serial);

    b_.SetInsertPoint(locked);
    llvm::Value* cpus = b_.CreateLoad(i32_, cpus_);
    b_.CreateCondBr(b_.CreateICmpEQ(cpus, b_.getInt32(0)), count, sized);
    // First parallel call of the process: count the CPUs, and register the atfork handler
    // (once: a child inherits both the count and the handler).
    b_.SetInsertPoint(count);
    llvm::Value* counted = count_cpus(mask);
    b_.CreateStore(counted, cpus_);
    b_.CreateCall(libc("__register_atfork", i32_, {ptr_, ptr_, ptr_, ptr_}),
                  {llvm::ConstantPointerNull::get(ptr_), llvm::ConstantPointerNull::get(ptr_),
                   forget_, llvm::ConstantPointerNull::get(ptr_)});
    b_.CreateBr(sized);

    b_.SetInsertPoint(sized);
    llvm::PHINode* avail = b_.CreatePHI(i32_, 2);
    avail->addIncoming(cpus, locked);
    avail->addIncoming(counted, count);
    llvm::Value* n = min(min(want, avail), b_.getInt32(kMaxThreads));
    b_.CreateCondBr(b_.CreateICmpSGT(n, b_.getInt32(1)), create_check, unlock_serial);

    // Start workers 1..n-1 that do not exist yet; a failure leaves the team smaller.
    b_.SetInsertPoint(create_check);
    llvm::Value* k = b_.CreateAdd(b_.CreateLoad(i32_, created_), b_.getInt32(1));
    b_.CreateCondBr(b_.CreateICmpSLT(k, n), create, team);
    b_.SetInsertPoint(create);
    llvm::Value* rc = b_.CreateCall(libc("pthread_create", i32_, {ptr_, ptr_, ptr_, ptr_}),
                                    {thread, llvm::ConstantPointerNull::get(ptr_), worker_,
                                     b_.CreateIntToPtr(b_.CreateZExt(k, i64_), ptr_)});
    b_.CreateCondBr(b_.CreateICmpEQ(rc, b_.getInt32(0)), started, team);
    b_.SetInsertPoint(started);
    b_.CreateCall(libc("pthread_detach", i32_, {intptr_}), {b_.CreateLoad(intptr_, thread)});
    b_.CreateStore(k, created_);
    b_.CreateBr(create_check);

    b_.SetInsertPoint(team);
    llvm::Value* workers = b_.CreateLoad(i32_, created_);
    llvm::Value* size = min(n, b_.CreateAdd(workers, b_.getInt32(1)));
    b_.CreateCondBr(b_.CreateICmpSGT(size, b_.getInt32(1)), launch, unlock_serial);

    // Publish the job: its fields, the segments, then the word (next generation). Each thread
    // claims its own segment's chunks first and then the others', this thread included, so
    // workers that are asleep or not scheduled cost nothing but their wake-up: this thread
    // waits only for chunks that were claimed and are still running.
    b_.SetInsertPoint(launch);
    llvm::Value* chunks = b_.CreateMul(size, b_.getInt32(kChunksPerThread));
    store_atomic(fn, job_fn_, llvm::AtomicOrdering::Monotonic);
    store_atomic(data, job_data_, llvm::AtomicOrdering::Monotonic);
    if (job_fp_) store_atomic(fp_control_.read(b_, m_), job_fp_, llvm::AtomicOrdering::Monotonic);
    store_atomic(chunks, job_n_, llvm::AtomicOrdering::Monotonic);
    store_atomic(b_.getInt32(0), done_, llvm::AtomicOrdering::Monotonic);
    llvm::Value* g = b_.CreateAdd(generation(load_atomic(word_, llvm::AtomicOrdering::Monotonic)),
                                  b_.getInt32(1));
    llvm::Value* tag = b_.CreateShl(b_.CreateZExt(g, i64_), 32);
    b_.CreateBr(segments);
    // Each thread's segment of chunks, then the word that publishes them with the job.
    b_.SetInsertPoint(segments);
    llvm::PHINode* t = b_.CreatePHI(i32_, 2);
    t->addIncoming(b_.getInt32(0), launch);
    b_.CreateAlignedStore(
          b_.CreateOr(tag, b_.CreateZExt(b_.CreateMul(t, b_.getInt32(kChunksPerThread)), i64_)),
          segment(t), llvm::Align(64))
        ->setAtomic(llvm::AtomicOrdering::Monotonic);
    llvm::Value* t_next = b_.CreateAdd(t, b_.getInt32(1));
    t->addIncoming(t_next, segments);
    b_.CreateCondBr(b_.CreateICmpULT(t_next, size), segments, publish);
    b_.SetInsertPoint(publish);
    store_atomic(tag, word_, seq_cst);
    llvm::Value* asleep = load_atomic(sleepers_, seq_cst);
    b_.CreateCondBr(b_.CreateICmpNE(asleep, b_.getInt32(0)), wake, own);
    b_.SetInsertPoint(wake);
    b_.CreateCall(libc("pthread_mutex_lock", i32_, {ptr_}), {mutex_});
    b_.CreateCall(libc("pthread_cond_broadcast", i32_, {ptr_}), {cond_});
    b_.CreateCall(libc("pthread_mutex_unlock", i32_, {ptr_}), {mutex_});
    b_.CreateBr(own);

    b_.SetInsertPoint(own);
    b_.CreateCall(work_, {g, fn, data, chunks, b_.getInt32(0)});
    b_.CreateBr(join);

    b_.SetInsertPoint(join);
    llvm::PHINode* waited = b_.CreatePHI(i32_, 3);
    waited->addIncoming(b_.getInt32(0), own);
    llvm::Value* finished = load_atomic(done_, llvm::AtomicOrdering::Acquire);
    b_.CreateCondBr(b_.CreateICmpEQ(finished, chunks), done, join_wait);
    b_.SetInsertPoint(join_wait);
    llvm::Value* more = b_.CreateAdd(waited, b_.getInt32(1));
    b_.CreateCondBr(b_.CreateICmpUGT(more, b_.getInt32(kJoinSpins)), join_yield, join_pause);
    b_.SetInsertPoint(join_yield);
    b_.CreateCall(libc("sched_yield", i32_, {}));
    waited->addIncoming(more, join_yield);
    b_.CreateBr(join);
    b_.SetInsertPoint(join_pause);
    pause();
    waited->addIncoming(more, join_pause);
    b_.CreateBr(join);

    b_.SetInsertPoint(done);
    store_atomic(b_.getInt32(0), lock_, llvm::AtomicOrdering::Release);
    b_.CreateRetVoid();

    b_.SetInsertPoint(unlock_serial);
    store_atomic(b_.getInt32(0), lock_, llvm::AtomicOrdering::Release);
    b_.CreateBr(serial);
    return f;
  }

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  std::string arch_;
  FpControl fp_control_;
  llvm::IRBuilder<> b_;
  llvm::Type* i32_;
  llvm::Type* i64_;
  llvm::PointerType* ptr_;
  llvm::IntegerType* intptr_;
  llvm::GlobalVariable* lock_ = nullptr;
  llvm::GlobalVariable* word_ = nullptr;
  llvm::GlobalVariable* segments_ = nullptr;
  llvm::GlobalVariable* done_ = nullptr;
  llvm::GlobalVariable* sleepers_ = nullptr;
  llvm::GlobalVariable* job_fn_ = nullptr;
  llvm::GlobalVariable* job_data_ = nullptr;
  llvm::GlobalVariable* job_n_ = nullptr;
  llvm::GlobalVariable* job_fp_ = nullptr;  // null where the architecture has no FpControl
  llvm::GlobalVariable* created_ = nullptr;
  llvm::GlobalVariable* cpus_ = nullptr;
  llvm::GlobalVariable* mutex_ = nullptr;
  llvm::GlobalVariable* cond_ = nullptr;
  llvm::Function* now_ = nullptr;
  llvm::Function* work_ = nullptr;
  llvm::Function* worker_ = nullptr;
  llvm::Function* forget_ = nullptr;
};

}  // namespace

llvm::Function* parallel_launch_function(llvm::Module& m, const Target& target) {
  if (llvm::Function* f = m.getFunction(kLaunch)) return f;
  return PoolEmitter(m, target).emit();
}

}  // namespace tf
