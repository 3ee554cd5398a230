#include "dashboard/http_server.h"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <array>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <optional>
#include <thread>
#include <type_traits>

#include "compiler/error.h"

namespace tf::web {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

std::string percent_decode(const std::string& s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::map<std::string, std::string> parse_form(const std::string& s) {
  std::map<std::string, std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t amp = s.find('&', at);
    std::string part = s.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
    if (!part.empty()) {
      size_t eq = part.find('=');
      std::string name = percent_decode(part.substr(0, eq), true);
      std::string value = eq == std::string::npos ? "" : percent_decode(part.substr(eq + 1), true);
      out[name] = value;
    }
    if (amp == std::string::npos) break;
    at = amp + 1;
  }
  return out;
}

// Members in this order: the io_context destroys the sessions it still holds, and they use
// `open`, `tls_ctx` and `limits`, declared before it (destroyed after it).
struct HttpServer::Impl {
  std::atomic<int> open{0};
  std::optional<ssl::context> tls_ctx;
  HttpHandler handler;
  HttpLimits limits;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  int port = 0;

  void accept();
  void refuse(tcp::socket socket);
};

namespace {

template <class Stream>
constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

HttpRequest to_request(const http::request<http::string_body>& r, bool tls) {
  HttpRequest out;
  out.method = std::string(r.method_string());
  std::string target(r.target());
  size_t q = target.find('?');
  out.path = percent_decode(target.substr(0, q), false);
  if (q != std::string::npos) out.query = parse_form(target.substr(q + 1));
  for (const auto& f : r) {
    std::string name(f.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(f.value());
  }
  out.body = r.body();
  out.tls = tls;
  return out;
}

template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(HttpServer::Impl& srv, Stream stream) : srv_(srv), stream_(std::move(stream)) { ++srv_.open; }
  ~Session() { --srv_.open; }

  void start() {
    if constexpr (kTls<Stream>) {
      beast::get_lowest_layer(stream_).expires_after(srv_.limits.request_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!ec) self->read();
                              });
    } else {
      read();
    }
  }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(srv_.limits.header_bytes));
    parser_->body_limit(srv_.limits.body_bytes);
    beast::get_lowest_layer(stream_).expires_after(first_ ? srv_.limits.request_timeout : srv_.limits.idle_timeout);
    first_ = false;
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || ec == asio::error::eof) {
      return close();
    }
    if (ec) {
      HttpResponse r;
      if (ec == http::error::header_limit) {
        r.status = 431;
        r.body = "error: the request's header is larger than " + std::to_string(srv_.limits.header_bytes) + " bytes\n";
      } else if (ec == http::error::body_limit) {
        r.status = 413;
        r.body = "error: the request's body is larger than " + std::to_string(srv_.limits.body_bytes) + " bytes\n";
      } else if (kTls<Stream> && ec.category() == asio::error::get_ssl_category()) {
        return close();
      } else {
        r.status = 400;
        r.body = "error: the request does not parse as HTTP/1.1: " + ec.message() + "\n";
      }
      return send(r, 11, false);
    }
    const auto& req = parser_->get();
    HttpResponse r;
    try {
      r = srv_.handler(to_request(req, kTls<Stream>));
    } catch (const std::exception& e) {
      r = HttpResponse{};
      r.status = 500;
      r.body = std::string("error: ") + e.what() + "\n";
    } catch (...) {
      r = HttpResponse{};
      r.status = 500;
      r.body = "error: the request failed\n";
    }
    send(r, req.version(), req.keep_alive());
  }

  void send(const HttpResponse& r, unsigned version, bool keep_alive) {
    res_ = {};
    res_.version(version);
    res_.result(static_cast<http::status>(r.status));
    res_.set(http::field::server, "tunefarm-tuner");
    res_.set(http::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) res_.insert(name, value);
    res_.body() = r.body;
    res_.keep_alive(keep_alive);
    res_.prepare_payload();
    beast::get_lowest_layer(stream_).expires_after(srv_.limits.request_timeout);
    http::async_write(stream_, res_, [self = this->shared_from_this(), keep_alive](beast::error_code ec, size_t) {
      if (ec || !keep_alive) return self->close();
      self->read();
    });
  }

  void close() {
    beast::error_code ignored;
    if constexpr (kTls<Stream>) {
      beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(2));
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
        beast::error_code ignored2;
        beast::get_lowest_layer(self->stream_).socket().close(ignored2);
      });
    } else {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      stream_.socket().close(ignored);
    }
  }

  HttpServer::Impl& srv_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  bool first_ = true;
};

}  // namespace

