// A real Prometheus server (Debian package `prometheus`) scrapes a test
// HttpServer every second, then a running infertapd timing real traffic;
// PromQL over its HTTP API must return the bucket counts that were observed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "daemon/http_server.h"
#include "daemon/metrics.h"
#include "support/process.h"

namespace infertap::daemon {
namespace {

// INFERTAP_PROMETHEUS overrides the binary.
std::string prometheus_binary() {
  const char* env = std::getenv("INFERTAP_PROMETHEUS");
  return env && *env ? env : "/usr/bin/prometheus";
}
constexpr std::uint64_t kMs = 1'000'000;

// Status and body of a GET on 127.0.0.1 (plain socket, Connection: close); status 0 when unreachable.
std::pair<int, std::string> http_get(std::uint16_t port, const std::string& target) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return {0, ""};
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string raw;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[8192];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) raw.append(buf, static_cast<std::size_t>(n));
    }
  }
  close(fd);
  const auto head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) return {0, ""};
  std::string body = raw.substr(head_end + 4);
  // Prometheus answers small JSON with Content-Length, but be safe with chunked.
  if (raw.substr(0, head_end).find("chunked") != std::string::npos) {
    std::string plain;
    std::size_t i = 0;
    while (i < body.size()) {
      const auto eol = body.find("\r\n", i);
      if (eol == std::string::npos) break;
      const std::size_t len = std::stoul(body.substr(i, eol - i), nullptr, 16);
      if (len == 0) break;
      plain += body.substr(eol + 2, len);
      i = eol + 2 + len + 2;
    }
    body = plain;
  }
  return {std::stoi(raw.substr(9, 3)), body};
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// A temporary directory, removed with its contents.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/infertap-prom-XXXXXX";
    const char* p = mkdtemp(tmpl);
    if (p) path = p;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

// Prometheus scraping 127.0.0.1:`target_port` every second, its HTTP API on a free port.
struct PrometheusServer {
  TempDir dir;
  std::uint16_t web_port = 0;
  std::string log;
  std::optional<testing::Process> process;

  explicit PrometheusServer(std::uint16_t target_port) {
    const std::string prometheus = prometheus_binary();
    if (access(prometheus.c_str(), X_OK) != 0) {
      ADD_FAILURE() << prometheus << " is missing: install the Debian package (apt-get install -y prometheus)";
      return;
    }
    if (dir.path.empty()) {
      ADD_FAILURE() << "mkdtemp failed";
      return;
    }
    const std::string config = (dir.path / "prometheus.yml").string();
    std::ofstream(config) << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                          << "scrape_configs:\n  - job_name: infertap\n    static_configs:\n"
                          << "      - targets: ['127.0.0.1:" << target_port << "']\n";
    web_port = testing::free_port();
    log = (dir.path / "prometheus.log").string();
    auto spawned = testing::Process::spawn({prometheus, "--config.file=" + config,
                                            "--storage.tsdb.path=" + (dir.path / "data").string(),
                                            "--web.listen-address=127.0.0.1:" + std::to_string(web_port)},
                                           log);
    if (spawned) {
      process.emplace(std::move(*spawned));
    } else {
      ADD_FAILURE() << "cannot spawn " << prometheus;
    }
  }
  ~PrometheusServer() {
    if (process) process->stop(std::chrono::milliseconds(5000));
  }

