// The pipeline on HTTP/2 connections from synthetic kernel records: one record
// per HTTP/2 stream of a multiplexed connection, each event's end_seq the TCP
// sequence of its last byte in the connection's bytes, ACKs reaching every
// live stream, resets, gRPC, and a stall named by the HTTP/2 window.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/pipeline.h"
#include "support/event_builder.h"
#include "support/h2_frames.h"

namespace infertap {
namespace {

using core::StreamEnd;
using core::StreamRecord;
using testing::ConnBuilder;
using testing::H2Builder;
using testing::H2Fields;
using testing::openai_chunk;

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kT0 = 1'000'000'000'000ull;
constexpr std::uint32_t kSendSeq = 7000;

const H2Fields kSseHead = {{":status", "200"}, {"content-type", "text/event-stream"}};

H2Fields request_fields(const std::string& path) {
  return {{":method", "POST"}, {":scheme", "http"}, {":authority", "localhost"}, {":path", path}};
}

struct Harness {
  std::vector<StreamRecord> records;
  core::PipelineConfig config;
  core::Pipeline pipeline{config, [this](StreamRecord&& r) { records.push_back(std::move(r)); }};
  void feed(const std::vector<std::uint8_t>& rec) { pipeline.on_record(rec); }
  void ack(std::uint64_t sock, std::uint32_t seq, std::uint64_t ts) { pipeline.on_signal(testing::ack_signal(sock, seq, ts)); }
  const StreamRecord* by_stream(std::uint32_t id) const {
    for (const StreamRecord& r : records) {
      if (r.h2_stream_id == id) return &r;
    }
    return nullptr;
  }
};

// An h2c server: it reads the client's preface and two requests, then
// answers both streams with interleaved DATA frames, several per send.
struct H2Server {
  Harness& h;
  ConnBuilder c{0xB2, 300, 8000, 41000};
  H2Builder client, server;
  std::uint64_t sent = 0;  // outbound bytes so far
  // Per stream: the stream position just past each event's last byte.
  std::map<std::uint32_t, std::vector<std::uint64_t>> event_ends;

