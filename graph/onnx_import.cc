#include "graph/onnx_import.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/version_converter/convert.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/file_io.h"
#include "graph/import_control_flow.h"
#include "graph/import_quantize.h"
#include "graph/import_recurrent.h"
#include "graph/ops.h"

namespace tf::graph {
namespace {

constexpr int64_t kMinOpset = 11, kMaxOpset = 25;
// Models of opsets kMinConvertedOpset to kMinOpset - 1 are converted to kMinOpset at import
// (ONNX's version converter; every ONNX node test of those opsets imports and matches).
constexpr int64_t kMinConvertedOpset = 1;

// tf::read_file (base/file_io.h), its failures the user's to mend.
std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(str("cannot read ", path, ": it is a directory, not a model file"));
  if (!std::ifstream(path, std::ios::binary)) throw UserError(str("cannot open ", path));
  try {
    return tf::read_file(path);
  } catch (const std::runtime_error& e) {
    throw UserError(e.what());
  }
}

const char* onnx_type_name(int t) {
  switch (t) {
    case onnx::TensorProto::FLOAT:
      return "float32";
    case onnx::TensorProto::UINT8:
      return "uint8";
    case onnx::TensorProto::INT8:
      return "int8";
    case onnx::TensorProto::UINT16:
      return "uint16";
    case onnx::TensorProto::INT16:
      return "int16";
    case onnx::TensorProto::INT32:
      return "int32";
    case onnx::TensorProto::INT64:
      return "int64";
    case onnx::TensorProto::STRING:
      return "string";
    case onnx::TensorProto::BOOL:
      return "bool";
    case onnx::TensorProto::FLOAT16:
      return "float16";
    case onnx::TensorProto::DOUBLE:
      return "float64";
    case onnx::TensorProto::UINT32:
      return "uint32";
    case onnx::TensorProto::UINT64:
      return "uint64";
    case onnx::TensorProto::BFLOAT16:
      return "bfloat16";
    default:
      return "an unknown type";
  }
}

// An IEEE half's value (exact in float32).
float half_value(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));  // inf, NaN
  if (exp == 0) {  // zero and subnormals: mant * 2^-24
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | static_cast<uint32_t>(exp - 15 + 127) << 23 | (mant << 13));
}

template <typename T>
std::vector<T> raw_values(const std::string& raw, int64_t n, const std::string& what) {
  if (static_cast<int64_t>(raw.size()) != n * static_cast<int64_t>(sizeof(T))) {
    throw UserError(str(what, ": raw data has ", raw.size(), " bytes for ", n, " elements of ",
                        sizeof(T), " bytes"));
  }
  std::vector<T> v(n);
  if (n) std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

// Bytes an element of ONNX type `type` takes in raw data, or 0 for the types not imported.
int64_t raw_element_bytes(int type) {
  switch (type) {
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL:
      return 1;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      return 2;
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32:
      return 4;
    case onnx::TensorProto::INT64:
      return 8;
    default:
      return 0;
  }
}

// A non-negative byte count or offset of an external data entry.
int64_t external_number(const std::string& value, const std::string& key, const std::string& what) {
  int64_t v = -1;
  const char* end = value.data() + value.size();
  auto [at, ec] = std::from_chars(value.data(), end, v);
  if (ec != std::errc() || at != end || v < 0 || value.empty())
    throw UserError(str(what, ": external data ", key, " '", value, "' is not a non-negative integer"));
  return v;
}

// The `bytes` bytes of a tensor stored outside the model file (ONNX external data: a file
// `location` relative to the model's directory `dir`, from `offset`), read only from a
// regular file under `dir`.
std::string external_bytes(const onnx::TensorProto& t, int64_t bytes, const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  if (dir.empty()) {
    throw UserError(str(what, ": data stored outside the model file (external data) is not read here (compile, run, "
                              "import and tune read it from the model file's directory; quantize and models sent as "
                              "bytes do not)"));
  }
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& e : t.external_data()) {
    if (e.key() == "location") {
      location = e.value();
    } else if (e.key() == "offset") {
      offset = external_number(e.value(), "offset", what);
    } else if (e.key() == "length") {
      length = external_number(e.value(), "length", what);
    } else if (e.key() != "checksum") {
      throw UserError(str(what, ": external data key '", e.key(), "' is not one of location, offset, length, checksum"));
    }
  }
  if (location.empty()) throw UserError(str(what, ": external data without a location"));
  const fs::path rel(location);
  bool up = false;
  for (const fs::path& part : rel) up = up || part == "..";
  if (rel.is_absolute() || up) {
    throw UserError(str(what, ": external data location '", location,
                        "' is not a path inside the model's directory (absolute, or with '..')"));
  }
  if (length >= 0 && length != bytes) {
    throw UserError(str(what, ": external data length ", length, " is not the ", bytes, " bytes its shape and type take"));
  }
  std::error_code ec;
  const fs::path base = fs::canonical(dir, ec);
  const fs::path file = ec ? fs::path() : fs::canonical(base / rel, ec);
  if (ec) throw UserError(str(what, ": cannot open external data file '", location, "' in ", dir));
  auto [stop, _] = std::mismatch(base.begin(), base.end(), file.begin(), file.end());
  if (stop != base.end()) {
    throw UserError(str(what, ": external data file '", location, "' resolves outside the model's directory (",
                        file.string(), ")"));
  }
  if (!fs::is_regular_file(file, ec)) throw UserError(str(what, ": external data '", location, "' is not a regular file"));
  const auto size = static_cast<int64_t>(fs::file_size(file, ec));
  if (ec || offset > size || bytes > size - offset) {
    throw UserError(str(what, ": external data file '", location, "' has ", ec ? 0 : size, " bytes; the tensor needs ",
                        bytes, " from offset ", offset));
  }
  std::ifstream f(file, std::ios::binary);
  std::string out(static_cast<size_t>(bytes), '\0');
  if (!f.seekg(offset) || !f.read(out.data(), bytes)) throw UserError(str(what, ": cannot read external data '", location, "'"));
  return out;
}

}  // namespace

