// The metrics endpoint under clients that misbehave (daemon/http_server.h):
// read and write deadlines, the head size limit, health answers that never
// wait behind scrapes or slow clients, bounded connections, a backlog that
// takes a burst, and the web configuration's basic auth and TLS.
#include <gtest/gtest.h>

#include <crypt.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "daemon/http_server.h"
#include "daemon/web_security.h"
#include "support/http_load.h"
#include "support/process.h"

namespace infertap::daemon {
namespace {

using namespace std::chrono_literals;
using testing::timed_get;

std::unique_ptr<HttpServer> serve(HttpOptions o, HttpServer::RenderFn render = [] { return std::string("up 1\n"); }) {
  if (o.listen == HttpOptions{}.listen) o.listen = "127.0.0.1:0";
  std::string error;
  auto s = HttpServer::start(o, std::move(render), &error);
  EXPECT_NE(s, nullptr) << error;
  return s;
}

// Sends `raw` on a new connection and reads until the server closes (or `timeout`).
std::string exchange(std::uint16_t port, const std::string& raw, std::chrono::milliseconds timeout = 3s) {
  const int fd = testing::connect_nonblocking(port);
  if (fd < 0) return "";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::size_t sent = 0;
  std::string in;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(sent < raw.size() ? POLLOUT | POLLIN : POLLIN), 0};
    if (poll(&p, 1, 20) <= 0) continue;
    if ((p.revents & POLLOUT) && sent < raw.size()) {
      const ssize_t n = send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<std::size_t>(n);
      continue;
    }
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return in;
}

TEST(Endpoint, ASlowHeadIsCutAtTheReadTimeout) {
  HttpOptions o;
  o.read_timeout = 300ms;
  auto s = serve(o);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string answer = exchange(s->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n", 3s);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(answer.rfind("HTTP/1.1 408", 0), 0u) << answer;
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 1500ms);
  EXPECT_EQ(s->counters().head_timeouts, 1u);
}

TEST(Endpoint, HeadsOverTheLimitBodiesAndOtherMethodsAreAnsweredAtOnce) {
  HttpOptions o;
  o.max_header_bytes = 1024;
  auto s = serve(o);
  const std::string big = "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n";
  EXPECT_EQ(exchange(s->port(), big).rfind("HTTP/1.1 431", 0), 0u);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string post = exchange(s->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\nxx");
  EXPECT_EQ(post.rfind("HTTP/1.1 405", 0), 0u) << post;
  EXPECT_NE(post.find("Allow: GET, HEAD"), std::string::npos) << post;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << "a POST with a huge body held the connection";
  EXPECT_EQ(exchange(s->port(), "GET /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(exchange(s->port(), "\x16\x03\x01 not http\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(exchange(s->port(), "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  const std::string head = exchange(s->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 5\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "") << "HEAD got a body";
  EXPECT_EQ(s->counters().rejected, 5u);
}

// The render thread is busy for 1.5 s: health answers do not wait for it,
// and the scrapes that came meanwhile share one rendering.
TEST(Endpoint, HealthDoesNotWaitForARenderingAndScrapesShareOne) {
  std::atomic<int> renders{0};
  auto s = serve({}, [&] {
    ++renders;
    std::this_thread::sleep_for(1500ms);
    return std::string("slow 1\n");
  });
  s->set_ready(true);
  std::vector<std::thread> scrapes;
  std::atomic<int> ok{0};
  for (int i = 0; i < 20; ++i) {
    scrapes.emplace_back([&] { ok += timed_get(s->port(), "/metrics", 8s).status == 200; });
    if (i == 0) std::this_thread::sleep_for(100ms);  // the first rendering starts alone
  }
  std::this_thread::sleep_for(200ms);
  for (const char* path : {"/healthz", "/readyz"}) {
    const testing::Timed t = timed_get(s->port(), path, 1s);
    EXPECT_EQ(t.status, 200) << path;
    EXPECT_LT(t.ms, 200) << path << " waited behind the rendering";
  }
  for (std::thread& t : scrapes) t.join();
  EXPECT_EQ(ok.load(), 20);
  EXPECT_EQ(renders.load(), 2) << "the 19 scrapes that came during the first rendering share the second";
}

// Every slot taken by clients that never finish their head: a new connection
// closes the oldest of them, so a probe always gets in.
TEST(Endpoint, FullSlotsMakeRoomForANewConnection) {
  HttpOptions o;
  o.max_connections = 8;
  auto s = serve(o);
  testing::HttpLoad load(s->port());
  load.slow_heads(8);
  std::this_thread::sleep_for(300ms);
  for (int i = 0; i < 5; ++i) {
    const testing::Timed t = timed_get(s->port(), "/healthz", 1s);
    EXPECT_EQ(t.status, 200) << i;
    EXPECT_LT(t.ms, 200) << i;
  }
  std::this_thread::sleep_for(600ms);  // a trickler learns of its close on its second send after it
  load.stop();
  EXPECT_GE(s->counters().evicted, 1u);
  EXPECT_GE(load.tricklers_cut(), 1u) << "the slot came from a client still sending its head";
}

// Every slot holds a scrape being rendered: a probe still gets one of the
// reserve slots, a scrape there is answered 503 at once.
TEST(Endpoint, AReserveOfSlotsKeepsHealthAnsweredWhenEverySlotHoldsAScrape) {
  HttpOptions o;
  o.max_connections = 4;
  auto s = serve(o, [] {
    std::this_thread::sleep_for(1500ms);
    return std::string("x 1\n");
  });
  std::vector<std::thread> scrapes;
  for (int i = 0; i < 4; ++i) scrapes.emplace_back([&] { EXPECT_EQ(timed_get(s->port(), "/metrics", 5s).status, 200); });
  std::this_thread::sleep_for(300ms);
  const testing::Timed health = timed_get(s->port(), "/healthz", 1s);
  EXPECT_EQ(health.status, 200);
  EXPECT_LT(health.ms, 200);
  const testing::Timed more = timed_get(s->port(), "/metrics", 1s);
  EXPECT_EQ(more.status, 503);
  for (std::thread& t : scrapes) t.join();
  EXPECT_EQ(s->counters().refused, 1u);
}

// 200 connections opened at once are all answered within a second (a
// backlog of 5 made the kernel drop SYNs: retried after 1 s, then 3 s).
TEST(Endpoint, ABurstOfConnectionsFitsTheBacklog) {
  auto s = serve({});
  std::vector<std::thread> probes;
  std::atomic<int> slow{0}, failed{0};
  for (int i = 0; i < 200; ++i) {
    probes.emplace_back([&] {
      const testing::Timed t = timed_get(s->port(), "/healthz", 3s);
      failed += t.status != 200;
      slow += t.ms > 1000;
    });
  }
  for (std::thread& t : probes) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(slow.load(), 0);
}

TEST(Endpoint, ASeparateHealthAddressServesHealthOnly) {
  HttpOptions o;
  o.health_listen = "127.0.0.1:0";
  auto s = serve(o);
  ASSERT_NE(s->health_port(), 0);
  ASSERT_NE(s->health_port(), s->port());
  EXPECT_EQ(timed_get(s->health_port(), "/healthz", 1s).status, 200);
  EXPECT_EQ(timed_get(s->health_port(), "/readyz", 1s).status, 503);
  EXPECT_EQ(timed_get(s->health_port(), "/metrics", 1s).status, 404);
  EXPECT_EQ(timed_get(s->port(), "/metrics", 1s).status, 200);
  EXPECT_EQ(timed_get(s->port(), "/healthz", 1s).status, 200);
}

// ---- a stuck capture loop ------------------------------------------------------------

constexpr std::uint64_t kSec = 1'000'000'000;

// The decision, on a fake clock: silent longer than the bound is stuck.
TEST(Health, ALoopSilentLongerThanTheBoundIsStuck) {
  const auto bound = std::chrono::seconds(10);
  EXPECT_EQ(health_of(100 * kSec, 105 * kSec, bound).status, 200);
  EXPECT_EQ(health_of(100 * kSec, 110 * kSec, bound).status, 200) << "at the bound: still healthy";
  const HealthAnswer stuck = health_of(100 * kSec, 112 * kSec + kSec / 2, bound);
  EXPECT_EQ(stuck.status, 503);
  EXPECT_EQ(stuck.body, "stuck: the capture loop has not run for 12.5 s (bound 10.0 s)\n");
  EXPECT_EQ(health_of(0, 500 * kSec, bound).status, 200) << "not beating yet: the capture is opening";
  EXPECT_EQ(health_of(100 * kSec, 99 * kSec, bound).status, 200) << "a beat newer than the reading";
}

// The endpoint follows the heartbeat it watches: 200 while it beats, 503 with the reason once it stops.
TEST(Health, HealthzAnswers503WhileTheWatchedLoopIsStuck) {
  HttpOptions o;
  o.stuck_after = 300ms;
  auto s = serve(o);
  Heartbeat heartbeat;
  s->watch(&heartbeat);
  EXPECT_EQ(timed_get(s->port(), "/healthz", 1s).status, 200) << "not beating yet";
  heartbeat.beat(base::monotonic_ns());
  EXPECT_EQ(timed_get(s->port(), "/healthz", 1s).status, 200);
  std::this_thread::sleep_for(500ms);
  const testing::Timed stuck = timed_get(s->port(), "/healthz", 1s);
  EXPECT_EQ(stuck.status, 503);
  EXPECT_NE(stuck.body.find("stuck: the capture loop has not run for"), std::string::npos) << stuck.body;
  heartbeat.beat(base::monotonic_ns());
  EXPECT_EQ(timed_get(s->port(), "/healthz", 1s).status, 200) << "beating again";
}

// ---- web configuration ----------------------------------------------------------

std::string bcrypt(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  EXPECT_NE(crypt_gensalt_rn("$2b$", 5, nullptr, 0, salt, sizeof salt), nullptr);
  crypt_data data{};
  return crypt_r(password.c_str(), salt, &data);
}

TEST(WebConfig, ReadsExporterToolkitKeysAndRefusesOthers) {
  const std::string hash = bcrypt("pw");
  std::string error;
  auto c = parse_web_config("tls_server_config:\n  cert_file: c.pem\n  key_file: /k.pem\nbasic_auth_users:\n  prom: " +
                                hash + "\n",
                            "/etc/infertap", &error);
  ASSERT_TRUE(c) << error;
  EXPECT_EQ(c->tls.cert_file, "/etc/infertap/c.pem");
  EXPECT_EQ(c->tls.key_file, "/k.pem");
  ASSERT_EQ(c->users.size(), 1u);
  EXPECT_EQ(c->users[0].first, "prom");
  EXPECT_FALSE(parse_web_config("http_server_config:\n  http2: true\n", "", &error));
  EXPECT_NE(error.find("unknown key 'http_server_config'"), std::string::npos) << error;
  EXPECT_FALSE(parse_web_config("basic_auth_users:\n  prom: plaintext\n", "", &error));
  EXPECT_NE(error.find("bcrypt"), std::string::npos) << error;
  EXPECT_FALSE(parse_web_config("tls_server_config:\n  cert_file: c.pem\n", "", &error));
  EXPECT_NE(error.find("both cert_file and key_file"), std::string::npos) << error;
  EXPECT_FALSE(parse_web_config("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS10\n", "", &error));
  EXPECT_TRUE(parse_web_config("", "", &error)) << error;
  EXPECT_EQ(base64_decode("dXNlcjpwYXNz"), "user:pass");
  EXPECT_EQ(base64_decode("YQ=="), "a");
  EXPECT_FALSE(base64_decode("YQ="));
  EXPECT_FALSE(base64_decode("Y*=="));
}

TEST(WebConfig, BasicAuthGuardsMetricsAndLeavesHealthOpen) {
  testing::ScratchDir dir("infertap-webcfg");
  ASSERT_TRUE(dir.ok());
  std::ofstream(dir.file("web.yml")) << "basic_auth_users:\n  prom: " << bcrypt("s3cret") << "\n";
  HttpOptions o;
  o.web_config_file = dir.file("web.yml");
  auto s = serve(o);
  EXPECT_EQ(timed_get(s->port(), "/metrics", 2s).status, 401);
  const std::string none = exchange(s->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(none.rfind("HTTP/1.1 401", 0), 0u) << none;
  EXPECT_NE(none.find("WWW-Authenticate: Basic"), std::string::npos);
  const auto with = [&](const std::string& user_pass) {
    return exchange(s->port(), "GET /metrics HTTP/1.1\r\nAuthorization: Basic " + user_pass + "\r\n\r\n");
  };
  EXPECT_EQ(with("cHJvbTp3cm9uZw==").rfind("HTTP/1.1 401", 0), 0u);  // prom:wrong
  EXPECT_EQ(with("cHJvbTpzM2NyZXQ=").rfind("HTTP/1.1 200", 0), 0u);  // prom:s3cret
  EXPECT_EQ(with("cHJvbTpzM2NyZXQ=").rfind("HTTP/1.1 200", 0), 0u);  // remembered
  EXPECT_EQ(timed_get(s->port(), "/healthz", 1s).status, 200);
  EXPECT_EQ(s->counters().unauthorized, 3u);
}

// A self-signed certificate and its key, as PEM files.
void write_certificate(const std::string& cert_path, const std::string& key_path) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), 0);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509_sign(x, key, EVP_sha256());
  FILE* c = std::fopen(cert_path.c_str(), "w");
  PEM_write_X509(c, x);
  std::fclose(c);
  FILE* k = std::fopen(key_path.c_str(), "w");
  PEM_write_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(k);
  X509_free(x);
  EVP_PKEY_free(key);
}

// One request over TLS (no certificate check: the test's own); the raw answer.
std::string tls_exchange(std::uint16_t port, const std::string& request) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) == 1 && SSL_write(ssl, request.data(), static_cast<int>(request.size())) > 0) {
      char buf[4096];
      int n;
      while ((n = SSL_read(ssl, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
    }
    SSL_free(ssl);
  }
  close(fd);
  SSL_CTX_free(ctx);
  return out;
}

TEST(WebConfig, TlsServesMetricsAndAPlainHealthAddressStaysPlain) {
  testing::ScratchDir dir("infertap-tls");
  ASSERT_TRUE(dir.ok());
  write_certificate(dir.file("cert.pem"), dir.file("key.pem"));
  std::ofstream(dir.file("web.yml")) << "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n";
  HttpOptions o;
  o.web_config_file = dir.file("web.yml");
  o.health_listen = "127.0.0.1:0";
  auto s = serve(o);
  ASSERT_TRUE(s->tls());
  const std::string answer = tls_exchange(s->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("up 1\n"), std::string::npos) << answer;
  EXPECT_EQ(timed_get(s->port(), "/metrics", 1s).status, 0) << "plain HTTP answered on the TLS address";
  EXPECT_EQ(timed_get(s->health_port(), "/healthz", 1s).status, 200);
  EXPECT_GE(s->counters().tls_failures, 1u);

  std::ofstream(dir.file("bad.yml")) << "tls_server_config:\n  cert_file: key.pem\n  key_file: key.pem\n";
  o.web_config_file = dir.file("bad.yml");
  std::string error;
  EXPECT_EQ(HttpServer::start(o, [] { return std::string(); }, &error), nullptr);
  EXPECT_NE(error.find("bad.yml"), std::string::npos) << error;
}

}  // namespace
}  // namespace infertap::daemon
