// Realtime inference over WebSocket, end to end as root: the official openai
// SDK's realtime client (OpenAIRealtimeWS on `ws`; the beta one of openai 4)
// against a realtime server on `ws` (tests/support/realtime/), plain and over
// TLS (Node's own OpenSSL), permessage-deflate on and off, direct and through
// nginx and HAProxy. Every response must be one record per traced end, its
// messages timed against the server's own clock, its usage read, a stall
// injected in the server found on the right response and named `model`, and a
// client that stops reading named. tshark dissects the same traffic as an
// independent oracle for frame counts and TCP offsets. A session the agent
// joined after its upgrade (started, or restarted, mid-session) is read from
// its first frame on.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/websocket/test_encoder.h"
#include "support/live_test.h"
#include "support/records.h"
#include "support/test_certificate.h"
#include "support/websocket_peers.h"
#include "test_util.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using testing::RealtimeClientOptions;
using testing::RealtimeClientRun;
using testing::RealtimeServer;
using testing::RealtimeServerLog;
using testing::RealtimeServerOptions;

constexpr int kTokens = 30;

std::string brief(const json& r) {
  json b = {{"stream_id", r["stream_id"]}, {"role", r["role"]},         {"comm", r["comm"]},
            {"protocol", r["protocol"]},   {"dialect", r["dialect"]},   {"response_id", r["response_id"]},
            {"end", r["end"]},             {"tokens", r["tokens"]},     {"token_source", r["token_source"]},
            {"content_events", r["content_events"]}, {"events", r["events"]}, {"ttft_ms", r["ttft_ms"]},
            {"stalls", r["stalls"]},       {"websocket", r["websocket"]}, {"gateway", r["gateway"]},
            {"delivery", r["delivery"]}};
  return b.dump(1);
}

class WebsocketTest : public testing::LiveTest {
 protected:
  WebsocketTest() : LiveTest("infertap-websocket") {}

  // The websocket records of one role, by response id.
  static std::map<std::string, json> by_response(const std::vector<json>& records, const std::string& role) {
    std::map<std::string, json> out;
    for (const auto& r : records) {
      if (r.value("protocol", "") != "websocket" || r["role"] != role) continue;
      const std::string id = r["response_id"].is_string() ? r["response_id"].get<std::string>() : "";
      EXPECT_FALSE(out.count(id)) << "two " << role << " records of response " << id << ":\n" << brief(r);
      out[id] = r;
    }
    return out;
  }

  // The response's own messages (response.created ... response.done): the
  // server logs session traffic sent while it runs under its id too.
  static std::size_t response_messages(const RealtimeServerLog& log, const std::string& id) {
    std::size_t n = 0;
    for (const auto& m : log.of_response(id)) n += m.type.rfind("response.", 0) == 0 ? 1 : 0;
    return n;
  }

  // Starts the server, the agent on its port (or `agent_ports`), runs the client.
  struct Run {
    std::vector<json> records;
    RealtimeServerLog log;
    RealtimeClientRun client;
    int ws_desyncs = 0;  // the agent's count at its stop
  };
  Run run(RealtimeServerOptions server_opt, RealtimeClientOptions client_opt) {
    Run out;
    RealtimeServer server(path("server"), std::move(server_opt));
    EXPECT_TRUE(server.ok()) << server.error();
    if (!server.ok()) return out;
    start_agent_on_ports({server.port()});
    if (HasFailure()) return out;
    client_opt.url = testing::realtime_base_url(server.port(), !client_opt.ca_cert.empty(), "127.0.0.1");
    if (!client_opt.ca_cert.empty()) client_opt.url = testing::realtime_base_url(server.port(), true, "localhost");
    out.client = testing::run_realtime_client(path("client"), client_opt);
    EXPECT_EQ(out.client.rc, 0) << out.client.output;
    out.records = stop_agent_after_joins();
    server.stop();
    out.log = server.log();
    const std::string agent_log = testing::read_file(path("agent.log"));
    if (const std::size_t at = agent_log.rfind("\"ws_desyncs\":"); at != std::string::npos)
      out.ws_desyncs = std::atoi(agent_log.c_str() + at + 13);
    return out;
  }

