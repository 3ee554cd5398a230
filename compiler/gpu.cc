#include "compiler/gpu.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "compiler/ir_mutator.h"
#include "runtime/gpu_runtime.h"

namespace tf {
namespace {

using namespace ir;  // NOLINT

class GpuChecker {
 public:
  GpuChecker(const LoweredFunc& f, const Target& t) : f_(f), t_(t), limits_(gpu_limits(t)) {}

  GpuLaunch run() {
    bool any = false;
    post_order(f_.body, [](const Expr&) {}, [&](const Stmt& s) {
      if (const For* f = s.as<For>()) any |= is_gpu_binding(f->for_kind);
    });
    if (!any && !writes_only_scalars()) {
      fail("binds no loop to the GPU grid: every thread would compute the whole output (bind loops to "
           "blockIdx/threadIdx)");
    }
    single_thread_ = !any;
    stmt(f_.body, 0);
    GpuLaunch l;
    for (int d = 0; d < 3; ++d) {
      if (extents_[d]) l.grid[d] = *extents_[d];
      if (extents_[3 + d]) l.block[d] = *extents_[3 + d];
    }
    static const char* kAxis = "xyz";
    for (int d = 0; d < 3; ++d) {
      if (l.block[d] > limits_.max_block[d]) {
        fail(str("has ", l.block[d], " threads along threadIdx.", kAxis[d], "; the limit is ", limits_.max_block[d]));
      }
      if (l.grid[d] > limits_.max_grid[d]) {
        fail(str("has ", l.grid[d], " blocks along blockIdx.", kAxis[d], "; the limit is ", limits_.max_grid[d]));
      }
    }
    if (l.threads_per_block() > limits_.max_threads_per_block) {
      fail(str("has ", l.threads_per_block(), " threads per block (", l.block[0], " x ", l.block[1], " x ", l.block[2],
               "); the limit is ", limits_.max_threads_per_block));
    }
    l.local_bytes_per_thread = local_.most;
    // Past the static limit (counting each array's 16-byte alignment, as the static arrays
    // are placed), the shared buffers are carved out of dynamic shared memory
    // (compiler/codegen_gpu.cc allocate_shared), which the launch must ask for.
    if (shared_aligned_.most > limits_.max_shared_bytes)
      l.dynamic_shared_bytes = shared_aligned_.most;
    else
      l.static_shared_bytes = shared_.most;
    return l;
  }

 private:
  // Whether every store writes a buffer of one element (a scalar output, a scalar
  // workspace): a kernel that binds nothing then runs as one thread (grid and block 1).
  bool writes_only_scalars() const {
    std::map<std::string, int64_t> sizes;
    for (const BufferArg& a : f_.args) sizes[a.name] = a.num_elements();
    bool scalars = true;
    post_order(f_.body, [](const Expr&) {}, [&](const Stmt& s) {
      if (const Allocate* a = s.as<Allocate>()) sizes[a->buffer] = a->size;
    });
    post_order(f_.body, [](const Expr&) {}, [&](const Stmt& s) {
      if (const Store* st = s.as<Store>()) scalars &= sizes.count(st->buffer) && sizes[st->buffer] == 1;
    });
    return scalars;
  }

  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) {
    throw UserError(str("schedule for ", t_.str(), ": kernel ", f_.name, " ", args...));
  }

  static std::string name_of(const For* f) { return f->var.as<Var>()->name; }

