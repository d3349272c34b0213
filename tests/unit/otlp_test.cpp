// The OTLP exporter without a network: the protobuf writer's bytes, the
// request encodings read back field by field, the GenAI metrics a record
// makes, the spans of a joined path, and the sender's delivery rules
// (batches, retries with Retry-After, drops by reason, a bounded shutdown)
// against a scripted transport.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/types.h"
#include "output/otlp/encode.h"
#include "output/otlp/exporter.h"
#include "output/otlp/metrics.h"
#include "output/otlp/protobuf.h"
#include "output/otlp/spans.h"

namespace infertap::output::otlp {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
constexpr std::uint64_t kMs = 1'000'000;

// ---- a protobuf reader for the tests: field number -> raw values -----------------

struct Fields {
  std::multimap<std::uint32_t, std::string> len;       // length-delimited, raw bytes
  std::multimap<std::uint32_t, std::uint64_t> scalar;  // varint and fixed values
  std::vector<std::string> all(std::uint32_t f) const {
    std::vector<std::string> out;
    for (auto [a, b] = len.equal_range(f); a != b; ++a) out.push_back(a->second);
    return out;
  }
  std::string one(std::uint32_t f) const {
    const auto v = all(f);
    return v.size() == 1 ? v[0] : std::string("<" + std::to_string(v.size()) + " values>");
  }
  std::uint64_t num(std::uint32_t f) const {
    const auto it = scalar.find(f);
    return it == scalar.end() ? ~0ull : it->second;
  }
};

std::uint64_t read_varint(const std::string& s, std::size_t& i) {
  std::uint64_t v = 0;
  for (int shift = 0; i < s.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(s[i++]);
    v |= std::uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  return v;
}

Fields parse(const std::string& s) {
  Fields f;
  for (std::size_t i = 0; i < s.size();) {
    const std::uint64_t key = read_varint(s, i);
    const auto field = static_cast<std::uint32_t>(key >> 3);
    switch (key & 7) {
      case 0: f.scalar.emplace(field, read_varint(s, i)); break;
      case 1: {
        std::uint64_t v = 0;
        for (int k = 0; k < 8; ++k) v |= std::uint64_t(static_cast<unsigned char>(s[i + k])) << (8 * k);
        f.scalar.emplace(field, v);
        i += 8;
        break;
      }
      case 2: {
        const std::size_t n = read_varint(s, i);
        f.len.emplace(field, s.substr(i, n));
        i += n;
        break;
      }
      case 5: i += 4; break;
      default: ADD_FAILURE() << "wire type " << (key & 7); return f;
    }
  }
  return f;
}

// KeyValue list -> key -> AnyValue fields.
std::map<std::string, Fields> attributes(const Fields& owner, std::uint32_t field) {
  std::map<std::string, Fields> out;
  for (const std::string& kv : owner.all(field)) {
    const Fields f = parse(kv);
    out[f.one(1)] = parse(f.one(2));
  }
  return out;
}

TEST(ProtoWriter, WritesTheWireFormat) {
  ProtoWriter w;
  w.varint(1, 300);   // tag 08, 300 = ac 02
  w.fixed64(2, 1);    // tag 11, 8 bytes little-endian
  w.string(3, "hi");  // tag 1a, length 2
  w.double_(4, 1.5);  // tag 21, IEEE 754 of 1.5 = 0x3ff8000000000000
  const std::string expected = std::string("\x08\xac\x02", 3) + std::string("\x11\x01\0\0\0\0\0\0\0", 9) + "\x1a\x02hi" +
                               std::string("\x21\0\0\0\0\0\0\xf8\x3f", 9);
  EXPECT_EQ(w.data(), expected);
  ProtoWriter negative;
  negative.int64(1, -1);
  EXPECT_EQ(negative.data().size(), 11u) << "a negative int64 is a ten-byte varint";
  ProtoWriter packed;
  packed.packed_fixed64(6, {1, 2});
  EXPECT_EQ(packed.data().substr(0, 2), "\x32\x10") << "field 6, length 16";
}

// ---- records --------------------------------------------------------------------

core::StreamRecord server_record(std::uint64_t generation, std::uint64_t ttft_ms, int content_events) {
  core::StreamRecord r;
  r.role = core::Role::server;
  r.conn.generation = generation;
  r.conn.pid = 42;
  r.conn.comm = "vllm";
  r.conn.local.port = 8000;
  r.conn.k8s_pod = "vllm-0";
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.model = "llama-3-8b";
  r.request_model = "llama";
  r.request_stream = true;
  r.status = 200;
  r.dialect = protocol::Dialect::openai;
  r.response_id = "chatcmpl-9";
  r.finish_reason = "stop";
  r.request_start_ns = 1'000 * kMs;
  r.request_end_ns = 1'001 * kMs;
  for (int i = 0; i < content_events; ++i) {
    core::TimelineEvent e;
    e.ts_ns = r.request_end_ns + ttft_ms * kMs + static_cast<std::uint64_t>(i) * 10 * kMs;
    e.kind = protocol::EventKind::content;
    e.wire_bytes = 100;
    r.timeline.push_back(e);
  }
  r.end_ns = r.last_event_ns = r.timeline.back().ts_ns;
  r.metrics.ttft_ns = ttft_ms * kMs;
  r.metrics.e2e_ns = r.last_event_ns - r.request_end_ns;
  r.metrics.tokens = static_cast<std::uint64_t>(content_events);
  r.metrics.token_source = core::TokenSource::usage;
  r.metrics.content_events = static_cast<std::uint32_t>(content_events);
  r.load.input_tokens = 17;
  return r;
}

core::StreamRecord client_of(const core::StreamRecord& server, std::uint64_t generation) {
  core::StreamRecord c = server;
  c.role = core::Role::client;
  c.conn.generation = generation;
  c.conn.comm = "python3";
  c.conn.remote.port = 8000;
  c.conn.local.port = 40000;
  for (auto& e : c.timeline) e.ts_ns += 1 * kMs;
  c.metrics.ttft_ns = *server.metrics.ttft_ns + 1 * kMs;
  return c;
}

const Metric* find(const std::vector<Metric>& metrics, std::string_view name) {
  for (const Metric& m : metrics) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string text_of(const Attributes& a, const std::string& key) {
  const AnyValue* v = a.find(key);
  return v ? v->text : "<absent>";
}

TEST(OtlpMetrics, GenAiNamesUnitsBucketsAndRequiredAttributes) {
  MetricAggregator agg;
  core::StreamRecord s = server_record(1, 30, 10);
  agg.observe(s);
  agg.observe(client_of(s, 2));
  const auto metrics = agg.snapshot(1, 2);
  const Metric* ttft = find(metrics, "gen_ai.server.time_to_first_token");
  ASSERT_NE(ttft, nullptr);
  EXPECT_EQ(ttft->unit, "s");
  ASSERT_EQ(ttft->histogram.size(), 1u);
  const HistogramPoint& p = ttft->histogram[0];
  EXPECT_EQ(p.count, 1u);
  EXPECT_DOUBLE_EQ(p.sum, 0.030);
  const std::vector<double> semconv = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0};
  EXPECT_EQ(p.bounds, semconv);
  EXPECT_EQ(p.bucket_counts.size(), semconv.size() + 1);
  EXPECT_EQ(p.bucket_counts[4], 1u) << "0.030 s falls in (0.02, 0.04]";
  EXPECT_EQ(text_of(p.attributes, "gen_ai.operation.name"), "chat");
  EXPECT_EQ(text_of(p.attributes, "gen_ai.provider.name"), "openai");
  EXPECT_EQ(text_of(p.attributes, "gen_ai.request.model"), "llama");
  EXPECT_EQ(text_of(p.attributes, "gen_ai.response.model"), "llama-3-8b");
  ASSERT_NE(p.attributes.find("server.port"), nullptr);
  EXPECT_EQ(p.attributes.find("server.port")->integer, 8000);
  EXPECT_EQ(p.attributes.find("error.type"), nullptr) << "only when the stream failed";

  const Metric* tpoc = find(metrics, "gen_ai.client.operation.time_per_output_chunk");
  ASSERT_NE(tpoc, nullptr);
  ASSERT_EQ(tpoc->histogram.size(), 1u);
  EXPECT_EQ(tpoc->histogram[0].count, 9u) << "one per chunk after the first: 10 chunks, 9 observations";
  EXPECT_EQ(text_of(tpoc->histogram[0].attributes, "infertap.vantage"), "client");

  const Metric* usage = find(metrics, "gen_ai.client.token.usage");
  ASSERT_NE(usage, nullptr);
  EXPECT_EQ(usage->unit, "{token}");
  ASSERT_EQ(usage->histogram.size(), 2u) << "input and output";
  std::map<std::string, double> by_type;
  for (const HistogramPoint& u : usage->histogram) by_type[text_of(u.attributes, "gen_ai.token.type")] = u.sum;
  EXPECT_EQ(by_type["input"], 17);
  EXPECT_EQ(by_type["output"], 10);

  const Metric* streams = find(metrics, "infertap.streams");
  ASSERT_NE(streams, nullptr);
  EXPECT_TRUE(streams->is_sum);
  EXPECT_EQ(streams->unit, "{stream}");
  EXPECT_EQ(streams->sum.size(), 2u) << "one per vantage";
  EXPECT_EQ(text_of(streams->sum[0].attributes, "infertap.stream.end"), "complete");
}

TEST(OtlpMetrics, ErrorTypeOnDurationsAndLabelCaps) {
  MetricAggregator agg({.max_label_values = 2, .max_label_bytes = 128, .max_series_per_family = 100});
  for (int i = 0; i < 3; ++i) {
    core::StreamRecord r = server_record(static_cast<std::uint64_t>(i + 1), 20, 3);
    r.request_model = "model-" + std::to_string(i);
    r.status = 503;
    agg.observe(r);
  }
  const auto metrics = agg.snapshot(1, 2);
  EXPECT_EQ(find(metrics, "gen_ai.server.time_to_first_token"), nullptr) << "TTFT counts successful responses only";
  const Metric* duration = find(metrics, "gen_ai.server.request.duration");
  ASSERT_NE(duration, nullptr);
  std::set<std::string> models;
  for (const HistogramPoint& p : duration->histogram) {
    EXPECT_EQ(text_of(p.attributes, "error.type"), "503");
    models.insert(text_of(p.attributes, "gen_ai.request.model"));
  }
  EXPECT_EQ(models, (std::set<std::string>{"model-0", "model-1", "other"}));
  EXPECT_GE(agg.label_overflow(), 1u);
}

TEST(OtlpMetrics, SeriesBudgetFoldsIntoOneOverflowSeries) {
  MetricAggregator agg({.max_label_values = 1000, .max_label_bytes = 128, .max_series_per_family = 3});
  for (int i = 0; i < 10; ++i) {
    core::StreamRecord r = server_record(static_cast<std::uint64_t>(i + 1), 20, 3);
    r.request_model = "m" + std::to_string(i);
    agg.observe(r);
  }
  const Metric* ttft = find(agg.snapshot(1, 2), "gen_ai.server.time_to_first_token");
  ASSERT_NE(ttft, nullptr);
  EXPECT_EQ(ttft->histogram.size(), 4u) << "three series and the overflow one";
  EXPECT_GT(agg.series_overflow(), 0u);
}

// ---- encodings -------------------------------------------------------------------

TEST(OtlpEncoding, MetricsRequestReadsBackFieldByField) {
  MetricAggregator agg;
  agg.observe(server_record(1, 30, 10));
  Attributes resource;
  resource.add("service.name", "infertap");
  const std::string body = metrics_request(resource, Scope{"infertap", "0.1.0"}, agg.snapshot(111, 222), Encoding::protobuf);
  const Fields request = parse(body);
  const Fields rm = parse(request.one(1));                 // ResourceMetrics
  EXPECT_EQ(attributes(parse(rm.one(1)), 1)["service.name"].one(1), "infertap");
  const Fields sm = parse(rm.one(2));                      // ScopeMetrics
  EXPECT_EQ(parse(sm.one(1)).one(1), "infertap");          // scope.name
  bool found = false;
  for (const std::string& m : sm.all(2)) {
    const Fields metric = parse(m);
    if (metric.one(1) != "gen_ai.server.time_to_first_token") continue;
    found = true;
    EXPECT_EQ(metric.one(3), "s");
    const Fields histogram = parse(metric.one(9));
    EXPECT_EQ(histogram.num(2), 2u) << "cumulative";
    const Fields point = parse(histogram.one(1));
    EXPECT_EQ(point.num(2), 111u);  // start_time_unix_nano
    EXPECT_EQ(point.num(3), 222u);  // time_unix_nano
    EXPECT_EQ(point.num(4), 1u);    // count
    EXPECT_EQ(point.one(6).size(), 17u * 8) << "packed bucket counts: 16 bounds + 1";
    EXPECT_EQ(point.one(7).size(), 16u * 8) << "packed explicit bounds";
    EXPECT_EQ(attributes(point, 9)["gen_ai.operation.name"].one(1), "chat");
    EXPECT_EQ(attributes(point, 9)["server.port"].num(3), 8000u) << "an int value";
  }
  EXPECT_TRUE(found);
}

TEST(OtlpEncoding, JsonFollowsTheProtobufJsonMapping) {
  const SpanIds ids(std::array<std::uint8_t, 16>{1, 2, 3});
  const Span span = span_of(server_record(1, 30, 3), WallClock(5), ids, {});
  const std::string body = trace_request(Attributes{}, Scope{}, {encode_span(span, Encoding::json)}, Encoding::json);
  const json j = json::parse(body);
  const json& s = j["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
  EXPECT_EQ(s["traceId"].get<std::string>().size(), 32u) << "hex";
  EXPECT_EQ(s["spanId"].get<std::string>().size(), 16u);
  EXPECT_EQ(s["kind"], 2) << "SERVER, as a number";
  EXPECT_EQ(s["startTimeUnixNano"], std::to_string(1'000 * kMs + 5)) << "a uint64 as a string, wall = monotonic + offset";
  EXPECT_EQ(s["name"], "chat llama");
  bool tokens = false;
  for (const json& a : s["attributes"]) {
    if (a["key"] == "gen_ai.usage.output_tokens") tokens = a["value"]["intValue"] == "3";
  }
  EXPECT_TRUE(tokens) << s.dump();
}

// ---- spans -----------------------------------------------------------------------

TEST(OtlpSpans, AJoinedPathIsOneTraceWithParents) {
  const SpanIds ids(std::array<std::uint8_t, 16>{9});
  core::StreamRecord server = server_record(1, 30, 3);
  core::StreamRecord up = client_of(server, 2);    // the gateway's upstream leg
  core::StreamRecord down = server_record(3, 40, 3);  // its downstream leg
  core::StreamRecord client = client_of(down, 4);
  up.conn.pid = down.conn.pid = 7;
  // The views the path stage would attach to the four records of the path.
  const auto attach = [&](core::StreamRecord& r, const core::StreamRecord& peer, std::optional<core::GatewayLeg> leg) {
    core::PathView view;
    view.root = core::stream_id(server);
    view.peer_stream_id = core::stream_id(peer);
    view.gateway = std::move(leg);
    r.path_view = std::make_shared<const core::PathView>(std::move(view));
  };
  attach(server, up, std::nullopt);
  attach(up, server, core::GatewayLeg{.leg = core::GatewayLeg::Side::upstream, .peer_stream_id = core::stream_id(down)});
  attach(down, client, core::GatewayLeg{.leg = core::GatewayLeg::Side::downstream, .peer_stream_id = core::stream_id(up)});
  attach(client, down, std::nullopt);

  const WallClock clock(0);
  const Span s = span_of(server, clock, ids, {}), u = span_of(up, clock, ids, {}), d = span_of(down, clock, ids, {}),
             c = span_of(client, clock, ids, {});
  for (const Span* x : {&u, &d, &c}) EXPECT_EQ(x->trace_id, s.trace_id);
  EXPECT_EQ(s.parent_span_id, u.span_id) << "the server's request came from the gateway's upstream leg";
  EXPECT_EQ(u.parent_span_id, d.span_id) << "which relays the downstream leg's";
  EXPECT_EQ(d.parent_span_id, c.span_id) << "which the client sent";
  EXPECT_EQ(c.parent_span_id, SpanId{}) << "the client's span is the root";
  EXPECT_EQ(s.kind, Span::Kind::server);
  EXPECT_EQ(c.kind, Span::Kind::client);

  core::StreamRecord alone = server_record(9, 30, 3);
  EXPECT_NE(span_of(alone, clock, ids, {}).trace_id, s.trace_id) << "an unjoined record is a trace of its own";
  EXPECT_NE(span_of(server, clock, SpanIds(std::array<std::uint8_t, 16>{8}), {}).trace_id, s.trace_id)
      << "another run's salt, another trace";
}

TEST(OtlpSpans, AttributesStatusAndTimelineEvents) {
  const SpanIds ids;
  core::StreamRecord r = server_record(1, 30, 5);
  r.path = "/v1/chat/completions";
  r.status = 500;
  r.metrics.stalls.push_back({.after_event = 2, .start_ns = 1'100 * kMs, .gap_ns = 300 * kMs});
  r.path_view = std::make_shared<const core::PathView>(core::PathView{.stall_causes = {{.cause = core::StallCause::model}}});
  const Span plain = span_of(r, WallClock(0), ids, {});
  EXPECT_EQ(plain.status, Span::Status::error);
  EXPECT_EQ(plain.status_message, "500");
  EXPECT_EQ(text_of(plain.attributes, "error.type"), "500");
  EXPECT_EQ(text_of(plain.attributes, "gen_ai.response.id"), "chatcmpl-9");
  EXPECT_EQ(text_of(plain.attributes, "http.route"), "/v1/chat/completions");
  EXPECT_EQ(text_of(plain.attributes, "k8s.pod.name"), "vllm-0");
  EXPECT_TRUE(plain.attributes.find("gen_ai.request.stream")->flag);
  EXPECT_DOUBLE_EQ(plain.attributes.find("gen_ai.response.time_to_first_chunk")->real, 0.030);
  EXPECT_EQ(plain.attributes.find("infertap.stall_causes.model")->integer, 1);
  ASSERT_EQ(plain.events.size(), 1u) << "stalls are events always";
  EXPECT_EQ(plain.events[0].name, "infertap.stall");

  const Span timeline = span_of(r, WallClock(0), ids, {.timeline_events = true, .max_events = 4});
  EXPECT_EQ(timeline.events.size(), 4u);
  EXPECT_EQ(timeline.dropped_events, 2u) << "1 stall + 5 events, 4 kept";
  EXPECT_EQ(timeline.events[1].name, "content");
}

// ---- the sender ------------------------------------------------------------------

// Answers from a script; records what was posted and when.
class ScriptedTransport : public Transport {
 public:
  struct Post {
    std::string url, body;
    std::chrono::steady_clock::time_point at;
  };
  std::function<HttpAnswer(int n)> answer = [](int) { return HttpAnswer{200, "", std::nullopt}; };
  bool hang = false;  // block until cancel()

  HttpAnswer post(const SignalOptions& to, const std::string& body, std::chrono::milliseconds) override {
    std::unique_lock<std::mutex> lock(mu);
    posts.push_back({to.url, body, std::chrono::steady_clock::now()});
    const int n = static_cast<int>(posts.size()) - 1;
    if (hang) {
      cv.wait(lock, [&] { return cancelled; });
      return {0, "cancelled", std::nullopt};
    }
    lock.unlock();
    return answer(n);
  }
  void cancel() override {
    std::lock_guard<std::mutex> lock(mu);
    cancelled = true;
    cv.notify_all();
  }
  std::size_t count(const std::string& url_suffix) {
    std::lock_guard<std::mutex> lock(mu);
    std::size_t n = 0;
    for (const Post& p : posts) n += p.url.ends_with(url_suffix);
    return n;
  }
  std::mutex mu;
  std::condition_variable cv;
  bool cancelled = false;
  std::vector<Post> posts;
};

ExporterOptions quick_options() {
  ExporterOptions o;
  o.traces = SignalOptions{"http://127.0.0.1:1/v1/traces"};
  o.batch_delay = 20ms;
  o.export_interval = 1h;
  o.shutdown_timeout = 1s;
  o.retry.initial_backoff = 10ms;
  o.retry.max_backoff = 40ms;
  return o;
}

bool eventually(const std::function<bool()>& f, std::chrono::milliseconds within = 3s) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (!f()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST(OtlpExporter, SpansGoInBatchesAndAreCounted) {
  auto transport = std::make_unique<ScriptedTransport>();
  ScriptedTransport& t = *transport;
  Exporter e(quick_options(), WallClock(0), std::move(transport));
  std::this_thread::sleep_for(50ms);  // the sender asleep until its next metrics export, an hour away
  for (int i = 0; i < 5; ++i) e.observe(server_record(static_cast<std::uint64_t>(i + 1), 20, 3));
  ASSERT_TRUE(eventually([&] { return e.counters().spans_exported == 5; }, 1s))
      << "the batch goes after batch_delay (20 ms): " << describe(e.counters());
  EXPECT_TRUE(e.close());
  const Fields request = parse(t.posts.at(0).body);
  EXPECT_EQ(parse(parse(request.one(1)).one(2)).all(2).size(), 5u) << "five spans in one request";
  EXPECT_EQ(e.counters().spans_dropped, 0u);
}

TEST(OtlpExporter, RetriesAfterWhatRetryAfterSaysThenDelivers) {
  auto transport = std::make_unique<ScriptedTransport>();
  ScriptedTransport& t = *transport;
  t.answer = [](int n) { return n == 0 ? HttpAnswer{503, "", 300ms} : HttpAnswer{200, "", std::nullopt}; };
  Exporter e(quick_options(), WallClock(0), std::move(transport));
  e.observe(server_record(1, 20, 3));
  ASSERT_TRUE(eventually([&] { return e.counters().spans_exported == 1; })) << describe(e.counters());
  e.close();
  ASSERT_EQ(t.posts.size(), 2u);
  EXPECT_GE(t.posts[1].at - t.posts[0].at, 300ms) << "Retry-After: the wait it asked for";
  EXPECT_EQ(e.counters().requests_retried, 1u);
  EXPECT_NE(e.last_error().find("503"), std::string::npos) << e.last_error();
}

TEST(OtlpExporter, DropsByReason) {
  {  // a status that is not retried
    auto transport = std::make_unique<ScriptedTransport>();
    transport->answer = [](int) { return HttpAnswer{400, "", std::nullopt}; };
    Exporter e(quick_options(), WallClock(0), std::move(transport));
    e.observe(server_record(1, 20, 3));
    ASSERT_TRUE(eventually([&] { return e.counters().spans_dropped_rejected == 1; }));
    EXPECT_EQ(e.counters().requests_retried, 0u);
  }
  {  // 503 on every attempt; connection errors too
    auto transport = std::make_unique<ScriptedTransport>();
    transport->answer = [](int n) { return n % 2 ? HttpAnswer{503, "", std::nullopt} : HttpAnswer{0, "refused", std::nullopt}; };
    Exporter e(quick_options(), WallClock(0), std::move(transport));
    e.observe(server_record(1, 20, 3));
    ASSERT_TRUE(eventually([&] { return e.counters().spans_dropped_retries_exhausted == 1; })) << describe(e.counters());
    EXPECT_EQ(e.counters().requests_retried, 4u) << "five attempts";
    EXPECT_EQ(e.counters().send_errors, 3u);
  }
  {  // a collector that never answers: the queue fills, shutdown is bounded
    auto transport = std::make_unique<ScriptedTransport>();
    transport->hang = true;
    ExporterOptions o = quick_options();
    o.queue_spans = 3;
    o.batch_spans = 1;
    Exporter e(o, WallClock(0), std::move(transport));
    e.observe(server_record(1, 20, 3));
    ASSERT_TRUE(eventually([&] { return e.counters().queued_spans == 0; })) << "the first is in flight";
    for (int i = 0; i < 5; ++i) e.observe(server_record(static_cast<std::uint64_t>(i + 2), 20, 3));
    EXPECT_EQ(e.counters().spans_dropped_queue_full, 2u);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(e.close());
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "shutdown_timeout 1 s, then cancelled";
    EXPECT_EQ(e.counters().spans_dropped_at_shutdown, 4u) << "the one in flight and the three queued";
    EXPECT_EQ(e.counters().spans_dropped, 6u);
  }
}

TEST(OtlpExporter, MetricsEveryIntervalAndOnceMoreAtClose) {
  auto transport = std::make_unique<ScriptedTransport>();
  ScriptedTransport& t = *transport;
  ExporterOptions o = quick_options();
  o.traces.reset();
  o.metrics = SignalOptions{"http://127.0.0.1:1/v1/metrics"};
  o.export_interval = 50ms;
  Exporter e(o, WallClock(0), std::move(transport));
  std::this_thread::sleep_for(120ms);
  EXPECT_EQ(t.count("/v1/metrics"), 0u) << "nothing to say before the first stream";
  e.observe(server_record(1, 20, 3));
  ASSERT_TRUE(eventually([&] { return e.counters().metric_exports >= 2; }));
  const std::size_t before = t.count("/v1/metrics");
  e.close();
  EXPECT_EQ(t.count("/v1/metrics"), before + 1) << "a last export at close";
  EXPECT_EQ(t.count("/v1/traces"), 0u) << "traces off: no span made";
}

}  // namespace
}  // namespace infertap::output::otlp
