// Tensor expressions: the declarative description of what a kernel computes.
//
// A placeholder is an input tensor. A compute operation defines each element of its output
// by an expression over its axis variables, optionally a Reduce over reduction axes. Nothing
// here says how to loop; that is the schedule's job (compiler/schedule.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir.h"

namespace tf::ir {

struct IterVar {
  Expr var;        // an Int64 Var
  int64_t extent;  // the axis runs over [0, extent)
  std::string name() const;
};

struct Operation {
  enum class Kind { Placeholder, Compute };
  Kind kind;
  std::string name;
  std::vector<int64_t> shape;
  Type dtype = Type::float32();      // of each element; a compute's is its body's type
  std::vector<IterVar> axes;         // compute: one per output dimension
  std::vector<IterVar> reduce_axes;  // compute: axes of the top-level Reduce, if any
  Expr body;                         // compute: the element at `axes`

  bool is_placeholder() const { return kind == Kind::Placeholder; }
  const Reduce* reduce() const { return body ? body.as<Reduce>() : nullptr; }
};

using Tensor = std::shared_ptr<const Operation>;

Tensor placeholder(const std::string& name, std::vector<int64_t> shape, Type dtype = Type::float32());

// `axis_names` names the output axes (one per dimension of `shape`). When the body is a
// reduction, `reduce_axes` lists its axes (made with reduce_axis) with their extents.
Tensor compute(const std::string& name, std::vector<int64_t> shape,
               const std::vector<std::string>& axis_names,
               const std::function<Expr(const std::vector<Expr>&)>& body,
               std::vector<IterVar> reduce_axes = {});

// A reduction axis for use in compute bodies.
IterVar reduce_axis(int64_t extent, const std::string& name);

// sum / max / product of `source` over `axes`; only at the top of a compute body.
Expr sum(Expr source, const std::vector<IterVar>& axes);
Expr max_reduce(Expr source, const std::vector<IterVar>& axes);
Expr prod_reduce(Expr source, const std::vector<IterVar>& axes);

Expr read(const Tensor& t, std::vector<Expr> indices);

// Elementwise float math, for compute bodies. exp, log, tanh, sin and cos call libm (the kernel
// library then depends on libm.so.6); sqrt and fabs are single instructions; floor, ceil and
// round_even (halves to even) are single instructions where the target has them (SSE4.1,
// NEON), else libm calls.
Expr exp(Expr x);
Expr log(Expr x);
Expr sqrt(Expr x);
Expr fabs(Expr x);
Expr tanh(Expr x);
Expr sin(Expr x);
Expr cos(Expr x);
Expr floor(Expr x);
Expr ceil(Expr x);
Expr round_even(Expr x);
// ONNX's QuantizeLinear of float x to uint8: x / scale rounded half to even, plus the zero
// point, saturated to [0, 255] (NaN: 0; as a saturating cast to int32 and a clamp). The
// int8 kernels quantize their input so, and a producer's epilogue that writes uint8 for them
// (QuantizeU8, graph/pass_int8_edges.cc) the same way, bit for bit.
Expr quantize_u8(Expr x, Expr scale, Expr zero_point);

// The operations `t` reads directly.
std::vector<Tensor> inputs_of(const Tensor& t);

}  // namespace tf::ir
