#include "compiler/workload.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <optional>

#include "base/bfloat16.h"
#include "base/enum_names.h"
#include "base/float16.h"
#include "base/tf32.h"
#include "base/error.h"
#include "compiler/operator_table.h"

namespace tf {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n");
  return s.substr(b, e - b + 1);
}

Epilogue parse_epilogue(const std::string& v, const std::string& spec) {
  if (v == "none") return Epilogue::None;
  if (v == "bias") return Epilogue::Bias;
  if (v == "relu") return Epilogue::Relu;
  if (v == "bias_relu") return Epilogue::BiasRelu;
  throw UserError(str("workload '", spec, "': epilogue '", v,
                      "' is not one of none, bias, relu, bias_relu"));
}

constexpr EnumName<DType> kDTypes[] = {
    {DType::Float32, "float32"}, {DType::Int8, "int8"},         {DType::Uint8, "uint8"},
    {DType::Int32, "int32"},     {DType::Float16, "float16"}, {DType::BFloat16, "bfloat16"}};

// The precision a 16-bit float type is computed in, or nullopt for other types.
std::optional<Precision> precision_of(DType t) {
  if (t == DType::Float16) return Precision::Float16;
  if (t == DType::BFloat16) return Precision::BFloat16;
  return std::nullopt;
}

// The precision operands of these types imply: a 16-bit operand's (the data's, else the
// weight's: float32 data times float16 weights is computed in fp16), else fp32.
Precision implied_precision(DType data, DType weight) {
  return precision_of(data).value_or(precision_of(weight).value_or(Precision::Float32));
}

constexpr EnumName<Precision> kPrecisions[] = {
    {Precision::Float32, "fp32"}, {Precision::TF32, "tf32"}, {Precision::Float16, "fp16"}, {Precision::BFloat16, "bf16"}};

DType parse_dtype(const std::string& key, const std::string& v, const std::string& spec) {
  if (std::optional<DType> t = enum_from_name(kDTypes, v)) return *t;
  std::string names;
  for (const EnumName<DType>& e : kDTypes) names += std::string(names.empty() ? "" : ", ") + e.name;
  throw UserError(str("workload '", spec, "': ", key, " '", v, "' is not one of ", names));
}

int64_t parse_int(const std::string& key, const std::string& v, const std::string& spec) {
  if (v.empty()) throw UserError(str("workload '", spec, "': key ", key, " has no value"));
  size_t i = (v[0] == '-' || v[0] == '+') ? 1 : 0;
  if (i == v.size()) throw UserError(str("workload '", spec, "': ", key, "=", v, " is not an integer"));
  for (size_t j = i; j < v.size(); ++j) {
    if (!std::isdigit(static_cast<unsigned char>(v[j]))) {
      throw UserError(str("workload '", spec, "': ", key, "=", v, " is not an integer"));
    }
  }
  if (v.size() - i > 12) {
    throw UserError(str("workload '", spec, "': ", key, "=", v, " is larger than ", kMaxWorkloadValue));
  }
  return std::stoll(v);
}

// Every tensor the kernel reads, writes or stages (padded copies included) fits a board,
// all of them together too, and the FLOP count fits 64 bits.
void check_footprint(const Footprint& f, const std::string& spec) {
  const auto& tensors = f.tensors;
  const auto& flops = f.flops;
  int64_t total = 0;
  for (const auto& [name, n] : tensors) {
    if (!n || *n > kMaxTensorElements) {
      throw UserError(str("workload '", spec, "': tensor ", name, " would have ",
                          n ? std::to_string(*n) : std::string("more than 2^63"),
                          " elements, over the limit of ", kMaxTensorElements,
                          " (16 GiB of float32) that a board can hold"));
    }
    total += *n * 4;
  }
  if (total > kMaxWorkloadBytes) {
    throw UserError(str("workload '", spec, "': its tensors need ", total, " bytes together, over the limit of ",
                        kMaxWorkloadBytes, " (32 GiB)"));
  }
  if (!flops || *flops > kMaxWorkloadFlops) {
    throw UserError(str("workload '", spec, "': ", flops ? std::to_string(*flops) : std::string("more than 2^63"),
                        " floating point operations per call, over the limit of ", kMaxWorkloadFlops));
  }
}

}  // namespace

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::None: return "none";
    case Epilogue::Bias: return "bias";
    case Epilogue::Relu: return "relu";
    case Epilogue::BiasRelu: return "bias_relu";
  }
  return "?";
}

