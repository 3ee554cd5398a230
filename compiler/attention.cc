#include "compiler/attention.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "base/error.h"
#include "compiler/gpu.h"

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
    if (s.softcap > 0) v = ir::f32(s.softcap) * ir::tanh(v / ir::f32(s.softcap));
    if (s.mask) v = v + s.mask(at);
    return v;
  };
  // The rows' max and sum of exponentials in two steps, so that a row's keys are spread over
  // kAttentionRowLanes threads: lane l reduces keys l, l + lanes, ... (`_max_part`,
  // `_sum_part`), then one thread a row combines the lanes' results. Lanes past the last key
  // read it again (harmless to a max) and add nothing to the sum.
  const int64_t lanes = kAttentionRowLanes, chunks = (s.keys + lanes - 1) / lanes;
  std::vector<int64_t> parts_shape = rows_shape;
  parts_shape.push_back(lanes);
  auto key_of = [&](const Expr& lane, const Expr& chunk) { return lane + chunk * lanes; };
  auto clamped = [&](const Expr& j) { return chunks * lanes > s.keys ? ir::min(j, Expr(s.keys - 1)) : j; };
  ir::IterVar km = ir::reduce_axis(chunks, "k");
  a.max_part = ir::compute(name + "_max_part", parts_shape, names(nb, {"i", "l"}), [&](const Index& i) {
    return ir::max_reduce(x(with(batch_of(i, nb + 1), {clamped(key_of(i[nb + 1], km.var))})), {km});
  }, {km});
  ir::IterVar lm = ir::reduce_axis(lanes, "l");
  a.max = ir::compute(name + "_max", rows_shape, names(nb, {"i"}), [&](const Index& i) {
    return ir::max_reduce(ir::read(a.max_part, with(i, {lm.var})), {lm});
  }, {lm});
  ir::IterVar ks = ir::reduce_axis(chunks, "k");
  a.sum_part = ir::compute(name + "_sum_part", parts_shape, names(nb, {"i", "l"}), [&](const Index& i) {
    const Index row = batch_of(i, nb + 1);
    const Expr j = key_of(i[nb + 1], ks.var);
    Expr e = ir::exp(x(with(row, {clamped(j)})) - ir::read(a.max, row));
    if (chunks * lanes > s.keys) e = ir::select(j < Expr(s.keys), e, ir::f32(0));
    return ir::sum(e, {ks});
  }, {ks});
  ir::IterVar ls = ir::reduce_axis(lanes, "l");
  a.sum = ir::compute(name + "_sum", rows_shape, names(nb, {"i"}), [&](const Index& i) {
    return ir::sum(ir::read(a.sum_part, with(i, {ls.var})), {ls});
  }, {ls});
  a.probs = ir::compute(name + "_probs", scores_shape, names(nb, {"i", "j"}), [&](const Index& i) {
    const Index row = batch_of(i, nb + 1);
    Expr p = ir::exp(x(i) - ir::read(a.max, row)) / ir::read(a.sum, row);
    if (s.zero_masked_rows) p = ir::select(ir::read(a.max, row) < ir::f32(-std::numeric_limits<float>::max()), ir::f32(0), p);
    return p;
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

int64_t max_attention_keys() { return (kGpuStaticSharedBytes - 8 * kAttentionRowLanes) / 16 - 1; }

int64_t attention_rows_per_block(const std::vector<int64_t>& batch, int64_t queries, int64_t keys,
                                 const Target& target) {
  if (keys <= 0 || queries <= 0) return 0;
  const GpuArch arch = gpu_arch(target);
  // Scores and probabilities (rows + 1 rows of keys), the rows' max and sum and their lanes'
  // parts, float32.
  auto bytes = [&](int64_t rows) { return 4 * (rows + 1) * (2 * keys + 2) + 8 * rows * kAttentionRowLanes; };
  const int64_t limit = kGpuStaticSharedBytes;  // static shared memory, which every GPU allows
  int64_t rows = 32;
  while (rows > 1 && (bytes(rows) > limit || rows / 2 >= queries)) rows /= 2;
  if (bytes(rows) > limit) return 0;
  int64_t heads = 1;
  for (int64_t b : batch) heads *= b;
  while (rows > 4 && heads * ((queries + rows - 1) / rows) < 2 * arch.multiprocessors) rows /= 2;
  return rows;
}

}  // namespace tf
