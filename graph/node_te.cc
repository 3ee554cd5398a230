#include "graph/node_te.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "compiler/error.h"
#include "graph/fusion.h"
#include "graph/layout.h"
#include "graph/ops.h"

namespace tf::graph {
namespace {

using ir::Expr;
using ir::IterVar;
using ir::Tensor;
using Index = std::vector<Expr>;

[[noreturn]] void not_implemented(const Node& n, const std::string& what) {
  throw UserError(
      str(n.where(), ": compiling ", what,
          " is not implemented yet (`tunefarm run --model M --reference` evaluates it)"));
}

std::vector<std::string> axis_names(size_t rank, const char* base = "i") {
  std::vector<std::string> out;
  for (size_t d = 0; d < rank; ++d) out.push_back(base + std::to_string(d));
  return out;
}

Tensor elementwise(const std::string& name, const Shape& shape,
                   const std::function<Expr(const Index&)>& f) {
  return ir::compute(name, shape, axis_names(shape.size()), f);
}

std::vector<IterVar> reduce_vars(const std::vector<int64_t>& extents, const std::string& base) {
  std::vector<IterVar> out;
  for (size_t k = 0; k < extents.size(); ++k)
    out.push_back(ir::reduce_axis(extents[k], base + std::to_string(k)));
  return out;
}

Expr to_float(Expr i) { return ir::Cast::make(ir::Type::float32(), std::move(i)); }
Expr clamp(Expr i, int64_t lo, int64_t hi) { return ir::min(ir::max(std::move(i), lo), hi); }
Expr neg(Expr x) { return x * ir::f32(-1.0); }
Expr gt(Expr a, Expr b) { return std::move(b) < std::move(a); }

// erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7), odd-symmetric.
Expr erf(Expr x) {
  Expr a = ir::Call::make("fabs", {x});
  Expr t = ir::f32(1.0) / (ir::f32(1.0) + ir::f32(0.3275911) * a);
  Expr poly =
      ((((ir::f32(1.061405429) * t + ir::f32(-1.453152027)) * t + ir::f32(1.421413741)) * t +
        ir::f32(-0.284496736)) *
           t +
       ir::f32(0.254829592)) *
      t;
  Expr y = ir::f32(1.0) - poly * ir::exp(neg(a * a));
  return ir::select(x < ir::f32(0.0), neg(y), y);
}

Expr operand(const TeOperand& x, const Index& idx) {
  if (x.scalar) return ir::f32(*x.scalar);
  return ir::read(x.tensor, idx);
}

// The flat position of `idx` in `shape`, and the index of a flat position.
Expr flat_of(const Index& idx, const Shape& shape) {
  Expr f = int64_t{0};
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}
Index unflatten(Expr flat, const Shape& shape) {
  Index out(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    out[d] = shape[d] == 1 ? Expr(int64_t{0}) : (flat / stride) % shape[d];
    stride *= shape[d];
  }
  return out;
}

// x read at the same row-major position as `idx` of `shape` (Reshape and its kin).
Expr read_reshaped(const TeOperand& x, const Index& idx, const Shape& shape) {
  if (x.scalar) return ir::f32(*x.scalar);
  if (x.shape == shape) return ir::read(x.tensor, idx);
  return ir::read(x.tensor, unflatten(flat_of(idx, shape), x.shape));
}

const TeOperand& need(const Node& n, const std::vector<TeOperand>& in, size_t k) {
  if (k >= in.size() || !in[k].present())
    not_implemented(n, str("input ", k, " as a non-float or absent value"));
  return in[k];
}

using Unary = std::function<Expr(Expr, const Node&)>;

const std::map<std::string, Unary>& unary_ops() {
  static const std::map<std::string, Unary> ops = {
      {"Relu", [](Expr x, const Node&) { return ir::max(x, ir::f32(0.0)); }},
      {"Sigmoid",
       [](Expr x, const Node&) { return ir::f32(1.0) / (ir::f32(1.0) + ir::exp(neg(x))); }},
      {"Tanh", [](Expr x, const Node&) { return ir::tanh(x); }},
      {"Sin", [](Expr x, const Node&) { return ir::sin(x); }},
      {"Cos", [](Expr x, const Node&) { return ir::cos(x); }},
      {"Exp", [](Expr x, const Node&) { return ir::exp(x); }},
      {"Log", [](Expr x, const Node&) { return ir::log(x); }},
      {"Sqrt", [](Expr x, const Node&) { return ir::sqrt(x); }},
      {"Abs", [](Expr x, const Node&) { return ir::fabs(x); }},
      {"Neg", [](Expr x, const Node&) { return neg(x); }},
      {"Reciprocal", [](Expr x, const Node&) { return ir::f32(1.0) / x; }},
      {"Erf", [](Expr x, const Node&) { return erf(x); }},
      {"Gelu",
       [](Expr x, const Node&) {
         return ir::f32(0.5) * x * (ir::f32(1.0) + erf(x * ir::f32(1.0 / std::sqrt(2.0))));
       }},
      {"Sign",
       [](Expr x, const Node&) {
         return ir::select(gt(x, ir::f32(0.0)), ir::f32(1.0),
                           ir::select(x < ir::f32(0.0), ir::f32(-1.0), ir::f32(0.0)));
       }},
      // log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): no overflow for large x.
      {"Softplus",
       [](Expr x, const Node&) {
         return ir::max(x, ir::f32(0.0)) + ir::log(ir::f32(1.0) + ir::exp(neg(ir::fabs(x))));
       }},
      {"LeakyRelu",
       [](Expr x, const Node& n) {
         return ir::select(x >= ir::f32(0.0), x, x * ir::f32(n.get_float("alpha", 0.01f)));
       }},
      {"HardSigmoid",
       [](Expr x, const Node& n) {
         Expr y = ir::f32(n.get_float("alpha", 0.2f)) * x + ir::f32(n.get_float("beta", 0.5f));
         return ir::max(ir::f32(0.0), ir::min(ir::f32(1.0), y));
       }},
      // The exponential branches read min(x, 0): no overflow in the branch not taken.
      {"Elu",
       [](Expr x, const Node& n) {
         Expr e = ir::exp(ir::min(x, ir::f32(0.0))) - ir::f32(1.0);
         return ir::select(x < ir::f32(0.0), ir::f32(n.get_float("alpha", 1.0f)) * e, x);
       }},
      {"Selu",
       [](Expr x, const Node& n) {
         float alpha = n.get_float("alpha", kSeluAlpha), gamma = n.get_float("gamma", kSeluGamma);
         Expr e = ir::f32(alpha) * ir::exp(ir::min(x, ir::f32(0.0))) - ir::f32(alpha);
         return ir::f32(gamma) * ir::select(gt(x, ir::f32(0.0)), x, e);
       }},
      {"Celu",
       [](Expr x, const Node& n) {
         float alpha = n.get_float("alpha", 1.0f);
         Expr e = ir::f32(alpha) * (ir::exp(ir::min(x, ir::f32(0.0)) / ir::f32(alpha)) - ir::f32(1.0));
         return ir::max(x, ir::f32(0.0)) + ir::min(ir::f32(0.0), e);
       }},
      {"ThresholdedRelu",
       [](Expr x, const Node& n) {
         return ir::select(gt(x, ir::f32(n.get_float("alpha", 1.0f))), x, ir::f32(0.0));
       }},
      {"Softsign", [](Expr x, const Node&) { return x / (ir::f32(1.0) + ir::fabs(x)); }},
      {"HardSwish",
       [](Expr x, const Node&) {
         return x *
                ir::max(ir::f32(0.0), ir::min(ir::f32(1.0), x * ir::f32(1.0 / 6) + ir::f32(0.5)));
       }},
      {"Floor", [](Expr x, const Node&) { return ir::floor(x); }},
      {"Ceil", [](Expr x, const Node&) { return ir::ceil(x); }},
      {"Round", [](Expr x, const Node&) { return ir::round_even(x); }},
      {"Identity", [](Expr x, const Node&) { return x; }},
      {"Dropout", [](Expr x, const Node&) { return x; }},
  };
  return ops;
}

using Binary = std::function<Expr(Expr, Expr)>;

const std::map<std::string, Binary>& binary_ops() {
  static const std::map<std::string, Binary> ops = {
      {"Add", [](Expr a, Expr b) { return a + b; }},
      {"Sub", [](Expr a, Expr b) { return a - b; }},
      {"Mul", [](Expr a, Expr b) { return a * b; }},
      {"Div", [](Expr a, Expr b) { return a / b; }},
      {"PRelu", [](Expr x, Expr s) { return ir::select(x < ir::f32(0.0), x * s, x); }},
      {"Max", [](Expr a, Expr b) { return ir::max(a, b); }},
      {"Min", [](Expr a, Expr b) { return ir::min(a, b); }},
      {"Sum", [](Expr a, Expr b) { return a + b; }},
      {"Mean", [](Expr a, Expr b) { return a + b; }},
  };
  return ops;
}

// Comparisons: bool results, which compiled kernels hold as 0.0 / 1.0 floats (see node_te.h).
const std::map<std::string, Binary>& compare_ops() {
  static const std::map<std::string, Binary> ops = {
      {"Equal", [](Expr a, Expr b) { return ir::eq(a, b); }},
      {"Less", [](Expr a, Expr b) { return a < b; }},
      {"LessOrEqual", [](Expr a, Expr b) { return a <= b; }},
      {"Greater", [](Expr a, Expr b) { return gt(a, b); }},
      {"GreaterOrEqual", [](Expr a, Expr b) { return a >= b; }},
  };
  return ops;
}

// Operators whose int64 results compiled kernels compute as floats: moving values, and
// arithmetic that float32 does exactly on integers up to 2^24 (int64 inputs are checked
// against that bound on entry, compiler/codegen_runner.h): float remainders are exact, and
// Div and Pow have integer versions of their own.
const std::set<std::string>& int64_exact_ops() {
  // clang-format off
  static const std::set<std::string> ops = {
      "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Transpose", "Slice",
      "Concat", "Split", "Gather", "GatherElements", "Tile", "Pad", "DepthToSpace",
      "SpaceToDepth", "Trilu", "Add", "Sub", "Mul", "Div", "Mod", "Pow", "Neg", "Abs", "Sign",
      "Relu", "Max", "Min", "Sum", "Clip", "Where", "Cast", "ReduceMax", "ReduceMin",
      "ReduceSum", "CumSum", "ArgMax", "ArgMin", "OneHot", "TopK", "GatherND"};
  // clang-format on
  return ops;
}

// A bool held as a float: false is 0 and anything else true (NaN too, as Cast to bool has it).
Expr is_false(Expr b) { return ir::eq(b, ir::f32(0.0)); }

// Mod on floats: fmod=1 has the sign of the dividend (C's fmod), fmod=0 that of the divisor.
Expr float_mod(Expr a, Expr b, bool fmod) {
  Expr r = a % b;
  if (fmod) return r;
  Expr shifted = r + b;
  return ir::select(r < ir::f32(0.0), ir::select(gt(b, ir::f32(0.0)), shifted, r),
                    ir::select(gt(r, ir::f32(0.0)), ir::select(b < ir::f32(0.0), shifted, r), r));
}

// x^p for a constant exponent: products for small integers, sqrt for halves, else exp/log
// (which, like powf, is NaN for negative bases).
Expr pow_const(Expr x, double p) {
  if (p == std::round(p) && std::fabs(p) <= 8) {
    Expr r = ir::f32(1.0);
    for (int k = 0; k < static_cast<int>(std::fabs(p)); ++k) r = k == 0 ? x : r * x;
    return p < 0 ? ir::f32(1.0) / r : r;
  }
  if (p == 0.5) return ir::sqrt(x);
  if (p == -0.5) return ir::f32(1.0) / ir::sqrt(x);
  if (p == std::round(p)) {
    // exp(p log x) is NaN for x < 0, std::pow of an integral p is not: |x|^p, negative for
    // an odd p.
    Expr m = ir::exp(ir::f32(p) * ir::log(ir::fabs(x)));
    bool odd = std::fmod(std::fabs(p), 2.0) == 1.0;
    return odd ? ir::select(x < ir::f32(0.0), neg(m), m) : m;
  }
  return ir::exp(ir::f32(p) * ir::log(x));
}

// std::pow for a computed exponent: exp(y log|x|), negated for a negative base and an odd
// integral y, NaN for a negative base and a non-integral y, and 1 for y = 0 or x = 1 (NaN
// included, as std::pow has it).
Expr pow_computed(Expr x, Expr y) {
  Expr m = ir::exp(y * ir::log(ir::fabs(x)));
  Expr half = y * ir::f32(0.5);
  Expr negative = ir::select(ir::eq(ir::floor(y), y),
                             ir::select(ir::eq(ir::floor(half), half), m, neg(m)),
                             ir::f32(std::numeric_limits<double>::quiet_NaN()));
  Expr v = ir::select(x < ir::f32(0.0), negative, m);
  return ir::select(ir::eq(y, ir::f32(0.0)), ir::f32(1.0), ir::select(ir::eq(x, ir::f32(1.0)), ir::f32(1.0), v));
}

// Pow with an int64 result (an integer base), truncated as the reference's integer Pow: for
// an integral exponent 0 <= y <= 24 the product of y factors, exact (every result within the
// +-2^24 that int64 values hold in kernels needs y <= 24 unless |x| <= 1; -1 keeps the sign of
// y's parity beyond); a negative integral y gives 1 / x^|y|; a fractional one the float power.
// The factors chain linearly (r = r * select(k <= y, x, 1)): code generation walks expression
// trees, so squaring by halves would double the tree at every step.
Expr int_pow(Expr x, Expr y) {
  constexpr int kMaxFactors = 24;
  Expr e = ir::fabs(y), one = ir::f32(1.0);
  Expr r = one;
  for (int k = 1; k <= kMaxFactors; ++k) r = r * ir::select(ir::f32(k) <= e, x, one);
  Expr odd = ir::eq(e - ir::f32(2.0) * ir::floor(e * ir::f32(0.5)), one);
  Expr minus_one = ir::select(odd, ir::f32(-1.0), one);
  r = ir::select(ir::logical_and(ir::eq(x, ir::f32(-1.0)), gt(e, ir::f32(kMaxFactors))), minus_one,
                 r);
  Expr exact = ir::select(y < ir::f32(0.0), one / r, r);
  Expr v = ir::select(ir::eq(ir::floor(y), y), exact, pow_computed(x, y));
  return ir::select(v < ir::f32(0.0), ir::ceil(v), ir::floor(v));
}

// Maps an output index of a reduction to the input index, the reduced axes taking `rv`.
Index reduce_input_index(const Index& out, const Shape& x, const std::vector<int64_t>& axes,
                         const std::vector<IterVar>& rv, bool keep) {
  Index in;
  size_t o = 0, r = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
    if (std::binary_search(axes.begin(), axes.end(), d)) {
      in.push_back(rv[r++].var);
      if (keep) ++o;
    } else {
      in.push_back(out[o++]);
    }
  }
  return in;
}

std::vector<Tensor> reduce_te(const Node& n, const OpContext& c, const TeOperand& x,
                              const Shape& out_shape, const std::string& name) {
  std::vector<int64_t> axes = reduce_axes(c, static_cast<int64_t>(x.shape.size()));
  bool keep = n.get_int("keepdims", 1);
  if (axes.empty()) {
    return {elementwise(name, out_shape, [&](const Index& i) { return operand(x, i); })};
  }
  std::vector<int64_t> extents;
  int64_t count = 1;
  for (int64_t a : axes) {
    extents.push_back(x.shape[a]);
    count *= x.shape[a];
  }
  std::vector<IterVar> rv = reduce_vars(extents, "r");
  auto src = [&](const Index& i) {
    return operand(x, reduce_input_index(i, x.shape, axes, rv, keep));
  };
  // `by` is ir::sum, ir::max_reduce or ir::prod_reduce, of f(element).
  using Reducer = Expr (*)(Expr, const std::vector<IterVar>&);
  auto reduce = [&](const std::string& suffix, Reducer by, const std::function<Expr(Expr)>& f) {
    return ir::compute(
        name + suffix, out_shape, axis_names(out_shape.size()),
        [&](const Index& i) { return by(f(src(i)), rv); }, rv);
  };
  auto then = [&](const Tensor& t, const std::function<Expr(Expr, const Index&)>& f) {
    return elementwise(name, out_shape, [&](const Index& i) { return f(ir::read(t, i), i); });
  };
  auto id = [](Expr e) { return e; };
  const std::string& op = n.op;
  if (op == "ReduceSum") return {reduce("", ir::sum, id)};
  if (op == "ReduceMax") return {reduce("", ir::max_reduce, id)};
  if (op == "ReduceProd") return {reduce("", ir::prod_reduce, id)};
  if (op == "ReduceMean") {
    Tensor s = reduce("_sum", ir::sum, id);
    return {then(
        s, [&](Expr v, const Index&) { return v * ir::f32(1.0 / static_cast<double>(count)); })};
  }
  if (op == "ReduceMin") {
    Tensor m = reduce("_negmax", ir::max_reduce, neg);
    return {then(m, [](Expr v, const Index&) { return neg(v); })};
  }
  if (op == "ReduceSumSquare") return {reduce("", ir::sum, [](Expr e) { return e * e; })};
  if (op == "ReduceL1") return {reduce("", ir::sum, [](Expr e) { return ir::fabs(e); })};
  if (op == "ReduceL2") {
    Tensor s = reduce("_sumsq", ir::sum, [](Expr e) { return e * e; });
    return {then(s, [](Expr v, const Index&) { return ir::sqrt(v); })};
  }
  if (op == "ReduceLogSum") {
    Tensor s = reduce("_sum", ir::sum, id);
    return {then(s, [](Expr v, const Index&) { return ir::log(v); })};
  }
  if (op == "ReduceLogSumExp") {
    Tensor m = reduce("_max", ir::max_reduce, id);
    Tensor s = ir::compute(
        name + "_sum", out_shape, axis_names(out_shape.size()),
        [&](const Index& i) { return ir::sum(ir::exp(src(i) - ir::read(m, i)), rv); }, rv);
    return {then(s, [&](Expr v, const Index& i) { return ir::log(v) + ir::read(m, i); })};
  }
  not_implemented(n, op);
}

// A reduction over `axes` of x that keeps x's rank (Softmax, LayerNormalization): the
// statistics' shape (those axes at 1), the reduction variables, x read at a statistic's index
// with the axes running over the reduction, and the statistic index of a full index.
struct KeptReduction {
  const TeOperand& x;
  std::vector<int64_t> axes;
  Shape stat;
  std::vector<IterVar> rv;
  int64_t count = 1;

