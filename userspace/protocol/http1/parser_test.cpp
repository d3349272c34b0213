#include "protocol/http1/parser.h"
#include "protocol/payload/interpreter.h"
#include "protocol/sse/parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace infertap::protocol {
namespace {

std::span<const std::uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// Records callbacks; body bytes and holes go into one string ("<gap N>").
struct Recorder : HttpMessageSink {
  std::vector<ResponseHead> responses;
  std::vector<RequestHead> requests;
  std::vector<TimestampNs> head_ts;
  std::string body;
  std::vector<std::uint64_t> positions;  // stream position of each body piece
  std::vector<std::string> bodies;  // one per completed message
  std::vector<TimestampNs> end_ts;
  std::vector<ParseError> errors;

  void on_request_head(const RequestHead& h, TimestampNs ts) override {
    requests.push_back(h);
    head_ts.push_back(ts);
  }
  void on_response_head(const ResponseHead& h, TimestampNs ts) override {
    responses.push_back(h);
    head_ts.push_back(ts);
  }
  void on_body(std::span<const std::uint8_t> b, std::uint64_t position, TimestampNs) override {
    positions.push_back(position);
    body.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  void on_body_gap(std::uint64_t n, TimestampNs) override { body += "<gap " + std::to_string(n) + ">"; }
  void on_message_end(TimestampNs ts) override {
    end_ts.push_back(ts);
    bodies.push_back(body);
    body.clear();
  }
  void on_error(ParseError e, std::string_view) override { errors.push_back(e); }
  bool has_error(ParseError e) const { return std::find(errors.begin(), errors.end(), e) != errors.end(); }
};

std::string chunk(std::string_view data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return std::string(size) + std::string(data) + "\r\n";
}

std::string openai_event(int i) {
  return "data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
         "\"model\":\"llama-3-8b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok" +
         std::to_string(i) + "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
}

const std::string kSseHead =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: Text/Event-Stream; charset=utf-8\r\n"
    "Transfer-Encoding: chunked\r\n"
    "Connection: keep-alive\r\n"
    "\r\n";

std::string sse_response(int events, std::string* body_out = nullptr) {
  std::string r = kSseHead;
  std::string body;
  for (int i = 0; i < events; ++i) {
    r += chunk(openai_event(i));
    body += openai_event(i);
  }
  r += "0\r\n\r\n";
  if (body_out) *body_out = body;
  return r;
}

TEST(HttpParser, ChunkedEventStreamResponse) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  std::string body;
  const std::string wire = sse_response(3, &body);
  parser.feed(bytes(wire), 42);
  ASSERT_EQ(rec.responses.size(), 1u);
  const ResponseHead& h = rec.responses[0];
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.content_type, "text/event-stream; charset=utf-8");
  EXPECT_TRUE(h.event_stream);
  EXPECT_EQ(h.framing, BodyFraming::chunked);
  EXPECT_TRUE(h.keep_alive);
  EXPECT_FALSE(h.joined_midstream);
  ASSERT_EQ(rec.bodies.size(), 1u);
  EXPECT_EQ(rec.bodies[0], body);
  EXPECT_EQ(rec.end_ts, std::vector<TimestampNs>{42});
  EXPECT_TRUE(rec.errors.empty());
  EXPECT_EQ(parser.position(), wire.size());
  EXPECT_TRUE(parser.synced());
}

// Each body piece says where its first byte sits in the stream, across chunk
// framing, pieces and holes: what lets an event be placed on the wire.
// Only the Server and x-*-version headers name the serving software; no other value is kept.
TEST(HttpParser, ServerVersionFromServerAndVersionHeadersOnly) {
  Recorder rec;
  HttpParser p(HttpParser::Mode::response, rec);
  p.feed(bytes("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nServer: uvicorn\r\n"
               "X-Vllm-Version: 0.6.3\r\nx-request-id: secret-123\r\nX-Version: nope\r\n"
               "Transfer-Encoding: chunked\r\n\r\n"),
         1);
  ASSERT_EQ(rec.responses.size(), 1u);
  EXPECT_EQ(rec.responses[0].server_version, "server=uvicorn; x-vllm-version=0.6.3");
  Recorder many;
  HttpParser q(HttpParser::Mode::response, many);
  std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n";
  for (int i = 0; i < 6; ++i) head += "x-" + std::to_string(i) + "-version: " + std::string(100, 'v') + ";x\r\n";
  q.feed(bytes(head + "\r\n"), 1);
  ASSERT_EQ(many.responses.size(), 1u);
  const std::string& v = many.responses[0].server_version;
  EXPECT_EQ(std::count(v.begin(), v.end(), '='), 3) << v;
  EXPECT_EQ(v.find(std::string(65, 'v')), std::string::npos) << "values capped at 64 bytes: " << v;
}