// A plain 503 for a connection beyond the limit, then a lingering close: what the client sent
// is read and dropped for up to a second, since closing a socket with unread data resets the
// connection, and a reset can discard the reply before the client reads it.
namespace {

class Refusal : public std::enable_shared_from_this<Refusal> {
 public:
  explicit Refusal(tcp::socket socket) : stream_(std::move(socket)) {}
  void start() {
    static const char k503[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                               "Content-Length: 40\r\nConnection: close\r\n\r\n"
                               "error: too many open connections, retry\n";
    stream_.expires_after(std::chrono::seconds(1));
    asio::async_write(stream_, asio::buffer(k503, sizeof k503 - 1),
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return;
                        beast::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                        self->drain();
                      });
  }

 private:
  void drain() {
    stream_.async_read_some(asio::buffer(sink_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec) self->drain();  // else the timer ran out or the client closed: the socket closes with us
    });
  }
  beast::tcp_stream stream_;
  std::array<char, 4096> sink_;
};

}  // namespace

void HttpServer::Impl::refuse(tcp::socket socket) { std::make_shared<Refusal>(std::move(socket))->start(); }

void HttpServer::Impl::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of file descriptors, say: try again shortly rather than spin.
      auto timer = std::make_shared<asio::steady_timer>(ioc, std::chrono::milliseconds(100));
      timer->async_wait([this, timer](beast::error_code) { accept(); });
      return;
    }
    {
      if (open.load() >= limits.max_connections) {
        if (tls_ctx) {
          beast::error_code ignored;
          socket.close(ignored);
        } else {
          refuse(std::move(socket));
        }
      } else if (tls_ctx) {
        std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
            *this, beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *tls_ctx))
            ->start();
      } else {
        std::make_shared<Session<beast::tcp_stream>>(*this, beast::tcp_stream(std::move(socket)))->start();
      }
    }
    accept();
  });
}

HttpServer::HttpServer(const std::string& host, int port, const farm::TlsFiles& tls, HttpHandler handler,
                       HttpLimits limits, int threads)
    : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->limits = limits;
  if (!tls.cert.empty()) {
    impl_->tls_ctx.emplace(ssl::context::tls_server);
    ssl::context& c = *impl_->tls_ctx;
    c.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                  ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    try {
      c.use_certificate_chain_file(tls.cert);
      c.use_private_key_file(tls.key, ssl::context::pem);
      if (!tls.ca.empty()) {
        c.load_verify_file(tls.ca);
        c.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
      }
    } catch (const boost::system::system_error& e) {
      throw farm::ConfigError(str("dashboard TLS: cannot use ", tls.cert, " / ", tls.key,
                                  tls.ca.empty() ? "" : " / " + tls.ca, ": ", e.what()));
    }
  }
  beast::error_code ec;
  asio::ip::address addr = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) {
    tcp::resolver resolver(impl_->ioc);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) throw farm::ConfigError(str("dashboard: cannot resolve host ", host, ": ", ec.message()));
    addr = results.begin()->endpoint().address();
  }
  tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw farm::ConfigError(str("dashboard: cannot listen on ", host, ":", port, ": ", ec.message()));
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->accept();
  for (int i = 0; i < std::max(1, threads); ++i) impl_->threads.emplace_back([this] { impl_->ioc.run(); });
}

HttpServer::~HttpServer() {
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
}

int HttpServer::port() const { return impl_->port; }

}  // namespace tf::web