  // `bound`: how many bound loops enclose `s`.
  void stmt(const Stmt& s, int bound) {
    switch (s.kind()) {
      case StmtKind::For: {
        const For* f = s.as<For>();
        if (f->for_kind == ForKind::Parallel) {
          fail(str("marks loop ", name_of(f), " parallel, which means a CPU thread pool; on a GPU bind it to "
                   "blockIdx or threadIdx instead"));
        }
        if (!is_gpu_binding(f->for_kind)) {
          const int64_t* n = as_const_int(f->extent);
          if (bound == 0 && !single_thread_ && (!n || *n > 1)) {
            fail(str("has loop ", name_of(f), " (extent ", n ? std::to_string(*n) : std::string("unknown"),
                     ") outside the GPU bindings: it would run serially in every thread (bind it, or split it and "
                     "bind the outer part)"));
          }
          stmt(f->body, bound);
          return;
        }
        const int64_t* n = as_const_int(f->extent);
        const char* tag = for_kind_name(f->for_kind);
        if (!n) fail(str("binds loop ", name_of(f), " to ", tag, " with an extent that is not a constant"));
        if (!is_const(f->min, 0)) fail(str("binds loop ", name_of(f), " to ", tag, " with a nonzero start"));
        auto slot = static_cast<size_t>(gpu_binding_index(f->for_kind));
        if (active_[slot] && is_thread_binding(f->for_kind)) {
          // Cooperative: each thread of the enclosing binding runs its own iteration.
          if (*n > *extents_[slot]) {
            fail(str("binds loop ", name_of(f), " (extent ", *n, ") to ", tag, " inside loop ", *active_[slot],
                     ", which has only ", *extents_[slot], " threads"));
          }
          stmt(f->body, bound + 1);
          return;
        }
        if (active_[slot]) fail(str("binds ", tag, " twice on one path (loops ", *active_[slot], " and ", name_of(f), ")"));
        if (is_thread_binding(f->for_kind)) {
          // Thread loops one after another may differ: the block has the most threads any of
          // them needs, and a shorter one runs in the first threads only.
          extents_[slot] = std::max(extents_[slot].value_or(0), *n);
        } else {
          if (extents_[slot] && *extents_[slot] != *n) {
            fail(str("binds ", tag, " with two extents (", *extents_[slot], " and ", *n, " for loop ", name_of(f), ")"));
          }
          extents_[slot] = *n;
        }
        active_[slot] = name_of(f);
        stmt(f->body, bound + 1);
        active_[slot].reset();
        return;
      }
      case StmtKind::Store: {
        const Store* st = s.as<Store>();
        if (bound == 0 && !single_thread_) {
          fail(str("stores to ", st->buffer, " outside the GPU bindings: every thread would write the same elements"));
        }
        return;
      }
      case StmtKind::LetStmt:
        return stmt(s.as<LetStmt>()->body, bound);
      case StmtKind::IfThenElse: {
        const IfThenElse* i = s.as<IfThenElse>();
        ++conditions_;
        stmt(i->then_case, bound);
        if (i->else_case) stmt(i->else_case, bound);
        --conditions_;
        return;
      }
      case StmtKind::Barrier:
        if (conditions_ > 0 && s.as<Barrier>()->sync == Barrier::Kind::Block) {
          fail("has a barrier under a condition: threads that skip it would wait forever");
        }
        return;
      case StmtKind::Allocate: {
        const Allocate* a = s.as<Allocate>();
        bool shared = a->scope == MemScope::Shared;
        // Heap buffers cannot exist on a GPU: reported as past the local limit.
        // Shared buffers are counted twice: as static arrays (their bytes, what a kernel within
        // 48 KiB uses) and as parts of dynamic shared memory (each rounded up to 16 bytes:
        // gpu_buffer_bytes), which is what the limit bounds.
        Budget& b = shared ? shared_aligned_ : local_;
        int64_t bytes = shared ? gpu_buffer_bytes(a->size, a->elem) : a->size * 4;
        if (a->scope == MemScope::Heap || b.now + bytes > b.limit) {
          fail(str("needs ", b.now + bytes, " bytes of ", shared ? "shared memory per block (" : "local buffers per thread (",
                   a->buffer, ": ", bytes, " bytes); the limit is ", b.limit,
                   shared ? " (use smaller block tiles)" : " (use smaller tiles per thread)"));
        }
        const int64_t raw = shared ? a->size * a->elem.bytes() * a->elem.lanes : 0;
        b.now += bytes;
        b.most = std::max(b.most, b.now);
        shared_.now += raw;
        shared_.most = std::max(shared_.most, shared_.now);
        stmt(a->body, bound);
        b.now -= bytes;
        shared_.now -= raw;
        return;
      }
      case StmtKind::Block:
        for (const Stmt& c : s.as<Block>()->stmts) stmt(c, bound);
        return;
      case StmtKind::Prefetch:  // a hint GPU targets drop
        return;
    }
  }

  const LoweredFunc& f_;
  const Target& t_;
  GpuLimits limits_;
  std::array<std::optional<int64_t>, 6> extents_;      // blockIdx x,y,z then threadIdx x,y,z
  std::array<std::optional<std::string>, 6> active_;   // the enclosing loop bound to each axis
  // Bytes of the buffers enclosing the statement being checked, the most on any path, the limit.
  struct Budget {
    int64_t now = 0, most = 0, limit = 0;
  };
  Budget local_{0, 0, limits_.max_local_bytes_per_thread};
  // Shared buffers as static arrays (no limit of their own) and as dynamic shared memory.
  Budget shared_{0, 0, 0}, shared_aligned_{0, 0, limits_.max_dynamic_shared_bytes};
  int conditions_ = 0;
  bool single_thread_ = false;  // binds nothing and writes only scalars: one thread
};

// A thread's buffer allocated in a block outside its thread loops (compiler/early_loads.h:
// registers one loop bound to threadIdx.x fills and a later one reads): each thread of the
// block has its own on a GPU, so serialized, where one thread runs every thread's iterations,
// it gets a copy per iteration of those loops, element i of thread t's at t * size + i.
class PerThread : public IRMutator {
 public:
  PerThread(const Allocate& a) : a_(a) {}

