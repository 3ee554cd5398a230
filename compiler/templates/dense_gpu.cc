// dense.cuda and dense.rocm (v2): matmul and batch_matmul on GPUs, with the block / warp /
// thread hierarchy of CUTLASS's SIMT GEMMs and the well-known hand-written SGEMMs.
//
//   block   a block_m x block_n tile of C per block of threads, where
//           block_m = warps_m * lanes_m * tile_m and block_n = warps_n * lanes_n * tile_n;
//   warp    warps_m x warps_n warps (threadIdx.y), each a (lanes_m * tile_m) x
//           (lanes_n * tile_n) tile; lanes_m x lanes_n = the warp's 32 threads (64 on AMD's
//           gfx9 wavefronts) arranged as a grid (threadIdx.x), so a warp's loads of one k
//           touch few distinct rows of A and columns of B;
//   thread  a tile_m x tile_n register tile of outer products (rows unrolled, columns
//           vectorized), accumulated over K in block_k steps.
//
// With `shared`, each step of K first copies the block's A (block_m x block_k) and B
// (block_k x block_n) tiles into shared memory, 128 bits per thread and load where the rows
// allow, A kept K-major (so a thread's tile_m rows at one k are one vector read) and every
// shared row padded by 4 floats (the transposing stores of A and the rows of B then fall in
// different banks). `double_buffer` keeps two tiles: the next K step's is copied (with
// cp.async on sm_80+, asynchronously) while the current one is consumed, one barrier per
// step. Epilogues (bias, relu) are applied in the store of the register tile.
//
// Tiles that do not divide C shift inwards (two blocks then write the same values to the
// overlap) or, for extents smaller than a tile, are guarded; a K that block_k does not divide
// is guarded in the reduction (and in the copies).
#include "compiler/gpu.h"
#include "compiler/templates/common.h"

#include <cmath>
#include <map>