HostTensor tensor_from_onnx(const onnx::TensorProto& t, const std::string& what, const std::string& external_dir) {
  Shape shape(t.dims().begin(), t.dims().end());
  check_tensor_size(what, shape);
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    const int64_t element = raw_element_bytes(t.data_type());
    if (element == 0) {
      throw UserError(str(what, ": element type ", onnx_type_name(t.data_type()), " is not supported in external data"));
    }
    onnx::TensorProto inline_copy = t;
    inline_copy.clear_external_data();
    inline_copy.set_data_location(onnx::TensorProto::DEFAULT);
    inline_copy.set_raw_data(external_bytes(t, num_elements(shape) * element, external_dir, what));
    return tensor_from_onnx(inline_copy, what);
  }
  int64_t n = num_elements(shape);
  auto check = [&](int64_t have) {
    if (have != n)
      throw UserError(str(what, ": holds ", have, " elements for shape ", shape_str(shape)));
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: {
      std::vector<float> v = t.has_raw_data()
                                 ? raw_values<float>(t.raw_data(), n, what)
                                 : std::vector<float>(t.float_data().begin(), t.float_data().end());
      check(static_cast<int64_t>(v.size()));
      return HostTensor::floats(shape, std::move(v));
    }
    case onnx::TensorProto::INT64: {
      std::vector<int64_t> v =
          t.has_raw_data() ? raw_values<int64_t>(t.raw_data(), n, what)
                           : std::vector<int64_t>(t.int64_data().begin(), t.int64_data().end());
      check(static_cast<int64_t>(v.size()));
      return HostTensor::ints(shape, std::move(v));
    }
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8: {
      // Held as float32 values, exactly (graph/graph.h Narrow).
      const bool u8 = t.data_type() == onnx::TensorProto::UINT8;
      std::vector<float> v;
      if (t.has_raw_data()) {
        if (u8) {
          for (uint8_t b : raw_values<uint8_t>(t.raw_data(), n, what)) v.push_back(b);
        } else {
          for (int8_t b : raw_values<int8_t>(t.raw_data(), n, what)) v.push_back(b);
        }
      } else {
        for (int32_t x : t.int32_data()) {
          if (x < (u8 ? 0 : -128) || x > (u8 ? 255 : 127))
            throw UserError(str(what, ": value ", x, " is out of the range of ", u8 ? "uint8" : "int8"));
          v.push_back(static_cast<float>(x));
        }
      }
      check(static_cast<int64_t>(v.size()));
      HostTensor h = HostTensor::floats(shape, std::move(v));
      h.narrow = u8 ? Narrow::Uint8 : Narrow::Int8;
      return h;
    }
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: {
      // Stored in 16 bits, held and computed as float32 (exactly: every float16 and bfloat16
      // value is a float32 one); docs/precision.md.
      const bool half = t.data_type() == onnx::TensorProto::FLOAT16;
      std::vector<uint16_t> bits;
      if (t.has_raw_data()) {
        bits = raw_values<uint16_t>(t.raw_data(), n, what);
      } else {
        for (int32_t x : t.int32_data()) bits.push_back(static_cast<uint16_t>(x));
      }
      check(static_cast<int64_t>(bits.size()));
      std::vector<float> v;
      v.reserve(bits.size());
      for (uint16_t b : bits) v.push_back(half ? half_value(b) : std::bit_cast<float>(static_cast<uint32_t>(b) << 16));
      return HostTensor::floats(shape, std::move(v));
    }
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::BOOL: {
      std::vector<int64_t> v;
      if (t.has_raw_data()) {
        if (t.data_type() == onnx::TensorProto::BOOL) {
          for (uint8_t b : raw_values<uint8_t>(t.raw_data(), n, what)) v.push_back(b != 0);
        } else {
          for (int32_t x : raw_values<int32_t>(t.raw_data(), n, what)) v.push_back(x);
        }
      } else {
        v.assign(t.int32_data().begin(), t.int32_data().end());
      }
      check(static_cast<int64_t>(v.size()));
      return HostTensor::ints(shape, std::move(v),
                              t.data_type() == onnx::TensorProto::BOOL ? DType::Bool : DType::I64);
    }
    default:
      throw UserError(
          str(what, ": element type ", onnx_type_name(t.data_type()),
              " is not supported (float32, float16 and bfloat16 (held as float32); int8 and uint8 for quantized models; "
                  "int32, int64 and bool for shape arithmetic)"));
  }
}

