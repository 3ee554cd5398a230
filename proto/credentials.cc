#include "proto/credentials.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace tf::farm {
namespace {

std::string read_pem(const std::string& path, const char* what) {
  std::ifstream f(path);
  if (!f) throw ConfigError(std::string("cannot read ") + what + " " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.find("-----BEGIN") == std::string::npos) {
    throw ConfigError(std::string(what) + " " + path + " is not a PEM file");
  }
  return s;
}

std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

}  // namespace

void check_secret_file(const std::string& path, const std::string& what, const std::string& risk) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) throw ConfigError(what + " " + path + " is a directory");
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    std::fprintf(stderr, "warning: %s %s is accessible by others (mode %s): %s; chmod 600 %s\n", what.c_str(),
                 path.c_str(), mode, risk.c_str(), path.c_str());
  }
}

std::string read_token_file(const std::string& path) {
  check_secret_file(path, "token file", "anyone who reads it can use the farm");
  std::ifstream f(path);
  if (!f) throw ConfigError("cannot read token file " + path);
  std::string line;
  std::getline(f, line);
  size_t b = line.find_first_not_of(" \t\r");
  size_t e = line.find_last_not_of(" \t\r");
  if (b == std::string::npos) throw ConfigError("token file " + path + " is empty");
  std::string token = line.substr(b, e - b + 1);
  if (token.size() < 16) throw ConfigError("token in " + path + " is shorter than 16 characters");
  return token;
}

bool token_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

grpc::Status check_token(const grpc::ServerContextBase* ctx, const std::string& expected) {
  if (expected.empty()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return {grpc::StatusCode::UNAUTHENTICATED, "missing token (authorization metadata)"};
  std::string given(it->second.data(), it->second.size());
  const std::string prefix = "Bearer ";
  if (given.rfind(prefix, 0) != 0 || !token_equal(given.substr(prefix.size()), expected)) {
    return {grpc::StatusCode::UNAUTHENTICATED, "wrong token"};
  }
  return grpc::Status::OK;
}

void add_token(grpc::ClientContext& ctx, const std::string& token) {
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
}

std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsFiles& tls) {
  if (tls.cert.empty() && tls.key.empty()) {
    if (!tls.ca.empty()) throw ConfigError("--tls-ca needs --tls-cert and --tls-key on a server");
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert.empty() || tls.key.empty()) throw ConfigError("TLS needs both --tls-cert and --tls-key");
  grpc::SslServerCredentialsOptions opts(tls.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                        : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!tls.ca.empty()) opts.pem_root_certs = read_pem(tls.ca, "CA certificate");
  opts.pem_key_cert_pairs.push_back({read_pem(tls.key, "TLS key"), read_pem(tls.cert, "TLS certificate")});
  return grpc::SslServerCredentials(opts);
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsFiles& tls) {
  if (tls.ca.empty()) {
    if (!tls.cert.empty() || !tls.key.empty()) throw ConfigError("a client certificate needs --tls-ca");
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions opts;
  opts.pem_root_certs = read_pem(tls.ca, "CA certificate");
  if (!tls.cert.empty() || !tls.key.empty()) {
    if (tls.cert.empty() || tls.key.empty()) throw ConfigError("a client certificate needs both --tls-cert and --tls-key");
    opts.pem_private_key = read_pem(tls.key, "TLS key");
    opts.pem_cert_chain = read_pem(tls.cert, "TLS certificate");
  }
  return grpc::SslCredentials(opts);
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

void check_listen_policy(const std::string& host, const std::string& token, const char* daemon, const char* flag,
                         const char* risk) {
  if (!token.empty()) return;
  if (!is_loopback_host(host)) {
    throw ConfigError(std::string(daemon) + ": listening on " + host + " (beyond loopback) requires " + flag + ": " +
                      risk);
  }
}

std::shared_ptr<grpc::Channel> make_channel(const std::string& address, const TlsFiles& tls) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // gRPC verifies the server's certificate against the host the address names (a DNS name,
  // or an IP address against the certificate's IP SANs); only an explicit override replaces
  // that name.
  if (!tls.ca.empty() && !tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return grpc::CreateCustomChannel(address, channel_credentials(tls), args);
}

std::string random_token() {
  unsigned char buf[16];
  if (RAND_bytes(buf, sizeof buf) != 1) throw std::runtime_error("no randomness for a lease token");
  return hex(buf, sizeof buf);
}

}  // namespace tf::farm
