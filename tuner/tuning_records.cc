#include "tuner/tuning_records.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "base/error.h"
#include "compiler/schedule_templates.h"

namespace tf {

nlohmann::json workload_params(const Workload& w) {
  nlohmann::json p = nlohmann::json::object();
  for (const auto& [k, v] : w.shown_params()) p[k] = v;
  return p;
}

db::LookupKey lookup_key(const Workload& w, const Target& t) {
  std::string tmpl;
  try {
    tmpl = template_name(w, t);
  } catch (const UserError&) {
    // No template for this target kind yet: any record may answer the query.
  }
  return {w.canonical(), w.op, workload_params(w), t.str(), t.arch_name(), tmpl};
}

std::string canonical_workload(const std::string& w) { return w.empty() ? "" : parse_workload(w).canonical(); }
std::string canonical_target(const std::string& t) { return t.empty() ? "" : parse_target(t).str(); }

std::string new_run_uuid() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x-%04x-4%03x-%04x-%04x%08x", rd(), rd() & 0xffff, rd() & 0xfff,
                (rd() & 0x3fff) | 0x8000, rd() & 0xffff, rd());
  return buf;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

db::TuningRun new_tuning_run(const std::string& uuid, const std::string& user, const std::string& strategy,
                             int budget, const std::string& workload, const std::string& target) {
  db::TuningRun run;
  run.uuid = uuid;
  run.user = user;
  run.host = host_name();
  run.strategy = strategy;
  run.budget = budget;
  run.workload = workload;
  run.target = target;
  run.started_at = unix_now();
  return run;
}

std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string local_device_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string toolchain_version() {
  return std::string("tunefarm ") + kTunefarmVersion + ", LLVM " + TF_LLVM_VERSION;
}

db::MeasureRecord record_for(const CompiledKernel& k, const std::string& device_key) {
  db::MeasureRecord r;
  const Workload& w = k.graph.workload;
  r.workload = w.canonical();
  r.op = w.op;
  r.params = workload_params(w);
  r.flops = k.graph.flops;
  r.target = k.target.str();
  r.arch = k.target.arch_name();
  r.device_key = device_key;
  r.device_model = device_key == "local" ? local_device_model() : "";
  r.toolchain = toolchain_version();
  r.template_name = template_name(w, k.target);
  r.config = k.config;
  return r;
}

ConfigChoice choose_config(db::Database* db, const Workload& w, const Target& t) {
  ConfigChoice c;
  if (!db) return c;
  db::BestResult b = db->best(lookup_key(w, t));
  if (b.tier == db::MatchTier::None) return c;
  if (b.record.template_name != template_name(w, t)) return c;
  try {
    complete_config(build_op(w), t, b.record.config);
  } catch (const UserError&) {
    return c;  // a config of an older template version
  }
  c.config = b.record.config;
  c.source = std::string("tuned (") + db::tier_name(b.tier) + ")";
  c.tuned_from = {{"tier", db::tier_name(b.tier)}, {"workload", b.record.workload},
                  {"target", b.record.target}, {"median_s", b.robust_median_s},
                  {"measurements", b.measurements}, {"record", b.record.id}};
  return c;
}

}  // namespace tf
