// The servers' own streaming APIs end to end, as root with the real agent:
// sample-server replays each recorded native stream (Ollama, TGI, llama.cpp,
// SGLang, vLLM, Triton, Gemini, the Responses API, and a declared format
// read from the agent's configuration file) one event per send, coalesced,
// cut across sends, with keep-alive lines and with an error mid-stream; curl
// and the official `ollama` npm client read them. Records must name the
// right dialect and framing, count the stream's token events and its own
// usage, and time every token event — TTFT and ITL — on the server's log of
// its sends (CLOCK_MONOTONIC read right after each syscall returned).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/node_modules.h"
#include "support/gateways.h"
#include "support/live_test.h"
#include "support/netns.h"
#include "support/native_streams.h"
#include "support/ndjson.h"
#include "support/sample_peers.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::Format;
using testing::RecordedStream;
using testing::SampleServer;
using testing::Variant;

constexpr int kTokens = 12;
constexpr std::int64_t kToleranceNs = 1'000'000;  // per event time, TTFT and ITL

int port_of(const std::string& endpoint) { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }

std::string brief(const json& r) {
  json b;
  for (const char* k : {"stream_id", "role", "comm", "path", "dialect", "event_framing", "declared_format", "events",
                        "content_events", "tokens", "token_source", "finish_reason", "error_type", "end", "ttft_ms",
                        "itl_p50_ms"})
    b[k] = r.value(k, json());
  return b.dump();
}

// One stream as the server's log tells it: when it read the request's last
// byte, when each event's last byte left (the send the log line names it in).
struct ServerTruth {
  std::string path;
  std::int64_t request_ns = 0;
  std::map<std::int64_t, std::int64_t> done_ns;  // event index (keep-alives included) -> send time
};

// By the client's port (the server record's remote port) and the request's
// index on its connection (the second half of the record's stream_id).
using TruthKey = std::pair<int, int>;
std::map<TruthKey, ServerTruth> server_truth(const std::string& log_path) {
  std::map<TruthKey, ServerTruth> out;
  for (const json& l : testing::read_ndjson(log_path)) {
    ServerTruth& t = out[{l.value("peer_port", 0), l.value("req", 0)}];
    if (l["type"] == "request") {
      t.path = l.value("path", "");
      t.request_ns = l["mono_ns"].get<std::int64_t>();
    }
    if (l["type"] != "send" || l.value("event_index", -1) < 0) continue;
    const std::int64_t last = l["event_index"].get<std::int64_t>();
    for (std::int64_t i = l.value("first_event_index", last); i <= last; ++i) t.done_ns[i] = l["mono_ns"];
  }
  return out;
}

// The agent's configuration: the declared format the acme stream needs.
std::string write_config(const std::string& path) {
  std::ofstream(path) << testing::kAcmeFormatYaml;
  return path;
}