std::string model_directory(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

HostTensor read_tensor_file(const std::string& path) {
  onnx::TensorProto t;
  if (!t.ParseFromString(read_file(path)))
    throw UserError(str(path, ": not a serialized ONNX TensorProto"));
  return tensor_from_onnx(t, path);
}

namespace {

Attr attribute(const onnx::AttributeProto& a, const std::string& where) {
  std::string what = str(where, ": attribute '", a.name(), "'");
  switch (a.type()) {
    case onnx::AttributeProto::INT:
      return a.i();
    case onnx::AttributeProto::FLOAT:
      return a.f();
    case onnx::AttributeProto::STRING:
      return a.s();
    case onnx::AttributeProto::INTS:
      return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case onnx::AttributeProto::FLOATS:
      return std::vector<float>(a.floats().begin(), a.floats().end());
    case onnx::AttributeProto::TENSOR:
      return tensor_from_onnx(a.t(), what);
    case onnx::AttributeProto::STRINGS:
      return std::vector<std::string>(a.strings().begin(), a.strings().end());
    default:
      throw UserError(
          str(what, ": subgraphs (but If's, Loop's and Scan's), sparse tensors and type protos are not "
                    "supported"));
  }
}

// A graph input's static type and shape: its dimensions as the file has them, or given by
// `bind` (a named symbolic dimension's size, or the input's whole shape), whose entries it
// uses are added to `used` (dimension names; input names as "input:x"). `unsized` ends the
// refusal of a dynamic dimension: every one still without a size.
Value input_value(const onnx::ValueInfoProto& vi, const std::string& file, const InputBinding& bind,
                  std::set<std::string>& used, const std::string& unsized) {
  std::string what = str(file, ": graph input '", vi.name(), "'");
  if (!vi.type().has_tensor_type())
    throw UserError(
        str(what, " is not a tensor (sequences, maps and optionals are not supported)"));
  const auto& tt = vi.type().tensor_type();
  DType type;
  switch (tt.elem_type()) {
    case onnx::TensorProto::FLOAT:
      type = DType::F32;
      break;
    case onnx::TensorProto::INT64:
      type = DType::I64;
      break;  // token ids, positions
    case onnx::TensorProto::BOOL:
      type = DType::Bool;
      break;  // masks
    case onnx::TensorProto::FLOAT16:
      type = DType::F16;
      break;  // read by a Cast to float32 (import_onnx_bytes)
    case onnx::TensorProto::BFLOAT16:
      type = DType::BF16;
      break;
    default:
      throw UserError(str(what, " is ", onnx_type_name(tt.elem_type()),
                          "; model inputs must be float32, float16, bfloat16, int64 or bool"));
  }
  const auto given = bind.shapes.find(vi.name());
  if (given != bind.shapes.end()) used.insert("input:" + vi.name());
  if (!tt.has_shape()) {
    if (given == bind.shapes.end())
      throw UserError(str(what, " has no shape; give it: --input-shape ", vi.name(), "=d0,d1,..."));
    Value v{vi.name(), type, given->second, std::nullopt};
    check_tensor_size(what, v.shape);
    return v;
  }
  Value v{vi.name(), type, {}, std::nullopt};
  if (given != bind.shapes.end() &&
      static_cast<int>(given->second.size()) != tt.shape().dim_size()) {
    throw UserError(str("--input-shape ", vi.name(), "=", shape_str(given->second), ": ", what,
                        " has rank ", tt.shape().dim_size()));
  }
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto& dim = tt.shape().dim(d);
    if (dim.has_dim_value() && dim.dim_value() == 0) {
      throw UserError(
          str(what, " has an empty dimension ", d, "; empty tensors are not supported"));
    }
    const bool fixed = dim.has_dim_value() && dim.dim_value() > 0;
    if (given != bind.shapes.end()) {
      const int64_t size = given->second[static_cast<size_t>(d)];
      if (fixed && size != dim.dim_value()) {
        throw UserError(str("--input-shape ", vi.name(), "=", shape_str(given->second), ": ", what,
                            " has dimension ", d, " = ", dim.dim_value()));
      }
      v.shape.push_back(size);
      continue;
    }
    if (fixed) {
      v.shape.push_back(dim.dim_value());
      continue;
    }
    if (dim.has_dim_param()) {
      if (auto it = bind.dims.find(dim.dim_param()); it != bind.dims.end()) {
        used.insert(dim.dim_param());
        v.shape.push_back(it->second);
        continue;
      }
      throw UserError(str(what, " has a dynamic dimension ", d, " ('", dim.dim_param(),
                          "'); give its size: --dim ", dim.dim_param(),
                          "=N (or the input's shape: --input-shape ", vi.name(), "=d0,d1,...)",
                          unsized));
    }
    throw UserError(str(what, " has a dynamic dimension ", d,
                        " without a name; give the input's shape: --input-shape ", vi.name(),
                        "=d0,d1,...", unsized));
  }
  check_tensor_size(what, v.shape);
  return v;
}

// Ops whose outputs are decided by static shapes and constants alone: evaluated at import.
bool folds_at_import(const Node& n, const Graph& g, const std::vector<TypeShape>& out,
                     int64_t& budget) {
  if (!foldable(n, out)) return false;
  int64_t elements = 0;
  for (const TypeShape& t : out) elements += num_elements(t.shape);
  if (elements > budget) return false;
  if (n.op == "Shape" || n.op == "Size" || n.op == "Constant" || n.op == "ConstantOfShape" ||
      n.op == "Range" || n.op == "EyeLike")
    return true;
  for (const std::string& in : n.inputs) {
    if (!in.empty() && !g.is_constant(in)) return false;
  }
  // Shape arithmetic (int64, bool results) folds here; float computations on constants are
  // the fold-constants pass's (so --disable-pass can keep them).
  for (const TypeShape& t : out) {
    if (t.dtype == DType::F32) return false;
  }
  budget -= elements;
  return true;
}

// Infers node n's outputs and adds it to g, or, where its outputs are shape arithmetic on
// constants, evaluates it into constants. A Concat, Sum, Max, Min or Mean of more than
// kMaxVariadicInputs inputs is added as a tree of such nodes of at most that many each (a Mean
// as a tree of Sums divided by the count).
void add_node(Node n, Graph& g, const std::string& file, int64_t& budget) {
  static const std::set<std::string> variadic = {"Concat", "Sum", "Max", "Min", "Mean"};
  if (n.inputs.size() > kMaxVariadicInputs && n.outputs.size() == 1 && variadic.count(n.op)) {
    const size_t count = n.inputs.size();
    const bool mean = n.op == "Mean";
    const std::string out = n.outputs[0];
    if (mean) {
      n.op = "Sum";
      n.outputs[0] = g.fresh_name(out + ".sum");
    }
    // Each part joins a run of the inputs in order (Concat's axis order, Sum's order of
    // addition within the run); the node then joins the parts.
    std::vector<std::string> parts;
    for (size_t at = 0; at < n.inputs.size(); at += kMaxVariadicInputs) {
      const size_t end = std::min(n.inputs.size(), at + kMaxVariadicInputs);
      const std::string part_out = g.fresh_name(str(out, ".part", at / kMaxVariadicInputs));
      Node part{part_out,
                n.op,
                std::vector<std::string>(n.inputs.begin() + at, n.inputs.begin() + end),
                {part_out},
                n.attrs};
      parts.push_back(part_out);
      add_node(std::move(part), g, file, budget);
    }
    n.inputs = std::move(parts);
    const std::string sum = n.outputs[0], name = n.name;
    add_node(std::move(n), g, file, budget);
    if (mean) {
      const std::string divisor =
          g.add_constant(out + ".count", HostTensor::floats({}, {static_cast<float>(count)}));
      add_node(Node{name + ".mean", "Div", {sum, divisor}, {out}, {}}, g, file, budget);
    }
    return;
  }
  std::vector<TypeShape> types;
  try {
    types = infer_node(n, g, g.opset);
  } catch (const UserError& e) {
    throw UserError(str(file, ": ", e.what()));
  }
  // Optional trailing outputs the op does not produce must be unused ("" or dropped).
  while (n.outputs.size() > types.size() && n.outputs.back().empty()) n.outputs.pop_back();
  if (n.outputs.size() != types.size()) {
    throw UserError(str(file, ": ", n.where(), " has ", n.outputs.size(),
                        " outputs; tunefarm supports ", types.size()));
  }
  for (size_t o = 0; o < types.size(); ++o) {
    if (n.outputs[o].empty() || g.values.count(n.outputs[o])) {
      throw UserError(str(file, ": ", n.where(), " output ", o, " ('", n.outputs[o],
                          "') is unnamed or already defined"));
    }
  }
  if (folds_at_import(n, g, types, budget)) {
    std::vector<HostTensor> vals = eval_node(
        n, g, g.opset,
        [&](const std::string& name) -> const HostTensor& { return *g.value(name).constant; });
    for (size_t o = 0; o < types.size(); ++o) {
      g.values[n.outputs[o]] =
          Value{n.outputs[o], vals[o].dtype, vals[o].shape, std::move(vals[o])};
    }
    return;
  }
  for (size_t o = 0; o < types.size(); ++o) {
    g.values[n.outputs[o]] = Value{n.outputs[o], types[o].dtype, types[o].shape, std::nullopt};
  }
  g.nodes.push_back(std::move(n));
}

// Output `name`, declared float16 or bfloat16 (`type`): the float32 value the nodes compute is
// renamed, and a storage Cast writes `name` in 16 bits from it. An input given back as it is
// stays as it is.
void store_as_16_bits(Graph& g, const std::string& name, DType type,
                      const std::function<std::string(const std::string&)>& unused,
                      const std::string& file, int64_t& budget) {
  const DType has = g.value(name).dtype;
  if (has == type) return;
  if (has != DType::F32 || g.is_input(name)) {
    throw UserError(str(file, ": graph output '", name, "' is declared ", dtype_name(type),
                        " but is ", g.is_input(name) ? "the model's input of type " : "",
                        dtype_name(has)));
  }
  const std::string wide = unused(name + "_float32");
  Value v = std::move(g.values.at(name));
  g.values.erase(name);
  v.name = wide;
  g.values[wide] = std::move(v);
  for (Node& n : g.nodes) {
    for (std::vector<std::string>* names : {&n.inputs, &n.outputs})
      std::replace(names->begin(), names->end(), name, wide);
  }
  std::set<std::string> node_names;
  for (const Node& n : g.nodes) node_names.insert(n.name);
  std::string node = name + "_storage";
  for (int k = 1; node_names.count(node); ++k) node = str(name, "_storage_", k);
  Node cast{node,
            "Cast",
            {wide},
            {name},
            {{"to", int64_t{type == DType::F16 ? 10 : 16}}, {kStorageCast, int64_t{1}}}};
  add_node(std::move(cast), g, file, budget);
}

// The named symbolic dimensions of a graph's inputs, each with the first input dimension it
// names (for messages: how many places use it is the model's business).
std::map<std::string, int64_t> symbolic_dims(const onnx::GraphProto& gp) {
  std::map<std::string, int64_t> out;
  for (const auto& vi : gp.input()) {
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) continue;
    const auto& shape = vi.type().tensor_type().shape();
    for (int d = 0; d < shape.dim_size(); ++d) {
      if (shape.dim(d).has_dim_param() && !shape.dim(d).has_dim_value())
        out.emplace(shape.dim(d).dim_param(), d);
    }
  }
  return out;
}

