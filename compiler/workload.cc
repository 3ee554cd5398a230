#include "compiler/workload.h"

#include <cctype>
#include <limits>
#include <map>
#include <optional>

#include "compiler/error.h"

namespace tf {
namespace {

struct Key {
  const char* name;
  int64_t default_value;  // kRequired when the user must give it
  int64_t min_value;
};
constexpr int64_t kRequired = -1;

struct OpKeys {
  const char* op;
  std::vector<Key> keys;
};

const std::vector<OpKeys>& op_table() {
  static const std::vector<OpKeys> table = {
      {"matmul", {{"M", kRequired, 1}, {"N", kRequired, 1}, {"K", kRequired, 1}}},
      {"batch_matmul",
       {{"B", kRequired, 1}, {"M", kRequired, 1}, {"N", kRequired, 1}, {"K", kRequired, 1}}},
      {"conv2d_nchw",
       {{"N", kRequired, 1}, {"C", kRequired, 1}, {"H", kRequired, 1}, {"W", kRequired, 1},
        {"K", kRequired, 1}, {"R", kRequired, 1}, {"S", kRequired, 1}, {"stride", 1, 1},
        {"pad", 0, 0}, {"dilation", 1, 1}}},
      {"conv2d_nhwc",
       {{"N", kRequired, 1}, {"H", kRequired, 1}, {"W", kRequired, 1}, {"C", kRequired, 1},
        {"K", kRequired, 1}, {"R", kRequired, 1}, {"S", kRequired, 1}, {"stride", 1, 1},
        {"pad", 0, 0}, {"dilation", 1, 1}}},
      {"depthwise_conv2d_nchw",
       {{"N", kRequired, 1}, {"C", kRequired, 1}, {"H", kRequired, 1}, {"W", kRequired, 1},
        {"R", kRequired, 1}, {"S", kRequired, 1}, {"stride", 1, 1}, {"pad", 0, 0},
        {"dilation", 1, 1}}},
      // Blocked (NCHWc) layouts: channels split into blocks that are the innermost dimension.
      {"conv2d_nchwc",
       {{"N", kRequired, 1},
        {"C", kRequired, 1},
        {"H", kRequired, 1},
        {"W", kRequired, 1},
        {"K", kRequired, 1},
        {"R", kRequired, 1},
        {"S", kRequired, 1},
        {"stride", 1, 1},
        {"pad", 0, 0},
        {"dilation", 1, 1},
        {"ic_block", 8, 1},
        {"oc_block", 8, 1}}},
      {"depthwise_conv2d_nchwc",
       {{"N", kRequired, 1},
        {"C", kRequired, 1},
        {"H", kRequired, 1},
        {"W", kRequired, 1},
        {"R", kRequired, 1},
        {"S", kRequired, 1},
        {"stride", 1, 1},
        {"pad", 0, 0},
        {"dilation", 1, 1},
        {"block", 8, 1}}},
  };
  return table;
}

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

// Output extent of a convolution along one spatial dimension. Every value is at most
// kMaxWorkloadValue (2^31 - 1), so no term here can overflow 64 bits.
int64_t conv_out(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  int64_t span = dilation * (k - 1) + 1;
  int64_t padded = in + 2 * pad;
  if (padded < span) return 0;
  return (padded - span) / stride + 1;
}

void check_output_sizes(const Workload& w, const std::string& spec) {
  if (w.op.rfind("conv2d", 0) != 0 && w.op.rfind("depthwise", 0) != 0) return;
  int64_t oh = conv_out(w.get("H"), w.get("R"), w.get("stride"), w.get("pad"), w.get("dilation"));
  int64_t ow = conv_out(w.get("W"), w.get("S"), w.get("stride"), w.get("pad"), w.get("dilation"));
  if (oh < 1 || ow < 1) {
    throw UserError(str("workload '", spec, "': output size ", oh, "x", ow,
                        " is empty (H=", w.get("H"), " W=", w.get("W"), " R=", w.get("R"),
                        " S=", w.get("S"), " pad=", w.get("pad"),
                        " dilation=", w.get("dilation"), ")"));
  }
}

// A blocked layout splits channels into whole blocks.
void check_blocks(const Workload& w, const std::string& spec) {
  auto check = [&](const char* channels, const char* block) {
    if (w.get(channels) % w.get(block) != 0) {
      throw UserError(str("workload '", spec, "': ", block, "=", w.get(block), " does not divide ",
                          channels, "=", w.get(channels),
                          " (the blocked layout holds whole blocks of channels)"));
    }
  };
  if (w.op == "conv2d_nchwc") {
    check("C", "ic_block");
    check("K", "oc_block");
  } else if (w.op == "depthwise_conv2d_nchwc") {
    check("C", "block");
  }
}

// The product of `dims`, or nullopt when it overflows int64.
std::optional<int64_t> checked_product(std::initializer_list<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

// Every tensor the kernel reads, writes or stages (padded copies included) fits a board,
// all of them together too, and the FLOP count fits 64 bits.
void check_footprint(const Workload& w, const std::string& spec) {
  auto g = [&](const char* k) { return w.get(k); };
  std::vector<std::pair<const char*, std::optional<int64_t>>> tensors;
  std::optional<int64_t> flops;
  auto add = [&](const char* name, std::initializer_list<int64_t> dims) {
    tensors.emplace_back(name, checked_product(dims));
  };
  if (w.op == "matmul") {
    add("A", {g("M"), g("K")});
    add("B", {g("K"), g("N")});
    add("C", {g("M"), g("N")});
    flops = checked_product({2, g("M"), g("N"), g("K")});
  } else if (w.op == "batch_matmul") {
    add("A", {g("B"), g("M"), g("K")});
    add("B", {g("B"), g("K"), g("N")});
    add("C", {g("B"), g("M"), g("N")});
    flops = checked_product({2, g("B"), g("M"), g("N"), g("K")});
  } else {
    // Blocked layouts hold the same number of elements as NCHW.
    bool depthwise = w.op.rfind("depthwise", 0) == 0;
    int64_t oh = conv_out(g("H"), g("R"), g("stride"), g("pad"), g("dilation"));
    int64_t ow = conv_out(g("W"), g("S"), g("stride"), g("pad"), g("dilation"));
    int64_t k = depthwise ? g("C") : g("K");
    add("data", {g("N"), g("C"), g("H"), g("W")});
    add("data_pad", {g("N"), g("C"), g("H") + 2 * g("pad"), g("W") + 2 * g("pad")});
    add("weight", {k, depthwise ? 1 : g("C"), g("R"), g("S")});
    add("out", {g("N"), k, oh, ow});
    flops = depthwise ? checked_product({2, g("N"), g("C"), oh, ow, g("R"), g("S")})
                      : checked_product({2, g("N"), k, oh, ow, g("C"), g("R"), g("S")});
  }
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

int64_t Workload::get(const std::string& key) const {
  for (const auto& [k, v] : params) {
    if (k == key) return v;
  }
  TF_CHECK(false, "workload ", op, " has no key ", key);
  return 0;
}

std::string Workload::canonical() const {
  std::string s = op + "(";
  for (const auto& [k, v] : params) s += k + "=" + std::to_string(v) + ",";
  s += std::string("epilogue=") + epilogue_name(epilogue) + ")";
  return s;
}

std::vector<std::string> known_ops() {
  std::vector<std::string> ops;
  for (const OpKeys& o : op_table()) ops.push_back(o.op);
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
  const OpKeys* def = nullptr;
  for (const OpKeys& o : op_table()) {
    if (w.op == o.op) def = &o;
  }
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

  for (const Key& k : def->keys) {
    auto it = given.find(k.name);
    int64_t v;
    if (it == given.end()) {
      if (k.default_value == kRequired) {
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
  if (!given.empty()) {
    std::string keys;
    for (const Key& k : def->keys) keys += std::string(keys.empty() ? "" : ", ") + k.name;
    throw UserError(str("workload '", spec, "': unknown key ", given.begin()->first, " for ",
                        w.op, " (keys: ", keys, ", epilogue)"));
  }
  check_output_sizes(w, spec);
  check_blocks(w, spec);
  check_footprint(w, spec);
  return w;
}

}  // namespace tf
