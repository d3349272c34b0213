// OTLP export for real, as root: infertapd times the sample server's streams
// (and, through nginx, a gateway's two legs) and exports them to an OTLP/HTTP
// receiver on loopback that decodes every request with the code protobufjs
// generated from the official opentelemetry-proto definitions
// (tests/support/otlp/receiver.cjs). What it decoded must name, measure and
// link what the NDJSON records of the same run say; a collector that answers
// 503 before it recovers gets everything, and one that never answers costs
// the capture and the NDJSON output nothing and the agent a bounded wait.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/gateways.h"
#include "support/live_test.h"
#include "support/ndjson.h"
#include "support/process.h"
#include "support/sample_peers.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::read_file;
using testing::read_ndjson;

constexpr const char* kReceiver = "tests/support/otlp/receiver.cjs";
constexpr const char* kDecoder = "tests/support/otlp/node_modules/@opentelemetry/otlp-transformer/build/src/generated/root.js";
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                         0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0};

// An attribute list as key -> its AnyValue's value (string, number or bool).
std::map<std::string, json> attrs(const json& list) {
  std::map<std::string, json> out;
  if (!list.is_array()) return out;
  for (const json& kv : list) {
    const json& v = kv.at("value");
    json value;
    if (v.contains("stringValue")) value = v["stringValue"];
    else if (v.contains("intValue")) value = std::stoll(v["intValue"].get<std::string>());  // int64: a string
    else if (v.contains("doubleValue")) value = v["doubleValue"];
    else if (v.contains("boolValue")) value = v["boolValue"];
    else value = v;
    out[kv.at("key").get<std::string>()] = value;
  }
  return out;
}

// The receiver (node), its port, and what it decoded.
class Receiver {
 public:
  Receiver(const std::string& dir, const std::vector<std::string>& extra) : out_(dir + "/received.ndjson") {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string node = testing::find_system_binary("node");
    if (node.empty()) {
      error_ = "node is not installed: run scripts/setup.sh (nodejs)";
      return;
    }
    if (access(kDecoder, R_OK) != 0) {
      error_ = std::string(kDecoder) + " is missing: run scripts/setup.sh (npm ci in tests/support/otlp), from the repository root";
      return;
    }
    std::vector<std::string> argv = {node, kReceiver, "--out", out_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = testing::Process::spawn(argv, dir + "/receiver.log");
    if (!p) {
      error_ = "cannot spawn node";
      return;
    }
    proc_.emplace(std::move(*p));
    if (!testing::wait_for_text(dir + "/receiver.log", "listening ", 10s)) {
      error_ = "the receiver did not start: " + read_file(dir + "/receiver.log");
      return;
    }
    const std::string log = read_file(dir + "/receiver.log");
    port_ = static_cast<std::uint16_t>(std::atoi(log.c_str() + log.find("listening ") + 10));
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<json> requests() const { return read_ndjson(out_); }
  std::vector<json> requests(const std::string& path) const {
    std::vector<json> out;
    for (const json& r : requests()) {
      if (r.value("path", "") == path) out.push_back(r);
    }
    return out;
  }
  // Every span of the traces requests it answered 200, by infertap.stream.id.
  std::map<std::string, json> spans() const {
    std::map<std::string, json> out;
    for (const json& r : requests("/v1/traces")) {
      if (r.value("status", 0) != 200 || !r.contains("request")) continue;
      for (const json& rs : r["request"]["resourceSpans"]) {
        for (const json& ss : rs["scopeSpans"]) {
          for (const json& s : ss["spans"]) out[attrs(s["attributes"])["infertap.stream.id"].get<std::string>()] = s;
        }
      }
    }
    return out;
  }
  // The metrics of the last metrics request it answered 200, by name.
  std::map<std::string, json> last_metrics() const {
    std::map<std::string, json> out;
    for (const json& r : requests("/v1/metrics")) {
      if (r.value("status", 0) != 200 || !r.contains("request")) continue;
      out.clear();
      for (const json& m : r["request"]["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]) out[m["name"]] = m;
    }
    return out;
  }

 private:
  std::string out_, error_;
  std::uint16_t port_ = 0;
  std::optional<testing::Process> proc_;
};

// Sets environment variables for the agent started in its scope (spawn copies
// the environment), and removes them after.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {
    for (const auto& [k, v] : vars_) setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : vars_) unsetenv(k.c_str());
  }

 private:
  std::map<std::string, std::string> vars_;
};

class OtlpExport : public testing::LiveTest {
 protected:
  OtlpExport() : LiveTest("infertap-otlp") {}