// Model-local functions (ModelProto.functions, IR 8: what exporters write for modules kept
// whole, e.g. PyTorch's dynamo exporter unoptimized, onnxscript) are inlined into the graph
// before import: each call becomes the function's nodes, its formal inputs and outputs renamed
// to the call's, its other values to new names under the call's name, attributes referenced
// by ref_attr_name taken from the call (left out when the call has none, as IR 8 says).
// Functions calling functions inline in turn, at most kMaxFunctionDepth deep and
// kMaxInlinedFunctionNodes nodes and kMaxFunctionCalls calls in all; a function whose default-domain opset differs from the
// model's is refused (its operators would be read at the wrong version).
constexpr int kMaxFunctionDepth = 32;
constexpr int64_t kMaxInlinedFunctionNodes = 1'000'000;
constexpr int64_t kMaxFunctionCalls = 100'000;

void inline_local_functions(onnx::ModelProto& model, const std::string& file, int64_t opset) {
  if (model.functions_size() == 0) return;
  std::map<std::pair<std::string, std::string>, const onnx::FunctionProto*> functions;
  for (const onnx::FunctionProto& f : model.functions()) {
    if (!functions.emplace(std::pair{f.domain(), f.name()}, &f).second)
      throw UserError(str(file, ": function '", f.domain(), ".", f.name(), "' is defined twice"));
    for (const auto& os : f.opset_import()) {
      if ((os.domain().empty() || os.domain() == "ai.onnx") && os.version() != opset)
        throw UserError(str(file, ": function '", f.domain(), ".", f.name(), "' imports opset ", os.version(),
                            " of the default domain; the model's is ", opset, " (one opset throughout is supported)"));
    }
  }
  auto lookup = [&](const onnx::NodeProto& n) -> const onnx::FunctionProto* {
    auto it = functions.find({n.domain(), n.op_type()});
    return it == functions.end() ? nullptr : it->second;
  };
  int64_t made = 0;
  int64_t calls = 0;
  std::function<void(const onnx::NodeProto&, int, google::protobuf::RepeatedPtrField<onnx::NodeProto>&)> expand =
      [&](const onnx::NodeProto& call, int depth, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out) {
        const onnx::FunctionProto* f = lookup(call);
        if (!f) {
          if (++made > kMaxInlinedFunctionNodes)
            throw UserError(str(file, ": inlining the model's functions makes more than ", kMaxInlinedFunctionNodes, " nodes"));
          *out.Add() = call;
          return;
        }
        const std::string where = str("node '", call.name(), "' (", call.domain(), ".", call.op_type(), ")");
        if (++calls > kMaxFunctionCalls)
          throw UserError(str(file, ": the model's functions make more than ", kMaxFunctionCalls, " calls"));
        if (depth >= kMaxFunctionDepth)
          throw UserError(str(file, ": ", where, ": functions call each other more than ", kMaxFunctionDepth,
                              " deep (recursion is not allowed)"));
        if (call.input_size() > f->input_size() || call.output_size() > f->output_size())
          throw UserError(str(file, ": ", where, " has ", call.input_size(), " inputs and ", call.output_size(),
                              " outputs; the function takes ", f->input_size(), " and ", f->output_size()));
        const std::string prefix = str(call.name().empty() ? call.op_type() : call.name(), "/", calls, "/");
        // Inputs the call leaves out are absent inside; outputs it leaves out are still computed
        // (the function's other nodes may read them), under names of their own.
        std::map<std::string, std::string> rename;
        for (int k = 0; k < f->input_size(); ++k) rename[f->input(k)] = k < call.input_size() ? call.input(k) : "";
        for (int k = 0; k < f->output_size(); ++k)
          rename[f->output(k)] = k < call.output_size() && !call.output(k).empty() ? call.output(k) : prefix + f->output(k);
        auto renamed = [&](const std::string& v) {
          if (v.empty()) return v;
          auto it = rename.find(v);
          return it != rename.end() ? it->second : prefix + v;
        };
        std::map<std::string, const onnx::AttributeProto*> given;
        for (const auto& a : call.attribute()) given[a.name()] = &a;
        for (const onnx::NodeProto& body : f->node()) {
          onnx::NodeProto n = body;
          n.set_name(prefix + (body.name().empty() ? body.op_type() : body.name()));
          for (std::string& in : *n.mutable_input()) in = renamed(in);
          for (std::string& o : *n.mutable_output()) o = renamed(o);
          google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
          for (const onnx::AttributeProto& a : body.attribute()) {
            if (a.ref_attr_name().empty()) {
              *attrs.Add() = a;
            } else if (auto it = given.find(a.ref_attr_name()); it != given.end()) {
              onnx::AttributeProto* copy = attrs.Add();
              *copy = *it->second;
              copy->set_name(a.name());
            }
          }
          *n.mutable_attribute() = attrs;
          expand(n, depth + 1, out);
        }
      };
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (const onnx::NodeProto& n : model.graph().node()) expand(n, 0, nodes);
  *model.mutable_graph()->mutable_node() = std::move(nodes);
}

