// TLS end to end, as root: the real infertapd sees streams through the
// OpenSSL probes of real TLS programs — nginx and HAProxy terminating TLS in
// front of the sample server, curl, Python's ssl (the system libssl) with
// ground-truth clocks, the official `openai` npm client on Node.js — and the
// records must say tls, name the library, and carry the same timing, joins and
// causes as plaintext. Faults: non-HTTP TLS muted, a process dying mid-stream,
// a library deleted on disk while mapped, or on a mount gone from its
// namespace, libssl loaded late by dlopen, a TLS library not probed (GnuTLS),
// and through build/tls-fault-peer (libssl, calls Python's ssl cannot make)
// partial writes, SSL_ERROR_WANT_WRITE retries, TLS 1.3 key updates and a
// refused TLS 1.2 renegotiation. Targeting by pid: only the targets' processes
// carry probes.
//
// Certificates are made per test with `openssl req`. The `openai` package is
// installed by scripts/setup.sh into /var/cache/infertap/npm.
#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capture/tls_targets.h"
#include "support/node_modules.h"
#include "support/gateways.h"
#include "support/live_test.h"
#include "support/ndjson.h"
#include "support/clock_errors.h"
#include "support/cpu_latency.h"
#include "support/process.h"
#include "support/records.h"
#include "support/sample_peers.h"
#include "support/tls_fixture.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::Process;
using testing::read_file;
using testing::read_ndjson;

using testing::command_output;
using testing::kPython;
using testing::kTlsPeer;
using testing::port_of;
using testing::has_hit_a_uprobe;

constexpr const char* kOpenaiScript = "tests/support/openai_stream.mjs";

std::string describe(const json& r) {
  json brief = json::object();
  for (const char* k : {"stream_id", "role", "comm", "local", "remote", "tls", "tls_library", "tls_handshake_ms", "end",
                        "content_events", "ttft_ms", "stalls", "delivery", "gateway", "peer_stream_id"})
    if (r.contains(k)) brief[k] = r[k];
  return brief.dump(1);
}

class TlsTest : public testing::TlsFixture {
 protected:
  TlsTest() : TlsFixture("infertap-tls") {}
};

// ---- gateways terminating TLS ----------------------------------------------------

struct TlsGatewayCase {
  std::string name;
  bool haproxy;
  testing::NginxMode nginx;
  bool buffers;
};

// Every event, or, when a gateway's burst arrives in one TLS record larger
// than the capture's head and tail (nginx fills 16 KB ssl buffers: a short
// buffered stream is one record), fewer, with the gap counted.
void expect_all_events_or_counted_lower_bound(const json& r, int events, bool burst_possible) {
  if (!burst_possible || r["content_events"] == events) {
    EXPECT_EQ(r["content_events"], events) << describe(r);
    return;
  }
  EXPECT_TRUE(r["counts_lower_bound"].get<bool>()) << describe(r);
  EXPECT_GT(r["bytes_not_captured"].get<int>(), 0) << describe(r);
  EXPECT_LT(r["content_events"].get<int>(), events) << describe(r);
}

class TlsGateway : public TlsTest, public ::testing::WithParamInterface<TlsGatewayCase> {};

// The Python ssl client's own TTFT per request (its request written -> the
// read that completed its first content event), median over its requests.
double median_client_ttft_ms(const std::vector<json>& client_log) {
  std::map<int, std::int64_t> written, first_content;
  for (const auto& l : client_log) {
    const int req = l.value("req", -1);
    if (l["type"] == "write") written[req] = l["mono_ns"].get<std::int64_t>();
    if (l["type"] == "event" && l["kind"] == "content" && !first_content.count(req))
      first_content[req] = l["mono_ns"].get<std::int64_t>();
  }
  std::vector<double> ttfts;
  for (const auto& [req, t] : first_content)
    if (written.count(req)) ttfts.push_back(double(t - written[req]) / 1e6);
  if (ttfts.empty()) return -1;
  std::sort(ttfts.begin(), ttfts.end());
  return ttfts[ttfts.size() / 2];
}

