#include "daemon/web_security.h"

#include <crypt.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/yaml_reader.h"

namespace infertap::daemon {
namespace {

using base::YamlReader;
using Node = YAML::Node;

constexpr std::size_t kAcceptedKept = 64;

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown TLS error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

std::string sha256(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(digest), len);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool bcrypt_matches(const std::string& password, const std::string& hash) {
  crypt_data data{};
  const char* out = crypt_r(password.c_str(), hash.c_str(), &data);
  return out != nullptr && out[0] != '*' && constant_time_equal(out, hash);
}

bool is_bcrypt(const std::string& hash) {
  return hash.size() == 60 && (hash.rfind("$2a$", 0) == 0 || hash.rfind("$2b$", 0) == 0 || hash.rfind("$2y$", 0) == 0);
}

std::string resolve(const std::string& base_dir, const std::string& file) {
  if (file.empty() || file.front() == '/' || base_dir.empty()) return file;
  return (std::filesystem::path(base_dir) / file).string();
}

void read_tls(YamlReader& r, const Node& node, const std::string& key, const std::string& base_dir, TlsFiles& tls) {
  std::string auth_type = "NoClientCert", min_version = "TLS12";
  const auto file = [&](std::string& field) {
    return [&r, &field, &base_dir](const Node& v, const std::string& k) {
      if (auto s = r.string(v, k)) field = resolve(base_dir, *s);
    };
  };
  const auto text = [&](std::string& field) {
    return [&r, &field](const Node& v, const std::string& k) {
      if (auto s = r.string(v, k)) field = *s;
    };
  };
  r.fields(node, key,
           {{"cert_file", file(tls.cert_file)},
            {"key_file", file(tls.key_file)},
            {"client_ca_file", file(tls.client_ca_file)},
            {"client_auth_type", text(auth_type)},
            {"min_version", text(min_version)}});
  if (tls.cert_file.empty() != tls.key_file.empty()) r.fail(node, key, "needs both cert_file and key_file");
  if (auth_type == "RequireAndVerifyClientCert") {
    tls.require_client_cert = true;
    if (tls.client_ca_file.empty()) r.fail(node, key, "client_auth_type RequireAndVerifyClientCert needs client_ca_file");
  } else if (auth_type != "NoClientCert") {
    r.fail(node, key + ".client_auth_type", "must be NoClientCert or RequireAndVerifyClientCert, got '" + auth_type + "'");
  }
  if (min_version != "TLS12" && min_version != "TLS13") {
    r.fail(node, key + ".min_version", "must be TLS12 or TLS13, got '" + min_version + "'");
  }
  tls.tls13_only = min_version == "TLS13";
}

void read_users(YamlReader& r, const Node& node, const std::string& key, WebConfig& config) {
  if (!node.IsMap()) return r.fail(node, key, "must be a mapping of user: bcrypt hash");
  for (auto it = node.begin(); it != node.end(); ++it) {
    const Node name = it->first, hash = it->second;
    if (!name.IsScalar() || name.Scalar().empty() || name.Scalar().find(':') != std::string::npos) {
      r.fail(name, key, "a user name must be a non-empty string without ':'");
      continue;
    }
    const std::string item = key + "." + name.Scalar();
    const auto value = r.string(hash, item);
    if (!value) continue;
    if (!is_bcrypt(*value)) {
      r.fail(hash, item, "must be a bcrypt hash ($2y$..., e.g. from `htpasswd -nBC 10 " + name.Scalar() + "`)");
      continue;
    }
    config.users.emplace_back(name.Scalar(), *value);
  }
}

}  // namespace

std::optional<WebConfig> parse_web_config(const std::string& yaml_text, const std::string& base_dir,
                                          std::string* error) {
  std::vector<std::string> errors;
  YamlReader r(errors);
  WebConfig config;
  try {
    const Node root = YAML::Load(yaml_text);
    r.fields(root, "",
             {{"tls_server_config", [&](const Node& v, const std::string& k) { read_tls(r, v, k, base_dir, config.tls); }},
              {"basic_auth_users", [&](const Node& v, const std::string& k) { read_users(r, v, k, config); }}});
  } catch (const YAML::Exception& e) {
    errors.push_back(std::string("YAML error: ") + e.what());
  }
  if (errors.empty()) return config;
  if (error) {
    error->clear();
    for (const std::string& e : errors) *error += (error->empty() ? "" : "\n") + e;
  }
  return std::nullopt;
}

std::optional<WebConfig> load_web_config(const std::string& path, std::string* error) {
  const auto text = base::read_config_file(path, error);
  if (!text) return std::nullopt;
  std::string inner;
  auto config = parse_web_config(*text, std::filesystem::path(path).parent_path().string(), &inner);
  if (!config && error) *error = base::prefix_lines(path, inner);
  return config;
}

// ---- basic authentication --------------------------------------------------------

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return std::nullopt;  // "x=y=" is not padding
    std::uint32_t bits = 0;
    for (int k = 0; k < 4 - pad; ++k) {
      const int v = value(text[i + static_cast<std::size_t>(k)]);
      if (v < 0) return std::nullopt;
      bits |= static_cast<std::uint32_t>(v) << (18 - 6 * k);
    }
    out.push_back(static_cast<char>(bits >> 16));
    if (pad < 2) out.push_back(static_cast<char>((bits >> 8) & 0xff));
    if (pad < 1) out.push_back(static_cast<char>(bits & 0xff));
  }
  return out;
}