// The first line of a library's exception message, at most 300 characters.
std::string first_line(const std::string& what) { return what.substr(0, std::min<size_t>(what.find('\n'), 300)); }

// What ONNX's version converter assumes of a model and does not check (it dereferences what
// is missing), checked before a model of an older opset is converted: an IR version, graph
// outputs that something defines, and nodes (subgraphs' too) of ONNX's operators of that
// opset, each as its schema says (inputs, outputs, attributes). Opset 8's Scan (a batch axis,
// sequence_lens) is another operator than opset 9's, which the converter would not make of it.
void check_for_conversion(const onnx::ModelProto& model, int64_t opset, const std::string& file) {
  const std::string redo = str("; re-export with opset_version ", kMinOpset, " to ", kMaxOpset);
  if (!model.has_ir_version() || model.ir_version() < 2)
    throw UserError(str(file, ": a model of opset ", opset, " without an IR version of 2 or more (it has ",
                        model.ir_version(), ") is not supported", redo));
  std::function<void(const onnx::GraphProto&)> check_graph = [&](const onnx::GraphProto& gp) {
    for (const onnx::NodeProto& n : gp.node()) {
      const std::string where = str(file, ": node '", n.name(), "' (", n.op_type(), "): ");
      if (!n.domain().empty() && n.domain() != "ai.onnx")
        throw UserError(str(where, "operators of domain '", n.domain(), "' in a model of opset ", opset,
                            " are not supported (such models are converted to opset ", kMinOpset,
                            ", which takes ONNX's own operators)", redo));
      const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(opset));
      if (!schema)
        throw UserError(str(where, "operator ", n.op_type(), " is not supported: ONNX has no such operator at opset ",
                            opset));
      if (opset < 9 && n.op_type() == "Scan")
        throw UserError(str(where, "Scan of opset ", opset, " (a batch axis and sequence_lens) is not supported", redo));
      try {
        schema->Verify(n);
      } catch (const std::exception& e) {
        throw UserError(str(where, "not ONNX's ", n.op_type(), " of opset ", opset, ": ", first_line(e.what())));
      }
      for (const onnx::AttributeProto& a : n.attribute()) {
        if (a.has_g()) check_graph(a.g());
        for (const onnx::GraphProto& sub : a.graphs()) check_graph(sub);
      }
    }
  };
  const onnx::GraphProto& gp = model.graph();
  check_graph(gp);
  std::set<std::string> defined;
  for (const auto& vi : gp.input()) defined.insert(vi.name());
  for (const auto& init : gp.initializer()) defined.insert(init.name());
  for (const onnx::NodeProto& n : gp.node()) defined.insert(n.output().begin(), n.output().end());
  for (const auto& vi : gp.output()) {
    if (!defined.count(vi.name())) throw UserError(str(file, ": graph output '", vi.name(), "' is never computed"));
  }
}

}  // namespace