TEST(HttpParser, BodyBytesCarryTheirStreamPosition) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  const std::string first = chunk("data: a\n\n"), second = chunk("data: b\n\n");  // "9\r\n" + 9 + "\r\n"
  const std::string wire = kSseHead + first + second;
  const std::size_t h = kSseHead.size(), f = first.size();
  parser.feed(bytes(std::string_view(wire).substr(0, h + 5)), 1);      // head, "9\r\nda"
  parser.feed(bytes(std::string_view(wire).substr(h + 5, f)), 2);      // the rest of chunk 1, "9\r\nda" of chunk 2
  parser.gap(3, 3);                                                    // "ta:" inside chunk 2's data
  parser.feed(bytes(std::string_view(wire).substr(h + f + 8)), 4);     // " b\n\n\r\n"
  EXPECT_EQ(rec.positions, (std::vector<std::uint64_t>{h + 3, h + 5, h + f + 3, h + f + 8}));
  EXPECT_EQ(parser.position(), wire.size());
}

TEST(HttpParser, SplitAtEveryBytePosition) {
  std::string body;
  const std::string wire = sse_response(2, &body);
  for (std::size_t split = 0; split <= wire.size(); ++split) {
    Recorder rec;
    HttpParser parser(HttpParser::Mode::response, rec);
    parser.feed(bytes(std::string_view(wire).substr(0, split)), 1);
    parser.feed(bytes(std::string_view(wire).substr(split)), 2);
    ASSERT_EQ(rec.responses.size(), 1u) << "split " << split;
    ASSERT_EQ(rec.bodies.size(), 1u) << "split " << split;
    EXPECT_EQ(rec.bodies[0], body) << "split " << split;
    EXPECT_TRUE(rec.errors.empty()) << "split " << split;
    // The message ends in the piece holding the last byte.
    EXPECT_EQ(rec.end_ts[0], split == wire.size() ? 1u : 2u) << "split " << split;
  }
}

TEST(HttpParser, ThreeWaySplitsAndByteAtATime) {
  std::string body;
  const std::string wire = sse_response(1, &body) + "HTTP/1.1 204 No Content\r\n\r\n";
  for (std::size_t a = 0; a <= wire.size(); a += 7) {
    for (std::size_t b = a; b <= wire.size(); b += 3) {
      Recorder rec;
      HttpParser parser(HttpParser::Mode::response, rec);
      parser.feed(bytes(std::string_view(wire).substr(0, a)), 1);
      parser.feed(bytes(std::string_view(wire).substr(a, b - a)), 2);
      parser.feed(bytes(std::string_view(wire).substr(b)), 3);
      ASSERT_EQ(rec.responses.size(), 2u) << a << "," << b;
      ASSERT_EQ(rec.bodies.size(), 2u);
      EXPECT_EQ(rec.bodies[0], body);
      EXPECT_TRUE(rec.errors.empty());
    }
  }
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  for (char c : wire) parser.feed(bytes(std::string_view(&c, 1)), 5);
  ASSERT_EQ(rec.bodies.size(), 2u);
  EXPECT_EQ(rec.bodies[0], body);
  EXPECT_EQ(rec.responses[1].status, 204);
}

TEST(HttpParser, CoalescedChunksInOneWrite) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes(kSseHead), 1);
  std::string many, body;
  for (int i = 0; i < 10; ++i) {
    many += chunk(openai_event(i));
    body += openai_event(i);
  }
  parser.feed(bytes(many), 2);
  parser.feed(bytes("0\r\n\r\n"), 3);
  ASSERT_EQ(rec.bodies.size(), 1u);
  EXPECT_EQ(rec.bodies[0], body);
  EXPECT_EQ(rec.end_ts[0], 3u);
}

