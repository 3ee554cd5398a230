// A real tracker (the daemon, on loopback) against registrations and lease requests that try
// to grow its memory or its replies: many unique keys, long keys, huge device strings, more
// boards than it takes. The registrations are made with the tracker's own protocol, as a
// board (or anyone holding the board token) would.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "proto/farm_limits.h"
#include "proto/credentials.h"
#include "proto/tunefarm.grpc.pb.h"
#include "tests/farm/daemon.h"
#include "tests/temp_dir.h"

namespace tf::farm {
namespace {

namespace fs = std::filesystem;
namespace pb = tunefarm::v1;

// One log a tracker, in the process's scratch directory.
std::string log_path() {
  static tf::testing::TempDir dir("tunefarm-limits");
  static int trackers = 0;
  return dir.path() + "/tracker" + std::to_string(++trackers) + ".log";
}

// The tracker as a child process, loopback, no token (what a loopback tracker allows).
class Tracker {
 public:
  explicit Tracker(std::vector<std::string> extra) : daemon_(args(std::move(extra)), log_path()) {
    port_ = daemon_.port();
    stub_ = pb::Tracker::NewStub(make_channel("127.0.0.1:" + std::to_string(port_), {}));
  }
  int port() const { return port_; }

  grpc::Status reg(const pb::RegisterRequest& r) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pb::RegisterReply reply;
    return stub_->Register(&ctx, r, &reply);
  }
  grpc::Status reg(const std::string& id, const std::string& key) { return reg(board(id, key)); }
  // A lease request that does not wait: NOT_FOUND for an unknown key.
  grpc::Status lease(const std::string& key, bool wait_for_boards = false, int64_t wait_ms = 0) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pb::LeaseRequest r;
    r.set_key(key);
    r.set_user("tester");
    r.set_wait_timeout_ms(wait_ms);
    r.set_wait_for_boards(wait_for_boards);
    pb::LeaseReply reply;
    return stub_->RequestLease(&ctx, r, &reply);
  }
  pb::SummaryReply summary(grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    pb::SummaryReply reply;
    grpc::Status s = stub_->Summary(&ctx, pb::SummaryRequest(), &reply);
    if (status) *status = s;
    return reply;
  }

  static pb::RegisterRequest board(const std::string& id, const std::string& key) {
    pb::RegisterRequest r;
    r.set_board_id(id);
    r.set_key(key);
    r.set_address("127.0.0.1:1");
    r.set_target("llvm -mtriple=x86_64-linux-gnu");
    r.set_instance("i-" + id);
    r.mutable_device()->set_cpu_model("test cpu");
    return r;
  }

