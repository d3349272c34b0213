// The pipeline from synthetic kernel records with a fake clock: role detection,
// request/response pairing, per-event timestamps, metrics, partial records,
// holes and losses, muting.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/pipeline.h"
#include "support/event_builder.h"

namespace infertap {
namespace {

using core::StreamEnd;
using core::StreamRecord;
using testing::ConnBuilder;
using testing::chunked;
using testing::openai_chunk;

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kT0 = 1'000'000'000'000ull;  // fake monotonic origin

const std::string kRequestBody = R"({"model":"llama-test","stream":true,"messages":[{"role":"user","content":"hi"}]})";

std::string request() {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(kRequestBody.size()) + "\r\n\r\n" + kRequestBody;
}

const std::string kStreamHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

struct Harness {
  std::vector<StreamRecord> records;
  std::vector<std::uint64_t> muted;
  core::PipelineConfig config;
  core::Pipeline pipeline{config, [this](StreamRecord&& r) { records.push_back(std::move(r)); },
                          [this](std::uint64_t s, std::uint32_t) { muted.push_back(s); }};
  void feed(const std::vector<std::uint8_t>& rec) { pipeline.on_record(rec); }
};

// Server side of a chunked OpenAI stream: request read at T0, head at +5 ms,
// role event, `n` content events every `itl` from +50 ms, usage, [DONE].
void serve_stream(Harness& h, ConnBuilder& c, int n, std::uint64_t itl, std::uint64_t t0 = kT0) {
  h.feed(c.recv(t0, request()));
  h.feed(c.send(t0 + 5 * kMs, kStreamHead));
  h.feed(c.send(t0 + 6 * kMs,
                chunked(R"(data: {"id":"chatcmpl-test","object":"chat.completion.chunk","model":"llama-test","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})"
                        "\n\n")));
  for (int i = 0; i < n; ++i) {
    h.feed(c.send(t0 + 50 * kMs + static_cast<std::uint64_t>(i) * itl, chunked(openai_chunk("tok"))));
  }
  const std::uint64_t end = t0 + 50 * kMs + static_cast<std::uint64_t>(n) * itl;
  h.feed(c.send(end, chunked(R"(data: {"id":"chatcmpl-test","object":"chat.completion.chunk","model":"llama-test","choices":[],"usage":{"prompt_tokens":9,"completion_tokens)"
                             "\":" + std::to_string(n) + R"(,"total_tokens":99}})" + "\n\n")));
  h.feed(c.send(end + 1 * kMs, chunked("data: [DONE]\n\n")));
  h.feed(c.send(end + 2 * kMs, "0\r\n\r\n"));
}

TEST(Pipeline, ServerStreamRecordHasRequestMetricsAndEmitVantage) {
  Harness h;
  ConnBuilder c(0xA1, 100, 8000, 40000);
  serve_stream(h, c, 10, 20 * kMs);
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_EQ(r.role, core::Role::server);
  EXPECT_EQ(core::vantage_of(r.role), core::Vantage::emit);
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/chat/completions");
  EXPECT_EQ(r.model, "llama-test");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.framing, protocol::BodyFraming::chunked);
  EXPECT_EQ(r.response_id, "chatcmpl-test");
  EXPECT_EQ(r.end, StreamEnd::complete);
  EXPECT_EQ(r.request_end_ns, kT0);
  EXPECT_EQ(r.first_token_ns, kT0 + 50 * kMs);
  ASSERT_TRUE(r.metrics.ttft_ns);
  EXPECT_EQ(*r.metrics.ttft_ns, 50 * kMs);
  EXPECT_EQ(r.metrics.content_events, 10u);
  EXPECT_EQ(r.metrics.events, 13u);  // role + 10 content + usage + [DONE]
  EXPECT_EQ(r.metrics.tokens, 10u);
  EXPECT_EQ(r.metrics.token_source, core::TokenSource::usage);
  ASSERT_TRUE(r.metrics.itl_p50_ns);
  EXPECT_EQ(*r.metrics.itl_p50_ns, 20 * kMs);
  EXPECT_EQ(*r.metrics.itl_max_ns, 20 * kMs);
  ASSERT_TRUE(r.metrics.tokens_per_s);
  EXPECT_NEAR(*r.metrics.tokens_per_s, 9.0 / 0.180, 1e-6);  // 9 tokens after the first over 180 ms
  EXPECT_TRUE(r.metrics.stalls.empty());
  EXPECT_EQ(r.truncated_events, 0u);
  EXPECT_EQ(r.bytes_lost, 0u);
}

