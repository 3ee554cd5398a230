// The `Tuning` gRPC service of tunefarm-tuner (proto/tunefarm.proto): jobs through the
// JobManager, database queries from read-only connections of the service's database.
//
// Promises: with a users file, every call must carry one of its tokens (UNAUTHENTICATED
// otherwise) and runs as that token's user; without one, every caller is the user "local"
// (the daemon then listens on loopback only). A refusal names the problem and the value
// (INVALID_ARGUMENT for a bad job, NOT_FOUND, PERMISSION_DENIED, FAILED_PRECONDITION); no
// request can stop the service.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "proto/tunefarm.grpc.pb.h"
#include "service/job_manager.h"

namespace tf {

struct ServiceUser {
  std::string token;
  std::string name;
  bool admin = false;
};

// The users file: one user per line, `TOKEN NAME [admin]`; blank lines and lines starting
// with # are skipped. Throws farm::ConfigError naming the file and line (short token, missing
// name, a token or name given twice, an unknown third word); warns when others can read it.
std::vector<ServiceUser> read_users_file(const std::string& path);

// The user whose token is `token`, or null; compares with every user's token in constant time.
const ServiceUser* find_user(const std::vector<ServiceUser>& users, const std::string& token);

class TuningService final : public tunefarm::v1::Tuning::Service {
 public:
  TuningService(JobManager& jobs, std::vector<ServiceUser> users);

  grpc::Status Submit(grpc::ServerContext* ctx, const tunefarm::v1::SubmitRequest* req,
                      tunefarm::v1::SubmitReply* reply) override;
  grpc::Status List(grpc::ServerContext* ctx, const tunefarm::v1::ListJobsRequest* req,
                    tunefarm::v1::ListJobsReply* reply) override;
  grpc::Status Get(grpc::ServerContext* ctx, const tunefarm::v1::GetJobRequest* req,
                   tunefarm::v1::JobInfo* reply) override;
  grpc::Status Watch(grpc::ServerContext* ctx, const tunefarm::v1::GetJobRequest* req,
                     grpc::ServerWriter<tunefarm::v1::JobEvent>* writer) override;
  grpc::Status Cancel(grpc::ServerContext* ctx, const tunefarm::v1::CancelRequest* req,
                      tunefarm::v1::JobInfo* reply) override;
  grpc::Status Best(grpc::ServerContext* ctx, const tunefarm::v1::BestRequest* req,
                    tunefarm::v1::BestReply* reply) override;
  grpc::Status BestPerPair(grpc::ServerContext* ctx, const tunefarm::v1::BestPerPairRequest* req,
                           tunefarm::v1::RecordsReply* reply) override;
  grpc::Status TopK(grpc::ServerContext* ctx, const tunefarm::v1::TopKRequest* req,
                    tunefarm::v1::RecordsReply* reply) override;
  grpc::Status History(grpc::ServerContext* ctx, const tunefarm::v1::HistoryRequest* req,
                       grpc::ServerWriter<tunefarm::v1::RecordsReply>* writer) override;
  grpc::Status Stats(grpc::ServerContext* ctx, const tunefarm::v1::StatsRequest* req,
                     tunefarm::v1::StatsReply* reply) override;
  grpc::Status Runs(grpc::ServerContext* ctx, const tunefarm::v1::RunsRequest* req,
                    tunefarm::v1::RunsReply* reply) override;
  grpc::Status Models(grpc::ServerContext* ctx, const tunefarm::v1::ModelsRequest* req,
                      tunefarm::v1::ModelsReply* reply) override;

 private:
  // The caller, or UNAUTHENTICATED.
  grpc::Status identify(const grpc::ServerContext* ctx, ServiceUser* who) const;
  // Runs `f` as the authenticated caller, mapping exceptions to statuses.
  template <typename F>
  grpc::Status guarded(grpc::ServerContext* ctx, F&& f);

  JobManager& jobs_;
  std::vector<ServiceUser> users_;
};

}  // namespace tf
