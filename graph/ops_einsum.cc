// Einsum (opset 12+): the equation parsed into per-input labels, output labels (explicit
// after "->", else the labels used once, sorted, as numpy has it) and the summed labels, with
// one extent per label (EinsumSpec, shared with the compiled kernel in node_te.cc); and the
// reference evaluation, a loop over every label's values. Ellipses ("...") are refused.
#include <algorithm>
#include <cctype>

#include "base/error.h"
#include "graph/op_te.h"
#include "graph/ops.h"

namespace tf::graph {

EinsumSpec einsum_spec(const OpContext& c) {
  const Node& n = c.node;
  std::string eq;
  for (char ch : n.get_string("equation", "")) {
    if (ch != ' ') eq += ch;
  }
  if (eq.empty()) throw UserError(str(n.where(), ": the equation attribute is missing"));
  if (eq.find("...") != std::string::npos)
    throw UserError(str(n.where(), ": equation '", eq, "': ellipsis ('...') is not supported"));
  EinsumSpec s;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  for (size_t at = 0;;) {
    size_t comma = lhs.find(',', at);
    s.inputs.push_back(lhs.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (s.inputs.size() != c.count())
    throw UserError(str(n.where(), ": equation '", eq, "' has ", s.inputs.size(), " operands; the node has ",
                        c.count(), " inputs"));
  std::map<char, int> uses;
  for (size_t k = 0; k < s.inputs.size(); ++k) {
    require_float(c, k);
    const std::string& labels = s.inputs[k];
    const Shape& shape = c.in(k).shape;
    if (labels.size() != shape.size())
      throw UserError(str(n.where(), ": operand ", k, " '", labels, "' has ", labels.size(),
                          " labels for the input ", shape_str(shape)));
    for (size_t d = 0; d < labels.size(); ++d) {
      char l = labels[d];
      if (!std::isalpha(static_cast<unsigned char>(l)))
        throw UserError(str(n.where(), ": equation '", eq, "': '", l, "' is not a label (letters only)"));
      auto [it, fresh] = s.extent.emplace(l, shape[d]);
      if (!fresh && it->second != shape[d])
        throw UserError(str(n.where(), ": label '", l, "' is ", it->second, " in one operand and ", shape[d],
                            " in another"));
      ++uses[l];
    }
  }
  if (arrow != std::string::npos) {
    s.output = eq.substr(arrow + 2);
    for (char l : s.output) {
      if (!s.extent.count(l))
        throw UserError(str(n.where(), ": equation '", eq, "': output label '", l, "' is in no operand"));
      if (std::count(s.output.begin(), s.output.end(), l) > 1)
        throw UserError(str(n.where(), ": equation '", eq, "': output label '", l, "' repeats"));
    }
  } else {
    for (const auto& [l, count] : uses) {
      if (count == 1) s.output += l;
    }
  }
  for (const std::string& labels : s.inputs) {
    for (char l : labels) {
      if (s.output.find(l) == std::string::npos && s.summed.find(l) == std::string::npos) s.summed += l;
    }
  }
  for (char l : s.output) s.out.push_back(s.extent.at(l));
  check_tensor_size(n.where(), s.out);
  // The loop nest (output and summed labels) must be countable: at most 2^62 iterations.
  int64_t nest = 1;
  for (const auto& [l, e] : s.extent) {
    if (e != 0 && nest > (int64_t{1} << 62) / e)
      throw UserError(str(n.where(), ": equation '", eq, "' has a loop nest of more than 2^62 iterations"));
    nest *= e;
  }
  return s;
}

namespace {

std::vector<HostTensor> einsum_eval(const OpContext& c, const std::vector<const HostTensor*>& in) {
  EinsumSpec s = einsum_spec(c);
  std::string labels = s.output + s.summed;
  std::vector<int64_t> ext;
  for (char l : labels) ext.push_back(s.extent.at(l));
  HostTensor out = make_like(DType::F32, s.out);
  int64_t out_count = num_elements(s.out), sum_count = 1;
  for (char l : s.summed) sum_count *= s.extent.at(l);
  // Per operand and label position: the stride of each of `labels` in that operand.
  std::vector<std::vector<int64_t>> strides(in.size(), std::vector<int64_t>(labels.size(), 0));
  for (size_t k = 0; k < in.size(); ++k) {
    int64_t st = 1;
    for (size_t d = s.inputs[k].size(); d-- > 0;) {
      strides[k][labels.find(s.inputs[k][d])] += st;
      st *= in[k]->shape[d];
    }
  }
  std::vector<int64_t> idx(labels.size(), 0);
  for (int64_t o = 0; o < out_count; ++o) {
    double acc = 0;
    for (int64_t r = 0; r < sum_count; ++r) {
      // idx: the output position's labels (set below), then r spelled in the summed labels.
      for (size_t d = labels.size(), rest = static_cast<size_t>(r); d-- > s.output.size();) {
        idx[d] = static_cast<int64_t>(rest % static_cast<size_t>(ext[d]));
        rest /= static_cast<size_t>(ext[d]);
      }
      double prod = 1;
      for (size_t k = 0; k < in.size(); ++k) {
        int64_t at = 0;
        for (size_t d = 0; d < labels.size(); ++d) at += idx[d] * strides[k][d];
        prod *= in[k]->f[at];
      }
      acc += prod;
    }
    out.f[o] = static_cast<float>(acc);
    for (size_t d = s.output.size(); d-- > 0;) {
      if (++idx[d] < ext[d]) break;
      idx[d] = 0;
    }
  }
  return {out};
}

}  // namespace

void register_einsum_ops(std::vector<OpDef>& ops) {
  ops.push_back({"Einsum", 1, 1 << 10,
                 [](const OpContext& c) { return std::vector<TypeShape>{{DType::F32, einsum_spec(c).out}}; },
                 einsum_eval, te::einsum_te, nullptr, nullptr, /*linear_cost=*/false});
  describe(ops.back(), OpKind::Opaque, {"equation"});
}

}  // namespace tf::graph