// A server record against the stream it sent and the server's log of it.
void expect_server_record(const json& r, const RecordedStream& s, const ServerTruth& truth) {
  const std::string what = s.name + ": " + brief(r);
  EXPECT_EQ(r["dialect"], s.dialect) << what;
  EXPECT_EQ(r["event_framing"], s.framing) << what;
  if (s.dialect == "declared") EXPECT_EQ(r["declared_format"], "acme") << what;
  else EXPECT_TRUE(r["declared_format"].is_null()) << what;
  const auto count = [](const std::vector<bool>& v) { return std::count(v.begin(), v.end(), true); };
  EXPECT_EQ(r["events"], count(s.event)) << what;
  EXPECT_EQ(r["content_events"], count(s.token)) << what;
  if (s.usage_tokens) {
    EXPECT_EQ(r["tokens"], *s.usage_tokens) << what;
    EXPECT_EQ(r["token_source"], "usage") << what;
  } else {
    EXPECT_EQ(r["tokens"], count(s.token)) << what;
    EXPECT_EQ(r["token_source"], "events") << what;
  }
  EXPECT_EQ(r["finish_reason"], s.finish_reason) << what;
  EXPECT_EQ(r["error_type"].get<std::string>().empty(), !s.error) << what;
  EXPECT_EQ(r["end"], "complete") << what;
  EXPECT_EQ(r["bytes_lost"], 0) << what;
  // Token events, in order, on the sends that completed them.
  std::vector<std::int64_t> want, got;
  for (std::size_t i = 0; i < s.wire.size(); ++i) {
    if (!s.token[i]) continue;
    ASSERT_TRUE(truth.done_ns.count(std::int64_t(i))) << "no send logged for event " << i << " of " << what;
    want.push_back(truth.done_ns.at(std::int64_t(i)));
  }
  for (const json& e : r["timeline"])
    if (e["kind"] == "content") got.push_back(e["ts_ns"].get<std::int64_t>());
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t k = 0; k < got.size(); ++k) {
    EXPECT_LE(std::llabs(got[k] - want[k]), kToleranceNs) << "token event " << k << " of " << what;
    if (k > 0) {
      EXPECT_LE(std::llabs((got[k] - got[k - 1]) - (want[k] - want[k - 1])), kToleranceNs)
          << "ITL before token event " << k << " of " << what;
    }
  }
  ASSERT_FALSE(r["ttft_ms"].is_null()) << what;
  const double truth_ttft_ms = double(want.front() - truth.request_ns) / 1e6;
  EXPECT_NEAR(r["ttft_ms"].get<double>(), truth_ttft_ms, kToleranceNs / 1e6) << what;
}


// The servers run pinned to CPU 0 and SCHED_FIFO (as in e2e_test.cpp): a
// thread preempted between its send's return and its clock read would put
// that delay in the log, and the error would be the log's, not the agent's.
const std::vector<std::string> kPinned = {"/usr/bin/taskset", "-c", "0", "/usr/bin/chrt", "-f", "50"};

struct Pattern {
  const char* name;
  std::vector<std::string> server_args;
  Variant variant;
};

class NativeStreams : public testing::LiveTest, public ::testing::WithParamInterface<Pattern> {
 protected:
  NativeStreams() : LiveTest("infertap-native") {}

  std::vector<json> stop_agent() {
    std::this_thread::sleep_for(500ms);
    return stop_agent_records();
  }

  static int curl(const SampleServer& server, const RecordedStream& s) {
    const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + s.path;
    return testing::run_shell("curl -sS -N -o /dev/null -X POST '" + url +
                              "' -H 'Content-Type: application/json' -d '" + s.request_body + "'");
  }
};

