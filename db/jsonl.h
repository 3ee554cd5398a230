// Moving records (and the tuning runs' verdicts) between databases as JSON lines: one record
// or verdict per line, each carrying the format version ("v": 1), so a file is readable by
// grep and jq and can be appended to.
//
// Import is idempotent (a record whose identity is stored already adds nothing) and checks
// every line on its own: a malformed line is reported with its number and skipped whole,
// the others are imported in batches of one transaction each.
#pragma once

#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "db/database.h"

namespace tf::db {

constexpr int kJsonlVersion = 1;

nlohmann::json record_to_json(const MeasureRecord& r);

// Throws std::invalid_argument naming the first missing or mistyped field.
MeasureRecord record_from_json(const nlohmann::json& j);

// A tuning run's verdict as a line of its own: {"v": 1, "kind": "verdict", "workload",
// "target", "template", "config_hash", "run", "speedup", "decided_at"}.
nlohmann::json verdict_to_json(const Verdict& v);
Verdict verdict_from_json(const nlohmann::json& j);

struct ExportResult {
  int64_t records = 0, verdicts = 0;
};

// Writes the records `f` selects, in history order, then (with `verdicts`) the verdicts on
// the same workloads and targets, in the order they were decided.
ExportResult export_jsonl(Database& db, const HistoryFilter& f, std::ostream& out, bool verdicts = true);

struct ImportResult {
  int64_t lines = 0;       // non-empty lines read
  int64_t added = 0;       // records stored
  int64_t verdicts = 0;    // verdicts stored
  int64_t duplicates = 0;  // well-formed records and verdicts already present
  std::vector<std::string> errors;  // "line N: what is wrong", one per rejected line
};

ImportResult import_jsonl(Database& db, std::istream& in);

}  // namespace tf::db
