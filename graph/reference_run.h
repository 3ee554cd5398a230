// reference_run: runs a graph node by node with each operator's reference evaluation
// (graph/ops.h). It is the oracle compiled models are checked against, not a fast path.
//
// Promises: inputs are checked against the graph's inputs (each present, same shape, float32)
// with an error naming the input; outputs come back by name.
#pragma once

#include <map>
#include <string>

#include "graph/graph.h"

namespace tf::graph {

std::map<std::string, HostTensor> run_reference(const Graph& g,
                                                const std::map<std::string, HostTensor>& inputs);

}  // namespace tf::graph