  KeptReduction(const TeOperand& x_, std::vector<int64_t> axes_)
      : x(x_), axes(std::move(axes_)), stat(x_.shape) {
    std::vector<int64_t> extents;
    for (int64_t a : axes) {
      extents.push_back(stat[a]);
      count *= stat[a];
      stat[a] = 1;
    }
    rv = reduce_vars(extents, "r");
  }
  Expr src(const Index& i) const {
    return operand(x, reduce_input_index(i, x.shape, axes, rv, true));
  }
  Index stat_of(const Index& i) const {
    Index s = i;
    for (int64_t a : axes) s[a] = int64_t{0};
    return s;
  }

  // `by` (ir::sum or ir::max_reduce) of f(element, its statistic's index) per statistic. Over
  // one last axis whose extent is a multiple of kLanes (at least twice), in two stages, as
  // TVM's rfactor: kLanes partial results (lane l reduces elements l, l + kLanes, ...), then
  // those reduced. The generic schedule vectorizes the first stage along its lanes
  // (graph/model_compiler.cc); LLVM would not vectorize the one-stage float reduction, as
  // that reassociates it.
  static constexpr int64_t kLanes = 16;
  using Reducer = Expr (*)(Expr, const std::vector<IterVar>&);
  Tensor reduce(const std::string& name, Reducer by,
                const std::function<Expr(Expr, const Index&)>& f) const {
    const size_t last = x.shape.size() - 1;
    const int64_t len = x.shape.empty() ? 0 : x.shape[last];
    if (!x.tensor || axes.size() != 1 || static_cast<size_t>(axes[0]) != last ||
        len % kLanes != 0 || len < 2 * kLanes) {
      return ir::compute(
          name, stat, axis_names(stat.size()), [&](const Index& i) { return by(f(src(i), i), rv); },
          rv);
    }
    Shape lanes = stat;
    lanes[last] = kLanes;
    std::vector<IterVar> j = reduce_vars({len / kLanes}, "rj");
    Tensor part = ir::compute(
        name + "_lanes", lanes, axis_names(lanes.size()),
        [&](const Index& i) {
          Index at = i, s = i;
          at[last] = j[0].var * kLanes + i[last];
          s[last] = int64_t{0};
          return by(f(ir::read(x.tensor, at), s), j);
        },
        j);
    std::vector<IterVar> l = reduce_vars({kLanes}, "rl");
    return ir::compute(
        name, stat, axis_names(stat.size()),
        [&](const Index& i) {
          Index at = i;
          at[last] = l[0].var;
          return by(ir::read(part, at), l);
        },
        l);
  }
};

// Softmax and LogSoftmax over `dims` (one axis from opset 13, all from the axis before).
Tensor softmax_te(const Node& n, const OpContext& c, const TeOperand& x, const std::string& name) {
  const std::vector<int64_t> axes = softmax_axes(c, static_cast<int64_t>(x.shape.size()));
  KeptReduction red(x, axes);
  auto stat_of = [&](const Index& i) { return red.stat_of(i); };
  Tensor m = red.reduce(name + "_max", ir::max_reduce, [](Expr v, const Index&) { return v; });
  Tensor s = red.reduce(name + "_sum", ir::sum,
                        [&](Expr v, const Index& i) { return ir::exp(v - ir::read(m, i)); });
  bool log = n.op == "LogSoftmax";
  return elementwise(name, x.shape, [&](const Index& i) {
    Expr v = operand(x, i) - ir::read(m, stat_of(i));
    return log ? v - ir::log(ir::read(s, stat_of(i))) : ir::exp(v) / ir::read(s, stat_of(i));
  });
}

// Hardmax: 1 at the first largest element of each row (rows as softmax_te's), 0 elsewhere:
// the row's largest value, then the largest key (count - 1 - flat position in the row) of the
// positions holding it, then each element compared with that key. A NaN is never picked.
Tensor hardmax_te(const Node& n, const OpContext& c, const TeOperand& x, const std::string& name) {
  if (!x.tensor) not_implemented(n, "Hardmax of a one-element constant");
  const std::vector<int64_t> axes = softmax_axes(c, static_cast<int64_t>(x.shape.size()));
  KeptReduction red(x, axes);
  // The key of a position in the row, its reduction variables (or an output index) given.
  auto key = [&](const std::function<Expr(size_t)>& coord) {
    Expr p = int64_t{0};
    for (size_t k = 0; k < axes.size(); ++k) p = p * x.shape[axes[k]] + coord(k);
    return to_float(Expr(red.count - 1) - p);
  };
  Tensor m = red.reduce(name + "_max", ir::max_reduce, [](Expr v, const Index&) { return v; });
  Expr row_key = key([&](size_t k) { return red.rv[k].var; });
  Tensor first = ir::compute(
      name + "_first", red.stat, axis_names(red.stat.size()),
      [&](const Index& i) {
        return ir::max_reduce(
            ir::select(ir::eq(red.src(i), ir::read(m, i)), row_key, ir::f32(-1.0)), red.rv);
      },
      red.rv);
  return elementwise(name, x.shape, [&](const Index& i) {
    Expr at = key([&](size_t k) { return i[axes[k]]; });
    return ir::select(ir::eq(at, ir::read(first, red.stat_of(i))), ir::f32(1.0), ir::f32(0.0));
  });
}

// ArgMax / ArgMin along `axis`: the first (select_last_index: the last) index of the largest
// (smallest) element, as a float32 (int64 results are floats inside compiled kernels, exact
// below 2^24, converted to int64 at the model's output: compiler/codegen_runner.h). Three
// stages: the extreme value, the largest key of the positions holding it (the index, or its
// mirror K-1-index for the first), and the index. Unlike numpy, a NaN is not picked: max
// skips it.
Tensor arg_te(const Node& n, const TeOperand& x, const Shape& out, const std::string& name) {
  if (!x.tensor) not_implemented(n, str(n.op, " of a one-element constant"));
  auto rank = static_cast<int64_t>(x.shape.size());
  int64_t axis = normalize_axis(n, n.get_int("axis", 0), rank);
  bool keep = n.get_int("keepdims", 1) != 0, last = n.get_int("select_last_index", 0) != 0;
  const int64_t extent = x.shape[static_cast<size_t>(axis)];
  KeptReduction red(x, {axis});
  auto value = [&](const Index& i) { return n.op == "ArgMax" ? red.src(i) : ir::f32(-1.0) * red.src(i); };
  Tensor m = ir::compute(
      name + "_extreme", red.stat, axis_names(red.stat.size()),
      [&](const Index& i) { return ir::max_reduce(value(i), red.rv); }, red.rv);
  Expr r = red.rv[0].var;
  Expr key = to_float(last ? r : Expr(extent - 1) - r);
  Tensor k = ir::compute(
      name + "_key", red.stat, axis_names(red.stat.size()),
      [&](const Index& i) {
        return ir::max_reduce(ir::select(ir::eq(value(i), ir::read(m, i)), key, ir::f32(-1.0)), red.rv);
      },
      red.rv);
  return elementwise(name, out, [&](const Index& o) {
    Index i = o;
    if (!keep) i.insert(i.begin() + axis, Expr(int64_t{0}));
    Expr v = ir::read(k, i);
    return last ? v : ir::f32(static_cast<double>(extent - 1)) - v;
  });
}

// Normalization over the dimensions from `axis` on (LayerNormalization; InstanceNormalization
// with axis 2): mean and inverse standard deviation per row, then `affine` of the normalized
// value. Returns the output, the mean and the inverse standard deviation.
std::vector<Tensor> normalize_te(const TeOperand& x, int64_t axis, float eps,
                                 const std::function<Expr(Expr, const Index&)>& affine,
                                 const std::string& name) {
  auto rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d) axes.push_back(d);
  KeptReduction red(x, axes);
  const Shape& stat = red.stat;
  int64_t len = red.count;
  auto stat_of = [&](const Index& i) { return red.stat_of(i); };
  Expr inv_len = ir::f32(1.0 / static_cast<double>(len));
  Tensor sum = red.reduce(name + "_sum", ir::sum, [](Expr v, const Index&) { return v; });
  Tensor mean =
      elementwise(name + "_mean", stat, [&](const Index& i) { return ir::read(sum, i) * inv_len; });
  Tensor sq = red.reduce(name + "_sqsum", ir::sum, [&](Expr v, const Index& i) {
    Expr d = v - ir::read(mean, i);
    return d * d;
  });
  Tensor inv = elementwise(name + "_invstd", stat, [&](const Index& i) {
    return ir::f32(1.0) / ir::sqrt(ir::read(sq, i) * inv_len + ir::f32(eps));
  });
  Tensor out = elementwise(name, x.shape, [&](const Index& i) {
    Index s = stat_of(i);
    return affine((operand(x, i) - ir::read(mean, s)) * ir::read(inv, s), i);
  });
  return {out, mean, inv};
}

