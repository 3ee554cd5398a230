#include "tracker/tracker_service.h"

#include "proto/farm_limits.h"
#include "proto/credentials.h"

#include <algorithm>
#include <cstdio>

namespace tf::farm {
namespace {

namespace pb = tunefarm::v1;

int64_t ms_until(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t - std::chrono::steady_clock::now()).count();
}

// A waiting lease request: tells the tracker when the client gives up.
class WaitReactor : public grpc::ServerUnaryReactor {
 public:
  WaitReactor(TrackerService* service) : service_(service) {}
  void set_id(uint64_t id) { id_ = id; }
  void OnCancel() override { service_->cancel_waiter(id_); }
  void OnDone() override { delete this; }

 private:
  TrackerService* service_;
  uint64_t id_ = 0;
};

grpc::ServerUnaryReactor* finish_now(grpc::CallbackServerContext* ctx, const grpc::Status& s) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(s);
  return r;
}

}  // namespace

TrackerService::TrackerService(TrackerOptions options)
    : options_(std::move(options)), maintenance_([this] { maintenance_loop(); }) {}

TrackerService::~TrackerService() {
  std::vector<Finish> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& [id, w] : waiters_) done.push_back({w.reactor, {grpc::StatusCode::UNAVAILABLE, "tracker shutting down"}});
    waiters_.clear();
  }
  wake_.notify_all();
  maintenance_.join();
  finish_all(done);
}

void TrackerService::finish_all(std::vector<Finish>& done) {
  for (Finish& f : done) f.reactor->Finish(f.status);
  done.clear();
}

int64_t TrackerService::lease_ms(int64_t requested) const {
  if (requested <= 0) return options_.default_lease_ms;
  return std::min(requested, options_.max_lease_ms);
}

