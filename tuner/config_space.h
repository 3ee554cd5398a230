// ConfigSpace: the points a schedule template offers for one workload on one target.
//
// Promises: the space is the Cartesian product of the template's knobs (compiler/
// schedule_templates.h knob_space), each point has a stable index in [0, size()) (mixed
// radix, first knob most significant) that maps to exactly one complete config and back;
// to_config() of any index is a config the template accepts; valid() says whether the
// template's constraints (register budget, unrolled size) keep the point worth building, so
// search never spends a build on a pruned point. The template id goes with every config,
// so records of another template version are told apart.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/operators.h"
#include "compiler/schedule_templates.h"
#include "compiler/target.h"

namespace tf {

class ConfigSpace {
 public:
  // Throws UserError when no template schedules the workload on the target.
  ConfigSpace(const Workload& w, const Target& t);

  const Workload& workload() const { return workload_; }
  const Target& target() const { return target_; }
  const OpGraph& graph() const { return graph_; }
  const std::string& template_id() const { return template_id_; }
  const std::vector<KnobSpec>& knobs() const { return knobs_; }

  // Points in the product of the knobs' candidates (pruned ones included).
  uint64_t size() const { return size_; }
  // Points that pass the constraints: counted exactly when size() <= kExactCountLimit,
  // else estimated from a sample (valid_size_exact() says which).
  uint64_t valid_size() const;
  bool valid_size_exact() const { return size_ <= kExactCountLimit; }
  static constexpr uint64_t kExactCountLimit = 20000;

  // The candidate position of each knob at `index`, and back.
  std::vector<size_t> digits(uint64_t index) const;
  uint64_t index_of(const std::vector<size_t>& digits) const;

  // The complete config at `index` (every knob named).
  nlohmann::json to_config(uint64_t index) const;
  // The index of a config (completed with the template's defaults first), or nullopt when a
  // value is not one of its knob's candidates (legal configs may lie outside the space).
  std::optional<uint64_t> index_of(const nlohmann::json& config) const;

  // "" when the point is worth building, else why not (check_constraints).
  std::string why_pruned(uint64_t index) const;
  bool valid(uint64_t index) const { return why_pruned(index).empty(); }

  // The template's default config, as an index when it lies in the space.
  std::optional<uint64_t> default_index() const;
  // The template's seed configs (ScheduleTemplate::seed_configs), complete.
  std::vector<nlohmann::json> template_seeds() const;

  // {"template", "size", "valid_size", "knobs": [{name, kind, help, candidates}]}.
  nlohmann::json to_json() const;

 private:
  Workload workload_;
  Target target_;
  OpGraph graph_;
  std::string template_id_;
  std::vector<KnobSpec> knobs_;
  uint64_t size_ = 1;
  mutable std::optional<uint64_t> valid_size_;
};

}  // namespace tf
