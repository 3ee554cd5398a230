// import_recurrent: ONNX's recurrent operators (RNN, GRU, LSTM) imported as their time steps
// written out in the graph's own operators, as TVM's ONNX front end does.
//
// What it promises:
//   - A node of these ops becomes, per direction, one MatMul of the whole input sequence by
//     the input weights (plus the biases), then per time step a MatMul of the hidden state by
//     the recurrence weights and the gates' Sigmoid/Tanh/Mul/Add arithmetic, and Concat and
//     Reshape nodes that assemble Y, Y_h (and Y_c); so the usual passes apply (constant
//     weights are sliced and transposed by fold-constants, the elementwise gate arithmetic
//     fuses). The results equal the ONNX specification's equations (opsets 7 and 14: forward,
//     reverse and bidirectional; layout 0 and 1; optional bias and initial states; GRU's
//     linear_before_reset both ways).
//   - Refused with UserError naming the node and what is at fault: peepholes (LSTM's P),
//     sequence_lens other than the full length for every batch entry (a constant), clip,
//     input_forget, activations other than the defaults and Relu (activation_alpha/beta),
//     a hidden_size that disagrees with the weights, and more than kMaxRecurrentSteps time
//     steps (sequence length x directions) in one model, so a hostile model cannot make the
//     graph explode.
#pragma once

#include <functional>
#include <string>

#include "graph/graph.h"
#include "graph/ops.h"

namespace tf::graph {

// Time steps (sequence length x directions, summed over its recurrent nodes) one model may
// unroll into: 1,024 steps of an LSTM import in about 2 s here (15 nodes a step), and in the
// fuzz target (ASan) within its 10 s limit for an input.
constexpr int64_t kMaxRecurrentSteps = 1024;

// Adds n's expansion to g through `add` (the importer's add_node: shape inference and import
// folding) when n is an RNN, GRU or LSTM node and returns true; returns false, adding
// nothing, for any other node. `steps_left` (start at kMaxRecurrentSteps) is the model's
// budget of time steps; n's are taken from it.
// OpDef::expand of RNN, GRU and LSTM (registered by register_recurrent_ops, graph/ops.h).
bool expand_recurrent(const Node& n, ImportSink& sink);

}  // namespace tf::graph