const char* dtype_name(DType t) { return enum_name(kDTypes, t); }

const char* precision_name(Precision p) { return enum_name(kPrecisions, p); }

std::optional<Precision> precision_named(const std::string& name) { return enum_from_name(kPrecisions, name); }

float (*precision_rounding(Precision p))(float) {
  switch (p) {
    case Precision::TF32: return round_tf32;
    case Precision::Float16: return round_f16;
    case Precision::BFloat16: return round_bf16;
    case Precision::Float32: break;
  }
  return [](float x) { return x; };
}

bool OperandTypes::is_integer() const {
  auto integer = [](DType t) { return t == DType::Int8 || t == DType::Uint8 || t == DType::Int32; };
  return integer(data) || integer(weight);
}

std::string OperandTypes::str() const {
  std::string s = data == weight ? dtype_name(data) : std::string(dtype_name(data)) + " x " + dtype_name(weight);
  // The precision unless it is the operands' own (float32's fp32, float16's fp16).
  if (precision != implied_precision(data, weight)) s += std::string(" in ") + precision_name(precision);
  return s;
}

int64_t Workload::get(const std::string& key) const {
  for (const auto& [k, v] : params) {
    if (k == key) return v;
  }
  TF_CHECK(false, "workload ", op, " has no key ", key);
  return 0;
}

bool Workload::has(const std::string& key) const {
  for (const auto& [k, v] : params) {
    if (k == key) return true;
  }
  return false;
}

std::vector<std::pair<std::string, int64_t>> Workload::shown_params() const {
  const OperatorDef* def = find_operator(op);
  std::vector<std::pair<std::string, int64_t>> shown;
  for (const auto& [k, v] : params) {
    bool omitted = false;
    for (const WorkloadKey& key : def ? def->keys : std::vector<WorkloadKey>{})
      omitted |= key.name == k && key.optional && key.default_value == v;
    if (!omitted) shown.emplace_back(k, v);
  }
  return shown;
}

std::string Workload::canonical() const {
  std::string s = op + "(";
  for (const auto& [k, v] : shown_params()) s += k + "=" + std::to_string(v) + ",";
  if (!types.is_float32()) {
    s += std::string("dtype=") + dtype_name(types.data) + ",";
    if (types.weight != types.data) s += std::string("weight_dtype=") + dtype_name(types.weight) + ",";
  }
  if (types.precision != implied_precision(types.data, types.weight))
    s += std::string("precision=") + precision_name(types.precision) + ",";
  s += std::string("epilogue=") + epilogue_name(epilogue) + ")";
  return s;
}

std::vector<std::string> known_ops() {
  std::vector<std::string> ops;
  for (const OperatorDef& o : operator_table()) ops.push_back(o.name);
  return ops;
}

