// The tracker under load: many simulated boards and a stream of lease/release calls.
//
//   bench_farm [--boards 1000] [--rate 500] [--seconds 10] [--clients 8]
//
// Boards register over gRPC on loopback and heartbeat every second, as real ones do. Then
// clients send RequestLease + ReleaseLease pairs on an open-loop schedule of --rate pairs per
// second (latency is measured from the scheduled start, so a slow tracker cannot hide
// queueing), and finally as fast as they can. Prints leases per second and p50/p99/max
// latency, and the ratio of p99 to the goal (10 ms at 500 requests/s on this machine).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "proto/daemon.h"
#include "proto/credentials.h"
#include "tracker/tracker_service.h"

namespace {

namespace pb = tunefarm::v1;
using Clock = std::chrono::steady_clock;

struct Stats {
  std::vector<double> lease_ms, release_ms;
  int errors = 0;
};

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// One lease + release on `stub`; latencies in ms, measured from `start`.
bool lease_release(pb::Tracker::Stub& stub, const std::string& key, Clock::time_point start, Stats& s) {
  pb::LeaseRequest req;
  req.set_key(key);
  req.set_user("bench");
  req.set_wait_timeout_ms(5000);
  pb::LeaseReply reply;
  grpc::ClientContext c1;
  if (!stub.RequestLease(&c1, req, &reply).ok()) {
    ++s.errors;
    return false;
  }
  auto leased = Clock::now();
  s.lease_ms.push_back(std::chrono::duration<double, std::milli>(leased - start).count());
  pb::ReleaseRequest rel;
  rel.set_lease_token(reply.lease_token());
  pb::ReleaseReply rr;
  grpc::ClientContext c2;
  if (!stub.ReleaseLease(&c2, rel, &rr).ok()) {
    ++s.errors;
    return false;
  }
  s.release_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - leased).count());
  return true;
}

void report(const char* phase, const std::vector<Stats>& per_client, double seconds) {
  Stats all;
  for (const Stats& s : per_client) {
    all.lease_ms.insert(all.lease_ms.end(), s.lease_ms.begin(), s.lease_ms.end());
    all.release_ms.insert(all.release_ms.end(), s.release_ms.begin(), s.release_ms.end());
    all.errors += s.errors;
  }
  std::printf("%-12s leases/s %8.1f  lease p50 %6.3f ms  p99 %6.3f ms  max %7.3f ms  release p99 %6.3f ms  errors %d\n",
              phase, static_cast<double>(all.lease_ms.size()) / seconds, pct(all.lease_ms, 0.5), pct(all.lease_ms, 0.99),
              pct(all.lease_ms, 1.0), pct(all.release_ms, 0.99), all.errors);
  if (std::string(phase) == "open-loop") {
    std::printf("goal: lease p99 under 10 ms at the target rate; p99 / goal = %.3f\n", pct(all.lease_ms, 0.99) / 10.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int boards = 1000, clients = 8;
  double rate = 500, seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--boards") boards = std::atoi(argv[i + 1]);
    else if (a == "--rate") rate = std::atof(argv[i + 1]);
    else if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (a == "--clients") clients = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  tf::farm::TrackerOptions opts;
  opts.heartbeat_interval_ms = 1000;
  opts.board_timeout_ms = 10000;
  tf::farm::TrackerService service(opts);
  tf::farm::Listening l = tf::farm::listen("127.0.0.1", 0, {}, {&service});
  std::string address = "127.0.0.1:" + std::to_string(l.port);
  const int keys = 10;

  // Register the simulated boards, then keep them alive with heartbeats.
  auto reg_start = Clock::now();
  {
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([&, t] {
        auto stub = pb::Tracker::NewStub(tf::farm::make_channel(address, {}));
        for (int b = t; b < boards; b += 4) {
          pb::RegisterRequest r;
          r.set_board_id("sim-" + std::to_string(b));
          r.set_key("key-" + std::to_string(b % keys));
          r.set_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72");
          r.set_address("10.0.0." + std::to_string(b % 250) + ":9191");
          pb::RegisterReply rr;
          grpc::ClientContext ctx;
          stub->Register(&ctx, r, &rr);
        }
      });
    }
    for (auto& t : ts) t.join();
  }
  std::printf("registered %d boards under %d keys in %.2f s\n", boards, keys,
              std::chrono::duration<double>(Clock::now() - reg_start).count());
  std::atomic<bool> stop{false};
  std::thread heartbeats([&] {
    auto stub = pb::Tracker::NewStub(tf::farm::make_channel(address, {}));
    while (!stop) {
      auto round = Clock::now();
      for (int b = 0; b < boards && !stop; ++b) {
        pb::HeartbeatRequest h;
        h.set_board_id("sim-" + std::to_string(b));
        pb::HeartbeatReply hr;
        grpc::ClientContext ctx;
        stub->Heartbeat(&ctx, h, &hr);
      }
      std::this_thread::sleep_until(round + std::chrono::milliseconds(opts.heartbeat_interval_ms));
    }
  });

  // Open loop: each client sends rate/clients pairs per second on a fixed schedule.
  std::vector<Stats> open(static_cast<size_t>(clients));
  {
    std::vector<std::thread> ts;
    auto begin = Clock::now() + std::chrono::milliseconds(100);
    for (int c = 0; c < clients; ++c) {
      ts.emplace_back([&, c] {
        auto stub = pb::Tracker::NewStub(tf::farm::make_channel(address, {}));
        double period = clients / rate;
        int n = static_cast<int>(seconds * rate / clients);
        for (int i = 0; i < n; ++i) {
          auto at = begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>((i + c / double(clients)) * period));
          std::this_thread::sleep_until(at);
          lease_release(*stub, "key-" + std::to_string((c + i) % keys), at, open[static_cast<size_t>(c)]);
        }
      });
    }
    for (auto& t : ts) t.join();
  }
  std::printf("boards %d, target rate %.0f lease+release pairs/s, %d clients, %.0f s\n", boards, rate, clients, seconds);
  report("open-loop", open, seconds);

  // Closed loop: as fast as the clients can go.
  std::vector<Stats> closed(static_cast<size_t>(clients));
  {
    std::vector<std::thread> ts;
    auto end = Clock::now() + std::chrono::duration<double>(std::min(seconds, 5.0));
    for (int c = 0; c < clients; ++c) {
      ts.emplace_back([&, c] {
        auto stub = pb::Tracker::NewStub(tf::farm::make_channel(address, {}));
        for (int i = 0; Clock::now() < end; ++i) {
          lease_release(*stub, "key-" + std::to_string((c + i) % keys), Clock::now(), closed[static_cast<size_t>(c)]);
        }
      });
    }
    for (auto& t : ts) t.join();
  }
  report("closed-loop", closed, std::min(seconds, 5.0));
  stop = true;
  heartbeats.join();
  l.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}