Graph import_onnx_bytes(const std::string& bytes, const std::string& file, const InputBinding& bind,
                        const std::string& external_dir) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    throw UserError(str(file, ": not an ONNX model (the protobuf does not parse)"));
  if (!model.has_graph()) throw UserError(str(file, ": the model has no graph"));
  Graph g;
  g.opset = -1;
  for (const auto& os : model.opset_import()) {
    if (os.domain().empty() || os.domain() == "ai.onnx") g.opset = os.version();
  }
  if (g.opset < 0)
    throw UserError(str(file,
                        ": the model imports no opset of the default ONNX domain (training and ML "
                        "domains are not supported)"));
  if (g.opset >= kMinConvertedOpset && g.opset < kMinOpset) {
    // Older exports (the ONNX Model Zoo's classics are of opsets 3 to 9) are raised to the first
    // opset taken by ONNX's own version converter, which rewrites what changed on the way
    // (Upsample to Resize, attributes that became inputs, broadcasting rules).
    check_for_conversion(model, g.opset, file);
    try {
      model = onnx::version_conversion::ConvertVersion(model, static_cast<int>(kMinOpset));
    } catch (const std::exception& e) {
      throw UserError(str(file, ": this model of opset ", g.opset, " is not supported: ONNX's version converter ",
                          "could not raise it to opset ", kMinOpset, " (", first_line(e.what()), "); re-export with opset_version ",
                          kMinOpset, " to ", kMaxOpset));
    }
    g.opset_converted_from = g.opset;
    g.opset = kMinOpset;
  }
  if (g.opset < kMinOpset || g.opset > kMaxOpset) {
    throw UserError(str(file, ": opset ", g.opset, " is not supported (", kMinConvertedOpset, " to ", kMaxOpset,
                        ", those below ", kMinOpset, " converted to ", kMinOpset,
                        "; re-export with opset_version in that range)"));
  }
  inline_local_functions(model, file, g.opset);
  const onnx::GraphProto& gp = model.graph();
  g.name = gp.name();
  for (const auto& init : gp.initializer()) {
    if (init.name().empty()) throw UserError(str(file, ": an initializer has no name"));
    HostTensor t = tensor_from_onnx(init, str(file, ": initializer '", init.name(), "'"), external_dir);
    g.values[init.name()] = Value{init.name(), t.dtype, t.shape, std::move(t)};
  }
  const std::map<std::string, int64_t> have = symbolic_dims(gp);
  std::string unsized;  // for the refusal of the first: all of them
  for (const auto& [d, at] : have)
    unsized += bind.dims.count(d) ? "" : str(unsized.empty() ? "" : ", ", d);
  if (!unsized.empty())
    unsized = str("\n", file, " has the dynamic dimensions ", unsized,
                  "; give each a size with --dim NAME=SIZE");
  std::set<std::string> used;  // what of `bind` the inputs took
  for (const auto& vi : gp.input()) {
    if (g.values.count(vi.name())) continue;  // an initializer listed as an input (IR < 4)
    g.values[vi.name()] = input_value(vi, file, bind, used, unsized);
    g.inputs.push_back(vi.name());
  }
  // A size for a dimension or an input the model does not have is a mistake, not ignored.
  for (const auto& [dim, size] : bind.dims) {
    if (used.count(dim)) continue;
    std::string list;
    for (const auto& [d, n] : have) list += str(list.empty() ? "" : ", ", d);
    throw UserError(str("--dim ", dim, "=", size, ": ", file, " has no symbolic dimension '", dim,
                        "'",
                        have.empty() ? std::string(" (its inputs have static shapes)")
                                     : str(" (its inputs have: ", list, ")")));
  }
  for (const auto& [input, shape] : bind.shapes) {
    if (used.count("input:" + input)) continue;
    throw UserError(str("--input-shape ", input, "=", shape_str(shape), ": ", file,
                        " has no input '", input, "'"));
  }
  // A float16 (bfloat16) model's 16-bit inputs and outputs (graph/graph.h): the graph computes
  // in float32 between them. Each such input is read through a Cast to float32, whose result the
  // model's nodes read instead; names for them that the model does not use.
  std::set<std::string> names;
  for (const auto& np : gp.node()) names.insert(np.output().begin(), np.output().end());
  for (const auto& [name, v] : g.values) names.insert(name);
  auto unused = [&](const std::string& base) {
    std::string name = base;
    for (int k = 1; names.count(name); ++k) name = str(base, "_", k);
    names.insert(name);
    return name;
  };
  std::set<std::string> node_names;
  std::map<std::string, std::string> read_as;  // a 16-bit input -> its float32 value
  int64_t fold_budget = kMaxImportFoldedTotal;
  for (const std::string& in : g.inputs) {
    if (!is_storage16(g.value(in).dtype)) continue;
    Node cast{
        unused(in + "_to_float32"), "Cast", {in}, {unused(in + "_float32")}, {{"to", int64_t{1}}}};
    node_names.insert(cast.name);
    read_as[in] = cast.outputs[0];
    add_node(std::move(cast), g, file, fold_budget);
  }
  int64_t recurrent_steps_left = kMaxRecurrentSteps;
  ImportSink sink{g, file, [&](Node m) { add_node(std::move(m), g, file, fold_budget); }, recurrent_steps_left};
  int64_t iterations_left = kMaxUnrolledIterations;
  // One node of the model's graph or of a subgraph (If, Loop and Scan bodies, written out by
  // import_control_flow in `scope`).
  ControlFlowImport control_flow{g, file, nullptr, sink.add, unused, iterations_left};
  control_flow.import_node = [&](const onnx::NodeProto& np, Scope& scope, int k) {
    Node n;
    n.op = np.op_type();
    n.name = scope.prefix + (np.name().empty() ? str(n.op, "_", k) : np.name());
    for (int again = 0; !node_names.insert(n.name).second; ++again)
      n.name = str(scope.prefix, np.name().empty() ? n.op : np.name(), "_", k, again ? str("_", again) : "");
    // ONNX Runtime's quantized operators (QOperator format) come from its com.microsoft
    // domain, which also has QuantizeLinear and DequantizeLinear of the same meaning.
    static const std::set<std::string> microsoft = microsoft_quantized_ops();
    const bool default_domain = np.domain().empty() || np.domain() == "ai.onnx";
    if (np.domain() == "com.microsoft" && !microsoft.count(n.op) && n.op != "QuantizeLinear" && n.op != "DequantizeLinear") {
      std::string list;
      for (const std::string& op : microsoft) list += str(list.empty() ? "" : ", ", op);
      throw UserError(str(file, ": ", n.where(), " is in domain 'com.microsoft', of which only ", list,
                          ", QuantizeLinear and DequantizeLinear are supported"));
    }
    if (!default_domain && np.domain() != "com.microsoft") {
      throw UserError(str(file, ": ", n.where(), " is in domain '", np.domain(),
                          "'; only the default ONNX domain (and ONNX Runtime's quantized operators of com.microsoft) "
                          "is supported"));
    }
    if (default_domain && microsoft.count(n.op)) {
      throw UserError(str(file, ": ", n.where(), ": ", n.op, " is an operator of domain 'com.microsoft'; this node is in "
                          "the default domain"));
    }
    n.inputs.assign(np.input().begin(), np.input().end());
    for (std::string& in : n.inputs) {
      in = scope.resolve(in);
      if (auto it = read_as.find(in); it != read_as.end()) in = it->second;
    }
    // If, Loop, Scan and the sequence operators check their own inputs (sequences among them).
    if (default_domain && import_control_flow(np, n.name, scope, control_flow)) return;
    for (const std::string& in : n.inputs) {
      if (!in.empty() && control_flow.sequences.count(in)) {
        throw UserError(str(file, ": ", n.where(), " reads the sequence '", in,
                            "'; sequences are not supported as its inputs (only the sequence operators, If, Loop and Scan take them)"));
      }
      if (!in.empty() && !g.values.count(in)) {
        throw UserError(
            str(file, ": ", n.where(), " reads '", in, "', which is not defined before it"));
      }
    }
    for (const std::string& o : np.output()) n.outputs.push_back(define_in(scope, o, control_flow));
    for (const auto& a : np.attribute())
      n.attrs[a.name()] = attribute(a, str(file, ": ", n.where()));
    if (n.has(kStorageCast)) {
      throw UserError(
          str(file, ": ", n.where(), " has the attribute '", kStorageCast,
              "', which is tunefarm's own (a model output's storage cast), not a model's"));
    }
    // int8 and uint8 data are held as float32 values (graph/graph.h Narrow), which only the
    // quantization operators read as what they are; another operator would compute on them
    // as floats (a uint8 Div would not truncate).
    static const std::set<std::string> reads_integers = {
        "QuantizeLinear", "DequantizeLinear", "Constant",  "QLinearMatMul", "QLinearConv",
        "MatMulInteger",  "ConvInteger",      "DynamicQuantizeLinear"};
    if (!reads_integers.count(n.op) && !microsoft.count(n.op)) {
      for (const std::string& in : n.inputs) {
        if (in.empty() || !g.is_constant(in) || g.value(in).constant->narrow == Narrow::None) continue;
        throw UserError(str(file, ": ", n.where(), " reads '", in, "' of ",
                            g.value(in).constant->narrow == Narrow::Int8 ? "int8" : "uint8",
                            "; int8 and uint8 tensors are not supported but as operands of the quantization "
                            "operators (QuantizeLinear, DequantizeLinear, QLinearMatMul, QLinearConv, "
                            "MatMulInteger, ConvInteger, com.microsoft's QLinear operators)"));
      }
    }
    // An operator imported as others (OpDef::expand) is checked against its entry first.
    if (const OpDef* d = find_op(n.op); d && d->expand) {
      try {
        check_node(n);
      } catch (const UserError& e) {
        throw UserError(str(file, ": ", e.what()));
      }
      if (d->expand(n, sink)) return;
    }
    add_node(std::move(n), g, file, fold_budget);
  };
  Scope model_scope;
  for (int k = 0; k < gp.node_size(); ++k) control_flow.import_node(gp.node(k), model_scope, k);
  for (const auto& vi : gp.output()) {
    if (control_flow.sequences.count(vi.name()))
      throw UserError(str(file, ": graph output '", vi.name(), "' is a sequence; sequences are not supported as a model's outputs (only inside it)"));
    if (!g.values.count(vi.name()))
      throw UserError(str(file, ": graph output '", vi.name(), "' is never computed"));
    const int32_t declared = vi.type().has_tensor_type() ? vi.type().tensor_type().elem_type() : 0;
    if (declared == onnx::TensorProto::INT32 && holds_floats(g.value(vi.name()).dtype)) {
      // MatMulInteger's and ConvInteger's int32 results are float32 values inside (exact below
      // 2^24); int32 computed as such (a Cast to it) is given as int64.
      throw UserError(str(file, ": graph output '", vi.name(), "' is declared int32 but computed as ",
                          dtype_name(g.value(vi.name()).dtype), " (MatMulInteger, ConvInteger): int32 results as ",
                          "a model's outputs are not supported; cast them to float or int64 in the model"));
    }
    if (declared == onnx::TensorProto::FLOAT16 || declared == onnx::TensorProto::BFLOAT16) {
      store_as_16_bits(g, vi.name(),
                       declared == onnx::TensorProto::FLOAT16 ? DType::F16 : DType::BF16, unused,
                       file, fold_budget);
    }
    const Value& v = g.value(vi.name());
    if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape()) {
      const auto& shape = vi.type().tensor_type().shape();
      bool static_dims = shape.dim_size() == static_cast<int>(v.shape.size());
      // A size that differs is used as computed, with a warning, as ONNX Runtime does:
      // exporters declare sizes from their own shape inference, which for ceil_mode pooling
      // predates ONNX's rule that a last window starting in the right padding is left out
      // (PyTorch 1.13's declares AvgPool2d(2, 2, padding=1, ceil_mode=True) of 1 row as 2).
      bool differs = false;
      std::string declared;
      for (int d = 0; static_dims && d < shape.dim_size(); ++d) {
        const bool sized = shape.dim(d).has_dim_value();
        differs |= sized && shape.dim(d).dim_value() != v.shape[d];
        declared +=
            str(d ? ", " : "", sized ? std::to_string(shape.dim(d).dim_value()) : std::string("?"));
      }
      if (differs) {
        g.import_warnings.push_back(str(file, ": graph output '", vi.name(), "' is declared as [",
                                        declared, "] but computes ", shape_str(v.shape),
                                        "; the computed shape is used"));
      }
      if (shape.dim_size() != static_cast<int>(v.shape.size())) {
        throw UserError(str(file, ": graph output '", vi.name(), "' is declared with rank ",
                            shape.dim_size(), " but computes ", shape_str(v.shape)));
      }
    }
    g.outputs.push_back(vi.name());
  }
  if (g.outputs.empty()) throw UserError(str(file, ": the graph has no outputs"));
  // A 16-bit input no node reads (given back as it is) needs no Cast.
  for (const auto& [in, wide] : read_as) {
    bool read = g.is_output(wide);
    for (const Node& n : g.nodes)
      read = read || std::count(n.inputs.begin(), n.inputs.end(), wide) > 0;
    if (read) continue;
    std::erase_if(g.nodes,
                  [&](const Node& n) { return n.outputs == std::vector<std::string>{wide}; });
    g.values.erase(wide);
  }
  verify(g);
  return g;
}

