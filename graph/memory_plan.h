// memory_plan: static placement of a model's intermediate tensors in one arena, reusing
// memory by liveness (greedy by size, as TFLite's and TVM's static planners).
//
// What it promises: every value a fused kernel writes that is not a model output (those the
// caller provides) gets an offset in the arena, aligned to 64 bytes; two values whose
// lifetimes overlap (from the group writing one to the last group reading it) never overlap
// in memory; arena_bytes is the arena's size, which is the peak the model needs for its
// intermediates, against naive_bytes, every intermediate in memory of its own.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/fusion.h"
#include "graph/graph.h"

namespace tf::graph {

struct BufferPlacement {
  int64_t offset = 0, bytes = 0;
  size_t first = 0, last = 0;  // the groups (in plan order) writing and last reading it
};

struct MemoryPlan {
  std::map<std::string, BufferPlacement> buffers;  // by value name
  int64_t arena_bytes = 0;
  int64_t naive_bytes = 0;
};

constexpr int64_t kArenaAlignment = 64;

MemoryPlan plan_memory(const Graph& g, const std::vector<FusedGroup>& groups);

}  // namespace tf::graph
