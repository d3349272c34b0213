// A real Prometheus server (Debian package `prometheus`) scrapes a test
// HttpServer every second, then a running infertapd timing real traffic;
// PromQL over its HTTP API must return the bucket counts that were observed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
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
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/http_server.h"
#include "output/prometheus/metrics.h"
#include "support/process.h"
#include "support/prometheus_server.h"

namespace infertap::output {
namespace {

using daemon::HttpServer;
using testing::http_get;
using testing::PrometheusServer;
using testing::promtool_problems;
using testing::start_sample_server;
using testing::url_encode;

constexpr std::uint64_t kMs = 1'000'000;

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
      prom.buckets(R"(gen_ai_server_time_to_first_token_seconds_bucket{gen_ai_response_model="sample"})", 1, &last_body);
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
// client (root, BPF) while Prometheus scrapes it; PromQL returns the
// OpenTelemetry-named histograms of the sample model, one observation per
// stream (and per gap) at each vantage.
TEST(Prometheus, ScrapesTheDaemonTimingRealTraffic) {
  ASSERT_EQ(geteuid(), 0u) << "this test loads BPF programs: run as root";
  testing::ScratchDir scratch("infertap-prom-live");
  ASSERT_TRUE(scratch.ok());
  const std::uint16_t app_port = testing::free_port(), metrics_port = testing::free_port();
  auto daemon = testing::start_metrics_daemon(scratch, app_port, metrics_port);
  ASSERT_TRUE(daemon);
  PrometheusServer prom(metrics_port);
  ASSERT_TRUE(prom.process);
  // Each stream pauses once for 150 ms after its 5th token: a stall the model caused.
  auto server = start_sample_server(scratch, app_port,
                                    {"--ttft-ms", "30", "--itl-ms", "5", "--pause-after", "5", "--pause-ms", "150",
                                     "--model", "prom-live-model"});
  ASSERT_TRUE(server);
  auto client = testing::Process::spawn({testing::build_dir() + "/sample-client", "--port", std::to_string(app_port),
                                         "--concurrency", "3", "--tokens", "10", "--model", "prom-live-model"},
                                        scratch.file("client.out"));
  ASSERT_TRUE(client);
  const auto st = client->wait(std::chrono::seconds(60));
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << testing::read_file(scratch.file("client.out"));

  const std::string model = R"(gen_ai_response_model="prom-live-model")";
  const std::string server_series = "{" + model + R"(,vantage="server",gen_ai_operation_name="chat",server_port=")" +
                                    std::to_string(app_port) + "\"}";
  std::string last_body;
  auto buckets = prom.buckets("gen_ai_server_time_to_first_token_seconds_bucket" + server_series, 3, &last_body);
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
  // One time per output token per stream: (9 x 5 ms + the 150 ms pause) / 9, about 22 ms.
  buckets = prom.buckets("gen_ai_server_time_per_output_token_seconds_bucket" + server_series, 3, &last_body);
  EXPECT_EQ(buckets[INFINITY], 3) << last_body;
  EXPECT_EQ(buckets[0.0025], 0) << last_body;
  EXPECT_EQ(buckets[0.05], 3) << last_body;
  // The client vantage of the same streams: the client families, once each.
  buckets = prom.buckets("gen_ai_client_operation_time_to_first_chunk_seconds_bucket{" + model + R"(,vantage="client"})",
                         3, &last_body);
  EXPECT_EQ(buckets[INFINITY], 3) << last_body;
  EXPECT_EQ(prom.value("sum(gen_ai_client_operation_time_per_output_chunk_seconds_count{" + model + "})", 27, &last_body),
            27) << "9 chunk gaps per stream, at the client's reads only: " << last_body;
  EXPECT_EQ(prom.value("sum(infertap_inter_token_latency_seconds_count{model=\"prom-live-model\"})", 54, &last_body), 54)
      << "9 gaps per stream at each vantage: " << last_body;
  EXPECT_EQ(prom.value(R"(sum(infertap_delivery_lag_seconds_count{model="prom-live-model",vantage="client"}))", 3,
                       &last_body),
            3) << last_body;
  for (const char* vantage : {"server", "client"}) {
    EXPECT_EQ(prom.value(std::string(R"(sum(infertap_stalls_total{model="prom-live-model",cause="model",vantage=")") +
                             vantage + "\"})",
                         3, &last_body),
              3) << "one stall per stream, the model's, at the " << vantage << ": " << last_body;
  }

