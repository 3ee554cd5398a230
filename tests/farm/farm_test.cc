// The farm with real processes on loopback: a tracker and boards started as the README
// says, leases by priority and fair share, timeouts, authentication, misbehaving kernels,
// a board killed mid-measurement, a tracker restart, and TLS with certificates made here.
#include <gtest/gtest.h>
#include <elf.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "proto/credentials.h"
#include "compiler/ptxas.h"
#include "compiler/target.h"
#include "rpc_server/board_service.h"
#include "tests/farm/daemon.h"
#include "runtime/kernel_library.h"
#include "tests/graph/onnx_builder.h"
#include "tuner/farm_client.h"
#include "tuner/farm_runner.h"
#include "tests/temp_dir.h"

extern char** environ;

namespace tf::farm {
namespace {

namespace fs = std::filesystem;
namespace pb = tunefarm::v1;
using Clock = std::chrono::steady_clock;

const std::string kToken = "test-token-0123456789abcdef";

std::string temp_dir() {
  static tf::testing::TempDir dir("tunefarm-farm");
  return dir.path();
}

// Written once: daemons read it while later ones start.
std::string token_file() {
  static std::string path = [] {
    std::string p = temp_dir() + "/token";
    std::ofstream(p) << kToken << "\n";
    fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
    return p;
  }();
  return path;
}

std::unique_ptr<Daemon> start_tracker(int port, const std::vector<std::string>& extra = {}) {
  static int n = 0;
  std::vector<std::string> args = {TF_TRACKER, "--port", std::to_string(port), "--token-file", token_file(),
                                   "--heartbeat-ms", "100"};
  if (std::find(extra.begin(), extra.end(), "--board-timeout-ms") == extra.end()) {
    args.insert(args.end(), {"--board-timeout-ms", "1000"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<Daemon>(args, temp_dir() + "/tracker" + std::to_string(n++) + ".log");
}

std::unique_ptr<Daemon> start_board(int tracker_port, const std::string& key, const std::vector<std::string>& extra = {}) {
  static int n = 0;
  std::vector<std::string> args = {TF_RPC_SERVER, "--tracker", "127.0.0.1:" + std::to_string(tracker_port), "--key", key};
  // Defaults that `extra` may replace.
  for (auto [flag, value] : {std::pair<std::string, std::string>{"--port", "0"}, {"--token-file", token_file()}}) {
    if (std::find(extra.begin(), extra.end(), flag) == extra.end()) args.insert(args.end(), {flag, value});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<Daemon>(args, temp_dir() + "/board" + std::to_string(n++) + ".log");
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

pb::MeasureRequest request(const std::string& function, double timeout_s = 10) {
  pb::MeasureRequest r;
  r.set_function(function);
  for (bool out : {false, true}) {
    pb::ArgSpec* a = r.add_args();
    a->add_shape(16);
    a->set_is_output(out);
  }
  r.set_number(1);
  r.set_repeat(3);
  r.set_timeout_s(timeout_s);
  r.set_outputs(pb::OUTPUT_VALUES);
  r.set_seed(5);
  return r;
}

// Waits until `pred(summary)` holds; false after timeout_ms.
template <typename P>
bool wait_summary(FarmClient& c, P pred, int timeout_ms) {
  for (auto end = Clock::now() + std::chrono::milliseconds(timeout_ms); Clock::now() < end;) {
    try {
      if (pred(c.summary())) return true;
    } catch (const FarmError&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Runner processes whose board died and left them to init (comm is cut at 15 characters).
int orphaned_runners() {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream f(e.path() / "stat");
    std::string stat;
    if (!std::getline(f, stat)) continue;
    size_t close = stat.rfind(')');
    if (stat.find("(tunefarm-board-") == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    n += ppid == 1;
  }
  return n;
}

int boards_with_key(const pb::SummaryReply& s, const std::string& key) {
  int n = 0;
  for (const auto& b : s.boards()) n += b.key() == key;
  return n;
}

class Farm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tracker_ = start_tracker(0).release();
    port_ = tracker_->port();
    ASSERT_GT(port_, 0) << tracker_->log();
    for (int i = 0; i < 3; ++i) boards_.push_back(start_board(port_, "cpu").release());
    boards_.push_back(start_board(port_, "solo").release());
    FarmClient c(endpoint());
    ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 4; }, 10000));
  }
  static void TearDownTestSuite() {
    for (Daemon* b : boards_) delete b;
    boards_.clear();
    delete tracker_;
  }
  static FarmEndpoint endpoint() { return {"127.0.0.1:" + std::to_string(port_), kToken, {}}; }

  static Daemon* tracker_;
  static int port_;
  static std::vector<Daemon*> boards_;
};
Daemon* Farm::tracker_ = nullptr;
int Farm::port_ = 0;
std::vector<Daemon*> Farm::boards_;

TEST_F(Farm, StatusShowsTheBoards) {
  FarmClient c(endpoint());
  pb::SummaryReply s = c.summary();
  EXPECT_EQ(boards_with_key(s, "cpu"), 3);
  EXPECT_EQ(boards_with_key(s, "solo"), 1);
  for (const auto& k : s.keys()) {
    if (k.key() == "cpu") {
      EXPECT_EQ(k.total(), 3);
      EXPECT_EQ(k.free(), 3);
    }
  }
  for (const auto& b : s.boards()) {
    EXPECT_FALSE(b.device().cpu_model().empty());
    EXPECT_GT(b.device().cores(), 0);
  }
  // Started without --target, a board names its architecture and, on x86-64, the vector
  // features its CPU reports: kernels tuned on it use AVX2 / AVX-512 where it has them.
  std::ifstream f("/proc/cpuinfo");
  std::stringstream cpuinfo;
  cpuinfo << f.rdbuf();
  bool avx2 = std::regex_search(cpuinfo.str(), std::regex("\\bavx2\\b"));
  for (const auto& b : s.boards()) {
    if (b.device().arch() != "x86_64") continue;
    EXPECT_EQ(b.target().find("+avx2") != std::string::npos, avx2) << b.target();
    EXPECT_NE(b.target().find("x86_64"), std::string::npos) << b.target();
  }
}

// The default target's features from /proc/cpuinfo's flags, under LLVM's names; none on other
// architectures (their baseline carries the vector unit: NEON on aarch64).
TEST(BoardTarget, DefaultsToTheCpusOwnFeatures) {
  const std::string avx512 =
      "processor\t: 0\nflags\t\t: fpu sse sse2 pni ssse3 fma sse4_1 sse4_2 popcnt avx f16c bmi1 avx2 bmi2 "
      "avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni\nprocessor\t: 1\nflags\t\t: fpu\n";
  EXPECT_EQ(farm::default_cpu_target("x86_64", avx512),
            "llvm -mtriple=x86_64-linux-gnu -mattr=+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+avx,+avx2,+fma,+f16c,+bmi,"
            "+bmi2,+avx512f,+avx512cd,+avx512bw,+avx512dq,+avx512vl,+avx512vnni");
  EXPECT_EQ(farm::default_cpu_target("x86_64", "flags : fpu sse sse2\n"), "llvm -mtriple=x86_64-linux-gnu");
  EXPECT_EQ(farm::default_cpu_target("x86_64", ""), "llvm -mtriple=x86_64-linux-gnu");
  EXPECT_EQ(farm::default_cpu_target("aarch64", "Features\t: fp asimd evtstrm crc32 cpuid\n"),
            "llvm -mtriple=aarch64-linux-gnu");
  // The tuner takes it as it is (canonical with LLVM's generic CPU): 16 float lanes with AVX-512.
  Target t = parse_target(farm::default_cpu_target("x86_64", avx512));
  EXPECT_EQ(t.vector_lanes(), 16) << t.str();
  EXPECT_EQ(parse_target(farm::default_cpu_target("x86_64", "flags : avx avx2 fma\n")).vector_lanes(), 8);
}

TEST_F(Farm, LeasesGoByPriorityThenFairShare) {
  FarmClient c(endpoint());
  auto holder = c.lease("solo", "holder", 0, 5000);
  std::mutex mu;
  std::vector<std::string> order;
  std::vector<std::thread> waiters;
  auto ask = [&](const std::string& name, const std::string& user, int priority) {
    waiters.emplace_back([&, name, user, priority] {
      FarmClient own(endpoint());
      auto lease = own.lease("solo", user, priority, 20000);
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(name);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    });  // the lease is released when `lease` goes out of scope
    std::this_thread::sleep_for(std::chrono::milliseconds(60));  // queue in this order
  };
  for (int i = 1; i <= 4; ++i) ask("A" + std::to_string(i), "alice", 0);
  ask("B1", "bob", 0);
  ask("C1", "carol", 5);
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) {
    for (const auto& k : s.keys()) if (k.key() == "solo") return k.pending() == 6;
    return false;
  }, 5000));
  holder->release();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(order, (std::vector<std::string>{"C1", "A1", "B1", "A2", "A3", "A4"}));
}

TEST_F(Farm, NothingFreeTimesOutCleanly) {
  FarmClient c(endpoint());
  auto held = c.lease("solo", "holder", 0, 5000);
  auto start = Clock::now();
  try {
    c.lease("solo", "other", 0, 300);
    FAIL() << "got a lease on a fully leased key";
  } catch (const FarmError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::DEADLINE_EXCEEDED) << e.what();
    EXPECT_NE(std::string(e.what()).find("all leased"), std::string::npos) << e.what();
  }
  double s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(s, 0.25);
  EXPECT_LT(s, 3.0);
  // A key no board has registered (a typo) fails at once, not after the wait ...
  start = Clock::now();
  try {
    c.lease("no-such-key", "other", 0, 60000);
    FAIL();
  } catch (const FarmError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::NOT_FOUND) << e.what();
    EXPECT_NE(std::string(e.what()).find("no board with key 'no-such-key' has registered"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("keys: cpu, solo"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  // ... unless the caller waits for boards to appear: then the wait runs out.
  try {
    c.lease("no-such-key", "other", 0, 100, 0, /*wait_for_boards=*/true);
    FAIL();
  } catch (const FarmError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::NOT_FOUND) << e.what();
    EXPECT_NE(std::string(e.what()).find("no free board within the wait timeout"), std::string::npos) << e.what();
  }
}

TEST_F(Farm, WaitingForBoardsOfANewKey) {
  FarmClient c(endpoint());
  std::unique_ptr<LeasedBoard> lease;
  std::thread waiter([&] { lease = c.lease("late", "patient", 0, 10000, 0, /*wait_for_boards=*/true); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto late = start_board(port_, "late");
  waiter.join();
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->measure(request("scale"), lease->upload(read_file(TF_KERNEL_GOOD), "good.so")).error(), pb::OK);
}

TEST_F(Farm, CancelledRequestLeavesTheQueueAtOnce) {
  FarmClient c(endpoint());
  auto held = c.lease("solo", "holder", 0, 5000);
  auto stub = pb::Tracker::NewStub(make_channel(endpoint().tracker, {}));
  grpc::ClientContext ctx;
  add_token(ctx, kToken);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));  // client gives up first
  pb::LeaseRequest req;
  req.set_key("solo");
  req.set_user("impatient");
  req.set_wait_timeout_ms(60000);
  pb::LeaseReply reply;
  EXPECT_EQ(stub->RequestLease(&ctx, req, &reply).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) {
    for (const auto& k : s.keys()) if (k.key() == "solo") return k.pending() == 0;
    return true;
  }, 1000));
}

TEST_F(Farm, MeasuresAKernelAndChecksItsOutput) {
  FarmClient c(endpoint());
  auto board = c.lease("cpu", "tester", 0, 5000);
  std::string module = board->upload(read_file(TF_KERNEL_GOOD), "good.so");
  pb::MeasureReply r = board->measure(request("scale"), module);
  ASSERT_EQ(r.error(), pb::OK) << r.error_msg();
  EXPECT_EQ(r.samples_s_size(), 3);
  for (double s : r.samples_s()) EXPECT_GT(s, 0);
  ASSERT_EQ(r.outputs_size(), 1);
  std::vector<float> in(16);
  tf::fill_random(in.data(), 16, 5);
  const float* out = reinterpret_cast<const float*>(r.outputs(0).values().data());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], 2 * in[i]);
  board->free(module);
  EXPECT_THROW(board->measure(request("scale"), module), FarmError);  // freed
}

// A second module under the lease, timed with the kernel's samples interleaved (run
// --baseline); the reply's outputs stay the kernel's.
TEST_F(Farm, ABaselineModuleIsTimedAlongside) {
  FarmClient c(endpoint());
  auto board = c.lease("cpu", "tester", 0, 5000);
  std::string module = board->upload(read_file(TF_KERNEL_GOOD), "good.so");
  std::string segv = board->upload(read_file(TF_KERNEL_SEGV), "segv.so");
  pb::MeasureRequest req = request("scale");
  req.set_baseline_module_id(segv);
  req.set_baseline_function("crash");
  pb::MeasureReply r = board->measure(req, module);
  EXPECT_EQ(r.error(), pb::RUNTIME_ERROR) << "a crashing baseline fails the measurement";

  std::string twice = board->upload(read_file(TF_KERNEL_GOOD), "good2.so");
  req.set_baseline_module_id(twice);
  req.set_baseline_function("scale");
  r = board->measure(req, module);
  ASSERT_EQ(r.error(), pb::OK) << r.error_msg();
  EXPECT_EQ(r.samples_s_size(), 3);
  EXPECT_EQ(r.baseline_samples_s_size(), 3);
  EXPECT_GE(r.baseline_number(), 1);
  ASSERT_EQ(r.outputs_size(), 1);
  std::vector<float> in(16);
  tf::fill_random(in.data(), 16, 5);
  const float* out = reinterpret_cast<const float*>(r.outputs(0).values().data());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], 2 * in[i]);

  req.set_baseline_function("no_such_function");
  r = board->measure(req, module);
  EXPECT_EQ(r.error(), pb::LOAD_ERROR);
  EXPECT_NE(r.error_msg().find("baseline: "), std::string::npos) << r.error_msg();

  auto expect_refused = [&](pb::MeasureRequest bad, grpc::StatusCode code, const std::string& message) {
    try {
      board->measure(bad, module);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const FarmError& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  pb::MeasureRequest bad = req;
  bad.set_baseline_module_id("../../etc/passwd");
  expect_refused(bad, grpc::StatusCode::INVALID_ARGUMENT, "bad baseline module id '../../etc/passwd'");
  bad.set_baseline_module_id("");
  expect_refused(bad, grpc::StatusCode::INVALID_ARGUMENT, "bad baseline module id ''");
  bad.set_baseline_module_id("never-uploaded.so");
  expect_refused(bad, grpc::StatusCode::NOT_FOUND, "no module never-uploaded.so");
  bad = req;
  bad.set_baseline_function("rm -rf");
  expect_refused(bad, grpc::StatusCode::INVALID_ARGUMENT, "baseline function name 'rm -rf'");
  // The baseline's outputs count against the memory limit too: 8 + 8 MiB fit 16 MiB, 8 + 2 x 8 do not.
  bad = req;
  bad.set_memory_limit_bytes(16 << 20);
  for (int i = 0; i < 2; ++i) bad.mutable_args(i)->set_shape(0, 2 << 20);
  expect_refused(bad, grpc::StatusCode::INVALID_ARGUMENT, "arguments need 25165824 bytes, over the memory limit of 16777216");
}

TEST_F(Farm, MisbehavingKernelsGetErrorCodesAndTheBoardServesOn) {
  FarmClient c(endpoint());
  auto board = c.lease("cpu", "tester", 0, 5000);
  pb::MeasureReply r = board->measure(request("crash"), board->upload(read_file(TF_KERNEL_SEGV), "segv.so"));
  EXPECT_EQ(r.error(), pb::RUNTIME_ERROR);
  EXPECT_NE(r.error_msg().find("Segmentation fault"), std::string::npos) << r.error_msg();

  auto start = Clock::now();
  r = board->measure(request("hang", 1.0), board->upload(read_file(TF_KERNEL_HANG), "hang.so"));
  EXPECT_EQ(r.error(), pb::TIMEOUT) << r.error_msg();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);

  pb::MeasureRequest hog = request("hog");
  hog.set_memory_limit_bytes(256 << 20);
  r = board->measure(hog, board->upload(read_file(TF_KERNEL_ALLOC), "alloc.so"));
  EXPECT_EQ(r.error(), pb::MEMORY_LIMIT) << r.error_msg();

  r = board->measure(request("no_such_function"), board->upload(read_file(TF_KERNEL_GOOD), "good.so"));
  EXPECT_EQ(r.error(), pb::LOAD_ERROR);
  EXPECT_NE(r.error_msg().find("no_such_function"), std::string::npos) << r.error_msg();

  r = board->measure(request("scale"), board->upload(read_file(TF_KERNEL_GOOD), "good.so"));
  EXPECT_EQ(r.error(), pb::OK) << r.error_msg();
}

