// What both daemons and every client share about talking to each other safely: the token
// (read from a file, compared in constant time, sent as `authorization: Bearer <token>`),
// TLS and mutual TLS from PEM files, and the rule that a daemon without a token listens on
// loopback only.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "proto/message_limits.h"

namespace tf::farm {

// A mistake in how a daemon or client was started (bad flag, unreadable file). Daemons print
// it and exit with status 2.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& m) : std::runtime_error(m) {}
};

// Refuses (ConfigError) a directory at `path`; warns on stderr when its group or others can
// access it. `what` names the file ("token file"), `risk` says what a reader could do.
void check_secret_file(const std::string& path, const std::string& what, const std::string& risk);

// The first line of `path`, trimmed. Throws ConfigError when it is unreadable or empty;
// warns on stderr when the file is accessible by its group or others.
std::string read_token_file(const std::string& path);

// Constant-time comparison, so response times do not leak how much of a token matched.
bool token_equal(const std::string& a, const std::string& b);

// OK when `expected` is empty (no token configured) or the call carries it; else
// UNAUTHENTICATED.
grpc::Status check_token(const grpc::ServerContextBase* ctx, const std::string& expected);

// Adds the token to an outgoing call (no-op when empty).
void add_token(grpc::ClientContext& ctx, const std::string& token);

struct TlsFiles {
  std::string cert, key;  // PEM: our certificate and private key
  std::string ca;         // PEM: the CA that signs the peer's certificate
  // Clients: the name the server's certificate must carry, when it is not the host of the
  // address connected to (unusual set-ups: a certificate for a name, reached by IP).
  std::string server_name;
};

// Server side: plain without cert/key; TLS with them; mutual TLS (client certificates
// required and verified) when `ca` is set too.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsFiles& tls);

// Client side: plain without `ca`; TLS verifying the server against `ca` with it, presenting
// our cert/key when given (for mutual TLS).
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsFiles& tls);

bool is_loopback_host(const std::string& host);

// Refuses (ConfigError) to listen beyond loopback without a token; the message names the
// daemon's `flag` that gives one and the `risk` of going without.
void check_listen_policy(const std::string& host, const std::string& token, const char* daemon,
                         const char* flag = "--token-file",
                         const char* risk = "anyone who reaches an unauthenticated farm can run code on its boards");

// A channel to `address` (host:port) with the message size limits of the farm.
std::shared_ptr<grpc::Channel> make_channel(const std::string& address, const TlsFiles& tls);

// 128 random bits, hex.
std::string random_token();

}  // namespace tf::farm
