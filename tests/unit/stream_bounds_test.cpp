// Bounded memory of streams in flight: a long stream keeps its
// first events whole and only compact values after them, with aggregates
// exactly those of the whole stream; all streams together stay under their
// budget, the largest ending early with one record each.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "core/pipeline.h"
#include "core/stream/assembler.h"
#include "output/ndjson/records.h"
#include "support/event_builder.h"

namespace infertap::core {
namespace {

constexpr TimestampNs kMs = 1'000'000;
constexpr TimestampNs kT0 = 1'000'000'000'000ull;
const std::string kToken = R"({"id":"c1","object":"chat.completion.chunk","choices":[{"delta":{"content":"x"}}]})";
const std::string kRole = R"({"id":"c1","object":"chat.completion.chunk","choices":[{"delta":{"role":"assistant"}}]})";
constexpr std::uint32_t kWire = 100;

// The gap before event i: mostly 1-3 ms, a 500 ms stall every 40 000 events,
// one gap of 6 s (past 32 bits of ns), and before event 150 001 the events are
// lost (a break in offsets): that gap is not judged a stall.
TimestampNs gap_before(int i) {
  if (i == 123'457) return 6'000 * kMs;
  if (i % 40'000 == 0) return 500 * kMs;
  return (1 + i % 3) * kMs;
}

struct OneStream {
  PipelineConfig config;
  PipelineCounters counters;
  ConnIdentity id;
  RoleCensus census;
  std::size_t max_held = 0;  // live_stream_bytes at its highest

  // A stream of `n` events (every 7th not a token) fed to one assembler.
  StreamRecord stream(int n) {
    StreamAssembler a{id, config, counters, census};
    a.set_role(Role::server);
    protocol::RequestInfo request;
    request.end_ns = kT0 - 3 * kMs;
    request.complete = true;
    protocol::ResponseInfo head;
    head.status = 200;
    head.event_stream = true;
    head.head_ns = kT0;
    head.request = &request;
    a.on_response(head);
    TimestampNs ts = kT0;
    std::uint64_t offset = 0;
    for (int i = 0; i < n; ++i) {
      ts += gap_before(i);
      if (i == 150'001) offset += 10 * kWire;
      protocol::StreamEvent e;
      e.data = i % 7 == 3 ? kRole : kToken;
      e.ts = e.first_byte_ts = ts;
      e.body_offset = offset;
      e.wire_bytes = kWire;
      offset += kWire;
      a.on_event(e);
      max_held = std::max<std::size_t>(max_held, counters.live_stream_bytes);
    }
    a.on_response_end(ts + kMs, protocol::ResponseEnd::complete);
    EXPECT_EQ(counters.live_stream_bytes, 0u) << "a finished stream holds nothing in the budget";
    auto out = a.take_finished();
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? StreamRecord{} : std::move(out[0]);
  }
};

constexpr int kEvents = 200'000;

TEST(StreamBounds, ALongStreamKeepsExactAggregatesAndSaysItsTimelineWasCut) {
  OneStream whole;
  whole.config.max_timeline_events = 10'000'000;
  const StreamRecord all = whole.stream(kEvents);
  OneStream bounded;  // the default bound
  const StreamRecord cut = bounded.stream(kEvents);

  const std::size_t bound = PipelineConfig{}.max_timeline_events;
  ASSERT_EQ(cut.timeline.size(), bound);
  EXPECT_EQ(cut.tail.events, kEvents - bound);
  EXPECT_EQ(all.tail.events, 0u);
  EXPECT_EQ(bounded.counters.timelines_truncated, 1u);
  EXPECT_EQ(whole.counters.timelines_truncated, 0u);

  const StreamMetrics& m = cut.metrics;
  const StreamMetrics& e = all.metrics;
  EXPECT_EQ(m.events, static_cast<std::uint32_t>(kEvents));
  EXPECT_EQ(m.content_events, e.content_events);
  EXPECT_EQ(m.tokens, e.tokens);
  EXPECT_EQ(m.ttft_ns, e.ttft_ns);
  EXPECT_EQ(m.e2e_ns, e.e2e_ns);
  EXPECT_EQ(m.tokens_per_s, e.tokens_per_s);
  EXPECT_EQ(m.itl_p50_ns, e.itl_p50_ns);
  EXPECT_EQ(m.itl_p95_ns, e.itl_p95_ns);
  EXPECT_EQ(m.itl_p99_ns, e.itl_p99_ns);
  EXPECT_EQ(m.itl_max_ns, 6'000 * kMs);
  EXPECT_EQ(m.itl_max_ns, e.itl_max_ns);
  EXPECT_EQ(m.longest_pause_ns, e.longest_pause_ns);
  EXPECT_FALSE(m.itl_truncated);
  ASSERT_EQ(m.stalls.size(), e.stalls.size());
  for (std::size_t i = 0; i < m.stalls.size(); ++i) {
    EXPECT_EQ(m.stalls[i].after_event, e.stalls[i].after_event);
    EXPECT_EQ(m.stalls[i].gap_ns, e.stalls[i].gap_ns);
  }
  // The four 500 ms stalls and the 6 s one; not the gap over the lost events.
  EXPECT_EQ(m.stalls.size(), 5u);
  EXPECT_TRUE(cut.tail.gaps.empty()) << "a finished record gives its tail's times back";
  const std::string line = output::render_stream(cut, output::WallClock(0), {});
  EXPECT_NE(line.find(R"("timeline_truncated":true)"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("timeline_events":32768)"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("itl_truncated":false)"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("events":200000)"), std::string::npos) << line;
  EXPECT_NE(output::render_stream(all, output::WallClock(0), {}).find(R"("timeline_truncated":false)"),
            std::string::npos);

  // Held while in flight: the timeline at its bound plus 4 bytes per token.
  const std::size_t timeline_bytes = bound * sizeof(TimelineEvent);
  EXPECT_LE(bounded.max_held, sizeof(StreamRecord) + timeline_bytes + 2 * 4 * kEvents + 4096);
  EXPECT_GT(whole.max_held, 5 * bounded.max_held);
  std::printf("held at %d events: %zu bytes whole (%.1f B/event), %zu bounded (%.1f B/event past the timeline)\n",
              kEvents, whole.max_held, static_cast<double>(whole.max_held) / kEvents, bounded.max_held,
              static_cast<double>(bounded.max_held - timeline_bytes - sizeof(StreamRecord)) / (kEvents - bound));
}

TEST(StreamBounds, PastTheTailBoundCountsStayExactAndTheRecordSaysSo) {
  // A few gaps kept, the rest counted: the same path as kMaxTailGaps.
  StreamRecord r;
  r.request_end_ns = kT0;
  for (int i = 0; i < 3; ++i) r.timeline.push_back({.ts_ns = kT0 + (i + 1) * kMs, .kind = protocol::EventKind::content});
  r.tail.events = r.tail.content_events = 10;
  r.tail.first_token_ns = kT0 + 4 * kMs;
  r.tail.gaps = {kMs, kMs};  // 3 of the tail's times kept
  r.tail.max_gap_ns = 50 * kMs;
  r.tail.last_token_ns = kT0 + 100 * kMs;
  r.last_event_ns = r.tail.last_token_ns;
  r.metrics = record_metrics(r, std::nullopt, PipelineConfig{});
  EXPECT_TRUE(r.metrics.itl_truncated);
  EXPECT_EQ(r.metrics.content_events, 13u);
  EXPECT_EQ(r.metrics.tokens, 13u);
  EXPECT_EQ(r.metrics.events, 13u);
  EXPECT_EQ(r.metrics.longest_pause_ns, 50 * kMs);
  ASSERT_TRUE(r.metrics.tokens_per_s);
  EXPECT_DOUBLE_EQ(*r.metrics.tokens_per_s, 12.0 / 0.099);
}

// ---- the budget of all streams in flight ---------------------------------------

struct PipelineRun {
  std::vector<StreamRecord> records;
  PipelineConfig config;
  std::unique_ptr<Pipeline> pipeline;
  explicit PipelineRun(std::size_t budget, std::size_t timeline) {
    config.max_live_stream_bytes = budget;
    config.max_timeline_events = timeline;
    pipeline = std::make_unique<Pipeline>(config, [this](StreamRecord&& r) { records.push_back(std::move(r)); });
  }
  void feed(const std::vector<std::uint8_t>& rec) { pipeline->on_record(rec); }
};

const std::string kRequestBody = R"({"model":"m","stream":true})";
const std::string kRequest = "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: " +
                             std::to_string(kRequestBody.size()) + "\r\n\r\n" + kRequestBody;
const std::string kHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

TEST(StreamBounds, OverTheBudgetTheLargestStreamsEndEarlyWithOneRecordEach) {
  // Four streams of 2000 events with 1000 kept whole (~100 kB each): a
  // 300 kB budget holds three.
  PipelineRun run(300'000, 1000);
  std::vector<testing::ConnBuilder> conns;
  for (int c = 0; c < 4; ++c) conns.emplace_back(0x1000 + c, 100, 8000, 30000 + c);
  for (auto& c : conns) {
    run.feed(c.recv(kT0, kRequest));
    run.feed(c.send(kT0 + kMs, kHead));
  }
  for (int i = 0; i < 2000; ++i) {
    for (auto& c : conns) run.feed(c.send(kT0 + (2 + i) * kMs, testing::chunked(testing::openai_chunk("t"))));
  }
  const PipelineCounters& counters = run.pipeline->counters();
  EXPECT_LE(counters.live_stream_bytes, run.config.max_live_stream_bytes);
  EXPECT_GE(counters.streams_evicted_memory, 1u);
  // Events after an eviction (the rest of an evicted response) begin nothing.
  for (auto& c : conns) {
    run.feed(c.send(kT0 + 3000 * kMs, testing::chunked("data: [DONE]\n\n")));
    run.feed(c.send(kT0 + 3001 * kMs, "0\r\n\r\n"));
  }
  run.pipeline->flush(kT0 + 4000 * kMs);
  ASSERT_EQ(run.records.size(), 4u) << "each stream leaves exactly one record";
  std::set<std::string> ids;
  std::size_t evicted = 0;
  for (const StreamRecord& r : run.records) {
    ids.insert(stream_id(r));
    if (r.end != StreamEnd::evicted_memory) continue;
    ++evicted;
    EXPECT_GT(r.metrics.events, 0u);
    EXPECT_LE(r.timeline.size(), 1000u);
  }
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(evicted, counters.streams_evicted_memory);
  EXPECT_EQ(to_string(StreamEnd::evicted_memory), "evicted_memory");
  EXPECT_EQ(counters.live_stream_bytes, 0u);
}

}  // namespace
}  // namespace infertap::core
