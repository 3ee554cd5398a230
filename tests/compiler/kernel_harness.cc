#include "tests/compiler/kernel_harness.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include "base/bfloat16.h"
#include "base/float16.h"
#include "base/tf32.h"
#include "compiler/codegen_llvm.h"
#include "compiler/gpu.h"
#include "compiler/ir.h"
#include "compiler/link.h"
#include "compiler/reference.h"
#include "compiler/schedule_templates.h"
#include "runtime/kernel_library.h"
#include "tests/temp_dir.h"

namespace {
// An emulated block's threads are fibers (ucontext) on the calling thread, switched at their
// barriers: a block of 256 threads costs 256 stacks, not 256 OS threads created per block and
// futexes at every barrier (a batched matmul's 2,000 blocks of 256 threads took 33 s, two
// thirds of it in the kernel; 10 s as fibers). The order is deterministic: at a block's start, and
// after every barrier, the threads run one after another (each until its next barrier), in
// increasing index in even blocks and decreasing in odd ones, so where a barrier is missing one
// thread runs ahead of the others both ways and reads or overwrites what they have not finished. A
// barrier some thread never reaches (a deadlock: threads hung on a GPU) stops the program with the
// barrier's name. Under AddressSanitizer the switches are annotated
// (__sanitizer_start_switch_fiber); it still warns once a process that it does not fully support
// swapcontext.
class Fibers;

// A barrier of `expected` fibers (__syncthreads: the block's; a warp's or warpgroup's meeting).
struct FiberBarrier {
  const char* what;
  int64_t expected;
  int64_t arrived = 0;
  uint64_t phase = 0;
  void arrive_and_wait();
};

// An operand of a warpgroup-level product in shared memory, as its descriptor says.
struct WgmmaOperand {
  const unsigned char* start;
  uint64_t lbo, sbo;
  // Element k of row r (A's m, B's n): core matrix (r / 8, k / 8), its row r % 8 of 16 bytes.
  uint16_t at(int r, int k) const {
    uint16_t v;
    std::memcpy(&v, start + (r / 8) * sbo + (k / 8) * lbo + (r % 8) * 16 + (k % 8) * 2, sizeof v);
    return v;
  }
};

// A warpgroup-level product the calling thread issued and no wait has retired yet: what it
// read (A's 64 rows and B's n, 16 k each, hashed when it was issued). The GPU may read them at
// any time until the wait that retires it, so they must not change until then.
struct WgmmaInFlight {
  WgmmaOperand a, b;
  int64_t n;
  uint64_t hash;
};

// What each emulated thread keeps of its own.
struct EmulatedThread {
  int64_t index = 0;       // in its block, x fastest
  int ldmatrix_calls = 0;  // its (its warp's) so far
  std::deque<WgmmaInFlight> wgmma_in_flight;
};

// The warps of the emulated block: each lane's operands of a warp-level product, and one
// barrier per warp (its 32 threads).
struct EmulatedWarps {
  std::vector<std::array<float, 16>> operands;
  // The rows each lane supplies to ldmatrix, in two sets used in turn (see emulated_ldmatrix).
  std::array<std::vector<std::array<int32_t, 4>>, 2> rows;
  std::vector<FiberBarrier> meet;
  // Each thread's operand addresses and descriptors of a warpgroup-level product, and one
  // barrier per warpgroup (its 128 threads).
  std::vector<std::array<uint64_t, 4>> groups;
  std::vector<FiberBarrier> group_meet;
};

// The block being emulated on this (OS) thread and the fiber running in it.
thread_local Fibers* emulated_fibers = nullptr;
thread_local FiberBarrier* emulated_block = nullptr;
thread_local EmulatedWarps* emulated_warps = nullptr;
thread_local EmulatedThread* emulated_self = nullptr;

// The calling thread's block's warps, its own whole (32 threads); a warp-wide `what` in a
// block whose last warp is partial stops the program (its lanes would wait forever).
EmulatedWarps& whole_warp(const char* what) {
  EmulatedWarps& w = *emulated_warps;
  const int64_t warp = emulated_self->index / 32;
  if ((warp + 1) * 32 > static_cast<int64_t>(w.operands.size())) {
    std::fprintf(stderr, "%s in a block of %zu threads: warp %lld is not whole (32 threads)\n", what,
                 w.operands.size(), static_cast<long long>(warp));
    std::abort();
  }
  return w;
}

// A warp-level product of depth K (8: TF32, 16: float16 and bfloat16; compiler/ir.h) in an
// emulated block: the 32 threads of the caller's warp meet, each leaves its fragments, A
// (16 x K) and B (K x 8) are put together from them by the instruction's layout, and each lane
// takes its four elements of C + A x B (operands rounded by `round`, products summed in
// float32 in k order). A second meeting keeps a lane from overwriting its operands before the
// others have read them.
void emulated_mma(const float* in, float* out, int K, float (*round)(float)) {
  EmulatedWarps& w = whole_warp("a warp-level product");
  const int64_t warp = emulated_self->index / 32, lane = emulated_self->index % 32;
  const int na = K / 2, nb = K / 4;  // a lane's operands of A and of B; then 4 of C
  std::copy(in, in + na + nb + 4, w.operands[static_cast<size_t>(emulated_self->index)].begin());
  w.meet[static_cast<size_t>(warp)].arrive_and_wait();
  float a[16][16], b[16][8];
  const std::string call = K == 8 ? tf::ir::kMmaTF32 : tf::ir::kMmaF16;  // the layout of its depth
  for (int l = 0; l < 32; ++l) {
    const std::array<float, 16>& o = w.operands[static_cast<size_t>(warp * 32 + l)];
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < na; ++e) {
      const tf::ir::MmaPlace p = tf::ir::warp_mma_a(call, e, g, t);
      a[p.row][p.col] = round(o[static_cast<size_t>(e)]);
    }
    for (int e = 0; e < nb; ++e) {
      const tf::ir::MmaPlace p = tf::ir::warp_mma_b(call, e, g, t);
      b[p.row][p.col] = round(o[static_cast<size_t>(na + e)]);
    }
  }
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  for (int i = 0; i < 4; ++i) {
    const tf::ir::MmaPlace p = tf::ir::warp_mma_c(i, g, t);
    float d = in[na + nb + i];
    for (int k = 0; k < K; ++k) d = std::fma(a[p.row][k], b[k][p.col], d);
    out[i] = d;
  }
  w.meet[static_cast<size_t>(warp)].arrive_and_wait();
}

