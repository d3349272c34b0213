// Where the delay happens, end to end as root: the real infertapd times
// streams that pass real gateways (nginx, HAProxy), slow readers, a
// rate-limited path into another network namespace and a server that pauses,
// and each stall must carry the cause the scenario produces, and no other.
// Each scenario runs three streams (keep-alive requests) and checks each one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/gateways.h"
#include "support/live_test.h"
#include "support/ndjson.h"
#include "support/netns.h"
#include "support/process.h"
#include "support/records.h"
#include "support/sample_peers.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::build_dir;
using testing::ClientRun;
using testing::Process;
using testing::SampleServer;

constexpr int kStreams = 3;

using testing::read_ndjson;

std::string describe(const json& r) {
  json brief = {{"stream_id", r["stream_id"]}, {"role", r["role"]},           {"comm", r["comm"]},
                {"ttft_ms", r["ttft_ms"]},     {"stalls", r["stalls"]},       {"delivery", r["delivery"]},
                {"gateway", r["gateway"]},     {"tcp", r["tcp"]},             {"peer", r["peer_stream_id"]}};
  return brief.dump(1);
}

class PathTest : public testing::LiveTest {
 protected:
  PathTest() : LiveTest("infertap-path") {}

  // The sample server on loopback, the agent on its port, then a client run
  // of kStreams keep-alive requests: the records, by end.
  struct Run {
    std::vector<json> servers, clients;
    ClientRun client;
  };
  Run run_direct(const std::vector<std::string>& server_args, std::vector<std::string> client_args) {
    Run run;
    SampleServer server(path("server"), server_args);
    EXPECT_TRUE(server.ok()) << server.error();
    if (!server.ok()) return run;
    start_agent_on_ports({server.port()});
    client_args.insert(client_args.end(), {"--requests", std::to_string(kStreams)});
    run.client = testing::run_sample_client(path("client"), server.port(), client_args);
    EXPECT_EQ(run.client.rc, 0) << run.client.output;
    const auto records = stop_agent_after_joins();
    run.servers = by_comm(records, "sample-server", "server");
    run.clients = by_comm(records, "sample-client", "client");
    EXPECT_EQ(run.servers.size(), std::size_t(kStreams));
    EXPECT_EQ(run.clients.size(), std::size_t(kStreams));
    return run;
  }

  static std::vector<json> by_comm(const std::vector<json>& records, const std::string& comm,
                                   const std::string& role = "") {
    std::vector<json> out;
    for (const auto& r : records) {
      if (r.value("comm", "") == comm && (role.empty() || r.value("role", "") == role)) out.push_back(r);
    }
    return out;
  }
};

// ---- direct --------------------------------------------------------------------

