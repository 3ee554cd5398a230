#include "compiler/model_codegen.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "base/error.h"
#include "base/file_io.h"
#include "compiler/codegen_llvm.h"
#include "compiler/gpu_reduction.h"
#include "compiler/inline_budget.h"
#include "compiler/ir_mutator.h"
#include "compiler/link.h"
#include "compiler/lower.h"
#include "runtime/gpu_runtime.h"  // kMaxGpuKernelsPerCall

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using ir::num_elements;

// The default schedule of a generic kernel's stage: the innermost axis vectorized when the
// vector width divides it or it is longer than the vector (its last vector shifted inwards to
// overlap the one before; a reduction's loops moved inside the other spatial loops, around the
// lanes), the outer spatial loops fused into one of at least kFusedIterations iterations
// (the rest stay loops of their own: an index into a fused loop costs a division per axis in
// every iteration, and a layout transform of MobileNet-v2's input spent 8% of the model's
// time on them), parallel when the stage has enough work to pay for waking the thread pool.
// `blocked`: the kernel's images are all blocked ([N, C/c, H, W, c]: pools, Concat and
// elementwise kernels between blocked convolutions); then a parallel stage of such a shape is
// cut as the convolutions around it cut theirs, each thread a slice of the rows for every
// channel block (Stage::parallel_slices), so that a core reads the rows it wrote
// (docs/results/pool-own-segments-2026-12-01-zen5.txt: DenseNet-121 1.06x, EfficientNet-B0
// 1.03x at 2 threads). Not where an image is in NCHW (a layout transform): a slice of rows is
// then short runs of every channel's plane (MobileNet-v3's 0.955x).
constexpr int64_t kFusedIterations = 64;

void schedule_loops(ir::Stage& s, int lanes, bool blocked) {
  const ir::Operation& op = *s.op();
  size_t rank = op.shape.size();
  if (rank == 0) return;
  std::vector<ir::Expr> spatial(s.leaves().begin(),
                                s.leaves().begin() + static_cast<int64_t>(rank));
  std::vector<int64_t> extent(op.shape.begin(), op.shape.end());
  int64_t work = num_elements(op.shape);
  for (const ir::IterVar& r : op.reduce_axes) work *= r.extent;
  // Lanes: the vector's, or half or a quarter of it (at least 4) where that divides an
  // innermost axis shorter than the vector (blocks of 8 channels on AVX-512: a pooling of them
  // left to LLVM gathered across columns, 16 lanes of a stride-2 window, instead of one 8-lane
  // load per window element).
  const int64_t inner_extent = op.shape.back();
  if (inner_extent > 0 && inner_extent < lanes) {
    for (int v = lanes / 2; v >= 4; v /= 2) {
      if (inner_extent % v == 0) {
        lanes = v;
        break;
      }
    }
  }
  // Reductions too where the vector does not divide the axis: an NCHW 3x3 max pool over 28
  // columns ran 2.3x faster so than one column at a time (S3D's 3-D pools: the model 1.05x).
  // Such a reduction's vector loop stays out of the fused one: as a loop of its own around the
  // reduction's loops, its last vector shifts inwards to overlap the one before (each vector
  // computes its outputs whole: schedule_ops' shift_inwards), so every vector is whole. Fused,
  // the last vector was guarded lane by lane and vectorize_loops left the loop serial (an
  // NCHW pool of 19 output columns ran as scalar code).
  bool own_vector_loop = false;
  if (inner_extent % lanes == 0 || inner_extent > lanes) {
    own_vector_loop = op.reduce() && inner_extent % lanes != 0;
    auto [outer, inner] = s.split(spatial.back(), lanes);
    s.vectorize(inner);
    spatial.back() = outer;
    extent.back() = (extent.back() + lanes - 1) / lanes;
    if (op.reduce()) {
      // The reduction's loops go outside the lanes, so each lane accumulates its own output
      // (pooling of channel blocks, a sum over rows).
      std::vector<ir::Expr> order;
      for (const ir::Expr& v : s.leaves())
        if (s.is_reduce_var(v)) order.push_back(v);
      order.push_back(inner);
      s.reorder(order);
    }
  }
  const bool parallel = work >= (int64_t{1} << 15);
  if (parallel && blocked && rank == 5 && extent[2] > 1) {
    s.parallel_slices(s.fuse(s.fuse(spatial[0], spatial[1]), spatial[2]));
    return;
  }
  ir::Expr fused = spatial[0];
  int64_t iterations = extent[0];
  for (size_t d = 1; d + (own_vector_loop ? 1 : 0) < spatial.size() && iterations < kFusedIterations; ++d) {
    fused = s.fuse(fused, spatial[d]);
    iterations *= extent[d];
  }
  if (parallel) s.parallel(fused);
}

