// Features of a schedule candidate for the cost model, read from its lowered loop IR.
//
// The model ranks candidates of any shape and template, so it sees what the schedule makes
// of the loops, not the knob values: the loop nest around the hottest statement (extent and
// kind of each level), what each of its buffer accesses touches and reuses at each level,
// the innermost strides, vector width, unrolled body size, arithmetic intensity, tails and
// guards, parallelism, and the work outside the hot statement (packing, initialisation).
//
// Promises: a fixed-length vector (kNumFeatures floats, named by feature_names() and
// documented in docs/costmodel.md); identical IR gives identical features; the IR is read
// after partition_loops, before unrolling and vectorizing turn loops into straight code.
// Every value is finite; sizes and counts are log2(1 + x) so that shapes of different scale
// stay comparable.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "compiler/ir.h"
#include "compiler/operators.h"
#include "compiler/target.h"

namespace tf::costmodel {

// Loop levels described, counted from the hottest statement outwards.
constexpr size_t kLoopSlots = 8;
// Buffer accesses of the hottest statement described: the store, then the loads with the
// largest footprints.
constexpr size_t kAccessSlots = 4;
// Loop levels at which each access's footprint and reuse are given (innermost 1, 2, 3, 4, 6
// levels and the whole nest).
constexpr size_t kFootprintLevels = 6;

constexpr size_t kGlobalFeatures = 18;
constexpr size_t kLoopFeatures = 5;
constexpr size_t kAccessFeatures = 3 + 2 * kFootprintLevels;
constexpr size_t kNumFeatures = kGlobalFeatures + kLoopSlots * kLoopFeatures + kAccessSlots * kAccessFeatures;

// The name of each feature, in vector order (e.g. "loop0.extent", "access1.reuse.l2").
const std::vector<std::string>& feature_names();

// The features of a function lowered up to partition_loops, for a workload of `flops`
// floating-point operations on a target with `vector_lanes` float lanes.
std::vector<float> extract_features(const ir::LoweredFunc& f, double flops, int vector_lanes);

// Applies `config` to the graph, lowers it up to partition_loops and extracts its features.
// Throws UserError when the template rejects the config.
std::vector<float> config_features(const OpGraph& g, const Target& t, const nlohmann::json& config);

}  // namespace tf::costmodel