// Python ssl clients -> gateway (TLS) -> sample server (plaintext).
TEST_P(TlsGateway, TlsLegIsRecordedAndJoinedToThePlaintextUpstream) {
  const TlsGatewayCase& gc = GetParam();
  constexpr int kStreams = 3;
  testing::SampleServer server(path("server"), {"--ttft-ms", "50", "--itl-ms", "10"});
  ASSERT_TRUE(server.ok()) << server.error();
  std::unique_ptr<testing::Gateway> gw;
  if (gc.haproxy) {
    testing::HAProxyOptions opt;
    opt.tls_pem = path("both.pem");
    gw = std::make_unique<testing::HAProxy>(testing::HAProxyMode::streaming, server.port(), path("haproxy"), opt);
  } else {
    testing::NginxOptions opt;
    opt.tls_cert = cert();
    opt.tls_key = key();
    gw = std::make_unique<testing::Nginx>(gc.nginx, server.port(), path("nginx"), opt);
  }
  ASSERT_TRUE(gw->ok()) << gw->error();
  const std::string gw_comm = gc.haproxy ? "haproxy" : "nginx";
  start_agent_on_ports({server.port(), gw->port()});
  ASSERT_EQ(run_to_end(tls_client("client", gw->port(), {"--tokens", "60", "--requests", std::to_string(kStreams)}),
                "client.out"),
            0)
      << read_file(path("client.out"));
  const double client_ttft_ms = median_client_ttft_ms(read_ndjson(path("client.ndjson")));
  ASSERT_GT(client_ttft_ms, 0.0) << "the client logged no first token";
  const auto records = stop_agent_after_joins();
  const auto servers = where(where(records, "comm", "sample-server"), "role", "server");
  const auto legs = where(where(records, "comm", gw_comm), "role", "gateway");
  const auto clients = where(where(records, "comm", "python3"), "role", "client");
  ASSERT_EQ(servers.size(), std::size_t(kStreams)) << read_file(path("agent.log"));
  ASSERT_EQ(legs.size(), std::size_t(2 * kStreams)) << "both legs of the gateway, per stream";
  ASSERT_EQ(clients.size(), std::size_t(kStreams)) << "the Python ssl client's own view";

  int downstream = 0;
  for (const auto& r : legs) {
    ASSERT_TRUE(r["gateway"].is_object()) << describe(r);
    if (r["gateway"]["leg"] == "downstream") {
      ++downstream;
      EXPECT_EQ(port_of(r["local"]), gw->port()) << describe(r);
      EXPECT_TRUE(r["tls"].get<bool>()) << "the client-facing leg is TLS: " << describe(r);
      EXPECT_EQ(r["tls_library"], "openssl-3") << describe(r);
      expect_all_events_or_counted_lower_bound(r, 60, gc.buffers);
      EXPECT_GE(r["gateway"]["events_matched"].get<int>(), 10) << "joined to the upstream leg: " << describe(r);
      std::printf("  %s: TLS downstream leg, gateway delay p50 %.2f ms p99 %.2f ms, %d events matched\n",
                  gc.name.c_str(), r["gateway"]["delay_p50_ms"].get<double>(),
                  r["gateway"]["delay_p99_ms"].get<double>(), r["gateway"]["events_matched"].get<int>());
      if (!gc.buffers) {
        testing::expect_streaming_gateway_delay(r["gateway"], describe(r));
      }
    } else {
      EXPECT_FALSE(r["tls"].get<bool>()) << "the upstream leg is plaintext: " << describe(r);
      EXPECT_TRUE(r["tls_library"].is_null()) << describe(r);
    }
  }
  EXPECT_EQ(downstream, kStreams);

  for (const auto& r : servers) {
    EXPECT_FALSE(r["tls"].get<bool>()) << describe(r);
    ASSERT_TRUE(r["delivery"].is_object()) << describe(r);
    EXPECT_NE(r["delivery"]["path"].get<std::string>().find("gateway(" + gw_comm + ")"), std::string::npos)
        << "the path goes through the TLS gateway: " << describe(r);
    EXPECT_FALSE(r["peer_stream_id"].is_null()) << "joined to the TLS client's stream: " << describe(r);
    EXPECT_TRUE(r["stalls"].empty()) << "the server emitted on time: " << describe(r);
    const auto causes = testing::stall_causes(r["delivery"]["stalls"]);
    std::printf("  %s: server TTFT %.1f ms, delivered TTFT %.1f ms (vantage %s)\n", gc.name.c_str(),
                r.value("ttft_ms", -1.0), r["delivery"].value("ttft_ms", -1.0),
                r["delivery"].value("vantage", std::string("?")).c_str());
    // The delivered TTFT is the end client's, even when its reads were too
    // large to copy whole (nginx's 16 KB TLS records): measured by the client.
    EXPECT_NEAR(r["delivery"].value("ttft_ms", -1.0), client_ttft_ms, std::max(20.0, 0.15 * client_ttft_ms))
        << "client-measured TTFT " << client_ttft_ms << " ms: " << describe(r);
    // Events inside the client's uncopied 16 KB reads are delivered by those
    // reads (placed by body position), not left without a delivery.
    int delivered = 0;
    for (const auto& e : r["timeline"]) delivered += e["kind"] == "content" && !e["delivered_ns"].is_null() ? 1 : 0;
    EXPECT_GE(delivered, 55) << "of 60 content events, delivered: " << describe(r);
    if (gc.buffers) {
      // Held events leave in bursts (stalls between them), or the whole
      // stream in one at its end (an inflated TTFT only).
      EXPECT_TRUE(causes.empty() || causes == std::set<std::string>{"gateway_buffering"}) << describe(r);
      EXPECT_EQ(r["delivery"]["ttft_cause"], "gateway_buffering") << describe(r);
      EXPECT_GE(r["delivery"]["ttft_added_ms"].get<double>(), 50.0) << "TTFT inflation: " << describe(r);
      EXPECT_TRUE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
    } else {
      EXPECT_TRUE(causes.empty()) << describe(r);
      EXPECT_TRUE(r["delivery"]["ttft_cause"].is_null()) << describe(r);
      EXPECT_FALSE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
    }
  }
  for (const auto& r : clients) {
    std::printf("  %s: client TTFT %.1f ms, %d content events\n", gc.name.c_str(), r.value("ttft_ms", -1.0),
                r["content_events"].get<int>());
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["tls_library"], "openssl-3") << describe(r);
    expect_all_events_or_counted_lower_bound(r, 60, gc.buffers);
    EXPECT_EQ(r["end"], "complete") << describe(r);
    EXPECT_GT(r["tls_handshake_ms"].get<double>(), 0.0) << "a new connection's handshake: " << describe(r);
  }
  const json stats = agent_stats();
  EXPECT_EQ(kernel_counter(stats, "tls_unprobed"), 0u) << "no probed connection muted as an unprobed library's: "
                                                       << stats;
}

INSTANTIATE_TEST_SUITE_P(Gateways, TlsGateway,
                         ::testing::Values(TlsGatewayCase{"nginx_streaming", false, testing::NginxMode::streaming, false},
                                           TlsGatewayCase{"nginx_defaults", false, testing::NginxMode::defaults, true},
                                           TlsGatewayCase{"haproxy_streaming", true, testing::NginxMode::streaming,
                                                          false}),
                         [](const ::testing::TestParamInfo<TlsGatewayCase>& info) { return info.param.name; });

// ---- curl ----------------------------------------------------------------------------

TEST_F(TlsTest, CurlOverTlsIsAClientWithItsHandshakeTime) {
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "20", "--itl-ms", "5"}), "");
  start_agent_on_ports({port_});
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(run_to_end({"/usr/bin/curl", "-sSN", "--cacert", cert(), "-o", "/dev/null", "-X", "POST",
                   "https://localhost:" + std::to_string(port_) + "/v1/chat/completions", "--resolve",
                   "localhost:" + std::to_string(port_) + ":127.0.0.1", "-H", "Content-Type: application/json", "-d",
                   R"({"model":"curl-model","stream":true,"max_tokens":12})"},
                  "curl.out"),
              0)
        << read_file(path("curl.out"));
  }
  stop_tls_server("server");
  const auto records = stop_agent_after_joins();
  const auto curls = where(records, "comm", "curl");
  const auto servers = where(records, "role", "server");
  ASSERT_EQ(curls.size(), 3u) << read_file(path("agent.log"));
  ASSERT_EQ(servers.size(), 3u);
  for (const auto& r : curls) {
    EXPECT_EQ(r["role"], "client") << describe(r);
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["tls_library"], "openssl-3") << describe(r);
    EXPECT_EQ(r["model"], "tls-peer") << "the model the response names: " << describe(r);
    EXPECT_EQ(r["content_events"], 12) << describe(r);
    EXPECT_EQ(r["end"], "complete") << describe(r);
    ASSERT_TRUE(r["tls_handshake_ms"].is_number()) << describe(r);
    EXPECT_GT(r["tls_handshake_ms"].get<double>(), 0.0) << describe(r);
    EXPECT_LT(r["tls_handshake_ms"].get<double>(), r["ttft_ms"].get<double>()) << "part of the client's TTFT";
    EXPECT_GE(r["ttft_ms"].get<double>(), 20.0) << describe(r);
  }
  for (const auto& r : servers) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["content_events"], 12) << describe(r);
  }
}