  // Each response of the server's log is one record at each end, timed per
  // message: the record's events are the response's messages, its content
  // events its output deltas, its usage the server's, and each content event's
  // emit time (server) is the server's send within `emit_bound_ms`.
  void expect_one_record_per_response(const Run& run, int responses, int tokens, bool audio = false) {
    const auto servers = by_response(run.records, "server");
    const auto clients = by_response(run.records, "client");
    const std::vector<std::string> ids = run.log.response_ids();
    ASSERT_EQ(ids.size(), std::size_t(responses));
    for (const std::string& id : ids) {
      for (const auto* side : {&servers, &clients}) {
        const std::string role = side == &servers ? "server" : "client";
        ASSERT_TRUE(side->count(id)) << "no " << role << " record of " << id;
        const json& r = side->at(id);
        SCOPED_TRACE(role + " " + id + ":\n" + brief(r));
        const std::size_t messages = response_messages(run.log, id);
        if (role == "client" && r["end"] != "complete") {
          // A read that coalesced messages past the captured head and tail
          // can hide frame headers the client's side never sees again: the
          // agent says so (a desync) and the record is partial, never invented.
          EXPECT_GT(run.ws_desyncs, 0) << "a partial client record without a desync counted";
          EXPECT_TRUE(r["counts_lower_bound"].get<bool>());
          EXPECT_LT(r["events"].get<std::size_t>(), messages);
          continue;
        }
        EXPECT_EQ(r["end"], "complete");
        EXPECT_EQ(r["dialect"], "openai_realtime");
        EXPECT_EQ(r["event_framing"], "websocket");
        EXPECT_EQ(r["status"], 101);
        EXPECT_EQ(r["path"], "/v1/realtime");
        EXPECT_EQ(r["tokens"], tokens) << "usage.output_tokens of response.done";
        EXPECT_EQ(r["token_source"], "usage");
        // Text deltas, or audio deltas with their transcript deltas.
        const int content = audio ? 2 * tokens : tokens;
        EXPECT_EQ(r["content_events"], content);
        ASSERT_TRUE(r["websocket"].is_object());
        if (audio) {
          EXPECT_EQ(r["websocket"]["audio_events"], tokens);
        }
        ASSERT_TRUE(r["ttft_ms"].is_number()) << "TTFT from the response.create";
        EXPECT_GT(r["ttft_ms"].get<double>(), 0.0);
        EXPECT_LT(r["ttft_ms"].get<double>(), 2000.0);
        EXPECT_EQ(r["events"].get<std::size_t>(), messages) << "one event per message of the response";
      }
      // Emit times against the server's own clock: each delta's send.
      if (audio) continue;  // the log times output deltas; transcript deltas are content too
      expect_emits_follow_sends(servers.at(id), run.log.token_times(id));
    }
  }

  // Each content event's emit time in a server record is the server's send
  // of its delta (`sent`, in order), within a median lag of 2 ms.
  static void expect_emits_follow_sends(const json& server_record, const std::vector<std::int64_t>& sent) {
    std::vector<std::int64_t> emitted;
    for (const auto& e : server_record["timeline"])
      if (e["kind"] == "content") emitted.push_back(e["ts_ns"].get<std::int64_t>());
    ASSERT_EQ(emitted.size(), sent.size());
    std::vector<double> lag_us;
    for (std::size_t i = 0; i < sent.size(); ++i) lag_us.push_back(double(emitted[i] - sent[i]) / 1e3);
    std::sort(lag_us.begin(), lag_us.end());
    EXPECT_GE(lag_us.front(), 0.0) << "an emit before the server's send";
    EXPECT_LT(lag_us[lag_us.size() / 2], 2000.0) << "median emit lag behind the server's ws.send, µs";
  }
};

TEST_F(WebsocketTest, EveryRealtimeResponseIsOneRecordPerEndTimedPerMessage) {
  const Run r = run({.tokens = kTokens, .interval_ms = 10, .noise = true}, {.responses = 2, .deflate = false});
  ASSERT_FALSE(HasFailure());
  expect_one_record_per_response(r, 2, kTokens);
  for (const auto& [id, rec] : by_response(r.records, "server")) {
    EXPECT_FALSE(rec["websocket"]["compressed"].get<bool>());
    EXPECT_GT(rec["websocket"]["other_messages"].get<int>(), 0) << "rate_limits.updated between the deltas: counted";
    EXPECT_TRUE(rec["stalls"].empty()) << brief(rec);
  }
}

class WebsocketDeflate : public WebsocketTest, public ::testing::WithParamInterface<bool> {};