  // The threads whose copies the buffer needs: the most iterations of a loop over threadIdx.x
  // that reads or writes it; 0 when none does.
  int64_t threads(const Stmt& body) {
    int64_t most = 0;
    post_order(
        body, [](const Expr&) {},
        [&](const Stmt& s) {
          const For* f = s.as<For>();
          if (!f || !is_thread_binding(f->for_kind) || !touches(f->body, {a_.buffer})) return;
          const int64_t* e = as_const_int(f->extent);
          TF_CHECK(f->for_kind == ForKind::ThreadIdxX && e, "serialize_gpu_bindings: buffer ",
                   a_.buffer, " is a thread's, read in a loop over ", for_kind_name(f->for_kind),
                   " of extent ", f->extent);
          most = std::max(most, *e);
        });
    return most;
  }

  Stmt mutate_stmt(const Stmt& s) override {
    if (const For* f = s.as<For>(); f && f->for_kind == ForKind::ThreadIdxX) {
      const Expr outer = thread_;
      thread_ = f->var - f->min;
      Stmt r = IRMutator::mutate_stmt(s);
      thread_ = outer;
      return r;
    }
    const Store* st = s.as<Store>();
    if (!st || st->buffer != a_.buffer) return IRMutator::mutate_stmt(s);
    return Store::make(st->buffer, mutate_expr(st->value), moved(st->index));
  }
  Expr mutate_expr(const Expr& e) override {
    Expr x = IRMutator::mutate_expr(e);
    const Load* l = x.as<Load>();
    if (!l || l->buffer != a_.buffer) return x;
    return Load::make(l->type.element_of(), l->buffer, moved(l->index));
  }

 private:
  Expr moved(const Expr& index) const {
    TF_CHECK(static_cast<bool>(thread_), "serialize_gpu_bindings: buffer ", a_.buffer,
             " is a thread's, used outside every loop over threadIdx.x");
    const Expr at = thread_ * Expr(a_.size);
    const int lanes = index.type().lanes;
    return index + (lanes > 1 ? Broadcast::make(at, lanes) : at);
  }

  const Allocate& a_;
  Expr thread_;
};

class Serializer : public IRMutator {
 public:
  Stmt mutate_stmt(const Stmt& s) override {
    if (const Allocate* a = s.as<Allocate>();
        a && a->scope == MemScope::Local && blocks_ > 0 && threads_ == 0) {
      PerThread copies(*a);
      if (const int64_t n = copies.threads(a->body); n > 0) {
        return Allocate::make(a->buffer, a->elem, a->size * n, a->scope,
                              mutate_stmt(copies.mutate_stmt(a->body)), a->async_copies);
      }
    }
    const For* f = s.as<For>();
    if (!f || !is_gpu_binding(f->for_kind)) return IRMutator::mutate_stmt(s);
    int& depth = is_thread_binding(f->for_kind) ? threads_ : blocks_;
    ++depth;
    Stmt body = mutate_stmt(f->body);
    --depth;
    return For::make(f->var, f->min, f->extent, ForKind::Serial, body);
  }

 private:
  int blocks_ = 0, threads_ = 0;
};

}  // namespace

Stmt serialize_gpu_bindings(const Stmt& s) { return Serializer().mutate_stmt(s); }

namespace {

class ThreadEmulator : public IRMutator {
 public:
  std::vector<std::pair<std::string, int64_t>> shared;

  Stmt mutate_stmt(const Stmt& s) override {
    if (const For* f = s.as<For>(); f && is_gpu_binding(f->for_kind)) {
      Expr id = Cast::make(Type::int64(), Load::make(Type::float32(), "tf_emu_ids",
                                                     Expr(int64_t{gpu_binding_index(f->for_kind)})));
      Stmt body = LetStmt::make(f->var, id + f->min, mutate_stmt(f->body));
      return IfThenElse::make(id < f->extent, body);
    }
    if (const Allocate* a = s.as<Allocate>(); a && a->scope == MemScope::Shared) {
      shared.emplace_back(a->buffer, a->size);
      return mutate_stmt(a->body);
    }
    if (const Barrier* b = s.as<Barrier>(); b && b->sync == Barrier::Kind::Block) {
      return Barrier::make(Barrier::Kind::Emulated);
    }
    return IRMutator::mutate_stmt(s);
  }
};

}  // namespace