grpc::ServerUnaryReactor* TrackerService::Register(grpc::CallbackServerContext* ctx, const pb::RegisterRequest* req,
                                                   pb::RegisterReply* reply) {
  if (grpc::Status s = check_token(ctx, board_token()); !s.ok()) return finish_now(ctx, s);
  if (std::string why = check_register(*req); !why.empty()) {
    return finish_now(ctx, {grpc::StatusCode::INVALID_ARGUMENT, why});
  }
  std::vector<Finish> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto existing = boards_.find(req->board_id());
    if (existing != boards_.end() && existing->second.instance != req->instance() &&
        Clock::now() - existing->second.last_heartbeat <= std::chrono::milliseconds(options_.board_timeout_ms)) {
      // A live board owns this id: only that board process may register it again, so no one
      // can take over its entry (and the uploads tuners send it).
      return finish_now(ctx, {grpc::StatusCode::ALREADY_EXISTS,
                              "board id '" + req->board_id() + "' is registered by a live board at " +
                                  existing->second.address + "; choose another --board-id or stop that board"});
    }
    bool is_new = existing == boards_.end();
    if (is_new && boards_.size() >= static_cast<size_t>(options_.max_boards)) {
      return finish_now(ctx, {grpc::StatusCode::RESOURCE_EXHAUSTED,
                              "the tracker holds its maximum of " + std::to_string(options_.max_boards) +
                                  " boards (--max-boards); board '" + req->board_id() + "' is refused"});
    }
    bool key_changes = is_new || existing->second.key != req->key();
    if (key_changes) {
      // A board moving to another key leaves its old one first: that key may make way.
      if (!is_new) key_leave_locked(existing->second.key);
      if (std::string why = make_room_for_key_locked(req->key()); !why.empty()) {
        if (!is_new) key_join_locked(existing->second.key);
        return finish_now(ctx, {grpc::StatusCode::RESOURCE_EXHAUSTED, why});
      }
    }
    Board& b = boards_[req->board_id()];
    if (!b.lease_token.empty() && (b.key != req->key() || b.instance != req->instance())) {
      // Another key, or a new process under the same id: its lease, if any, ends.
      end_lease_locked(b.lease_token);
    }
    b.instance = req->instance();
    if (key_changes) key_join_locked(req->key());
    b.key = req->key();
    b.target = req->target();
    b.address = req->address();
    b.device = req->device();
    b.last_heartbeat = Clock::now();
    grant_locked(b.key, done);
  }
  finish_all(done);
  reply->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TrackerService::Heartbeat(grpc::CallbackServerContext* ctx, const pb::HeartbeatRequest* req,
                                                    pb::HeartbeatReply* reply) {
  if (grpc::Status s = check_token(ctx, board_token()); !s.ok()) return finish_now(ctx, s);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = boards_.find(req->board_id());
  bool known = it != boards_.end() && it->second.instance == req->instance();
  reply->set_known(known);
  if (known) it->second.last_heartbeat = Clock::now();
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TrackerService::RequestLease(grpc::CallbackServerContext* ctx, const pb::LeaseRequest* req,
                                                       pb::LeaseReply* reply) {
  if (grpc::Status s = check_token(ctx, options_.token); !s.ok()) return finish_now(ctx, s);
  if (req->key().empty()) return finish_now(ctx, {grpc::StatusCode::INVALID_ARGUMENT, "lease request without a key"});
  if (std::string why = check_key(req->key()); !why.empty()) {
    return finish_now(ctx, {grpc::StatusCode::INVALID_ARGUMENT, "lease request: " + why});
  }
  if (std::string why = check_length("user", req->user(), kMaxUserBytes); !why.empty()) {
    return finish_now(ctx, {grpc::StatusCode::INVALID_ARGUMENT, "lease request: " + why});
  }
  if (req->wait_timeout_ms() < 0 || req->wait_timeout_ms() > options_.max_wait_ms) {
    return finish_now(ctx, {grpc::StatusCode::INVALID_ARGUMENT,
                            "wait_timeout_ms " + std::to_string(req->wait_timeout_ms()) + " is not in [0, " +
                                std::to_string(options_.max_wait_ms) + "]"});
  }
  if (req->lease_ms() < 0) {
    return finish_now(ctx, {grpc::StatusCode::INVALID_ARGUMENT, "lease_ms " + std::to_string(req->lease_ms()) + " is negative"});
  }
  auto* reactor = new WaitReactor(this);
  std::vector<Finish> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!req->wait_for_boards() && !keys_.count(req->key())) {
      // Most likely a typo: say so now rather than after the whole wait. The keys listed are
      // those with boards first, at most kListedKeys of them.
      constexpr size_t kListedKeys = 16;
      std::vector<std::string> listed;
      for (int pass = 0; pass < 2; ++pass) {
        for (const auto& [k, st] : keys_) {
          if ((st.boards > 0) == (pass == 0) && listed.size() < kListedKeys) listed.push_back(k);
        }
      }
      std::string keys;
      for (const std::string& k : listed) keys += (keys.empty() ? "" : ", ") + k;
      if (keys_.size() > listed.size()) keys += ", and " + std::to_string(keys_.size() - listed.size()) + " more";
      reactor->Finish({grpc::StatusCode::NOT_FOUND,
                       "no board with key '" + req->key() + "' has registered with this tracker (keys: " +
                           (keys.empty() ? "none yet" : keys) + "); ask with wait_for_boards to wait for one"});
      return reactor;
    }
    if (waiters_.size() >= static_cast<size_t>(options_.max_waiting)) {
      reactor->Finish({grpc::StatusCode::RESOURCE_EXHAUSTED,
                       std::to_string(waiters_.size()) + " lease requests are already waiting, the tracker's maximum; "
                                                         "try again later"});
      return reactor;
    }
    uint64_t id = next_waiter_++;
    reactor->set_id(id);
    waiters_[id] = Waiter{reactor, reply, req->key(), req->user(), lease_ms(req->lease_ms()),
                          Clock::now() + std::chrono::milliseconds(req->wait_timeout_ms())};
    queues_[req->key()].push(id, req->user(), req->priority());
    grant_locked(req->key(), done);
  }
  finish_all(done);
  wake_.notify_all();  // the maintenance thread may need to wake earlier for this deadline
  return reactor;
}

void TrackerService::cancel_waiter(uint64_t id) {
  std::vector<Finish> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;  // already granted or timed out
    std::string key = it->second.key;
    queues_[key].remove(id);
    drop_queue_if_empty_locked(key);
    done.push_back({it->second.reactor, {grpc::StatusCode::CANCELLED, "lease request cancelled"}});
    waiters_.erase(it);
  }
  finish_all(done);
}

void TrackerService::grant_locked(const std::string& key, std::vector<Finish>& done) {
  auto q = queues_.find(key);
  if (q == queues_.end() || q->second.empty()) return;
  // Free boards of the key, the most recently heard from first: a board that died since its
  // last heartbeat goes last, not first, until it is reported or times out.
  std::vector<std::pair<const std::string, Board>*> free;
  for (auto& entry : boards_) {
    if (entry.second.key == key && entry.second.lease_token.empty()) free.push_back(&entry);
  }
  std::stable_sort(free.begin(), free.end(),
                   [](const auto* a, const auto* b) { return a->second.last_heartbeat > b->second.last_heartbeat; });
  for (auto* entry : free) {
    if (q->second.empty()) break;
    const std::string& board_id = entry->first;
    Board& b = entry->second;
    uint64_t id = *q->second.pop();
    Waiter w = waiters_.at(id);
    waiters_.erase(id);
    std::string token = random_token();
    b.lease_token = token;
    leases_[token] = Lease{board_id, w.user, Clock::now() + std::chrono::milliseconds(w.lease_ms), w.lease_ms};
    fill_lease_reply(token, w.reply);
    done.push_back({w.reactor, grpc::Status::OK});
  }
  if (q->second.empty()) queues_.erase(q);
}

