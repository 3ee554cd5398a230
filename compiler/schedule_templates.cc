#include "compiler/schedule_templates.h"

#include <algorithm>
#include <memory>

#include "base/error.h"

namespace tf {

namespace templates {
#define TF_TEMPLATE(maker) std::unique_ptr<ScheduleTemplate> maker();
#include "compiler/templates/all.def"
#undef TF_TEMPLATE
}  // namespace templates

namespace {

using json = nlohmann::json;

std::string knob_list(const ScheduleTemplate& tpl) {
  std::string s;
  for (const KnobDef& k : tpl.knobs()) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s;
}

void check_value(const std::string& op, const KnobDef& k, const json& v) {
  std::string shown = v.dump();
  switch (k.type) {
    case KnobType::Int:
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > k.max) {
        throw UserError(str("config knob ", k.name, "=", shown, " for ", op,
                            ": must be an integer from 1 to ", k.max));
      }
      return;
    case KnobType::Bool:
      if (!v.is_boolean()) {
        throw UserError(str("config knob ", k.name, "=", shown, " for ", op, ": must be true or false"));
      }
      return;
    case KnobType::Choice: {
      std::string all;
      for (const std::string& c : k.choices) {
        if (v.is_string() && v.get<std::string>() == c) return;
        all += (all.empty() ? "" : ", ") + c;
      }
      throw UserError(str("config knob ", k.name, "=", shown, " for ", op, ": must be one of ", all));
    }
  }
}

}  // namespace

const char* knob_kind_name(KnobKind k) {
  switch (k) {
    case KnobKind::Split: return "split";
    case KnobKind::Reorder: return "reorder";
    case KnobKind::Annotate: return "annotate";
    case KnobKind::Choice: return "choice";
  }
  return "choice";
}

const std::vector<const ScheduleTemplate*>& registered_templates() {
  // Made once and never destroyed: tuning threads may look templates up while the program
  // exits.
  static const std::vector<const ScheduleTemplate*>* all = [] {
    auto* v = new std::vector<const ScheduleTemplate*>;
#define TF_TEMPLATE(maker) v->push_back(templates::maker().release());
#include "compiler/templates/all.def"
#undef TF_TEMPLATE
    return v;
  }();
  return *all;
}

const ScheduleTemplate* lookup_template(const Workload& w, const Target& t) {
  for (const ScheduleTemplate* s : registered_templates()) {
    if (s->target_kind == t.kind && std::find(s->ops.begin(), s->ops.end(), w.op) != s->ops.end() &&
        std::find(s->types.begin(), s->types.end(), w.types) != s->types.end())
      return s;
  }
  return nullptr;
}

const ScheduleTemplate& find_template(const Workload& w, const Target& t) {
  if (const ScheduleTemplate* s = lookup_template(w, t)) return *s;
  std::string have;
  for (const ScheduleTemplate* s : registered_templates()) {
    if (s->target_kind != t.kind) continue;
    std::string types;
    for (const OperandTypes& ty : s->types) {
      if (!(ty == OperandTypes{})) types += (types.empty() ? "" : ", ") + ty.str();
    }
    for (const std::string& o : s->ops) have += (have.empty() ? "" : ", ") + o + (types.empty() ? "" : " (" + types + ")");
  }
  std::string what = w.types == OperandTypes{} ? w.op : w.op + " of " + w.types.str();
  throw UserError(str("no schedule template for ", what, " on ", t.kind_name(), " targets yet (", t.kind_name(),
                      " templates: ", have.empty() ? "none" : have, ")"));
}

std::string template_name(const Workload& w, const Target& t) { return find_template(w, t).id(); }

int vector_registers(const Target& t) {
  if (t.arch_name() == "aarch64") return 32;
  if (t.arch_name() == "x86_64" && t.vector_lanes() >= 16) return 32;
  return 16;
}

std::string check_constraints(const OpGraph& g, const Target& t, const json& c) {
  return find_template(g.workload, t).check_constraints(g, t, c);
}

json default_config(const OpGraph& g, const Target& t) { return find_template(g.workload, t).default_config(g, t); }

std::vector<json> seed_configs(const OpGraph& g, const Target& t) {
  std::vector<json> out;
  for (const json& c : find_template(g.workload, t).seed_configs(g, t)) out.push_back(complete_config(g, t, c));
  return out;
}

std::vector<KnobSpec> knob_space(const OpGraph& g, const Target& t) {
  const ScheduleTemplate& tpl = find_template(g.workload, t);
  // The default config is always a point of the space: the tuner measures it first, and
  // re-times its best beside it (a depthwise layer's default tile_w of 19 was no candidate
  // of its 56 columns, so its run had no baseline and no verdict).
  const json defaults = tpl.default_config(g, t);
  std::vector<KnobSpec> out;
  for (const KnobDef& k : tpl.knobs()) {
    KnobSpec spec{k.name, k.help, k.kind, {}};
    if (k.type == KnobType::Bool) {
      spec.candidates = {true, false};
    } else if (k.type == KnobType::Choice) {
      for (const std::string& c : k.choices) spec.candidates.push_back(c);
    } else {
      spec.candidates = tpl.int_candidates(g, t, k);
      if (defaults.contains(k.name) && defaults[k.name].is_number_integer()) {
        const json& d = defaults[k.name];
        auto at = std::find_if(spec.candidates.begin(), spec.candidates.end(),
                               [&](const json& c) { return c.get<int64_t>() >= d.get<int64_t>(); });
        if (at == spec.candidates.end() || *at != d) spec.candidates.insert(at, d);
      }
    }
    out.push_back(std::move(spec));
  }
  return out;
}

json complete_config(const OpGraph& g, const Target& t, const json& config) {
  const std::string& op = g.workload.op;
  if (!config.is_null() && !config.is_object()) {
    throw UserError(str("config ", config.dump(), " is not a JSON object of knobs"));
  }
  const ScheduleTemplate& tpl = find_template(g.workload, t);
  const auto& defs = tpl.knobs();
  // A config naming every knob needs no default (whose keys are the knobs: TemplateRegistry.
  // DefaultsAreCompleteAndWithinConstraints). The tuner's configs all do, and a GPU GEMM's
  // default models hundreds of block hierarchies: computed for each config the cost model
  // lowered, it was an eighth of the features' time.
  const bool names_all = config.is_object() && std::all_of(defs.begin(), defs.end(), [&](const KnobDef& k) {
    return config.contains(k.name);
  });
  json c = names_all ? json::object() : tpl.default_config(g, t);
  if (config.is_null()) return c;
  for (const auto& [key, value] : config.items()) {
    auto it = std::find_if(defs.begin(), defs.end(), [&](const KnobDef& k) { return key == k.name; });
    if (it == defs.end()) {
      throw UserError(str("config knob '", key, "' is not a knob of ", tpl.id(), " (knobs: ", knob_list(tpl), ")"));
    }
    check_value(op, *it, value);
    c[key] = value;
  }
  return c;
}

OpGraph ScheduleTemplate::schedule_graph(const OpGraph& g, const Target&, const json&) const { return g; }

ir::Schedule apply_config(const OpGraph& g, const Target& t, const json& config) {
  json c = complete_config(g, t, config);
  const ScheduleTemplate& tpl = find_template(g.workload, t);
  OpGraph sg = tpl.schedule_graph(g, t, c);
  ir::Schedule s(sg.output);
  for (const ir::Tensor& tail : sg.tail) s.stage(tail->name).compute_inline();
  for (const ir::Tensor& p : sg.prologue) s.stage(p->name).compute_inline();
  tpl.apply(s, sg, t, c);
  return s;
}

}  // namespace tf
