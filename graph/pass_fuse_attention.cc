// fuse-attention (cuda targets): scaled dot-product attention written as operators,
//   MatMul(Q, K^T) [Mul or Div by a one-element constant] [Add(mask)] Softmax(last axis) MatMul(., V),
// becomes one FusedAttention node, whose kernel (compiler/attention.h) keeps the scores and
// probabilities of a block's query rows in shared memory instead of writing them out, and
// whose fusion group takes in the layout and scaling operators that cut Q, K and V out of the
// projection (graph/fusion.h): BERT's seven kernels a layer between the QKV projection and the
// output projection become one. Where the scores of one query row do not fit a block's shared
// memory (more keys than max_attention_keys), the chain stays as it is.
//
// Also with a soft cap, Mul(Tanh(Div(scores, c)), c) before the mask, and the guard ONNX
// Attention's import puts after the Softmax where a row may be masked
// throughout: Where(Equal(ReduceMax(mask, last axis), -inf), 0, probabilities).
//
// FusedAttention: inputs q [..., Sq, D], kt [..., D, Sk], v [..., Sk, Dv] (the same leading
// dimensions, at least one), mask (optional; broadcasts to [..., Sq, Sk]); attributes scale and
// divisor (floats, default 1: the scores are (q kt) * scale / divisor + mask; softcap, default
// 0: none, else softcap * tanh(scores / softcap) before the mask), perm (ints,
// optional: a Transpose after it, which merged the heads back, taken in) and zero_masked_rows
// (int, default 0; 1: a row whose mask is -inf throughout has zero probabilities, not NaN);
// output [..., Sq, Dv] in perm's order. The Reshape usually after that Transpose is then a view (no kernel: graph/memory_plan.h). Its reference evaluation is the unfused operators' (MatMul, Mul, Div, Add,
// Softmax), run one after another.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "base/error.h"
#include "compiler/attention.h"
#include "graph/node_te.h"
#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

std::vector<TypeShape> attention_infer(const OpContext& c) {
  auto fail = [&](const std::string& why) { throw UserError(str(c.node.where(), ": ", why)); };
  for (size_t k = 0; k < c.count(); ++k) {
    if (c.present(k) && c.in(k).dtype != DType::F32)
      fail(str("input ", k, " ('", c.in(k).name, "') is ", dtype_name(c.in(k).dtype), ", not float32"));
  }
  const Shape &q = c.in(0).shape, &kt = c.in(1).shape, &v = c.in(2).shape;
  const size_t r = q.size();
  if (r < 3 || kt.size() != r || v.size() != r)
    fail(str("q, kt and v must have one rank of at least 3 (leading dimensions, then a matrix): ", shape_str(q), ", ",
             shape_str(kt), ", ", shape_str(v)));
  if (!std::equal(q.begin(), q.end() - 2, kt.begin()) || !std::equal(q.begin(), q.end() - 2, v.begin()))
    fail(str("q, kt and v must have the same leading dimensions: ", shape_str(q), ", ", shape_str(kt), ", ",
             shape_str(v)));
  if (kt[r - 2] != q[r - 1]) fail(str("kt ", shape_str(kt), " does not have q's depth ", q[r - 1]));
  if (v[r - 2] != kt[r - 1]) fail(str("v ", shape_str(v), " does not have kt's ", kt[r - 1], " keys"));
  Shape scores(q.begin(), q.end() - 1);
  scores.push_back(kt[r - 1]);
  // The scores are a tensor of the kernel's (and of the reference's) though not of the graph:
  // bounded as the graph's are, so a hostile model cannot make them unbounded.
  check_tensor_size(str(c.node.where(), ": the scores"), scores);
  if (c.present(3)) {
    const Shape& m = c.in(3).shape;
    if (!broadcasts_to(m, scores)) fail(str("mask ", shape_str(m), " does not broadcast to the scores ", shape_str(scores)));
  }
  Shape out(q.begin(), q.end() - 1);
  out.push_back(v[r - 1]);
  if (c.node.has("perm")) {
    const std::vector<int64_t> perm = c.node.get_ints("perm", {});
    if (!is_permutation(perm, r)) fail(str("perm ", shape_str(perm), " is not a permutation of the output's ", r, " dimensions"));
    Shape permuted;
    for (int64_t d : perm) permuted.push_back(out[static_cast<size_t>(d)]);
    out = permuted;
  }
  return {TypeShape{DType::F32, out}};
}

