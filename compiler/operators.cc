#include "compiler/operators.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "base/bfloat16.h"
#include "base/error.h"
#include "base/float16.h"
#include "compiler/operator_table.h"
#include "compiler/te_rebuild.h"
#include "compiler/winograd.h"

namespace tf {

const HalfPairs kBF16Pairs = {kBFloat16Pairs, round_bf16, bf16_half, bf16_pair};
const HalfPairs kF16Pairs = {kFloat16Pairs, round_f16, f16_half, f16_pair};

using namespace ir;  // NOLINT: tensor-expression code reads best unqualified

namespace {

// parse_workload already refused larger tensors (compiler/workload.h); this keeps a Workload
// built by other means from reaching the lowering with sizes that overflow.
constexpr int64_t kMaxElements = kMaxTensorElements;

void check_size(const std::string& spec, const std::string& name, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d > kMaxElements || n > kMaxElements / d) {
      throw UserError(str("workload '", spec, "': tensor ", name, " has more than ", kMaxElements,
                          " elements"));
    }
    n *= d;
  }
}

Tensor make_input(OpGraph& g, const std::string& name, std::vector<int64_t> shape, Type dtype = Type::float32()) {
  check_size(g.workload.canonical(), name, shape);
  Tensor t = placeholder(name, std::move(shape), dtype);
  g.inputs.push_back(t);
  return t;
}

}  // namespace

Expr widened(const OperandTypes& t, Expr e) {
  if (t.is_integer()) return Cast::make(Type::int32(), std::move(e));
  if (e.type() != Type::uint16()) return e;
  return Call::make(t.precision == Precision::BFloat16 ? kBF16ToFloat : kF16ToFloat, {std::move(e)});
}

Expr rounded(Precision p, Expr e) {
  switch (p) {
    case Precision::TF32: return Call::make(kRoundTF32, {std::move(e)});
    case Precision::Float16: return Call::make(kRoundF16, {std::move(e)});
    case Precision::BFloat16: return Call::make(kBF16ToFloat, {Call::make(kFloatToBF16, {std::move(e)})});
    case Precision::Float32: break;
  }
  return e;
}

namespace {

class OperandRounder : public ir::StageRebuilder {
 public:
  // The product's operands where the reduction reads them (an operand a model's views compute
  // is rounded as the template rounds it, once, after the views), else data and weight; by
  // name, as the rebuilt stages are new ones.
  explicit OperandRounder(const OpGraph& g) : precision_(g.workload.types.precision) {
    const auto [a, b] =
        g.acc ? product_reads(g.acc) : std::pair<const TensorRead*, const TensorRead*>{};
    if (a && b) {
      operands_ = {a->op->name, b->op->name};
      return;
    }
    for (size_t k = 0; k < 2 && k < g.inputs.size(); ++k) operands_.insert(g.inputs[k]->name);
  }

  Expr mutate_expr(const Expr& e) override {
    Expr m = StageRebuilder::mutate_expr(e);
    const TensorRead* r = m.as<TensorRead>();
    if (r && operands_.count(r->op->name) && m.type() == Type::float32())
      return rounded(precision_, m);
    return m;
  }

 private:
  Precision precision_;
  std::set<std::string> operands_;
};

}  // namespace

ir::Tensor with_operands_rounded(const OpGraph& g) { return OperandRounder(g).rebuild(g.output); }

std::pair<const TensorRead*, const TensorRead*> product_reads(const Tensor& acc) {
  const ir::Reduce* red = acc->reduce();
  const ir::Binary* mul = red ? red->source.as<ir::Binary>() : nullptr;
  if (!mul || mul->kind != ExprKind::Mul) return {};
  auto read_of = [](Expr e) -> const TensorRead* {
    for (;;) {
      if (const ir::Select* sel = e.as<ir::Select>()) {
        e = sel->t;
      } else if (const ir::Call* c = e.as<ir::Call>();
                 c && c->args.size() == 1 && (c->name == kF16ToFloat || c->name == kBF16ToFloat)) {
        e = c->args[0];
      } else if (const ir::Cast* c = e.as<ir::Cast>()) {
        e = c->value;
      } else {
        return e.as<TensorRead>();
      }
    }
  };
  return {read_of(mul->a), read_of(mul->b)};
}

Type ir_type(DType t) {
  switch (t) {
    case DType::Float32: return Type::float32();
    case DType::Int8: return Type::int8();
    case DType::Uint8: return Type::uint8();
    case DType::Int32: return Type::int32();
    case DType::Float16:
    case DType::BFloat16: return Type::uint16();  // the bits (compiler/ir.h kF16ToFloat)
  }
  return Type::float32();
}