TEST(HttpParser, ChunkExtensionsTrailersAndBareLf) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes("HTTP/1.1 200 OK\nTransfer-Encoding: gzip, chunked\n\n"
                    "5;name=value;x=\"q\"\r\nhello\r\n"
                    "6 ; ext\r\n world\n"
                    "0\r\nX-Trailer: 1\r\nY: 2\r\n\r\n"),
              1);
  ASSERT_EQ(rec.responses.size(), 1u);
  EXPECT_EQ(rec.responses[0].framing, BodyFraming::chunked);
  ASSERT_EQ(rec.bodies.size(), 1u);
  EXPECT_EQ(rec.bodies[0], "hello world");
  EXPECT_TRUE(rec.errors.empty());
}

TEST(HttpParser, TransferEncodingNotEndingInChunkedIsCloseDelimited) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\nContent-Length: 3\r\n\r\nabcdef"), 1);
  ASSERT_EQ(rec.responses.size(), 1u);
  EXPECT_EQ(rec.responses[0].framing, BodyFraming::until_close);
  parser.close(9);
  ASSERT_EQ(rec.bodies.size(), 1u);
  EXPECT_EQ(rec.bodies[0], "abcdef");
}

TEST(HttpParser, KeepAliveTwoResponsesInOneFeedAndSeparately) {
  const std::string one = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\nhello";
  const std::string two = sse_response(1);
  for (int mode = 0; mode < 2; ++mode) {
    Recorder rec;
    HttpParser parser(HttpParser::Mode::response, rec);
    if (mode == 0) {
      parser.feed(bytes(one + two), 1);
    } else {
      parser.feed(bytes(one), 1);
      parser.feed(bytes(two), 2);
    }
    ASSERT_EQ(rec.responses.size(), 2u);
    EXPECT_EQ(rec.responses[0].framing, BodyFraming::content_length);
    EXPECT_EQ(rec.responses[0].content_length, 5u);
    EXPECT_EQ(rec.responses[0].content_type, "application/json");
    EXPECT_FALSE(rec.responses[0].event_stream);
    EXPECT_TRUE(rec.responses[1].event_stream);
    ASSERT_EQ(rec.bodies.size(), 2u);
    EXPECT_EQ(rec.bodies[0], "hello");
    EXPECT_EQ(rec.bodies[1], openai_event(0));
    EXPECT_TRUE(rec.errors.empty());
  }
}

TEST(HttpParser, PipelinedRequests) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::request, rec);
  const std::string body = R"({"model":"m","stream":true})";
  const std::string wire = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: api.local:8000\r\n"
                           "User-Agent: OpenAI/Python 1.0\r\nContent-Type: Application/JSON\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body +
                           "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                           "POST /upload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
  for (std::size_t split = 0; split <= wire.size(); ++split) {
    Recorder r;
    HttpParser p(HttpParser::Mode::request, r);
    p.feed(bytes(std::string_view(wire).substr(0, split)), 1);
    p.feed(bytes(std::string_view(wire).substr(split)), 2);
    ASSERT_EQ(r.requests.size(), 3u) << split;
    ASSERT_EQ(r.bodies.size(), 3u) << split;
    EXPECT_EQ(r.bodies[0], body);
    EXPECT_EQ(r.bodies[1], "");
    EXPECT_EQ(r.bodies[2], "abc");
    EXPECT_TRUE(r.errors.empty()) << split;
  }
  parser.feed(bytes(wire), 7);
  ASSERT_EQ(rec.requests.size(), 3u);
  const RequestHead& h = rec.requests[0];
  EXPECT_EQ(h.method, "POST");
  EXPECT_EQ(h.target, "/v1/chat/completions?x=1");
  EXPECT_EQ(h.host, "api.local:8000");
  EXPECT_EQ(h.user_agent, "OpenAI/Python 1.0");
  EXPECT_EQ(h.content_type, "application/json");
  EXPECT_EQ(h.framing, BodyFraming::content_length);
  EXPECT_EQ(rec.requests[1].method, "GET");
  EXPECT_EQ(rec.requests[1].framing, BodyFraming::none);
  EXPECT_EQ(rec.requests[2].framing, BodyFraming::chunked);
}

