// HTTP/2 and gRPC end to end, as root, against real servers and clients:
// nginx `listen ... ssl http2` and `listen ... http2` (h2c) in front of the
// sample server (HTTP/1.1 upstream), curl and Node's built-in http2 client
// multiplexing many streams on one connection, nghttpd answering an h2c
// Upgrade, a grpcio server-streaming service and client, and a raw h2c client
// that stops granting one stream's window. The oracle for framing is tshark
// (Wireshark's dissector, not ours): per HTTP/2 stream, its DATA frame count,
// payload bytes and frame-end TCP sequences must be the agent's.
//
// Packages (scripts/setup.sh): nginx, curl, nodejs, tshark, python3-grpcio,
// python3-h2, nghttp2-server, openssl.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/gateways.h"
#include "support/live_test.h"
#include "support/ndjson.h"
#include "support/process.h"
#include "support/records.h"
#include "support/sample_peers.h"
#include "support/test_certificate.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::Process;
using testing::read_file;

constexpr const char* kPython = "/usr/bin/python3";  // Debian's: python3-grpcio is installed for it
constexpr const char* kTsharkHelper = "tests/support/tshark_h2.py";
constexpr const char* kGrpcPeer = "tests/support/grpc_peer.py";
constexpr const char* kStuckReader = "tests/support/h2_stuck_reader.py";
constexpr const char* kUpgradeServer = "tests/support/h2c_upgrade_server.py";
constexpr const char* kGrpcMethod = "/infertap.test.Tokens/Stream";

// The fields a failure message needs, not the whole record with its timeline.
std::string brief(const json& r) {
  json b = json::object();
  for (const char* k : {"stream_id", "role", "comm", "local", "remote", "http_version", "h2_stream_id",
                        "headers_unknown", "h2_data_frames", "body_bytes", "events", "content_events", "end", "tls",
                        "dialect", "token_source", "grpc_status", "path", "stalls", "h2_flow", "gateway", "delivery",
                        "peer_stream_id", "counts_lower_bound"})
    if (r.contains(k)) b[k] = r[k];
  return b.dump(1);
}

using testing::h2_stream;
using testing::has_role;
using testing::is_leg;
using testing::port_of;
using testing::select;
using testing::stall_causes;

class Http2Test : public testing::LiveTest {
 protected:
  Http2Test() : LiveTest("infertap-h2") {}

  void TearDown() override {
    helpers_.clear();  // stopped before the scratch directory goes
    LiveTest::TearDown();
  }

  // nginx `listen ... http2` in front of the upstream port: h2 by ALPN with
  // TLS (a certificate for localhost made now, in cert.pem), else h2c.
  std::unique_ptr<testing::Nginx> nginx_h2(testing::NginxMode mode, std::uint16_t upstream, bool tls) {
    testing::NginxOptions opt;
    opt.http2 = true;
    if (tls) {
      EXPECT_EQ(testing::make_localhost_certificate(path("key.pem"), path("cert.pem"), path("openssl.log")), "");
      opt.tls_cert = path("cert.pem");
      opt.tls_key = path("key.pem");
    }
    auto gw = std::make_unique<testing::Nginx>(mode, upstream, path("nginx"), opt);
    EXPECT_TRUE(gw->ok()) << gw->error();
    return gw;
  }

  // A helper process kept until stop_helper() or the end of the test.
  void start_helper(const std::string& name, const std::vector<std::string>& argv, const std::string& ready_text) {
    auto p = Process::spawn(argv, path(name + ".out"));
    ASSERT_TRUE(p) << "cannot spawn " << argv[0];
    helpers_[name].emplace(std::move(*p));
    ASSERT_TRUE(testing::wait_for_text(path(name + ".out"), ready_text, 15s))
        << name << " did not say '" << ready_text << "':\n" << read_file(path(name + ".out"));
  }
  void stop_helper(const std::string& name, int sig = SIGTERM) {
    auto& p = helpers_[name];
    if (!p) return;
    p->signal(sig);
    if (!p->wait(10s)) p->stop(1s);
    p.reset();
  }

  // curl fetching `url` with `mode` (--http2: Upgrade on http://, or
  // --http2-prior-knowledge); the HTTP version it says it spoke.
  std::string curl_http_version(const std::string& mode, const std::string& url) {
    EXPECT_EQ(run_to_end({"/usr/bin/curl", "-sSN", mode, "-o", path("curl.body"), "-w", "%{http_version}", url}, "curl.out"), 0)
        << read_file(path("curl.out"));
    return read_file(path("curl.out"));
  }