std::vector<Tensor> layernorm_te(const Node& n, const std::vector<TeOperand>& in,
                                 const std::string& name) {
  const TeOperand& x = in[0];
  int64_t axis = normalize_axis(n, n.get_int("axis", -1), static_cast<int64_t>(x.shape.size()));
  const TeOperand& scale = need(n, in, 1);
  std::vector<Tensor> outs = normalize_te(
      x, axis, n.get_float("epsilon", 1e-5f),
      [&](Expr y, const Index& i) {
        y = y * read_broadcast(scale, i);
        return in.size() > 2 && in[2].present() ? y + read_broadcast(in[2], i) : y;
      },
      name);
  outs.resize(std::min<size_t>(n.outputs.size(), 3));
  return outs;
}

// MaxPool, AveragePool, and the windows of Conv: positions inside the image, clamped reads.
struct WindowRead {
  Expr inside;
  Expr iy, ix;
};
WindowRead window_read(const Window& w, const Expr& oy, const Expr& ox, const Expr& r,
                       const Expr& q, int64_t H, int64_t W) {
  Expr iy = oy * w.sh - w.pt + r * w.dh, ix = ox * w.sw - w.pl + q * w.dw;
  Expr inside = ir::logical_and(ir::logical_and(iy >= int64_t{0}, iy < Expr(H)),
                                ir::logical_and(ix >= int64_t{0}, ix < Expr(W)));
  return {inside, clamp(iy, 0, H - 1), clamp(ix, 0, W - 1)};
}