TEST(HttpParser, HeadAnd204And304AndInterimHaveNoBody) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.expect_head_response();
  parser.feed(bytes("HTTP/1.1 100 Continue\r\n\r\n"
                    "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"  // answers HEAD: no body
                    "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n"
                    "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
              1);
  ASSERT_EQ(rec.responses.size(), 5u);
  EXPECT_EQ(rec.responses[0].status, 100);
  EXPECT_EQ(rec.responses[1].framing, BodyFraming::none);
  EXPECT_EQ(rec.responses[2].framing, BodyFraming::none);
  EXPECT_EQ(rec.responses[3].framing, BodyFraming::none);
  EXPECT_EQ(rec.responses[4].framing, BodyFraming::content_length);
  ASSERT_EQ(rec.bodies.size(), 5u);
  EXPECT_EQ(rec.bodies[4], "ok");
  EXPECT_TRUE(rec.errors.empty());
}

TEST(HttpParser, CloseDelimitedBody) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes("HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: a\n\n"), 1);
  parser.feed(bytes("data: b\n\n"), 2);
  EXPECT_TRUE(rec.bodies.empty());
  ASSERT_EQ(rec.responses.size(), 1u);
  EXPECT_EQ(rec.responses[0].framing, BodyFraming::until_close);
  EXPECT_FALSE(rec.responses[0].keep_alive);  // HTTP/1.0 without keep-alive
  parser.close(10);
  ASSERT_EQ(rec.bodies.size(), 1u);
  EXPECT_EQ(rec.bodies[0], "data: a\n\ndata: b\n\n");
  EXPECT_EQ(rec.end_ts[0], 2u);  // time of the piece holding the last byte
  EXPECT_TRUE(rec.errors.empty());
  parser.feed(bytes("HTTP/1.1 200 OK\r\n\r\n"), 11);  // ignored after close
  EXPECT_EQ(rec.responses.size(), 1u);
}

TEST(HttpParser, ConnectionHeaderAndCaps) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  const std::string long_type(1000, 'A');
  parser.feed(bytes("HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Type: " + long_type +
                    "\r\nContent-Length: 0\r\n\r\n"),
              1);
  ASSERT_EQ(rec.responses.size(), 1u);
  EXPECT_FALSE(rec.responses[0].keep_alive);
  EXPECT_EQ(rec.responses[0].content_type, std::string(HttpParser::kMaxFieldValue, 'a'));
  EXPECT_EQ(rec.bodies.size(), 1u);
}

TEST(HttpParser, HoleInsideChunkDataIsExact) {
  const std::string event = openai_event(0) + std::string(2000, 'x') + "\n\n";
  const std::string wire = kSseHead + chunk(event) + chunk(openai_event(1)) + "0\r\n\r\n";
  // Capture keeps the first 512 and last 128 bytes of the big write.
  const std::string big = kSseHead + chunk(event);
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes(big.substr(0, 512)), 1);
  parser.gap(big.size() - 640, 1);
  parser.feed(bytes(big.substr(big.size() - 128)), 1);
  parser.feed(bytes(chunk(openai_event(1)) + "0\r\n\r\n"), 2);
  ASSERT_EQ(rec.bodies.size(), 1u);
  const std::size_t body_start = kSseHead.size() + chunk(event).find("data:");
  const std::string expect = big.substr(body_start, 512 - body_start) + "<gap " +
                             std::to_string(big.size() - 640) + ">" + event.substr(event.size() - 126) +
                             openai_event(1);
  EXPECT_EQ(rec.bodies[0], expect);
  EXPECT_TRUE(rec.errors.empty());
  EXPECT_TRUE(parser.synced());
}

TEST(HttpParser, HoleCoveringChunkFramingResyncsAtLaterPiece) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes(kSseHead), 1);
  // One coalesced write of 6 chunks: head shows 1.5 chunks, hole, tail.
  std::string write;
  for (int i = 0; i < 6; ++i) write += chunk(openai_event(i));
  const std::size_t head = 400, tail = 100;
  parser.feed(bytes(write.substr(0, head)), 2);
  parser.gap(write.size() - head - tail, 2);
  EXPECT_FALSE(parser.synced());
  parser.feed(bytes(write.substr(write.size() - tail)), 2);
  // The next writes are whole chunks: the parser picks framing up again.
  parser.feed(bytes(chunk(openai_event(6))), 3);
  EXPECT_TRUE(parser.synced());
  parser.feed(bytes(chunk(openai_event(7)) + "0\r\n\r\n"), 4);
  EXPECT_TRUE(rec.has_error(ParseError::gap_in_framing));
  ASSERT_EQ(rec.bodies.size(), 1u);
  const std::string& body = rec.bodies[0];
  EXPECT_NE(body.find(openai_event(0)), std::string::npos);
  EXPECT_NE(body.find("<gap "), std::string::npos);
  EXPECT_NE(body.find(openai_event(6)), std::string::npos);
  EXPECT_NE(body.find(openai_event(7)), std::string::npos);
  // The tail's bytes were dropped while looking for framing (reported as a gap).
  EXPECT_EQ(body.substr(body.size() - openai_event(6).size() - openai_event(7).size()),
            openai_event(6) + openai_event(7));
  EXPECT_EQ(rec.end_ts, std::vector<TimestampNs>{4});
}

