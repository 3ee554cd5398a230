#include "tuner/farm_client.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/hash.h"
#include "runtime/measure_limits.h"

namespace tf::farm {
namespace {

namespace pb = tunefarm::v1;

const char* code_name(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    default: return "ERROR";
  }
}

void check(const grpc::Status& s, const std::string& call, bool board_call = false) {
  if (s.ok()) return;
  throw FarmError(call + " failed: " + code_name(s.error_code()) + ": " + s.error_message(), s.error_code(),
                  board_call);
}

std::unique_ptr<grpc::ClientContext> context(const std::string& token, double seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  add_token(*ctx, token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  return ctx;
}

}  // namespace

FarmClient::FarmClient(FarmEndpoint farm)
    : farm_(std::move(farm)), tracker_(pb::Tracker::NewStub(make_channel(farm_.tracker, farm_.tls))) {}

pb::SummaryReply FarmClient::summary(double timeout_s) {
  pb::SummaryReply reply;
  auto ctx = context(farm_.token, timeout_s);
  check(tracker_->Summary(ctx.get(), pb::SummaryRequest(), &reply), "summary from tracker " + farm_.tracker);
  return reply;
}

std::unique_ptr<LeasedBoard> FarmClient::lease(const std::string& key, const std::string& user, int priority,
                                               int64_t wait_ms, int64_t lease_ms, bool wait_for_boards,
                                               const std::atomic<bool>* stop) {
  pb::LeaseRequest req;
  req.set_key(key);
  req.set_user(user);
  req.set_priority(priority);
  req.set_wait_timeout_ms(wait_ms);
  req.set_lease_ms(lease_ms);
  req.set_wait_for_boards(wait_for_boards);
  pb::LeaseReply reply;
  // Our own deadline is the tracker's wait plus slack, so a dead tracker cannot hang us.
  auto ctx = context(farm_.token, static_cast<double>(wait_ms) / 1000 + 10);
  // A stopped caller cancels the call; the tracker drops a cancelled request from its queue.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watcher;
  if (stop) {
    watcher = std::thread([&] {
      std::unique_lock<std::mutex> l(mu);
      while (!done && !*stop) cv.wait_for(l, std::chrono::milliseconds(100));
      if (!done) ctx->TryCancel();
    });
  }
  grpc::Status s = tracker_->RequestLease(ctx.get(), req, &reply);
  if (watcher.joinable()) {
    {
      std::lock_guard<std::mutex> l(mu);
      done = true;
    }
    cv.notify_all();
    watcher.join();
  }
  if (stop && *stop && !s.ok()) {
    throw FarmError("the wait for a '" + key + "' board was abandoned: the caller stopped", grpc::StatusCode::CANCELLED);
  }
  check(s, "lease of a '" + key + "' board from " + farm_.tracker);
  return std::make_unique<LeasedBoard>(farm_, tracker_, reply);
}

LeasedBoard::LeasedBoard(const FarmEndpoint& farm, std::shared_ptr<pb::Tracker::Stub> tracker, pb::LeaseReply lease)
    : farm_(farm), tracker_(std::move(tracker)),
      board_(pb::Board::NewStub(make_channel(lease.address(), farm.tls))), lease_(std::move(lease)) {}

LeasedBoard::~LeasedBoard() { release(); }

bool LeasedBoard::release() {
  if (released_) return true;
  released_ = true;
  pb::ReleaseRequest req;
  req.set_lease_token(lease_.lease_token());
  pb::ReleaseReply reply;
  auto ctx = context(farm_.token, 5);
  return tracker_->ReleaseLease(ctx.get(), req, &reply).ok();
}

void LeasedBoard::report_lost(const std::string& reason) {
  if (released_) return;
  released_ = true;
  pb::ReportRequest req;
  req.set_lease_token(lease_.lease_token());
  req.set_reason(reason);
  pb::ReportReply reply;
  auto ctx = context(farm_.token, 5);
  (void)tracker_->ReportBoard(ctx.get(), req, &reply);
}

const pb::InfoReply& LeasedBoard::info() {
  if (info_) return *info_;
  pb::InfoReply reply;
  auto ctx = context(farm_.token, farm_.transfer_slack_s);
  check(board_->GetInfo(ctx.get(), pb::InfoRequest(), &reply), "info from board " + lease_.board_id() + " at " + lease_.address(),
        /*board_call=*/true);
  info_ = reply;
  return *info_;
}

void LeasedBoard::renew(int64_t lease_ms) {
  pb::RenewRequest req;
  req.set_lease_token(lease_.lease_token());
  req.set_lease_ms(lease_ms);
  pb::LeaseReply reply;
  auto ctx = context(farm_.token, 5);
  check(tracker_->RenewLease(ctx.get(), req, &reply), "renewal of the lease on " + lease_.board_id());
}

std::string LeasedBoard::upload(const std::string& data, const std::string& name) {
  pb::UploadRequest req;
  req.set_lease_token(lease_.lease_token());
  req.set_name(name);
  req.set_data(data);
  req.set_sha256(sha256_hex(data));
  pb::UploadReply reply;
  // At least 1 MB/s, and the slack for a board that is busy starting.
  auto ctx = context(farm_.token, farm_.transfer_slack_s + static_cast<double>(data.size()) / 1e6);
  check(board_->Upload(ctx.get(), req, &reply), "upload to board " + lease_.board_id() + " at " + lease_.address(),
        /*board_call=*/true);
  return reply.module_id();
}

pb::MeasureReply LeasedBoard::measure(pb::MeasureRequest req, const std::string& module_id) {
  req.set_lease_token(lease_.lease_token());
  req.set_module_id(module_id);
  pb::MeasureReply reply;
  double limit = effective_timeout_s(req, info().default_timeout_s(), info().max_timeout_s());
  // The lease must outlive the measurement: renew it to cover the whole time limit.
  renew(static_cast<int64_t>((limit + farm_.transfer_slack_s + 60) * 1000));
  auto ctx = context(farm_.token, limit + farm_.transfer_slack_s);
  check(board_->Measure(ctx.get(), req, &reply), "measurement on board " + lease_.board_id() + " at " + lease_.address(),
        /*board_call=*/true);
  return reply;
}

void LeasedBoard::free(const std::string& module_id) {
  pb::FreeRequest req;
  req.set_lease_token(lease_.lease_token());
  req.set_module_id(module_id);
  pb::FreeReply reply;
  auto ctx = context(farm_.token, farm_.transfer_slack_s);
  check(board_->Free(ctx.get(), req, &reply), "free on board " + lease_.board_id(), /*board_call=*/true);
}

}  // namespace tf::farm
