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
#include <nlohmann/json.hpp>
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

// A Concat computed in place (SqueezeNet's fire modules, Inception's branches): each input
// (`parts`, with its byte offset) is written by its producer's kernel straight into the
// Concat's output, so no kernel copies them. Only where every input is a whole contiguous
// range of the output: the dimensions before the axis are all 1 (a batch of one, in NCHW or
// in channel blocks), every offset a multiple of kArenaAlignment.
struct InPlaceConcat {
  std::string node, output;
  std::vector<std::pair<std::string, int64_t>> parts;  // value, byte offset in the output
};

// A view too: a node whose output holds its input's elements in the same order, another shape
// (Reshape, Flatten, Squeeze, Unsqueeze, and a Transpose that moves only dimensions of extent
// 1: batch-first to sequence-first at batch 1), alone in its group, is one part at offset 0 of
// its output, so no kernel copies it.
bool is_view(const Graph& g, const Node& n);

// Whether view `n` (is_view) may be computed in place as far as the graph alone says: one
// output, float32 or 16-bit values passed on as its input is (sixteen-bit-edges), not a model
// output, whose input is computed by a node (not a model input, output or constant) of the same
// type. in_place_concats takes such a view alone in its group unless its input or output is
// already another in-place node's; plan_fusion asks it which views to leave to memory planning
// (graph/fusion.cc, products reading their operands' views).
bool view_in_place_by_itself(const Graph& g, const Node& n);

// The Concat nodes of `groups` (plan_fusion's, in order) computed in place: alone in their
// group, float32, not a model output, each input a float32 intermediate some kernel writes (not a
// model input, output or constant; no other in-place Concat's input or output), each once; and
// the views of such an intermediate (is_view) alone in their group.
std::vector<InPlaceConcat> in_place_concats(const Graph& g, const std::vector<FusedGroup>& groups);

// `groups` without the in-place Concats' (the kernels a model runs), and those Concats as JSON
// ({node, output, parts: [{value, offset}]}: import's and the library sidecar's "in_place").
std::vector<FusedGroup> without_in_place(const std::vector<FusedGroup>& groups,
                                         const std::vector<InPlaceConcat>& in_place);
nlohmann::json in_place_json(const std::vector<InPlaceConcat>& in_place);

// `groups` are the kernels' (an in-place Concat has none): the output of an in-place Concat is
// live from the first kernel writing one of its parts to its last reader (or a part's), and
// each part lies at its offset in it.
MemoryPlan plan_memory(const Graph& g, const std::vector<FusedGroup>& groups,
                       const std::vector<InPlaceConcat>& in_place = {});

}  // namespace tf::graph