TEST_F(Farm, MalformedRequestsAreRejected) {
  FarmClient c(endpoint());
  auto board = c.lease("cpu", "tester", 0, 5000);
  std::string module = board->upload(read_file(TF_KERNEL_GOOD), "good.so");
  auto expect_invalid = [&](pb::MeasureRequest r, const std::string& message) {
    try {
      board->measure(r, module);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const FarmError& e) {
      EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  pb::MeasureRequest r = request("scale");
  r.set_repeat(0);
  expect_invalid(r, "repeat 0");
  r = request("scale");
  r.mutable_args(0)->set_shape(0, -4);
  expect_invalid(r, "dimension -4");
  r = request("scale");
  r.set_function("rm -rf");
  expect_invalid(r, "is not a C identifier");
  // Packed inputs (ArgSpec pack_dim / pack_block / min_elements) are bounded.
  r = request("scale");
  r.mutable_args(0)->set_pack_block(5000);
  expect_invalid(r, "pack_block 5000 is not in [1, 4096]");
  r = request("scale");
  r.mutable_args(0)->set_pack_block(4);
  r.mutable_args(0)->set_pack_dim(7);
  expect_invalid(r, "pack_dim 7 is not a dimension of a rank-");
  r = request("scale");
  r.mutable_args(r.args_size() - 1)->set_pack_block(4);
  expect_invalid(r, "an output cannot be packed");
  // Element types (ArgSpec dtype) are known ones, and typed arguments are never packed.
  r = request("scale");
  r.mutable_args(0)->set_dtype("float8");
  expect_invalid(r, "argument dtype 'float8' is not one of float32, int8, uint8, int32, float16, bfloat16, bfloat16x2, float16x2");
  r = request("scale");
  r.mutable_args(0)->set_dtype("float16");
  r.mutable_args(0)->set_pack_block(4);
  expect_invalid(r, "an argument of dtype float16 cannot be packed");
  r = request("scale");
  r.mutable_args(0)->set_dtype("int8");
  r.mutable_args(0)->set_pack_block(4);
  expect_invalid(r, "an argument of dtype int8 cannot be packed");
  r = request("scale");
  r.mutable_args(0)->set_min_elements(int64_t{1} << 40);
  expect_invalid(r, "min_elements 1099511627776 is out of range");
  r = request("scale");
  r.mutable_args(0)->set_min_elements(int64_t{1} << 32);
  expect_invalid(r, "over the memory limit");
  r = request("scale");
  r.set_timeout_s(1e9);
  expect_invalid(r, "timeout_s");
  r = request("scale");
  r.clear_args();
  expect_invalid(r, "1 to 5 arguments");
  r = request("scale");
  r.set_rewarm_ms(-1);
  expect_invalid(r, "rewarm_ms -1");
  // A compiled model names no function or arguments (the library describes them) and returns
  // digests, not values.
  r = request("scale");
  r.set_model(true);
  expect_invalid(r, "a model measurement names no function and no arguments");
  r.clear_args();
  r.set_function("");
  r.set_outputs(pb::OUTPUT_VALUES);
  expect_invalid(r, "returns its outputs' digests");
  // A kernel library taken for a model is the model's load error.
  r.set_outputs(pb::OUTPUT_DIGEST);
  pb::MeasureReply as_model = board->measure(r, module);
  EXPECT_EQ(as_model.error(), pb::LOAD_ERROR);
  EXPECT_NE(as_model.error_msg().find("not a tunefarm model library (no tf_model_run)"), std::string::npos)
      << as_model.error_msg();
  // An upload whose digest does not match.
  auto stub = pb::Board::NewStub(make_channel(board->lease().address(), {}));
  grpc::ClientContext ctx;
  add_token(ctx, kToken);
  pb::UploadRequest up;
  up.set_lease_token(board->lease().lease_token());
  up.set_name("x.so");
  up.set_data("not what the digest says");
  up.set_sha256(sha256_hex("something else"));
  pb::UploadReply reply;
  grpc::Status s = stub->Upload(&ctx, up, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("sha256"), std::string::npos);
}

TEST_F(Farm, NoTokenWrongTokenBadLeaseAreRefusedAndNothingRuns) {
  FarmClient c(endpoint());
  // The tracker: no token, wrong token.
  for (const std::string& token : {std::string(), std::string("wrong-token-wrong-token")}) {
    FarmClient bad({endpoint().tracker, token, {}});
    try {
      bad.summary();
      FAIL() << "summary without the right token";
    } catch (const FarmError& e) {
      EXPECT_EQ(e.code(), grpc::StatusCode::UNAUTHENTICATED) << e.what();
    }
  }
  Daemon& solo = *boards_[3];
  const std::string marker = "tunefarm-test-marker-kernel-ran";
  auto runs = [&] {
    std::string log = solo.log();
    size_t n = 0;
    for (size_t at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) ++n;
    return n;
  };
  size_t runs_before = runs();
  std::string address, old_token, module;
  {
    auto first = c.lease("solo", "first", 0, 5000);
    address = first->lease().address();
    old_token = first->lease().lease_token();
    module = first->upload(read_file(TF_KERNEL_MARKER), "marker.so");
  }  // released
  auto board_stub = pb::Board::NewStub(make_channel(address, {}));
  auto measure = [&](const std::string& token, const std::string& lease) {
    grpc::ClientContext ctx;
    add_token(ctx, token);
    pb::MeasureRequest r = request("mark");
    r.set_lease_token(lease);
    r.set_module_id(module);
    pb::MeasureReply reply;
    return board_stub->Measure(&ctx, r, &reply);
  };
  EXPECT_EQ(measure("", old_token).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(measure("wrong-token-wrong-token", old_token).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(measure(kToken, old_token).error_code(), grpc::StatusCode::PERMISSION_DENIED);  // released lease
  EXPECT_EQ(measure(kToken, "").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Another user's lease on the same board sees nothing of the first user's uploads.
  auto second = c.lease("solo", "second", 0, 5000);
  EXPECT_EQ(measure(kToken, second->lease().lease_token()).error_code(), grpc::StatusCode::NOT_FOUND);
  // A lease of another board is refused by this one.
  auto other = c.lease("cpu", "third", 0, 5000);
  EXPECT_EQ(measure(kToken, other->lease().lease_token()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // An expired lease.
  second.reset();
  auto brief = c.lease("solo", "brief", 0, 5000, /*lease_ms=*/200);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(measure(kToken, brief->lease().lease_token()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(runs(), runs_before) << "a refused request ran the kernel";
  // Control: with a valid lease the same kernel does run and leaves its marker.
  brief.reset();
  auto valid = c.lease("solo", "valid", 0, 5000);
  std::string own = valid->upload(read_file(TF_KERNEL_MARKER), "marker.so");
  EXPECT_EQ(valid->measure(request("mark"), own).error(), pb::OK);
  for (int i = 0; i < 50 && runs() == runs_before; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GT(runs(), runs_before) << "the marker kernel cannot show that it ran";
}

// The hostile kernel (kernels/escape.c) tries what an attacker's upload would; the sandbox
// refuses all of it but threads. Where Landlock is missing, the file checks cannot hold and
// are skipped with a note (the board says so at start-up too).
TEST_F(Farm, TheSandboxContainsAHostileKernel) {
  FarmClient c(endpoint());
  // Another lease's upload sits on the same board while the hostile kernel runs.
  auto board = c.lease("solo", "attacker", 0, 5000);
  std::string module = board->upload(read_file(TF_KERNEL_ESCAPE), "escape.so");
  pb::MeasureRequest r = request("escape");
  r.set_repeat(1);
  pb::MeasureReply reply = board->measure(r, module);
  ASSERT_EQ(reply.error(), pb::OK) << reply.error_msg();
  ASSERT_EQ(reply.outputs_size(), 1);
  std::vector<float> out(16);
  ASSERT_EQ(reply.outputs(0).values().size(), 64u);
  std::memcpy(out.data(), reply.outputs(0).values().data(), 64);
  ASSERT_EQ(out[15], 42.0f) << "the hostile kernel did not run to its end";
  EXPECT_EQ(out[2], 0) << "it started a process";
  EXPECT_EQ(out[3], 0) << "it opened a socket";
  EXPECT_EQ(out[5], 0) << "it signalled the board";
  EXPECT_EQ(out[7], 0) << "it left its process group";
  EXPECT_EQ(out[8], 1) << "threads must keep working";
  EXPECT_EQ(out[10], 0) << "it executed a program";
  std::string info = board->info().sandbox();
  if (info.find("landlock ABI") == std::string::npos) {
    GTEST_SKIP() << "no Landlock on this kernel: file access is not confined (" << info << ")";
  }
  EXPECT_EQ(out[0], 0) << "it read the board's command line";
  EXPECT_EQ(out[1], 0) << "it read the token file";
  EXPECT_EQ(out[4], 0) << "it listed the board's work directory";
  EXPECT_EQ(out[6], 0) << "it created a file";
  EXPECT_EQ(out[9], 0) << "it read /etc/passwd";
}

TEST_F(Farm, KernelThatExitsWhileLoadingIsAnError) {
  FarmClient c(endpoint());
  auto board = c.lease("solo", "tester", 0, 5000);
  pb::MeasureReply r = board->measure(request("scale"), board->upload(read_file(TF_KERNEL_EXIT0), "exit0.so"));
  EXPECT_EQ(r.error(), pb::RUNTIME_ERROR) << r.error_msg();
  EXPECT_EQ(r.samples_s_size(), 0);
  EXPECT_NE(r.error_msg().find("without a reply"), std::string::npos) << r.error_msg();
}

TEST_F(Farm, UploadsThatAreNotCompleteLibrariesAreRefused) {
  FarmClient c(endpoint());
  auto board = c.lease("solo", "tester", 0, 5000);
  std::string good = read_file(TF_KERNEL_GOOD);
  auto refused = [&](const std::string& data, const std::string& why) {
    try {
      board->upload(data, "bad.so");
      ADD_FAILURE() << "accepted an upload that is " << why;
    } catch (const FarmError& e) {
      EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused(good.substr(0, good.size() / 2), "truncated");
  refused(good.substr(0, 40), "truncated");
  refused("#!/bin/sh\necho hello\n", "not an ELF file");
  std::string exec_type = good;
  exec_type[16] = ET_EXEC;  // e_type
  exec_type[17] = 0;
  refused(exec_type, "not a shared library");
  std::string other_arch = good;
  other_arch[18] = static_cast<char>(0xb7);  // e_machine = EM_AARCH64 (x86_64 boards) ...
  other_arch[19] = 0;
  if (sizeof(void*) == 8 && static_cast<unsigned char>(good[18]) == 0xb7) other_arch[18] = 62;  // ... or EM_X86_64 on aarch64
  refused(other_arch, "built for");
}

TEST_F(Farm, TheBoardsLimitsAreCeilings) {
  FarmClient c(endpoint());
  auto board = c.lease("solo", "tester", 0, 5000);
  EXPECT_GT(board->info().max_memory_limit_bytes(), 0);
  EXPECT_GT(board->info().default_timeout_s(), 0);
  std::string module = board->upload(read_file(TF_KERNEL_GOOD), "good.so");
  auto status = [&](pb::MeasureRequest r) {
    grpc::ClientContext ctx;
    add_token(ctx, kToken);
    r.set_lease_token(board->lease().lease_token());
    r.set_module_id(module);
    pb::MeasureReply reply;
    auto stub = pb::Board::NewStub(make_channel(board->lease().address(), {}));
    return stub->Measure(&ctx, r, &reply);
  };
  pb::MeasureRequest big = request("scale");
  big.set_memory_limit_bytes(board->info().max_memory_limit_bytes() * 3);
  grpc::Status s = status(big);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("exceeds this board's limit"), std::string::npos) << s.error_message();
  using Setter = void (pb::MeasureRequest::*)(double);
  const std::pair<const char*, Setter> fields[] = {
      {"timeout_s", &pb::MeasureRequest::set_timeout_s},
      {"min_repeat_ms", &pb::MeasureRequest::set_min_repeat_ms},
      {"cooldown_ms", &pb::MeasureRequest::set_cooldown_ms},
      {"cut_slower_than_s", &pb::MeasureRequest::set_cut_slower_than_s},
      {"min_warmup_ms", &pb::MeasureRequest::set_min_warmup_ms}};
  for (double bad : {NAN, INFINITY, -INFINITY}) {
    for (const auto& [name, set] : fields) {
      pb::MeasureRequest r = request("scale");
      (r.*set)(bad);
      EXPECT_EQ(status(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name << " " << bad;
    }
  }
  pb::MeasureRequest negative = request("scale");
  negative.set_cut_slower_than_s(-1);
  s = status(negative);
  EXPECT_NE(s.error_message().find("cut_slower_than_s -1"), std::string::npos) << s.error_message();
  EXPECT_TRUE(status(request("scale")).ok());  // the control
}

TEST_F(Farm, ALeaseInUseIsRenewed) {
  FarmClient c(endpoint());
  auto board = c.lease("solo", "busy", 0, 5000, /*lease_ms=*/600);
  std::string module = board->upload(read_file(TF_KERNEL_GOOD), "good.so");
  // Keep using it for three times its duration: every verified call renews it.
  for (int i = 0; i < 9; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    pb::MeasureReply r = board->measure(request("scale"), module);
    ASSERT_EQ(r.error(), pb::OK) << "call " << i << ": " << r.error_msg();
  }
}

TEST_F(Farm, RealKernelThroughTheCommandLine) {
  std::string dir = temp_dir();
  std::string so = dir + "/mm.so";
  std::string compile = std::string(TF_TUNEFARM) + " compile -w 'matmul(M=33,N=17,K=9,epilogue=bias_relu)' -o " + so +
                        " --no-db 2>/dev/null";
  ASSERT_EQ(std::system(compile.c_str()), 0);
  std::string measure = std::string(TF_TUNEFARM) + " farm measure --tracker " + endpoint().tracker +
                        " --token-file " + token_file() + " --key cpu --module " + so + " --db " + dir +
                        "/farm.db --json > " + dir + "/measure.json";
  ASSERT_EQ(std::system(measure.c_str()), 0) << read_file(dir + "/measure.json");
  std::string out = read_file(dir + "/measure.json");
  EXPECT_NE(out.find("\"check\": \"ok\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"error_code\": \"ok\""), std::string::npos) << out;

  // --baseline: another config of the workload timed alongside on the same board.
  std::string base = dir + "/mm_base.so", other = dir + "/other.so";
  ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w 'matmul(M=33,N=17,K=9,epilogue=bias_relu)' -o " + base +
                         " --no-db --config '{\"tile_m\":1,\"tile_n\":1}' 2>/dev/null").c_str()),
            0);
  ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w 'matmul(M=8,N=8,K=8)' -o " + other + " --no-db 2>/dev/null").c_str()), 0);
  std::string with_base = std::string(TF_TUNEFARM) + " farm measure --tracker " + endpoint().tracker + " --token-file " +
                          token_file() + " --key cpu --module " + so +
                          " --no-db --json --repeat 4 --min-repeat-ms 5 --warmup-ms 0 --timeout-s 60 --baseline ";
  ASSERT_EQ(std::system((with_base + base + " > " + dir + "/base.json").c_str()), 0) << read_file(dir + "/base.json");
  nlohmann::json j = nlohmann::json::parse(read_file(dir + "/base.json"));
  EXPECT_EQ(j["check"], "ok");
  EXPECT_EQ(j["samples_s"].size(), 4u);
  EXPECT_EQ(j["baseline"]["samples_s"].size(), 4u);
  EXPECT_GT(j["speedup"].get<double>(), 0);
  int rc = std::system((with_base + other + " > " + dir + "/other.out 2>&1").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_NE(read_file(dir + "/other.out").find("computes matmul(M=8,N=8,K=8,epilogue=none), not matmul(M=33"),
            std::string::npos)
      << read_file(dir + "/other.out");
  rc = std::system((with_base + dir + "/missing.so > " + dir + "/missing.out 2>&1").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_NE(read_file(dir + "/missing.out").find("baseline library"), std::string::npos) << read_file(dir + "/missing.out");
}

// A matmul of constant weights (const_b=1) takes B packed: on a farm board too, the tuner's
// runner and `farm measure` (with a baseline packing it in other blocks) pass the packing of
// each library's description, the board packs the seeded B, and the output checks. A
// description that packs an argument the workload does not allow is that candidate's
// LOAD_ERROR (the runner's worker thread goes on), and farm measure's exit 2.
TEST_F(Farm, ConstantWeightsArePassedPackedToBoards) {
  std::string dir = temp_dir(), a = dir + "/packed16.so", b = dir + "/packed32.so";
  const std::string w = "'matmul(M=24,N=20,K=12,const_b=1)'";
  for (const auto& [so, tile] : {std::pair{a, 16}, std::pair{b, 32}}) {
    ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w " + w + " -o " + so +
                           " --no-db --config '{\"pack_b\":true,\"tile_n\":" + std::to_string(tile) + "}' 2>/dev/null")
                              .c_str()),
              0);
  }
  FarmRunnerOptions fo;
  fo.farm = endpoint();
  fo.key = "cpu";
  fo.wait_ms = 5000;
  FarmRunner runner(fo);
  MeasureContext ctx(build_op(parse_workload("matmul(M=24,N=20,K=12,const_b=1)")), MeasureOptions{});
  BuildResult good;
  good.so_path = a;
  std::vector<RunResult> results = runner.run(ctx, {good});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].ok()) << results[0].error_msg;
  EXPECT_EQ(results[0].correctness, "ok");
  std::string measure = std::string(TF_TUNEFARM) + " farm measure --tracker " + endpoint().tracker + " --token-file " +
                        token_file() + " --key cpu --no-db --json --repeat 2 --min-repeat-ms 1 --module " + a +
                        " --baseline " + b + " > " + dir + "/out.txt 2>&1";
  ASSERT_EQ(std::system(measure.c_str()), 0) << read_file(dir + "/out.txt");
  EXPECT_EQ(nlohmann::json::parse(read_file(dir + "/out.txt"))["check"], "ok");

  nlohmann::json side = nlohmann::json::parse(read_file(b + ".json"));
  side["packed"][0]["arg"] = 2;  // the output
  std::ofstream(b + ".json") << side.dump();
  BuildResult bad;
  bad.so_path = b;
  results = runner.run(ctx, {bad, good});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].error, pb::LOAD_ERROR);
  EXPECT_NE(results[0].error_msg.find("kernel description packs argument 2"), std::string::npos) << results[0].error_msg;
  EXPECT_TRUE(results[1].ok()) << results[1].error_msg;
  measure = std::string(TF_TUNEFARM) + " farm measure --tracker " + endpoint().tracker + " --token-file " + token_file() +
            " --key cpu --no-db --module " + b + " > " + dir + "/bad.txt 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(measure.c_str())), 2) << read_file(dir + "/bad.txt");
  EXPECT_NE(read_file(dir + "/bad.txt").find("kernel description packs argument 2"), std::string::npos)
      << read_file(dir + "/bad.txt");
}

// An int8 kernel (uint8 x int8 -> int32): the board fills its inputs as their types and
// returns the int32 output, which the tuner checks exactly against the reference.
TEST_F(Farm, Int8KernelsAreFilledByTypeAndCheckedExactly) {
  const std::string spec = "matmul(M=24,N=36,K=18,dtype=uint8,weight_dtype=int8)";
  std::string so = temp_dir() + "/int8.so";
  ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w '" + spec + "' -o " + so + " --no-db 2>/dev/null").c_str()), 0);
  FarmRunnerOptions fo;
  fo.farm = endpoint();
  fo.key = "cpu";
  fo.wait_ms = 5000;
  FarmRunner runner(fo);
  MeasureContext ctx(build_op(parse_workload(spec)), MeasureOptions{});
  EXPECT_EQ(ctx.request("matmul").args(0).dtype(), "uint8");
  EXPECT_EQ(ctx.request("matmul").args(2).dtype(), "int32");
  BuildResult b;
  b.so_path = so;
  std::vector<RunResult> results = runner.run(ctx, {b});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].ok()) << results[0].error_msg;
  EXPECT_EQ(results[0].correctness, "ok");
  EXPECT_EQ(results[0].max_abs_error, 0.0);
  // A CPU board may be this machine: the tuner builds nothing while it measures.
  EXPECT_FALSE(runner.overlaps_builds()) << runner.board_target();
  // The same library measured as the float workload of that shape reads its bytes as other
  // types: a wrong answer, not a pass.
  MeasureContext as_float(build_op(parse_workload("matmul(M=24,N=36,K=18)")), MeasureOptions{});
  results = runner.run(as_float, {b});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].error, pb::WRONG_ANSWER) << results[0].error_msg;
}

// bfloat16 and float16 kernels with prepacked weights (matmul_bf16 and matmul_fp16,
// const_b=1: what --precision bf16 and fp16 models run): the board fills B's words with pairs
// of the type, packs them as the sidecar says, and the tuner's check passes against the
// reference that reads the same pairs.
TEST_F(Farm, HalfFloatKernelsGetPairsAndPackedWeights) {
  FarmRunnerOptions fo;
  fo.farm = endpoint();
  fo.key = "cpu";
  fo.wait_ms = 5000;
  FarmRunner runner(fo);
  for (const auto& [op, word] : {std::pair{"matmul_bf16", "bfloat16x2"}, std::pair{"matmul_fp16", "float16x2"}}) {
    const std::string spec = std::string(op) + "(M=20,N=40,K=27,const_b=1)";
    std::string so = temp_dir() + "/" + op + ".so";
    ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w '" + spec + "' -o " + so + " --no-db 2>/dev/null").c_str()), 0);
    MeasureContext ctx(build_op(parse_workload(spec)), MeasureOptions{});
    EXPECT_EQ(ctx.request(op).args(1).dtype(), word);
    EXPECT_EQ(ctx.request(op).args(0).dtype(), "");
    BuildResult b;
    b.so_path = so;
    std::vector<RunResult> results = runner.run(ctx, {b});
    ASSERT_EQ(results.size(), 1u);
    EXPECT_TRUE(results[0].ok()) << op << ": " << results[0].error_msg;
    EXPECT_EQ(results[0].correctness, "ok") << op;
  }
}

TEST(FarmFailures, BoardKilledMidMeasurement) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  auto victim = start_board(port, "victim");
  auto survivor = start_board(port, "survivor");
  FarmEndpoint ep{"127.0.0.1:" + std::to_string(port), kToken, {}};
  FarmClient c(ep);
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 2; }, 10000));
  auto board = c.lease("victim", "tester", 0, 5000);
  std::string module = board->upload(read_file(TF_KERNEL_HANG), "hang.so");
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    victim->stop(SIGKILL);
  });
  auto start = Clock::now();
  try {
    board->measure(request("hang", 60), module);
    ADD_FAILURE() << "a measurement on a dead board succeeded";
  } catch (const FarmError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::UNAVAILABLE) << e.what();
  }
  killer.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0) << "the error was not prompt";
  // The hanging kernel died with its board (regression: it used to spin on, orphaned).
  for (int i = 0; i < 100 && orphaned_runners() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(orphaned_runners(), 0);
  // Dropped after the heartbeat timeout (1 s), its lease with it.
  EXPECT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "victim") == 0; }, 5000));
  // The other board keeps working.
  auto other = c.lease("survivor", "tester", 0, 5000);
  pb::MeasureReply r = other->measure(request("scale"), other->upload(read_file(TF_KERNEL_GOOD), "good.so"));
  EXPECT_EQ(r.error(), pb::OK) << r.error_msg();
}