TEST(HttpParser, ResyncInsidePieceAfterCrlf) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes(kSseHead + "1a"), 1);
  parser.gap(300, 2);  // over chunk-size line and data
  // Tail of a write: end of some event, then a whole chunk.
  parser.feed(bytes("ason\":null}]}\n\n\r\n" + chunk(openai_event(9))), 2);
  parser.feed(bytes("0\r\n\r\n"), 3);
  ASSERT_EQ(rec.bodies.size(), 1u);
  EXPECT_EQ(rec.bodies[0].substr(rec.bodies[0].size() - openai_event(9).size()), openai_event(9));
  EXPECT_TRUE(rec.has_error(ParseError::gap_in_framing));
}

TEST(HttpParser, HoleInContentLengthBody) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nabc"), 1);
  parser.gap(990, 2);
  parser.feed(bytes("1234567"), 3);
  ASSERT_EQ(rec.bodies.size(), 1u);
  EXPECT_EQ(rec.bodies[0], "abc<gap 990>1234567");
  EXPECT_EQ(rec.end_ts[0], 3u);
  // Hole running past the end of a body swallows the next head.
  parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab"), 4);
  parser.gap(100, 5);
  ASSERT_EQ(rec.bodies.size(), 2u);
  EXPECT_EQ(rec.bodies[1], "ab<gap 8>");
  EXPECT_EQ(rec.end_ts[1], 5u);
  EXPECT_TRUE(rec.has_error(ParseError::gap_in_head));
  parser.feed(bytes("lost body bytes\r\n"), 6);
  parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), 7);
  ASSERT_EQ(rec.bodies.size(), 3u);
  EXPECT_EQ(rec.bodies[2], "ok");
  EXPECT_EQ(rec.responses.size(), 3u);
}

TEST(HttpParser, HoleInHeadResyncsAtNextStartLine) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::request, rec);
  parser.feed(bytes("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nCookie: "), 1);
  parser.gap(5000, 1);
  parser.feed(bytes("zzz\r\n\r\n{\"model\":\"x\"}"), 1);
  EXPECT_TRUE(rec.has_error(ParseError::gap_in_head));
  EXPECT_TRUE(rec.requests.empty());
  parser.feed(bytes("GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n"), 2);
  ASSERT_EQ(rec.requests.size(), 1u);
  EXPECT_EQ(rec.requests[0].target, "/v1/models");
}

TEST(HttpParser, MidStreamJoinChunkedEventStream) {
  const std::string wire = chunk(openai_event(1)) + chunk(openai_event(2));
  for (std::size_t split = 0; split <= wire.size(); ++split) {
    Recorder rec;
    HttpParser parser(HttpParser::Mode::response, rec);
    parser.feed(bytes(wire.substr(0, split)), 1);
    parser.feed(bytes(wire.substr(split)), 2);
    ASSERT_EQ(rec.responses.size(), 1u) << split;
    EXPECT_TRUE(rec.responses[0].joined_midstream);
    EXPECT_EQ(rec.responses[0].framing, BodyFraming::chunked);
    EXPECT_TRUE(rec.responses[0].event_stream);
    EXPECT_EQ(rec.body, openai_event(1) + openai_event(2)) << split;
    EXPECT_TRUE(rec.errors.empty());
  }
}