void TrackerService::drop_queue_if_empty_locked(const std::string& key) {
  auto q = queues_.find(key);
  if (q != queues_.end() && q->second.empty()) queues_.erase(q);
}

void TrackerService::key_join_locked(const std::string& key) {
  KeyState& k = keys_[key];
  ++k.boards;
  k.last_used = Clock::now();
}

void TrackerService::key_leave_locked(const std::string& key) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return;
  if (it->second.boards > 0) --it->second.boards;
  it->second.last_used = Clock::now();
}

std::string TrackerService::make_room_for_key_locked(const std::string& key) {
  if (keys_.count(key) || keys_.size() < static_cast<size_t>(options_.max_keys)) return "";
  // Full: the key unused longest (no boards) makes way, retention or not.
  auto victim = keys_.end();
  for (auto it = keys_.begin(); it != keys_.end(); ++it) {
    if (it->second.boards == 0 && (victim == keys_.end() || it->second.last_used < victim->second.last_used)) victim = it;
  }
  if (victim == keys_.end()) {
    return "the tracker holds its maximum of " + std::to_string(options_.max_keys) +
           " keys (--max-keys), each with registered boards; key '" + key + "' is refused";
  }
  keys_.erase(victim);
  return "";
}

std::map<std::string, TrackerService::Board>::iterator TrackerService::drop_board_locked(
    std::map<std::string, Board>::iterator it) {
  if (!it->second.lease_token.empty()) leases_.erase(it->second.lease_token);
  key_leave_locked(it->second.key);
  return boards_.erase(it);
}

void TrackerService::fill_lease_reply(const std::string& token, pb::LeaseReply* reply) {
  const Lease& l = leases_.at(token);
  const Board& b = boards_.at(l.board_id);
  reply->set_lease_token(token);
  reply->set_board_id(l.board_id);
  reply->set_address(b.address);
  reply->set_target(b.target);
  *reply->mutable_device() = b.device;
  reply->set_expires_in_ms(ms_until(l.expires));
}

void TrackerService::end_lease_locked(const std::string& token) {
  auto it = leases_.find(token);
  if (it == leases_.end()) return;
  auto b = boards_.find(it->second.board_id);
  if (b != boards_.end() && b->second.lease_token == token) b->second.lease_token.clear();
  leases_.erase(it);
}

