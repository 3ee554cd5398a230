// The farm with real processes on loopback: a tracker and boards started as the README
// says, leases by priority and fair share, timeouts, authentication, misbehaving kernels,
// a board killed mid-measurement, a tracker restart, and TLS with certificates made here.
#include <gtest/gtest.h>
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "proto/security.h"
#include "rpc_server/kernel_library.h"
#include "tuner/farm_client.h"

extern char** environ;

namespace tf::farm {
namespace {

namespace fs = std::filesystem;
namespace pb = tunefarm::v1;
using Clock = std::chrono::steady_clock;

const std::string kToken = "test-token-0123456789abcdef";

std::string temp_dir() {
  static std::string dir = [] {
    std::string t = (fs::temp_directory_path() / "tunefarm-farm-XXXXXX").string();
    return std::string(mkdtemp(t.data()));
  }();
  return dir;
}

// A daemon started as a child process, its output in a file.
class Daemon {
 public:
  Daemon(const std::vector<std::string>& args, const std::string& log) : log_(log) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
  }
  ~Daemon() { stop(SIGKILL); }

  // Waits for "listening on HOST:PORT" in the log; returns the port, 0 on failure.
  int port(int timeout_ms = 10000) {
    std::regex re("listening on [^ ]*:([0-9]+)");
    for (auto end = Clock::now() + std::chrono::milliseconds(timeout_ms); Clock::now() < end;) {
      std::smatch m;
      std::string text = log();
      if (std::regex_search(text, m, re)) return std::stoi(m[1]);
      if (exited()) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
  }
  bool wait_for_log(const std::string& text, int timeout_ms) {
    for (auto end = Clock::now() + std::chrono::milliseconds(timeout_ms); Clock::now() < end;) {
      if (log().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  bool exited() {
    if (pid_ <= 0) return true;
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      status_ = status;
      pid_ = -1;
      return true;
    }
    return false;
  }
  int stop(int sig) {
    if (pid_ > 0) {
      kill(pid_, sig);
      waitpid(pid_, &status_, 0);
      pid_ = -1;
    }
    return status_;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int status_ = 0;
};

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
                                   "--heartbeat-ms", "100", "--board-timeout-ms", "1000"};
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<Daemon>(args, temp_dir() + "/tracker" + std::to_string(n++) + ".log");
}

std::unique_ptr<Daemon> start_board(int tracker_port, const std::string& key, const std::vector<std::string>& extra = {}) {
  static int n = 0;
  std::vector<std::string> args = {TF_RPC_SERVER, "--tracker", "127.0.0.1:" + std::to_string(tracker_port), "--key", key,
                                   "--port", "0", "--token-file", token_file()};
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
  try {
    c.lease("no-such-key", "other", 0, 100);
    FAIL();
  } catch (const FarmError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::NOT_FOUND) << e.what();
    EXPECT_NE(std::string(e.what()).find("no board with key 'no-such-key'"), std::string::npos) << e.what();
  }
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
  r = request("scale");
  r.set_timeout_s(1e9);
  expect_invalid(r, "timeout_s");
  r = request("scale");
  r.clear_args();
  expect_invalid(r, "1 to 5 arguments");
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
  if (sizeof(void*) == 8 && good[18] == 0xb7) other_arch[18] = 62;  // ... or EM_X86_64 on aarch64
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
  for (double bad : {NAN, INFINITY, -INFINITY}) {
    pb::MeasureRequest r = request("scale");
    r.set_timeout_s(bad);
    EXPECT_EQ(status(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "timeout_s " << bad;
    r = request("scale");
    r.set_min_repeat_ms(bad);
    EXPECT_EQ(status(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "min_repeat_ms " << bad;
    r = request("scale");
    r.set_cooldown_ms(bad);
    EXPECT_EQ(status(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "cooldown_ms " << bad;
  }
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

TEST(FarmTls, ServerTlsAndMutualTls) {
  Pki pki = make_pki();
  auto tracker = start_tracker(0, {"--tls-cert", pki.server_cert, "--tls-key", pki.server_key});
  int port = tracker->port();
  ASSERT_GT(port, 0) << tracker->log();
  std::string addr = "127.0.0.1:" + std::to_string(port);
  EXPECT_THROW(FarmClient({addr, kToken, {}}).summary(), FarmError);  // plain text to a TLS server
  EXPECT_NO_THROW(FarmClient({addr, kToken, {"", "", pki.ca}}).summary());

  auto mutual = start_tracker(0, {"--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-ca", pki.ca});
  int mport = mutual->port();
  ASSERT_GT(mport, 0) << mutual->log();
  std::string maddr = "127.0.0.1:" + std::to_string(mport);
  EXPECT_THROW(FarmClient({maddr, kToken, {"", "", pki.ca}}).summary(), FarmError);  // no client certificate
  EXPECT_NO_THROW(FarmClient({maddr, kToken, {pki.client_cert, pki.client_key, pki.ca}}).summary());
  // A board joins the mutual-TLS tracker with its own certificate and serves TLS itself.
  auto board = start_board(mport, "tls", {"--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-ca", pki.ca});
  FarmClient c({maddr, kToken, {pki.client_cert, pki.client_key, pki.ca}});
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

}  // namespace
}  // namespace tf::farm
