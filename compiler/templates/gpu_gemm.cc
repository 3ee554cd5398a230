#include "compiler/templates/gpu_gemm.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "compiler/gpu.h"
#include "compiler/ir_mutator.h"
#include "compiler/te_rebuild.h"

namespace tf::templates {
namespace {

// Each part of a split reduction is at least this deep (the default and the tuner's
// candidates; a given config may go below).
constexpr int64_t kMinSplitDepth = 64;

// Shared rows are padded by this many floats: 16 bytes keeps them 16-byte aligned for vector
// accesses and moves consecutive rows 4 banks apart.
constexpr int64_t kSharedPad = 4;
// The most accumulators a thread holds (registers: 255 per thread on NVIDIA).
constexpr int64_t kMaxAccumulators = 64;

// The block's tiles of A and B, each at most the whole matrix, rows padded; `stages` of
// each, every one rounded up to 16 bytes (as lowering allocates them).
int64_t shared_bytes(const GemmShape& g, const json& c, const GemmHierarchy& h) {
  int64_t rows = std::min(h.block_m(), g.m), cols = std::min(h.block_n(), g.n), depth = std::min(h.block_k, g.k);
  auto tile = [](int64_t floats) { return (floats + 3) / 4 * 4; };
  int64_t stages = c["stages"].get<int64_t>();
  return (tile((rows + kSharedPad) * depth) + tile((cols + kSharedPad) * depth)) * 4 * stages;
}

// The storage order that keeps an operand's last two dimensions swapped (K-major A).
std::vector<size_t> transposed(size_t rank) {
  return rank == 3 ? std::vector<size_t>{0, 2, 1} : std::vector<size_t>{1, 0};
}

}  // namespace

std::vector<size_t> as_is(size_t rank) { return rank == 3 ? std::vector<size_t>{0, 1, 2} : std::vector<size_t>{0, 1}; }

Expr cooperative_copy(Stage& sh, int64_t threads_y, int64_t threads_x, bool vec, int64_t lanes) {
  const auto& ax = sh.op()->axes;
  std::vector<Expr> outer;
  for (size_t i = 0; i + 1 < ax.size(); ++i) outer.push_back(ax[i].var);
  Expr inner = ax.back().var;
  if (vec) {
    auto [io, iv] = sh.split(inner, lanes);
    sh.vectorize(iv);
    inner = io;
  }
  Expr all = outer.empty() ? inner : outer[0];
  for (size_t i = 1; i < outer.size(); ++i) all = sh.fuse(all, outer[i]);
  if (!outer.empty()) all = sh.fuse(all, inner);
  auto [rounds, lane] = sh.split(all, threads_y * threads_x);
  auto [y, x] = sh.split(lane, threads_x);
  sh.bind(y, "threadIdx.y");
  sh.bind(x, "threadIdx.x");
  return rounds;
}

int64_t gpu_warp_size(const Target& t) { return gpu_arch(t).warp; }

const std::vector<KnobDef>& gemm_knobs() {
  static const std::vector<KnobDef> k = {
      {"warps_m", KnobType::Int, "warps per block along the rows of C", 32, {}, kSplit},
      {"warps_n", KnobType::Int, "warps per block along the columns of C", 32, {}, kSplit},
      {"lanes_n", KnobType::Int,
       "threads of a warp along the columns of C (the other warp_size / lanes_n along the rows)", 64, {}, kSplit},
      {"tile_m", KnobType::Int, "rows of C per thread (register tile, unrolled)", 16, {}, kSplit},
      {"tile_n", KnobType::Int, "columns of C per thread (register tile: vectorized, else unrolled)", 16, {}, kSplit},
      {"block_k", KnobType::Int, "depth of a step of K (the shared tiles' depth; unrolled with unroll)", 64, {}, kSplit},
      {"shared", KnobType::Bool, "stage the block's tiles of A and B in shared memory, copied by all its threads", 0,
       {}},
      {"stages", KnobType::Int,
       "with shared: tiles in flight: 1, or 2 to 4 buffers, the next steps' copied while the current one is used "
       "(cp.async on sm_80+)",
       4, {}, kSplit},
      {"split_k", KnobType::Int,
       "parts the reduction is split into, summed by a second kernel (for C too small to fill the GPU); must "
       "divide K",
       64, {}, kSplit},
      {"vectorize", KnobType::Bool, "vectorize each thread's columns (vector loads and stores)", 0, {}},
      {"unroll", KnobType::Bool, "unroll the step of K (the register tile always is)", 0, {}},
  };
  return k;
}

bool is_gemm_knob(const std::string& name) {
  for (const KnobDef& k : gemm_knobs()) {
    if (name == k.name) return true;
  }
  return false;
}

std::vector<json> gemm_int_candidates(const std::string& name, const GemmShape& g, const Target& t) {
  std::vector<json> out;
  auto powers = [&](int64_t most, int64_t extent) {
    for (int64_t v = 1; v <= most; v *= 2) {
      if (v == 1 || v <= extent) out.push_back(v);
    }
  };
  if (name == "lanes_n") powers(gpu_warp_size(t), gpu_warp_size(t));
  else if (name == "warps_m") powers(8, g.m);
  else if (name == "warps_n") powers(8, g.n);
  else if (name == "tile_m") powers(8, g.m);
  else if (name == "tile_n") powers(8, g.n);
  else if (name == "block_k") powers(32, g.k);
  else if (name == "stages") out = {1, 2, 3, 4};
  else if (name == "split_k") {
    for (int64_t v = 1; v <= 64; v *= 2) {
      if (g.k % v == 0 && (v == 1 || g.k / v >= kMinSplitDepth)) out.push_back(v);
    }
  }
  return out;
}

namespace {

// The most rows a block of `g` may take: GemmShape::max_block_m, or the fewest any block of a
// warp of `warp` lanes has (lanes_n is at most 32: 2 rows on a 64-lane wavefront).
int64_t most_block_rows(const GemmShape& g, int64_t warp) {
  return g.max_block_m > 0 ? std::max(g.max_block_m, warp / 32)
                           : std::numeric_limits<int64_t>::max();
}

}  // namespace

GemmShape split_shape(const GemmShape& g, int64_t parts) {
  return {g.batches * parts, g.m, g.n, g.k / parts, g.max_block_m};
}

GemmHierarchy gemm_hierarchy(const Target& t, const json& c) {
  GemmHierarchy h;
  h.warp = gpu_warp_size(t);
  h.lanes_n = c["lanes_n"];
  h.lanes_m = std::max<int64_t>(1, h.warp / h.lanes_n);
  h.warps_m = c["warps_m"];
  h.warps_n = c["warps_n"];
  h.tile_m = c["tile_m"];
  h.tile_n = c["tile_n"];
  h.block_k = c["block_k"];
  return h;
}

std::string gemm_check(const GemmShape& whole, const Target& t, const json& c) {
  int64_t parts = c["split_k"];
  if (whole.k % parts != 0) return str("split_k ", parts, " does not divide the reduction's ", whole.k);
  const GemmShape g = split_shape(whole, parts);
  GemmHierarchy h = gemm_hierarchy(t, c);
  int64_t limit = gpu_limits(t).max_threads_per_block;
  if (h.lanes_n > h.warp) return str("lanes_n ", h.lanes_n, " is more than a warp's ", h.warp, " threads");
  if (h.warp % h.lanes_n != 0) return str("lanes_n ", h.lanes_n, " does not divide a warp's ", h.warp, " threads");
  if (h.threads() > limit) return str(h.threads(), " threads per block (the limit is ", limit, ")");
  if (h.tile_m * h.tile_n > kMaxAccumulators) {
    return str("a register tile of ", h.tile_m * h.tile_n, " accumulators per thread (over ", kMaxAccumulators, ")");
  }
  bool shared = c["shared"].get<bool>();
  if (c["stages"].get<int64_t>() > 1 && !shared) {
    return str("stages ", c["stages"].get<int64_t>(), " without shared (nothing to buffer)");
  }
  if (shared) {
    // Up to the architecture's shared memory per block (past 48 KiB: dynamic shared memory).
    int64_t bytes = shared_bytes(g, c, h), most = gpu_limits(t).max_dynamic_shared_bytes;
    if (bytes > most) return str(bytes, " bytes of shared memory per block (the limit is ", most, ")");
  }
  if (c["unroll"].get<bool>() && h.tile_m * h.tile_n * h.block_k > kMaxTileStatements) {
    return str("an unrolled body of ", h.tile_m * h.tile_n * h.block_k, " statements (over ", kMaxTileStatements, ")");
  }
  if (h.block_m() > most_block_rows(g, h.warp)) {
    return str("a block of ", h.block_m(), " rows spans more than a group's ", g.max_block_m,
               " filters: its shared tiles would hold the next groups' filters and images");
  }
  // A block tile far past C is threads that only test their guards.
  if (h.block_m() >= 2 * g.m + h.lanes_m * h.tile_m || h.block_n() >= 2 * g.n + h.lanes_n * h.tile_n) {
    return str("a block tile of ", h.block_m(), " x ", h.block_n(), " for C of ", g.m, " x ", g.n,
               " (more than twice as large)");
  }
  return "";
}

// The default hierarchy: among block tiles of up to 256 threads, the one a simple model says
// finishes first: blocks run in waves over the multiprocessors (as many at a time on each as
// its threads, registers and shared memory allow: compiler/gpu.h GpuArch), a
// thread's throughput falls with a smaller register tile (fewer multiply-adds per
// shared-memory load), a block's with a smaller tile (more memory traffic per multiply-add),
// and a multiprocessor's with fewer than 8 warps on it. Returns the hierarchy and its time in
// cycles (at 128 multiply-adds per cycle per multiprocessor).
namespace {

struct Choice {
  GemmHierarchy h;
  double cycles = 0;
};

// How many times over a 128-bit shared-memory load of the register tile's operand runs: the
// 8 threads of a quarter warp (lanes ln + lanes_n * lm, consecutive) that read A's rows
// (`rows`: at lm * tile) or B's columns (at ln * tile), 16-byte chunks in 8 bank groups; the
// most distinct chunks in one group. B's columns of an 8-wide tile at lanes_n = 8 are the
// classic 2-way conflict (lanes 0 and 4 both in banks 0-3).
int64_t bank_conflicts(int64_t tile, int64_t lanes_m, int64_t lanes_n, bool rows) {
  std::map<int64_t, std::set<int64_t>> groups;
  for (int64_t lane = 0; lane < 8; ++lane) {
    int64_t ln = lane % lanes_n, lm = lane / lanes_n % lanes_m;
    int64_t chunk = (rows ? lm : ln) * tile / 4;  // in 16-byte units
    groups[chunk % 8].insert(chunk);
  }
  size_t most = 1;
  for (const auto& [g, chunks] : groups) most = std::max(most, chunks.size());
  return static_cast<int64_t>(most);
}

// `max_shared`: the bytes of shared memory a block may have (gpu_limits).
Choice best_hierarchy(const GemmShape& g, const GpuArch& arch, bool shared, int64_t max_shared) {
  const int64_t warp = arch.warp, sms = arch.multiprocessors;
  GemmHierarchy best;
  double best_time = 0;
  // First only register tiles of at least 8 multiply-adds per shared-memory load (4 x 4 and
  // larger) and block tiles at most twice C; any tile where C is too small for those, then
  // (C smaller than a warp's threads) any block.
  for (auto [least, fit] : {std::pair{8.0, true}, std::pair{0.0, true}, std::pair{0.0, false}}) {
    if (best_time > 0) break;
    for (int64_t tm : {8, 4, 2, 1}) {
      for (int64_t tn : {8, 4, 2, 1}) {
        if (tm > g.m || tn > g.n) continue;
        for (int64_t ln : {8, 16, 4, 32, 2, 1}) {
          if (ln > warp) continue;
          // Multiply-adds per shared-memory load of a thread (16 for 8 x 8: two 128-bit
          // loads of A and two of B per k), each load counted as often as the bank
          // conflicts among the 8 threads that access shared memory together replay it.
          double per_load = double(tm * tn) / double((tm + 3) / 4 * bank_conflicts(tm, warp / ln, ln, true) +
                                                     (tn + 3) / 4 * bank_conflicts(tn, warp / ln, ln, false));
          if (per_load < least) continue;
          for (int64_t wm : {1, 2, 4, 8}) {
            for (int64_t wn : {1, 2, 4, 8}) {
              GemmHierarchy h{warp, warp / ln, ln, wm, wn, tm, tn, std::min<int64_t>(8, g.k)};
              if (h.threads() > 256 || (fit && (h.block_m() > 2 * g.m || h.block_n() > 2 * g.n))) continue;
              if (h.block_m() > most_block_rows(g, warp)) continue;
              int64_t blocks = ((g.m + h.block_m() - 1) / h.block_m()) * ((g.n + h.block_n() - 1) / h.block_n()) *
                               g.batches;
              // Blocks resident per multiprocessor, as its threads, registers (the tile's
              // accumulators and fragments and about 40 more, as ptxas allocates them) and
              // shared memory allow.
              int64_t regs = std::min(arch.registers_per_thread, (tm * tn + tm + tn + 40 + 7) / 8 * 8);
              json staged = {{"stages", shared ? 2 : 1}};
              int64_t smem = shared ? shared_bytes(g, staged, h) : 0;
              if (smem > max_shared) continue;
              int64_t per_sm = std::min({arch.threads_per_sm / h.threads(),
                                         arch.registers_per_sm / (regs * h.threads()),
                                         smem ? arch.shared_per_sm / smem : int64_t{16}, int64_t{16}});
              per_sm = std::max<int64_t>(per_sm, 1);
              int64_t busy = std::min<int64_t>(per_sm, (blocks + sms - 1) / sms);
              int64_t waves = (blocks + sms * per_sm - 1) / (sms * per_sm);
              double tile_eff = std::sqrt(std::min(1.0, per_load / 16.0));
              double block_eff = 1.0 / (1.0 + 8.0 / double(h.block_m()) + 8.0 / double(h.block_n()));
              double thread_eff = std::sqrt(std::min(1.0, double(busy * h.threads()) / 256.0));
              // Work a block wastes on rows and columns past C.
              double used = double(std::min(g.m, h.block_m()) * std::min(g.n, h.block_n())) /
                            double(h.block_m() * h.block_n());
              double time = double(waves * busy) * double(h.block_m() * h.block_n()) /
                            (tile_eff * block_eff * thread_eff * used);
              if (best_time == 0 || time < best_time * 0.999) {
                best = h;
                best_time = time;
              }
            }
          }
        }
      }
    }
  }
  return {best, best_time * double(g.k) / 128.0};
}

}  // namespace

// The default: the hierarchy above for the whole reduction, or for a split of it where the
// model says the parts (more blocks on the same C) and the second kernel (writing and reading
// the partial sums at about 16 bytes per cycle per multiprocessor, and its launch, about 4000
// cycles) finish first.
void gemm_default(const GemmShape& g, const Target& t, json& c) {
  const GpuArch arch = gpu_arch(t);
  const bool shared = g.m > 1 && g.k >= 8;
  const int64_t max_shared = gpu_limits(t).max_dynamic_shared_bytes;
  Choice best = best_hierarchy(g, arch, shared, max_shared);
  int64_t parts = 1;
  for (const json& v : gemm_int_candidates("split_k", g, t)) {
    int64_t n = v;
    if (n == 1) continue;
    Choice split = best_hierarchy(split_shape(g, n), arch, shared, max_shared);
    double bytes = double(2 * n) * double(g.batches * g.m * g.n) * 4;
    double cycles = split.cycles + bytes / double(16 * arch.multiprocessors) + 4000;
    if (cycles < best.cycles * 0.9) {
      best = split;
      best.cycles = cycles;
      parts = n;
    }
  }
  // Staging pays when the block's threads share rows and columns (a block of one row, M = 1,
  // reads each element of B once).
  c["warps_m"] = best.h.warps_m;
  c["warps_n"] = best.h.warps_n;
  c["lanes_n"] = best.h.lanes_n;
  c["tile_m"] = best.h.tile_m;
  c["tile_n"] = best.h.tile_n;
  c["block_k"] = best.h.block_k;
  c["shared"] = shared;
  c["stages"] = shared ? 2 : 1;
  c["split_k"] = parts;
  c["vectorize"] = true;
  c["unroll"] = true;
}

void schedule_gemm(Schedule& s, const GemmStages& st, const GemmShape& g, const Target& t, const json& c) {
  GemmHierarchy h = gemm_hierarchy(t, c);
  // Configs the tuner never proposes, refused by name when given.
  if (h.warp % h.lanes_n != 0) {
    throw UserError(
        str("config knob lanes_n=", h.lanes_n, ": must divide a warp's ", h.warp, " threads (", t.str(), ")"));
  }
  if (c["stages"].get<int64_t>() > 1 && !c["shared"].get<bool>()) {
    throw UserError(str("config knob stages=", c["stages"].get<int64_t>(),
                        ": pipelines shared-memory tiles, and shared is false"));
  }
  bool vec = c["vectorize"], unroll = c["unroll"];
  Stage& out = *st.out;
  auto [bi, i1] = out.split(st.rows, h.block_m());
  auto [wi, i2] = out.split(i1, h.lanes_m * h.tile_m);
  auto [li, it] = out.split(i2, h.tile_m);
  auto [bj, j1] = out.split(st.cols, h.block_n());
  auto [wj, j2] = out.split(j1, h.lanes_n * h.tile_n);
  auto [lj, jt] = out.split(j2, h.tile_n);
  std::vector<Expr> order;
  if (st.batch) order.push_back(st.batch);
  order.insert(order.end(), {bi, bj, wi, wj, li, lj, it, jt});
  out.reorder(order);
  Expr warp = out.fuse(wi, wj);
  Expr lane = out.fuse(li, lj);
  if (st.batch) out.bind(st.batch, "blockIdx.z");
  out.bind(bi, "blockIdx.y");
  out.bind(bj, "blockIdx.x");
  out.bind(warp, "threadIdx.y");
  out.bind(lane, "threadIdx.x");
  // The register tile always unrolled (its columns vectorized or unrolled): a loop over it
  // would index the tile, which would then live in local memory, not registers (64 bytes of
  // stack for 4 x 4). `unroll` unrolls the step of K.
  out.unroll(it);
  if (vec) {
    out.vectorize(jt);
  } else {
    out.unroll(jt);
  }
  Stage& acc = *st.acc;
  acc.compute_at(out, lane);

  // The accumulator's loops: K in block_k steps (the step unrolled with `unroll`), then the
  // register tile (rows unrolled, columns vectorized or unrolled).
  const auto& aax = acc.op()->axes;
  Expr ko = schedule_dense_acc(acc, aax.size() - 2, h.block_k, vec, unroll);
  acc.unroll(aax[aax.size() - 2].var);
  if (!vec) acc.unroll(aax.back().var);
  if (!c["shared"].get<bool>()) return;

  int64_t threads_y = h.warps_m * h.warps_n;
  int64_t depth = std::min(h.block_k, g.k), cols = std::min(h.block_n(), g.n);
  auto stage = [&](const std::string& name, bool input) -> Stage& {
    if (input) return s.cache_read_shared(name);
    Stage& x = s.stage(name);
    x.set_scope_shared();
    return x;
  };
  // A K-major, copied along its rows in memory (K); B as in memory, copied along N.
  Stage& a = stage(st.a, st.a_input);
  a.compute_at(acc, ko);
  a.storage_layout(transposed(a.op()->shape.size()), kSharedPad);
  cooperative_copy(a, threads_y, h.warp, vec && st.a_contiguous && depth % 4 == 0 && g.k % 4 == 0);
  Stage& b = stage(st.b, st.b_input);
  b.compute_at(acc, ko);
  b.storage_layout(as_is(b.op()->shape.size()), kSharedPad);
  cooperative_copy(b, threads_y, h.warp, vec && st.b_contiguous && cols % 4 == 0 && g.n % 4 == 0);
  if (int64_t n = c["stages"]; n > 1) {
    a.multi_buffer(static_cast<int>(n));
    b.multi_buffer(static_cast<int>(n));
  }
}

OpGraph split_k_graph(const OpGraph& g, int64_t parts) {
  const ir::Tensor& old = g.acc;
  const ir::Reduce* red = old->reduce();
  TF_CHECK(red && old->reduce_axes.size() == 1, "split_k_graph: ", old->name, " is not a reduction over one axis");
  const int64_t k = old->reduce_axes[0].extent;
  if (parts < 1 || k % parts != 0) {
    throw UserError(str("config knob split_k=", parts, ": must divide the reduction's extent ", k, " (",
                        g.workload.canonical(), ")"));
  }
  const int64_t depth = k / parts;
  std::vector<int64_t> shape{parts};
  std::vector<std::string> names{"s"};
  for (const ir::IterVar& a : old->axes) {
    shape.push_back(a.extent);
    names.push_back(a.name());
  }
  ir::IterVar kk = ir::reduce_axis(depth, old->reduce_axes[0].name());
  // Named as the old reduction, but when that is the output (named as the function's).
  const std::string name = old == g.output ? old->name + "_acc" : old->name;
  ir::Tensor acc = ir::compute(name, shape, names, [&](const std::vector<Expr>& ax) {
    ir::VarMap m;
    for (size_t i = 0; i < old->axes.size(); ++i) m[old->axes[i].var.get()] = ax[i + 1];
    m[old->reduce_axes[0].var.get()] = ax[0] * depth + kk.var;
    return ir::sum(ir::substitute(red->source, m), {kk});
  }, {kk});
  ir::Tensor partial = ir::compute(name + "_partial", shape, names, [&](const std::vector<Expr>& ax) {
    return ir::read(acc, ax);
  });
  OpGraph r = with_parts_summed(g, partial);
  r.acc = acc;
  return r;
}

OpGraph with_parts_summed(const OpGraph& g, const ir::Tensor& partial) {
  const ir::Tensor& old = g.acc;
  const std::string name = old == g.output ? old->name + "_acc" : old->name;
  std::vector<std::string> names;
  for (const ir::IterVar& a : old->axes) names.push_back(a.name());
  ir::IterVar s = ir::reduce_axis(partial->shape[0], "s");
  // The output itself when it is the reduction (no epilogue).
  std::string sum_name = old == g.output ? g.output->name : name + "_sum";
  ir::Tensor sum = ir::compute(sum_name, old->shape, names, [&](const std::vector<Expr>& ax) {
    std::vector<Expr> at{s.var};
    at.insert(at.end(), ax.begin(), ax.end());
    return ir::sum(ir::read(partial, at), {s});
  }, {s});
  return with_reads_replaced(g, old, sum);
}

OpGraph GemmTemplate::gemm_graph(const OpGraph& g, const Target&, const json&) const { return g; }

OpGraph GemmTemplate::schedule_graph(const OpGraph& g, const Target& t, const json& c) const {
  OpGraph r = gemm_graph(g, t, c);
  int64_t parts = c["split_k"];
  return parts > 1 ? split_k_graph(r, parts) : r;
}

void GemmTemplate::apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const {
  GemmStages st = gemm_operands(s, g, c);
  const int64_t parts = c["split_k"];
  if (parts == 1) {
    gemm_writer(s, g, st);
    schedule_gemm(s, st, gemm_shape(g), t, c);
    return;
  }
  // The partial sums: a GEMM with the parts as (more) batches, written to the workspace.
  st.acc = &s.stage(g.acc->name);
  Stage& partial = s.stage(g.acc->name + "_partial");
  st.out = &partial;
  const auto& ax = partial.op()->axes;
  st.batch = ax.size() == 4 ? partial.fuse(ax[0].var, ax[1].var) : ax[0].var;
  st.rows = ax[ax.size() - 2].var;
  st.cols = ax.back().var;
  schedule_gemm(s, st, split_shape(gemm_shape(g), parts), t, c);
  schedule_split_k_sum(s, g);
}

void schedule_split_k_sum(Schedule& s, const OpGraph& g) {
  const std::string sum_name = g.acc->name + "_sum";
  Stage& out = s.stage(g.output->name);
  const auto& oax = out.op()->axes;
  Expr all = oax[0].var;
  for (size_t i = 1; i < oax.size(); ++i) all = out.fuse(all, oax[i].var);
  int64_t elements = 1;
  for (int64_t e : out.op()->shape) elements *= e;
  auto [block, thread] = out.split(all, std::min<int64_t>(256, elements));
  out.bind(block, "blockIdx.x");
  out.bind(thread, "threadIdx.x");
  if (s.has_stage(sum_name)) s.stage(sum_name).compute_at(out, thread);
}

std::vector<json> GemmTemplate::int_candidates(const OpGraph& g, const Target& t, const KnobDef& k) const {
  return gemm_int_candidates(k.name, gemm_shape(g), t);
}

json GemmTemplate::default_config(const OpGraph& g, const Target& t) const {
  json c = json::object();
  gemm_default(gemm_shape(g), t, c);
  return c;
}

std::string GemmTemplate::check_constraints(const OpGraph& g, const Target& t, const json& c) const {
  return gemm_check(gemm_shape(g), t, c);
}

}  // namespace tf::templates