TEST(FarmLeases, AnIdleLeaseExpiresAndItsUploadsAreDeleted) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0);
  std::string work = temp_dir() + "/janitor-work";
  fs::create_directories(work);
  // The board looks for ended leases every 100 ms: those checks must not renew a lease.
  auto board = start_board(port, "idle", {"--lease-check-ms", "100", "--work-dir", work});
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 1; }, 10000));
  auto lease = c.lease("idle", "sleepy", 0, 5000, /*lease_ms=*/800);
  std::string module = lease->upload(read_file(TF_KERNEL_GOOD), "good.so");
  auto lease_dirs = [&] {
    int n = 0;
    for (const auto& e : fs::recursive_directory_iterator(work)) n += e.path().filename().string().rfind("lease-", 0) == 0;
    return n;
  };
  EXPECT_EQ(lease_dirs(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // idle for 2.5 lease durations
  try {
    lease->measure(request("scale"), module);
    ADD_FAILURE() << "an idle lease outlived its duration";
  } catch (const FarmError& e) {
    // The client renews before measuring; the tracker no longer knows the lease.
    EXPECT_EQ(e.code(), grpc::StatusCode::NOT_FOUND) << e.what();
    EXPECT_NE(std::string(e.what()).find("expired"), std::string::npos) << e.what();
  }
  EXPECT_EQ(lease_dirs(), 0) << "the uploads of an ended lease are still on the board";
  EXPECT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards(0).state() == "free"; }, 2000));
}

TEST(FarmFailures, TrackerRestartBoardsComeBackByThemselves) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0);
  auto b1 = start_board(port, "cpu");
  auto b2 = start_board(port, "cpu");
  FarmEndpoint ep{"127.0.0.1:" + std::to_string(port), kToken, {}};
  FarmClient c(ep);
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 2; }, 10000));
  tracker->stop(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto again = start_tracker(port);  // same port, empty memory
  ASSERT_EQ(again->port(), port) << again->log();
  EXPECT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 2; }, 10000));
  auto lease = c.lease("cpu", "tester", 0, 5000);
  EXPECT_FALSE(lease->lease().lease_token().empty());
}

