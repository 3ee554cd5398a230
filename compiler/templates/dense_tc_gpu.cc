// dense_tc.cuda (v1): matmul and batch_matmul with precision=tf32, fp16 or bf16 on NVIDIA's
// tensor cores (sm_80 and later), one warp-level product (mma.sync m16n8k8 / m16n8k16,
// compiler/ir.h) per 16 x 8 tile of C and step of K.
//
//   block   warps_m x warps_n warps (threadIdx.x: 32 each), a block_m x block_n tile of C with
//           block_m = warps_m * 16 * tiles_m and block_n = warps_n * 8 * tiles_n;
//   warp    tiles_m x tiles_n tiles of 16 x 8, each lane holding its four accumulators of each
//           (rows g, g + 8 and columns 2t, 2t + 1 of the tile: g = lane / 4, t = lane % 4);
//   K       in steps of the product's depth (8 for TF32, 16 for fp16 and bf16), unroll_k of
//           them per iteration, every tile's product per step unrolled.
//
// How the lanes come to hold their fragments: the accumulator is defined over permuted
// coordinates, acc[M/2][N/2][2][2] (after any batch), where within a warp's tile real row
// 16mi + 8h + g is (g * tiles_m + mi, h) and real column 8ni + 2t + p is (t * tiles_n + ni, p);
// C reads it through the inverse permutation. With C's rows split [block][warp][mi][h][g] and
// columns [block][warp][ni][t][p], lanes fused from (g, t) and the accumulator computed at the
// lane, bound inference gives each lane exactly its tiles_m x tiles_n x 2 x 2 accumulators, and
// Stage::tensorize replaces the step's loops (k, h, p) by the product (docs/compiler.md).
//
// M and N are padded to whole blocks and K to whole iterations inside the accumulator (operands
// past the matrix are zero, not read), so every shape works; C's tiles past M and N are guarded, not shifted, since the warp
// tiles must stay where the permutation puts them. Epilogues (bias, relu) and a model's fused
// tail are applied in the store.
//
// With `shared`, each iteration's tiles of A (block_m x unroll_k * depth) and B are copied into
// shared memory by all the block's threads first (128-bit copies where the rows allow), rows
// padded against bank conflicts; `stages` (2 to 4) keeps that many tiles in flight, the next
// iterations' copied with cp.async while the current one is used (Stage::multi_buffer).
//
// Not yet: ldmatrix (each lane reads its fragments from shared memory one by one), split-K,
// float16 / bfloat16 storage (the operands are float32 in memory, rounded for the product).
#include "compiler/gpu.h"
#include "compiler/templates/gpu_gemm.h"
#include "compiler/te_rebuild.h"

