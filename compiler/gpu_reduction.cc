#include "compiler/gpu_reduction.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "compiler/ir_mutator.h"

namespace tf {
namespace {

using ir::Expr;

int64_t reduction_length(const ir::Operation& op) {
  int64_t length = 1;
  for (const ir::IterVar& r : op.reduce_axes) length *= r.extent;
  return length;
}

// Two values combined as the reduction combines them.
Expr combine2(ir::ReduceKind k, Expr a, Expr b) {
  if (k == ir::ReduceKind::Max) return ir::max(std::move(a), std::move(b));
  if (k == ir::ReduceKind::Prod) return std::move(a) * std::move(b);
  return std::move(a) + std::move(b);
}

Expr combine(ir::ReduceKind k, Expr source, const std::vector<ir::IterVar>& axes) {
  if (k == ir::ReduceKind::Max) return ir::max_reduce(std::move(source), axes);
  if (k == ir::ReduceKind::Prod) return ir::prod_reduce(std::move(source), axes);
  return ir::sum(std::move(source), axes);
}

// The reduction's source at output element `ax` and element `flat` of its flattened reduction
// axes; with `tail`, `flat` past the end gives the combiner's identity (reading the last
// element, in range).
Expr source_at(const ir::Operation& op, const std::vector<Expr>& ax, const Expr& flat, bool tail) {
  const ir::Reduce* red = op.reduce();
  const int64_t length = reduction_length(op);
  ir::VarMap m;
  for (size_t i = 0; i < op.axes.size(); ++i) m[op.axes[i].var.get()] = ax[i];
  Expr rest = tail ? ir::min(flat, Expr(length - 1)) : flat;
  for (size_t j = op.reduce_axes.size(); j-- > 0;) {
    const int64_t e = op.reduce_axes[j].extent;
    m[op.reduce_axes[j].var.get()] = j == 0 ? rest : rest % e;
    rest = rest / e;
  }
  Expr v = ir::substitute(red->source, m);
  return tail ? ir::select(flat < Expr(length), v, red->identity()) : v;
}

std::vector<std::string> axis_names(const ir::Operation& op) {
  std::vector<std::string> names;
  for (const ir::IterVar& a : op.axes) names.push_back(a.name());
  return names;
}

// `op` as partial results [outputs..., parts], `name<suffix>` (part p's step s reduces
// element `element(p, s)` of the flattened reduction axes, for `steps` steps), read through
// `keep(partials)` (of the same rank; its last extent is what `name` combines), and their
// combination in order, `name`.
struct Partial {
  ir::Tensor part, result;
};
Partial partial(const ir::Tensor& op, const std::string& suffix, int64_t parts, int64_t steps,
                const std::function<Expr(const Expr&, const Expr&)>& element,
                const std::function<ir::Tensor(const ir::Tensor&)>& keep) {
  const ir::ReduceKind kind = op->reduce()->reduce;
  const bool tail = parts * steps != reduction_length(*op);
  std::vector<int64_t> shape = op->shape;
  shape.push_back(parts);
  std::vector<std::string> names = axis_names(*op);
  names.push_back("rpart");
  ir::IterVar step = ir::reduce_axis(steps, "rstep");
  Partial p;
  p.part = ir::compute(op->name + suffix, shape, names, [&](const std::vector<Expr>& ax) {
    std::vector<Expr> at(ax.begin(), ax.end() - 1);
    return combine(kind, source_at(*op, at, element(ax.back(), step.var), tail), {step});
  }, {step});
  ir::Tensor kept = keep(p.part);
  ir::IterVar across = ir::reduce_axis(kept->shape.back(), "rpart");
  p.result = ir::compute(op->name, op->shape, axis_names(*op), [&](const std::vector<Expr>& ax) {
    std::vector<Expr> at = ax;
    at.push_back(across.var);
    return combine(kind, ir::read(kept, at), {across});
  }, {across});
  return p;
}

// Slices of consecutive elements, each reduced by a thread: `name_part` at root.
ir::Tensor split(const ir::Tensor& op, int64_t parts) {
  const int64_t slice = (reduction_length(*op) + parts - 1) / parts;
  auto element = [&](const Expr& p, const Expr& s) { return p * slice + s; };
  return partial(op, "_part", parts, slice, element, [](const ir::Tensor& t) { return t; }).result;
}

}  // namespace

const GpuReductionSplitter::BlockReduction* GpuReductionSplitter::block_reduction(const ir::Operation* op) const {
  auto it = blocks_.find(op);
  return it == blocks_.end() ? nullptr : &it->second;
}

ir::Tensor GpuReductionSplitter::finish(ir::Tensor rebuilt) {
  if (!rebuilt->reduce()) return rebuilt;
  const int64_t length = reduction_length(*rebuilt), outputs = ir::num_elements(rebuilt->shape);
  if (length < 64 || outputs == 0 || outputs >= threads_) return rebuilt;
  if (!rebuilt->shape.empty() && length <= kMaxBlockThreads * kMaxPerThread) {
    int64_t threads = kMinBlockThreads;
    while (threads * 2 <= std::min(kMaxBlockThreads, length / 8)) threads *= 2;
    return block_reduce(rebuilt, threads);
  }
  const int64_t parts = std::min((threads_ + outputs - 1) / outputs, length / 16);
  if (parts < 2 || budget_ <= 0) return rebuilt;
  --budget_;
  return split(rebuilt, parts);
}

ir::Tensor GpuReductionSplitter::block_reduce(const ir::Tensor& op, int64_t threads) {
  const int64_t steps = (reduction_length(*op) + threads - 1) / threads;
  BlockReduction b;
  b.threads = threads;
  auto element = [&](const Expr& t, const Expr& s) { return t + s * threads; };
  const ir::ReduceKind kind = op->reduce()->reduce;
  auto keep = [&](const ir::Tensor& acc) {
    b.shared = ir::compute(op->name + "_shared", acc->shape, axis_names(*acc),
                           [&](const std::vector<Expr>& ax) { return ir::read(acc, ax); });
    // Levels of fan-in kTreeFanIn while more than kMaxFirstThread values are left: element
    // j of a level combines elements j, j + h, ..., j + 7h of the one before (neighbouring
    // threads read neighbouring words: no bank conflicts), balanced, so that its reads are in
    // flight together; a barrier after each level. 32 to 128 threads: one level.
    ir::Tensor level = b.shared;
    for (int64_t n = threads; n > kMaxFirstThread; n /= kTreeFanIn) {
      const int64_t h = n / kTreeFanIn;
      std::vector<int64_t> shape = acc->shape;
      shape.back() = h;
      const ir::Tensor prev = level;
      level = ir::compute(str(op->name, "_tree", h), shape, axis_names(*acc),
                          [&](const std::vector<Expr>& ax) {
                            std::vector<Expr> values;
                            for (int64_t r = 0; r < kTreeFanIn; ++r) {
                              std::vector<Expr> at = ax;
                              at.back() = ax.back() + Expr(r * h);
                              values.push_back(ir::read(prev, at));
                            }
                            while (values.size() > 1) {
                              std::vector<Expr> next;
                              for (size_t i = 0; i + 1 < values.size(); i += 2)
                                next.push_back(combine2(kind, values[i], values[i + 1]));
                              values = std::move(next);
                            }
                            return values[0];
                          });
      b.tree.push_back(level);
    }
    return level;
  };
  Partial p = partial(op, "_acc", threads, steps, element, keep);
  b.acc = p.part;
  parts_.insert(b.acc.get());
  parts_.insert(b.shared.get());
  for (const ir::Tensor& level : b.tree) parts_.insert(level.get());
  blocks_[p.result.get()] = b;
  return p.result;
}

void schedule_block_reduction(ir::Schedule& sch, ir::Stage& r, const GpuReductionSplitter::BlockReduction& b) {
  const size_t rank = r.op()->shape.size();
  Expr fused = r.leaves()[0];
  for (size_t d = 1; d < rank; ++d) fused = r.fuse(fused, r.leaves()[1]);
  auto [block, first] = r.split(fused, 1);
  r.bind(block, "blockIdx.x");
  r.bind(first, "threadIdx.x");  // one thread: the block's first
  r.unroll(r.leaves().back());   // its loads of the last level's values issued at once
  schedule_block_parts(sch, r, block, b, rank);
}

void schedule_block_parts(ir::Schedule& sch, ir::Stage& r, const Expr& at,
                          const GpuReductionSplitter::BlockReduction& b, size_t rank) {
  // From the level r reads (the smallest) to the shared partial results.
  std::vector<ir::Tensor> levels(b.tree.rbegin(), b.tree.rend());
  levels.push_back(b.shared);
  ir::Stage* reader = &r;
  Expr where = at;
  for (const ir::Tensor& level : levels) {
    ir::Stage& st = sch[level];
    st.compute_at(*reader, where);
    st.set_scope_shared();
    st.bind(st.leaves()[rank], "threadIdx.x");
    reader = &st;
    where = st.leaves()[rank - 1];
  }
  ir::Stage& acc = sch[b.acc];
  acc.compute_at(*reader, reader->leaves()[rank]);
  // A thread's elements (every threads-th) unrolled: their loads in flight together, all of
  // them up to 16 (a loop of a few unrolled iterations waits for each iteration's loads
  // before it issues the next's).
  ir::unroll_up_to(acc, acc.leaves().back(), b.acc->reduce_axes.at(0).extent, 16);
}

}  // namespace tf
