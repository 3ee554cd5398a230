#include "graph/node_te.h"

#include "base/error.h"
#include "graph/fusion.h"
#include "graph/ops.h"
#include "graph/te_kit.h"

namespace tf::graph {

using te::Expr;
using te::Index;
using te::Tensor;

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
  const OpDef* def = find_op(n.op);
  return k == 0 || (def && def->data_input && def->data_input(g, n, k));
}

// Gather's constant indices are unrolled into the code up to kMaxUnrolledIndices; more are
// read from a table like computed ones.
bool gather_data_input(const Graph& g, const Node& n, size_t k) {
  if (k != 1) return false;
  const Value& idx = g.value(n.inputs[1]);
  return idx.constant && idx.constant->size() > kMaxUnrolledIndices;
}

std::vector<Tensor> node_te(const Graph& g, const Node& n, const std::vector<TeOperand>& in,
                            const std::string& prefix, const Shape* elementwise_shape, bool gpu) {
  // The operator's registry entry makes its expressions (graph/ops.h, OpDef::te).
  const OpDef* def = find_op(n.op);
  for (const std::string& o : n.outputs) {
    if (!o.empty() && g.value(o).dtype == DType::I64 && !(def && def->int64_exact))
      te::not_implemented(n, str(n.op, " with an int64 result"));
  }
  if (!def || !def->te) te::not_implemented(n, n.op);
  OpContext c = context(n, g, g.opset);
  c.gpu = gpu;
  const Shape& out = elementwise_shape ? *elementwise_shape : g.value(n.outputs[0]).shape;
  return def->te(g, n, c, in, out, prefix + n.op);
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

ir::Type kernel_type(DType t) { return is_storage16(t) ? ir::Type::uint16() : ir::Type::float32(); }

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
        const Value& v = g.value(n.inputs[i]);
        in.push_back(TeOperand{
            v.shape, ir::placeholder(str("arg", i), v.shape, kernel_type(v.dtype)), std::nullopt});
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