TEST_F(PathTest, DirectLoopbackBlamesNothingOnThePathAndJoinsBothEnds) {
  const Run run = run_direct({"--ttft-ms", "20", "--itl-ms", "10"}, {"--tokens", "30"});
  ASSERT_FALSE(HasFailure());
  const auto& servers = run.servers;
  const ClientRun& c = run.client;
  std::vector<std::int64_t> read_errors;
  for (const auto& r : servers) {
    const int seq = std::stoi(r["stream_id"].get<std::string>().substr(r["stream_id"].get<std::string>().find('-') + 1));
    EXPECT_FALSE(r["peer_stream_id"].is_null()) << "both ends are on this host: " << describe(r);
    ASSERT_TRUE(r["delivery"].is_object()) << describe(r);
    EXPECT_EQ(r["delivery"]["vantage"], "read");
    EXPECT_FALSE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
    EXPECT_TRUE(r["stalls"].empty()) << describe(r);
    EXPECT_TRUE(r["delivery"]["stalls"].empty()) << describe(r);
    EXPECT_LT(r["delivery"]["ttft_added_ms"].get<double>(), 5.0) << describe(r);
    // The client's read of each event, as the server record carries it,
    // against the client's own clock read right after the read returned.
    const testing::ClientLog log = testing::ClientLog::parse(c.log_path, 0, seq);
    std::vector<std::int64_t> truth;
    for (const auto& e : log.events)
      if (e.content()) truth.push_back(e.mono_ns);
    std::vector<std::int64_t> seen;
    std::size_t arrived = 0;
    for (const auto& e : r["timeline"]) {
      if (e["kind"] != "content" || e["peer_ns"].is_null()) continue;
      seen.push_back(e["peer_ns"].get<std::int64_t>());
      // The arrival at the client's socket, carried on its reads: between
      // the server's send and the client's read.
      if (e["peer_arrived_ns"].is_null()) continue;
      ++arrived;
      EXPECT_LE(e["ts_ns"].get<std::int64_t>() - 1'000'000, e["peer_arrived_ns"].get<std::int64_t>()) << describe(r);
      EXPECT_LE(e["peer_arrived_ns"].get<std::int64_t>(), e["peer_ns"].get<std::int64_t>()) << describe(r);
    }
    ASSERT_EQ(seen.size(), truth.size()) << describe(r);
    EXPECT_GE(arrived * 10, seen.size() * 9) << "arrival times at the local client: " << describe(r);
    for (std::size_t i = 0; i < seen.size(); ++i) read_errors.push_back(truth[i] - seen[i]);
  }
  std::vector<std::int64_t> abs_errors;
  for (auto e : read_errors) abs_errors.push_back(std::llabs(e));
  std::sort(abs_errors.begin(), abs_errors.end());
  const std::int64_t p50 = abs_errors[abs_errors.size() / 2];
  const std::int64_t p99 = abs_errors[std::min(abs_errors.size() - 1, abs_errors.size() * 99 / 100)];
  std::printf("  peer read error vs the client's own clock: p50 %lld us, p99 %lld us (n=%zu)\n",
              static_cast<long long>(p50 / 1000), static_cast<long long>(p99 / 1000), abs_errors.size());
  // Unpinned, the client's own log can be preempted between read and clock:
  // the bound is the one the capture tests use for unpinned peers.
  EXPECT_LE(p50, 200'000);
  EXPECT_LE(p99, 2'000'000);
}

// ---- the server pauses -----------------------------------------------------------

TEST_F(PathTest, ServerPauseIsTheModelsAndNotThePaths) {
  const Run run = run_direct({"--ttft-ms", "20", "--itl-ms", "10", "--pause-after", "10", "--pause-ms", "300"},
                             {"--tokens", "30"});
  ASSERT_FALSE(HasFailure());
  const auto& servers = run.servers;
  const auto& clients = run.clients;
  for (const auto& r : servers) {
    ASSERT_EQ(r["stalls"].size(), 1u) << describe(r);
    EXPECT_EQ(testing::stall_causes(r["stalls"]), std::set<std::string>{"model"}) << describe(r);
    EXPECT_EQ(r["stalls"][0]["after_event"], 9) << describe(r);
    ASSERT_TRUE(r["delivery"].is_object()) << describe(r);
    EXPECT_EQ(testing::stall_causes(r["delivery"]["stalls"]), std::set<std::string>{"model"}) << describe(r);
    EXPECT_FALSE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
  }
  for (const auto& r : clients) {
    EXPECT_EQ(testing::stall_causes(r["stalls"]), std::set<std::string>{"model"}) << describe(r);
  }
}

// ---- gateways ----------------------------------------------------------------------

struct GatewayCase {
  std::string name;
  bool haproxy;
  testing::NginxMode nginx;
  testing::HAProxyMode ha;
  bool buffers;
};

class GatewayPath : public PathTest, public ::testing::WithParamInterface<GatewayCase> {};

TEST_P(GatewayPath, GatewayDelayIsMeasuredAndBufferingIsNamed) {
  const GatewayCase& gc = GetParam();
  SampleServer server(path("server"), {"--ttft-ms", "50", "--itl-ms", "10"});
  ASSERT_TRUE(server.ok()) << server.error();
  std::unique_ptr<testing::Nginx> nginx;
  std::unique_ptr<testing::HAProxy> haproxy;
  std::uint16_t gw_port;
  std::string gw_comm;
  if (gc.haproxy) {
    haproxy = std::make_unique<testing::HAProxy>(gc.ha, server.port(), path("haproxy"));
    ASSERT_TRUE(haproxy->ok()) << haproxy->error();
    gw_port = haproxy->port();
    gw_comm = "haproxy";
  } else {
    nginx = std::make_unique<testing::Nginx>(gc.nginx, server.port(), path("nginx"));
    ASSERT_TRUE(nginx->ok()) << nginx->error();
    gw_port = nginx->port();
    gw_comm = "nginx";
  }
  start_agent_on_ports({server.port(), gw_port});
  ClientRun c = testing::run_sample_client(path("client"), gw_port,
                                           {"--tokens", "60", "--requests", std::to_string(kStreams)});
  ASSERT_EQ(c.rc, 0) << c.output;
  const auto records = stop_agent_after_joins();
  const auto servers = by_comm(records, "sample-server", "server");
  const auto downstream = by_comm(records, gw_comm, "gateway");
  const auto clients = by_comm(records, "sample-client", "client");
  ASSERT_EQ(servers.size(), std::size_t(kStreams));
  ASSERT_EQ(clients.size(), std::size_t(kStreams));
  ASSERT_EQ(downstream.size(), std::size_t(2 * kStreams)) << "both legs of the gateway, per stream";
  // The client's own TTFT per request (its keep-alive requests on conn 0), median.
  std::vector<double> client_ttfts;
  for (int req = 0; req < kStreams; ++req) client_ttfts.push_back(testing::ClientLog::parse(c.log_path, 0, req).ttft_ms());
  std::sort(client_ttfts.begin(), client_ttfts.end());
  const double client_ttft_ms = client_ttfts[client_ttfts.size() / 2];
  ASSERT_GT(client_ttft_ms, 0.0) << "the client logged no first token: " << c.output;

  for (const auto& r : servers) {
    ASSERT_TRUE(r["delivery"].is_object()) << describe(r);
    EXPECT_NEAR(r["delivery"]["ttft_ms"].get<double>(), client_ttft_ms, std::max(20.0, 0.15 * client_ttft_ms))
        << "the delivered TTFT is the client's own, " << client_ttft_ms << " ms: " << describe(r);
    EXPECT_NE(r["delivery"]["path"].get<std::string>().find("gateway(" + gw_comm + ")"), std::string::npos)
        << describe(r);
    EXPECT_EQ(r["delivery"]["vantage"], "read") << describe(r);
    EXPECT_TRUE(r["stalls"].empty()) << "the server emitted on time: " << describe(r);
    const auto causes = testing::stall_causes(r["delivery"]["stalls"]);
    if (gc.buffers) {
      // Held events leave in bursts: gaps between them (stalls), or, when the
      // whole stream is held to its end, one burst and an inflated TTFT.
      EXPECT_TRUE(causes == std::set<std::string>{"gateway_buffering"} ||
                  (causes.empty() && r["delivery"]["max_burst"].get<int>() >= 50))
          << describe(r);
      EXPECT_TRUE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
      EXPECT_GE(r["delivery"]["ttft_added_ms"].get<double>(), 50.0) << "TTFT inflation: " << describe(r);
      EXPECT_EQ(r["delivery"]["ttft_cause"], "gateway_buffering") << describe(r);
      EXPECT_GE(r["delivery"]["max_burst"].get<int>(), 5) << describe(r);
    } else {
      EXPECT_TRUE(causes.empty()) << describe(r);
      EXPECT_FALSE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
      EXPECT_LT(r["delivery"]["ttft_added_ms"].get<double>(), 10.0) << describe(r);
      EXPECT_TRUE(r["delivery"]["ttft_cause"].is_null()) << describe(r);
    }
  }
  for (const auto& r : servers) {
    const json& d = r["delivery"];
    std::printf("  %s: server emit TTFT %.1f ms, client TTFT %.1f ms (+%.1f, cause %s), max burst %d, delivery stalls %zu %s\n",
                gc.name.c_str(), r["ttft_ms"].get<double>(), d["ttft_ms"].get<double>(), d["ttft_added_ms"].get<double>(),
                d["ttft_cause"].is_null() ? "-" : d["ttft_cause"].get<std::string>().c_str(), d["max_burst"].get<int>(),
                d["stalls"].size(), d["stalls"].empty() ? "" : d["stalls"][0]["evidence"].get<std::string>().c_str());
  }
  int downstream_legs = 0;
  for (const auto& r : downstream) {
    ASSERT_TRUE(r["gateway"].is_object()) << describe(r);
    if (r["gateway"]["leg"] != "downstream") continue;
    ++downstream_legs;
    std::printf("  %s: gateway delay p50 %.2f ms p99 %.2f ms max %.2f ms, %d events matched, %d events in one send at most\n",
                gc.name.c_str(), r["gateway"]["delay_p50_ms"].get<double>(), r["gateway"]["delay_p99_ms"].get<double>(),
                r["gateway"]["delay_max_ms"].get<double>(), r["gateway"]["events_matched"].get<int>(),
                r["gateway"]["max_events_per_send"].get<int>());
    EXPECT_GE(r["gateway"]["events_matched"].get<int>(), 10) << describe(r);
    const auto causes = testing::stall_causes(r["stalls"]);
    if (gc.buffers) {
      EXPECT_TRUE(causes.empty() || causes == std::set<std::string>{"gateway_buffering"}) << describe(r);
    } else {
      EXPECT_TRUE(causes.empty()) << describe(r);
      testing::expect_streaming_gateway_delay(r["gateway"], describe(r));
    }
  }
  EXPECT_EQ(downstream_legs, kStreams);
  for (const auto& r : clients) {
    const auto causes = testing::stall_causes(r["stalls"]);
    if (gc.buffers) {
      EXPECT_TRUE(causes.empty() || causes == std::set<std::string>{"gateway_buffering"}) << describe(r);
    } else {
      EXPECT_TRUE(causes.empty()) << describe(r);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Gateways, GatewayPath,
    ::testing::Values(
        GatewayCase{"nginx_streaming", false, testing::NginxMode::streaming, testing::HAProxyMode::streaming, false},
        GatewayCase{"nginx_defaults", false, testing::NginxMode::defaults, testing::HAProxyMode::streaming, true},
        GatewayCase{"nginx_large_buffers", false, testing::NginxMode::large_buffers, testing::HAProxyMode::streaming,
                    true},
        GatewayCase{"haproxy_streaming", true, testing::NginxMode::streaming, testing::HAProxyMode::streaming, false},
        GatewayCase{"haproxy_defaults", true, testing::NginxMode::streaming, testing::HAProxyMode::defaults, true}),
    [](const ::testing::TestParamInfo<GatewayCase>& info) { return info.param.name; });

// ---- slow reader ---------------------------------------------------------------------

TEST_F(PathTest, SlowReaderIsBackpressureAtTheServerAndClientReadAtTheClient) {
  // A small send buffer on the server so that the reader's pause reaches it.
  const Run run = run_direct({"--ttft-ms", "20", "--itl-ms", "10", "--sndbuf", "4096"},
                             {"--tokens", "60", "--rcvbuf", "4096", "--stall-after", "10", "--stall-ms", "800"});
  ASSERT_FALSE(HasFailure());
  const auto& servers = run.servers;
  const auto& clients = run.clients;
  for (const auto& r : servers) {
    std::printf("  slow reader: server stalls %zu (%s), send blocked %.0f ms, zero window %.0f ms; delivered stalls %zu (%s)\n",
                r["stalls"].size(), r["stalls"].empty() ? "" : r["stalls"][0]["evidence"].get<std::string>().c_str(),
                r["tcp"]["send_blocked_ms"].get<double>(), r["tcp"]["zero_window_ms"].get<double>(),
                r["delivery"]["stalls"].size(),
                r["delivery"]["stalls"].empty() ? "" : r["delivery"]["stalls"][0]["evidence"].get<std::string>().c_str());
    EXPECT_FALSE(r["stalls"].empty()) << "the server's sends blocked: " << describe(r);
    EXPECT_EQ(testing::stall_causes(r["stalls"]), std::set<std::string>{"backpressure"}) << describe(r);
    EXPECT_GT(r["tcp"]["send_blocked_ms"].get<double>() + r["tcp"]["zero_window_ms"].get<double>(), 100.0)
        << describe(r);
    ASSERT_TRUE(r["delivery"].is_object()) << describe(r);
    EXPECT_EQ(testing::stall_causes(r["delivery"]["stalls"]), std::set<std::string>{"client_read"}) << describe(r);
    EXPECT_TRUE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
  }
  for (const auto& r : clients) {
    EXPECT_EQ(testing::stall_causes(r["stalls"]), std::set<std::string>{"client_read"}) << describe(r);
  }
}

// ---- a rate-limited path into another namespace ------------------------------------------

TEST_F(PathTest, BandwidthBoundStreamIsNotBlamedOnTheModel) {
  testing::NetnsPath net({.rate = "64kbit"});
  ASSERT_TRUE(net.ok()) << net.error();
  SampleServer server(path("server"), {"--ttft-ms", "20", "--itl-ms", "5"}, net.host_ip());
  ASSERT_TRUE(server.ok()) << server.error();
  start_agent_on_ports({server.port()});
  ClientRun c = testing::run_sample_client(path("client"), server.port(),
                                           {"--tokens", "30", "--requests", std::to_string(kStreams)}, net.host_ip(),
                                           net.exec_prefix());
  ASSERT_EQ(c.rc, 0) << c.output;
  const auto records = stop_agent_after_joins();
  const auto servers = by_comm(records, "sample-server", "server");
  ASSERT_EQ(servers.size(), std::size_t(kStreams));
  for (const auto& r : servers) {
    int acked = 0, events = 0;
    for (const auto& e : r["timeline"]) {
      ++events;
      if (!e["acked_ns"].is_null()) ++acked;
    }
    std::printf("  64 kbit/s path: %d of %d events acked; client TTFT +%.0f ms; delivered stalls %zu (%s); srtt max %.1f ms\n",
                acked, events, r["delivery"].is_object() ? r["delivery"]["ttft_added_ms"].get<double>() : -1.0,
                r["delivery"].is_object() ? r["delivery"]["stalls"].size() : 0,
                r["delivery"].is_object() && !r["delivery"]["stalls"].empty()
                    ? r["delivery"]["stalls"][0]["evidence"].get<std::string>().c_str()
                    : "",
                r["tcp"]["srtt_max_ms"].is_null() ? 0.0 : r["tcp"]["srtt_max_ms"].get<double>());
    EXPECT_GE(acked, events * 9 / 10) << "ACK times of the peer across the veth: " << describe(r);
    EXPECT_TRUE(r["stalls"].empty()) << "the server emitted on time: " << describe(r);
    ASSERT_TRUE(r["delivery"].is_object()) << describe(r);
    auto causes = testing::stall_causes(r["delivery"]["stalls"]);
    EXPECT_FALSE(causes.empty()) << "a 64 kbit/s path stalls the client: " << describe(r);
    EXPECT_EQ(causes.count("model"), 0u) << describe(r);
    EXPECT_EQ(causes.count("network"), 1u) << "the path is named: " << describe(r);
    // Besides it, only a late read: on a busy 2-core host the client in its
    // namespace is sometimes descheduled with bytes already in its socket,
    // and that stall is the client's (seen once in 3 streams of a suite run).
    causes.erase("network");
    causes.erase("client_read");
    EXPECT_TRUE(causes.empty()) << describe(r);
    EXPECT_TRUE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
  }
  for (const auto& r : by_comm(records, "sample-client", "client")) {
    EXPECT_EQ(testing::stall_causes(r["stalls"]).count("model"), 0u) << describe(r);
  }
}

}  // namespace
}  // namespace infertap