// ldmatrix of `n` 8 x 8 matrices of 16-bit values (compiler/ir.h kLdMatrix) in an emulated
// block: the warp's lanes meet, each having left the row of 16 bytes it supplies, and lane l
// takes as its word j word l % 4 of the row lane 8 j + l / 4 supplied. One meeting: the rows go
// to two sets in turn, so a lane writing its next-but-one row has passed the next meeting,
// which every lane reaches only after reading this one's.
// Transposed (.trans), word j of lane l holds rows 2t and 2t + 1 of matrix j at column g (value g
// of the rows lanes 8 j + 2t and 8 j + 2t + 1 supplied), the low half row 2t's.
void emulated_ldmatrix(const int32_t* row, int32_t* out, int n, bool trans) {
  EmulatedWarps& w = whole_warp("ldmatrix");
  const int64_t warp = emulated_self->index / 32, lane = emulated_self->index % 32;
  std::vector<std::array<int32_t, 4>>& rows =
      w.rows[static_cast<size_t>(emulated_self->ldmatrix_calls++ % 2)];
  std::copy(row, row + 4, rows[static_cast<size_t>(emulated_self->index)].begin());
  w.meet[static_cast<size_t>(warp)].arrive_and_wait();
  const int64_t g = lane / 4, t = lane % 4;
  for (int j = 0; j < n; ++j) {
    if (!trans) {
      out[j] = rows[static_cast<size_t>(warp * 32 + 8 * j + g)][static_cast<size_t>(t)];
      continue;
    }
    auto value = [&](int64_t r) {  // value g of row r of matrix j
      uint16_t v;
      std::memcpy(
          &v,
          reinterpret_cast<const char*>(rows[static_cast<size_t>(warp * 32 + 8 * j + r)].data()) +
              2 * g,
          2);
      return static_cast<uint32_t>(v);
    };
    out[j] = static_cast<int32_t>(value(2 * t) | value(2 * t + 1) << 16);
  }
}
uint64_t operands_hash(const WgmmaOperand& a, const WgmmaOperand& b, int64_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the 16-bit elements
  auto add = [&](uint16_t v) { h = (h ^ v) * 1099511628211ull; };
  for (int k = 0; k < 16; ++k) {
    for (int r = 0; r < 64; ++r) add(a.at(r, k));
    for (int c = 0; c < n; ++c) add(b.at(c, k));
  }
  return h;
}

