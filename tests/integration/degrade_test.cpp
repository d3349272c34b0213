// Degraded-stream detection end to end, as root: the real infertapd (BPF
// capture) with a degradation section of short windows times the sample server
// under steady sample-client load. Slow mode (SIGUSR1, ITL x2 = half the token
// rate) for a sustained period gives exactly one `degraded` alert per cohort
// within the configured window, and one `recovered` after it ends. Behind a
// buffering nginx the client-observed cohort degrades while the server-emit
// cohort stays healthy, and the alert names the delivery path. Readers slower
// than the server degrade the client-observed cohort on the delivery lag.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/live_test.h"
#include "support/ndjson.h"
#include "support/process.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using testing::Process;
using namespace std::chrono_literals;
using testing::build_dir;

constexpr double kWindowS = 2;
constexpr int kEnterWindows = 2;
constexpr int kExitWindows = 2;

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// The records of one type; alerts are also echoed to the test log.
std::vector<json> lines_of_type(const std::string& file, const std::string& type) {
  std::vector<json> out;
  for (json& j : testing::read_ndjson(file)) {
    if (j.is_object() && j.value("type", "") == type) {
      if (type == "alert") std::fprintf(stderr, "%s\n", j.dump().c_str());
      out.push_back(std::move(j));
    }
  }
  return out;
}

class Degradation : public testing::LiveTest {
 protected:
  Degradation() : LiveTest("infertap-degrade") {}

  void write_config(const std::string& objectives) {
    std::ofstream(path("config.yaml")) << "degradation:\n"
                                       << "  window_s: " << kWindowS << "\n"
                                       << "  min_streams: 5\n"
                                       << "  enter_windows: " << kEnterWindows << "\n"
                                       << "  exit_windows: " << kExitWindows << "\n"
                                       << "  breach_share: 0.5\n"
                                       << "  recovery_share: 0.2\n"
                                       << "  warmup_windows: 2\n"
                                       << "  history_windows: 20\n"
                                       // Loaded CI machines add scheduling delay to every gap:
                                       // latency baselines only count deviations over 30 ms.
                                       << "  latency_floor_ms: 30\n"
                                       << "  rate_floor_tokens_per_s: 5\n"
                                       << "  length_classes: [{name: all}]\n"
                                       // One cohort per process and vantage: these tests judge the
                                       // path, not the load (tests/integration/load_test.cpp does).
                                       << "  concurrency_bands: []\n"
                                       << "  input_bands: []\n"
                                       << "  abuse: {enabled: false}\n"
                                       << "  objectives:\n"
                                       << objectives;
  }

  void start_daemon(const std::vector<std::uint16_t>& ports) {
    metrics_port_ = testing::free_port();
    std::vector<std::string> argv = {build_dir() + "/infertapd", "-c", path("config.yaml"), "--socket", path("api.sock"),
                                     "--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port_), "--ready-file",
                                     path("ready"), "-o", path("records.ndjson")};
    for (std::uint16_t p : ports) argv.insert(argv.end(), {"--port", std::to_string(p)});
    auto d = Process::spawn(argv, path("daemon.log"));
    ASSERT_TRUE(d);
    daemon_.emplace(std::move(*d));
    ASSERT_TRUE(testing::wait_for_file(path("ready"), 20s)) << testing::read_file(path("daemon.log"));
  }

  void start_server() {
    auto s = Process::spawn({build_dir() + "/sample-server", "--port", std::to_string(port_), "--ttft-ms", "20",
                             "--itl-ms", "10", "--tokens", "30", "--slow-factor", "2.0", "--model", "degrade-model"},
                            path("server.out"));
    ASSERT_TRUE(s);
    server_.emplace(std::move(*s));
    ASSERT_TRUE(testing::wait_for_text(path("server.out"), "listening", 4s))
        << "sample-server did not start:\n" << testing::read_file(path("server.out"));
  }

