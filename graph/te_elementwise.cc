// The tensor expressions of the elementwise operators (graph/op_te.h).
#include <cmath>

#include "base/error.h"
#include "graph/op_te.h"
#include "graph/te_kit.h"

namespace tf::graph::te {

TeFn unary_te(UnaryExpr f) {
  return [f](const Graph&, const Node& n, const OpContext&, const std::vector<TeOperand>& in, const Shape& out,
             const std::string& name) -> std::vector<Tensor> {
    const TeOperand& x = need(n, in, 0);
    return {elementwise(name, out, [&](const Index& i) { return f(read_broadcast(x, i), n); })};
  };
}

// Dropout in inference keeps everything: its mask is all true.
TeFn dropout_te() {
  return [](const Graph&, const Node& n, const OpContext&, const std::vector<TeOperand>& in, const Shape& out,
            const std::string& name) -> std::vector<Tensor> {
    const TeOperand& x = need(n, in, 0);
    Tensor y = elementwise(name, out, [&](const Index& i) { return read_broadcast(x, i); });
    if (n.outputs.size() > 1 && !n.outputs[1].empty())
      return {y, elementwise(name + "_mask", out, [](const Index&) { return ir::f32(1.0); })};
    return {y};
  };
}

TeFn binary_te(BinaryExpr f, bool mean) {
  return [f, mean](const Graph&, const Node& n, const OpContext&, const std::vector<TeOperand>& in, const Shape& out,
                   const std::string& name) -> std::vector<Tensor> {
    for (size_t k = 0; k < in.size(); ++k) need(n, in, k);
    return {elementwise(name, out, [&](const Index& i) {
      std::vector<Expr> terms;
      for (size_t k = 0; k < in.size(); ++k) terms.push_back(read_broadcast(in[k], i));
      // Left to right, as the reference evaluates; past 32 operands (a variadic Sum of
      // hundreds), pairwise, so the expression is log2(n) deep instead of n.
      while (terms.size() > 32) {
        std::vector<Expr> pairs;
        for (size_t k = 0; k + 1 < terms.size(); k += 2) pairs.push_back(f(terms[k], terms[k + 1]));
        if (terms.size() % 2) pairs.push_back(terms.back());
        terms = std::move(pairs);
      }
      Expr v = terms[0];
      for (size_t k = 1; k < terms.size(); ++k) v = f(v, terms[k]);
      if (mean) v = v * ir::f32(1.0 / static_cast<double>(in.size()));
      return v;
    })};
  };
}

TeFn div_te() {
  TeFn floats = binary_te([](Expr a, Expr b) { return a / b; });
  return [floats](const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in,
                  const Shape& out, const std::string& name) -> std::vector<Tensor> {
    if (g.value(n.outputs[0]).dtype != DType::I64) return floats(g, n, c, in, out, name);
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
  };
}

// Comparisons: bool results, which compiled kernels hold as 0.0 / 1.0 floats (see node_te.h).
TeFn compare_te(BinaryExpr f) {
  return [f](const Graph&, const Node& n, const OpContext&, const std::vector<TeOperand>& in, const Shape& out,
             const std::string& name) -> std::vector<Tensor> {
    const TeOperand &a = need(n, in, 0), &b = need(n, in, 1);
    return {elementwise(name, out, [&](const Index& i) {
      return to_float(f(read_broadcast(a, i), read_broadcast(b, i)));
    })};
  };
}

TeFn logic_te(LogicExpr f) {
  return [f](const Graph&, const Node& n, const OpContext&, const std::vector<TeOperand>& in, const Shape& out,
             const std::string& name) -> std::vector<Tensor> {
    for (size_t k = 0; k < in.size(); ++k) need(n, in, k);
    return {elementwise(name, out, [&](const Index& i) {
      Expr a_false = is_false(read_broadcast(in[0], i));
      Expr b_false = in.size() > 1 ? is_false(read_broadcast(in[1], i)) : Expr();
      return f(a_false, b_false);
    })};
  };
}

std::vector<Tensor> where_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand &cond = need(n, in, 0), &a = need(n, in, 1), &b = need(n, in, 2);
  return {elementwise(name, out, [&](const Index& i) {
    return ir::select(is_false(read_broadcast(cond, i)), read_broadcast(b, i),
                      read_broadcast(a, i));
  })};
}

std::vector<Tensor> mod_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand &a = need(n, in, 0), &b = need(n, in, 1);
  bool fmod = n.get_int("fmod", 0) != 0;
  return {elementwise(name, out, [&](const Index& i) {
    return float_mod(read_broadcast(a, i), read_broadcast(b, i), fmod);
  })};
}

std::vector<Tensor> pow_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
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

std::vector<Tensor> clip_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  return {elementwise(name, out, [&](const Index& i) {
    Expr v = read_broadcast(x, i);
    if (in.size() > 1 && in[1].present()) v = ir::max(v, read_broadcast(in[1], {}));
    if (in.size() > 2 && in[2].present()) v = ir::min(v, read_broadcast(in[2], {}));
    return v;
  })};
}

std::vector<Tensor> cast_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  // between float32, int64 and bool, all floats inside
  const TeOperand& x = need(n, in, 0);
  DType to = g.value(n.outputs[0]).dtype;
  DType from = g.value(n.inputs[0]).dtype;
  bool from_float = from == DType::F32;
  // A float16 model's inputs and outputs: 16-bit bits in uint16 buffers (graph/graph.h).
  if (is_storage16(from) || is_storage16(to)) {
    return {elementwise(name, out, [&](const Index& i) {
      Expr v = read_broadcast(x, i);
      if (from == DType::F16) return ir::Call::make(ir::kF16ToFloat, {v});
      if (from == DType::BF16) return ir::Call::make(ir::kBF16ToFloat, {v});
      return ir::Call::make(to == DType::F16 ? ir::kFloatToF16 : ir::kFloatToBF16, {v});
    })};
  }
  return {elementwise(name, out, [&](const Index& i) {
    Expr v = read_broadcast(x, i);
    if (to == DType::Bool) return ir::select(is_false(v), ir::f32(0.0), ir::f32(1.0));
    // To int64: toward zero, as C and numpy's astype.
    if (to == DType::I64 && from_float)
      return ir::select(v < ir::f32(0.0), ir::ceil(v), ir::floor(v));
    return v;
  })};
}

}  // namespace tf::graph::te
