// StreamAssembler from exchange callbacks and piece contexts: a record per
// streamed response, each event placed on the wire by the piece that ended
// it, and the end a stream's own marker proves.
#include "core/stream/assembler.h"

#include <gtest/gtest.h>


namespace infertap::core {
namespace {

constexpr TimestampNs kMs = 1'000'000;

struct Harness {
  ConnIdentity id;
  PipelineConfig config;
  PipelineCounters counters;
  RoleCensus census;
  StreamAssembler a{id, config, counters, census};
  protocol::RequestInfo request;

  void respond(TimestampNs ts) {
    protocol::ResponseInfo r;
    r.status = 200;
    r.event_stream = true;
    r.framing = protocol::BodyFraming::chunked;
    r.head_ns = ts;
    request.method = "POST";
    request.target = "/v1/chat/completions";
    request.end_ns = ts - kMs;
    request.complete = true;
    request.body_head = R"({"model":"m","stream":true})";
    r.request = &request;
    a.on_response(r);
  }
  // One piece at `ts` whose bytes start at stream `position` / TCP `seq`,
  // completing the given events (data, end position).
  void piece(TimestampNs ts, std::uint64_t position, std::uint32_t seq, std::uint32_t length,
             const std::vector<std::pair<std::string, std::uint64_t>>& events) {
    PieceContext ctx;
    ctx.position = position;
    ctx.start_seq = seq;
    ctx.end_seq = seq + length;
    ctx.call_ns = 3000;
    a.begin_piece(ctx);
    for (const auto& [data, end] : events) {
      protocol::StreamEvent e;
      e.data = data;
      e.ts = e.first_byte_ts = ts;
      e.wire_bytes = static_cast<std::uint32_t>(data.size() + 8);
      e.end_position = end;
      a.on_event(e);
    }
    a.end_piece();
  }
};

const std::string kToken = R"({"id":"c1","object":"chat.completion.chunk","choices":[{"delta":{"content":"x"}}]})";

TEST(StreamAssembler, EventsTakeTheirPiecesSequencesAndBatch) {
  Harness h;
  h.a.set_role(Role::server);
  h.respond(10 * kMs);
  h.piece(20 * kMs, 100, 5000, 60, {{kToken, 130}, {kToken, 160}});
  h.piece(30 * kMs, 160, 5060, 30, {{kToken, 190}});
  h.a.on_acked(5060, 31 * kMs);
  h.a.on_response_end(40 * kMs, protocol::ResponseEnd::complete);
  std::vector<StreamRecord> out = h.a.take_finished();
  ASSERT_EQ(out.size(), 1u);
  const StreamRecord& r = out[0];
  EXPECT_EQ(r.path, "/v1/chat/completions");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.timeline.size(), 3u);
  EXPECT_EQ(r.timeline[0].end_seq, 5030u);
  EXPECT_EQ(r.timeline[1].end_seq, 5060u);
  EXPECT_EQ(r.timeline[2].end_seq, 5090u);
  EXPECT_TRUE(r.timeline[0].end_seq_exact);
  EXPECT_EQ(r.timeline[0].events_in_syscall, 2u);
  EXPECT_EQ(r.timeline[2].events_in_syscall, 1u);
  EXPECT_EQ(r.timeline[1].acked_ns, 31 * kMs);
  EXPECT_EQ(r.timeline[2].acked_ns, 0u);
  EXPECT_EQ(r.end, StreamEnd::complete);
  ASSERT_TRUE(r.metrics.ttft_ns);
  EXPECT_EQ(*r.metrics.ttft_ns, 11 * kMs);
  EXPECT_EQ(h.counters.streams_completed, 1u);
}

TEST(StreamAssembler, TheLastPieceMarksItsBatchEvenWhenItEndsTheStream) {
  Harness h;
  h.a.set_role(Role::server);
  h.respond(10 * kMs);
  PieceContext ctx;
  h.a.begin_piece(ctx);
  protocol::StreamEvent e;
  e.data = kToken;
  e.ts = 20 * kMs;
  h.a.on_event(e);
  e.data = "[DONE]";
  h.a.on_event(e);
  h.a.on_response_end(20 * kMs, protocol::ResponseEnd::complete);
  h.a.end_piece();
  std::vector<StreamRecord> out = h.a.take_finished();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].timeline.size(), 2u);
  EXPECT_EQ(out[0].timeline[0].events_in_syscall, 2u);
  EXPECT_EQ(out[0].timeline[1].events_in_syscall, 2u);
}

TEST(StreamAssembler, AStreamThatSentItsEndMarkerIsCompleteWhateverCutIt) {
  Harness h;
  h.a.set_role(Role::client);
  h.respond(10 * kMs);
  protocol::StreamEvent e;
  e.data = kToken;
  e.ts = 20 * kMs;
  h.a.on_event(e);
  e.data = "[DONE]";
  h.a.on_event(e);
  h.a.set_cut_reason(StreamEnd::connection_closed);
  h.a.on_response_end(30 * kMs, protocol::ResponseEnd::cut_short);
  std::vector<StreamRecord> out = h.a.take_finished();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].end, StreamEnd::complete);

  h.respond(40 * kMs);
  e.data = kToken;
  h.a.on_event(e);
  h.a.set_cut_reason(StreamEnd::idle_timeout);
  h.a.on_response_end(50 * kMs, protocol::ResponseEnd::cut_short);
  out = h.a.take_finished();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].end, StreamEnd::idle_timeout);
  EXPECT_EQ(out[0].stream_seq, 0u) << "exchange numbers come from the session";
}

TEST(StreamAssembler, AReceiverClaimsArrivalsNoLaterThanItsRead) {
  Harness h;
  h.a.set_role(Role::client);
  h.respond(10 * kMs);
  ArrivalLog arrivals;
  arrivals.add(5030, 19 * kMs);
  arrivals.add(5060, 25 * kMs);  // after the read below: another arrival's
  PieceContext ctx;
  ctx.start_seq = 5000;
  ctx.arrivals = &arrivals;
  h.a.begin_piece(ctx);
  protocol::StreamEvent e;
  e.data = kToken;
  e.ts = 20 * kMs;
  e.end_position = 30;
  h.a.on_event(e);
  e.end_position = 60;
  h.a.on_event(e);
  h.a.end_piece();
  const StreamRecord* r = h.a.active_stream();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->timeline[0].arrived_ns, 19 * kMs);
  EXPECT_EQ(r->timeline[1].arrived_ns, 0u);
}

}  // namespace
}  // namespace infertap::core