namespace tf::templates {
namespace {

constexpr int64_t kWarp = 32;
// Accumulators per lane (4 per 16 x 8 tile). At 128 (8 x 4 tiles) ptxas keeps them in a 512-byte
// stack frame (local memory) instead of registers; at 64 and below in registers.
constexpr int64_t kMaxLaneAccumulators = 64;
// Products unrolled per iteration of K (tiles_m * tiles_n * unroll_k).
constexpr int64_t kMaxUnrolledProducts = 256;

// Shared rows' padding in floats: A's rows (its K chunk) by 4 and B's (its columns) by 8 put a
// TF32 product's 32 operand loads of A, and of B (blocks of 32 or 64 columns), in 32 banks.
constexpr int64_t kPadA = 4, kPadB = 8;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

const char* intrinsic(Precision p) {
  switch (p) {
    case Precision::TF32: return ir::kMmaTF32;
    case Precision::Float16: return ir::kMmaF16;
    case Precision::BFloat16: return ir::kMmaBF16;
    case Precision::Float32: break;
  }
  throw UserError("dense_tc.cuda: float32 arithmetic has no tensor-core product (precision=tf32, fp16, bf16)");
}

struct Shape {
  int64_t batches = 1, m = 1, n = 1, k = 1;
};

struct Tiles {
  int64_t warps_m, warps_n, tiles_m, tiles_n, unroll_k;
  int64_t block_m() const { return warps_m * 16 * tiles_m; }
  int64_t block_n() const { return warps_n * 8 * tiles_n; }
  int64_t threads() const { return kWarp * warps_m * warps_n; }
};

Tiles tiles_of(const json& c) {
  return {c["warps_m"].get<int64_t>(), c["warps_n"].get<int64_t>(), c["tiles_m"].get<int64_t>(),
          c["tiles_n"].get<int64_t>(), c["unroll_k"].get<int64_t>()};
}

class DenseTensorCore final : public ScheduleTemplate {
 public:
  DenseTensorCore()
      : ScheduleTemplate("dense_tc.cuda", 1, {"matmul", "batch_matmul"}, TargetKind::Cuda,
                         {OperandTypes{DType::Float32, DType::Float32, Precision::TF32},
                          OperandTypes{DType::Float32, DType::Float32, Precision::Float16},
                          OperandTypes{DType::Float32, DType::Float32, Precision::BFloat16}}) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"warps_m", KnobType::Int, "warps per block along the rows of C", 8, {}, kSplit},
        {"warps_n", KnobType::Int, "warps per block along the columns of C", 8, {}, kSplit},
        {"tiles_m", KnobType::Int, "16-row tiles of C per warp (one product each per step of K)", 8, {}, kSplit},
        {"tiles_n", KnobType::Int, "8-column tiles of C per warp (one product each per step of K)", 8, {}, kSplit},
        {"unroll_k", KnobType::Int, "steps of the product's depth per iteration of K (unrolled)", 8, {}, kSplit},
        {"shared", KnobType::Bool, "stage each iteration's tiles of A and B in shared memory, copied by all threads",
         0, {}},
        {"stages", KnobType::Int,
         "with shared: tiles in flight: 1, or 2 to 4 buffers, the next iterations' copied (cp.async) while the "
         "current one is used",
         4, {}, kSplit},
    };
    return k;
  }

  std::vector<json> int_candidates(const OpGraph& g, const Target&, const KnobDef& k) const override {
    const Shape s = shape(g);
    const std::string name = k.name;
    // Up to the padded extent the knob tiles (one tile more than needed at most).
    int64_t extent = name == "warps_m" || name == "tiles_m" ? round_up(s.m, 16) / 16
                     : name == "warps_n" || name == "tiles_n" ? round_up(s.n, 8) / 8
                                                              : round_up(s.k, depth(g)) / depth(g);
    std::vector<json> out;
    if (name == "stages") return {1, 2, 3, 4};
    for (int64_t v = 1; v <= k.max; v *= 2) {
      if (v == 1 || v < 2 * extent) out.push_back(v);
    }
    return out;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    const Shape s = shape(g);
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
    auto blocks = [&] { return s.batches * ((s.m + d.block_m() - 1) / d.block_m()) * ((s.n + d.block_n() - 1) / d.block_n()); };
    // Not below 2 x 2 tiles a warp: a 16 x 8 tile per warp loads 6 operands per product.
    while (blocks() < sms && (d.tiles_m > 2 || d.tiles_n > 2)) {
      if (d.tiles_m >= d.tiles_n && d.tiles_m > 2) d.tiles_m /= 2;
      else d.tiles_n /= 2;
    }
    const int64_t steps = round_up(s.k, depth(g)) / depth(g);
    while (d.unroll_k > 1 && d.unroll_k > steps) d.unroll_k /= 2;
    // Three tiles in flight where shared memory holds them, else two, else shallower ones.
    json c = {{"warps_m", d.warps_m}, {"warps_n", d.warps_n}, {"tiles_m", d.tiles_m},
              {"tiles_n", d.tiles_n}, {"unroll_k", d.unroll_k}, {"shared", true}, {"stages", 3}};
    const int64_t most = gpu_limits(t).max_shared_bytes;
    while (shared_bytes(g, c) > most) {
      if (c["stages"].get<int64_t>() > 2) c["stages"] = c["stages"].get<int64_t>() - 1;
      else if (c["unroll_k"].get<int64_t>() > 1) c["unroll_k"] = c["unroll_k"].get<int64_t>() / 2;
      else break;
    }
    return c;
  }

  std::string check_constraints(const OpGraph& g, const Target& t, const json& c) const override {
    const Shape s = shape(g);
    const Tiles d = tiles_of(c);
    const int64_t limit = gpu_limits(t).max_threads_per_block;
    if (d.threads() > limit) return str(d.threads(), " threads per block (the limit is ", limit, ")");
    if (4 * d.tiles_m * d.tiles_n > kMaxLaneAccumulators) {
      return str(4 * d.tiles_m * d.tiles_n, " accumulators per lane (over ", kMaxLaneAccumulators, ")");
    }
    if (d.tiles_m * d.tiles_n * d.unroll_k > kMaxUnrolledProducts) {
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
    if (shared) {
      const int64_t bytes = shared_bytes(g, c), most = gpu_limits(t).max_shared_bytes;
      if (bytes > most) return str(bytes, " bytes of shared memory per block (the limit is ", most, ")");
    }
    if (d.unroll_k > 1 && d.unroll_k >= 2 * (round_up(s.k, depth(g)) / depth(g))) {
      return str("unroll_k ", d.unroll_k, " steps for a K of ", s.k, " (", round_up(s.k, depth(g)) / depth(g),
                 " steps of ", depth(g), ")");
    }
    return "";
  }

  OpGraph schedule_graph(const OpGraph& g, const Target&, const json& c) const override {
    const Shape s = shape(g);
    const Tiles d = tiles_of(c);
    const ir::Tensor& old = g.acc;
    const ir::Reduce* red = old->reduce();
    const ir::Binary* mul = red ? red->source.as<ir::Binary>() : nullptr;
    TF_CHECK(red && old->reduce_axes.size() == 1 && mul && red->source.kind() == ir::ExprKind::Mul,
             "dense_tc.cuda: ", old->name, " is not a sum of products over one axis");
    const bool batch = old->axes.size() == 3;
    const int64_t depth = this->depth(g);
    const int64_t mp = round_up(s.m, d.block_m()), np = round_up(s.n, d.block_n()),
                  kp = round_up(s.k, depth * d.unroll_k);
    const int64_t wm = 16 * d.tiles_m, wn = 8 * d.tiles_n;
    auto c_ = [](int64_t v) { return Expr(v); };
    std::vector<int64_t> shape;
    std::vector<std::string> names;
    if (batch) {
      shape.push_back(s.batches);
      names.push_back(old->axes[0].name());
    }
    shape.insert(shape.end(), {mp / 2, np / 2, 2, 2});
    names.insert(names.end(), {"r2", "c2", "h", "p"});
    ir::IterVar k = ir::reduce_axis(kp, old->reduce_axes[0].name());
    const std::string name = old == g.output ? old->name + "_acc" : old->name;
    const size_t d0 = batch ? 1 : 0;
    ir::Tensor acc = ir::compute(name, shape, names, [&](const std::vector<Expr>& ax) {
      Expr wr = ax[d0] / c_(wm / 2), q = ax[d0] % c_(wm / 2);
      Expr wc = ax[d0 + 1] / c_(wn / 2), u = ax[d0 + 1] % c_(wn / 2);
      Expr row = wr * c_(wm) + (q % c_(d.tiles_m)) * c_(16) + ax[d0 + 2] * c_(8) + q / c_(d.tiles_m);
      Expr col = wc * c_(wn) + (u % c_(d.tiles_n)) * c_(8) + (u / c_(d.tiles_n)) * c_(2) + ax[d0 + 3];
      ir::VarMap m;
      if (batch) m[old->axes[0].var.get()] = ax[0];
      m[old->axes[d0].var.get()] = row;
      m[old->axes[d0 + 1].var.get()] = col;
      m[old->reduce_axes[0].var.get()] = k.var;
      Expr a = ir::substitute(mul->a, m), b = ir::substitute(mul->b, m);
      // Operands past C's rows and columns and past K are zero, never read (a select over a
      // load does not load what its condition excludes; the shared copies guard them too).
      Expr a_in = kp > s.k ? k.var < c_(s.k) : Expr(), b_in = a_in;
      if (mp > s.m) a_in = ir::logical_and(a_in, row < c_(s.m));
      if (np > s.n) b_in = ir::logical_and(b_in, col < c_(s.n));
      if (a_in) a = ir::select(a_in, a, ir::f32(0));
      if (b_in) b = ir::select(b_in, b, ir::f32(0));
      return ir::sum(a * b, {k});
    }, {k});
    // C's view of it: the inverse permutation, inlined into the output.
    std::vector<std::string> view_names;
    for (const ir::IterVar& a : old->axes) view_names.push_back(a.name());
    const std::string view_name = old == g.output ? g.output->name : old->name + "_view";
    ir::Tensor view = ir::compute(view_name, old->shape, view_names, [&](const std::vector<Expr>& ax) {
      Expr r = ax[d0], cc = ax[d0 + 1];
      Expr wr = r / c_(wm), q = r % c_(wm), wc = cc / c_(wn), u = cc % c_(wn);
      std::vector<Expr> at;
      if (batch) at.push_back(ax[0]);
      at.push_back(wr * c_(wm / 2) + (q % c_(8)) * c_(d.tiles_m) + q / c_(16));
      at.push_back(wc * c_(wn / 2) + ((u % c_(8)) / c_(2)) * c_(d.tiles_n) + u / c_(8));
      at.push_back((q % c_(16)) / c_(8));
      at.push_back(u % c_(2));
      return ir::read(acc, at);
    });
    OpGraph r = with_reads_replaced(g, old, view);
    r.acc = acc;
    return r;
  }

  void apply(Schedule& s, const OpGraph& g, const Target&, const json& c) const override {
    const Tiles d = tiles_of(c);
    Stage& out = s[g.output];
    for (Stage* st : s.stages()) {
      if (st != &out && st->op() != g.acc) st->compute_inline();  // the view, epilogue and tail
    }
    out.guard_tails();
    const auto& oax = out.op()->axes;
    const bool batch = oax.size() == 3;
    const size_t d0 = batch ? 1 : 0;
    auto [bm, r1] = out.split(oax[d0].var, d.block_m());
    auto [wm, r2] = out.split(r1, 16 * d.tiles_m);
    auto [mi, r3] = out.split(r2, 16);
    auto [h, lg] = out.split(r3, 8);
    auto [bn, c1] = out.split(oax[d0 + 1].var, d.block_n());
    auto [wn, c2] = out.split(c1, 8 * d.tiles_n);
    auto [ni, c3] = out.split(c2, 8);
    auto [lt, p] = out.split(c3, 2);
    std::vector<Expr> order;
    if (batch) order.push_back(oax[0].var);
    order.insert(order.end(), {bm, bn, wm, wn, lg, lt, mi, h, ni, p});
    out.reorder(order);
    Expr warp = out.fuse(wm, wn);
    Expr lane = out.fuse(lg, lt);
    Expr thread = out.fuse(warp, lane);
    if (batch) out.bind(oax[0].var, "blockIdx.z");
    out.bind(bm, "blockIdx.y");
    out.bind(bn, "blockIdx.x");
    out.bind(thread, "threadIdx.x");
    for (const Expr& v : {mi, h, ni, p}) out.unroll(v);

    Stage& acc = s[g.acc];
    acc.compute_at(out, thread);
    const auto& aax = acc.op()->axes;
    auto [ko, ki] = acc.split(acc.op()->reduce_axes[0].var, depth(g));
    auto [koo, koi] = acc.split(ko, d.unroll_k);
    acc.reorder({koo, koi, aax[d0].var, aax[d0 + 1].var, ki, aax[d0 + 2].var, aax[d0 + 3].var});
    for (const Expr& v : {koi, aax[d0].var, aax[d0 + 1].var}) acc.unroll(v);
    acc.tensorize(ki, intrinsic(g.workload.types.precision));
    if (!c["shared"].get<bool>()) {
      if (c["stages"].get<int64_t>() > 1) {
        throw UserError(str("config knob stages=", c["stages"].get<int64_t>(),
                            ": pipelines shared-memory tiles, and shared is false"));
      }
      return;
    }
    // Each iteration's tiles: A's rows with their K chunk, B's K chunk with its columns, as in
    // memory (both read along K by the fragments' lanes: A's rows padded by 4 floats and B's by
    // 8 put the 32 lanes of one operand in distinct banks for TF32).
    const Shape sh = shape(g);
    const int64_t chunk = d.unroll_k * depth(g);
    const bool a_vec = sh.k % 4 == 0 && chunk % 4 == 0, b_vec = sh.n % 4 == 0 && d.block_n() % 4 == 0;
    const size_t rank = g.inputs[0]->shape.size();
    std::vector<size_t> layout(rank);
    for (size_t i = 0; i < rank; ++i) layout[i] = i;
    Stage& a = s.cache_read_shared(g.inputs[0]->name);
    a.compute_at(acc, koo);
    a.storage_layout(layout, kPadA);
    cooperative_copy(a, 1, d.threads(), a_vec);
    Stage& b = s.cache_read_shared(g.inputs[1]->name);
    b.compute_at(acc, koo);
    b.storage_layout(layout, kPadB);
    cooperative_copy(b, 1, d.threads(), b_vec);
    if (int64_t n = c["stages"]; n > 1) {
      a.multi_buffer(static_cast<int>(n));
      b.multi_buffer(static_cast<int>(n));
    }
  }

 private:
  // Bytes of the shared tiles of config `c` (each buffer rounded up to 16 bytes, as lowering
  // allocates them), all stages.
  static int64_t shared_bytes(const OpGraph& g, const json& c) {
    const Shape s = shape(g);
    const Tiles d = tiles_of(c);
    const int64_t chunk = std::min(d.unroll_k * depth(g), s.k);
    const int64_t rows = std::min(d.block_m(), s.m), cols = std::min(d.block_n(), s.n);
    auto tile = [](int64_t floats) { return (floats + 3) / 4 * 4; };
    return (tile(rows * (chunk + kPadA)) + tile(chunk * (cols + kPadB))) * 4 * c["stages"].get<int64_t>();
  }
  static Shape shape(const OpGraph& g) {
    const Workload& w = g.workload;
    return {batch_dim(g) == 1 ? w.get("B") : 1, w.get("M"), w.get("N"), w.get("K")};
  }
  static int64_t depth(const OpGraph& g) { return ir::warp_mma_k(intrinsic(g.workload.types.precision)); }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_dense_tc_cuda() { return std::make_unique<DenseTensorCore>(); }

}  // namespace tf::templates
