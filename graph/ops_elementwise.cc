// Elementwise operators: unary math, broadcasting binary arithmetic and comparisons, Where,
// Clip, Cast.
#include <array>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "graph/element_types.h"
#include "graph/op_te.h"
#include "graph/ops.h"
#include "graph/te_kit.h"

namespace tf::graph {
namespace {

using Eval =
    std::function<std::vector<HostTensor>(const OpContext&, const std::vector<const HostTensor*>&)>;

// Calls f(out_index, offsets...) for each element of `out`, with each input's offset under
// numpy broadcasting.
template <size_t N, typename F>
void for_each_broadcast(const Shape& out, const std::array<const Shape*, N>& ins, F f) {
  std::array<std::vector<int64_t>, N> strides;
  for (size_t k = 0; k < N; ++k) strides[k] = broadcast_strides(*ins[k], out);
  int64_t total = num_elements(out);
  std::vector<int64_t> idx(out.size(), 0);
  std::array<int64_t, N> off{};
  for (int64_t e = 0; e < total; ++e) {
    f(e, off);
    for (size_t d = out.size(); d-- > 0;) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
      if (idx[d] < out[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * out[d];
      idx[d] = 0;
    }
  }
}

// Gelu's approximate: "none" (default) or "tanh"; anything else is the node's error.
bool gelu_tanh(const Node& n) {
  const std::string a = n.get_string("approximate", "none");
  if (a != "none" && a != "tanh")
    throw UserError(str(n.where(), ": approximate '", a, "' is not one of none, tanh"));
  return a == "tanh";
}

OpDef unary(const std::string& type, std::function<float(float, const Node&)> f, te::UnaryExpr expr) {
  OpDef d{type, 1, 1, nullptr, nullptr};
  d.te = te::unary_te(std::move(expr));
  d.infer = [](const OpContext& c) {
    require_float(c, 0);
    return std::vector<TypeShape>{{DType::F32, c.in(0).shape}};
  };
  d.eval = [f](const OpContext& c, const std::vector<const HostTensor*>& in) {
    HostTensor out = make_like(DType::F32, in[0]->shape);
    for (size_t k = 0; k < out.f.size(); ++k) out.f[k] = f(in[0]->f[k], c.node);
    return std::vector<HostTensor>{out};
  };
  return d;
}

// atan for compiled kernels (no IR intrinsic): Cephes' atanf, |x| reduced to [0, tan(pi/8)]
// (x > tan(3 pi/8): pi/2 + atan(-1/x); x > tan(pi/8): pi/4 + atan((x-1)/(x+1))), then its
// odd polynomial; within 2 float ulps. NaN gives NaN (every comparison false).
ir::Expr atan_expr(ir::Expr x) {
  ir::Expr ax = ir::fabs(x);
  ir::Expr big = te::gt(ax, ir::f32(2.414213562373095)), mid = te::gt(ax, ir::f32(0.4142135623730950));
  ir::Expr r = ir::select(big, ir::f32(-1.0) / ax, ir::select(mid, (ax - ir::f32(1.0)) / (ax + ir::f32(1.0)), ax));
  ir::Expr base = ir::select(big, ir::f32(M_PI / 2), ir::select(mid, ir::f32(M_PI / 4), ir::f32(0.0)));
  ir::Expr z = r * r;
  ir::Expr p = (((ir::f32(8.05374449538e-2) * z - ir::f32(1.38776856032e-1)) * z + ir::f32(1.99777106478e-1)) * z -
                ir::f32(3.33329491539e-1)) * z * r + r;
  ir::Expr y = base + p;
  return ir::select(x < ir::f32(0.0), te::neg(y), y);
}

// Not, And, Or, Xor: bool inputs (broadcast), a bool result.
OpDef logical(const std::string& type, int inputs, std::function<bool(bool, bool)> f, TeFn te) {
  OpDef d{type, inputs, inputs, nullptr, nullptr};
  d.te = std::move(te);
  d.data_input = every_input_is_data;
  d.infer = [](const OpContext& c) {
    Shape s = c.in(0).shape;
    for (size_t k = 0; k < c.count(); ++k) {
      if (c.in(k).dtype != DType::Bool)
        throw UserError(str(c.node.where(), ": input ", k, " ('", c.in(k).name, "') is ",
                            dtype_name(c.in(k).dtype), "; this operator takes bool"));
      s = broadcast_shapes(c.node, s, c.in(k).shape);
    }
    return std::vector<TypeShape>{{DType::Bool, s}};
  };
  d.eval = [f](const OpContext& c, const std::vector<const HostTensor*>& in) {
    const HostTensor& a = *in[0];
    const HostTensor& b = in.size() > 1 ? *in[1] : *in[0];
    Shape s = broadcast_shapes(c.node, a.shape, b.shape);
    HostTensor out = make_like(DType::Bool, s);
    for_each_broadcast<2>(s, {&a.shape, &b.shape}, [&](int64_t e, const std::array<int64_t, 2>& o) {
      out.i[e] = f(a.i[o[0]] != 0, b.i[o[1]] != 0);
    });
    return std::vector<HostTensor>{out};
  };
  return d;
}

enum class BinKind { Arith, Compare };

// Integer arithmetic (shape computations): exact, and an overflow or a division by zero is
// the node's error; the other operators go through `wide` (double) and saturate.
template <typename Wide>
int64_t int_arith(const Node& n, int64_t a, int64_t b, Wide wide) {
  int64_t r = 0;
  bool overflow = false;
  if (n.op == "Add")
    overflow = __builtin_add_overflow(a, b, &r);
  else if (n.op == "Sub")
    overflow = __builtin_sub_overflow(a, b, &r);
  else if (n.op == "Mul")
    overflow = __builtin_mul_overflow(a, b, &r);
  else if (n.op == "Div" || n.op == "Mod") {
    if (b == 0) throw UserError(str(n.where(), ": integer division by zero"));
    if (a == INT64_MIN && b == -1)
      overflow = true;
    else if (n.op == "Div")
      r = a / b;  // truncates, as ONNX's integer Div
    else
      r = HostTensor::float_to_int(wide());
  } else {
    r = HostTensor::float_to_int(wide());
  }
  if (overflow) throw UserError(str(n.where(), ": int64 overflow in ", a, " ", n.op, " ", b));
  return r;
}

// f sees the node for attributes (Mod's fmod).
OpDef binary_n(const std::string& type, BinKind kind,
               std::function<double(double, double, const Node&)> f, TeFn te) {
  OpDef d{type, 2, 2, nullptr, nullptr};
  d.te = std::move(te);
  d.data_input = every_input_is_data;
  d.infer = [kind](const OpContext& c) {
    DType a = c.in(0).dtype, b = c.in(1).dtype;
    // Pow takes an exponent of another type; everything else one type for both.
    if (a != b && c.node.op != "Pow") {
      throw UserError(str(c.node.where(), ": inputs are ", dtype_name(a), " and ", dtype_name(b)));
    }
    if (a == DType::Bool && c.node.op != "Equal")
      throw UserError(str(c.node.where(), ": bool inputs are not supported"));
    Shape s = broadcast_shapes(c.node, c.in(0).shape, c.in(1).shape);
    return std::vector<TypeShape>{{kind == BinKind::Compare ? DType::Bool : a, s}};
  };
  d.eval = [kind, f](const OpContext& c, const std::vector<const HostTensor*>& in) {
    Shape s = broadcast_shapes(c.node, in[0]->shape, in[1]->shape);
    DType t = kind == BinKind::Compare ? DType::Bool : in[0]->dtype;
    HostTensor out = make_like(t, s);
    bool ints = in[0]->dtype != DType::F32;
    for_each_broadcast<2>(
        s, {&in[0]->shape, &in[1]->shape}, [&](int64_t e, const std::array<int64_t, 2>& o) {
          if (t == DType::F32) {
            out.f[e] = static_cast<float>(f(in[0]->f[o[0]], in[1]->as_double(o[1]), c.node));
          } else if (ints && kind == BinKind::Arith && in[1]->dtype != DType::F32) {
            out.i[e] = int_arith(c.node, in[0]->i[o[0]], in[1]->i[o[1]], [&] {
              return f(in[0]->as_double(o[0]), in[1]->as_double(o[1]), c.node);
            });
          } else {
            out.i[e] =
                HostTensor::float_to_int(f(in[0]->as_double(o[0]), in[1]->as_double(o[1]), c.node));
          }
        });
    return std::vector<HostTensor>{out};
  };
  return d;
}

// Max, Min, Sum, Mean: one or more inputs, broadcast together, folded left to right (Mean
// divides the sum by the count).
OpDef variadic(const std::string& type, std::function<double(double, double)> f, TeFn te) {
  OpDef d{type, 1, 1 << 20, nullptr, nullptr};
  d.te = std::move(te);
  d.data_input = every_input_is_data;
  d.infer = [](const OpContext& c) {
    Shape s = c.in(0).shape;
    // int64 too, for Max, Min and Sum (all inputs of one type).
    bool ints = c.in(0).dtype == DType::I64 && c.node.op != "Mean";
    for (size_t k = 0; k < c.count(); ++k) {
      if (!ints || c.in(k).dtype != DType::I64) require_float(c, k);
      s = broadcast_shapes(c.node, s, c.in(k).shape);
    }
    return std::vector<TypeShape>{{ints ? DType::I64 : DType::F32, s}};
  };
  d.eval = [f](const OpContext& c, const std::vector<const HostTensor*>& in) {
    HostTensor acc = *in[0];
    for (size_t k = 1; k < in.size(); ++k) {
      Shape s = broadcast_shapes(c.node, acc.shape, in[k]->shape);
      HostTensor next = make_like(acc.dtype, s);
      for_each_broadcast<2>(
          s, {&acc.shape, &in[k]->shape}, [&](int64_t e, const std::array<int64_t, 2>& o) {
            if (acc.dtype == DType::F32) {
              next.f[e] = static_cast<float>(f(acc.f[o[0]], in[k]->f[o[1]]));
              return;
            }
            int64_t a = acc.i[o[0]], b = in[k]->i[o[1]];
            if (c.node.op == "Sum") {
              if (__builtin_add_overflow(a, b, &next.i[e]))
                throw UserError(str(c.node.where(), ": int64 overflow in ", a, " + ", b));
            } else {
              next.i[e] = c.node.op == "Max" ? std::max(a, b) : std::min(a, b);
            }
          });
      acc = std::move(next);
    }
    if (c.node.op == "Mean") {
      for (float& v : acc.f) v /= static_cast<float>(in.size());
    }
    return std::vector<HostTensor>{acc};
  };
  return d;
}

OpDef binary(const std::string& type, BinKind kind, std::function<double(double, double)> f, TeFn te) {
  return binary_n(type, kind, [f](double a, double b, const Node&) { return f(a, b); }, std::move(te));
}

OpDef where_op() {
  OpDef d{"Where", 3, 3, nullptr, nullptr};
  d.te = te::where_te;
  d.data_input = every_input_is_data;
  d.infer = [](const OpContext& c) {
    if (c.in(0).dtype != DType::Bool)
      throw UserError(str(c.node.where(), ": the condition must be bool"));
    if (c.in(1).dtype != c.in(2).dtype)
      throw UserError(str(c.node.where(), ": the two branches differ in type"));
    Shape s = broadcast_shapes(c.node, broadcast_shapes(c.node, c.in(0).shape, c.in(1).shape),
                               c.in(2).shape);
    return std::vector<TypeShape>{{c.in(1).dtype, s}};
  };
  d.eval = [](const OpContext& c, const std::vector<const HostTensor*>& in) {
    Shape s = broadcast_shapes(c.node, broadcast_shapes(c.node, in[0]->shape, in[1]->shape),
                               in[2]->shape);
    HostTensor out = make_like(in[1]->dtype, s);
    for_each_broadcast<3>(s, {&in[0]->shape, &in[1]->shape, &in[2]->shape},
                          [&](int64_t e, const std::array<int64_t, 3>& o) {
                            const HostTensor* src = in[0]->i[o[0]] ? in[1] : in[2];
                            int64_t at = in[0]->i[o[0]] ? o[1] : o[2];
                            if (out.dtype == DType::F32)
                              out.f[e] = src->f[at];
                            else
                              out.i[e] = src->i[at];
                          });
    return std::vector<HostTensor>{out};
  };
  return d;
}

// Clip: min and max as optional inputs (opset 11+).
OpDef clip_op() {
  OpDef d{"Clip", 1, 3, nullptr, nullptr};
  d.te = te::clip_te;
  d.data_input = every_input_is_data;
  d.infer = [](const OpContext& c) {
    DType t = c.in(0).dtype;
    if (t == DType::Bool) require_float(c, 0);
    for (size_t k = 1; k < 3; ++k) {
      if (!c.present(k)) continue;
      if (num_elements(c.in(k).shape) != 1) {
        throw UserError(str(c.node.where(), ": ", k == 1 ? "min" : "max", " must be a scalar, not ",
                            shape_str(c.in(k).shape)));
      }
      if (c.in(k).dtype != t) {
        throw UserError(str(c.node.where(), ": ", k == 1 ? "min" : "max", " is ",
                            dtype_name(c.in(k).dtype), ", input 0 ", dtype_name(t)));
      }
    }
    return std::vector<TypeShape>{{t, c.in(0).shape}};
  };
  d.eval = [](const OpContext& c, const std::vector<const HostTensor*>& in) {
    HostTensor out = make_like(in[0]->dtype, in[0]->shape);
    bool lo = in.size() > 1 && in[1], hi = in.size() > 2 && in[2];
    if (in[0]->dtype == DType::I64) {  // int64 (opset 12)
      for (size_t k = 0; k < out.i.size(); ++k) {
        int64_t x = in[0]->i[k];
        if (lo) x = std::max(x, in[1]->i[0]);
        if (hi) x = std::min(x, in[2]->i[0]);
        out.i[k] = x;
      }
      return std::vector<HostTensor>{out};
    }
    float l = lo ? in[1]->f[0] : -INFINITY, h = hi ? in[2]->f[0] : INFINITY;
    for (size_t k = 0; k < out.f.size(); ++k) out.f[k] = min_nan(max_nan(in[0]->f[k], l), h);
    return std::vector<HostTensor>{out};
  };
  return d;
}

// ONNX TensorProto element types this graph can hold.
DType cast_target(const Node& n) {
  int64_t to = n.get_int("to", -1);
  if (n.has(kStorageCast)) {  // a float16 model's output (graph/graph.h)
    if (to == 10 || to == 16) return to == 10 ? DType::F16 : DType::BF16;
    throw UserError(str(n.where(), ": a storage cast (attribute ", kStorageCast,
                        ") is to float16 (10) or bfloat16 (16), not ", to));
  }
  // float16 (10) and bfloat16 (16) values are held and computed as float32 (a float16 model's
  // Casts: docs/precision.md), so a Cast to them keeps the value.
  if (to == 1 || to == 10 || to == 16) return DType::F32;
  if (to == 7 || to == 6) return DType::I64;  // int32 is widened: only shape arithmetic casts to it
  if (to == 9) return DType::Bool;
  throw UserError(str(n.where(), ": cast to element type ", to,
                      " is not supported (float32, float16 and bfloat16 (as float32), int32, int64, bool are)"));
}

OpDef cast_op() {
  OpDef d{"Cast", 1, 1, nullptr, nullptr};
  d.te = te::cast_te;
  d.infer = [](const OpContext& c) {
    const DType to = cast_target(c.node);
    if (is_storage16(to) && c.in(0).dtype != DType::F32) {
      throw UserError(str(c.node.where(), ": a storage cast to ", dtype_name(to),
                          " reads float32, not ", dtype_name(c.in(0).dtype)));
    }
    return std::vector<TypeShape>{{to, c.in(0).shape}};
  };
  d.eval = [](const OpContext& c, const std::vector<const HostTensor*>& in) {
    DType to = cast_target(c.node);
    HostTensor out = make_like(to, in[0]->shape);
    for (int64_t k = 0; k < out.size(); ++k) {
      if (is_storage16(to))
        out.f[k] = round_to(to, in[0]->f[k]);
      else if (to == DType::F32)
        out.f[k] = static_cast<float>(in[0]->as_double(k));
      else if (to == DType::Bool)
        out.i[k] = in[0]->as_double(k) != 0;
      else
        out.i[k] = in[0]->as_int(k);
    }
    return std::vector<HostTensor>{out};
  };
  return d;
}

}  // namespace

void register_elementwise_ops(std::vector<OpDef>& ops) {
  ops.push_back(unary("Relu", [](float x, const Node&) { return x < 0 ? 0.0f : x; },  // NaN stays NaN
      [](ir::Expr x, const Node&) { return ir::max(x, ir::f32(0.0)); }));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(unary("Sigmoid", [](float x, const Node&) {
    return static_cast<float>(1 / (1 + std::exp(-double(x))));
  },
      [](ir::Expr x, const Node&) { return ir::f32(1.0) / (ir::f32(1.0) + ir::exp(te::neg(x))); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Tanh", [](float x, const Node&) { return std::tanh(x); },
      [](ir::Expr x, const Node&) { return ir::tanh(x); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Sin", [](float x, const Node&) { return std::sin(x); },
      [](ir::Expr x, const Node&) { return ir::sin(x); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Cos", [](float x, const Node&) { return std::cos(x); },
      [](ir::Expr x, const Node&) { return ir::cos(x); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Exp", [](float x, const Node&) { return std::exp(x); },
      [](ir::Expr x, const Node&) { return ir::exp(x); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Log", [](float x, const Node&) { return std::log(x); },
      [](ir::Expr x, const Node&) { return ir::log(x); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Sqrt", [](float x, const Node&) { return std::sqrt(x); },
      [](ir::Expr x, const Node&) { return ir::sqrt(x); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Erf", [](float x, const Node&) { return std::erf(x); },
      [](ir::Expr x, const Node&) { return te::erf(x); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Neg", [](float x, const Node&) { return -x; },
      [](ir::Expr x, const Node&) { return te::neg(x); }));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(unary("Abs", [](float x, const Node&) { return std::fabs(x); },
      [](ir::Expr x, const Node&) { return ir::fabs(x); }));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(unary("Reciprocal", [](float x, const Node&) { return 1.0f / x; },
      [](ir::Expr x, const Node&) { return ir::f32(1.0) / x; }));
  describe(ops.back(), OpKind::Elementwise);
  // GELU (ONNX opset 20's Gelu): exact (approximate="none", what recognize-composites makes of
  // the Erf form exporters write), or approximate="tanh",
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
  ops.push_back(unary("Gelu", [](float x, const Node& n) {
    const double v = x;
    if (gelu_tanh(n))
      return static_cast<float>(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    return static_cast<float>(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  },
      [](ir::Expr x, const Node& n) {
         if (gelu_tanh(n)) {
           ir::Expr u = ir::f32(std::sqrt(2 / M_PI)) * (x + ir::f32(0.044715) * x * x * x);
           return ir::f32(0.5) * x * (ir::f32(1.0) + ir::tanh(u));
         }
         return ir::f32(0.5) * x * (ir::f32(1.0) + te::erf(x * ir::f32(1.0 / std::sqrt(2.0))));
       }));
  ops.back().infer = [](const OpContext& c) {
    require_float(c, 0);
    gelu_tanh(c.node);  // checks the attribute
    return std::vector<TypeShape>{{DType::F32, c.in(0).shape}};
  };
  describe(ops.back(), OpKind::Elementwise, {"approximate"});
  ops.push_back(unary("Sign", [](float x, const Node&) { return float((x > 0) - (x < 0)); },
      [](ir::Expr x, const Node&) {
         return ir::select(te::gt(x, ir::f32(0.0)), ir::f32(1.0),
                           ir::select(x < ir::f32(0.0), ir::f32(-1.0), ir::f32(0.0)));
       }));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(
      unary("Round", [](float x, const Node&) { return std::nearbyint(x); },
      [](ir::Expr x, const Node&) { return ir::round_even(x); }));
  describe(ops.back(), OpKind::Elementwise);  // half to even
  ops.push_back(unary("Softplus", [](float x, const Node&) {
    return static_cast<float>(std::log1p(std::exp(double(x))));
  },
      [](ir::Expr x, const Node&) {
         return ir::max(x, ir::f32(0.0)) + ir::log(ir::f32(1.0) + ir::exp(te::neg(ir::fabs(x))));
       }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Floor", [](float x, const Node&) { return std::floor(x); },
      [](ir::Expr x, const Node&) { return ir::floor(x); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Ceil", [](float x, const Node&) { return std::ceil(x); },
      [](ir::Expr x, const Node&) { return ir::ceil(x); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("LeakyRelu", [](float x, const Node& n) {
    return x >= 0 ? x : x * n.get_float("alpha", 0.01f);
  },
      [](ir::Expr x, const Node& n) {
         return ir::select(x >= ir::f32(0.0), x, x * ir::f32(n.get_float("alpha", 0.01f)));
       }));
  describe(ops.back(), OpKind::Elementwise, {"alpha"});
  ops.push_back(unary("HardSigmoid", [](float x, const Node& n) {
    return max_nan(0.0f, min_nan(1.0f, n.get_float("alpha", 0.2f) * x + n.get_float("beta", 0.5f)));
  },
      [](ir::Expr x, const Node& n) {
         ir::Expr y = ir::f32(n.get_float("alpha", 0.2f)) * x + ir::f32(n.get_float("beta", 0.5f));
         return ir::max(ir::f32(0.0), ir::min(ir::f32(1.0), y));
       }));
  describe(ops.back(), OpKind::Elementwise, {"alpha", "beta"});
  ops.push_back(unary("Elu", [](float x, const Node& n) {
    return x < 0 ? n.get_float("alpha", 1.0f) * std::expm1(x) : x;
  },
      [](ir::Expr x, const Node& n) {
         ir::Expr e = ir::exp(ir::min(x, ir::f32(0.0))) - ir::f32(1.0);
         return ir::select(x < ir::f32(0.0), ir::f32(n.get_float("alpha", 1.0f)) * e, x);
       }));
  describe(ops.back(), OpKind::Elementwise, {"alpha"});
  ops.push_back(unary("Selu", [](float x, const Node& n) {
    float alpha = n.get_float("alpha", kSeluAlpha), gamma = n.get_float("gamma", kSeluGamma);
    return gamma * (x > 0 ? x : alpha * std::exp(x) - alpha);
  },
      [](ir::Expr x, const Node& n) {
         float alpha = n.get_float("alpha", kSeluAlpha), gamma = n.get_float("gamma", kSeluGamma);
         ir::Expr e = ir::f32(alpha) * ir::exp(ir::min(x, ir::f32(0.0))) - ir::f32(alpha);
         return ir::f32(gamma) * ir::select(te::gt(x, ir::f32(0.0)), x, e);
       }));
  describe(ops.back(), OpKind::Elementwise, {"alpha", "gamma"});
  ops.push_back(unary("Celu", [](float x, const Node& n) {
    float alpha = n.get_float("alpha", 1.0f);
    return max_nan(0.0f, x) + min_nan(0.0f, alpha * std::expm1(x / alpha));
  },
      [](ir::Expr x, const Node& n) {
         float alpha = n.get_float("alpha", 1.0f);
         ir::Expr e = ir::f32(alpha) * (ir::exp(ir::min(x, ir::f32(0.0)) / ir::f32(alpha)) - ir::f32(1.0));
         return ir::max(x, ir::f32(0.0)) + ir::min(ir::f32(0.0), e);
       }));
  describe(ops.back(), OpKind::Elementwise, {"alpha"});
  ops.push_back(unary("ThresholdedRelu", [](float x, const Node& n) {
    return x > n.get_float("alpha", 1.0f) ? x : 0.0f;
  },
      [](ir::Expr x, const Node& n) {
         return ir::select(te::gt(x, ir::f32(n.get_float("alpha", 1.0f))), x, ir::f32(0.0));
       }));
  describe(ops.back(), OpKind::Elementwise, {"alpha"});
  ops.push_back(unary("Softsign", [](float x, const Node&) { return x / (1 + std::fabs(x)); },
      [](ir::Expr x, const Node&) { return x / (ir::f32(1.0) + ir::fabs(x)); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("HardSwish", [](float x, const Node&) {
    return x * max_nan(0.0f, min_nan(1.0f, x / 6 + 0.5f));
  },
      [](ir::Expr x, const Node&) {
         return x *
                ir::max(ir::f32(0.0), ir::min(ir::f32(1.0), x * ir::f32(1.0 / 6) + ir::f32(0.5)));
       }));
  describe(ops.back(), OpKind::Elementwise);
  // Trigonometric and hyperbolic functions (opsets 7 and 9) from exp, log, sqrt, sin, cos and
  // atan_expr in compiled kernels; the reference evaluation calls libm's.
  ops.push_back(unary("Tan", [](float x, const Node&) { return std::tan(x); },
      [](ir::Expr x, const Node&) { return ir::sin(x) / ir::cos(x); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Sinh", [](float x, const Node&) { return std::sinh(x); },
      [](ir::Expr x, const Node&) { return ir::f32(0.5) * (ir::exp(x) - ir::exp(te::neg(x))); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Cosh", [](float x, const Node&) { return std::cosh(x); },
      [](ir::Expr x, const Node&) { return ir::f32(0.5) * (ir::exp(x) + ir::exp(te::neg(x))); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Atan", [](float x, const Node&) { return std::atan(x); },
      [](ir::Expr x, const Node&) { return atan_expr(x); }));
  describe(ops.back(), OpKind::Elementwise);
  // asin(x) = atan(x / sqrt((1 - x)(1 + x))); acos(x) = 2 atan(sqrt((1 - x) / (1 + x))): no
  // cancellation near |x| = 1. Past [-1, 1] the square roots give NaN, as asin's domain says.
  ops.push_back(unary("Asin", [](float x, const Node&) { return std::asin(x); },
      [](ir::Expr x, const Node&) {
         return atan_expr(x / ir::sqrt((ir::f32(1.0) - x) * (ir::f32(1.0) + x)));
       }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Acos", [](float x, const Node&) { return std::acos(x); },
      [](ir::Expr x, const Node&) {
         return ir::f32(2.0) * atan_expr(ir::sqrt((ir::f32(1.0) - x) / (ir::f32(1.0) + x)));
       }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Asinh", [](float x, const Node&) { return std::asinh(x); },
      [](ir::Expr x, const Node&) {  // odd: log(|x| + sqrt(x^2 + 1)) with x's sign
         ir::Expr ax = ir::fabs(x);
         ir::Expr y = ir::log(ax + ir::sqrt(ax * ax + ir::f32(1.0)));
         return ir::select(x < ir::f32(0.0), te::neg(y), y);
       }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Acosh", [](float x, const Node&) { return std::acosh(x); },
      [](ir::Expr x, const Node&) { return ir::log(x + ir::sqrt((x - ir::f32(1.0)) * (x + ir::f32(1.0)))); }));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(unary("Atanh", [](float x, const Node&) { return std::atanh(x); },
      [](ir::Expr x, const Node&) {
         return ir::f32(0.5) * ir::log((ir::f32(1.0) + x) / (ir::f32(1.0) - x));
       }));
  describe(ops.back(), OpKind::Elementwise);
  // Mish (opset 18): x tanh(softplus(x)).
  ops.push_back(unary("Mish", [](float x, const Node&) {
    return static_cast<float>(x * std::tanh(std::log1p(std::exp(double(x)))));
  },
      [](ir::Expr x, const Node&) {
         ir::Expr sp = ir::max(x, ir::f32(0.0)) + ir::log(ir::f32(1.0) + ir::exp(te::neg(ir::fabs(x))));
         return x * ir::tanh(sp);
       }));
  describe(ops.back(), OpKind::Elementwise);
  // Shrink (opset 9): x + bias below -lambd, x - bias above lambd, 0 between.
  ops.push_back(unary("Shrink", [](float x, const Node& n) {
    const float l = n.get_float("lambd", 0.5f), b = n.get_float("bias", 0.0f);
    return x < -l ? x + b : x > l ? x - b : 0.0f;
  },
      [](ir::Expr x, const Node& n) {
         const float l = n.get_float("lambd", 0.5f), b = n.get_float("bias", 0.0f);
         return ir::select(x < ir::f32(-l), x + ir::f32(b), ir::select(te::gt(x, ir::f32(l)), x - ir::f32(b), ir::f32(0.0)));
       }));
  describe(ops.back(), OpKind::Elementwise, {"bias", "lambd"});
  // IsNaN and IsInf (detect_negative, detect_positive): float32 in, bool out.
  for (const char* op : {"IsNaN", "IsInf"}) {
    const bool nan = std::string(op) == "IsNaN";
    OpDef d{op, 1, 1, nullptr, nullptr};
    d.infer = [](const OpContext& c) {
      require_float(c, 0);
      return std::vector<TypeShape>{{DType::Bool, c.in(0).shape}};
    };
    auto test = [nan](double v, const Node& n) {
      if (nan) return std::isnan(v);
      return std::isinf(v) && (v > 0 ? n.get_int("detect_positive", 1) != 0 : n.get_int("detect_negative", 1) != 0);
    };
    d.eval = [test](const OpContext& c, const std::vector<const HostTensor*>& in) {
      HostTensor out = make_like(DType::Bool, in[0]->shape);
      for (int64_t k = 0; k < out.size(); ++k) out.i[static_cast<size_t>(k)] = test(in[0]->as_double(k), c.node);
      return std::vector<HostTensor>{out};
    };
    d.te = te::unary_te([nan](ir::Expr x, const Node& n) {
      if (nan) return ir::select(ir::eq(x, x), ir::f32(0.0), ir::f32(1.0));
      const float inf = std::numeric_limits<float>::infinity();
      ir::Expr hit = ir::f32(0.0);
      if (n.get_int("detect_positive", 1) != 0) hit = ir::select(ir::eq(x, ir::f32(inf)), ir::f32(1.0), hit);
      if (n.get_int("detect_negative", 1) != 0) hit = ir::select(ir::eq(x, ir::f32(-inf)), ir::f32(1.0), hit);
      return hit;
    });
    ops.push_back(std::move(d));
    describe(ops.back(), OpKind::Elementwise, nan ? std::vector<std::string>{} : std::vector<std::string>{"detect_negative", "detect_positive"});
  }
  ops.push_back(binary("Add", BinKind::Arith, [](double a, double b) { return a + b; },
      te::binary_te([](ir::Expr a, ir::Expr b) { return a + b; })));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(binary("Sub", BinKind::Arith, [](double a, double b) { return a - b; },
      te::binary_te([](ir::Expr a, ir::Expr b) { return a - b; })));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(binary("Mul", BinKind::Arith, [](double a, double b) { return a * b; },
      te::binary_te([](ir::Expr a, ir::Expr b) { return a * b; })));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(binary("Div", BinKind::Arith, [](double a, double b) { return a / b; },
      te::div_te()));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(binary("Pow", BinKind::Arith, [](double a, double b) { return std::pow(a, b); },
      te::pow_te));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(variadic("Max", [](double a, double b) { return max_nan(a, b); },
      te::binary_te([](ir::Expr a, ir::Expr b) { return ir::max(a, b); })));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(variadic("Min", [](double a, double b) { return min_nan(a, b); },
      te::binary_te([](ir::Expr a, ir::Expr b) { return ir::min(a, b); })));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(variadic("Sum", [](double a, double b) { return a + b; },
      te::binary_te([](ir::Expr a, ir::Expr b) { return a + b; })));
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(variadic("Mean", [](double a, double b) { return a + b; },
      te::binary_te([](ir::Expr a, ir::Expr b) { return a + b; }, /*mean=*/true)));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(binary("PRelu", BinKind::Arith,
                       [](double x, double slope) { return x < 0 ? x * slope : x; },
      te::binary_te([](ir::Expr x, ir::Expr s) { return ir::select(x < ir::f32(0.0), x * s, x); })));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(binary_n("Mod", BinKind::Arith, [](double a, double b, const Node& n) {
    double r = std::fmod(a, b);  // fmod=1: the sign of the dividend (C's fmod)
    if (n.get_int("fmod", 0)) return r;
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;  // fmod=0: the sign of the divisor
  },
      te::mod_te));
  describe(ops.back(), OpKind::Elementwise, {"fmod"}, /*int64_exact=*/true);
  ops.push_back(binary("Equal", BinKind::Compare, [](double a, double b) { return a == b; },
      te::compare_te([](ir::Expr a, ir::Expr b) { return ir::eq(a, b); })));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(binary("Less", BinKind::Compare, [](double a, double b) { return a < b; },
      te::compare_te([](ir::Expr a, ir::Expr b) { return a < b; })));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(binary("Greater", BinKind::Compare, [](double a, double b) { return a > b; },
      te::compare_te([](ir::Expr a, ir::Expr b) { return te::gt(a, b); })));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(binary("LessOrEqual", BinKind::Compare, [](double a, double b) { return a <= b; },
      te::compare_te([](ir::Expr a, ir::Expr b) { return a <= b; })));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(
      binary("GreaterOrEqual", BinKind::Compare, [](double a, double b) { return a >= b; },
      te::compare_te([](ir::Expr a, ir::Expr b) { return a >= b; })));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(logical("Not", 1, [](bool a, bool) { return !a; },
      te::logic_te([](ir::Expr a_false, ir::Expr) { return ir::select(a_false, ir::f32(1.0), ir::f32(0.0)); })));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(logical("And", 2, [](bool a, bool b) { return a && b; },
      te::logic_te([](ir::Expr a_false, ir::Expr b_false) { return ir::select(a_false, ir::f32(0.0), ir::select(b_false, ir::f32(0.0), ir::f32(1.0))); })));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(logical("Or", 2, [](bool a, bool b) { return a || b; },
      te::logic_te([](ir::Expr a_false, ir::Expr b_false) { return ir::select(a_false, ir::select(b_false, ir::f32(0.0), ir::f32(1.0)), ir::f32(1.0)); })));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(logical("Xor", 2, [](bool a, bool b) { return a != b; },
      te::logic_te([](ir::Expr a_false, ir::Expr b_false) {
        return ir::select(a_false, ir::select(b_false, ir::f32(0.0), ir::f32(1.0)), ir::select(b_false, ir::f32(1.0), ir::f32(0.0)));
      })));
  describe(ops.back(), OpKind::Elementwise);
  ops.push_back(where_op());
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(clip_op());
  describe(ops.back(), OpKind::Elementwise, {}, /*int64_exact=*/true);
  ops.push_back(cast_op());
  // saturate (opset 19): how casts to float8 types saturate; those are refused (cast_target).
  describe(ops.back(), OpKind::Elementwise, {"to", "saturate", kStorageCast}, /*int64_exact=*/true);
}

}  // namespace tf::graph
