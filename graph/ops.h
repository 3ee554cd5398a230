// ops: what each supported operator means, in one table: its inputs and attributes, how its
// output types and shapes follow from its inputs (shape inference), and a reference
// evaluation on host tensors.
//
// What it promises:
//   - find_op(type) knows every operator the importer accepts; anything else is unsupported,
//     and the error names the node and lists what is supported (docs/models.md has the list).
//   - infer() checks the node (input count, attributes, ranks, compatible shapes) and throws
//     UserError naming the node and the value at fault; it never guesses a dynamic shape:
//     inputs that decide a shape (Reshape's shape, Slice's starts, ...) must be constants.
//   - eval() is the reference: plain loops, float32 elements with wide accumulators. Constant
//     folding runs it, and tests compare compiled models against it. It is not fast.
// Semantics follow the ONNX operator documents for opsets 11 to 25 (`opset` selects between
// versions where they differ: Softmax before 13, axes as attribute or input, GroupNormalization's
// scale per group before 21; what a later opset adds is refused before it).
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/te.h"
#include "graph/graph.h"

namespace tf::graph {

struct TypeShape {
  DType dtype = DType::F32;
  Shape shape;
};

struct OpContext {
  const Node& node;
  int64_t opset;
  // Per input: its value (type, shape, and data where constant); nullptr for an omitted
  // optional input.
  std::vector<const Value*> inputs;
  // Expressions for a GPU kernel (node_te): a reduction over a row stays one stage, which the
  // GPU schedule spreads over threads, instead of a CPU's partial results per vector lane.
  bool gpu = false;