  // le -> cumulative count of `query` (a _bucket selector), polled until
  // Prometheus has scraped samples with at least `min_count` in +Inf, or 20 s.
  std::map<double, double> buckets(const std::string& query, double min_count, std::string* last_body) {
    const std::string target = "/api/v1/query?query=" + url_encode(query);
    const std::regex sample_re(R"re("le":"([^"]+)"[^{}]*\},"value":\[[0-9.e+]+,"([^"]+)"\])re");
    std::map<double, double> out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (process->wait(std::chrono::milliseconds(0))) {
        ADD_FAILURE() << "prometheus exited; its log:\n" << testing::read_file(log);
        return {};
      }
      const auto [status, body] = http_get(web_port, target);
      *last_body = body;
      if (status == 200 && body.find("\"status\":\"success\"") != std::string::npos) {
        out.clear();
        for (auto it = std::sregex_iterator(body.begin(), body.end(), sample_re); it != std::sregex_iterator(); ++it) {
          const std::string le = (*it)[1];
          out[le == "+Inf" ? INFINITY : std::stod(le)] = std::stod((*it)[2]);
        }
        if (!out.empty() && out[INFINITY] >= min_count) return out;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return out;
  }
};

TEST(Prometheus, ScrapesHistogramBuckets) {
  MetricsRegistry reg;
  for (std::uint64_t ttft : {4 * kMs, 5 * kMs, 200 * kMs}) {
    core::StreamRecord r;
    r.role = core::Role::server;
    r.model = "sample";
    r.path = "/v1/chat/completions";
    r.conn.comm = "sample-server";
    r.metrics.ttft_ns = ttft;
    reg.observe(r);
  }
  std::string error;
  auto server = HttpServer::start("127.0.0.1:0", reg, &error);
  ASSERT_NE(server, nullptr) << error;

  PrometheusServer prom(server->port());
  ASSERT_TRUE(prom.process);
  std::string last_body;
  std::map<double, double> buckets =
      prom.buckets(R"(gen_ai_server_time_to_first_token_seconds_bucket{model="sample"})", 1, &last_body);
  ASSERT_FALSE(buckets.empty()) << "no data from Prometheus within 20 s; last answer: " << last_body
                                << "\nprometheus log:\n" << testing::read_file(prom.log);

  const std::vector<double> bounds = MetricsConfig::default_latency_buckets();
  EXPECT_EQ(buckets.size(), bounds.size() + 1) << last_body;
  for (const auto& [le, count] : buckets) {
    const double want = le < 0.004 ? 0 : le < 0.2 ? 2 : 3;
    EXPECT_EQ(count, want) << "le=" << le;
  }
  EXPECT_EQ(buckets[INFINITY], 3);

  // The whole family is well-formed for Prometheus: a scrape of up is 1.
  const auto [status, up] = http_get(prom.web_port, "/api/v1/query?query=" + url_encode("up{job=\"infertap\"}"));
  EXPECT_EQ(status, 200);
  EXPECT_NE(up.find(R"("value":[)"), std::string::npos) << up;
  EXPECT_NE(up.find(R"(,"1"])"), std::string::npos) << "scrape failed: " << up;
}

// The real thing: infertapd times the sample server's streams to the sample
// client (root, BPF) while Prometheus scrapes it; PromQL returns the TTFT
// histogram of the sample model, one observation per stream at each vantage.
TEST(Prometheus, ScrapesTheDaemonTimingRealTraffic) {
  ASSERT_EQ(geteuid(), 0u) << "this test loads BPF programs: run as root";
  testing::ScratchDir scratch("infertap-prom-live");
  ASSERT_TRUE(scratch.ok());
  const std::uint16_t app_port = testing::free_port(), metrics_port = testing::free_port();
  const std::string ready = scratch.file("ready");
  auto daemon = testing::Process::spawn({testing::build_dir() + "/infertapd", "--port", std::to_string(app_port),
                                         "--socket", "", "--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port),
                                         "--ready-file", ready, "-o", "/dev/null"},
                                        scratch.file("daemon.log"));
  ASSERT_TRUE(daemon);
  ASSERT_TRUE(testing::wait_for_file(ready, std::chrono::seconds(20))) << testing::read_file(scratch.file("daemon.log"));
  PrometheusServer prom(metrics_port);
  ASSERT_TRUE(prom.process);

  auto server = testing::Process::spawn({testing::build_dir() + "/sample-server", "--port", std::to_string(app_port),
                                         "--ttft-ms", "30", "--itl-ms", "5", "--model", "prom-live-model"},
                                        scratch.file("server.out"));
  ASSERT_TRUE(server);
  for (int i = 0; i < 250 && testing::read_file(scratch.file("server.out")).find("listening") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto client = testing::Process::spawn({testing::build_dir() + "/sample-client", "--port", std::to_string(app_port),
                                         "--concurrency", "3", "--tokens", "10", "--model", "prom-live-model"},
                                        scratch.file("client.out"));
  ASSERT_TRUE(client);
  const auto st = client->wait(std::chrono::seconds(60));
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << testing::read_file(scratch.file("client.out"));

  std::string last_body;
  auto buckets = prom.buckets(
      R"(gen_ai_server_time_to_first_token_seconds_bucket{model="prom-live-model",vantage="server"})", 3, &last_body);
  ASSERT_FALSE(buckets.empty()) << "no TTFT histogram for the sample model within 20 s; last answer: " << last_body
                                << "\ndaemon log:\n" << testing::read_file(scratch.file("daemon.log"));
  EXPECT_EQ(buckets[INFINITY], 3) << last_body;
  // TTFT is ~30 ms at the server: nothing at or below 10 ms, all three by 1 s.
  EXPECT_EQ(buckets[0.01], 0) << last_body;
  EXPECT_EQ(buckets[1], 3) << last_body;
  double previous = 0;
  for (const auto& [le, count] : buckets) {
    EXPECT_GE(count, previous) << "buckets are cumulative (le=" << le << ")";
    previous = count;
  }
  // The client vantage of the same streams is its own series.
  buckets = prom.buckets(
      R"(gen_ai_server_time_to_first_token_seconds_bucket{model="prom-live-model",vantage="client"})", 3, &last_body);
  EXPECT_EQ(buckets[INFINITY], 3) << last_body;

  server->stop(std::chrono::milliseconds(5000));
  const auto exit = daemon->stop(std::chrono::seconds(10));
  EXPECT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << testing::read_file(scratch.file("daemon.log"));
}

}  // namespace
}  // namespace infertap::daemon
