// libFuzzer target: the dashboard's HTTP server (dashboard/http_server.h) as a client meets it.
// Each input is everything one client sends on one connection to a real HttpServer on
// loopback (small limits, so that the limits are reached by small inputs), followed by the end
// of what it sends; the server must answer or close: never crash, throw, hang or read past
// its bounds. Its handler answers plain, streamed, authenticated and throwing responses, so
// that every path of the server runs.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "dashboard/http_server.h"

namespace {

tf::web::HttpResponse handle(const tf::web::HttpRequest& r) {
  tf::web::HttpResponse out;
  if (r.path == "/throw") throw std::runtime_error("thrown by the handler");
  if (r.path == "/stream") {
    auto left = std::make_shared<int>(3);
    out.stream = [left](std::string& piece) {
      piece += "piece " + std::to_string(*left) + "\n";
      return --*left > 0;
    };
    return out;
  }
  if (r.path == "/big") out.body.assign(70000, 'b');  // over the 64 KiB the buffered budget counts
  out.authenticated = r.path == "/auth";
  out.body += r.method + " " + r.path + " " + std::to_string(r.query.size()) + " " + std::to_string(r.body.size()) + "\n";
  return out;
}

int server_port() {
  static const int port = [] {
    tf::web::HttpLimits l;
    l.header_bytes = 1024;
    l.body_bytes = 512;
    l.max_connections = 8;
    l.max_unauthenticated = 4;
    l.request_timeout = std::chrono::milliseconds(2000);
    l.idle_timeout = std::chrono::milliseconds(2000);
    l.write_timeout = std::chrono::milliseconds(2000);
    l.buffered_bytes = 100000;
    static tf::web::HttpServer server("127.0.0.1", 0, {}, handle, l, 2);
    return server.port();
  }();
  return port;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint32_t source = 0;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  // A source address of its own per connection (127.0.0.0/8), so that the closed connections
  // waiting out TIME_WAIT never use up the ports.
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(0x7f000002u + (source++ % 60000u) * 256u % 0xfffe00u);
  ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(server_port()));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};  // the server closes long before (request_timeout 2 s): more is a hang
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return 0;
  }
  for (size_t at = 0; at < size;) {
    ssize_t n = ::send(fd, data + at, size - at, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server refused and closed: what it said is read below
    at += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char reply[65536];
  for (;;) {
    ssize_t n = ::recv(fd, reply, sizeof reply, 0);
    if (n > 0) continue;
    if (n < 0 && errno == EAGAIN) __builtin_trap();  // 10 s without an answer or a close
    break;
  }
  ::close(fd);
  return 0;
}
