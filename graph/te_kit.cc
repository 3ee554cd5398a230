#include "graph/te_kit.h"

#include <cmath>
#include <limits>

#include "base/error.h"

namespace tf::graph::te {

[[noreturn]] void not_implemented(const Node& n, const std::string& what) {
  throw UserError(
      str(n.where(), ": compiling ", what,
          " is not implemented yet (`tunefarm run --model M --reference` evaluates it)"));
}

std::vector<std::string> axis_names(size_t rank, const char* base) {
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

}  // namespace tf::graph::te
