// Workload specs: the text that names an operator and its sizes.
//
//   conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1,epilogue=bias_relu)
//   matmul(M=512,N=512,K=512,dtype=uint8,weight_dtype=int8,epilogue=none)
//   matmul(M=4096,N=4096,K=4096,precision=tf32,epilogue=none)
//
// parse_workload checks every key and value and throws UserError naming the first bad one.
// Workload::canonical() prints every key of the operator in its declared order, defaults
// included, so one workload has exactly one text; the tuning database keys on that text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tf {

enum class Epilogue { None, Bias, Relu, BiasRelu };
const char* epilogue_name(Epilogue e);

// Element types of a workload's operands, named as in ONNX (docs/precision.md). Integer
// operands accumulate and produce int32; float16 and bfloat16 operands (held as their 16 bits)
// are multiplied in their own precision and summed in float32, producing float32.
enum class DType { Float32, Int8, Uint8, Int32, Float16, BFloat16 };
const char* dtype_name(DType t);

// The arithmetic of float32 operands (precision=... in a workload): float32 (fp32, the
// default), or the operands rounded to TF32 (tf32), float16 (fp16) or bfloat16 (bf16) and
// their products summed in float32, as NVIDIA's tensor cores compute (docs/precision.md).
enum class Precision { Float32, TF32, Float16, BFloat16 };
const char* precision_name(Precision p);
// The precision named fp32, tf32, fp16 or bf16, or nullopt.
std::optional<Precision> precision_named(const std::string& name);
// The float rounding of `p` (identity for fp32).
float (*precision_rounding(Precision p))(float);

// The types of a workload's two operands (data/A, weight/B); their output's follows.
struct OperandTypes {
  DType data = DType::Float32;
  DType weight = DType::Float32;
  Precision precision = Precision::Float32;  // float32 operands only
  bool operator==(const OperandTypes&) const = default;
  bool is_float32() const { return data == DType::Float32 && weight == DType::Float32; }
  // Whether an operand is an integer (the products and the output are then int32).
  bool is_integer() const;
  DType output() const { return is_integer() ? DType::Int32 : DType::Float32; }
  // "float32", "uint8 x int8", "float32 in tf32".
  std::string str() const;
};

// The int8 products' operand types (qmatmul, qconv2d_nchwc, qdepthwise_conv2d_nchwc, and the
// templates that schedule them): float data quantized on entry (float32, the default), or data
// given already quantized (uint8 x int8).
inline const std::vector<OperandTypes> kQuantizedInputTypes = {OperandTypes{},
                                                               OperandTypes{DType::Uint8, DType::Int8}};

// Float32 operands computed in reduced precision, as the tensor-core templates compute them
// (compiler/templates/tensor_core_gemm.h): precision=tf32, fp16, bf16.
inline const std::vector<OperandTypes> kTensorCoreTypes = {
    OperandTypes{DType::Float32, DType::Float32, Precision::TF32},
    OperandTypes{DType::Float32, DType::Float32, Precision::Float16},
    OperandTypes{DType::Float32, DType::Float32, Precision::BFloat16}};

// Operands given in 16 bits (dtype=float16, dtype=bfloat16: the precision is the type's, and
// the canonical form leaves it out), products summed in float32: half the bytes of float32
// operands, nothing rounded in the kernel.
inline const std::vector<OperandTypes> k16BitTypes = {
    OperandTypes{DType::Float16, DType::Float16, Precision::Float16},
    OperandTypes{DType::BFloat16, DType::BFloat16, Precision::BFloat16}};

// Float32 data times 16-bit weights (dtype=float32,weight_dtype=float16 | bfloat16), computed
// in the weights' precision as tensor cores compute precision=fp16 | bf16 (the data rounded as
// it is read): a model's weights stored in 16 bits. Tensor-core templates only (CPUs refuse
// the rounding by name, as they refuse precision=fp16).
inline const std::vector<OperandTypes> k16BitWeightTypes = {
    OperandTypes{DType::Float32, DType::Float16, Precision::Float16},
    OperandTypes{DType::Float32, DType::BFloat16, Precision::BFloat16}};

struct Workload {
  std::string op;
  // Integer parameters in the operator's declared order, defaults filled in.
  std::vector<std::pair<std::string, int64_t>> params;
  Epilogue epilogue = Epilogue::None;
  // dtype=... and weight_dtype=... (it defaults to dtype), precision=...; left out of the
  // canonical form at float32 / fp32, so records made before types keep their workload strings.
  OperandTypes types;

  int64_t get(const std::string& key) const;
  bool has(const std::string& key) const;  // whether the operator has the key
  // An optional 0/1 key (trans_b, const_b): set, where the operator has it (false elsewhere).
  bool flag(const std::string& key) const { return has(key) && get(key) != 0; }
  // The parameters the canonical form names: all but optional keys at their defaults.
  std::vector<std::pair<std::string, int64_t>> shown_params() const;
  std::string canonical() const;
};

// Limits parse_workload enforces, so no size computation downstream can overflow and no
// workload asks a board for more memory than it could have:
//   each key's value                 at most kMaxWorkloadValue
//   each tensor (padded copies too)  at most kMaxTensorElements elements
//   all tensors together             at most kMaxWorkloadBytes
//   FLOPs of one call                at most kMaxWorkloadFlops
constexpr int64_t kMaxWorkloadValue = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxTensorElements = int64_t{1} << 32;
constexpr int64_t kMaxWorkloadBytes = int64_t{32} << 30;
constexpr int64_t kMaxWorkloadFlops = int64_t{1} << 62;

Workload parse_workload(const std::string& spec);

// The operator names parse_workload accepts, in a fixed order.
std::vector<std::string> known_ops();

}  // namespace tf