// Runs the tunefarm command line; returns its exit status (-1 when killed by a signal) and
// its stderr.
std::pair<int, std::string> run_cli(const std::string& args) {
  std::string err = temp_dir() + "/cli-stderr";
  int status = std::system((std::string(TF_TUNEFARM) + " " + args + " > /dev/null 2> " + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(err)};
}

// A matmul kernel library and its sidecar, compiled once.
std::string compiled_kernel() {
  static std::string so = [] {
    std::string path = temp_dir() + "/fault-mm.so";
    std::string cmd = std::string(TF_TUNEFARM) + " compile -w 'matmul(M=16,N=16,K=16)' --no-db -o " + path + " > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    return path;
  }();
  return so;
}

// Regression: a board killed with -9 stayed "free" until its heartbeat timed out and was
// handed out first, so every measurement in that window failed (0 of 8 seen). Now the first
// client to find it dead reports it, records board_lost and moves on to another board.
TEST(FarmFaults, ADeadBoardIsReportedAndTheNextBoardServes) {
  auto tracker = start_tracker(0, {"--board-timeout-ms", "60000"});  // the dead board stays listed
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  auto dead = start_board(port, "pair", {"--board-id", "a-dead"});
  auto alive = start_board(port, "pair", {"--board-id", "b-alive"});
  FarmEndpoint ep{"127.0.0.1:" + std::to_string(port), kToken, {}};
  FarmClient c(ep);
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 2; }, 10000));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  dead->stop(SIGKILL);
  std::string db = temp_dir() + "/dead-board.db";
  std::string measure = "farm measure --tracker " + ep.tracker + " --token-file " + token_file() + " --key pair --module " +
                        compiled_kernel() + " --db " + db + " --repeat 2 --min-repeat-ms 1";
  {
    // The live board is busy, so the dead one is the only free board: the tracker hands it
    // out, the client finds it dead, reports it, and waits for the live one. The live board
    // is freed only once the dead one is gone from the tracker (a fixed delay lost the race
    // on a loaded machine: the command line started after it and got the live board).
    // The tracker hands out the board heard from last; right after the kill that may still
    // be the dead one (its last heartbeat can be the newer), so a lease that lands on it is
    // held until the live board is leased too, then given back.
    auto busy = c.lease("pair", "other-user", 0, 5000);
    if (busy->lease().board_id() == "a-dead") {
      auto on_dead = std::move(busy);
      busy = c.lease("pair", "other-user", 0, 5000);
      on_dead->release();
    }
    ASSERT_EQ(busy->lease().board_id(), "b-alive");
    std::thread releaser([&] {
      FarmClient watcher(ep);
      wait_summary(watcher, [](const pb::SummaryReply& s) { return s.boards_size() == 1; }, 120000);
      busy->release();
    });
    auto [code, err] = run_cli(measure);
    releaser.join();
    EXPECT_EQ(code, 0) << err;
    EXPECT_NE(err.find("board a-dead at"), std::string::npos) << err;
    EXPECT_NE(err.find("trying another board"), std::string::npos) << err;
  }
  int ok = 0;
  for (int i = 0; i < 4; ++i) {
    auto [code, err] = run_cli(measure);
    ok += code == 0;
    EXPECT_EQ(code, 0) << err;
  }
  EXPECT_EQ(ok, 4);
  // The dead board was reported and dropped; the live one stays.
  pb::SummaryReply s = c.summary();
  ASSERT_EQ(s.boards_size(), 1);
  EXPECT_EQ(s.boards(0).board_id(), "b-alive");
  EXPECT_NE(tracker->log().find("board a-dead"), std::string::npos) << tracker->log();
  // ... and logged as BOARD_LOST in the database.
  auto [code, out] = run_cli("query stats --json --db " + db);
  EXPECT_EQ(code, 0) << out;
  std::string stats_file = temp_dir() + "/stats.json";
  std::system((std::string(TF_TUNEFARM) + " query stats --json --db " + db + " > " + stats_file).c_str());
  std::string stats = read_file(stats_file);
  EXPECT_NE(stats.find("\"board_lost\": 1"), std::string::npos) << stats;
}

TEST(FarmFaults, AFrozenBoardCostsItsLimitsNotMinutes) {
  auto tracker = start_tracker(0, {"--board-timeout-ms", "60000"});
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  auto board = start_board(port, "frozen", {"--timeout-s", "1"});
  FarmEndpoint ep{"127.0.0.1:" + std::to_string(port), kToken, {}};
  ep.transfer_slack_s = 2;
  FarmClient c(ep);
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 1; }, 10000));
  auto lease = c.lease("frozen", "tester", 0, 5000);
  std::string module = lease->upload(read_file(TF_KERNEL_GOOD), "good.so");
  EXPECT_EQ(lease->info().default_timeout_s(), 1);
  kill(board->pid(), SIGSTOP);
  auto start = Clock::now();
  try {
    pb::MeasureRequest r = request("scale");
    r.set_timeout_s(0);  // the board's default: 1 s
    lease->measure(r, module);
    ADD_FAILURE() << "a frozen board answered";
  } catch (const FarmError& e) {
    EXPECT_TRUE(e.board_lost()) << e.what();
  }
  double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(took, 10.0) << "the client waited " << took << " s for a board whose limit is 1 s";
  kill(board->pid(), SIGCONT);
}

// A request that sets no time limit gets one that covers what it asks for, not just the
// board's default (0.2 s here, while a warm-up and 3 samples of 400 ms take 1.2 s or more).
TEST(FarmFaults, TheDefaultTimeLimitCoversWhatWasAsked) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  auto board = start_board(port, "limits", {"--timeout-s", "0.2"});
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 1; }, 10000));
  auto lease = c.lease("limits", "tester", 0, 5000);
  std::string module = lease->upload(read_file(compiled_kernel()), "mm.so");  // matmul 16^3: ~0.1 us a call
  pb::MeasureRequest r;
  r.set_function("matmul");
  for (bool out : {false, false, true}) {
    pb::ArgSpec* a = r.add_args();
    a->add_shape(16);
    a->add_shape(16);
    a->set_is_output(out);
  }
  r.set_number(1);
  r.set_repeat(3);
  r.set_min_repeat_ms(400);
  pb::MeasureReply reply = lease->measure(r, module);
  EXPECT_EQ(reply.error(), pb::OK) << reply.error_msg();
  EXPECT_EQ(reply.samples_s_size(), 3);
  // An explicit limit is kept as given.
  r.set_timeout_s(0.5);
  reply = lease->measure(r, module);
  EXPECT_EQ(reply.error(), pb::TIMEOUT) << reply.error_msg();
}

TEST(FarmFaults, AResultStandsWhenTheLeaseCannotBeReleased) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  auto board = start_board(port, "restart");
  FarmEndpoint ep{"127.0.0.1:" + std::to_string(port), kToken, {}};
  FarmClient c(ep);
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 1; }, 10000));
  auto lease = c.lease("restart", "tester", 0, 5000);
  pb::MeasureReply r = lease->measure(request("scale"), lease->upload(read_file(TF_KERNEL_GOOD), "good.so"));
  EXPECT_EQ(r.error(), pb::OK);
  tracker->stop(SIGKILL);
  // With no tracker the board cannot verify the lease: it refuses, and says it is alive.
  try {
    lease->upload(read_file(TF_KERNEL_GOOD), "good.so");
    ADD_FAILURE() << "an upload without a tracker to verify the lease was accepted";
  } catch (const FarmError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::FAILED_PRECONDITION) << e.what();
    EXPECT_FALSE(e.board_lost()) << e.what();
  }
  auto again = start_tracker(port);
  ASSERT_EQ(again->port(), port) << again->log();
  EXPECT_FALSE(lease->release());  // the new tracker never heard of it; no exception
  EXPECT_EQ(r.samples_s_size(), 3);
}

TEST(FarmFaults, DaemonsOwnTheirPort) {
  auto first = start_tracker(0);
  int port = first->port();
  ASSERT_GT(port, 0) << first->log();
  auto second = start_tracker(port);
  for (int i = 0; i < 250 && !second->exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  int status = second->stop(SIGKILL);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << second->log();
  EXPECT_NE(second->log().find("cannot listen"), std::string::npos) << second->log();
  auto board = start_board(port, "k");
  int board_port = board->port();
  ASSERT_GT(board_port, 0) << board->log();
  auto twin = start_board(port, "k", {"--port", std::to_string(board_port)});
  for (int i = 0; i < 250 && !twin->exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  status = twin->stop(SIGKILL);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << twin->log();
  EXPECT_NE(twin->log().find("cannot listen"), std::string::npos) << twin->log();
}

TEST(FarmFaults, ALiveBoardsIdCannotBeTaken) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  FarmEndpoint ep{"127.0.0.1:" + std::to_string(port), kToken, {}};
  FarmClient c(ep);
  auto owner = start_board(port, "dup", {"--board-id", "same-id"});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 1; }, 10000));
  std::string owner_address = c.summary().boards(0).address();
  auto usurper = start_board(port, "dup", {"--board-id", "same-id"});
  EXPECT_TRUE(usurper->wait_for_log("is registered by a live board", 5000)) << usurper->log();
  EXPECT_EQ(c.summary().boards(0).address(), owner_address);
  // A raw registration with the (shared) token but not the owner's instance is refused too.
  auto stub = pb::Tracker::NewStub(make_channel(ep.tracker, {}));
  grpc::ClientContext ctx;
  add_token(ctx, kToken);
  pb::RegisterRequest reg;
  reg.set_board_id("same-id");
  reg.set_key("dup");
  reg.set_address("127.0.0.1:1");
  reg.set_instance("attacker");
  pb::RegisterReply reply;
  EXPECT_EQ(stub->Register(&ctx, reg, &reply).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  usurper->stop(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pb::SummaryReply s = c.summary();
  ASSERT_EQ(s.boards_size(), 1);
  EXPECT_EQ(s.boards(0).address(), owner_address);
  auto lease = c.lease("dup", "tester", 0, 5000);
  EXPECT_EQ(lease->measure(request("scale"), lease->upload(read_file(TF_KERNEL_GOOD), "good.so")).error(), pb::OK);
  // Once the owner is gone and timed out, the id is free again.
  lease.reset();
  owner->stop(SIGKILL);
  auto heir = start_board(port, "dup", {"--board-id", "same-id"});
  EXPECT_TRUE(heir->wait_for_log("registered with the tracker as same-id", 5000)) << heir->log();
}

TEST(FarmFaults, SigtermStopsAMeasurementPromptly) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  auto board = start_board(port, "term");
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 1; }, 10000));
  auto lease = c.lease("term", "tester", 0, 5000);
  std::string module = lease->upload(read_file(TF_KERNEL_HANG), "hang.so");
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    kill(board->pid(), SIGTERM);
  });
  auto start = Clock::now();
  try {
    lease->measure(request("hang", 60), module);
    ADD_FAILURE() << "a measurement of a hanging kernel succeeded";
  } catch (const FarmError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::UNAVAILABLE) << e.what();
    EXPECT_TRUE(e.board_lost());
  }
  stopper.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0) << "the client waited for the kernel";
  for (int i = 0; i < 150 && !board->exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(board->exited()) << "the board did not exit within 3 s of SIGTERM";
  for (int i = 0; i < 100 && orphaned_runners() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(orphaned_runners(), 0);
}

TEST(FarmFaults, StaleWorkDirectoriesAreRemovedAtStart) {
  std::string root = temp_dir() + "/work-root";
  fs::create_directories(root);
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  auto killed = start_board(port, "w", {"--work-dir", root});
  ASSERT_GT(killed->port(), 0) << killed->log();
  killed->stop(SIGKILL);
  auto dirs = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(root)) n += e.path().filename().string().rfind("tunefarm-board-", 0) == 0;
    return n;
  };
  ASSERT_EQ(dirs(), 1);  // what the killed board left
  auto next = start_board(port, "w", {"--work-dir", root});
  ASSERT_GT(next->port(), 0) << next->log();
  EXPECT_EQ(dirs(), 1) << "the dead board's directory is still there";  // only the new board's
  auto live = start_board(port, "w", {"--work-dir", root});
  ASSERT_GT(live->port(), 0) << live->log();
  EXPECT_EQ(dirs(), 2) << "a live board's directory was removed";
}

// Boards and clients with different tokens: a client cannot register a board.
TEST(FarmSecurity, BoardsAndClientsHoldDifferentTokens) {
  std::string board_token = temp_dir() + "/board-token";
  std::ofstream(board_token) << "board-token-fedcba9876543210\n";
  fs::permissions(board_token, fs::perms::owner_read | fs::perms::owner_write);
  auto tracker = start_tracker(0, {"--board-token-file", board_token});
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  std::string addr = "127.0.0.1:" + std::to_string(port);
  auto stub = pb::Tracker::NewStub(make_channel(addr, {}));
  grpc::ClientContext ctx;
  add_token(ctx, kToken);  // the clients' token
  pb::RegisterRequest reg;
  reg.set_board_id("fake");
  reg.set_key("k");
  reg.set_address("127.0.0.1:1");
  pb::RegisterReply reply;
  EXPECT_EQ(stub->Register(&ctx, reg, &reply).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // A board with the clients' token is refused; with the board token it joins, and clients
  // (client token) use it.
  auto impostor = start_board(port, "k");
  EXPECT_TRUE(impostor->wait_for_log("refused to register", 5000)) << impostor->log();
  auto board = start_board(port, "k", {"--token-file", board_token, "--client-token-file", token_file()});
  FarmClient c({addr, kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 1; }, 10000)) << board->log();
  auto lease = c.lease("k", "tester", 0, 5000);
  EXPECT_EQ(lease->measure(request("scale"), lease->upload(read_file(TF_KERNEL_GOOD), "good.so")).error(), pb::OK);
  // The board token is no client token.
  FarmClient as_board({addr, "board-token-fedcba9876543210", {}});
  EXPECT_THROW(as_board.summary(), FarmError);
}

TEST(FarmSecurity, TokenFilesReadableByOthersAreWarnedAbout) {
  std::string open_token = temp_dir() + "/open-token";
  std::ofstream(open_token) << kToken << "\n";
  fs::permissions(open_token, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  Daemon d({TF_TRACKER, "--port", "0", "--token-file", open_token}, temp_dir() + "/open-token.log");
  EXPECT_TRUE(d.wait_for_log("is accessible by others (mode 0644)", 5000)) << d.log();
  EXPECT_GT(d.port(), 0) << d.log();
}

TEST(FarmCli, MistakesExitTwoAndNameTheProblem) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  std::string tr = " --tracker 127.0.0.1:" + std::to_string(port);
  std::string wrong = temp_dir() + "/wrong-token";
  std::ofstream(wrong) << "wrong-token-0123456789\n";
  fs::permissions(wrong, fs::perms::owner_read | fs::perms::owner_write);
  auto [code, err] = run_cli("farm status" + tr + " --token-file " + wrong);
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("UNAUTHENTICATED"), std::string::npos) << err;
  std::tie(code, err) = run_cli("farm measure" + tr + " --token-file " + token_file() + " --key nosuchkey --wait-ms 100 --no-db --module " +
                                compiled_kernel());
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("no board with key 'nosuchkey'"), std::string::npos) << err;
  // A directory, a truncated library, sidecars that lie.
  std::tie(code, err) = run_cli("farm measure" + tr + " --key k --no-db --module " + temp_dir());
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("is a directory"), std::string::npos) << err;
  std::string dir = temp_dir() + "/sidecars";
  fs::create_directories(dir);
  std::string lib = read_file(compiled_kernel());
  std::string meta = read_file(compiled_kernel() + ".json");
  auto write_kernel = [&](const std::string& name, const std::string& so, const std::string& json) {
    std::ofstream(dir + "/" + name, std::ios::binary) << so;
    std::ofstream(dir + "/" + name + ".json") << json;
    return dir + "/" + name;
  };
  std::string truncated = write_kernel("truncated.so", lib.substr(0, lib.size() / 3), meta);
  std::tie(code, err) = run_cli("farm measure" + tr + " --key k --no-db --module " + truncated);
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  std::string bigger = std::regex_replace(meta, std::regex("M=16"), "M=4096");
  std::tie(code, err) = run_cli("farm measure" + tr + " --key k --no-db --module " + write_kernel("bigger.so", lib, bigger));
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("are not those of its workload"), std::string::npos) << err;
  std::string typed = std::regex_replace(meta, std::regex("\"function\": \"matmul\""), "\"function\": 7");
  std::tie(code, err) = run_cli("farm measure" + tr + " --key k --no-db --module " + write_kernel("typed.so", lib, typed));
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("\"function\" is number, not a string"), std::string::npos) << err;
  std::string deep = "{\"args\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  std::tie(code, err) = run_cli("farm measure" + tr + " --key k --no-db --module " + write_kernel("deep.so", lib, deep));
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("nested deeper than 64"), std::string::npos) << err;
}