 private:
  static std::vector<std::string> args(std::vector<std::string> extra) {
    std::vector<std::string> a = {TF_TRACKER, "--port", "0", "--heartbeat-ms", "100"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  Daemon daemon_;
  int port_ = 0;
  std::unique_ptr<pb::Tracker::Stub> stub_;
};

std::string unique_key(int i) {
  std::string k = "key-" + std::to_string(i) + "-";
  return k + std::string(kMaxKeyBytes - k.size(), 'x');
}

// Many boards, each with a key of its own: the keys the tracker remembers are bounded, a
// refused key is named, the unknown-key error stays short, and keys are forgotten once their
// boards are gone (they were remembered for ever, and each unknown-key error listed them all:
// 20,000 of 256 bytes made every such error overflow gRPC's metadata limit).
TEST(TrackerLimits, KeysAreBoundedListedBrieflyAndForgotten) {
  Tracker t({"--max-keys", "40", "--key-retention-ms", "300", "--board-timeout-ms", "1500"});
  ASSERT_GT(t.port(), 0);
  int refused = 0;
  std::string refusal;
  for (int i = 0; i < 120; ++i) {
    grpc::Status s = t.reg("b" + std::to_string(i), unique_key(i));
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      refusal = s.error_message();
    } else {
      ASSERT_TRUE(s.ok()) << i << ": " << s.error_message();
    }
  }
  EXPECT_EQ(refused, 80);  // every key past 40 while all 40 have live boards
  EXPECT_NE(refusal.find("maximum of 40 keys"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find(unique_key(119)), std::string::npos) << refusal;
  grpc::Status unknown = t.lease("no-such-key");
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LT(unknown.error_message().size(), 2000u) << unknown.error_message();
  EXPECT_NE(unknown.error_message().find("and 24 more"), std::string::npos) << unknown.error_message();
  // A board moving to another key releases the old one: with the key limit reached, the old
  // key has no board left and makes way for the new one.
  EXPECT_TRUE(t.reg("b0", "moved").ok());
  EXPECT_TRUE(t.reg("b-new", "another").error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  // The boards never heartbeat: they are dropped after 1.5 s, their keys 300 ms later.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  unknown = t.lease("no-such-key");
  EXPECT_NE(unknown.error_message().find("(keys: none yet)"), std::string::npos) << unknown.error_message();
  EXPECT_EQ(t.summary().keys_size(), 0);
  // And new keys register again.
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(t.reg("c" + std::to_string(i), unique_key(1000 + i)).ok()) << i;
}

// With the key limit reached and no retention, a key without boards makes way at once.
TEST(TrackerLimits, AKeyWithoutBoardsMakesWayForANewOne) {
  Tracker t({"--max-keys", "2", "--board-timeout-ms", "300", "--key-retention-ms", "600000"});
  ASSERT_GT(t.port(), 0);
  ASSERT_TRUE(t.reg("a", "ka").ok());
  ASSERT_TRUE(t.reg("b", "kb").ok());
  EXPECT_EQ(t.reg("c", "kc").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // a and b dropped; their keys kept
  // Still remembered: a lease request for it waits (here 0 ms) rather than failing as unknown.
  grpc::Status s = t.lease("ka");
  EXPECT_NE(s.error_message().find("within the wait timeout"), std::string::npos) << s.error_message();
  ASSERT_TRUE(t.reg("c", "kc").ok());  // evicts the longest-unused key without boards
  ASSERT_TRUE(t.reg("d", "kd").ok());
  EXPECT_EQ(t.summary().keys_size(), 2);
}

// Keys are short names: a long key, or one with spaces or control characters, is refused by
// register and by lease requests, naming the problem.
TEST(TrackerLimits, KeysAreShortNames) {
  Tracker t({});
  ASSERT_GT(t.port(), 0);
  grpc::Status s = t.reg("b", std::string(256, 'k'));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("key of 256 bytes is longer than 64"), std::string::npos) << s.error_message();
  s = t.reg("b", "rpi4\nfake log line");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("has the character 10"), std::string::npos) << s.error_message();
  s = t.lease(std::string(300, 'k'), true, 100);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("lease request: key of 300 bytes"), std::string::npos) << s.error_message();
  EXPECT_TRUE(t.reg("b", "rpi4-a72_v1.2+x:y@z").ok());
}

// Every string a board reports is bounded: three boards with a 1.5 MB cpu_model made the
// tracker's summary 4.5 MB, over gRPC's default 4 MB for other clients.
TEST(TrackerLimits, DeviceStringsAreBounded) {
  Tracker t({});
  ASSERT_GT(t.port(), 0);
  struct Case {
    std::function<void(pb::DeviceInfo*)> set;
    std::string want;
  };
  std::vector<Case> cases = {
      {[](pb::DeviceInfo* d) { d->set_cpu_model(std::string(1500000, 'c')); },
       "device.cpu_model of 1500000 bytes is longer than 256"},
      {[](pb::DeviceInfo* d) { d->set_gpu_name(std::string(257, 'g')); }, "device.gpu_name of 257 bytes"},
      {[](pb::DeviceInfo* d) { d->set_server_version(std::string(65, 'v')); }, "device.server_version of 65"},
      {[](pb::DeviceInfo* d) { d->set_arch(std::string(100, 'a')); }, "device.arch of 100"},
      {[](pb::DeviceInfo* d) { d->set_gpu_arch(std::string(100, 'a')); }, "device.gpu_arch of 100"},
      {[](pb::DeviceInfo* d) { d->set_cores(-1); }, "device.cores -1"},
      {[](pb::DeviceInfo* d) { d->set_memory_bytes(-5); }, "device.memory_bytes -5"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    pb::RegisterRequest r = Tracker::board("b" + std::to_string(i), "k");
    cases[i].set(r.mutable_device());
    grpc::Status s = t.reg(r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << cases[i].want;
    EXPECT_NE(s.error_message().find(cases[i].want), std::string::npos) << s.error_message();
  }
  pb::RegisterRequest r = Tracker::board("long-target", "k");
  r.set_target(std::string(2000, 't'));
  EXPECT_NE(t.reg(r).error_message().find("target of 2000 bytes"), std::string::npos);
  // Boards at every limit: the summary of a few stays far below 4 MB.
  for (int i = 0; i < 3; ++i) {
    pb::RegisterRequest b = Tracker::board("full" + std::to_string(i), "k");
    b.mutable_device()->set_cpu_model(std::string(kMaxDeviceNameBytes, 'c'));
    b.mutable_device()->set_gpu_name(std::string(kMaxDeviceNameBytes, 'g'));
    ASSERT_TRUE(t.reg(b).ok());
  }
  grpc::Status st;
  pb::SummaryReply sum = t.summary(&st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(sum.boards_size(), 3);
  EXPECT_LT(sum.ByteSizeLong(), 10000u);
}

// What farm status prints is text, and what tuners dial is an address: a board id with
// terminal escapes or an address that is not HOST:PORT is refused by name (both were stored).
TEST(TrackerLimits, BoardIdsAreTextAndAddressesAreAddresses) {
  Tracker t({});
  ASSERT_GT(t.port(), 0);
  auto refused = [&](pb::RegisterRequest r, const std::string& message) {
    grpc::Status s = t.reg(r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << message;
    EXPECT_NE(s.error_message().find(message), std::string::npos) << s.error_message();
    EXPECT_EQ(s.error_message().find('\x1b'), std::string::npos) << "the refusal echoes the escape";
  };
  refused(Tracker::board("evil\x1b[2J\n\r", "k"), "board_id has the control character 27 at byte 4");
  refused(Tracker::board("c1-\xc2\x9b" "2J", "k"), "board_id has the control character 155");
  refused(Tracker::board("del\x7f", "k"), "board_id has the control character 127");
  for (auto [address, why] : std::vector<std::pair<std::string, std::string>>{
           {"not an address", "is not HOST:PORT: no ':PORT'"},
           {"host", "no ':PORT'"},
           {":80", "no ':PORT'"},
           {"host:0", "1..65535"},
           {"host:65536", "1..65535"},
           {"host:80x", "1..65535"},
           {"ho st:80", "a host is a name"},
           {"host\n:80", "a host is a name"},
           {"[::1:80", "an IPv6 host"},
           {"[zz]:80", "an IPv6 host"}}) {
    pb::RegisterRequest r = Tracker::board("b", "k");
    r.set_address(address);
    refused(r, why);
  }
  pb::RegisterRequest r = Tracker::board("b", "k");
  r.mutable_device()->set_cpu_model("cpu\x1b]0;title\x07");
  refused(r, "device.cpu_model has the control character 27");
  // What boards register is still taken: names, IPv4, IPv6 in brackets, UTF-8 text.
  for (std::string address : {"127.0.0.1:9190", "board-7.lab.example:65535", "[::1]:9190", "[fe80::1%eth0]:1"}) {
    r = Tracker::board("b", "k");
    r.set_address(address);
    EXPECT_TRUE(t.reg(r).ok()) << address;
  }
  EXPECT_TRUE(t.reg(Tracker::board("pi \xc3\xa9t\xc3\xa9 #3", "k")).ok());
}

TEST(TrackerLimits, BoardsAreBounded) {
  Tracker t({"--max-boards", "5"});
  ASSERT_GT(t.port(), 0);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(t.reg("b" + std::to_string(i), "k").ok());
  grpc::Status s = t.reg("b5", "k");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("maximum of 5 boards"), std::string::npos) << s.error_message();
  EXPECT_TRUE(t.reg("b4", "k").ok());  // a known board re-registers
}

}  // namespace
}  // namespace tf::farm
