#include "graph/memory_plan.h"

#include <algorithm>
#include <map>
#include <set>

namespace tf::graph {

bool is_view(const Graph& g, const Node& n) {
  if (n.op == "Reshape" || n.op == "Flatten" || n.op == "Squeeze" || n.op == "Unsqueeze") return true;
  if (n.op != "Transpose" || n.inputs.empty()) return false;
  const Shape& in = g.value(n.inputs[0]).shape;
  const std::vector<int64_t> perm = transpose_perm(n, in.size());
  if (!is_permutation(perm, in.size())) return false;
  // The dimensions of more than one element keep their order.
  int64_t last = -1;
  for (int64_t d : perm) {
    if (in[static_cast<size_t>(d)] == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

bool view_in_place_by_itself(const Graph& g, const Node& n) {
  if (!is_view(g, n) || n.outputs.size() != 1 || n.outputs[0].empty() || n.inputs.empty() ||
      n.inputs[0].empty())
    return false;
  const Value& y = g.value(n.outputs[0]);
  const std::string& in = n.inputs[0];
  auto listed = [](const std::vector<std::string>& names, const std::string& v) {
    return std::find(names.begin(), names.end(), v) != names.end();
  };
  // Float32, or 16-bit values passed on (sixteen-bit-edges) as their input is.
  return (y.dtype == DType::F32 || is_storage16(y.dtype)) && !listed(g.outputs, y.name) &&
         !listed(g.inputs, in) && !listed(g.outputs, in) && !g.is_constant(in) &&
         g.value(in).dtype == y.dtype;
}

std::vector<InPlaceConcat> in_place_concats(const Graph& g, const std::vector<FusedGroup>& groups) {
  std::set<std::string> written, outputs(g.outputs.begin(), g.outputs.end()),
      inputs(g.inputs.begin(), g.inputs.end());
  for (const FusedGroup& grp : groups) written.insert(grp.outputs.begin(), grp.outputs.end());
  std::map<std::string, const Node*> nodes;
  for (const Node& n : g.nodes) nodes[n.name] = &n;
  std::set<std::string> taken;  // parts and outputs of the in-place Concats so far
  std::vector<InPlaceConcat> found;
  // Whether value `in` may be a part: of type `dtype` (float32; a view's 16-bit values too),
  // written by a kernel, no model input, output or constant, no other in-place node's part or
  // output.
  auto part_ok = [&](const std::string& in, DType dtype = DType::F32) {
    return !in.empty() && written.count(in) && !inputs.count(in) && !outputs.count(in) &&
           !g.is_constant(in) && !taken.count(in) && g.value(in).dtype == dtype;
  };
  for (const FusedGroup& grp : groups) {
    if (grp.nodes.size() != 1) continue;
    const Node& n = *nodes.at(grp.nodes[0]);
    // A view (Reshape, Flatten, Squeeze, Unsqueeze: the same elements in the same order, another
    // shape) of one part at offset 0: its input's kernel writes what it returns.
    if (is_view(g, n) && n.outputs.size() == 1 && !n.outputs[0].empty()) {
      const Value& y = g.value(n.outputs[0]);
      if (!view_in_place_by_itself(g, n) || !part_ok(n.inputs[0], y.dtype) || taken.count(y.name))
        continue;
      taken.insert({n.inputs[0], y.name});
      found.push_back(InPlaceConcat{n.name, y.name, {{n.inputs[0], 0}}});
      continue;
    }
    if (n.op != "Concat" || n.outputs.size() != 1 || n.inputs.size() < 2) continue;
    const Value& y = g.value(n.outputs[0]);
    if (y.dtype != DType::F32 || outputs.count(y.name) || taken.count(y.name)) continue;
    const auto rank = static_cast<int64_t>(y.shape.size());
    int64_t axis = n.get_int("axis", 0);
    if (axis < 0) axis += rank;
    bool ok = axis >= 0 && axis < rank;
    for (int64_t d = 0; ok && d < axis; ++d) ok = y.shape[d] == 1;
    InPlaceConcat c{n.name, y.name, {}};
    std::set<std::string> mine;
    int64_t offset = 0;
    for (const std::string& in : n.inputs) {
      if (!ok) break;
      ok = part_ok(in) && mine.insert(in).second && offset % kArenaAlignment == 0;
      c.parts.emplace_back(in, offset);
      offset += ok ? num_elements(g.value(in).shape) * 4 : 0;
    }
    if (!ok) continue;
    taken.insert(mine.begin(), mine.end());
    taken.insert(y.name);
    found.push_back(std::move(c));
  }
  return found;
}

std::vector<FusedGroup> without_in_place(const std::vector<FusedGroup>& groups,
                                         const std::vector<InPlaceConcat>& in_place) {
  std::set<std::string> skip;
  for (const InPlaceConcat& c : in_place) skip.insert(c.node);
  std::vector<FusedGroup> kept;
  for (const FusedGroup& grp : groups) {
    if (grp.nodes.size() != 1 || !skip.count(grp.nodes[0])) kept.push_back(grp);
  }
  return kept;
}

nlohmann::json in_place_json(const std::vector<InPlaceConcat>& in_place) {
  nlohmann::json all = nlohmann::json::array();
  for (const InPlaceConcat& c : in_place) {
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& [value, offset] : c.parts)
      parts.push_back({{"value", value}, {"offset", offset}});
    all.push_back({{"node", c.node}, {"output", c.output}, {"parts", parts}});
  }
  return all;
}

MemoryPlan plan_memory(const Graph& g, const std::vector<FusedGroup>& groups,
                       const std::vector<InPlaceConcat>& in_place) {
  MemoryPlan plan;
  std::set<std::string> outputs(g.outputs.begin(), g.outputs.end());
  auto align = [](int64_t b) {
    return (b + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  };
  for (size_t k = 0; k < groups.size(); ++k) {
    for (const std::string& v : groups[k].outputs) {
      const Value& val = g.value(v);
      // Float outputs are written in the caller's buffers; others are computed here and
      // converted into them after the last kernel (compiler/model_entry.h).
      bool output = outputs.count(v) > 0;
      if (output && (val.dtype == DType::F32 || is_storage16(val.dtype))) continue;
      // int64 8 bytes, uint8 1, float16 2; bools are 0 / 1 floats in compiled kernels
      // (graph/node_te.h).
      int64_t width = val.dtype == DType::I64   ? 8
                      : val.dtype == DType::U8  ? 1
                      : is_storage16(val.dtype) ? 2
                                                : 4;
      plan.buffers[v] = BufferPlacement{0, align(num_elements(val.shape) * width), k, output ? groups.size() : k};
    }
  }
  // An in-place Concat's output: written by no kernel, live from its first part's kernel.
  std::set<std::string> parts;
  for (const InPlaceConcat& c : in_place) {
    BufferPlacement b{0, align(num_elements(g.value(c.output).shape) * 4), groups.size(), 0};
    for (const auto& [part, offset] : c.parts) {
      b.first = std::min(b.first, plan.buffers.at(part).first);
      parts.insert(part);
    }
    b.last = b.first;
    plan.buffers[c.output] = b;
  }
  for (size_t k = 0; k < groups.size(); ++k) {
    for (const std::string& v : groups[k].inputs) {
      if (auto it = plan.buffers.find(v); it != plan.buffers.end())
        it->second.last = std::max(it->second.last, k);
    }
  }
  for (const InPlaceConcat& c : in_place) {
    BufferPlacement& b = plan.buffers.at(c.output);
    for (const auto& [part, offset] : c.parts)
      b.last = std::max(b.last, plan.buffers.at(part).last);
  }
  // Greedy by size: the largest first, each at the lowest offset where it overlaps no placed
  // buffer that is live at the same time.
  std::vector<std::string> order;
  for (const auto& [name, b] : plan.buffers) {
    if (!parts.count(name)) order.push_back(name);
  }
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return plan.buffers.at(a).bytes > plan.buffers.at(b).bytes;
  });
  // Placed buffers as plain values (no map lookups in the quadratic scan: an unrolled LSTM has
  // tens of thousands of buffers).
  struct Placed {
    size_t first, last;
    int64_t offset, end;
  };
  std::vector<Placed> placed;
  placed.reserve(order.size());
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of live-overlapping buffers
  for (const std::string& name : order) {
    BufferPlacement& b = plan.buffers[name];
    busy.clear();
    for (const Placed& o : placed) {
      if (o.first <= b.last && b.first <= o.last) busy.emplace_back(o.offset, o.end);
    }
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + b.bytes <= lo) break;
      at = std::max(at, hi);
    }
    b.offset = at;
    plan.arena_bytes = std::max(plan.arena_bytes, at + b.bytes);
    plan.naive_bytes += b.bytes;
    placed.push_back({b.first, b.last, at, at + b.bytes});
  }
  // Each part inside its Concat's output.
  for (const InPlaceConcat& c : in_place) {
    for (const auto& [part, offset] : c.parts)
      plan.buffers.at(part).offset = plan.buffers.at(c.output).offset + offset;
  }
  return plan;
}

}  // namespace tf::graph
