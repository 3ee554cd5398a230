#include "graph/import_recurrent.h"

#include <algorithm>
#include <tuple>

#include "base/error.h"
#include "graph/import_builder.h"
#include "graph/ops.h"

namespace tf::graph {
namespace {

struct Kind {
  int gates;                                // 1 (RNN), 3 (GRU: z, r, h), 4 (LSTM: i, o, f, c)
  std::vector<std::string> activations;     // per direction, the defaults
};

Kind kind_of(const std::string& op) {
  if (op == "RNN") return {1, {"Tanh"}};
  if (op == "GRU") return {3, {"Sigmoid", "Tanh"}};
  return {4, {"Sigmoid", "Tanh", "Tanh"}};
}

std::vector<std::string> attributes(const char* own) {
  std::vector<std::string> a = {"activation_alpha", "activation_beta", "activations", "clip",
                                "direction", "hidden_size", "layout"};
  if (*own) a.push_back(own);
  return a;
}

}  // namespace

bool expand_recurrent(const Node& n, ImportSink& sink) {
  Graph& g = sink.g;
  const std::string& file = sink.file;
  const std::function<void(Node)>& add = sink.add;
  int64_t& steps_left = sink.recurrent_steps_left;
  auto fail = [&](const std::string& why) { throw UserError(str(file, ": ", n.where(), ": ", why)); };
  const Kind kind = kind_of(n.op);
  // Inputs: X, W, R, B, sequence_lens, initial_h (, initial_c, P).
  // The input count and the attributes were checked against the entry (graph/ops.h).
  size_t count = n.inputs.size();
  while (count > 0 && n.inputs[count - 1].empty()) --count;
  auto input = [&](size_t k) { return k < n.inputs.size() ? n.inputs[k] : std::string(); };
  for (size_t k = 0; k < count; ++k) {
    if (!input(k).empty() && k != 4 && g.value(input(k)).dtype != DType::F32) {
      fail(str("input ", k, " ('", input(k), "') is ", dtype_name(g.value(input(k)).dtype),
               "; tunefarm supports float32"));
    }
  }
  const std::string direction = n.get_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    fail(str("direction '", direction, "' is not supported (forward, reverse, bidirectional)"));
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t layout = n.get_int("layout", 0);
  if (layout != 0 && layout != 1) fail(str("layout ", layout, " is not supported (0 or 1)"));
  if (n.has("clip")) fail("attribute 'clip' is not supported (no clipping of the gates)");
  if (n.get_int("input_forget", 0) != 0) fail("input_forget 1 is not supported (coupled gates)");
  if (n.has("activation_alpha") || n.has("activation_beta"))
    fail("activation_alpha and activation_beta are not supported (activations without parameters)");
  const int64_t lbr = n.get_int("linear_before_reset", 0);
  std::vector<std::string> acts;
  for (int64_t d = 0; d < dirs; ++d) acts.insert(acts.end(), kind.activations.begin(), kind.activations.end());
  if (n.has("activations")) {
    std::vector<std::string> given = n.get_strings("activations", {});
    if (given.size() != acts.size())
      fail(str("has ", given.size(), " activations; ", direction, " ", n.op, " takes ", acts.size()));
    for (std::string& a : given) {
      std::string lower = a;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower == "sigmoid") a = "Sigmoid";
      else if (lower == "tanh") a = "Tanh";
      else if (lower == "relu") a = "Relu";
      else fail(str("activation '", a, "' is not supported (Sigmoid, Tanh, Relu)"));
    }
    acts = given;
  }

