#include "service/tuning_service.h"

#include <fstream>
#include <set>
#include <sstream>

#include "compiler/error.h"
#include "compiler/target.h"
#include "compiler/workload.h"
#include "db/json_limits.h"
#include "db/jsonl.h"
#include "proto/credentials.h"
#include "service/job.h"
#include "tuner/tuning_records.h"

namespace tf {

namespace pb = tunefarm::v1;
using json = nlohmann::json;

std::vector<ServiceUser> read_users_file(const std::string& path) {
  farm::check_secret_file(path, "users file", "anyone who reads it can act as any user");
  std::ifstream f(path);
  if (!f) throw farm::ConfigError("cannot read users file " + path);
  std::vector<ServiceUser> users;
  std::set<std::string> tokens, names;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    std::istringstream words(line);
    ServiceUser u;
    std::string role, extra;
    if (!(words >> u.token) || u.token[0] == '#') continue;
    auto where = [&] { return str("users file ", path, " line ", n, ": "); };
    if (u.token.size() < 16) throw farm::ConfigError(where() + "the token is shorter than 16 characters");
    if (!(words >> u.name)) throw farm::ConfigError(where() + "a token needs a user name after it (TOKEN NAME [admin])");
    if (words >> role) {
      if (role != "admin") throw farm::ConfigError(where() + "unknown role \"" + role + "\" (only: admin)");
      u.admin = true;
    }
    if (words >> extra) throw farm::ConfigError(where() + "unexpected \"" + extra + "\" (TOKEN NAME [admin])");
    if (!tokens.insert(u.token).second) throw farm::ConfigError(where() + "this token is given twice");
    if (!names.insert(u.name).second) throw farm::ConfigError(where() + "user " + u.name + " is given twice");
    users.push_back(u);
  }
  if (users.empty()) throw farm::ConfigError("users file " + path + " names no user (TOKEN NAME [admin] per line)");
  return users;
}

TuningService::TuningService(JobManager& jobs, std::vector<ServiceUser> users) : jobs_(jobs), users_(std::move(users)) {}

grpc::Status TuningService::identify(const grpc::ServerContext* ctx, ServiceUser* who) const {
  if (users_.empty()) {
    who->name = "local";
    return grpc::Status::OK;
  }
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return {grpc::StatusCode::UNAUTHENTICATED, "missing token (authorization metadata)"};
  std::string given(it->second.data(), it->second.size());
  const std::string prefix = "Bearer ";
  if (given.rfind(prefix, 0) == 0) {
    given = given.substr(prefix.size());
    const ServiceUser* found = nullptr;
    for (const ServiceUser& u : users_) {
      if (farm::token_equal(given, u.token)) found = &u;  // no early exit: constant time over the users
    }
    if (found) {
      *who = *found;
      return grpc::Status::OK;
    }
  }
  return {grpc::StatusCode::UNAUTHENTICATED, "wrong token"};
}