// The same on a GPU (correctness first): the spatial axes fused and dealt to a 1-D grid of
// blocks of up to 256 threads, one output element per thread (a reduction's loops inside,
// per thread). A stage of rank 0 has no axis to bind: its kernel runs as one thread
// (compiler/gpu.h check_gpu_kernel).
//
// An elementwise stage whose innermost dimension is a multiple of 4 gives each thread 4
// neighbours of it, vectorized (128-bit loads and stores where the operands are contiguous
// too), when that still leaves at least kMinGpuThreads threads.
constexpr int64_t kGpuLanes = 4, kMinGpuThreads = 16384;

void schedule_loops_gpu(ir::Stage& s) {
  const ir::Operation& op = *s.op();
  size_t rank = op.shape.size();
  if (rank == 0) return;
  std::vector<ir::Expr> spatial(s.leaves().begin(), s.leaves().begin() + static_cast<int64_t>(rank));
  int64_t threads = num_elements(op.shape);
  if (!op.reduce() && op.shape.back() % kGpuLanes == 0 && threads / kGpuLanes >= kMinGpuThreads) {
    auto [outer, lanes] = s.split(spatial.back(), kGpuLanes);
    s.vectorize(lanes);
    spatial.back() = outer;
    threads /= kGpuLanes;
  }
  ir::Expr fused = spatial[0];
  for (size_t d = 1; d < rank; ++d) fused = s.fuse(fused, spatial[d]);
  // (An empty tensor keeps a loop of extent 0: no block to launch.)
  auto [block, thread] = s.split(fused, std::clamp<int64_t>(threads, 1, 256));
  s.bind(block, "blockIdx.x");
  s.bind(thread, "threadIdx.x");
  // A thread's reduction (a pool's window, a short mean) with its innermost axis unrolled:
  // its loads in flight together (GPU codegen unrolls nothing the schedule does not).
  if (op.reduce() && !op.reduce_axes.empty()) ir::unroll_up_to_8(s, s.leaves().back(), op.reduce_axes.back().extent);
}

// How many reductions the TE graph of `t` holds (each a kernel of a GPU call).
int count_reductions(const ir::Tensor& t, std::set<const ir::Operation*>& seen) {
  if (!seen.insert(t.get()).second || t->is_placeholder()) return 0;
  int n = t->reduce() ? 1 : 0;
  for (const ir::Tensor& in : ir::inputs_of(t)) n += count_reductions(in, seen);
  return n;
}

// Whether `t` reads `op` directly or through stages that are not reductions (inlined).
bool reads_inline(const ir::Tensor& t, const ir::Operation* op, std::set<const ir::Operation*>& seen) {
  for (const ir::Tensor& in : ir::inputs_of(t)) {
    if (in.get() == op) return true;
    if (in->is_placeholder() || in->reduce() || !seen.insert(in.get()).second) continue;
    if (reads_inline(in, op, seen)) return true;
  }
  return false;
}

