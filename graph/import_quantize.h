// import_quantize: QuantizeLinear and DequantizeLinear (QDQ models: ONNX Runtime's quantizer,
// PyTorch's fake quantization) imported as float32 arithmetic on the integers' values.
//
// What it promises: a QuantizeLinear(x, scale, zero_point) becomes
//   Clip(Round(x / scale) + zero_point, lo, hi)
// with [lo, hi] the range of the zero point's type (uint8 when it is absent; opset 21's
// output_dtype when given), Round halving to even as ONNX's; a DequantizeLinear(x, scale,
// zero_point) becomes (x - zero_point) * scale. Per-tensor (one scale) and per-channel (a 1-D
// scale along `axis`, reshaped to broadcast there) alike. The results equal the ONNX operators'
// (opsets 13 to 17, the importer's range) with every int8/uint8 value held exactly as a float32;
// DequantizeLinear of a constant (a quantized weight) folds into float32 weights, so a QDQ
// model runs as a float32 one with its activations rounded to the quantization grid. Nothing
// runs in int8 yet (Graph::quantize_nodes counts the nodes, for the summaries).
// Refused with UserError naming the node and the value: a scale that is not a constant, not
// finite or not positive; a zero point that is not a constant of int8/uint8 values or not of
// the scale's shape; a per-channel scale whose length is not the axis's extent; an axis out of
// range; block_size (blocked quantization); an output_dtype other than int8 or uint8.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/ops.h"

namespace tf::graph {

// OpDef::expand of QuantizeLinear and DequantizeLinear: always adds the arithmetic above.
bool expand_quantize(const Node& n, ImportSink& sink);

// The operators of ONNX Runtime's com.microsoft domain the importer takes (QLinearAdd, ...,
// imported as their Q/DQ arithmetic), in name order.
std::set<std::string> microsoft_quantized_ops();

}  // namespace tf::graph