Tensor pool_te(const Node& n, const OpContext& c, const TeOperand& x, const std::string& name) {
  if (!x.tensor) not_implemented(n, "pooling of a constant");
  const PoolWindow pw = pool_window(c, x.shape);
  const Window& w = pw.win;
  const bool blocked = pw.out.size() == 5;
  int64_t H = x.shape[2], W = x.shape[3];
  std::vector<IterVar> rv = reduce_vars({w.kh, w.kw}, "r");
  Expr r = rv[0].var, q = rv[1].var;
  bool is_max = n.op == "MaxPool";
  Tensor acc = ir::compute(
      name + (is_max ? "" : "_sum"), pw.out, axis_names(pw.out.size()),
      [&](const Index& i) {
        WindowRead wr = window_read(w, i[2], i[3], r, q, H, W);
        Index at{i[0], i[1], wr.iy, wr.ix};
        if (blocked) at.push_back(i[4]);
        Expr v = ir::read(x.tensor, at);
        return is_max ? ir::max_reduce(ir::select(wr.inside, v, ir::f32(-INFINITY)), rv)
                      : ir::sum(ir::select(wr.inside, v, ir::f32(0.0)), rv);
      },
      rv);
  if (is_max) return acc;
  // The divisor per output position: the window's positions inside the image, or with
  // count_include_pad those inside the explicit padding too.
  bool count_pad = n.get_int("count_include_pad", 0);
  Tensor count = ir::compute(
      name + "_count", {w.oh, w.ow}, axis_names(2),
      [&](const Index& i) {
        WindowRead wr = window_read(w, i[0], i[1], r, q, H, W);
        Expr iy = i[0] * w.sh - w.pt + r * w.dh, ix = i[1] * w.sw - w.pl + q * w.dw;
        Expr in = count_pad ? ir::logical_and(iy < Expr(H + w.pb), ix < Expr(W + w.pr)) : wr.inside;
        return ir::sum(ir::select(in, ir::f32(1.0), ir::f32(0.0)), rv);
      },
      rv);
  return elementwise(name, pw.out, [&](const Index& i) {
    return ir::read(acc, i) / ir::max(ir::read(count, {i[2], i[3]}), ir::f32(1.0));
  });
}

Tensor global_pool_te(const Node& n, const TeOperand& x, const Shape& out,
                      const std::string& name) {
  std::vector<int64_t> extents(x.shape.begin() + 2, x.shape.end());
  int64_t area = num_elements(extents);
  std::vector<IterVar> rv = reduce_vars(extents, "r");
  bool is_max = n.op == "GlobalMaxPool";
  Tensor acc = ir::compute(
      name + (is_max ? "" : "_sum"), out, axis_names(out.size()),
      [&](const Index& i) {
        Index in{i[0], i[1]};
        for (const IterVar& v : rv) in.push_back(v.var);
        Expr e = operand(x, in);
        return is_max ? ir::max_reduce(e, rv) : ir::sum(e, rv);
      },
      rv);
  if (is_max) return acc;
  return elementwise(name, out, [&](const Index& i) {
    return ir::read(acc, i) * ir::f32(1.0 / static_cast<double>(area));
  });
}

// Conv as one sum over (input channel of the group, r, s), any group, padding or stride.
Tensor conv_te(const Node& n, const OpContext& c, const std::vector<TeOperand>& in,
               const std::string& name) {
  const TeOperand &x = need(n, in, 0), &wt = need(n, in, 1);
  if (!x.tensor || !wt.tensor) not_implemented(n, "a convolution of one-element tensors");
  int64_t K = wt.shape[0], CG = wt.shape[1], group = n.get_int("group", 1), KG = K / group;
  Window w = window_of(c, x.shape, wt.shape[2], wt.shape[3]);
  int64_t H = x.shape[2], W = x.shape[3];
  Shape out{x.shape[0], K, w.oh, w.ow};
  std::vector<IterVar> rv = reduce_vars({CG, w.kh, w.kw}, "r");
  Tensor acc = ir::compute(
      name + (in.size() > 2 && in[2].present() ? "_acc" : ""), out, axis_names(4),
      [&](const Index& i) {
        WindowRead wr = window_read(w, i[2], i[3], rv[1].var, rv[2].var, H, W);
        Expr ch = (i[1] / KG) * CG + rv[0].var;
        Expr v = ir::select(wr.inside, ir::read(x.tensor, {i[0], ch, wr.iy, wr.ix}), ir::f32(0.0));
        return ir::sum(v * ir::read(wt.tensor, {i[1], rv[0].var, rv[1].var, rv[2].var}), rv);
      },
      rv);
  if (in.size() < 3 || !in[2].present()) return acc;
  return elementwise(name, out,
                     [&](const Index& i) { return ir::read(acc, i) + operand(in[2], {i[1]}); });
}

// ConvTranspose: each output pixel gathers the input pixels whose scatter reaches it,
// y[n, m, oy, ox] = sum over (c, r, q) of x[n, c, iy, ix] * w[c, m % MG, r, q] where
// oy = iy * sh - pt + r * dh (and likewise ox), c in m's group.
Tensor conv_transpose_te(const Node& n, const OpContext& c, const std::vector<TeOperand>& in,
                         const std::string& name) {
  const TeOperand &x = need(n, in, 0), &wt = need(n, in, 1);
  if (!x.tensor || !wt.tensor) not_implemented(n, "a transposed convolution of one-element tensors");
  ConvTransposeSpec s = conv_transpose_spec(c);
  int64_t H = x.shape[2], W = x.shape[3], CG = x.shape[1] / s.group, MG = s.out_channels / s.group;
  Shape out{x.shape[0], s.out_channels, s.oh, s.ow};
  std::vector<IterVar> rv = reduce_vars({CG, s.kh, s.kw}, "r");
  // The input position along one axis that reaches output position o through tap t, and
  // whether there is one (floor division: exact for negative numerators too).
  auto source = [](Expr o, Expr t, int64_t pad, int64_t dil, int64_t stride, int64_t extent) {
    Expr num = o + pad - t * dil;
    Expr at = num / stride;
    Expr ok = ir::logical_and(ir::eq(num % stride, Expr(int64_t{0})),
                              ir::logical_and(at >= int64_t{0}, at < Expr(extent)));
    return std::pair{ok, clamp(at, 0, extent - 1)};
  };
  Tensor acc = ir::compute(
      name + (in.size() > 2 && in[2].present() ? "_acc" : ""), out, axis_names(4),
      [&](const Index& i) {
        auto [ok_y, iy] = source(i[2], rv[1].var, s.pt, s.dh, s.sh, H);
        auto [ok_x, ix] = source(i[3], rv[2].var, s.pl, s.dw, s.sw, W);
        Expr ch = (i[1] / MG) * CG + rv[0].var;
        Expr v = ir::select(ir::logical_and(ok_y, ok_x), ir::read(x.tensor, {i[0], ch, iy, ix}), ir::f32(0.0));
        return ir::sum(v * ir::read(wt.tensor, {ch, i[1] % MG, rv[1].var, rv[2].var}), rv);
      },
      rv);
  if (in.size() < 3 || !in[2].present()) return acc;
  return elementwise(name, out,
                     [&](const Index& i) { return ir::read(acc, i) + operand(in[2], {i[1]}); });
}

