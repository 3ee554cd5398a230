// layout: blocked (NCHWc) activation layouts for convolutions, as oneDNN's nChw8c and TVM's
// NCHWc: the channels of an NCHW tensor split into blocks of `b` that become the innermost
// dimension, [N][C/b][H][W][b]. Two operators carry them, both added by the
// transform-conv-layout pass (graph/pass.h), never written by exporters (import accepts them
// and checks them like any other):
//   LayoutTransform(x) {src_layout, dst_layout}: the same tensor in another layout, "NCHW" or
//     "NCHW<b>c" (b >= 1 dividing the channels).
//   ConvNCHWc(x, w[, bias]) {strides, pads, dilations, group}: Conv on a blocked input x
//     [N][C/ib][H][W][ib] with weights [K/ob][span/ib][R][S][ib][ob] (group G >= 1: output
//     block ko reads the span input channels from start(ko), compiler/operator_table.h
//     NchwcGroups; span = C for G = 1) or [C/b][R][S][b] (depthwise: group = C, ob = ib),
//     bias [K]; the output is [N][K/ob][OH][OW][ob]. Padding, strides and dilations are the
//     same along H and W (what the workloads express).
#pragma once

#include <cstdint>
#include <string>

#include "compiler/operator_table.h"
#include "graph/graph.h"

namespace tf::graph {

// The block of a layout string: 0 for "NCHW", b for "NCHW<b>c"; anything else is a UserError
// naming the node and the attribute.
int64_t parse_layout(const Node& n, const std::string& attr);
std::string layout_name(int64_t block);
// `K` filters padded with zero filters to the next multiple of the target's channel block
// `block`, where the block does not divide them and that adds at most 1/8 of them (blocks of
// at least 4 lanes), or, with `half_blocks_up_to_a_third`, at most a third where half the
// block (at least 8) divides them (they would run in half vectors: MobileNet-v2's 24 -> 32);
// 0 where they are not padded (pad-channels' rule).
int64_t padded_filters(int64_t K, int64_t block, bool half_blocks_up_to_a_third = false);

// The workload (compiler/workload.h) of a ConvNCHWc node with input shape x and weight shape
// w, without its epilogue and closing parenthesis (as tasks.h's AnchorWorkload::spec):
// conv2d_nchwc(...) or depthwise_conv2d_nchwc(...).
std::string conv_nchwc_spec(const Node& n, const Shape& x, const Shape& w);

// A ConvNCHWc's channels and window from its input and weight shapes: depthwise when its
// weights have rank 4 ([C/b][R][S][b]) or 5 ([C/b][width][R][S][b]: groups of `width`
// channels in and out, each in one block, computed lane by lane as depthwise_conv2d_nchwc's
// width), else a (grouped) convolution of `group` groups ([K/ob][span/ib][R][S][ib][ob]).
struct ConvNchwcDims {
  bool depthwise = false;
  int64_t width = 1;
  int64_t group = 1, ib = 1, ob = 1, C = 0, K = 0, R = 0, S = 0;
  NchwcGroups groups() const { return {C, K, group, ob, ib}; }
};
ConvNchwcDims conv_nchwc_dims(const Node& n, const Shape& x, const Shape& w);

}  // namespace tf::graph