  const auto [status, text] = http_get(metrics_port, "/metrics");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(promtool_problems(text, scratch), "");
  server->stop(std::chrono::milliseconds(5000));
  const auto exit = daemon->stop(std::chrono::seconds(10));
  EXPECT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << testing::read_file(scratch.file("daemon.log"));
}

// kB of a /proc/<pid>/status field (VmRSS, VmHWM); 0 when unreadable.
std::uint64_t status_kb(pid_t pid, const std::string& field) {
  std::istringstream in(testing::read_file("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  }
  return 0;
}

struct Storm {
  int complete = 0;      // 200 answers whose body arrived whole (Content-Length) and ends the exposition
  std::size_t bytes = 0;  // of one body
  double seconds = 0;
};

// `n` scrapes of /metrics at once: every connection is opened and its request
// sent before any answer is read; then all are read together.
Storm scrape_storm(std::uint16_t port, int n, std::chrono::seconds timeout) {
  Storm storm;
  const auto start = std::chrono::steady_clock::now();
  std::vector<pollfd> fds;
  std::vector<std::string> got(static_cast<std::size_t>(n));
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
      close(fd);
      continue;
    }
    fds.push_back({fd, POLLIN, 0});
  }
  std::vector<bool> open(fds.size(), true);
  std::size_t left = fds.size();
  char buf[65536];
  while (left > 0 && std::chrono::steady_clock::now() - start < timeout) {
    if (poll(fds.data(), fds.size(), 200) <= 0) continue;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!open[i] || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        got[i].append(buf, static_cast<std::size_t>(r));
        continue;
      }
      close(fds[i].fd);
      fds[i].fd = -fds[i].fd - 1;  // poll ignores it from now on
      open[i] = false;
      --left;
    }
  }
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (open[i]) close(fds[i].fd);
    const std::string& raw = got[i];
    const auto head_end = raw.find("\r\n\r\n");
    if (raw.rfind("HTTP/1.1 200", 0) != 0 || head_end == std::string::npos) continue;
    const auto cl = raw.find("Content-Length: ");
    const std::size_t body = raw.size() - head_end - 4;
    if (cl == std::string::npos || std::stoull(raw.substr(cl + 16)) != body) continue;
    if (raw.rfind("\ninfertap_process_resident_memory_bytes ") == std::string::npos || raw.back() != '\n') continue;
    storm.complete += 1;
    storm.bytes = body;
  }
  storm.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return storm;
}

