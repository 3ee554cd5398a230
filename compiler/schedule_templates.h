// Schedule templates: one per operator family, driven by a config of named knobs.
//
// A config is a JSON object such as
//   {"tile_m": 4, "tile_n": 32, "unroll_k": 4, "pack_b": true, "parallel": true,
//    "vectorize": true, "unroll": true, "order": "nm"}
// Knobs left out take the template's default for the workload and target; an unknown knob,
// a wrong type or a value out of range is a UserError naming the knob and the value. The
// tuner explores knob_space() (tuner/config_space.h indexes it), pruned by
// check_constraints(); default_config() is what compiles use when nothing was tuned.
//
// All templates share one structure (see compiler/operators.h): the output is tiled, the
// reduction is computed at the tile so its accumulators stay in registers (cache_write), the
// inner tile axis is vectorized and the other unrolled, and the outermost loop runs in
// parallel. Inputs may be packed into blocked layouts first.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compiler/operators.h"
#include "compiler/schedule.h"
#include "compiler/target.h"

namespace tf {

// What a knob decides, which says how its candidates are derived:
//   split     a tile factor of one axis; candidates from the axis's extent (its divisors,
//             powers of two, multiples of the vector width; a tail handles the rest)
//   reorder   an order of loops
//   annotate  on/off for a loop annotation (unroll, vectorize, parallel) or a layout step
//   choice    any list
enum class KnobKind { Split, Reorder, Annotate, Choice };
const char* knob_kind_name(KnobKind k);

// One knob: its name, help text, kind and the values the tuner may try (for this workload and
// target). Any value complete_config accepts is legal; the candidates are what search tries.
struct KnobSpec {
  std::string name;
  std::string help;
  KnobKind kind = KnobKind::Choice;
  std::vector<nlohmann::json> candidates;
};

enum class KnobType { Int, Bool, Choice };

// A knob as a template declares it: how a value is checked, and its kind (which says how the
// tuner derives its candidates).
struct KnobDef {
  const char* name;
  KnobType type;
  const char* help;
  int64_t max = 0;                   // Int: values from 1 to max
  std::vector<std::string> choices;  // Choice
  KnobKind kind = KnobKind::Annotate;
};

// A schedule template: the knobs of an operator family on one kind of target, their defaults,
// the constraints that prune them, and how a config becomes a schedule. Each lives in a file
// of its own under compiler/templates/ and is listed once in compiler/templates/all.def, the
// only place that maps an operator and a target kind to a template (docs/architecture.md).
//
// Its id, name + ".v" + version, is stored with every tuning record: a change that alters
// what a config means bumps the version, and records of another version are never reused.
class ScheduleTemplate {
 public:
  ScheduleTemplate(std::string name, int version, std::vector<std::string> ops, TargetKind target_kind,
                   std::vector<OperandTypes> types = {OperandTypes{}})
      : name(std::move(name)), version(version), ops(std::move(ops)), target_kind(target_kind), types(std::move(types)) {}
  virtual ~ScheduleTemplate() = default;

  const std::string name;                // dense.cpu
  const int version;
  const std::vector<std::string> ops;    // operators it schedules
  const TargetKind target_kind;
  const std::vector<OperandTypes> types;  // operand types it schedules (float32 unless said)
  std::string id() const { return name + ".v" + std::to_string(version); }

  virtual const std::vector<KnobDef>& knobs() const = 0;
  // What the tuner tries for an Int knob on this workload and target (Bool and Choice knobs
  // try every value).
  virtual std::vector<nlohmann::json> int_candidates(const OpGraph& g, const Target& t, const KnobDef& k) const = 0;
  // Every knob's value when nothing was tuned.
  virtual nlohmann::json default_config(const OpGraph& g, const Target& t) const = 0;
  // Configs worth measuring right after the default (knobs set in the default; the tuner
  // completes them and skips those its space prunes): corners of the space where several knobs
  // must agree, which a random start would rarely reach. None by default.
  virtual std::vector<nlohmann::json> seed_configs(const OpGraph&, const Target&) const { return {}; }
  // Why a complete config is not worth building, or "" (see check_constraints below).
  virtual std::string check_constraints(const OpGraph& g, const Target& t, const nlohmann::json& c) const = 0;
  // The operator graph the template schedules for config `c`: `g` itself, or another
  // definition of the same function with the same inputs and output (names, element counts
  // and memory layouts; an input may be read with other dimensions over the same elements),
  // e.g. a convolution as an implicit GEMM. apply() gets what this returns.
  virtual OpGraph schedule_graph(const OpGraph& g, const Target& t, const nlohmann::json& c) const;
  // Schedules `s` (the workload's stages, its fused tail already inlined) for a complete config.
  virtual void apply(ir::Schedule& s, const OpGraph& g, const Target& t, const nlohmann::json& c) const = 0;
};

// Every registered template, in the order of compiler/templates/all.def.
const std::vector<const ScheduleTemplate*>& registered_templates();

// The template for the workload's operator and operand types on the target's kind, or nullptr.
const ScheduleTemplate* lookup_template(const Workload& w, const Target& t);

// The same; UserError when none is registered, naming the operators (and types) that kind
// has templates for.
const ScheduleTemplate& find_template(const Workload& w, const Target& t);

// find_template(w, t).id(), e.g. dense.cpu.v1.
std::string template_name(const Workload& w, const Target& t);

std::vector<KnobSpec> knob_space(const OpGraph& g, const Target& t);

nlohmann::json default_config(const OpGraph& g, const Target& t);

// The template's seed configs for `g` on `t` (ScheduleTemplate::seed_configs), completed.
std::vector<nlohmann::json> seed_configs(const OpGraph& g, const Target& t);

// Fills in defaults and validates; the result names every knob.
nlohmann::json complete_config(const OpGraph& g, const Target& t, const nlohmann::json& config);

// Why a complete config is not worth building on this target, or "" when it is: its register
// tile needs more vector registers than the target has (they would spill), or its unrolled
// body is past the size that compiles in reasonable time. Legal configs that fail this still
// compile (`tunefarm compile --config` takes them); the tuner prunes them before building.
std::string check_constraints(const OpGraph& g, const Target& t, const nlohmann::json& complete);

// Vector registers of the target's widest kind: 32 (AVX-512, NEON on aarch64), else 16.
int vector_registers(const Target& t);

// Builds the schedule for `config` (completed first).
ir::Schedule apply_config(const OpGraph& g, const Target& t, const nlohmann::json& config);

}  // namespace tf
