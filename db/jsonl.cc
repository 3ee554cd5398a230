#include "db/jsonl.h"

#include <limits>
#include <stdexcept>
#include <type_traits>

#include "base/json_limits.h"

namespace tf::db {
namespace {

using json = nlohmann::json;

constexpr size_t kImportBatch = 1000;

template <typename T>
T field(const json& j, const char* name) {
  if (!j.contains(name)) throw std::invalid_argument(std::string("missing field '") + name + "'");
  const json& v = j.at(name);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // nlohmann converts a float (5e116) or a large unsigned to an integer with a plain cast,
    // which is undefined behaviour out of range (found by fuzz_jsonl): integers only, in range.
    bool in_range = v.is_number_integer() &&
                    (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                                            : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                                  v.get<int64_t>() <= std::numeric_limits<T>::max());
    if (!in_range) {
      throw std::invalid_argument(std::string("field '") + name + "' is not an integer in [" +
                                  std::to_string(std::numeric_limits<T>::min()) + ", " +
                                  std::to_string(std::numeric_limits<T>::max()) + "]: " + v.dump());
    }
    return static_cast<T>(v.get<int64_t>());
  } else {
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      throw std::invalid_argument(std::string("field '") + name + "' has the wrong type: " + v.dump());
    }
  }
}

}  // namespace

json record_to_json(const MeasureRecord& r) {
  return {
      {"v", kJsonlVersion},
      {"workload", r.workload},
      {"op", r.op},
      {"params", r.params},
      {"flops", r.flops},
      {"target", r.target},
      {"arch", r.arch},
      {"device_key", r.device_key},
      {"device_model", r.device_model},
      {"toolchain", r.toolchain},
      {"template", r.template_name},
      {"config", r.config},
      {"samples_s", r.samples_s},
      {"settings",
       {{"number", r.settings.number},
        {"repeat", r.settings.repeat},
        {"min_repeat_ms", r.settings.min_repeat_ms},
        {"flush", r.settings.flush},
        {"cooldown_ms", r.settings.cooldown_ms}}},
      {"error_code", r.error_code},
      {"error_msg", r.error_msg},
      {"compile_s", r.compile_s},
      {"measured_at", r.measured_at},
      {"correctness", r.correctness},
      {"run", r.run_uuid},
  };
}

MeasureRecord record_from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("not a JSON object");
  int v = field<int>(j, "v");
  if (v != kJsonlVersion) {
    throw std::invalid_argument("format version " + std::to_string(v) + " is not the supported " +
                                std::to_string(kJsonlVersion));
  }
  MeasureRecord r;
  r.workload = field<std::string>(j, "workload");
  r.op = field<std::string>(j, "op");
  r.params = field<json>(j, "params");
  r.flops = field<int64_t>(j, "flops");
  r.target = field<std::string>(j, "target");
  r.arch = field<std::string>(j, "arch");
  r.device_key = field<std::string>(j, "device_key");
  r.device_model = field<std::string>(j, "device_model");
  r.toolchain = field<std::string>(j, "toolchain");
  r.template_name = field<std::string>(j, "template");
  r.config = field<json>(j, "config");
  r.samples_s = field<std::vector<double>>(j, "samples_s");
  json s = field<json>(j, "settings");
  r.settings.number = field<int>(s, "number");
  r.settings.repeat = field<int>(s, "repeat");
  r.settings.min_repeat_ms = field<double>(s, "min_repeat_ms");
  r.settings.flush = field<bool>(s, "flush");
  r.settings.cooldown_ms = field<double>(s, "cooldown_ms");
  r.error_code = field<std::string>(j, "error_code");
  r.error_msg = field<std::string>(j, "error_msg");
  r.compile_s = field<double>(j, "compile_s");
  r.measured_at = field<double>(j, "measured_at");
  r.correctness = field<std::string>(j, "correctness");
  r.run_uuid = field<std::string>(j, "run");
  return r;
}

json verdict_to_json(const Verdict& v) {
  return {{"v", kJsonlVersion},     {"kind", "verdict"},         {"workload", v.workload},
          {"target", v.target},     {"template", v.template_name}, {"config_hash", v.config_hash},
          {"run", v.run_uuid},      {"speedup", v.speedup},        {"decided_at", v.decided_at}};
}

Verdict verdict_from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("not a JSON object");
  int v = field<int>(j, "v");
  if (v != kJsonlVersion) throw std::invalid_argument("format version " + std::to_string(v) + " is not 1");
  return {field<std::string>(j, "workload"),    field<std::string>(j, "target"), field<std::string>(j, "template"),
          field<std::string>(j, "config_hash"), field<std::string>(j, "run"),    field<double>(j, "speedup"),
          field<double>(j, "decided_at")};
}

ExportResult export_jsonl(Database& db, const HistoryFilter& f, std::ostream& out, bool verdicts) {
  ExportResult n;
  for (const MeasureRecord& r : db.history(f)) {
    out << record_to_json(r).dump() << "\n";
    ++n.records;
  }
  if (verdicts) {
    for (const Verdict& v : db.verdicts({f.workload, f.target, 0})) {
      out << verdict_to_json(v).dump() << "\n";
      ++n.verdicts;
    }
  }
  out.flush();
  if (!out) throw DbError("export: writing failed");
  return n;
}

ImportResult import_jsonl(Database& db, std::istream& in) {
  ImportResult res;
  std::vector<MeasureRecord> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    int64_t added = db.commit(batch);
    res.added += added;
    res.duplicates += static_cast<int64_t>(batch.size()) - added;
    batch.clear();
  };
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++res.lines;
    try {
      json j = parse_json_bounded(line);
      if (j.is_object() && j.contains("kind")) {
        if (j["kind"] != "verdict") throw std::invalid_argument("unknown kind " + j["kind"].dump().substr(0, 100));
        Verdict v = verdict_from_json(j);
        check_verdict(v);
        flush();  // in file order
        if (db.add_verdict(v)) {
          ++res.verdicts;
        } else {
          ++res.duplicates;
        }
        continue;
      }
      MeasureRecord r = record_from_json(j);
      // The database's own checks, per line, so one bad line cannot fail a whole batch.
      check_record(r);
      batch.push_back(std::move(r));
    } catch (const json::parse_error& e) {
      res.errors.push_back("line " + std::to_string(number) + ": not valid JSON (" + e.what() + ")");
      continue;
    } catch (const std::invalid_argument& e) {
      res.errors.push_back("line " + std::to_string(number) + ": " + e.what());
      continue;
    }
    if (batch.size() >= kImportBatch) flush();
  }
  flush();
  return res;
}

}  // namespace tf::db
