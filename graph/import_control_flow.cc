#include "graph/import_control_flow.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "base/error.h"
#include "graph/import_builder.h"
#include "graph/onnx_import.h"

namespace tf::graph {

std::string define_in(Scope& scope, const std::string& v, const ControlFlowImport& cf) {
  if (scope.prefix.empty() || v.empty()) return v;
  std::string name = cf.unused(scope.prefix + v);
  scope.names[v] = name;
  return name;
}

namespace {

// One control-flow node's expansion: its checks, its subgraphs' imports, the nodes joining them.
class Unroller {
 public:
  Unroller(const onnx::NodeProto& np, const std::string& name, Scope& scope, ControlFlowImport& cf)
      : np_(np), scope_(scope), cf_(cf), node_{name, np.op_type(), {}, {}, {}}, b_(node_, cf.g, cf.add) {}

  void if_node() {
    if (np_.input_size() != 1 || np_.input(0).empty()) fail("takes one input, the condition");
    const std::string cond = scope_.resolve(np_.input(0));
    const Value& c = condition(cond, "its condition");
    if (c.constant) {
      const bool taken = c.constant->as_int(0) != 0;
      const char* which = taken ? "then_branch" : "else_branch";
      Scope body = child(taken ? "then/" : "else/");
      const onnx::GraphProto& branch = import_branch(which, body);
      for (int k = 0; k < np_.output_size(); ++k) give(output(branch, body, k), np_.output(k));
      return;
    }
    // A condition known only at run time: both branches computed, each output selected by
    // it (Where), which needs each output of the two branches to be tensors of one type and
    // shape. Every kernel bounds its reads whatever the data (computed indices are clamped),
    // so computing the branch not taken is safe; its values are dropped.
    Scope then_scope = child("then/"), else_scope = child("else/");
    const onnx::GraphProto& then_g = import_branch("then_branch", then_scope);
    const onnx::GraphProto& else_g = import_branch("else_branch", else_scope);
    const std::string scalar = b_.reshape(cond, {});
    for (int k = 0; k < np_.output_size(); ++k) {
      const std::string t = output(then_g, then_scope, k), e = output(else_g, else_scope, k);
      if (np_.output(k).empty()) continue;
      const Selection what{str("its condition '", cond, "'"), "both branches are computed and each output selected",
                           str("output ", k), "in then_branch", "in else_branch"};
      selected(scalar, t, e, what, define_in(scope_, np_.output(k), cf_));
    }
    ++cf_.g.written_out.ifs_selected;
  }

  // A selection by a condition known only at run time, as its messages name it: the
  // condition, how the node computes under it, the value selected, and where its two sides come from.
  struct Selection {
    std::string condition, how, value;
    const char *first, *second;
  };
  // Where(cond, a, b) (into `out` when given): a and b must be tensors of one type and shape.
  std::string selected(const std::string& cond, const std::string& a, const std::string& b, const Selection& s,
                       const std::string& out = "") {
    if (cf_.sequences.count(a) || cf_.sequences.count(b))
      fail(str(s.condition, " is computed at run time and ", s.value, " is a sequence; only tensors can be selected at "
               "run time"));
    const Value &av = cf_.g.value(a), &bv = cf_.g.value(b);
    if (av.dtype != bv.dtype || av.shape != bv.shape) {
      fail(str(s.condition, " is computed at run time, so ", s.how, ", but ", s.value, " is ", dtype_name(av.dtype),
               shape_str(av.shape), " ", s.first, " and ", dtype_name(bv.dtype), shape_str(bv.shape), " ", s.second));
    }
    return b_.node("Where", {cond, a, b}, {}, out);
  }

  // Imports If's branch `which` into `body`, checking that it fits the node.
  const onnx::GraphProto& import_branch(const char* which, Scope& body) {
    const onnx::GraphProto& branch = graph_attribute(which);
    if (branch.input_size() != 0) fail(str(which, " has inputs; a branch has none"));
    if (branch.output_size() != np_.output_size())
      fail(str(which, " has ", branch.output_size(), " outputs; the node has ", np_.output_size()));
    import_body(branch, body);
    return branch;
  }