// ---- ground truth: Python ssl on both ends ------------------------------------------

// The peers log with each clock how long their thread was off its CPU during
// the clocked SSL call; events the host made late are left out and counted
// (support/clock_errors.h). Events go 1 ms apart, with the CPUs held out of
// halt: on this VM a Python SSL_write of one event takes ~105 us after 5 ms
// asleep and ~35 us after 1 ms, agent or not, and part of that lands between
// the agent's timestamp and the peer's clock.
TEST_F(TlsTest, EmitAndReadTimesMatchThePythonSslPeersClocks) {
  constexpr int kRequests = 12, kTokens = 50;
  const testing::CpuWakeLatencyHold awake;
  start_agent_on_ports({port_});
  const int client_cpu = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0;
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "20", "--itl-ms", "1"}, 0), "");
  ASSERT_EQ(run_to_end(on_cpu(client_cpu, tls_client("client", port_,
                                              {"--tokens", std::to_string(kTokens), "--requests",
                                               std::to_string(kRequests), "--poll"})),
                "client.out"),
            0)
      << read_file(path("client.out"));
  const std::vector<json> server_log = stop_tls_server("server");
  const std::vector<json> client_log = read_ndjson(path("client.ndjson"));
  const auto records = stop_agent_after_joins();
  const auto servers = where(records, "role", "server");
  const auto clients = where(records, "role", "client");
  ASSERT_EQ(servers.size(), std::size_t(kRequests)) << read_file(path("agent.log"));
  ASSERT_EQ(clients.size(), std::size_t(kRequests));

  // Ground truth by (client port, event index): one request per connection.
  std::map<std::pair<int, int>, json> sent, read;
  std::map<int, int> port_of_req;
  for (const auto& l : server_log)
    if (l["type"] == "send") sent[{l["peer_port"].get<int>(), l["event_index"].get<int>()}] = l;
  for (const auto& l : client_log)
    if (l["type"] == "write") port_of_req[l["req"].get<int>()] = l["local_port"].get<int>();
  for (const auto& l : client_log)
    if (l["type"] == "event") read[{port_of_req.at(l["req"].get<int>()), l["event_index"].get<int>()}] = l;

  testing::ClockErrors emit, reads;
  const auto add = [](testing::ClockErrors& errors, const json& truth, const json& event) {
    errors.add(truth["mono_ns"], truth["off_cpu_ns"], event["ts_ns"]);
  };
  for (const auto& r : servers) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["tls_library"], "openssl-3") << describe(r);
    EXPECT_EQ(r["end"], "complete") << describe(r);
    EXPECT_EQ(r["content_events"], kTokens) << describe(r);
    EXPECT_EQ(r["bytes_lost"], 0) << describe(r);
    const int peer = port_of(r["remote"]);
    for (const auto& e : r["timeline"]) {
      auto it = sent.find({peer, e["i"].get<int>()});
      ASSERT_NE(it, sent.end()) << "no server log line for event " << e["i"] << " of " << describe(r);
      add(emit, it->second, e);
    }
  }
  for (const auto& r : clients) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["end"], "complete") << describe(r);
    EXPECT_EQ(r["content_events"], kTokens) << describe(r);
    const int local = port_of(r["local"]);
    for (const auto& e : r["timeline"]) {
      auto it = read.find({local, e["i"].get<int>()});
      ASSERT_NE(it, read.end()) << "no client log line for event " << e["i"] << " of " << describe(r);
      add(reads, it->second, e);
    }
  }
  emit.print("TLS (python ssl) emit");
  reads.print("TLS (python ssl) read");
  ASSERT_GE(emit.events(), std::size_t(kRequests * kTokens));
  ASSERT_GE(reads.events(), std::size_t(kRequests * kTokens));
  ASSERT_TRUE(emit.measurable() && reads.measurable())
      << "most events' peer was off its CPU during the clocked call: this host is too disturbed to measure on";
  EXPECT_LE(emit.undisturbed_percentile(99), 50'000) << "emit time p99 error over TLS (ns)";
  EXPECT_LE(reads.undisturbed_percentile(99), 100'000) << "read time p99 error over TLS (ns)";
}

// ---- Node.js: the official openai client --------------------------------------------

TEST_F(TlsTest, NodeOpenaiClientStreamIsRecorded) {
  const std::string node = testing::find_system_binary("node");
  ASSERT_FALSE(node.empty()) << "node not installed: run scripts/setup.sh (nodejs)";
  const std::string modules = testing::node_modules_dir();
  ASSERT_TRUE(std::filesystem::exists(modules + "/openai/package.json"))
      << "the openai npm package is not in " << modules << ": run scripts/setup.sh";
  // Node carries OpenSSL in its binary (statically linked) or links libssl.
  const bool links_libssl = command_output("ldd " + node).find("libssl.so.3") != std::string::npos;
  const std::string expected_library =
      links_libssl ? "openssl-3" : "static:" + std::filesystem::path(node).filename().string();
  constexpr int kTokens = 24, kRequests = 2;
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "20", "--itl-ms", "10"}), "");
  start_agent_on_ports({port_});
  ASSERT_EQ(run_to_end({"/usr/bin/env", "NODE_PATH=" + modules, "NODE_EXTRA_CA_CERTS=" + cert(), node,
                 kOpenaiScript, "https://127.0.0.1:" + std::to_string(port_) + "/v1", std::to_string(kTokens),
                 std::to_string(kRequests)},
                "node.out"),
            0)
      << read_file(path("node.out"));
  stop_tls_server("server");
  // The client's own count of content chunks, per request.
  int node_lines = 0;
  for (const auto& l : read_ndjson(path("node.out"))) {
    ASSERT_TRUE(l.is_object()) << read_file(path("node.out"));
    EXPECT_EQ(l["content_events"], kTokens);
    ++node_lines;
  }
  EXPECT_EQ(node_lines, kRequests);
  const auto records = stop_agent_after_joins();
  const auto clients = where(records, "role", "client");
  const auto servers = where(records, "role", "server");
  ASSERT_EQ(clients.size(), std::size_t(kRequests)) << read_file(path("agent.log"));
  ASSERT_EQ(servers.size(), std::size_t(kRequests));
  for (const auto& r : clients) {
    EXPECT_EQ(r["comm"], "node") << describe(r);
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["tls_library"], expected_library) << describe(r);
    EXPECT_EQ(r["content_events"], kTokens) << describe(r);
    EXPECT_EQ(r["model"], "tls-peer") << "the model the response names: " << describe(r);
    EXPECT_EQ(r["end"], "complete") << describe(r);
    EXPECT_GE(r["ttft_ms"].get<double>(), 20.0) << describe(r);
    EXPECT_FALSE(r["peer_stream_id"].is_null()) << "joined to the server's record: " << describe(r);
  }
  const json stats = agent_stats();
  if (!links_libssl) {
    EXPECT_GT(kernel_counter(stats, "tls_unbound"), 0u) << "Node writes ciphertext from its event loop: " << stats;
  }
}