  // tshark_h2.py on a capture of the h2 server on `port` (with the TLS key
  // log when given): its JSON, ASSERTed free of errors by the caller.
  json dissect_capture(const std::string& pcap, std::uint16_t port, const std::string& keylog = "") {
    std::vector<std::string> argv = {kPython, kTsharkHelper, "--pcap", pcap, "--port", std::to_string(port)};
    if (!keylog.empty()) argv.insert(argv.end(), {"--keylog", keylog});
    EXPECT_EQ(run_to_end(argv, "tshark_h2.json"), 0) << read_file(path("tshark_h2.json"));
    return json::parse(read_file(path("tshark_h2.json")), nullptr, false);
  }

  std::map<std::string, std::optional<Process>> helpers_;
};

// Every event, or, when a buffering gateway's burst went out in one TLS record
// larger than the capture's head and tail, fewer with the gap counted.
void expect_events_or_counted_gap(const json& r, int expected, bool burst_possible) {
  if (!burst_possible || r.value("content_events", -1) == expected) {
    EXPECT_EQ(r.value("content_events", -1), expected) << brief(r);
    return;
  }
  EXPECT_TRUE(r.value("counts_lower_bound", false)) << brief(r);
  EXPECT_LT(r.value("content_events", -1), expected) << brief(r);
}

// ---- nginx h2 (TLS, ALPN) in front of the sample server ------------------------------

struct NginxH2Case {
  std::string name;
  testing::NginxMode mode;
};

class NginxH2 : public Http2Test, public ::testing::WithParamInterface<NginxH2Case> {};

