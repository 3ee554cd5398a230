// Schedule templates: one per operator family, driven by a config of named knobs.
//
// A config is a JSON object such as
//   {"tile_m": 4, "tile_n": 32, "unroll_k": 4, "pack_b": true, "parallel": true,
//    "vectorize": true, "unroll": true, "order": "nm"}
// Knobs left out take the template's default for the workload and target; an unknown knob,
// a wrong type or a value out of range is a UserError naming the knob and the value. The
// tuner explores knob_space(); default_config() is what compiles use when nothing was tuned.
//
// All templates share one structure (see compiler/operators.h): the output is tiled, the
// reduction is computed at the tile so its accumulators stay in registers (cache_write), the
// inner tile axis is vectorized and the other unrolled, and the outermost loop runs in
// parallel. Inputs may be packed into blocked layouts first.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "compiler/operators.h"
#include "compiler/schedule.h"
#include "compiler/target.h"

namespace tf {

// One knob: its name, help text and the values the tuner may try.
struct KnobSpec {
  std::string name;
  std::string help;
  std::vector<nlohmann::json> candidates;
};

// The template's name and version, stored with every tuning record.
std::string template_name(const std::string& op);

std::vector<KnobSpec> knob_space(const OpGraph& g, const Target& t);

nlohmann::json default_config(const OpGraph& g, const Target& t);

// Fills in defaults and validates; the result names every knob.
nlohmann::json complete_config(const OpGraph& g, const Target& t, const nlohmann::json& config);

// Builds the schedule for `config` (completed first).
ir::Schedule apply_config(const OpGraph& g, const Target& t, const nlohmann::json& config);

}  // namespace tf
