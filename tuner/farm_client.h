// The tuner's side of the farm: ask the tracker for a board, then upload and time kernels
// on it. A LeasedBoard releases its lease when destroyed, so an exception on the way does
// not keep a board from others until the lease expires. Releasing is best effort: a result
// already measured stands even when the tracker cannot be told (it restarted, say); the
// lease then expires by itself.
//
// Every call has a deadline from what the board says of itself (GetInfo): a measurement may
// take the board's time limit plus kTransferSlackS, so a frozen board costs that long, not
// minutes. A board that does not answer (connection refused, deadline passed) is "lost":
// FarmError::board_lost() is true, and the caller reports it (LeasedBoard::report_lost) so
// the tracker stops handing it out, then leases another board of the key.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "proto/credentials.h"
#include "proto/tunefarm.grpc.pb.h"

namespace tf::farm {

// A failed farm call: names the call, the gRPC status code and the server's message.
class FarmError : public std::runtime_error {
 public:
  FarmError(const std::string& what, grpc::StatusCode code, bool board_call = false)
      : std::runtime_error(what), code_(code), board_call_(board_call) {}
  grpc::StatusCode code() const { return code_; }
  // A board call that got no answer: the board died, froze or is shutting down.
  bool board_lost() const {
    return board_call_ && (code_ == grpc::StatusCode::UNAVAILABLE || code_ == grpc::StatusCode::DEADLINE_EXCEEDED);
  }

 private:
  grpc::StatusCode code_;
  bool board_call_;
};


// Time allowed on top of a board's own limits for spawning the runner, loading the kernel
// and moving the request and reply, seconds.
constexpr double kTransferSlackS = 10;

struct FarmEndpoint {
  std::string tracker;  // HOST:PORT
  std::string token;    // the clients' token, or empty
  TlsFiles tls;         // client side: ca (and cert/key for mutual TLS)
  double transfer_slack_s = kTransferSlackS;  // see kTransferSlackS
};

class LeasedBoard {
 public:
  LeasedBoard(const FarmEndpoint& farm, std::shared_ptr<tunefarm::v1::Tracker::Stub> tracker,
              tunefarm::v1::LeaseReply lease);
  ~LeasedBoard();  // releases the lease, best effort
  LeasedBoard(const LeasedBoard&) = delete;
  LeasedBoard& operator=(const LeasedBoard&) = delete;

  const tunefarm::v1::LeaseReply& lease() const { return lease_; }
  // The board's limits and sandbox, asked once (deadline kTransferSlackS).
  const tunefarm::v1::InfoReply& info();
  // Uploads a library; returns its module id.
  std::string upload(const std::string& data, const std::string& name);
  // Times a function; `req.lease_token` and `req.module_id` are filled in. The call's
  // deadline is the measurement's time limit (req.timeout_s, else the board's default) plus
  // kTransferSlackS.
  tunefarm::v1::MeasureReply measure(tunefarm::v1::MeasureRequest req, const std::string& module_id);
  void free(const std::string& module_id);
  void renew(int64_t lease_ms);
  // Gives the board back now. Best effort: returns false (and leaves the lease to expire)
  // when the tracker cannot be reached or no longer knows the lease.
  bool release();
  // Tells the tracker this board did not answer; the lease ends and the tracker drops the
  // board until it registers again. Best effort, like release.
  void report_lost(const std::string& reason);

 private:
  FarmEndpoint farm_;
  std::shared_ptr<tunefarm::v1::Tracker::Stub> tracker_;
  std::unique_ptr<tunefarm::v1::Board::Stub> board_;
  tunefarm::v1::LeaseReply lease_;
  std::optional<tunefarm::v1::InfoReply> info_;
  bool released_ = false;
};

class FarmClient {
 public:
  explicit FarmClient(FarmEndpoint farm);
  tunefarm::v1::SummaryReply summary(double timeout_s = 10);
  // Waits at most `wait_ms` for a board of `key`. Throws FarmError (DEADLINE_EXCEEDED when
  // none became free in time; NOT_FOUND at once for a key no board has registered, unless
  // `wait_for_boards`).
  // With `stop`, the wait ends (FarmError CANCELLED, the request leaves the tracker's queue)
  // within about 100 ms of *stop becoming true.
  std::unique_ptr<LeasedBoard> lease(const std::string& key, const std::string& user, int priority, int64_t wait_ms,
                                     int64_t lease_ms = 0, bool wait_for_boards = false,
                                     const std::atomic<bool>* stop = nullptr);

 private:
  FarmEndpoint farm_;
  std::shared_ptr<tunefarm::v1::Tracker::Stub> tracker_;
};

}  // namespace tf::farm