// ConvNCHWc (graph/layout.h): the sum over (input channel, r, s) on blocked layouts.
Tensor conv_nchwc_te(const Node& n, const OpContext& c, const std::vector<TeOperand>& in,
                     const Shape& out, const std::string& name) {
  const TeOperand &x = need(n, in, 0), &wt = need(n, in, 1);
  if (!x.tensor || !wt.tensor) not_implemented(n, "a convolution of one-element tensors");
  const Shape& ws = wt.shape;
  int64_t ib = x.shape[4], C = x.shape[1] * ib, ob = out[4];
  bool depthwise = n.get_int("group", 1) != 1;
  int64_t R = depthwise ? ws[1] : ws[2], S = depthwise ? ws[2] : ws[3];
  Window w = window_of(c, {x.shape[0], C, x.shape[2], x.shape[3]}, R, S);
  int64_t H = x.shape[2], W = x.shape[3];
  std::vector<IterVar> rv = reduce_vars({depthwise ? 1 : C, w.kh, w.kw}, "r");
  Tensor acc = ir::compute(
      name + (in.size() > 2 && in[2].present() ? "_acc" : ""), out, axis_names(5),
      [&](const Index& i) {
        WindowRead wr = window_read(w, i[2], i[3], rv[1].var, rv[2].var, H, W);
        Expr k = i[1] * ob + i[4];
        Expr ch = depthwise ? k : rv[0].var;
        Expr v = ir::select(wr.inside, ir::read(x.tensor, {i[0], ch / ib, wr.iy, wr.ix, ch % ib}),
                            ir::f32(0.0));
        Expr wv = depthwise
                      ? ir::read(wt.tensor, {i[1], rv[1].var, rv[2].var, i[4]})
                      : ir::read(wt.tensor, {i[1], ch / ib, rv[1].var, rv[2].var, ch % ib, i[4]});
        return ir::sum(v * wv, rv);
      },
      rv);
  if (in.size() < 3 || !in[2].present()) return acc;
  return elementwise(name, out, [&](const Index& i) {
    return ir::read(acc, i) + operand(in[2], {i[1] * ob + i[4]});
  });
}

// LayoutTransform (graph/layout.h): each element read from its place in the source layout.
Tensor layout_transform_te(const Node& n, const TeOperand& x, const Shape& out,
                           const std::string& name) {
  if (!x.tensor) not_implemented(n, "a layout transform of a one-element tensor");
  int64_t src = parse_layout(n, "src_layout"), dst = parse_layout(n, "dst_layout");
  return elementwise(name, out, [&](const Index& i) {
    Expr ch = dst ? i[1] * dst + i[4] : i[1];
    if (src) return ir::read(x.tensor, {i[0], ch / src, i[2], i[3], ch % src});
    return ir::read(x.tensor, {i[0], ch, i[2], i[3]});
  });
}

// MatMul with numpy semantics: 1-D operands promoted, batch dimensions broadcast.
Tensor matmul_te(const Node& n, const std::vector<TeOperand>& in, const Shape& out,
                 const std::string& name) {
  const TeOperand &a = need(n, in, 0), &b = need(n, in, 1);
  if (!a.tensor || !b.tensor) not_implemented(n, "a product with a one-element operand");
  bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
  int64_t K = a.shape.back();
  size_t batch = out.size() - (a1 ? 0 : 1) - (b1 ? 0 : 1);
  std::vector<IterVar> rv = reduce_vars({K}, "k");
  Expr k = rv[0].var;
  return ir::compute(
      name, out, axis_names(out.size()),
      [&](const Index& i) {
        Expr m = a1 ? Expr() : i[batch], col = b1 ? Expr() : i[out.size() - 1];
        auto batch_index = [&](const Shape& s, size_t own) {
          Index idx;
          for (size_t d = 0; d < own; ++d)
            idx.push_back(s[d] == 1 ? Expr(int64_t{0}) : i[batch - own + d]);
          return idx;
        };
        Index ai = a1 ? Index{} : batch_index(a.shape, a.shape.size() - 2),
              bi = b1 ? Index{} : batch_index(b.shape, b.shape.size() - 2);
        if (!a1) ai.push_back(m);
        ai.push_back(k);
        bi.push_back(k);
        if (!b1) bi.push_back(col);
        return ir::sum(ir::read(a.tensor, ai) * ir::read(b.tensor, bi), rv);
      },
      rv);
}

Tensor gemm_te(const Node& n, const std::vector<TeOperand>& in, const Shape& out,
               const std::string& name) {
  const TeOperand &a = need(n, in, 0), &b = need(n, in, 1);
  if (!a.tensor || !b.tensor) not_implemented(n, "a product with a one-element operand");
  bool ta = n.get_int("transA", 0), tb = n.get_int("transB", 0);
  int64_t K = ta ? a.shape[0] : a.shape[1];
  float alpha = n.get_float("alpha", 1), beta = n.get_float("beta", 1);
  std::vector<IterVar> rv = reduce_vars({K}, "k");
  Expr k = rv[0].var;
  bool has_c = in.size() > 2 && in[2].present();
  Tensor acc = ir::compute(
      name + (has_c || alpha != 1 ? "_acc" : ""), out, axis_names(2),
      [&](const Index& i) {
        Expr av = ir::read(a.tensor, ta ? Index{k, i[0]} : Index{i[0], k});
        Expr bv = ir::read(b.tensor, tb ? Index{i[1], k} : Index{k, i[1]});
        return ir::sum(av * bv, rv);
      },
      rv);
  if (!has_c && alpha == 1) return acc;
  return elementwise(name, out, [&](const Index& i) {
    Expr y = ir::read(acc, i) * ir::f32(alpha);
    if (has_c) y = y + ir::f32(beta) * read_broadcast(in[2], i);
    return y;
  });
}

}  // namespace

Expr read_broadcast(const TeOperand& x, const Index& out) {
  if (x.scalar) return ir::f32(*x.scalar);
  TF_CHECK(x.tensor && x.shape.size() <= out.size(), "read_broadcast of rank ", x.shape.size(),
           " at rank ", out.size());
  Index idx;
  size_t lead = out.size() - x.shape.size();
  for (size_t d = 0; d < x.shape.size(); ++d)
    idx.push_back(x.shape[d] == 1 ? Expr(int64_t{0}) : out[lead + d]);
  return ir::read(x.tensor, idx);
}

bool reads_as_data(const Graph& g, const Node& n, size_t k) {
  // Gather's constant indices are unrolled into the code up to kMaxUnrolledIndices; more are
  // read from a table like computed ones.
  if (n.op == "Gather" && k == 1) {
    const Value& idx = g.value(n.inputs[1]);
    return idx.constant && idx.constant->size() > kMaxUnrolledIndices;
  }
  return k == 0 || binary_ops().count(n.op) || compare_ops().count(n.op) || n.op == "Where" ||
         n.op == "Concat" || n.op == "Clip" || n.op == "Mod" || n.op == "Pow" || n.op == "And" ||
         n.op == "Or" || n.op == "Xor" || n.op == "GatherElements" || n.op == "GatherND" ||
         ((n.op == "Pad" || n.op == "OneHot") && k == 2);
}