template <typename F>
grpc::Status TuningService::guarded(grpc::ServerContext* ctx, F&& f) {
  ServiceUser who;
  grpc::Status s = identify(ctx, &who);
  if (!s.ok()) return s;
  try {
    return f(who);
  } catch (const JobError& e) {
    return {static_cast<grpc::StatusCode>(e.code), e.what()};
  } catch (const UserError& e) {
    return {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
  } catch (const db::DbError& e) {
    return {grpc::StatusCode::UNAVAILABLE, e.what()};
  } catch (const std::exception& e) {
    return {grpc::StatusCode::INTERNAL, e.what()};
  }
}

namespace {

std::unique_ptr<db::Database> reader(const JobManager& jobs) {
  return db::open_database(jobs.db_path(), db::OpenMode::ReadOnly);
}

std::string record_line(const db::MeasureRecord& r) {
  json j = db::record_to_json(r);
  j["id"] = r.id;
  return j.dump();
}

void add_records(const std::vector<db::MeasureRecord>& rs, pb::RecordsReply* reply) {
  for (const db::MeasureRecord& r : rs) reply->add_records_json(record_line(r));
}

}  // namespace

grpc::Status TuningService::Submit(grpc::ServerContext* ctx, const pb::SubmitRequest* req, pb::SubmitReply* reply) {
  return guarded(ctx, [&](const ServiceUser& who) {
    json j;
    try {
      j = parse_json_bounded(req->job_json());
    } catch (const json::parse_error& e) {
      throw UserError(str("the job is not valid JSON: ", e.what()));
    } catch (const JsonRefused& e) {
      throw UserError(str("the job is refused: ", e.what()));
    }
    JobSpec spec = parse_job_spec(j);
    reply->set_job_id(jobs_.submit(who.name, spec));
    reply->set_user(who.name);
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::List(grpc::ServerContext* ctx, const pb::ListJobsRequest*, pb::ListJobsReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    for (pb::JobInfo& i : jobs_.list()) *reply->add_jobs() = std::move(i);
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::Get(grpc::ServerContext* ctx, const pb::GetJobRequest* req, pb::JobInfo* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    *reply = jobs_.get(req->job_id());
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::Watch(grpc::ServerContext* ctx, const pb::GetJobRequest* req,
                                  grpc::ServerWriter<pb::JobEvent>* writer) {
  return guarded(ctx, [&](const ServiceUser&) {
    uint64_t seq = 0;
    while (!ctx->IsCancelled()) {
      std::vector<pb::JobEvent> events;
      bool more = jobs_.next_events(req->job_id(), &seq, &events, std::chrono::milliseconds(500));
      for (const pb::JobEvent& e : events) {
        if (!writer->Write(e)) return grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away");
      }
      if (!more) return grpc::Status::OK;
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away");
  });
}

grpc::Status TuningService::Cancel(grpc::ServerContext* ctx, const pb::CancelRequest* req, pb::JobInfo* reply) {
  return guarded(ctx, [&](const ServiceUser& who) {
    *reply = jobs_.cancel(req->job_id(), who.name, who.admin);
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::Best(grpc::ServerContext* ctx, const pb::BestRequest* req, pb::BestReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    Workload w = parse_workload(req->workload());
    Target t = parse_target(req->target().empty() ? "llvm -mcpu=native" : req->target());
    db::BestResult b = reader(jobs_)->best(lookup_key(w, t));
    reply->set_tier(db::tier_name(b.tier));
    if (b.tier != db::MatchTier::None) {
      reply->set_record_json(record_line(b.record));
      reply->set_distance(b.distance);
      reply->set_robust_median_s(b.robust_median_s);
      reply->set_measurements(b.measurements);
    }
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::BestPerPair(grpc::ServerContext* ctx, const pb::BestPerPairRequest*,
                                        pb::RecordsReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    add_records(reader(jobs_)->best_per_pair(), reply);
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::TopK(grpc::ServerContext* ctx, const pb::TopKRequest* req, pb::RecordsReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    if (req->k() < 1) throw UserError(str("k ", req->k(), " must be at least 1"));
    add_records(reader(jobs_)->top_k(canonical_workload(req->workload()),
                                     canonical_target(req->target()), req->k()),
                reply);
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::History(grpc::ServerContext* ctx, const pb::HistoryRequest* req,
                                    grpc::ServerWriter<pb::RecordsReply>* writer) {
  return guarded(ctx, [&](const ServiceUser&) {
    if (req->limit() < 0) throw UserError(str("limit ", req->limit(), " must be 0 (all) or more"));
    std::vector<db::MeasureRecord> rs = reader(jobs_)->history(
        {canonical_workload(req->workload()), canonical_target(req->target()), req->limit()});
    for (size_t at = 0; at < rs.size(); at += 1000) {
      pb::RecordsReply chunk;
      for (size_t i = at; i < std::min(rs.size(), at + 1000); ++i) chunk.add_records_json(record_line(rs[i]));
      if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away");
    }
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::Stats(grpc::ServerContext* ctx, const pb::StatsRequest*, pb::StatsReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    db::Stats s = reader(jobs_)->stats();
    reply->set_records(s.records);
    reply->set_workloads(s.workloads);
    reply->set_targets(s.targets);
    reply->set_runs(s.runs);
    reply->set_file_bytes(s.file_bytes);
    for (const db::PairCount& p : s.per_pair) {
      pb::PairCount* c = reply->add_per_pair();
      c->set_workload(p.workload);
      c->set_target(p.target);
      c->set_records(p.records);
      c->set_ok(p.ok);
    }
    for (const auto& [k, v] : s.errors) (*reply->mutable_errors())[k] = v;
    for (const auto& [k, v] : s.per_run) (*reply->mutable_per_run())[k] = v;
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::Runs(grpc::ServerContext* ctx, const pb::RunsRequest*, pb::RunsReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    for (const db::TuningRun& r : reader(jobs_)->runs()) {
      pb::RunInfo* i = reply->add_runs();
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
    return grpc::Status::OK;
  });
}

}  // namespace tf