TEST_P(WebsocketDeflate, CompressedMessagesAreInflatedWithTheirContext) {
  const bool takeover = GetParam();
  const Run r = run({.deflate = true, .context_takeover = takeover, .tokens = kTokens, .interval_ms = 5},
                    {.responses = 2, .deflate = true});
  ASSERT_FALSE(HasFailure());
  EXPECT_NE(r.client.summary.value("extensions", ""), "none") << r.client.output;
  expect_one_record_per_response(r, 2, kTokens);
  for (const auto& [id, rec] : by_response(r.records, "server")) {
    EXPECT_TRUE(rec["websocket"]["compressed"].get<bool>()) << brief(rec);
    EXPECT_GT(rec["websocket"]["inflated_bytes"].get<std::int64_t>(), rec["body_bytes"].get<std::int64_t>())
        << "JSON deltas compress: " << brief(rec);
  }
}

INSTANTIATE_TEST_SUITE_P(ContextTakeover, WebsocketDeflate, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "taken_over" : "reset_per_message"; });

TEST_F(WebsocketTest, OverTlsTheLibrarysPlaintextIsFramed) {
  const std::string cert = path("cert.pem"), key = path("key.pem");
  ASSERT_EQ(testing::make_localhost_certificate(key, cert, path("openssl.log")), "");
  const Run r = run({.tls_cert = cert, .tls_key = key, .deflate = true, .tokens = kTokens, .interval_ms = 5},
                    {.responses = 2, .ca_cert = cert});
  ASSERT_FALSE(HasFailure());
  expect_one_record_per_response(r, 2, kTokens);
  for (const auto& rec : r.records) {
    if (rec.value("protocol", "") != "websocket") continue;
    EXPECT_TRUE(rec["tls"].get<bool>()) << brief(rec);
  }
}

TEST_F(WebsocketTest, BetaClientsAudioIsCountedWithItsDuration) {
  const Run r = run({.beta_names = true, .tokens = 20, .interval_ms = 5, .audio = true, .audio_bytes = 4800},
                    {.responses = 1, .beta = true});
  ASSERT_FALSE(HasFailure());
  expect_one_record_per_response(r, 1, 20, /*audio=*/true);
  for (const auto& [id, rec] : by_response(r.records, "server")) {
    ASSERT_TRUE(rec["websocket"]["audio_ms"].is_number()) << "pcm16 declared by session.created: " << brief(rec);
    EXPECT_NEAR(rec["websocket"]["audio_ms"].get<double>(), 20 * 100.0, 1.0) << "20 deltas of 100 ms";
  }
}

TEST_F(WebsocketTest, AServerStallIsFoundOnItsResponseAndNamedModel) {
  const Run r = run({.tokens = kTokens, .interval_ms = 10, .stall_ms = 400, .stall_at = 12, .stall_response = 1},
                    {.responses = 2, .deflate = false});
  ASSERT_FALSE(HasFailure());
  const std::vector<std::string> ids = r.log.response_ids();
  ASSERT_EQ(ids.size(), 2u);
  for (const std::string role : {"server", "client"}) {
    const auto records = by_response(r.records, role);
    ASSERT_TRUE(records.count(ids[0]) && records.count(ids[1])) << role;
    EXPECT_TRUE(records.at(ids[0])["stalls"].empty()) << brief(records.at(ids[0]));
    const json& stalled = records.at(ids[1]);
    ASSERT_EQ(stalled["stalls"].size(), 1u) << brief(stalled);
    EXPECT_EQ(testing::stall_causes(stalled["stalls"]), std::set<std::string>{"model"}) << brief(stalled);
    EXPECT_GE(stalled["longest_pause_ms"].get<double>(), 380.0) << brief(stalled);
  }
}

TEST_F(WebsocketTest, AClientThatStopsReadingIsNamed) {
  const Run r = run({.tokens = 30, .interval_ms = 5, .audio = true, .audio_bytes = 480000},
                    {.responses = 1, .deflate = false, .stop_reading_after = 3, .pause_ms = 1500});
  ASSERT_FALSE(HasFailure());
  const auto servers = by_response(r.records, "server");
  const auto clients = by_response(r.records, "client");
  ASSERT_EQ(servers.size(), 1u);
  ASSERT_EQ(clients.size(), 1u);
  const json& s = servers.begin()->second;
  EXPECT_EQ(testing::stall_causes(s["stalls"]), std::set<std::string>{"backpressure"}) << brief(s);
  // The reader's own record names its pause: its late read (client_read), or,
  // when the capture lost the frames around the pause (640 KB messages with
  // holes), the full window it left (backpressure). Never the model.
  const json& c = clients.begin()->second;
  const std::set<std::string> causes = testing::stall_causes(c["stalls"]);
  EXPECT_FALSE(causes.empty()) << brief(c);
  for (const std::string& cause : causes)
    EXPECT_TRUE(cause == "client_read" || cause == "backpressure") << cause << ": " << brief(c);
}

