#include "service/service_client.h"

#include <chrono>

#include "base/json_limits.h"
#include "db/jsonl.h"
#include "db/query_json.h"
#include "tuner/farm_client.h"

namespace tf {

namespace pb = tunefarm::v1;
using json = nlohmann::json;

ServiceClient::ServiceClient(ServiceEndpoint e)
    : e_(std::move(e)), stub_(pb::Tuning::NewStub(farm::make_channel(e_.address, e_.tls))) {}

std::unique_ptr<grpc::ClientContext> ServiceClient::context(double seconds) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  farm::add_token(*ctx, e_.token);
  if (seconds > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  }
  return ctx;
}

void ServiceClient::check(const grpc::Status& s, const std::string& call) const {
  if (s.ok()) return;
  std::string why = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE && why.find("connect") != std::string::npos) {
    why = "no tuning service answers there (start tunefarm-tuner, or check --server / $TUNEFARM_SERVER): " + why;
  }
  throw farm::FarmError(call + " at tunefarm-tuner " + e_.address + " failed: " + why, s.error_code());
}

pb::SubmitReply ServiceClient::submit(const std::string& job_json, const std::string& model_onnx) {
  pb::SubmitRequest req;
  req.set_job_json(job_json);
  req.set_model_onnx(model_onnx);
  pb::SubmitReply reply;
  auto ctx = context(60);
  check(stub_->Submit(ctx.get(), req, &reply), "submit");
  return reply;
}

std::vector<pb::JobInfo> ServiceClient::list() {
  pb::ListJobsReply reply;
  auto ctx = context(30);
  check(stub_->List(ctx.get(), pb::ListJobsRequest(), &reply), "list jobs");
  return {reply.jobs().begin(), reply.jobs().end()};
}

pb::JobInfo ServiceClient::get(int64_t id) {
  pb::GetJobRequest req;
  req.set_job_id(id);
  pb::JobInfo reply;
  auto ctx = context(30);
  check(stub_->Get(ctx.get(), req, &reply), "get job " + std::to_string(id));
  return reply;
}

pb::JobInfo ServiceClient::cancel(int64_t id) {
  pb::CancelRequest req;
  req.set_job_id(id);
  pb::JobInfo reply;
  auto ctx = context(30);
  check(stub_->Cancel(ctx.get(), req, &reply), "cancel job " + std::to_string(id));
  return reply;
}

void ServiceClient::watch(int64_t id, const std::function<bool(const pb::JobEvent&)>& on_event) {
  pb::GetJobRequest req;
  req.set_job_id(id);
  auto ctx = context(0);
  auto reader = stub_->Watch(ctx.get(), req);
  pb::JobEvent e;
  while (reader->Read(&e)) {
    if (!on_event(e)) {
      ctx->TryCancel();
      reader->Finish();
      return;
    }
  }
  check(reader->Finish(), "watch job " + std::to_string(id));
}

namespace {

db::MeasureRecord from_line(const std::string& line) {
  json j = json::parse(line);
  db::MeasureRecord r = db::record_from_json(j);
  r.id = j.value("id", int64_t{0});
  return r;
}

std::vector<db::MeasureRecord> from_lines(const google::protobuf::RepeatedPtrField<std::string>& lines) {
  std::vector<db::MeasureRecord> out;
  for (const std::string& l : lines) out.push_back(from_line(l));
  return out;
}

// The service's database, read through its queries.
class RemoteDatabase : public db::Database {
 public:
  explicit RemoteDatabase(ServiceEndpoint e) : c_(std::move(e)) {}

  void begin_run(const db::TuningRun&) override { read_only(); }
  void finish_run(const std::string&, const std::string&, double) override { read_only(); }
  int64_t commit(const std::vector<db::MeasureRecord>&) override { read_only(); }
  bool add_verdict(const db::Verdict&) override { read_only(); }
  std::vector<db::Verdict> verdicts(const db::HistoryFilter&) override {
    throw db::DbError("verdicts are not one of the tuning service's queries (the service's own lookups use them)");
  }
  void add_model_result(const db::ModelResult&) override { read_only(); }
  std::vector<db::ModelResult> model_results() override {
    pb::ModelsReply reply;
    auto ctx = c_.context(60);
    c_.check(c_.stub().Models(ctx.get(), pb::ModelsRequest(), &reply), "models");
    std::vector<db::ModelResult> out;
    for (const std::string& line : reply.models_json()) {
      try {
        out.push_back(db::model_result_from_json(parse_json_bounded(line)));
      } catch (const std::exception& e) {
        throw db::DbError("the tuning service at " + c_.endpoint().address + " sent a model result that does not "
                          "parse: " + e.what());
      }
    }
    return out;
  }
  db::DistillResult distill(int64_t, bool) override { read_only(); }
  int64_t add_job(const db::JobRow&) override { read_only(); }
  void update_job(const db::JobRow&) override { read_only(); }
  void finish_run_and_update_job(const std::string&, const std::string&, double, const db::JobRow&) override {
    read_only();
  }
  bool measured(const std::string&, const std::string&, const std::string&) override {
    throw db::DbError("measured() is not one of the tuning service's queries");
  }
  std::map<std::string, int64_t> records_per_key_since(double) override {
    throw db::DbError("measurement rates are not one of the tuning service's queries (its dashboard shows them)");
  }
  std::vector<db::JobRow> jobs() override {
    throw db::DbError("jobs of the tuning service: use `tunefarm jobs`");
  }