TEST(HttpParser, MidStreamJoinSseFieldsAndAnthropic) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  const std::string ev = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n";
  parser.feed(bytes(ev), 1);
  ASSERT_EQ(rec.responses.size(), 1u);
  EXPECT_TRUE(rec.responses[0].joined_midstream);
  EXPECT_EQ(rec.responses[0].framing, BodyFraming::until_close);
  EXPECT_TRUE(rec.responses[0].event_stream);
  parser.close(2);
  ASSERT_EQ(rec.bodies.size(), 1u);
  EXPECT_EQ(rec.bodies[0], ev);
}

TEST(HttpParser, MidStreamJoinUnknownSkipsToNextStartLine) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes("{\"tail of some json\": 1}\n"), 1);
  parser.feed(bytes("more json body"), 2);
  EXPECT_EQ(rec.errors, std::vector<ParseError>{ParseError::not_http});
  EXPECT_FALSE(parser.synced());
  parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"), 3);
  ASSERT_EQ(rec.responses.size(), 1u);
  EXPECT_FALSE(rec.responses[0].joined_midstream);
  ASSERT_EQ(rec.bodies.size(), 1u);
  EXPECT_EQ(rec.bodies[0], "hi");
  EXPECT_EQ(rec.errors.size(), 1u);  // not_http reported once
}

TEST(HttpParser, MalformedChunkSizeResyncs) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes(kSseHead + "zz\r\nbroken\r\n"), 1);
  EXPECT_TRUE(rec.has_error(ParseError::bad_chunk_size));
  parser.feed(bytes(chunk(openai_event(3))), 2);
  parser.feed(bytes("0\r\n\r\n"), 3);
  ASSERT_EQ(rec.bodies.size(), 1u);
  EXPECT_EQ(rec.bodies[0].substr(rec.bodies[0].find("data:")), openai_event(3));
  // Other malformations: missing CRLF after data, oversized size.
  Recorder rec2;
  HttpParser p2(HttpParser::Mode::response, rec2);
  p2.feed(bytes(kSseHead + "3\r\nabcXX\r\n"), 1);
  p2.feed(bytes(kSseHead.substr(0, 0) + "ffffffffffffffffff\r\n"), 2);
  EXPECT_TRUE(rec2.has_error(ParseError::bad_chunk_size));
  EXPECT_EQ(rec2.body.substr(0, 3), "abc");
}

TEST(HttpParser, BinaryJunkReportsNotHttpOnce) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    Recorder rec;
    HttpParser parser(HttpParser::Mode::response, rec);
    for (int piece = 0; piece < 20; ++piece) {
      std::string junk(1 + rng() % 600, '\0');
      for (char& c : junk) c = static_cast<char>(rng() % 256);
      if (junk[0] == ':' || junk[0] == 'd' || junk[0] == 'H' || std::isxdigit(static_cast<unsigned char>(junk[0])))
        junk[0] = '\x01';
      parser.feed(bytes(junk), piece);
      if (rng() % 4 == 0) parser.gap(rng() % 5000, piece);
    }
    parser.close(100);
    EXPECT_TRUE(rec.responses.empty());
    EXPECT_TRUE(rec.bodies.empty());
    EXPECT_EQ(rec.errors, std::vector<ParseError>{ParseError::not_http});
  }
}

TEST(HttpParser, HeaderTooLarge) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes("HTTP/1.1 200 OK\r\n"), 1);
  const std::string line = "X-Junk: " + std::string(1000, 'j') + "\r\n";
  for (int i = 0; i < 20; ++i) parser.feed(bytes(line), 1);
  EXPECT_TRUE(rec.has_error(ParseError::header_too_large));
  EXPECT_TRUE(rec.responses.empty());
  parser.feed(bytes("HTTP/1.1 204 No Content\r\n\r\n"), 2);
  ASSERT_EQ(rec.responses.size(), 1u);
}

TEST(HttpParser, BadStartLineBetweenMessages) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"), 1);
  parser.feed(bytes("garbage here\r\n"), 2);
  EXPECT_TRUE(rec.has_error(ParseError::bad_start_line));
  parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ny"), 3);
  ASSERT_EQ(rec.bodies.size(), 2u);
  EXPECT_EQ(rec.bodies[1], "y");
}

TEST(HttpParser, CloseInsideMessageIsTruncated) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes(kSseHead + chunk(openai_event(0))), 1);
  parser.close(2);
  EXPECT_EQ(rec.errors, std::vector<ParseError>{ParseError::truncated_message});
  EXPECT_TRUE(rec.bodies.empty());
}