// A warpgroup-level product (compiler/ir.h kWgmmaF16, kWgmmaBF16) in an emulated block: the
// 128 threads of the caller's warpgroup meet, each having left A's and B's addresses and
// descriptors (which must be the same for all: the instruction's), A (64 x 16) and B (16 x N)
// are read from shared memory where the descriptors say (the start address from its low 18
// bits, as the GPU's shared window, the byte offsets decoded from their fields: a descriptor
// built wrong reads the wrong elements), and each thread takes its N / 2 elements of C + A x B
// (16-bit operands widened exactly, products summed in float32 in k order). A second meeting
// keeps a thread from leaving its next product's descriptors before the others have read these.
void emulated_wgmma(const uint16_t* a, const uint16_t* b, const uint64_t* desc, const float* in, float* out,
                    int64_t n, float (*widen)(uint16_t)) {
  EmulatedWarps& w = *emulated_warps;
  const int64_t group = emulated_self->index / 128, l = emulated_self->index % 128;
  if ((group + 1) * 128 > static_cast<int64_t>(w.operands.size())) {
    std::fprintf(stderr, "a warpgroup-level product in a block of %zu threads: warpgroup %lld is not whole (128)\n",
                 w.operands.size(), static_cast<long long>(group));
    std::abort();
  }
  w.groups[static_cast<size_t>(emulated_self->index)] = {
      reinterpret_cast<uint64_t>(a), reinterpret_cast<uint64_t>(b), desc[0], desc[1]};
  w.group_meet[static_cast<size_t>(group)].arrive_and_wait();
  for (int64_t o = group * 128; o < group * 128 + 128; ++o) {
    if (w.groups[static_cast<size_t>(o)] != w.groups[static_cast<size_t>(group * 128)]) {
      std::fprintf(stderr, "a warpgroup-level product whose threads %lld and %lld give different operands\n",
                   static_cast<long long>(group * 128), static_cast<long long>(o));
      std::abort();
    }
  }
  auto operand = [](const uint16_t* p, uint64_t d) {
    const uint64_t address = reinterpret_cast<uint64_t>(p);
    const uint64_t decoded = (address & ~uint64_t{0x3FFFF}) | ((d & 0x3FFF) << 4);
    if (decoded != address) {
      std::fprintf(stderr, "a warpgroup-level product's operand at %p, not 16-byte aligned (the descriptor says %p)\n",
                   static_cast<const void*>(p), reinterpret_cast<const void*>(decoded));
      std::abort();
    }
    return WgmmaOperand{reinterpret_cast<const unsigned char*>(decoded), (d >> 16 & 0x3FFF) << 4,
                        (d >> 32 & 0x3FFF) << 4};
  };
  const WgmmaOperand A = operand(a, desc[0]), B = operand(b, desc[1]);
  emulated_self->wgmma_in_flight.push_back({A, B, n, operands_hash(A, B, n)});
  for (int e = 0; e < n / 2; ++e) {
    const tf::ir::MmaPlace p = tf::ir::wgmma_c(e, static_cast<int>(l));
    float d = in[e];
    for (int k = 0; k < 16; ++k) d = std::fma(widen(A.at(p.row, k)), widen(B.at(p.col, k)), d);
    out[e] = d;
  }
  w.group_meet[static_cast<size_t>(group)].arrive_and_wait();
}
}  // namespace

extern "C" void tunefarm_emulated_wgmma_m64k16_f16(const uint16_t* a, const uint16_t* b, const uint64_t* desc,
                                                   const float* in, float* out, int64_t n) {
  emulated_wgmma(a, b, desc, in, out, n, tf::f16_value);
}
extern "C" void tunefarm_emulated_wgmma_m64k16_bf16(const uint16_t* a, const uint16_t* b, const uint64_t* desc,
                                                    const float* in, float* out, int64_t n) {
  emulated_wgmma(a, b, desc, in, out, n, tf::bf16_value);
}

