// The HTTP/2 session from synthetic frames (tests/support/h2_frames.h): each
// stream its own exchange, events at the connection-stream position of their
// last byte, split pieces, holes, joins mid-connection, resets, flow-control
// starvation and gRPC messages.
#include "protocol/http2/session.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "support/h2_frames.h"
#include "support/session_side.h"

namespace infertap::protocol::http2 {
namespace {

using testing::as_bytes;
using testing::H2Builder;
using testing::H2Fields;

struct StreamLog : ExchangeSink {
  std::optional<ResponseInfo> info;
  std::string method, target, request_body;
  bool request_ended = false;
  std::vector<std::string> events;
  std::vector<std::optional<std::uint64_t>> end_positions;
  std::vector<bool> truncated;
  std::uint64_t body = 0, gaps = 0;
  std::optional<ResponseEnd> end;
  std::optional<Http2StreamStats> stats;

  void on_request_end(const RequestInfo& r) override {
    request_ended = true;
    request_body = r.body_head;
  }
  void on_response(const ResponseInfo& r) override {
    info = r;
    if (r.request) {
      method = r.request->method;
      target = r.request->target;
    }
    info->request = nullptr;
  }
  void on_event(const StreamEvent& e) override {
    events.emplace_back(e.data);
    end_positions.push_back(e.end_position);
    truncated.push_back(e.truncated);
  }
  void on_body_bytes(std::uint64_t n) override { body += n; }
  void on_body_gap(std::uint64_t n) override { gaps += n; }
  void on_body_undecodable(Undecodable) override {}
  void on_h2_stream(const Http2StreamStats& s) override { stats = s; }
  void on_response_end(TimestampNs, ResponseEnd how) override { end = how; }
  void on_parse_error(ParseError, bool) override {}
};

using Problem = SessionProblem;

struct Sinks : ExchangeSinks {
  std::map<std::uint64_t, StreamLog> streams;
  std::vector<std::uint64_t> closed;
  std::map<Problem, int> problems;
  std::size_t limit = 1000;
  ExchangeSink* exchange(std::uint64_t id) override {
    if (!streams.count(id) && streams.size() >= limit) return nullptr;
    return &streams[id];
  }
  void exchange_closed(std::uint64_t id) override { closed.push_back(id); }
  void on_problem(Protocol, Problem p) override { ++problems[p]; }
};

using Side = testing::Side<Session>;

const H2Fields kRequest = {{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/v1/chat/completions"}};
const H2Fields kSseHead = {{":status", "200"}, {"content-type", "text/event-stream"}};

struct Http2Session : ::testing::Test {
  Sinks sinks;
  Session session{sinks, SessionSettings{.request_body_head = 4096}};
  Side out{session, Flow::outbound};
  Side in{session, Flow::inbound};
  H2Builder client, server;

  // A client connection: preface, SETTINGS, the request of stream `id`.
  void client_start(std::uint32_t id = 1) {
    const std::string first = H2Builder::preface() + H2Builder::settings({});
    ASSERT_TRUE(session.decide(Flow::outbound, as_bytes(first)));
    out.send(first, 1);
    out.send(client.headers(id, kRequest, false) + H2Builder::data(id, "{\"stream\":true}", true), 2);
    in.send(H2Builder::settings({}), 3);
  }
};

TEST_F(Http2Session, EachStreamIsAnExchangeWithEventsAtConnectionPositions) {
  client_start();
  EXPECT_EQ(session.role(), Role::client);
  in.send(server.headers(1, kSseHead, false), 4);
  const std::uint64_t data_at = in.position;
  const std::string frame = H2Builder::data(1, "data: a\n\ndata: bb\n\n", false);
  in.send(frame, 5);
  in.send(H2Builder::data(1, "", true), 6);
  const StreamLog& s = sinks.streams.at(1);
  ASSERT_TRUE(s.info);
  EXPECT_EQ(s.info->status, 200);
  EXPECT_EQ(s.info->http_version, HttpVersion::http2);
  EXPECT_EQ(s.info->h2_stream_id, 1u);
  EXPECT_FALSE(s.info->headers_unknown);
  EXPECT_EQ(s.method, "POST");
  EXPECT_EQ(s.target, "/v1/chat/completions");
  EXPECT_TRUE(s.request_ended);
  EXPECT_EQ(s.request_body, "{\"stream\":true}");
  ASSERT_EQ(s.events, (std::vector<std::string>{"a", "bb"}));
  // Just past each event's last byte, counted in the connection's inbound bytes.
  EXPECT_EQ(s.end_positions[0], data_at + 9 + 9);
  EXPECT_EQ(s.end_positions[1], data_at + 9 + 19);
  EXPECT_EQ(s.end, ResponseEnd::complete);
  ASSERT_TRUE(s.stats);
  EXPECT_EQ(s.stats->data_frames, 2u);
  EXPECT_EQ(sinks.closed, std::vector<std::uint64_t>{1});
}

TEST_F(Http2Session, ByteWisePiecesGiveTheSameEvents) {
  const std::string first = H2Builder::preface() + H2Builder::settings({});
  ASSERT_TRUE(session.decide(Flow::outbound, as_bytes(first)));
  out.send_bytewise(first + client.headers(1, kRequest, true), 1);
  const std::string response = H2Builder::settings({}) + server.headers(1, kSseHead, false, 3, 2) +
                               H2Builder::data(1, "data: x\n", false, 5) + H2Builder::data(1, "\ndata: y\n\n", true);
  in.send_bytewise(response, 100);
  const StreamLog& s = sinks.streams.at(1);
  ASSERT_EQ(s.events, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(s.target, "/v1/chat/completions");
  // "x" ends at the first byte of the second DATA frame's payload.
  const std::uint64_t second = response.size() - (9 + 10);
  EXPECT_EQ(s.end_positions[0], second + 9 + 1);
  EXPECT_EQ(s.end_positions[1], response.size());
  EXPECT_EQ(s.end, ResponseEnd::complete);
}

TEST_F(Http2Session, InterleavedStreamsKeepTheirOwnEvents) {
  client_start(1);
  out.send(client.headers(3, kRequest, true), 4);
  // Encoded in wire order: the second block refers to the table entries of the first.
  std::string heads = server.headers(1, kSseHead, false);
  heads += server.headers(3, kSseHead, false);
  in.send(heads, 5);
  in.send(H2Builder::data(1, "data: 1a\n", false) + H2Builder::data(3, "data: 3a\n\n", false), 6);
  in.send(H2Builder::data(1, "\n", true) + H2Builder::data(3, "data: 3b\n\n", true), 7);
  EXPECT_EQ(sinks.streams.at(1).events, (std::vector<std::string>{"1a"}));
  EXPECT_EQ(sinks.streams.at(3).events, (std::vector<std::string>{"3a", "3b"}));
  EXPECT_NE(sinks.streams.at(1).info->exchange, sinks.streams.at(3).info->exchange);
  EXPECT_FALSE(sinks.streams.at(3).info->headers_unknown);
  EXPECT_EQ(sinks.streams.at(3).target, "/v1/chat/completions");
  EXPECT_EQ(session.live_streams(), 0u);
}

TEST_F(Http2Session, HoleInsideDataIsABodyGapOfThatStream) {
  client_start();
  in.send(server.headers(1, kSseHead, false), 4);
  const std::string frame = H2Builder::data(1, "data: lost in the hole\n\ndata: after\n\n", false);
  in.send_with_hole(frame, 12, 15, 5);  // header + "dat" captured, "after\n\n"-ish tail
  in.send(H2Builder::data(1, "data: next\n\n", true), 6);
  const StreamLog& s = sinks.streams.at(1);
  EXPECT_EQ(s.gaps, frame.size() - 27);
  ASSERT_FALSE(s.events.empty());
  EXPECT_EQ(s.events.back(), "next");
  EXPECT_EQ(s.end, ResponseEnd::complete);
  EXPECT_EQ(sinks.problems[Problem::desynchronised], 0);
}

TEST_F(Http2Session, HoleOverAFrameHeaderDesynchronisesUntilAPlausibleFrameOfAKnownStream) {
  client_start();
  in.send(server.headers(1, kSseHead, false), 4);
  const std::string two = H2Builder::data(1, "data: a\n\n", false) + H2Builder::data(1, "data: b\n\n", false);
  in.send_with_hole(two, 5, 3, 5);  // both frame headers' bytes partly gone
  EXPECT_EQ(sinks.problems[Problem::desynchronised], 1);
  in.send("garbage that is no frame", 6);  // never read while lost
  in.send(H2Builder::data(1, "data: c\n\n", true), 7);
  EXPECT_EQ(sinks.problems[Problem::resynchronised], 1);
  const StreamLog& s = sinks.streams.at(1);
  EXPECT_EQ(s.events.back(), "c");
  EXPECT_EQ(s.end, ResponseEnd::complete);
}

TEST_F(Http2Session, BytesLostWithTheFramesAreAHoleOfEveryOpenStream) {
  client_start(1);
  out.send(client.headers(3, kRequest, true), 4);
  std::string heads = server.headers(1, kSseHead, false);
  heads += server.headers(3, kSseHead, false);
  in.send(heads, 5);
  const std::string two = H2Builder::data(1, "data: a\n\n", false) + H2Builder::data(3, "data: b\n\n", false);
  in.send_with_hole(two, 5, 3, 6);  // a frame header in the hole: the direction is lost
  const std::string garbage = "garbage that is no frame";
  in.send(garbage, 7);  // lost too
  in.send(H2Builder::data(1, "data: c\n\n", true), 8);
  in.send(H2Builder::data(3, "data: d\n\n", true), 9);
  // Whose bytes they were is unknown: both streams count them, so both
  // records' counts are lower bounds.
  const std::uint64_t lost = two.size() - 8 + garbage.size();
  EXPECT_EQ(sinks.streams.at(1).gaps, lost);
  EXPECT_EQ(sinks.streams.at(3).gaps, lost);
  EXPECT_EQ(sinks.streams.at(1).events.back(), "c");
  EXPECT_EQ(sinks.streams.at(3).events.back(), "d");
}

TEST_F(Http2Session, ResponseToARequestLostInAHoleIsFollowedWithItsHeadersUnknown) {
  client_start(1);
  // Stream 3's request (HEADERS and a body) goes by with its frame headers in a hole.
  const std::string request = client.headers(3, kRequest, false) + H2Builder::data(3, std::string(5000, 'p'), true);
  out.send_with_hole(request, 4, 3, 4);
  EXPECT_EQ(sinks.problems[Problem::desynchronised], 1);
  in.send(server.headers(3, kSseHead, false), 5);
  in.send(H2Builder::data(3, "data: x\n\n", true), 6);
  const StreamLog& s = sinks.streams.at(3);
  ASSERT_TRUE(s.info);
  EXPECT_TRUE(s.info->headers_unknown) << "its path is unknown, and the record says so";
  EXPECT_EQ(s.target, "");
  EXPECT_EQ(s.info->status, 200);
  EXPECT_EQ(s.events, (std::vector<std::string>{"x"}));
  EXPECT_EQ(s.end, ResponseEnd::complete);
}

TEST_F(Http2Session, RequestBlockCutByAHoleLeavesTheResponsesHeadersUnknown) {
  client_start(1);
  H2Fields long_request = kRequest;
  long_request.push_back({"x-trace", std::string(400, 'q')});
  const std::string frame = client.headers(3, long_request, true);
  out.send_with_hole(frame, 12, 2, 4);  // the frame header read, its block cut
  EXPECT_EQ(sinks.problems[Problem::desynchronised], 0);
  in.send(server.headers(3, kSseHead, false), 5);
  in.send(H2Builder::data(3, "data: y\n\n", true), 6);
  const StreamLog& s = sinks.streams.at(3);
  ASSERT_TRUE(s.info);
  EXPECT_TRUE(s.info->headers_unknown);
  EXPECT_EQ(s.target, "") << "never guessed";
  EXPECT_EQ(s.info->status, 200) << "the response's own block was read";
  EXPECT_EQ(s.events, (std::vector<std::string>{"y"}));
}

TEST_F(Http2Session, JoinedMidConnectionTimesDataByStreamAndNeverGuessesAPath) {
  // The agent started after stream 5 began: its first bytes are event DATA.
  const std::string frame = H2Builder::data(5, "data: late\n\n", false);
  ASSERT_TRUE(session.decide(Flow::inbound, as_bytes(frame)));
  EXPECT_EQ(session.role(), Role::client);
  in.send(frame, 1);
  // A header block that refers to table entries never seen cannot be read.
  H2Builder warm;
  warm.block({{"x-long-custom", "value-1"}});
  in.send(warm.headers(7, {{":status", "200"}, {"x-long-custom", "value-1"}}, false), 2);
  in.send(H2Builder::data(7, "{\"a\":1}\n", false), 3);
  in.send(H2Builder::data(5, "data: more\n\n", true), 4);
  const StreamLog& s5 = sinks.streams.at(5);
  ASSERT_TRUE(s5.info);
  EXPECT_TRUE(s5.info->headers_unknown);
  EXPECT_TRUE(s5.info->joined_midstream);
  EXPECT_EQ(s5.target, "");
  EXPECT_EQ(s5.events, (std::vector<std::string>{"late", "more"}));
  const StreamLog& s7 = sinks.streams.at(7);
  ASSERT_TRUE(s7.info);
  EXPECT_TRUE(s7.info->headers_unknown);
  EXPECT_EQ(s7.info->status, 0);
  EXPECT_EQ(s7.info->event_framing, EventFraming::ndjson);
  EXPECT_EQ(s7.events, (std::vector<std::string>{"{\"a\":1}"}));
  EXPECT_GE(sinks.problems[Problem::header_block_lost], 1);
}

TEST_F(Http2Session, ResetMidEventEndsTheStreamResetWithoutThePartialEvent) {
  client_start();
  in.send(server.headers(1, kSseHead, false), 4);
  in.send(H2Builder::data(1, "data: whole\n\ndata: half", false), 5);
  in.send(H2Builder::rst_stream(1, 8), 6);
  const StreamLog& s = sinks.streams.at(1);
  EXPECT_EQ(s.events, (std::vector<std::string>{"whole"}));
  EXPECT_EQ(s.end, ResponseEnd::reset);
  // Late frames of a reset stream open nothing.
  in.send(H2Builder::data(1, "data: late\n\n", true), 7);
  EXPECT_EQ(s.events.size(), 1u);
}

TEST_F(Http2Session, GoawayEndsStreamsAboveItsLastStreamId) {
  client_start(1);
  out.send(client.headers(3, kRequest, true), 4);
  // Encoded in wire order: the second block refers to the table entries of the first.
  std::string heads = server.headers(1, kSseHead, false);
  heads += server.headers(3, kSseHead, false);
  in.send(heads, 5);
  in.send(H2Builder::goaway(1, 0), 6);
  EXPECT_EQ(sinks.streams.at(3).end, ResponseEnd::goaway);
  EXPECT_FALSE(sinks.streams.at(1).end);
  EXPECT_EQ(session.live_streams(), 1u);
  session.close(7);
  EXPECT_EQ(sinks.streams.at(1).end, ResponseEnd::cut_short);
}

TEST_F(Http2Session, ZeroWindowWhileTheStreamHasMoreIsAnEpisode) {
  const std::string first = H2Builder::preface() + H2Builder::settings({{0x4, 20}});  // initial window 20
  ASSERT_TRUE(session.decide(Flow::outbound, as_bytes(first)));
  out.send(first + client.headers(1, kRequest, true), 1);
  in.send(H2Builder::settings({}) + server.headers(1, kSseHead, false), 2);
  in.send(H2Builder::data(1, "data: 0123456789ab\n\n", false), 1'000);  // 20 bytes: window 0
  out.send(H2Builder::window_update(1, 100), 51'000);
  in.send(H2Builder::data(1, "data: z\n\n", true), 52'000);
  const StreamLog& s = sinks.streams.at(1);
  ASSERT_TRUE(s.stats);
  EXPECT_EQ(s.stats->window_zero_episodes, 1u);
  EXPECT_EQ(s.stats->window_zero_ns, 50'000u);
  EXPECT_EQ(s.stats->window_scope, Http2StreamStats::Scope::stream);
  ASSERT_EQ(s.stats->window_zero.size(), 1u);
  EXPECT_EQ(s.stats->window_zero[0].first, 1'000u);
  EXPECT_EQ(s.stats->window_zero[0].second, 51'000u);
}

TEST_F(Http2Session, ConnectionWindowStarvationNamesTheConnectionScope) {
  client_start();
  in.send(server.headers(1, kSseHead, false), 4);
  // The connection window (65535, never raised by SETTINGS) is used up.
  out.send(H2Builder::window_update(1, 1'000'000), 5);
  const std::string chunk(16000, 'x');
  for (int i = 0; i < 5; ++i) in.send(H2Builder::data(1, "data: " + chunk + "\n\n", false), 10 + i);
  out.send(H2Builder::window_update(0, 100000), 20);
  in.send(H2Builder::data(1, "data: z\n\n", true), 30);
  const StreamLog& s = sinks.streams.at(1);
  ASSERT_TRUE(s.stats);
  EXPECT_EQ(s.stats->window_zero_episodes, 1u);
  EXPECT_EQ(s.stats->window_scope, Http2StreamStats::Scope::connection);
  EXPECT_EQ(s.stats->window_zero_ns, 20u - 14u);  // the fifth frame went past the 65535 bytes
}

TEST_F(Http2Session, GrpcMessagesSplitAcrossFramesAreTheEventsAndTrailersGiveTheStatus) {
  client_start();
  in.send(server.headers(1, {{":status", "200"}, {"content-type", "application/grpc+proto"}}, false), 4);
  const std::string messages =
      H2Builder::grpc_message("one") + H2Builder::grpc_message("second message") + H2Builder::grpc_message("");
  const std::uint64_t data_at = in.position;
  in.send(H2Builder::data(1, messages.substr(0, 3), false), 5);  // inside the first prefix
  in.send(H2Builder::data(1, messages.substr(3, 10), false), 6);
  in.send(H2Builder::data(1, messages.substr(13), false), 7);
  in.send(server.headers(1, {{"grpc-status", "0"}, {"grpc-message", "fine"}}, true), 8);
  const StreamLog& s = sinks.streams.at(1);
  ASSERT_TRUE(s.info);
  EXPECT_EQ(s.info->event_framing, EventFraming::grpc);
  ASSERT_EQ(s.events, (std::vector<std::string>{"one", "second message", ""}));
  // The first message's last byte is in the second frame: 8 bytes in, after its header.
  EXPECT_EQ(s.end_positions[0], data_at + (9 + 3) + 9 + 5);
  ASSERT_TRUE(s.stats && s.stats->grpc_status);
  EXPECT_EQ(*s.stats->grpc_status, 0);
  EXPECT_EQ(s.stats->data_frames, 3u);
  EXPECT_EQ(s.end, ResponseEnd::complete);
}

TEST_F(Http2Session, ContinuationFloodIsBoundedAndCounted) {
  client_start();
  std::string flood = H2Builder::frame(H2Builder::kHeaders, 0, 1, std::string(16000, '\x7f'));
  for (int i = 0; i < 8; ++i) flood += H2Builder::frame(H2Builder::kContinuation, 0, 1, std::string(16000, '\x7f'));
  flood += H2Builder::frame(H2Builder::kContinuation, H2Builder::kEndHeaders, 1, "");
  in.send(flood, 4);
  in.send(H2Builder::data(1, "data: a\n\n", true), 5);
  EXPECT_EQ(sinks.problems[Problem::header_block_too_large], 1);
  const StreamLog& s = sinks.streams.at(1);
  ASSERT_TRUE(s.info);
  EXPECT_TRUE(s.info->headers_unknown);
  EXPECT_EQ(s.events, (std::vector<std::string>{"a"}));
}

TEST_F(Http2Session, StreamsBeyondTheBoundAreNotFollowed) {
  client_start(1);
  for (std::uint32_t id = 3; id < 2 * (Session::kMaxStreams + 10); id += 2) out.send(client.headers(id, kRequest, true), 4);
  EXPECT_EQ(session.live_streams(), Session::kMaxStreams);
  EXPECT_GT(sinks.problems[Problem::exchanges_over_limit], 0);
}

TEST_F(Http2Session, ControlFramesBetweenDataFramesAreReadAndSkipped) {
  client_start();
  in.send(server.headers(1, kSseHead, false), 4);
  std::string mixed = H2Builder::data(1, "data: a\n", false) + H2Builder::ping() + H2Builder::settings_ack();
  mixed += H2Builder::frame(2, 0, 1, std::string("\x00\x00\x00\x00\x10", 5));  // PRIORITY
  mixed += H2Builder::settings({{0x1, 8192}, {0x5, 32768}}) + H2Builder::window_update(0, 1000);
  mixed += H2Builder::data(1, "\ndata: b\n\n", true);
  in.send(mixed, 5);
  const StreamLog& s = sinks.streams.at(1);
  EXPECT_EQ(s.events, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.end, ResponseEnd::complete);
  EXPECT_TRUE(sinks.problems.empty());
}

TEST_F(Http2Session, GrpcHoleInsideAMessageTruncatesItAndOneOverAPrefixStopsTheMessages) {
  client_start();
  in.send(server.headers(1, {{":status", "200"}, {"content-type", "application/grpc"}}, false), 4);
  const std::string big = H2Builder::grpc_message(std::string(200, 'm'));
  in.send_with_hole(H2Builder::data(1, big, false), 9 + 20, 10, 5);  // the middle of the message not captured
  in.send(H2Builder::data(1, H2Builder::grpc_message("after"), false), 6);
  in.send_with_hole(H2Builder::data(1, H2Builder::grpc_message("x") + H2Builder::grpc_message("lost"), false), 9 + 3, 2, 7);
  in.send(H2Builder::data(1, H2Builder::grpc_message("never"), false), 8);
  in.send(server.headers(1, {{"grpc-status", "14"}}, true), 9);
  const StreamLog& s = sinks.streams.at(1);
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_TRUE(s.truncated[0]);
  EXPECT_EQ(s.events[1], "after");
  EXPECT_EQ(s.stats->grpc_status, 14);
}

TEST_F(Http2Session, HeadersAfterDataThatCameFirstAreTrailersNotASecondResponse) {
  client_start();
  in.send(H2Builder::data(1, "data: early\n\n", false), 4);  // before any response HEADERS
  in.send(server.headers(1, kSseHead, false), 5);
  in.send(H2Builder::data(1, "data: late\n\n", true), 6);
  const StreamLog& s = sinks.streams.at(1);
  ASSERT_TRUE(s.info);
  EXPECT_TRUE(s.info->headers_unknown);
  EXPECT_EQ(s.events, (std::vector<std::string>{"early", "late"}));
  EXPECT_EQ(s.end, ResponseEnd::complete);
}

TEST(Http2Detect, FirstBytesSayWhetherAConnectionIsHttp2) {
  EXPECT_EQ(detect(as_bytes(H2Builder::preface())), Start::preface);
  EXPECT_EQ(detect(as_bytes("PRI * HT")), Start::preface);
  EXPECT_EQ(detect(as_bytes(H2Builder::settings({{0x3, 100}, {0x4, 65535}}))), Start::server_settings);
  EXPECT_EQ(detect(as_bytes(H2Builder::data(3, "data: x\n\n", false))), Start::joined);
  EXPECT_EQ(detect(as_bytes(H2Builder::data(3, "binary", false))), Start::not_http2);
  EXPECT_EQ(detect(as_bytes("POST / HTTP/1.1\r\n")), Start::not_http2);
  EXPECT_EQ(detect(as_bytes("HTTP/1.1 200 OK\r\n")), Start::not_http2);
}

TEST(Http2Detect, ServerSettingsFirstMakesTheServerRole) {
  Sinks sinks;
  Session session(sinks, SessionSettings{.request_body_head = 4096});
  const std::string settings = H2Builder::settings({{0x4, 65535}});
  ASSERT_TRUE(session.decide(Flow::outbound, as_bytes(settings)));
  EXPECT_EQ(session.role(), Role::server);
  EXPECT_TRUE(session.carries_responses(Flow::outbound));
  Side out{session, Flow::outbound}, in{session, Flow::inbound};
  H2Builder client, server;
  out.send(settings, 1);
  in.send(H2Builder::preface() + H2Builder::settings({}) + client.headers(1, kRequest, true), 2);
  out.send(server.headers(1, kSseHead, false) + H2Builder::data(1, "data: s\n\n", true), 3);
  EXPECT_EQ(sinks.streams.at(1).events, (std::vector<std::string>{"s"}));
  EXPECT_EQ(sinks.streams.at(1).target, "/v1/chat/completions");
}

}  // namespace
}  // namespace infertap::protocol::http2
