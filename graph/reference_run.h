// reference_run: runs a graph node by node with each operator's reference evaluation
// (graph/ops.h). It is the oracle compiled models are checked against, not a fast path.
//
// Promises: inputs are checked against the graph's inputs (each present, same shape, float32)
// with an error naming the input; outputs come back by name. What the run would hold at its
// peak (each value freed after its last reader) is checked against `memory_budget` bytes
// before anything is evaluated (graph/memory_budget.h), naming the node that would pass it.
#pragma once

#include <map>
#include <string>

#include "graph/graph.h"

namespace tf::graph {

std::map<std::string, HostTensor> run_reference(const Graph& g,
                                                const std::map<std::string, HostTensor>& inputs,
                                                int64_t memory_budget);
// With the default budget (default_memory_budget()).
std::map<std::string, HostTensor> run_reference(const Graph& g,
                                                const std::map<std::string, HostTensor>& inputs);

}  // namespace tf::graph
