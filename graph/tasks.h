// tasks: the tunable workloads of a model (task extraction, as TVM's extract_tasks).
//
// What it promises: each Conv, ConvNCHWc, MatMul and Gemm node is mapped to a workload spec the
// tuner and the tuning database already know (compiler/workload.h: conv2d_nchw,
// depthwise_conv2d_nchw, their blocked conv2d_nchwc and depthwise_conv2d_nchwc, matmul,
// batch_matmul), with the epilogue fusion will give it (a constant per-channel bias,
// a following Relu); identical workloads are one task with a count and the nodes using it.
// Nodes of those operators that no workload expresses (asymmetric padding, grouped
// convolutions other than depthwise, broadcast batch dimensions) are listed with the reason;
// every other operator is injective, a reduction or data movement, scheduled by default
// templates, not tuned.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tf {
struct Target;
}

namespace tf::graph {

struct Task {
  std::string workload;  // canonical spec
  std::vector<std::string> nodes;
  int64_t flops = 0;  // of one call
  // The index of the task whose nodes this one computes another way (a Winograd convolution
  // for the direct one: the model compiler takes whichever was tuned faster), or -1.
  int alternative_to = -1;
};

struct Untunable {
  std::string node, op, reason;
};

struct TaskList {
  std::vector<Task> tasks;  // in order of first appearance
  std::vector<Untunable> untunable;
};

// Each Conv, ConvNCHWc, MatMul and Gemm task; a 3x3 stride-1 blocked convolution with
// constant weights also as a Winograd task (its alternative).
TaskList extract_tasks(const Graph& g);
// The tasks of the kernels a library for `t` compiles of `g`: the per-image graph's where the
// library runs the model one image at a time (graph/image_loop.h image_loop_for), else g's.
TaskList extract_tasks(const Graph& g, const Target& t);

// The tasks of several shape buckets of one model (compile --model --dim batch=1,8,32) as one
// list: a workload in several buckets is one task computing all their nodes, each node named
// "b<bucket>/<node>"; alternatives and untunable anchors kept per bucket. One list: itself.
TaskList merge_bucket_tasks(const std::vector<TaskList>& buckets);

// The tasks' part of a model's time: sum of weight x time over the tasks, where a task and its
// alternative count once: at the faster known time of the two (`alternatives`: a tuned build
// compiles the faster), else at the alternative's (a default build compiles the alternative,
// graph/model_compiler.cc). Infinity when a task has no positive finite time to count.
double tasks_time(const TaskList& list, const std::vector<double>& weights, const std::vector<double>& times,
                  bool alternatives);

// The workload (without its epilogue) computing Conv, MatMul or Gemm node `n`, and whether
// the node's own third input is its bias; or, with no spec, the reason no workload does.
// Gemm's transB is taken as the weights transposed at compile time (they must be constant).
struct AnchorWorkload {
  std::string spec;    // e.g. "conv2d_nchw(N=1,...,dilation=1"; empty when none expresses the node
  std::string reason;  // why not
  bool bias = false;
};
AnchorWorkload anchor_workload(const Graph& g, const Node& n);

// The Winograd workload (conv2d_winograd_nchwc, without its epilogue, open as `aw.spec`) that
// computes ConvNCHWc node `n` with workload `aw`, or "" when none does: the window is not 3x3,
// the stride not 1, the weights are not constants (they are transformed at compile time), or
// too few tiles share too many transformed weights (fewer than 32 output tiles and more than
// 2 MB: streaming them would cost more than the multiplications saved) for both F(4x4, 3x3)
// and F(2x2, 3x3) (tile=4 where it passes, else tile=2); a dilated one's tiles must also not
// cover much more than its output (80% of their outputs real for tile=4, 60% for tile=2).
std::string winograd_alternative(const Graph& g, const Node& n, const AnchorWorkload& aw);

// Whether Conv node `n` is depthwise (group = channels = filters, one channel a filter): a
// depthwise_conv2d_nchw; every other group > 1 is a grouped conv2d_nchw.
bool is_depthwise_conv(const Graph& g, const Node& n);

// Whether MatMul or Gemm node `n`, marked for TF32 tensor cores (--precision tf32), has
// constant float32 weights its kernel reads given as [N][K] (workload trans_b=1, the constant
// transposed so where it is [K][N]): dense_tc.cuda then reads B's fragments by ldmatrix as it
// reads A's, where a [K][N] tile took scalar shared loads.
bool tf32_weights_along_k(const Graph& g, const Node& n);

// The anchors' own mappings, as their registry entries name them (graph/ops.h, OpDef::workload).
// The workload types of a product of `data` and `weights` where either may be stored in 16 bits
// (sixteen-bit-edges, 16-bit weights): ",dtype=T" with both in the 16-bit type T,
// ",weight_dtype=T" with the weights alone, "" with neither.
std::string sixteen_bit_types_key(DType data, DType weights);
AnchorWorkload conv_workload(const Graph& g, const Node& n);
AnchorWorkload conv_nchwc_workload(const Graph& g, const Node& n);
AnchorWorkload matmul_workload(const Graph& g, const Node& n);
AnchorWorkload gemm_workload(const Graph& g, const Node& n);

// The epilogue the anchor node `n`'s kernel takes over, after its own bias: for a MatMul the
// Add of a constant float vector of N values that follows it (the bias), then a Relu; each
// only when it is the sole reader of the value before it and that value is not returned.
// Task extraction and the model compiler both ask here.
struct Readers {
  explicit Readers(const Graph& g);
  std::map<std::string, int> uses;            // use_counts (graph/pass.h)
  std::map<std::string, const Node*> reader;  // a reader of each value read
};
struct AnchorEpilogue {
  std::string bias;  // the bias value, or "" for none
  bool relu = false;
  std::vector<const Node*> nodes;  // the anchor, then the nodes taken over, in order
  std::string output;              // the value the kernel writes
  std::string name() const;        // none, bias, relu, bias_relu
};
AnchorEpilogue anchor_epilogue(const Graph& g, const Node& n, const AnchorWorkload& aw,
                               const Readers& readers);

}  // namespace tf::graph
