// dense_int8.cpu: matmul of uint8 A x int8 B -> int32 C on CPUs, by dot products of four
// bytes (compiler/ir.h dot4_u8s8: vpdpbusd with AVX512-VNNI or AVX-VNNI, usdot with Arm's
// i8mm, a widening sequence elsewhere). The template computes the workload's graph another
// way (schedule_graph): A's rows packed four bytes to an int32 ("A.q" [M][K/4]), B packed into
// panels of tile_n columns with four consecutive k of a column in one int32 ("B.q"
// [N/tile_n][K/4][tile_n], the layout vpdpbusd reads), K padded with zeros to a multiple of 4;
// then C is tiled as dense.cpu tiles a float matmul: tile_m rows (unrolled) x tile_n columns
// (vectorized), the reduction over K/4 unroll_k deep. qdense.cpu (qmatmul) and dense_bf16.cpu
// (matmul_bf16: pairs of bfloat16 per word, vdpbf16ps) tile the same way over their words.
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

using namespace ir;  // NOLINT: tensor-expression code reads best unqualified

// What the dense templates over words of K share: the register tile of dense.cpu over the
// words (quads of int8 bytes, pairs of bfloat16), `per_word` values of K in each.
class WordDense : public CpuTemplate {
 public:
  template <typename... Args>
  explicit WordDense(int64_t per_word, Args&&... args) : CpuTemplate(std::forward<Args>(args)...), per_word_(per_word) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_m", KnobType::Int, "rows of C per register tile (unrolled)", 64, {}, kSplit},
        {"tile_n", KnobType::Int, "columns of C per register tile (vectorized) and of B's packed panels", 256, {}, kSplit},
        {"unroll_k", KnobType::Int, "unroll factor of the reduction loop (in words of k: 4 int8 or 2 bfloat16 values)", 64, {}, kSplit},
        {"order", KnobType::Choice, "outer tile loop order: mn (rows outer) or nm (columns outer)", 0, {"mn", "nm"},
         kReorder},
        {"vectorize", KnobType::Bool, "vectorize the inner tile axis", 0, {}},
        {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
        {"parallel", KnobType::Bool, "run the outermost tile loop (and the packing) on all threads", 0, {}},
    };
    return k;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    const int64_t lanes = t.vector_lanes();
    const int64_t rows = t.arch_name() == "x86_64" && lanes < 16 ? 6 : 8;
    json c;
    c["tile_n"] = vector_tile(out_extent(g, 1), 2, lanes);
    c["tile_m"] = std::min(out_extent(g, 0), rows);
    c["unroll_k"] = std::min<int64_t>(4, words(g));
    c["order"] = "nm";
    default_annotations(c);
    return c;
  }

 protected:
  SplitAxis split_axis(const OpGraph& g, const Target&, const std::string& knob) const override {
    if (knob == "tile_m") return {out_extent(g, 0), false, true};
    if (knob == "tile_n") return {out_extent(g, 1), true, false};
    return {words(g), false, false};  // unroll_k
  }

  Tile register_tile(const OpGraph&, const Target&, const json& c) const override {
    return {c["tile_m"], c["tile_n"], c["unroll_k"], ""};
  }

  // A packing stage (A.q, B.q): its outer axis on all threads, its inner one vectorized.
  static void schedule_packing(Stage& p, const json& c) {
    const auto& ax = p.op()->axes;
    if (c["parallel"].get<bool>()) p.parallel(ax[0].var);
    if (c["vectorize"].get<bool>()) p.vectorize(ax.back().var);
  }

  // Steps of the reduction: K / per_word, rounded up.
  int64_t words(const OpGraph& g) const { return (g.inputs[0]->shape[1] + per_word_ - 1) / per_word_; }

 private:
  int64_t per_word_;
};

class DenseInt8Cpu final : public WordDense {
 public:
  DenseInt8Cpu()
      : WordDense(4, "dense_int8.cpu", 1, std::vector<std::string>{"matmul"}, TargetKind::Llvm,
                  std::vector<OperandTypes>{OperandTypes{DType::Uint8, DType::Int8}}) {}

  OpGraph schedule_graph(const OpGraph& g, const Target&, const json& c) const override {
    const Tensor A = g.inputs[0], B = g.inputs[1];
    const int64_t M = A->shape[0], K = A->shape[1], N = B->shape[1], Q = words(g);
    const int64_t nb = c["tile_n"];
    const Type i32 = Type::int32();
    // A value's byte, zero-extended to int32 (pack_quad places it).
    auto byte = [&](Expr v) { return Cast::make(i32, Cast::make(Type::uint8(), std::move(v))); };
    const Expr zero = IntImm::make_typed(0, i32);
    Tensor ap = compute("A.q", {M, Q}, {"i", "q"}, [&](const std::vector<Expr>& ax) {
      return pack_quad([&](int t) {
        Expr k = ax[1] * 4 + t;
        Expr v = byte(read(A, {ax[0], min(k, Expr(K - 1))}));
        return K % 4 == 0 ? v : select(k < Expr(K), v, zero);
      });
    });
    const int64_t panels = (N + nb - 1) / nb;
    Tensor bp = compute("B.q", {panels, Q, nb}, {"jo", "q", "jl"}, [&](const std::vector<Expr>& ax) {
      Expr j = ax[0] * nb + ax[2];
      Expr inside_n = j < Expr(N);
      return pack_quad([&](int t) {
        Expr k = ax[1] * 4 + t;
        Expr v = byte(read(B, {min(k, Expr(K - 1)), min(j, Expr(N - 1))}));
        Expr inside = K % 4 == 0 ? inside_n : logical_and(inside_n, k < Expr(K));
        return N % nb == 0 && K % 4 == 0 ? v : select(inside, v, zero);
      });
    });
    IterVar q = reduce_axis(Q, "q");
    OpGraph s = g;
    s.acc = s.output = compute(g.output->name, {M, N}, {"i", "j"}, [&](const std::vector<Expr>& ax) {
      Expr a = read(ap, {ax[0], q.var});
      Expr b = read(bp, {ax[1] / nb, q.var, ax[1] % nb});
      return ir::sum(Call::make(kDot4U8S8, {a, b}), {q});
    }, {q});
    s.check_terms = K;
    return s;
  }

