#include "graph/memory_plan.h"

#include <algorithm>
#include <set>

namespace tf::graph {

MemoryPlan plan_memory(const Graph& g, const std::vector<FusedGroup>& groups) {
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
  for (size_t k = 0; k < groups.size(); ++k) {
    for (const std::string& v : groups[k].inputs) {
      if (auto it = plan.buffers.find(v); it != plan.buffers.end())
        it->second.last = std::max(it->second.last, k);
    }
  }
  // Greedy by size: the largest first, each at the lowest offset where it overlaps no placed
  // buffer that is live at the same time.
  std::vector<std::string> order;
  for (const auto& [name, b] : plan.buffers) order.push_back(name);
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
  return plan;
}

}  // namespace tf::graph