bool BasicAuth::check(std::string_view authorization) {
  if (users_.empty()) return true;
  if (authorization.size() < 6 || strncasecmp(authorization.data(), "basic ", 6) != 0) return false;
  const std::string digest = sha256(authorization);
  {
    std::lock_guard lock(mu_);
    if (std::find(accepted_.begin(), accepted_.end(), digest) != accepted_.end()) return true;
  }
  std::string_view encoded = authorization.substr(6);
  while (!encoded.empty() && encoded.front() == ' ') encoded.remove_prefix(1);
  const auto decoded = base64_decode(encoded);
  if (!decoded) return false;
  const std::size_t colon = decoded->find(':');
  if (colon == std::string::npos) return false;
  const std::string user = decoded->substr(0, colon), password = decoded->substr(colon + 1);
  const auto it = std::find_if(users_.begin(), users_.end(), [&](const auto& u) { return u.first == user; });
  if (it == users_.end() || !bcrypt_matches(password, it->second)) return false;
  std::lock_guard lock(mu_);
  accepted_.push_back(digest);
  if (accepted_.size() > kAcceptedKept) accepted_.erase(accepted_.begin());
  return true;
}

// ---- TLS -------------------------------------------------------------------------

std::unique_ptr<TlsServer> TlsServer::create(const TlsFiles& files, std::string* error) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  const auto fail = [&](const std::string& what) -> std::unique_ptr<TlsServer> {
    if (error) *error = what + ": " + openssl_error();
    SSL_CTX_free(ctx);
    return nullptr;
  };
  if (!ctx) return fail("TLS");
  SSL_CTX_set_min_proto_version(ctx, files.tls13_only ? TLS1_3_VERSION : TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) return fail(files.cert_file);
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1) return fail(files.key_file);
  if (SSL_CTX_check_private_key(ctx) != 1) return fail(files.key_file + " does not match " + files.cert_file);
  if (files.require_client_cert) {
    if (SSL_CTX_load_verify_locations(ctx, files.client_ca_file.c_str(), nullptr) != 1) {
      return fail(files.client_ca_file);
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  std::unique_ptr<TlsServer> server(new TlsServer());
  server->ctx_ = ctx;
  return server;
}

TlsServer::~TlsServer() { SSL_CTX_free(static_cast<SSL_CTX*>(ctx_)); }

std::unique_ptr<TlsSession> TlsServer::session(int fd) {
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(ctx_));
  if (!ssl) return nullptr;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  SSL_set_accept_state(ssl);
  return std::make_unique<TlsSession>(ssl);
}

TlsSession::~TlsSession() { SSL_free(static_cast<SSL*>(ssl_)); }

IoResult TlsSession::result_of(int rc) {
  if (rc > 0) return {IoState::done, static_cast<std::size_t>(rc)};
  switch (SSL_get_error(static_cast<SSL*>(ssl_), rc)) {
    case SSL_ERROR_WANT_READ: return {IoState::want_read, 0};
    case SSL_ERROR_WANT_WRITE: return {IoState::want_write, 0};
    case SSL_ERROR_ZERO_RETURN: return {IoState::closed, 0};
    default: ERR_clear_error(); return {IoState::failed, 0};
  }
}

IoResult TlsSession::handshake() {
  const int rc = SSL_do_handshake(static_cast<SSL*>(ssl_));
  if (rc == 1) {
    handshaken_ = true;
    return {IoState::done, 0};
  }
  return result_of(rc);
}

IoResult TlsSession::read(char* buf, std::size_t len) {
  return result_of(SSL_read(static_cast<SSL*>(ssl_), buf, static_cast<int>(std::min<std::size_t>(len, INT32_MAX))));
}

IoResult TlsSession::write(const char* buf, std::size_t len) {
  return result_of(SSL_write(static_cast<SSL*>(ssl_), buf, static_cast<int>(std::min<std::size_t>(len, INT32_MAX))));
}

void TlsSession::close_notify() {
  if (handshaken_) SSL_shutdown(static_cast<SSL*>(ssl_));
  ERR_clear_error();
}

}  // namespace infertap::daemon