  size_t count() const { return inputs.size(); }
  bool present(size_t k) const { return k < inputs.size() && inputs[k] != nullptr; }
  const Value& in(size_t k) const;
  // Input k's data, which must be constant (else: a dynamic shape, named in the error).
  const HostTensor& constant(size_t k, const char* what) const;
};

struct TeOperand;       // graph/node_te.h
struct AnchorWorkload;  // graph/tasks.h

// The tensor expressions compile --model makes of a node (graph/node_te.h, TVM's FTVMCompute):
// one tensor per output, of the shape `out` (the node's, or an elementwise node's other shape
// of the same elements), operation names starting with `name`.
// How the importer hands over the nodes an operator expands into (OpDef::expand).
struct ImportSink {
  Graph& g;
  const std::string& file;            // for messages
  std::function<void(Node)> add;      // infers a node and adds it (or folds it)
  int64_t& recurrent_steps_left;      // the import's budget of unrolled recurrent steps
};
using ExpandFn = bool (*)(const Node& n, ImportSink& sink);

using TeFn = std::function<std::vector<ir::Tensor>(const Graph& g, const Node& n, const OpContext& c,
                                                   const std::vector<TeOperand>& in, const Shape& out,
                                                   const std::string& name)>;

// How the fuser (graph/fusion.h) may group an operator with its neighbours, TVM's TOpPattern:
//   Anchor       a tunable kernel (its OpDef has a workload); elementwise consumers join it as
//                the register tile's epilogue.
//   Elementwise  output element i reads input element i (after broadcasting) only.
//   Injective    each output element reads one input element somewhere else (layout, gathers).
//   Reduction    an output element reads many input elements (a row, a window of the whole).
//   Opaque       anything else: a kernel of its own, fused with nothing.
enum class OpKind { Anchor, Elementwise, Injective, Reduction, Opaque };

// One operator, whole: adding an ONNX operator is one entry in a register_*_ops function
// (graph/ops_*.cc), a push_back and its describe() line (docs/architecture.md shows one).
struct OpDef {
  std::string type;
  int min_inputs = 1, max_inputs = 1;
  std::function<std::vector<TypeShape>(const OpContext&)> infer;
  // Reference evaluation; inputs as in infer, all with data.
  std::function<std::vector<HostTensor>(const OpContext&, const std::vector<const HostTensor*>&)>
      eval;
  // Null: compiling the operator is not implemented (the reference evaluation still runs it).
  TeFn te = nullptr;
  // An anchor (a tunable kernel's operator): the workload that computes a node of it
  // (graph/tasks.h). Null for every other operator.
  AnchorWorkload (*workload)(const Graph& g, const Node& n) = nullptr;
  // Whether a compiled kernel reads input k as values (an operand, data to move) rather than
  // as a parameter read from the graph (a shape, axes, bounds): graph/node_te.h's
  // reads_as_data. Null: input 0 only.
  bool (*data_input)(const Graph& g, const Node& n, size_t k) = nullptr;
  // Work linear in the tensors' sizes, which import and fold-constants may evaluate ahead of
  // time within kMaxFoldedElements; false for the products and convolutions.
  bool linear_cost = true;
  // Int64 results compiled kernels compute exactly as floats (graph/node_te.h): moving values,
  // and arithmetic float32 does exactly on integers up to 2^24 (int64 inputs are checked
  // against that bound on entry, compiler/model_entry.h).
  bool int64_exact = false;
  // Required: its fusion pattern. An entry without one fails the registry's test, and the
  // fuser stops (TF_CHECK) rather than guess: a wrong guess fuses an injective or opaque
  // operator into an anchor's epilogue.
  std::optional<OpKind> pattern{};
  // The attributes it understands (the ONNX spec's, opsets 11 to 25); any other attribute is
  // refused rather than ignored, so a model never computes something else silently. Those that
  // only matter in training or for outputs tunefarm refuses are accepted (BatchNormalization's
  // momentum, MaxPool's storage_order). Their kinds and defaults are where they are read
  // (Node::get_int and friends, and the *_spec decoders below).
  std::vector<std::string> attributes{};
  // Operators imported as a subgraph of others (RNN, GRU and LSTM unrolled into steps, 1-D and
  // 3-D windows as 2-D ones): adds `n` through `add` as other nodes and returns true, or
  // returns false to add `n` itself. The entry's input count and attribute checks run first.
  ExpandFn expand = nullptr;
  // Anchors: where the bias of a fused epilogue runs along the output (Conv: axis 1; a
  // blocked ConvNCHWc: axis 1 times the lane axis 4; the products: the last axis), and the
  // attribute that says its weight (input 1) is stored transposed (Gemm's transB), if any.
  enum class BiasAxis { Last, Channel, BlockedChannel } bias_axis = BiasAxis::Last;
  const char* transposed_weight = nullptr;
  // Anchors whose kernel takes other operands than the node's inputs: the constants that
  // follow input 0 in the kernel's call (QMatMul: int8 weights as quads, quantization
  // parameters, per-column scale and offset). Null: the node's inputs 0 and 1 (and the bias).
  std::vector<HostTensor> (*kernel_constants)(const Graph& g, const Node& n) = nullptr;
  // Reads a uint8 value (QuantizeU8's, graph/pass_int8_edges.cc) as its input 0: the int8
  // products. infer_node refuses uint8 inputs anywhere else (kernels would read the bytes as
  // floats).
  bool uint8_data = false;
  // Whether a node keeps the rows of axis 0 apart: each row of its outputs computed from the
  // same row of its inputs, where the shapes keep axis 0 (graph/image_loop.h checks the shapes;
  // this says what shapes cannot: a Softmax over axis 0 keeps them). Null: by the pattern,
  // elementwise operators and anchors do and the others do not (an operator that does says
  // so: rows_apart_always, or a check of its axis).
  bool (*rows_apart)(const Graph& g, const Node& n) = nullptr;
  // Whether the fuser takes into the node's kernel every elementwise or injective group that
  // computes one of its inputs for it alone (FusedAttention: the layout operators that cut Q,
  // K and V out of a projection), as prologues of its operand reads; the node's pattern is
  // otherwise its own.
  bool fuses_operands = false;
};

// rows_apart for operators whose shapes alone tell (pools, reshapes, reductions: any of them
// touching axis 0 changes its size, which image_loop sees).
bool rows_apart_always(const Graph& g, const Node& n);
// For rows_apart: whether n's "axis" attribute (default_axis where absent), of input 0's rank,
// is not axis 0 (a LayerNormalization's, a Gather's, a TopK's).
bool axis_is_not_first(const Graph& g, const Node& n, int64_t default_axis);
// Whether `n` keeps the rows of axis 0 apart (OpDef::rows_apart, or its pattern's default).
bool keeps_rows_apart(const Graph& g, const Node& n);

// Sets the facts of an entry just pushed: registration files call it after each push_back.
void describe(OpDef& d, OpKind pattern, std::vector<std::string> attributes = {}, bool int64_exact = false);

// data_input for operators whose every input is an operand (binary arithmetic, comparisons,
// Where, Concat, Clip, ...), and for those that read input 2 as a value too (Pad's constant,
// OneHot's values).
bool every_input_is_data(const Graph& g, const Node& n, size_t k);
bool first_and_third_are_data(const Graph& g, const Node& n, size_t k);

const OpDef* find_op(const std::string& type);
std::vector<std::string> supported_ops();

// The operator's name, input count and attributes against its entry (UserError naming the node
// and the value at fault); returns the entry.
const OpDef& check_node(const Node& n);
// Checks the input count and runs the op's inference.
std::vector<TypeShape> infer_node(const Node& n, const Graph& g, int64_t opset);
// Evaluates a node whose inputs are all available in `values` (by name).
std::vector<HostTensor> eval_node(
    const Node& n, const Graph& g, int64_t opset,
    const std::function<const HostTensor&(const std::string&)>& values);

// Registration from the op families' files.
void register_elementwise_ops(std::vector<OpDef>& ops);
void register_nn_ops(std::vector<OpDef>& ops);
void register_shape_ops(std::vector<OpDef>& ops);
void register_layout_ops(std::vector<OpDef>& ops);  // graph/layout.h
void register_resize_ops(std::vector<OpDef>& ops);
void register_conv_transpose_ops(std::vector<OpDef>& ops);
void register_einsum_ops(std::vector<OpDef>& ops);
void register_scan_ops(std::vector<OpDef>& ops);  // OneHot, CumSum, Trilu, GatherElements, ...
void register_recurrent_ops(std::vector<OpDef>& ops);  // graph/import_recurrent.h
void register_quantize_ops(std::vector<OpDef>& ops);   // graph/import_quantize.h
void register_norm_ops(std::vector<OpDef>& ops);  // graph/import_norms.cc: GroupNormalization, RMSNormalization, LRN
void register_function_ops(std::vector<OpDef>& ops);  // graph/import_functions.cc: Attention, Swish, CastLike, MeanVarianceNormalization, LpNormalization
void register_precision_ops(std::vector<OpDef>& ops);  // graph/pass_auto_mixed_precision.cc
void register_attention_ops(std::vector<OpDef>& ops);  // graph/pass_fuse_attention.cc

// A Transpose's perm: its attribute, or (absent or empty) ONNX's default for an input of rank
// `rank`, the dimensions reversed. Not checked (shape inference checks it: is_permutation).
std::vector<int64_t> transpose_perm(const Node& n, size_t rank);
// Whether `perm` is a permutation of 0 .. rank-1.
bool is_permutation(const std::vector<int64_t>& perm, size_t rank);

// The most elements one tensor may have (16 GiB of float32): larger shapes, or shapes whose
// product overflows, are the node's error before anything is allocated.
constexpr int64_t kMaxGraphTensorElements = int64_t{1} << 32;
void check_tensor_size(const std::string& what, const Shape& s);
// What import and fold-constants evaluate ahead of time: results of at most this many
// elements, from operators whose cost is linear in their sizes (not MatMul, Gemm, Conv,
// ConvTranspose or Einsum).
// Anything bigger stays a node, so a hostile model cannot make folding allocate or compute
// without bound.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;
// ... and all of one import's (or one fold-constants run's) folded results together at most
// this many elements; past it, nodes stay nodes.
constexpr int64_t kMaxFoldedTotal = int64_t{1} << 26;
// Import folds only shape arithmetic (int64 and bool: shapes, indices, masks), which real
// models keep small; its budget is smaller, so a hostile model's folding stays within a
// second even under the sanitizers (the fuzz target found ConstantOfShape, Pad and Transpose
// chains folding 2^26 elements in 11 s under ASan).
constexpr int64_t kMaxImportFoldedTotal = int64_t{1} << 22;
bool foldable(const Node& n, const std::vector<TypeShape>& outputs);

// Selu's default alpha and gamma (the ONNX spec's, as float32).
constexpr float kSeluAlpha = 1.67326319217681884765625f;
constexpr float kSeluGamma = 1.05070102214813232421875f;

// Helpers shared by the op files.
Shape broadcast_shapes(const Node& n, const Shape& a, const Shape& b);
// Whether `from` broadcasts to `to` unchanged (aligned on the right, each dimension 1 or
// `to`'s; no higher rank): a mask or scale that must fit a given shape.
bool broadcasts_to(const Shape& from, const Shape& to);
// For attention masks: per row of `mask`'s last axis (float32; a scalar is one row), true where
// the row is -inf throughout (a query that may attend no key); a bool tensor of `mask`'s shape
// with its last dimension 1.
HostTensor fully_masked_rows(const HostTensor& mask);
// Row-major strides of `s`, with 0 for dimensions broadcast to `out` (aligned on the right).
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out);
// A negative axis counts from the end; out of [-rank, rank) is the node's error.
int64_t normalize_axis(const Node& n, int64_t axis, int64_t rank, const char* what = "axis");
HostTensor make_like(DType t, const Shape& s);

