// Simulated boards for benchmarks of what shows a farm (bench/dashboard_bench.py): registers
// --boards boards with a running tracker over gRPC, as real boards do, and keeps them alive
// with heartbeats until it is stopped (SIGTERM / SIGINT). Nothing answers at their addresses:
// they are for summaries, not for leases.
//
//   bench_fake_boards --tracker HOST:PORT --token-file FILE [--boards 2000] [--keys 8]
#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "proto/credentials.h"
#include "proto/tunefarm.grpc.pb.h"

namespace {
volatile std::sig_atomic_t stop = 0;
void on_signal(int) { stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_fake_boards: registers simulated boards with a tracker and heartbeats them"};
  std::string tracker, token_file;
  int boards = 2000, keys = 8;
  app.add_option("--tracker", tracker, "HOST:PORT")->required();
  app.add_option("--token-file", token_file, "the boards' token");
  app.add_option("--boards", boards, "how many")->check(CLI::Range(1, 1000000));
  app.add_option("--keys", keys, "spread over this many keys")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  namespace pb = tunefarm::v1;
  std::string token;
  try {
    if (!token_file.empty()) token = tf::farm::read_token_file(token_file);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fake_boards: %s\n", e.what());
    return 2;
  }
  auto stub = pb::Tracker::NewStub(tf::farm::make_channel(tracker, {}));
  int interval_ms = 1000;
  auto reg = [&](int b) {
    pb::RegisterRequest r;
    r.set_board_id("sim-" + std::to_string(b));
    r.set_key("sim-key-" + std::to_string(b % keys));
    r.set_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72");
    r.set_address("10.0." + std::to_string(b / 250 % 250) + "." + std::to_string(b % 250) + ":9191");
    r.set_instance("bench");
    r.mutable_device()->set_cpu_model("Cortex-A72");
    r.mutable_device()->set_cores(4);
    r.mutable_device()->set_arch("aarch64");
    pb::RegisterReply rr;
    grpc::ClientContext ctx;
    tf::farm::add_token(ctx, token);
    grpc::Status s = stub->Register(&ctx, r, &rr);
    if (!s.ok()) {
      std::fprintf(stderr, "bench_fake_boards: register sim-%d: %s\n", b, s.error_message().c_str());
      return false;
    }
    interval_ms = rr.heartbeat_interval_ms();
    return true;
  };
  for (int b = 0; b < boards; ++b) {
    if (!reg(b)) return 1;
  }
  std::printf("registered %d boards under %d keys\n", boards, keys);
  std::fflush(stdout);
  while (!stop) {
    auto start = std::chrono::steady_clock::now();
    for (int b = 0; b < boards && !stop; ++b) {
      pb::HeartbeatRequest h;
      h.set_board_id("sim-" + std::to_string(b));
      h.set_instance("bench");
      pb::HeartbeatReply hr;
      grpc::ClientContext ctx;
      tf::farm::add_token(ctx, token);
      if (stub->Heartbeat(&ctx, h, &hr).ok() && !hr.known()) reg(b);
    }
    std::this_thread::sleep_until(start + std::chrono::milliseconds(interval_ms));
  }
  return 0;
}
