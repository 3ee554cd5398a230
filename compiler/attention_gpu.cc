// The attention kernel's GPU schedule (compiler/attention.h), apart from its expressions: the
// importer's fuzz build links those without the lowering.
#include <algorithm>

#include "base/error.h"
#include "compiler/attention.h"
#include "compiler/gpu.h"
#include "compiler/schedule.h"

namespace tf {

using ir::Expr;

ir::LoweredFunc lower_attention_gpu(const Attention& a, const std::vector<ir::Tensor>& args,
                                    const Target& target, const std::string& function,
                                    const LowerOptions& options) {
  TF_CHECK(target.is_gpu(), "lower_attention_gpu: ", target.str(), " is not a GPU target");
  const size_t nb = a.scores->shape.size() - 2;
  const int64_t queries = a.scores->shape[nb], keys = a.scores->shape[nb + 1];
  const std::vector<int64_t> batch(a.scores->shape.begin(), a.scores->shape.begin() + static_cast<int64_t>(nb));
  const int64_t rows = attention_rows_per_block(batch, queries, keys, target);
  if (rows == 0) {
    throw UserError(str(function, ": attention over ", keys, " keys: one row of its scores does not fit a block's ",
                        kGpuStaticSharedBytes / 1024, " KiB of shared memory (at most ", max_attention_keys(), ")"));
  }
  const int64_t threads = kAttentionThreads;

  ir::Schedule sch(a.out);
  for (ir::Stage* s : sch.stages()) {
    const ir::Operation* op = s->op().get();
    if (op != a.scores.get() && op != a.max_part.get() && op != a.max.get() && op != a.sum_part.get() &&
        op != a.sum.get() && op != a.probs.get() && op != a.out.get())
      s->compute_inline();  // the operands' producers (layout, scale)
  }
  // The output: a block per `rows` query rows of one head; its threads take (row, column)
  // pairs, each summing over the keys.
  ir::Stage& o = sch[a.out];
  {
    // The output's loops in [batch..., i, e] order (out_perm may have permuted them), then j.
    std::vector<Expr> l(a.out_perm.size() + 1);
    for (size_t k = 0; k < a.out_perm.size(); ++k) l[static_cast<size_t>(a.out_perm[k])] = o.leaves()[k];
    l.back() = o.leaves().back();
    o.reorder(l);
    auto [io, ii] = o.split(l[nb], rows);
    Expr block = l[0];
    for (size_t k = 1; k < nb; ++k) block = o.fuse(block, l[k]);
    block = o.fuse(block, io);
    // As many threads as divide the tile's (row, column) pairs: a thread count that does not
    // would reach past the tile's last row, and the probabilities' region with it.
    const auto e_at = std::find(a.out_perm.begin(), a.out_perm.end(), static_cast<int64_t>(nb + 1)) - a.out_perm.begin();
    const int64_t pairs = rows * a.out->shape[static_cast<size_t>(e_at)];  // rows x value_depth
    int64_t out_threads = std::min(threads, pairs);
    while (pairs % out_threads != 0) --out_threads;
    auto [step, thread] = o.split(o.fuse(ii, l[nb + 1]), out_threads);
    // The sum over the keys unrolled, so that a thread's loads of V are in flight together.
    std::vector<Expr> order{block, thread, step};
    for (const Expr& e : ir::unroll_up_to_8(o, l[nb + 2], keys)) order.push_back(e);
    o.reorder(order);
    o.bind(block, "blockIdx.x");
    o.bind(thread, "threadIdx.x");
    // The probabilities of the block's rows, in shared memory.
    ir::Stage& p = sch[a.probs];
    p.compute_at(o, block);
    p.set_scope_shared();
  }
  // A [batch..., rows, keys] stage in shared memory: each thread a column (key) of every row
  // (the scores' sum over the depth unrolled).
  auto by_columns = [&](ir::Stage& s) {
    const std::vector<Expr> l = s.leaves();  // batch..., i, j[, d]
    auto [step, thread] = s.split(l[nb + 1], threads);
    std::vector<Expr> order(l.begin(), l.begin() + static_cast<int64_t>(nb));
    order.insert(order.end(), {thread, l[nb], step});
    if (l.size() > nb + 2) {
      for (const Expr& e : ir::unroll_up_to_8(s, l[nb + 2], s.op()->reduce_axes.at(0).extent)) order.push_back(e);
    }
    s.reorder(order);
    s.bind(thread, "threadIdx.x");
  };
  ir::Stage& p = sch[a.probs];
  by_columns(p);
  // Scores, then the rows' max and sum, before the probabilities (at their last batch loop).
  const Expr at = p.leaves()[nb - 1];
  ir::Stage& sc = sch[a.scores];
  sc.compute_at(p, at);
  sc.set_scope_shared(/*one_thread_reduces=*/true);
  by_columns(sc);
  for (const ir::Tensor& t : {a.max, a.sum}) {
    ir::Stage& r = sch[t];
    r.compute_at(p, at);
    r.set_scope_shared(/*one_thread_reduces=*/true);
    const std::vector<Expr> l = r.leaves();  // batch..., i, j
    // A thread a row: as many threads as the block has rows, so that the parts above them
    // cover those rows alone.
    auto [step, thread] = r.split(l[nb], std::min(threads, rows));
    std::vector<Expr> order(l.begin(), l.begin() + static_cast<int64_t>(nb));
    order.insert(order.end(), {thread, step});
    for (const Expr& e : ir::unroll_up_to_8(r, l[nb + 1], kAttentionRowLanes)) order.push_back(e);
    r.reorder(order);
    r.bind(thread, "threadIdx.x");
  }
  // The lanes' parts of the rows' max and sum, before the max and the sum that read them (at
  // their last batch loop): a thread each (row, lane), reducing every lanes-th key.
  for (const auto& [t, reader] : {std::pair{a.max_part, a.max}, std::pair{a.sum_part, a.sum}}) {
    ir::Stage& r = sch[t];
    ir::Stage& consumer = sch[reader];
    r.compute_at(consumer, consumer.leaves()[nb - 1]);
    r.set_scope_shared(/*one_thread_reduces=*/true);
    const std::vector<Expr> l = r.leaves();  // batch..., i, l, k
    auto [step, thread] = r.split(r.fuse(l[nb], l[nb + 1]), threads);
    std::vector<Expr> order(l.begin(), l.begin() + static_cast<int64_t>(nb));
    order.insert(order.end(), {thread, step});
    for (const Expr& e : ir::unroll_up_to_8(r, l[nb + 2], t->reduce_axes.at(0).extent)) order.push_back(e);
    r.reorder(order);
    r.bind(thread, "threadIdx.x");
  }
  return lower(sch, args, function, options).func;
}

}  // namespace tf
