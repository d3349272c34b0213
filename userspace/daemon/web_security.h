// Credentials and TLS of the metrics endpoint, configured as Prometheus
// exporters configure theirs: a web configuration file (exporter-toolkit's
// format, the subset below; docs/prometheus.md) named by
// metrics.web_config_file.
//
//   tls_server_config:
//     cert_file: server.crt          # PEM, the chain after the certificate
//     key_file: server.key
//     min_version: TLS12             # TLS12 (default) | TLS13
//     client_ca_file: ca.crt         # with client_auth_type: RequireAndVerifyClientCert
//     client_auth_type: NoClientCert # | RequireAndVerifyClientCert
//   basic_auth_users:
//     prometheus: $2y$10$...         # bcrypt (htpasswd -nBC 10 prometheus)
//
// Relative paths are taken from the file's directory. Any other key is an
// error naming it, so a setting infertapd does not apply is never ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace infertap::daemon {

struct TlsFiles {
  std::string cert_file, key_file;  // both or neither
  std::string client_ca_file;
  bool require_client_cert = false;
  bool tls13_only = false;
  bool enabled() const { return !cert_file.empty(); }
};

struct WebConfig {
  TlsFiles tls;
  std::vector<std::pair<std::string, std::string>> users;  // name, bcrypt hash
};

// Reads a web configuration file. Errors name the file, the key and its line.
std::optional<WebConfig> load_web_config(const std::string& path, std::string* error);
std::optional<WebConfig> parse_web_config(const std::string& yaml_text, const std::string& base_dir,
                                          std::string* error);

// HTTP basic authentication against bcrypt hashes. check() costs one bcrypt
// the first time a credential is seen (tens of ms at cost 10); a credential
// that passed is remembered (by its SHA-256), so a scrape every few seconds
// does not pay it again. Thread-safe.
class BasicAuth {
 public:
  explicit BasicAuth(std::vector<std::pair<std::string, std::string>> users) : users_(std::move(users)) {}
  bool enabled() const { return !users_.empty(); }
  // `authorization`: the request's Authorization header ("Basic <base64 user:password>").
  bool check(std::string_view authorization);

 private:
  std::vector<std::pair<std::string, std::string>> users_;
  std::mutex mu_;
  std::vector<std::string> accepted_;  // SHA-256 of accepted header values, newest last
};

// What a non-blocking read, write or handshake step did.
enum class IoState : std::uint8_t { done, want_read, want_write, closed, failed };
struct IoResult {
  IoState state = IoState::done;
  std::size_t bytes = 0;
};

class TlsSession;

// A TLS server context (OpenSSL): the certificate and key, loaded at start.
class TlsServer {
 public:
  static std::unique_ptr<TlsServer> create(const TlsFiles& files, std::string* error);
  ~TlsServer();
  TlsServer(const TlsServer&) = delete;
  TlsServer& operator=(const TlsServer&) = delete;
  // A session on an accepted, non-blocking socket (the socket stays the caller's).
  std::unique_ptr<TlsSession> session(int fd);

 private:
  TlsServer() = default;
  void* ctx_ = nullptr;  // SSL_CTX
};

// One connection's TLS: every call is non-blocking and says what it waits for.
class TlsSession {
 public:
  explicit TlsSession(void* ssl) : ssl_(ssl) {}
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;
  IoResult handshake();
  bool handshaken() const { return handshaken_; }
  IoResult read(char* buf, std::size_t len);
  IoResult write(const char* buf, std::size_t len);
  void close_notify();  // best effort

 private:
  IoResult result_of(int rc);
  void* ssl_;  // SSL
  bool handshaken_ = false;
};

// Standard base64 (RFC 4648) without line breaks; nullopt on anything else.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace infertap::daemon
