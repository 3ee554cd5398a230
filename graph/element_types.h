// Graph element types at a model's edges: their ONNX numbers (what the model ABI's _dtype
// entries, compiler/model_entry.h EntryType and runtime/model_abi.h ModelDType, use), and
// float16 / bfloat16 values on the host (HostTensor holds them as floats; buffers as bits).
#pragma once

#include <cstdint>

#include "base/bfloat16.h"
#include "base/float16.h"
#include "graph/graph.h"

namespace tf::graph {

// ONNX's TensorProto number of `t` (uint8: 2, never at a model's edge).
inline int32_t onnx_element_type(DType t) {
  switch (t) {
    case DType::F32: return 1;
    case DType::U8: return 2;
    case DType::I64: return 7;
    case DType::Bool: return 9;
    case DType::F16: return 10;
    case DType::BF16: return 16;
  }
  return 1;
}

// The type of an ABI element number (1, 7, 9, 10, 16: the ABI loader checked it).
inline DType dtype_of_element_type(int32_t code) {
  switch (code) {
    case 7: return DType::I64;
    case 9: return DType::Bool;
    case 10: return DType::F16;
    case 16: return DType::BF16;
    default: return DType::F32;
  }
}

// A float16 (F16) or bfloat16 (BF16) value's bits, rounded to nearest even, and back.
inline uint16_t storage16_bits(DType t, float x) { return t == DType::F16 ? f16_bits(x) : bf16_bits(x); }
inline float storage16_value(DType t, uint16_t bits) {
  return t == DType::F16 ? f16_value(bits) : bf16_value(bits);
}
// `x` as a value of `t`: rounded for float16 and bfloat16, as it is otherwise.
inline float round_to(DType t, float x) { return is_storage16(t) ? storage16_value(t, storage16_bits(t, x)) : x; }

}  // namespace tf::graph