  explicit H2Server(Harness& harness) : h(harness) { c.start_at(kSendSeq, 90000); }
  void recv(std::uint64_t ts, const std::string& bytes) { h.feed(c.recv(ts, bytes)); }
  void send(std::uint64_t ts, const std::string& bytes) {
    h.feed(c.send(ts, bytes));
    sent += bytes.size();
  }
  // The client's preface and streams 1 and 3 read; the server's SETTINGS and both heads sent.
  void open_two_streams() {
    recv(kT0, H2Builder::preface() + H2Builder::settings({}) + client.headers(1, request_fields("/v1/chat/completions"), true));
    recv(kT0 + kMs, client.headers(3, request_fields("/v1/chat/completions"), true));
    std::string heads = H2Builder::settings({}) + server.headers(1, kSseHead, false);
    heads += server.headers(3, kSseHead, false);
    send(kT0 + 2 * kMs, heads);
  }
  // DATA carrying one SSE event of `stream`, noting where the event ends.
  std::string event(std::uint32_t stream, const std::string& sse, std::uint64_t at) {
    const std::string f = H2Builder::data(stream, sse, false);
    event_ends[stream].push_back(at + f.size());
    return f;
  }
};

TEST(Http2Pipeline, EachStreamOfAMultiplexedConnectionIsItsOwnRecordWithExactEndSeq) {
  Harness h;
  H2Server s(h);
  std::string in = H2Builder::preface() + H2Builder::settings({});
  in += s.client.headers(1, request_fields("/v1/chat/completions"), false);
  in += H2Builder::data(1, R"({"model":"m1","stream":true})", true);
  in += s.client.headers(3, request_fields("/v1/completions"), false);
  in += H2Builder::data(3, R"({"model":"m3","stream":true})", true);
  s.recv(kT0, in);
  std::string heads = H2Builder::settings({});
  heads += s.server.headers(1, kSseHead, false);
  heads += s.server.headers(3, kSseHead, false);
  s.send(kT0 + 1 * kMs, heads);
  for (int i = 0; i < 4; ++i) {
    // One send carries an event of each stream.
    std::string batch = s.event(1, openai_chunk("a"), s.sent);
    batch += s.event(3, openai_chunk("b"), s.sent + batch.size());
    s.send(kT0 + (10 + 10 * i) * kMs, batch);
  }
  s.send(kT0 + 60 * kMs, H2Builder::data(1, "data: [DONE]\n\n", true) + H2Builder::data(3, "data: [DONE]\n\n", true));
  ASSERT_EQ(h.records.size(), 2u);
  for (std::uint32_t id : {1u, 3u}) {
    const StreamRecord* r = h.by_stream(id);
    ASSERT_NE(r, nullptr) << id;
    EXPECT_EQ(r->http_version, protocol::HttpVersion::http2);
    EXPECT_EQ(r->role, core::Role::server);
    EXPECT_EQ(r->end, StreamEnd::complete);
    EXPECT_FALSE(r->headers_unknown);
    EXPECT_EQ(r->path, id == 1 ? "/v1/chat/completions" : "/v1/completions");
    EXPECT_EQ(r->request_model, id == 1 ? "m1" : "m3");
    EXPECT_EQ(r->h2_data_frames, 5u);
    ASSERT_EQ(r->timeline.size(), 5u);  // four chunks and [DONE]
    EXPECT_EQ(r->metrics.content_events, 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(r->timeline[i].end_seq, kSendSeq + s.event_ends[id][i]) << "stream " << id << " event " << i;
      EXPECT_TRUE(r->timeline[i].end_seq_exact);
      EXPECT_EQ(r->timeline[i].ts_ns, kT0 + (10 + 10 * i) * kMs);
    }
  }
  EXPECT_NE(h.records[0].stream_seq, h.records[1].stream_seq);
}

TEST(Http2Pipeline, AcksReachEveryLiveStream) {
  Harness h;
  H2Server s(h);
  s.open_two_streams();
  s.send(kT0 + 10 * kMs, s.event(1, openai_chunk("a"), s.sent));
  s.send(kT0 + 20 * kMs, s.event(3, openai_chunk("b"), s.sent));
  // One ACK covers both events: each stream's event is acknowledged.
  h.ack(0xB2, kSendSeq + static_cast<std::uint32_t>(s.sent), kT0 + 25 * kMs);
  s.send(kT0 + 30 * kMs, H2Builder::data(1, "", true) + H2Builder::data(3, "", true));
  ASSERT_EQ(h.records.size(), 2u);
  for (const StreamRecord& r : h.records) {
    ASSERT_EQ(r.timeline.size(), 1u);
    EXPECT_EQ(r.timeline[0].acked_ns, kT0 + 25 * kMs) << r.h2_stream_id;
  }
}

TEST(Http2Pipeline, ResetEndsOnlyItsStreamAndCloseEndsTheRest) {
  Harness h;
  H2Server s(h);
  s.open_two_streams();
  std::string both = s.event(1, openai_chunk("a"), s.sent);
  both += s.event(3, openai_chunk("b"), s.sent + both.size());
  s.send(kT0 + 10 * kMs, both);
  s.recv(kT0 + 12 * kMs, H2Builder::rst_stream(3, 8));  // the client cancels stream 3
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].h2_stream_id, 3u);
  EXPECT_EQ(h.records[0].end, StreamEnd::stream_reset);
  h.feed(s.c.eof(kT0 + 20 * kMs));
  h.pipeline.flush(kT0 + 30 * kMs);
  ASSERT_EQ(h.records.size(), 2u);
  EXPECT_EQ(h.records[1].h2_stream_id, 1u);
  EXPECT_NE(h.records[1].end, StreamEnd::complete);
}

TEST(Http2Pipeline, GrpcMessagesAreCountedAsMessagesWithTheTrailerStatus) {
  Harness h;
  H2Server s(h);
  s.recv(kT0, H2Builder::preface() + H2Builder::settings({}) +
                   s.client.headers(1, {{":method", "POST"}, {":scheme", "http"}, {":path", "/tokens.Generator/Stream"},
                                        {"content-type", "application/grpc"}},
                                    false) +
                   H2Builder::data(1, H2Builder::grpc_message("req"), true));
  s.send(kT0 + kMs, s.server.headers(1, {{":status", "200"}, {"content-type", "application/grpc"}}, false));
  for (int i = 0; i < 3; ++i) s.send(kT0 + (10 + 10 * i) * kMs, H2Builder::data(1, H2Builder::grpc_message("tok"), false));
  s.send(kT0 + 50 * kMs, s.server.headers(1, {{"grpc-status", "0"}}, true));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_EQ(r.dialect, protocol::Dialect::grpc);
  EXPECT_EQ(r.event_framing, protocol::EventFraming::grpc);
  EXPECT_EQ(r.metrics.token_source, core::TokenSource::messages);
  EXPECT_EQ(r.metrics.tokens, 3u);
  EXPECT_EQ(r.path, "/tokens.Generator/Stream");
  ASSERT_TRUE(r.grpc_status);
  EXPECT_EQ(*r.grpc_status, 0);
  EXPECT_EQ(r.end, StreamEnd::complete);
}

