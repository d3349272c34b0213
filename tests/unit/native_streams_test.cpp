// The recorded streams of the servers' own APIs (tests/support/native_streams.h)
// replayed through the whole pipeline as a server sends them: one event per
// send, several coalesced into one send, each split across two sends, and
// with keep-alive lines or an error mid-stream. Every record has the stream's
// dialect and framing, its token events timed by the send that carried their
// last byte, the stream's own token count and finish reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/pipeline.h"
#include "daemon/config.h"
#include "support/event_builder.h"
#include "support/native_streams.h"

namespace infertap {
namespace {

using core::StreamRecord;
using testing::ConnBuilder;
using testing::Format;
using testing::RecordedStream;
using testing::Variant;
using testing::chunked;

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kT0 = 1'000'000'000'000ull;

protocol::DeclaredFormats acme_formats() {
  std::string error;
  const auto config = daemon::parse_config(testing::kAcmeFormatYaml, &error);
  EXPECT_TRUE(config) << error;
  return config ? config->pipeline.formats : protocol::DeclaredFormats{};
}

std::string request(const RecordedStream& s) {
  return "POST " + s.path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(s.request_body.size()) + "\r\n\r\n" + s.request_body;
}

struct Mode {
  const char* name;
  std::size_t per_send;  // events coalesced into one send
  bool split;            // each send's bytes go out in two sends, 1 ms apart
};

struct Replay {
  std::vector<StreamRecord> records;
  std::vector<std::uint64_t> done_ns;  // per wire item: when its last byte was sent
};

// Serves `s` on one connection: request read at kT0, head at +1 ms, wire
// item i produced at +20 ms + 10 ms * i, sent per `mode`.
Replay replay(const RecordedStream& s, const Mode& mode, bool client_side = false) {
  Replay out;
  core::PipelineConfig config;
  config.formats = acme_formats();
  core::Pipeline pipeline(config, [&](StreamRecord&& r) { out.records.push_back(std::move(r)); });
  ConnBuilder c(0xE1, 100, client_side ? 40000 : 8000, client_side ? 8000 : 40000);
  const auto to_server = [&](std::uint64_t t, const std::string& b) { pipeline.on_record(client_side ? c.send(t, b) : c.recv(t, b)); };
  const auto to_client = [&](std::uint64_t t, const std::string& b) { pipeline.on_record(client_side ? c.recv(t, b) : c.send(t, b)); };
  to_server(kT0, request(s));
  to_client(kT0 + 1 * kMs, s.response_head);
  out.done_ns.resize(s.wire.size());
  for (std::size_t first = 0; first < s.wire.size(); first += mode.per_send) {
    const std::size_t last = std::min(first + mode.per_send, s.wire.size()) - 1;
    std::string bytes;
    std::vector<std::size_t> ends;  // where each item's chunk data ends in `bytes`
    for (std::size_t i = first; i <= last; ++i) {
      bytes += chunked(s.wire[i]);
      // The byte that completes it: an SSE blank line ends at its CR (a CRLF's LF is no part of it).
      const bool crlf_blank_line = s.wire[i].ends_with("\r\n\r\n");
      ends.push_back(bytes.size() - 2 - (crlf_blank_line ? 1 : 0));
    }
    const std::uint64_t t = kT0 + 20 * kMs + 10 * kMs * last;
    const std::size_t half = mode.split ? bytes.size() / 2 : 0;
    if (mode.split) {
      to_client(t - 1 * kMs, bytes.substr(0, half));
      bytes = bytes.substr(half);
    }
    to_client(t, bytes);
    for (std::size_t i = first; i <= last; ++i) out.done_ns[i] = ends[i - first] <= half ? t - 1 * kMs : t;
  }
  to_client(kT0 + 20 * kMs + 10 * kMs * s.wire.size(), "0\r\n\r\n");
  return out;
}

std::string label(const RecordedStream& s, const Mode& m, Variant v) {
  return s.name + "/" + m.name + "/variant " + std::to_string(static_cast<int>(v));
}

void expect_record(const RecordedStream& s, const Replay& r, const std::string& what) {
  ASSERT_EQ(r.records.size(), 1u) << what;
  const StreamRecord& rec = r.records[0];
  EXPECT_EQ(protocol::to_string(rec.dialect), s.dialect) << what;
  EXPECT_EQ(rec.event_framing == protocol::EventFraming::ndjson ? "ndjson" : "sse", s.framing) << what;
  EXPECT_EQ(rec.declared != nullptr, s.dialect == "declared") << what;
  const auto count = [](const std::vector<bool>& v) { return static_cast<std::uint32_t>(std::count(v.begin(), v.end(), true)); };
  EXPECT_EQ(rec.metrics.events, count(s.event)) << what;
  EXPECT_EQ(rec.metrics.content_events, count(s.token)) << what;
  if (s.usage_tokens) {
    EXPECT_EQ(rec.metrics.token_source, core::TokenSource::usage) << what;
    EXPECT_EQ(rec.metrics.tokens, *s.usage_tokens) << what;
  } else {
    EXPECT_EQ(rec.metrics.token_source, core::TokenSource::events) << what;
    EXPECT_EQ(rec.metrics.tokens, count(s.token)) << what;
  }
  EXPECT_EQ(rec.finish_reason, s.finish_reason) << what;
  EXPECT_EQ(!rec.error_type.empty(), s.error) << what;
  EXPECT_EQ(rec.end, core::StreamEnd::complete) << what;
  EXPECT_EQ(rec.truncated_events, 0u) << what;
  // Token events are timed by the send that carried their last byte.
  std::vector<std::uint64_t> want, got;
  for (std::size_t i = 0; i < s.wire.size(); ++i)
    if (s.token[i]) want.push_back(r.done_ns[i]);
  for (const core::TimelineEvent& e : rec.timeline)
    if (e.kind == protocol::EventKind::content) got.push_back(e.ts_ns);
  EXPECT_EQ(got, want) << what << " (token event times)";
  ASSERT_TRUE(rec.metrics.ttft_ns) << what;
  EXPECT_EQ(*rec.metrics.ttft_ns, want.front() - kT0) << what;
}

const Mode kModes[] = {{"one_per_send", 1, false}, {"coalesced_3", 3, false}, {"split", 1, true},
                       {"coalesced_and_split", 4, true}};

TEST(NativeStreams, EachFormatIsReadInEverySendPattern) {
  for (Format f : testing::kAllFormats) {
    for (Variant v : {Variant::plain, Variant::keepalive, Variant::error_mid}) {
      const RecordedStream s = testing::recorded_stream(f, 12, v);
      for (const Mode& m : kModes) expect_record(s, replay(s, m), label(s, m, v));
    }
  }
}

TEST(NativeStreams, TheClientSideReadsThemToo) {
  for (Format f : testing::kAllFormats) {
    const RecordedStream s = testing::recorded_stream(f, 8);
    const Replay r = replay(s, kModes[0], true);
    expect_record(s, r, s.name + "/client");
    if (!r.records.empty()) EXPECT_EQ(r.records[0].role, core::Role::client) << s.name;
  }
}

// Ollama's final object with the conversation's token ids past the capture
// window: its counts are lost, the record counts its token events instead.
TEST(NativeStreams, AFinalObjectPastTheCaptureWindowFallsBackToEvents) {
  RecordedStream s = testing::recorded_stream(Format::ollama_generate, 6);
  std::string context = "[1";
  for (int i = 2; i < 2000; ++i) context += "," + std::to_string(i);
  const std::size_t at = s.wire.back().find("[1,2,3,4,5]");
  ASSERT_NE(at, std::string::npos);
  s.wire.back().replace(at, 11, context + "]");
  const Replay r = replay(s, kModes[0]);
  ASSERT_EQ(r.records.size(), 1u);
  const StreamRecord& rec = r.records[0];
  EXPECT_EQ(rec.truncated_events, 1u);
  EXPECT_EQ(rec.metrics.content_events, 6u);
  EXPECT_EQ(rec.end, core::StreamEnd::complete) << "the done flag is in the captured head";
  EXPECT_EQ(rec.finish_reason, "stop");
  EXPECT_EQ(rec.metrics.token_source, core::TokenSource::events);
  EXPECT_TRUE(rec.metrics.counts_lower_bound);
}

// A streamed application/json body is read as JSON lines only when its first
// bytes are; a JSON document streamed in chunks is no stream.
TEST(NativeStreams, AStreamedJsonDocumentIsNoStream) {
  RecordedStream s = testing::recorded_stream(Format::ollama_chat, 4);
  s.response_head = testing::native_detail::head("application/json");
  EXPECT_EQ(replay(s, kModes[0]).records.size(), 1u) << "JSON lines under application/json";
  RecordedStream doc = s;
  doc.wire = {"{\n  \"models\": [\n", "    {\"name\": \"llama3.2\"}\n", "  ]\n}\n"};
  doc.token = doc.event = {false, false, false};
  EXPECT_TRUE(replay(doc, kModes[0]).records.empty()) << "a pretty-printed document";
  doc.wire = {R"({"models":[{"name":"llama3.2"},{"name":"qwen3"}]})" "\n"};
  doc.token = doc.event = {false};
  EXPECT_TRUE(replay(doc, kModes[0]).records.empty()) << "one line, then the end of the body";
  // Gemini without alt=sse: one JSON array streamed element by element (not
  // read as a stream: docs/metrics.md#token-events-per-dialect says why).
  RecordedStream array = testing::recorded_stream(Format::gemini, 4);
  array.response_head = testing::native_detail::head("application/json");
  for (std::size_t i = 0; i < array.wire.size(); ++i) {
    std::string& w = array.wire[i];
    w = (i == 0 ? "[" : ",\r\n") + w.substr(6, w.size() - 10) + (i + 1 == array.wire.size() ? "]" : "");
  }
  EXPECT_TRUE(replay(array, kModes[0]).records.empty()) << "a JSON array";
}

// Joined mid-way: a chunked JSON-lines stream is read from its next object.
TEST(NativeStreams, AnOllamaStreamJoinedMidwayIsFollowed) {
  const RecordedStream s = testing::recorded_stream(Format::ollama_chat, 10);
  std::vector<StreamRecord> records;
  core::Pipeline pipeline(core::PipelineConfig{}, [&](StreamRecord&& r) { records.push_back(std::move(r)); });
  ConnBuilder c(0xE2, 100, 8000, 40000);
  for (std::size_t i = 4; i < s.wire.size(); ++i) pipeline.on_record(c.send(kT0 + i * 10 * kMs, chunked(s.wire[i])));
  pipeline.on_record(c.send(kT0 + 200 * kMs, "0\r\n\r\n"));
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].joined_midstream);
  EXPECT_EQ(records[0].dialect, protocol::Dialect::ollama);
  EXPECT_EQ(records[0].event_framing, protocol::EventFraming::ndjson);
  EXPECT_EQ(records[0].metrics.content_events, 6u);
  EXPECT_EQ(records[0].metrics.tokens, 10u) << "the final object's eval_count";
  EXPECT_EQ(records[0].end, core::StreamEnd::complete);
}

}  // namespace
}  // namespace infertap
