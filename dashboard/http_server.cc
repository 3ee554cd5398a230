#include "dashboard/http_server.h"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <fcntl.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>

#include "base/error.h"

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

// What the server knows of each open connection, for the connection budget. Lives in one of
// Impl's two lists (by how long it has been idle, idlest first) until it is closed or evicted.
// Not in an anonymous namespace: Impl, which has external linkage, holds lists of them.
struct HttpConnection {
  virtual ~HttpConnection() = default;
  // Closes the connection from any thread (the close runs on the connection's strand).
  virtual void evict() = 0;
  bool listed = false;
  bool trusted = false;    // has made a request as a known user
  bool busy = false;       // a request is being handled or answered (guarded by Impl::conns_mu)
  std::list<std::weak_ptr<HttpConnection>>::iterator where;
};

// Members in this order: the io_context destroys the sessions it still holds, and they use
// `conns`, `tls_ctx` and `limits`, declared before it (destroyed after it).
struct HttpServer::Impl {
  std::atomic<size_t> buffered{0};  // bytes of response bodies being written
  std::mutex conns_mu;
  std::list<std::weak_ptr<HttpConnection>> untrusted, trusted;  // idlest first
  std::optional<ssl::context> tls_ctx;
  HttpHandler handler;
  HttpLimits limits;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  int port = 0;

  void accept();
  void refuse(tcp::socket socket);
  // Makes room for one more connection, closing the idlest one the budget allows; false when
  // every connection is busy.
  bool make_room();
  void enlist(const std::shared_ptr<HttpConnection>& c);
  void unlist(HttpConnection& c);
  // The connection has finished a request (made by a known user when `trusted`): it becomes
  // the least idle of its list; `busy` says whether it is handling another.
  void touch(HttpConnection& c, bool busy, bool trusted);
};

void HttpServer::Impl::enlist(const std::shared_ptr<HttpConnection>& c) {
  std::lock_guard<std::mutex> l(conns_mu);
  c->where = untrusted.insert(untrusted.end(), c);
  c->listed = true;
}

void HttpServer::Impl::unlist(HttpConnection& c) {
  std::lock_guard<std::mutex> l(conns_mu);
  if (!c.listed) return;
  (c.trusted ? trusted : untrusted).erase(c.where);
  c.listed = false;
}

void HttpServer::Impl::touch(HttpConnection& c, bool busy, bool trust) {
  std::lock_guard<std::mutex> l(conns_mu);
  c.busy = busy;
  if (!c.listed) return;
  std::list<std::weak_ptr<HttpConnection>>& from = c.trusted ? trusted : untrusted;
  if (trust) c.trusted = true;
  std::list<std::weak_ptr<HttpConnection>>& to = c.trusted ? trusted : untrusted;
  to.splice(to.end(), from, c.where);
}

bool HttpServer::Impl::make_room() {
  std::shared_ptr<HttpConnection> victim;
  {
    std::lock_guard<std::mutex> l(conns_mu);
    auto idlest =
        [](std::list<std::weak_ptr<HttpConnection>>& list) -> std::shared_ptr<HttpConnection> {
      for (const std::weak_ptr<HttpConnection>& w : list) {
        std::shared_ptr<HttpConnection> c = w.lock();
        if (c && !c->busy) return c;
      }
      return nullptr;
    };
    size_t open = untrusted.size() + trusted.size();
    if (untrusted.size() >= static_cast<size_t>(std::max(1, limits.max_unauthenticated))) {
      victim = idlest(untrusted);
    } else if (open >= static_cast<size_t>(std::max(1, limits.max_connections))) {
      victim = idlest(untrusted);
      if (!victim) victim = idlest(trusted);
    } else {
      return true;
    }
    if (!victim) return false;
    (victim->trusted ? trusted : untrusted).erase(victim->where);
    victim->listed = false;
  }
  victim->evict();
  return true;
}

namespace {

template <class Stream>
constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

void set_cloexec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string_view::npos ? "" : std::string(s.substr(b, e - b + 1));
}

// The request built from the parsed message's first `fields` fields (its header: the fields
// after them came in the trailer, and are dropped).
HttpRequest to_request(const http::request<http::string_body>& r, size_t fields, bool tls) {
  HttpRequest out;
  out.method = std::string(r.method_string());
  std::string target(r.target());
  size_t q = target.find('?');
  out.path = percent_decode(target.substr(0, q), false);
  if (q != std::string::npos) out.query = parse_form(target.substr(q + 1));
  size_t i = 0;
  for (const auto& f : r) {
    if (i++ == fields) break;
    out.headers[lower(sv(f.name_string()))] = std::string(f.value());
  }
  out.body = r.body();
  out.tls = tls;
  return out;
}