// Float maximum and minimum as the compiled kernels compute them (IEEE 754-2019 maximum and
// minimum, PyTorch's rule): a NaN operand gives NaN. Relu, Clip, Max, Min, the pools and the
// reductions follow it (docs/models.md, "NaN").
template <typename T>
T max_nan(T a, T b) {
  return a != a ? a : b != b ? b : a < b ? b : a;
}
template <typename T>
T min_nan(T a, T b) {
  return a != a ? a : b != b ? b : b < a ? b : a;
}
// out[o] = in[k], both of one element type.
void copy_elem(HostTensor& out, int64_t o, const HostTensor& in, int64_t k);
// Where the rows of a scatter's indices write in `data` (negative indices from the end; one out
// of range is the node's error), per row in order. ScatterND: a row is an index tuple of
// length k, and its target the flat position in data's first k dimensions. ScatterElements:
// a row is one index element, and its target the flat position in data of its own position
// with the axis's coordinate replaced by the index. The reference evaluations and
// lower-scatter-nd both ask here.
std::vector<int64_t> scatter_targets(const Node& n, const Shape& data, const HostTensor& indices);
// ScatterND's and ScatterElements' reduction: none, add, mul, and from opset 18 max and min;
// else the node's error.
void check_scatter_reduction(const OpContext& c);
// out[o] = update[k] under ScatterND's and ScatterElements' reduction (none, add, mul, max,
// min; int64 add and mul wrapping as int64 does).
void scatter_combine(HostTensor& out, int64_t o, const HostTensor& update, int64_t k,
                     const std::string& reduction);
