// tasks: the tunable workloads of a model (task extraction, as TVM's extract_tasks).
//
// What it promises: each Conv, MatMul and Gemm node is mapped to a workload spec the tuner and
// the tuning database already know (compiler/workload.h: conv2d_nchw, depthwise_conv2d_nchw,
// matmul, batch_matmul), with the epilogue fusion will give it (a constant per-channel bias,
// a following Relu); identical workloads are one task with a count and the nodes using it.
// Nodes of those operators that no workload expresses (asymmetric padding, grouped
// convolutions other than depthwise, broadcast batch dimensions) are listed with the reason;
// every other operator is injective, a reduction or data movement, scheduled by default
// templates, not tuned.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace tf::graph {

struct Task {
  std::string workload;  // canonical spec
  std::vector<std::string> nodes;
  int64_t flops = 0;  // of one call
};

struct Untunable {
  std::string node, op, reason;
};

struct TaskList {
  std::vector<Task> tasks;  // in order of first appearance
  std::vector<Untunable> untunable;
};

TaskList extract_tasks(const Graph& g);

// The workload (without its epilogue) computing Conv, MatMul or Gemm node `n`, and whether
// the node's own third input is its bias; or, with no spec, the reason no workload does.
// Gemm's transB is taken as the weights transposed at compile time (they must be constant).
struct AnchorWorkload {
  std::string spec;    // e.g. "conv2d_nchw(N=1,...,dilation=1"; empty when none expresses the node
  std::string reason;  // why not
  bool bias = false;
};
AnchorWorkload anchor_workload(const Graph& g, const Node& n);

}  // namespace tf::graph