TEST(Http2Pipeline, AStallDuringAZeroHttp2WindowIsBackpressureFromTheWindow) {
  Harness h;
  H2Server s(h);
  // The client grants two events' worth per stream, then credits nothing for 2 s.
  const std::string tok = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
  s.recv(kT0, H2Builder::preface() + H2Builder::settings({{0x4, static_cast<std::uint32_t>(2 * tok.size())}}) +
                   s.client.headers(1, request_fields("/v1/chat/completions"), true));
  s.send(kT0 + kMs, H2Builder::settings({}) + s.server.headers(1, kSseHead, false));
  s.send(kT0 + 10 * kMs, H2Builder::data(1, tok, false));
  s.send(kT0 + 20 * kMs, H2Builder::data(1, tok, false));  // the window is 0 from here
  s.recv(kT0 + 2015 * kMs, H2Builder::window_update(1, 100000));
  for (int i = 0; i < 6; ++i) s.send(kT0 + (2030 + 10 * i) * kMs, H2Builder::data(1, tok, false));
  s.send(kT0 + 2200 * kMs, H2Builder::data(1, "", true));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_GE(r.h2_flow.window_zero_episodes, 1u);
  EXPECT_EQ(r.h2_flow.window_scope, protocol::Http2StreamStats::Scope::stream);
  ASSERT_FALSE(r.metrics.stalls.empty());
  const core::StallVerdict& stall = core::verdict_at(core::path_view_of(r).stall_causes, 0);
  EXPECT_EQ(stall.cause, core::StallCause::backpressure) << stall.evidence;
  EXPECT_NE(stall.evidence.find("HTTP/2"), std::string::npos) << stall.evidence;
}

TEST(Http2Pipeline, AnH2cUpgradeSwitchesAtTheByteAfterThe101Head) {
  Harness h;
  H2Server s(h);
  s.recv(kT0, "GET /v1/events HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
              "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n");
  const std::string switching = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
  s.send(kT0 + kMs, switching + H2Builder::settings({}) + s.server.headers(1, kSseHead, false));
  s.recv(kT0 + 2 * kMs, H2Builder::preface() + H2Builder::settings({}));
  s.send(kT0 + 10 * kMs, s.event(1, openai_chunk("a"), s.sent));
  s.send(kT0 + 20 * kMs, s.event(1, openai_chunk("b"), s.sent));
  s.send(kT0 + 30 * kMs, H2Builder::data(1, "data: [DONE]\n\n", true));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_EQ(r.http_version, protocol::HttpVersion::http2);
  EXPECT_EQ(r.h2_stream_id, 1u);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/v1/events");
  EXPECT_EQ(r.end, StreamEnd::complete);
  ASSERT_EQ(r.timeline.size(), 3u);
  EXPECT_EQ(r.timeline[0].end_seq, kSendSeq + s.event_ends[1][0]);
  EXPECT_EQ(r.timeline[1].end_seq, kSendSeq + s.event_ends[1][1]);
}

TEST(Http2Pipeline, AnHttp1RecordSaysItsVersion) {
  Harness h;
  ConnBuilder c(0xC3, 300, 8000, 42000);
  h.feed(c.recv(kT0, "GET /v1/events HTTP/1.0\r\nHost: x\r\n\r\n"));
  h.feed(c.send(kT0 + kMs, "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + openai_chunk("a")));
  h.feed(c.eof(kT0 + 2 * kMs));
  h.pipeline.flush(kT0 + 3 * kMs);
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].http_version, protocol::HttpVersion::http1_0);
  EXPECT_EQ(h.records[0].h2_stream_id, 0u);
}

}  // namespace
}  // namespace infertap
