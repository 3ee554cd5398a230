#include "compiler/te.h"

#include "compiler/ir_mutator.h"

namespace tf::ir {

std::string IterVar::name() const { return var.as<Var>()->name; }

Tensor placeholder(const std::string& name, std::vector<int64_t> shape, Type dtype) {
  TF_CHECK(dtype.lanes == 1 && !dtype.is_bool() && !dtype.is_index(), "placeholder ", name, " of type ", dtype.str());
  auto op = std::make_shared<Operation>();
  op->kind = Operation::Kind::Placeholder;
  op->name = name;
  op->shape = std::move(shape);
  op->dtype = dtype;
  return op;
}

Tensor compute(const std::string& name, std::vector<int64_t> shape,
               const std::vector<std::string>& axis_names,
               const std::function<Expr(const std::vector<Expr>&)>& body,
               std::vector<IterVar> reduce_axes) {
  TF_CHECK(axis_names.size() == shape.size(), "compute ", name, ": ", axis_names.size(),
           " axis names for ", shape.size(), " dimensions");
  auto op = std::make_shared<Operation>();
  op->kind = Operation::Kind::Compute;
  op->name = name;
  op->shape = shape;
  std::vector<Expr> vars;
  for (size_t i = 0; i < shape.size(); ++i) {
    op->axes.push_back({Var::make(axis_names[i]), shape[i]});
    vars.push_back(op->axes.back().var);
  }
  op->body = body(vars);
  op->dtype = op->body.type();
  TF_CHECK(op->dtype.lanes == 1 && !op->dtype.is_bool() && !op->dtype.is_index(), "compute ", name, " of type ",
           op->dtype.str());
  const Reduce* r = op->body.as<Reduce>();
  TF_CHECK((r ? r->axes.size() : 0) == reduce_axes.size(), "compute ", name,
           ": reduce axes do not match the body");
  op->reduce_axes = std::move(reduce_axes);
  return op;
}

IterVar reduce_axis(int64_t extent, const std::string& name) { return {Var::make(name), extent}; }

static Expr reduce(ReduceKind k, Expr source, const std::vector<IterVar>& axes) {
  std::vector<Expr> vars;
  for (const IterVar& iv : axes) vars.push_back(iv.var);
  return Reduce::make(k, std::move(source), std::move(vars));
}

Expr sum(Expr source, const std::vector<IterVar>& axes) {
  return reduce(ReduceKind::Sum, std::move(source), axes);
}
Expr max_reduce(Expr source, const std::vector<IterVar>& axes) {
  return reduce(ReduceKind::Max, std::move(source), axes);
}
Expr prod_reduce(Expr source, const std::vector<IterVar>& axes) {
  return reduce(ReduceKind::Prod, std::move(source), axes);
}

Expr read(const Tensor& t, std::vector<Expr> indices) {
  TF_CHECK(indices.size() == t->shape.size(), "read of ", t->name, " with ", indices.size(),
           " indices for ", t->shape.size(), " dimensions");
  return TensorRead::make(t, std::move(indices));
}

static Expr math(const char* name, Expr x) {
  TF_CHECK(x.type().is_float(), name, " of ", x.type().str());
  return Call::make(name, {std::move(x)});
}
Expr exp(Expr x) { return math("exp", std::move(x)); }
Expr log(Expr x) { return math("log", std::move(x)); }
Expr sqrt(Expr x) { return math("sqrt", std::move(x)); }
Expr fabs(Expr x) { return math("fabs", std::move(x)); }
Expr tanh(Expr x) { return math("tanh", std::move(x)); }
Expr sin(Expr x) { return math("sin", std::move(x)); }
Expr cos(Expr x) { return math("cos", std::move(x)); }
Expr floor(Expr x) { return math("floor", std::move(x)); }
Expr ceil(Expr x) { return math("ceil", std::move(x)); }
Expr round_even(Expr x) { return math("roundeven", std::move(x)); }

Expr quantize_u8(Expr x, Expr scale, Expr zero_point) {
  // One saturating conversion to uint8 (NaN: 0; below 0: 0; above 255: 255) is what a
  // conversion to int32 and a clamp to [0, 255] give, in fewer instructions.
  return Cast::make(Type::uint8(), round_even(std::move(x) / std::move(scale)) + std::move(zero_point));
}

std::vector<Tensor> inputs_of(const Tensor& t) {
  std::vector<Tensor> out;
  if (!t->body) return out;
  post_order(t->body, [&](const Expr& e) {
    const TensorRead* r = e.as<TensorRead>();
    if (!r) return;
    for (const Tensor& o : out) {
      if (o == r->op) return;
    }
    out.push_back(r->op);
  });
  return out;
}

}  // namespace tf::ir