  std::vector<db::TuningRun> runs() override {
    pb::RunsReply reply;
    auto ctx = c_.context(60);
    c_.check(c_.stub().Runs(ctx.get(), pb::RunsRequest(), &reply), "runs");
    std::vector<db::TuningRun> out;
    for (const pb::RunInfo& i : reply.runs()) {
      db::TuningRun r;
      r.uuid = i.uuid();
      r.user = i.user();
      r.host = i.host();
      r.strategy = i.strategy();
      r.budget = i.budget();
      r.workload = i.workload();
      r.target = i.target();
      r.started_at = i.started_at();
      r.finished_at = i.finished_at();
      r.status = i.status();
      r.records = i.records();
      out.push_back(r);
    }
    return out;
  }

  db::BestResult best(const db::LookupKey& key) override {
    pb::BestRequest req;
    req.set_workload(key.workload);
    req.set_target(key.target);
    pb::BestReply reply;
    auto ctx = c_.context(60);
    c_.check(c_.stub().Best(ctx.get(), req, &reply), "best");
    db::BestResult b;
    for (db::MatchTier t : {db::MatchTier::Exact, db::MatchTier::SameArch, db::MatchTier::NearestShape}) {
      if (reply.tier() == db::tier_name(t)) b.tier = t;
    }
    if (b.tier != db::MatchTier::None) {
      b.record = from_line(reply.record_json());
      b.distance = reply.distance();
      b.robust_median_s = reply.robust_median_s();
      b.measurements = reply.measurements();
    }
    return b;
  }

  std::vector<db::MeasureRecord> best_per_pair() override {
    pb::RecordsReply reply;
    auto ctx = c_.context(60);
    c_.check(c_.stub().BestPerPair(ctx.get(), pb::BestPerPairRequest(), &reply), "best");
    return from_lines(reply.records_json());
  }

  std::vector<db::MeasureRecord> top_k(const std::string& workload, const std::string& target, int64_t k) override {
    pb::TopKRequest req;
    req.set_workload(workload);
    req.set_target(target);
    req.set_k(k);
    pb::RecordsReply reply;
    auto ctx = c_.context(60);
    c_.check(c_.stub().TopK(ctx.get(), req, &reply), "top");
    return from_lines(reply.records_json());
  }

  std::vector<db::MeasureRecord> history(const db::HistoryFilter& f) override {
    pb::HistoryRequest req;
    req.set_workload(f.workload);
    req.set_target(f.target);
    req.set_limit(f.limit);
    req.set_run(f.run_uuid);
    req.set_after_id(f.after_id);
    auto ctx = c_.context(600);
    auto reader = c_.stub().History(ctx.get(), req);
    std::vector<db::MeasureRecord> out;
    pb::RecordsReply chunk;
    while (reader->Read(&chunk)) {
      for (const std::string& l : chunk.records_json()) out.push_back(from_line(l));
    }
    c_.check(reader->Finish(), "history");
    return out;
  }

  db::Stats stats() override {
    pb::StatsReply reply;
    auto ctx = c_.context(60);
    c_.check(c_.stub().Stats(ctx.get(), pb::StatsRequest(), &reply), "stats");
    db::Stats s;
    s.records = reply.records();
    s.workloads = reply.workloads();
    s.targets = reply.targets();
    s.runs = reply.runs();
    s.file_bytes = reply.file_bytes();
    for (const pb::PairCount& p : reply.per_pair()) s.per_pair.push_back({p.workload(), p.target(), p.records(), p.ok()});
    for (const auto& [k, v] : reply.errors()) s.errors[k] = v;
    for (const auto& [k, v] : reply.per_run()) s.per_run[k] = v;
    return s;
  }

 private:
  [[noreturn]] void read_only() const {
    throw db::DbError("the tuning service at " + c_.endpoint().address +
                      " owns its database: over --server it is read-only (import and distill need the file)");
  }
  ServiceClient c_;
};

}  // namespace

std::unique_ptr<db::Database> open_remote_database(ServiceEndpoint e) {
  return std::make_unique<RemoteDatabase>(std::move(e));
}

}  // namespace tf