// ---- a stall behind TLS ---------------------------------------------------------------

TEST_F(TlsTest, ServerPauseBehindTlsIsTheModels) {
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "20", "--itl-ms", "10", "--pause-after", "10", "--pause-ms", "300"}),
            "");
  start_agent_on_ports({port_});
  ASSERT_EQ(run_to_end(tls_client("client", port_, {"--tokens", "30", "--requests", "2"}), "client.out"), 0)
      << read_file(path("client.out"));
  stop_tls_server("server");
  const auto records = stop_agent_after_joins();
  const auto servers = where(records, "role", "server");
  const auto clients = where(records, "role", "client");
  ASSERT_EQ(servers.size(), 2u) << read_file(path("agent.log"));
  ASSERT_EQ(clients.size(), 2u);
  for (const auto& r : servers) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    ASSERT_EQ(r["stalls"].size(), 1u) << describe(r);
    EXPECT_EQ(testing::stall_causes(r["stalls"]), std::set<std::string>{"model"}) << describe(r);
    EXPECT_GE(r["stalls"][0]["gap_ms"].get<double>(), 250.0) << describe(r);
    ASSERT_TRUE(r["delivery"].is_object()) << describe(r);
    EXPECT_EQ(testing::stall_causes(r["delivery"]["stalls"]), std::set<std::string>{"model"}) << describe(r);
    EXPECT_FALSE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
  }
  for (const auto& r : clients) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(testing::stall_causes(r["stalls"]), std::set<std::string>{"model"}) << describe(r);
  }
}

// ---- non-HTTP TLS ----------------------------------------------------------------------

TEST_F(TlsTest, NonHttpTlsTrafficIsMutedAndYieldsNoRecord) {
  // A database-like binary protocol over TLS (openssl s_server / s_client),
  // and in the same run one real TLS stream that proves capture was on.
  const std::uint16_t binary_port = testing::free_port();
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "5", "--itl-ms", "2"}), "");
  start_agent_on_ports({port_, binary_port});
  const std::string s = std::to_string(binary_port);
  // s_server prints ACCEPT once it listens (a probe connection would be its one accept).
  auto srv = Process::spawn({"/bin/sh", "-c",
                             "(sleep 0.5; for i in 1 2 3 4 5 6 7 8; do printf '\\001\\002\\003R%04d\\000' $i; "
                             "sleep 0.05; done; sleep 1) | openssl s_server -naccept 1 -accept 127.0.0.1:" + s +
                                 " -cert " + cert() + " -key " + key()},
                            path("s_server.out"));
  ASSERT_TRUE(srv);
  ASSERT_TRUE(testing::wait_for_text(path("s_server.out"), "ACCEPT", 10s)) << read_file(path("s_server.out"));
  const int rc = run_to_end({"/bin/sh", "-c",
                      "(for i in 1 2 3 4 5 6 7 8; do printf '\\000\\000\\000\\010Q%04d\\001' $i; sleep 0.05; done; "
                      "sleep 1) | openssl s_client -quiet -no_ign_eof -connect 127.0.0.1:" + s + " > " + path("s_client.bytes")},
                     "s_client.out", 20s);
  EXPECT_EQ(rc, 0) << read_file(path("s_client.out"));
  srv->wait(5s);
  EXPECT_GT(std::filesystem::file_size(path("s_client.bytes")), 8u) << "the server's bytes reached the client";
  ASSERT_EQ(run_to_end(tls_client("client", port_, {"--tokens", "6"}), "client.out"), 0) << read_file(path("client.out"));
  stop_tls_server("server");
  const auto records = stop_agent_after_joins();
  EXPECT_TRUE(on_port(records, binary_port).empty()) << "non-HTTP TLS gives no record: "
                                                     << on_port(records, binary_port).front().dump();
  EXPECT_EQ(on_port(records, port_).size(), 2u) << "the HTTP TLS stream, seen from server and client";
  const json stats = agent_stats();
  EXPECT_GT(kernel_counter(stats, "tls_muted"), 0u) << "later calls stopped after one lookup: " << stats;
}

// ---- a TLS library that is not probed ---------------------------------------------------

// GnuTLS on both ends (gnutls-serv --echo, gnutls-cli): no probe sees its
// plaintext, so once its handshake and first calls went by with no probed
// library call on them both sockets are muted; a probed OpenSSL stream in the
// same run is recorded whole and never muted that way.
TEST_F(TlsTest, UnprobedTlsLibraryIsMutedAfterItsHandshake) {
  const std::string serv = testing::find_system_binary("gnutls-serv");
  ASSERT_FALSE(serv.empty()) << "gnutls-serv not installed: run scripts/setup.sh (gnutls-bin)";
  const std::uint16_t gnutls_port = testing::free_port();
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "5", "--itl-ms", "2"}), "");
  start_agent_on_ports({port_, gnutls_port});
  auto srv = Process::spawn({serv, "--echo", "-p", std::to_string(gnutls_port), "--x509certfile", cert(),
                             "--x509keyfile", key()},
                            path("gnutls_serv.out"));
  ASSERT_TRUE(srv);
  ASSERT_TRUE(testing::wait_for_text(path("gnutls_serv.out"), "listening", 10s)) << read_file(path("gnutls_serv.out"));
  const int rc = run_to_end({"/bin/sh", "-c",
                      "(printf 'POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'; for i in $(seq 30); do "
                      "echo line$i; sleep 0.02; done; sleep 0.3) | gnutls-cli --insecure -p " +
                          std::to_string(gnutls_port) + " 127.0.0.1 > " + path("gnutls_cli.bytes")},
                     "gnutls_cli.out", 30s);
  EXPECT_EQ(rc, 0) << read_file(path("gnutls_cli.out"));
  srv->stop(5s);
  EXPECT_NE(read_file(path("gnutls_cli.bytes")).find("line30"), std::string::npos)
      << "the echo came back through GnuTLS:\n" << read_file(path("gnutls_cli.out"));
  ASSERT_EQ(run_to_end(tls_client("client", port_, {"--tokens", "20"}), "client.out"), 0) << read_file(path("client.out"));
  stop_tls_server("server");
  const auto records = stop_agent_after_joins();
  EXPECT_TRUE(on_port(records, gnutls_port).empty()) << "an unprobed library's TLS gives no record";
  const auto probed = on_port(records, port_);
  ASSERT_EQ(probed.size(), 2u) << "the OpenSSL stream, seen from server and client: " << read_file(path("agent.log"));
  for (const auto& r : probed) EXPECT_EQ(r["content_events"], 20) << describe(r);
  const json stats = agent_stats();
  EXPECT_EQ(kernel_counter(stats, "tls_unprobed"), 2u) << "both GnuTLS ends muted, no OpenSSL end: " << stats;
}