// ---- gateways -------------------------------------------------------------------------------

class WebsocketGateway : public WebsocketTest, public ::testing::WithParamInterface<bool> {};

TEST_P(WebsocketGateway, BothLegsAreJoinedPerMessageAndTheStallIsTheModels) {
  const bool haproxy = GetParam();
  RealtimeServer server(path("server"), {.deflate = true, .tokens = kTokens, .interval_ms = 10, .stall_ms = 300,
                                         .stall_at = 10, .stall_response = 0});
  ASSERT_TRUE(server.ok()) << server.error();
  std::unique_ptr<testing::Gateway> gw;
  if (haproxy) {
    gw = std::make_unique<testing::WebsocketHAProxy>(server.port(), path("haproxy"));
  } else {
    gw = std::make_unique<testing::WebsocketNginx>(server.port(), path("nginx"));
  }
  ASSERT_TRUE(gw->ok()) << gw->error();
  start_agent_on_ports({server.port(), gw->port()});
  const RealtimeClientRun client =
      testing::run_realtime_client(path("client"), {.url = testing::realtime_base_url(gw->port()), .responses = 1});
  EXPECT_EQ(client.rc, 0) << client.output;
  const std::vector<json> records = stop_agent_after_joins();
  server.stop();
  const RealtimeServerLog log = server.log();
  ASSERT_EQ(log.response_ids().size(), 1u);
  const std::string id = log.response_ids()[0];
  int legs = 0;
  for (const auto& r : records) {
    if (r.value("protocol", "") != "websocket") continue;
    SCOPED_TRACE(brief(r));
    EXPECT_EQ(r["response_id"], id);
    EXPECT_EQ(r["tokens"], kTokens);
    EXPECT_EQ(testing::stall_causes(r["stalls"]), std::set<std::string>{"model"});
    if (r["role"] == "gateway") {
      ++legs;
      ASSERT_TRUE(r["gateway"].is_object());
      EXPECT_FALSE(r["gateway"].value("buffering", false)) << "a tunnel relays each frame as it comes";
    }
  }
  EXPECT_EQ(legs, 2) << "the gateway's client and upstream legs";
  // Each leg joined to the other per message, and each end to its peer.
  const std::size_t messages = response_messages(log, id);
  for (const auto& r : records) {
    if (r.value("protocol", "") != "websocket") continue;
    EXPECT_TRUE(r["peer_stream_id"].is_string()) << brief(r);
    if (r["role"] != "gateway") continue;
    EXPECT_EQ(r["gateway"]["events_matched"], messages) << brief(r);
  }
}

INSTANTIATE_TEST_SUITE_P(Proxies, WebsocketGateway, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "haproxy" : "nginx"; });

// ---- joined after the upgrade -------------------------------------------------------------

// Where the agent joined a session: the response in flight and the messages
// of it sent after the join (the server held it before token `hold_at` until
// the agent was up).
struct Join {
  std::string in_flight;
  int hold_at = 0;
};

class WebsocketJoinTest : public WebsocketTest {
 protected:
  // The response's own messages the agent could see: all of a response asked
  // after the join; of the one in flight, those sent after it was released.
  static std::size_t messages_seen(const RealtimeServerLog& log, const std::string& id, const Join& join) {
    if (id != join.in_flight) return response_messages(log, id);
    std::size_t n = 0;
    for (const auto& m : log.of_response(id))
      n += m.type.rfind("response.", 0) == 0 && (m.token >= join.hold_at || m.type == "response.done");
    return n;
  }

