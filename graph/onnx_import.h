// onnx_import: an ONNX model file into a graph (graph/graph.h).
//
// What it promises:
//   - Models of opsets 11 to 25 (default domain), float32 computation, static shapes, as
//     PyTorch's exporter writes them, import; shape arithmetic (Shape, Gather, Slice, Concat,
//     Unsqueeze, Cast, ... on int64) is evaluated at import, so every value gets a static
//     shape and int64 tensors end up as constants. Some nodes are expanded into several:
//     1-D windows run as 2-D ones of height 1, 3-D convolutions as 2-D ones over the depth
//     folded into the batch (graph/import_window3d.h), LSTM, GRU and RNN as their time steps
//     written out (graph/import_recurrent.h), If, Loop and Scan as the branch taken and the
//     iterations run, their conditions and trip counts constants after import
//     (graph/import_control_flow.h), and the sequence operators as lists of values at import.
//   - Anything else is refused with UserError naming the file, and the node (name and op
//     type), input, attribute or tensor at fault: a malformed file, another opset, an
//     unsupported operator or attribute, a dynamic dimension without a size (InputBinding
//     below), an element type other than float32, float16 or bfloat16 in the model's inputs
//     (int64 and bool only for shape arithmetic and comparisons), external tensor data, a
//     declared output rank that differs from the computed one. Declared output sizes that
//     differ are a warning (Graph::import_warnings): the computed shape is used.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace onnx {
class TensorProto;
}

namespace tf::graph {

// Sizes for a model's dynamic input dimensions (docs/models.md, "Symbolic dimensions"): `dims`
// by the dimension's name (ONNX dim_param: --dim batch=8, the same size wherever the name is
// used), `shapes` an input's whole shape (--input-shape x=1,3,224,224: also for dimensions
// without a name; the input's static dimensions must agree). A name or input the model does
// not have is a UserError naming it.
struct InputBinding {
  std::map<std::string, int64_t> dims;
  std::map<std::string, Shape> shapes;
  bool empty() const { return dims.empty() && shapes.empty(); }
};
// From the command line's --dim name=size and --input-shape input=d0,d1,... arguments
// (sizes 1 to 2^31); UserError naming a malformed one, or a --dim of several sizes.
InputBinding parse_binding(const std::vector<std::string>& dims,
                           const std::vector<std::string>& shapes);

// The most inputs an imported Concat, Sum, Max, Min or Mean keeps: one of more is imported as a
// tree of such nodes of at most this many inputs each (a Mean: of Sums, divided by the count;
// a GRU of 700 steps written out joins them with one Concat), so that no kernel takes more
// buffers than a GPU kernel's parameters hold (PTX before ISA 8.1: 4,352 bytes, 544 pointers;
// graph/fusion.h kMaxGroupInputs).
constexpr size_t kMaxVariadicInputs = 64;

// The most shape buckets --dim's lists may make (graph/model_compiler.h kMaxBuckets).
constexpr size_t kMaxShapeBuckets = 64;

// The same where --dim may list sizes (--dim batch=1,8,32: shape buckets): one binding per
// combination of the listed sizes, the first listed dimension varying slowest; UserError for
// a size listed twice or more than kMaxShapeBuckets combinations.
std::vector<InputBinding> parse_bindings(const std::vector<std::string>& dims,
                                         const std::vector<std::string>& shapes);

// Initializers stored outside the model file (ONNX external data) are read from the model's
// directory: a regular file there (no absolute location, no '..', no link out of it), the
// tensor's exact bytes at the entry's offset.
// `external_data` false: refused as for bytes (a file a service keeps among other users').
Graph import_onnx(const std::string& path, const InputBinding& bind = {}, bool external_data = true);
// The same from the file's bytes; `what` names it in errors. External data is read from
// `external_dir` (model_directory of the file the bytes came from), refused when empty.
Graph import_onnx_bytes(const std::string& bytes, const std::string& what, const InputBinding& bind = {},
                        const std::string& external_dir = "");
// The directory a model file's external data is relative to.
std::string model_directory(const std::string& path);
// JSON sizes as a job or the Python package gives them: {"dims": {name: size}, "input_shapes":
// {input: [sizes]}} (either absent), checked as parse_binding checks the command line's;
// UserError naming `what`'s field and the value.
InputBinding binding_from_json(const nlohmann::json& j, const std::string& what);
// The same where a dimension may take a list of sizes ({"dims": {"batch": [1, 8, 32]}}):
// one binding per shape bucket, as parse_bindings.
std::vector<InputBinding> bindings_from_json(const nlohmann::json& j, const std::string& what);

// A TensorProto (test data, initializers) as a host tensor; `what` names it in errors. Its
// data may be external where `external_dir` is given (import_onnx).
HostTensor tensor_from_onnx(const onnx::TensorProto& t, const std::string& what, const std::string& external_dir = "");
// Reads a serialized TensorProto file (the ONNX test data sets' input_0.pb, ...).
HostTensor read_tensor_file(const std::string& path);

}  // namespace tf::graph