// One unfused operator's reference evaluation on host tensors.
HostTensor run_op(const OpContext& c, const std::string& op, const std::vector<const HostTensor*>& in,
                  std::map<std::string, Attr> attrs = {}) {
  std::vector<Value> values;
  std::vector<std::string> names;
  for (size_t k = 0; k < in.size(); ++k) {
    names.push_back(str("in", k));
    values.push_back(Value{names.back(), in[k]->dtype, in[k]->shape, std::nullopt});
  }
  Node n{c.node.name, op, names, {"out"}, std::move(attrs)};
  OpContext sub{n, c.opset, {}, false};
  for (const Value& v : values) sub.inputs.push_back(&v);
  return find_op(op)->eval(sub, in).at(0);
}

std::vector<HostTensor> attention_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  HostTensor s = run_op(c, "MatMul", {in[0], in[1]});
  for (const auto& [attr, op] : {std::pair{"scale", "Mul"}, std::pair{"divisor", "Div"}}) {
    const float f = c.node.get_float(attr, 1.0f);
    if (f == 1.0f) continue;
    HostTensor k = HostTensor::floats({}, {f});
    s = run_op(c, op, {&s, &k});
  }
  if (const float cap = c.node.get_float("softcap", 0.0f); cap > 0) {  // cap * tanh(s / cap)
    HostTensor k = HostTensor::floats({}, {cap});
    HostTensor scaled = run_op(c, "Div", {&s, &k});
    HostTensor t = run_op(c, "Tanh", {&scaled});
    s = run_op(c, "Mul", {&t, &k});
  }
  if (c.present(3)) s = run_op(c, "Add", {&s, in[3]});
  HostTensor p = run_op(c, "Softmax", {&s}, {{"axis", int64_t{-1}}});
  if (c.present(3) && c.node.get_int("zero_masked_rows", 0) != 0) {
    const HostTensor cond = fully_masked_rows(*in[3]);
    const HostTensor zero = HostTensor::floats({}, {0.0f});
    p = run_op(c, "Where", {&cond, &zero, &p});
  }
  HostTensor o = run_op(c, "MatMul", {&p, in[2]});
  if (c.node.has("perm")) o = run_op(c, "Transpose", {&o}, {{"perm", c.node.get_ints("perm", {})}});
  return {o};
}

std::vector<ir::Tensor> attention_node_te(const Graph&, const Node& n, const OpContext&, const std::vector<TeOperand>& in,
                                          const Shape&, const std::string& name) {
  return {fused_attention_te(n, in, name).out};
}

}  // namespace

Attention fused_attention_te(const Node& n, const std::vector<TeOperand>& in, const std::string& name) {
  for (size_t k = 0; k < 3; ++k) {
    if (!in[k].tensor)
      throw UserError(str(n.where(), ": compiling attention of a one-element constant input ", k, " is not implemented"));
  }
  const Shape& q = in[0].shape;
  const size_t r = q.size();
  AttentionSpec s;
  s.batch.assign(q.begin(), q.end() - 2);
  s.queries = q[r - 2];
  s.depth = q[r - 1];
  s.keys = in[1].shape[r - 1];
  s.value_depth = in[2].shape[r - 1];
  auto reader = [](const TeOperand& x) -> AttentionRead {
    return [x](const std::vector<ir::Expr>& i) { return read_broadcast(x, i); };
  };
  s.q = reader(in[0]);
  s.kt = reader(in[1]);
  s.v = reader(in[2]);
  if (in.size() > 3 && in[3].present()) s.mask = reader(in[3]);
  s.scale = n.get_float("scale", 1.0f);
  s.divisor = n.get_float("divisor", 1.0f);
  s.zero_masked_rows = s.mask && n.get_int("zero_masked_rows", 0) != 0;
  s.softcap = n.get_float("softcap", 0.0f);
  s.out_perm = n.get_ints("perm", {});
  return attention(s, name);
}