grpc::ServerUnaryReactor* TrackerService::RenewLease(grpc::CallbackServerContext* ctx, const pb::RenewRequest* req,
                                                     pb::LeaseReply* reply) {
  if (grpc::Status s = check_token(ctx, options_.token); !s.ok()) return finish_now(ctx, s);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(req->lease_token());
  if (it == leases_.end() || it->second.expires <= Clock::now()) {
    return finish_now(ctx, {grpc::StatusCode::NOT_FOUND, "no such lease (expired, released or never granted)"});
  }
  it->second.duration_ms = lease_ms(req->lease_ms());
  it->second.expires = Clock::now() + std::chrono::milliseconds(it->second.duration_ms);
  fill_lease_reply(req->lease_token(), reply);
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TrackerService::ReleaseLease(grpc::CallbackServerContext* ctx, const pb::ReleaseRequest* req,
                                                       pb::ReleaseReply* reply) {
  if (grpc::Status s = check_token(ctx, options_.token); !s.ok()) return finish_now(ctx, s);
  std::vector<Finish> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = leases_.find(req->lease_token());
    if (it == leases_.end()) {
      return finish_now(ctx, {grpc::StatusCode::NOT_FOUND, "no such lease (expired, released or never granted)"});
    }
    auto b = boards_.find(it->second.board_id);
    end_lease_locked(req->lease_token());
    if (b != boards_.end()) grant_locked(b->second.key, done);
  }
  finish_all(done);
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TrackerService::ReportBoard(grpc::CallbackServerContext* ctx, const pb::ReportRequest* req,
                                                      pb::ReportReply*) {
  if (grpc::Status s = check_token(ctx, options_.token); !s.ok()) return finish_now(ctx, s);
  std::string board_id, address, user;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = leases_.find(req->lease_token());
    if (it == leases_.end()) {
      return finish_now(ctx, {grpc::StatusCode::NOT_FOUND, "no such lease (expired, released or never granted)"});
    }
    board_id = it->second.board_id;
    user = it->second.user;
    end_lease_locked(req->lease_token());
    auto b = boards_.find(board_id);
    if (b != boards_.end()) {
      address = b->second.address;
      drop_board_locked(b);
    }
  }
  std::printf("board %s at %s reported lost by %s (%s); dropped until it registers again\n", board_id.c_str(),
              address.c_str(), user.c_str(), req->reason().substr(0, 200).c_str());
  std::fflush(stdout);
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TrackerService::VerifyLease(grpc::CallbackServerContext* ctx, const pb::VerifyRequest* req,
                                                      pb::VerifyReply* reply) {
  if (grpc::Status s = check_token(ctx, board_token()); !s.ok()) return finish_now(ctx, s);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(req->lease_token());
  bool valid = it != leases_.end() && it->second.board_id == req->board_id() && it->second.expires > Clock::now();
  reply->set_valid(valid);
  if (valid) {
    // A lease in use is renewed: each board call it authorizes extends it by its duration.
    if (req->use()) {
      it->second.expires = std::max(it->second.expires, Clock::now() + std::chrono::milliseconds(it->second.duration_ms));
    }
    reply->set_user(it->second.user);
    reply->set_expires_in_ms(ms_until(it->second.expires));
  }
  return finish_now(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TrackerService::Summary(grpc::CallbackServerContext* ctx, const pb::SummaryRequest*,
                                                  pb::SummaryReply* reply) {
  if (grpc::Status s = check_token(ctx, options_.token); !s.ok()) return finish_now(ctx, s);
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, pb::KeySummary> keys;
  for (const auto& [id, b] : boards_) {
    pb::KeySummary& k = keys[b.key];
    k.set_key(b.key);
    k.set_total(k.total() + 1);
    if (b.lease_token.empty()) k.set_free(k.free() + 1);
    else k.set_leased(k.leased() + 1);
    pb::BoardSummary* s = reply->add_boards();
    s->set_board_id(id);
    s->set_address(b.address);
    s->set_key(b.key);
    s->set_target(b.target);
    s->set_state(b.lease_token.empty() ? "free" : "leased");
    if (!b.lease_token.empty()) s->set_lease_holder(leases_.at(b.lease_token).user);
    *s->mutable_device() = b.device;
    s->set_last_heartbeat_ms_ago(-ms_until(b.last_heartbeat));
  }
  for (const auto& [key, q] : queues_) {
    if (q.empty()) continue;
    pb::KeySummary& k = keys[key];
    k.set_key(key);
    k.set_pending(static_cast<int32_t>(q.size()));
  }
  for (auto& [key, k] : keys) *reply->add_keys() = k;
  return finish_now(ctx, grpc::Status::OK);
}

void TrackerService::maintenance_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    Clock::time_point now = Clock::now();
    std::vector<Finish> done;
    std::set<std::string> keys_to_grant;
    // Boards that stopped heartbeating are gone, and so are their leases.
    for (auto it = boards_.begin(); it != boards_.end();) {
      if (now - it->second.last_heartbeat > std::chrono::milliseconds(options_.board_timeout_ms)) {
        it = drop_board_locked(it);
      } else {
        ++it;
      }
    }
    // Keys whose last board left longer ago than the retention are forgotten.
    for (auto it = keys_.begin(); it != keys_.end();) {
      if (it->second.boards == 0 && now - it->second.last_used > std::chrono::milliseconds(options_.key_retention_ms)) {
        it = keys_.erase(it);
      } else {
        ++it;
      }
    }
    // Expired leases free their boards.
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second.expires <= now) {
        auto b = boards_.find(it->second.board_id);
        if (b != boards_.end()) {
          b->second.lease_token.clear();
          keys_to_grant.insert(b->second.key);
        }
        it = leases_.erase(it);
      } else {
        ++it;
      }
    }
    for (const std::string& k : keys_to_grant) grant_locked(k, done);
    // Requests whose wait is over fail with a clear status.
    Clock::time_point next = now + std::chrono::milliseconds(50);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.deadline <= now) {
        const std::string key = it->second.key;
        queues_[key].remove(it->first);
        drop_queue_if_empty_locked(key);
        int total = 0, free = 0;
        for (const auto& [id, b] : boards_) {
          if (b.key != key) continue;
          ++total;
          free += b.lease_token.empty();
        }
        std::string why = total == 0 ? "no board with key '" + key + "' is registered"
                                      : std::to_string(total) + " board(s) with key '" + key + "', all leased";
        // No board of the key at all is NOT_FOUND (a wrong key, or a farm without such
        // boards); boards that stayed busy are DEADLINE_EXCEEDED.
        done.push_back({it->second.reactor, {total == 0 ? grpc::StatusCode::NOT_FOUND : grpc::StatusCode::DEADLINE_EXCEEDED,
                                             "no free board within the wait timeout: " + why}});
        it = waiters_.erase(it);
      } else {
        next = std::min(next, it->second.deadline);
        ++it;
      }
    }
    if (!done.empty()) {
      lock.unlock();
      finish_all(done);
      lock.lock();
      continue;
    }
    wake_.wait_until(lock, next);
  }
}

}  // namespace tf::farm