// Input k must be float32, else the node's error naming the input and its type.
void require_float(const OpContext& c, size_t k);

// The context of node `n` of `g` (its inputs' values).
OpContext context(const Node& n, const Graph& g, int64_t opset);

// The attribute decoding the reference evaluation and the compiled kernels (graph/node_te.h)
// share, so both read a node the same way. Each throws UserError naming the node.
//
// A 2-D window over NCHW images (Conv, MaxPool, AveragePool): kernel kh x kw, strides,
// dilations, pads top/left/bottom/right (auto_pad resolved), output size (ceil_mode applied).
struct Window {
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, oh, ow;
};
Window window_of(const OpContext& c, const Shape& x, int64_t kh, int64_t kw);
// kernel_shape (2 values), or `fallback` when absent.
std::vector<int64_t> kernel_shape(const OpContext& c, const Shape& fallback);
// The dimensions one row of Softmax, LogSoftmax or Hardmax spans: `axis` (default -1) from
// opset 13; before it every dimension from `axis` (default 1), the input seen as 2-D.
std::vector<int64_t> softmax_axes(const OpContext& c, int64_t rank);
// MaxPool and AveragePool over NCHW [N][C][H][W], or over a channel-blocked [N][C/b][H][W][b]
// (transform-conv-layout writes those): ONNX's 3-D pooling whose last window axis is trivial
// (kernel 1, stride 1, dilation 1, no pads), so each of the b lanes pools on its own. Import
// turns 3-D pooling of any other window into 2-D pooling (graph/import_window3d.h).
struct PoolWindow {
  Window win;
  int64_t lanes = 1;  // b, or 1 for NCHW
  Shape out;          // [N][C][OH][OW], or [N][C/b][OH][OW][b]
};
PoolWindow pool_window(const OpContext& c, const Shape& x);
// Slice: per dimension the first position and step, and the output shape.
struct SliceSpec {
  std::vector<int64_t> start, step;
  Shape out;
};
SliceSpec slice_spec(const OpContext& c);
// Pad (opset 11+; the axes input of opset 18 too): per dimension the padding before it (negative:
// cropped) and the output shape; `source` maps an output position on a dimension of size n to
// the input position it copies, or -1 where constant mode writes the constant value.
struct PadSpec {
  enum Mode { Constant, Reflect, Edge, Wrap } mode = Constant;
  std::vector<int64_t> begin;
  Shape out;
  int64_t source(int64_t at, size_t dim, int64_t n) const;
};
PadSpec pad_spec(const OpContext& c);
// OneHot: depth (a constant), the axis the classes run along, and the output shape.
struct OneHotSpec {
  int64_t depth = 0, axis = 0;
  Shape out;
};
OneHotSpec onehot_spec(const OpContext& c);
// CumSum: the axis (a constant), exclusive and reverse.
struct CumSumSpec {
  int64_t axis = 0;
  bool exclusive = false, reverse = false;
};
CumSumSpec cumsum_spec(const OpContext& c);
// Trilu: which triangle of the last two axes stays (upper: column - row >= k; lower:
// column - row <= k), the rest is zero. k is a constant.
struct TriluSpec {
  bool upper = true;
  int64_t k = 0;
  bool keeps(int64_t row, int64_t col) const { return upper ? col - row >= k : col - row <= k; }
};
TriluSpec trilu_spec(const OpContext& c);
// DepthToSpace (mode DCR or CRD) and SpaceToDepth over NCHW: the output shape, and the input
// position each output position copies.
struct DepthSpaceSpec {
  bool to_space = true, crd = false;
  int64_t block = 1, channels = 0;  // channels: of the side with fewer (DepthToSpace's output)
  Shape out;
  template <typename I>
  std::array<I, 4> source(const std::array<I, 4>& o) const {
    const I b(block), c(channels);
    if (to_space) {  // o = (n, c, h * b + i, w * b + j)
      I i = o[2] % b, j = o[3] % b;
      I ch = crd ? o[1] * (b * b) + i * b + j : (i * b + j) * c + o[1];
      return {o[0], ch, o[2] / b, o[3] / b};
    }
    // SpaceToDepth: o = (n, (i * b + j) * C + c, h, w)
    I blk = o[1] / c, ch = o[1] % c;
    return {o[0], ch, o[2] * b + blk / b, o[3] * b + blk % b};
  }
};
DepthSpaceSpec depth_space_spec(const OpContext& c);
// TopK: the axis, K (a constant, 0 to the axis's length) and largest; the output is always
// sorted (sorted=0 leaves the order to the implementation).
struct TopKSpec {
  int64_t axis = 0, k = 0;
  bool largest = true;
};
TopKSpec topk_spec(const OpContext& c);
// GatherND: batch_dims, the length k of each index tuple, and the output shape (indices' but
// the last, then data's after the batch and indexed dimensions).
struct GatherNDSpec {
  int64_t batch = 0, k = 1;
  Shape out;
};
GatherNDSpec gather_nd_spec(const OpContext& c);
// Resize (graph/ops_resize.cc): the output shape, and per axis the fractional input position
// an output position maps to (`source`; the scale is the given one, or out / in from sizes)
// and nearest mode's rounding of it. Reads outside the input clamp to its edge.
struct ResizeSpec {
  enum Coord { HalfPixel, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelForNn, HalfPixelSymmetric } coord = HalfPixel;
  enum Nearest { RoundPreferFloor, RoundPreferCeil, Floor, Ceil } nearest = RoundPreferFloor;
  bool linear = false;
  bool cubic = false;            // mode cubic: 4 taps per axis, Keys' kernel with cubic_a
  double cubic_a = -0.75;
  bool exclude_outside = false;  // cubic: taps outside the input weigh 0, the rest renormalised
  Shape in, out;
  // The scale, and the resized length the coordinate transformation uses: in * scale when
  // scales are given (not rounded, as in the ONNX reference), else the size (keep_aspect_ratio_policy
  // not_larger or not_smaller, opset 18: in * the one scale, out its rounding).
  std::vector<double> scale, length;
  double source(int64_t at, size_t dim) const;
  // half_pixel_symmetric's shift of the input position (opset 19): in / 2 * (1 - out / length).
  double symmetric_offset(size_t dim) const;
  int64_t round(double x) const;
  // The cubic weights of the taps at floor(x) - 1 .. floor(x) + 2 for x - floor(x) = t.
  std::array<double, 4> cubic_weights(double t) const;
  // Axis d is not resized: output position i reads input position i.
  bool identity(size_t dim) const;
};
ResizeSpec resize_spec(const OpContext& c);
// GridSample (graph/ops_resize.cc; opset 16: 2 spatial axes, 20: 1 to 3): X [N, C, d1..dr]
// sampled at grid [N, o1..or, r] (normalized positions, the innermost axis first). The
// input position of spatial axis d (0-based) for a normalized coordinate g, each tap's weight
// and where an index outside the input reads, as PyTorch's grid_sample and ONNX Runtime have
// them (ONNX's Python reference also clamps or reflects cubic's position before its taps:
// different results for cubic with border or reflection); the reference evaluation and the
// compiled kernel (te_shape.cc) both follow it.
struct GridSampleSpec {
  enum Mode { Linear, Nearest, Cubic } mode = Linear;
  enum Padding { Zeros, Border, Reflection } padding = Zeros;
  bool align_corners = false;
  Shape x, grid, out;
  size_t spatial = 0;  // r
  // The input position g maps to along spatial axis d (before padding and rounding).
  double denormalize(double g, size_t d) const;
  // The interval positions are reflected into: [0, size - 1] aligned, [-0.5, size - 0.5] not.
  double low(size_t d) const { return align_corners ? 0.0 : -0.5; }
  double high(size_t d) const;
};
GridSampleSpec grid_sample_spec(const OpContext& c);
// x reflected by the borders of [lo, hi] until inside (lo when the interval is empty).
double grid_sample_reflect(double x, double lo, double hi);
// Keys' cubic weights (a = -0.75) of the taps at floor(x) - 1 .. floor(x) + 2, t = x - floor(x).
std::array<double, 4> grid_sample_cubic_weights(double t);
// ConvTranspose (graph/ops_conv_transpose.cc): kernel, strides, dilations, the pads actually
// applied (from pads, auto_pad or output_shape; negative where output_shape asks for more
// than the full output), the output size and channels.
struct ConvTransposeSpec {
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, oh, ow, group, out_channels;
};
ConvTransposeSpec conv_transpose_spec(const OpContext& c);
// Einsum (graph/ops_einsum.cc): each operand's labels, the output's, the summed ones, each
// label's extent, and the output shape.
struct EinsumSpec {
  std::vector<std::string> inputs;
  std::string output, summed;
  std::map<char, int64_t> extent;
  Shape out;
};
EinsumSpec einsum_spec(const OpContext& c);
// Split: the sizes of the pieces along the axis.
std::vector<int64_t> split_sizes(const OpContext& c);
// Reductions: the reduced axes, sorted, non-negative.
std::vector<int64_t> reduce_axes(const OpContext& c, int64_t rank);

}  // namespace tf::graph
