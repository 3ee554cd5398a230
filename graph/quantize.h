// quantize: a float32 ONNX model made a QDQ model (`tunefarm quantize`), calibrated here, in
// the format ONNX Runtime's static quantizer writes and runs.
//
// What it promises: every Conv, MatMul and Gemm of the model gets its activation input (input
// 0, when it is computed or a model input) through a QuantizeLinear / DequantizeLinear pair,
// per tensor, uint8 asymmetric (int8 symmetric with `symmetric`), with the range seen on the
// calibration samples (min-max, the `percentile` of each side, or entropy: the clipping
// threshold whose quantized histogram is closest to the values' in KL divergence, as
// TensorRT's and ONNX Runtime's entropy calibrators choose it); and its constant weight
// (input 1, a float32 initializer) replaced by an int8 initializer and a DequantizeLinear,
// symmetric, per output channel (Conv: axis 0; MatMul: axis 1; Gemm: 0 with transB, else 1),
// or per tensor where the model's opset is below 13 (per-channel DequantizeLinear is
// opset 13's). A tensor read by several such nodes gets one pair. Biases stay float32.
// Everything else of the model is left as it was. The samples run through the reference
// evaluation (graph/reference_run.h): calibration is exact but slow on large models.
// Refused with UserError: a model with none of those nodes, no samples, a sample without one
// of the model's inputs, a percentile outside (50, 100].
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/onnx_import.h"

namespace tf::graph {

// How an activation's range is chosen from its calibration values.
enum class Calibration {
  MinMax,      // the smallest and largest value
  Percentile,  // `percentile` of each side's values
  Entropy,     // clipped where the quantized histogram loses least information (KL divergence)
};

struct QuantizeOptions {
  Calibration method = Calibration::MinMax;
  double percentile = 99.99;  // Calibration::Percentile
  bool per_channel = true;  // weights (per tensor when false)
  bool symmetric = false;   // activations int8 symmetric instead of uint8 asymmetric
  // Sizes of the model's dynamic input dimensions for the calibration (--dim, --input-shape);
  // the QDQ model written keeps them dynamic.
  InputBinding bind;
};

struct QuantizeReport {
  int activations = 0;      // tensors given a QuantizeLinear / DequantizeLinear pair
  int weights = 0;          // initializers made int8
  int nodes = 0;            // Conv, MatMul and Gemm nodes that read them
  bool per_channel = true;  // false: the opset made weights per tensor
};

// The QDQ model of the ONNX model `bytes` (named `what` in errors), calibrated on `samples`
// (each the model's inputs by name).
std::string quantize_model(const std::string& bytes, const std::string& what,
                           const std::vector<std::map<std::string, HostTensor>>& samples,
                           const QuantizeOptions& options, QuantizeReport* report = nullptr);

}  // namespace tf::graph