Graph import_onnx(const std::string& path, const InputBinding& bind, bool external_data) {
  return import_onnx_bytes(read_file(path), path, bind, external_data ? model_directory(path) : "");
}

InputBinding parse_binding(const std::vector<std::string>& dims,
                           const std::vector<std::string>& shapes) {
  std::vector<InputBinding> all = parse_bindings(dims, shapes);
  if (all.size() > 1) {
    for (const std::string& arg : dims) {
      if (arg.find(',') != std::string::npos) {
        throw UserError(str("--dim ", arg, ": several sizes (shape buckets) are for compile --model and tune --model; ",
                            "give one size here"));
      }
    }
  }
  return all.at(0);
}

std::vector<InputBinding> parse_bindings(const std::vector<std::string>& dims,
                                         const std::vector<std::string>& shapes) {
  InputBinding b;
  std::vector<std::pair<std::string, std::vector<int64_t>>> lists;  // dims given several sizes, as given
  auto size = [](const std::string& option, const std::string& arg, const std::string& text) {
    int64_t v = 0;
    size_t used = 0;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size() || v < 1 || v > (int64_t{1} << 31)) {
      throw UserError(
          str(option, " ", arg, ": '", text, "' is not a size (an integer from 1 to 2^31)"));
    }
    return v;
  };
  for (const std::string& arg : dims) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UserError(str("--dim ", arg, ": expected name=size (--dim batch=8)"));
    const std::string name = arg.substr(0, eq);
    if (b.dims.count(name))
      throw UserError(str("--dim ", arg, ": dimension '", name, "' is given twice"));
    // name=s1,s2,...: one bucket per size (each size once).
    std::vector<int64_t> sizes;
    const std::string rest = arg.substr(eq + 1);
    for (size_t at = 0; at <= rest.size();) {
      size_t comma = rest.find(',', at);
      if (comma == std::string::npos) comma = rest.size();
      int64_t v = size("--dim", arg, rest.substr(at, comma - at));
      if (std::find(sizes.begin(), sizes.end(), v) != sizes.end())
        throw UserError(str("--dim ", arg, ": size ", v, " is given twice"));
      sizes.push_back(v);
      at = comma + 1;
    }
    b.dims[name] = sizes[0];
    if (sizes.size() > 1) {
      lists.emplace_back(name, sizes);
    }
  }
  for (const std::string& arg : shapes) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UserError(
          str("--input-shape ", arg, ": expected input=d0,d1,... (--input-shape x=1,3,224,224)"));
    }
    const std::string name = arg.substr(0, eq);
    if (b.shapes.count(name))
      throw UserError(str("--input-shape ", arg, ": input '", name, "' is given twice"));
    Shape shape;
    std::string rest = arg.substr(eq + 1);
    for (size_t at = 0; at <= rest.size();) {
      size_t comma = rest.find(',', at);
      if (comma == std::string::npos) comma = rest.size();
      shape.push_back(size("--input-shape", arg, rest.substr(at, comma - at)));
      at = comma + 1;
    }
    b.shapes[name] = shape;
  }
  // Every combination of the listed sizes, the first --dim's varying slowest.
  size_t count = 1;
  for (const auto& [name, sizes] : lists) {
    count *= sizes.size();
    if (count > kMaxShapeBuckets) {
      throw UserError(str("--dim: the sizes given make more than ", kMaxShapeBuckets,
                          " shape buckets (one per combination); give fewer"));
    }
  }
  std::vector<InputBinding> out(count, b);
  for (size_t k = 0; k < count; ++k) {
    size_t rest = k;
    for (size_t d = lists.size(); d-- > 0;) {
      const auto& [name, sizes] = lists[d];
      out[k].dims[name] = sizes[rest % sizes.size()];
      rest /= sizes.size();
    }
  }
  return out;
}

