// pass: graph passes and the pass manager that runs them (in the spirit of TVM's
// PassContext).
//
// What it promises:
//   - graph_passes() lists every pass in the order it runs, each with a name, the lowest
//     optimisation level that runs it, and one line of help. Each pass lives in its own file
//     (graph/pass_<name>.cc) and keeps the graph's invariants (graph/graph.h).
//   - run_passes() runs those enabled at the options' level, minus the disabled ones, times
//     each, verifies the graph after each (a broken invariant is a bug in that pass and names
//     it), and hands the graph to the dump sink after each pass named in `dump` ("all": every
//     one).
//   - A pass changes values only as the model computes them: outputs keep their names, values
//     and shapes; only float rounding may differ where a pass reassociates (folding a scale
//     into convolution weights).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tf::graph {

struct PassOptions {
  int opt_level = 2;
  std::set<std::string> disabled;
  std::set<std::string> dump;  // pass names, or "all"
  std::function<void(const std::string& pass, const Graph& g)> dump_sink;
  // The target's vector width in floats (Target::vector_lanes of a CPU target): the channel
  // block of transform-conv-layout. 0 (no target, or not a CPU): that pass and
  // fold-qdq-matmuls (int8 kernels are CPU templates) change nothing.
  int64_t channel_block = 0;
};

struct PassInfo {
  const char* name;
  int opt_level;  // runs at this --opt-level and above
  const char* help;
  std::function<bool(Graph&, const PassOptions&)> run;  // true when it changed the graph
};

const std::vector<PassInfo>& graph_passes();

struct PassReport {
  std::string name;
  bool ran = false;      // false: below the level or disabled
  bool changed = false;  // it rewrote something ("fired")
  double ms = 0;
  size_t nodes_after = 0;
};

// Throws UserError for an unknown pass name in `disabled` or `dump`, or a level outside 0..3.
void check_pass_options(const PassOptions& options);
// Checks the options as above, then runs the passes.
std::vector<PassReport> run_passes(Graph& g, const PassOptions& options);

// Helpers for passes.
// How many nodes read each value (graph outputs count as one reader each).
std::map<std::string, int> use_counts(const Graph& g);
// The index in g.nodes of each value's last reader (values no node reads are absent).
std::map<std::string, size_t> last_readers(const Graph& g);
// Makes every reader of `from` (nodes and graph outputs) read `to` instead.
void replace_uses(Graph& g, const std::string& from, const std::string& to);
// For a node about to be removed whose output `out` equals `replacement`: makes readers of
// `out` read `replacement`, or where `out` is a graph output renames `replacement` to `out`
// (outputs keep their names). False, changing nothing, when neither is possible (the
// replacement is itself a graph input, output or constant).
bool bypass(Graph& g, const std::string& out, const std::string& replacement);
// Orders the nodes so each comes after the producers of its inputs, keeping the present
// order where it already is one (stable).
void topological_sort(Graph& g);
// Drops values that no node defines or reads and that are not graph inputs or outputs.
void drop_unused_values(Graph& g);
// Replaces each node for which `expand` returns true by the nodes it appended to `out`, in
// the node's place (`expand` adds the values they need to g); returns whether any was. The
// shared loop of the passes that lower one node into several.
bool expand_nodes(Graph& g, const std::function<bool(Graph&, const Node&, std::vector<Node>&)>& expand);

// The passes (one file each).
bool dead_code_elimination(Graph& g);
bool fold_constants(Graph& g);
bool simplify_inference(Graph& g);
bool fold_scale_into_conv(Graph& g);
bool lower_conv_transpose(Graph& g);
bool lower_scatter_nd(Graph& g);
bool pad_convs(Graph& g);
bool einsum_to_matmul(Graph& g);
bool split_grouped_convs(Graph& g);
bool recognize_composites(Graph& g);
bool combine_parallel_matmuls(Graph& g);
bool eliminate_common_subexpressions(Graph& g);
bool transform_conv_layout(Graph& g, int64_t channel_block);
bool fold_qdq_matmuls(Graph& g, int64_t channel_block);

}  // namespace tf::graph