  const Shape xs = g.value(input(0)).shape;
  if (xs.size() != 3) fail(str("input X ", shape_str(xs), " must have rank 3"));
  const int64_t seq = layout == 0 ? xs[0] : xs[1], batch = layout == 0 ? xs[1] : xs[0], in = xs[2];
  if (!n.has("hidden_size")) fail("attribute 'hidden_size' is required");
  const int64_t hidden = n.get_int("hidden_size", 0);
  const int64_t gh = kind.gates * hidden;
  if (hidden <= 0 || hidden > (int64_t{1} << 24)) fail(str("hidden_size ", hidden, " is out of range"));
  auto expect_shape = [&](size_t k, const char* what, const Shape& want) {
    if (input(k).empty()) return;
    const Shape& s = g.value(input(k)).shape;
    if (s != want)
      fail(str(what, " '", input(k), "' has shape ", shape_str(s), "; X ", shape_str(xs),
               ", hidden_size ", hidden, " and direction ", direction, " need ", shape_str(want)));
  };
  expect_shape(1, "W", {dirs, gh, in});
  expect_shape(2, "R", {dirs, gh, hidden});
  expect_shape(3, "B", {dirs, 2 * gh});
  expect_shape(5, "initial_h", layout == 0 ? Shape{dirs, batch, hidden} : Shape{batch, dirs, hidden});
  expect_shape(6, "initial_c", layout == 0 ? Shape{dirs, batch, hidden} : Shape{batch, dirs, hidden});
  if (!input(7).empty()) fail("peepholes (input P) are not supported");
  if (!input(4).empty()) {
    const Value& lens = g.value(input(4));
    bool full = lens.constant && lens.shape == Shape{batch};
    for (int64_t b = 0; full && b < batch; ++b) full = lens.constant->as_double(b) == double(seq);
    if (!full)
      fail(str("sequence_lens '", input(4), "' must be a constant of ", batch, " values all equal to the "
               "sequence length ", seq, " (shorter sequences are not supported)"));
  }
  if (seq * dirs > steps_left) {
    fail(str("sequence length ", seq, " x ", dirs, " directions is more than the ", kMaxRecurrentSteps,
             " time steps tunefarm unrolls in a model",
             steps_left < kMaxRecurrentSteps ? str(" (earlier recurrent nodes took ", kMaxRecurrentSteps - steps_left, ")") : ""));
  }
  steps_left -= seq * dirs;
  size_t outputs = std::min<size_t>(n.outputs.size(), n.op == "LSTM" ? 3 : 2);
  for (size_t k = outputs; k < n.outputs.size(); ++k) {
    if (!n.outputs[k].empty()) fail(str("has ", n.outputs.size(), " outputs; ", n.op, " has ", outputs));
  }
  auto out = [&](size_t k) { return k < n.outputs.size() ? n.outputs[k] : std::string(); };
  for (size_t k = 0; k < outputs; ++k) {
    if (!out(k).empty() && g.values.count(out(k)))
      fail(str("output ", k, " ('", out(k), "') is already defined"));
  }