std::vector<InputBinding> bindings_from_json(const nlohmann::json& j, const std::string& what) {
  auto shown = [](const nlohmann::json& v) {
    std::string s = v.dump();
    return s.size() > 80 ? s.substr(0, 77) + "..." : s;
  };
  std::vector<std::string> dims, shapes;
  for (const char* field : {"dims", "input_shapes"}) {
    if (!j.contains(field)) continue;
    const nlohmann::json& v = j.at(field);
    if (!v.is_object() || v.size() > 64)
      throw UserError(str(what, " field \"", field,
                          "\" must be an object of at most 64 entries, not ", shown(v)));
    const bool dim = std::string(field) == "dims";
    for (const auto& [name, size] : v.items()) {
      // An input's shape: 1 to 16 sizes. A dimension: a size, or a list of sizes (buckets).
      if ((!dim || size.is_array()) && (!size.is_array() || size.empty() || size.size() > (dim ? 64u : 16u)))
        throw UserError(str(what, " ", field, " ", shown(name), ": ", shown(size),
                            dim ? " is not a size or a list of 1 to 64 sizes" : " is not a shape (1 to 16 sizes)"));
      std::string text;
      for (const nlohmann::json& d : size.is_array() ? size : nlohmann::json::array({size})) {
        if (!d.is_number_integer())
          throw UserError(
              str(what, " ", field, " ", shown(name), ": ", shown(size), " is not a size"));
        text += str(text.empty() ? "" : ",", d.get<int64_t>());
      }
      (dim ? dims : shapes).push_back(name + "=" + text);
    }
  }
  try {
    return parse_bindings(dims, shapes);
  } catch (const UserError& e) {
    throw UserError(str(what, " dims: ", e.what()));
  }
}

InputBinding binding_from_json(const nlohmann::json& j, const std::string& what) {
  std::vector<InputBinding> all = bindings_from_json(j, what);
  if (all.size() > 1)
    throw UserError(str(what, " dims: several sizes of a dimension (shape buckets) are for compiling a model; give one size here"));
  return all[0];
}

}  // namespace tf::graph