// ---- a TLS process dies mid-stream ----------------------------------------------------

TEST_F(TlsTest, TlsServerExitingMidStreamGivesOneEndedRecord) {
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "10"}), "");
  start_agent_on_ports({port_});
  auto client = Process::spawn(tls_client("client", port_, {"--tokens", "300"}), path("client.out"));
  ASSERT_TRUE(client);
  std::this_thread::sleep_for(600ms);
  peers_["server"]->signal(SIGKILL);  // probes attached, connection open, mid-stream
  peers_["server"]->wait(5s);
  ASSERT_TRUE(client->wait(20s)) << "the client sees the connection end";
  const auto records = stop_agent_after_joins();
  const auto servers = where(records, "role", "server");
  const auto clients = where(records, "role", "client");
  ASSERT_EQ(servers.size(), 1u) << read_file(path("agent.log"));
  ASSERT_EQ(clients.size(), 1u);
  for (const auto& r : {servers[0], clients[0]}) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["end"], "connection_closed") << describe(r);
    EXPECT_GT(r["content_events"].get<int>(), 10) << describe(r);
    EXPECT_LT(r["content_events"].get<int>(), 300) << describe(r);
  }
}

// ---- a library deleted on disk while mapped -------------------------------------------

std::string system_libssl() {
  for (const char* p : {"/usr/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libssl.so.3",
                        "/usr/lib/aarch64-linux-gnu/libssl.so.3", "/usr/lib64/libssl.so.3"})
    if (std::filesystem::exists(p)) return p;
  return "";
}

TEST_F(TlsTest, LibraryDeletedOnDiskIsProbedCountedAndReleased) {
  const std::string libssl = system_libssl();
  ASSERT_FALSE(libssl.empty()) << "libssl.so.3 not found (Debian package libssl3)";
  // A private copy of libssl, loaded by the client through LD_LIBRARY_PATH
  // and deleted (as a package upgrade replaces it) before the agent starts.
  std::filesystem::create_directories(path("lib"));
  std::filesystem::copy_file(libssl, path("lib/libssl.so.3"));
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "5"}), "");
  std::vector<std::string> argv = tls_client("client", port_,
                                             {"--tokens", "20", "--requests", "12", "--interval-ms", "400",
                                              "--ready-file", path("client.ready")});
  argv.insert(argv.begin(), {"/usr/bin/env", "LD_LIBRARY_PATH=" + path("lib")});
  auto client = Process::spawn(argv, path("client.out"));
  ASSERT_TRUE(client);
  ASSERT_TRUE(testing::wait_for_file(path("client.ready"), 10s)) << read_file(path("client.out"));
  const std::string maps = read_file("/proc/" + std::to_string(client->pid()) + "/maps");
  ASSERT_NE(maps.find(path("lib/libssl.so.3")), std::string::npos) << "the client maps the copy:\n" << maps;
  std::filesystem::remove(path("lib/libssl.so.3"));
  start_agent_on_ports({port_});
  auto st = client->wait(30s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_file(path("client.out"));
  // Its last process gone, the deleted file's probes are released soon.
  std::this_thread::sleep_for(2500ms);
  stop_tls_server("server");
  const auto records = stop_agent_after_joins();
  const json stats = agent_stats();
  ASSERT_TRUE(stats.is_object()) << read_file(path("agent.log"));
  EXPECT_GE(kernel_counter(stats, "tls_libraries_deleted"), 1u) << stats;
  EXPECT_GE(kernel_counter(stats, "tls_libraries_released"), 1u) << stats;
  EXPECT_EQ(kernel_counter(stats, "tls_attach_failures"), 0u) << stats;
  // The streams of the process on the deleted copy are seen all the same.
  int complete = 0;
  for (const auto& r : where(records, "role", "client")) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["tls_library"], "openssl-3") << describe(r);
    if (r["end"] == "complete" && r["content_events"] == 20) ++complete;
  }
  EXPECT_GE(complete, 3) << "requests made after the agent started, through the deleted library";
  EXPECT_NE(read_file(path("agent.log")).find("deleted"), std::string::npos) << "the attach note says so";
}

// ---- a library whose mount is gone from its process's namespace ---------------------