// Whether every read of `target` by `t` (through stages that are not reductions, inlined) is
// at t's own leading axes, in order: a row's reduction read by another's per-thread partial
// results at the same row, which the block has computed before them.
bool reads_at_own_row(const ir::Tensor& t, const ir::Operation* target) {
  bool ok = true;
  std::function<void(const ir::Expr&)> visit = [&](const ir::Expr& e) {
    ir::post_order(e, [&](const ir::Expr& x) {
      const ir::TensorRead* r = x.as<ir::TensorRead>();
      if (!r || !ok) return;
      if (r->op.get() == target) {
        if (r->indices.size() > t->axes.size()) ok = false;
        for (size_t d = 0; ok && d < r->indices.size(); ++d) ok = r->indices[d].same_as(t->axes[d].var);
      } else if (!r->op->is_placeholder() && !r->op->reduce()) {
        ir::VarMap m;
        for (size_t d = 0; d < r->op->axes.size(); ++d) m[r->op->axes[d].var.get()] = r->indices[d];
        visit(ir::substitute(r->op->body, m));
      }
    });
  };
  visit(t->body);
  return ok;
}

// A GPU kernel of rows (a Softmax: the row's max, the sum of its exponentials, then the row; a
// LayerNorm: mean, variance, then the row) as one kernel, a block per row: each reduction a
// block reduction (GpuReductionSplitter) computed at the row's loop, its partial results and
// its value in the block's shared memory, then the row's elements, a thread's every
// threads-th. Without it each reduction is a kernel of its own (three launches for a Softmax,
// each reading the row from global memory). Applies when the result is elementwise over
// [rows..., C], every reduction is a block reduction (the same threads) with one output per
// row and read by the result itself (directly or through inlined stages); false otherwise,
// nothing scheduled.
bool schedule_rows_gpu(ir::Schedule& sch, const ir::Tensor& result, const std::vector<ir::Stage*>& reductions,
                       const GpuReductionSplitter& splitter) {
  const std::vector<int64_t>& shape = result->shape;
  if (result->reduce() || shape.size() < 2 || reductions.empty() || shape.back() == 0) return false;
  const int64_t rows = num_elements(shape) / shape.back();
  int64_t threads = 0;
  for (ir::Stage* s : reductions) {
    const auto* b = splitter.block_reduction(s->op().get());
    std::set<const ir::Operation*> seen;
    if (!b || s->op()->shape.empty() || num_elements(s->op()->shape) != rows || (threads && b->threads != threads) ||
        !reads_inline(result, s->op().get(), seen)) {
      return false;
    }
    threads = b->threads;
  }
  // Reductions read by others' partial results: at the same row (computed at the row's loop,
  // a reduction's buffer holds that row alone).
  for (ir::Stage* s : reductions) {
    const auto& b = *splitter.block_reduction(s->op().get());
    for (ir::Stage* other : reductions) {
      if (other == s) continue;
      for (const ir::Tensor& reader : {s->op(), b.acc, b.shared}) {
        if (!reads_at_own_row(reader, other->op().get())) return false;
      }
    }
  }
  ir::Stage& out = sch[result];
  std::vector<ir::Expr> leaves(out.leaves().begin(), out.leaves().begin() + static_cast<int64_t>(shape.size()));
  ir::Expr row = leaves[0];
  for (size_t d = 1; d + 1 < shape.size(); ++d) row = out.fuse(row, leaves[d]);
  auto [step, thread] = out.split(leaves.back(), threads);
  out.reorder({row, thread, step});
  out.bind(row, "blockIdx.x");
  out.bind(thread, "threadIdx.x");
  ir::unroll_up_to(out, step, (shape.back() + threads - 1) / threads,
                   16);  // a thread's elements of the row
  for (ir::Stage* s : reductions) {
    const auto& b = *splitter.block_reduction(s->op().get());
    const size_t rank = s->op()->shape.size();
    s->compute_at(out, row);
    s->set_scope_shared(/*one_thread_reduces=*/true);
    ir::Expr fused = s->leaves()[0];
    for (size_t d = 1; d < rank; ++d) fused = s->fuse(fused, s->leaves()[1]);
    auto [each, first] = s->split(fused, 1);
    s->bind(first, "threadIdx.x");  // the block's first thread combines the tree's last level
    s->unroll(s->leaves().back());  // its loads of that level's values issued at once
    schedule_block_parts(sch, *s, each, b, rank);
  }
  return true;
}

}  // namespace