// Certificates for the TLS tests, made with the openssl command.
struct Pki {
  std::string ca, server_cert, server_key, client_cert, client_key;
};

Pki make_pki() {
  std::string d = temp_dir() + "/pki";
  fs::create_directories(d);
  std::string script =
      "cd " + d + " && set -e && "
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=tunefarm-test-ca 2>/dev/null && "
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext && "
      "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 "
      "-extfile san.ext 2>/dev/null && "
      "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=tuner 2>/dev/null && "
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2 2>/dev/null";
  EXPECT_EQ(std::system(script.c_str()), 0);
  return {d + "/ca.pem", d + "/server.pem", d + "/server.key", d + "/client.pem", d + "/client.key"};
}

// A server certificate from the test CA for `san` (e.g. "IP:127.0.0.1"); returns {cert, key}.
std::pair<std::string, std::string> server_cert_for(const Pki& pki, const std::string& name, const std::string& san) {
  std::string d = fs::path(pki.ca).parent_path().string();
  std::string script = "cd " + d + " && set -e && printf 'subjectAltName=" + san + "\\n' > " + name + ".ext && " +
                       "openssl req -newkey rsa:2048 -nodes -keyout " + name + ".key -out " + name +
                       ".csr -subj /CN=" + name + " 2>/dev/null && openssl x509 -req -in " + name +
                       ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -out " + name + ".pem -days 2 -extfile " + name +
                       ".ext 2>/dev/null";
  EXPECT_EQ(std::system(script.c_str()), 0);
  return {d + "/" + name + ".pem", d + "/" + name + ".key"};
}

// Regression: clients verified every server as "localhost", so a correct certificate for
// 127.0.0.1 or tracker.example was refused and any certificate for localhost was accepted
// for any server. Now the name is the host connected to, IP SANs included.
TEST(FarmTls, TheNameConnectedToIsVerified) {
  Pki pki = make_pki();
  auto summary_ok = [&](const std::string& addr, const std::string& server_name = "") {
    try {
      FarmClient({addr, kToken, {"", "", pki.ca, server_name}}).summary();
      return true;
    } catch (const FarmError&) {
      return false;
    }
  };
  auto [ip_cert, ip_key] = server_cert_for(pki, "ip-only", "IP:127.0.0.1");
  auto ip = start_tracker(0, {"--tls-cert", ip_cert, "--tls-key", ip_key});
  int port = ip->port();
  ASSERT_GT(port, 0) << ip->log();
  EXPECT_TRUE(summary_ok("127.0.0.1:" + std::to_string(port)));
  EXPECT_FALSE(summary_ok("localhost:" + std::to_string(port))) << "a certificate for 127.0.0.1 passed as localhost";

  auto [dns_cert, dns_key] = server_cert_for(pki, "tracker-example", "DNS:tracker.example");
  auto dns = start_tracker(0, {"--tls-cert", dns_cert, "--tls-key", dns_key});
  port = dns->port();
  ASSERT_GT(port, 0) << dns->log();
  EXPECT_FALSE(summary_ok("127.0.0.1:" + std::to_string(port))) << "a certificate for tracker.example passed as 127.0.0.1";
  EXPECT_TRUE(summary_ok("127.0.0.1:" + std::to_string(port), "tracker.example")) << "the explicit override failed";

  auto [lh_cert, lh_key] = server_cert_for(pki, "localhost-only", "DNS:localhost");
  auto lh = start_tracker(0, {"--tls-cert", lh_cert, "--tls-key", lh_key});
  port = lh->port();
  ASSERT_GT(port, 0) << lh->log();
  EXPECT_FALSE(summary_ok("127.0.0.1:" + std::to_string(port))) << "a localhost certificate passed for 127.0.0.1";
  EXPECT_TRUE(summary_ok("localhost:" + std::to_string(port)));
}

TEST(FarmTls, ServerTlsAndMutualTls) {
  Pki pki = make_pki();
  auto tracker = start_tracker(0, {"--tls-cert", pki.server_cert, "--tls-key", pki.server_key});
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  std::string addr = "127.0.0.1:" + std::to_string(port);
  EXPECT_THROW(FarmClient({addr, kToken, {}}).summary(), FarmError);  // plain text to a TLS server
  EXPECT_NO_THROW(FarmClient({addr, kToken, {"", "", pki.ca, ""}}).summary());

  auto mutual = start_tracker(0, {"--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-ca", pki.ca});
  int mport = mutual->port();
  ASSERT_GT(mport, 0) << mutual->log();
  std::string maddr = "127.0.0.1:" + std::to_string(mport);
  EXPECT_THROW(FarmClient({maddr, kToken, {"", "", pki.ca, ""}}).summary(), FarmError);  // no client certificate
  EXPECT_NO_THROW(FarmClient({maddr, kToken, {pki.client_cert, pki.client_key, pki.ca, ""}}).summary());
  // A board joins the mutual-TLS tracker with its own certificate and serves TLS itself.
  auto board = start_board(mport, "tls", {"--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-ca", pki.ca});
  FarmClient c({maddr, kToken, {pki.client_cert, pki.client_key, pki.ca, ""}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return s.boards_size() == 1; }, 10000)) << board->log();
  auto lease = c.lease("tls", "tester", 0, 5000);
  pb::MeasureReply r = lease->measure(request("scale"), lease->upload(read_file(TF_KERNEL_GOOD), "good.so"));
  EXPECT_EQ(r.error(), pb::OK) << r.error_msg();
}

TEST(FarmConfig, DaemonsRefuseUnsafeOrBrokenSetups) {
  auto exit_code = [](std::vector<std::string> args) {
    Daemon d(args, temp_dir() + "/config.log");
    for (int i = 0; i < 200 && !d.exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int status = d.stop(SIGKILL);
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, d.log());
  };
  auto [code, log] = exit_code({TF_TRACKER, "--host", "0.0.0.0", "--port", "0"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(log.find("requires --token-file"), std::string::npos) << log;
  std::tie(code, log) = exit_code({TF_TRACKER, "--token-file", "/nonexistent/token", "--port", "0"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(log.find("cannot read token file /nonexistent/token"), std::string::npos) << log;
  std::tie(code, log) = exit_code({TF_RPC_SERVER, "--tracker", "127.0.0.1:1", "--key", "k", "--host", "0.0.0.0"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(log.find("requires --token-file"), std::string::npos) << log;
  std::tie(code, log) = exit_code({TF_TRACKER, "--port", "0", "--tls-cert", "/nonexistent.pem", "--tls-key", "/x"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(log.find("cannot read"), std::string::npos) << log;
}

// ---- tunefarm tune through the farm ----------------------------------------------------

int run_shell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// `cmd`'s exit status and standard output (and error, with `and_stderr`).
std::pair<int, std::string> run_shell_output(const std::string& cmd, bool and_stderr = false) {
  std::string out = temp_dir() + "/shell-output";
  int rc = run_shell(cmd + " > " + out + (and_stderr ? " 2>&1" : ""));
  return {rc, read_file(out)};
}

TEST(FarmTune, ABoardKilledMidRunLosesNothingAndTheRunCompletesOnTheOther) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  auto b1 = start_board(port, "tune");
  auto b2 = start_board(port, "tune");
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "tune") == 2; }, 10000));
  std::string dir = temp_dir(), db = dir + "/tune-farm.db", out = dir + "/tune-farm.jsonl";
  std::string cmd = std::string(TF_TUNEFARM) + " tune -w 'matmul(M=32,N=32,K=32)' --tracker 127.0.0.1:" +
                    std::to_string(port) + " --token-file " + token_file() +
                    " --key tune --boards 2 --trials 40 --batch 8 --repeat 3 --min-repeat-ms 5 --retime-rounds 1 --db " +
                    db + " --json > " + out + " 2> " + dir + "/tune-farm.err";
  // Kill one board once the first batch is measured.
  std::thread killer([&] {
    for (int i = 0; i < 600 && read_file(out).find("\"event\":\"trial\"") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    b1->stop(SIGKILL);
  });
  int rc = run_shell(cmd);
  killer.join();
  std::string events = read_file(out);
  ASSERT_EQ(rc, 0) << events << read_file(dir + "/tune-farm.err");
  EXPECT_NE(events.find("\"event\":\"board_lost\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"trials\":40"), std::string::npos) << events;
  // Every config has its result on record (but those built to code measured before, which are
  // not measured again), and no loss is stored as a result.
  int same_code = -1;
  std::istringstream event_lines(events);
  for (std::string l; std::getline(event_lines, l);) {
    nlohmann::json e = nlohmann::json::parse(l, nullptr, false);
    if (e.is_object() && e.value("event", "") == "done") same_code = e.value("same_code", -1);
  }
  ASSERT_GE(same_code, 0) << events;
  std::string hist = dir + "/tune-farm-history.json";
  ASSERT_EQ(run_shell(std::string(TF_TUNEFARM) + " query history --db " + db + " --json > " + hist), 0);
  nlohmann::json recs = nlohmann::json::parse(read_file(hist));
  std::set<std::string> configs;
  for (const auto& r : recs) {
    EXPECT_NE(r["error_code"], "board_lost") << r.dump();
    configs.insert(r["config"].dump());
  }
  EXPECT_GE(configs.size(), static_cast<size_t>(40 - same_code));
}

// tune --model on a farm board: the model's tasks compile for the board's target and share
// one budget; every task ends with a correct best.
TEST(FarmTune, AModelTunesOnABoard) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  auto board = start_board(port, "tunem");
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "tunem") == 1; }, 10000));
  std::string dir = temp_dir(), model = dir + "/farm-model.onnx", out = dir + "/tune-model.jsonl";
  // x[2,8] -> MatMul[8,8] -> Relu -> MatMul[8,4] -> y: two tasks.
  tf::graph::testing::ModelBuilder b(13);
  b.input("x", {2, 8});
  for (auto [name, rows, cols] : {std::tuple<const char*, int64_t, int64_t>{"w1", 8, 8}, {"w2", 8, 4}}) {
    b.floats(std::string(name) + "_flat", std::vector<float>(static_cast<size_t>(rows * cols), 0.25f));
    b.ints(std::string(name) + "_shape", {rows, cols});
    b.node("Reshape", {std::string(name) + "_flat", std::string(name) + "_shape"}, {name});
  }
  b.node("MatMul", {"x", "w1"}, {"h"});
  b.node("Relu", {"h"}, {"r"});
  b.node("MatMul", {"r", "w2"}, {"y"});
  b.output("y", {2, 4});
  b.save(model);
  std::string cmd = std::string(TF_TUNEFARM) + " tune --model " + model + " --tracker 127.0.0.1:" + std::to_string(port) +
                    " --token-file " + token_file() +
                    " --key tunem --trials 6 --batch 2 --repeat 2 --min-repeat-ms 1 --retime-rounds 1 --retime-top 1"
                    " --strategy random --db " + dir + "/farm-model.db --json > " + out + " 2> " + dir + "/tune-model.err";
  ASSERT_EQ(run_shell(cmd), 0) << read_file(out) << read_file(dir + "/tune-model.err");
  nlohmann::json done;
  std::istringstream lines(read_file(out));
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json e = nlohmann::json::parse(line);
    if (e["event"] == "done") done = e;
  }
  ASSERT_EQ(done["tasks"].size(), 2u) << read_file(out);
  for (const auto& t : done["tasks"]) {
    EXPECT_GT(t["trials"].get<int>(), 0) << t.dump();
    EXPECT_GT(t["best_s"].get<double>(), 0) << t.dump();
  }
  EXPECT_EQ(done["status"], "done");
  // What it bought: both builds of the model timed on the board, not here.
  const nlohmann::json& m = done["model"];
  ASSERT_TRUE(m.contains("tuned_s")) << done.dump();
  std::string board_id;
  pb::SummaryReply summary = c.summary();
  for (const auto& bs : summary.boards()) {
    if (bs.key() == "tunem") board_id = bs.board_id();
  }
  EXPECT_EQ(m["board"], board_id) << m.dump();
  EXPECT_GT(m["tuned_s"].get<double>(), 0) << m.dump();
  EXPECT_GT(m["default_s"].get<double>(), 0) << m.dump();
  EXPECT_EQ(m["rounds"], 10) << m.dump();
  EXPECT_GT(m["speedup"].get<double>(), 0) << m.dump();
  auto [code, listed] = run_shell_output(std::string(TF_TUNEFARM) + " query models --json --db " + dir + "/farm-model.db");
  ASSERT_EQ(code, 0) << listed;
  nlohmann::json models = nlohmann::json::parse(listed);
  ASSERT_EQ(models.size(), 1u) << listed;
  EXPECT_EQ(models[0]["device_key"], "tunem") << listed;
  EXPECT_DOUBLE_EQ(models[0]["tuned_s"].get<double>(), m["tuned_s"].get<double>());

  // farm measure --model: a compiled model, and against a second build of it.
  std::string lib = dir + "/farm-model.so";
  ASSERT_EQ(run_shell(std::string(TF_TUNEFARM) + " compile --model " + model + " --no-db -o " + lib + " > /dev/null"), 0);
  std::string tr = " --tracker 127.0.0.1:" + std::to_string(port) + " --token-file " + token_file() + " --key tunem";
  std::tie(code, listed) = run_shell_output(std::string(TF_TUNEFARM) + " farm measure --model " + lib + " --baseline " + lib +
                                            " --repeat 4 --json" + tr);
  ASSERT_EQ(code, 0) << listed;
  nlohmann::json fm = nlohmann::json::parse(listed);
  EXPECT_EQ(fm["error_code"], "ok") << listed;
  EXPECT_EQ(fm["samples_s"].size(), 4u) << listed;
  EXPECT_EQ(fm["baseline"]["samples_s"].size(), 4u) << listed;
  EXPECT_GT(fm["speedup"].get<double>(), 0) << listed;
  // A kernel library is not a model; models of other inputs cannot be compared; kernels'
  // flags are refused.
  std::string kernel = compiled_kernel();
  std::tie(code, listed) = run_shell_output(std::string(TF_TUNEFARM) + " farm measure --model " + kernel + tr, true);
  EXPECT_EQ(code, 1) << listed;
  EXPECT_NE(listed.find("not a tunefarm model library (no tf_model_run)"), std::string::npos) << listed;
  tf::graph::testing::ModelBuilder other(13);
  other.input("x", {3, 8});
  other.node("Relu", {"x"}, {"y"});
  other.output("y", {3, 8});
  other.save(dir + "/other.onnx");
  ASSERT_EQ(run_shell(std::string(TF_TUNEFARM) + " compile --model " + dir + "/other.onnx --no-db -o " + dir +
                      "/other.so > /dev/null"),
            0);
  std::tie(code, listed) = run_shell_output(std::string(TF_TUNEFARM) + " farm measure --model " + lib + " --baseline " +
                                            dir + "/other.so" + tr, true);
  EXPECT_EQ(code, 1) << listed;
  EXPECT_NE(listed.find("takes other inputs than"), std::string::npos) << listed;
  std::tie(code, listed) =
      run_shell_output(std::string(TF_TUNEFARM) + " farm measure --model " + lib + " --function f" + tr, true);
  EXPECT_EQ(code, 2) << listed;
  EXPECT_NE(listed.find("--function is for kernels"), std::string::npos) << listed;
  std::tie(code, listed) =
      run_shell_output(std::string(TF_TUNEFARM) + " farm measure --model " + lib + " --module " + kernel + tr, true);
  EXPECT_EQ(code, 2) << listed;
  EXPECT_NE(listed.find("--model and --module exclude each other"), std::string::npos) << listed;
}

