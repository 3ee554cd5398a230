#include "proto/daemon.h"

#include <signal.h>

#include <chrono>

namespace tf::farm {

Listening listen(const std::string& host, int port, const TlsFiles& tls, const std::vector<grpc::Service*>& services) {
  grpc::ServerBuilder b;
  Listening l;
  std::string address = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  b.AddListeningPort(address, server_credentials(tls), &l.port);
  // gRPC sets SO_REUSEPORT by default, so a second daemon on a taken port would start and
  // share its calls with the first. A daemon owns its port or fails at start.
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  b.SetMaxReceiveMessageSize(kMaxMessageBytes);
  b.SetMaxSendMessageSize(kMaxMessageBytes);
  for (grpc::Service* s : services) b.RegisterService(s);
  l.server = b.BuildAndStart();
  if (!l.server || l.port == 0) throw ConfigError("cannot listen on " + address + " (in use, or not a local address?)");
  return l;
}

namespace {

sigset_t termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void block_termination_signals() {
  sigset_t set = termination_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void wait_for_termination_signal() {
  sigset_t set = termination_signals();
  int sig = 0;
  sigwait(&set, &sig);
}

void serve_until_signal(grpc::Server& server, int grace_ms) {
  wait_for_termination_signal();
  server.Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
}

}  // namespace tf::farm