ir::LoweredFunc lower_generic_kernel(ir::Tensor result, const std::vector<ir::Tensor>& args,
                                     const Target& target, const std::string& function,
                                     const std::string& what, const LowerOptions& options) {
  const bool blocked = std::all_of(args.begin(), args.end(), [&](const ir::Tensor& a) {
    return a->shape.size() < 4 || a->shape.size() == 5;
  }) && result->shape.size() == 5;
  auto schedule_stage = [&](ir::Stage& s) {
    if (target.is_gpu()) schedule_loops_gpu(s);
    else schedule_loops(s, target.vector_lanes(), blocked);
  };
  // GPUs: long reductions with few outputs spread over threads, while the call's kernels
  // (every reduction, the output, each split into two) stay within the limit.
  std::optional<GpuReductionSplitter> splitter;
  if (target.is_gpu()) {
    std::set<const ir::Operation*> seen;
    int kernels = count_reductions(result, seen) + (result->reduce() ? 0 : 1);
    const GpuArch arch = gpu_arch(target);
    splitter.emplace(arch.multiprocessors * arch.threads_per_sm, kMaxGpuKernelsPerCall - kernels);
    result = splitter->rebuild(result);
  }
  ir::Schedule sch(result);
  auto schedule = [&](ir::Stage& s) {
    if (const auto* b = splitter ? splitter->block_reduction(s.op().get()) : nullptr)
      schedule_block_reduction(sch, s, *b);
    else
      schedule_stage(s);
  };
  std::vector<ir::Stage*> reductions;
  for (ir::Stage* s : sch.stages()) {
    if (s->op() == result || (splitter && splitter->is_block_part(s->op().get()))) continue;
    if (s->op()->reduce())
      reductions.push_back(s);
    else
      s->compute_inline();
  }
  // Stages whose inlining would make an expression too deep or too large for the compiler
  // (a long chain of elementwise nodes) are computed into buffers of their own instead.
  std::vector<ir::Stage*> rooted;
  try {
    rooted = ir::bound_inlining(sch);
  } catch (const UserError& e) {
    throw UserError(str(what, ": ", e.what()));
  }
  if (splitter && rooted.empty() && schedule_rows_gpu(sch, result, reductions, *splitter)) {
    return lower(sch, args, function, options).func;
  }
  for (ir::Stage* s : reductions) schedule(*s);
  for (ir::Stage* s : rooted) schedule_stage(*s);
  schedule(sch[result]);
  return lower(sch, args, function, options).func;
}

bool within_inline_budget(const std::vector<ir::Tensor>& stages) {
  std::map<const ir::Operation*, ir::ExprCost> costs;
  for (const ir::Tensor& t : stages) {
    ir::ExprCost c = ir::inlined_cost(t->body, costs);
    if (!ir::within_inline_budget(c)) return false;
    costs[t.get()] = c;
  }
  return true;
}

ModelCodegen::ModelCodegen(const Target& target, bool emulate_gpu)
    : target_(target), emulate_(emulate_gpu) {
  if (emulate_gpu && !target.is_gpu()) {
    throw UserError(str("emulating a GPU needs a GPU target (cuda, rocm), not ", target.str()));
  }
  gpu_library_ = target.is_gpu() && !emulate_gpu;
  code_target_ = target.is_gpu() ? host_target() : target;
  threads_ = model_compile_threads();
}

unsigned model_compile_threads() {
  return std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 8));
}