// A request the server refuses before the handler sees it.
struct Refused {
  int status;
  std::string message;
};

// The header's framing, checked before any body byte is read: what a proxy in front of us and
// we could read differently (RFC 9112 sections 3.2, 6.1, 6.3) is refused, not guessed.
std::optional<Refused> check_framing(const http::request<http::string_body>& r) {
  const std::string target(r.target());
  if (target.empty() || target[0] != '/') {
    return Refused{400, "the request target \"" + target.substr(0, 200) + "\" is not a path (it must start with /)"};
  }
  size_t hosts = 0, lengths = 0;
  std::vector<std::string> codings;
  for (const auto& f : r) {
    if (f.name() == http::field::host) ++hosts;
    if (f.name() == http::field::content_length) {
      ++lengths;
      std::string v = trim(sv(f.value()));
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) {
        return Refused{400, "Content-Length \"" + v.substr(0, 64) + "\" is not a number"};
      }
    }
    if (f.name() == http::field::transfer_encoding) {
      std::string v(f.value());
      size_t at = 0;
      while (at <= v.size()) {
        size_t comma = v.find(',', at);
        std::string c = lower(trim(std::string_view(v).substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
        if (!c.empty()) codings.push_back(c);
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
      if (codings.empty()) return Refused{400, "an empty Transfer-Encoding"};
    }
  }
  if (r.version() >= 11 && hosts != 1) {
    return Refused{400, hosts == 0 ? "an HTTP/1.1 request needs a Host field" : "the request has " + std::to_string(hosts) + " Host fields"};
  }
  if (lengths > 1) return Refused{400, "the request has " + std::to_string(lengths) + " Content-Length fields"};
  if (!codings.empty()) {
    if (r.version() < 11) return Refused{400, "Transfer-Encoding in an HTTP/1.0 request"};
    if (lengths) return Refused{400, "the request has both Transfer-Encoding and Content-Length"};
    for (size_t i = 0; i + 1 < codings.size(); ++i) {
      if (codings[i] == "chunked") return Refused{400, "Transfer-Encoding: chunked is not the last coding"};
    }
    for (const std::string& c : codings) {
      if (c != "chunked") return Refused{501, "transfer coding \"" + c.substr(0, 64) + "\" is not supported (only chunked)"};
    }
  }
  return std::nullopt;
}

// Whether the header bytes at the start of `data` (up to the blank line, if any) fold a field
// over two lines (obs-fold), which RFC 9112 section 5.2 lets a server refuse.
bool folds_a_line(std::string_view data) {
  size_t end = data.find("\r\n\r\n");
  std::string_view head = data.substr(0, end == std::string_view::npos ? data.size() : end + 2);
  for (size_t at = head.find("\r\n"); at != std::string_view::npos; at = head.find("\r\n", at + 2)) {
    if (at + 2 < head.size() && (head[at + 2] == ' ' || head[at + 2] == '\t')) return true;
  }
  return false;
}

// A response's status line and header fields from the handler's answer.
template <class Body>
void set_head(http::response<Body>& m, const HttpResponse& r, unsigned version) {
  m.version(version);
  m.result(static_cast<http::status>(r.status));
  m.set(http::field::server, "tunefarm-tuner");
  m.set(http::field::content_type, r.content_type);
  for (const auto& [name, value] : r.headers) m.insert(name, value);
}

size_t fields_bytes(const http::request<http::string_body>& r) {
  size_t n = r.method_string().size() + r.target().size() + 12;
  for (const auto& f : r) n += f.name_string().size() + f.value().size() + 4;
  return n;
}

template <class Stream>
class Session : public HttpConnection, public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(HttpServer::Impl& srv, Stream stream)
      : srv_(srv), stream_(std::move(stream)), buffer_(srv.limits.header_bytes + 4096) {}
  ~Session() override {
    srv_.buffered -= reserved_;
    srv_.unlist(*this);
  }

  void start() {
    if constexpr (kTls<Stream>) {
      beast::get_lowest_layer(stream_).expires_after(srv_.limits.request_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!ec) self->next_request();
                              });
    } else {
      next_request();
    }
  }

  void evict() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      beast::error_code ignored;
      beast::get_lowest_layer(self->stream_).socket().close(ignored);
    });
  }

 private:
  void next_request() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(srv_.limits.header_bytes));
    parser_->body_limit(srv_.limits.body_bytes);
    parser_->on_chunk_header(chunk_cb_);
    extension_bytes_ = 0;
    header_fields_ = 0;
    framing_checked_ = false;
    started_ = buffer_.size() > 0;  // a pipelined request has begun already
    beast::get_lowest_layer(stream_).expires_after(first_ || started_ ? srv_.limits.request_timeout
                                                                      : srv_.limits.idle_timeout);
    first_ = false;
    parse();
  }

  // Feeds what is buffered to the parser, reading more as it needs; every failure is answered
  // here (nothing the parser throws leaves this function).
  void parse() {
    for (;;) {
      if (parser_->is_done()) return handle();
      beast::error_code ec = http::error::need_more;
      if (buffer_.size() > 0) {
        if (!parser_->is_header_done()) {
          std::string_view data(static_cast<const char*>(buffer_.data().data()), buffer_.size());
          if (folds_a_line(data)) return refuse({400, "a header field is folded over two lines (obs-fold)"});
        }
        ec = {};
        size_t used = 0;
        try {
          used = parser_->put(buffer_.data(), ec);
        } catch (const std::exception& e) {
          return refuse({400, std::string("the request does not parse as HTTP/1.1: ") + e.what()});
        }
        buffer_.consume(used);
        if (!ec && used == 0 && !parser_->is_done()) ec = http::error::need_more;
      }
      if (parser_->is_header_done() && !framing_checked_) {
        framing_checked_ = true;
        header_fields_ = static_cast<size_t>(std::distance(parser_->get().begin(), parser_->get().end()));
        if (std::optional<Refused> bad = check_framing(parser_->get())) return refuse(*bad);
        parser_->eager(true);
        if (ec == http::error::need_more && buffer_.size() > 0) continue;
      }
      if (ec == http::error::need_more) return read_more();
      if (ec) return refuse(parse_error(ec));
    }
  }

  Refused parse_error(beast::error_code ec) {
    const HttpLimits& l = srv_.limits;
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return {431, "the request's line, header fields, chunk extensions and trailer together are larger than " +
                       std::to_string(l.header_bytes) + " bytes"};
    }
    if (ec == http::error::body_limit) {
      return {413, "the request's body is larger than " + std::to_string(l.body_bytes) + " bytes"};
    }
    return {400, "the request does not parse as HTTP/1.1: " + ec.message()};
  }

  void read_more() {
    if (buffer_.size() >= buffer_.max_size()) return refuse(parse_error(http::error::buffer_overflow));
    size_t room = std::min<size_t>(4096, buffer_.max_size() - buffer_.size());
    stream_.async_read_some(buffer_.prepare(room), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      self->buffer_.commit(n);
      if (n > 0 && !self->started_) {
        // The request's first byte: from here it has request_timeout to arrive whole.
        self->started_ = true;
        beast::get_lowest_layer(self->stream_).expires_after(self->srv_.limits.request_timeout);
      }
      if (ec) return self->close();  // closed, reset, timed out or evicted: nothing to answer
      self->parse();
    });
  }

  void handle() {
    const auto& req = parser_->get();
    if (fields_bytes(req) + extension_bytes_ > srv_.limits.header_bytes) return refuse(parse_error(http::error::header_limit));
    srv_.touch(*this, true, false);
    HttpResponse r;
    try {
      r = srv_.handler(to_request(req, header_fields_, kTls<Stream>));
    } catch (const std::exception& e) {
      r = HttpResponse{};
      r.status = 500;
      r.body = std::string("error: ") + e.what() + "\n";
    } catch (...) {
      r = HttpResponse{};
      r.status = 500;
      r.body = "error: the request failed\n";
    }
    if (r.authenticated) srv_.touch(*this, true, true);
    send(std::move(r), req.version(), req.keep_alive());
  }

  void refuse(const Refused& why) {
    linger_ = true;
    HttpResponse r;
    r.status = why.status;
    r.body = "error: " + why.message + "\n";
    send(std::move(r), parser_ && parser_->is_header_done() ? parser_->get().version() : 11, false);
  }

  void send(HttpResponse r, unsigned version, bool keep_alive) {
    if (r.stream) return send_stream(std::move(r), version, keep_alive);
    if (r.body.size() > 65536) {
      size_t before = srv_.buffered.fetch_add(r.body.size());
      if (before + r.body.size() > srv_.limits.buffered_bytes) {
        srv_.buffered -= r.body.size();
        r = HttpResponse{};
        r.status = 503;
        r.body = "error: the server holds " + std::to_string(before >> 20) +
                 " MiB of answers for slow readers already: retry shortly\n";
      } else {
        reserved_ = r.body.size();
      }
    }
    res_ = {};
    set_head(res_, r, version);
    res_.body() = std::move(r.body);
    res_.keep_alive(keep_alive);
    res_.prepare_payload();
    beast::get_lowest_layer(stream_).expires_after(srv_.limits.write_timeout);
    http::async_write(stream_, res_, [self = this->shared_from_this(), keep_alive](beast::error_code ec, size_t) {
      self->answered(ec, keep_alive);
    });
  }

  void answered(beast::error_code ec, bool keep_alive) {
    srv_.buffered -= reserved_;
    reserved_ = 0;
    res_ = {};
    head_serializer_.reset();
    producer_ = nullptr;
    piece_ = std::string();
    srv_.touch(*this, false, false);
    if (ec || !keep_alive) return close();
    next_request();
  }

  // A streamed body: the header, then each piece the producer makes as a chunk (HTTP/1.1) or
  // as it is (HTTP/1.0, ended by closing the connection).
  void send_stream(HttpResponse r, unsigned version, bool keep_alive) {
    chunked_ = version >= 11;
    keep_alive_ = keep_alive && chunked_;
    producer_ = std::move(r.stream);
    head_ = {};
    set_head(head_, r, version);
    head_.keep_alive(keep_alive_);
    if (chunked_) head_.chunked(true);
    head_serializer_.emplace(head_);
    beast::get_lowest_layer(stream_).expires_after(srv_.limits.write_timeout);
    http::async_write_header(stream_, *head_serializer_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->answered(ec, false);
      self->send_piece();
    });
  }

  void send_piece() {
    piece_.clear();
    bool more = true;
    try {
      while (more && piece_.empty()) more = producer_(piece_);
    } catch (const std::exception&) {
      return answered(asio::error::operation_aborted, false);  // the status is sent: only a close can say it
    }
    if (piece_.empty()) return finish_stream();
    auto after = [self = this->shared_from_this(), more](beast::error_code ec, size_t) {
      if (ec) return self->answered(ec, false);
      if (more) return self->send_piece();
      self->finish_stream();
    };
    beast::get_lowest_layer(stream_).expires_after(srv_.limits.write_timeout);
    if (chunked_) {
      asio::async_write(stream_, http::make_chunk(asio::buffer(piece_)), std::move(after));
    } else {
      asio::async_write(stream_, asio::buffer(piece_), std::move(after));
    }
  }

  void finish_stream() {
    if (!chunked_) return answered({}, false);
    beast::get_lowest_layer(stream_).expires_after(srv_.limits.write_timeout);
    asio::async_write(stream_, http::make_chunk_last(), [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->answered(ec, self->keep_alive_);
    });
  }

  void close() {
    beast::error_code ignored;
    if constexpr (!kTls<Stream>) {
      if (linger_) {
        // After a refusal the client may still be sending: what it sends is read and dropped
        // (for up to a second and 1 MiB), since closing with unread data resets the connection
        // and a reset can discard the answer before the client reads it.
        linger_ = false;
        sink_ = std::make_unique<std::array<char, 4096>>();
        stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        stream_.expires_after(std::chrono::seconds(1));
        return drain();
      }
    }
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

  void drain() {
    stream_.async_read_some(asio::buffer(*sink_), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (!ec && self->drained_ < (1u << 20)) return self->drain();
      beast::error_code ignored;
      self->stream_.socket().close(ignored);
    });
  }

  HttpServer::Impl& srv_;
  Stream stream_;
  bool linger_ = false;
  size_t drained_ = 0;
  std::unique_ptr<std::array<char, 4096>> sink_;
  beast::flat_buffer buffer_;  // bounded: header_bytes + 4 KiB
  std::optional<http::request_parser<http::string_body>> parser_;
  size_t extension_bytes_ = 0;  // chunk extensions of this request so far
  size_t header_fields_ = 0;    // fields in the header (those after came in the trailer)
  bool framing_checked_ = false;
  bool started_ = false;        // the current request's first byte has arrived
  bool first_ = true;
  size_t reserved_ = 0;         // of Impl::buffered, for the body being written
  std::function<void(uint64_t, beast::string_view, beast::error_code&)> chunk_cb_ =
      [this](uint64_t, beast::string_view ext, beast::error_code& ec) {
        extension_bytes_ += ext.size();
        if (extension_bytes_ > srv_.limits.header_bytes) ec = http::error::header_limit;
      };
  http::response<http::string_body> res_;
  // A streamed response.
  http::response<http::empty_body> head_;
  std::optional<http::response_serializer<http::empty_body>> head_serializer_;
  std::function<bool(std::string&)> producer_;
  std::string piece_;
  bool chunked_ = false, keep_alive_ = false;
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
    set_cloexec(socket.native_handle());
    if (!make_room()) {
      if (tls_ctx) {
        beast::error_code ignored;
        socket.close(ignored);
      } else {
        refuse(std::move(socket));
      }
    } else if (tls_ctx) {
      auto s = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
          *this, beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *tls_ctx));
      enlist(s);
      s->start();
    } else {
      auto s = std::make_shared<Session<beast::tcp_stream>>(*this, beast::tcp_stream(std::move(socket)));
      enlist(s);
      s->start();
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
  set_cloexec(impl_->acceptor.native_handle());
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
