// import_control_flow: ONNX's If, Loop and Scan, whose bodies are subgraphs, written out into
// the one static graph tunefarm compiles:
//   If    the branch its condition picks, when the condition is a constant after import (a
//         test of shapes, which are static once --dim / --input-shape fix the inputs'): the
//         branch's nodes are imported in the If's place and its outputs become the If's.
//         A condition known only at run time: both branches imported, each output selected by
//         it (Where), outputs of one type and shape in both (kernels bound their reads whatever
//         the data, so computing the branch not taken is safe).
//   Loop  unrolled: iteration after iteration while the trip count M (a constant) and the
//         condition (a constant, and each iteration's condition folding to one) say so; the
//         loop-carried values flow from iteration to iteration, the scan outputs are each
//         iteration's values stacked along a new first axis (Unsqueeze, Concat). A condition
//         that becomes a run-time value (a `break` on the data) needs a constant trip count of
//         at most kMaxUnrolledIterations and no scan outputs: every iteration is computed and
//         the carried values selected by the condition so far (And, Where).
//   Sequences (SequenceEmpty, SequenceInsert, ConcatFromSequence, ...: what a scripted
//         PyTorch loop appending to a list and stacking it exports) are lists of the graph's
//         values at import (Sequence below): positions must be constants, and a sequence may be
//         a Loop-carried value or an If's output, never a model's input or output.
//   Scan  unrolled over its scan inputs' sequence axis (scan_input_axes, directions forward
//         or reversed): each step reads its slice (Gather), the states flow from step to step,
//         the scan outputs stacked along scan_output_axes (in reverse for direction 1).
// A subgraph's nodes read the enclosing graphs' values by name (Scope::resolve); the values
// they make get names of their own under the node's name and iteration, so iterations and
// branches never collide with each other or with the model's names.
//
// Refused (UserError naming the file, the node and the value): a Loop's run-time condition
// without a constant trip count or with scan outputs, or whose carried values change type or
// shape, an If of a run-time condition whose branches' outputs differ in
// type or shape (or are sequences), a trip count that is not a
// constant, a Loop with neither trip count nor condition, a Loop whose scan outputs would be
// empty (no iteration), bodies whose inputs or outputs do not match the node's, a sparse
// initializer in a body, and more than kMaxUnrolledIterations iterations (Loop iterations and
// Scan steps, nested ones counted each time) or kMaxUnrolledNodes nodes in one model, so a
// hostile model cannot make the graph explode.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace onnx {
class NodeProto;
}

namespace tf::graph {

constexpr int64_t kMaxUnrolledIterations = 4096;
constexpr int64_t kMaxUnrolledNodes = 1'000'000;

// Where a (sub)graph's nodes are imported: the model's graph (an empty prefix: names as they
// are) or a subgraph, whose own values are renamed (`names`: its name -> the graph's), names
// it does not define resolving to the enclosing scope's (`parent`, which outlives it) or the
// model's. A scope holds only its own names, so an iteration's costs nothing of its parents'.
struct Scope {
  std::string prefix;
  std::map<std::string, std::string> names;
  const Scope* parent = nullptr;
  std::string resolve(const std::string& v) const {
    for (const Scope* s = this; s; s = s->parent) {
      auto it = s->names.find(v);
      if (it != s->names.end()) return it->second;
    }
    return v;
  }
};

// A sequence (ONNX's seq(tensor)): the graph's values it holds, in order. Sequences exist only
// at import: the sequence operators work on these lists, and every tensor they give is a value
// of the graph. Appending to the newest sequence of a chain shares the list (`size` of
// `items` are this sequence's), so a Loop appending one value an iteration costs one entry each.
struct Sequence {
  std::shared_ptr<std::vector<std::string>> items = std::make_shared<std::vector<std::string>>();
  size_t size = 0;
  const std::string& at(size_t k) const { return (*items)[k]; }
};

// The most entries sequence operators may copy in one model (an insertion elsewhere than at the
// end copies the list), so a hostile model cannot make the import quadratic.
constexpr int64_t kMaxSequenceCopies = 1'000'000;

struct ControlFlowImport {
  Graph& g;
  const std::string& file;
  // The importer's import of one node proto into `scope` (the model's nodes' path: checks,
  // expansions, shape inference, folding); `index` names an unnamed node.
  std::function<void(const onnx::NodeProto& np, Scope& scope, int index)> import_node;
  // Adds a node the expansion builds (the importer's add_node).
  std::function<void(Node)> add;
  // A name no value of the model has or had (the importer's), from `base`.
  std::function<std::string(const std::string& base)> unused;
  int64_t& iterations_left;  // start at kMaxUnrolledIterations
  std::map<std::string, Sequence> sequences = {};  // the sequences made so far, by the graph's name
  int64_t sequence_copies_left = kMaxSequenceCopies;
  bool defined(const std::string& v) const { return g.values.count(v) || sequences.count(v); }
};

// A value `v` that a node in `scope` defines: its name in the graph (v itself in the model's
// graph, a new name under the scope's prefix in a subgraph, recorded in scope.names).
std::string define_in(Scope& scope, const std::string& v, const ControlFlowImport& cf);

// The operators written out here rather than registered (If, Loop, Scan and the sequence
// operators), each with the attributes it takes.
const std::map<std::string, std::set<std::string>>& written_out_operators();

// Imports np (of the default domain) when it is an If, a Loop, a Scan or a sequence operator
// (SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase,
// SequenceLength, ConcatFromSequence, SplitToSequence), named `name` in the graph, and returns
// true; returns false, importing nothing, for any other operator.
bool import_control_flow(const onnx::NodeProto& np, const std::string& name, Scope& scope, ControlFlowImport& cf);

}  // namespace tf::graph