  void loop_node() {
    if (np_.input_size() < 2) fail("takes at least two inputs (M and cond, either may be empty)");
    const onnx::GraphProto& body = graph_attribute("body");
    const int carried = np_.input_size() - 2;
    if (body.input_size() != 2 + carried) {
      fail(str("its body has ", body.input_size(), " inputs; with ", carried,
               " loop-carried values it must have ", 2 + carried, " (iteration number, condition, the values)"));
    }
    if (body.output_size() < 1 + carried) {
      fail(str("its body has ", body.output_size(), " outputs; with ", carried,
               " loop-carried values it must have at least ", 1 + carried));
    }
    const int scans = body.output_size() - 1 - carried;
    if (np_.output_size() > carried + scans) {
      fail(str("has ", np_.output_size(), " outputs; its body gives ", carried, " loop-carried values and ", scans,
               " scan outputs"));
    }
    const bool has_m = !np_.input(0).empty(), has_cond = !np_.input(1).empty();
    if (!has_m && !has_cond) fail("has neither a trip count M nor a condition: it would run forever");
    int64_t trips = std::numeric_limits<int64_t>::max();
    if (has_m) {
      const Value& m = constant(scope_.resolve(np_.input(0)), "its trip count M", "Loop");
      if (m.dtype != DType::I64 || m.constant->size() != 1)
        fail(str("its trip count M '", m.name, "' is ", dtype_name(m.dtype), shape_str(m.shape), "; it must be one int64"));
      trips = m.constant->as_int(0);
    }
    // The condition: a constant, or (`running`, a scalar bool) one known only at run time.
    // From the iteration it becomes a run-time value on, each iteration's carried values are
    // selected by it (Where: the values of the iterations after it turned false are dropped),
    // which needs a constant trip count, carried tensors of one type and shape through the
    // iterations and no scan outputs (their length would be known only at run time).
    bool go = true;
    std::string running;
    auto take_condition = [&](const std::string& c, const std::string& what) {
      const Value& v = condition(c, what);
      if (v.constant) {  // false stops the loop; true changes nothing of a run-time condition
        go = v.constant->as_int(0) != 0;
        return;
      }
      if (!has_m || trips > kMaxUnrolledIterations) {
        fail(str(what, " '", c, "' is computed at run time and the trip count is ",
                 has_m ? str(trips) : std::string("not given"),
                 "; tunefarm compiles one static graph, so such a loop needs a constant trip count of at most ",
                 kMaxUnrolledIterations, " (each iteration runs, its values selected while the condition holds)"));
      }
      if (scans > 0) {
        fail(str(what, " '", c, "' is computed at run time, so its ", scans,
                 " scan outputs would have a length known only at run time"));
      }
      const std::string scalar = b_.reshape(c, {});
      running = running.empty() ? scalar : b_.node("And", {running, scalar});
    };
    if (has_cond) take_condition(scope_.resolve(np_.input(1)), "its condition");
    std::vector<std::string> values;
    for (int k = 0; k < carried; ++k) {
      if (np_.input(2 + k).empty()) fail(str("loop-carried input ", k, " is empty"));
      values.push_back(scope_.resolve(np_.input(2 + k)));
      if (!cf_.defined(values.back())) fail(str("reads '", values.back(), "', which is not defined before it"));
    }
    std::vector<std::vector<std::string>> stacked(static_cast<size_t>(scans));
    int64_t t = 0;
    for (; t < trips && go; ++t) {
      step();
      Scope it = child(str("iter", t, "/"));
      bind(it, body.input(0).name(), constant_of(str(node_.name, "/iteration_", t), HostTensor::ints({}, {t})));
      bind(it, body.input(1).name(),
           running.empty()
               ? constant_of(str(node_.name, "/condition_", t), HostTensor::ints({}, {int64_t{1}}, DType::Bool))
               : running);
      for (int k = 0; k < carried; ++k) bind(it, body.input(2 + k).name(), values[static_cast<size_t>(k)]);
      import_body(body, it);
      for (int k = 0; k < carried; ++k) {
        const std::string next = output(body, it, 1 + k), &last = values[static_cast<size_t>(k)];
        const Selection what{"its condition", "each iteration's values are selected by it",
                             str("loop-carried value ", k), "after an iteration", "before it"};
        values[static_cast<size_t>(k)] = running.empty() ? next : selected(running, next, last, what);
      }
      for (int k = 0; k < scans; ++k)
        stacked[static_cast<size_t>(k)].push_back(output(body, it, 1 + carried + k));
      // Without a condition input the body's condition is ignored (ONNX: a for loop).
      if (has_cond) take_condition(output(body, it, 0), str("iteration ", t, "'s condition"));
    }
    for (int k = 0; k < np_.output_size(); ++k) {
      if (k < carried) {
        give(values[static_cast<size_t>(k)], np_.output(k));
      } else if (!np_.output(k).empty()) {
        if (t == 0) fail(str("runs no iteration, so its scan output '", np_.output(k), "' would be empty"));
        give(stack(stacked[static_cast<size_t>(k - carried)], 0), np_.output(k));
      }
    }
  }