void run_on_threads(size_t count, unsigned threads, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k; (k = next++) < count;) work(k);
  };
  std::vector<std::thread> pool;
  for (size_t k = 1; k < std::min<size_t>(threads, count); ++k) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

void ModelCodegen::on_all_cores(const std::function<void(size_t)>& work, size_t count) const {
  run_on_threads(count, threads_, work);
}

json ModelCodegen::add_kernel(ir::LoweredFunc func, const std::string& what) {
  json launch;
  if (target_.is_gpu()) {
    // The kernel as the GPU will run it (the checker's refusals included): its kernels and
    // their launches.
    try {
      plans_.push_back(plan_gpu_program(func, target_));
    } catch (const UserError& e) {
      throw UserError(str(what, ": ", e.what()));
    }
    launch = plans_.back().to_json();
    // Emulated: its grid serially, for this machine.
    if (emulate_) func.body = serialize_gpu_bindings(func.body);
  }
  funcs_.push_back(std::move(func));
  return launch;
}

const std::vector<size_t>& ModelCodegen::share_code() {
  // Keyed by the LLVM IR before optimization (a GPU library's kernels by their GPU code: the
  // same for the GPU is the same everywhere).
  std::vector<std::string> keys(funcs_.size());
  errors_.assign(funcs_.size(), "");
  on_all_cores(
      [&](size_t k) {
        try {
          keys[k] = llvm_ir_key(funcs_[k], gpu_library_ ? target_ : code_target_);
        } catch (const std::exception& e) {
          errors_[k] = e.what();
        }
      },
      funcs_.size());
  code_of_.assign(funcs_.size(), 0);
  std::map<std::string, size_t> first;
  for (size_t k = 0; k < funcs_.size(); ++k) {
    code_of_[k] = errors_[k].empty() ? first.emplace(std::move(keys[k]), k).first->second : k;
  }
  return code_of_;
}

// A GPU model's device code and launch plans: the kernels of every bucket in up to `threads_`
// modules (each generated by one thread), split-K workspaces in scratch after the largest
// bucket's arena (one kernel runs at a time, so all calls share it), the host object of tables
// (codegen_gpu_model_entry) and the runtime's (runtime/gpu_model), whose paths join `objects`.
void ModelCodegen::write_gpu_objects(std::vector<EntrySpec>& buckets, const std::string& tmp,
                                     std::vector<std::string>& objects, Written& written) {
  constexpr int64_t kAlign = 256;
  auto aligned = [](int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; };
  int64_t arena = 0;
  for (const EntrySpec& b : buckets) arena = std::max(arena, b.workspace_bytes);
  const int64_t scratch_at = aligned(arena);
  int64_t scratch = 0;
  // The kernels whose code is generated (the others launch the same code of an earlier one,
  // code_of, with their own grids and workspaces), spread over the modules. (A model of no
  // kernel, its outputs copies of inputs or constants, has no module.)
  std::vector<size_t> unique;
  for (size_t k = 0; k < funcs_.size(); ++k)
    if (code_of_[k] == k) unique.push_back(k);
  const size_t modules = std::min<size_t>(threads_, unique.size());
  GpuEntrySpec gs;
  gs.platform = target_.kind;
  gs.modules.resize(modules);
  std::vector<std::vector<ir::LoweredFunc>> funcs(modules);
  std::vector<size_t> module_of(funcs_.size());
  for (size_t u = 0; u < unique.size(); ++u) {
    module_of[unique[u]] = u * modules / unique.size();
    funcs[module_of[unique[u]]].push_back(funcs_[unique[u]]);
  }
  for (size_t k = 0; k < funcs_.size(); ++k) {
    const GpuPlan& code = plans_[code_of_[k]];
    TF_CHECK(code.kernels.size() == plans_[k].kernels.size(), "kernel ", funcs_[k].name, " has the code of ",
             funcs_[code_of_[k]].name, " but other launches");
    GpuEntryCall call;
    call.module = static_cast<int64_t>(module_of[code_of_[k]]);
    for (size_t i = 0; i < plans_[k].kernels.size(); ++i) {
      const GpuLaunch& l = plans_[k].kernels[i].launch;
      call.kernels.push_back({code.kernels[i].function, l.grid, l.block, l.dynamic_shared_bytes});
    }
    int64_t at = scratch_at;
    for (const auto& [name, elements] : plans_[k].workspaces) {
      call.workspace_offsets.push_back(at);
      at += aligned(elements * 4);
    }
    scratch = std::max(scratch, at - scratch_at);
    gs.calls.push_back(std::move(call));
  }
  for (EntrySpec& b : buckets) b.workspace_bytes = scratch_at + scratch;
  std::vector<std::string> errors(modules);
  on_all_cores(
      [&](size_t m) {
        try {
          gs.modules[m] = gpu_device_module(funcs[m], target_, str(tmp, ".m", m));
        } catch (const std::exception& e) {
          errors[m] = e.what();
        }
      },
      modules);
  for (size_t m = 0; m < modules; ++m) {
    if (!errors[m].empty())
      throw std::runtime_error(str("GPU code of kernels ", funcs[m].front().name, " ... ", funcs[m].back().name, ": ",
                                   errors[m]));
  }
  objects.push_back(tmp + ".gpu_tables.o");
  write_file(objects.back(), codegen_gpu_model_entry(buckets, gs, host_target()));
  objects.push_back(tmp + ".gpu_runtime.o");
  write_file(objects.back(), std::string(gpu_model_runtime_object()));
  written.device_modules = static_cast<int64_t>(modules);
}