std::vector<Tensor> node_te(const Graph& g, const Node& n, const std::vector<TeOperand>& in,
                            const std::string& prefix, const Shape* elementwise_shape) {
  const bool arg = n.op == "ArgMax" || n.op == "ArgMin";  // int64 indices, computed as floats
  for (const std::string& o : n.outputs) {
    if (!o.empty() && g.value(o).dtype == DType::I64 && !int64_exact_ops().count(n.op))
      not_implemented(n, str(n.op, " with an int64 result"));
  }
  OpContext c = context(n, g, g.opset);
  const Shape& out = elementwise_shape ? *elementwise_shape : g.value(n.outputs[0]).shape;
  std::string name = prefix + n.op;
  const std::string& op = n.op;
  if (auto u = unary_ops().find(op); u != unary_ops().end()) {
    const TeOperand& x = need(n, in, 0);
    Tensor y =
        elementwise(name, out, [&](const Index& i) { return u->second(read_broadcast(x, i), n); });
    // Dropout in inference keeps everything: its mask is all true.
    if (op == "Dropout" && n.outputs.size() > 1 && !n.outputs[1].empty())
      return {y, elementwise(name + "_mask", out, [](const Index&) { return ir::f32(1.0); })};
    return {y};
  }
  if (op == "Div" && g.value(n.outputs[0]).dtype == DType::I64) {
    // Integer division truncates (ONNX, C): done on integers, not floats, whose quotient may
    // round up to the next integer. A zero divisor gives 0 (ONNX leaves it undefined; a
    // hardware division by zero would trap).
    const TeOperand &a = need(n, in, 0), &b = need(n, in, 1);
    return {elementwise(name, out, [&](const Index& i) {
      Expr x = ir::Cast::make(ir::Type::int64(), read_broadcast(a, i));
      Expr y = ir::Cast::make(ir::Type::int64(), read_broadcast(b, i));
      Expr zero = int64_t{0}, one = int64_t{1};
      Expr x_neg = x < zero, y_neg = y < zero, y_zero = eq(y, zero);
      Expr ax = ir::select(x_neg, zero - x, x);
      Expr ay = ir::select(y_neg, zero - y, ir::select(y_zero, one, y));
      Expr q = ax / ay;  // both non-negative: the IR's floor division truncates
      Expr negative = eq(ir::select(x_neg, one, zero) + ir::select(y_neg, one, zero), one);
      return to_float(ir::select(y_zero, zero, ir::select(negative, zero - q, q)));
    })};
  }
  if (auto b = binary_ops().find(op); b != binary_ops().end()) {
    for (size_t k = 0; k < in.size(); ++k) need(n, in, k);
    return {elementwise(name, out, [&](const Index& i) {
      std::vector<Expr> terms;
      for (size_t k = 0; k < in.size(); ++k) terms.push_back(read_broadcast(in[k], i));
      // Left to right, as the reference evaluates; past 32 operands (a variadic Sum of
      // hundreds), pairwise, so the expression is log2(n) deep instead of n.
      while (terms.size() > 32) {
        std::vector<Expr> pairs;
        for (size_t k = 0; k + 1 < terms.size(); k += 2) pairs.push_back(b->second(terms[k], terms[k + 1]));
        if (terms.size() % 2) pairs.push_back(terms.back());
        terms = std::move(pairs);
      }
      Expr v = terms[0];
      for (size_t k = 1; k < terms.size(); ++k) v = b->second(v, terms[k]);
      if (op == "Mean") v = v * ir::f32(1.0 / static_cast<double>(in.size()));
      return v;
    })};
  }
  if (auto cmp = compare_ops().find(op); cmp != compare_ops().end()) {
    const TeOperand &a = need(n, in, 0), &b = need(n, in, 1);
    return {elementwise(name, out, [&](const Index& i) {
      return to_float(cmp->second(read_broadcast(a, i), read_broadcast(b, i)));
    })};
  }
  if (op == "Not" || op == "And" || op == "Or" || op == "Xor") {
    for (size_t k = 0; k < in.size(); ++k) need(n, in, k);
    return {elementwise(name, out, [&](const Index& i) {
      Expr one = ir::f32(1.0), zero = ir::f32(0.0);
      Expr a_false = is_false(read_broadcast(in[0], i));
      if (op == "Not") return ir::select(a_false, one, zero);
      Expr b_false = is_false(read_broadcast(in[1], i));
      if (op == "And") return ir::select(a_false, zero, ir::select(b_false, zero, one));
      if (op == "Or") return ir::select(a_false, ir::select(b_false, zero, one), one);
      return ir::select(a_false, ir::select(b_false, zero, one), ir::select(b_false, one, zero));
    })};
  }
  if (op == "Where") {
    const TeOperand &cond = need(n, in, 0), &a = need(n, in, 1), &b = need(n, in, 2);
    return {elementwise(name, out, [&](const Index& i) {
      return ir::select(is_false(read_broadcast(cond, i)), read_broadcast(b, i),
                        read_broadcast(a, i));
    })};
  }
  if (op == "Mod") {
    const TeOperand &a = need(n, in, 0), &b = need(n, in, 1);
    bool fmod = n.get_int("fmod", 0) != 0;
    return {elementwise(name, out, [&](const Index& i) {
      return float_mod(read_broadcast(a, i), read_broadcast(b, i), fmod);
    })};
  }
  if (op == "Pow") {
    const TeOperand &x = need(n, in, 0), &p = need(n, in, 1);
    if (g.value(n.outputs[0]).dtype == DType::I64) {
      return {elementwise(name, out, [&](const Index& i) {
        return int_pow(read_broadcast(x, i), read_broadcast(p, i));
      })};
    }
    return {elementwise(name, out, [&](const Index& i) {
      return p.scalar ? pow_const(read_broadcast(x, i), *p.scalar)
                      : pow_computed(read_broadcast(x, i), read_broadcast(p, i));
    })};
  }
  if (op == "Clip") {
    const TeOperand& x = need(n, in, 0);
    return {elementwise(name, out, [&](const Index& i) {
      Expr v = read_broadcast(x, i);
      if (in.size() > 1 && in[1].present()) v = ir::max(v, read_broadcast(in[1], {}));
      if (in.size() > 2 && in[2].present()) v = ir::min(v, read_broadcast(in[2], {}));
      return v;
    })};
  }
  if (op == "Cast") {  // between float32, int64 and bool, all floats inside
    const TeOperand& x = need(n, in, 0);
    DType to = g.value(n.outputs[0]).dtype;
    bool from_float = g.value(n.inputs[0]).dtype == DType::F32;
    return {elementwise(name, out, [&](const Index& i) {
      Expr v = read_broadcast(x, i);
      if (to == DType::Bool) return ir::select(is_false(v), ir::f32(0.0), ir::f32(1.0));
      // To int64: toward zero, as C and numpy's astype.
      if (to == DType::I64 && from_float)
        return ir::select(v < ir::f32(0.0), ir::ceil(v), ir::floor(v));
      return v;
    })};
  }
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
    const TeOperand& x = need(n, in, 0);
    return {elementwise(name, out, [&](const Index& i) { return read_reshaped(x, i, out); })};
  }
  if (op == "Expand") {
    const TeOperand& x = need(n, in, 0);
    return {elementwise(name, out, [&](const Index& i) { return read_broadcast(x, i); })};
  }
  if (op == "Transpose") {
    const TeOperand& x = need(n, in, 0);
    std::vector<int64_t> perm;
    for (size_t d = x.shape.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
    perm = n.get_ints("perm", perm);
    return {elementwise(name, out, [&](const Index& i) {
      Index src(perm.size());
      for (size_t d = 0; d < perm.size(); ++d) src[perm[d]] = i[d];
      return operand(x, src);
    })};
  }
  if (op == "Slice") {
    const TeOperand& x = need(n, in, 0);
    SliceSpec s = slice_spec(c);
    return {elementwise(name, out, [&](const Index& i) {
      Index src;
      for (size_t d = 0; d < i.size(); ++d) src.push_back(i[d] * s.step[d] + s.start[d]);
      return operand(x, src);
    })};
  }
  if (op == "Tile") {
    const TeOperand& x = need(n, in, 0);
    return {elementwise(name, out, [&](const Index& i) {
      Index src;
      for (size_t d = 0; d < i.size(); ++d)
        src.push_back(x.shape[d] == out[d] ? i[d] : i[d] % x.shape[d]);
      return operand(x, src);
    })};
  }
  if (op == "Pad") {
    const TeOperand& x = need(n, in, 0);
    PadSpec s = pad_spec(c);
    Expr fill = ir::f32(0.0);
    if (c.present(2)) {
      const TeOperand& v = need(n, in, 2);
      fill = operand(v, Index(v.shape.size(), Expr(int64_t{0})));
    }
    return {elementwise(name, out, [&](const Index& i) {
      Index src;
      Expr inside;
      for (size_t d = 0; d < i.size(); ++d) {
        int64_t extent = x.shape[d];
        Expr at = i[d] - Expr(s.begin[d]);
        if (s.begin[d] == 0 && out[d] == extent) {
          src.push_back(i[d]);
          continue;
        }
        if (s.mode == PadSpec::Edge || (s.mode == PadSpec::Reflect && extent == 1)) {
          src.push_back(clamp(at, 0, extent - 1));
        } else if (s.mode == PadSpec::Reflect) {  // PadSpec::source, in index arithmetic
          int64_t period = 2 * (extent - 1);
          Expr m = at % period;  // the IR's Mod floors: in [0, period) for negative `at` too
          src.push_back(ir::select(m < Expr(extent), m, Expr(period) - m));
        } else {
          Expr ok = ir::logical_and(at >= int64_t{0}, at < Expr(extent));
          inside = inside ? ir::logical_and(inside, ok) : ok;
          src.push_back(clamp(at, 0, extent - 1));
        }
      }
      Expr v = operand(x, src);
      return inside ? ir::select(inside, v, fill) : v;
    })};
  }
  if (op == "Resize") {
    const TeOperand& x = need(n, in, 0);
    ResizeSpec s = resize_spec(c);
    return {elementwise(name, out, [&](const Index& i) {
      // Per axis the input positions read and their weights (ResizeSpec::source in float32
      // arithmetic); identity and nearest axes read one position, weight none.
      std::vector<std::vector<std::pair<Expr, Expr>>> taps(i.size());
      auto to_int = [](Expr f) { return ir::Cast::make(ir::Type::int64(), std::move(f)); };
      for (size_t d = 0; d < i.size(); ++d) {
        int64_t extent = s.in[d];
        if (s.identity(d)) {
          taps[d].push_back({i[d], Expr()});
          continue;
        }
        Expr at = to_float(i[d]), scale = ir::f32(s.scale[d]), src;
        double length = s.length[d];
        switch (s.coord) {
          case ResizeSpec::HalfPixel: src = (at + ir::f32(0.5)) / scale - ir::f32(0.5); break;
          case ResizeSpec::PytorchHalfPixel:
            src = length > 1 ? (at + ir::f32(0.5)) / scale - ir::f32(0.5) : ir::f32(0.0);
            break;
          case ResizeSpec::AlignCorners:
            src = length != 1 ? at * ir::f32(double(extent - 1) / (length - 1)) : ir::f32(0.0);
            break;
          case ResizeSpec::Asymmetric: src = at / scale; break;
          case ResizeSpec::TfHalfPixelForNn: src = (at + ir::f32(0.5)) / scale; break;
        }
        if (!s.linear && !s.cubic) {
          Expr r;
          switch (s.nearest) {
            case ResizeSpec::RoundPreferFloor: r = ir::ceil(src - ir::f32(0.5)); break;
            case ResizeSpec::RoundPreferCeil: r = ir::floor(src + ir::f32(0.5)); break;
            case ResizeSpec::Floor: r = ir::floor(src); break;
            case ResizeSpec::Ceil: r = ir::ceil(src); break;
          }
          taps[d].push_back({clamp(to_int(r), 0, extent - 1), Expr()});
          continue;
        }
        Expr f = ir::floor(src), k = to_int(f), t = src - f;
        if (s.linear) {
          taps[d].push_back({clamp(k, 0, extent - 1), ir::f32(1.0) - t});
          taps[d].push_back({clamp(k + int64_t{1}, 0, extent - 1), t});
          continue;
        }
        // Cubic: ResizeSpec::cubic_weights written out; with exclude_outside, taps outside the
        // input weigh 0 and the rest are divided by their sum.
        Expr A = ir::f32(s.cubic_a), u = ir::f32(1.0) - t, one = ir::f32(1.0);
        Expr t1 = t + one, u1 = u + one;
        std::array<Expr, 4> cw = {((A * t1 - ir::f32(5.0) * A) * t1 + ir::f32(8.0) * A) * t1 - ir::f32(4.0) * A,
                                  ((A + ir::f32(2.0)) * t - (A + ir::f32(3.0))) * t * t + one,
                                  ((A + ir::f32(2.0)) * u - (A + ir::f32(3.0))) * u * u + one,
                                  ((A * u1 - ir::f32(5.0) * A) * u1 + ir::f32(8.0) * A) * u1 - ir::f32(4.0) * A};
        Expr total;
        for (int64_t j = 0; j < 4; ++j) {
          Expr pos = k + (j - 1);
          Expr wj = cw[static_cast<size_t>(j)];
          if (s.exclude_outside)
            wj = ir::select(ir::logical_and(pos >= int64_t{0}, pos < extent), wj, ir::f32(0.0));
          total = total ? total + wj : wj;
          taps[d].push_back({clamp(pos, 0, extent - 1), wj});
        }
        if (s.exclude_outside)
          for (auto& tap : taps[d]) tap.second = tap.second / total;
      }
      // The sum over the product of the axes' taps.
      Expr v;
      std::vector<size_t> pick(taps.size(), 0);
      for (;;) {
        Index at;
        Expr weight;
        for (size_t d = 0; d < taps.size(); ++d) {
          const auto& [pos, wd] = taps[d][pick[d]];
          at.push_back(pos);
          if (wd) weight = weight ? weight * wd : wd;
        }
        Expr term = weight ? weight * operand(x, at) : operand(x, at);
        v = v ? v + term : term;
        size_t d = taps.size();
        while (d-- > 0) {
          if (++pick[d] < taps[d].size()) break;
          pick[d] = 0;
        }
        if (d == static_cast<size_t>(-1)) break;
      }
      return v;
    })};
  }
  if (op == "Concat") {
    int64_t axis = normalize_axis(n, n.get_int("axis", 0), static_cast<int64_t>(out.size()));
    std::vector<int64_t> start;
    int64_t at = 0;
    for (size_t k = 0; k < in.size(); ++k) {
      need(n, in, k);
      start.push_back(at);
      at += in[k].shape[axis];
    }
    return {elementwise(name, out, [&](const Index& i) {
      Expr v;
      for (size_t k = in.size(); k-- > 0;) {
        if (in[k].shape[axis] == 0) continue;
        Index src = i;
        src[axis] = clamp(i[axis] - start[k], 0, in[k].shape[axis] - 1);
        Expr here = operand(in[k], src);
        v = v ? ir::select(i[axis] < Expr(start[k] + in[k].shape[axis]), here, v) : here;
      }
      return v;
    })};
  }
  if (op == "Split") {
    const TeOperand& x = need(n, in, 0);
    int64_t axis = normalize_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.shape.size()));
    std::vector<int64_t> sizes = split_sizes(c);
    std::vector<Tensor> outs;
    int64_t at = 0;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      int64_t from = at;
      outs.push_back(elementwise(str(name, k), g.value(n.outputs[k]).shape, [&](const Index& i) {
        Index src = i;
        src[axis] = i[axis] + from;
        return operand(x, src);
      }));
      at += sizes[k];
    }
    return outs;
  }
  if (op == "Gather") {
    const TeOperand& x = need(n, in, 0);
    const Value& idx = g.value(n.inputs[1]);
    int64_t axis = normalize_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.shape.size()));
    size_t irank = idx.shape.size();
    if (!idx.constant || (in.size() > 1 && in[1].present())) {
      // Indices computed at run time (token ids, ArgMax's result), or a table of constant
      // ones: floats holding integers; a negative one counts from the end, and one out of
      // range is clamped to the axis (a kernel cannot raise ONNX's error; TVM's take clips
      // alike).
      const TeOperand& ix = need(n, in, 1);
      int64_t len = x.shape[axis];
      return {elementwise(name, out, [&](const Index& i) {
        Index inner(i.begin() + axis, i.begin() + axis + static_cast<int64_t>(irank));
        Expr j = ir::Cast::make(ir::Type::int64(), operand(ix, inner));
        j = clamp(ir::select(j < Expr(int64_t{0}), j + len, j), 0, len - 1);
        Index src(i.begin(), i.begin() + axis);
        src.push_back(j);
        src.insert(src.end(), i.begin() + axis + static_cast<int64_t>(irank), i.end());
        return operand(x, src);
      })};
    }
    int64_t count = idx.constant->size(), len = x.shape[axis];
    TF_CHECK(count <= kMaxUnrolledIndices, n.where(), ": ", count,
             " constant indices not given as a table");
    std::vector<int64_t> pos;
    for (int64_t k = 0; k < count; ++k) {
      int64_t p = idx.constant->as_int(k);
      if (p < -len || p >= len)
        throw UserError(str(n.where(), ": index ", p, " is out of range for axis of size ", len));
      pos.push_back(p < 0 ? p + len : p);
    }
    return {elementwise(name, out, [&](const Index& i) {
      Index inner(i.begin() + axis, i.begin() + axis + static_cast<int64_t>(irank));
      Expr j = flat_of(inner, idx.shape), at = pos.back();
      for (size_t k = pos.size() - 1; k-- > 0;)
        at = ir::select(eq(j, Expr(static_cast<int64_t>(k))), pos[k], at);
      Index src(i.begin(), i.begin() + axis);
      src.push_back(at);
      src.insert(src.end(), i.begin() + axis + static_cast<int64_t>(irank), i.end());
      return operand(x, src);
    })};
  }
  if (op == "OneHot") {
    const TeOperand &idx = need(n, in, 0), &values = need(n, in, 2);
    OneHotSpec s = onehot_spec(c);
    return {elementwise(name, out, [&](const Index& i) {
      Index at(i.begin(), i.end());
      Expr j = at[s.axis];
      at.erase(at.begin() + s.axis);
      Expr k = ir::Cast::make(ir::Type::int64(), operand(idx, at));
      k = ir::select(k < Expr(int64_t{0}), k + s.depth, k);  // out of range: no class is on
      Index off{Expr(int64_t{0})}, on{Expr(int64_t{1})};
      Shape flat{2};
      return ir::select(eq(k, j), read_reshaped(values, on, flat),
                        read_reshaped(values, off, flat));
    })};
  }
  if (op == "TopK") {
    // By places: each element's place in the order is the number of elements before it
    // (greater, or equal at a lower index: every place is taken once), quadratic in the axis's
    // length; output r is the element whose place is r. A NaN sorts as an infinity (the
    // reference puts it beyond one).
    const TeOperand& x = need(n, in, 0);
    if (!x.tensor) not_implemented(n, "TopK of a one-element constant");
    TopKSpec s = topk_spec(c);
    auto axis = static_cast<size_t>(s.axis);
    const Shape& xs = x.shape;
    Expr inf = ir::f32(std::numeric_limits<double>::infinity());
    auto key = [&](Expr v) { return ir::select(ir::eq(v, v), v, inf); };
    IterVar m = ir::reduce_axis(xs[axis], "m");
    Tensor place =
        ir::compute(name + "_place", xs, axis_names(xs.size()),
                    [&](const Index& i) {
                      Index other = i;
                      other[axis] = m.var;
                      Expr a = key(operand(x, other)), b = key(operand(x, i));
                      Expr ahead = s.largest ? gt(a, b) : a < b;
                      Expr tie = ir::logical_and(ir::eq(a, b), m.var < i[axis]);
                      Expr one = ir::f32(1.0), zero = ir::f32(0.0);
                      return ir::sum(ir::select(ahead, one, ir::select(tie, one, zero)), {m});
                    },
                    {m});
    auto pick = [&](const std::string& suffix, const std::function<Expr(const Index&)>& what) {
      IterVar j = ir::reduce_axis(xs[axis], "j");
      const Shape& os = g.value(n.outputs[0]).shape;
      return ir::compute(name + suffix, os, axis_names(os.size()),
                         [&](const Index& o) {
                           Index src = o;
                           src[axis] = j.var;
                           Expr here = ir::eq(ir::read(place, src), to_float(o[axis]));
                           return ir::sum(ir::select(here, what(src), ir::f32(0.0)), {j});
                         },
                         {j});
    };
    return {pick("_values", [&](const Index& src) { return operand(x, src); }),
            pick("_indices", [&](const Index& src) { return to_float(src[axis]); })};
  }
  if (op == "GatherND") {
    const TeOperand &x = need(n, in, 0), &idx = need(n, in, 1);
    GatherNDSpec s = gather_nd_spec(c);
    const Shape& is = idx.shape;
    const auto lead = static_cast<int64_t>(is.size()) - 1;  // batch and tuple dimensions
    return {elementwise(name, out, [&](const Index& o) {
      Index src(o.begin(), o.begin() + s.batch);
      Index at(o.begin(), o.begin() + lead);
      at.push_back(Expr(int64_t{0}));
      for (int64_t d = 0; d < s.k; ++d) {
        // As Gather's computed indices: negative from the end, out of range clamped.
        int64_t len = x.shape[static_cast<size_t>(s.batch + d)];
        at.back() = Expr(d);
        Expr j = ir::Cast::make(ir::Type::int64(), operand(idx, at));
        src.push_back(clamp(ir::select(j < Expr(int64_t{0}), j + len, j), 0, len - 1));
      }
      src.insert(src.end(), o.begin() + lead, o.end());
      return operand(x, src);
    })};
  }
  if (op == "GatherElements") {
    const TeOperand &x = need(n, in, 0), &idx = need(n, in, 1);
    auto axis = static_cast<size_t>(
        normalize_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.shape.size())));
    int64_t len = x.shape[axis];
    return {elementwise(name, out, [&](const Index& i) {
      // As Gather's computed indices: negative from the end, out of range clamped.
      Expr j = ir::Cast::make(ir::Type::int64(), operand(idx, i));
      Index src = i;
      src[axis] = clamp(ir::select(j < Expr(int64_t{0}), j + len, j), 0, len - 1);
      return operand(x, src);
    })};
  }
  if (op == "DepthToSpace" || op == "SpaceToDepth") {
    const TeOperand& x = need(n, in, 0);
    DepthSpaceSpec s = depth_space_spec(c);
    return {elementwise(name, out, [&](const Index& i) {
      std::array<Expr, 4> src = s.source<Expr>({i[0], i[1], i[2], i[3]});
      return operand(x, Index(src.begin(), src.end()));
    })};
  }
  if (op == "Trilu") {
    const TeOperand& x = need(n, in, 0);
    TriluSpec s = trilu_spec(c);
    return {elementwise(name, out, [&](const Index& i) {
      Expr d = i[i.size() - 1] - i[i.size() - 2];  // column - row
      Expr keep = s.upper ? d >= Expr(s.k) : d <= Expr(s.k);
      return ir::select(keep, read_broadcast(x, i), ir::f32(0.0));
    })};
  }
  if (op == "CumSum") {
    // out[.., j, ..] sums x along the axis over the positions that come before j (or after,
    // reversed; j itself unless exclusive): one reduction over the whole axis with the others
    // masked out, quadratic in the axis's length.
    const TeOperand& x = need(n, in, 0);
    if (!x.tensor) not_implemented(n, "CumSum of a one-element constant");
    CumSumSpec s = cumsum_spec(c);
    IterVar r = ir::reduce_axis(x.shape[s.axis], "r");
    return {ir::compute(name, out, axis_names(out.size()),
                        [&](const Index& i) {
                          Index src = i;
                          src[s.axis] = r.var;
                          Expr j = i[s.axis];
                          Expr take = s.reverse ? (s.exclusive ? gt(r.var, j) : r.var >= j)
                                                : (s.exclusive ? r.var < j : r.var <= j);
                          return ir::sum(ir::select(take, operand(x, src), ir::f32(0.0)), {r});
                        },
                        {r})};
  }
  if (op.rfind("Reduce", 0) == 0) return reduce_te(n, c, need(n, in, 0), out, name);
  if (op == "Softmax" || op == "LogSoftmax") return {softmax_te(n, c, need(n, in, 0), name)};
  if (op == "Hardmax") return {hardmax_te(n, c, need(n, in, 0), name)};
  if (arg) return {arg_te(n, need(n, in, 0), out, name)};
  if (op == "LayerNormalization") {
    need(n, in, 0);
    return layernorm_te(n, in, name);
  }
  if (op == "InstanceNormalization") {
    const TeOperand &x = need(n, in, 0), &scale = need(n, in, 1), &bias = need(n, in, 2);
    return {normalize_te(
        x, 2, n.get_float("epsilon", 1e-5f),
        [&](Expr y, const Index& i) { return y * operand(scale, {i[1]}) + operand(bias, {i[1]}); },
        name)[0]};
  }
  if (op == "BatchNormalization") {
    for (size_t k = 0; k < 5; ++k) need(n, in, k);
    float eps = n.get_float("epsilon", 1e-5f);
    return {elementwise(name, out, [&](const Index& i) {
      Index ch{i[1]};
      Expr inv = ir::f32(1.0) / ir::sqrt(operand(in[4], ch) + ir::f32(eps));
      return (read_broadcast(in[0], i) - operand(in[3], ch)) * inv * operand(in[1], ch) +
             operand(in[2], ch);
    })};
  }
  if (op == "MaxPool" || op == "AveragePool") return {pool_te(n, c, need(n, in, 0), name)};
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool")
    return {global_pool_te(n, need(n, in, 0), out, name)};
  if (op == "Conv") return {conv_te(n, c, in, name)};
  if (op == "ConvTranspose") return {conv_transpose_te(n, c, in, name)};
  if (op == "Einsum") {
    EinsumSpec s = einsum_spec(c);
    for (size_t k = 0; k < in.size(); ++k) need(n, in, k);
    std::vector<int64_t> sums;
    for (char l : s.summed) sums.push_back(s.extent.at(l));
    std::vector<IterVar> rv = reduce_vars(sums, "r");
    auto body = [&](const Index& i) {
      // Each label's variable: the output's axes, then the reduction's.
      std::map<char, Expr> var;
      for (size_t d = 0; d < s.output.size(); ++d) var[s.output[d]] = i[d];
      for (size_t d = 0; d < s.summed.size(); ++d) var[s.summed[d]] = rv[d].var;
      Expr prod;
      for (size_t k = 0; k < in.size(); ++k) {
        Index at;
        for (char l : s.inputs[k]) at.push_back(var.at(l));
        Expr v = operand(in[k], at);
        prod = prod ? prod * v : v;
      }
      return rv.empty() ? prod : ir::sum(prod, rv);
    };
    return {rv.empty() ? elementwise(name, out, body) : ir::compute(name, out, axis_names(out.size()), body, rv)};
  }
  if (op == "ConvNCHWc") return {conv_nchwc_te(n, c, in, out, name)};
  if (op == "LayoutTransform") return {layout_transform_te(n, need(n, in, 0), out, name)};
  if (op == "MatMul") return {matmul_te(n, in, out, name)};
  if (op == "Gemm") return {gemm_te(n, in, out, name)};
  not_implemented(n, op);
}