TEST(Pipeline, ClientStreamUsesReadTimesAndRequestSendAsOrigin) {
  Harness h;
  ConnBuilder c(0xB2, 200, 40000, 8000);
  h.feed(c.send(kT0, request()));
  h.feed(c.recv(kT0 + 5 * kMs, kStreamHead));
  for (int i = 0; i < 4; ++i) h.feed(c.recv(kT0 + (30 + 10 * i) * kMs, chunked(openai_chunk("x"))));
  h.feed(c.recv(kT0 + 80 * kMs, chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_EQ(r.role, core::Role::client);
  EXPECT_EQ(core::vantage_of(r.role), core::Vantage::read);
  EXPECT_EQ(*r.metrics.ttft_ns, 30 * kMs);
  EXPECT_EQ(r.metrics.token_source, core::TokenSource::events);
  EXPECT_EQ(r.metrics.tokens, 4u);
  EXPECT_EQ(*r.metrics.e2e_ns, 80 * kMs);
}

TEST(Pipeline, EventSplitAcrossSendsIsTimedByItsLastByte) {
  const std::string body = chunked(openai_chunk("split"));
  for (std::size_t cut = 1; cut < body.size(); ++cut) {
    Harness h;
    ConnBuilder c(0xC3, 100, 8000, 40000);
    h.feed(c.recv(kT0, request()));
    h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
    h.feed(c.send(kT0 + 10 * kMs, body.substr(0, cut)));
    h.feed(c.send(kT0 + 20 * kMs, body.substr(cut)));
    h.feed(c.send(kT0 + 30 * kMs, "0\r\n\r\n"));
    ASSERT_EQ(h.records.size(), 1u) << "cut " << cut;
    const StreamRecord& r = h.records[0];
    ASSERT_EQ(r.timeline.size(), 1u) << "cut " << cut;
    EXPECT_EQ(r.timeline[0].kind, protocol::EventKind::content) << "cut " << cut;
    // The event's blank line is complete only with the second piece, unless the
    // cut falls after it (only the chunk's CRLF left for the second piece).
    const bool complete_in_first = cut >= body.size() - 2;
    EXPECT_EQ(r.timeline[0].ts_ns, complete_in_first ? kT0 + 10 * kMs : kT0 + 20 * kMs) << "cut " << cut;
    EXPECT_EQ(r.end, StreamEnd::complete);
  }
}

TEST(Pipeline, CoalescedEventsShareOneSyscallAndReportTheBatch) {
  Harness h;
  ConnBuilder c(0xD4, 100, 8000, 40000);
  c.set_caps(ITAP_HEAD_MAX, ITAP_TAIL_MAX);  // the whole burst is captured
  h.feed(c.recv(kT0, request()));
  h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
  std::string burst;
  for (int i = 0; i < 5; ++i) burst += openai_chunk("b");
  h.feed(c.send(kT0 + 400 * kMs, chunked(burst)));
  h.feed(c.send(kT0 + 401 * kMs, "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  ASSERT_EQ(r.timeline.size(), 5u);
  for (const auto& e : r.timeline) {
    EXPECT_EQ(e.ts_ns, kT0 + 400 * kMs);
    EXPECT_EQ(e.events_in_syscall, 5u);
  }
  EXPECT_EQ(*r.metrics.itl_max_ns, 0u);
}

TEST(Pipeline, BurstLongerThanTheCaptureKeepsItsEdgesAndCountsTheHole) {
  Harness h;
  ConnBuilder c(0xD5, 100, 8000, 40000);
  c.set_caps(512, 128);
  h.feed(c.recv(kT0, request()));
  h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
  std::string burst;
  for (int i = 0; i < 10; ++i) burst += openai_chunk("b");
  h.feed(c.send(kT0 + 400 * kMs, chunked(burst)));
  h.feed(c.send(kT0 + 420 * kMs, chunked(openai_chunk("after"))));
  h.feed(c.send(kT0 + 421 * kMs, "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_GT(r.bytes_not_captured, burst.size() - 512 - 128 - 16);
  EXPECT_GE(r.truncated_events, 1u);
  // Events wholly inside the head are seen, and the stream goes on after the hole.
  ASSERT_GE(r.timeline.size(), 3u);
  EXPECT_EQ(r.timeline.front().ts_ns, kT0 + 400 * kMs);
  EXPECT_EQ(r.timeline.back().ts_ns, kT0 + 420 * kMs);
  EXPECT_EQ(r.timeline.back().kind, protocol::EventKind::content);
  EXPECT_EQ(r.end, StreamEnd::complete);
  // The record keeps where the uncopied run starts in the body and when its
  // send returned: a path places the events inside it by position.
  ASSERT_EQ(r.body_holes.size(), 1u);
  const std::size_t size_line = chunked(burst).size() - burst.size() - 2;  // "<hex>\r\n" before the data
  EXPECT_EQ(r.body_holes[0].offset, 512 - size_line);
  EXPECT_EQ(r.body_holes[0].bytes, r.bytes_not_captured);
  EXPECT_EQ(r.body_holes[0].ts, kT0 + 400 * kMs);
}

TEST(Pipeline, LongEventBeyondCaptureIsTruncatedButStillATokenEvent) {
  Harness h;
  ConnBuilder c(0xE5, 100, 8000, 40000);
  c.set_caps(512, 128);
  h.feed(c.recv(kT0, request()));
  h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
  h.feed(c.send(kT0 + 10 * kMs, chunked(openai_chunk(std::string(3000, 'x')))));
  h.feed(c.send(kT0 + 20 * kMs, chunked(openai_chunk("short"))));
  h.feed(c.send(kT0 + 30 * kMs, "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  ASSERT_EQ(r.timeline.size(), 2u);
  EXPECT_TRUE(r.timeline[0].truncated);
  EXPECT_EQ(r.timeline[0].kind, protocol::EventKind::content);
  EXPECT_FALSE(r.timeline[1].truncated);
  EXPECT_EQ(r.truncated_events, 1u);
  EXPECT_GT(r.bytes_not_captured, 2000u);
  EXPECT_EQ(r.metrics.content_events, 2u);
}

TEST(Pipeline, LostEventsBecomeAnExactHoleAndLaterEventsStillCount) {
  Harness h;
  ConnBuilder c(0xF6, 100, 8000, 40000);
  h.feed(c.recv(kT0, request()));
  h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
  h.feed(c.send(kT0 + 10 * kMs, chunked(openai_chunk("a"))));
  const std::string lost = chunked(openai_chunk("lost"));
  c.lose(ITAP_DIR_SEND, static_cast<std::uint32_t>(lost.size()));
  h.feed(c.send(kT0 + 30 * kMs, chunked(openai_chunk("c"))));
  h.feed(c.send(kT0 + 40 * kMs, "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_EQ(r.bytes_lost, lost.size());
  EXPECT_EQ(h.pipeline.counters().bytes_lost, lost.size());
  EXPECT_EQ(r.metrics.content_events, 2u);
  EXPECT_EQ(r.end, StreamEnd::complete);
}

TEST(Pipeline, NonStreamingResponseYieldsNoRecord) {
  Harness h;
  ConnBuilder c(0x17, 100, 8000, 40000);
  h.feed(c.recv(kT0, request()));
  const std::string body = R"({"id":"x","choices":[{"message":{"content":"hello"}}]})";
  h.feed(c.send(kT0 + 5 * kMs, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                                   std::to_string(body.size()) + "\r\n\r\n" + body));
  h.pipeline.flush(kT0 + 10 * kMs);
  EXPECT_TRUE(h.records.empty());
  EXPECT_EQ(h.pipeline.counters().non_stream_responses, 1u);
}

TEST(Pipeline, BinaryTrafficIsMutedAndYieldsNothing) {
  Harness h;
  ConnBuilder c(0x28, 100, 5432, 40000);
  h.feed(c.send(kT0, std::string("\x00\x00\x00\x08\x04\xd2\x16\x2f", 8)));
  h.feed(c.recv(kT0 + kMs, std::string("\x4e\x00\x00\x00", 4)));
  h.pipeline.flush(kT0 + 10 * kMs);
  EXPECT_TRUE(h.records.empty());
  ASSERT_EQ(h.muted.size(), 1u);
  EXPECT_EQ(h.muted[0], 0x28u);
}

TEST(Pipeline, StreamJoinedMidwayIsMarkedAndHasNoTtft) {
  Harness h;
  ConnBuilder c(0x39, 100, 8000, 40000);
  for (int i = 0; i < 3; ++i) h.feed(c.send(kT0 + static_cast<std::uint64_t>(i) * 20 * kMs, chunked(openai_chunk("m"))));
  h.feed(c.send(kT0 + 60 * kMs, "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_TRUE(r.joined_midstream);
  EXPECT_EQ(r.role, core::Role::server);
  EXPECT_FALSE(r.metrics.ttft_ns.has_value());
  EXPECT_EQ(r.metrics.content_events, 3u);
  EXPECT_EQ(*r.metrics.itl_p50_ns, 20 * kMs);
}

TEST(Pipeline, ConnectionClosedMidStreamGivesPartialRecord) {
  Harness h;
  ConnBuilder c(0x4A, 100, 8000, 40000);
  h.feed(c.recv(kT0, request()));
  h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
  h.feed(c.send(kT0 + 10 * kMs, chunked(openai_chunk("a"))));
  h.feed(c.state(kT0 + 50 * kMs, 1, 7));  // ESTABLISHED -> CLOSE
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].end, StreamEnd::connection_closed);
  EXPECT_EQ(h.records[0].metrics.content_events, 1u);
  EXPECT_EQ(h.pipeline.connection_count(), 0u);
}

TEST(Pipeline, CloseDelimitedStreamEndsWhenServerCloses) {
  Harness h;
  ConnBuilder c(0x5B, 100, 8000, 40000);
  h.feed(c.recv(kT0, request()));
  h.feed(c.send(kT0 + 1 * kMs, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"));
  h.feed(c.send(kT0 + 10 * kMs, openai_chunk("a")));
  h.feed(c.send(kT0 + 20 * kMs, openai_chunk("b")));
  EXPECT_TRUE(h.records.empty());
  h.feed(c.state(kT0 + 21 * kMs, 1, 4));  // ESTABLISHED -> FIN_WAIT1: close()
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].end, StreamEnd::complete);
  EXPECT_EQ(h.records[0].framing, protocol::BodyFraming::until_close);
  EXPECT_EQ(h.records[0].metrics.content_events, 2u);
}

TEST(Pipeline, ClientSeesCloseDelimitedEndAtEof) {
  Harness h;
  ConnBuilder c(0x5C, 200, 40000, 8000);
  h.feed(c.send(kT0, request()));
  h.feed(c.recv(kT0 + 1 * kMs, "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + openai_chunk("a")));
  h.feed(c.recv(kT0 + 20 * kMs, openai_chunk("b")));
  h.feed(c.eof(kT0 + 21 * kMs));
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].end, StreamEnd::complete);
  EXPECT_EQ(h.records[0].metrics.content_events, 2u);
}

TEST(Pipeline, GapFarAboveTheMedianIsAStall) {
  Harness h;
  ConnBuilder c(0x6C, 100, 8000, 40000);
  h.feed(c.recv(kT0, request()));
  h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
  std::uint64_t t = kT0 + 50 * kMs;
  for (int i = 0; i < 20; ++i) {
    t += (i == 10 ? 300 : 20) * kMs;
    h.feed(c.send(t, chunked(openai_chunk("s"))));
  }
  h.feed(c.send(t + kMs, "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  const auto& m = h.records[0].metrics;
  ASSERT_EQ(m.stalls.size(), 1u);
  EXPECT_EQ(m.stalls[0].gap_ns, 300 * kMs);
  EXPECT_EQ(m.stalls[0].after_event, 9u);
  EXPECT_EQ(*m.longest_pause_ns, 300 * kMs);
  EXPECT_EQ(m.stall_threshold_ns, 100 * kMs);  // floor beats 4 x 20 ms
}

TEST(Pipeline, KeepAliveConnectionCarriesTwoStreams) {
  Harness h;
  ConnBuilder c(0x7D, 100, 8000, 40000);
  serve_stream(h, c, 3, 10 * kMs);
  serve_stream(h, c, 4, 10 * kMs, kT0 + 1000 * kMs);
  ASSERT_EQ(h.records.size(), 2u);
  EXPECT_EQ(h.records[0].stream_seq, 0u);
  EXPECT_EQ(h.records[1].stream_seq, 1u);
  EXPECT_EQ(h.records[0].metrics.content_events, 3u);
  EXPECT_EQ(h.records[1].metrics.content_events, 4u);
  EXPECT_EQ(*h.records[1].metrics.ttft_ns, 50 * kMs);
  EXPECT_EQ(h.records[0].conn.generation, h.records[1].conn.generation);
}

TEST(Pipeline, AgentStopFlushesStreamsInFlight) {
  Harness h;
  ConnBuilder c(0x8E, 100, 8000, 40000);
  h.feed(c.recv(kT0, request()));
  h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
  h.feed(c.send(kT0 + 10 * kMs, chunked(openai_chunk("a"))));
  h.pipeline.flush(kT0 + 20 * kMs);
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].end, StreamEnd::agent_stopped);
}

TEST(Pipeline, IdleStreamExpiresWithPartialRecord) {
  Harness h;
  ConnBuilder c(0x9F, 100, 8000, 40000);
  h.feed(c.recv(kT0, request()));
  h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
  h.feed(c.send(kT0 + 10 * kMs, chunked(openai_chunk("a"))));
  h.pipeline.expire(kT0 + 10 * kMs + h.config.stream_idle_timeout_ns / 2);
  EXPECT_TRUE(h.records.empty());
  h.pipeline.expire(kT0 + 20 * kMs + h.config.stream_idle_timeout_ns);
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].end, StreamEnd::idle_timeout);
}

TEST(Pipeline, ReusedSocketAddressStartsANewGeneration) {
  Harness h;
  ConnBuilder first(0xAA, 100, 8000, 40000);
  h.feed(first.recv(kT0, request()));
  h.feed(first.send(kT0 + 1 * kMs, kStreamHead));
  h.feed(first.send(kT0 + 10 * kMs, chunked(openai_chunk("a"))));
  // Same kernel address, new socket (its close was never seen).
  ConnBuilder second(0xAA, 100, 8000, 40001);
  serve_stream(h, second, 2, 10 * kMs, kT0 + 100 * kMs);
  ASSERT_EQ(h.records.size(), 2u);
  EXPECT_EQ(h.records[0].end, StreamEnd::connection_closed);
  EXPECT_EQ(h.records[1].end, StreamEnd::complete);
  EXPECT_NE(h.records[0].conn.generation, h.records[1].conn.generation);
  EXPECT_EQ(h.records[1].conn.remote.port, 40001);
}

// The address is reused and the kernel's entry for it outlived the old socket
// (its close was lost): the events carry no mark of a new socket, but their
// sequence numbers are another connection's. No gigabytes "lost", no parse
// errors: the old connection ends and the new one is read from its start.
TEST(Pipeline, ASequenceThatDoesNotContinueTheStreamIsANewConnection) {
  Harness h;
  ConnBuilder first(0xAB, 100, 8000, 40000);
  h.feed(first.recv(kT0, request()));
  h.feed(first.send(kT0 + 1 * kMs, kStreamHead));
  h.feed(first.send(kT0 + 10 * kMs, chunked(openai_chunk("a"))));
  ConnBuilder second(0xAB, 100, 8000, 40001);
  second.as_known_socket();
  second.start_at(0x90000000u, 0x30000000u);
  serve_stream(h, second, 3, 10 * kMs, kT0 + 100 * kMs);
  ASSERT_EQ(h.records.size(), 2u);
  EXPECT_EQ(h.records[0].end, StreamEnd::connection_closed);
  EXPECT_EQ(h.records[1].end, StreamEnd::complete);
  EXPECT_EQ(h.records[1].path, "/v1/chat/completions");
  EXPECT_EQ(h.records[1].metrics.content_events, 3u);
  EXPECT_EQ(h.records[1].parse_errors, 0u);
  EXPECT_EQ(h.pipeline.counters().bytes_lost, 0u);
  EXPECT_EQ(h.pipeline.counters().http_parse_errors, 0u) << "the old stream was cut, not malformed";
  EXPECT_EQ(h.pipeline.counters().sockets_reused, 1u);
}

// A unix connection: both ends named by their socket and path, joined by
// socket; each read of EOF is the other end's FIN, and a connection done both
// ways is forgotten in the kernel by its inode (its address may be another
// socket's by then). A send that left the buffer full is counted.
TEST(Pipeline, AUnixConnectionIsNamedJoinedAndForgottenByItsInode) {
  Harness h;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> forgotten;
  h.pipeline.set_forget([&](std::uint64_t s, std::uint32_t ino) { forgotten.emplace_back(s, ino); });
  ConnBuilder server(0xA0, 100, 0, 0), client(0xB0, 200, 0, 0);
  server.as_unix(0xB0, 777, "/run/app.sock");
  client.as_unix(0xA0, 778, "/run/app.sock", /*peer_path=*/true);
  // The client sends the request and shuts its sending down (half-close).
  h.feed(client.send(kT0, request()));
  h.feed(server.recv(kT0 + 10'000, request()));
  h.feed(server.eof(kT0 + 20'000));
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
  h.feed(server.send(kT0 + 1 * kMs, head));
  h.feed(client.recv(kT0 + 1 * kMs + 5'000, head));
  for (int i = 0; i < 5; ++i) {
    const std::uint64_t t = kT0 + 10 * kMs + static_cast<std::uint64_t>(i) * 10 * kMs;
    if (i == 2) server.full_after_next_send(9000);
    h.feed(server.send(t, openai_chunk("tok")));
    h.feed(client.recv(t + 5'000, openai_chunk("tok")));
  }
  h.feed(server.send(kT0 + 70 * kMs, "data: [DONE]\n\n"));
  h.feed(client.recv(kT0 + 70 * kMs + 5'000, "data: [DONE]\n\n"));
  h.feed(client.eof(kT0 + 71 * kMs));  // the server closed
  EXPECT_EQ(h.pipeline.connection_count(), 0u) << "both ends are done both ways";
  EXPECT_EQ(forgotten, (std::vector<std::pair<std::uint64_t, std::uint32_t>>{{0xA0, 777}, {0xB0, 778}}));
  h.pipeline.expire(kT0 + 71 * kMs + h.config.path_settle_ns + kMs);
  ASSERT_EQ(h.records.size(), 2u);
  const StreamRecord& s = h.records[0].role == core::Role::server ? h.records[0] : h.records[1];
  const StreamRecord& c = h.records[0].role == core::Role::server ? h.records[1] : h.records[0];
  EXPECT_EQ(s.role, core::Role::server);
  EXPECT_EQ(c.role, core::Role::client);
  for (const StreamRecord* r : {&s, &c}) {
    EXPECT_EQ(r->conn.transport, core::Transport::unix_stream);
    EXPECT_EQ(r->end, StreamEnd::complete);
    EXPECT_EQ(r->metrics.content_events, 5u);
    EXPECT_FALSE(r->tcp.signals);
  }
  EXPECT_EQ(s.conn.local.to_string(), "unix:/run/app.sock");
  EXPECT_EQ(s.conn.remote.to_string(), "unix:*");
  EXPECT_EQ(c.conn.local.to_string(), "unix:*");
  EXPECT_EQ(c.conn.remote.to_string(), "unix:/run/app.sock");
  EXPECT_EQ(s.conn.inode, 777u);
  EXPECT_EQ(path_view_of(s).peer_stream_id, stream_id(c));
  EXPECT_EQ(path_view_of(c).peer_stream_id, stream_id(s));
  EXPECT_EQ(s.tcp.send_buffer_full, 1u);
  ASSERT_EQ(s.tcp.send_buffer_full_at.size(), 1u);
  EXPECT_EQ(s.tcp.send_buffer_full_at[0].second, 9000u);
  EXPECT_EQ(path_view_of(c).times[2].arrived_ns, s.timeline[2].ts_ns) << "a unix read's arrival is its sender's emit";
}

// Only the server's end traced: the kernel reports the unix socket freed
// (its only close it sees), which ends a close-delimited response whole.
TEST(Pipeline, AFreedUnixSocketEndsItsCloseDelimitedResponse) {
  Harness h;
  ConnBuilder server(0xA1, 100, 0, 0);
  server.as_unix(0xB1, 779, "/run/app.sock");
  h.feed(server.recv(kT0, request()));
  h.feed(server.send(kT0 + 1 * kMs, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"));
  for (int i = 0; i < 3; ++i) h.feed(server.send(kT0 + 10 * kMs + static_cast<std::uint64_t>(i) * kMs, openai_chunk("tok")));
  h.feed(server.state(kT0 + 20 * kMs, 7, ITAP_STATE_DESTROYED));
  EXPECT_EQ(h.pipeline.connection_count(), 0u);
  h.pipeline.expire(kT0 + 20 * kMs + h.config.path_settle_ns + kMs);
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].end, StreamEnd::complete);
  EXPECT_EQ(h.records[0].metrics.content_events, 3u);
}

// A send that ran after its socket closed (racing the peer's reset) finds no
// entry and would look like a stream joined mid-way: it is nothing.
TEST(Pipeline, ACallOnAClosedSocketMakesNoRecord) {
  Harness h;
  std::vector<std::uint64_t> forgotten;
  h.pipeline.set_forget([&](std::uint64_t s, std::uint32_t) { forgotten.push_back(s); });
  ConnBuilder dead(0xAC, 100, 8000, 40000);
  dead.closed_port();
  h.feed(dead.send(kT0, chunked(openai_chunk("late"))));
  h.pipeline.flush(kT0 + kMs);
  EXPECT_TRUE(h.records.empty());
  EXPECT_EQ(forgotten, std::vector<std::uint64_t>{0xAC});
  EXPECT_EQ(h.pipeline.counters().calls_after_close, 1u);
  EXPECT_EQ(h.pipeline.connection_count(), 0u);
}

// After events were dropped, a connection whose socket the kernel no longer
// knows has closed: it ends now; the others go on.
TEST(Pipeline, ReconcilingAfterLossEndsTheConnectionsThatAreGone) {
  Harness h;
  ConnBuilder gone(0xB1, 100, 8000, 40000), alive(0xB2, 100, 8000, 40001);
  for (ConnBuilder* c : {&gone, &alive}) {
    h.feed(c->recv(kT0, request()));
    h.feed(c->send(kT0 + 1 * kMs, kStreamHead));
    h.feed(c->send(kT0 + 10 * kMs, chunked(openai_chunk("a"))));
  }
  h.pipeline.reconcile(kT0 + 20 * kMs, [](std::uint64_t sock) { return sock != 0xB1; });
  h.pipeline.expire(kT0 + 20 * kMs + h.config.path_settle_ns);
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].conn.sock_id, 0xB1u);
  EXPECT_EQ(h.records[0].end, StreamEnd::connection_closed);
  EXPECT_EQ(h.pipeline.counters().closes_recovered, 1u);
  EXPECT_EQ(h.pipeline.connection_count(), 1u);
}

// A client that shut down its sending side: the server's FIN closes its
// socket (TIME_WAIT) while the rest of the response still waits to be read.
// The stream goes on until the read that finds the end, or the socket's
// destruction.
TEST(Pipeline, ASocketClosedWithBytesUnreadIsReadToTheEnd) {
  for (const bool destroyed : {false, true}) {
    Harness h;
    ConnBuilder c(0xB3, 200, 40000, 8000);
    h.feed(c.send(kT0, request()));
    h.feed(c.recv(kT0 + 5 * kMs, kStreamHead + chunked(openai_chunk("a"))));
    auto closed = c.state(kT0 + 6 * kMs, 5, 7);  // FIN_WAIT2 -> CLOSE
    reinterpret_cast<itap_event*>(closed.data())->flags |= ITAP_F_UNREAD;
    h.feed(closed);
    h.feed(c.recv(kT0 + 7 * kMs, chunked(openai_chunk("b")) + chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
    EXPECT_EQ(h.pipeline.connection_count(), 1u);
    if (destroyed) {
      h.feed(c.state(kT0 + 8 * kMs, 7, ITAP_STATE_DESTROYED));
    } else {
      h.feed(c.eof(kT0 + 8 * kMs));
    }
    EXPECT_EQ(h.pipeline.connection_count(), 0u) << (destroyed ? "destroyed" : "EOF");
    h.pipeline.flush(kT0 + 10 * kMs);
    ASSERT_EQ(h.records.size(), 1u);
    EXPECT_EQ(h.records[0].metrics.content_events, 2u);
    EXPECT_EQ(h.records[0].end, StreamEnd::complete);
  }
}

TEST(Pipeline, AnthropicStreamCountsOutputTokensFromUsage) {
  Harness h;
  ConnBuilder c(0xBB, 100, 8000, 40000);
  const std::string body = R"({"model":"claude-test","stream":true,"max_tokens":64})";
  h.feed(c.recv(kT0, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                         "\r\n\r\n" + body));
  h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
  auto ev = [](std::string_view type, std::string_view data) {
    return chunked("event: " + std::string(type) + "\ndata: " + std::string(data) + "\n\n");
  };
  h.feed(c.send(kT0 + 2 * kMs, ev("message_start", R"({"type":"message_start","message":{"id":"msg_1","model":"claude-test","usage":{"input_tokens":5,"output_tokens":1}}})")));
  for (int i = 0; i < 3; ++i) {
    h.feed(c.send(kT0 + (20 + 10 * i) * kMs,
                  ev("content_block_delta", R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}})")));
  }
  h.feed(c.send(kT0 + 60 * kMs, ev("message_delta", R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}})")));
  h.feed(c.send(kT0 + 61 * kMs, ev("message_stop", R"({"type":"message_stop"})")));
  h.feed(c.send(kT0 + 62 * kMs, "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_EQ(r.dialect, protocol::Dialect::anthropic);
  EXPECT_EQ(r.response_id, "msg_1");
  EXPECT_EQ(r.model, "claude-test");
  EXPECT_EQ(r.finish_reason, "end_turn");
  EXPECT_EQ(r.metrics.content_events, 3u);
  EXPECT_EQ(r.metrics.tokens, 7u);
  EXPECT_EQ(r.metrics.token_source, core::TokenSource::usage);
  EXPECT_EQ(*r.metrics.ttft_ns, 20 * kMs);
}

TEST(Pipeline, MalformedRecordsAreCountedNotFatal) {
  Harness h;
  std::vector<std::uint8_t> junk(10, 0xff);
  h.feed(junk);
  ConnBuilder c(0xCC, 100, 8000, 40000);
  auto rec = c.send(kT0, "GET / HTTP/1.1\r\n\r\n");
  rec.resize(rec.size() - 5);  // record shorter than its declared capture
  h.feed(rec);
  EXPECT_EQ(h.pipeline.counters().decode_errors, 2u);
  EXPECT_TRUE(h.records.empty());
}

}  // namespace
}  // namespace infertap

namespace infertap {
namespace {

TEST(Pipeline, ActiveStreamsAreVisibleWhileTheyRun) {
  Harness h;
  ConnBuilder c(0xDD, 100, 8000, 40000);
  h.feed(c.recv(kT0, request()));
  h.feed(c.send(kT0 + 1 * kMs, kStreamHead));
  h.feed(c.send(kT0 + 10 * kMs, chunked(openai_chunk("a"))));
  std::vector<std::string> seen;
  h.pipeline.for_each_active_stream([&](const StreamRecord& r) {
    seen.push_back(r.path);
    EXPECT_EQ(r.timeline.size(), 1u);
    EXPECT_EQ(r.last_event_ns, kT0 + 10 * kMs);
  });
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], "/v1/chat/completions");
  h.feed(c.send(kT0 + 20 * kMs, "0\r\n\r\n"));
  int after = 0;
  h.pipeline.for_each_active_stream([&](const StreamRecord&) { ++after; });
  EXPECT_EQ(after, 0);
}

}  // namespace
}  // namespace infertap

namespace infertap {
namespace {

TEST(Pipeline, ProcessNameIsLookedUpWhenTheFirstEventDidNotCarryIt) {
  std::vector<StreamRecord> records;
  core::Pipeline pipeline(
      core::PipelineConfig{}, [&](StreamRecord&& r) { records.push_back(std::move(r)); }, {}, {},
      [](std::uint32_t pid) { return "looked-up-" + std::to_string(pid); });
  ConnBuilder c(0xEE, 321, 8000, 40000);
  auto first = c.recv(kT0, request());
  std::memset(reinterpret_cast<itap_event*>(first.data())->comm, 0, ITAP_COMM_LEN);
  pipeline.on_record(first);
  pipeline.on_record(c.send(kT0 + kMs, kStreamHead));
  pipeline.on_record(c.send(kT0 + 2 * kMs, chunked(openai_chunk("a"))));
  pipeline.on_record(c.send(kT0 + 3 * kMs, "0\r\n\r\n"));
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].conn.comm, "looked-up-321");
}

// Targeting userspace decides (process names): a refused connection is muted
// on its first event, its events already in flight are dropped without a new
// lookup, and a new socket at the same address is judged afresh.
TEST(Pipeline, RefusedConnectionIsMutedAndItsLaterEventsDropped) {
  Harness h;
  int asked = 0;
  h.pipeline.set_admit([&](core::ConnIdentity& id) {
    ++asked;
    if (id.remote.port == 40000) return false;
    id.k8s_pod = "filled-by-hook";
    return true;
  });
  ConnBuilder refused(0xB1, 100, 8000, 40000);
  serve_stream(h, refused, 3, 10 * kMs);
  EXPECT_EQ(asked, 1);
  ASSERT_EQ(h.muted.size(), 1u);
  EXPECT_EQ(h.muted[0], 0xB1u);
  EXPECT_EQ(h.records.size(), 0u);
  EXPECT_EQ(h.pipeline.connection_count(), 0u);
  EXPECT_EQ(h.pipeline.counters().connections_refused, 1u);
  EXPECT_EQ(h.pipeline.counters().connections_opened, 0u);

  // The address reused by an admitted connection.
  ConnBuilder admitted(0xB1, 100, 8000, 40001);
  serve_stream(h, admitted, 3, 10 * kMs, kT0 + 500 * kMs);
  EXPECT_EQ(asked, 2);
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].conn.k8s_pod, "filled-by-hook");
  EXPECT_EQ(h.records[0].end, StreamEnd::complete);
}

// A full table evicts its least recently active connection and stops
// following it: its later events neither come back as a joined-midstream
// connection nor evict another one in turn.
TEST(Pipeline, EvictedConnectionIsMutedAndStaysOut) {
  std::vector<StreamRecord> records;
  std::vector<std::uint64_t> muted;
  core::PipelineConfig config;
  config.max_connections = 2;
  core::Pipeline pipeline(
      config, [&](StreamRecord&& r) { records.push_back(std::move(r)); }, [&](std::uint64_t s, std::uint32_t) { muted.push_back(s); });
  ConnBuilder a(0xC1, 100, 8000, 40001), b(0xC2, 100, 8000, 40002), c(0xC3, 100, 8000, 40003);
  pipeline.on_record(a.recv(kT0, request()));
  pipeline.on_record(a.send(kT0 + 1 * kMs, kStreamHead));
  pipeline.on_record(b.recv(kT0 + 2 * kMs, request()));
  pipeline.on_record(b.send(kT0 + 3 * kMs, kStreamHead));
  pipeline.on_record(c.recv(kT0 + 4 * kMs, request()));  // table full: a (oldest) goes
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].end, StreamEnd::evicted);
  EXPECT_EQ(records[0].conn.remote.port, 40001);
  EXPECT_EQ(muted, (std::vector<std::uint64_t>{0xC1}));
  // a keeps streaming (events already in flight): dropped, nothing else evicted.
  for (int i = 0; i < 5; ++i) pipeline.on_record(a.send(kT0 + (5 + i) * kMs, chunked(openai_chunk("x"))));
  EXPECT_EQ(records.size(), 1u);
  EXPECT_EQ(pipeline.connection_count(), 2u);
  EXPECT_EQ(pipeline.counters().connections_evicted, 1u);
  EXPECT_EQ(pipeline.counters().connections_opened, 3u);
}

}  // namespace
}  // namespace infertap
