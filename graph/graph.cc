#include "graph/graph.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <sstream>
#include <type_traits>

#include "base/error.h"
#include "graph/memory_plan.h"

namespace tf::graph {

bool reads_16_bit_input(const Node& n, size_t k) {
  return (k == 0 && reads_16_bit_weights(n.op)) || (k < 2 && n.op == "MatMul" && n.has(kTensorCorePrecision));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "float32";
    case DType::I64:
      return "int64";
    case DType::Bool:
      return "bool";
    case DType::U8:
      return "uint8";
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
  }
  return "?";
}

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + "]";
}

HostTensor HostTensor::floats(Shape shape, std::vector<float> data, DType type) {
  HostTensor t;
  t.dtype = type;
  t.shape = std::move(shape);
  t.f = std::move(data);
  return t;
}

HostTensor HostTensor::ints(Shape shape, std::vector<int64_t> data, DType type) {
  HostTensor t;
  t.dtype = type;
  t.shape = std::move(shape);
  t.i = std::move(data);
  return t;
}

int64_t HostTensor::float_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(v);
}

int64_t Node::get_int(const std::string& a, int64_t fallback) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return *v;
  throw UserError(str(where(), ": attribute '", a, "' must be an integer"));
}

float Node::get_float(const std::string& a, float fallback) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<float>(&it->second)) return *v;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return static_cast<float>(*v);
  throw UserError(str(where(), ": attribute '", a, "' must be a float"));
}

std::string Node::get_string(const std::string& a, const std::string& fallback) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<std::string>(&it->second)) return *v;
  throw UserError(str(where(), ": attribute '", a, "' must be a string"));
}

std::vector<int64_t> Node::get_ints(const std::string& a,
                                    const std::vector<int64_t>& fallback) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  throw UserError(str(where(), ": attribute '", a, "' must be a list of integers"));
}

std::vector<std::string> Node::get_strings(const std::string& a,
                                           const std::vector<std::string>& fallback) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<std::vector<std::string>>(&it->second)) return *v;
  throw UserError(str(where(), ": attribute '", a, "' must be a list of strings"));
}

std::string Node::where() const { return str("node '", name, "' (", op, ")"); }

const Value& Graph::value(const std::string& n) const {
  auto it = values.find(n);
  TF_CHECK(it != values.end(), "graph: no value named ", n);
  return it->second;
}

Value& Graph::value(const std::string& n) {
  auto it = values.find(n);
  TF_CHECK(it != values.end(), "graph: no value named ", n);
  return it->second;
}

bool Graph::is_constant(const std::string& n) const {
  auto it = values.find(n);
  return it != values.end() && it->second.constant.has_value();
}

bool Graph::is_input(const std::string& n) const {
  return std::find(inputs.begin(), inputs.end(), n) != inputs.end();
}

bool Graph::is_output(const std::string& n) const {
  return std::find(outputs.begin(), outputs.end(), n) != outputs.end();
}

std::string Graph::fresh_name(const std::string& base) const {
  if (!values.count(base)) return base;
  for (int k = 1;; ++k) {
    std::string n = base + "_" + std::to_string(k);
    if (!values.count(n)) return n;
  }
}

std::string Graph::add_ints(const std::string& base, std::vector<int64_t> v) {
  auto len = static_cast<int64_t>(v.size());
  return add_constant(base, HostTensor::ints({len}, std::move(v)));
}

std::string Graph::add_constant(const std::string& base, HostTensor t) {
  std::string name = fresh_name(base);
  DType dtype = t.dtype;
  Shape shape = t.shape;
  values[name] = Value{name, dtype, std::move(shape), std::move(t)};
  return name;
}

std::string Graph::add_float(const std::string& base, const Shape& shape) {
  std::string name = fresh_name(base);
  values[name] = Value{name, DType::F32, shape, std::nullopt};
  return name;
}