namespace tf::templates {
namespace {

// Shared rows are padded by this many floats: 16 bytes keeps them 16-byte aligned for vector
// accesses and moves consecutive rows 4 banks apart.
constexpr int64_t kSharedPad = 4;
// The most accumulators a thread holds (registers: 255 per thread on NVIDIA).
constexpr int64_t kMaxAccumulators = 64;

struct Hierarchy {
  int64_t warp, lanes_m, lanes_n, warps_m, warps_n, tile_m, tile_n, block_k;
  int64_t threads() const { return warp * warps_m * warps_n; }
  int64_t block_m() const { return warps_m * lanes_m * tile_m; }
  int64_t block_n() const { return warps_n * lanes_n * tile_n; }
};

class DenseGpu final : public ScheduleTemplate {
 public:
  explicit DenseGpu(const std::string& kind) : ScheduleTemplate("dense." + kind, 2, {"matmul", "batch_matmul"}, kind) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"warps_m", KnobType::Int, "warps per block along the rows of C", 32, {}, kSplit},
        {"warps_n", KnobType::Int, "warps per block along the columns of C", 32, {}, kSplit},
        {"lanes_n", KnobType::Int,
         "threads of a warp along the columns of C (the other warp_size / lanes_n along the rows)", 64, {}, kSplit},
        {"tile_m", KnobType::Int, "rows of C per thread (register tile, unrolled)", 16, {}, kSplit},
        {"tile_n", KnobType::Int, "columns of C per thread (register tile, vectorized)", 16, {}, kSplit},
        {"block_k", KnobType::Int, "depth of a step of K (the shared tiles' depth; unrolled)", 64, {}, kSplit},
        {"shared", KnobType::Bool, "stage the block's tiles of A and B in shared memory, copied by all its threads", 0,
         {}},
        {"double_buffer", KnobType::Bool,
         "with shared: two tiles, the next step's copied while the current one is used (cp.async on sm_80+)", 0, {}},
        {"vectorize", KnobType::Bool, "vectorize each thread's columns (vector loads and stores)", 0, {}},
        {"unroll", KnobType::Bool, "unroll the register tile and the step of K", 0, {}},
    };
    return k;
  }

  std::vector<json> int_candidates(const OpGraph& g, const Target& t, const KnobDef& k) const override {
    std::string name = k.name;
    size_t d = batch_dim(g);
    int64_t m = out_extent(g, d), n = out_extent(g, d + 1), kk = g.acc->reduce_axes[0].extent;
    std::vector<json> out;
    auto powers = [&](int64_t most, int64_t extent) {
      for (int64_t v = 1; v <= most; v *= 2) {
        if (v == 1 || v <= extent) out.push_back(v);
      }
    };
    if (name == "lanes_n") powers(warp_size(t), warp_size(t));
    else if (name == "warps_m") powers(8, m);
    else if (name == "warps_n") powers(8, n);
    else if (name == "tile_m") powers(8, m);
    else if (name == "tile_n") powers(8, n);
    else if (name == "block_k") powers(32, kk);
    return out;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    size_t d = batch_dim(g);
    Hierarchy h = default_hierarchy(g, t);
    int64_t kk = g.acc->reduce_axes[0].extent;
    // Staging pays when the block's threads share rows and columns; a block of one row
    // (M = 1) reads each element of B once.
    bool shared = out_extent(g, d) > 1 && kk >= 8;
    return {{"warps_m", h.warps_m}, {"warps_n", h.warps_n}, {"lanes_n", h.lanes_n}, {"tile_m", h.tile_m},
            {"tile_n", h.tile_n}, {"block_k", h.block_k}, {"shared", shared}, {"double_buffer", shared},
            {"vectorize", true}, {"unroll", true}};
  }

  std::string check_constraints(const OpGraph& g, const Target& t, const json& c) const override {
    Hierarchy h = hierarchy(t, c);
    int64_t limit = gpu_limits(t).max_threads_per_block;
    if (h.lanes_n > h.warp) return str("lanes_n ", h.lanes_n, " is more than a warp's ", h.warp, " threads");
    if (h.threads() > limit) return str(h.threads(), " threads per block (the limit is ", limit, ")");
    if (h.tile_m * h.tile_n > kMaxAccumulators) {
      return str("a register tile of ", h.tile_m * h.tile_n, " accumulators per thread (over ", kMaxAccumulators, ")");
    }
    bool shared = c["shared"].get<bool>();
    if (c["double_buffer"].get<bool>() && !shared) return "double_buffer without shared (nothing to double)";
    if (shared) {
      int64_t bytes = shared_bytes(g, c, h), most = gpu_limits(t).max_shared_bytes;
      if (bytes > most) return str(bytes, " bytes of shared memory per block (the limit is ", most, ")");
    }
    if (c["unroll"].get<bool>() && h.tile_m * h.tile_n * h.block_k > kMaxTileStatements) {
      return str("an unrolled body of ", h.tile_m * h.tile_n * h.block_k, " statements (over ", kMaxTileStatements, ")");
    }
    // A block tile far past C is threads that only test their guards.
    size_t d = batch_dim(g);
    if (h.block_m() >= 2 * out_extent(g, d) + h.lanes_m * h.tile_m || h.block_n() >= 2 * out_extent(g, d + 1) + h.lanes_n * h.tile_n) {
      return str("a block tile of ", h.block_m(), " x ", h.block_n(), " for C of ", out_extent(g, d), " x ",
                 out_extent(g, d + 1), " (more than twice as large)");
    }
    return "";
  }

  void apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const override {
    Hierarchy h = hierarchy(t, c);
    bool batch = batch_dim(g) == 1;
    bool vec = c["vectorize"], unroll = c["unroll"];
    auto [acc, out] = acc_and_writer(s, g);
    const auto& oax = out->op()->axes;
    size_t d = batch ? 1 : 0;
    auto [bi, i1] = out->split(oax[d].var, h.block_m());
    auto [wi, i2] = out->split(i1, h.lanes_m * h.tile_m);
    auto [li, it] = out->split(i2, h.tile_m);
    auto [bj, j1] = out->split(oax[d + 1].var, h.block_n());
    auto [wj, j2] = out->split(j1, h.lanes_n * h.tile_n);
    auto [lj, jt] = out->split(j2, h.tile_n);
    std::vector<Expr> order;
    if (batch) order.push_back(oax[0].var);
    order.insert(order.end(), {bi, bj, wi, wj, li, lj, it, jt});
    out->reorder(order);
    Expr warp = out->fuse(wi, wj);
    Expr lane = out->fuse(li, lj);
    if (batch) out->bind(oax[0].var, "blockIdx.z");
    out->bind(bi, "blockIdx.y");
    out->bind(bj, "blockIdx.x");
    out->bind(warp, "threadIdx.y");
    out->bind(lane, "threadIdx.x");
    if (unroll) out->unroll(it);
    if (vec) out->vectorize(jt);
    acc->compute_at(*out, lane);

    Expr ko = schedule_dense_acc(*acc, batch, h.block_k, vec, unroll);
    if (!c["shared"].get<bool>()) return;
    bool twice = c["double_buffer"].get<bool>();
    int64_t threads_y = h.warps_m * h.warps_n;
    // A: K-major ([k][m]; batch: [b][k][m]), copied along k (its rows in memory).
    Stage& a = s.cache_read_shared(g.inputs[0]->name);
    a.compute_at(*acc, ko);
    a.storage_layout(batch ? std::vector<size_t>{0, 2, 1} : std::vector<size_t>{1, 0}, kSharedPad);
    int64_t depth = std::min(h.block_k, g.acc->reduce_axes[0].extent);
    cooperative_copy(a, threads_y, h.warp, vec && depth % 4 == 0);
    // B as in memory ([k][n]), copied along n.
    Stage& b = s.cache_read_shared(g.inputs[1]->name);
    b.compute_at(*acc, ko);
    b.storage_layout(batch ? std::vector<size_t>{0, 1, 2} : std::vector<size_t>{0, 1}, kSharedPad);
    int64_t cols = std::min(h.block_n(), out_extent(g, d + 1));
    cooperative_copy(b, threads_y, h.warp, vec && cols % 4 == 0);
    if (twice) {
      a.double_buffer();
      b.double_buffer();
    }
  }

 private:
  static int64_t warp_size(const Target& t) {
    if (t.kind != "rocm") return 32;
    // gfx9 (GCN, CDNA) runs wavefronts of 64; gfx10 and later default to 32.
    return t.cpu.rfind("gfx9", 0) == 0 ? 64 : 32;
  }

  static Hierarchy hierarchy(const Target& t, const json& c) {
    Hierarchy h{};
    h.warp = warp_size(t);
    h.lanes_n = c["lanes_n"];
    h.lanes_m = std::max<int64_t>(1, h.warp / h.lanes_n);
    h.warps_m = c["warps_m"];
    h.warps_n = c["warps_n"];
    h.tile_m = c["tile_m"];
    h.tile_n = c["tile_n"];
    h.block_k = c["block_k"];
    return h;
  }

  // Loops of a shared stage (the region one step of K needs for the whole block) as copies
  // by all threads: the innermost dimension in memory split by 4 and vectorized (128-bit
  // loads, and with cp.async 128-bit copies, where the rows allow), the rest fused and dealt
  // to the threads, consecutive threads on consecutive vectors (coalesced).
  static void cooperative_copy(Stage& sh, int64_t threads_y, int64_t threads_x, bool vec) {
    const auto& ax = sh.op()->axes;
    // The dimension contiguous in global memory is the tensor's last.
    std::vector<Expr> outer;
    for (size_t i = 0; i + 1 < ax.size(); ++i) outer.push_back(ax[i].var);
    Expr inner = ax.back().var;
    Expr all;
    if (vec) {
      auto [io, iv] = sh.split(inner, 4);
      sh.vectorize(iv);
      inner = io;
    }
    all = outer.empty() ? inner : outer[0];
    for (size_t i = 1; i < outer.size(); ++i) all = sh.fuse(all, outer[i]);
    if (!outer.empty()) all = sh.fuse(all, inner);
    auto [rounds, lane] = sh.split(all, threads_y * threads_x);
    auto [y, x] = sh.split(lane, threads_x);
    sh.bind(y, "threadIdx.y");
    sh.bind(x, "threadIdx.x");
    (void)rounds;
  }

  // The block's tiles of A and B, each at most the whole matrix, rows padded, twice with
  // double_buffer.
  static int64_t shared_bytes(const OpGraph& g, const json& c, const Hierarchy& h) {
    size_t d = batch_dim(g);
    int64_t rows = std::min(h.block_m(), out_extent(g, d));
    int64_t cols = std::min(h.block_n(), out_extent(g, d + 1));
    int64_t depth = std::min(h.block_k, g.acc->reduce_axes[0].extent);
    int64_t bytes = ((rows + kSharedPad) + (cols + kSharedPad)) * depth * 4;
    return c["double_buffer"].get<bool>() ? 2 * bytes : bytes;
  }

  // Multiprocessors of the GPU the target names (compute units on AMD): how many blocks run
  // at once. The common part of each architecture; a GPU with fewer runs the same code.
  static int64_t multiprocessors(const Target& t) {
    static const std::map<std::string, int64_t> kCuda = {{"sm_70", 80},  {"sm_72", 8},   {"sm_75", 40}, {"sm_80", 108},
                                                         {"sm_86", 82},  {"sm_87", 16},  {"sm_89", 128}, {"sm_90", 132},
                                                         {"sm_100", 148}, {"sm_120", 170}};
    static const std::map<std::string, int64_t> kRocm = {{"gfx906", 60}, {"gfx908", 120}, {"gfx90a", 104},
                                                         {"gfx942", 304}, {"gfx1030", 80}, {"gfx1100", 96}};
    const auto& table = t.kind == "cuda" ? kCuda : kRocm;
    auto it = table.find(t.kind == "cuda" ? t.arch : t.cpu);
    return it == table.end() ? 64 : it->second;
  }

  // The default hierarchy: among block tiles of 256 threads (fewer for small C), the one a
  // simple model says finishes first: blocks run in waves over the multiprocessors (two at a
  // time each, as registers and shared memory allow), and a thread's throughput falls with a
  // smaller register tile (fewer multiply-adds per shared-memory load) and a multiprocessor's
  // with fewer threads on it.
  static Hierarchy default_hierarchy(const OpGraph& g, const Target& t) {
    size_t d = batch_dim(g);
    int64_t m = out_extent(g, d), n = out_extent(g, d + 1), kk = g.acc->reduce_axes[0].extent;
    int64_t batches = d == 1 ? out_extent(g, 0) : 1;
    int64_t warp = warp_size(t), sms = multiprocessors(t);
    Hierarchy best{};
    double best_time = 0;
    // First only register tiles of at least 8 multiply-adds per shared-memory load (4 x 4
    // and larger) and block tiles at most twice C; any tile where C is too small for those,
    // then (C smaller than a warp's threads) any block.
    for (auto [least, fit] : {std::pair{8.0, true}, std::pair{0.0, true}, std::pair{0.0, false}}) {
    if (best_time > 0) break;
    for (int64_t tm : {8, 4, 2, 1}) {
      for (int64_t tn : {8, 4, 2, 1}) {
        for (int64_t ln : {8, 16, 4, 32, 2, 1}) {
          if (ln > warp) continue;
          int64_t lm = warp / ln;
          for (int64_t wm : {1, 2, 4, 8}) {
            for (int64_t wn : {1, 2, 4, 8}) {
              Hierarchy h{warp, lm, ln, wm, wn, tm, tn, std::min<int64_t>(8, kk)};
              if (h.threads() > 256 || (fit && (h.block_m() > 2 * m || h.block_n() > 2 * n))) continue;
              if (tm > m || tn > n) continue;
              int64_t blocks = ((m + h.block_m() - 1) / h.block_m()) * ((n + h.block_n() - 1) / h.block_n()) * batches;
              int64_t per_sm = std::max<int64_t>(1, std::min<int64_t>(2048 / h.threads(), 2));
              int64_t busy = std::min<int64_t>(per_sm, (blocks + sms - 1) / sms);
              int64_t waves = (blocks + sms * per_sm - 1) / (sms * per_sm);
              // Multiply-adds per shared-memory load of a thread (16 for 8 x 8: two 128-bit
              // loads of A and two of B per k), and per element the block reads from memory.
              double per_load = double(tm * tn) / double((tm + 3) / 4 + (tn + 3) / 4);
              if (per_load < least) continue;
              double tile_eff = std::sqrt(std::min(1.0, per_load / 16.0));
              double block_eff = 1.0 / (1.0 + 8.0 / double(h.block_m()) + 8.0 / double(h.block_n()));
              // Fewer than 8 warps on a multiprocessor leave its 4 schedulers stalls to fill.
              double thread_eff = std::sqrt(std::min(1.0, double(busy * h.threads()) / 256.0));
              // Work a block wastes on rows and columns past C.
              double used = double(std::min(m, h.block_m()) * std::min(n, h.block_n())) / double(h.block_m() * h.block_n());
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
    return best;
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_dense_cuda() { return std::make_unique<DenseGpu>("cuda"); }
std::unique_ptr<ScheduleTemplate> make_dense_rocm() { return std::make_unique<DenseGpu>("rocm"); }

}  // namespace tf::templates