EmulatedKernel emulate_gpu_thread(const LoweredFunc& f) {
  ThreadEmulator t;
  EmulatedKernel k;
  k.func = f;
  k.func.body = t.mutate_stmt(f.body);
  k.shared = t.shared;
  for (const auto& [name, size] : k.shared) k.func.args.push_back({name, {size}, ArgRole::Input});
  k.func.args.push_back({"tf_emu_ids", {6}, ArgRole::Input});
  return k;
}

int64_t gpu_buffer_bytes(int64_t elements, const Type& elem) {
  return (elements * elem.bytes() * elem.lanes + 15) / 16 * 16;
}

GpuLimits gpu_limits(const Target& t) {
  TF_CHECK(t.is_gpu(), "gpu_limits of ", t.str());
  // CUDA (every architecture since sm_20) and ROCm (HIP's limits on gfx9-gfx11) agree on
  // 1024 threads per block; the grid's y and z dimensions are 65535 on CUDA, larger on ROCm.
  GpuLimits l;
  // Dynamic shared memory past 48 KiB: CUDA only (AMD's 64 KiB of LDS are not used past 48).
  if (t.kind == TargetKind::Cuda) l.max_dynamic_shared_bytes = std::max(l.max_shared_bytes, gpu_arch(t).shared_per_block);
  return l;
}

GpuArch gpu_arch(const Target& t) {
  TF_CHECK(t.is_gpu(), "gpu_arch of ", t.str());
  struct Row {
    const char* name;
    GpuArch arch;
  };
  static const Row kRows[] = {
      // NVIDIA: SMs, warp, registers, per thread, shared memory per SM, threads per SM, shared
      // memory per block (the opt-in limit: CUDA's occupancy tables).
      {"sm_70", {80, 32, 65536, 255, 96 * 1024, 2048, 96 * 1024}},    // V100
      {"sm_72", {8, 32, 65536, 255, 96 * 1024, 2048, 96 * 1024}},     // Xavier
      {"sm_75", {40, 32, 65536, 255, 64 * 1024, 1024, 64 * 1024}},    // T4
      {"sm_80", {108, 32, 65536, 255, 164 * 1024, 2048, 163 * 1024}},  // A100
      {"sm_86", {82, 32, 65536, 255, 100 * 1024, 1536, 99 * 1024}},   // RTX 3090
      {"sm_87", {16, 32, 65536, 255, 164 * 1024, 1536, 163 * 1024}},   // Orin
      {"sm_89", {128, 32, 65536, 255, 100 * 1024, 1536, 99 * 1024}},  // RTX 4090
      {"sm_90", {132, 32, 65536, 255, 228 * 1024, 2048, 227 * 1024}},  // H100 SXM
      {"sm_100", {148, 32, 65536, 255, 228 * 1024, 2048, 227 * 1024}}, // B200
      {"sm_120", {170, 32, 65536, 255, 100 * 1024, 1536, 99 * 1024}}, // RTX 5090
      // AMD: compute units, wavefront, VGPR lanes per CU (4 SIMDs), per work-item, LDS.
      {"gfx906", {60, 64, 4 * 256 * 64, 256, 64 * 1024, 2560}},   // MI50, Radeon VII
      {"gfx908", {120, 64, 4 * 512 * 64, 512, 64 * 1024, 2560}},  // MI100
      {"gfx90a", {104, 64, 4 * 512 * 64, 512, 64 * 1024, 2048}},  // MI210
      {"gfx942", {304, 64, 4 * 512 * 64, 512, 64 * 1024, 2048}},  // MI300X
      {"gfx1030", {80, 32, 4 * 512 * 32, 256, 64 * 1024, 2048}},  // RX 6900 XT (wave32)
      {"gfx1100", {96, 32, 4 * 768 * 32, 256, 64 * 1024, 2048}},  // RX 7900 XTX (wave32)
  };
  const std::string& name = t.chip();
  for (const Row& r : kRows) {
    if (name == r.name) return r.arch;
  }
  GpuArch a;
  // Unknown chips: the kind's warp, except AMD's RDNA (gfx10+), which runs wave32.
  if (t.is_gpu()) a.warp = t.info().warp;
  if (t.kind == TargetKind::Rocm && name.rfind("gfx9", 0) != 0) a.warp = 32;
  return a;
}