TEST_P(NginxH2, EachStreamOfOneConnectionIsARecordJoinedToItsUpstream) {
  const testing::NginxMode mode = GetParam().mode;
  const bool buffers = testing::buffers_events(mode);
  constexpr int kNodeStreams = 8, kTokens = 40;
  testing::SampleServer server(path("server"), {"--ttft-ms", "50", "--itl-ms", "10"});
  ASSERT_TRUE(server.ok()) << server.error();
  const auto gw = nginx_h2(mode, server.port(), true);
  ASSERT_TRUE(gw->ok());
  start_agent_on_ports({server.port(), gw->port()});
  const std::string url = "https://localhost:" + std::to_string(gw->port());
  const auto node = run_node_h2_streams(url, kNodeStreams, kTokens, {"--ca", path("cert.pem")});
  ASSERT_EQ(run_to_end({"/usr/bin/curl", "-sSN", "--http2", "--cacert", path("cert.pem"), "--resolve",
                 "localhost:" + std::to_string(gw->port()) + ":127.0.0.1", "-o", path("curl.body"),
                 url + "/v1/chat/completions", "-H", "Content-Type: application/json", "-d",
                 R"({"model":"curl-h2","stream":true,"max_tokens":40})"},
                "curl.out"),
            0)
      << read_file(path("curl.out"));
  const auto records = stop_agent_after_joins();

  const std::set<int> node_ids = whole_node_streams(node, kTokens);
  ASSERT_EQ(node_ids.size(), std::size_t(kNodeStreams)) << "distinct HTTP/2 streams";
  const auto node_records = select(records, [](const json& r) { return has_role(r, "client") && r["comm"] == "node"; });
  ASSERT_EQ(node_records.size(), std::size_t(kNodeStreams)) << "one client record per HTTP/2 stream:\n"
                                                            << read_file(path("agent.log"));
  std::set<int> recorded_ids, node_ports;
  for (const auto& r : node_records) {
    EXPECT_EQ(r["http_version"], "2") << brief(r);
    EXPECT_TRUE(r.value("tls", false)) << brief(r);
    EXPECT_FALSE(r.value("headers_unknown", true)) << "seen from the connection's start: " << brief(r);
    expect_events_or_counted_gap(r, kTokens, buffers);
    recorded_ids.insert(h2_stream(r));
    node_ports.insert(port_of(r["local"]));
  }
  EXPECT_EQ(recorded_ids, node_ids) << "the records' h2_stream_id are the client's stream ids";
  EXPECT_EQ(node_ports.size(), 1u) << "all on ONE connection";

  const auto curls = select(records, [](const json& r) { return has_role(r, "client") && r["comm"] == "curl"; });
  ASSERT_EQ(curls.size(), 1u) << read_file(path("agent.log"));
  EXPECT_EQ(curls[0]["http_version"], "2") << brief(curls[0]);
  EXPECT_EQ(h2_stream(curls[0]), 1) << brief(curls[0]);
  expect_events_or_counted_gap(curls[0], kTokens, buffers);

  // nginx: an h2 (TLS) downstream leg per stream, joined to an HTTP/1.1 upstream leg.
  const auto down = select(records, [](const json& r) { return is_leg(r, "downstream"); });
  const auto up = select(records, [](const json& r) { return is_leg(r, "upstream"); });
  ASSERT_EQ(down.size(), std::size_t(kNodeStreams + 1)) << read_file(path("agent.log"));
  ASSERT_EQ(up.size(), std::size_t(kNodeStreams + 1));
  const std::set<std::string> up_ids = testing::h1_upstream_ids(up, brief);
  for (const auto& r : down) testing::expect_h2_tls_leg_joined(r, gw->port(), up_ids, 10, brief);

  const auto servers = select(records, [](const json& r) { return has_role(r, "server"); });
  ASSERT_EQ(servers.size(), std::size_t(kNodeStreams + 1));
  for (const auto& r : servers) {
    ASSERT_TRUE(r["delivery"].is_object()) << brief(r);
    const auto causes = stall_causes(r["delivery"]["stalls"]);
    if (buffers) {
      EXPECT_TRUE(causes.empty() || causes == std::set<std::string>{"gateway_buffering"}) << brief(r);
      EXPECT_EQ(r["delivery"]["ttft_cause"], "gateway_buffering") << brief(r);
      EXPECT_TRUE(r["delivery"].value("degraded_by_path", false)) << brief(r);
    } else {
      EXPECT_EQ(causes.count("gateway_buffering"), 0u) << brief(r);
      EXPECT_TRUE(r["delivery"]["ttft_cause"].is_null()) << brief(r);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, NginxH2,
                         ::testing::Values(NginxH2Case{"streaming", testing::NginxMode::streaming},
                                           NginxH2Case{"buffering", testing::NginxMode::defaults}),
                         [](const ::testing::TestParamInfo<NginxH2Case>& info) { return info.param.name; });

TEST_F(Http2Test, StallInjectedUpstreamIsOnItsHttp2StreamAndNoOther) {
  constexpr int kStreams = 6, kTokens = 30, kStalled = 2;
  testing::SampleServer server(path("server"), {"--ttft-ms", "30", "--itl-ms", "10"});
  ASSERT_TRUE(server.ok()) << server.error();
  const auto gw = nginx_h2(testing::NginxMode::streaming, server.port(), true);
  ASSERT_TRUE(gw->ok());
  start_agent_on_ports({server.port(), gw->port()});
  const auto node = run_node_h2_streams("https://localhost:" + std::to_string(gw->port()), kStreams, kTokens,
                                     {"--ca", path("cert.pem"), "--pause-stream", std::to_string(kStalled),
                                      "--pause-after", "12", "--pause-ms", "300"});
  ASSERT_EQ(node.size(), std::size_t(kStreams));
  const int stalled_id = node[kStalled]["stream_id"].get<int>();
  const auto records = stop_agent_after_joins();
  const auto clients = select(records, [](const json& r) { return has_role(r, "client"); });
  ASSERT_EQ(clients.size(), std::size_t(kStreams)) << read_file(path("agent.log"));
  for (const auto& r : clients) {
    if (h2_stream(r) == stalled_id) {
      ASSERT_EQ(r["stalls"].size(), 1u) << "the injected pause, on HTTP/2 stream " << stalled_id << ": " << brief(r);
      EXPECT_EQ(stall_causes(r["stalls"]), std::set<std::string>{"model"}) << brief(r);
      EXPECT_GE(r["stalls"][0].value("gap_ms", 0.0), 250.0) << brief(r);
      EXPECT_LT(r["stalls"][0].value("gap_ms", 0.0), 600.0) << brief(r);
    } else {
      EXPECT_TRUE(r["stalls"].empty()) << "stream " << h2_stream(r) << " was not stalled: " << brief(r);
    }
  }
  const auto down = select(records, [](const json& r) { return is_leg(r, "downstream"); });
  ASSERT_EQ(down.size(), std::size_t(kStreams));
  for (const auto& r : down)
    EXPECT_EQ(r["stalls"].empty(), h2_stream(r) != stalled_id) << "nginx's h2 leg of the stalled stream only: " << brief(r);
  int stalled_servers = 0;
  for (const auto& r : select(records, [](const json& r) { return has_role(r, "server"); }))
    stalled_servers += !r["stalls"].empty();
  EXPECT_EQ(stalled_servers, 1) << "the sample server paused one stream";
}

// ---- h2c: prior knowledge, with tshark as the oracle ----------------------------------

// tshark capturing on loopback for one port, into a pcap file.
class LoopbackCapture {
 public:
  LoopbackCapture(const std::string& pcap, std::uint16_t port, const std::string& log) : pcap_(pcap) {
    const std::string tshark = testing::find_system_binary("tshark");
    if (tshark.empty()) {
      error_ = "tshark not installed: run scripts/setup.sh (tshark)";
      return;
    }
    auto p = Process::spawn({tshark, "-n", "-i", "lo", "-f", "tcp port " + std::to_string(port), "-w", pcap}, log);
    if (!p) {
      error_ = "cannot spawn " + tshark;
      return;
    }
    proc_.emplace(std::move(*p));
    // "Capture started" comes from dumpcap once it captures ("Capturing on" is
    // printed before); a moment more for the first packets to be in.
    if (!testing::wait_for_text(log, "Capture started", 10s)) error_ = "tshark did not start:\n" + read_file(log);
    std::this_thread::sleep_for(500ms);
  }
  ~LoopbackCapture() { stop(); }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // SIGINT: tshark writes what it captured and exits.
  void stop() {
    if (!proc_) return;
    std::this_thread::sleep_for(300ms);  // the last packets reach the capture
    proc_->signal(SIGINT);
    if (!proc_->wait(10s)) proc_->stop(1s);
    proc_.reset();
  }

 private:
  std::string pcap_, error_;
  std::optional<Process> proc_;
};

// tshark's view of the server direction, by client port and HTTP/2 stream id.
std::map<std::pair<int, int>, json> tshark_streams(const json& dissected) {
  std::map<std::pair<int, int>, json> out;
  for (const auto& c : dissected["connections"])
    for (const auto& [id, s] : c["streams"].items()) out[{c["client_port"].get<int>(), std::stoi(id)}] = s;
  return out;
}

// The agent's record of one stream agrees with tshark's dissection of it:
// frames and bytes, and (not over TLS, where frames sit inside records) where
// each frame ends in the TCP sequence space.
void expect_matches_tshark(const json& r, const json& t, bool with_sequences) {
  EXPECT_EQ(r.value("h2_data_frames", -1), t["data_frames"].get<int>()) << "DATA frames: " << brief(r);
  EXPECT_EQ(r.value("body_bytes", -1), t["data_bytes"].get<int>()) << "DATA payload bytes: " << brief(r);
  if (!with_sequences) return;
  std::set<std::int64_t> event_ends;
  for (const auto& e : r["timeline"]) event_ends.insert(e.value("end_seq", std::int64_t(-1)) & 0xFFFFFFFF);
  ASSERT_FALSE(event_ends.empty()) << "no timeline: " << brief(r);
  // Each frame with payload ends where an event ends: the sample server writes
  // whole events and nginx forwards each upstream read as one DATA frame.
  // A frame may also end mid-event when nginx read part of an event from
  // upstream (one or more times): that event then ends where a later frame of
  // the stream ends, the first event end after this frame's.
  std::set<std::int64_t> frame_ends;
  for (const auto& end : t["data_end_seqs"]) frame_ends.insert(end.get<std::int64_t>());
  int frames_with_payload = 0, ends_found = 0;
  std::string unmatched;  // frame end: the event ends around it, for the failure message
  const auto& ends = t["data_end_seqs"];
  for (std::size_t i = 0; i < ends.size(); ++i) {
    const std::int64_t end = ends[i].get<std::int64_t>();
    const std::int64_t prev = i == 0 ? -1 : ends[i - 1].get<std::int64_t>();
    if (end == prev + 9) continue;  // an empty DATA frame (END_STREAM only): 9 header bytes, no payload
    ++frames_with_payload;
    const auto spanning = event_ends.upper_bound(end);
    const bool split = spanning != event_ends.end() && frame_ends.count(*spanning);
    if (event_ends.count(end) || split) {
      ++ends_found;
      continue;
    }
    const auto after = event_ends.upper_bound(end);
    unmatched += " frame " + std::to_string(i) + " ends at " + std::to_string(end) + " (events end at " +
                 (after == event_ends.begin() ? std::string("-") : std::to_string(*std::prev(after))) + ", " +
                 (after == event_ends.end() ? std::string("-") : std::to_string(*after)) + ");";
  }
  EXPECT_GT(frames_with_payload, 0);
  EXPECT_EQ(ends_found, frames_with_payload) << "every DATA frame's end sequence is an event's end_seq:" << unmatched
                                             << "\n" << brief(r)
                                             << "\ntshark: " << t.dump();
}

// Every HTTP/2 stream tshark found is recorded at both ends, the client and
// nginx's downstream leg, and each record agrees with tshark (sequences too
// unless over TLS). content_events < 0: not checked.
void expect_both_ends_match_tshark(const std::vector<json>& records, const json& dissected, int streams, bool tls,
                                   int content_events) {
  ASSERT_TRUE(dissected.is_object()) << "tshark_h2.py gave no JSON";
  ASSERT_TRUE(dissected["errors"].empty()) << dissected["errors"].dump();
  const auto oracle = tshark_streams(dissected);
  ASSERT_EQ(oracle.size(), std::size_t(streams)) << "tshark saw every stream: " << dissected.dump();
  const auto clients = select(records, [](const json& r) { return has_role(r, "client"); });
  const auto down = select(records, [](const json& r) { return is_leg(r, "downstream"); });
  ASSERT_EQ(clients.size(), oracle.size()) << "one client record per HTTP/2 stream";
  ASSERT_EQ(down.size(), oracle.size()) << "one nginx downstream leg per HTTP/2 stream";
  for (const auto* set : {&clients, &down}) {
    for (const auto& r : *set) {
      EXPECT_EQ(r["http_version"], "2") << brief(r);
      EXPECT_EQ(r.value("tls", !tls), tls) << brief(r);
      if (content_events >= 0) {
        EXPECT_EQ(r.value("content_events", -1), content_events) << brief(r);
      }
      const int client_port = port_of(has_role(r, "client") ? r["local"] : r["remote"]);
      auto it = oracle.find({client_port, h2_stream(r)});
      ASSERT_NE(it, oracle.end()) << "tshark has no such stream: " << brief(r);
      expect_matches_tshark(r, it->second, !tls);
    }
  }
}

TEST_F(Http2Test, H2cPriorKnowledgeFramesAndSequencesAreTsharks) {
  constexpr int kNodeStreams = 6, kTokens = 25;
  ASSERT_TRUE(std::filesystem::exists(kTsharkHelper));
  testing::SampleServer server(path("server"), {"--ttft-ms", "20", "--itl-ms", "5"});
  ASSERT_TRUE(server.ok()) << server.error();
  const auto gw = nginx_h2(testing::NginxMode::streaming, server.port(), false);  // h2c, prior knowledge
  ASSERT_TRUE(gw->ok());
  start_agent_on_ports({server.port(), gw->port()});
  LoopbackCapture capture(path("h2c.pcap"), gw->port(), path("tshark.out"));
  ASSERT_TRUE(capture.ok()) << capture.error();
  const std::string url = "http://127.0.0.1:" + std::to_string(gw->port());
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(run_to_end({"/usr/bin/curl", "-sSN", "--http2-prior-knowledge", "-o", path("curl.body"),
                   url + "/v1/chat/completions", "-H", "Content-Type: application/json", "-d",
                   R"({"model":"curl-h2c","stream":true,"max_tokens":25})"},
                  "curl.out"),
              0)
        << read_file(path("curl.out"));
  run_node_h2_streams(url, kNodeStreams, kTokens, {});
  capture.stop();
  const auto records = stop_agent_after_joins();
  const json dissected = dissect_capture(path("h2c.pcap"), gw->port());
  expect_both_ends_match_tshark(records, dissected, 2 + kNodeStreams, false, kTokens);
  if (HasFatalFailure()) return;
  std::printf("  tshark oracle: %zu HTTP/2 streams on %zu connections, frames/bytes/end_seq equal on both ends\n",
              tshark_streams(dissected).size(), dissected["connections"].size());
}

TEST_F(Http2Test, H2OverTlsFrameCountsAreTsharksWithCurlsKeys) {
  // curl writes its TLS secrets (SSLKEYLOGFILE); tshark decrypts the capture
  // with them. Frames and bytes per stream are compared; sequences are not
  // (the frames are inside TLS records).
  constexpr int kRequests = 2;
  testing::SampleServer server(path("server"), {"--ttft-ms", "20", "--itl-ms", "5"});
  ASSERT_TRUE(server.ok()) << server.error();
  const auto gw = nginx_h2(testing::NginxMode::streaming, server.port(), true);
  ASSERT_TRUE(gw->ok());
  start_agent_on_ports({server.port(), gw->port()});
  LoopbackCapture capture(path("h2.pcap"), gw->port(), path("tshark.out"));
  ASSERT_TRUE(capture.ok()) << capture.error();
  const std::string port = std::to_string(gw->port());
  for (int i = 0; i < kRequests; ++i)
    ASSERT_EQ(run_to_end({"/usr/bin/env", "SSLKEYLOGFILE=" + path("keys.log"), "/usr/bin/curl", "-sSN", "--http2",
                          "--cacert", path("cert.pem"), "--resolve", "localhost:" + port + ":127.0.0.1", "-o",
                          path("curl.body"), "https://localhost:" + port + "/v1/chat/completions", "-H",
                          "Content-Type: application/json", "-d",
                          R"({"model":"curl-h2-tls","stream":true,"max_tokens":)" + std::to_string(10 + 7 * i) + "}"},
                         "curl.out"),
              0)
        << read_file(path("curl.out"));
  capture.stop();
  const auto records = stop_agent_after_joins();
  const json dissected = dissect_capture(path("h2.pcap"), gw->port(), path("keys.log"));
  expect_both_ends_match_tshark(records, dissected, kRequests, true, -1);
}

// `requests` curl streams, one per connection, each HTTP/2 stream 1 (the
// first, or the upgraded request: RFC 7540 3.2), seen at both ends whole.
void expect_curl_and_server_on_stream_one(const std::vector<json>& records, std::size_t requests, int events,
                                          const std::string& url_path) {
  const auto curls = select(records, [](const json& r) { return has_role(r, "client"); });
  const auto servers = select(records, [](const json& r) { return has_role(r, "server"); });
  ASSERT_EQ(curls.size(), requests);
  ASSERT_EQ(servers.size(), requests);
  for (const auto* set : {&curls, &servers}) {
    for (const auto& r : *set) {
      EXPECT_EQ(r["http_version"], "2") << brief(r);
      EXPECT_EQ(h2_stream(r), 1) << brief(r);
      EXPECT_EQ(r.value("content_events", -1), events) << brief(r);
      EXPECT_EQ(r["path"], url_path) << "the request's own path: " << brief(r);
      EXPECT_FALSE(r.value("headers_unknown", true)) << brief(r);
      EXPECT_EQ(r["end"], "complete") << brief(r);
    }
  }
}

// ---- h2c by another implementation: nghttpd ----------------------------------------------

TEST_F(Http2Test, NghttpdH2cFileIsAnSseStreamOnItsHttp2Stream) {
  // nghttpd (nghttp2's server) serves files, not streams: an SSE body sent at
  // once, framed by nghttp2 rather than nginx. nghttpd does not accept
  // `Upgrade: h2c` without TLS (it answers with its SETTINGS frame), so this is
  // prior knowledge.
  const std::string nghttpd = testing::find_system_binary("nghttpd");
  ASSERT_FALSE(nghttpd.empty()) << "nghttpd not installed: run scripts/setup.sh (nghttp2-server)";
  constexpr int kEvents = 20, kRequests = 2;
  std::filesystem::create_directories(path("www"));
  {
    std::ofstream sse(path("www/events.sse"));
    for (int i = 0; i < kEvents; ++i)
      sse << "data: {\"id\":\"chatcmpl-ng\",\"object\":\"chat.completion.chunk\",\"model\":\"nghttpd\",\"choices\":[{"
             "\"index\":0,\"delta\":{\"content\":\"tok"
          << i << "\"},\"finish_reason\":null}]}\n\n";
    sse << "data: [DONE]\n\n";
  }
  std::ofstream(path("mime.types")) << "text/event-stream sse\n";
  start_agent_on_ports({port_});
  start_helper("nghttpd",
               {nghttpd, "--no-tls", "-a", "127.0.0.1", "-d", path("www"), "--mime-types-file=" + path("mime.types"),
                std::to_string(port_)},
               "");
  for (int i = 0; i < 100 && !testing::tcp_connects("127.0.0.1", port_); ++i) std::this_thread::sleep_for(50ms);
  for (int i = 0; i < kRequests; ++i)
    ASSERT_EQ(curl_http_version("--http2-prior-knowledge", "http://127.0.0.1:" + std::to_string(port_) + "/events.sse"),
              "2");
  stop_helper("nghttpd");
  expect_curl_and_server_on_stream_one(stop_agent_after_joins(), kRequests, kEvents, "/events.sse");
}

// ---- h2c by Upgrade ------------------------------------------------------------------------

TEST_F(Http2Test, H2cUpgradeFromHttp1IsStreamOne) {
  ASSERT_EQ(std::system((std::string(kPython) + " -c 'import h2' > /dev/null 2>&1").c_str()), 0)
      << "the h2 library is not importable by " << kPython << ": run scripts/setup.sh (python3-h2)";
  constexpr int kEvents = 20;
  start_agent_on_ports({port_});
  start_helper("upgrade-server", {kPython, kUpgradeServer, "--port", std::to_string(port_), "--events",
                                  std::to_string(kEvents), "--itl-ms", "10"},
               "listening");
  if (HasFatalFailure()) return;
  ASSERT_EQ(curl_http_version("--http2", "http://127.0.0.1:" + std::to_string(port_) + "/v1/upgraded"), "2")
      << "curl upgraded to HTTP/2 (Upgrade: h2c, 101)";
  stop_helper("upgrade-server");
  expect_curl_and_server_on_stream_one(stop_agent_after_joins(), 1, kEvents, "/v1/upgraded");
}

// ---- gRPC server streaming ----------------------------------------------------------------

TEST_F(Http2Test, GrpcServerStreamIsOneEventPerMessageWithItsStatus) {
  ASSERT_EQ(std::system((std::string(kPython) + " -c 'import grpc' > /dev/null 2>&1").c_str()), 0)
      << "grpcio not importable by " << kPython << ": run scripts/setup.sh (python3-grpcio)";
  constexpr int kMessages = 24, kFailing = 5;
  start_agent_on_ports({port_});
  start_helper("grpc-server", {kPython, kGrpcPeer, "server", "--port", std::to_string(port_), "--log",
                               path("grpc-server.ndjson")},
               "listening");
  if (HasFatalFailure()) return;
  ASSERT_EQ(run_to_end({kPython, kGrpcPeer, "client", "--port", std::to_string(port_), "--messages", std::to_string(kMessages),
                 "--itl-ms", "10", "--pause-after", "12", "--pause-ms", "300"},
                "grpc-ok.out"),
            0)
      << read_file(path("grpc-ok.out"));
  ASSERT_EQ(run_to_end({kPython, kGrpcPeer, "client", "--port", std::to_string(port_), "--messages", std::to_string(kFailing),
                 "--fail"},
                "grpc-fail.out"),
            0)
      << read_file(path("grpc-fail.out"));
  const json ok = json::parse(read_file(path("grpc-ok.out")), nullptr, false);
  const json fail = json::parse(read_file(path("grpc-fail.out")), nullptr, false);
  ASSERT_EQ(ok.value("messages", -1), kMessages) << ok;
  ASSERT_EQ(ok.value("status", -1), 0) << ok;
  ASSERT_EQ(fail.value("status", -1), 8) << "RESOURCE_EXHAUSTED: " << fail;
  stop_helper("grpc-server");
  const auto records = stop_agent_after_joins();
  const auto grpc = select(records, [](const json& r) { return r.value("dialect", "") == "grpc"; });
  ASSERT_EQ(grpc.size(), 4u) << "server and client record of both calls:\n" << read_file(path("agent.log"));
  int seen_ok = 0, seen_fail = 0;
  for (const auto& r : grpc) {
    EXPECT_EQ(r["http_version"], "2") << brief(r);
    EXPECT_EQ(r["token_source"], "messages") << brief(r);
    // grpcio's client sends its preface, SETTINGS and the request's HEADERS
    // in one sendmsg of 31 iovecs (one per frame header, name and value): the
    // kernel walks them all (ITAP_IOV_MAX), so the client's record has the
    // request's header block too.
    EXPECT_EQ(r["path"], kGrpcMethod) << "service/method from :path: " << brief(r);
    EXPECT_FALSE(r.value("headers_unknown", false)) << "the request's header block was read: " << brief(r);
    EXPECT_TRUE(has_role(r, "server") || has_role(r, "client")) << brief(r);
    if (r.value("grpc_status", -1) == 0) {
      ++seen_ok;
      EXPECT_EQ(r.value("content_events", -1), kMessages) << "one event per message: " << brief(r);
      ASSERT_EQ(r["stalls"].size(), 1u) << "the server's pause: " << brief(r);
      EXPECT_EQ(stall_causes(r["stalls"]), std::set<std::string>{"model"}) << brief(r);
      EXPECT_GE(r["stalls"][0].value("gap_ms", 0.0), 290.0) << "300 ms pause + 10 ms gap: " << brief(r);
      EXPECT_LT(r["stalls"][0].value("gap_ms", 0.0), 450.0) << brief(r);
    } else {
      ++seen_fail;
      EXPECT_EQ(r.value("grpc_status", -1), 8) << brief(r);
      EXPECT_EQ(r.value("content_events", -1), kFailing) << brief(r);
    }
  }
  EXPECT_EQ(seen_ok, 2);
  EXPECT_EQ(seen_fail, 2);
}

// ---- a peer that never grants window --------------------------------------------------------

TEST_F(Http2Test, StreamWindowHeldAtZeroIsBackpressureOnThatStreamOnly) {
  constexpr int kTokens = 30;
  constexpr double kHoldMs = 1500;
  testing::SampleServer server(path("server"), {"--ttft-ms", "20", "--itl-ms", "10"});
  ASSERT_TRUE(server.ok()) << server.error();
  const auto gw = nginx_h2(testing::NginxMode::streaming, server.port(), false);  // h2c, prior knowledge
  ASSERT_TRUE(gw->ok());
  start_agent_on_ports({server.port(), gw->port()});
  ASSERT_EQ(run_to_end({kPython, kStuckReader, "--port", std::to_string(gw->port()), "--tokens", std::to_string(kTokens),
                 "--window", "1024", "--hold-ms", std::to_string(int(kHoldMs))},
                "stuck.out"),
            0)
      << read_file(path("stuck.out"));
  const json out = json::parse(read_file(path("stuck.out")), nullptr, false);
  ASSERT_TRUE(out.is_object()) << read_file(path("stuck.out"));
  EXPECT_EQ(out["streams"]["1"]["events"], out["streams"]["3"]["events"]) << "both read to the end: " << out;
  const auto records = stop_agent_after_joins();  // a clean exit: no crash on the held window
  ASSERT_TRUE(gw->running()) << "nginx survived the client";
  const auto down = select(records, [&](const json& r) {
    return is_leg(r, "downstream") && port_of(r["remote"]) == out["local_port"].get<int>();
  });
  ASSERT_EQ(down.size(), 2u) << "nginx's h2c leg of both streams:\n" << read_file(path("agent.log"));
  for (const auto& r : down) {
    EXPECT_EQ(r.value("content_events", -1), kTokens) << brief(r);
    EXPECT_EQ(r["end"], "complete") << brief(r);
    if (h2_stream(r) == 1) {
      EXPECT_EQ(stall_causes(r["stalls"]).count("backpressure"), 1u) << "held by its HTTP/2 window: " << brief(r);
      ASSERT_TRUE(r["h2_flow"].is_object()) << "HTTP/2 window evidence: " << brief(r);
      EXPECT_GE(r["h2_flow"].value("window_zero_episodes", 0), 1) << brief(r);
      EXPECT_GE(r["h2_flow"].value("window_zero_ms", 0.0), kHoldMs * 0.8) << brief(r);
      EXPECT_EQ(r["h2_flow"].value("scope", ""), "stream") << "the stream's window, not the connection's: " << brief(r);
    } else {
      EXPECT_EQ(h2_stream(r), 3) << brief(r);
      EXPECT_TRUE(r["stalls"].empty()) << "the other stream ran unaffected: " << brief(r);
      EXPECT_EQ(r["h2_flow"].is_object() ? r["h2_flow"].value("window_zero_episodes", 0) : 0, 0) << brief(r);
    }
  }
}

}  // namespace
}  // namespace infertap