  void apply(Schedule& s, const OpGraph& g, const Target&, const json& c) const override {
    for (const char* packed : {"A.q", "B.q"}) schedule_packing(s.stage(packed), c);
    auto [acc, out] = acc_and_writer(s, g);
    schedule_dense_tiles(*out, *acc, 0, c);
  }
};

// qdense.cpu: qmatmul (compiler/operators.cc build_qmatmul), a float A quantized on entry
// into quads ("A.q") times B given as quads [K/4][N], packed into panels of tile_n columns
// ([N/tile_n][K/4][tile_n], the layout dense_int8.cpu makes; a model passes its constant
// weights so packed), scaled per column in the output tile.
class QDenseCpu final : public WordDense {
 public:
  static constexpr int64_t kQuantizeLanes = 16;

  QDenseCpu()
      : WordDense(4, "qdense.cpu", 1, std::vector<std::string>{"qmatmul"}, TargetKind::Llvm,
                  kQuantizedInputTypes) {}

  void apply(Schedule& s, const OpGraph& g, const Target&, const json& c) const override {
    // A quantized in rows of vectors (the division and rounding are the costly part), its
    // quads read in the product's loop. A given as uint8 is read there as it is.
    Stage& au8 = s.stage("A.u8");
    if (g.inputs[0]->dtype == Type::uint8()) {
      au8.compute_inline();
    } else {
      const auto& ax = au8.op()->axes;
      if (c["parallel"].get<bool>()) au8.parallel(ax[0].var);
      if (c["vectorize"].get<bool>()) au8.vectorize(au8.split(ax[1].var, kQuantizeLanes).second);
    }
    s.stage("A.q").compute_inline();
    if (Stage* p = pack_input(s, g, "B", 1, c["tile_n"])) schedule_packing(*p, c);
    auto [acc, out] = acc_and_writer(s, g);
    schedule_dense_tiles(*out, *acc, 0, c);
  }
};

// dense_bf16.cpu: matmul_bf16 (compiler/operators.cc build_matmul_bf16), a float A converted
// on entry into bfloat16 pairs ("A.bf" [M][K/2], in rows of vectors), B given as pairs
// [K/2][N] packed into panels of tile_n columns ([N/tile_n][K/2][tile_n]: a vector of B's
// words is the 32 bfloat16 vdpbf16ps reads; a model passes its constant weights so packed),
// one dot2_bf16 per pair in the register tile. dense_fp16.cpu: matmul_fp16 the same way over
// float16 pairs ("A.h"; two conversions and two FMAs per pair).
class DensePairsCpu final : public WordDense {
 public:
  static constexpr int64_t kConvertLanes = 16;

  DensePairsCpu(const char* name, const char* op, const char* converted)
      : WordDense(2, name, 1, std::vector<std::string>{op}, TargetKind::Llvm), converted_(converted) {}

  void apply(Schedule& s, const OpGraph& g, const Target&, const json& c) const override {
    Stage& ab = s.stage(converted_);
    const auto& ax = ab.op()->axes;
    if (c["parallel"].get<bool>()) ab.parallel(ax[0].var);
    if (c["vectorize"].get<bool>()) ab.vectorize(ab.split(ax[1].var, kConvertLanes).second);
    if (Stage* p = pack_input(s, g, "B", 1, c["tile_n"])) schedule_packing(*p, c);
    auto [acc, out] = acc_and_writer(s, g);
    schedule_dense_tiles(*out, *acc, 0, c);
  }

 private:
  const char* converted_;
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_dense_bf16_cpu() {
  return std::make_unique<DensePairsCpu>("dense_bf16.cpu", "matmul_bf16", "A.bf");
}
std::unique_ptr<ScheduleTemplate> make_dense_fp16_cpu() {
  return std::make_unique<DensePairsCpu>("dense_fp16.cpu", "matmul_fp16", "A.h");
}
std::unique_ptr<ScheduleTemplate> make_dense_int8_cpu() { return std::make_unique<DenseInt8Cpu>(); }
std::unique_ptr<ScheduleTemplate> make_qdense_cpu() { return std::make_unique<QDenseCpu>(); }

}  // namespace tf::templates
