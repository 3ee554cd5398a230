// recognize-composites: finds the decompositions exporters write for LayerNorm, GELU, softmax
// and log-softmax and replaces each by one operator, which later stages compile as one kernel:
//   LayerNorm (PyTorch before opset 17):  d = x - ReduceMean(x); v = ReduceMean(Pow(d, 2));
//     y = d / Sqrt(v + eps) [* gamma] [+ beta], the means over the trailing axes, keepdims
//     -> LayerNormalization(x, gamma, beta) {axis, epsilon}
//   GELU (exact):  0.5 * (x * (1 + Erf(x / sqrt(2))))  in the association orders PyTorch
//     writes -> Gelu(x) (ONNX's Gelu of opset 20, approximate="none")
//   softmax:  e = Exp(x - ReduceMax(x)); y = e / ReduceSum(e), one axis, keepdims
//     -> Softmax(x) {axis}; also without the max subtraction (Exp(x) / ReduceSum(Exp(x)),
//     equal in exact arithmetic; the fused kernel subtracts the max, so it does not overflow)
//   log-softmax:  d = x - ReduceMax(x); y = d - Log(ReduceSum(Exp(d))) (or x - Log(ReduceSum(
//     Exp(x)))) -> LogSoftmax(x) {axis}
//   Softmax's axis means one axis from opset 13; before it, the trailing axes from `axis`, so
//   there only a reduction over the last axis is recognised.
// Every value inside a pattern must be read only inside it; constants must have the values
// the pattern needs (within float rounding).
#include <cmath>
#include <optional>

#include "graph/pass.h"

namespace tf::graph {
namespace {

class Matcher {
 public:
  explicit Matcher(Graph& g) : g_(g), uses_(use_counts(g)) {
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      for (const std::string& o : g.nodes[k].outputs) producer_[o] = k;
    }
  }

  // The node producing `v` if it has type `op` and `v` is read `uses` times.
  const Node* def(const std::string& v, const char* op, int uses = 1) const {
    auto it = producer_.find(v);
    if (it == producer_.end()) return nullptr;
    const Node& n = g_.nodes[it->second];
    if (n.op != op || use(v) != uses || is_output(v)) return nullptr;
    return &n;
  }
  int use(const std::string& v) const {
    auto it = uses_.find(v);
    return it == uses_.end() ? 0 : it->second;
  }
  bool is_output(const std::string& v) const { return g_.is_output(v); }
  // A scalar constant's value.
  std::optional<double> scalar(const std::string& v) const {
    if (!g_.is_constant(v)) return std::nullopt;
    const HostTensor& t = *g_.value(v).constant;
    if (t.size() != 1 || t.dtype != DType::F32) return std::nullopt;
    return t.f[0];
  }
  // The other input of a binary node, given one.
  static std::optional<std::string> other(const Node& n, const std::string& one) {
    if (n.inputs.size() != 2) return std::nullopt;
    if (n.inputs[0] == one) return n.inputs[1];
    if (n.inputs[1] == one) return n.inputs[0];
    return std::nullopt;
  }
  size_t index(const Node* n) const { return static_cast<size_t>(n - g_.nodes.data()); }