  // Steady load: 3 connections, each one stream after the other. Reads of
  // at most 512 bytes stay within what the agent copies per syscall when a
  // burst arrives at once. `extra`: more sample-client flags.
  void start_load(std::uint16_t port, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {build_dir() + "/sample-client", "--port", std::to_string(port), "--concurrency",
                                     "3", "--requests", "100000", "--read-size", "512", "--model", "degrade-model"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = Process::spawn(argv, path("client.out"));
    ASSERT_TRUE(c);
    client_.emplace(std::move(*c));
  }

  // The cohort gauge of the sample server's cohort, from /metrics ("" if absent).
  std::string server_cohort_gauge() {
    httplib::Client http("127.0.0.1", metrics_port_);
    auto res = http.Get("/metrics");
    if (!res || res->status != 200) return "no /metrics";
    const std::string series =
        "infertap_degradation_cohort_degraded{vantage=\"server_emit\",model=\"degrade-model\",route=\"/v1/chat/"
        "completions\",process=\"sample-server\",length_class=\"all\"} ";
    const auto at = res->body.find(series);
    if (at == std::string::npos) return "";
    return res->body.substr(at + series.size(), 1);
  }

  std::string cli_alerts_json() {
    auto p = Process::spawn({build_dir() + "/infertap", "--socket", path("api.sock"), "alerts", "-o", "json"},
                            path("cli.out"));
    EXPECT_TRUE(p);
    auto st = p->wait(10s);
    EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << testing::read_file(path("cli.out"));
    return testing::read_file(path("cli.out"));
  }

  void stop_all() {
    if (client_) client_->stop(2s);
    if (server_) server_->stop(2s);
    if (daemon_) {
      auto st = daemon_->stop(10s);
      EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << testing::read_file(path("daemon.log"));
    }
  }

  std::optional<Process> daemon_, server_, client_;
  std::uint16_t metrics_port_ = 0;
};

TEST_F(Degradation, SlowModeDegradesOnceAndRecoversOnce) {
  // The decode-rate objective sits between the normal (~95 tokens/s) and the
  // slow-mode rate (~48 tokens/s); baselines are learned too.
  write_config("    - {name: chat, route: /v1/chat/*, min_tokens_per_s: 70}\n");
  start_daemon({port_});
  start_server();
  start_load(port_);

  std::this_thread::sleep_for(std::chrono::duration<double>(4 * kWindowS));
  EXPECT_TRUE(lines_of_type(path("records.ndjson"), "alert").empty())
      << "alerts under healthy load:\n" << testing::read_file(path("records.ndjson"));
  EXPECT_EQ(server_cohort_gauge(), "0");

  const std::uint64_t slow_at = monotonic_ns();
  server_->signal(SIGUSR1);
  std::this_thread::sleep_for(std::chrono::duration<double>(6 * kWindowS));
  const std::string during = cli_alerts_json();
  EXPECT_EQ(server_cohort_gauge(), "1");
  const std::uint64_t fast_at = monotonic_ns();
  server_->signal(SIGUSR1);
  std::this_thread::sleep_for(std::chrono::duration<double>(6 * kWindowS));
  const std::string records_after = testing::read_file(path("records.ndjson"));
  EXPECT_EQ(server_cohort_gauge(), "0");
  stop_all();

  const std::vector<json> alerts = lines_of_type(path("records.ndjson"), "alert");
  ASSERT_FALSE(alerts.empty()) << testing::read_file(path("daemon.log"));
  // The window the toggle falls in is mixed, so is the next one when streams
  // started before the toggle end in it; the daemon closes windows on its 1 s tick.
  const std::uint64_t enter_deadline = static_cast<std::uint64_t>(((kEnterWindows + 2) * kWindowS + 1.5) * 1e9);
  const std::uint64_t exit_deadline = static_cast<std::uint64_t>(((kExitWindows + 2) * kWindowS + 1.5) * 1e9);
  int server_degraded = 0, server_recovered = 0;
  for (const json& a : alerts) {
    const json& c = a["cohort"];
    EXPECT_EQ(c["model"], "degrade-model") << a.dump();
    EXPECT_EQ(c["route"], "/v1/chat/completions") << a.dump();
    const std::uint64_t ts = a["ts_ns"];
    if (a["state"] == "degraded") {
      EXPECT_GT(ts, slow_at) << a.dump();
      EXPECT_LE(ts - slow_at, enter_deadline) << a.dump();
      EXPECT_EQ(a["layer"], "serving") << a.dump();
      EXPECT_GE(a["windows"].get<int>(), kEnterWindows);
      bool rate = false;
      for (const json& e : a["evidence"]) {
        if (e["metric"] == "tokens_per_s") {
          rate = true;
          EXPECT_LT(e["observed"].get<double>(), 70) << a.dump();
          EXPECT_EQ(e["objective"], 70.0);
        }
        EXPECT_NE(e["metric"], "ttft_ms") << "slow mode leaves the first token alone: " << a.dump();
      }
      EXPECT_TRUE(rate) << a.dump();
    } else {
      EXPECT_EQ(a["state"], "recovered");
      EXPECT_EQ(a["reason"], "healthy") << a.dump();
      EXPECT_GT(ts, fast_at) << a.dump();
      EXPECT_LE(ts - fast_at, exit_deadline) << a.dump();
    }
    if (c["vantage"] == "server_emit") {
      EXPECT_EQ(c["process"], "sample-server");
      (a["state"] == "degraded" ? server_degraded : server_recovered) += 1;
    } else {
      // The client-observed view of the server's streams (its delivery view):
      // the cohort is the serving process's, seen from the client.
      EXPECT_EQ(c["vantage"], "client_observed");
      EXPECT_EQ(c["process"], "sample-server");
    }
  }
  EXPECT_EQ(server_degraded, 1) << records_after;
  EXPECT_EQ(server_recovered, 1);
  // Each cohort (server-emit, client-observed) enters and leaves exactly once.
  EXPECT_EQ(alerts.size(), 4u);

  // While degraded, the API listed the active alerts.
  const json during_json = json::parse(during, nullptr, false);
  ASSERT_TRUE(during_json.is_object()) << during;
  EXPECT_EQ(during_json["active"].size(), 2u) << during;
}

// Seed 000's consumer read rate: readers that keep up give no alert; readers
// that take one event per 25 ms from a server sending one per 10 ms fall
// ~400 ms behind by the end of each stream, without a gap long enough to be a
// stall. The client-observed cohort of the server's streams alerts on the
// delivery lag, on the delivery path; the server's own cohort stays quiet.
TEST_F(Degradation, LaggingReadersDegradeTheDeliveryPath) {
  write_config("    - {name: chat, route: /v1/chat/*, delivery_lag_ms: 150}\n");
  start_daemon({port_});
  start_server();
  start_load(port_);
  std::this_thread::sleep_for(std::chrono::duration<double>(4 * kWindowS));
  client_->stop(2s);
  EXPECT_TRUE(lines_of_type(path("records.ndjson"), "alert").empty())
      << "readers that keep up alerted:\n" << testing::read_file(path("daemon.log"));

  const std::uint64_t slow_at = monotonic_ns();
  client_.reset();
  start_load(port_, {"--read-size", "256", "--read-delay-ms", "25"});
  std::this_thread::sleep_for(std::chrono::duration<double>(5 * kWindowS));
  stop_all();

  const std::vector<json> alerts = lines_of_type(path("records.ndjson"), "alert");
  ASSERT_EQ(alerts.size(), 1u) << testing::read_file(path("daemon.log"));
  const json& a = alerts[0];
  EXPECT_EQ(a["state"], "degraded");
  EXPECT_GT(a["ts_ns"].get<std::uint64_t>(), slow_at);
  EXPECT_EQ(a["cohort"]["vantage"], "client_observed") << a.dump();
  EXPECT_EQ(a["cohort"]["process"], "sample-server") << a.dump();
  EXPECT_EQ(a["layer"], "delivery_path") << a.dump();
  bool lag = false;
  for (const json& e : a["evidence"]) {
    if (e["metric"] != "delivery_lag_ms") continue;
    lag = true;
    EXPECT_EQ(e["phase"], "delivery");
    EXPECT_GT(e["observed"].get<double>(), 150) << a.dump();
  }
  EXPECT_TRUE(lag) << a.dump();
  // The streams say where the bytes waited: in the readers' sockets.
  int fell_behind = 0;
  for (const json& r : lines_of_type(path("records.ndjson"), "stream")) {
    if (r["role"] == "server" && r["delivery"].is_object() && r["delivery"]["lag_cause"] == "client_read") ++fell_behind;
  }
  EXPECT_GE(fell_behind, 10);
}

TEST_F(Degradation, BufferingGatewayDegradesOnlyTheDeliveryPath) {
  // The first token through a buffering gateway arrives with the whole
  // response, ~300 ms after the server sent it.
  write_config("    - {name: chat, route: /v1/chat/*, ttft_ms: 120}\n");
  const std::uint16_t gateway_port = testing::free_port();
  start_daemon({port_, gateway_port});
  start_server();
  auto gateway = Process::spawn({"/usr/bin/python3", "tests/support/buffering_gateway.py", std::to_string(gateway_port),
                                 std::to_string(port_)},
                                path("gateway.out"));
  ASSERT_TRUE(gateway);
  ASSERT_TRUE(testing::wait_for_text(path("gateway.out"), "listening", 4s)) << testing::read_file(path("gateway.out"));
  start_load(gateway_port);
  std::this_thread::sleep_for(std::chrono::duration<double>(6 * kWindowS));
  const std::string during = cli_alerts_json();
  gateway->stop(2s);
  stop_all();

  // Degraded: the server's streams as the client got them (delivery view),
  // and the gateway's own emit side; the server's emit side stays healthy.
  const std::vector<json> alerts = lines_of_type(path("records.ndjson"), "alert");
  int client_alerts = 0, gateway_alerts = 0;
  for (const json& a : alerts) {
    const json& c = a["cohort"];
    ASSERT_EQ(a["state"], "degraded") << a.dump();
    EXPECT_EQ(a["layer"], "delivery_path") << a.dump();
    EXPECT_EQ(a["evidence"][0]["metric"], "ttft_ms") << a.dump();
    EXPECT_GT(a["evidence"][0]["observed"].get<double>(), 120) << a.dump();
    if (c["process"] == "sample-server") {
      EXPECT_EQ(c["vantage"], "client_observed") << "the inference server emits on time: " << a.dump();
      EXPECT_EQ(a["dominant_stall_cause"], "gateway_buffering") << a.dump();
      ++client_alerts;
    } else {
      EXPECT_EQ(c["process"], "python3") << a.dump();
      ++gateway_alerts;
    }
  }
  EXPECT_EQ(client_alerts, 1) << testing::read_file(path("records.ndjson")).substr(0, 4000) << "\n" << during;
  // The gateway's own cohorts (its emit side, its client's view) degrade too,
  // each once.
  EXPECT_GE(gateway_alerts, 1) << during;
  EXPECT_LE(gateway_alerts, 2) << during;
}

}  // namespace
}  // namespace infertap
