// The tracker: which boards exist, which are free, who holds which lease, who is waiting.
//
// All state is in memory under one mutex. Boards re-register by themselves after a tracker
// restart (a heartbeat to a tracker that does not know them says so), so nothing needs to be
// persisted: leases of a restarted tracker end, and tuners ask again.
//
// Lease requests use gRPC's callback API: a waiting request holds no thread, only a reactor
// in the queue, which a release, an expiry, a new board, the request's deadline or its
// cancellation finishes. A maintenance thread expires leases, times out waiting requests and
// drops boards that missed their heartbeats.
#pragma once

#include <condition_variable>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <thread>

#include "proto/tunefarm.grpc.pb.h"
#include "tracker/lease_queue.h"

namespace tf::farm {

struct TrackerOptions {
  std::string token;                    // client token: lease rpcs and Summary; empty = none
                                        // (loopback only)
  std::string board_token;              // board token: Register, Heartbeat, VerifyLease; empty =
                                        // the client token (one shared token)
  int heartbeat_interval_ms = 1000;     // told to boards
  int board_timeout_ms = 5000;          // a board silent this long is dropped
  int64_t default_lease_ms = 60000;     // lease duration when the request says 0
  int64_t max_lease_ms = 24 * 3600 * 1000LL;
  int64_t max_wait_ms = 3600 * 1000LL;  // longest wait_timeout_ms accepted
  // Bounds on what boards and clients can make the tracker hold (every board presents the one
  // board token, so these are also the limits per token).
  int max_keys = 1024;                  // distinct keys remembered; a new key past it evicts the
                                        // longest-unused key without boards, else is refused
  int64_t key_retention_ms = 600000;    // a key whose last board left is forgotten after this
  int max_boards = 65536;               // boards registered at once
  int max_waiting = 65536;              // lease requests waiting at once
};

class TrackerService final : public tunefarm::v1::Tracker::CallbackService {
 public:
  explicit TrackerService(TrackerOptions options);
  // Fails waiting requests with UNAVAILABLE and stops the maintenance thread.
  ~TrackerService() override;

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const tunefarm::v1::RegisterRequest* req,
                                     tunefarm::v1::RegisterReply* reply) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const tunefarm::v1::HeartbeatRequest* req,
                                      tunefarm::v1::HeartbeatReply* reply) override;
  grpc::ServerUnaryReactor* RequestLease(grpc::CallbackServerContext* ctx, const tunefarm::v1::LeaseRequest* req,
                                         tunefarm::v1::LeaseReply* reply) override;
  grpc::ServerUnaryReactor* RenewLease(grpc::CallbackServerContext* ctx, const tunefarm::v1::RenewRequest* req,
                                       tunefarm::v1::LeaseReply* reply) override;
  grpc::ServerUnaryReactor* ReleaseLease(grpc::CallbackServerContext* ctx, const tunefarm::v1::ReleaseRequest* req,
                                         tunefarm::v1::ReleaseReply* reply) override;
  grpc::ServerUnaryReactor* VerifyLease(grpc::CallbackServerContext* ctx, const tunefarm::v1::VerifyRequest* req,
                                        tunefarm::v1::VerifyReply* reply) override;
  grpc::ServerUnaryReactor* Summary(grpc::CallbackServerContext* ctx, const tunefarm::v1::SummaryRequest* req,
                                    tunefarm::v1::SummaryReply* reply) override;
  grpc::ServerUnaryReactor* ReportBoard(grpc::CallbackServerContext* ctx, const tunefarm::v1::ReportRequest* req,
                                        tunefarm::v1::ReportReply* reply) override;

  // Called by a waiting request's reactor when the client cancels.
  void cancel_waiter(uint64_t id);

 private:
  using Clock = std::chrono::steady_clock;

  struct Board {
    std::string key, target, address, instance;
    tunefarm::v1::DeviceInfo device;
    Clock::time_point last_heartbeat;
    std::string lease_token;  // empty when free
  };
  struct KeyState {
    int boards = 0;                   // registered boards with this key
    Clock::time_point last_used;      // when a board of it last registered or left
  };
  struct Lease {
    std::string board_id, user;
    Clock::time_point expires;
    int64_t duration_ms;  // how far each use (a verified board call) pushes `expires`
  };
  struct Waiter {
    grpc::ServerUnaryReactor* reactor;
    tunefarm::v1::LeaseReply* reply;
    std::string key, user;
    int64_t lease_ms;
    Clock::time_point deadline;
  };
  // A reactor to finish once the mutex is released.
  struct Finish {
    grpc::ServerUnaryReactor* reactor;
    grpc::Status status;
  };

  void maintenance_loop();
  // The token boards must present.
  const std::string& board_token() const { return options_.board_token.empty() ? options_.token : options_.board_token; }
  // Gives free boards of `key` to waiting requests.
  void grant_locked(const std::string& key, std::vector<Finish>& done);
  void end_lease_locked(const std::string& token);
  // Board bookkeeping of keys_: a board takes / leaves its key.
  void key_join_locked(const std::string& key);
  void key_leave_locked(const std::string& key);
  // Room for `key` in keys_ ("" when there is, else why not); may evict an unused key.
  std::string make_room_for_key_locked(const std::string& key);
  // Removes a board (its lease too) and releases its key.
  std::map<std::string, Board>::iterator drop_board_locked(std::map<std::string, Board>::iterator it);
  // Forgets a key's queue once nobody waits in it.
  void drop_queue_if_empty_locked(const std::string& key);
  void fill_lease_reply(const std::string& token, tunefarm::v1::LeaseReply* reply);
  int64_t lease_ms(int64_t requested) const;
  static void finish_all(std::vector<Finish>& done);

  TrackerOptions options_;
  std::mutex mu_;
  std::map<std::string, Board> boards_;     // by board id
  std::map<std::string, Lease> leases_;     // by token
  std::map<std::string, LeaseQueue> queues_;  // by key
  std::map<uint64_t, Waiter> waiters_;      // by request id
  std::map<std::string, KeyState> keys_;    // keys boards registered, until key_retention_ms
                                            // after the last such board left
  uint64_t next_waiter_ = 1;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread maintenance_;
};

}  // namespace tf::farm