TEST(HttpParser, UpgradeStopsParsing) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"), 1);
  parser.feed(bytes("\x82\x7f binary"), 2);
  EXPECT_EQ(rec.responses.size(), 1u);
  EXPECT_TRUE(rec.errors.empty());
  EXPECT_FALSE(parser.synced());
}

TEST(HttpParser, InvalidContentLength) {
  Recorder rec;
  HttpParser parser(HttpParser::Mode::response, rec);
  parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\nbody"), 1);
  EXPECT_TRUE(rec.has_error(ParseError::bad_header));
  EXPECT_TRUE(rec.responses.empty());
}

TEST(HttpParser, RandomHolesNeverBreakInvariants) {
  // Same stream cut at random places with random holes: no crash, body bytes
  // delivered are always a subsequence-compatible size, message count <= 1.
  std::string body;
  const std::string wire = sse_response(20, &body);
  std::mt19937 rng(1);
  for (int round = 0; round < 300; ++round) {
    Recorder rec;
    HttpParser parser(HttpParser::Mode::response, rec);
    std::size_t at = 0;
    while (at < wire.size()) {
      const std::size_t n = std::min<std::size_t>(wire.size() - at, 1 + rng() % 300);
      if (rng() % 5 == 0) {
        parser.gap(n, at);
      } else {
        parser.feed(bytes(std::string_view(wire).substr(at, n)), at);
      }
      at += n;
    }
    parser.close(at);
    EXPECT_LE(rec.bodies.size(), 1u);
    EXPECT_EQ(parser.position(), wire.size());
  }
}


// The agent's path: HTTP de-chunks, SSE frames, payload interprets. A long
// event is captured as head (512) + hole + tail (128), as the BPF side does.
TEST(HttpParser, EndToEndCapturedLongEvent) {
  struct Pipeline : HttpMessageSink {
    std::vector<EventMeaning> meanings;
    std::vector<TimestampNs> ts;
    SseParser sse{[this](const SseEvent& e) {
      meanings.push_back(interpret_event(e.type, e.data, e.truncated));
      ts.push_back(e.ts);
    }};
    void on_body(std::span<const std::uint8_t> b, std::uint64_t, TimestampNs t) override { sse.feed(b, t); }
    void on_body_gap(std::uint64_t n, TimestampNs t) override { sse.gap(n, t); }
    void on_message_end(TimestampNs t) override { sse.end(t); }
  } pipe;
  HttpParser parser(HttpParser::Mode::response, pipe);
  parser.feed(bytes(kSseHead), 1);
  const std::string long_event =
      "data: {\"id\":\"chatcmpl-abc\",\"model\":\"llama-3-8b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" +
      std::string(3000, 'z') + "\"},\"finish_reason\":null}]}\n\n";
  auto capture = [&](const std::string& write, TimestampNs t) {
    if (write.size() <= 640) {
      parser.feed(bytes(write), t);
      return;
    }
    parser.feed(bytes(write.substr(0, 512)), t);
    parser.gap(write.size() - 640, t);
    parser.feed(bytes(write.substr(write.size() - 128)), t);
  };
  capture(chunk(openai_event(0)), 2);
  capture(chunk(long_event), 3);
  capture(chunk(openai_event(1)), 4);
  capture(chunk("data: [DONE]\n\n"), 5);
  capture("0\r\n\r\n", 6);
  EXPECT_TRUE(pipe.meanings.size() == 4u);
  ASSERT_EQ(pipe.meanings.size(), 4u);
  EXPECT_EQ(pipe.meanings[0].kind, EventKind::content);
  EXPECT_FALSE(pipe.meanings[0].from_partial);
  EXPECT_EQ(pipe.meanings[1].kind, EventKind::content);
  EXPECT_TRUE(pipe.meanings[1].from_partial);
  EXPECT_EQ(pipe.meanings[1].model, "llama-3-8b");
  EXPECT_EQ(pipe.meanings[2].kind, EventKind::content);
  EXPECT_EQ(pipe.meanings[3].kind, EventKind::done);
  EXPECT_EQ(pipe.ts, (std::vector<TimestampNs>{2, 3, 4, 5}));
  EXPECT_EQ(pipe.sse.incomplete_events(), 0u);
}

}  // namespace
}  // namespace infertap::protocol
