// tunefarm-tracker: the daemon that brokers the farm's boards.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "proto/daemon.h"
#include "proto/credentials.h"
#include "tracker/tracker_service.h"

int main(int argc, char** argv) {
  tf::farm::block_termination_signals();
  CLI::App app{"tunefarm-tracker: lease the farm's boards to tuners"};
  std::string host = "127.0.0.1", token_file;
  int port = 9190;
  tf::farm::TlsFiles tls;
  tf::farm::TrackerOptions opts;
  app.add_option("--host", host, "address to listen on (beyond loopback needs --token-file)")->capture_default_str();
  app.add_option("--port", port, "port (0: any free one; the bound port is printed)")->capture_default_str()
      ->check(CLI::Range(0, 65535));
  std::string board_token_file;
  app.add_option("--token-file", token_file, "file whose first line is the client token (tuners' calls; also boards' "
                                             "unless --board-token-file is given)");
  app.add_option("--board-token-file", board_token_file, "file whose first line is the token boards must present "
                                                         "(register, heartbeat, verify leases)");
  app.add_option("--tls-cert", tls.cert, "PEM certificate: serve TLS");
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", tls.ca, "PEM CA: require and verify client certificates (mutual TLS)");
  app.add_option("--board-timeout-ms", opts.board_timeout_ms, "drop a board silent this long")->capture_default_str()
      ->check(CLI::Range(100, 3600000));
  app.add_option("--heartbeat-ms", opts.heartbeat_interval_ms, "heartbeat interval told to boards")->capture_default_str()
      ->check(CLI::Range(10, 600000));
  app.add_option("--lease-ms", opts.default_lease_ms, "lease duration when a request asks for 0")->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{86400000}));
  app.add_option("--max-keys", opts.max_keys,
                 "keys remembered at most (boards present one board token, so also the limit per token); a new key "
                 "past it evicts the longest-unused key without boards, else is refused")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--key-retention-ms", opts.key_retention_ms,
                 "how long a key is remembered after its last board left (lease requests for it wait rather than "
                 "fail as unknown)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{7} * 86400000));
  app.add_option("--max-boards", opts.max_boards, "boards registered at once, at most")->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (!token_file.empty()) opts.token = tf::farm::read_token_file(token_file);
    if (!board_token_file.empty()) {
      if (token_file.empty()) throw tf::farm::ConfigError("--board-token-file needs --token-file (the clients' token)");
      opts.board_token = tf::farm::read_token_file(board_token_file);
      if (tf::farm::token_equal(opts.board_token, opts.token)) {
        throw tf::farm::ConfigError("--board-token-file holds the same token as --token-file: boards and clients "
                                    "need different tokens");
      }
    }
    tf::farm::check_listen_policy(host, opts.token, "tunefarm-tracker");
    if (opts.heartbeat_interval_ms >= opts.board_timeout_ms) {
      throw tf::farm::ConfigError("--heartbeat-ms " + std::to_string(opts.heartbeat_interval_ms) +
                                  " must be shorter than --board-timeout-ms " + std::to_string(opts.board_timeout_ms));
    }
    tf::farm::TrackerService service(opts);
    tf::farm::Listening l = tf::farm::listen(host, port, tls, {&service});
    if (opts.token.empty()) {
      std::printf("warning: no --token-file: serving loopback only, without authentication\n");
    } else if (opts.board_token.empty()) {
      std::printf("warning: no --board-token-file: boards and clients share one token, so any client can register "
                  "a board\n");
    }
    std::printf("tunefarm-tracker listening on %s:%d%s\n", host.c_str(), l.port, tls.cert.empty() ? "" : " (TLS)");
    std::fflush(stdout);
    tf::farm::serve_until_signal(*l.server);
  } catch (const tf::farm::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