  void scan_node() {
    const onnx::GraphProto& body = graph_attribute("body");
    const int64_t m = int_attribute("num_scan_inputs", -1);
    const int inputs = np_.input_size();
    if (m < 1 || m > inputs) fail(str("num_scan_inputs ", m, " is not between 1 and its ", inputs, " inputs"));
    const int states = inputs - static_cast<int>(m);
    if (body.input_size() != inputs)
      fail(str("its body has ", body.input_size(), " inputs; the node has ", inputs, " (states and scan inputs)"));
    if (body.output_size() < states)
      fail(str("its body has ", body.output_size(), " outputs; it must have at least the ", states, " states"));
    const int scans = body.output_size() - states;
    if (np_.output_size() > states + scans)
      fail(str("has ", np_.output_size(), " outputs; its body gives ", states, " states and ", scans, " scan outputs"));
    const std::vector<int64_t> in_axes = ints_attribute("scan_input_axes", std::vector<int64_t>(m, 0), m);
    const std::vector<int64_t> in_dirs = ints_attribute("scan_input_directions", std::vector<int64_t>(m, 0), m);
    const std::vector<int64_t> out_axes = ints_attribute("scan_output_axes", std::vector<int64_t>(scans, 0), scans);
    const std::vector<int64_t> out_dirs =
        ints_attribute("scan_output_directions", std::vector<int64_t>(scans, 0), scans);
    for (int64_t d : in_dirs) {
      if (d != 0 && d != 1) fail(str("scan_input_directions has ", d, "; directions are 0 (forward) or 1 (reverse)"));
    }
    for (int64_t d : out_dirs) {
      if (d != 0 && d != 1) fail(str("scan_output_directions has ", d, "; directions are 0 (forward) or 1 (reverse)"));
    }
    std::vector<std::string> values, xs;
    std::vector<int64_t> axes;
    int64_t length = -1;
    for (int k = 0; k < inputs; ++k) {
      if (np_.input(k).empty()) fail(str("input ", k, " is empty"));
      const std::string v = scope_.resolve(np_.input(k));
      if (!cf_.defined(v)) fail(str("reads '", v, "', which is not defined before it"));
      if (k < states) {
        values.push_back(v);
        continue;
      }
      if (cf_.sequences.count(v)) fail(str("scan input '", v, "' is a sequence; scan inputs are tensors"));
      const Value& x = cf_.g.value(v);
      const size_t j = static_cast<size_t>(k - states);
      const auto rank = static_cast<int64_t>(x.shape.size());
      if (in_axes[j] < -rank || in_axes[j] >= rank)
        fail(str("scan_input_axes has ", in_axes[j], ", out of range for scan input '", v, "' ", shape_str(x.shape)));
      const int64_t a = in_axes[j] < 0 ? in_axes[j] + rank : in_axes[j];
      if (length >= 0 && x.shape[static_cast<size_t>(a)] != length) {
        fail(str("its scan inputs' sequences differ in length: '", v, "' ", shape_str(x.shape), " has ",
                 x.shape[static_cast<size_t>(a)], " along axis ", a, ", the first ", length));
      }
      length = x.shape[static_cast<size_t>(a)];
      xs.push_back(v);
      axes.push_back(a);
    }
    if (length == 0 && scans > 0) fail("its scan inputs are empty, so its scan outputs would be");
    std::vector<std::vector<std::string>> stacked(static_cast<size_t>(scans));
    for (int64_t t = 0; t < length; ++t) {
      step();
      Scope it = child(str("step", t, "/"));
      for (int k = 0; k < states; ++k) bind(it, body.input(k).name(), values[static_cast<size_t>(k)]);
      for (size_t j = 0; j < xs.size(); ++j) {
        const int64_t at = in_dirs[j] == 1 ? length - 1 - t : t;
        const std::string index = constant_of(str(node_.name, "/index_", t), HostTensor::ints({}, {at}));
        bind(it, body.input(states + static_cast<int>(j)).name(),
             b_.node("Gather", {xs[j], index}, {{"axis", axes[j]}}));
      }
      import_body(body, it);
      for (int k = 0; k < states; ++k) values[static_cast<size_t>(k)] = output(body, it, k);
      for (int k = 0; k < scans; ++k) stacked[static_cast<size_t>(k)].push_back(output(body, it, states + k));
    }
    for (int k = 0; k < np_.output_size(); ++k) {
      if (k < states) {
        give(values[static_cast<size_t>(k)], np_.output(k));
        continue;
      }
      if (np_.output(k).empty()) continue;
      const size_t j = static_cast<size_t>(k - states);
      std::vector<std::string> parts = stacked[j];
      if (out_dirs[j] == 1) std::reverse(parts.begin(), parts.end());
      // The axis counts in the output's rank: a step's rank plus one.
      const int64_t rank = static_cast<int64_t>(cf_.g.value(parts[0]).shape.size()) + 1;
      if (out_axes[j] < -rank || out_axes[j] >= rank)
        fail(str("scan_output_axes has ", out_axes[j], ", out of range for scan output ", j, " of rank ", rank));
      give(stack(parts, out_axes[j] < 0 ? out_axes[j] + rank : out_axes[j]), np_.output(k));
    }
  }