TEST(FarmTune, KernelsOfAnotherArchitectureAndUnknownKeysAreRefused) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  auto pi = start_board(port, "pi", {"--target", "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"});
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "pi") == 1; }, 10000));
  std::string dir = temp_dir(), err = dir + "/arch.err";
  std::string farm = " --tracker 127.0.0.1:" + std::to_string(port) + " --token-file " + token_file();
  // tune for this machine's architecture against an aarch64 board.
  EXPECT_EQ(run_shell(std::string(TF_TUNEFARM) + " tune -w 'matmul(M=8,N=8,K=8)' --target llvm --key pi --no-db" +
                      farm + " > /dev/null 2> " + err),
            2);
  std::string msg = read_file(err);
  EXPECT_NE(msg.find("is aarch64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("built for x86_64"), std::string::npos) << msg;
  // farm measure of an x86_64 library on it: refused before the upload, naming both.
  std::string so = dir + "/x86.so";
  ASSERT_EQ(run_shell(std::string(TF_TUNEFARM) + " compile -w 'matmul(M=8,N=8,K=8)' --no-db -o " + so + " > /dev/null"), 0);
  EXPECT_EQ(run_shell(std::string(TF_TUNEFARM) + " farm measure --key pi --module " + so + " --no-db" + farm +
                      " > /dev/null 2> " + err),
            2);
  msg = read_file(err);
  EXPECT_NE(msg.find("is built for x86_64, but board"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is aarch64"), std::string::npos) << msg;
  // A key no board has: at once, naming it.
  auto start = Clock::now();
  EXPECT_EQ(run_shell(std::string(TF_TUNEFARM) + " tune -w 'matmul(M=8,N=8,K=8)' --key pj --no-db" + farm +
                      " > /dev/null 2> " + err),
            2);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  EXPECT_NE(read_file(err).find("pj"), std::string::npos) << read_file(err);
}

// ---- GPU boards --------------------------------------------------------------------------

// With no driver, a GPU board refuses to start and says what is missing.
TEST(FarmGpu, MissingDriversAreClearErrors) {
  struct Case {
    const char *device, *library, *message;
  };
  for (const Case& c : {Case{"cuda:0", "libcuda.so.1", "error: --device cuda:0: no CUDA driver on this machine: cannot load libcuda.so.1"},
                        Case{"rocm:0", "libamdhip64.so", "error: --device rocm:0: no ROCm runtime on this machine: cannot load libamdhip64.so"}}) {
    if (void* h = dlopen(c.library, RTLD_LAZY)) {
      dlclose(h);
      std::printf("note: %s is installed here; its missing-driver message is not tested\n", c.library);
      continue;
    }
    Daemon d({TF_RPC_SERVER, "--tracker", "127.0.0.1:1", "--device", c.device, "--port", "0"}, temp_dir() + "/gpu.log");
    for (int i = 0; i < 250 && !d.exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int status = d.stop(SIGKILL);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << d.log();
    EXPECT_NE(d.log().find(c.message), std::string::npos) << d.log();
  }
  Daemon bad({TF_RPC_SERVER, "--tracker", "127.0.0.1:1", "--device", "cuda:x", "--port", "0"}, temp_dir() + "/gpu.log");
  for (int i = 0; i < 250 && !bad.exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  bad.stop(SIGKILL);
  EXPECT_NE(bad.log().find("--device 'cuda:x' is not cpu, cuda:N or rocm:N"), std::string::npos) << bad.log();
}

// A driver that never answers the runner's probe: the board gives up after --probe-timeout-s
// and says so, instead of hanging at start-up.
TEST(FarmGpu, StuckDriverProbeIsAClearError) {
  std::string dir = temp_dir();
  Daemon board({"/usr/bin/env", std::string("LD_LIBRARY_PATH=") + TF_FAKE_CUDA_DIR, "TF_FAKE_CUDA_HANG=1", TF_RPC_SERVER,
                "--tracker", "127.0.0.1:1", "--device", "cuda:0", "--port", "0", "--probe-timeout-s", "1"},
               dir + "/stuck_board.log");
  for (int i = 0; i < 500 && !board.exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  int status = board.stop(SIGKILL);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << board.log();
  EXPECT_NE(board.log().find("error: --device cuda:0: the runner's probe did not answer within 1 s"), std::string::npos)
      << board.log();
}

// A host with several GPUs (the FAKE driver with 3 devices): `--device all` serves each as a
// board of its own (own port, board id, lease and runner on its device), so three leases of
// the key run at once, each measurement on its device (the driver logs each runner's context).
// Lists name devices; errors: a device twice, one the machine lacks, cpu in a list, an
// --advertise with a port for several boards.
// A measurement of `function` of the PTX kernel at `ptx` as its sidecar describes it: its
// arguments and launch, 2 samples of 1 call, no outputs asked for.
pb::MeasureRequest gpu_request(const std::string& ptx, const std::string& function) {
  nlohmann::json side = nlohmann::json::parse(read_file(ptx + ".json"));
  pb::MeasureRequest r;
  r.set_function(function);
  for (const auto& a : side["args"]) {
    pb::ArgSpec* spec = r.add_args();
    for (int64_t d : a["shape"]) spec->add_shape(d);
    spec->set_is_output(a["role"] == "output");
  }
  for (int64_t v : side["launch"]["grid"]) r.mutable_launch()->add_grid(v);
  for (int64_t v : side["launch"]["block"]) r.mutable_launch()->add_block(v);
  r.set_number(1);
  r.set_repeat(2);
  r.set_timeout_s(20);
  r.set_seed(5);
  return r;
}

// How many lines of `log` are `line`.
int count_lines(const std::string& log, const std::string& line) {
  std::istringstream in(log);
  int n = 0;
  for (std::string l; std::getline(in, l);) n += l == line;
  return n;
}

// The pids of the processes whose parent is `parent` (from /proc).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid ...: the comm may hold spaces; what follows its ')' does not.
    size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

// How many lines of `log` start with `prefix`.
int count_prefixed(const std::string& log, const std::string& prefix) {
  std::istringstream in(log);
  int n = 0;
  for (std::string l; std::getline(in, l);) n += l.rfind(prefix, 0) == 0;
  return n;
}

// A GPU board keeps one measuring process (runtime/isolated_runner.h MeasuringProcess): one
// device context serves candidate after candidate, each module unloaded and each buffer freed
// after its measurement; a kernel that faults (the FAKE driver then fails every later call of
// the process, as a real fault poisons a context) or never ends costs that candidate only; a
// new lease gets a fresh process. --runner-per-measurement starts one per candidate, as before.
TEST(FarmGpu, MeasuringProcessKeepsItsContextAndAFaultCostsOneCandidate) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  std::string dir = temp_dir(), ptx = dir + "/mm.ptx";
  ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w 'matmul(M=64,N=48,K=32)' -t 'cuda -arch=sm_80' --no-db -o " +
                         ptx + " > /dev/null").c_str()),
            0);
  const std::string good = read_file(ptx);
  // The same kernel under the names the FAKE driver faults and hangs on.
  auto renamed = [&](const std::string& name) {
    std::string text = good;
    size_t at = text.find(".entry matmul(");
    EXPECT_NE(at, std::string::npos);
    return text.replace(at, 13, ".entry " + name);
  };
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  auto start_board = [&](const std::string& log, const std::string& id, std::vector<std::string> extra) {
    std::vector<std::string> argv{"/usr/bin/env", std::string("LD_LIBRARY_PATH=") + TF_FAKE_CUDA_DIR,
                                  "TF_FAKE_CUDA_LOG=" + log, "TF_FAKE_CUDA_FAIL_LAUNCH=faulty",
                                  "TF_FAKE_CUDA_HANG_LAUNCH=stuck", "TF_FAKE_CUDA_JIT_MS=20", TF_RPC_SERVER, "--tracker",
                                  "127.0.0.1:" + std::to_string(port), "--device", "cuda:0", "--port", "0",
                                  "--token-file", token_file(), "--board-id", id, "--key", id};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Daemon>(argv, dir + "/" + id + ".log");
  };
  const std::string log = dir + "/kept.log";
  std::unique_ptr<Daemon> board = start_board(log, "kept", {});
  ASSERT_GT(board->port(), 0) << board->log();
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "kept") == 1; }, 10000))
      << board->log();
  pb::MeasureRequest r = gpu_request(ptx, "matmul");
  // Contexts made since the board's start (its probe of the device made one).
  const int probed = count_lines(read_file(log), "context 0");
  auto contexts = [&](const std::string& path, int before) { return count_lines(read_file(path), "context 0") - before; };
  {
    std::unique_ptr<LeasedBoard> b = c.lease("kept", "test", 0, 5000);
    std::string mm = b->upload(good, "mm.ptx"), faulty = b->upload(renamed("faulty"), "faulty.ptx"),
                stuck = b->upload(renamed("stuck"), "stuck.ptx");
    for (int i = 0; i < 5; ++i) {
      pb::MeasureReply reply = b->measure(r, mm);
      EXPECT_EQ(reply.error(), pb::OK) << reply.error_msg();
      EXPECT_EQ(reply.samples_s_size(), 2);
      // Where the measuring process's time went: the module's load (the JIT: 20 ms more in
      // the FAKE driver) apart from the rest.
      EXPECT_GE(reply.load_s(), 0.02);
      EXPECT_LT(reply.load_s(), 5.0);
      EXPECT_GT(reply.run_s(), 0);
    }
    std::string fake = read_file(log);
    EXPECT_EQ(contexts(log, probed), 1) << fake;
    EXPECT_EQ(count_prefixed(fake, "module "), 5) << fake;
    EXPECT_EQ(count_lines(fake, "unload"), 5) << fake;
    EXPECT_GT(count_prefixed(fake, "alloc "), 0);
    EXPECT_EQ(count_prefixed(fake, "alloc "), count_lines(fake, "free")) << fake;
    // The cut: the warm-up's single launches time at 1 us or more (the FAKE driver's events
    // say no less), over the bound, so the kernel is cut; its first sample, launches back to
    // back (far under 1 us each: they run nothing), is within it, so it takes every sample.
    // Under a bound no sample meets, it stays cut at one sample.
    pb::MeasureRequest cut = r;
    cut.set_repeat(3);
    cut.set_min_repeat_ms(1);
    cut.set_cut_slower_than_s(0.99e-6);
    pb::MeasureReply contender = b->measure(cut, mm);
    EXPECT_EQ(contender.error(), pb::OK) << contender.error_msg();
    EXPECT_FALSE(contender.cut());
    EXPECT_EQ(contender.samples_s_size(), 3);
    cut.set_cut_slower_than_s(1e-12);
    pb::MeasureReply hopeless = b->measure(cut, mm);
    EXPECT_EQ(hopeless.error(), pb::OK) << hopeless.error_msg();
    EXPECT_TRUE(hopeless.cut());
    EXPECT_EQ(hopeless.samples_s_size(), 1);
    // A fault: that candidate's error, then the next hundred measure normally (in the faulted
    // process every call would fail).
    pb::MeasureRequest f = r;
    f.set_function("faulty");
    pb::MeasureReply bad = b->measure(f, faulty);
    EXPECT_EQ(bad.error(), pb::RUNTIME_ERROR);
    EXPECT_NE(bad.error_msg().find("CUDA_ERROR_LAUNCH_FAILED"), std::string::npos) << bad.error_msg();
    int ok = 0;
    for (int i = 0; i < 100; ++i) ok += b->measure(r, mm).error() == pb::OK;
    EXPECT_EQ(ok, 100);
    EXPECT_EQ(contexts(log, probed), 2) << read_file(log);
    // A kernel that never ends: killed at the request's limit, then the next measures.
    pb::MeasureRequest h = r;
    h.set_function("stuck");
    h.set_timeout_s(1.5);
    pb::MeasureReply hung = b->measure(h, stuck);
    EXPECT_EQ(hung.error(), pb::TIMEOUT) << hung.error_msg();
    EXPECT_NE(hung.error_msg().find("still running after the time limit of 1.5"), std::string::npos) << hung.error_msg();
    EXPECT_EQ(b->measure(r, mm).error(), pb::OK);
    EXPECT_EQ(contexts(log, probed), 3) << read_file(log);
    // A measuring process killed while idle is replaced at the next measurement, which
    // measures normally.
    std::vector<pid_t> kids = children_of(board->pid());
    ASSERT_EQ(kids.size(), 1u) << "the board's measuring process";
    ASSERT_EQ(kill(kids[0], SIGKILL), 0);
    for (int i = 0; i < 100 && fs::exists("/proc/" + std::to_string(kids[0]) + "/stat") &&
                    read_file("/proc/" + std::to_string(kids[0]) + "/stat").find(") Z ") == std::string::npos;
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    pb::MeasureReply after_kill = b->measure(r, mm);
    EXPECT_EQ(after_kill.error(), pb::OK) << after_kill.error_msg();
    EXPECT_EQ(contexts(log, probed), 4) << read_file(log);
    b->release();
  }
  {
    // Another lease: a fresh process (nothing of the last lease's measurements reachable).
    std::unique_ptr<LeasedBoard> b = c.lease("kept", "test", 0, 5000);
    EXPECT_EQ(b->measure(r, b->upload(good, "mm.ptx")).error(), pb::OK);
    EXPECT_EQ(contexts(log, probed), 5) << read_file(log);
    b->release();
  }
  // One runner per measurement, as CPU boards: a context each.
  const std::string fresh_log = dir + "/fresh.log";
  std::unique_ptr<Daemon> fresh = start_board(fresh_log, "fresh", {"--runner-per-measurement"});
  ASSERT_GT(fresh->port(), 0) << fresh->log();
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "fresh") == 1; }, 10000))
      << fresh->log();
  const int fresh_probed = count_lines(read_file(fresh_log), "context 0");
  std::unique_ptr<LeasedBoard> b = c.lease("fresh", "test", 0, 5000);
  std::string mm = b->upload(good, "mm.ptx");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b->measure(r, mm).error(), pb::OK);
  EXPECT_EQ(contexts(fresh_log, fresh_probed), 3) << read_file(fresh_log);
  b->release();
}

