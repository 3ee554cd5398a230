#include "compiler/templates/tensor_core_gemm.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "compiler/gpu.h"
#include "compiler/ir_mutator.h"
#include "compiler/ir_printer.h"
#include "compiler/te_rebuild.h"

namespace tf::templates {
namespace {

constexpr int64_t kWarp = 32;
// Accumulators per lane (4 per 16 x 8 tile): up to a 64 x 64 warp tile (4 x 8 or 8 x 4 tiles,
// CUTLASS's warp tile for mma.sync), in registers (ptxas for sm_90: 226-238 registers, no stack
// frame, since their initialization is unrolled; before, 128 sat in a 512-byte stack frame).
constexpr int64_t kMaxLaneAccumulators = 128;
// Registers of a multiprocessor (every CUDA GPU since sm_50), and what a lane needs beside its
// accumulators (operands of a step, addresses, indices).
constexpr int64_t kRegistersPerMultiprocessor = 65536;
constexpr int64_t kOperandRegisters = 64;
// Products unrolled per iteration of K (tiles_m * tiles_n * unroll_k).
constexpr int64_t kMaxUnrolledProducts = 256;
// A warpgroup-level product's accumulators per thread (its N / 2, N up to 256: in registers,
// tied to the instruction's operands).
constexpr int64_t kMaxWgmmaAccumulators = 128;

// Shared rows' padding in floats: A's rows (its K chunk) by 4 and B's (its columns) by 8 put a
// TF32 product's 32 operand loads of A, and of B (blocks of 32 or 64 columns), in 32 banks.
constexpr int64_t kPadA = 4, kPadB = 8;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

const char* intrinsic(Precision p) {
  switch (p) {
    case Precision::TF32:
      return ir::kMmaTF32;
    case Precision::Float16:
      return ir::kMmaF16;
    case Precision::BFloat16:
      return ir::kMmaBF16;
    case Precision::Float32:
      break;
  }
  throw UserError(
      "tensor-core templates: float32 arithmetic has no tensor-core product (precision=tf32, fp16, "
      "bf16)");
}

struct Tiles {
  int64_t warps_m, warps_n, tiles_m, tiles_n, unroll_k;
  int64_t block_m() const { return warps_m * 16 * tiles_m; }
  int64_t block_n() const { return warps_n * 8 * tiles_n; }
  int64_t threads() const { return kWarp * warps_m * warps_n; }
};

// Shared rows' padding of 16-bit tiles (half_tiles) in elements: 4 words, so that a row holds
// 4 (mod 8) words and the 32 lanes of a fragment's load (rows g, pairs t) are in 32 banks.
constexpr int64_t kPadHalf = 8;
// wgmma's core matrices (128 bytes of 16-bit elements each) padded by 16 bytes: a warp's 16-byte
// copies of 4 rows x 8 chunks of K (a K chunk of 64) then fall in 8 bank groups (row + chunk
// mod 8), 4 wavefronts, instead of 4 groups (the row alone), 8 wavefronts.
constexpr int64_t kPadCore = 8;

bool half_tiles(const json& c) { return c.contains("half_tiles") && c["half_tiles"].get<bool>(); }
// Whether a warpgroup's tile is one wgmma per 16 of K (configs before the knob have none).
bool wgmma(const json& c) { return c.contains("wgmma") && c["wgmma"].get<bool>(); }
// Whether its products stay in flight across the next iteration (configs before the knob: no).
bool wgmma_in_flight(const json& c) {
  return c.contains("wgmma_in_flight") && c["wgmma_in_flight"].get<bool>();
}
// What wgmma_in_flight needs that config `c` has not ("" when it has it, or the knob is off).
std::string in_flight_constraints(const json& c) {
  if (!wgmma_in_flight(c)) return "";
  if (!wgmma(c)) return "wgmma_in_flight without wgmma (only its products run asynchronously)";
  if (const int64_t n = c["stages"]; n < 3) {
    return str("wgmma_in_flight with stages ", n,
               " (it needs 3 or more: the tile read, the one the products before still read, the "
               "one copied)");
  }
  return "";
}

const char* wgmma_intrinsic(Precision p) { return p == Precision::BFloat16 ? ir::kWgmmaBF16 : ir::kWgmmaF16; }

bool is_16_bits(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
// Whether the products round their operands to 16 bits (fp16, bf16: 16-bit tiles and wgmma).
bool products_16_bits(Precision p) { return p == Precision::Float16 || p == Precision::BFloat16; }

// Whether B is given as [N][K] (trans_b=1: K innermost, as its tile holds 16-bit operands).
bool b_along_k(const OpGraph& g) { return g.workload.flag("trans_b"); }

// Whether operand A's (b: B's) shared tile holds 16 bits.
bool tile_16_bits(const Given16& given, const json& c, bool b) { return half_tiles(c) || given[b]; }

// Whether B's 16-bit tile keeps the layout B is given in, [K][N] (N innermost, its rows
// padded): a B given in 16 bits as [K][N], read from an input, without wgmma (whose tiles are
// K-major core matrices). Its copy is then a cp.async of rows, and its fragments' pairs along K,
// a row apart, are read by ldmatrix.trans (compiler/ir.h kLdMatrix).
bool b_tile_as_given(const Given16& given, bool b_input, const OpGraph& g, const json& c) {
  return given.b && b_input && !b_along_k(g) && !wgmma(c);
}

// Whether the copy of operand A's (b: B's) tile cannot be cp.async, so that a pipeline stages
// it through registers: it rounds (half_tiles of a float32 operand), or transposes 16-bit
// elements (B given as [K][N], for wgmma).
bool copied_through_registers(const Given16& given, const OpGraph& g, const json& c, bool b) {
  if (!given[b]) return half_tiles(c);
  return b && !b_along_k(g) && wgmma(c);
}

// Rows of blocks launched together, column by column (configs before the knob: 1).
int64_t block_swizzle(const json& c) {
  return c.contains("block_swizzle") ? c["block_swizzle"].get<int64_t>() : 1;
}

Tiles tiles_of(const json& c) {
  return {c["warps_m"].get<int64_t>(), c["warps_n"].get<int64_t>(), c["tiles_m"].get<int64_t>(),
          c["tiles_n"].get<int64_t>(), c["unroll_k"].get<int64_t>()};
}

// What block_swizzle needs that config `c` has not ("" when it has it): groups that divide the
// rows of blocks (a last group past C would be blocks of guards around whole tiles).
std::string swizzle_constraints(const GemmShape& s, const json& c) {
  const int64_t group = block_swizzle(c), block_m = tiles_of(c).block_m();
  const int64_t rows = (s.m + block_m - 1) / block_m;
  if (group == 1 || rows % group == 0) return "";
  return str("block_swizzle ", group, " with ", rows, " rows of blocks (M ", s.m, ", ", block_m,
             " rows a block): the groups must divide them");
}

}  // namespace

TensorCoreGemm::TensorCoreGemm(std::string name, int version, std::vector<std::string> ops,
                               std::vector<OperandTypes> types)
    : ScheduleTemplate(std::move(name), version, std::move(ops), TargetKind::Cuda, std::move(types)) {}

const std::vector<KnobDef>& TensorCoreGemm::knobs() const {
  static const std::vector<KnobDef> k = {
      {"warps_m", KnobType::Int, "warps per block along the rows of C", 8, {}, kSplit},
      {"warps_n", KnobType::Int, "warps per block along the columns of C", 8, {}, kSplit},
      {"tiles_m",
       KnobType::Int,
       "16-row tiles of C per warp (one product each per step of K)",
       8,
       {},
       kSplit},
      {"tiles_n",
       KnobType::Int,
       "8-column tiles of C per warp (one product each per step of K; with wgmma, the warpgroup's "
       "N / 8)",
       32,
       {},
       kSplit},
      {"unroll_k",
       KnobType::Int,
       "steps of the product's depth per iteration of K (unrolled): 1, 2, 4, 8, or a convolution's "
       "R x S (its im2col rows decoded once a kernel instead of every iteration)",
       16,
       {},
       kSplit},
      {"shared",
       KnobType::Bool,
       "stage each iteration's tiles of A and B in shared memory, copied by all threads",
       0,
       {}},
      {"stages",
       KnobType::Int,
       "with shared: tiles in flight: 1, or 2 to 12 buffers, the next iterations' copied "
       "(cp.async) while the current one is used (more than 4 only where the loop has a tile "
       "for each)",
       12,
       {},
       kSplit},
      {"half_tiles",
       KnobType::Bool,
       "with shared and precision fp16 or bf16: the operands' tiles held in 16 bits (rounded as "
       "they are copied or computed, K innermost), each pair of a fragment one 32-bit load",
       0,
       {}},
      {"wgmma",
       KnobType::Bool,
       "sm_90, fp16 or bf16, 16-bit tiles: each warpgroup (4 warps along the rows, tiles_m 1) "
       "computes its 64 x "
       "8*tiles_n tile by one warpgroup-level product (wgmma) per 16 of K, reading both tiles from "
       "shared memory, "
       "held in 8 x 8 core matrices",
       0,
       {}},
      {"wgmma_in_flight",
       KnobType::Bool,
       "with wgmma and 3 or more stages: each iteration's products run on while the next iteration "
       "copies and "
       "issues its own (waited for one iteration late, as CUTLASS's Hopper main loops do); the "
       "copies run stages - 2 "
       "iterations ahead instead of stages - 1",
       0,
       {}},
      {"split_k",
       KnobType::Int,
       "parts of K computed by blocks of their own into a workspace, then summed (with the "
       "epilogue) by a second kernel",
       16,
       {},
       kSplit},
      {"block_swizzle",
       KnobType::Int,
       "the blocks' launch order: groups of this many rows of blocks, each group column by "
       "column (1: row by row), so that the blocks running at once share rows of A and columns "
       "of B in L2",
       8,
       {},
       kSplit},
  };
  return k;
}

std::vector<json> TensorCoreGemm::int_candidates(const OpGraph& g, const Target&,
                                                 const KnobDef& k) const {
  const GemmShape s = gemm_shape(g);
  const std::string name = k.name;
  // Up to the padded extent the knob tiles (one tile more than needed at most).
  int64_t extent = name == "warps_m" || name == "tiles_m"   ? round_up(s.m, 16) / 16
                   : name == "warps_n" || name == "tiles_n" ? round_up(s.n, 8) / 8
                                                            : round_up(s.k, depth(g)) / depth(g);
  std::vector<json> out;
  // Deep pipelines (6 to 12 buffers) for GEMMs whose few blocks each run a short K: a BERT
  // layer's 128-row GEMMs, which cuBLAS runs with all of K's chunks in flight. Not where an
  // operand is computed (a convolution's im2col tile, a model's views): its tile is staged
  // through registers, loaded one iteration ahead whatever the depth.
  if (name == "stages") {
    const auto [a_input, b_input] = inputs_ab(g);
    if (a_input && b_input) return {1, 2, 3, 4, 6, 8, 12};
    return {1, 2, 3, 4};
  }
  if (name == "unroll_k") {
    for (int64_t v = 1; v <= 8; v *= 2) {
      if (v == 1 || v < 2 * extent) out.push_back(v);
    }
    const int64_t taps = k_taps(g);
    if (taps > 1 && taps <= k.max && taps < 2 * extent &&
        std::find(out.begin(), out.end(), json(taps)) == out.end())
      out.push_back(taps);
    return out;
  }
  if (name == "block_swizzle") {
    // Group sizes that divide the rows of blocks (of the smallest block tile, 16 rows, up to
    // the largest, 512: check_constraints refuses those that do not divide a config's).
    std::vector<json> sizes;
    for (int64_t v = 1; v <= k.max; v *= 2) {
      if (v == 1 || (s.m + 15) / 16 >= 2 * v) sizes.push_back(v);
    }
    return sizes;
  }
  for (int64_t v = 1; v <= k.max; v *= 2) {
    if (v == 1 || v < 2 * extent) out.push_back(v);
  }
  return out;
}

json TensorCoreGemm::default_config(const OpGraph& g, const Target& t) const {
  const GemmShape s = gemm_shape(g);
  // GEMMs of 16-bit products (fp16, bf16) whose operands are read straight from inputs
  // (dense_tc: matmul, batch_matmul), "direct" below, take the adjustments below, timed on an
  // H200 (session 89, bench/gpu_config_sweep.py, kernel time by CUPTI, docs/compiler.md);
  // TF32 and a convolution's computed im2col tile keep the rules they were timed with (session
  // 61) until their own sweeps.
  const bool direct = matrix_operands(g) && products_16_bits(g.workload.types.precision);
  // A 64 x 32 warp tile in a 2 x 2 block (CUTLASS's 128 x 64 with 4 warps), halved along an
  // axis while it is more than C's padded extent, then smaller warp tiles (down to 2 x 2) while
  // the blocks would not give every multiprocessor one.
  Tiles d{2, 2, 4, 4, 2};
  const int64_t m16 = round_up(s.m, 16), n8 = round_up(s.n, 8);
  while (d.block_m() > m16 && d.tiles_m > 1) d.tiles_m /= 2;
  while (d.block_m() > m16 && d.warps_m > 1) d.warps_m /= 2;
  while (d.block_n() > n8 && d.tiles_n > 1) d.tiles_n /= 2;
  while (d.block_n() > n8 && d.warps_n > 1) d.warps_n /= 2;
  const int64_t sms = gpu_arch(t).multiprocessors;
  auto blocks = [&] {
    return s.batches * ((s.m + d.block_m() - 1) / d.block_m()) *
           ((s.n + d.block_n() - 1) / d.block_n());
  };
  // Not below 2 x 2 tiles a warp: a 16 x 8 tile per warp loads 6 operands per product.
  while (blocks() < sms && (d.tiles_m > 2 || d.tiles_n > 2)) {
    if (d.tiles_m >= d.tiles_n && d.tiles_m > 2)
      d.tiles_m /= 2;
    else
      d.tiles_n /= 2;
  }
  const int64_t steps = round_up(s.k, depth(g)) / depth(g);
  int64_t stages = 3;
  // Direct GEMMs over a short K whose blocks would not give every multiprocessor three take
  // four stages and, rather than splitting K, 16 x 16 warp tiles (32 x 32 blocks) where K has 9
  // to 64 steps (a BERT layer's 128-row GEMMs over K = 768: 128 x 3,072 x 768 9.4 us against
  // 14.9, with half_tiles below; 128 x 768 x 768 4.9 against 5.6 as 2 x 2 tiles split in two),
  // one step an iteration where it has at most 8 (its attention's batched products over K = 64
  // and 128: 2.3 and 3.0 us against 2.5 and 3.4). Over K = 3,072 the 2 x 2 tiles split in four
  // stay (1 x 2 tiles 0.90-0.92x of them).
  if (direct && steps <= 64 && d.tiles_m == 2 && d.tiles_n == 2 && blocks() < 3 * sms) {
    if (steps <= 8)
      d.unroll_k = 1;
    else
      d.tiles_m = 1;
    stages = 4;
  }
  // Direct GEMMs of 16-bit operands whose 128 x 128 blocks (8 warps, warps_n 4) still give
  // every multiprocessor one: 4096^3 552 us against 700 (128 x 64 blocks), 2048^3 82 against 91.
  // (Not with float32 operands: their 16-bit tiles' copies staged through registers take 156 a
  // thread there, one block a multiprocessor; unmeasured.)
  const Given16 given = given_16_bits(g);
  bool wide = false;
  if (direct && given.a && given.b && d.warps_m == 2 && d.warps_n == 2 && d.tiles_m == 4 && d.tiles_n == 4) {
    d.warps_n = 4;
    wide = blocks() >= sms;
    if (!wide) d.warps_n = 2;
  }
  while (d.unroll_k > 1 && d.unroll_k > steps) d.unroll_k /= 2;
  // Split-K while the blocks would not give every multiprocessor one and each part keeps at
  // least 16 steps of K (a batch-1 convolution's 7 x 7 and 14 x 14 layers: 16-28 blocks for
  // 132 multiprocessors, each over the whole K of 2,304-4,608); direct GEMMs at least 32 (parts
  // of 24 steps: 0.90x of one part).
  const int64_t least_steps = direct ? 32 : 16;
  int64_t parts = 1;
  while (parts < 16 && blocks() * parts < sms && steps / (parts * 2) >= least_steps) parts *= 2;
  // 16-bit products of a float32 operand read from an input beside a 16-bit one (weights in
  // fp16 or bf16 with float32 activations, as a --precision fp16 model's LayerNorm output):
  // its tiles held in 16 bits, rounded as they are copied (1.09-1.13x alone; 1.55-1.60x with
  // the tiles above). Not where both are float32 (unmeasured; both tiles' copies staged through
  // registers spill at 2 x 2 tiles over K = 3,072).
  const bool half = direct && given.a != given.b;
  // Three tiles in flight where 48 KiB of shared memory hold them, else two, else shallower
  // ones. The space goes up to the architecture's opt-in limit (dynamic shared memory: 227 KiB
  // on sm_90); the defaults stay within the static 48 KiB but the 128 x 128 blocks above, timed
  // with 60 KiB.
  json c = {{"warps_m", d.warps_m}, {"warps_n", d.warps_n},     {"tiles_m", d.tiles_m},
            {"tiles_n", d.tiles_n}, {"unroll_k", d.unroll_k},   {"shared", true},
            {"stages", stages},     {"split_k", parts},         {"half_tiles", half},
            {"wgmma", false},       {"wgmma_in_flight", false}, {"block_swizzle", 1}};
  const int64_t most = wide ? gpu_limits(t).max_dynamic_shared_bytes : gpu_limits(t).max_shared_bytes;
  while (shared_bytes(g, c) > most) {
    if (c["stages"].get<int64_t>() > 2)
      c["stages"] = c["stages"].get<int64_t>() - 1;
    else if (c["unroll_k"].get<int64_t>() > 1)
      c["unroll_k"] = c["unroll_k"].get<int64_t>() / 2;
    else
      break;
  }
  return c;
}

// What a wgmma config needs beyond the others' constraints ("" when it has it).
std::string TensorCoreGemm::wgmma_constraints(const OpGraph& g, const Target& t, const json& c) const {
  const GemmShape s = gemm_shape(g);
  const Tiles d = tiles_of(c);
  if (t.arch != "sm_90") return str("wgmma on ", t.chip(), " (Hopper's warpgroup-level products: sm_90 only)");
  const Precision p = g.workload.types.precision;
  if (!products_16_bits(p)) {
    return str("wgmma at precision=", precision_name(p), " (its products here are fp16 and bf16)");
  }
  if (!c["shared"].get<bool>()) return "wgmma without shared (it reads its operands from shared memory)";
  const Given16 given = given_16_bits(g);
  if (!tile_16_bits(given, c, false) || !tile_16_bits(given, c, true)) {
    return str("wgmma with ", g.workload.types.str(), " operands and no half_tiles (it reads 16-bit tiles)");
  }
  if (d.warps_m % 4 != 0 || d.tiles_m != 1) {
    return str("wgmma with warps_m ", d.warps_m, " and tiles_m ", d.tiles_m,
               " (a warpgroup is 4 warps along the rows, 16 rows each: warps_m a multiple of 4, tiles_m 1)");
  }
  if (4 * d.tiles_n > kMaxWgmmaAccumulators) {
    return str("wgmma with tiles_n ", d.tiles_n, " (N ", 8 * d.tiles_n, "; the product's N is at most 256)");
  }
  // Whole tiles: a tile trimmed to C (a block larger than it) would be read past its buffer,
  // and steps past K would read unwritten elements (the product reads whole tiles; rows and
  // columns past C's reach only what is not stored).
  if (d.block_m() > s.m || d.block_n() > s.n) {
    return str("wgmma with a block tile of ", d.block_m(), " x ", d.block_n(), " for C of ", s.m, " x ", s.n,
               " (its tiles would be trimmed)");
  }
  const int64_t parts = c["split_k"], part = part_depth(g, c);
  if (parts * part != s.k) {
    return str("wgmma with a K of ", s.k, " that ", parts, " parts of ", part,
               " do not cover exactly (steps past K would read unwritten tiles)");
  }
  return "";
}

// Configs a random start would rarely reach (several knobs must agree), each measured right
// after the default; those the constraints refuse are skipped by the tuner.
// - Convolutions, any precision: the default with K chunks of the filter's taps (below).
// - fp16 or bf16 GEMMs of 16-bit operands read from inputs whose blocks of 128 x 256 (128 x
//   128) give every multiprocessor one unsplit: mma.sync in 64 x 64 warp tiles (4 x 8 tiles,
//   CUTLASS's warp tile: 128 accumulators a lane, twice the products per operand read of the
//   default's 64 x 32), 2 x 4 warps over 3 stages (2 x 2 over 4), K chunks of 32. Unmeasured on a
//   GPU yet (the space reached them only once their accumulators stayed in registers, session 94).
// - GEMMs of operands read from inputs, any precision: deep pipelines (deep_pipelines, below).
// - fp16 or bf16 on sm_90: wgmma configs (off by default until timed on a GPU): blocks of 128 x
//   256 (two warpgroups of 64 x 256, CUTLASS's Hopper tile), 128 x 128, 64 x 128 and 64 x 64, K
//   chunks of 64, 4 stages with each iteration's products in flight across the next (the copies two
//   chunks ahead), each split along K until the blocks give every multiprocessor one (parts of
//   at least 4 iterations).
std::vector<json> TensorCoreGemm::seed_configs(const OpGraph& g, const Target& t) const {
  const Precision p = g.workload.types.precision;
  std::vector<json> out;
  // A convolution's K chunks of its R x S filter taps (unroll_k = R x S): each im2col element's
  // channel and tap decoded once a kernel, not every iteration (conv2d_nchw fp16 3x3: 90 PTX
  // instructions a product at 2 steps, 17 at 9). The default otherwise, with fewer stages
  // where the deeper tiles would not fit.
  if (const int64_t taps = k_taps(g); taps > 1 && taps <= 16) {
    json c = default_config(g, t);
    if (c["unroll_k"].get<int64_t>() < taps) {
      c["unroll_k"] = taps;
      while (c["stages"].get<int64_t>() > 2 &&
             shared_bytes(g, c) > gpu_limits(t).max_dynamic_shared_bytes)
        c["stages"] = c["stages"].get<int64_t>() - 1;
      out.push_back(c);
    }
  }
  for (json c : deep_pipelines(g, t)) out.push_back(std::move(c));
  if (!products_16_bits(p)) return out;
  const GemmShape s = gemm_shape(g);
  const Given16 given = given_16_bits(g);
  const auto [a_input, b_input] = inputs_ab(g);
  const int64_t sms = gpu_arch(t).multiprocessors;
  auto blocks = [&](int64_t bm, int64_t bn) {
    return s.batches * ((s.m + bm - 1) / bm) * ((s.n + bn - 1) / bn);
  };
  if (given.a && given.b && a_input && b_input) {
    for (auto [warps_n, stages] : {std::pair<int64_t, int64_t>{4, 3}, {2, 4}}) {
      if (blocks(128, 64 * warps_n) < sms) continue;
      out.push_back({{"warps_m", 2},
                     {"warps_n", warps_n},
                     {"tiles_m", 4},
                     {"tiles_n", 8},
                     {"unroll_k", 2},
                     {"shared", true},
                     {"stages", stages},
                     {"split_k", 1},
                     {"wgmma", false},
                     {"wgmma_in_flight", false},
                     {"half_tiles", false}});
    }
  }
  if (t.arch != "sm_90") return out;
  const int64_t chunk = 4 * depth(g);
  for (auto [warps_m, tiles_n] : {std::pair<int64_t, int64_t>{8, 32}, {8, 16}, {4, 16}, {4, 8}}) {
    const int64_t n = blocks(16 * warps_m, 8 * tiles_n);
    int64_t parts = 1;
    while (parts < 16 && n * parts < sms && s.k / (chunk * parts * 2) >= 4) parts *= 2;
    out.push_back({{"warps_m", warps_m},
                   {"warps_n", 1},
                   {"tiles_m", 1},
                   {"tiles_n", tiles_n},
                   {"unroll_k", 4},
                   {"shared", true},
                   {"stages", 4},
                   {"split_k", parts},
                   {"wgmma", true},
                   {"wgmma_in_flight", true},
                   {"half_tiles", !(given.a && given.b)}});
  }
  return out;
}

// Deep pipelines, as cuBLAS runs a BERT layer's 128-row GEMMs on Hopper (blocks of 64 x 64, K
// chunks of 64, up to 13 of them in flight), for GEMMs whose 64 x 64 blocks are at most one a
// multiprocessor: the default with as many buffers as the loop has tiles for (up to 12) and
// shared memory holds, and 64 x 64 blocks of 2 x 2 warps with K chunks
// of 4 steps as deep, split along K while twice the blocks would still give a multiprocessor at
// most one and each part keeps 4 chunks (cuBLAS splits 128 x 768 x 768, not 128 x 3,072 x 768).
// Both operands read from inputs, and only configs the constraints take: both tiles cp.async
// copies (a tile staged through registers, as a float32 operand's rounded into 16 bits by
// half_tiles, is loaded one iteration ahead whatever the depth). Unmeasured on a GPU yet
// (gpu_session.sh sweep_deep times them against the default).
std::vector<json> TensorCoreGemm::deep_pipelines(const OpGraph& g, const Target& t) const {
  const GemmShape s = gemm_shape(g);
  const int64_t sms = gpu_arch(t).multiprocessors;
  // Only GEMMs that 64 x 64 blocks cover in one wave (the latency of a short K's copies, not
  // the products, bounds them; a 4096^3 GEMM's blocks keep the multiprocessors busy anyway).
  const int64_t blocks = s.batches * ((s.m + 63) / 64) * ((s.n + 63) / 64);
  const auto [a_input, b_input] = inputs_ab(g);
  if (blocks > sms || !a_input || !b_input) return {};
  std::vector<json> out;
  // `c` at the most of 12, 8 or 6 buffers the constraints take (a tile for each buffer, shared
  // memory, both tiles cp.async copies), if any.
  auto keep = [&](json c) {
    for (int64_t n : {12, 8, 6}) {
      c["stages"] = n;
      if (check_constraints(g, t, c).empty()) {
        out.push_back(c);
        return;
      }
    }
  };
  if (json c = default_config(g, t); c["stages"].get<int64_t>() > 1) keep(c);
  json c = {{"warps_m", 2},
            {"warps_n", 2},
            {"tiles_m", 2},
            {"tiles_n", 4},
            {"unroll_k", 4},
            {"shared", true},
            {"stages", 4},
            {"split_k", 1},
            {"half_tiles", false},
            {"wgmma", false},
            {"wgmma_in_flight", false},
            {"block_swizzle", 1}};
  const int64_t chunks = (s.k + 4 * depth(g) - 1) / (4 * depth(g));
  int64_t parts = 1;
  while (parts < 16 && 2 * blocks * parts <= sms && chunks / (parts * 2) >= 4) parts *= 2;
  c["split_k"] = parts;
  keep(c);
  return out;
}

std::string TensorCoreGemm::check_constraints(const OpGraph& g, const Target& t,
                                              const json& c) const {
  const GemmShape s = gemm_shape(g);
  const Tiles d = tiles_of(c);
  const int64_t limit = gpu_limits(t).max_threads_per_block;
  if (d.threads() > limit) return str(d.threads(), " threads per block (the limit is ", limit, ")");
  if (std::string why = in_flight_constraints(c); !why.empty()) return why;
  if (wgmma(c)) {
    if (std::string why = wgmma_constraints(g, t, c); !why.empty()) return why;
  } else if (4 * d.tiles_m * d.tiles_n > kMaxLaneAccumulators) {
    return str(4 * d.tiles_m * d.tiles_n, " accumulators per lane (over ", kMaxLaneAccumulators,
               ")");
  }
  // A lane's accumulators and its operands and addresses (64 registers, measured with ptxas:
  // 16 warps of 64 accumulators spill) within what a lane can have at this block size.
  const int64_t regs = std::min<int64_t>(255, kRegistersPerMultiprocessor / d.threads());
  if (4 * d.tiles_m * d.tiles_n + kOperandRegisters >= regs) {
    return str(4 * d.tiles_m * d.tiles_n, " accumulators per lane leave fewer than ",
               kOperandRegisters, " of the ", regs, " registers a thread of ", d.threads(),
               " can have for its operands");
  }
  if (!wgmma(c) && d.tiles_m * d.tiles_n * d.unroll_k > kMaxUnrolledProducts) {
    return str(d.tiles_m * d.tiles_n * d.unroll_k, " unrolled products per iteration of K (over ",
               kMaxUnrolledProducts, ")");
  }
  if (d.block_m() >= 2 * round_up(s.m, 16) + 16 || d.block_n() >= 2 * round_up(s.n, 8) + 8) {
    return str("a block tile of ", d.block_m(), " x ", d.block_n(), " for C of ", s.m, " x ", s.n,
               " (more than twice as large)");
  }
  const bool shared = c["shared"].get<bool>();
  const int64_t stages = c["stages"].get<int64_t>();
  if (stages > 1 && !shared) return str("stages ", stages, " without shared (nothing to buffer)");
  const Given16 given = given_16_bits(g);
  if (half_tiles(c) && given.a && given.b)
    return str("half_tiles with ", g.workload.types.str(), " operands (their tiles are 16-bit already)");
  if (half_tiles(c)) {
    if (!shared) return "half_tiles without shared (no tiles to hold)";
    if (!products_16_bits(g.workload.types.precision)) {
      return str("half_tiles at precision=", precision_name(g.workload.types.precision),
                 " (16-bit tiles are for fp16 and bf16 products)");
    }
  }
  // Pipelined, each thread holds its share of the next tiles in registers where their copy
  // cannot be cp.async (Schedule::multi_buffer): both tiles rounded as they are stored
  // (half_tiles), B's of 16-bit operands given as [K][N] for wgmma, transposed so that K is
  // innermost, or a tile computed rather than read (a convolution's im2col tile, whose padding
  // is a select), each of whose values also keeps its place and guard until it is stored: two
  // registers a value (conv2d_nhwc of bfloat16 data in 8 x 2 warps of 1 x 4 tiles, 512 threads
  // of at most 128 registers: 112, 121 at 2 and 4 steps of K, 128 and a 24-byte spill at 8);
  // beside its accumulators and operands.
  const auto [a_input, b_input] = inputs_ab(g);
  const bool staged_a = copied_through_registers(given, g, c, false) || !a_input,
             staged_b = copied_through_registers(given, g, c, true) || !b_input;
  if ((staged_a || staged_b) && shared && stages > 4) {
    return str("stages ", stages, " with ", staged_a ? "A" : "B",
               "'s tile staged through registers (loaded one iteration ahead whatever the depth: "
               "more than 4 buffers only where both tiles are cp.async copies)");
  }
  if ((staged_a || staged_b) && shared && stages > 1) {
    const int64_t chunk = d.unroll_k * depth(g);
    auto share = [&](int64_t rows, bool computed) {
      return (computed ? 2 : 1) * ((rows * chunk + d.threads() - 1) / d.threads());
    };
    const int64_t staged = (staged_a ? share(d.block_m(), !a_input) : 0) +
                           (staged_b ? share(d.block_n(), !b_input) : 0);
    if (4 * d.tiles_m * d.tiles_n + staged + kOperandRegisters >= regs) {
      return str(4 * d.tiles_m * d.tiles_n, " accumulators and ", staged,
                 " registers of the next tiles per lane (16-bit tiles) leave fewer than ", kOperandRegisters,
                 " of the ", regs, " registers a thread of ", d.threads(), " can have for its operands");
    }
  }
  if (shared) {
    const int64_t bytes = shared_bytes(g, c), most = gpu_limits(t).max_dynamic_shared_bytes;
    if (bytes > most)
      return str(bytes, " bytes of shared memory per block (the limit of ", t.chip(), " is ", most, ")");
  }
  if (std::string why = swizzle_constraints(s, c); !why.empty()) return why;
  if (const int64_t parts = c["split_k"]; parts > 1) {
    const int64_t part = part_depth(g, c);
    if ((parts - 1) * part >= s.k) {
      return str("split_k ", parts, " parts of ", part, " for a K of ", s.k, " (the last one empty)");
    }
  }
  // More than 4 buffers only where the loop has a tile for each beyond the first (the rest would
  // be shared memory never written).
  if (shared && stages > 4) {
    const int64_t chunk = d.unroll_k * depth(g), iterations = part_depth(g, c) / chunk;
    if (stages - 1 > iterations) {
      return str("stages ", stages, " for ", iterations, " iterations of K (", part_depth(g, c),
                 " in chunks of ", chunk,
                 "): more than 4 buffers only where each is a tile the loop copies");
    }
  }
  if (d.unroll_k > 1 && d.unroll_k >= 2 * (round_up(s.k, depth(g)) / depth(g))) {
    return str("unroll_k ", d.unroll_k, " steps for a K of ", s.k, " (",
               round_up(s.k, depth(g)) / depth(g), " steps of ", depth(g), ")");
  }
  return "";
}

OpGraph TensorCoreGemm::schedule_graph(const OpGraph& workload_graph, const Target&,
                                       const json& c) const {
  const GemmShape s = gemm_shape(workload_graph);
  const OpGraph g = gemm_graph(workload_graph);
  const Tiles d = tiles_of(c);
  const ir::Tensor& old = g.acc;
  const ir::Reduce* red = old->reduce();
  const ir::Binary* mul = red ? red->source.as<ir::Binary>() : nullptr;
  TF_CHECK(red && old->reduce_axes.size() == 1 && mul && red->source.kind() == ir::ExprKind::Mul,
           id(), ": ", old->name, " is not a sum of products over one axis");
  const bool batch = old->axes.size() == 3;
  const int64_t parts = c["split_k"];
  const int64_t mp = round_up(s.m, d.block_m()), np = round_up(s.n, d.block_n()),
                kp = part_depth(workload_graph, c);
  const int64_t wm = 16 * d.tiles_m, wn = 8 * d.tiles_n;
  auto c_ = [](int64_t v) { return Expr(v); };
  // Leading axes: the part of K (split_k > 1), then the batch.
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  if (parts > 1) {
    shape.push_back(parts);
    names.push_back("s");
  }
  if (batch) {
    shape.push_back(s.batches);
    names.push_back(old->axes[0].name());
  }
  const size_t d0 = shape.size();
  // One by one: GCC 12 takes an insert of the four into a vector of at most two for an
  // out-of-bounds copy (-Warray-bounds).
  for (int64_t e : {mp / 2, np / 2, int64_t{2}, int64_t{2}}) shape.push_back(e);
  names.insert(names.end(), {"r2", "c2", "h", "p"});
  ir::IterVar k = ir::reduce_axis(kp, old->reduce_axes[0].name());
  const std::string name = old == g.output ? old->name + "_acc" : old->name;
  ir::Tensor acc = ir::compute(name, shape, names,
                               [&](const std::vector<Expr>& ax) {
                                 Expr wr = ax[d0] / c_(wm / 2), q = ax[d0] % c_(wm / 2);
                                 Expr wc = ax[d0 + 1] / c_(wn / 2), u = ax[d0 + 1] % c_(wn / 2);
                                 Expr row = wr * c_(wm) + (q % c_(d.tiles_m)) * c_(16) +
                                            ax[d0 + 2] * c_(8) + q / c_(d.tiles_m);
                                 Expr col = wc * c_(wn) + (u % c_(d.tiles_n)) * c_(8) +
                                            (u / c_(d.tiles_n)) * c_(2) + ax[d0 + 3];
                                 // This part's position in K.
                                 Expr kg = parts > 1 ? ax[0] * c_(kp) + k.var : Expr(k.var);
                                 ir::VarMap m;
                                 if (batch) m[old->axes[0].var.get()] = ax[d0 - 1];
                                 m[old->axes[batch ? 1 : 0].var.get()] = row;
                                 m[old->axes[batch ? 2 : 1].var.get()] = col;
                                 m[old->reduce_axes[0].var.get()] = kg;
                                 Expr a = ir::substitute(mul->a, m), b = ir::substitute(mul->b, m);
                                 // Operands past C's rows and columns and past K are zero, never
                                 // read (a select over a load does not load what its condition
                                 // excludes; the shared copies guard them too).
                                 Expr a_in = kp * parts > s.k ? kg < c_(s.k) : Expr(), b_in = a_in;
                                 if (mp > s.m) a_in = ir::logical_and(a_in, row < c_(s.m));
                                 if (np > s.n) b_in = ir::logical_and(b_in, col < c_(s.n));
                                 if (a_in) a = ir::select(a_in, a, ir::f32(0));
                                 if (b_in) b = ir::select(b_in, b, ir::f32(0));
                                 return ir::sum(a * b, {k});
                               },
                               {k});
  // C's view of it: the inverse permutation (`lead`: the part and batch indices before it).
  auto at_acc = [&](std::vector<Expr> at, const Expr& r, const Expr& cc) {
    Expr wr = r / c_(wm), q = r % c_(wm), wc = cc / c_(wn), u = cc % c_(wn);
    at.push_back(wr * c_(wm / 2) + (q % c_(8)) * c_(d.tiles_m) + q / c_(16));
    at.push_back(wc * c_(wn / 2) + ((u % c_(8)) / c_(2)) * c_(d.tiles_n) + u / c_(8));
    at.push_back((q % c_(16)) / c_(8));
    at.push_back(u % c_(2));
    return ir::read(acc, at);
  };
  const size_t v0 = batch ? 1 : 0;
  if (parts == 1) {
    // Inlined into the output.
    return with_reduction_viewed(g, acc, "perm", [&](const std::vector<Expr>& ax) {
      return at_acc(batch ? std::vector<Expr>{ax[0]} : std::vector<Expr>{}, ax[v0], ax[v0 + 1]);
    });
  }
  // Split-K (as split_k_graph): each part's C in a workspace, `partial`, the first kernel's
  // output; a second kernel sums the parts in order (deterministic) where C was read.
  std::vector<int64_t> pshape{parts};
  pshape.insert(pshape.end(), old->shape.begin(), old->shape.end());
  std::vector<std::string> pnames{"s"};
  for (const ir::IterVar& a : old->axes) pnames.push_back(a.name());
  ir::Tensor partial =
      ir::compute(name + "_partial", pshape, pnames, [&](const std::vector<Expr>& ax) {
        std::vector<Expr> lead{ax[0]};
        if (batch) lead.push_back(ax[1]);
        return at_acc(lead, ax[v0 + 1], ax[v0 + 2]);
      });
  OpGraph r = with_parts_summed(g, partial);
  r.acc = acc;
  return r;
}

void TensorCoreGemm::apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const {
  // A config given by hand (compile -c) is not filtered by the constraints: say why wgmma cannot
  // take it before the tensorize pass finds its nest is not a warpgroup's.
  if (wgmma(c)) {
    if (std::string why = wgmma_constraints(g, t, c); !why.empty()) {
      throw UserError(str("config knob wgmma=true for ", g.workload.canonical(), ": ", why));
    }
  }
  if (std::string why = in_flight_constraints(c); !why.empty()) {
    throw UserError(
        str("config knob wgmma_in_flight=true for ", g.workload.canonical(), ": ", why));
  }
  if (std::string why = swizzle_constraints(gemm_shape(g), c); !why.empty()) {
    throw UserError(str("config knob block_swizzle=", block_swizzle(c), " for ",
                        g.workload.canonical(), ": ", why));
  }
  const Tiles d = tiles_of(c);
  Stage& out = s[g.output];
  // The operands' tensors: inputs, or stages computing them (an im2col matrix, a model's
  // views), each read under the select of the padding, if any.
  const auto [read_a, read_b] = product_reads(g.acc);
  TF_CHECK(read_a && read_b, id(), ": ", g.acc->name, " is no product of two tensor reads");
  const bool shared = c["shared"].get<bool>();
  const auto [a_input, b_input] = inputs_ab(g);
  // With `shared`, a computed operand is a shared stage of its own (below); else inlined, as
  // are the view, the epilogue and the tail.
  std::set<const ir::Operation*> kept{out.op().get(), g.acc.get()};
  if (shared && !a_input) kept.insert(read_a->op.get());
  if (shared && !b_input) kept.insert(read_b->op.get());
  // Split-K: the GEMM's kernel writes the parts' workspace (axes: part, batch?, rows, columns),
  // and the output's kernel sums them.
  const int64_t parts = c["split_k"];
  const std::string partial_name = g.acc->name + "_partial", sum_name = g.acc->name + "_sum";
  if (parts > 1) {
    kept.insert(s.stage(partial_name).op().get());
    if (s.has_stage(sum_name)) kept.insert(s.stage(sum_name).op().get());
  }
  for (Stage* st : s.stages()) {
    if (!kept.count(st->op().get())) st->compute_inline();
  }
  Stage& writer = parts > 1 ? s.stage(partial_name) : out;
  writer.guard_tails();
  Expr batch, rows, cols;
  if (parts > 1) {
    const auto& ax = writer.op()->axes;
    batch = ax.size() == 4 ? writer.fuse(ax[0].var, ax[1].var) : ax[0].var;
    rows = ax[ax.size() - 2].var;
    cols = ax.back().var;
    schedule_split_k_sum(s, g);
  } else {
    output_axes(out, g, batch, rows, cols);
  }
  auto [bm0, r1] = writer.split(rows, d.block_m());
  auto [wm, r2] = writer.split(r1, 16 * d.tiles_m);
  auto [mi, r3] = writer.split(r2, 16);
  auto [h, lg] = writer.split(r3, 8);
  auto [bn, c1] = writer.split(cols, d.block_n());
  auto [wn, c2] = writer.split(c1, 8 * d.tiles_n);
  auto [ni, c3] = writer.split(c2, 8);
  auto [lt, p] = writer.split(c3, 2);
  // With wgmma the warps go along the rows first, so that warps 4q .. 4q + 3 (a warpgroup) are
  // 4 consecutive 16-row slices beside each other's columns.
  const bool wg = wgmma(c);
  const Expr warp_outer = wg ? wn : wm, warp_inner = wg ? wm : wn;
  // block_swizzle: the rows of blocks in groups (bm = group * size + row in it), each group's
  // blocks launched column by column, its rows innermost: one index over the three.
  const int64_t group = block_swizzle(c);
  Expr bm = bm0, bm_in;
  if (group > 1) std::tie(bm, bm_in) = writer.split(bm0, group);
  std::vector<Expr> order;
  if (batch) order.push_back(batch);
  order.insert(order.end(), {bm, bn});
  if (bm_in) order.push_back(bm_in);
  order.insert(order.end(), {warp_outer, warp_inner, lg, lt, mi, h, ni, p});
  writer.reorder(order);
  Expr warp = writer.fuse(warp_outer, warp_inner);
  Expr lane = writer.fuse(lg, lt);
  Expr thread = writer.fuse(warp, lane);
  if (batch) writer.bind(batch, "blockIdx.z");
  if (bm_in) {
    writer.bind(writer.fuse(writer.fuse(bm, bn), bm_in), "blockIdx.x");
  } else {
    writer.bind(bm, "blockIdx.y");
    writer.bind(bn, "blockIdx.x");
  }
  writer.bind(thread, "threadIdx.x");
  for (const Expr& v : {mi, h, ni, p}) writer.unroll(v);

  Stage& acc = s[g.acc];
  acc.compute_at(writer, thread);
  const auto& aax = acc.op()->axes;
  const size_t d0 = aax.size() - 4;  // after the part and batch axes
  auto [ko, ki] = acc.split(acc.op()->reduce_axes[0].var, depth(g));
  auto [koo, koi] = acc.split(ko, d.unroll_k);
  // A warp-level product per 16 x 8 tile inside the tiles' loops; with wgmma one per 16 of K
  // over the warpgroup's whole tile, the tiles' loops inside K's (unrolled all the same: the
  // accumulators' initialization runs over them, and constant indices keep it in registers).
  std::vector<Expr> korder = {koo, koi, aax[d0].var, aax[d0 + 1].var, aax[d0 + 2].var, aax[d0 + 3].var};
  korder.insert(korder.begin() + (wg ? 2 : 4), ki);
  acc.reorder(korder);
  // Every tile loop unrolled, the 16 x 8 tile's two inner ones too (the product consumes them; the
  // accumulators' initialization loops over all four): an initialization left a loop indexes
  // the accumulators by a variable, which puts them in local memory (a 4 x 8 warp tile's 128 in
  // a 512-byte stack frame; wgmma's N = 256 spilled 1,520 bytes).
  for (const Expr& v : {koi, aax[d0].var, aax[d0 + 1].var, aax[d0 + 2].var, aax[d0 + 3].var})
    acc.unroll(v);
  const Precision precision = g.workload.types.precision;
  acc.tensorize(ki, wg ? wgmma_intrinsic(precision) : intrinsic(precision));
  if (!shared) {
    if (c["stages"].get<int64_t>() > 1) {
      throw UserError(str("config knob stages=", c["stages"].get<int64_t>(),
                          ": pipelines shared-memory tiles, and shared is false"));
    }
    return;
  }
  // Each iteration's tiles of the operands: A's rows with their K chunk, B's K chunk with its
  // columns, as in memory (both read along K by the fragments' lanes: A's rows padded by 4
  // floats and B's by 8 put the 32 lanes of one operand in distinct banks for TF32). An input
  // is copied (cache_read_shared); a computed operand (a convolution's im2col matrix) is
  // computed into shared memory by all threads, each element once per block instead of once
  // per lane of every warp that needs it; plain copies (a 1x1 convolution's) stay cp.async.
  const GemmShape sh = gemm_shape(g);
  const int64_t chunk = d.unroll_k * depth(g);
  std::vector<Stage*> staged;
  // With half_tiles (float32 inputs rounded as they are copied) or operands given in 16 bits,
  // an input's tile is held in 16 bits with the dimensions K runs along innermost (B's tile
  // transposed unless it is given as [N][K]), so that each pair of a fragment (two consecutive
  // k of one row or column) is one 32-bit word.
  const bool bf16 = g.workload.types.precision == Precision::BFloat16;
  const Expr kvar = g.acc->reduce_axes[0].var;
  const Given16 given = given_16_bits(g);
  auto stage = [&](const ir::TensorRead* r, bool is_b, bool input, int64_t pad, bool vec,
                   int64_t lanes) {
    const bool half = tile_16_bits(given, c, is_b);
    // Rounded to 16 bits as it is copied or computed: a float32 input (half_tiles), or a computed
    // float32 operand (an im2col tile: of 16-bit data, exactly); one a model's views compute in
    // 16 bits (its storage Cast) is stored as it is.
    const bool narrow = half && (input ? !given[is_b] : r->op->dtype == ir::Type::float32());
    TF_CHECK(!input || r->op->is_placeholder(), id(), ": operand ", r->op->name,
             " is not an input");
    std::vector<size_t> order = as_is(r->op->shape.size());
    Stage* x = input ? (narrow ? &s.cache_read_shared_16(r->op->name, bf16) : &s.cache_read_shared(r->op->name))
                     : &s[r->op];
    if (!input) {
      x->set_scope_shared();
      if (narrow) s.store_16_bits(*x, bf16);
    }
    if (is_b && b_tile_as_given(given, input, g, c)) {
      // Rows padded by 16 bytes: ldmatrix.trans's 8 rows in distinct 16-byte bank groups
      // where the tile is an even number of 8 columns wide.
      pad = kPadHalf;
    } else if (half) {
      auto along_k = [&](size_t dim) { return ir::uses_var(r->indices[dim], kvar); };
      std::stable_partition(order.begin(), order.end(), [&](size_t dim) { return !along_k(dim); });
      // K over several dimensions (a 3x3 convolution's weights: channels, rows, columns): no
      // padding, which would split K's consecutive elements and cost a 3-wide row 8 more.
      const auto k_dims = std::count_if(order.begin(), order.end(), along_k);
      pad = k_dims > 1 ? 0 : kPadHalf;
      // wgmma: K innermost and alone, the rows beside it, in core matrices (each padded).
      if (wg && k_dims != 1) {
        throw UserError(str(id(), ": wgmma with operand ", r->op->name, ", whose tile's K is not one dimension"));
      }
      if (wg) pad = kPadCore;
    }
    x->compute_at(acc, koo);
    x->storage_layout(order, pad, wg);
    const Expr rounds = cooperative_copy(*x, 1, d.threads(), vec, lanes);
    // An input's plain copy (cp.async where pipelined) unrolled: its rounds an add and a copy
    // each, without a loop's counter, compare and branch in every iteration of K (a 128 x 256
    // block's B tile: 4 rounds). Rounding, transposing and computed copies keep their loops
    // (multi_buffer stages those through registers).
    if (input && !copied_through_registers(given, g, c, is_b)) x->unroll(rounds);
    staged.push_back(x);
  };
  // 16 bytes per lane where the rows allow: 4 floats, or 8 halves of a 16-bit operand whose
  // tile keeps its rows (A; B given as [N][K], trans_b=1), K innermost: cp.async's widest copy.
  // B given as [K][N] is copied along N: 8 halves a lane where its tile keeps that layout
  // (b_tile_as_given), else (wgmma: its 16-bit tile transposed) 4 values.
  const int64_t a_lanes = given.a ? 8 : 4, b_lanes = given.b ? 8 : 4;
  const bool bk = b_along_k(g);
  const int64_t b_row_lanes = b_tile_as_given(given, b_input, g, c) ? 8 : 4;
  stage(read_a, false, a_input, kPadA, a_input && sh.k % a_lanes == 0 && chunk % a_lanes == 0,
        a_lanes);
  // B given as [N][K] in float32 (TF32): its tile keeps that layout, K innermost, padded as A's
  // (ldmatrix's eight 16-byte rows in distinct bank groups).
  stage(read_b, true, b_input, bk && !tile_16_bits(given, c, true) ? kPadA : kPadB,
        b_input && (bk ? sh.k % b_lanes == 0 && chunk % b_lanes == 0
                       : sh.n % b_row_lanes == 0 && d.block_n() % b_row_lanes == 0),
        bk ? b_lanes : b_row_lanes);
  if (int64_t n = c["stages"]; n > 1) {
    for (Stage* x : staged) x->multi_buffer(static_cast<int>(n), wg && wgmma_in_flight(c) ? 1 : 0);
  }
}

// Bytes of the shared tiles of config `c` (each buffer rounded up to 16 bytes, as lowering
// allocates them), all stages.
int64_t TensorCoreGemm::shared_bytes(const OpGraph& g, const json& c) const {
  const GemmShape s = gemm_shape(g);
  const Tiles d = tiles_of(c);
  const int64_t chunk = std::min(d.unroll_k * depth(g), s.k);
  const int64_t rows = std::min(d.block_m(), s.m), cols = std::min(d.block_n(), s.n);
  auto tile = [](int64_t floats) { return (floats + 3) / 4 * 4 * 4; };
  auto half_tile = [](int64_t halves) { return (halves + 7) / 8 * 8 * 2; };
  const Given16 given = given_16_bits(g);
  // wgmma's tiles are in core matrices (Stage::storage_layout).
  auto half_rows = [&](int64_t n) {
    return wgmma(c) ? Stage::core_matrix_elements(n, chunk, kPadCore) : n * (chunk + kPadHalf);
  };
  const int64_t a = tile_16_bits(given, c, false) ? half_tile(half_rows(rows)) : tile(rows * (chunk + kPadA));
  const int64_t b = b_tile_as_given(given, inputs_ab(g).second, g, c)
                        ? half_tile(chunk * (cols + kPadHalf))
                    : tile_16_bits(given, c, true) ? half_tile(half_rows(cols))
                    : b_along_k(g)                 ? tile(cols * (chunk + kPadA))
                                                   : tile(chunk * (cols + kPadB));
  return (a + b) * c["stages"].get<int64_t>();
}
Given16 TensorCoreGemm::given_16_bits(const OpGraph& g) const {
  const bool a_weights = weights_are_a(g);
  return {is_16_bits(a_weights ? g.workload.types.weight : g.workload.types.data),
          is_16_bits(a_weights ? g.workload.types.data : g.workload.types.weight)};
}
int64_t TensorCoreGemm::part_depth(const OpGraph& g, const json& c) const {
  const int64_t k = gemm_shape(g).k, parts = c["split_k"];
  return round_up((k + parts - 1) / parts, depth(g) * c["unroll_k"].get<int64_t>());
}
int64_t TensorCoreGemm::depth(const OpGraph& g) const {
  return ir::warp_mma_k(intrinsic(g.workload.types.precision));
}

}  // namespace tf::templates