// Streams of `models` x the sample server's five routes, 25 clients at a time.
void drive_model_route_mix(std::uint16_t port, int models, const testing::ScratchDir& scratch) {
  const char* routes[] = {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions", "/v1/messages"};
  std::vector<testing::Process> batch;
  const auto wait_batch = [&] {
    for (testing::Process& p : batch) {
      const auto st = p.wait(std::chrono::seconds(30));
      EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << testing::read_file(scratch.file("clients.out"));
    }
    batch.clear();
  };
  for (int m = 0; m < models; ++m) {
    for (const char* route : routes) {
      std::vector<std::string> argv = {testing::build_dir() + "/sample-client", "--port", std::to_string(port),
                                       "--tokens", "3", "--model", "adversarial-model-" + std::to_string(m),
                                       "--path", route};
      if (std::string(route) == "/v1/messages") argv.push_back("--anthropic");
      if (auto c = testing::Process::spawn(argv, scratch.file("clients.out"))) batch.push_back(std::move(*c));
      if (batch.size() >= 25) wait_batch();
    }
  }
  wait_batch();
}

// The sum of the samples of an exposition whose line starts with `prefix`
// (`name{` for every series of a family with labels).
double sum_of(const std::string& text, const std::string& prefix) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

// An adversarial mix of label values against the running agent: more model x route
// label sets than the series budget, then 200 scrapes at once. The scrape
// stays bounded, the overflow is counted, every scrape is answered whole, and
// the agent's resident memory grows by a bounded amount.
TEST(Prometheus, ConcurrentScrapesOfTheAdversarialMixStayBounded) {
  ASSERT_EQ(geteuid(), 0u) << "this test loads BPF programs: run as root";
  testing::ScratchDir scratch("infertap-prom-storm");
  ASSERT_TRUE(scratch.ok());
  const std::uint16_t app_port = testing::free_port(), metrics_port = testing::free_port();
  auto daemon = testing::start_metrics_daemon(scratch, app_port, metrics_port);
  ASSERT_TRUE(daemon);
  auto server = start_sample_server(scratch, app_port, {"--ttft-ms", "2", "--itl-ms", "1"});
  ASSERT_TRUE(server);
  constexpr int kModels = 30;  // x 5 routes = 150 label sets per vantage, over the budget of 100
  drive_model_route_mix(app_port, kModels, scratch);
  std::string text;
  for (int i = 0; i < 100 && sum_of(text, "infertap_streams_total{") < 2 * 5 * kModels; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = http_get(metrics_port, "/metrics").second;
  }
  ASSERT_EQ(sum_of(text, "infertap_streams_total{"), 2 * 5 * kModels) << "a server and a client record per stream";
  const std::size_t budget = MetricsConfig{}.max_series_per_family;
  EXPECT_EQ(sum_of(text, "gen_ai_server_time_to_first_token_seconds_count{"), 5 * kModels);
  EXPECT_EQ(sum_of(text, "infertap_series_overflow_total{family=\"gen_ai_server_time_to_first_token_seconds\"}"),
            5 * kModels - budget);
  EXPECT_EQ(sum_of(text, "infertap_series_overflow_total{family=\"infertap_inter_token_latency_seconds\"}"),
            2 * 5 * kModels - budget);
  EXPECT_EQ(promtool_problems(text, scratch), "");

  const pid_t pid = daemon->pid();
  std::ofstream("/proc/" + std::to_string(pid) + "/clear_refs") << "5";  // VmHWM := VmRSS
  const std::uint64_t rss_before = status_kb(pid, "VmRSS");
  const double renderings_before = sum_of(http_get(metrics_port, "/metrics").second, "infertap_scrape_renderings_total ");
  const Storm storm = scrape_storm(metrics_port, 200, std::chrono::seconds(30));
  const std::uint64_t peak = status_kb(pid, "VmHWM"), rss_after = status_kb(pid, "VmRSS");
  const double renderings =
      sum_of(http_get(metrics_port, "/metrics").second, "infertap_scrape_renderings_total ") - renderings_before - 1;
  std::cout << "adversarial mix, running agent: scrape " << storm.bytes << " bytes; 200 concurrent scrapes: "
            << storm.complete << " whole in " << storm.seconds << " s from " << renderings << " renderings; RSS " << rss_before / 1024 << " MiB before, peak "
            << peak / 1024 << " MiB, " << rss_after / 1024 << " MiB after\n";
  EXPECT_EQ(storm.complete, 200) << testing::read_file(scratch.file("daemon.log"));
  EXPECT_LT(storm.bytes, 5u << 20) << "the budget's bound (docs/prometheus.md)";
  EXPECT_GT(storm.bytes, 1u << 20) << "every family filled to its budget";
  EXPECT_LT(renderings, 100) << "concurrent scrapes share renderings";
  // The bound of docs/prometheus.md: the state copy, the text being rendered
  // and the shared one, and two copies per HTTP worker (4), plus slack.
  EXPECT_LT((peak - rss_before) * 1024, 11 * storm.bytes + (16u << 20)) << "RSS grew from " << rss_before << " kB";

  server->stop(std::chrono::milliseconds(5000));
  const auto exit = daemon->stop(std::chrono::seconds(10));
  EXPECT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << testing::read_file(scratch.file("daemon.log"));
}

}  // namespace
}  // namespace infertap::output
