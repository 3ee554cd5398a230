// The tuning service's database queries, one function per query rpc of the Tuning service
// (proto/tunefarm.proto). The gRPC service (tuning_service.cc) and the dashboard's JSON
// endpoints (dashboard/) both answer with them, so the two say the same. Each opens its own
// read-only connection of the service's database; requests are checked as the rpcs check
// them (UserError naming the field and the value).
#pragma once

#include <google/protobuf/message.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/records.h"
#include "proto/tunefarm.pb.h"

namespace tf::queries {

tunefarm::v1::BestReply best(const std::string& db_path, const tunefarm::v1::BestRequest& req);
tunefarm::v1::RecordsReply best_per_pair(const std::string& db_path);
tunefarm::v1::RecordsReply top_k(const std::string& db_path, const tunefarm::v1::TopKRequest& req);
// The records in measurement order, one JSON line each.
std::vector<std::string> history(const std::string& db_path, const tunefarm::v1::HistoryRequest& req);

// The same records a page at a time, so that no reader holds more than one page: the History
// rpc and the dashboard's download stream them. The constructor checks the request (UserError)
// and that the database opens (db::DbError); each page opens it anew, so that a slow reader
// holds no SQLite connection (and its page cache) between pages.
class HistoryPager {
 public:
  HistoryPager(const std::string& db_path, const tunefarm::v1::HistoryRequest& req);
  ~HistoryPager();
  // The next at most `n` lines (n >= 1); empty once every record was given.
  std::vector<std::string> next(int64_t n);

 private:
  std::string db_path_;
  db::HistoryFilter filter_;
  int64_t left_;  // records still to give; -1: all there are
};
tunefarm::v1::StatsReply stats(const std::string& db_path);
tunefarm::v1::RunsReply runs(const std::string& db_path);
tunefarm::v1::ModelsReply models(const std::string& db_path);

// A record as the service sends it: the JSON lines format of `query export` with its id.
std::string record_line(const db::MeasureRecord& r);

// JSON text of `j` for a reply; bytes that are not UTF-8 (a record's error message, a request's
// path quoted in an error) become U+FFFD instead of failing the reply.
std::string json_text(const nlohmann::json& j);

// A message in proto3's JSON mapping, as `tunefarm jobs --json` and the dashboard print it:
// field names as in the .proto, every field present (int64 values are JSON strings).
std::string proto_json(const google::protobuf::Message& m);

}  // namespace tf::queries