  // Polls the server's log until the held response has sent `tokens` deltas.
  static bool wait_for_deltas(const RealtimeServer& server, const std::string& id, int tokens) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (RealtimeServerLog::parse(server.log_path()).output_deltas(id).size() == std::size_t(tokens)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Connections on the traced `port` whose first bytes are no frame a joined
  // session can read, then a readable one: how many.
  static int connect_unreadable(const infertap::testutil::Fd& listener) {
    namespace ws = protocol::websocket;
    const std::string delta = R"({"type":"response.output_text.delta","response_id":"x","delta":"y"})";
    ws::testing::Compressor deflate;
    const std::vector<std::string> firsts = {
        ws::testing::message(delta, ws::Sender::server, &deflate),
        ws::testing::message(delta, ws::Sender::server, nullptr, 0, ws::Opcode::binary),
        ws::testing::frame(ws::Opcode::continuation, delta),
        std::string("\x9c\x07\xfe\x00\x31\x42\x77\x08\xd0\x1f\x00\x3a\x7b\x22\x61\x22", 16),
    };
    for (const std::string& first : firsts) {
      infertap::testutil::TcpPair p = infertap::testutil::tcp_connect(listener);
      for (const std::string& bytes : {first, ws::testing::message(delta, ws::Sender::server)}) {
        EXPECT_EQ(::write(p.server.get(), bytes.data(), bytes.size()), ssize_t(bytes.size()));
        EXPECT_TRUE(infertap::testutil::read_exact(p.client.get(), bytes.size()));
      }
    }
    return int(firsts.size());
  }

  json agent_stats() const {
    const std::string log = testing::read_file(path("agent.log"));
    const std::size_t at = log.rfind("stats {");
    if (at == std::string::npos) return json::object();
    const std::size_t end = log.find('\n', at);
    return json::parse(log.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6), nullptr, false);
  }

  // One record per end of response `id`: whole but for what went by before
  // the join; TTFT only when the agent saw what asked for it; each content
  // event's emit time (server) the server's send of its delta.
  void expect_joined_records(const std::vector<json>& records, const RealtimeServerLog& log, const std::string& id,
                             const Join& join, int ws_desyncs) {
    const bool in_flight = id == join.in_flight;
    for (const std::string role : {"server", "client"}) {
      const auto side = by_response(records, role);
      ASSERT_TRUE(side.count(id)) << "no " << role << " record of " << id;
      const json& r = side.at(id);
      SCOPED_TRACE(role + " " + id + ":\n" + brief(r));
      EXPECT_EQ(r["protocol"], "websocket");
      EXPECT_EQ(r["dialect"], "openai_realtime");
      EXPECT_EQ(r["path"], "") << "the upgrade request went by before the agent";
      EXPECT_EQ(r["joined_midstream"], in_flight) << "joined mid-way: what asked for it went by";
      EXPECT_EQ(r["ttft_ms"].is_number(), !in_flight) << "TTFT only from a request the agent saw";
      if (!in_flight) EXPECT_GT(r["ttft_ms"].get<double>(), 0.0);
      if (!in_flight) EXPECT_LT(r["ttft_ms"].get<double>(), 2000.0);
      EXPECT_EQ(r["tokens"], kTokens) << "usage.output_tokens of response.done";
      const std::size_t messages = messages_seen(log, id, join);
      if (role == "client" && r["end"] != "complete") {
        // Coalesced reads can hide a frame header from the client's side (as
        // when the agent saw the upgrade): said, and the counts lower bounds.
        EXPECT_GT(ws_desyncs, 0) << "a partial client record without a desync counted";
        EXPECT_LT(r["events"].get<std::size_t>(), messages);
        continue;
      }
      EXPECT_EQ(r["end"], "complete");
      EXPECT_EQ(r["events"].get<std::size_t>(), messages) << "one event per message the agent could see";
      EXPECT_EQ(r["content_events"], in_flight ? kTokens - join.hold_at : kTokens);
    }
    std::vector<std::int64_t> sent = log.token_times(id);
    if (in_flight) sent.erase(sent.begin(), sent.begin() + join.hold_at);  // before the join
    expect_emits_follow_sends(by_response(records, "server").at(id), sent);
  }
};