// Every native format, from both ends, in one send pattern: token events,
// usage, finish reason and times as the server sent them.
TEST_P(NativeStreams, EachFormatIsReadAndTimedFromBothEnds) {
  const Pattern& pattern = GetParam();
  std::vector<std::string> args = {"--ttft-ms", "25", "--itl-ms", "6"};
  args.insert(args.end(), pattern.server_args.begin(), pattern.server_args.end());
  if (pattern.variant == Variant::keepalive) args.insert(args.end(), {"--native-variant", "keepalive"});
  if (pattern.variant == Variant::error_mid) args.insert(args.end(), {"--native-variant", "error"});
  SampleServer server(path("server"), args, "127.0.0.1", 0, kPinned);
  ASSERT_TRUE(server.ok()) << server.error();
  std::vector<std::string> vllm_args = args;
  vllm_args.insert(vllm_args.end(), {"--generate-api", "vllm"});
  SampleServer vllm(path("vllm"), vllm_args, "127.0.0.1", 0, kPinned);
  ASSERT_TRUE(vllm.ok()) << vllm.error();
  start_agent_with({"--socket", "", "--metrics-listen", "", "-c", write_config(path("config.yaml")), "--port",
                    std::to_string(server.port()), "--port", std::to_string(vllm.port())});

  std::vector<RecordedStream> sent;
  for (Format f : testing::kAllFormats) {
    const RecordedStream s = testing::recorded_stream(f, kTokens, pattern.variant);
    ASSERT_EQ(curl(f == Format::vllm ? vllm : server, s), 0) << s.name;
    sent.push_back(s);
  }
  const std::vector<json> records = stop_agent();
  vllm.stop();
  server.stop();  // flushes its log
  const std::map<TruthKey, ServerTruth> main_truth = server_truth(server.log_path()),
                                       vllm_truth = server_truth(vllm.log_path());

  for (const RecordedStream& s : sent) {
    SCOPED_TRACE(s.name);
    std::vector<const json*> servers, clients;
    const std::map<TruthKey, ServerTruth>& truth = s.dialect == "vllm" ? vllm_truth : main_truth;
    int port = -1;
    for (const auto& [key, t] : truth)
      if (t.path == s.path) port = key.first;
    ASSERT_GE(port, 0) << "the server logged no request for " << s.path;
    // A client port is unique only per server port: a later curl may reuse it towards the other server.
    const int server_port = s.dialect == "vllm" ? vllm.port() : server.port();
    for (const json& r : records) {
      const int local = port_of(r["local"]), remote = port_of(r["remote"]);
      if (r["role"] == "server" && local == server_port && remote == port) servers.push_back(&r);
      if (r["role"] == "client" && r["comm"] == "curl" && local == port && remote == server_port) clients.push_back(&r);
    }
    ASSERT_EQ(servers.size(), 1u) << testing::read_file(path("agent.log"));
    ASSERT_EQ(clients.size(), 1u);
    expect_server_record(*servers[0], s, truth.at({port, 0}));
    const json& c = *clients[0];
    EXPECT_EQ(c["dialect"], s.dialect) << brief(c);
    EXPECT_EQ(c["event_framing"], s.framing) << brief(c);
    EXPECT_EQ(c["content_events"], (*servers[0])["content_events"]) << brief(c);
    EXPECT_EQ(c["tokens"], (*servers[0])["tokens"]) << brief(c);
    EXPECT_EQ(c["end"], "complete") << brief(c);
    ASSERT_FALSE(c["ttft_ms"].is_null()) << brief(c);
    // Emit is the send's exit, and over loopback the reader may return
    // inside that send: the read is after the send began.
    const json& server = *servers[0];
    std::int64_t send_began = server["first_token_ns"].get<std::int64_t>();
    for (const json& e : server["timeline"])
      if (e["ts_ns"] == server["first_token_ns"])
        send_began -= static_cast<std::int64_t>(e.value("syscall_us", 0.0) * 1e3);
    EXPECT_GE(c["first_token_ns"].get<std::int64_t>(), send_began) << "read after it was sent: " << brief(c);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sends, NativeStreams,
    ::testing::Values(Pattern{"one_event_per_send", {}, Variant::plain},
                      Pattern{"three_coalesced", {"--events-per-write", "3"}, Variant::plain},
                      Pattern{"split_with_keepalives", {"--split-sends"}, Variant::keepalive},
                      Pattern{"coalesced_split_error_midway", {"--events-per-write", "2", "--split-sends"},
                              Variant::error_mid}),
    [](const auto& info) { return std::string(info.param.name); });

class NativeClients : public testing::LiveTest {
 protected:
  NativeClients() : LiveTest("infertap-native-clients") {}
};

// The official `ollama` npm client (ollama.chat, ollama.generate) against the
// Ollama-format endpoint: node's own records, and the server's, on the
// server's log and the client's clock.
TEST_F(NativeClients, TheOllamaNpmClientIsTimed) {
  const std::string modules = testing::node_modules_dir();
  ASSERT_TRUE(std::filesystem::exists(modules + "/ollama/package.json"))
      << "the ollama npm package is missing from " << modules << ": run scripts/setup.sh";
  std::string script = "tests/support/ollama_stream.mjs";
  if (!std::filesystem::exists(script))
    script = (std::filesystem::path(__FILE__).parent_path() / "../support/ollama_stream.mjs").string();
  SampleServer server(path("server"), {"--ttft-ms", "25", "--itl-ms", "6"}, "127.0.0.1", 0, kPinned);
  ASSERT_TRUE(server.ok()) << server.error();
  start_agent_with({"--socket", "", "--metrics-listen", "", "--port", std::to_string(server.port())});
  std::string out;
  ASSERT_EQ(testing::run_shell("NODE_PATH='" + modules + "' node '" + script + "' http://127.0.0.1:" +
                                   std::to_string(server.port()) + " " + std::to_string(kTokens) + " 4",
                               &out),
            0)
      << out;
  std::this_thread::sleep_for(500ms);
  const std::vector<json> records = stop_agent_records();
  server.stop();
  std::vector<json> node_lines;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    auto j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("api")) node_lines.push_back(j);
  }
  ASSERT_EQ(node_lines.size(), 4u) << out;
  for (const json& l : node_lines) {
    EXPECT_EQ(l["content_events"], kTokens) << l;
    EXPECT_EQ(l["eval_count"], kTokens) << l;
  }

  std::vector<json> clients, servers;
  for (const json& r : records) {
    if (r["role"] == "client" && r["comm"] == "node") clients.push_back(r);
    if (r["role"] == "server" && r["comm"] == "sample-server") servers.push_back(r);
  }
  ASSERT_EQ(clients.size(), 4u) << testing::read_file(path("agent.log"));
  ASSERT_EQ(servers.size(), 4u);
  std::sort(clients.begin(), clients.end(),
            [](const json& a, const json& b) { return a["request_start_ns"] < b["request_start_ns"]; });
  const std::map<TruthKey, ServerTruth> truth = server_truth(server.log_path());
  for (std::size_t i = 0; i < clients.size(); ++i) {
    const json& c = clients[i];
    const bool chat = i % 2 == 0;
    EXPECT_EQ(c["path"], chat ? "/api/chat" : "/api/generate") << brief(c);
    EXPECT_EQ(c["dialect"], "ollama") << brief(c);
    EXPECT_EQ(c["event_framing"], "ndjson") << brief(c);
    EXPECT_EQ(c["content_events"], kTokens) << brief(c);
    EXPECT_EQ(c["tokens"], kTokens) << brief(c);
    EXPECT_EQ(c["token_source"], "usage") << brief(c);
    EXPECT_EQ(c["finish_reason"], "stop") << brief(c);
    EXPECT_EQ(c["end"], "complete") << brief(c);
    // The agent times the read; the client's code sees the token after it.
    const std::int64_t node_first = std::stoll(node_lines[i]["first_ns"].get<std::string>());
    EXPECT_LE(c["first_token_ns"].get<std::int64_t>(), node_first) << brief(c);
    EXPECT_LE(node_first - c["first_token_ns"].get<std::int64_t>(), 100'000'000) << brief(c);
  }
  for (const json& r : servers) {
    const std::string id = r["stream_id"];
    const auto t = truth.find({port_of(r["remote"]), std::stoi(id.substr(id.find('-') + 1))});
    ASSERT_NE(t, truth.end()) << brief(r);
    const RecordedStream s = testing::recorded_stream(
        t->second.path == "/api/chat" ? Format::ollama_chat : Format::ollama_generate, kTokens);
    expect_server_record(r, s, t->second);
  }
}

