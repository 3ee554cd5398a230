#include "service/queries.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include "base/error.h"
#include "compiler/target.h"
#include "compiler/workload.h"
#include "db/database.h"
#include "db/jsonl.h"
#include "db/query_json.h"
#include "tuner/tuning_records.h"

namespace tf::queries {

namespace pb = tunefarm::v1;

namespace {

std::unique_ptr<db::Database> reader(const std::string& db_path) {
  return db::open_database(db_path, db::OpenMode::ReadOnly);
}

void add_records(const std::vector<db::MeasureRecord>& rs, pb::RecordsReply* reply) {
  for (const db::MeasureRecord& r : rs) reply->add_records_json(record_line(r));
}

}  // namespace

std::string record_line(const db::MeasureRecord& r) {
  nlohmann::json j = db::record_to_json(r);
  j["id"] = r.id;
  return json_text(j);
}

std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string proto_json(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

pb::BestReply best(const std::string& db_path, const pb::BestRequest& req) {
  Workload w = parse_workload(req.workload());
  Target t = parse_target(req.target().empty() ? "llvm -mcpu=native" : req.target());
  db::BestResult b = reader(db_path)->best(lookup_key(w, t));
  pb::BestReply reply;
  reply.set_tier(db::tier_name(b.tier));
  if (b.tier != db::MatchTier::None) {
    reply.set_record_json(record_line(b.record));
    reply.set_distance(b.distance);
    reply.set_robust_median_s(b.robust_median_s);
    reply.set_measurements(b.measurements);
  }
  return reply;
}

pb::RecordsReply best_per_pair(const std::string& db_path) {
  pb::RecordsReply reply;
  add_records(reader(db_path)->best_per_pair(), &reply);
  return reply;
}

pb::RecordsReply top_k(const std::string& db_path, const pb::TopKRequest& req) {
  if (req.k() < 1) throw UserError(str("k ", req.k(), " must be at least 1"));
  pb::RecordsReply reply;
  add_records(reader(db_path)->top_k(canonical_workload(req.workload()), canonical_target(req.target()), req.k()),
              &reply);
  return reply;
}

std::vector<std::string> history(const std::string& db_path, const pb::HistoryRequest& req) {
  HistoryPager pager(db_path, req);
  std::vector<std::string> lines;
  for (std::vector<std::string> page; !(page = pager.next(1000)).empty();) {
    for (std::string& l : page) lines.push_back(std::move(l));
  }
  return lines;
}

HistoryPager::HistoryPager(const std::string& db_path, const pb::HistoryRequest& req) {
  if (req.limit() < 0) throw UserError(str("limit ", req.limit(), " must be 0 (all) or more"));
  if (req.after_id() < 0) throw UserError(str("after_id ", req.after_id(), " must be 0 (all) or more"));
  if (req.run().size() > db::kMaxNameLength) throw UserError(str("run is ", req.run().size(), " characters long"));
  filter_ = db::HistoryFilter{canonical_workload(req.workload()), canonical_target(req.target()), 0, req.run(),
                              req.after_id()};
  left_ = req.limit() > 0 ? req.limit() : -1;
  db_path_ = db_path;
  reader(db_path);  // a database that does not open is said before the first page
}

HistoryPager::~HistoryPager() = default;

std::vector<std::string> HistoryPager::next(int64_t n) {
  std::vector<std::string> lines;
  if (left_ == 0) return lines;
  filter_.limit = left_ < 0 ? std::max<int64_t>(n, 1) : std::min(std::max<int64_t>(n, 1), left_);
  std::vector<db::MeasureRecord> rs = reader(db_path_)->history(filter_);
  for (const db::MeasureRecord& r : rs) lines.push_back(record_line(r));
  if (!rs.empty()) filter_.after_position = std::make_pair(rs.back().measured_at, rs.back().id);
  if (static_cast<int64_t>(rs.size()) < filter_.limit) {
    left_ = 0;
  } else if (left_ > 0) {
    left_ -= static_cast<int64_t>(rs.size());
  }
  return lines;
}

pb::StatsReply stats(const std::string& db_path) {
  db::Stats s = reader(db_path)->stats();
  pb::StatsReply reply;
  reply.set_records(s.records);
  reply.set_workloads(s.workloads);
  reply.set_targets(s.targets);
  reply.set_runs(s.runs);
  reply.set_file_bytes(s.file_bytes);
  for (const db::PairCount& p : s.per_pair) {
    pb::PairCount* c = reply.add_per_pair();
    c->set_workload(p.workload);
    c->set_target(p.target);
    c->set_records(p.records);
    c->set_ok(p.ok);
  }
  for (const auto& [k, v] : s.errors) (*reply.mutable_errors())[k] = v;
  for (const auto& [k, v] : s.per_run) (*reply.mutable_per_run())[k] = v;
  return reply;
}

pb::ModelsReply models(const std::string& db_path) {
  pb::ModelsReply reply;
  for (const db::ModelResult& m : reader(db_path)->model_results()) {
    reply.add_models_json(json_text(db::model_result_json(m)));
  }
  return reply;
}

pb::RunsReply runs(const std::string& db_path) {
  pb::RunsReply reply;
  for (const db::TuningRun& r : reader(db_path)->runs()) {
    pb::RunInfo* i = reply.add_runs();
    i->set_uuid(r.uuid);
    i->set_user(r.user);
    i->set_host(r.host);
    i->set_strategy(r.strategy);
    i->set_budget(r.budget);
    i->set_workload(r.workload);
    i->set_target(r.target);
    i->set_started_at(r.started_at);
    i->set_finished_at(r.finished_at);
    i->set_status(r.status);
    i->set_records(r.records);
  }
  return reply;
}

}  // namespace tf::queries