  void sequence_op() {
    const std::string& op = np_.op_type();
    auto outputs = [&](int n) {
      if (np_.output_size() != n || np_.output(0).empty()) fail(str("must have ", n, " output"));
    };
    outputs(1);
    if (op == "SequenceEmpty") {
      if (np_.input_size() != 0) fail("takes no inputs");
      return define_sequence(Sequence{});
    }
    if (op == "SequenceConstruct") {
      if (np_.input_size() < 1) fail("takes at least one tensor");
      Sequence s;
      for (int k = 0; k < np_.input_size(); ++k) s.items->push_back(tensor_input(k));
      s.size = s.items->size();
      charge(s.size);
      return define_sequence(std::move(s));
    }
    if (op == "SequenceLength") {
      inputs(1, 1);
      const std::string out = define_in(scope_, np_.output(0), cf_);
      HostTensor n = HostTensor::ints({}, {static_cast<int64_t>(sequence_input(0).size)});
      cf_.g.values[out] = Value{out, DType::I64, {}, std::move(n)};
      return;
    }
    if (op == "SequenceAt") {
      inputs(2, 2);
      const Sequence& s = sequence_input(0);
      return give(s.at(static_cast<size_t>(position(1, s.size, false))), np_.output(0));
    }
    if (op == "SequenceInsert") {
      inputs(2, 3);
      const Sequence s = sequence_input(0);
      const std::string v = tensor_input(1);
      const size_t at = np_.input_size() > 2 && !np_.input(2).empty() ? static_cast<size_t>(position(2, s.size, true))
                                                                      : s.size;
      if (at == s.size && s.items->size() == s.size) {  // appending to the newest of its chain: shared
        s.items->push_back(v);
        return define_sequence(Sequence{s.items, s.size + 1});
      }
      Sequence copy = copied(s, at, at);
      copy.items->insert(copy.items->begin() + static_cast<std::ptrdiff_t>(at), v);
      copy.size = copy.items->size();
      return define_sequence(std::move(copy));
    }
    if (op == "SequenceErase") {
      inputs(1, 2);
      const Sequence& s = sequence_input(0);
      if (s.size == 0) fail(str("erases from the empty sequence '", scope_.resolve(np_.input(0)), "'"));
      const size_t at = np_.input_size() > 1 && !np_.input(1).empty() ? static_cast<size_t>(position(1, s.size, false))
                                                                      : s.size - 1;
      return define_sequence(copied(s, at, at + 1));
    }
    if (op == "ConcatFromSequence") {
      inputs(1, 1);
      const Sequence& s = sequence_input(0);
      if (s.size == 0) fail(str("concatenates the empty sequence '", scope_.resolve(np_.input(0)), "'"));
      const int64_t new_axis = int_attribute("new_axis", 0), axis = int_attribute("axis", kNoAxis);
      if (axis == kNoAxis) fail("has no attribute 'axis'");
      if (new_axis != 0 && new_axis != 1) fail(str("new_axis ", new_axis, " is not 0 or 1"));
      std::vector<std::string> parts(s.items->begin(), s.items->begin() + static_cast<std::ptrdiff_t>(s.size));
      const int64_t rank = static_cast<int64_t>(cf_.g.value(parts[0]).shape.size()) + new_axis;
      if (axis < -rank || axis >= rank)
        fail(str("axis ", axis, " is out of range for ", new_axis ? "a new axis of " : "", "tensors of rank ",
                 rank - new_axis));
      const int64_t a = axis < 0 ? axis + rank : axis;
      if (new_axis) return give(stack(parts, a), np_.output(0));
      return give(parts.size() == 1 ? parts[0] : b_.node("Concat", parts, {{"axis", a}}), np_.output(0));
    }
    // SplitToSequence: pieces of the split's sizes (one size: pieces of it, the last smaller),
    // or of one, without the axis when keepdims is 0.
    inputs(1, 2);
    const std::string x = tensor_input(0);
    const Shape& shape = cf_.g.value(x).shape;
    const auto rank = static_cast<int64_t>(shape.size());
    const int64_t axis = int_attribute("axis", 0), keep = int_attribute("keepdims", 1);
    if (axis < -rank || axis >= rank) fail(str("axis ", axis, " is out of range for '", x, "' ", shape_str(shape)));
    const int64_t a = axis < 0 ? axis + rank : axis, extent = shape[static_cast<size_t>(a)];
    std::vector<int64_t> sizes;
    const bool given = np_.input_size() > 1 && !np_.input(1).empty();
    if (given) {
      const Value& sp = constant(scope_.resolve(np_.input(1)), "its split", "SplitToSequence");
      if (sp.dtype != DType::I64 || sp.shape.size() > 1) fail(str("its split '", sp.name, "' must be int64 of rank 0 or 1"));
      if (sp.shape.empty()) {
        const int64_t c = sp.constant->as_int(0);
        if (c < 1) fail(str("its split '", sp.name, "' is ", c, "; a piece's size must be positive"));
        for (int64_t at = 0; at < extent; at += c) sizes.push_back(std::min(c, extent - at));
      } else {
        int64_t total = 0;
        for (int64_t k = 0; k < sp.constant->size(); ++k) {
          const int64_t c = sp.constant->as_int(k);
          if (c < 0) fail(str("its split '", sp.name, "' has the size ", c));
          sizes.push_back(c);
          total += c;
        }
        if (total != extent) fail(str("its split '", sp.name, "' sums to ", total, "; axis ", a, " of '", x, "' has ", extent));
      }
    } else {
      sizes.assign(static_cast<size_t>(extent), 1);
    }
    charge(sizes.size());
    Sequence s;
    int64_t at = 0;
    for (int64_t c : sizes) {
      if (!given && keep == 0) {
        s.items->push_back(b_.node("Gather", {x, constant_of(str(node_.name, "/index_", at), HostTensor::ints({}, {at}))},
                                   {{"axis", a}}));
      } else {
        s.items->push_back(b_.slice(x, a, at, at + c));
      }
      at += c;
    }
    s.size = s.items->size();
    define_sequence(std::move(s));
  }

