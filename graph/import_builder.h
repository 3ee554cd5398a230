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

namespace tf::graph {

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
  std::string zeros(const Shape& s) {
    std::string name = g_.fresh_name(str(n_.name, "/zeros_", count_++));
    g_.values[name] = Value{name, DType::F32, s,
                            HostTensor::floats(s, std::vector<float>(num_elements(s), 0.0f))};
    return name;
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
