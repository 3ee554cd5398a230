// The tuner's side of the farm: ask the tracker for a board, then upload and time kernels
// on it. A LeasedBoard releases its lease when destroyed, so an exception on the way does
// not keep a board from others until the lease expires.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "proto/security.h"
#include "proto/tunefarm.grpc.pb.h"

namespace tf::farm {

// A failed farm call: names the call, the gRPC status code and the server's message.
class FarmError : public std::runtime_error {
 public:
  FarmError(const std::string& what, grpc::StatusCode code) : std::runtime_error(what), code_(code) {}
  grpc::StatusCode code() const { return code_; }

 private:
  grpc::StatusCode code_;
};

struct FarmEndpoint {
  std::string tracker;  // HOST:PORT
  std::string token;    // shared token, or empty
  TlsFiles tls;         // client side: ca (and cert/key for mutual TLS)
};

class LeasedBoard {
 public:
  LeasedBoard(const FarmEndpoint& farm, std::shared_ptr<tunefarm::v1::Tracker::Stub> tracker,
              tunefarm::v1::LeaseReply lease);
  ~LeasedBoard();  // releases the lease (errors ignored: it expires anyway)
  LeasedBoard(const LeasedBoard&) = delete;
  LeasedBoard& operator=(const LeasedBoard&) = delete;

  const tunefarm::v1::LeaseReply& lease() const { return lease_; }
  // Uploads a library; returns its module id.
  std::string upload(const std::string& data, const std::string& name);
  // Times a function; `req.lease_token` and `req.module_id` are filled in. `timeout_s` bounds
  // the call on our side too (the board's measurement limit plus transfer time).
  tunefarm::v1::MeasureReply measure(tunefarm::v1::MeasureRequest req, const std::string& module_id);
  void free(const std::string& module_id);
  void renew(int64_t lease_ms);
  // Gives the board back now.
  void release();

 private:
  FarmEndpoint farm_;
  std::shared_ptr<tunefarm::v1::Tracker::Stub> tracker_;
  std::unique_ptr<tunefarm::v1::Board::Stub> board_;
  tunefarm::v1::LeaseReply lease_;
  bool released_ = false;
};

class FarmClient {
 public:
  explicit FarmClient(FarmEndpoint farm);
  tunefarm::v1::SummaryReply summary();
  // Waits at most `wait_ms` for a board of `key`. Throws FarmError (DEADLINE_EXCEEDED when
  // none became free in time).
  std::unique_ptr<LeasedBoard> lease(const std::string& key, const std::string& user, int priority, int64_t wait_ms,
                                     int64_t lease_ms = 0);

 private:
  FarmEndpoint farm_;
  std::shared_ptr<tunefarm::v1::Tracker::Stub> tracker_;
};

}  // namespace tf::farm
