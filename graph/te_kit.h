// What the operators' tensor expressions share (graph/op_te.h): index arithmetic, operands,
// elementwise stages, float forms of integer and bool arithmetic, and kept-rank reductions.
// Only the te_*.cc files include it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler/te.h"
#include "graph/graph.h"
#include "graph/node_te.h"
#include "graph/ops.h"

namespace tf::graph::te {

using ir::Expr;
using ir::IterVar;
using ir::Tensor;
using Index = std::vector<Expr>;

// A UserError naming the node: compiling `what` is not implemented (the reference runs it).
[[noreturn]] void not_implemented(const Node& n, const std::string& what);

std::vector<std::string> axis_names(size_t rank, const char* base = "i");
Tensor elementwise(const std::string& name, const Shape& shape, const std::function<Expr(const Index&)>& f);
std::vector<IterVar> reduce_vars(const std::vector<int64_t>& extents, const std::string& base);

Expr to_float(Expr i);
Expr clamp(Expr i, int64_t lo, int64_t hi);
Expr neg(Expr x);
Expr gt(Expr a, Expr b);
// erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7), odd-symmetric.
Expr erf(Expr x);

Expr operand(const TeOperand& x, const Index& idx);
// The flat position of `idx` in `shape`, and the index of a flat position.
Expr flat_of(const Index& idx, const Shape& shape);
Index unflatten(Expr flat, const Shape& shape);
// x read at the same row-major position as `idx` of `shape` (Reshape and its kin).
Expr read_reshaped(const TeOperand& x, const Index& idx, const Shape& shape);
// Input k, which must be a tensor or a scalar (else: not implemented, naming it).
const TeOperand& need(const Node& n, const std::vector<TeOperand>& in, size_t k);

// A bool held as a float: false is 0 and anything else true (NaN too, as Cast to bool has it).
Expr is_false(Expr b);
// Mod on floats: fmod=1 has the sign of the dividend (C's fmod), fmod=0 that of the divisor.
Expr float_mod(Expr a, Expr b, bool fmod);
// x^p for a constant exponent; std::pow for a computed one; Pow with an int64 result.
Expr pow_const(Expr x, double p);
Expr pow_computed(Expr x, Expr y);
Expr int_pow(Expr x, Expr y);

// Maps an output index of a reduction to the input index, the reduced axes taking `rv`.
Index reduce_input_index(const Index& out, const Shape& x, const std::vector<int64_t>& axes,
                         const std::vector<IterVar>& rv, bool keep);

// A reduction over `axes` of x that keeps x's rank (Softmax, LayerNormalization): the
// statistics' shape (those axes at 1), the reduction variables, x read at a statistic's index
// with the axes running over the reduction, and the statistic index of a full index.
struct KeptReduction {
  const TeOperand& x;
  std::vector<int64_t> axes;
  Shape stat;
  std::vector<IterVar> rv;
  int64_t count = 1;

  // `lanes`: reduce() may keep partial results per vector lane (CPU kernels; not for GPUs:
  // OpContext::gpu).
  bool lanes = true;

  KeptReduction(const TeOperand& x_, std::vector<int64_t> axes_, bool lanes_ = true)
      : x(x_), axes(std::move(axes_)), stat(x_.shape), lanes(lanes_) {
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
  // one last axis of at least twice kLanes, in two stages, as TVM's rfactor: kLanes partial
  // results over the whole multiples of kLanes (lane l reduces elements l, l + kLanes, ...),
  // then those and the tail's elements reduced (ViT's 197-token softmax: 12 x 16 + 5). The
  // generic schedule vectorizes the first stage along its lanes (compiler/model_codegen.cc);
  // LLVM would not vectorize the one-stage float reduction, as that reassociates it. Without
  // `lanes`, one stage.
  static constexpr int64_t kLanes = 16;
  using Reducer = Expr (*)(Expr, const std::vector<IterVar>&);
  Tensor reduce(const std::string& name, Reducer by,
                const std::function<Expr(Expr, const Index&)>& f) const {
    const size_t last = x.shape.size() - 1;
    const int64_t len = x.shape.empty() ? 0 : x.shape[last];
    if (!lanes || !x.tensor || axes.size() != 1 || static_cast<size_t>(axes[0]) != last ||
        len < 2 * kLanes) {
      return ir::compute(
          name, stat, axis_names(stat.size()), [&](const Index& i) { return by(f(src(i), i), rv); },
          rv);
    }
    const int64_t whole = len / kLanes * kLanes, tail = len - whole;
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
    // Partial result l for l < kLanes, then the tail's elements (both reads kept in range).
    std::vector<IterVar> l = reduce_vars({kLanes + tail}, "rl");
    return ir::compute(
        name, stat, axis_names(stat.size()),
        [&](const Index& i) {
          Index at = i;
          at[last] = tail == 0 ? l[0].var : ir::min(l[0].var, Expr(kLanes - 1));
          Expr v = ir::read(part, at);
          if (tail == 0) return by(v, l);
          Index t = i;
          t[last] = ir::max(l[0].var - Expr(kLanes), Expr(int64_t{0})) + Expr(whole);
          return by(ir::select(l[0].var < Expr(kLanes), v, f(ir::read(x.tensor, t), i)), l);
        },
        l);
  }
};

}  // namespace tf::graph::te