namespace {

bool has_bias(Epilogue e) { return e == Epilogue::Bias || e == Epilogue::BiasRelu; }
bool has_relu(Epilogue e) { return e == Epilogue::Relu || e == Epilogue::BiasRelu; }

// Adds the epilogue stage over `acc`; `channel(axes)` is the index of the bias an output element
// adds, out of `channels`.
void add_epilogue(OpGraph& g, const std::string& out_name, const std::vector<std::string>& names,
                  const std::function<Expr(const std::vector<Expr>&)>& channel, int64_t channels) {
  Epilogue e = g.workload.epilogue;
  const std::vector<int64_t>& shape = g.acc->shape;
  check_size(g.workload.canonical(), out_name, shape);
  if (e == Epilogue::None) {
    g.output = g.acc;
    return;
  }
  Tensor bias;
  if (has_bias(e)) bias = make_input(g, "bias", {channels});
  Tensor acc = g.acc;
  g.output = compute(out_name, shape, names, [&](const std::vector<Expr>& ax) {
    Expr v = read(acc, ax);
    if (bias) v = v + read(bias, {channel(ax)});
    if (has_relu(e)) v = max(v, f32(0.0));
    return v;
  });
}

// The same with the bias along output axis `channel_axis`.
void add_epilogue(OpGraph& g, const std::string& out_name, const std::vector<std::string>& names,
                  size_t channel_axis) {
  add_epilogue(
      g, out_name, names, [channel_axis](const std::vector<Expr>& ax) { return ax[channel_axis]; },
      g.acc->shape[channel_axis]);
}

// data_pad[n, c, h, w] (or [n, h, w, c], or [n, c, h, w, cb]) = data inside, 0 in the border
// of width `pad`.
// The data padded with zeros along dimensions hdim and wdim, as float32 values (16-bit data
// widened: `types`, a convolution's operand types).
Tensor pad_spatial(const Tensor& data, int64_t pad, size_t hdim, size_t wdim, const OperandTypes& types = {}) {
  std::vector<int64_t> shape = data->shape;
  shape[hdim] += 2 * pad;
  shape[wdim] += 2 * pad;
  std::vector<std::string> names = {"n", "c", "h", "w"};
  if (hdim == 1) names = {"n", "h", "w", "c"};
  if (shape.size() == 5) names = {"n", "c", "h", "w", "cb"};
  int64_t h = data->shape[hdim], w = data->shape[wdim];
  return compute("data_pad", shape, names, [&](const std::vector<Expr>& ax) {
    std::vector<Expr> idx = ax;
    idx[hdim] = ax[hdim] - pad;
    idx[wdim] = ax[wdim] - pad;
    Expr inside = logical_and(logical_and(ax[hdim] >= pad, ax[hdim] < Expr(h + pad)),
                              logical_and(ax[wdim] >= pad, ax[wdim] < Expr(w + pad)));
    return select(inside, widened(types, read(data, idx)), f32(0.0));
  });
}

// sum of coef[t] * term(t) over the non-zero coefficients (integers: exact in float).
Expr linear(const double* coef, int64_t n, const std::function<Expr(int64_t)>& term) {
  Expr acc;
  for (int64_t t = 0; t < n; ++t) {
    if (coef[t] == 0) continue;
    Expr x = term(t);
    if (coef[t] == -1) {
      acc = acc ? acc - x : f32(0.0) - x;
      continue;
    }
    if (coef[t] != 1) x = f32(coef[t]) * x;
    acc = acc ? acc + x : x;
  }
  return acc ? acc : f32(0.0);
}

// cases[index] for an index in [0, cases.size()): a chain of selects that the simplifier
// folds to one case once the index is a constant (the templates unroll these axes).
Expr by_index(const Expr& index, const std::vector<Expr>& cases) {
  Expr e = cases.back();
  for (size_t k = cases.size() - 1; k-- > 0;) e = select(eq(index, Expr(static_cast<int64_t>(k))), cases[k], e);
  return e;
}

// The transform of tile `t` (alpha x alpha values, or m x alpha for the output) by a matrix
// `l` (rows x n) on both sides: out[x][y] = sum_i sum_j l[x][i] l[y][j] t(i, j), written as
// sum_j l[y][j] (sum_i l[x][i] t(i, j)) so that the inner sums of one x are common to every
// y (LLVM shares them when the tile is unrolled).
Expr two_sided(const std::vector<double>& l, int64_t rows, int64_t n, const Expr& x, const Expr& y,
               const std::function<Expr(int64_t, int64_t)>& t) {
  std::vector<Expr> xs;
  for (int64_t xr = 0; xr < rows; ++xr) {
    std::vector<Expr> ys;
    for (int64_t yr = 0; yr < rows; ++yr) {
      ys.push_back(linear(&l[static_cast<size_t>(yr * n)], n, [&](int64_t j) {
        return linear(&l[static_cast<size_t>(xr * n)], n, [&](int64_t i) { return t(i, j); });
      }));
    }
    xs.push_back(by_index(y, ys));
  }
  return by_index(x, xs);
}

}  // namespace