// A client in a mount namespace of its own loads libssl from a tmpfs mounted
// there, then the tmpfs is detached (umount -l), as a container's root is
// when the runtime tears it down under a process still running: the path in
// its maps leads nowhere, from the host or through /proc/PID/root. The agent,
// started after, reaches the library through the mapping itself
// (/proc/PID/map_files), probes it, and records its streams; nothing fails.
TEST_F(TlsTest, LibraryWhoseMountIsGoneIsProbedThroughItsMapping) {
  const std::string libssl = system_libssl();
  ASSERT_FALSE(libssl.empty()) << "libssl.so.3 not found (Debian package libssl3)";
  const std::string unshare = testing::find_system_binary("unshare");
  ASSERT_FALSE(unshare.empty()) << "unshare not installed (util-linux)";
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "5"}), "");
  const std::string root = path("root");
  std::filesystem::create_directories(root);
  std::string client;
  for (const std::string& arg : tls_client("client", port_, {"--tokens", "20", "--requests", "10", "--interval-ms",
                                                              "300", "--ready-file", path("client.ready")}))
    client += " '" + arg + "'";
  const std::string script = "mount -t tmpfs tmpfs " + root + " && cp " + libssl + " " + root +
                             "/ && { env LD_LIBRARY_PATH=" + root + client + " & } && while [ ! -e " +
                             path("client.ready") + " ]; do sleep 0.02; done && umount -l " + root +
                             " && echo detached && wait";
  auto ns = Process::spawn({unshare, "-m", "--propagation", "private", "/bin/sh", "-c", script}, path("client.out"));
  ASSERT_TRUE(ns);
  ASSERT_TRUE(testing::wait_for_text(path("client.out"), "detached", 10s)) << read_file(path("client.out"));
  EXPECT_FALSE(std::filesystem::exists(root + "/libssl.so.3")) << "the copy lived only in the namespace's tmpfs";
  start_agent_on_ports({port_});
  auto st = ns->wait(30s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_file(path("client.out"));
  stop_tls_server("server");
  const auto records = stop_agent_after_joins();
  const json stats = agent_stats();
  ASSERT_TRUE(stats.is_object()) << read_file(path("agent.log"));
  EXPECT_EQ(kernel_counter(stats, "tls_attach_failures"), 0u) << stats;
  int complete = 0;
  for (const auto& r : where(records, "role", "client")) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    if (r["end"] == "complete" && r["content_events"] == 20) ++complete;
  }
  EXPECT_GE(complete, 3) << "requests made after the agent started, through the detached library: "
                         << read_file(path("agent.log"));
  EXPECT_NE(read_file(path("agent.log")).find("map_files"), std::string::npos)
      << "the attach note says it was read through the mapping";
}

// ---- libssl loaded late ---------------------------------------------------------------

TEST_F(TlsTest, LibsslLoadedLateByDlopenIsPickedUp) {
  const std::string libssl = system_libssl();
  ASSERT_FALSE(libssl.empty()) << "libssl.so.3 not found (Debian package libssl3)";
  // A libssl file nothing has mapped yet and that is in no library directory
  // (the system's own is probed from the start), so only the process's dlopen
  // can lead the agent to it.
  std::filesystem::create_directories(path("lib"));
  std::filesystem::copy_file(libssl, path("lib/libssl.so.3"));
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "20", "--itl-ms", "10"}), "");
  start_agent_on_ports({port_});
  // A Python process without libssl at exec: `import ssl` (dlopen) after the
  // agent's last look at a new process (300 ms), then a request at once and
  // one 300 ms later. Probing the new file takes the agent tens of ms after
  // the dlopen returns, so the first stream may be joined mid-way; the second
  // is seen whole.
  std::vector<std::string> argv =
      tls_client("client", port_, {"--tokens", "16", "--import-after-ms", "700", "--requests", "2", "--interval-ms", "300"});
  argv.insert(argv.begin(), {"/usr/bin/env", "LD_LIBRARY_PATH=" + path("lib")});
  ASSERT_EQ(run_to_end(argv, "client.out"), 0) << read_file(path("client.out"));
  stop_tls_server("server");
  const auto records = stop_agent_after_joins();
  auto clients = where(records, "role", "client");
  ASSERT_GE(clients.size(), 1u) << read_file(path("agent.log"));
  ASSERT_LE(clients.size(), 2u);
  std::sort(clients.begin(), clients.end(), [](const json& a, const json& b) {
    return a["first_event_ns"].get<std::int64_t>() < b["first_event_ns"].get<std::int64_t>();
  });
  for (const auto& r : clients) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["tls_library"], "openssl-3") << describe(r);
    EXPECT_EQ(r["end"], "complete") << describe(r);
  }
  const json& last = clients.back();
  EXPECT_EQ(clients.size(), 2u) << "both streams recorded, the first perhaps joined mid-way";
  EXPECT_EQ(last["content_events"], 16) << describe(last);
  EXPECT_FALSE(last["joined_midstream"].get<bool>()) << "seen from its first byte: " << describe(last);
  std::printf("  late libssl: first stream %s (%d content events)\n",
              clients[0]["joined_midstream"].get<bool>() ? "joined mid-way" : "seen whole",
              clients[0]["content_events"].get<int>());
  const std::string log = read_file(path("agent.log"));
  EXPECT_NE(log.find(path("lib/libssl.so.3")), std::string::npos)
      << "the attach note names the late library:\n" << log;
}

// ---- library calls Python's ssl cannot make (tls-fault-peer) --------------------------

class TlsFaultTest : public TlsTest {
 protected:
  // tls-fault-peer server on port_; "" once it listens, else why not.
  std::string start_fault_server(std::vector<std::string> extra) {
    std::vector<std::string> argv = {testing::build_dir() + "/tls-fault-peer", "server", "--port",
                                     std::to_string(port_), "--cert", cert(), "--key", key()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Process::spawn(argv, path("fault_server.out"));
    if (!p) return "cannot spawn " + argv[0] + " (make builds it)";
    fault_server_.emplace(std::move(*p));
    if (!testing::wait_for_text(path("fault_server.out"), "listening", 10s))
      return "tls-fault-peer did not start:\n" + read_file(path("fault_server.out"));
    return "";
  }
  // What the server wrote, from its last line once it exits.
  json fault_server_counts() {
    EXPECT_TRUE(fault_server_->wait(30s)) << "tls-fault-peer server did not finish";
    return last_json_line(path("fault_server.out"));
  }
  static json last_json_line(const std::string& file) {
    const std::string out = read_file(file);
    const std::size_t start = out.rfind("\n{");
    return json::parse(out.substr(start == std::string::npos ? 0 : start + 1), nullptr, false);
  }

  // A record that matches what its peer wrote: every event once, in order,
  // and the body bytes the writer counted.
  static void expect_matches_writer(const json& r, const json& written) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["content_events"], written["content_events"]) << describe(r) << "\nwritten: " << written;
    EXPECT_EQ(r["body_bytes"], written["body_bytes"]) << "no byte counted twice, none missed: " << describe(r)
                                                      << "\nwritten: " << written;
    EXPECT_EQ(r["bytes_lost"], 0) << describe(r);
    std::set<int> seen;
    std::int64_t last_ts = 0;
    for (const auto& e : r["timeline"]) {
      EXPECT_TRUE(seen.insert(e["i"].get<int>()).second) << "event " << e["i"] << " timed twice: " << describe(r);
      EXPECT_GE(e["ts_ns"].get<std::int64_t>(), last_ts) << "events in order: " << describe(r);
      last_ts = e["ts_ns"].get<std::int64_t>();
    }
  }

  void slow_reader_stream(const std::string& mode);
  void key_update_stream(bool requested);

  std::optional<Process> fault_server_;
};