ModelCodegen::Written ModelCodegen::write(std::vector<EntrySpec>& buckets, const std::string& out,
                                          const std::function<std::string(const Written&)>& sidecar) {
  TF_CHECK(code_of_.size() == funcs_.size(), "ModelCodegen::write before share_code");
  TF_CHECK(!buckets.empty(), "ModelCodegen::write: no bucket");
  // Code generation, the kernels on all cores; then one link, under a temporary name.
  AtomicFile library(fs::absolute(out), ".so");
  const std::string tmp = library.temp_path();
  TemporaryFiles objects;
  Written written;
  if (gpu_library_) {
    write_gpu_objects(buckets, tmp, objects.paths, written);
    link_shared_library(objects.paths, library.temp_path(), code_target_, false, false, /*nodelete=*/true);
  } else {
    std::vector<CodegenResult> results(funcs_.size());
    on_all_cores(
        [&](size_t k) {
          if (code_of_[k] != k || !errors_[k].empty()) return;
          try {
            results[k] = codegen_llvm(funcs_[k], code_target_, CodegenOutput::Object);
          } catch (const std::exception& e) {
            errors_[k] = e.what();
          }
        },
        funcs_.size());
    bool openmp = false, libm = false;
    for (size_t k = 0; k < funcs_.size(); ++k) {
      if (!errors_[k].empty()) throw std::runtime_error(str("kernel ", funcs_[k].name, ": ", errors_[k]));
      if (code_of_[k] != k) continue;
      write_file(objects.add(str(tmp, ".k", k, ".o")), results[k].data);
      openmp |= results[k].uses_openmp;
      libm |= results[k].uses_libm;
    }
    // An entry that runs images on a team calls the pool itself (compiler/model_entry.h).
    for (const EntrySpec& b : buckets) openmp |= b.images > 1;
    write_file(objects.add(tmp + ".entry.o"), codegen_model_entry(buckets, code_target_));
    link_shared_library(objects.paths, library.temp_path(), code_target_, openmp, libm);
  }
  for (const EntrySpec& b : buckets) written.workspace_bytes = std::max(written.workspace_bytes, b.workspace_bytes);
  write_file(library.final_path() + ".json", sidecar(written));
  library.commit();
  return written;
}

}  // namespace tf
