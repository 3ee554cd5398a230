// What the two daemons share at start-up: building a gRPC server on host:port (port 0 picks
// a free one) and serving until SIGINT or SIGTERM.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "proto/credentials.h"

namespace tf::farm {

struct Listening {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the port actually bound
};

// Throws ConfigError when the address cannot be bound, also when another process listens
// on the port already (no SO_REUSEPORT sharing).
Listening listen(const std::string& host, int port, const TlsFiles& tls, const std::vector<grpc::Service*>& services);

// Blocks SIGINT and SIGTERM in this thread and every thread it starts afterwards; call
// first thing in main.
void block_termination_signals();

// Waits for SIGINT or SIGTERM (blocked with block_termination_signals).
void wait_for_termination_signal();

// Waits for SIGINT or SIGTERM, then shuts `server` down, giving in-flight calls `grace_ms`.
void serve_until_signal(grpc::Server& server, int grace_ms = 2000);

}  // namespace tf::farm