nlohmann::json GpuLaunch::to_json() const {
  return {{"grid", grid}, {"block", block}, {"dynamic_shared_bytes", dynamic_shared_bytes},
          {"static_shared_bytes", static_shared_bytes}, {"local_bytes_per_thread", local_bytes_per_thread}};
}

GpuLaunch check_gpu_kernel(const LoweredFunc& f, const Target& t) {
  TF_CHECK(t.is_gpu(), "check_gpu_kernel for ", t.str());
  GpuLaunch launch = GpuChecker(f, t).run();
  // A warp-level product needs whole warps (every lane of each: mma.sync.aligned).
  // A warpgroup-level product, whole warpgroups (4 warps: wgmma.mma_async.sync.aligned).
  const std::string product = call_named(f.body, is_warp_mma), group_product = call_named(f.body, is_wgmma);
  if (!product.empty() && launch.threads_per_block() % 32 != 0) {
    throw UserError(str("kernel ", f.name, " uses ", product, " (a warp-level product) in blocks of ",
                        launch.threads_per_block(), " threads: it needs whole warps, a multiple of 32"));
  }
  if (!group_product.empty() && launch.threads_per_block() % 128 != 0) {
    throw UserError(str("kernel ", f.name, " uses ", group_product, " (a warpgroup-level product) in blocks of ",
                        launch.threads_per_block(), " threads: it needs whole warpgroups, a multiple of 128"));
  }
  return launch;
}

GpuProgram split_gpu_program(const LoweredFunc& f) {
  GpuProgram p;
  std::vector<Stmt> nests;
  // The top of a lowered function: heap buffers of intermediate root stages, each around a
  // block of the stage's nest and what follows (compiler/schedule_ops.cc).
  std::function<void(const Stmt&)> walk = [&](const Stmt& s) {
    if (const Allocate* a = s.as<Allocate>(); a && a->scope == MemScope::Heap) {
      p.workspaces.emplace_back(a->buffer, a->size);
      return walk(a->body);
    }
    if (const Block* b = s.as<Block>()) {
      for (const Stmt& c : b->stmts) walk(c);
      return;
    }
    nests.push_back(s);
  };
  walk(f.body);
  if (p.workspaces.empty() || nests.size() < 2) return {{f}, {}};
  if (static_cast<int>(nests.size()) > kMaxGpuKernelsPerCall) {
    throw UserError(str("kernel ", f.name, " would be ", nests.size(), " GPU kernels (root stages); the limit is ",
                        kMaxGpuKernelsPerCall));
  }
  int64_t bytes = 0;
  for (const auto& w : p.workspaces) bytes += w.second * 4;
  if (bytes > kMaxGpuWorkspaceBytes) {
    throw UserError(str("kernel ", f.name, " needs ", bytes, " bytes of GPU workspace; the limit is ",
                        kMaxGpuWorkspaceBytes));
  }
  for (size_t i = 0; i < nests.size(); ++i) {
    LoweredFunc k;
    k.name = i == 0 ? f.name : str(f.name, "_step", i + 1);
    k.args = f.args;
    for (const auto& [name, size] : p.workspaces) k.args.push_back({name, {size}, ArgRole::Output});
    k.body = nests[i];
    p.kernels.push_back(std::move(k));
  }
  return p;
}

GpuPlan plan_gpu_program(const LoweredFunc& f, const Target& t) {
  GpuProgram p = split_gpu_program(f);
  GpuPlan plan;
  for (const LoweredFunc& k : p.kernels) plan.kernels.push_back({k.name, check_gpu_kernel(k, t)});
  plan.workspaces = p.workspaces;
  return plan;
}

nlohmann::json GpuPlan::to_json() const {
  nlohmann::json j = kernels.at(0).launch.to_json();
  if (kernels.size() > 1) {
    j["then"] = nlohmann::json::array();
    for (size_t i = 1; i < kernels.size(); ++i) {
      nlohmann::json k = kernels[i].launch.to_json();
      k["function"] = kernels[i].function;
      j["then"].push_back(k);
    }
    j["workspace_elements"] = nlohmann::json::array();
    for (const auto& w : workspaces) j["workspace_elements"].push_back(w.second);
  }
  return j;
}

}  // namespace tf