// The agent (re)started during a realtime session, as a DaemonSet rollout
// does: after the WebSocket opened, with its first response in flight (held
// before token kHoldAt until the agent is up), then two more asked. Every
// response is one record per end; the one in flight joined mid-way. Traced
// sockets whose first bytes are no frame a joined session can read are muted
// in the kernel: userspace never sees them (it would mute them itself).
TEST_F(WebsocketJoinTest, ASessionJoinedAfterItsUpgradeIsRead) {
  constexpr int kHoldAt = 8, kResponses = 3;
  const std::string release = path("release");
  RealtimeServer server(path("server"),
                        {.tokens = kTokens, .interval_ms = 10, .hold_file = release, .hold_at = kHoldAt, .noise = true});
  ASSERT_TRUE(server.ok()) << server.error();
  testing::RealtimeClient client(path("client"), {.url = testing::realtime_base_url(server.port()),
                                                  .responses = kResponses, .deflate = false,
                                                  .timeout_ms = 60000});  // the held response waits for the agent
  ASSERT_TRUE(client.ok()) << client.error();
  const Join join{"resp_0_0", kHoldAt};
  ASSERT_TRUE(wait_for_deltas(server, join.in_flight, kHoldAt)) << server.output();
  const infertap::testutil::Fd listener = infertap::testutil::tcp_listener(port_);
  ASSERT_GE(listener.get(), 0);
  start_agent_on_ports({server.port(), port_});
  ASSERT_FALSE(HasFailure());
  const int unreadable = connect_unreadable(listener);
  std::ofstream(release) << "go\n";
  const RealtimeClientRun c = client.finish();
  EXPECT_EQ(c.rc, 0) << c.output;
  const std::vector<json> records = stop_agent_after_joins();
  const RealtimeServerLog log = server.log();
  const json stats = agent_stats();
  ASSERT_TRUE(stats.is_object() && stats.contains("pipeline")) << testing::read_file(path("agent.log"));
  const json& pipeline = stats["pipeline"];

  const std::vector<std::string> ids = log.response_ids();
  ASSERT_EQ(ids.size(), std::size_t(kResponses));
  EXPECT_EQ(ids[0], join.in_flight);
  EXPECT_EQ(by_response(records, "server").size(), ids.size()) << "one server record per response";
  EXPECT_EQ(by_response(records, "client").size(), ids.size()) << "one client record per response";
  for (const std::string& id : ids) expect_joined_records(records, log, id, join, pipeline.value("ws_desyncs", 0));
  EXPECT_EQ(pipeline.value("ws_joined", 0), 2) << "both ends' connections joined after their upgrade";
  EXPECT_EQ(pipeline.value("ws_connections", 0), 2);
  EXPECT_EQ(pipeline.value("ws_frame_errors", 0), 0);
  // The kernel muted the unreadable connections: had it followed them,
  // userspace would have refused and muted them (connections_muted).
  EXPECT_EQ(pipeline.value("connections_muted", -1), 0);
  EXPECT_GE(stats["kernel"].value("sockets_muted", 0), 2 * unreadable);
}

// ---- the tshark oracle --------------------------------------------------------------------

TEST_F(WebsocketTest, FramesAndOffsetsMatchTsharksDissection) {
  RealtimeServer server(path("server"), {.tokens = 20, .interval_ms = 5, .noise = true});
  ASSERT_TRUE(server.ok()) << server.error();
  testing::WebsocketCapture capture(path("ws.pcapng"), server.port(), path("dumpcap.log"));
  ASSERT_TRUE(capture.ok()) << capture.error();
  start_agent_on_ports({server.port()});
  const RealtimeClientRun client = testing::run_realtime_client(
      path("client"), {.url = testing::realtime_base_url(server.port()), .responses = 2, .deflate = false});
  EXPECT_EQ(client.rc, 0) << client.output;
  const std::vector<json> records = stop_agent_after_joins();
  capture.stop();
  server.stop();
  std::string err;
  const json dissected = testing::dissect_websocket(path("ws.pcapng"), server.port(), &err, client.local_port());
  ASSERT_TRUE(err.empty()) << err;
  ASSERT_TRUE(dissected["errors"].empty()) << dissected["errors"];
  // Every server event of the records ends where a text frame tshark found ends.
  std::set<std::uint32_t> frame_ends;
  for (const auto& f : dissected["server"]["frame_list"])
    if (f["opcode"] == 1) frame_ends.insert(f["end_seq_raw"].get<std::uint32_t>());
  std::size_t events = 0;
  for (const auto& [id, r] : by_response(records, "server")) {
    for (const auto& e : r["timeline"]) {
      ++events;
      EXPECT_TRUE(frame_ends.count(e["end_seq"].get<std::uint32_t>())) << "event " << e << " of " << id;
    }
  }
  const RealtimeServerLog log = server.log();
  std::size_t response_messages = 0;  // response.* messages: session traffic between them is not the response's
  for (const std::string& id : log.response_ids()) response_messages += WebsocketTest::response_messages(log, id);
  EXPECT_EQ(events, response_messages);
  EXPECT_EQ(dissected["server"]["opcodes"].value("text", 0), int(log.messages.size()))
      << "tshark's text frames = the server's messages (unfragmented)";
}

}  // namespace
}  // namespace infertap