// A slow reader behind a small window: the server's non-blocking SSL_write
// returns part of each event (SSL_MODE_ENABLE_PARTIAL_WRITE), or fails with
// SSL_ERROR_WANT_WRITE and is offered the same buffer again.
void TlsFaultTest::slow_reader_stream(const std::string& mode) {
  {
    ASSERT_EQ(start_fault_server({"--mode", mode, "--events", "30", "--event-bytes", "3000", "--itl-ms", "1"}), "");
    start_agent_on_ports({port_});
    ASSERT_EQ(run_to_end(tls_client("client_" + mode, port_,
                             {"--rcvbuf", "4096", "--recv-pause-ms", "3", "--recv-bytes", "2048"}),
                  "client_" + mode + ".out"),
              0)
        << read_file(path("client_" + mode + ".out"));
    const json written = fault_server_counts();
    ASSERT_TRUE(written.is_object()) << read_file(path("fault_server.out"));
    const auto records = stop_agent_after_joins();
    if (mode == "partial") {
      EXPECT_GT(written["partial_writes"].get<int>(), 0) << "the small window made partial writes: " << written;
    } else {
      EXPECT_GT(written["want_write"].get<int>(), 0) << "the small window made WANT_WRITE retries: " << written;
      EXPECT_EQ(written["partial_writes"], 0) << written;
    }
    const auto servers = where(records, "comm", "tls-fault-peer");
    const auto clients = where(records, "role", "client");
    ASSERT_EQ(servers.size(), 1u) << read_file(path("agent.log"));
    ASSERT_EQ(clients.size(), 1u);
    EXPECT_EQ(servers[0]["role"], "server") << describe(servers[0]);
    for (const auto& r : {servers[0], clients[0]}) {
      expect_matches_writer(r, written);
      EXPECT_EQ(r["end"], "complete") << describe(r);
    }
    std::printf("  %s: %d SSL_write calls moved bytes, %d partial, %d WANT_WRITE retries\n", mode.c_str(),
                written["writes"].get<int>(), written["partial_writes"].get<int>(), written["want_write"].get<int>());
  }
}

TEST_F(TlsFaultTest, PartialWritesAreTimedOnceAndCountedOnce) { slow_reader_stream("partial"); }
TEST_F(TlsFaultTest, WantWriteRetriesAreTimedOnceAndCountedOnce) { slow_reader_stream("want-write"); }

// TLS 1.3 key updates in the middle of the stream, with and without asking
// the peer to update its own keys.
void TlsFaultTest::key_update_stream(bool requested) {
  {
    std::vector<std::string> extra = {"--mode", "key-update", "--events", "30", "--event-bytes", "40",
                                      "--itl-ms", "3", "--key-update-every", "5"};
    if (requested) extra.push_back("--key-update-requested");
    ASSERT_EQ(start_fault_server(extra), "");
    start_agent_on_ports({port_});
    ASSERT_EQ(run_to_end(tls_client("client", port_, {}), "client.out"), 0) << read_file(path("client.out"));
    const json written = fault_server_counts();
    ASSERT_TRUE(written.is_object()) << read_file(path("fault_server.out"));
    EXPECT_GE(written["key_updates"].get<int>(), 5) << written;
    EXPECT_EQ(written["error"], "") << written;
    const auto records = stop_agent_after_joins();
    const auto servers = where(records, "comm", "tls-fault-peer");
    const auto clients = where(records, "role", "client");
    ASSERT_EQ(servers.size(), 1u) << read_file(path("agent.log"));
    ASSERT_EQ(clients.size(), 1u);
    for (const auto& r : {servers[0], clients[0]}) {
      expect_matches_writer(r, written);
      EXPECT_EQ(r["end"], "complete") << describe(r);
      EXPECT_EQ(r["timeline"].size(), written["content_events"].get<std::size_t>() + 3) << "role, finish, [DONE]";
    }
  }
}

TEST_F(TlsFaultTest, KeyUpdatesMidStreamKeepTheStreamWhole) { key_update_stream(false); }
TEST_F(TlsFaultTest, RequestedKeyUpdatesMidStreamKeepTheStreamWhole) { key_update_stream(true); }

// A TLS 1.2 client asks for a renegotiation mid-stream; the server refuses
// (SSL_OP_NO_RENEGOTIATION). What each side moved before is recorded right,
// the stream's end says how it ended, and the agent goes on.
TEST_F(TlsFaultTest, RefusedRenegotiationKeepsTheStreamsRecordsRight) {
  ASSERT_EQ(start_fault_server({"--mode", "no-renegotiation", "--events", "30", "--event-bytes", "40", "--itl-ms",
                                "10"}),
            "");
  start_agent_on_ports({port_});
  ASSERT_EQ(run_to_end({testing::build_dir() + "/tls-fault-peer", "client", "--port", std::to_string(port_),
                 "--renegotiate-after", "5"},
                "fault_client.out"),
            0)
      << read_file(path("fault_client.out"));
  const json read = last_json_line(path("fault_client.out"));
  const json written = fault_server_counts();
  ASSERT_TRUE(read.is_object() && written.is_object()) << read_file(path("fault_client.out"))
                                                       << read_file(path("fault_server.out"));
  std::printf("  renegotiation refused: the client read %d content events (%s), the server wrote %d (%s)\n",
              read["content_events"].get<int>(), read["error"].get<std::string>().c_str(),
              written["content_events"].get<int>(), written["error"].get<std::string>().c_str());
  EXPECT_GE(read["content_events"].get<int>(), 5) << "the events before the renegotiation: " << read;
  EXPECT_EQ(read["renegotiations_asked"], 1) << "the client asked for it: " << read;
  EXPECT_EQ(read["renegotiation_pending"], 1) << "and the server refused it (never completed): " << read;
  // A second, ordinary stream in the same run: capture went on.
  ASSERT_EQ(start_tls_server("after", {"--ttft-ms", "5", "--itl-ms", "2"}), "");
  ASSERT_EQ(run_to_end(tls_client("after_client", port_, {"--tokens", "8"}), "after_client.out"), 0);
  stop_tls_server("after");
  const auto records = stop_agent_after_joins();
  const auto servers = where(records, "comm", "tls-fault-peer");
  ASSERT_EQ(where(records, "role", "server").size(), 2u) << read_file(path("agent.log"));
  for (const auto& r : servers) {
    if (r["role"] == "server") {
      EXPECT_EQ(r["content_events"], written["content_events"]) << describe(r) << "\nwritten: " << written;
    } else {
      EXPECT_EQ(r["content_events"], read["content_events"]) << describe(r) << "\nread: " << read;
    }
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
  }
  EXPECT_EQ(servers.size(), 2u) << "the refused renegotiation's two ends";
  const auto after = where(where(records, "comm", "python3"), "role", "client");
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0]["content_events"], 8) << describe(after[0]);
}