 private:
  static constexpr int64_t kNoAxis = std::numeric_limits<int64_t>::min();

  void inputs(int least, int most) const {
    if (np_.input_size() < least || np_.input_size() > most || np_.input(0).empty())
      fail(str("takes ", least == most ? str(least) : str(least, " to ", most), " inputs, not ", np_.input_size()));
  }
  const Sequence& sequence_input(int k) const {
    const std::string v = scope_.resolve(np_.input(k));
    auto it = cf_.sequences.find(v);
    if (it == cf_.sequences.end())
      fail(str("input ", k, " '", v, "' is ", cf_.g.values.count(v) ? "a tensor" : "not defined before it", "; it must be a sequence"));
    return it->second;
  }
  std::string tensor_input(int k) const {
    const std::string v = scope_.resolve(np_.input(k));
    if (!cf_.g.values.count(v))
      fail(str("input ", k, " '", v, "' is ", cf_.sequences.count(v) ? "a sequence" : "not defined before it",
               "; it must be a tensor"));
    return v;
  }
  // A constant position (input k) in a sequence of `size` (negative from the end); `end`: size too.
  int64_t position(int k, size_t size, bool end) const {
    const Value& p = constant(scope_.resolve(np_.input(k)), "its position", np_.op_type().c_str());
    if (p.dtype != DType::I64 || p.constant->size() != 1) fail(str("its position '", p.name, "' must be one int64"));
    const int64_t n = static_cast<int64_t>(size), at = p.constant->as_int(0);
    const int64_t k_at = at < 0 ? at + n : at;
    if (k_at < 0 || k_at > n - (end ? 0 : 1))
      fail(str("its position ", at, " is out of range for a sequence of ", size, " tensors"));
    return k_at;
  }
  // The first `from` entries of s and those after `to`, in a list of their own.
  Sequence copied(const Sequence& s, size_t from, size_t to) {
    charge(s.size);
    Sequence c;
    c.items->assign(s.items->begin(), s.items->begin() + static_cast<std::ptrdiff_t>(from));
    c.items->insert(c.items->end(), s.items->begin() + static_cast<std::ptrdiff_t>(to),
                    s.items->begin() + static_cast<std::ptrdiff_t>(s.size));
    c.size = c.items->size();
    return c;
  }
  void charge(size_t entries) {
    cf_.sequence_copies_left -= static_cast<int64_t>(entries);
    if (cf_.sequence_copies_left < 0)
      fail(str("the sequence operators copy more than ", kMaxSequenceCopies, " entries in the model"));
  }
  void define_sequence(Sequence s) { cf_.sequences[define_in(scope_, np_.output(0), cf_)] = std::move(s); }