// A wait for the calling thread's warpgroup-level products (compiler/ir.h kWgmmaWait): all but
// the `pending` latest are retired, each checked to have read what is still there (a pipeline
// that overwrote a tile its products in flight read would compute garbage on a GPU; here the
// products read at once, so the check is what catches it).
extern "C" void tunefarm_emulated_wgmma_wait(int64_t pending) {
  std::deque<WgmmaInFlight>& wgmma_in_flight = emulated_self->wgmma_in_flight;
  while (static_cast<int64_t>(wgmma_in_flight.size()) > pending) {
    const WgmmaInFlight& p = wgmma_in_flight.front();
    if (operands_hash(p.a, p.b, p.n) != p.hash) {
      std::fprintf(stderr,
                   "a warpgroup-level product's operands in shared memory (A at %p, B at %p) were "
                   "written while it was "
                   "in flight (before the wait that retires it, %zu products after it issued)\n",
                   static_cast<const void*>(p.a.start), static_cast<const void*>(p.b.start),
                   wgmma_in_flight.size() - 1);
      std::abort();
    }
    wgmma_in_flight.pop_front();
  }
}

extern "C" void tunefarm_emulated_ldmatrix_x2(const int32_t* row, int32_t* out) {
  emulated_ldmatrix(row, out, 2, false);
}
extern "C" void tunefarm_emulated_ldmatrix_x4(const int32_t* row, int32_t* out) {
  emulated_ldmatrix(row, out, 4, false);
}
extern "C" void tunefarm_emulated_ldmatrix_x2_trans(const int32_t* row, int32_t* out) {
  emulated_ldmatrix(row, out, 2, true);
}
extern "C" void tunefarm_emulated_ldmatrix_x4_trans(const int32_t* row, int32_t* out) {
  emulated_ldmatrix(row, out, 4, true);
}

// Called by kernels built from emulate_gpu_thread at each barrier (the test programs export
// it: ENABLE_EXPORTS).
extern "C" void tunefarm_emulated_barrier() { emulated_block->arrive_and_wait(); }

// The warp-level products of compiler/ir.h in an emulated block (codegen_cpu.cc calls
// tunefarm_emulated_<name>; the test programs export them).
extern "C" void tunefarm_emulated_mma_m16n8k8_tf32(const float* in, float* out) { emulated_mma(in, out, 8, tf::round_tf32); }
extern "C" void tunefarm_emulated_mma_m16n8k16_f16(const float* in, float* out) {
  emulated_mma(in, out, 16, tf::round_f16);
}
extern "C" void tunefarm_emulated_mma_m16n8k16_bf16(const float* in, float* out) {
  emulated_mma(in, out, 16, tf::round_bf16);
}