TEST(FarmGpu, EveryGpuOfAHostIsABoard) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  std::string dir = temp_dir(), fake_log = dir + "/fake_cuda.log";
  auto env = [&](const std::string& log) {
    return std::vector<std::string>{"/usr/bin/env", std::string("LD_LIBRARY_PATH=") + TF_FAKE_CUDA_DIR,
                                    "TF_FAKE_CUDA_DEVICES=3", "TF_FAKE_CUDA_LOG=" + log};
  };
  std::vector<std::string> argv = env(fake_log);
  argv.insert(argv.end(), {TF_RPC_SERVER, "--tracker", "127.0.0.1:" + std::to_string(port), "--device", "all", "--port",
                           "0", "--token-file", token_file(), "--board-id", "host7"});
  Daemon board(argv, dir + "/host.log");
  ASSERT_GT(board.port(), 0) << board.log();
  for (const char* d : {"cuda:0", "cuda:1", "cuda:2"}) {
    EXPECT_NE(board.log().find(std::string("device ") + d + ": FAKE CUDA device"), std::string::npos) << board.log();
  }
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "cuda-sm80") == 3; }, 10000))
      << board.log();
  std::string ptx = dir + "/mm.ptx";
  ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w 'matmul(M=64,N=48,K=32)' -t 'cuda -arch=sm_80' --no-db -o " +
                         ptx + " > /dev/null").c_str()),
            0);
  pb::MeasureRequest r = gpu_request(ptx, "matmul");
  // Three leases held at once: three boards, one per device.
  std::vector<std::unique_ptr<LeasedBoard>> held;
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    held.push_back(c.lease("cuda-sm80", "test", 0, 5000));
    ids.insert(held.back()->lease().board_id());
  }
  EXPECT_EQ(ids, (std::set<std::string>{"host7-cuda0", "host7-cuda1", "host7-cuda2"}));
  std::vector<std::thread> measuring;
  std::vector<pb::MeasureReply> replies(3);
  for (int i = 0; i < 3; ++i) {
    measuring.emplace_back([&, i] { replies[i] = held[i]->measure(r, held[i]->upload(read_file(ptx), "mm.ptx")); });
  }
  for (std::thread& t : measuring) t.join();
  for (const pb::MeasureReply& reply : replies) {
    // Timed (the fake's launches; nothing is checked: no outputs asked for).
    EXPECT_EQ(reply.error(), pb::OK) << reply.error_msg();
    EXPECT_EQ(reply.samples_s_size(), 2);
  }
  const std::string log = read_file(fake_log);
  for (const char* ctx : {"context 1\n", "context 2\n"}) EXPECT_NE(log.find(ctx), std::string::npos) << log;
  for (auto& b : held) b->release();

  // Refusals, each before anything is served (exit status 2, the problem named).
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"--device", "cuda:0,cuda:0"}, "error: --device cuda:0,cuda:0 names cuda:0 twice"},
      {{"--device", "cuda:0,cuda:7"}, "error: --device cuda:7: this machine has 3 CUDA device(s)"},
      {{"--device", "cpu,cuda:0"}, "cpu is a board of its own, not one of a list of GPUs"},
      {{"--device", "cuda:0,"}, "error: --device 'cuda:0,' names no device"},
      {{"--device", "gpu:all"}, "--device 'gpu:all' is not cpu, cuda:N, rocm:N, a list of them, or cuda:all"},
      {{"--device", "cuda:all", "--advertise", "farm.example:9000"},
       "--advertise farm.example:9000 names one board's address; with 3 devices give its HOST alone"},
      {{"--device", "all", "--advertise", "[fd00::7]:9000"}, "--advertise [fd00::7]:9000 names one board's address"},
      {{"--device", "cpu", "--runner-per-measurement"}, "--runner-per-measurement is for GPU boards"},
  };
  for (const Case& k : cases) {
    std::vector<std::string> bad = env(dir + "/bad.log");
    bad.insert(bad.end(), {TF_RPC_SERVER, "--tracker", "127.0.0.1:1", "--port", "0"});
    bad.insert(bad.end(), k.args.begin(), k.args.end());
    Daemon d(bad, dir + "/refused.log");
    for (int i = 0; i < 500 && !d.exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int status = d.stop(SIGKILL);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << d.log();
    EXPECT_NE(d.log().find(k.message), std::string::npos) << d.log();
  }
}

// Through the FAKE driver (tests/farm/fake_gpu: it runs nothing, so every result is a wrong
// answer): the board derives its key and target from the device, takes PTX and refuses
// other uploads, and the kernel's launch from its sidecar reaches the driver.
TEST(FarmGpu, FakeCudaBoardCarriesPtxAndItsLaunch) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  std::string dir = temp_dir(), fake_log = dir + "/fake_cuda.log";
  Daemon board({"/usr/bin/env", std::string("LD_LIBRARY_PATH=") + TF_FAKE_CUDA_DIR, "TF_FAKE_CUDA_LOG=" + fake_log,
                TF_RPC_SERVER, "--tracker", "127.0.0.1:" + std::to_string(port), "--device", "cuda:0", "--port", "0",
                "--token-file", token_file()},
               dir + "/fake_board.log");
  ASSERT_GT(board.port(), 0) << board.log();
  EXPECT_NE(board.log().find("device cuda:0: FAKE CUDA device"), std::string::npos) << board.log();
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "cuda-sm80") == 1; }, 10000))
      << board.log();
  {
    std::unique_ptr<LeasedBoard> b = c.lease("cuda-sm80", "test", 0, 5000);
    EXPECT_EQ(b->lease().target(), "cuda -arch=sm_80");
    const pb::InfoReply& info = b->info();
    EXPECT_EQ(info.device().gpu_arch(), "sm_80");
    EXPECT_EQ(info.device().gpu_memory_bytes(), int64_t{1} << 30);
    // A CPU library is not a module for this board.
    try {
      b->upload(read_file(TF_KERNEL_GOOD), "good.so");
      ADD_FAILURE() << "a CPU library was taken by a CUDA board";
    } catch (const FarmError& e) {
      EXPECT_NE(std::string(e.what()).find("not a ptx module for a cuda board"), std::string::npos) << e.what();
    }
    // PTX without a launch is refused before anything runs.
    std::string ptx = dir + "/mm.ptx";
    ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w 'matmul(M=64,N=48,K=32)' -t 'cuda -arch=sm_80' --no-db -o " +
                           ptx + " > /dev/null").c_str()),
              0);
    std::string module = b->upload(read_file(ptx), "mm.ptx");
    pb::MeasureRequest r = request("matmul");
    try {
      b->measure(r, module);
      ADD_FAILURE() << "a GPU measurement without a launch ran";
    } catch (const FarmError& e) {
      EXPECT_NE(std::string(e.what()).find("needs the kernel's launch"), std::string::npos) << e.what();
    }
    // Baselines are timed on CPU boards only, so far.
    r.set_baseline_module_id(module);
    r.set_baseline_function("matmul");
    try {
      b->measure(r, module);
      ADD_FAILURE() << "a GPU board took a baseline";
    } catch (const FarmError& e) {
      EXPECT_NE(std::string(e.what()).find("baseline kernel is not implemented on GPU boards"), std::string::npos) << e.what();
    }
    // Packed inputs (a CPU model's constant weights) are for CPU kernels.
    r = request("matmul");
    r.mutable_args(0)->set_pack_block(4);
    try {
      b->measure(r, module);
      ADD_FAILURE() << "a GPU board took a packed input";
    } catch (const FarmError& e) {
      EXPECT_NE(std::string(e.what()).find("packed inputs are for CPU kernels; this board runs cuda:0"), std::string::npos)
          << e.what();
    }
    // So are typed (int8...) arguments, for now.
    r = request("matmul");
    r.mutable_args(0)->set_dtype("uint8");
    try {
      b->measure(r, module);
      ADD_FAILURE() << "a GPU board took a uint8 argument";
    } catch (const FarmError& e) {
      EXPECT_NE(std::string(e.what()).find("argument dtype uint8 is for CPU kernels; this board runs cuda:0"),
                std::string::npos)
          << e.what();
    }
    // But 16-bit float inputs (dtype=float16 workloads) are GPU kernels' too: this request gets
    // past its types to the missing launch.
    r = request("matmul");
    r.mutable_args(0)->set_dtype("float16");
    try {
      b->measure(r, module);
      ADD_FAILURE() << "a GPU measurement without a launch ran";
    } catch (const FarmError& e) {
      EXPECT_NE(std::string(e.what()).find("needs the kernel's launch"), std::string::npos) << e.what();
    }
    // A kernel's module measured as a compiled model: the runner finds no model in it.
    pb::MeasureRequest m;
    m.set_model(true);
    m.set_number(1);
    m.set_repeat(1);
    pb::MeasureReply reply = b->measure(m, module);
    EXPECT_EQ(reply.error(), pb::LOAD_ERROR);
    EXPECT_NE(reply.error_msg().find("is not an ELF file"), std::string::npos) << reply.error_msg();
    b->release();
  }
  // farm measure reads the launch from the sidecar; the fake computes nothing: wrong answer.
  std::string ptx = dir + "/mm2.ptx", out = dir + "/measure.json";
  // `tunefarm farm measure --module MODULE FLAGS` against the fake board, its output in `out`;
  // its exit status.
  auto farm_measure = [&](const std::string& module, const std::string& flags) {
    int rc = std::system((std::string(TF_TUNEFARM) + " farm measure --key cuda-sm80 --module " + module + " " + flags +
                          " --tracker 127.0.0.1:" + std::to_string(port) + " --token-file " + token_file() + " > " +
                          out + " 2>&1").c_str());
    return WEXITSTATUS(rc);
  };
  ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w 'matmul(M=100,N=70,K=16)' -t 'cuda -arch=sm_80' --no-db -o " +
                         ptx + " > /dev/null").c_str()),
            0);
  EXPECT_EQ(farm_measure(ptx, "--no-db --json"), 1) << read_file(out);
  EXPECT_NE(read_file(out).find("\"error_code\": \"wrong_answer\""), std::string::npos) << read_file(out);
  EXPECT_EQ(farm_measure(ptx, "--baseline " + ptx + " --no-db"), 2) << read_file(out);
  EXPECT_NE(read_file(out).find("--baseline is for CPU kernels"), std::string::npos) << read_file(out);
  nlohmann::json side = nlohmann::json::parse(read_file(ptx + ".json"));
  auto dims = [&](const char* k) {
    const auto& v = side["launch"][k];
    return std::to_string(v[0].get<int64_t>()) + "," + std::to_string(v[1].get<int64_t>()) + "," + std::to_string(v[2].get<int64_t>());
  };
  EXPECT_NE(read_file(fake_log).find("launch matmul grid=" + dims("grid") + " block=" + dims("block") + " shared=0"),
            std::string::npos)
      << read_file(fake_log) << "\nsidecar: " << side["launch"].dump();

  // Split-K: one measurement launches both kernels of the call, on a workspace for the
  // partial sums (4 x 64 x 64 floats).
  std::string split = dir + "/split.ptx";
  ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w 'matmul(M=64,N=64,K=512)' -t 'cuda -arch=sm_80' --no-db" +
                         " -c '{\"split_k\": 4}' -o " + split + " > /dev/null").c_str()),
            0);
  EXPECT_EQ(farm_measure(split, "--no-db"), 1) << read_file(out);
  nlohmann::json split_side = nlohmann::json::parse(read_file(split + ".json"));
  ASSERT_EQ(split_side["launch"]["then"].size(), 1u) << split_side.dump();
  EXPECT_NE(read_file(fake_log).find("launch matmul_step2 grid="), std::string::npos) << read_file(fake_log);
  EXPECT_NE(read_file(fake_log).find("alloc " + std::to_string(4 * 64 * 64 * 4) + "\n"), std::string::npos)
      << read_file(fake_log);
  // Past 48 KiB of shared memory (2 stages of 128 x (32 + 4) and 32 x (64 + 8) float tiles, 4
  // stages: 110,592 bytes) the kernel's buffers are dynamic shared memory: the board allows the
  // function that much (cuFuncSetAttribute) before it launches it; the fake driver, as the
  // real one, refuses the launch otherwise.
  std::string dynamic = dir + "/dynamic.ptx";
  ASSERT_EQ(std::system((std::string(TF_TUNEFARM) + " compile -w 'matmul(M=128,N=64,K=128,precision=fp16)'" +
                         " -t 'cuda -arch=sm_80' --no-db -c '{\"warps_m\": 2, \"warps_n\": 2, \"tiles_m\": 4," +
                         " \"tiles_n\": 4, \"unroll_k\": 2, \"stages\": 4}' -o " + dynamic + " > /dev/null").c_str()),
            0);
  EXPECT_EQ(nlohmann::json::parse(read_file(dynamic + ".json"))["launch"]["dynamic_shared_bytes"], 110592);
  EXPECT_EQ(farm_measure(dynamic, "--no-db --json"), 1) << read_file(out);
  EXPECT_NE(read_file(out).find("\"error_code\": \"wrong_answer\""), std::string::npos) << read_file(out);
  EXPECT_NE(read_file(fake_log).find("dynamic_shared matmul 110592\n"), std::string::npos) << read_file(fake_log);
  EXPECT_NE(read_file(fake_log).find("shared=110592\n"), std::string::npos) << read_file(fake_log);
  // A launch asking more than the device allows: the board's error names the call and the size.
  nlohmann::json too_much = nlohmann::json::parse(read_file(dynamic + ".json"));
  too_much["launch"]["dynamic_shared_bytes"] = 200000;
  std::ofstream(dynamic + ".json") << too_much.dump();
  EXPECT_NE(farm_measure(dynamic, "--no-db"), 0) << read_file(out);
  EXPECT_NE(read_file(out).find("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, 200000) failed: "
                                "CUDA_ERROR_INVALID_VALUE"),
            std::string::npos)
      << read_file(out);

  // A sidecar naming a kernel the module lacks, or asking too much: refused by name.
  nlohmann::json bad = split_side;
  bad["launch"]["then"][0]["function"] = "matmul_step9";
  std::ofstream(split + ".json") << bad.dump();
  EXPECT_NE(farm_measure(split, "--no-db --json"), 0) << read_file(out);
  EXPECT_NE(read_file(out).find("cuModuleGetFunction(matmul_step9)"), std::string::npos) << read_file(out);
  // A later kernel's name is checked where the board checks the function's.
  bad["launch"]["then"][0]["function"] = "matmul;step2";
  std::ofstream(split + ".json") << bad.dump();
  EXPECT_NE(farm_measure(split, "--no-db"), 0) << read_file(out);
  EXPECT_NE(read_file(out).find("function name 'matmul;step2' (launch.then) is not a C identifier"), std::string::npos)
      << read_file(out);
  bad = split_side;
  bad["launch"]["workspace_elements"][0] = int64_t{1} << 40;
  std::ofstream(split + ".json") << bad.dump();
  EXPECT_EQ(farm_measure(split, "--no-db"), 2) << read_file(out);
  EXPECT_NE(read_file(out).find("workspace of 1099511627776 elements out of range"), std::string::npos)
      << read_file(out);

  // A GPU kernel whose sidecar lost its launch: farm measure says so; the tuner's runner
  // makes it that candidate's LOAD_ERROR and goes on.
  side.erase("launch");
  std::ofstream(ptx + ".json") << side.dump();
  EXPECT_EQ(farm_measure(ptx, "--no-db"), 2) << read_file(out);
  EXPECT_NE(read_file(out).find("has no launch, which a GPU kernel needs"), std::string::npos) << read_file(out);
  FarmRunnerOptions fo;
  fo.farm = {"127.0.0.1:" + std::to_string(port), kToken, {}};
  fo.key = "cuda-sm80";
  fo.wait_ms = 5000;
  FarmRunner runner(fo);
  MeasureContext ctx(build_op(parse_workload("matmul(M=100,N=70,K=16)")), MeasureOptions{});
  BuildResult b;
  b.so_path = ptx;
  std::vector<RunResult> results = runner.run(ctx, {b});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].error, pb::LOAD_ERROR);
  EXPECT_NE(results[0].error_msg.find("has no launch in its sidecar"), std::string::npos) << results[0].error_msg;
  // A GPU board's timings are not the host's cores: the tuner builds while it measures.
  EXPECT_TRUE(runner.overlaps_builds()) << runner.board_target();
}