void verify(const Graph& g) {
  std::set<std::string> defined;
  for (const std::string& in : g.inputs) {
    if (!g.values.count(in)) throw UserError(str("graph input '", in, "' has no value"));
    if (g.value(in).constant) throw UserError(str("graph input '", in, "' is a constant"));
    defined.insert(in);
  }
  for (const auto& [name, v] : g.values) {
    if (v.name != name) throw UserError(str("value '", name, "' is named '", v.name, "' inside"));
    for (int64_t d : v.shape) {
      if (d < 0)
        throw UserError(str("value '", name, "' has a negative dimension: ", shape_str(v.shape)));
    }
    if (v.constant) {
      const HostTensor& c = *v.constant;
      int64_t n = num_elements(v.shape);
      size_t have = holds_floats(c.dtype) ? c.f.size() : c.i.size();
      if (c.shape != v.shape || c.dtype != v.dtype || static_cast<int64_t>(have) != n) {
        throw UserError(str("constant '", name, "' holds ", have, " ", dtype_name(c.dtype),
                            " elements of shape ", shape_str(c.shape), " for a ",
                            dtype_name(v.dtype), " value of shape ", shape_str(v.shape)));
      }
      defined.insert(name);
    }
  }
  std::set<std::string> node_names;
  for (const Node& n : g.nodes) {
    if (!node_names.insert(n.name).second)
      throw UserError(str("two nodes are named '", n.name, "'"));
    const bool storage_cast = n.op == "Cast" && n.has(kStorageCast);
    // A view (memory_plan.h is_view) passes 16-bit values on (sixteen-bit-edges).
    const bool view16 = !n.inputs.empty() && !n.inputs[0].empty() && defined.count(n.inputs[0]) &&
                        is_storage16(g.value(n.inputs[0]).dtype) && is_view(g, n);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const std::string& in = n.inputs[k];
      if (in.empty()) continue;
      if (!defined.count(in)) {
        throw UserError(
            str(n.where(), " reads '", in, "', which no earlier node, input or constant defines"));
      }
      // 16-bit floats are a model's inputs and outputs (read by a Cast to float32), and the
      // data of tensor-core products of 16-bit weights and of the views before them
      // (sixteen-bit-edges).
      if (is_storage16(g.value(in).dtype) && !reads_16_bit_input(n, k) && !(view16 && k == 0) &&
          (n.op != "Cast" || storage_cast || n.get_int("to", 0) != 1)) {
        throw UserError(
            str(n.where(), " reads the ", dtype_name(g.value(in).dtype), " value '", in,
                "'; float16 and bfloat16 values are a model's inputs (read by a Cast to float32) and "
                "outputs, and the data of tensor-core products of 16-bit weights, only"));
      }
    }
    for (const std::string& out : n.outputs) {
      if (out.empty()) continue;
      if (!g.values.count(out))
        throw UserError(str(n.where(), " writes '", out, "', which has no value"));
      if (g.value(out).constant)
        throw UserError(str(n.where(), " writes the constant '", out, "'"));
      if (!defined.insert(out).second)
        throw UserError(str(n.where(), " writes '", out, "', which is already defined"));
      if (is_storage16(g.value(out).dtype) != (storage_cast || view16) ||
          (view16 && g.value(out).dtype != g.value(n.inputs[0]).dtype)) {
        throw UserError(str(n.where(), " writes the ", dtype_name(g.value(out).dtype), " value '",
                            out,
                            "'; only a storage Cast writes float16 or bfloat16 (and a view of such "
                            "a value, the same type)"));
      }
    }
  }
  for (const std::string& out : g.outputs) {
    if (!defined.count(out)) throw UserError(str("graph output '", out, "' is never defined"));
    // uint8 values (QuantizeU8's) live between int8 kernels only: the model ABI has no uint8.
    if (g.value(out).dtype == DType::U8)
      throw UserError(str("graph output '", out, "' is uint8; model outputs must be float32, int64 or bool"));
  }
}

namespace {

std::string attr_text(const Attr& a) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, HostTensor>) {
          return str("tensor<", dtype_name(v.dtype), shape_str(v.shape), ">");
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                             std::is_same_v<T, std::vector<float>>) {
          std::string s = "[";
          for (size_t k = 0; k < v.size(); ++k) s += str(k ? ", " : "", v[k]);
          return s + "]";
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::string s = "[";
          for (size_t k = 0; k < v.size(); ++k) s += str(k ? ", " : "", "\"", v[k], "\"");
          return s + "]";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return "\"" + v + "\"";
        } else {
          return str(v);
        }
      },
      a);
}

}  // namespace

std::string graph_to_text(const Graph& g) {
  std::ostringstream os;
  auto ref = [&](const std::string& v) {
    if (v.empty()) return std::string("_");
    return g.is_constant(v) ? str("@", v, shape_str(g.value(v).shape)) : "%" + v;
  };
  os << "graph " << (g.name.empty() ? "main" : g.name) << "(";
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    const Value& v = g.value(g.inputs[k]);
    os << (k ? ", " : "") << "%" << v.name << ": " << dtype_name(v.dtype) << shape_str(v.shape);
  }
  os << ") {\n";
  for (const Node& n : g.nodes) {
    os << "  ";
    for (size_t k = 0; k < n.outputs.size(); ++k) os << (k ? ", " : "") << "%" << n.outputs[k];
    os << " = " << n.op << "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", " : "") << ref(n.inputs[k]);
    os << ")";
    if (!n.attrs.empty()) {
      os << " {";
      bool first = true;
      for (const auto& [name, a] : n.attrs) {
        os << (first ? "" : ", ") << name << "=" << attr_text(a);
        first = false;
      }
      os << "}";
    }
    const Value& out = g.value(n.outputs[0]);
    os << " : " << dtype_name(out.dtype) << shape_str(out.shape) << "  # " << n.name << "\n";
  }
  os << "  return ";
  for (size_t k = 0; k < g.outputs.size(); ++k) os << (k ? ", " : "") << ref(g.outputs[k]);
  os << "\n}\n";
  return os.str();
}

GraphStats graph_stats(const Graph& g) {
  GraphStats s;
  for (const Node& n : g.nodes) ++s.ops[n.op];
  std::set<std::string> used;
  for (const Node& n : g.nodes) used.insert(n.inputs.begin(), n.inputs.end());
  used.insert(g.outputs.begin(), g.outputs.end());
  for (const auto& [name, v] : g.values) {
    if (!v.constant || !used.count(name)) continue;
    int64_t n = num_elements(v.shape);
    if (v.dtype == DType::F32) s.parameters += n;
    s.constant_bytes += n * (v.dtype == DType::F32 ? 4 : 8);
  }
  return s;
}

}  // namespace tf::graph