namespace {

// The fibers of an emulated block (see EmulatedThread): run(body) runs body on each thread,
// as a fiber of its own, until every one has returned.
class Fibers {
 public:
  explicit Fibers(int64_t threads) : fibers_(static_cast<size_t>(threads)) {
    for (Fiber& f : fibers_) {
      f.memory = mmap(nullptr, kGuard + kStack, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
      if (f.memory == MAP_FAILED) {
        unmap();  // the stacks mapped so far
        throw std::runtime_error(tf::str("emulated threads: no memory for ", threads, " stacks"));
      }
      mprotect(f.memory, kGuard, PROT_NONE);  // an overflow faults instead of writing a neighbour
    }
  }
  ~Fibers() { unmap(); }
  Fibers(const Fibers&) = delete;
  Fibers& operator=(const Fibers&) = delete;

  // Runs body(thread) on every thread of a block, fresh (index set, nothing else), from thread 0
  // up, or down from the last (`downwards`), until each returns; a pass over the threads in
  // which none arrives at a barrier or returns is a deadlock, which stops the program.
  void run(const std::function<void(EmulatedThread&)>& body, bool downwards) {
    body_ = &body;
    Fibers* outer = std::exchange(emulated_fibers, this);
    const int64_t n = static_cast<int64_t>(fibers_.size());
    for (int64_t i = 0; i < n; ++i) {
      Fiber& f = fibers_[static_cast<size_t>(i)];
      f.thread = EmulatedThread{};
      f.thread.index = i;
      f.done = false;
      f.waiting = nullptr;
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = static_cast<char*>(f.memory) + kGuard;
      f.context.uc_stack.ss_size = kStack;
      f.context.uc_link = &scheduler_;
      makecontext(&f.context, &Fibers::entry, 0);
    }
    for (int64_t live = n; live > 0;) {
      const uint64_t before = progress_;
      for (int64_t k = 0; k < n; ++k) {
        Fiber& f = fibers_[static_cast<size_t>(downwards ? n - 1 - k : k)];
        if (f.done) continue;
        resume(f);
        if (f.done) --live;
      }
      if (live > 0 && progress_ == before) deadlocked();
    }
    emulated_fibers = outer;
    emulated_self = nullptr;
  }

  // At a barrier: `b` counts an arrival; the caller goes on after the others have arrived.
  void arrive_and_wait(FiberBarrier& b) {
    ++progress_;
    const uint64_t mine = b.phase;
    if (++b.arrived == b.expected) {
      b.arrived = 0;
      ++b.phase;
    }
    current_->waiting = &b;
    do suspend();  // the last to arrive too: the threads go on in the order of the pass
    while (b.phase == mine);
    current_->waiting = nullptr;
  }

 private:
  static constexpr size_t kStack = size_t{2} << 20;  // a GPU thread's locals are a few KB
  static constexpr size_t kGuard = 4096;

  struct Fiber {
    void* memory = MAP_FAILED;
    ucontext_t context;
    EmulatedThread thread;
    bool done = false;
    const FiberBarrier* waiting = nullptr;
    void* fake_stack = nullptr;  // AddressSanitizer's, while switched away
  };

  void unmap() {
    for (Fiber& f : fibers_) {
      if (f.memory != MAP_FAILED) munmap(f.memory, kGuard + kStack);
      f.memory = MAP_FAILED;
    }
  }

  static void entry() {
    Fibers& self = *emulated_fibers;
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(nullptr, &self.scheduler_bottom_, &self.scheduler_size_);
#endif
    (*self.body_)(self.current_->thread);
    self.current_->done = true;
    ++self.progress_;
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_start_switch_fiber(nullptr, self.scheduler_bottom_, self.scheduler_size_);
#endif
  }  // to uc_link: the scheduler

  // From the scheduler to `f` until it suspends or returns.
  void resume(Fiber& f) {
    current_ = &f;
    emulated_self = &f.thread;
#if defined(__SANITIZE_ADDRESS__)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, static_cast<char*>(f.memory) + kGuard, kStack);
#endif
    swapcontext(&scheduler_, &f.context);
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  }

  // From the running fiber back to the scheduler.
  void suspend() {
    Fiber& f = *current_;
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_start_switch_fiber(&f.fake_stack, scheduler_bottom_, scheduler_size_);
#endif
    swapcontext(&f.context, &scheduler_);
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(f.fake_stack, &scheduler_bottom_, &scheduler_size_);
#endif
  }

  [[noreturn]] void deadlocked() const {
    for (size_t i = 0; i < fibers_.size(); ++i) {
      const Fiber& f = fibers_[i];
      if (f.done || !f.waiting) continue;
      std::fprintf(
          stderr,
          "an emulated block deadlocked: thread %zu waits at %s, which %lld of its %lld threads "
          "reached (on a GPU the block would hang)\n",
          i, f.waiting->what, static_cast<long long>(f.waiting->arrived),
          static_cast<long long>(f.waiting->expected));
      break;
    }
    std::abort();
  }

  std::vector<Fiber> fibers_;
  ucontext_t scheduler_;
  Fiber* current_ = nullptr;
  const std::function<void(EmulatedThread&)>* body_ = nullptr;
  uint64_t progress_ = 0;  // arrivals at barriers and returns: a pass without any is a deadlock
  const void* scheduler_bottom_ = nullptr;
  size_t scheduler_size_ = 0;
};

void FiberBarrier::arrive_and_wait() { emulated_fibers->arrive_and_wait(*this); }

}  // namespace

namespace tf::testing {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::string Comparison::str() const {
  std::ostringstream os;
  os << "status " << status << ", max abs error " << check.max_abs_error << " at " << check.worst_index
     << " (tolerance " << check.tolerance << ")";
  return os.str();
}

std::vector<nlohmann::json> sample_configs(const Workload& w, const Target& t, int n) {
  n = sweep(n, 1);  // the default and one sampled config under the sanitizers
  OpGraph g = build_op(w);
  std::vector<nlohmann::json> out = {default_config(g, t)};
  std::vector<KnobSpec> space = knob_space(g, t);
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(w.canonical())));
  for (int tries = 0; static_cast<int>(out.size()) <= n && tries < 200; ++tries) {
    nlohmann::json c = nlohmann::json::object();
    for (const KnobSpec& k : space) c[k.name] = k.candidates[rng() % k.candidates.size()];
    c = complete_config(g, t, c);
    if (check_constraints(g, t, c).empty()) out.push_back(c);
  }
  return out;
}

