// import_builder: what the importer's expansions of one ONNX node into several (recurrent
// layers written out, 3-D convolutions as 2-D ones) build with: nodes named after the
// expanded node, int64 and zero constants, and the shape operators they need.
//
// Promises: every name it makes is new in the graph and found in constant time (numbered
// here: Graph::fresh_name counts up from its base, which would make thousands of nodes
// quadratic); every node goes through `add` (the importer's add_node: shape inference and
// import folding), so a node it builds is checked like a node of the model.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/graph.h"
#include "graph/ops.h"

namespace tf::graph {

// The checks an expansion makes of the node it expands, failing with UserErrors that name the
// file and the node.
struct Expansion {
  const Node& n;
  ImportSink& sink;
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError(str(sink.file, ": ", n.where(), ": ", why));
  }
  bool present(size_t k) const { return k < n.inputs.size() && !n.inputs[k].empty(); }
  // Input k (named `what` in messages), which must be there and be float32.
  const Value& input(size_t k, const char* what) const {
    if (!present(k)) fail(str("input ", what, " is missing"));
    const Value& v = sink.g.value(n.inputs[k]);
    if (v.dtype != DType::F32) fail(str(what, " '", v.name, "' is ", dtype_name(v.dtype), "; it must be float32"));
    return v;
  }
  void one_output() const {
    if (n.outputs.size() != 1 || n.outputs[0].empty()) fail("must have one output");
  }
  // Axis a of a tensor (named `what`) of shape `of`, counted from 0 (a negative one from the
  // end); out of range, the node's error.
  int64_t axis(int64_t a, const Shape& of, const char* what) const {
    const auto rank = static_cast<int64_t>(of.size());
    if (a < -rank || a >= rank) fail(str("axis ", a, " is out of range for ", what, " ", shape_str(of)));
    return a < 0 ? a + rank : a;
  }
  // An operator ONNX defines from opset `since`.
  void since(int64_t opset) const {
    if (sink.g.opset < opset)
      fail(str(n.op, " is an operator of opset ", opset, " and later (the model's is ", sink.g.opset, ")"));
  }
};

// Builds the expansion of node n into g.
class NodeBuilder {
 public:
  NodeBuilder(const Node& n, Graph& g, const std::function<void(Node)>& add)
      : n_(n), g_(g), add_(add) {}

  // A new node `op` over `inputs`; returns its output's name, or writes `out` when given.
  std::string node(const std::string& op, std::vector<std::string> inputs,
                   std::map<std::string, Attr> attrs = {}, const std::string& out = "") {
    std::string tag = str(n_.name, "/", op, "_", count_++);
    std::string y = out.empty() ? g_.fresh_name(tag) : out;
    add_(Node{tag, op, std::move(inputs), {y}, std::move(attrs)});
    return y;
  }
  std::string ints(const std::vector<int64_t>& v) {
    return g_.add_ints(str(n_.name, "/const_", count_++), v);
  }
  std::string scalar(float v) {
    std::string name = g_.fresh_name(str(n_.name, "/scalar_", count_++));
    g_.values[name] = Value{name, DType::F32, {}, HostTensor::floats({}, {v})};
    return name;
  }
  // A float32 constant of shape s holding v (row-major).
  std::string floats(const Shape& s, std::vector<float> v) {
    std::string name = g_.fresh_name(str(n_.name, "/floats_", count_++));
    g_.values[name] = Value{name, DType::F32, s, HostTensor::floats(s, std::move(v))};
    return name;
  }
  std::string zeros(const Shape& s) {
    std::string name = g_.fresh_name(str(n_.name, "/zeros_", count_++));
    g_.values[name] = Value{name, DType::F32, s,
                            HostTensor::floats(s, std::vector<float>(num_elements(s), 0.0f))};
    return name;
  }
  // A reduction (ReduceMean, ReduceMax, ReduceL2, ...) of x over `axes`, dimensions kept: axes
  // as an input from opset 18 (ReduceSum from 13), an attribute before, as the model's opset says.
  std::string reduce(const std::string& op, const std::string& x, const std::vector<int64_t>& axes) {
    if (g_.opset >= 18 || (op == "ReduceSum" && g_.opset >= 13))
      return node(op, {x, ints(axes)}, {{"keepdims", int64_t{1}}});
    return node(op, {x}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  }
  std::string slice(const std::string& x, int64_t axis, int64_t begin, int64_t end,
                    int64_t step = 1) {
    if (step == 1) return node("Slice", {x, ints({begin}), ints({end}), ints({axis})});
    return node("Slice", {x, ints({begin}), ints({end}), ints({axis}), ints({step})});
  }
  std::string reshape(const std::string& x, const Shape& s, const std::string& out = "") {
    return node("Reshape", {x, ints(s)}, {}, out);
  }
  std::string transpose(const std::string& x, const std::vector<int64_t>& perm,
                        const std::string& out = "") {
    return node("Transpose", {x}, {{"perm", perm}}, out);
  }
  std::string concat(const std::vector<std::string>& xs, int64_t axis,
                     const std::string& out = "") {
    if (xs.size() == 1 && out.empty()) return xs[0];
    if (xs.size() == 1) return node("Identity", {xs[0]}, {}, out);
    return node("Concat", xs, {{"axis", axis}}, out);
  }

 private:
  const Node& n_;
  Graph& g_;
  const std::function<void(Node)>& add_;
  int count_ = 0;
};

}  // namespace tf::graph
