// A small HTTP/1.1 server (Boost.Beast over Boost.Asio) for the tuning service's dashboard:
// plain or TLS (mutual TLS when a CA is given, as the gRPC port), one handler for every
// request.
//
// Promises (every size and time from outside is bounded before it is buffered):
// - A request's line, header fields, chunk extensions and trailer fields together are at most
//   HttpLimits::header_bytes (431 beyond) and its body at most body_bytes (413); nothing
//   larger than header_bytes + 4 KiB is ever held for one connection besides the body. A
//   request that does not parse, or whose framing is ambiguous (Transfer-Encoding with
//   Content-Length, chunked not the last coding, two Content-Lengths, folded header lines, no
//   or two Host fields in HTTP/1.1), is 400; a transfer coding other than chunked is 501.
//   Trailer fields are read and dropped. Each of these is answered, then the connection closed.
// - A connection has idle_timeout for the first byte of a request (request_timeout for its
//   first request), then request_timeout for the whole request; each piece of a response must
//   be taken by the client within write_timeout. A TLS handshake has request_timeout.
// - At most max_connections are open. Connections that have not yet made a request as a known
//   user (HttpResponse::authenticated) are at most max_unauthenticated: a new connection beyond
//   that closes the one of them idle longest, so slow or silent clients cannot lock out the
//   others; beyond max_connections the idlest unauthenticated one goes first, then the idlest
//   authenticated one. Only when every connection is busy in a request is a new one answered
//   503 and closed. Bodies waiting for slow readers are at most buffered_bytes together (503).
// - The handler runs on one of `threads` threads; an exception from it is a 500 with its
//   message, and the server goes on. Nothing a client sends can throw out of the server.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "proto/credentials.h"

namespace tf::web {

struct HttpRequest {
  std::string method;                       // GET, POST, ...
  std::string path;                         // percent-decoded path, without the query
  std::map<std::string, std::string> query; // decoded query parameters (the last of a name wins)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool tls = false;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Set-Cookie, Location, ...)
  // A body too large to build at once: called for each next piece, which it appends to its
  // argument, until it returns false. Sent chunked (HTTP/1.0: until the connection closes),
  // each piece within HttpLimits::write_timeout. Runs on the connection's thread; an exception
  // from it ends the response by closing the connection. `body` is ignored when set.
  std::function<bool(std::string&)> stream;
  // The request came from a known user: the connection leaves the unauthenticated budget.
  bool authenticated = false;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpLimits {
  size_t header_bytes = 16 * 1024;  // request line + header fields + chunk extensions + trailer
  size_t body_bytes = 16 * 1024;
  int max_connections = 256;
  int max_unauthenticated = 64;     // of those, not yet answered as a known user
  std::chrono::milliseconds idle_timeout{60000};    // to the first byte of a kept-alive connection's next request
  std::chrono::milliseconds request_timeout{10000}; // from a request's first byte to its last (or a TLS handshake)
  std::chrono::milliseconds write_timeout{10000};   // for the client to take each piece of a response
  // Response bodies held for clients still reading them, all connections together; a body
  // that would pass it is answered 503 (retry) instead. Streamed bodies hold one piece each.
  size_t buffered_bytes = 256 * 1024 * 1024;
};

// Decodes %XX and (in queries) '+'; a malformed escape is kept as it is.
std::string percent_decode(const std::string& s, bool plus_is_space);
// `a=1&b=2` into a map (a name given twice: the last wins).
std::map<std::string, std::string> parse_form(const std::string& s);

class HttpServer {
 public:
  // Listens on host:port (0: any free port) and serves on `threads` threads until destroyed.
  // TLS when tls.cert is set (tls.key its key); client certificates required and verified
  // against tls.ca when that is set too. Throws farm::ConfigError when it cannot listen or a
  // TLS file is unusable.
  HttpServer(const std::string& host, int port, const farm::TlsFiles& tls, HttpHandler handler, HttpLimits limits = {},
             int threads = 2);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  int port() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::web
