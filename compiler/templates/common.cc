#include "compiler/templates/common.h"

#include <algorithm>
#include <optional>
#include <set>

#include "base/error.h"
#include "compiler/gpu.h"
#include "compiler/operator_table.h"
#include "compiler/te_rebuild.h"

namespace tf::templates {

std::pair<Stage*, Stage*> acc_and_writer(Schedule& s, const OpGraph& g, const std::vector<size_t>& layout) {
  if (g.acc == g.output || !layout.empty()) {
    ir::Tensor local = s.cache_write(g.acc, layout);
    if (g.acc != g.output) s.stage(g.acc->name).compute_inline();
    return {&s.stage(local->name), &s.stage(g.output->name)};
  }
  return {&s.stage(g.acc->name), &s.stage(g.output->name)};
}

Stage* pack_input(Schedule& s, const OpGraph& g, const std::string& input, size_t dim, int64_t block) {
  if (g.prepacked.count(input)) {
    s.pack_given(input, dim, block);
    return nullptr;
  }
  return &s.pack(input, dim, block);
}

Expr schedule_dense_acc(Stage& acc, size_t batch_axes, int64_t uk, bool vec, bool unroll) {
  const size_t d = batch_axes;
  const auto& aax = acc.op()->axes;
  auto [ko, ki] = acc.split(acc.op()->reduce_axes[0].var, uk);
  std::vector<Expr> order;
  for (size_t i = 0; i < d; ++i) order.push_back(aax[i].var);
  order.insert(order.end(), {ko, ki, aax[d].var, aax[d + 1].var});
  acc.reorder(order);
  if (vec) acc.vectorize(aax[d + 1].var);
  if (unroll) {
    acc.unroll(aax[d].var);
    acc.unroll(ki);
  }
  return ko;
}

void schedule_dense_tiles(Stage& out, Stage& acc, size_t batch_axes, const json& c) {
  const int64_t tm = c["tile_m"], tn = c["tile_n"], uk = c["unroll_k"];
  const bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
  const auto& oax = out.op()->axes;
  const size_t d = batch_axes;
  auto [io, ii] = out.split(oax[d].var, tm);
  auto [jo, ji] = out.split(oax[d + 1].var, tn);
  const bool rows_outer = c["order"].get<std::string>() == "mn";
  Expr first = rows_outer ? io : jo, second = rows_outer ? jo : io;
  out.reorder({first, second, ii, ji});
  if (vec) out.vectorize(ji);
  if (unroll) out.unroll(ii);
  // The batch fused with the outer tile loop, unless that loop is the columns' and tn leaves
  // a shifted last tile: a fused index hides the tile from partition_loops, and every tile then
  // reads B's packed panels through min(jo * tn, N - tn), gathers instead of vector loads
  // (ViT's 197 x 197 attention scores: 20 GFLOPS, 59 so). Then the batch alone is parallel, when
  // it has a few iterations to share. (Unpacked, B's rows are read at min(jo * tn, N - tn),
  // contiguous whatever the tile.)
  const int64_t batch = d > 0 ? out.op()->shape[0] : 1;
  const bool shifted_columns = out.op()->shape[d + 1] % tn != 0 && !rows_outer && c.value("pack_b", false);
  if (par) out.parallel(d == 0 ? first : shifted_columns && batch >= 4 ? oax[0].var : out.fuse(oax[0].var, first));
  acc.compute_at(out, second);
  schedule_dense_acc(acc, d, uk, vec, unroll);
}

bool slices_positions(const OpGraph& g) {
  return g.inputs.size() >= 2 && ir::num_elements(g.inputs[0]->shape) > ir::num_elements(g.inputs[1]->shape);
}

void schedule_nchwc_tiles(Stage& out, Stage& acc, const json& c, int64_t vectors, bool flat, bool slice_positions,
                          int64_t chunk_positions, const std::string& prefetch_weights) {
  const int64_t tw = c["tile_w"], tkb = c["tile_kb"];
  const bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
  const auto& o = out.op()->axes;  // n, ko, oh, ow, kb
  auto [koo, koi] = out.split(o[1].var, tkb);
  // Flat: the rows and columns are one run of positions, tiled by tile_w.
  Expr row = flat ? Expr() : o[2].var;
  auto [wo, wi] = out.split(flat ? out.fuse(o[2].var, o[3].var) : o[3].var, tw);
  // Chunks of the run outside the channel tiles, each channel tile reading a chunk of the input.
  Expr chunk;
  const int64_t tiles = (out.op()->shape[2] * out.op()->shape[3] + tw - 1) / tw;
  // The iterations of the loops inside the channel tiles' loop, once fused with it: the
  // distance to the next channel tile.
  int64_t per_channel_tile = flat ? tiles : out.op()->shape[2];
  if (flat && chunk_positions > 0 && chunk_positions / tw >= 1 && chunk_positions / tw < tiles) {
    per_channel_tile = chunk_positions / tw;
    auto [outer, inner] = out.split(wo, chunk_positions / tw);
    chunk = outer;
    wo = inner;
    out.reorder({o[0].var, chunk, koo, wo, koi, wi, o[4].var});
  } else if (flat) {
    out.reorder({o[0].var, koo, wo, koi, wi, o[4].var});
  } else {
    out.reorder({o[0].var, koo, row, wo, koi, wi, o[4].var});
  }
  if (vec) out.vectorize(o[4].var);
  if (unroll) {
    out.unroll(koi);
    out.unroll(wi);
  }
  // The loop whose next iteration, `distance` on, is the next channel tile.
  Expr tile_loop = koo;
  int64_t distance = 1;
  if (par) {
    Expr outer = chunk ? out.fuse(out.fuse(o[0].var, chunk), koo) : out.fuse(o[0].var, koo);
    Expr fused = out.fuse(outer, flat ? wo : row);
    tile_loop = fused;
    distance = per_channel_tile;
    if (slice_positions)
      out.parallel_slices(fused);
    else
      out.parallel(fused);
    if (flat) wo = fused;
  }
  acc.compute_at(out, wo);
  const auto& a = acc.op()->axes;         // n, ko, oh, ow, kb
  const auto& r = acc.op()->reduce_axes;  // channel blocks, rr, rs, within a block
  std::vector<Expr> order = {a[0].var, a[2].var};
  if (c["reduce_order"].get<std::string>() == "crs")
    order.insert(order.end(), {r[0].var, r[1].var, r[2].var});
  else
    order.insert(order.end(), {r[1].var, r[2].var, r[0].var});
  // The unrolled tile: whichever of its channel blocks (each `vectors` weight vectors) and
  // its columns (a broadcast each) has fewer operands goes outside, the other inside: those
  // operands stay in registers while the inner loop uses them (accumulators + min(columns,
  // weight vectors) + 1 registers), where the other order would keep the more of them live
  // and spill a tile that fits.
  if (tkb * vectors < tw)
    order.insert(order.end(), {r[3].var, a[3].var, a[1].var, a[4].var});
  else
    order.insert(order.end(), {r[3].var, a[1].var, a[3].var, a[4].var});
  acc.reorder(order);
  if (vec) acc.vectorize(a[4].var);
  if (unroll) {
    acc.unroll(a[1].var);
    acc.unroll(a[3].var);
  }
  if (!prefetch_weights.empty()) acc.prefetch(prefetch_weights, order[2], tile_loop, distance);
}

SplitAxis NchwcConvTemplate::split_axis(const OpGraph& g, const Target&, const std::string& knob) const {
  return {out_extent(g, knob == "tile_kb" ? 1 : 3), false, true};
}

int64_t block_vectors(const OpGraph& g, const Target& t, const json& c) {
  const int64_t lanes = t.vector_lanes(), block = out_extent(g, 4);
  return c["vectorize"].get<bool>() ? (block + lanes - 1) / lanes : block;
}

CpuTemplate::Tile NchwcConvTemplate::register_tile(const OpGraph& g, const Target& t, const json& c) const {
  const int64_t tw = c["tile_w"], tkb = c["tile_kb"], vectors = block_vectors(g, t, c);
  // A block's width in elements: whole vectors when vectorized. schedule_nchwc_tiles keeps
  // the fewer of the columns' broadcasts and the blocks' weight vectors live, and one of the
  // other kind.
  return {tw, tkb * (c["vectorize"].get<bool>() ? vectors * t.vector_lanes() : vectors), 1, "",
          std::min(tw, tkb * vectors) + 1};
}

void schedule_pad(Schedule& s, const OpGraph& g, const json& c, int lanes, bool blocked) {
  if (!g.pad) return;
  Stage& p = s.stage(g.pad->name);
  if (c["inline_pad"].get<bool>()) {
    p.compute_inline();
    return;
  }
  const auto& ax = g.pad->axes;  // n, c, h, w (blocked: and cb)
  if (c["parallel"].get<bool>()) p.parallel(p.fuse(ax[0].var, ax[1].var));
  if (c["vectorize"].get<bool>()) {
    if (blocked) p.vectorize(ax[4].var);
    else p.vectorize(p.split(ax[3].var, lanes).second);
  }
}

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

int64_t vector_tile(int64_t extent, int64_t vectors, int64_t lanes) {
  if (extent >= vectors * lanes) return vectors * lanes;
  return extent >= lanes ? lanes : extent;
}

std::vector<json> CpuTemplate::int_candidates(const OpGraph& g, const Target& t, const KnobDef& k) const {
  std::vector<json> out;
  for (int64_t v : split_candidates(split_axis(g, t, k.name), k.max, t.vector_lanes())) out.push_back(v);
  return out;
}

std::string CpuTemplate::check_constraints(const OpGraph& g, const Target& t, const json& c) const {
  Tile tile = register_tile(g, t, c);
  if (!tile.why.empty()) return tile.why;
  const int64_t lanes = t.vector_lanes();
  bool vec = c["vectorize"], unroll = c["unroll"];
  auto vectors = [&](int64_t width) { return vec ? (width + lanes - 1) / lanes : width; };
  const int64_t rows = tile.rows, width = tile.width, reduce = tile.reduce;
  const int64_t regs = vector_registers(t);
  // Accumulators and the operands kept live (by default one row of loaded vectors and one broadcast).
  const int64_t live = rows * vectors(width) + (tile.operands >= 0 ? tile.operands : vectors(width) + 1);
  if (vec && unroll && live > regs) {
    return str("a register tile of ", rows, " x ", vectors(width), " vectors needs ", live, " vector registers; ",
               t.arch_name(), " has ", regs);
  }
  if (unroll && rows * vectors(width) * reduce > kMaxTileStatements) {
    return str("an unrolled body of ", rows * vectors(width) * reduce, " statements (over ", kMaxTileStatements, ")");
  }
  return "";
}

void CpuTemplate::default_annotations(json& c) {
  c["vectorize"] = true;
  c["unroll"] = true;
  c["parallel"] = true;
}

// Register tiles per thread at most this many accumulators: past it the thread needs more
// than the 255 registers NVIDIA allows (AMD: 256 VGPRs) and spills.
constexpr int64_t kMaxGpuThreadTile = 64;

std::string GpuTemplate::check_constraints(const OpGraph& g, const Target& t, const json& c) const {
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
  if (c["shared"].get<bool>()) {
    int64_t bytes = shared_bytes(g, c), most = gpu_limits(t).max_shared_bytes;
    if (bytes > most) return str(bytes, " bytes of shared memory per block (the limit is ", most, ")");
  }
  if (int64_t steps = unrolled_steps(g, c);
      c["unroll"].get<bool>() && tile * steps > kMaxTileStatements) {
    return str("an unrolled body of ", tile * steps, " statements (over ", kMaxTileStatements, ")");
  }
  return "";
}

std::vector<json> GpuTemplate::gpu_candidates(const KnobDef& k, int64_t extent) {
  std::string name = k.name;
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

int64_t GpuTemplate::threads_for(int64_t extent, int64_t tile, int64_t most) {
  int64_t p = 1;
  while (p < most && 2 * p * tile <= extent) p *= 2;
  return p;
}

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

}  // namespace tf::templates

namespace tf::templates {

bool blocks_read_own_channels(const OpGraph& g) {
  const Workload& w = g.workload;
  if (!w.has("group") || w.get("group") == 1) return false;
  const NchwcGroups gr = nchwc_groups(w);
  return !gr.block_in_group() || gr.filters() == gr.ob;
}

OpGraph with_reads_replaced(const OpGraph& g, const ir::Tensor& old, const ir::Tensor& by) {
  ir::StageRebuilder replace({{old.get(), by}});
  OpGraph r = g;
  r.output = replace.rebuild(g.output);
  for (ir::Tensor& t : r.tail) t = replace.rebuild(t);
  return r;
}

OpGraph with_reduction_viewed(const OpGraph& g, const ir::Tensor& acc, const std::string& suffix,
                              const std::function<Expr(const std::vector<Expr>&)>& at) {
  const ir::Tensor& old = g.acc;
  std::vector<std::string> names;
  for (const ir::IterVar& a : old->axes) names.push_back(a.name());
  const std::string name = old == g.output ? g.output->name : old->name + "_" + suffix;
  OpGraph r = with_reads_replaced(g, old, ir::compute(name, old->shape, names, at));
  r.acc = acc;
  return r;
}

std::pair<int64_t, int64_t> blocked_tile(const OpGraph& g, const Target& t, bool depthwise, int64_t positions) {
  // Among register tiles of b channel blocks (at most two; depthwise one) by w columns that
  // fit the registers, with at most 10 accumulator vectors on 16 vector registers and 24 on
  // 32 (tiles of 15 or 16 registers in all ran at 0.4-0.8x on Zen 3 while the tile kept its
  // columns' broadcasts live and spilled; since it keeps the fewer operands live, 12
  // accumulators ran no faster: ResNet-50's 256 -> 64 1x1 layer, best of 5, 6 x 2 86.5 and
  // 3 x 4 90.0 GFLOPS against 5 x 2's 91.9, 4 x 2 86.7), the one that does the
  // most useful multiply-adds per step of the reduction, where a step costs the most of: its
  // multiply-adds (b v w), its loads (b v weight vectors and w broadcasts: both go through
  // the load ports), and 8 (two FMA ports of 4-cycle latency need 8 independent
  // accumulators); the shifted last tile wastes its overlap. Ties go to the larger tile
  // (fewer loads a multiply-add). On Zen 3 (AVX2) this chose one block of 7-9 columns before
  // (a load per multiply-add); 2 x 4-5 since: ResNet-50's layers 0.81x -> 0.93x oneDNN's
  // blocked ones (bench_conv, 1 thread), 14 x 14 1x1 1024 -> 256 1.35x, 7 x 7 1x1 2048 -> 512
  // 1.1x (docs/results/conv-tile-2026-11-30-znver3.txt).
  //
  // Grouped convolutions: a tile's blocks share the broadcasts of the input blocks they read
  // from the same first block (NchwcGroups::start): blocks of one group share them as
  // ungrouped ones do, blocks that each hold whole groups or are a whole group share none
  // (a block more adds its w broadcasts too, so one block is best: Zen 3, 1 thread, RegNetY's
  // 208-channel 14x14 grouped 3x3 1.3x, ResNeXt's 256-channel 28x28 one 1.6x). A tile of
  // three blocks that holds whole groups or lies in one is a candidate too (RegNet's groups
  // of 24: three blocks of 8 are a group, three of 16 two straddled groups reading from two
  // first blocks; Zen 5, 1 thread, 1.2-1.4x the best of one or two blocks on 3x3 layers of
  // 7x7 to 56x56; a tile of three that a group boundary cuts ran 0.7x two blocks).
  const int64_t lanes = t.vector_lanes();
  int64_t v = (out_extent(g, 4) + lanes - 1) / lanes, ow = positions > 0 ? positions : out_extent(g, 3);
  const int64_t regs = vector_registers(t), budget = regs >= 32 ? 24 : 10, enough = 8;
  const int64_t blocks = out_extent(g, 1);
  std::optional<NchwcGroups> groups;
  if (g.workload.has("group") && g.workload.get("group") > 1) groups = nchwc_groups(g.workload);
  // The most distinct first input blocks among a tile's b blocks (tiles start at multiples of b).
  auto broadcast_sets = [&](int64_t b) -> int64_t {
    if (!groups) return 1;
    int64_t most = 1;
    for (int64_t k0 = 0; k0 < blocks; k0 += b) {
      std::set<int64_t> starts;
      for (int64_t k = k0; k < std::min(k0 + b, blocks); ++k) starts.insert(groups->start(k));
      most = std::max<int64_t>(most, static_cast<int64_t>(starts.size()));
    }
    return most;
  };
  int64_t most_blocks = 2;
  if (groups && (3 * groups->ob % groups->filters() == 0 || groups->filters() % (3 * groups->ob) == 0))
    most_blocks = 3;
  int64_t kb = 1, tw = 1, best_acc = 0;
  double best = -1;
  for (int64_t b = depthwise ? 1 : std::min<int64_t>(most_blocks, blocks); b >= 1; --b) {
    const int64_t sets = broadcast_sets(b);
    for (int64_t w = 1; w <= ow && b * v * w <= std::max(budget, v); ++w) {
      const int64_t acc = b * v * w, loads = b * v + sets * w;
      // The accumulators, the fewer of the weight vectors and the broadcasts, and one of the
      // other kind must fit (schedule_nchwc_tiles, check_constraints).
      if (w > 1 && acc + std::min(w, b * v) + 1 > regs) break;
      double eff = double(ow) / double((ow + w - 1) / w * w);
      double score = double(acc) * eff / double(std::max({acc, loads, enough}));
      if (score > best + 1e-9 || (score > best - 1e-9 && acc > best_acc)) {
        best = score;
        best_acc = acc;
        kb = b;
        tw = w;
      }
    }
  }
  return {kb, tw};
}

}  // namespace tf::templates