  [[noreturn]] void fail(const std::string& why) const {
    throw UserError(str(cf_.file, ": ", node_.where(), ": ", why));
  }

  const onnx::GraphProto& graph_attribute(const std::string& name) const {
    for (const onnx::AttributeProto& a : np_.attribute()) {
      if (a.name() != name) continue;
      if (a.type() != onnx::AttributeProto::GRAPH || !a.has_g()) fail(str("attribute '", name, "' is not a graph"));
      return a.g();
    }
    fail(str("has no attribute '", name, "'"));
  }
  int64_t int_attribute(const std::string& name, int64_t fallback) const {
    for (const onnx::AttributeProto& a : np_.attribute()) {
      if (a.name() != name) continue;
      if (a.type() != onnx::AttributeProto::INT) fail(str("attribute '", name, "' is not an integer"));
      return a.i();
    }
    return fallback;
  }
  std::vector<int64_t> ints_attribute(const std::string& name, std::vector<int64_t> fallback, int64_t count) const {
    for (const onnx::AttributeProto& a : np_.attribute()) {
      if (a.name() != name) continue;
      if (a.type() != onnx::AttributeProto::INTS) fail(str("attribute '", name, "' is not a list of integers"));
      if (a.ints_size() != count) fail(str("attribute '", name, "' has ", a.ints_size(), " entries; it needs ", count));
      return {a.ints().begin(), a.ints().end()};
    }
    return fallback;
  }

