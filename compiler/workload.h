// Workload specs: the text that names an operator and its sizes.
//
//   conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1,epilogue=bias_relu)
//
// parse_workload checks every key and value and throws UserError naming the first bad one.
// Workload::canonical() prints every key of the operator in its declared order, defaults
// included, so one workload has exactly one text; the tuning database keys on that text.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tf {

enum class Epilogue { None, Bias, Relu, BiasRelu };
const char* epilogue_name(Epilogue e);

struct Workload {
  std::string op;
  // Integer parameters in the operator's declared order, defaults filled in.
  std::vector<std::pair<std::string, int64_t>> params;
  Epilogue epilogue = Epilogue::None;

  int64_t get(const std::string& key) const;
  std::string canonical() const;
};

Workload parse_workload(const std::string& spec);

// The operator names parse_workload accepts, in a fixed order.
std::vector<std::string> known_ops();

}  // namespace tf