 private:
  Graph& g_;
  std::map<std::string, int> uses_;
  std::map<std::string, size_t> producer_;
};

bool near(std::optional<double> v, double want) {
  return v && std::fabs(*v - want) <= 1e-5 * std::fabs(want);
}

// Reduction axes of a ReduceMean with keepdims over the trailing `count` axes of rank `rank`;
// returns the first axis, or nullopt.
std::optional<int64_t> trailing_mean_axis(const Graph& g, const Node& n, size_t rank) {
  if (n.get_int("keepdims", 1) != 1 || n.inputs.size() != 1) return std::nullopt;
  std::vector<int64_t> axes = n.get_ints("axes", {});
  if (axes.empty()) return std::nullopt;
  for (int64_t& a : axes) a = a < 0 ? a + static_cast<int64_t>(rank) : a;
  std::sort(axes.begin(), axes.end());
  for (size_t k = 0; k < axes.size(); ++k) {
    if (axes[k] != static_cast<int64_t>(rank - axes.size() + k)) return std::nullopt;
  }
  return axes[0];
}

// The one axis a keepdims reduction reduces, normalised: axes from the attribute or (ReduceSum
// from opset 13) a constant second input; nullopt for anything else.
std::optional<int64_t> single_axis(const Graph& g, const Node& n, size_t rank) {
  if (n.get_int("keepdims", 1) != 1 || n.inputs.empty() || n.inputs.size() > 2) return std::nullopt;
  std::vector<int64_t> axes = n.get_ints("axes", {});
  if (n.inputs.size() == 2 && !n.inputs[1].empty()) {
    if (!g.is_constant(n.inputs[1])) return std::nullopt;
    const HostTensor& a = *g.value(n.inputs[1]).constant;
    axes.clear();
    for (int64_t k = 0; k < a.size(); ++k) axes.push_back(a.as_int(k));
  }
  if (axes.empty() && !n.get_int("noop_with_empty_axes", 0) && rank == 1) axes = {0};
  auto r = static_cast<int64_t>(rank);
  if (axes.size() != 1 || axes[0] < -r || axes[0] >= r) return std::nullopt;
  return axes[0] < 0 ? axes[0] + r : axes[0];
}

// Softmax(x) {axis} (or LogSoftmax) for a reduction over `axis` of x, where the graph's opset
// gives Softmax that meaning.
bool softmax_node(const Graph& g, const std::string& x, std::optional<int64_t> axis,
                  const Node& last, const char* op, Node& out) {
  size_t rank = g.value(x).shape.size();
  if (!axis || (g.opset < 13 && *axis != static_cast<int64_t>(rank) - 1)) return false;
  if (g.value(last.outputs[0]).shape != g.value(x).shape) return false;
  out = Node{last.name + "." + op, op, {x}, {last.outputs[0]}, {{"axis", *axis}}};
  return true;
}

// x - ReduceMax(x) at `v` (read `uses` times): fills x and the reduction's axis and adds the
// two nodes to `covered`.
bool match_max_shift(const Graph& g, const Matcher& m, std::string v, int uses, std::string& x,
                     std::optional<int64_t>& axis, std::vector<size_t>& covered) {
  const Node* sub = m.def(v, "Sub", uses);
  if (!sub) return false;
  const Node* max = m.def(sub->inputs[1], "ReduceMax");
  if (!max || max->inputs[0] != sub->inputs[0]) return false;
  x = sub->inputs[0];
  axis = single_axis(g, *max, g.value(x).shape.size());
  covered.push_back(m.index(max));
  covered.push_back(m.index(sub));
  return true;
}

// Matches softmax ending at the Div `div`.
bool match_softmax(const Graph& g, const Matcher& m, const Node& div, Node& out,
                   std::vector<size_t>& covered) {
  if (div.op != "Div") return false;
  const std::string& e = div.inputs[0];
  const Node* exp = m.def(e, "Exp", 2);
  const Node* sum = m.def(div.inputs[1], "ReduceSum");
  if (!exp || !sum || sum->inputs[0] != e) return false;
  std::string x = exp->inputs[0];
  std::optional<int64_t> axis = single_axis(g, *sum, g.value(x).shape.size()), shift;
  covered.clear();
  if (match_max_shift(g, m, x, 1, x, shift, covered) && shift != axis) return false;
  covered.insert(covered.end(), {m.index(exp), m.index(sum), m.index(&div)});
  return softmax_node(g, x, axis, div, "Softmax", out);
}

// Matches log-softmax ending at the Sub `sub`.
bool match_log_softmax(const Graph& g, const Matcher& m, const Node& sub, Node& out,
                       std::vector<size_t>& covered) {
  if (sub.op != "Sub") return false;
  std::string x = sub.inputs[0];
  const Node* log = m.def(sub.inputs[1], "Log");
  const Node* sum = log ? m.def(log->inputs[0], "ReduceSum") : nullptr;
  const Node* exp = sum ? m.def(sum->inputs[0], "Exp") : nullptr;
  if (!exp || exp->inputs[0] != x) return false;
  std::optional<int64_t> axis = single_axis(g, *sum, g.value(x).shape.size()), shift;
  covered.clear();
  if (match_max_shift(g, m, x, 2, x, shift, covered) && shift != axis) return false;
  covered.insert(covered.end(), {m.index(exp), m.index(sum), m.index(log), m.index(&sub)});
  return softmax_node(g, x, axis, sub, "LogSoftmax", out);
}

// Matches LayerNorm ending at the Div `div`; fills the replacement and the nodes it covers.
bool match_layernorm(Graph& g, const Matcher& m, const Node& div, Node& out,
                     std::vector<size_t>& covered) {
  if (div.op != "Div") return false;
  const std::string& d = div.inputs[0];
  const Node* sqrt = m.def(div.inputs[1], "Sqrt");
  const Node* sub = m.def(d, "Sub", 2);
  if (!sqrt || !sub) return false;
  const std::string& x = sub->inputs[0];
  const Node* mean = m.def(sub->inputs[1], "ReduceMean");
  const Node* add_eps = m.def(sqrt->inputs[0], "Add");
  if (!mean || !add_eps || mean->inputs[0] != x) return false;
  size_t rank = g.value(x).shape.size();
  std::optional<int64_t> axis = trailing_mean_axis(g, *mean, rank);
  if (!axis) return false;
  const Node* var = nullptr;
  std::optional<double> eps;
  for (int side = 0; side < 2 && !var; ++side) {
    var = m.def(add_eps->inputs[side], "ReduceMean");
    eps = m.scalar(add_eps->inputs[1 - side]);
  }
  if (!var || !eps || trailing_mean_axis(g, *var, rank) != axis) return false;
  const Node* pow = m.def(var->inputs[0], "Pow");
  if (!pow || pow->inputs[0] != d || !near(m.scalar(pow->inputs[1]), 2.0)) return false;
  covered = {m.index(mean),    m.index(sub),  m.index(pow), m.index(var),
             m.index(add_eps), m.index(sqrt), m.index(&div)};
  // Optional scale and shift: constants of the normalized shape.
  Shape norm(g.value(x).shape.begin() + *axis, g.value(x).shape.end());
  auto fits = [&](const std::string& c) {
    if (!g.is_constant(c) || g.value(c).dtype != DType::F32) return false;
    const Shape& s = g.value(c).shape;
    return s.size() <= norm.size() && std::equal(s.rbegin(), s.rend(), norm.rbegin());
  };
  std::string y = div.outputs[0], gamma, beta;
  auto next = [&](const std::string& v, const char* op) -> const Node* {
    for (const Node& n : g.nodes) {
      if (n.op == op && m.use(v) == 1 && !m.is_output(v) && (n.inputs[0] == v || n.inputs[1] == v))
        return &n;
    }
    return nullptr;
  };
  if (const Node* mul = next(y, "Mul"); mul && fits(*Matcher::other(*mul, y))) {
    gamma = *Matcher::other(*mul, y);
    covered.push_back(m.index(mul));
    y = mul->outputs[0];
    if (const Node* add = next(y, "Add"); add && fits(*Matcher::other(*add, y))) {
      beta = *Matcher::other(*add, y);
      covered.push_back(m.index(add));
      y = add->outputs[0];
    }
  }
  if (gamma.empty()) {
    gamma = g.fresh_name(div.name + ".gamma");
    g.values[gamma] = Value{gamma, DType::F32, norm,
                            HostTensor::floats(norm, std::vector<float>(num_elements(norm), 1.0f))};
  } else if (g.value(gamma).shape != norm) {
    return false;  // a broadcast scale: keep the decomposition (LayerNormalization takes it, but
                   // keep it simple)
  }
  out = Node{div.name + ".layernorm",
             "LayerNormalization",
             {x, gamma},
             {y},
             {{"axis", *axis}, {"epsilon", static_cast<float>(*eps)}}};
  if (!beta.empty()) out.inputs.push_back(beta);
  return true;
}

// Matches GELU ending at the outer Mul by 0.5.
bool match_gelu(const Matcher& m, const Node& half, Node& out, std::vector<size_t>& covered) {
  if (half.op != "Mul") return false;
  for (int side = 0; side < 2; ++side) {
    if (!near(m.scalar(half.inputs[1 - side]), 0.5)) continue;
    const Node* mul = m.def(half.inputs[side], "Mul");
    if (!mul) continue;
    for (int s2 = 0; s2 < 2; ++s2) {
      const std::string& x = mul->inputs[s2];
      const Node* add = m.def(mul->inputs[1 - s2], "Add");
      if (!add) continue;
      for (int s3 = 0; s3 < 2; ++s3) {
        if (!near(m.scalar(add->inputs[1 - s3]), 1.0)) continue;
        const Node* erf = m.def(add->inputs[s3], "Erf");
        if (!erf) continue;
        const Node* div = m.def(erf->inputs[0], "Div");
        if (!div || div->inputs[0] != x || !near(m.scalar(div->inputs[1]), std::sqrt(2.0)))
          continue;
        covered = {m.index(div), m.index(erf), m.index(add), m.index(mul), m.index(&half)};
        out = Node{half.name + ".gelu", "Gelu", {x}, {half.outputs[0]}, {}};
        return true;
      }
    }
  }
  return false;
}

}  // namespace

bool recognize_composites(Graph& g) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    Matcher m(g);
    for (size_t k = 0; k < g.nodes.size() && !again; ++k) {
      Node fused;
      std::vector<size_t> covered;
      if (!match_layernorm(g, m, g.nodes[k], fused, covered) &&
          !match_gelu(m, g.nodes[k], fused, covered) &&
          !match_softmax(g, m, g.nodes[k], fused, covered) &&
          !match_log_softmax(g, m, g.nodes[k], fused, covered))
        continue;
      // The fused node takes the place of the last node it covers (its inputs are defined
      // before the first).
      size_t last = *std::max_element(covered.begin(), covered.end());
      std::sort(covered.begin(), covered.end());
      for (size_t c : covered) {
        if (c == last) continue;
        for (const std::string& o : g.nodes[c].outputs) g.values.erase(o);
      }
      g.nodes[last] = fused;
      for (auto it = covered.rbegin(); it != covered.rend(); ++it) {
        if (*it != last) g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(*it));
      }
      again = changed = true;
    }
  }
  if (changed) drop_unused_values(g);
  return changed;
}

}  // namespace tf::graph