namespace ops {

namespace {

// Boards fill 16-bit float inputs with values of their type (runtime/kernel_library.h
// fill_typed "float16", "bfloat16"), not with uint16 integers.
void name_16_bit_inputs(OpGraph& g) {
  for (const Tensor& in : g.inputs) {
    if (in->dtype != Type::uint16()) continue;
    g.word_types[in->name] = g.workload.types.precision == Precision::BFloat16 ? kBFloat16Elements : kFloat16Elements;
  }
}

}  // namespace

void build_matmul(OpGraph& g) {
  const Workload& w = g.workload;
  int64_t M = w.get("M"), N = w.get("N"), K = w.get("K");
  // trans_b=1: B given as [N][K].
  const bool tb = w.get("trans_b") == 1;
  Tensor A = make_input(g, "A", {M, K}, ir_type(w.types.data));
  Tensor B = make_input(g, "B", tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, ir_type(w.types.weight));
  IterVar k = reduce_axis(K, "k");
  bool fused = w.epilogue != Epilogue::None;
  name_16_bit_inputs(g);
  g.acc = compute(fused ? "acc" : "C", {M, N}, {"i", "j"}, [&](const std::vector<Expr>& ax) {
    Expr b = tb ? read(B, {ax[1], k.var}) : read(B, {k.var, ax[1]});
    return sum(widened(w.types, read(A, {ax[0], k.var})) * widened(w.types, b), {k});
  }, {k});
  add_epilogue(g, "C", {"i", "j"}, 1);
  g.flops = 2 * M * N * K;
  if (w.get("const_b")) g.prepacked.insert("B");
}

namespace {

// QuantizeLinear of x to uint8 with the scale P[0] and zero point P[1] (ir::quantize_u8).
Expr quantize_u8(Expr x, const Tensor& P) { return ir::quantize_u8(std::move(x), read(P, {Expr(0)}), read(P, {Expr(1)})); }


// "A.u8": blocked data [N][C/b][H][W][b] as uint8, padded by `pad` on both spatial sides with
// the zero point (the quantized 0.0): float data quantized with P's scale and zero point,
// uint8 data (dtype=uint8) as it is. One pass over the input.
Tensor padded_u8(const Tensor& data, const Tensor& P, int64_t pad) {
  const Type u8 = Type::uint8();
  const std::vector<int64_t>& s = data->shape;
  const int64_t H = s[2], W = s[3];
  return compute("A.u8", {s[0], s[1], H + 2 * pad, W + 2 * pad, s[4]}, {"n", "c", "h", "w", "cb"},
                 [&](const std::vector<Expr>& ax) {
                   Expr x = read(data, {ax[0], ax[1], ax[2] - pad, ax[3] - pad, ax[4]});
                   if (data->dtype != u8) x = quantize_u8(x, P);
                   if (pad == 0) return x;
                   Expr inside = logical_and(logical_and(ax[2] >= pad, ax[2] < Expr(H + pad)),
                                             logical_and(ax[3] >= pad, ax[3] < Expr(W + pad)));
                   return select(inside, x, quantize_u8(f32(0.0), P));
                 });
}

// The float32 output of a quantized product from its int32 sum `acc` at `ax`, for output
// channel `channel` of `channels`: acc * P[2 + channel] + P[2 + channels + channel], then the
// workload's epilogue (its bias along `channel`).
void add_quantized_output(OpGraph& g, const Tensor& P, const std::vector<std::string>& names, int64_t channels,
                          const std::function<Expr(const std::vector<Expr>&)>& channel) {
  const Epilogue e = g.workload.epilogue;
  Tensor bias = has_bias(e) ? make_input(g, "bias", {channels}) : nullptr;
  Tensor acc = g.acc;
  g.output = compute(names.size() == 2 ? "C" : "out", acc->shape, names, [&](const std::vector<Expr>& ax) {
    Expr c = channel(ax);
    Expr v = Cast::make(Type::float32(), read(acc, ax)) * read(P, {c + 2}) + read(P, {c + (2 + channels)});
    if (bias) v = v + read(bias, {c});
    return has_relu(e) ? max(v, f32(0.0)) : v;
  });
  g.check_relative = true;
}

}  // namespace

// qmatmul: C = float(sum_k q(A)[i,k] * B[k,j]) * scale[j] + offset[j], q(A) = A quantized per
// tensor to uint8 on entry (saturate(round_even(A / a_scale) + a_zero), the float made an
// int32 by a saturating cast, then clamped to [0, 255]: ONNX's QuantizeLinear), B int8 given
// as quads (int32 words of four consecutive k, byte t = k % 4, K zero-padded to a multiple of
// 4: the layout dot4_u8s8 reads). The parameters are one input P = {a_scale, a_zero,
// scale[N], offset[N]} (a kernel takes 5 arguments at most). The quantized A is read as quads
// ("A.q" [M][K/4]), so the sum is one dot4_u8s8 per quad.
void build_qmatmul(OpGraph& g) {
  const Workload& w = g.workload;
  const int64_t M = w.get("M"), N = w.get("N"), K = w.get("K"), Q = (K + 3) / 4;
  const Type i32 = Type::int32();
  const bool given_u8 = w.types.data == DType::Uint8;
  Tensor A = make_input(g, "A", {M, K}, given_u8 ? Type::uint8() : Type::float32());
  Tensor B = make_input(g, "B", {Q, N}, i32);
  Tensor P = make_input(g, "P", {2 + 2 * N});
  auto quant = [&](Expr x) { return given_u8 ? x : quantize_u8(std::move(x), P); };
  // A quantized (or given so: dtype=uint8), K zero-padded to whole quads, then read four
  // bytes to a quad (which LLVM loads as one int32 where the quad is read in the product's
  // loop).
  Tensor au8 = compute("A.u8", {M, 4 * Q}, {"i", "k"}, [&](const std::vector<Expr>& ax) {
    Expr v = quant(read(A, {ax[0], min(ax[1], Expr(K - 1))}));
    return K % 4 == 0 ? v : select(ax[1] < Expr(K), v, IntImm::make_typed(0, Type::uint8()));
  });
  Tensor aq4 = compute("A.q", {M, Q}, {"i", "q"}, [&](const std::vector<Expr>& ax) {
    return pack_quad([&](int t) { return Cast::make(i32, read(au8, {ax[0], ax[1] * 4 + t})); });
  });
  IterVar q = reduce_axis(Q, "q");
  g.acc = compute("acc", {M, N}, {"i", "j"}, [&](const std::vector<Expr>& ax) {
    return ir::sum(Call::make(kDot4U8S8, {read(aq4, {ax[0], q.var}), read(B, {q.var, ax[1]})}), {q});
  }, {q});
  add_quantized_output(g, P, {"i", "j"}, N, [](const std::vector<Expr>& ax) { return ax[1]; });
  g.flops = 2 * M * N * K;
  g.check_terms = K;
  if (w.get("const_b")) g.prepacked.insert("B");
}

// matmul_bf16 and matmul_fp16: C = A x B with both operands rounded to bfloat16 (float16)
// and the products summed in float32 (docs/precision.md), then the epilogue. B is given as
// pairs [K/2][N] (word p of column j: k = 2p low, 2p + 1 high, a zero high half past an odd
// K; a model converts its constant weights once). A is float [M][K], converted on entry:
// bfloat16 into pairs like B's ("A.bf" [M][K/2], bf16x2 words), the sum one dot2_bf16 per pair
// (vdpbf16ps); float16 rounded and kept as floats ("A.h" [M][K/2 * 2]), the sum one
// dot2_f16(a0, a1, b) per pair (two FMAs, B's word widened once per register tile: as many
// FMAs as float32's, for CPUs without float16 arithmetic).
void build_matmul_halves(OpGraph& g, bool fp16) {
  const Workload& w = g.workload;
  const int64_t M = w.get("M"), N = w.get("N"), K = w.get("K"), P = (K + 1) / 2;
  Tensor A = make_input(g, "A", {M, K});
  Tensor B = make_input(g, "B", {P, N}, Type::int32());
  g.word_types["B"] = fp16 ? kFloat16Pairs : kBFloat16Pairs;
  // A[i][k], 0 past an odd K.
  auto a_at = [&](const Expr& i, const Expr& k) {
    if (K % 2 == 0) return read(A, {i, k});
    return select(k < Expr(K), read(A, {i, min(k, Expr(K - 1))}), f32(0.0));
  };
  Tensor conv = fp16 ? compute("A.h", {M, 2 * P}, {"i", "k"},
                               [&](const std::vector<Expr>& ax) { return Call::make(kRoundF16, {a_at(ax[0], ax[1])}); })
                     : compute("A.bf", {M, P}, {"i", "p"}, [&](const std::vector<Expr>& ax) {
                         return Call::make(kBF16x2, {a_at(ax[0], ax[1] * 2), a_at(ax[0], ax[1] * 2 + 1)});
                       });
  IterVar p = reduce_axis(P, "p");
  const bool fused = w.epilogue != Epilogue::None;
  g.acc = compute(fused ? "acc" : "C", {M, N}, {"i", "j"}, [&](const std::vector<Expr>& ax) {
    Expr b = read(B, {p.var, ax[1]});
    if (fp16) return ir::sum(Call::make(kDot2F16, {read(conv, {ax[0], p.var * 2}), read(conv, {ax[0], p.var * 2 + 1}), b}), {p});
    return ir::sum(Call::make(kDot2BF16, {read(conv, {ax[0], p.var}), b}), {p});
  }, {p});
  add_epilogue(g, "C", {"i", "j"}, 1);
  g.flops = 2 * M * N * K;
  g.check_terms = K;
  g.check_relative = true;
  if (w.get("const_b")) g.prepacked.insert("B");
}

// conv2d_nchwc_bf16 and conv2d_nchwc_fp16: the NCHWc convolution with data and weights
// rounded to bfloat16 (float16) and the products summed in float32, then the epilogue. The
// weights are given as pairs [K/oc_block][C/2][R][S][oc_block] (word: channels 2p low, 2p + 1
// high); the data is converted and zero-padded once: bfloat16 into pairs of a block's channels
// ("A.bf" [N][C/ic_block][H+2p][W+2p][ic_block/2] words, one dot2_bf16 per pair), float16
// rounded and kept as floats ("A.h" [N][C/ic_block][H+2p][W+2p][ic_block], one dot2_f16 per
// pair). ic_block must be even.
void build_conv2d_nchwc_halves(OpGraph& g, bool fp16) {
  const Workload& w = g.workload;
  const int64_t N = w.get("N"), C = w.get("C"), H = w.get("H"), W = w.get("W"), K = w.get("K");
  const int64_t R = w.get("R"), S = w.get("S"), st = w.get("stride"), pad = w.get("pad");
  const int64_t dil = w.get("dilation"), ib = w.get("ic_block"), ob = w.get("oc_block"), bp = ib / 2;
  const int64_t OH = conv_out(H, R, st, pad, dil), OW = conv_out(W, S, st, pad, dil);
  Tensor data = make_input(g, "data", {N, C / ib, H, W, ib});
  Tensor B = make_input(g, "B", {K / ob, C / 2, R, S, ob}, Type::int32());
  g.word_types["B"] = fp16 ? kFloat16Pairs : kBFloat16Pairs;
  // Channel c of the block at padded position (h, w): 0 in the padding.
  auto padded = [&](const std::vector<Expr>& ax, const Expr& c) {
    Expr x = read(data, {ax[0], ax[1], ax[2] - pad, ax[3] - pad, c});
    if (pad == 0) return x;
    Expr inside = logical_and(logical_and(ax[2] >= pad, ax[2] < Expr(H + pad)),
                              logical_and(ax[3] >= pad, ax[3] < Expr(W + pad)));
    return select(inside, x, f32(0.0));
  };
  const std::vector<int64_t> padded_shape = {N, C / ib, H + 2 * pad, W + 2 * pad, fp16 ? ib : bp};
  Tensor conv = fp16 ? compute("A.h", padded_shape, {"n", "c", "h", "w", "cb"},
                               [&](const std::vector<Expr>& ax) { return Call::make(kRoundF16, {padded(ax, ax[4])}); })
                     : compute("A.bf", padded_shape, {"n", "c", "h", "w", "cp"}, [&](const std::vector<Expr>& ax) {
                         return Call::make(kBF16x2, {padded(ax, ax[4] * 2), padded(ax, ax[4] * 2 + 1)});
                       });
  g.pad = conv;
  IterVar rco = reduce_axis(C / ib, "rco"), rr = reduce_axis(R, "rr"), rs = reduce_axis(S, "rs"),
          rcp = reduce_axis(bp, "rcp");
  std::vector<std::string> names = {"n", "ko", "oh", "ow", "kb"};
  const bool fused = w.epilogue != Epilogue::None;
  g.acc = compute(fused ? "acc" : "out", {N, K / ob, OH, OW, ob}, names, [&](const std::vector<Expr>& ax) {
    Expr h = ax[2] * st + rr.var * dil, x = ax[3] * st + rs.var * dil;
    Expr b = read(B, {ax[1], rco.var * bp + rcp.var, rr.var, rs.var, ax[4]});
    Expr d = fp16 ? Call::make(kDot2F16, {read(conv, {ax[0], rco.var, h, x, rcp.var * 2}),
                                          read(conv, {ax[0], rco.var, h, x, rcp.var * 2 + 1}), b})
                  : Call::make(kDot2BF16, {read(conv, {ax[0], rco.var, h, x, rcp.var}), b});
    return ir::sum(d, {rco, rr, rs, rcp});
  }, {rco, rr, rs, rcp});
  add_epilogue(
      g, "out", names, [ob](const std::vector<Expr>& ax) { return ax[1] * ob + ax[4]; }, K);
  g.flops = 2 * N * K * OH * OW * C * R * S;
  g.check_terms = C * R * S;
  g.check_relative = true;
}

void build_matmul_bf16(OpGraph& g) { build_matmul_halves(g, false); }
void build_matmul_fp16(OpGraph& g) { build_matmul_halves(g, true); }
void build_conv2d_nchwc_bf16(OpGraph& g) { build_conv2d_nchwc_halves(g, false); }
void build_conv2d_nchwc_fp16(OpGraph& g) { build_conv2d_nchwc_halves(g, true); }

// qconv2d_nchwc: the NCHWc convolution of a float data quantized to uint8 on entry (as
// qmatmul's A; the padding is the quantized 0.0, the zero point) with int8 weights given as
// quads of four input channels, [K/oc_block][C/4][R][S][oc_block] int32 (byte t: channel
// 4q + t), scaled per output channel: out = float(sum) * scale[k] + offset[k], P = {a_scale,
// a_zero, scale[K], offset[K]}. The reduction runs over input channel blocks, the window and
// the quads of a block, as conv2d_nchwc's does over its channels.
void build_qconv2d_nchwc(OpGraph& g) {
  const Workload& w = g.workload;
  const int64_t N = w.get("N"), C = w.get("C"), H = w.get("H"), W = w.get("W"), K = w.get("K");
  const int64_t R = w.get("R"), S = w.get("S"), st = w.get("stride"), pad = w.get("pad");
  const int64_t dil = w.get("dilation"), ib = w.get("ic_block"), ob = w.get("oc_block"), bq = ib / 4;
  const int64_t OH = conv_out(H, R, st, pad, dil), OW = conv_out(W, S, st, pad, dil);
  const Type i32 = Type::int32(), u8 = Type::uint8();
  const bool given_u8 = w.types.data == DType::Uint8;
  Tensor data = make_input(g, "data", {N, C / ib, H, W, ib}, given_u8 ? u8 : Type::float32());
  Tensor B = make_input(g, "B", {K / ob, C / 4, R, S, ob}, i32);
  Tensor P = make_input(g, "P", {2 + 2 * K});
  Tensor au8 = g.pad = padded_u8(data, P, pad);
  IterVar rco = reduce_axis(C / ib, "rco"), rr = reduce_axis(R, "rr"), rs = reduce_axis(S, "rs"),
          rcq = reduce_axis(bq, "rcq");
  std::vector<std::string> names = {"n", "ko", "oh", "ow", "kb"};
  g.acc = compute("acc", {N, K / ob, OH, OW, ob}, names, [&](const std::vector<Expr>& ax) {
    Expr h = ax[2] * st + rr.var * dil, x = ax[3] * st + rs.var * dil;
    Expr a = pack_quad([&](int t) {
      return Cast::make(i32, read(au8, {ax[0], rco.var, h, x, rcq.var * 4 + t}));
    });
    Expr b = read(B, {ax[1], rco.var * bq + rcq.var, rr.var, rs.var, ax[4]});
    return ir::sum(Call::make(kDot4U8S8, {a, b}), {rco, rr, rs, rcq});
  }, {rco, rr, rs, rcq});
  add_quantized_output(g, P, names, K, [ob](const std::vector<Expr>& ax) { return ax[1] * ob + ax[4]; });
  g.flops = 2 * N * K * OH * OW * C * R * S;
  g.check_terms = C * R * S;
}

void build_batch_matmul(OpGraph& g) {
  const Workload& w = g.workload;
  int64_t Bt = w.get("B"), M = w.get("M"), N = w.get("N"), K = w.get("K");
  const bool tb = w.get("trans_b") == 1;  // B given as [batch][N][K]
  Tensor A = make_input(g, "A", {Bt, M, K}, ir_type(w.types.data));
  Tensor B = make_input(g, "B", tb ? std::vector<int64_t>{Bt, N, K} : std::vector<int64_t>{Bt, K, N},
                        ir_type(w.types.weight));
  IterVar k = reduce_axis(K, "k");
  bool fused = w.epilogue != Epilogue::None;
  name_16_bit_inputs(g);
  g.acc = compute(fused ? "acc" : "C", {Bt, M, N}, {"b", "i", "j"}, [&](const std::vector<Expr>& ax) {
    Expr b = tb ? read(B, {ax[0], ax[2], k.var}) : read(B, {ax[0], k.var, ax[2]});
    return sum(widened(w.types, read(A, {ax[0], ax[1], k.var})) * widened(w.types, b), {k});
  }, {k});
  add_epilogue(g, "C", {"b", "i", "j"}, 2);
  g.flops = 2 * Bt * M * N * K;
}

namespace {

void build_conv2d(OpGraph& g, bool nhwc) {
  const Workload& w = g.workload;
  int64_t N = w.get("N"), C = w.get("C"), H = w.get("H"), W = w.get("W"), K = w.get("K");
  int64_t R = w.get("R"), S = w.get("S"), st = w.get("stride"), pad = w.get("pad");
  int64_t dil = w.get("dilation");
  int64_t OH = conv_out(H, R, st, pad, dil), OW = conv_out(W, S, st, pad, dil);
  // group=G (NCHW only): output channel k reads the C/G channels of its group k / (K/G).
  const int64_t G = nhwc ? 1 : w.get("group"), Cg = C / G, Kg = K / G;
  // dtype=float16 | bfloat16: the data's bits (a value stored in 16 bits between kernels);
  // weight_dtype too: the weights' (a model's weights stored in 16 bits).
  const Type dt = ir_type(w.types.data), wt = ir_type(w.types.weight);
  Tensor data = nhwc ? make_input(g, "data", {N, H, W, C}, dt) : make_input(g, "data", {N, C, H, W}, dt);
  Tensor weight = nhwc ? make_input(g, "weight", {R, S, C, K}, wt) : make_input(g, "weight", {K, Cg, R, S}, wt);
  name_16_bit_inputs(g);
  Tensor src = data;
  if (pad > 0) {
    g.pad = nhwc ? pad_spatial(data, pad, 1, 2, w.types) : pad_spatial(data, pad, 2, 3, w.types);
    src = g.pad;
  }
  IterVar rc = reduce_axis(Cg, "rc"), rr = reduce_axis(R, "rr"), rs = reduce_axis(S, "rs");
  bool fused = w.epilogue != Epilogue::None;
  std::string name = fused ? "acc" : "out";
  if (nhwc) {
    g.acc = compute(name, {N, OH, OW, K}, {"n", "oh", "ow", "k"}, [&](const std::vector<Expr>& ax) {
      Expr h = ax[1] * st + rr.var * dil, x = ax[2] * st + rs.var * dil;
      return sum(widened(w.types, read(src, {ax[0], h, x, rc.var})) *
                     widened(w.types, read(weight, {rr.var, rs.var, rc.var, ax[3]})),
                 {rr, rs, rc});
    }, {rr, rs, rc});
    add_epilogue(g, "out", {"n", "oh", "ow", "k"}, 3);
  } else {
    g.acc = compute(name, {N, K, OH, OW}, {"n", "k", "oh", "ow"}, [&](const std::vector<Expr>& ax) {
      Expr h = ax[2] * st + rr.var * dil, x = ax[3] * st + rs.var * dil;
      Expr c = G == 1 ? rc.var : ax[1] / Kg * Cg + rc.var;
      return sum(widened(w.types, read(src, {ax[0], c, h, x})) *
                     widened(w.types, read(weight, {ax[1], rc.var, rr.var, rs.var})),
                 {rc, rr, rs});
    }, {rc, rr, rs});
    add_epilogue(g, "out", {"n", "k", "oh", "ow"}, 1);
  }
  g.flops = 2 * N * K * OH * OW * Cg * R * S;
}

}  // namespace

void build_conv2d_nchw(OpGraph& g) { build_conv2d(g, /*nhwc=*/false); }
void build_conv2d_nhwc(OpGraph& g) { build_conv2d(g, /*nhwc=*/true); }

void build_depthwise_conv2d_nchw(OpGraph& g) {
  const Workload& w = g.workload;
  int64_t N = w.get("N"), C = w.get("C"), H = w.get("H"), W = w.get("W");
  int64_t R = w.get("R"), S = w.get("S"), st = w.get("stride"), pad = w.get("pad");
  int64_t dil = w.get("dilation");
  int64_t OH = conv_out(H, R, st, pad, dil), OW = conv_out(W, S, st, pad, dil);
  Tensor data = make_input(g, "data", {N, C, H, W});
  Tensor weight = make_input(g, "weight", {C, 1, R, S});
  Tensor src = data;
  if (pad > 0) {
    g.pad = pad_spatial(data, pad, 2, 3);
    src = g.pad;
  }
  IterVar rr = reduce_axis(R, "rr"), rs = reduce_axis(S, "rs");
  bool fused = w.epilogue != Epilogue::None;
  g.acc = compute(fused ? "acc" : "out", {N, C, OH, OW}, {"n", "c", "oh", "ow"},
                  [&](const std::vector<Expr>& ax) {
    Expr h = ax[2] * st + rr.var * dil, x = ax[3] * st + rs.var * dil;
    return sum(read(src, {ax[0], ax[1], h, x}) * read(weight, {ax[1], Expr(0), rr.var, rs.var}),
               {rr, rs});
  }, {rr, rs});
  add_epilogue(g, "out", {"n", "c", "oh", "ow"}, 1);
  g.flops = 2 * N * C * OH * OW * R * S;
}

// data [N][C/ib][H][W][ib], weight [K/ob][span/ib][R][S][ib][ob], out [N][K/ob][OH][OW][ob];
// the bias is per output channel k = ko * ob + kb. The reduction runs over the input channel
// blocks output block ko reads (all C/ib without groups; else span/ib from start(ko):
// NchwcGroups), the window, then the channels of a block.
void build_conv2d_nchwc(OpGraph& g) {
  const Workload& w = g.workload;
  int64_t N = w.get("N"), C = w.get("C"), H = w.get("H"), W = w.get("W"), K = w.get("K");
  int64_t R = w.get("R"), S = w.get("S"), st = w.get("stride"), pad = w.get("pad");
  int64_t dil = w.get("dilation"), ib = w.get("ic_block"), ob = w.get("oc_block");
  int64_t OH = conv_out(H, R, st, pad, dil), OW = conv_out(W, S, st, pad, dil);
  const NchwcGroups gr = nchwc_groups(w);
  const int64_t span = gr.span();
  Tensor data = make_input(g, "data", {N, C / ib, H, W, ib});
  Tensor weight = make_input(g, "weight", {K / ob, span / ib, R, S, ib, ob});
  Tensor src = data;
  if (pad > 0) src = g.pad = pad_spatial(data, pad, 2, 3);
  IterVar rco = reduce_axis(span / ib, "rco"), rr = reduce_axis(R, "rr"), rs = reduce_axis(S, "rs"),
          rci = reduce_axis(ib, "rci");
  std::vector<std::string> names = {"n", "ko", "oh", "ow", "kb"};
  g.acc = compute(w.epilogue != Epilogue::None ? "acc" : "out", {N, K / ob, OH, OW, ob}, names,
                  [&](const std::vector<Expr>& ax) {
                    Expr h = ax[2] * st + rr.var * dil, x = ax[3] * st + rs.var * dil;
                    Expr cb = gr.group == 1 ? Expr(rco.var) : gr.start_block(ax[1]) + rco.var;
                    return sum(read(src, {ax[0], cb, h, x, rci.var}) *
                                   read(weight, {ax[1], rco.var, rr.var, rs.var, rci.var, ax[4]}),
                               {rco, rr, rs, rci});
                  },
                  {rco, rr, rs, rci});
  add_epilogue(
      g, "out", names, [ob](const std::vector<Expr>& ax) { return ax[1] * ob + ax[4]; }, K);
  g.flops = 2 * N * K * OH * OW * gr.channels() * R * S;
}

// data [N][C/b][H][W][b], weight [C/b][R][S][b], out [N][C/b][OH][OW][b]. With width g > 1
// (groups of g channels in and out, whole groups in a block: ResNeXt's and RegNet's grouped
// layers), weight [C/b][g][R][S][b]: lane k of block co sums the g input channels of its
// group, lanes (k / g) * g + i of the same block, i < g (the reduction's innermost axis, "ri").
void build_depthwise_conv2d_nchwc(OpGraph& g) {
  const Workload& w = g.workload;
  int64_t N = w.get("N"), C = w.get("C"), H = w.get("H"), W = w.get("W");
  int64_t R = w.get("R"), S = w.get("S"), st = w.get("stride"), pad = w.get("pad");
  int64_t dil = w.get("dilation"), b = w.get("block"), gw = w.get("width");
  int64_t OH = conv_out(H, R, st, pad, dil), OW = conv_out(W, S, st, pad, dil);
  Tensor data = make_input(g, "data", {N, C / b, H, W, b});
  Tensor weight = make_input(g, "weight", gw == 1 ? std::vector<int64_t>{C / b, R, S, b}
                                                    : std::vector<int64_t>{C / b, gw, R, S, b});
  Tensor src = data;
  if (pad > 0) src = g.pad = pad_spatial(data, pad, 2, 3);
  IterVar rr = reduce_axis(R, "rr"), rs = reduce_axis(S, "rs"), ri = reduce_axis(gw, "ri");
  std::vector<IterVar> red = {rr, rs};
  if (gw > 1) red.push_back(ri);
  std::vector<std::string> names = {"n", "co", "oh", "ow", "cb"};
  g.acc = compute(w.epilogue != Epilogue::None ? "acc" : "out", {N, C / b, OH, OW, b}, names,
                  [&](const std::vector<Expr>& ax) {
                    Expr h = ax[2] * st + rr.var * dil, x = ax[3] * st + rs.var * dil;
                    if (gw == 1) {
                      return sum(read(src, {ax[0], ax[1], h, x, ax[4]}) * read(weight, {ax[1], rr.var, rs.var, ax[4]}),
                                 red);
                    }
                    return sum(read(src, {ax[0], ax[1], h, x, ax[4] / gw * gw + ri.var}) *
                                   read(weight, {ax[1], ri.var, rr.var, rs.var, ax[4]}),
                               red);
                  },
                  red);
  add_epilogue(
      g, "out", names, [b](const std::vector<Expr>& ax) { return ax[1] * b + ax[4]; }, C);
  g.flops = 2 * N * C * OH * OW * R * S * gw;
}

// qdepthwise_conv2d_nchwc: the blocked depthwise convolution of uint8 data (given, dtype=uint8,
// or float data quantized on entry as qmatmul's A) with int8 weights [C/block][R][S][block]:
// out = acc * scale[c] + offset[c], P = {a_scale, a_zero, scale[C], offset[C]} (offset takes
// the zero point's share out, as qconv2d_nchwc's). Both bytes are widened to float32 in the
// product: their products (|q w| <= 255 x 128) and sums are integers float32 holds exactly
// while R x S <= 514, so acc is the integer sum, at the speed of float FMAs (x86's byte dot
// products sum four neighbouring channels, not a window). "A.u8" is the padded data (the
// padding the zero point).
void build_qdepthwise_conv2d_nchwc(OpGraph& g) {
  const Workload& w = g.workload;
  const int64_t N = w.get("N"), C = w.get("C"), H = w.get("H"), W = w.get("W");
  const int64_t R = w.get("R"), S = w.get("S"), st = w.get("stride"), pad = w.get("pad");
  const int64_t dil = w.get("dilation"), b = w.get("block");
  const int64_t OH = conv_out(H, R, st, pad, dil), OW = conv_out(W, S, st, pad, dil);
  const Type u8 = Type::uint8();
  const bool given_u8 = w.types.data == DType::Uint8;
  Tensor data = make_input(g, "data", {N, C / b, H, W, b}, given_u8 ? u8 : Type::float32());
  Tensor weight = make_input(g, "weight", {C / b, R, S, b}, Type::int8());
  Tensor P = make_input(g, "P", {2 + 2 * C});
  g.pad = padded_u8(data, P, pad);
  IterVar rr = reduce_axis(R, "rr"), rs = reduce_axis(S, "rs");
  std::vector<std::string> names = {"n", "co", "oh", "ow", "cb"};
  g.acc = compute("acc", {N, C / b, OH, OW, b}, names, [&](const std::vector<Expr>& ax) {
    Expr h = ax[2] * st + rr.var * dil, x = ax[3] * st + rs.var * dil;
    Expr q = Cast::make(Type::float32(), read(g.pad, {ax[0], ax[1], h, x, ax[4]}));
    return sum(q * Cast::make(Type::float32(), read(weight, {ax[1], rr.var, rs.var, ax[4]})), {rr, rs});
  }, {rr, rs});
  add_quantized_output(g, P, names, C, [b](const std::vector<Expr>& ax) { return ax[1] * b + ax[4]; });
  g.flops = 2 * N * C * OH * OW * R * S;
  g.check_terms = R * S;
}

// data [N][C/ib][H][W][ib], weight U [a][a][K/ob][C][ob] (a = m + 2), out [N][K/ob][OH][OW][ob].
// Stages: data_pad (zero border and tail rows to whole tiles), winograd_V [a][a][P][C] (the
// input tiles transformed; P = N x tiles), winograd_M [a][a][K/ob][P][ob] (a batched GEMM over
// C: the reduction), then acc = the output transform, which reads M. With dilation d the
// tiles are those of winograd_tiling: tile row th reads padded rows rh + d (sh m + i) of its
// residue class rh = th / per_h (sh = th % per_h), and writes output rows rh + d (sh m + i).
void build_conv2d_winograd_nchwc(OpGraph& g) {
  const Workload& w = g.workload;
  int64_t N = w.get("N"), C = w.get("C"), H = w.get("H"), W = w.get("W"), K = w.get("K");
  int64_t pad = w.get("pad"), ib = w.get("ic_block"), ob = w.get("oc_block"), m = w.get("tile");
  const int64_t d = w.get("dilation");
  const WinogradMatrices& wm = *winograd_matrices(static_cast<int>(m));
  const int64_t a = wm.alpha;
  const WinogradTiling tl = winograd_tiling(H, W, pad, d, m);
  const int64_t OH = tl.oh, OW = tl.ow, nH = tl.nh, nW = tl.nw, P = N * nH * nW;
  Tensor data = make_input(g, "data", {N, C / ib, H, W, ib});
  Tensor weight = make_input(g, "weight", {a, a, K / ob, C, ob});
  int64_t PH = d * (tl.per_h * m + 2), PW = d * (tl.per_w * m + 2);
  g.pad = compute("data_pad", {N, C / ib, PH, PW, ib}, {"n", "c", "h", "w", "cb"}, [&](const std::vector<Expr>& ax) {
    Expr h = ax[2] - pad, x = ax[3] - pad;
    Expr inside = logical_and(logical_and(h >= 0, h < Expr(H)), logical_and(x >= 0, x < Expr(W)));
    return select(inside, read(data, {ax[0], ax[1], h, x, ax[4]}), f32(0.0));
  });
  Tensor dp = g.pad;
  // The padded row of tile row t's i-th input row (and column likewise).
  auto tile_row = [&](const Expr& t, int64_t per, int64_t i) -> Expr {
    if (d == 1) return t * m + i;
    return t / per + (t % per) * (d * m) + d * i;
  };
  Tensor v = compute("winograd_V", {a, a, P, C}, {"xi", "nu", "p", "c"}, [&](const std::vector<Expr>& ax) {
    Expr p = ax[2], c = ax[3];
    Expr n = p / (nH * nW), th = p / nW % nH, tw = p % nW;
    return two_sided(wm.bt, a, a, ax[0], ax[1], [&](int64_t i, int64_t j) {
      return read(dp, {n, c / ib, tile_row(th, tl.per_h, i), tile_row(tw, tl.per_w, j), c % ib});
    });
  });
  IterVar rc = reduce_axis(C, "rc");
  Tensor mm = compute("winograd_M", {a, a, K / ob, P, ob}, {"xi", "nu", "ko", "p", "kb"},
                      [&](const std::vector<Expr>& ax) {
                        return sum(read(v, {ax[0], ax[1], ax[3], rc.var}) *
                                       read(weight, {ax[0], ax[1], ax[2], rc.var, ax[4]}),
                                   {rc});
                      },
                      {rc});
  std::vector<std::string> names = {"n", "ko", "oh", "ow", "kb"};
  bool fused = w.epilogue != Epilogue::None;
  g.acc = compute(fused ? "acc" : "out", {N, K / ob, OH, OW, ob}, names, [&](const std::vector<Expr>& ax) {
    // Output row o: class o % d, position o / d of it: tile (o / d) / m, row (o / d) % m.
    Expr uh = d == 1 ? ax[2] : ax[2] / d, uw = d == 1 ? ax[3] : ax[3] / d;
    Expr th = d == 1 ? uh / m : (ax[2] % d) * tl.per_h + uh / m;
    Expr tw = d == 1 ? uw / m : (ax[3] % d) * tl.per_w + uw / m;
    Expr p = (ax[0] * nH + th) * nW + tw;
    return two_sided(wm.at, m, a, uh % m, uw % m,
                     [&](int64_t xi, int64_t nu) { return read(mm, {Expr(xi), Expr(nu), ax[1], p, ax[4]}); });
  });
  add_epilogue(g, "out", names, [ob](const std::vector<Expr>& ax) { return ax[1] * ob + ax[4]; }, K);
  g.flops = 2 * N * K * OH * OW * C * 9;  // the direct convolution's, so GFLOPS compare
  // Inputs of unit size: an output sums C products of U and V, V up to (max row sum of |B^T|)^2
  // in size, each weighted by up to (max row sum of |A^T|)^2: the bound of its rounding error.
  auto row_sum = [](const std::vector<double>& l, int64_t rows, int64_t n) {
    double most = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += std::fabs(l[static_cast<size_t>(r * n + k)]);
      most = std::max(most, s);
    }
    return static_cast<int64_t>(most);
  };
  int64_t b = row_sum(wm.bt, a, a), at = row_sum(wm.at, m, a);
  g.check_terms = C * b * b * at * at;
}

}  // namespace ops

Expr pack_quad(const std::function<Expr(int)>& bytes) {
  const Type i32 = Type::int32();
  Expr sum;
  for (int t = 0; t < 4; ++t) {
    Expr v = bytes(t);
    if (t > 0) v = v * IntImm::make_typed(int64_t{1} << (8 * t), i32);
    sum = sum ? sum + v : v;
  }
  return sum;
}

std::string OpGraph::arg_dtype(const ir::Tensor& t) const {
  auto it = word_types.find(t->name);
  return it != word_types.end() ? it->second : t->dtype.str();
}

OpGraph build_op(const Workload& w) {
  OpGraph g;
  g.workload = w;
  const OperatorDef* def = find_operator(w.op);
  TF_CHECK(def, "no builder for operator ", w.op);
  def->build(g);
  return g;
}

}  // namespace tf