// Downstream unchanged: an Ollama NDJSON stream through nginx is read on both
// of its legs, joined by the lines' content as SSE events are, and the
// buffering of nginx's defaults is named the cause of the client's wait.
TEST_F(NativeClients, AnNdjsonStreamThroughAGatewayIsJoinedByContent) {
  SampleServer server(path("server"), {"--ttft-ms", "30", "--itl-ms", "8"});
  ASSERT_TRUE(server.ok()) << server.error();
  testing::Nginx streaming(testing::NginxMode::streaming, server.port(), path("nginx"));
  ASSERT_TRUE(streaming.ok()) << streaming.error();
  testing::Nginx buffering(testing::NginxMode::defaults, server.port(), path("nginx-defaults"));
  ASSERT_TRUE(buffering.ok()) << buffering.error();
  start_agent_with({"--socket", "", "--metrics-listen", "", "--port", std::to_string(server.port()), "--port",
                    std::to_string(streaming.port()), "--port", std::to_string(buffering.port())});
  const RecordedStream s = testing::recorded_stream(Format::ollama_chat, 40);
  // This test's processes alone (another run's sample-server may share the host).
  const auto ours = [&](const json& r) {
    for (int p : {port_of(r["local"]), port_of(r["remote"])})
      if (p == server.port() || p == streaming.port() || p == buffering.port()) return true;
    return false;
  };
  for (const testing::Nginx* n : {&streaming, &buffering}) {
    ASSERT_EQ(testing::run_shell("curl -sS -N -o /dev/null -X POST http://127.0.0.1:" + std::to_string(n->port()) +
                                 s.path + " -d '" + s.request_body + "'"),
              0);
  }
  std::this_thread::sleep_for(1500ms);
  const std::vector<json> records = stop_agent_records();
  int downstream = 0, curls = 0;
  for (const json& r : records) {
    if (!ours(r)) continue;
    if (r.value("comm", "") == "curl") {
      ++curls;
      EXPECT_EQ(r["dialect"], "ollama") << brief(r);
      EXPECT_EQ(r["content_events"], 40) << brief(r);
    }
    if (r.value("comm", "") != "nginx" || !r["gateway"].is_object()) continue;
    EXPECT_EQ(r["dialect"], "ollama") << brief(r);
    EXPECT_EQ(r["event_framing"], "ndjson") << brief(r);
    EXPECT_EQ(r["content_events"], 40) << brief(r);
    if (r["gateway"]["leg"] != "downstream") continue;
    ++downstream;
    EXPECT_EQ(r["gateway"]["events_matched"], r["events"]) << "joined to the upstream leg by content\n" << r["gateway"].dump();
  }
  EXPECT_EQ(curls, 2);
  EXPECT_EQ(downstream, 2);
  int buffered = 0, clean = 0;
  for (const json& r : records) {
    if (!ours(r) || r.value("comm", "") != "sample-server" || !r["delivery"].is_object()) continue;
    EXPECT_EQ(r["dialect"], "ollama") << brief(r);
    if (r["delivery"]["degraded_by_path"].get<bool>()) {
      ++buffered;
      EXPECT_EQ(r["delivery"]["ttft_cause"], "gateway_buffering") << r["delivery"].dump();
    } else {
      ++clean;
    }
  }
  EXPECT_EQ(buffered, 1) << "nginx's default buffering holds the lines";
  EXPECT_EQ(clean, 1) << "proxy_buffering off streams them";
}

