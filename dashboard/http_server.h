// A small HTTP/1.1 server (Boost.Beast over Boost.Asio) for the tuning service's dashboard:
// plain or TLS (mutual TLS when a CA is given, as the gRPC port), one handler for every
// request.
//
// Promises (every size and time from outside is bounded):
// - A request's header is at most HttpLimits::header_bytes and its body at most body_bytes;
//   more is answered 431 / 413 and the connection closed. A request line or header that does
//   not parse is 400, then close.
// - A connection that sends nothing for idle_timeout, or takes longer than request_timeout to
//   send one request, or a TLS handshake longer than request_timeout, is closed.
// - At most max_connections are open at once; more are answered 503 and closed.
// - The handler runs on one of `threads` threads; an exception from it is a 500 with its
//   message, and the server goes on.
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
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpLimits {
  size_t header_bytes = 16 * 1024;
  size_t body_bytes = 16 * 1024;
  int max_connections = 256;
  std::chrono::milliseconds idle_timeout{60000};    // between requests of a kept-alive connection
  std::chrono::milliseconds request_timeout{10000}; // to receive one request (or a TLS handshake)
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
