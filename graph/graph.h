// graph: a whole model as a dataflow graph of operators over statically shaped tensors.
//
// What it promises:
//   - Every value (graph input, constant, node output) has a name unique in the graph, an
//     element type and a static shape; constants carry their data.
//   - Nodes are kept in a topological order: a node reads only graph inputs, constants and
//     outputs of nodes before it. verify() checks this and every other invariant, and passes
//     keep it.
//   - Element types are float32 (what models compute in) and int64 (shape arithmetic, indices);
//     bool appears only as the result of comparisons feeding Where. int8 and uint8 constants
//     (quantized weights, zero points) are held as float32 values (HostTensor::narrow says
//     which); values of other types are refused at import.
// The operator semantics (shapes, attributes, reference evaluation) live in graph/ops.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace tf::graph {

// U8: quantized activations between two int8 kernels (graph/pass_int8_edges.cc); never a
// model's input or output, never a constant. F16 and BF16: a float16 (bfloat16) model's inputs
// and outputs as they are stored, 2 bytes an element; the graph computes in float32 between
// them: the importer reads each such input with a Cast to float32 and writes each such output
// with a storage Cast (Cast with kStorageCast set, rounding to nearest even), and verify()
// keeps them there (graph/onnx_import.cc). Their host data are floats (exact values).
enum class DType { F32, I64, Bool, U8, F16, BF16 };
const char* dtype_name(DType t);
// Whether a HostTensor of type t holds its data in `f` (float32, float16, bfloat16).
inline bool holds_floats(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
inline bool is_storage16(DType t) { return t == DType::F16 || t == DType::BF16; }
// The attribute marking a Cast to float16 (to = 10) or bfloat16 (16) as a model output's
// storage: its result is that type (2 bytes, rounded), where ONNX's Cast to them inside a graph
// keeps the value in float32 (docs/precision.md).
inline constexpr const char* kStorageCast = "tf_storage";

// The attribute auto-mixed-precision gives a MatMul, Gemm or Conv for a CUDA target's tensor
// cores: "tf32", "fp16" or "bf16", its workload's precision=... (matmul_workload, gemm_workload)
// and the rounding of its operands in the reference evaluation.
inline constexpr const char* kTensorCorePrecision = "tf_precision";
// The op a marked MatMul or Gemm of constant float32 weights becomes at fp16 and bf16 on a cuda
// target (auto-mixed-precision, graph/pass.h): x times the weights [K, N] (a Gemm's bias an Add
// after it), computed by a kernel that reads the weights as 16-bit values stored [N][K] (matmul
// weight_dtype=float16|bfloat16, trans_b=1).
inline constexpr const char* kTensorCoreMatMul = "MatMulTensorCore";
// The same for a marked group-1 Conv of constant float32 weights: Conv's inputs and attributes,
// computed by conv2d_tc.cuda reading the weights [K][C][R][S] as 16-bit values
// (conv2d_nchw weight_dtype=float16|bfloat16).
inline constexpr const char* kTensorCoreConv = "ConvTensorCore";
// The op fuse-attention makes of MatMul, scaling, mask Add, Softmax and MatMul on cuda targets
// (graph/pass_fuse_attention.cc): one kernel, compiler/attention.h.
inline constexpr const char* kFusedAttention = "FusedAttention";
// Whether `op` is one of those. Their input 0 may also be a float16 (bfloat16) value stored so
// by its producer (sixteen-bit-edges: a value only such products read, which round it to that
// type anyway): the only float16 values between kernels.
inline bool reads_16_bit_weights(const std::string& op) { return op == kTensorCoreMatMul || op == kTensorCoreConv; }
struct Node;
// Whether node `n` may read a float16 (bfloat16) value as its input k (sixteen-bit-edges): the
// data of a product of 16-bit weights (input 0), or an operand of a MatMul of two activations
// marked for tensor cores (its own inference checks the type and that input 0 is not 16-bit
// alone).
bool reads_16_bit_input(const Node& n, size_t k);

using Shape = std::vector<int64_t>;
int64_t num_elements(const Shape& s);
std::string shape_str(const Shape& s);

// Float32 data imported from 8-bit integers (a QDQ model's weights and zero points, held as
// the integers' values): which type they were, the range a QuantizeLinear whose zero point
// this is saturates to (graph/import_quantize.h).
enum class Narrow : uint8_t { None, Int8, Uint8 };

// A dense row-major tensor on the host. Floats live in `f`, int64 and bool (0/1) in `i`.
struct HostTensor {
  DType dtype = DType::F32;
  Narrow narrow = Narrow::None;  // F32 only
  Shape shape;
  std::vector<float> f;
  std::vector<int64_t> i;

  // Float data of type t (F32, or F16 / BF16 whose values `data` holds exactly).
  static HostTensor floats(Shape shape, std::vector<float> data, DType t = DType::F32);
  static HostTensor ints(Shape shape, std::vector<int64_t> data, DType t = DType::I64);
  int64_t size() const { return num_elements(shape); }
  // Element k as a double / an int64 whatever the type.
  double as_double(int64_t k) const {
    return holds_floats(dtype) ? f[k] : static_cast<double>(i[k]);
  }
  // Floats convert by truncation, saturating at the int64 range (NaN is 0), never UB.
  int64_t as_int(int64_t k) const { return holds_floats(dtype) ? float_to_int(f[k]) : i[k]; }
  static int64_t float_to_int(double v);
};

// An attribute of a node, as ONNX has them (graphs and sparse tensors are not supported).
using Attr =
    std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>, HostTensor,
                 std::vector<std::string>>;

struct Value {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::optional<HostTensor> constant;  // initializers, Constant nodes, folded results
};

struct Node {
  std::string name;                  // from the model, or made unique at import when it had none
  std::string op;                    // ONNX op type (Conv, MatMul, ...); passes add fused ones
  std::vector<std::string> inputs;   // value names; "" for an omitted optional input
  std::vector<std::string> outputs;  // value names
  std::map<std::string, Attr> attrs;

  bool has(const std::string& a) const { return attrs.count(a) != 0; }
  int64_t get_int(const std::string& a, int64_t fallback) const;
  float get_float(const std::string& a, float fallback) const;
  std::string get_string(const std::string& a, const std::string& fallback) const;
  std::vector<int64_t> get_ints(const std::string& a, const std::vector<int64_t>& fallback) const;
  std::vector<std::string> get_strings(const std::string& a,
                                       const std::vector<std::string>& fallback) const;
  // "node 'name' (Op)": how error messages name a node.
  std::string where() const;
};

struct Graph {
  std::string name;
  int64_t opset = 17;                // of the default ONNX domain
  // The model's own opset where ONNX's version converter raised it to `opset` at import
  // (models of opsets 1 to 10: graph/onnx_import.cc); 0 when it was imported as it is.
  int64_t opset_converted_from = 0;
  // What import took from the model that it says otherwise (a graph output declared with other
  // sizes than it computes: the computed ones are used), a line each, for the caller to print.
  std::vector<std::string> import_warnings;
  std::vector<std::string> inputs;   // runtime inputs (not constants), in the model's order
  std::vector<std::string> outputs;  // in the model's order
  std::vector<Node> nodes;           // topological order
  std::map<std::string, Value> values;
  // QuantizeLinear and DequantizeLinear nodes the model had, imported as float32 arithmetic
  // (graph/import_quantize.h), and the products folded into int8 kernels since
  // (fold-qdq: QMatMul nodes).
  int64_t quantize_nodes = 0;
  int64_t int8_nodes = 0;
  // Products converted to bfloat16 kernels (auto-mixed-precision at --precision bf16:
  // MatMulBF16 nodes).
  int64_t bf16_nodes = 0;
  int64_t fp16_nodes = 0;  // the same at --precision fp16 (MatMulFP16, ConvNCHWcFP16)
  // MatMul and Gemm nodes marked for a CUDA target's tensor cores at --precision
  // (kTensorCorePrecision, graph/pass.h).
  int64_t tensor_core_nodes = 0;
  // Values stored in 16 bits between kernels (sixteen-bit-edges: storage Casts a producer fuses).
  int64_t sixteen_bit_values = 0;
  // If, Loop, Scan and sequence nodes the model had, written out at import
  // (graph/import_control_flow.h): the iterations are those of the shapes imported.
  struct WrittenOut {
    int64_t ifs = 0, loops = 0, scans = 0, iterations = 0, sequence_ops = 0;
    int64_t ifs_selected = 0;  // Ifs of a run-time condition: both branches computed, outputs selected
  } written_out;
  // A CPU library runs a batch of this graph one image at a time (the pass
  // one-image-at-a-time found that the model keeps the images apart and that it pays:
  // graph/image_loop.h).
  bool one_image_at_a_time = false;
  // Products (MatMul, Gemm) read operands that layout views and scalings compute inside their
  // kernels (pass read-views-in-products, cuda targets: graph/fusion.h).
  bool products_read_views = false;
  // What each QuantizeLinear/DequantizeLinear output was before its float32 expansion, by
  // the output's name, for the passes that fold them into int8 kernels.
  struct Qdq {
    bool quantize = false;     // QuantizeLinear (else DequantizeLinear)
    std::string input;         // its input value
    std::vector<float> scale;  // one per tensor, or one per channel along `axis`
    std::vector<float> zero;   // as scale (0 where absent)
    int64_t axis = -1;         // -1: per tensor
    Narrow type = Narrow::None;  // the quantized side's type (None: int32, a bias)
  };
  std::map<std::string, Qdq> qdq;

  const Value& value(const std::string& name) const;
  Value& value(const std::string& name);
  bool is_constant(const std::string& name) const;
  bool is_input(const std::string& name) const;   // a runtime input of the model
  bool is_output(const std::string& name) const;  // returned by the model
  // A value name not yet used in the graph, from `base`.
  std::string fresh_name(const std::string& base) const;
  // A new int64 vector constant (shapes, axes, pads for the nodes a pass or the importer
  // builds), named from `base`; returns its name.
  std::string add_ints(const std::string& base, std::vector<int64_t> v);
  // A new computed float32 value of `shape`, named from `base`; returns its name.
  std::string add_float(const std::string& base, const Shape& shape);
  // A new constant holding `t` (of t's type and shape), named from `base`; returns its name.
  std::string add_constant(const std::string& base, HostTensor t);
};

// Checks the invariants above; throws UserError naming the first broken one ("after pass X"
// is added by the pass manager).
void verify(const Graph& g);

// The graph as text, one node a line: `%y = Conv(%x, @w) {group=1, pads=[1, 1, 1, 1]} :
// float32[1, 64, 56, 56]`, constants as @name[shape]. For --dump-pass.
std::string graph_to_text(const Graph& g);

// Operator counts, parameters and size: one line per op type, for `tunefarm import`.
struct GraphStats {
  std::map<std::string, int> ops;
  int64_t parameters = 0;      // float elements held in constants
  int64_t constant_bytes = 0;  // all constants
};
GraphStats graph_stats(const Graph& g);

}  // namespace tf::graph