std::optional<TeOperand> constant_operand(const Graph& g, const Node& n, size_t k) {
  const Value& v = g.value(n.inputs[k]);
  TeOperand o{v.shape, nullptr, std::nullopt};
  // An int64 constant that the node takes as a parameter (a shape, indices) is read from the
  // graph by node_te; one it computes with is a float operand like a bool's 0 / 1.
  if (v.dtype == DType::I64 && v.constant && !reads_as_data(g, n, k)) return o;
  if (!v.constant || v.constant->size() != 1) return std::nullopt;
  double x = v.dtype == DType::F32 ? v.constant->f[0] : static_cast<double>(v.constant->as_int(0));
  o.scalar = v.dtype == DType::Bool ? (x != 0 ? 1.0 : 0.0) : x;
  return o;
}

void check_node_expressions(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (op_kind(n.op) == OpKind::Anchor) continue;  // its workload is checked by task extraction
    std::vector<TeOperand> in;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) {
        in.emplace_back();
      } else if (std::optional<TeOperand> c = constant_operand(g, n, i)) {
        in.push_back(*c);
      } else {
        const Shape& shape = g.value(n.inputs[i]).shape;
        in.push_back(TeOperand{shape, ir::placeholder(str("arg", i), shape), std::nullopt});
      }
    }
    try {
      node_te(g, n, in, "check_");
    } catch (const UserError& e) {
      if (std::string(e.what()).find("is not implemented yet") == std::string::npos) throw;
    }
  }
}

}  // namespace tf::graph