// A CUDA board takes a kernel's machine code (a cubin, ptxas's ELF) as well as its PTX, and
// loads it without the driver's JIT; a cubin of another architecture is refused at upload. The
// tuner assembles its candidates where it has ptxas and uploads cubins to the boards that run
// them (their architecture, a driver of ptxas's CUDA version or newer), PTX to the others.
TEST(FarmGpu, CudaBoardsLoadCubinsWithoutTheirJit) {
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  std::string dir = temp_dir() + "/cubins";
  fs::create_directories(dir);
  auto start_board = [&](const std::string& key, const std::string& driver) {
    return std::make_unique<Daemon>(
        std::vector<std::string>{"/usr/bin/env", std::string("LD_LIBRARY_PATH=") + TF_FAKE_CUDA_DIR,
                                 "TF_FAKE_CUDA_LOG=" + dir + "/" + key + ".fake", "TF_FAKE_CUDA_JIT_MS=20",
                                 "TF_FAKE_CUDA_DRIVER_VERSION=" + driver, TF_RPC_SERVER, "--tracker",
                                 "127.0.0.1:" + std::to_string(port), "--device", "cuda:0", "--port", "0",
                                 "--token-file", token_file(), "--board-id", key, "--key", key},
        dir + "/" + key + ".log");
  };
  std::unique_ptr<Daemon> board = start_board("new-driver", "13000");
  ASSERT_GT(board->port(), 0) << board->log();
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "new-driver") == 1; }, 10000))
      << board->log();
  {
    std::unique_ptr<LeasedBoard> b = c.lease("new-driver", "test", 0, 5000);
    EXPECT_EQ(b->lease().device().gpu_driver_version(), 13000);
    // An ELF header of CUDA 13's ABI for sm_90 (SM in bits 8-15 of e_flags), then nothing.
    std::string sm90(256, '\0');
    std::memcpy(sm90.data(), "\x7f" "ELF\x02\x01\x01\x41\x08", 9);
    const uint16_t machine = 190;
    const uint32_t flags = 0x6005a04;
    std::memcpy(sm90.data() + 18, &machine, 2);
    std::memcpy(sm90.data() + 48, &flags, 4);
    try {
      b->upload(sm90, "other.cubin");
      ADD_FAILURE() << "a cubin for sm_90 was taken by an sm_80 board";
    } catch (const FarmError& e) {
      EXPECT_NE(std::string(e.what()).find("a cubin whose code does not run here: it holds machine code for sm_90, which "
                                           "does not run on sm_80"),
                std::string::npos)
          << e.what();
    }
    b->release();
  }
  std::string why;
  std::optional<tf::Ptxas> ptxas = tf::find_ptxas(&why);
  if (!ptxas) {
    std::printf("note: %s: cubins not loaded (the refusal above was checked)\n", why.c_str());
    return;
  }
  std::string ptx = dir + "/mm.ptx", cubin = dir + "/mm.cubin";
  ASSERT_EQ(run_shell(std::string(TF_TUNEFARM) + " compile -w 'matmul(M=64,N=48,K=32)' -t 'cuda -arch=sm_80' --no-db -o " +
                      ptx + " > /dev/null"),
            0);
  ASSERT_EQ(tf::assemble_ptx(*ptxas, ptx, "sm_80", cubin).status, tf::AssembleStatus::Ok);
  {
    std::unique_ptr<LeasedBoard> b = c.lease("new-driver", "test", 0, 5000);
    pb::MeasureReply reply = b->measure(gpu_request(ptx, "matmul"), b->upload(read_file(cubin), "mm.cubin"));
    EXPECT_EQ(reply.error(), pb::OK) << reply.error_msg();
    EXPECT_EQ(reply.samples_s_size(), 2);
    b->release();
  }
  // Loaded as machine code, its function and its three parameters found in the ELF (the
  // FAKE driver reads .nv.info), and launched.
  std::string fake = read_file(dir + "/new-driver.fake");
  EXPECT_EQ(count_prefixed(fake, "cubin "), 1) << fake;
  EXPECT_EQ(count_prefixed(fake, "module "), 0) << fake;
  EXPECT_NE(fake.find("launch matmul "), std::string::npos) << fake;

  // tune on both kinds of board: cubins where the driver is CUDA 13, PTX where it is 12.4.
  std::unique_ptr<Daemon> old_board = start_board("old-driver", "12040");
  ASSERT_GT(old_board->port(), 0) << old_board->log();
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "old-driver") == 1; }, 10000))
      << old_board->log();
  for (const char* key : {"new-driver", "old-driver"}) {
    const std::string out = dir + "/" + key + ".jsonl", fake_log = dir + "/" + key + ".fake";
    std::ofstream(fake_log, std::ios::trunc).close();
    ASSERT_EQ(run_shell(std::string(TF_TUNEFARM) + " tune -w 'matmul(M=64,N=48,K=32)' -t 'cuda -arch=sm_80' --key " + key +
                        " --tracker 127.0.0.1:" + std::to_string(port) + " --token-file " + token_file() +
                        " --trials 3 --batch 3" + (std::string(key) == "new-driver" ? " --repeat 2" : "") +
                        " --no-db --json > " + out + " 2>&1"),
              1)
        << read_file(out);
    // The FAKE driver computes nothing: every candidate is a wrong answer, measured all the same.
    EXPECT_NE(read_file(out).find("no candidate of matmul(M=64,N=48,K=32,epilogue=none) ran correctly"), std::string::npos);
    nlohmann::json start, done;
    std::istringstream lines(read_file(out));
    for (std::string l; std::getline(lines, l);) {
      nlohmann::json e = nlohmann::json::parse(l, nullptr, false);
      if (e.is_object() && e.value("event", "") == "start") start = e;
      if (e.is_object() && e.value("event", "") == "done") done = e;
    }
    ASSERT_TRUE(done.is_object()) << read_file(out);
    EXPECT_NE(start.value("assembly", "").find("by " + ptxas->path), std::string::npos) << start.dump();
    // A GPU board's re-timing warms each kernel up for 50 ms by default, not a CPU's 300.
    EXPECT_EQ(start.value("retime_warmup_ms", 0.0), 50) << start.dump();
    // Its samples: 3 of at least 5 ms unless --repeat or --min-repeat-ms asks (then the rest as on CPUs).
    if (std::string(key) == "new-driver") {
      EXPECT_EQ(start.value("repeat", 0), 2) << start.dump();
      EXPECT_EQ(start.value("min_repeat_ms", 0.0), 10) << start.dump();
    } else {
      EXPECT_EQ(start.value("repeat", 0), 3) << start.dump();
      EXPECT_EQ(start.value("min_repeat_ms", 0.0), 5) << start.dump();
    }
    const int measured = done["time"]["measurements"].get<int>();
    EXPECT_GE(measured, 3) << done.dump();
    const std::string log = read_file(fake_log);
    if (std::string(key) == "new-driver") {
      EXPECT_EQ(done["time"]["cubin_loads"].get<int>(), measured) << done.dump();
      EXPECT_EQ(count_prefixed(log, "cubin "), measured) << log;
      EXPECT_EQ(count_prefixed(log, "module "), 0) << log;
    } else {
      EXPECT_EQ(done["time"]["cubin_loads"].get<int>(), 0) << done.dump();
      EXPECT_EQ(count_prefixed(log, "module "), measured) << log;
      EXPECT_EQ(count_prefixed(log, "cubin "), 0) << log;
    }
  }
}

// A model compiled for cuda, timed on a (FAKE) CUDA board: the board reads the library as
// data (its host code never runs there) and launches its kernels through its own runtime;
// the fake driver runs each kernel's emulation. With a baseline, both builds are timed
// interleaved, as tune --model compares its tuned and default builds.
TEST(FarmGpu, FakeCudaBoardTimesACompiledModel) {
  std::string dir = temp_dir(), model = dir + "/gpu-model.onnx";
  tf::graph::testing::ModelBuilder b(13);
  b.input("x", {4, 16});
  b.floats("w_flat", std::vector<float>(16 * 8, 0.125f));
  b.ints("w_shape", {16, 8});
  b.node("Reshape", {"w_flat", "w_shape"}, {"w"});
  b.node("MatMul", {"x", "w"}, {"h"});
  b.node("Relu", {"h"}, {"y"});
  b.output("y", {4, 8});
  b.save(model);
  for (std::string flags : {"", " --emulate-gpu"}) {
    std::string so = dir + (flags.empty() ? "/gpu.so" : "/emu.so");
    ASSERT_EQ(run_shell(std::string(TF_TUNEFARM) + " compile --model " + model + " -t 'cuda -arch=sm_80' --no-db" + flags +
                        " -o " + so + " > /dev/null"),
              0);
  }
  std::ofstream(dir + "/aliases") << "";
  auto tracker = start_tracker(0);
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  std::string fake_log = dir + "/fake_cuda.log";
  Daemon board({"/usr/bin/env", std::string("LD_LIBRARY_PATH=") + TF_FAKE_CUDA_DIR, "TF_FAKE_CUDA_LOG=" + fake_log,
                "TF_FAKE_CUDA_KERNELS=" + dir + "/emu.so", "TF_FAKE_CUDA_ALIASES=" + dir + "/aliases", TF_RPC_SERVER,
                "--tracker", "127.0.0.1:" + std::to_string(port), "--device", "cuda:0", "--port", "0", "--token-file",
                token_file()},
               dir + "/fake_board.log");
  ASSERT_GT(board.port(), 0) << board.log();
  FarmClient c({"127.0.0.1:" + std::to_string(port), kToken, {}});
  ASSERT_TRUE(wait_summary(c, [](const pb::SummaryReply& s) { return boards_with_key(s, "cuda-sm80") == 1; }, 10000))
      << board.log();
  std::string out = dir + "/measure.out";
  auto farm_measure = [&](const std::string& flags) {
    return run_shell(std::string(TF_TUNEFARM) + " farm measure --key cuda-sm80 " + flags + " --tracker 127.0.0.1:" +
                     std::to_string(port) + " --token-file " + token_file() + " > " + out + " 2>&1");
  };
  ASSERT_EQ(farm_measure("--model " + dir + "/gpu.so --baseline " + dir + "/gpu.so --repeat 3 --json"), 0) << read_file(out);
  nlohmann::json j = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(j["samples_s"].size(), 3u) << j.dump();
  EXPECT_EQ(j["baseline"]["samples_s"].size(), 3u) << j.dump();
  EXPECT_GT(j["speedup"].get<double>(), 0) << j.dump();
  // The kernels ran on the board, launched as the sidecar says.
  nlohmann::json side = nlohmann::json::parse(read_file(dir + "/gpu.so.json"));
  for (const nlohmann::json& k : side["kernels"])
    EXPECT_NE(read_file(fake_log).find("launch " + k["function"].get<std::string>() + " "), std::string::npos) << read_file(fake_log);
  // A baseline model of other inputs is refused by the board's runner, naming both.
  tf::graph::testing::ModelBuilder other(13);
  other.input("x", {2, 3});
  other.node("Relu", {"x"}, {"y"});
  other.output("y", {2, 3});
  other.save(dir + "/other.onnx");
  ASSERT_EQ(run_shell(std::string(TF_TUNEFARM) + " compile --model " + dir +
                      "/other.onnx -t 'cuda -arch=sm_80' --no-db -o " + dir + "/other.so > /dev/null"),
            0);
  EXPECT_EQ(farm_measure("--model " + dir + "/gpu.so --baseline " + dir + "/other.so"), 1) << read_file(out);
  EXPECT_NE(read_file(out).find("takes other inputs than"), std::string::npos) << read_file(out);
  // A CPU library is neither a kernel's module nor a model for this board.
  EXPECT_EQ(farm_measure("--model " + dir + "/emu.so"), 2) << read_file(out);
  EXPECT_NE(read_file(out).find("emu.so is not a GPU model library (no .tf_gpu_model section"), std::string::npos)
      << read_file(out);
}

}  // namespace
}  // namespace tf::farm