  // The agent on `ports`, exporting to `endpoint` with `env` on top.
  void start_agent(const std::vector<std::uint16_t>& ports, const std::string& endpoint,
                   std::map<std::string, std::string> env = {}) {
    env.emplace("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    env.emplace("OTEL_METRIC_EXPORT_INTERVAL", "500");
    env.emplace("OTEL_EXPORTER_OTLP_HEADERS", "x-test-token=s3cret%20value");
    ScopedEnv scoped(env);
    start_agent_on_ports(ports);
  }

  json agent_stats() const {
    const std::string log = read_file(path("agent.log"));
    const std::size_t at = log.rfind("stats {");
    if (at == std::string::npos) return json::object();
    const std::size_t end = log.find('\n', at);
    return json::parse(log.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6), nullptr, false);
  }

  // The agent's stream records (alerts and the like left out), once it stopped.
  std::vector<json> stream_records(const std::vector<json>& lines) {
    std::vector<json> out;
    for (const json& r : lines) {
      if (r.value("type", "") == "stream") out.push_back(r);
    }
    return out;
  }

  static std::vector<json> of_role(const std::vector<json>& records, const std::string& role) {
    std::vector<json> out;
    for (const json& r : records) {
      if (r.value("type", "") == "stream" && r.value("role", "") == role) out.push_back(r);
    }
    return out;
  }
};

// Three streams of 10 tokens, a 150 ms pause after the 5th: every record a
// span, every measure of the records in the metrics, all decoded by the
// official definitions.
TEST_F(OtlpExport, SampleTrafficDecodedByTheOfficialDefinitions) {
  Receiver receiver(path("receiver"), {});
  ASSERT_TRUE(receiver.ok()) << receiver.error();
  testing::SampleServer server(path("server"), {"--ttft-ms", "30", "--itl-ms", "5", "--pause-after", "5", "--pause-ms",
                                                "150", "--model", "otlp-model"});
  ASSERT_TRUE(server.ok()) << server.error();
  start_agent({server.port()}, receiver.endpoint());
  const testing::ClientRun c = testing::run_sample_client(path("client"), server.port(),
                                                          {"--requests", "3", "--tokens", "10", "--model", "otlp-model"});
  ASSERT_EQ(c.rc, 0) << c.output;
  std::this_thread::sleep_for(2500ms);  // the path settles, a batch and two metric exports go
  const std::vector<json> records = stream_records(stop_agent_after_joins());
  const std::vector<json> servers = of_role(records, "server"), clients = of_role(records, "client");
  ASSERT_EQ(servers.size(), 3u);
  ASSERT_EQ(clients.size(), 3u);

  // Every request decoded, protobuf by default, the configured header sent; its value logged nowhere.
  const std::vector<json> requests = receiver.requests();
  ASSERT_FALSE(requests.empty()) << read_file(path("agent.log"));
  for (const json& r : requests) {
    EXPECT_FALSE(r.contains("error")) << r.dump();
    EXPECT_EQ(r["content_type"], "application/x-protobuf");
    EXPECT_EQ(r.value("x_test_token", ""), "s3cret value");
  }
  EXPECT_EQ(read_file(path("agent.log")).find("s3cret"), std::string::npos) << "a header value in the log";

  // One span per record: kind, name, TTFT as the record says, one trace per connection.
  const std::map<std::string, json> spans = receiver.spans();
  EXPECT_EQ(spans.size(), records.size());
  for (const json& r : records) {
    const std::string id = r["stream_id"];
    ASSERT_TRUE(spans.count(id)) << "no span for record " << id;
    const json& s = spans.at(id);
    const auto a = attrs(s["attributes"]);
    EXPECT_EQ(s["name"], "chat otlp-model");
    EXPECT_EQ(s["kind"], r["role"] == "server" ? 2 : 3) << "SERVER / CLIENT";
    EXPECT_NEAR(a.at("gen_ai.response.time_to_first_chunk").get<double>(), r["ttft_ms"].get<double>() / 1000, 1e-6)
        << "the record's TTFT (its ms are rounded to the microsecond)";
    EXPECT_EQ(a.at("gen_ai.operation.name"), "chat");
    EXPECT_EQ(a.at("gen_ai.response.model"), "otlp-model");
    EXPECT_EQ(a.at("server.port"), server.port());
    EXPECT_EQ(a.at("infertap.stall_causes.model"), 1) << "the 150 ms pause, the model's";
    const std::uint64_t start = std::stoull(s["startTimeUnixNano"].get<std::string>());
    const std::uint64_t end = std::stoull(s["endTimeUnixNano"].get<std::string>());
    EXPECT_GT(end - start, 150'000'000u) << "the stream's time, pause included";
    const std::string peer = r["peer_stream_id"];
    ASSERT_TRUE(spans.count(peer));
    EXPECT_EQ(s["traceId"], spans.at(peer)["traceId"]) << "the two ends of one connection: one trace";
    if (r["role"] == "server") {
      EXPECT_EQ(s.value("parentSpanId", ""), spans.at(peer)["spanId"]) << "the client's request is the server span's parent";
    } else {
      EXPECT_FALSE(s.contains("parentSpanId")) << "the client's span is the root";
    }
  }
  const std::vector<json> traces = receiver.requests("/v1/traces");
  ASSERT_FALSE(traces.empty());
  const json& resource = traces.front()["request"]["resourceSpans"][0]["resource"];
  EXPECT_EQ(attrs(resource["attributes"]).at("service.name"), "infertap");
  EXPECT_TRUE(attrs(resource["attributes"]).count("host.name"));

  // Metrics: names, units, the conventions' buckets and attributes, values as the records say.
  const auto metrics = receiver.last_metrics();
  ASSERT_TRUE(metrics.count("gen_ai.server.time_to_first_token")) << read_file(path("agent.log"));
  const json& ttft = metrics.at("gen_ai.server.time_to_first_token");
  EXPECT_EQ(ttft["unit"], "s");
  EXPECT_EQ(ttft["histogram"]["aggregationTemporality"], 2) << "cumulative";
  ASSERT_EQ(ttft["histogram"]["dataPoints"].size(), 1u);
  const json& point = ttft["histogram"]["dataPoints"][0];
  EXPECT_EQ(point["count"], "3");
  double ttft_sum = 0;
  for (const json& r : servers) ttft_sum += r["ttft_ms"].get<double>() / 1000;
  EXPECT_NEAR(point["sum"].get<double>(), ttft_sum, 3e-6);
  EXPECT_EQ(point["explicitBounds"].get<std::vector<double>>(), kTtftBounds);
  const auto pa = attrs(point["attributes"]);
  EXPECT_EQ(pa.at("gen_ai.operation.name"), "chat");
  EXPECT_EQ(pa.at("gen_ai.provider.name"), "openai");
  EXPECT_EQ(pa.at("gen_ai.request.model"), "otlp-model");
  EXPECT_EQ(pa.at("server.port"), server.port());
  EXPECT_FALSE(pa.count("error.type"));

  std::uint64_t gaps = 0;
  for (const json& r : clients) gaps += r["content_events"].get<std::uint64_t>() - 1;
  std::uint64_t chunk_count = 0;
  for (const json& p : metrics.at("gen_ai.client.operation.time_per_output_chunk")["histogram"]["dataPoints"]) {
    chunk_count += std::stoull(p["count"].get<std::string>());
  }
  EXPECT_EQ(chunk_count, gaps) << "one observation per chunk after the first";
  EXPECT_EQ(gaps, 27u);
  for (const char* name : {"gen_ai.server.request.duration", "gen_ai.client.operation.time_to_first_chunk",
                           "gen_ai.client.operation.duration", "infertap.stream.inter_token_latency"}) {
    ASSERT_TRUE(metrics.count(name)) << name;
    EXPECT_EQ(metrics.at(name)["unit"], "s") << name;
  }
  std::int64_t model_stalls = 0;
  for (const json& p : metrics.at("infertap.stalls")["sum"]["dataPoints"]) {
    const auto a = attrs(p["attributes"]);
    if (a.at("infertap.stall.cause") == "model" && a.at("infertap.vantage") == "server") model_stalls += std::stoll(p["asInt"].get<std::string>());
  }
  EXPECT_EQ(model_stalls, 3);
  EXPECT_TRUE(metrics.at("infertap.stalls")["sum"]["isMonotonic"].get<bool>());

  const json stats = agent_stats();
  EXPECT_EQ(stats["otlp"].value("spans_exported", 0u), records.size()) << stats.dump();
  EXPECT_EQ(stats["otlp"].value("spans_dropped", 1u), 0u);
}

TEST_F(OtlpExport, JsonOnRequest) {
  Receiver receiver(path("receiver"), {});
  ASSERT_TRUE(receiver.ok()) << receiver.error();
  testing::SampleServer server(path("server"), {"--ttft-ms", "20", "--itl-ms", "5", "--model", "json-model"});
  ASSERT_TRUE(server.ok()) << server.error();
  start_agent({server.port()}, receiver.endpoint(), {{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}});
  const testing::ClientRun c = testing::run_sample_client(path("client"), server.port(), {"--tokens", "8", "--model", "json-model"});
  ASSERT_EQ(c.rc, 0) << c.output;
  std::this_thread::sleep_for(2000ms);
  const std::vector<json> records = stream_records(stop_agent_after_joins());
  ASSERT_EQ(records.size(), 2u);
  for (const json& r : receiver.requests()) {
    EXPECT_EQ(r["content_type"], "application/json");
    EXPECT_FALSE(r.contains("error")) << r.dump();
  }
  const auto spans = receiver.spans();
  for (const json& r : records) {
    ASSERT_TRUE(spans.count(r["stream_id"])) << r["stream_id"];
    EXPECT_NEAR(attrs(spans.at(r["stream_id"])["attributes"]).at("gen_ai.response.time_to_first_chunk").get<double>(),
                r["ttft_ms"].get<double>() / 1000, 1e-6);
  }
  const auto metrics = receiver.last_metrics();
  ASSERT_TRUE(metrics.count("gen_ai.client.operation.time_per_output_chunk"));
  EXPECT_EQ(metrics.at("gen_ai.client.operation.time_per_output_chunk")["histogram"]["dataPoints"][0]["count"], "7");
}

// The first three requests get 503 with Retry-After: 1; the exporter waits
// and sends again, and the collector gets every span.
TEST_F(OtlpExport, ACollectorThatAnswers503ThenRecoversGetsEverything) {
  Receiver receiver(path("receiver"), {"--fail", "3", "--retry-after", "1"});
  ASSERT_TRUE(receiver.ok()) << receiver.error();
  testing::SampleServer server(path("server"), {"--ttft-ms", "20", "--itl-ms", "5"});
  ASSERT_TRUE(server.ok()) << server.error();
  start_agent({server.port()}, receiver.endpoint(), {{"OTEL_METRIC_EXPORT_INTERVAL", "60000"}});
  const testing::ClientRun c = testing::run_sample_client(path("client"), server.port(), {"--requests", "2", "--tokens", "8"});
  ASSERT_EQ(c.rc, 0) << c.output;
  // 503 three times, a second each: the fourth attempt is answered.
  ASSERT_TRUE(testing::wait_for_text(path("receiver/received.ndjson"), "\"status\":200", 15s))
      << read_file(path("receiver/received.ndjson"));
  const std::vector<json> records = stream_records(stop_agent_after_joins());
  const std::vector<json> requests = receiver.requests();
  ASSERT_GE(requests.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(requests[static_cast<std::size_t>(i)]["status"], 503);
  EXPECT_EQ(receiver.spans().size(), records.size()) << "every span arrived once the collector recovered";
  const json stats = agent_stats();
  EXPECT_GE(stats["otlp"].value("requests_retried", 0u), 3u) << stats.dump();
  EXPECT_EQ(stats["otlp"].value("spans_exported", 0u), records.size()) << stats.dump();
  EXPECT_EQ(stats["otlp"].value("spans_dropped", 1u), 0u) << stats.dump();
  EXPECT_FALSE(receiver.last_metrics().empty()) << "the last export at shutdown";
}

// A collector that accepts connections and never answers: the records are
// written as without it, the spans are dropped and counted, and the agent
// stops within its bounds (output 5 s, OTLP 3 s).
TEST_F(OtlpExport, ACollectorThatNeverAnswersCostsTheCaptureNothing) {
  Receiver receiver(path("receiver"), {"--hang"});
  ASSERT_TRUE(receiver.ok()) << receiver.error();
  testing::SampleServer server(path("server"), {"--ttft-ms", "20", "--itl-ms", "5"});
  ASSERT_TRUE(server.ok()) << server.error();
  start_agent({server.port()}, receiver.endpoint(), {{"OTEL_EXPORTER_OTLP_TIMEOUT", "1000"}});
  const testing::ClientRun c = testing::run_sample_client(path("client"), server.port(), {"--requests", "4", "--tokens", "10"});
  ASSERT_EQ(c.rc, 0) << c.output;
  std::this_thread::sleep_for(1500ms);
  const auto stopping = std::chrono::steady_clock::now();
  const std::vector<json> records = stream_records(stop_agent_records());
  const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopping).count();
  std::printf("  stopped in %.2f s with a collector that never answers\n", stop_s);
  EXPECT_LT(stop_s, 6.0) << "the OTLP shutdown is bounded (3 s) and nothing else waits on it";
  EXPECT_EQ(of_role(records, "server").size(), 4u);
  EXPECT_EQ(of_role(records, "client").size(), 4u);
  for (const json& r : records) EXPECT_EQ(r["content_events"], 10) << r["stream_id"];
  EXPECT_FALSE(receiver.requests().empty()) << "the exporter did reach the collector";
  const json stats = agent_stats();
  EXPECT_EQ(stats["otlp"].value("spans_exported", 1u), 0u) << stats.dump();
  EXPECT_EQ(stats["otlp"].value("spans_dropped", 0u), records.size()) << stats.dump();
  EXPECT_GE(stats["otlp"].value("send_errors", 0u), 1u) << stats.dump();
  EXPECT_EQ(stats["sink"].value("dropped_lines", 1u), 0u);
}

// client -> nginx -> sample server: four records of one stream (the client's,
// the gateway's two legs, the server's) are four spans of one trace, each
// the parent of the next hop's.
TEST_F(OtlpExport, AGatewaysLegsAndTheServerAreOneTrace) {
  Receiver receiver(path("receiver"), {});
  ASSERT_TRUE(receiver.ok()) << receiver.error();
  testing::SampleServer server(path("server"), {"--ttft-ms", "20", "--itl-ms", "10"});
  ASSERT_TRUE(server.ok()) << server.error();
  testing::Nginx gateway(testing::NginxMode::streaming, server.port(), path("nginx"));
  ASSERT_TRUE(gateway.ok()) << gateway.error();
  start_agent({server.port(), gateway.port()}, receiver.endpoint());
  const testing::ClientRun c = testing::run_sample_client(path("client"), gateway.port(), {"--tokens", "20"});
  ASSERT_EQ(c.rc, 0) << c.output;
  std::this_thread::sleep_for(2000ms);
  const std::vector<json> records = stream_records(stop_agent_after_joins());
  ASSERT_EQ(records.size(), 4u) << read_file(path("agent.log"));
  const json *client = nullptr, *down = nullptr, *up = nullptr, *origin = nullptr;
  for (const json& r : records) {
    if (r["role"] == "gateway") (r["gateway"]["leg"] == "upstream" ? up : down) = &r;  // the records say "gateway" for both legs
    else (r["role"] == "client" ? client : origin) = &r;
  }
  ASSERT_TRUE(client && down && up && origin) << "client, both legs and the server joined";
  const auto spans = receiver.spans();
  ASSERT_EQ(spans.size(), 4u);
  const json& sc = spans.at((*client)["stream_id"]);
  const json& sd = spans.at((*down)["stream_id"]);
  const json& su = spans.at((*up)["stream_id"]);
  const json& ss = spans.at((*origin)["stream_id"]);
  for (const json* s : {&sd, &su, &ss}) EXPECT_EQ((*s)["traceId"], sc["traceId"]) << "one trace for the whole path";
  EXPECT_FALSE(sc.contains("parentSpanId"));
  EXPECT_EQ(sd.value("parentSpanId", ""), sc["spanId"]) << "the gateway served the client";
  EXPECT_EQ(su.value("parentSpanId", ""), sd["spanId"]) << "its upstream request relays the downstream one";
  EXPECT_EQ(ss.value("parentSpanId", ""), su["spanId"]) << "the server served the gateway";
  EXPECT_EQ(sd["kind"], 2);
  EXPECT_EQ(su["kind"], 3);
  EXPECT_EQ(attrs(sd["attributes"]).at("infertap.gateway.leg"), "downstream");
  EXPECT_TRUE(attrs(ss["attributes"]).count("infertap.delivery.path")) << "the server's span carries the delivery view";
}

}  // namespace
}  // namespace infertap