  const Value& constant(const std::string& v, const std::string& what, const char* op) const {
    if (!cf_.g.values.count(v)) fail(str("reads '", v, "', which is not defined before it"));
    const Value& x = cf_.g.value(v);
    if (!x.constant) {
      fail(str(what, " '", v, "' is computed at run time; tunefarm compiles one static graph, so a ", op, " needs it to be a constant after import (as tests of shapes are once --dim or --input-shape fix "
               "the inputs')"));
    }
    return x;
  }
  // An If's or a Loop's condition `c` (named `what` in messages): one bool, constant or not.
  const Value& condition(const std::string& c, const std::string& what) const {
    if (!cf_.g.values.count(c)) fail(str(what, " '", c, "' is not a tensor defined before it"));
    const Value& v = cf_.g.value(c);
    if (v.dtype != DType::Bool || num_elements(v.shape) != 1)
      fail(str(what, " '", c, "' is ", dtype_name(v.dtype), shape_str(v.shape), "; it must be one bool"));
    return v;
  }

  // A constant holding t, under a new name from `base`.
  std::string constant_of(const std::string& base, HostTensor t) {
    const std::string name = cf_.unused(base);
    cf_.g.values[name] = Value{name, t.dtype, t.shape, std::move(t)};
    return name;
  }

  Scope child(const std::string& tag) const { return Scope{str(node_.name, "/", tag), {}, &scope_}; }
  // A subgraph's input `formal` is the graph's value `actual` in scope s.
  static void bind(Scope& s, const std::string& formal, const std::string& actual) {
    if (!formal.empty()) s.names[formal] = actual;
  }

  // Counts an iteration (Loop) or a step (Scan) against the model's budgets.
  void step() {
    if (--cf_.iterations_left < 0) {
      fail(str("unrolling Loops and Scans makes more than ", kMaxUnrolledIterations,
               " iterations in the model (each is written out: tunefarm compiles one static graph)"));
    }
    if (static_cast<int64_t>(cf_.g.nodes.size()) > kMaxUnrolledNodes)
      fail(str("unrolling makes more than ", kMaxUnrolledNodes, " nodes"));
  }

  void import_body(const onnx::GraphProto& body, Scope& s) {
    for (const onnx::TensorProto& init : body.initializer()) {
      if (init.name().empty()) fail("an initializer of its body has no name");
      HostTensor t = tensor_from_onnx(init, str(cf_.file, ": ", node_.where(), ": initializer '", init.name(), "'"));
      bind(s, init.name(), constant_of(s.prefix + init.name(), std::move(t)));
    }
    if (body.sparse_initializer_size() > 0) fail("its body has sparse initializers, which are not supported");
    for (int k = 0; k < body.node_size(); ++k) cf_.import_node(body.node(k), s, k);
  }

