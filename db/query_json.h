// query_json: the JSON forms of the database's facts, as `tunefarm query ... --json` prints them
// and the Python package (python/) returns them: one place, so both say the same.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "db/database.h"

namespace tf::db {

// A measurement record (jsonl.h's line) with its id and, when it ran correctly, its median
// and GFLOPS.
nlohmann::json record_query_json(const MeasureRecord& r);

// A tuning run (query runs).
nlohmann::json run_json(const TuningRun& r);

// A whole model's tuning result (query models), with its speedup.
nlohmann::json model_result_json(const ModelResult& m);
// The model result of such JSON (a service's answer); std::invalid_argument naming the field
// when one is missing, of the wrong type or out of bounds (check_model_result).
ModelResult model_result_from_json(const nlohmann::json& j);

// The answer of a lookup (query best -w W -t T): the tier, and the record, its robust median
// and measurement count when there is one.
nlohmann::json best_json(const std::string& workload, const std::string& target, const BestResult& b);

}  // namespace tf::db
