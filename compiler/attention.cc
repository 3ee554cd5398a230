#include "compiler/attention.h"

#include <algorithm>
#include <utility>

#include "base/error.h"
#include "compiler/gpu.h"
#include "compiler/schedule.h"

namespace tf {
namespace {

using ir::Expr;
using Index = std::vector<Expr>;

std::vector<std::string> names(size_t batch, std::initializer_list<const char*> rest) {
  std::vector<std::string> n;
  for (size_t d = 0; d < batch; ++d) n.push_back(str("b", d));
  for (const char* r : rest) n.emplace_back(r);
  return n;
}

Index with(const Index& batch, std::initializer_list<Expr> rest) {
  Index i = batch;
  i.insert(i.end(), rest.begin(), rest.end());
  return i;
}

Index batch_of(const Index& i, size_t rank) { return Index(i.begin(), i.begin() + static_cast<int64_t>(rank)); }

}  // namespace

Attention attention(const AttentionSpec& s, const std::string& name) {
  TF_CHECK(!s.batch.empty() && s.q && s.kt && s.v, "attention: batch dimensions and Q, K^T, V are required");
  const size_t nb = s.batch.size();
  Attention a;
  std::vector<int64_t> scores_shape = s.batch, rows_shape = s.batch, out_shape = s.batch;
  scores_shape.insert(scores_shape.end(), {s.queries, s.keys});
  rows_shape.push_back(s.queries);
  out_shape.insert(out_shape.end(), {s.queries, s.value_depth});

  ir::IterVar d = ir::reduce_axis(s.depth, "d");
  a.scores = ir::compute(name + "_scores", scores_shape, names(nb, {"i", "j"}), [&](const Index& i) {
    const Index b = batch_of(i, nb);
    return ir::sum(s.q(with(b, {i[nb], d.var})) * s.kt(with(b, {d.var, i[nb + 1]})), {d});
  }, {d});
  // The scaled, masked score at [batch..., i, j], read where it is needed (inlined).
  auto x = [&](const Index& at) {
    Expr v = ir::read(a.scores, at);
    if (s.scale != 1.0) v = v * ir::f32(s.scale);
    if (s.divisor != 1.0) v = v / ir::f32(s.divisor);
    if (s.mask) v = v + s.mask(at);
    return v;
  };
  ir::IterVar jm = ir::reduce_axis(s.keys, "j");
  a.max = ir::compute(name + "_max", rows_shape, names(nb, {"i"}), [&](const Index& i) {
    return ir::max_reduce(x(with(i, {jm.var})), {jm});
  }, {jm});
  ir::IterVar js = ir::reduce_axis(s.keys, "j");
  a.sum = ir::compute(name + "_sum", rows_shape, names(nb, {"i"}), [&](const Index& i) {
    return ir::sum(ir::exp(x(with(i, {js.var})) - ir::read(a.max, i)), {js});
  }, {js});
  a.probs = ir::compute(name + "_probs", scores_shape, names(nb, {"i", "j"}), [&](const Index& i) {
    const Index row = batch_of(i, nb + 1);
    return ir::exp(x(i) - ir::read(a.max, row)) / ir::read(a.sum, row);
  });
  ir::IterVar jo = ir::reduce_axis(s.keys, "j");
  const std::vector<std::string> out_names = names(nb, {"i", "e"});
  std::vector<int64_t> perm = s.out_perm;
  if (perm.empty()) {
    for (size_t d = 0; d < out_shape.size(); ++d) perm.push_back(static_cast<int64_t>(d));
  }
  TF_CHECK(perm.size() == out_shape.size(), "attention: out_perm of ", perm.size(), " dimensions for ", out_shape.size());
  std::vector<int64_t> shape;
  std::vector<std::string> axis_names;
  for (int64_t d : perm) {
    shape.push_back(out_shape[static_cast<size_t>(d)]);
    axis_names.push_back(out_names[static_cast<size_t>(d)]);
  }
  a.out = ir::compute(name, shape, axis_names, [&](const Index& at) {
    Index i(at.size());  // [batch..., i, e] from the output's order
    for (size_t k = 0; k < at.size(); ++k) i[static_cast<size_t>(perm[k])] = at[k];
    const Index b = batch_of(i, nb);
    return ir::sum(ir::read(a.probs, with(b, {i[nb], jo.var})) * s.v(with(b, {jo.var, i[nb + 1]})), {jo});
  }, {jo});
  a.out_perm = perm;
  return a;
}

int64_t max_attention_keys() { return kGpuStaticSharedBytes / 16 - 1; }

int64_t attention_rows_per_block(const std::vector<int64_t>& batch, int64_t queries, int64_t keys,
                                 const Target& target) {
  if (keys <= 0 || queries <= 0) return 0;
  const GpuArch arch = gpu_arch(target);
  // Scores and probabilities (rows + 1 rows of keys) and the rows' max and sum, float32.
  auto bytes = [&](int64_t rows) { return 4 * (rows + 1) * (2 * keys + 2); };
  const int64_t limit = kGpuStaticSharedBytes;  // static shared memory, which every GPU allows
  int64_t rows = 32;
  while (rows > 1 && (bytes(rows) > limit || rows / 2 >= queries)) rows /= 2;
  if (bytes(rows) > limit) return 0;
  int64_t heads = 1;
  for (int64_t b : batch) heads *= b;
  while (rows > 4 && heads * ((queries + rows - 1) / rows) < 2 * arch.multiprocessors) rows /= 2;
  return rows;
}

ir::LoweredFunc lower_attention_gpu(const Attention& a, const std::vector<ir::Tensor>& args, const Target& target,
                                    const std::string& function) {
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
    if (op != a.scores.get() && op != a.max.get() && op != a.sum.get() && op != a.probs.get() && op != a.out.get())
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
    o.reorder({block, thread, step, l[nb + 2]});
    o.bind(block, "blockIdx.x");
    o.bind(thread, "threadIdx.x");
    // The probabilities of the block's rows, in shared memory.
    ir::Stage& p = sch[a.probs];
    p.compute_at(o, block);
    p.set_scope_shared();
  }
  // A [batch..., rows, keys] stage in shared memory: each thread a column (key) of every row.
  auto by_columns = [&](ir::Stage& s) {
    const std::vector<Expr> l = s.leaves();  // batch..., i, j[, d]
    auto [step, thread] = s.split(l[nb + 1], threads);
    std::vector<Expr> order(l.begin(), l.begin() + static_cast<int64_t>(nb));
    order.insert(order.end(), {thread, l[nb], step});
    if (l.size() > nb + 2) order.push_back(l[nb + 2]);
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
    auto [step, thread] = r.split(l[nb], threads);
    std::vector<Expr> order(l.begin(), l.begin() + static_cast<int64_t>(nb));
    order.insert(order.end(), {thread, step, l[nb + 1]});
    r.reorder(order);
    r.bind(thread, "threadIdx.x");
  }
  std::vector<ir::Tensor> inputs = args;
  return lower(sch, inputs, function).func;
}

}  // namespace tf