std::string temp_dir() {
  static TempDir dir("tunefarm-test");
  return dir.path();
}

std::unique_ptr<KernelLibrary> build_for_host(const ir::LoweredFunc& f) { return build_for(f, host_target()); }

std::unique_ptr<KernelLibrary> build_for(const ir::LoweredFunc& f, const Target& host) {
  static std::atomic<int> counter{0};
  std::string base = temp_dir() + "/k" + std::to_string(counter++);
  CodegenResult obj = codegen_llvm(f, host, CodegenOutput::Object);
  {
    std::ofstream o(base + ".o", std::ios::binary);
    o << obj.data;
  }
  link_shared_library(base + ".o", base + ".so", host, obj.uses_openmp, obj.uses_libm);
  return std::make_unique<KernelLibrary>(base + ".so", f.name);
}

Comparison run_and_compare(const OpGraph& g, const ir::LoweredFunc& f, uint64_t seed) {
  return run_and_compare(g, *build_for_host(f), seed);
}

namespace {

// The kernel's arguments for `g`: its inputs filled from `seed` on (fill_typed: as boards
// fill them), then its output filled with NaN (a kernel that skips an element cannot pass;
// an integer output with a byte pattern of its own).
std::vector<std::vector<float>> seeded_buffers(const OpGraph& g, uint64_t seed) {
  std::vector<std::vector<float>> bufs;
  for (const ir::Tensor& t : g.inputs) {
    int64_t n = 1;
    for (int64_t d : t->shape) n *= d;
    bufs.emplace_back(static_cast<size_t>(n));
    fill_typed(g.arg_dtype(t), bufs.back().data(), n, seed++);
  }
  int64_t out_n = 1;
  for (int64_t d : g.output->shape) out_n *= d;
  bufs.emplace_back(static_cast<size_t>(out_n), std::nanf(""));
  return bufs;
}

// The output (the last of `bufs`) against the reference on the inputs (the others).
Comparison compared(const OpGraph& g, const std::vector<std::vector<float>>& bufs, int status) {
  std::vector<const float*> inputs;
  for (size_t i = 0; i + 1 < bufs.size(); ++i) inputs.push_back(bufs[i].data());
  Comparison c;
  c.status = status;
  c.check = check_against_reference(g, inputs, bufs.back().data());
  return c;
}

}  // namespace

Comparison run_and_compare(const OpGraph& g, KernelLibrary& lib, uint64_t seed,
                           const std::vector<ir::Schedule::Packing>& packed) {
  std::vector<std::vector<float>> bufs = seeded_buffers(g, seed);
  const std::vector<std::vector<float>> values = bufs;  // the reference reads them as floats
  // Typed arguments travel as their type's elements, as a board passes them (and packed: the
  // layout moves whole 4-byte elements).
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    store_as(g.arg_dtype(g.inputs[i]), bufs[i].data(), static_cast<int64_t>(bufs[i].size()));
    for (const ir::Schedule::Packing& p : packed) {
      if (p.input == g.inputs[i]->name) bufs[i] = pack_layout(bufs[i], g.inputs[i]->shape, p.dim, p.block);
    }
  }
  std::vector<float*> args;
  for (auto& b : bufs) args.push_back(b.data());
  int status = lib.call(args);
  std::vector<std::vector<float>> checked(values.begin(), values.end() - 1);
  checked.push_back(std::move(bufs.back()));
  load_as(g.output->dtype.str(), checked.back().data(), static_cast<int64_t>(checked.back().size()));
  return compared(g, checked, status);
}

