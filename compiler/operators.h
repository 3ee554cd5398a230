// The operator library: each workload becomes a small graph of tensor expressions.
//
// Every operator has the same shape of graph, which the schedule templates rely on:
//   inputs (call order) -> [pad] -> acc (the reduction) -> [out (the fused epilogue)]
// `acc` is the output itself when the epilogue is none. The epilogue is part of the graph,
// not a second kernel, so a schedule that computes `acc` at a tile of `out` applies the
// bias and relu while the tile is still in registers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/te.h"
#include "compiler/workload.h"
#include "runtime/pack_layout.h"  // pack_layout: what a template reads from a prepacked input

namespace tf {

struct OpGraph {
  Workload workload;
  std::vector<ir::Tensor> inputs;  // call order: data/A, weight/B, bias (when the epilogue has one)
  ir::Tensor output;               // the only output
  ir::Tensor acc;                  // the reduction
  ir::Tensor pad;                  // zero-padded data, or null when pad == 0
  // Elementwise stages between acc and output that a whole-model compile fuses in (a residual
  // add, a clip: graph/model_compiler.h); every template inlines them into the output.
  std::vector<ir::Tensor> tail;
  // Stages computing an operand from the inputs (a model's layout views of a value, its Casts
  // and scalings: graph/model_compiler.cc), read through one stage in the operand's shape that
  // the templates stage as a computed operand; every template inlines these into it.
  std::vector<ir::Tensor> prologue;
  // Inputs the caller passes already packed (a compiled model's constant weights): the
  // templates then read `<input>.pack` instead of packing on every call.
  std::set<std::string> prepacked;
  int64_t flops = 0;               // multiply-adds count 2
  // How many products of unit size an output element sums, for the accuracy check
  // (compiler/reference.h); 0: the extent of acc's reduction.
  int64_t check_terms = 0;
  // Whether the check measures errors relative to the reference's magnitude where it is past
  // 1 (outputs that are large integers scaled, as a quantized product's are).
  bool check_relative = false;
  // Inputs whose int32 words each hold two narrower values (matmul_bf16's B: two bfloat16,
  // kBFloat16Pairs), by input name: boards and checks fill them with such values
  // (runtime/kernel_library.h fill_typed) instead of int32 ones.
  std::map<std::string, std::string> word_types;
  // What boards are told an input holds (ArgSpec.dtype, the sidecar's "dtype"): its word type
  // where it has one, else its element type.
  std::string arg_dtype(const ir::Tensor& t) const;
};

// The int32 whose byte t is bytes(t) (each an int32 in [0, 255]), t = 0..3, wrapping at t = 3:
// four uint8/int8 values as the quad dot4_u8s8 reads (compiler/ir.h).
ir::Expr pack_quad(const std::function<ir::Expr(int)>& bytes);

// The word types of int32 words holding two bfloat16 or two float16 values.
inline constexpr const char* kBFloat16Pairs = "bfloat16x2";
inline constexpr const char* kFloat16Pairs = "float16x2";
// The types of 16-bit float inputs held as their bits (dtype=float16, dtype=bfloat16).
inline constexpr const char* kFloat16Elements = "float16";
inline constexpr const char* kBFloat16Elements = "bfloat16";

// A 16-bit float format whose weights travel in pairs per int32 word (compiler/ir.h): the
// word type boards fill, and the host's rounding, reading of halves and making of words (the
// references, a model's constants).
struct HalfPairs {
  const char* word_type;  // kBFloat16Pairs, kFloat16Pairs
  float (*round)(float);
  float (*half)(float word, int64_t t);
  float (*pair)(float lo, float hi);
};
extern const HalfPairs kBF16Pairs, kF16Pairs;

OpGraph build_op(const Workload& w);

// The IR element type of a workload's element type.
ir::Type ir_type(DType t);

// Operand `e` as a product of operand types `t` takes it: an integer widened to int32
// (products summed in int32), a 16-bit float's bits widened to its float32 value (exact),
// float32 as it is. The templates that define the product again (an implicit GEMM) read their
// operands through it too.
ir::Expr widened(const OperandTypes& t, ir::Expr e);

// Float32 `e` rounded to precision `p` as NVIDIA's tensor cores round their operands (TF32:
// cvt.rna; float16 and bfloat16: to nearest, ties to even), still a float32; `e` itself at fp32.
ir::Expr rounded(Precision p, ir::Expr e);

// The output of `g` with its float32 operands (data/A and weight/B) rounded to the workload's
// precision wherever they are read: what a tensor-core template computes, as a definition any
// schedule computes (16-bit operands are exact already; the sums stay float32). --emulate-gpu
// lowers a kernel of warp-level products, which a serialized grid cannot run, from this
// (graph/model_compiler.cc).
ir::Tensor with_operands_rounded(const OpGraph& g);

// The reads that reduction `acc` multiplies (a matmul's A and B, a convolution's padded data
// and weights), past selects, widening calls and casts; nulls where its sum is no product of two
// reads.
std::pair<const ir::TensorRead*, const ir::TensorRead*> product_reads(const ir::Tensor& acc);

}  // namespace tf
