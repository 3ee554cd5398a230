// import_window3d: 3-D convolutions (video models: torchvision's r3d_18, mc3_18, r2plus1d_18)
// imported as 2-D ones, with the depth folded into the batch.
//
// What it promises: a Conv over [N, C, D, H, W] becomes, per tap k of the depth window, a
// Slice of the (depth-padded) input at the depths that tap reads for each output depth, a
// Transpose and Reshape to [N * D_out, C, H, W], and a 2-D Conv by the weight's depth slice
// k; the taps' results are summed (the bias added once) and reshaped back to
// [N, M, D_out, H_out, W_out]. So the conv2d templates, tuning and blocked layouts serve 3-D
// convolutions too. Pads, strides, dilations, groups and auto_pad (NOTSET, VALID, SAME_UPPER,
// SAME_LOWER) on all three axes; bias optional; weights constant or computed. The result
// equals the ONNX Conv's on 5-D inputs.
// A MaxPool or AveragePool over [N, C, D, H, W] pools each depth in 2-D (the depth folded into
// the batch; the height's and width's attributes, ceil_mode and count_include_pad as given),
// then combines the depth window's taps, sliced like a convolution's, with Max, or summed and
// divided by each output depth's count of taps (those in the input, or in its padding too
// with count_include_pad: the window's count is the product of its axes' counts, so this
// equals the 3-D average). MaxPool's depth padding is -inf; ceil_mode's last window may reach
// past the padding. Its Indices output is refused.
// Attributes with the wrong number of values, a window larger than the padded input, and more
// than kMaxDepthTaps depth taps are refused with UserError naming the node.
#pragma once

#include <cstdint>

#include "graph/graph.h"
#include "graph/ops.h"

namespace tf::graph {

// The most depth taps a 3-D window may have (each becomes a few nodes; video models use 1 to
// 7), so a hostile model cannot make the graph explode.
constexpr int64_t kMaxDepthTaps = 64;

// OpDef::expand of Conv, ConvTranspose, MaxPool and AveragePool: 3-D windows as above, and 1-D
// windows over [N, C, W] as 2-D ones of height 1, added through the importer's `add`; false
// (nothing added) for 2-D ones. The importer checked the node against its entry first.
bool expand_window(const Node& n, ImportSink& s);

}  // namespace tf::graph
