#include "db/query_json.h"

#include "db/jsonl.h"

namespace tf::db {

nlohmann::json record_query_json(const MeasureRecord& r) {
  nlohmann::json j = record_to_json(r);
  j["id"] = r.id;
  if (auto m = r.median_s(); m && r.error_code == "ok") {
    j["median_s"] = *m;
    j["gflops"] = double(r.flops) / *m * 1e-9;
  }
  return j;
}

nlohmann::json run_json(const TuningRun& r) {
  return {{"uuid", r.uuid},       {"user", r.user},     {"host", r.host},
          {"strategy", r.strategy}, {"budget", r.budget}, {"workload", r.workload},
          {"target", r.target},   {"started_at", r.started_at}, {"finished_at", r.finished_at},
          {"status", r.status},   {"records", r.records}};
}

nlohmann::json model_result_json(const ModelResult& m) {
  return {{"model", m.model},
          {"model_hash", m.model_hash},
          {"target", m.target},
          {"device_key", m.device_key},
          {"tuned_s", m.tuned_s},
          {"default_s", m.default_s},
          {"speedup", m.tuned_s > 0 ? m.default_s / m.tuned_s : 0.0},
          {"estimate_s", m.estimate_s},
          {"tuned_kernels", m.tuned_kernels},
          {"tunable_kernels", m.tunable_kernels},
          {"configs", m.configs},
          {"measured_at", m.measured_at}};
}

ModelResult model_result_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("a model result is not a JSON object");
  auto get = [&](const char* name, auto& out) {
    if (!j.contains(name)) throw std::invalid_argument(std::string("a model result has no field ") + name);
    try {
      j.at(name).get_to(out);
    } catch (const nlohmann::json::exception&) {
      throw std::invalid_argument(std::string("a model result's field ") + name + " has the wrong type");
    }
  };
  ModelResult m;
  get("model", m.model);
  get("model_hash", m.model_hash);
  get("target", m.target);
  get("device_key", m.device_key);
  get("tuned_s", m.tuned_s);
  get("default_s", m.default_s);
  get("estimate_s", m.estimate_s);
  get("tuned_kernels", m.tuned_kernels);
  get("tunable_kernels", m.tunable_kernels);
  get("measured_at", m.measured_at);
  if (!j.contains("configs")) throw std::invalid_argument("a model result has no field configs");
  m.configs = j["configs"];
  check_model_result(m);
  return m;
}

nlohmann::json best_json(const std::string& workload, const std::string& target, const BestResult& b) {
  nlohmann::json j = {{"workload", workload}, {"target", target}, {"tier", tier_name(b.tier)}};
  if (b.tier != MatchTier::None) {
    j["record"] = record_query_json(b.record);
    j["robust_median_s"] = b.robust_median_s;
    j["measurements"] = b.measurements;
  }
  if (b.tier == MatchTier::NearestShape) j["distance"] = b.distance;
  return j;
}

}  // namespace tf::db