void register_attention_ops(std::vector<OpDef>& ops) {
  ops.push_back({kFusedAttention, 3, 4, attention_infer, attention_eval, attention_node_te, nullptr,
                 every_input_is_data, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Opaque, {"divisor", "perm", "scale", "softcap", "zero_masked_rows"});
  ops.back().fuses_operands = true;
}

bool fuse_attention(Graph& g) {
  std::map<std::string, int> uses = use_counts(g);
  std::map<std::string, size_t> producer;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (const std::string& o : g.nodes[k].outputs) producer[o] = k;
  }
  // The node computing `v`, where `v` has that one reader and is not returned.
  auto single = [&](const std::string& v) -> Node* {
    if (uses[v] != 1 || g.is_output(v)) return nullptr;
    auto it = producer.find(v);
    return it == producer.end() ? nullptr : &g.nodes[it->second];
  };
  auto scalar = [&](const std::string& v) -> std::optional<float> {
    const Value& x = g.value(v);
    if (!x.constant || x.dtype != DType::F32 || x.constant->size() != 1) return std::nullopt;
    return x.constant->f[0];
  };
  std::map<size_t, Node> replace;  // the second MatMul's index -> the fused node
  std::set<size_t> drop;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& mm2 = g.nodes[k];
    if (mm2.op != "MatMul") continue;
    Node* sm = single(mm2.inputs[0]);
    // Attention's guard of fully masked rows: Where(Equal(ReduceMax(mask), -inf), 0, Softmax).
    std::vector<size_t> guard;
    std::string guarded_mask;
    std::string guard_cond;  // a guard folded to a constant (a constant mask): checked below
    if (sm && sm->op == "Where" && scalar(sm->inputs[1]) == 0.0f && g.is_constant(sm->inputs[0]) &&
        g.value(sm->inputs[0]).dtype == DType::Bool) {
      guard = {static_cast<size_t>(sm - g.nodes.data())};
      guard_cond = sm->inputs[0];
      sm = single(sm->inputs[2]);
    } else if (sm && sm->op == "Where" && scalar(sm->inputs[1]) == 0.0f) {
      Node* eq = single(sm->inputs[0]);
      std::optional<float> inf = eq && eq->op == "Equal" ? scalar(eq->inputs[1]) : std::nullopt;
      Node* rmax = inf && std::isinf(*inf) && *inf < 0 ? single(eq->inputs[0]) : nullptr;
      if (rmax && rmax->op == "ReduceMax" && rmax->get_int("keepdims", 1) == 1 && rmax->inputs.size() == 2) {
        const Value& axes = g.value(rmax->inputs[1]);
        const auto mask_rank = static_cast<int64_t>(g.value(rmax->inputs[0]).shape.size());
        if (axes.constant && axes.constant->size() == 1 && mask_rank > 0 &&
            (axes.constant->i[0] == -1 || axes.constant->i[0] == mask_rank - 1)) {
          guard = {static_cast<size_t>(sm - g.nodes.data()), static_cast<size_t>(eq - g.nodes.data()),
                   static_cast<size_t>(rmax - g.nodes.data())};
          guarded_mask = rmax->inputs[0];
          sm = single(sm->inputs[2]);
        }
      }
    }
    if (!sm || sm->op != "Softmax") continue;
    const Shape& scores_shape = g.value(sm->outputs[0]).shape;
    const auto rank = static_cast<int64_t>(scores_shape.size());
    int64_t axis = sm->get_int("axis", g.opset >= 13 ? -1 : 1);
    if (axis < 0) axis += rank;
    if (rank < 3 || axis != rank - 1) continue;
    std::vector<size_t> chain = {k, static_cast<size_t>(sm - g.nodes.data())};
    // The scores' product, through at most one scaling by a one-element constant, and at most
    // one soft cap after it: Mul(Tanh(Div(scores, c)), c), as ONNX Attention's import writes it.
    struct Scores {
      Node* product = nullptr;
      float scale = 1.0f, divisor = 1.0f, softcap = 0.0f;
      std::vector<size_t> nodes;
    };
    auto trace = [&](const std::string& v) -> std::optional<Scores> {
      Node* p = single(v);
      if (!p || g.value(v).shape != scores_shape) return std::nullopt;
      Scores s;
      if (p->op == "Mul") {
        for (int side = 0; side < 2 && s.softcap == 0.0f; ++side) {
          std::optional<float> cap = scalar(p->inputs[1 - side]);
          Node* tanh = cap && *cap > 0 ? single(p->inputs[side]) : nullptr;
          Node* div = tanh && tanh->op == "Tanh" ? single(tanh->inputs[0]) : nullptr;
          if (!div || div->op != "Div" || scalar(div->inputs[1]) != cap) continue;
          Node* below = single(div->inputs[0]);
          if (!below || g.value(div->inputs[0]).shape != scores_shape) continue;
          s.softcap = *cap;
          for (const Node* m : {p, tanh, div}) s.nodes.push_back(static_cast<size_t>(m - g.nodes.data()));
          p = below;
        }
      }
      if (p->op == "Mul" || p->op == "Div") {
        Node* mm = nullptr;
        for (int side = 0; side < 2 && !mm; ++side) {
          if (p->op == "Div" && side == 1) break;  // c / scores is no scaling
          std::optional<float> c = scalar(p->inputs[1 - side]);
          Node* q = c ? single(p->inputs[side]) : nullptr;
          if (q && q->op == "MatMul") {
            mm = q;
            (p->op == "Mul" ? s.scale : s.divisor) = *c;
          }
        }
        if (!mm) return std::nullopt;
        s.nodes.push_back(static_cast<size_t>(p - g.nodes.data()));
        p = mm;
      }
      if (p->op != "MatMul") return std::nullopt;
      s.product = p;
      s.nodes.push_back(static_cast<size_t>(p - g.nodes.data()));
      return s;
    };
    std::optional<Scores> found = trace(sm->inputs[0]);
    std::string mask;
    if (Node* add = single(sm->inputs[0]); !found && add && add->op == "Add") {
      for (int side = 0; side < 2 && !found; ++side) {
        if ((found = trace(add->inputs[side]))) {
          mask = add->inputs[1 - side];
          chain.push_back(static_cast<size_t>(add - g.nodes.data()));
        }
      }
    }
    if (!found) continue;
    if (!guard_cond.empty()) {  // the constant guard must be the constant mask's rows
      if (mask.empty() || !g.is_constant(mask) || g.value(mask).dtype != DType::F32) continue;
      const HostTensor &cond = *g.value(guard_cond).constant, rows = fully_masked_rows(*g.value(mask).constant);
      if (cond.shape != rows.shape || cond.i != rows.i) continue;
    } else if (!guard.empty() && mask != guarded_mask) {
      continue;  // the guard reads another mask
    }
    chain.insert(chain.end(), guard.begin(), guard.end());
    Node* at = found->product;
    const float scale = found->scale, divisor = found->divisor;
    chain.insert(chain.end(), found->nodes.begin(), found->nodes.end());
    Node fused{mm2.name + ".attention", kFusedAttention, {at->inputs[0], at->inputs[1], mm2.inputs[1]},
               mm2.outputs, {}};
    if (!mask.empty()) fused.inputs.push_back(mask);
    if (scale != 1.0f) fused.attrs["scale"] = scale;
    if (divisor != 1.0f) fused.attrs["divisor"] = divisor;
    if (found->softcap > 0) fused.attrs["softcap"] = found->softcap;
    if (!guard.empty()) fused.attrs["zero_masked_rows"] = int64_t{1};
    // A Transpose merging the heads back: the kernel writes its output in that order.
    std::optional<size_t> merge;
    if (uses[mm2.outputs[0]] == 1 && !g.is_output(mm2.outputs[0])) {
      for (size_t j = k + 1; j < g.nodes.size() && !merge; ++j) {
        const Node& t = g.nodes[j];
        if (t.op == "Transpose" && t.inputs[0] == mm2.outputs[0]) {
          fused.attrs["perm"] = transpose_perm(t, static_cast<size_t>(rank));
          fused.outputs = t.outputs;
          merge = j;
        }
      }
    }
    // Operand shapes the kernel takes (no broadcast batch), keys a block holds.
    try {
      OpContext c{fused, g.opset, {}, false};
      for (const std::string& in : fused.inputs) c.inputs.push_back(&g.value(in));
      attention_infer(c);
    } catch (const UserError&) {
      continue;
    }
    if (g.value(at->inputs[1]).shape.back() > max_attention_keys()) continue;  // a row of scores past a block
    for (size_t j : chain) {
      if (j != k) drop.insert(j);
    }
    if (merge) drop.insert(*merge);
    replace.emplace(k, std::move(fused));
  }
  if (replace.empty()) return false;
  std::vector<Node> out;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (auto it = replace.find(k); it != replace.end())
      out.push_back(std::move(it->second));
    else if (!drop.count(k))
      out.push_back(std::move(g.nodes[k]));
  }
  g.nodes = std::move(out);
  topological_sort(g);  // a merged Transpose's readers may sit before it was
  drop_unused_values(g);
  return true;
}

}  // namespace tf::graph
