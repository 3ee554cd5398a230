// einsum-to-matmul: a two-operand Einsum that is a (batched) matrix product becomes Transpose,
// Reshape, MatMul, Reshape, Transpose nodes, so the matmul templates (and tuning) run it
// instead of Einsum's generic loop nest. MaxViT's attention, for example, exports
// "BGHID,BGHJD->BGHIJ" and "BGHIJ,BGHJD->BGHID".
//
// Each label is a batch label (in both operands and the output), a row label (first operand
// and output), a column label (second operand and output) or a contracted one (both operands,
// not the output). Operand A is transposed to [batch, rows, contracted] and reshaped to
// [B, M, K], operand B to [batch, contracted, columns] as [B, K, N] (B, M, N, K the products of
// their labels' extents; 1 for none), and the [B, M, N] product is reshaped to the labels
// and transposed to the output's order. Transposes that would not move anything are left out.
// Einsums with a label repeated in one operand (diagonals), a label summed out of one operand
// only, or other operand counts stay as they are.
#include <algorithm>
#include <numeric>

#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

bool has_repeats(const std::string& s) {
  std::string t = s;
  std::sort(t.begin(), t.end());
  return std::adjacent_find(t.begin(), t.end()) != t.end();
}

bool rewrite_einsum(Graph& g, const Node& n, std::vector<Node>& out) {
  if (n.op != "Einsum" || n.inputs.size() != 2 || n.inputs[0].empty() || n.inputs[1].empty()) return false;
  EinsumSpec s = einsum_spec(context(n, g, g.opset));
  const std::string &a = s.inputs[0], &b = s.inputs[1], &o = s.output;
  if (has_repeats(a) || has_repeats(b) || has_repeats(o)) return false;
  auto in = [](const std::string& s, char l) { return s.find(l) != std::string::npos; };
  std::string batch, rows, cols, sum;
  for (char l : o) {
    if (in(a, l) && in(b, l)) batch += l;
    else if (in(a, l)) rows += l;
    else cols += l;
  }
  for (char l : a) {
    if (in(b, l) && !in(o, l)) sum += l;
    else if (!in(b, l) && !in(o, l)) return false;  // summed out of A alone
  }
  for (char l : b) {
    if (!in(a, l) && !in(o, l)) return false;
  }
  auto product = [&](const std::string& labels) {
    int64_t p = 1;
    for (char l : labels) p *= s.extent.at(l);
    return p;
  };
  auto extents = [&](const std::string& labels) {
    Shape sh;
    for (char l : labels) sh.push_back(s.extent.at(l));
    return sh;
  };
  const int64_t B = product(batch), M = product(rows), N = product(cols), K = product(sum);
  auto ints = [&](const std::string& base, const std::vector<int64_t>& v) { return g.add_ints(n.name + "." + base, v); };
  auto value = [&](const std::string& base, const Shape& shape) { return g.add_float(n.outputs[0] + "." + base, shape); };
  // `from` (labels `have`) transposed to the order `want`, then reshaped to `shape`.
  auto arrange = [&](const std::string& from, const std::string& have, const std::string& want,
                     const Shape& shape, const std::string& tag) {
    std::string at = from;
    if (have != want) {
      std::vector<int64_t> perm;
      for (char l : want) perm.push_back(static_cast<int64_t>(have.find(l)));
      at = value(tag + "_t", extents(want));
      out.push_back(Node{n.name + "." + tag + "_t", "Transpose", {from}, {at}, {{"perm", perm}}});
    }
    std::string r = value(tag, shape);
    out.push_back(Node{n.name + "." + tag, "Reshape", {at, ints(tag + "_shape", shape)}, {r}, {}});
    return r;
  };
  const bool batched = !batch.empty();
  Shape sa = batched ? Shape{B, M, K} : Shape{M, K}, sb = batched ? Shape{B, K, N} : Shape{K, N};
  std::string lhs = arrange(n.inputs[0], a, batch + rows + sum, sa, "lhs");
  std::string rhs = arrange(n.inputs[1], b, batch + sum + cols, sb, "rhs");
  std::string prod = value("product", batched ? Shape{B, M, N} : Shape{M, N});
  out.push_back(Node{n.name + ".matmul", "MatMul", {lhs, rhs}, {prod}, {}});
  const std::string labels = batch + rows + cols;
  if (labels == o) {
    out.push_back(Node{n.name, "Reshape", {prod, ints("out_shape", extents(o))}, {n.outputs[0]}, {}});
    return true;
  }
  std::string r = value("labels", extents(labels));
  out.push_back(Node{n.name + ".labels", "Reshape", {prod, ints("labels_shape", extents(labels))}, {r}, {}});
  std::vector<int64_t> perm;
  for (char l : o) perm.push_back(static_cast<int64_t>(labels.find(l)));
  out.push_back(Node{n.name, "Transpose", {r}, {n.outputs[0]}, {{"perm", perm}}});
  return true;
}

}  // namespace

bool einsum_to_matmul(Graph& g) { return expand_nodes(g, rewrite_einsum); }

}  // namespace tf::graph