int emulate_gpu_kernel(const ir::LoweredFunc& f, const GpuLaunch& launch, std::vector<std::vector<float>>& bufs) {
  EmulatedKernel k = emulate_gpu_thread(f);
  std::unique_ptr<KernelLibrary> lib = build_for_host(k.func);
  // One per block, shared by its threads.
  std::vector<std::vector<float>> shared;
  for (const auto& [name, size] : k.shared) shared.emplace_back(static_cast<size_t>(size));
  const auto& grid = launch.grid;
  const auto& block = launch.block;
  const int64_t threads = launch.threads_per_block();
  int status = 0;
  // Warps of 32 threads (a warp-level product needs whole warps: a partial last one waits for
  // lanes that never come, so the thread count is checked where one is used).
  EmulatedWarps warps;
  warps.operands.resize(static_cast<size_t>(threads));
  for (auto& r : warps.rows) r.resize(static_cast<size_t>(threads));
  for (int64_t t = 0; t < threads; t += 32)
    warps.meet.push_back({"its warp's meeting", std::min<int64_t>(32, threads - t)});
  warps.groups.resize(static_cast<size_t>(threads));
  for (int64_t t = 0; t < threads; t += 128) {
    warps.group_meet.push_back({"its warpgroup's meeting", std::min<int64_t>(128, threads - t)});
  }
  FiberBarrier sync{"a barrier of the block", threads};
  Fibers fibers(threads);
  emulated_block = &sync;
  emulated_warps = &warps;
  int64_t blocks = 0;
  for (int64_t bz = 0; bz < grid[2]; ++bz) {
    for (int64_t by = 0; by < grid[1]; ++by) {
      for (int64_t bx = 0; bx < grid[0]; ++bx) {
        for (std::vector<float>& s : shared) std::fill(s.begin(), s.end(), std::nanf(""));
        fibers.run(
            [&](EmulatedThread& self) {
              const int64_t t = self.index;
              std::vector<float> ids = {float(bx),
                                        float(by),
                                        float(bz),
                                        float(t % block[0]),
                                        float(t / block[0] % block[1]),
                                        float(t / (block[0] * block[1]))};
              std::vector<float*> args;
              for (auto& b : bufs) args.push_back(b.data());
              for (auto& s : shared) args.push_back(s.data());
              args.push_back(ids.data());
              if (int s = lib->call(args)) status = s;
              if (!self.wgmma_in_flight.empty()) {
                std::fprintf(stderr,
                             "thread %lld of an emulated block ended with %zu warpgroup-level "
                             "products no wait retired (their results were never waited for)\n",
                             static_cast<long long>(t), self.wgmma_in_flight.size());
                std::abort();
              }
            },
            blocks++ % 2 == 1);
      }
    }
  }
  emulated_block = nullptr;
  emulated_warps = nullptr;
  return status;
}

Comparison run_gpu_emulated(const OpGraph& g, const ir::LoweredFunc& f, const Target& t, uint64_t seed,
                            int64_t max_blocks) {
  GpuProgram p = split_gpu_program(f);
  std::vector<std::vector<float>> bufs = seeded_buffers(g, seed);
  const std::vector<std::vector<float>> values = bufs;  // the reference reads them as floats
  for (size_t i = 0; i < g.inputs.size(); ++i)  // typed arguments as their type's elements
    store_as(g.arg_dtype(g.inputs[i]), bufs[i].data(), static_cast<int64_t>(bufs[i].size()));
  // Workspaces after the arguments, NaN as uninitialized device memory may be.
  for (const auto& [name, size] : p.workspaces) bufs.emplace_back(static_cast<size_t>(size), std::nanf(""));
  int status = 0;
  for (const ir::LoweredFunc& k : p.kernels) {
    GpuLaunch launch = check_gpu_kernel(k, t);
    int64_t blocks = launch.grid[0] * launch.grid[1] * launch.grid[2];
    if (blocks > max_blocks) {
      throw std::runtime_error(str("run_gpu_emulated: kernel ", k.name, " has ", blocks, " blocks (at most ",
                                   max_blocks, " here)"));
    }
    if (int s = emulate_gpu_kernel(k, launch, bufs)) status = s;
  }
  bufs.resize(g.inputs.size() + 1);
  for (size_t i = 0; i < g.inputs.size(); ++i) bufs[i] = values[i];
  return compared(g, bufs, status);
}

}  // namespace tf::testing