Workload parse_workload(const std::string& raw) {
  std::string spec = trim(raw);
  size_t open = spec.find('(');
  if (open == std::string::npos || spec.back() != ')') {
    throw UserError(str("workload '", spec, "' is not of the form OP(key=value,...)"));
  }
  Workload w;
  w.op = trim(spec.substr(0, open));
  const OperatorDef* def = find_operator(w.op);
  if (!def) {
    std::string ops;
    for (const std::string& o : known_ops()) ops += (ops.empty() ? "" : ", ") + o;
    throw UserError(str("workload '", spec, "': unknown operator '", w.op, "' (known: ", ops, ")"));
  }

  std::map<std::string, std::string> given;
  std::string inner = spec.substr(open + 1, spec.size() - open - 2);
  size_t pos = 0;
  while (pos <= inner.size() && !trim(inner).empty()) {
    size_t comma = inner.find(',', pos);
    std::string item = trim(inner.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      throw UserError(str("workload '", spec, "': '", item, "' is not key=value"));
    }
    std::string key = trim(item.substr(0, eq));
    std::string value = trim(item.substr(eq + 1));
    if (!given.emplace(key, value).second) {
      throw UserError(str("workload '", spec, "': key ", key, " is given twice"));
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }

  for (const WorkloadKey& k : def->keys) {
    auto it = given.find(k.name);
    int64_t v;
    if (it == given.end()) {
      if (k.default_value == kRequiredKey) {
        throw UserError(str("workload '", spec, "': missing key ", k.name, " for ", w.op));
      }
      v = k.default_value;
    } else {
      v = parse_int(k.name, it->second, spec);
      given.erase(it);
    }
    if (v < k.min_value) {
      throw UserError(str("workload '", spec, "': ", k.name, "=", v, " must be at least ",
                          k.min_value));
    }
    if (v > kMaxWorkloadValue) {
      throw UserError(str("workload '", spec, "': ", k.name, "=", v, " is larger than ",
                          kMaxWorkloadValue));
    }
    w.params.emplace_back(k.name, v);
  }
  if (auto it = given.find("epilogue"); it != given.end()) {
    w.epilogue = parse_epilogue(it->second, spec);
    given.erase(it);
  }
  if (auto it = given.find("dtype"); it != given.end()) {
    w.types.data = w.types.weight = parse_dtype("dtype", it->second, spec);
    given.erase(it);
  }
  if (auto it = given.find("weight_dtype"); it != given.end()) {
    w.types.weight = parse_dtype("weight_dtype", it->second, spec);
    given.erase(it);
  }
  if (auto it = given.find("precision"); it != given.end()) {
    std::optional<Precision> p = enum_from_name(kPrecisions, it->second);
    if (!p) {
      throw UserError(str("workload '", spec, "': precision '", it->second, "' is not one of fp32, tf32, fp16, bf16"));
    }
    if (!w.types.is_float32() && *p != Precision::Float32 && *p != implied_precision(w.types.data, w.types.weight)) {
      throw UserError(str("workload '", spec, "': precision=", it->second, " rounds float32 operands, and ", w.op,
                          " here takes ", w.types.str()));
    }
    w.types.precision = *p;
    given.erase(it);
  } else {
    w.types.precision = implied_precision(w.types.data, w.types.weight);  // float16 operands in fp16
  }
  if (!given.empty()) {
    std::string keys;
    for (const WorkloadKey& k : def->keys) keys += std::string(keys.empty() ? "" : ", ") + k.name;
    throw UserError(str("workload '", spec, "': unknown key ", given.begin()->first, " for ",
                        w.op, " (keys: ", keys, ", dtype, weight_dtype, precision, epilogue)"));
  }
  const auto& kinds = def->types;
  if (std::find(kinds.begin(), kinds.end(), w.types) == kinds.end()) {
    std::string have;
    for (const OperandTypes& t : kinds) have += (have.empty() ? "" : ", ") + t.str();
    throw UserError(str("workload '", spec, "': ", w.op, " of ", w.types.str(), " is not implemented (", w.op,
                        " takes: ", have, ")"));
  }
  if (w.types.is_integer() && !def->float_output && w.epilogue != Epilogue::None) {
    throw UserError(str("workload '", spec, "': epilogue ", epilogue_name(w.epilogue), " on ", w.types.str(),
                        " operands is not implemented yet (integer workloads take epilogue=none)"));
  }
  if (def->check) def->check(w, spec);
  check_footprint(def->footprint(w), spec);
  return w;
}

}  // namespace tf