// ---- targeting names processes: probes per process ------------------------------------

TEST_F(TlsTest, TargetedProcessAloneGetsTlsProbes) {
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "5"}), "");
  const int server_pid = peers_["server"]->pid();
  // A libssl user that is not a target, running before and after the agent starts.
  auto other = Process::spawn(tls_client("other", port_, {"--tokens", "10", "--requests", "8", "--interval-ms", "250",
                                                          "--ready-file", path("other.ready")}),
                              path("other.out"));
  ASSERT_TRUE(other);
  ASSERT_TRUE(testing::wait_for_file(path("other.ready"), 10s)) << read_file(path("other.out"));
  start_agent_with({"--socket", "", "--metrics-listen", "", "--pid", std::to_string(server_pid)});
  std::this_thread::sleep_for(1200ms);  // requests of both made under the agent
  EXPECT_TRUE(has_hit_a_uprobe(server_pid)) << "the target's own probes fired";
  EXPECT_FALSE(has_hit_a_uprobe(other->pid())) << "a process that is not a target never traps";
  auto st = other->wait(20s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_file(path("other.out"));
  stop_tls_server("server");
  const auto records = stop_agent_after_joins();
  const auto servers = where(records, "role", "server");
  EXPECT_TRUE(where(records, "role", "client").empty()) << "the client is not a target";
  ASSERT_GE(servers.size(), 3u) << read_file(path("agent.log"));
  int whole = 0;
  for (const auto& r : servers) {
    EXPECT_TRUE(r["tls"].get<bool>()) << describe(r);
    EXPECT_EQ(r["tls_library"], "openssl-3") << describe(r);
    if (r["content_events"] == 10 && r["end"] == "complete") ++whole;
  }
  EXPECT_GE(whole, 3) << "the target's streams made under the agent, seen whole";
  const json stats = agent_stats();
  EXPECT_EQ(kernel_counter(stats, "tls_processes_probed"), 1u) << stats;
  EXPECT_GE(kernel_counter(stats, "tls_libraries_attached"), 1u) << stats;
  EXPECT_EQ(kernel_counter(stats, "tls_attach_failures"), 0u) << stats;
  const std::string log = read_file(path("agent.log"));
  EXPECT_NE(log.find("TLS probes per targeted process"), std::string::npos) << log;
  EXPECT_NE(log.find("for process " + std::to_string(server_pid)), std::string::npos) << log;
}

// The same by cgroup: the server moved into a cgroup of its own, the agent
// targeting it (--cgroup); the eligibility is read from /proc/PID/cgroup.
TEST_F(TlsTest, ProcessInTargetedCgroupAloneGetsTlsProbes) {
  const std::string root = capture::cgroup2_mount_point();
  const std::string name = "/infertap-tls-" + std::to_string(getpid()), cgroup = root + name;
  ASSERT_TRUE(std::filesystem::create_directory(cgroup)) << "cgroup v2 needed (mounted at " << root << ")";
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "5"}), "");
  const int server_pid = peers_["server"]->pid();
  std::ofstream(cgroup + "/cgroup.procs") << server_pid << "\n";
  ASSERT_NE(read_file("/proc/" + std::to_string(server_pid) + "/cgroup").find("0::" + name), std::string::npos)
      << "the server moved into " << cgroup;
  start_agent_with({"--socket", "", "--metrics-listen", "", "--cgroup", cgroup});
  ASSERT_EQ(run_to_end(tls_client("client", port_, {"--tokens", "10", "--requests", "3"}), "client.out"), 0)
      << read_file(path("client.out"));
  EXPECT_TRUE(has_hit_a_uprobe(server_pid)) << "the process in the cgroup has its probes";
  stop_tls_server("server");
  const auto records = stop_agent_after_joins();
  std::filesystem::remove(cgroup);
  const auto servers = where(records, "role", "server");
  EXPECT_TRUE(where(records, "role", "client").empty()) << "the client is not in the cgroup";
  ASSERT_EQ(servers.size(), 3u) << read_file(path("agent.log"));
  for (const auto& r : servers) EXPECT_EQ(r["content_events"], 10) << describe(r);
  const json stats = agent_stats();
  EXPECT_EQ(kernel_counter(stats, "tls_processes_probed"), 1u) << "the client has none: " << stats;
  EXPECT_NE(read_file(path("agent.log")).find("targeted by --cgroup"), std::string::npos) << read_file(path("agent.log"));
}

TEST_F(TlsTest, TargetedProcessExecingIntoALibsslUserGetsItsProbesThen) {
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "5"}), "");
  // A shell (no libssl) targeted by pid, that becomes the TLS client by exec.
  std::string client;
  for (const std::string& arg : tls_client("client", port_, {"--tokens", "12", "--requests", "2", "--interval-ms",
                                                              "400"}))
    client += " '" + arg + "'";
  auto shell = Process::spawn({"/bin/sh", "-c", "while [ ! -e " + path("go") + " ]; do sleep 0.02; done; exec" + client},
                              path("client.out"));
  ASSERT_TRUE(shell);
  start_agent_with({"--socket", "", "--metrics-listen", "", "--pid", std::to_string(shell->pid())});
  std::ofstream(path("go")).close();
  auto st = shell->wait(20s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_file(path("client.out"));
  stop_tls_server("server");
  const auto records = stop_agent_after_joins();
  EXPECT_TRUE(where(records, "role", "server").empty()) << "the server is not a target";
  const auto clients = where(records, "role", "client");
  ASSERT_GE(clients.size(), 1u) << read_file(path("agent.log"));
  const json& last = clients.back();
  EXPECT_TRUE(last["tls"].get<bool>()) << describe(last);
  EXPECT_EQ(last["content_events"], 12) << describe(last);
  EXPECT_EQ(last["end"], "complete") << describe(last);
  const json stats = agent_stats();
  EXPECT_EQ(kernel_counter(stats, "tls_processes_probed"), 1u) << stats;
  EXPECT_NE(read_file(path("agent.log")).find("as openssl-3 for process " + std::to_string(shell->pid())),
            std::string::npos)
      << read_file(path("agent.log"));
}

}  // namespace
}  // namespace infertap
