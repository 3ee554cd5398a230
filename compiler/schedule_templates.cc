#include "compiler/schedule_templates.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>

#include "compiler/error.h"
#include "compiler/gpu.h"

namespace tf {
namespace {

using ir::Expr;
using ir::Schedule;
using ir::Stage;
using json = nlohmann::json;

enum class KnobType { Int, Bool, Choice };

// A knob as the template declares it: validation bounds and how the default is chosen.
struct KnobDef {
  const char* name;
  KnobType type;
  const char* help;
  int64_t max = 0;                   // Int: values from 1 to max
  std::vector<std::string> choices;  // Choice
  KnobKind kind = KnobKind::Annotate;
};

constexpr KnobKind kSplit = KnobKind::Split;
constexpr KnobKind kReorder = KnobKind::Reorder;

bool is_dense(const std::string& op) { return op == "matmul" || op == "batch_matmul"; }

// GPU dense (matmul, batch_matmul): a block of threads_m x threads_n threads computes a tile
// of C; each thread a tile_m x tile_n register tile of it (accumulated in registers).
const std::vector<KnobDef>& gpu_knob_defs(const std::string& op) {
  static const std::vector<KnobDef> dense = {
      {"threads_m", KnobType::Int, "threads per block along the rows of C (threadIdx.y)", 1024, {}, kSplit},
      {"threads_n", KnobType::Int, "threads per block along the columns of C (threadIdx.x)", 1024, {}, kSplit},
      {"tile_m", KnobType::Int, "rows of C per thread (register tile, unrolled)", 16, {}, kSplit},
      {"tile_n", KnobType::Int, "columns of C per thread (register tile, vectorized)", 16, {}, kSplit},
      {"unroll_k", KnobType::Int, "unroll factor of the reduction loop (with shared: the K tile staged)", 64, {},
       kSplit},
      {"vectorize", KnobType::Bool, "vectorize each thread's columns (vector loads and stores)", 0, {}},
      {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
      {"shared", KnobType::Bool,
       "stage the block's tiles of A and B (unroll_k deep) in shared memory, copied by all its threads", 0, {}},
  };
  // Convolutions (NCHW, NHWC, depthwise): a block of threads_k x threads_w threads computes
  // channels x columns of one output row; each thread a tile_k x tile_w register tile.
  static const std::vector<KnobDef> conv = {
      {"threads_k", KnobType::Int, "threads per block along the output channels (threadIdx.y)", 1024, {}, kSplit},
      {"threads_w", KnobType::Int, "threads per block along the output columns (threadIdx.x)", 1024, {}, kSplit},
      {"tile_k", KnobType::Int, "output channels per thread (register tile)", 16, {}, kSplit},
      {"tile_w", KnobType::Int, "output columns per thread (register tile)", 16, {}, kSplit},
      {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
      {"shared", KnobType::Bool,
       "stage the block's weights in shared memory (per input channel; depthwise: the whole window), copied by "
       "all its threads",
       0, {}},
  };
  return is_dense(op) ? dense : conv;
}

const std::vector<KnobDef>& cpu_knob_defs(const std::string& op) {
  static const std::vector<KnobDef> dense = {
      {"tile_m", KnobType::Int, "rows of C per register tile (unrolled)", 64, {}, kSplit},
      {"tile_n", KnobType::Int, "columns of C per register tile (vectorized)", 256, {}, kSplit},
      {"unroll_k", KnobType::Int, "unroll factor of the reduction loop", 64, {}, kSplit},
      {"pack_b", KnobType::Bool, "copy B into [N/tile_n][K][tile_n] panels first", 0, {}},
      {"order", KnobType::Choice, "outer tile loop order: mn (rows outer) or nm (columns outer)", 0, {"mn", "nm"},
       kReorder},
      {"vectorize", KnobType::Bool, "vectorize the inner tile axis", 0, {}},
      {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
      {"parallel", KnobType::Bool, "run the outermost tile loop on all threads", 0, {}},
  };
  static const std::vector<KnobDef> conv_nchw = {
      {"tile_k", KnobType::Int, "output channels per register tile", 256, {}, kSplit},
      {"tile_w", KnobType::Int, "output columns per register tile", 256, {}, kSplit},
      {"vector_axis", KnobType::Choice,
       "the register tile's vectorized axis: w (output columns; weights read as broadcasts) or k "
       "(output channels; weights packed into [K/tile_k][C][R][S][tile_k] blocks first, inputs "
       "read as broadcasts, for narrow outputs and strided convolutions)",
       0, {"w", "k"}, KnobKind::Choice},
      {"inline_pad", KnobType::Bool, "read padding through a select instead of a padded copy", 0, {}},
      {"order", KnobType::Choice,
       "tile loop order: kw (channel tiles outer: each tile's weights stay in cache) or wk (rows and "
       "columns outer: each input tile stays in cache while all channel tiles use it)",
       0, {"kw", "wk"}, kReorder},
      {"vectorize", KnobType::Bool, "vectorize the inner tile axis", 0, {}},
      {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
      {"parallel", KnobType::Bool, "run the outermost loop on all threads", 0, {}},
  };
  static const std::vector<KnobDef> conv_nhwc = {
      {"tile_k", KnobType::Int, "output channels per register tile (vectorized)", 256, {}, kSplit},
      {"tile_w", KnobType::Int, "output columns per register tile (unrolled)", 64, {}, kSplit},
      {"inline_pad", KnobType::Bool, "read padding through a select instead of a padded copy", 0, {}},
      {"vectorize", KnobType::Bool, "vectorize the inner tile axis", 0, {}},
      {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
      {"parallel", KnobType::Bool, "run the outermost loop on all threads", 0, {}},
  };
  static const std::vector<KnobDef> depthwise = {
      {"tile_w", KnobType::Int, "output columns per tile (vectorized with vector_axis=w, unrolled with c)", 256, {},
       kSplit},
      {"vector_axis", KnobType::Choice,
       "the tile's vectorized axis: w (output columns; strided convolutions load with gathers) or c (channels: data "
       "and weights packed into blocks of one vector of channels first, NCHWc-style, the border read through "
       "selects, each load one contiguous vector at any stride)",
       0, {"w", "c"}, KnobKind::Choice},
      {"inline_pad", KnobType::Bool,
       "read padding through a select instead of a padded copy (vector_axis=c always does)", 0, {}},
      {"vectorize", KnobType::Bool, "vectorize the inner tile axis", 0, {}},
      {"unroll", KnobType::Bool, "unroll the filter window", 0, {}},
      {"parallel", KnobType::Bool, "run the outermost loop on all threads", 0, {}},
  };
  static const std::vector<KnobDef> conv_nchwc = {
      {"tile_w", KnobType::Int, "output columns per register tile (unrolled)", 64, {}, kSplit},
      {"tile_kb",
       KnobType::Int,
       "output channel blocks per register tile (unrolled; each block vectorized)",
       16,
       {},
       kSplit},
      {"reduce_order",
       KnobType::Choice,
       "reduction loop order: crs (input channel blocks, then the window, then a block's channels) "
       "or rsc "
       "(the window outermost)",
       0,
       {"crs", "rsc"},
       kReorder},
      {"inline_pad",
       KnobType::Bool,
       "read padding through a select instead of a padded copy",
       0,
       {}},
      {"vectorize", KnobType::Bool, "vectorize the output channel block", 0, {}},
      {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
      {"parallel",
       KnobType::Bool,
       "run the outermost loops (batch, channel tiles, rows) on all threads",
       0,
       {}},
  };
  static const std::vector<KnobDef> depthwise_nchwc = {
      {"tile_w", KnobType::Int, "output columns per register tile (unrolled)", 64, {}, kSplit},
      {"inline_pad",
       KnobType::Bool,
       "read padding through a select instead of a padded copy",
       0,
       {}},
      {"vectorize", KnobType::Bool, "vectorize the channel block", 0, {}},
      {"unroll", KnobType::Bool, "unroll the register tile and the filter window", 0, {}},
      {"parallel",
       KnobType::Bool,
       "run the outermost loops (batch, channel blocks, rows) on all threads",
       0,
       {}},
  };
  if (is_dense(op)) return dense;
  if (op == "conv2d_nchwc") return conv_nchwc;
  if (op == "depthwise_conv2d_nchwc") return depthwise_nchwc;
  if (op == "conv2d_nchw") return conv_nchw;
  if (op == "conv2d_nhwc") return conv_nhwc;
  TF_CHECK(op == "depthwise_conv2d_nchw", "no template for ", op);
  return depthwise;
}

const std::vector<KnobDef>& knob_defs(const std::string& op, const Target& t) {
  return t.is_gpu() ? gpu_knob_defs(op) : cpu_knob_defs(op);
}

int64_t out_extent(const OpGraph& g, size_t dim) { return g.output->shape[dim]; }

// The most statements (vector or scalar) an unrolled register tile may have before the
// tuner stops proposing it: larger ones take seconds to compile and are never the fastest.
// Measured over 145 random matmul 512^3 configs (AVX-512): the 17 above 1024 statements all
// ran at 57 GFLOPS or less (the best: 380) and took 82% of the compile time, up to 34 s each.
constexpr int64_t kMaxTileStatements = 1024;

// The stage that accumulates the reduction (made with cache_write when the reduction is the
// output) and the stage that writes the output. A `layout` reorders the accumulator's
// dimensions (see Schedule::cache_write); the reduction then always gets a local stage, and
// with an epilogue the reduction's own stage is inlined into it.
std::pair<Stage*, Stage*> acc_and_writer(Schedule& s, const OpGraph& g, const std::vector<size_t>& layout = {}) {
  if (g.acc == g.output || !layout.empty()) {
    ir::Tensor local = s.cache_write(g.acc, layout);
    if (g.acc != g.output) s.stage(g.acc->name).compute_inline();
    return {&s.stage(local->name), &s.stage(g.output->name)};
  }
  return {&s.stage(g.acc->name), &s.stage(g.output->name)};
}

// Packs `input` for the template (the stage to schedule), or, when the caller passes it
// packed already (OpGraph::prepacked), only reads that layout (no stage: nullptr).
Stage* pack_input(Schedule& s, const OpGraph& g, const std::string& input, size_t dim, int64_t block) {
  if (g.prepacked.count(input)) {
    s.pack_given(input, dim, block);
    return nullptr;
  }
  return &s.pack(input, dim, block);
}

// The padded copy, computed at root in parallel, or inlined.
void schedule_pad(Schedule& s, const OpGraph& g, const json& c, int lanes) {
  if (!g.pad) return;
  Stage& p = s.stage(g.pad->name);
  if (c["inline_pad"].get<bool>()) {
    p.compute_inline();
    return;
  }
  const auto& ax = g.pad->axes;
  if (c["parallel"].get<bool>()) p.parallel(p.fuse(ax[0].var, ax[1].var));
  if (c["vectorize"].get<bool>()) p.vectorize(p.split(ax[3].var, lanes).second);
}

// The accumulating stage of a dense template: K split by `uk` (the outer loop returned), then
// the register tile's rows (unrolled) and columns (vectorized) innermost.
Expr schedule_dense_acc(Stage& acc, bool batch, int64_t uk, bool vec, bool unroll) {
  size_t d = batch ? 1 : 0;
  const auto& aax = acc.op()->axes;
  auto [ko, ki] = acc.split(acc.op()->reduce_axes[0].var, uk);
  std::vector<Expr> order;
  if (batch) order.push_back(aax[0].var);
  order.insert(order.end(), {ko, ki, aax[d].var, aax[d + 1].var});
  acc.reorder(order);
  if (vec) acc.vectorize(aax[d + 1].var);
  if (unroll) {
    acc.unroll(aax[d].var);
    acc.unroll(ki);
  }
  return ko;
}

void schedule_dense(Schedule& s, const OpGraph& g, const json& c) {
  bool batch = g.workload.op == "batch_matmul";
  int64_t tm = c["tile_m"], tn = c["tile_n"], uk = c["unroll_k"];
  bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
  auto [acc, out] = acc_and_writer(s, g);
  if (c["pack_b"].get<bool>()) {
    if (Stage* p = pack_input(s, g, "B", batch ? 2 : 1, tn)) {
      const auto& ax = p->op()->axes;
      if (par) p->parallel(ax[0].var);
      if (vec) p->vectorize(ax.back().var);
    }
  }
  const auto& oax = out->op()->axes;
  size_t d = batch ? 1 : 0;
  auto [io, ii] = out->split(oax[d].var, tm);
  auto [jo, ji] = out->split(oax[d + 1].var, tn);
  bool rows_outer = c["order"].get<std::string>() == "mn";
  Expr first = rows_outer ? io : jo, second = rows_outer ? jo : io;
  out->reorder({first, second, ii, ji});
  if (vec) out->vectorize(ji);
  if (unroll) out->unroll(ii);
  if (par) out->parallel(batch ? out->fuse(oax[0].var, first) : first);
  acc->compute_at(*out, second);

  schedule_dense_acc(*acc, batch, uk, vec, unroll);
}

// Stages `input` in shared memory at loop `at` of `reader`: the region one iteration needs
// for the whole block, copied cooperatively by the block's threads_y x threads_x threads,
// consecutive threads taking consecutive elements (coalesced reads).
void stage_shared(Schedule& s, const std::string& input, Stage& reader, const Expr& at, int64_t threads_y,
                  int64_t threads_x) {
  Stage& sh = s.cache_read_shared(input);
  sh.compute_at(reader, at);
  const auto& ax = sh.op()->axes;
  Expr all = ax[0].var;
  for (size_t i = 1; i < ax.size(); ++i) all = sh.fuse(all, ax[i].var);
  auto [rounds, lane] = sh.split(all, threads_y * threads_x);
  auto [y, x] = sh.split(lane, threads_x);
  sh.bind(y, "threadIdx.y");
  sh.bind(x, "threadIdx.x");
  (void)rounds;
}

// Thread blocks over tiles of C, threads over register tiles inside them, the reduction
// accumulated per thread in registers (cache_write computed at the thread loop). Tiles that
// do not divide C shift inwards (two blocks then write the same values to the overlap) or,
// for extents smaller than a tile, are guarded.
void schedule_dense_gpu(Schedule& s, const OpGraph& g, const json& c) {
  bool batch = g.workload.op == "batch_matmul";
  int64_t thm = c["threads_m"], thn = c["threads_n"], tm = c["tile_m"], tn = c["tile_n"], uk = c["unroll_k"];
  bool vec = c["vectorize"], unroll = c["unroll"];
  auto [acc, out] = acc_and_writer(s, g);
  const auto& oax = out->op()->axes;
  size_t d = batch ? 1 : 0;
  auto [bi, i1] = out->split(oax[d].var, thm * tm);
  auto [ty, ri] = out->split(i1, tm);
  auto [bj, j1] = out->split(oax[d + 1].var, thn * tn);
  auto [tx, rj] = out->split(j1, tn);
  std::vector<Expr> order;
  if (batch) order.push_back(oax[0].var);
  order.insert(order.end(), {bi, bj, ty, tx, ri, rj});
  out->reorder(order);
  if (batch) out->bind(oax[0].var, "blockIdx.z");
  out->bind(bi, "blockIdx.y");
  out->bind(bj, "blockIdx.x");
  out->bind(ty, "threadIdx.y");
  out->bind(tx, "threadIdx.x");
  if (unroll) out->unroll(ri);
  if (vec) out->vectorize(rj);
  acc->compute_at(*out, tx);

  Expr ko = schedule_dense_acc(*acc, batch, uk, vec, unroll);
  if (c["shared"].get<bool>()) {
    // Per step of K: the block's rows of A and columns of B, unroll_k deep.
    for (const ir::Tensor& in : {g.inputs[0], g.inputs[1]}) stage_shared(s, in->name, *acc, ko, thm, thn);
  }
}

// The output axes a GPU convolution tiles: channels, columns, and the row (fused with the
// batch into blockIdx.z).
struct ConvAxes {
  size_t k, w, h;
};
ConvAxes conv_axes(const std::string& op) { return op == "conv2d_nhwc" ? ConvAxes{3, 2, 1} : ConvAxes{1, 3, 2}; }

// Blocks over (batch x row, channel tiles, column tiles), threads over register tiles of
// channels x columns, the reduction accumulated per thread. Padding is read through a select
// (a padded copy would be a stage outside the grid).
void schedule_conv_gpu(Schedule& s, const OpGraph& g, const json& c) {
  int64_t thk = c["threads_k"], thw = c["threads_w"], tk = c["tile_k"], tw = c["tile_w"];
  bool unroll = c["unroll"];
  if (g.pad) s.stage(g.pad->name).compute_inline();
  auto [acc, out] = acc_and_writer(s, g);
  ConvAxes ax = conv_axes(g.workload.op);
  const auto& o = out->op()->axes;
  auto [bk, k1] = out->split(o[ax.k].var, thk * tk);
  auto [ty, rk] = out->split(k1, tk);
  auto [bw, w1] = out->split(o[ax.w].var, thw * tw);
  auto [tx, rw] = out->split(w1, tw);
  out->reorder({o[0].var, o[ax.h].var, bk, bw, ty, tx, rk, rw});
  Expr rows = out->fuse(o[0].var, o[ax.h].var);
  out->bind(rows, "blockIdx.z");
  out->bind(bk, "blockIdx.y");
  out->bind(bw, "blockIdx.x");
  out->bind(ty, "threadIdx.y");
  out->bind(tx, "threadIdx.x");
  if (unroll) {
    out->unroll(rk);
    out->unroll(rw);
  }
  acc->compute_at(*out, tx);
  const auto& a = acc->op()->axes;
  std::vector<Expr> order = {a[0].var, a[ax.h].var};
  for (const ir::IterVar& r : acc->op()->reduce_axes) order.push_back(r.var);
  order.insert(order.end(), {a[ax.k].var, a[ax.w].var});
  acc->reorder(order);
  if (unroll) {
    acc->unroll(a[ax.k].var);
    acc->unroll(a[ax.w].var);
  }
  if (c["shared"].get<bool>()) {
    // The weights of the block's channels, shared by its threads_w columns of threads: per
    // input channel (R x S each), or for depthwise (one channel per output channel) the whole
    // window at once. The input is not staged: its region reaches into the padding.
    const auto& r = acc->op()->reduce_axes;
    stage_shared(s, g.inputs[1]->name, *acc, r.size() == 3 ? r[0].var : a[ax.h].var, thk, thw);
  }
}

// Two tile shapes. vector_axis=w: output columns vectorized, each weight broadcast.
// vector_axis=k: output channels vectorized; the weights packed so that a tile's channels are
// contiguous, the accumulators laid out [n][oh][ow][k] so that each column's channels are one
// vector, each input element broadcast.
void schedule_conv_nchw(Schedule& s, const OpGraph& g, const json& c, int lanes) {
  int64_t tk = c["tile_k"], tw = c["tile_w"];
  bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
  bool k_vector = c["vector_axis"].get<std::string>() == "k";
  schedule_pad(s, g, c, lanes);
  if (k_vector) {
    Stage* wp = pack_input(s, g, g.inputs[1]->name, 0, tk);
    if (wp && par) wp->parallel(wp->op()->axes[0].var);
  }
  auto [acc, out] = k_vector ? acc_and_writer(s, g, {0, 2, 3, 1}) : acc_and_writer(s, g);
  const auto& o = out->op()->axes;  // n, k, oh, ow
  auto [ko, ki] = out->split(o[1].var, tk);
  auto [wo, wi] = out->split(o[3].var, tw);
  bool channels_outer = c["order"].get<std::string>() == "kw";
  if (channels_outer) out->reorder({o[0].var, ko, o[2].var, wo, ki, wi});
  else out->reorder({o[0].var, o[2].var, wo, ko, ki, wi});
  // With channels vectorized this is the copy back into NCHW; unrolled over the channels it
  // ran the C=64 1x1 layers 1.3x faster.
  if (vec && !k_vector) out->vectorize(wi);
  if (unroll) out->unroll(ki);
  if (par) out->parallel(out->fuse(o[0].var, channels_outer ? ko : o[2].var));
  acc->compute_at(*out, channels_outer ? wo : ko);
  const auto& a = acc->op()->axes;  // n, k, oh, ow; with channels vectorized n, oh, ow, k
  const auto& r = acc->op()->reduce_axes;  // rc, rr, rs
  Expr oh = a[k_vector ? 1 : 2].var, rows = a[k_vector ? 2 : 1].var;
  acc->reorder({a[0].var, oh, r[0].var, r[1].var, r[2].var, rows, a[3].var});
  if (vec) acc->vectorize(a[3].var);
  if (unroll) acc->unroll(rows);
}

void schedule_conv_nhwc(Schedule& s, const OpGraph& g, const json& c, int lanes) {
  int64_t tk = c["tile_k"], tw = c["tile_w"];
  bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
  schedule_pad(s, g, c, lanes);
  auto [acc, out] = acc_and_writer(s, g);
  const auto& o = out->op()->axes;  // n, oh, ow, k
  auto [wo, wi] = out->split(o[2].var, tw);
  auto [ko, ki] = out->split(o[3].var, tk);
  out->reorder({o[0].var, o[1].var, wo, ko, wi, ki});
  if (vec) out->vectorize(ki);
  if (unroll) out->unroll(wi);
  if (par) out->parallel(out->fuse(o[0].var, o[1].var));
  acc->compute_at(*out, ko);
  const auto& a = acc->op()->axes;
  const auto& r = acc->op()->reduce_axes;  // rr, rs, rc
  acc->reorder({a[0].var, a[1].var, r[0].var, r[1].var, r[2].var, a[2].var, a[3].var});
  if (vec) acc->vectorize(a[3].var);
  if (unroll) acc->unroll(a[2].var);
}

// vector_axis=c: data [N][C][H][W] packed into [C/lanes][N][H][W][lanes] and the weights into
// [C/lanes][1][R][S][lanes] (zero past C), the accumulators laid out [n][oh][ow][c]: a tile is
// tile_w columns of one vector of channels, each input load one contiguous vector whatever
// the stride, each weight vector loaded once per tile. The border is read through selects on
// the packed data (their condition is the same for all lanes: a branch, not a masked load);
// the tile is copied back into NCHW at the end.
void schedule_depthwise_c(Schedule& s, const OpGraph& g, const json& c, int lanes) {
  int64_t tw = c["tile_w"];
  bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
  if (g.pad) s.stage(g.pad->name).compute_inline();
  Stage& dp = s.pack(g.inputs[0]->name, 1, lanes);
  if (par) dp.parallel(dp.fuse(dp.op()->axes[0].var, dp.op()->axes[1].var));
  if (vec) dp.vectorize(dp.op()->axes.back().var);
  if (Stage* wp = pack_input(s, g, g.inputs[1]->name, 0, lanes)) {
    if (vec) wp->vectorize(wp->op()->axes.back().var);
  }
  auto [acc, out] = acc_and_writer(s, g, {0, 2, 3, 1});
  const auto& o = out->op()->axes;  // n, c, oh, ow
  auto [co, ci] = out->split(o[1].var, lanes);
  auto [wo, wi] = out->split(o[3].var, tw);
  out->reorder({o[0].var, co, o[2].var, wo, ci, wi});
  if (unroll) out->unroll(ci);
  if (par) out->parallel(out->fuse(out->fuse(o[0].var, co), o[2].var));
  acc->compute_at(*out, wo);
  const auto& a = acc->op()->axes;         // n, oh, ow, c
  const auto& r = acc->op()->reduce_axes;  // rr, rs
  acc->reorder({a[0].var, a[1].var, r[0].var, r[1].var, a[2].var, a[3].var});
  if (vec) acc->vectorize(a[3].var);
  if (unroll) {
    acc->unroll(a[2].var);
    acc->unroll(r[1].var);
  }
}

void schedule_depthwise(Schedule& s, const OpGraph& g, const json& c, int lanes) {
  if (c["vector_axis"].get<std::string>() == "c") return schedule_depthwise_c(s, g, c, lanes);
  int64_t tw = c["tile_w"];
  bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
  schedule_pad(s, g, c, lanes);
  auto [acc, out] = acc_and_writer(s, g);
  const auto& o = out->op()->axes;  // n, c, oh, ow
  auto [wo, wi] = out->split(o[3].var, tw);
  if (vec) out->vectorize(wi);
  if (par) out->parallel(out->fuse(o[0].var, o[1].var));
  acc->compute_at(*out, wo);
  const auto& a = acc->op()->axes;
  const auto& r = acc->op()->reduce_axes;  // rr, rs
  acc->reorder({a[0].var, a[1].var, a[2].var, r[0].var, r[1].var, a[3].var});
  if (vec) acc->vectorize(a[3].var);
  if (unroll) acc->unroll(r[1].var);
}

// The padded copy of a blocked (NCHWc) input, computed at root, or inlined.
void schedule_pad_blocked(Schedule& s, const OpGraph& g, const json& c) {
  if (!g.pad) return;
  Stage& p = s.stage(g.pad->name);
  if (c["inline_pad"].get<bool>()) {
    p.compute_inline();
    return;
  }
  const auto& ax = g.pad->axes;  // n, c, h, w, cb
  if (c["parallel"].get<bool>()) p.parallel(p.fuse(ax[0].var, ax[1].var));
  if (c["vectorize"].get<bool>()) p.vectorize(ax[4].var);
}

// NCHWc convolution: a register tile is tile_w output columns by tile_kb blocks of output
// channels, each block one or more vectors; each input element broadcast, each weight row of
// a block one contiguous vector. No packing or copy back: the layouts are the blocked ones.
void schedule_conv_nchwc(Schedule& s, const OpGraph& g, const json& c) {
  int64_t tw = c["tile_w"], tkb = c["tile_kb"];
  bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
  schedule_pad_blocked(s, g, c);
  auto [acc, out] = acc_and_writer(s, g);
  const auto& o = out->op()->axes;  // n, ko, oh, ow, kb
  auto [koo, koi] = out->split(o[1].var, tkb);
  auto [wo, wi] = out->split(o[3].var, tw);
  out->reorder({o[0].var, koo, o[2].var, wo, koi, wi, o[4].var});
  if (vec) out->vectorize(o[4].var);
  if (unroll) {
    out->unroll(koi);
    out->unroll(wi);
  }
  if (par) out->parallel(out->fuse(out->fuse(o[0].var, koo), o[2].var));
  acc->compute_at(*out, wo);
  const auto& a = acc->op()->axes;         // n, ko, oh, ow, kb
  const auto& r = acc->op()->reduce_axes;  // rco, rr, rs, rci
  std::vector<Expr> order = {a[0].var, a[2].var};
  if (c["reduce_order"].get<std::string>() == "crs")
    order.insert(order.end(), {r[0].var, r[1].var, r[2].var});
  else
    order.insert(order.end(), {r[1].var, r[2].var, r[0].var});
  order.insert(order.end(), {r[3].var, a[1].var, a[3].var, a[4].var});
  acc->reorder(order);
  if (vec) acc->vectorize(a[4].var);
  if (unroll) {
    acc->unroll(a[1].var);
    acc->unroll(a[3].var);
  }
}

// NCHWc depthwise: tile_w output columns of one channel block; every load (input, weight) one
// contiguous vector at any stride.
void schedule_depthwise_nchwc(Schedule& s, const OpGraph& g, const json& c) {
  int64_t tw = c["tile_w"];
  bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
  schedule_pad_blocked(s, g, c);
  auto [acc, out] = acc_and_writer(s, g);
  const auto& o = out->op()->axes;  // n, co, oh, ow, cb
  auto [wo, wi] = out->split(o[3].var, tw);
  out->reorder({o[0].var, o[1].var, o[2].var, wo, wi, o[4].var});
  if (vec) out->vectorize(o[4].var);
  if (unroll) out->unroll(wi);
  if (par) out->parallel(out->fuse(out->fuse(o[0].var, o[1].var), o[2].var));
  acc->compute_at(*out, wo);
  const auto& a = acc->op()->axes;         // n, co, oh, ow, cb
  const auto& r = acc->op()->reduce_axes;  // rr, rs
  acc->reorder({a[0].var, a[1].var, a[2].var, r[0].var, r[1].var, a[3].var, a[4].var});
  if (vec) acc->vectorize(a[4].var);
  if (unroll) {
    acc->unroll(a[3].var);
    acc->unroll(r[1].var);
  }
}

// The axis a split knob tiles: its extent, and whether the tile is vectorized (then its
// candidates are multiples of the vector width) or a row count of a register tile.
struct SplitAxis {
  int64_t extent = 1;
  bool vector = false;
  bool rows = false;
};

SplitAxis split_axis(const OpGraph& g, const std::string& knob) {
  const std::string& op = g.workload.op;
  if (is_dense(op)) {
    size_t d = op == "batch_matmul" ? 1 : 0;
    if (knob == "tile_m") return {out_extent(g, d), false, true};
    if (knob == "tile_n") return {out_extent(g, d + 1), true, false};
    return {g.acc->reduce_axes[0].extent, false, false};  // unroll_k
  }
  if (op == "conv2d_nchwc" || op == "depthwise_conv2d_nchwc") {
    return {out_extent(g, knob == "tile_kb" ? 1 : 3), false, true};  // unrolled rows of the tile
  }
  // Either axis of the NCHW convolution's tile may be the vectorized one (vector_axis).
  if (op == "conv2d_nchw") return {out_extent(g, knob == "tile_k" ? 1 : 3), true, true};
  if (op == "conv2d_nhwc") return knob == "tile_k" ? SplitAxis{out_extent(g, 3), true, false} : SplitAxis{out_extent(g, 2), false, true};
  return {out_extent(g, 3), true, true};  // depthwise tile_w: vectorized (vector_axis=w) or rows (c)
}

// Factors worth trying for an axis: powers of two, the divisors of the extent (no tail),
// multiples of the vector width (vector axes) or every count up to 16 (register rows), and
// the extent itself, all at most the extent and the knob's bound.
std::vector<int64_t> split_candidates(const SplitAxis& a, int64_t max, int64_t lanes) {
  int64_t hi = std::min(a.extent, max);
  std::set<int64_t> c;
  for (int64_t p = 1; p <= hi; p *= 2) c.insert(p);
  for (int64_t d = 1; d <= hi; ++d) {
    if (a.extent % d == 0 && (!a.vector || d >= lanes)) c.insert(d);
  }
  if (a.vector) {
    for (int64_t m = lanes; m <= hi; m += lanes) c.insert(m);
  }
  if (a.rows) {
    for (int64_t v = 1; v <= std::min<int64_t>(hi, 16); ++v) c.insert(v);
  }
  c.insert(hi);
  return {c.begin(), c.end()};
}

// GPU knobs: powers of two for thread counts (warps and wavefronts come in them), small
// register tiles, unroll factors that are powers of two; none past the extent it splits.
std::vector<json> gpu_split_candidates(const OpGraph& g, const KnobDef& k) {
  std::string name = k.name;
  int64_t extent;
  if (is_dense(g.workload.op)) {
    size_t d = g.workload.op == "batch_matmul" ? 1 : 0;
    extent = name == "unroll_k" ? g.acc->reduce_axes[0].extent
                                : out_extent(g, name == "threads_m" || name == "tile_m" ? d : d + 1);
  } else {
    ConvAxes ax = conv_axes(g.workload.op);
    extent = out_extent(g, name.back() == 'k' ? ax.k : ax.w);
  }
  std::vector<json> out;
  if (name.rfind("tile_", 0) == 0) {
    for (int64_t v : {1, 2, 3, 4, 6, 8}) {
      if (v <= extent) out.push_back(v);
    }
    return out;
  }
  for (int64_t v = 1; v <= std::min(k.max, extent); v *= 2) out.push_back(v);
  if (name != "unroll_k" && out.back().get<int64_t>() < std::min(k.max, extent)) out.push_back(out.back().get<int64_t>() * 2);
  return out;
}

std::string knob_list(const std::string& op, const Target& t) {
  std::string s;
  for (const KnobDef& k : knob_defs(op, t)) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s;
}

void check_value(const std::string& op, const KnobDef& k, const json& v) {
  std::string shown = v.dump();
  switch (k.type) {
    case KnobType::Int:
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > k.max) {
        throw UserError(str("config knob ", k.name, "=", shown, " for ", op,
                            ": must be an integer from 1 to ", k.max));
      }
      return;
    case KnobType::Bool:
      if (!v.is_boolean()) {
        throw UserError(str("config knob ", k.name, "=", shown, " for ", op, ": must be true or false"));
      }
      return;
    case KnobType::Choice: {
      std::string all;
      for (const std::string& c : k.choices) {
        if (v.is_string() && v.get<std::string>() == c) return;
        all += (all.empty() ? "" : ", ") + c;
      }
      throw UserError(str("config knob ", k.name, "=", shown, " for ", op, ": must be one of ", all));
    }
  }
}

}  // namespace

const char* knob_kind_name(KnobKind k) {
  switch (k) {
    case KnobKind::Split: return "split";
    case KnobKind::Reorder: return "reorder";
    case KnobKind::Annotate: return "annotate";
    case KnobKind::Choice: return "choice";
  }
  return "choice";
}

const std::vector<ScheduleTemplate>& registered_templates() {
  static const std::vector<ScheduleTemplate> all = {
      {"dense.cpu", 1, {"matmul", "batch_matmul"}, "llvm"},
      {"conv2d_nchw.cpu", 2, {"conv2d_nchw"}, "llvm"},
      {"conv2d_nhwc.cpu", 1, {"conv2d_nhwc"}, "llvm"},
      {"depthwise_conv2d_nchw.cpu", 2, {"depthwise_conv2d_nchw"}, "llvm"},
      {"conv2d_nchwc.cpu", 1, {"conv2d_nchwc"}, "llvm"},
      {"depthwise_conv2d_nchwc.cpu", 1, {"depthwise_conv2d_nchwc"}, "llvm"},
      {"dense.cuda", 1, {"matmul", "batch_matmul"}, "cuda"},
      {"dense.rocm", 1, {"matmul", "batch_matmul"}, "rocm"},
      {"conv2d.cuda", 1, {"conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw"}, "cuda"},
      {"conv2d.rocm", 1, {"conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw"}, "rocm"},
  };
  return all;
}

const ScheduleTemplate& find_template(const std::string& op, const Target& t) {
  for (const ScheduleTemplate& s : registered_templates()) {
    if (s.target_kind == t.kind && std::find(s.ops.begin(), s.ops.end(), op) != s.ops.end()) return s;
  }
  std::string have;
  for (const ScheduleTemplate& s : registered_templates()) {
    if (s.target_kind == t.kind) {
      for (const std::string& o : s.ops) have += (have.empty() ? "" : ", ") + o;
    }
  }
  throw UserError(str("no schedule template for ", op, " on ", t.kind, " targets yet (", t.kind, " templates: ",
                      have.empty() ? "none" : have, ")"));
}

std::string template_name(const std::string& op, const Target& t) { return find_template(op, t).id(); }

int vector_registers(const Target& t) {
  if (t.arch_name() == "aarch64") return 32;
  if (t.arch_name() == "x86_64" && t.vector_lanes() >= 16) return 32;
  return 16;
}

// Register tiles per thread at most this many accumulators: past it the thread needs more
// than the 255 registers NVIDIA allows (AMD: 256 VGPRs) and spills.
constexpr int64_t kMaxGpuThreadTile = 64;

std::string check_gpu_constraints(const OpGraph& g, const Target& t, const json& c) {
  int64_t threads = 1, tile = 1;
  for (const auto& [name, v] : c.items()) {
    if (name.rfind("threads_", 0) == 0) threads *= v.get<int64_t>();
    if (name.rfind("tile_", 0) == 0) tile *= v.get<int64_t>();
  }
  int64_t limit = gpu_limits(t).max_threads_per_block;
  if (threads > limit) return str(threads, " threads per block (the limit is ", limit, ")");
  if (tile > kMaxGpuThreadTile) {
    return str("a register tile of ", tile, " accumulators per thread (over ", kMaxGpuThreadTile, ")");
  }
  int64_t unroll_k = c.contains("unroll_k") ? c["unroll_k"].get<int64_t>() : 1;
  if (is_dense(g.workload.op) && c["shared"].get<bool>()) {
    // The block's tiles of A (rows x unroll_k) and B (unroll_k x columns), each at most the
    // whole matrix.
    size_t d = g.workload.op == "batch_matmul" ? 1 : 0;
    int64_t rows = std::min(c["threads_m"].get<int64_t>() * c["tile_m"].get<int64_t>(), out_extent(g, d));
    int64_t cols = std::min(c["threads_n"].get<int64_t>() * c["tile_n"].get<int64_t>(), out_extent(g, d + 1));
    int64_t depth = std::min(unroll_k, g.acc->reduce_axes[0].extent);
    int64_t bytes = (rows + cols) * depth * 4, most = gpu_limits(t).max_shared_bytes;
    if (bytes > most) return str(bytes, " bytes of shared memory per block (the limit is ", most, ")");
  }
  if (!is_dense(g.workload.op) && c["shared"].get<bool>()) {
    // The block's channels' weights: R x S per channel (depthwise) or per input channel step.
    // Weights are [K][C][R][S], [C][1][R][S] (depthwise) or [R][S][C][K] (NHWC).
    const std::vector<int64_t>& w = g.inputs[1]->shape;
    bool nhwc = g.workload.op == "conv2d_nhwc";
    int64_t channels = std::min(c["threads_k"].get<int64_t>() * c["tile_k"].get<int64_t>(), nhwc ? w[3] : w[0]);
    int64_t window = nhwc ? w[0] * w[1] : w[2] * w[3];
    int64_t bytes = channels * window * 4, most = gpu_limits(t).max_shared_bytes;
    if (bytes > most) return str(bytes, " bytes of shared memory per block (the limit is ", most, ")");
  }
  if (c["unroll"].get<bool>() && tile * unroll_k > kMaxTileStatements) {
    return str("an unrolled body of ", tile * unroll_k, " statements (over ", kMaxTileStatements, ")");
  }
  return "";
}

std::string check_constraints(const OpGraph& g, const Target& t, const json& c) {
  if (t.is_gpu()) return check_gpu_constraints(g, t, c);
  const std::string& op = g.workload.op;
  const int64_t lanes = t.vector_lanes();
  bool vec = c["vectorize"], unroll = c["unroll"];
  auto vectors = [&](int64_t width) { return vec ? (width + lanes - 1) / lanes : width; };
  int64_t rows = 1, width = 1, reduce = 1;
  if (is_dense(op)) {
    rows = c["tile_m"];
    width = c["tile_n"];
    reduce = c["unroll_k"];
  } else if (op == "conv2d_nchw") {
    bool k_vector = c["vector_axis"].get<std::string>() == "k";
    rows = c[k_vector ? "tile_w" : "tile_k"];
    width = c[k_vector ? "tile_k" : "tile_w"];
  } else if (op == "conv2d_nhwc") {
    rows = c["tile_w"];
    width = c["tile_k"];
  } else if (op == "conv2d_nchwc") {
    // Each channel block is its own vectors: blocks narrower than a vector waste lanes.
    rows = c["tile_w"];
    width = c["tile_kb"].get<int64_t>() *
            (vec ? ((out_extent(g, 4) + lanes - 1) / lanes) * lanes : out_extent(g, 4));
  } else if (op == "depthwise_conv2d_nchwc") {
    rows = c["tile_w"];
    width = vec ? ((out_extent(g, 4) + lanes - 1) / lanes) * lanes : out_extent(g, 4);
  } else if (c["vector_axis"].get<std::string>() == "c") {
    if (!c["inline_pad"].get<bool>() && g.pad)
      return "vector_axis=c reads the border through selects (inline_pad=false is the same "
             "schedule)";
    rows = c["tile_w"];
    width = lanes;
  } else {
    width = c["tile_w"];
  }
  const int64_t regs = vector_registers(t);
  // Accumulators, one row of loaded vectors, one broadcast.
  if (vec && unroll && rows * vectors(width) + vectors(width) + 1 > regs) {
    return str("a register tile of ", rows, " x ", vectors(width), " vectors needs ", rows * vectors(width) + vectors(width) + 1,
               " vector registers; ", t.arch_name(), " has ", regs);
  }
  if (unroll && rows * vectors(width) * reduce > kMaxTileStatements) {
    return str("an unrolled body of ", rows * vectors(width) * reduce, " statements (over ", kMaxTileStatements, ")");
  }
  return "";
}

json default_config(const OpGraph& g, const Target& t) {
  find_template(g.workload.op, t);
  if (t.is_gpu()) {
    // 16 x 16 threads of 4 x 4 outputs (a 64 x 64 tile per block), narrower where C is: the
    // block tile never exceeds the extent, so tails shift inwards instead of being guarded
    // (a guard on the vectorized columns leaves them scalar).
    // Skinny outputs (M=1) give the column threads what the rows cannot use, up to 256.
    auto threads = [](int64_t extent, int64_t tile, int64_t most) {
      int64_t p = 1;
      while (p < most && 2 * p * tile <= extent) p *= 2;
      return p;
    };
    if (!is_dense(g.workload.op)) {
      // Convolutions: 4 channels x 2 columns per thread, up to 32 threads along the row and
      // 256 in all.
      ConvAxes ax = conv_axes(g.workload.op);
      int64_t k = out_extent(g, ax.k), w = out_extent(g, ax.w);
      int64_t tk = std::min<int64_t>(k, 4), tw = std::min<int64_t>(w, 2);
      int64_t thw = threads(w, tw, 32);
      return {{"threads_k", threads(k, tk, std::max<int64_t>(1, 256 / thw))}, {"threads_w", thw}, {"tile_k", tk},
              {"tile_w", tw}, {"unroll", true}, {"shared", false}};
    }
    size_t d = g.workload.op == "batch_matmul" ? 1 : 0;
    int64_t m = out_extent(g, d), n = out_extent(g, d + 1);
    int64_t tm = std::min<int64_t>(m, 4), tn = std::min<int64_t>(n, 4);
    int64_t thm = threads(m, tm, 16);
    return {{"threads_m", thm}, {"threads_n", threads(n, tn, std::max<int64_t>(16, 256 / thm))}, {"tile_m", tm}, {"tile_n", tn},
            {"unroll_k", std::min<int64_t>(4, g.acc->reduce_axes[0].extent)}, {"vectorize", true}, {"unroll", true},
            {"shared", false}};
  }
  const int64_t lanes = t.vector_lanes();
  const std::string& op = g.workload.op;
  // Register tiles of full vectors whatever the extents: shift-inwards tails plus
  // partition_loops keep every tile but the last aligned. Extents smaller than a tile get a
  // tile of exactly the extent. Rows per tile fit the vector register file: 8x2 vectors
  // with 32 registers (AVX-512, NEON), 6x2 with 16 (AVX2).
  const int64_t rows = t.arch_name() == "x86_64" && lanes < 16 ? 6 : 8;
  auto vec_tile = [&](int64_t extent, int64_t vectors) {
    if (extent >= vectors * lanes) return vectors * lanes;
    return extent >= lanes ? lanes : extent;
  };
  json c;
  if (is_dense(op)) {
    size_t d = op == "batch_matmul" ? 1 : 0;
    int64_t m = out_extent(g, d), n = out_extent(g, d + 1);
    c["tile_n"] = vec_tile(n, 2);
    c["tile_m"] = std::min(m, rows);
    c["unroll_k"] = 4;
    c["pack_b"] = m >= 16;
    c["order"] = "nm";
  } else if (op == "conv2d_nchw") {
    int64_t k = out_extent(g, 1), ow = out_extent(g, 3);
    if (k >= lanes) {
      // Channels vectorized, two vectors wide, by a few output columns: no lanes wasted on
      // narrow outputs (7x7) and no strided loads for strided convolutions. bench_conv,
      // ResNet-50 layers against oneDNN in the same layout (AVX-512): 0.59x -> 0.90-0.99x at 1
      // thread, 0.60x -> 0.93-1.01x at 2. Columns: the divisor of the output width in
      // want-3..want+1 nearest `want` (no tail tile), else min(OW, want).
      c["vector_axis"] = "k";
      c["tile_k"] = k >= 2 * lanes ? 2 * lanes : lanes;
      // With 16 registers (AVX2) 5 columns x 2 vectors is the widest tile that does not
      // spill, and narrower divisors cost more than a tail tile does (ResNet-18's 7x7 and
      // 14x14 layers at 1 thread on znver3: 20 and 43 GFLOPS with 1 and 2 columns, 43 and 73
      // with 5); so only 4 and 5 count as divisors there.
      const bool wide = vector_registers(t) >= 32;
      const int64_t want = wide ? 7 : 5;
      int64_t best = std::min(ow, want);
      for (int64_t d = std::max<int64_t>(1, want - (wide ? 3 : 1)); d <= std::min(ow, wide ? want + 1 : want); ++d) {
        if (ow % d == 0 && (ow % best != 0 || std::abs(d - want) < std::abs(best - want))) best = d;
      }
      c["tile_w"] = best;
    } else {
      c["vector_axis"] = "w";
      c["tile_k"] = std::min<int64_t>(k, rows);
      c["tile_w"] = vec_tile(ow, 1);
    }
    c["inline_pad"] = false;
    c["order"] = "kw";
  } else if (op == "conv2d_nchwc" || op == "depthwise_conv2d_nchwc") {
    // At most 10 accumulator vectors with 16 vector registers (AVX2: 2 x 6 and 3 x 4 spill and
    // run at half speed), 24 with 32, over one or two channel blocks (depthwise: one). Among
    // those tiles, the one with the most independent accumulators, up to 8 (16 with 32
    // registers) -- enough to hide the multiply-add latency -- after the work wasted on the
    // shifted tail tile (squared: a tail recomputes whole columns); two blocks on ties. AVX2,
    // 256x14x14 3x3 layer, 2 threads: 1 x 7 at 145 GFLOPS, 2 x 5 (a tail) at 83-116; 2 x 4
    // and 1 x 7 alike on 7x7 layers (120-154).
    bool depthwise = op == "depthwise_conv2d_nchwc";
    int64_t v = (out_extent(g, 4) + lanes - 1) / lanes, ow = out_extent(g, 3);
    const bool wide = vector_registers(t) >= 32;
    const int64_t budget = wide ? 24 : 10, enough = wide ? 16 : 8;
    int64_t kb = 1, tw = 1;
    double best = -1;
    for (int64_t b = depthwise ? 1 : std::min<int64_t>(2, out_extent(g, 1)); b >= 1; --b) {
      for (int64_t w = 1; w <= ow && b * v * w <= std::max(budget, v); ++w) {
        double eff = double(ow) / double((ow + w - 1) / w * w);
        double score = eff * eff * double(std::min(b * v * w, enough));
        if (score > best + 1e-9) {
          best = score;
          kb = b;
          tw = w;
        }
      }
    }
    c["tile_w"] = tw;
    if (!depthwise) {
      c["tile_kb"] = kb;
      c["reduce_order"] = "crs";
    }
    // Depthwise: the padded copy costs more than the selects (MobileNet-v2 layers, AVX2:
    // 1.0-2.3x with selects).
    c["inline_pad"] = depthwise;
  } else if (op == "conv2d_nhwc") {
    c["tile_k"] = vec_tile(out_extent(g, 3), 2);
    c["tile_w"] = std::min<int64_t>(out_extent(g, 2), rows - 2);
    c["inline_pad"] = false;
  } else {
    // Depthwise work is light, so the padded copy costs as much as the convolution: read the
    // border through a select instead when the loads stay contiguous (stride 1; MobileNet-v2
    // layers 1.3-1.7x). Strided selects on columns become gathers and lose (0.6x); strided
    // layers with a vector of channels vectorize channels instead, packed with the border read
    // through selects: MobileNet-v2's 144x56x56 stride-2 layer 12.6 -> 16.4 GFLOPS (AVX2, 2
    // threads; the in-kernel copy into blocks costs about what the convolution does).
    bool channels = g.workload.get("stride") > 1 && out_extent(g, 1) >= lanes;
    c["vector_axis"] = channels ? "c" : "w";
    c["tile_w"] = channels ? std::min<int64_t>(out_extent(g, 3), 4) : vec_tile(out_extent(g, 3), 1);
    c["inline_pad"] = channels || g.workload.get("stride") == 1;
  }
  c["vectorize"] = true;
  c["unroll"] = true;
  c["parallel"] = true;
  return c;
}

std::vector<KnobSpec> knob_space(const OpGraph& g, const Target& t) {
  std::vector<KnobSpec> out;
  for (const KnobDef& k : knob_defs(g.workload.op, t)) {
    KnobSpec spec{k.name, k.help, k.kind, {}};
    if (t.is_gpu() && k.type == KnobType::Int) {
      spec.candidates = gpu_split_candidates(g, k);
    } else if (k.type == KnobType::Bool) {
      spec.candidates = {true, false};
    } else if (k.type == KnobType::Choice) {
      for (const std::string& c : k.choices) spec.candidates.push_back(c);
    } else {
      for (int64_t v : split_candidates(split_axis(g, k.name), k.max, t.vector_lanes())) spec.candidates.push_back(v);
    }
    out.push_back(std::move(spec));
  }
  return out;
}

json complete_config(const OpGraph& g, const Target& t, const json& config) {
  const std::string& op = g.workload.op;
  if (!config.is_null() && !config.is_object()) {
    throw UserError(str("config ", config.dump(), " is not a JSON object of knobs"));
  }
  json c = default_config(g, t);
  if (config.is_null()) return c;
  for (const auto& [key, value] : config.items()) {
    const auto& defs = knob_defs(op, t);
    auto it = std::find_if(defs.begin(), defs.end(), [&](const KnobDef& k) { return key == k.name; });
    if (it == defs.end()) {
      throw UserError(str("config knob '", key, "' is not a knob of ", template_name(op, t), " (knobs: ",
                          knob_list(op, t), ")"));
    }
    check_value(op, *it, value);
    c[key] = value;
  }
  return c;
}

Schedule apply_config(const OpGraph& g, const Target& t, const json& config) {
  json c = complete_config(g, t, config);
  Schedule s(g.output);
  for (const ir::Tensor& t : g.tail) s.stage(t->name).compute_inline();
  int lanes = t.vector_lanes();
  const std::string& op = g.workload.op;
  if (t.is_gpu()) is_dense(op) ? schedule_dense_gpu(s, g, c) : schedule_conv_gpu(s, g, c);
  else if (is_dense(op)) schedule_dense(s, g, c);
  else if (op == "conv2d_nchw") schedule_conv_nchw(s, g, c, lanes);
  else if (op == "conv2d_nhwc") schedule_conv_nhwc(s, g, c, lanes);
  else if (op == "conv2d_nchwc") schedule_conv_nchwc(s, g, c);
  else if (op == "depthwise_conv2d_nchwc") schedule_depthwise_nchwc(s, g, c);
  else schedule_depthwise(s, g, c, lanes);
  return s;
}

}  // namespace tf
