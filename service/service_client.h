// The client side of the tuning service (tunefarm-tuner): jobs for `tunefarm submit, jobs,
// watch, cancel`, and RemoteDatabase, the db::Database interface answered by the service, so
// that `tunefarm query --server` and `compile --server` run the same code as on a local file.
//
// Promises: every failed call throws farm::FarmError naming the call, the service's address,
// the gRPC status and the service's message; calls have deadlines (Watch excepted, which
// lasts as long as the job). RemoteDatabase is read-only: its writes throw db::DbError
// saying that the service owns the database.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "db/database.h"
#include "proto/credentials.h"
#include "proto/tunefarm.grpc.pb.h"

namespace tf {

struct ServiceEndpoint {
  std::string address;  // HOST:PORT
  std::string token;    // the user's token, or empty
  farm::TlsFiles tls;   // client side: ca (and cert/key for mutual TLS)
};

class ServiceClient {
 public:
  explicit ServiceClient(ServiceEndpoint e);
  // `model_onnx`: the model the job's workloads come from, timed when the job is done.
  tunefarm::v1::SubmitReply submit(const std::string& job_json, const std::string& model_onnx = "");
  std::vector<tunefarm::v1::JobInfo> list();
  tunefarm::v1::JobInfo get(int64_t id);
  tunefarm::v1::JobInfo cancel(int64_t id);
  // Calls `on_event` for each event until the job is over (or on_event returns false).
  void watch(int64_t id, const std::function<bool(const tunefarm::v1::JobEvent&)>& on_event);
  tunefarm::v1::Tuning::Stub& stub() { return *stub_; }
  const ServiceEndpoint& endpoint() const { return e_; }
  std::unique_ptr<grpc::ClientContext> context(double seconds) const;
  void check(const grpc::Status& s, const std::string& call) const;

 private:
  ServiceEndpoint e_;
  std::unique_ptr<tunefarm::v1::Tuning::Stub> stub_;
};

std::unique_ptr<db::Database> open_remote_database(ServiceEndpoint e);

}  // namespace tf
