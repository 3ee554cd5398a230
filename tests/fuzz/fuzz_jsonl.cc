// Fuzzes one line of a JSON lines import: bounded parsing, the record's (or verdict's)
// fields, and the database's own checks. A line is either a valid record or verdict or
// refused with std::invalid_argument or a JSON parse error.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "base/json_limits.h"
#include "db/jsonl.h"
#include "db/records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string line(reinterpret_cast<const char*>(data), size);
  try {
    nlohmann::json j = tf::parse_json_bounded(line);
    if (j.is_object() && j.contains("kind")) {  // a verdict line
      tf::db::Verdict v = tf::db::verdict_from_json(j);
      tf::db::check_verdict(v);
      (void)tf::db::verdict_to_json(v).dump();
      return 0;
    }
    tf::db::MeasureRecord r = tf::db::record_from_json(j);
    tf::db::check_record(r);
    // What the database and the query tool do with an accepted record.
    (void)r.identity();
    (void)r.median_s();
    (void)tf::db::record_to_json(r).dump();
  } catch (const nlohmann::json::parse_error&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