  // Body output k's value in scope s, which the body must compute (or read from outside).
  std::string output(const onnx::GraphProto& body, const Scope& s, int k) const {
    const std::string v = s.resolve(body.output(k).name());
    if (!cf_.defined(v)) fail(str("its body's output '", body.output(k).name(), "' is never computed"));
    return v;
  }

  // The node's output `out` (in its scope) is `v`.
  void give(const std::string& v, const std::string& out) {
    if (out.empty()) return;
    if (!cf_.defined(v)) fail(str("its body's output '", v, "' is never computed"));
    if (auto it = cf_.sequences.find(v); it != cf_.sequences.end()) {
      const Sequence same = it->second;
      cf_.sequences[define_in(scope_, out, cf_)] = same;
      return;
    }
    b_.node("Identity", {v}, {}, define_in(scope_, out, cf_));
  }

  // The values `parts`, one per iteration, stacked along a new axis.
  std::string stack(const std::vector<std::string>& parts, int64_t axis) {
    std::vector<std::string> rows;
    for (const std::string& p : parts) {
      if (cf_.sequences.count(p)) fail(str("'", p, "' is a sequence; it cannot be stacked into a tensor here"));
      if (cf_.g.opset >= 13) {
        rows.push_back(b_.node("Unsqueeze", {p, b_.ints({axis})}));
      } else {
        rows.push_back(b_.node("Unsqueeze", {p}, {{"axes", std::vector<int64_t>{axis}}}));
      }
    }
    return rows.size() == 1 ? rows[0] : b_.node("Concat", rows, {{"axis", axis}});
  }

  const onnx::NodeProto& np_;
  Scope& scope_;
  ControlFlowImport& cf_;
  Node node_;
  NodeBuilder b_;
};

}  // namespace

const std::map<std::string, std::set<std::string>>& written_out_operators() {
  static const std::map<std::string, std::set<std::string>> ops = {
      {"If", {"then_branch", "else_branch"}},
      {"Loop", {"body"}},
      {"Scan", {"body", "num_scan_inputs", "scan_input_axes", "scan_input_directions", "scan_output_axes",
                "scan_output_directions"}},
      {"SequenceEmpty", {"dtype"}},
      {"SequenceConstruct", {}},
      {"SequenceInsert", {}},
      {"SequenceAt", {}},
      {"SequenceErase", {}},
      {"SequenceLength", {}},
      {"ConcatFromSequence", {"axis", "new_axis"}},
      {"SplitToSequence", {"axis", "keepdims"}}};
  return ops;
}

bool import_control_flow(const onnx::NodeProto& np, const std::string& name, Scope& scope, ControlFlowImport& cf) {
  const std::string& op = np.op_type();
  auto takes = written_out_operators().find(op);
  if (takes == written_out_operators().end()) return false;
  // Every attribute is one the operator takes: nothing is ignored.
  for (const onnx::AttributeProto& a : np.attribute()) {
    if (!takes->second.count(a.name())) {
      std::string list;
      for (const std::string& k : takes->second) list += (list.empty() ? "" : ", ") + k;
      throw UserError(str(cf.file, ": node '", name, "' (", op, "): attribute '", a.name(), "' is not supported (", op,
                          " takes ", list.empty() ? "none" : list, ")"));
    }
  }
  Unroller u(np, name, scope, cf);
  Graph::WrittenOut& w = cf.g.written_out;
  if (op == "If") {
    u.if_node();
    ++w.ifs;
  } else if (op == "Loop") {
    u.loop_node();
    ++w.loops;
  } else if (op == "Scan") {
    u.scan_node();
    ++w.scans;
  } else {
    u.sequence_op();
    ++w.sequence_ops;
  }
  w.iterations = kMaxUnrolledIterations - cf.iterations_left;  // every Loop's and Scan's, nested ones too
  return true;
}

}  // namespace tf::graph