  NodeBuilder u(n, g, add);
  // Sequence first: [seq, batch, in].
  std::string x = layout == 0 ? input(0) : u.transpose(input(0), {1, 0, 2});
  std::vector<std::string> ys, hs, cs;  // per direction: Y [seq, 1, batch, H], Y_h, Y_c [1, batch, H]
  for (int64_t d = 0; d < dirs; ++d) {
    auto act = [&](size_t k, const std::string& v) {
      return u.node(acts[static_cast<size_t>(d) * kind.activations.size() + k], {v});
    };
    // Weights transposed for x @ W^T: [in, gates*H] and [H, gates*H].
    std::string wt = u.transpose(u.reshape(u.slice(input(1), 0, d, d + 1), {gh, in}), {1, 0});
    std::string rt = u.transpose(u.reshape(u.slice(input(2), 0, d, d + 1), {gh, hidden}), {1, 0});
    std::string wb, rb;  // [gates*H] each
    if (!input(3).empty()) {
      std::string b = u.reshape(u.slice(input(3), 0, d, d + 1), {2 * gh});
      wb = u.slice(b, 0, 0, gh);
      rb = u.slice(b, 0, gh, 2 * gh);
    }
    // The input projection of every step at once: [seq, batch, gates*H].
    std::string xw = u.node("MatMul", {x, wt});
    // GRU keeps the recurrence bias apart (it sits inside r * (...) with linear_before_reset).
    if (n.op == "GRU") {
      if (!wb.empty()) xw = u.node("Add", {xw, wb});
    } else if (!wb.empty()) {
      xw = u.node("Add", {xw, u.node("Add", {wb, rb})});
    }
    auto initial = [&](size_t k) {
      if (input(k).empty()) return u.zeros({batch, hidden});
      return u.reshape(u.slice(input(k), layout == 0 ? 0 : 1, d, d + 1), {batch, hidden});
    };
    std::string h = initial(5), c = n.op == "LSTM" ? initial(6) : "";
    // GRU without linear_before_reset multiplies r * H before the recurrence of the h gate.
    std::string rt_zr, rt_h, rb_zr, rb_h;
    if (n.op == "GRU") {
      rt_zr = u.slice(rt, 1, 0, 2 * hidden);
      rt_h = u.slice(rt, 1, 2 * hidden, gh);
      if (!rb.empty()) {
        rb_zr = u.slice(rb, 0, 0, 2 * hidden);
        rb_h = u.slice(rb, 0, 2 * hidden, gh);
      }
    }
    std::vector<std::string> steps(static_cast<size_t>(seq));
    bool reverse = direction == "reverse" || d == 1;
    for (int64_t k = 0; k < seq; ++k) {
      int64_t t = reverse ? seq - 1 - k : k;
      std::string xt = u.reshape(u.slice(xw, 0, t, t + 1), {batch, gh});
      auto gate = [&](const std::string& v, int64_t j) { return u.slice(v, 1, j * hidden, (j + 1) * hidden); };
      if (n.op == "RNN") {
        h = act(0, u.node("Add", {xt, u.node("MatMul", {h, rt})}));
      } else if (n.op == "LSTM") {
        std::string gates = u.node("Add", {xt, u.node("MatMul", {h, rt})});
        std::string i = act(0, gate(gates, 0)), o = act(0, gate(gates, 1)), f = act(0, gate(gates, 2));
        std::string cc = act(1, gate(gates, 3));
        c = u.node("Add", {u.node("Mul", {f, c}), u.node("Mul", {i, cc})});
        h = u.node("Mul", {o, act(2, c)});
      } else {
        std::string hzr = u.node("MatMul", {h, lbr ? rt : rt_zr});
        if (!rb.empty()) hzr = u.node("Add", {hzr, lbr ? rb : rb_zr});
        std::string z = act(0, u.node("Add", {gate(xt, 0), gate(hzr, 0)}));
        std::string r = act(0, u.node("Add", {gate(xt, 1), gate(hzr, 1)}));
        std::string hr;
        if (lbr) {
          hr = u.node("Mul", {r, gate(hzr, 2)});
        } else {
          hr = u.node("MatMul", {u.node("Mul", {r, h}), rt_h});
          if (!rb.empty()) hr = u.node("Add", {hr, rb_h});
        }
        std::string hh = act(1, u.node("Add", {gate(xt, 2), hr}));
        // (1 - z) * hh + z * h = hh + z * (h - hh)
        h = u.node("Add", {hh, u.node("Mul", {z, u.node("Sub", {h, hh})})});
      }
      steps[static_cast<size_t>(t)] = h;
    }
    if (!out(0).empty()) {
      std::vector<std::string> parts;
      for (const std::string& s : steps) parts.push_back(u.reshape(s, {1, 1, batch, hidden}));
      ys.push_back(u.concat(parts, 0));
    }
    hs.push_back(u.reshape(h, {1, batch, hidden}));
    if (!c.empty()) cs.push_back(u.reshape(c, {1, batch, hidden}));
  }
  // Outputs, in the node's layout: Y [seq, dirs, batch, H] or [batch, seq, dirs, H]; Y_h and
  // Y_c [dirs, batch, H] or [batch, dirs, H].
  if (!out(0).empty()) {
    if (layout == 0) u.concat(ys, 1, out(0));
    else u.transpose(u.concat(ys, 1), {2, 0, 1, 3}, out(0));
  }
  for (size_t k = 1; k < outputs; ++k) {
    if (out(k).empty()) continue;
    const std::vector<std::string>& parts = k == 1 ? hs : cs;
    if (layout == 0) u.concat(parts, 0, out(k));
    else u.transpose(u.concat(parts, 0), {1, 0, 2}, out(k));
  }
  return true;
}

// Entries without an inference or evaluation of their own: the importer unrolls them.
// Inputs: X, W, R, B, sequence_lens, initial_h (, initial_c, P).
void register_recurrent_ops(std::vector<OpDef>& ops) {
  for (auto [op, max_inputs, own] : {std::tuple{"RNN", 6, ""}, {"GRU", 6, "linear_before_reset"},
                                     {"LSTM", 8, "input_forget"}}) {
    ops.push_back({op, 3, max_inputs, nullptr, nullptr});
    describe(ops.back(), OpKind::Opaque, attributes(own));
    ops.back().expand = expand_recurrent;
  }
}

}  // namespace tf::graph
