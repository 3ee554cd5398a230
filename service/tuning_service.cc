#include "service/tuning_service.h"

#include <fstream>
#include <set>
#include <sstream>

#include "base/error.h"
#include "compiler/target.h"
#include "compiler/workload.h"
#include "base/json_limits.h"
#include "db/jsonl.h"
#include "proto/credentials.h"
#include "service/job.h"
#include "service/queries.h"
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

const ServiceUser* find_user(const std::vector<ServiceUser>& users, const std::string& token) {
  const ServiceUser* found = nullptr;
  for (const ServiceUser& u : users) {
    if (farm::token_equal(token, u.token)) found = &u;  // no early exit: constant time over the users
  }
  return found;
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
    if (const ServiceUser* found = find_user(users_, given.substr(prefix.size()))) {
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
    reply->set_job_id(jobs_.submit(who.name, spec, req->model_onnx()));
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
    *reply = queries::best(jobs_.db_path(), *req);
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::BestPerPair(grpc::ServerContext* ctx, const pb::BestPerPairRequest*,
                                        pb::RecordsReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    *reply = queries::best_per_pair(jobs_.db_path());
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::TopK(grpc::ServerContext* ctx, const pb::TopKRequest* req, pb::RecordsReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    *reply = queries::top_k(jobs_.db_path(), *req);
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::History(grpc::ServerContext* ctx, const pb::HistoryRequest* req,
                                    grpc::ServerWriter<pb::RecordsReply>* writer) {
  return guarded(ctx, [&](const ServiceUser&) {
    // A page at a time: a reader of every record holds one page here, not the database.
    queries::HistoryPager pager(jobs_.db_path(), *req);
    for (std::vector<std::string> lines; !(lines = pager.next(1000)).empty();) {
      pb::RecordsReply chunk;
      for (std::string& l : lines) chunk.add_records_json(std::move(l));
      if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away");
    }
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::Stats(grpc::ServerContext* ctx, const pb::StatsRequest*, pb::StatsReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    *reply = queries::stats(jobs_.db_path());
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::Models(grpc::ServerContext* ctx, const pb::ModelsRequest*, pb::ModelsReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    *reply = queries::models(jobs_.db_path());
    return grpc::Status::OK;
  });
}

grpc::Status TuningService::Runs(grpc::ServerContext* ctx, const pb::RunsRequest*, pb::RunsReply* reply) {
  return guarded(ctx, [&](const ServiceUser&) {
    *reply = queries::runs(jobs_.db_path());
    return grpc::Status::OK;
  });
}

}  // namespace tf