// Gemini's streamGenerateContent without alt=sse streams one JSON array
// (application/json): not read as a stream (docs/metrics.md says why), and
// no record pretends to have read one.
TEST_F(NativeClients, AGeminiJsonArrayStreamMakesNoRecord) {
  SampleServer server(path("server"), {"--ttft-ms", "10", "--itl-ms", "5"});
  ASSERT_TRUE(server.ok()) << server.error();
  start_agent_with({"--socket", "", "--metrics-listen", "", "--port", std::to_string(server.port())});
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port()) + "/v1beta/models/gemini-2.0-flash";
  const std::string body = testing::recorded_stream(Format::gemini, kTokens).request_body;
  std::string out;
  ASSERT_EQ(testing::run_shell("curl -sN -X POST '" + base + ":streamGenerateContent' -d '" + body + "'", &out), 0);
  EXPECT_EQ(out.front(), '[') << out;
  ASSERT_EQ(testing::run_shell("curl -sN -o /dev/null -X POST '" + base + ":streamGenerateContent?alt=sse' -d '" +
                                   body + "'",
                               nullptr),
            0);
  std::this_thread::sleep_for(500ms);
  const std::vector<json> records = stop_agent_records();
  int sse = 0;
  for (const json& r : records) {
    if (port_of(r["local"]) != server.port() && port_of(r["remote"]) != server.port()) continue;
    EXPECT_EQ(r["event_framing"], "sse") << "only the alt=sse stream is one: " << brief(r);
    EXPECT_EQ(r["dialect"], "gemini") << brief(r);
    ++sse;
  }
  EXPECT_EQ(sse, 2) << "the alt=sse stream, from the server and from curl";
}

}  // namespace
}  // namespace infertap
