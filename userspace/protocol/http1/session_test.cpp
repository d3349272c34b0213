// Http1Session from pieces of both directions: the role the first bytes give,
// responses paired with their requests in order, events placed at the stream
// position of their last byte, and how each response ended.
#include "protocol/http1/session.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "support/session_side.h"

namespace infertap::protocol {
namespace {

using testing::as_bytes;

struct Recorder : ExchangeSink {
  struct Response {
    ResponseInfo info;
    std::string method, target;
    std::vector<std::string> events;
    std::vector<std::optional<std::uint64_t>> end_positions;
    std::optional<ResponseEnd> end;
    std::uint64_t body = 0, gaps = 0;
    std::vector<bool> exact;
    std::optional<Undecodable> undecodable;
  };
  std::vector<Response> responses;
  std::vector<ParseError> errors;

  void on_response(const ResponseInfo& r) override {
    Response out;
    out.info = r;
    if (r.request) {
      out.method = r.request->method;
      out.target = r.request->target;
    }
    out.info.request = nullptr;  // valid only during the call
    responses.push_back(out);
  }
  void on_event(const StreamEvent& e) override {
    responses.back().events.emplace_back(e.data);
    responses.back().end_positions.push_back(e.end_position);
    responses.back().exact.push_back(e.end_position_exact);
  }
  void on_body_undecodable(Undecodable why) override { responses.back().undecodable = why; }
  void on_body_bytes(std::uint64_t n) override { responses.back().body += n; }
  void on_body_gap(std::uint64_t n) override { responses.back().gaps += n; }
  void on_response_end(TimestampNs, ResponseEnd how) override { responses.back().end = how; }
  void on_parse_error(ParseError e, bool) override { errors.push_back(e); }
};

using Side = testing::Side<Http1Session>;

const std::string kRequest = "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
const std::string kStreamHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: ";

TEST(Http1Session, FirstBytesGiveTheRole) {
  EXPECT_EQ(role_from_first_bytes(Flow::inbound, as_bytes("GET / HTTP/1.1\r\n")), Role::server);
  EXPECT_EQ(role_from_first_bytes(Flow::outbound, as_bytes("POST /v1 HTTP/1.1\r\n")), Role::client);
  EXPECT_EQ(role_from_first_bytes(Flow::inbound, as_bytes("HTTP/1.1 200 OK\r\n")), Role::client);
  EXPECT_EQ(role_from_first_bytes(Flow::outbound, as_bytes("data: {}\n\n")), Role::server);
  EXPECT_EQ(role_from_first_bytes(Flow::outbound, as_bytes("1f\r\ndata: x")), Role::server);
  EXPECT_EQ(role_from_first_bytes(Flow::outbound, as_bytes("\x16\x03\x01\x02\x00")), Role::unknown);
}

TEST(Http1Session, NotHttpIsRefused) {
  Recorder rec;
  Http1Session session(rec, 4096);
  EXPECT_FALSE(session.decide(Flow::inbound, as_bytes("SSH-2.0-OpenSSH_9.2\r\n")));
  EXPECT_FALSE(session.accepts(Flow::inbound));
}

TEST(Http1Session, A101HandsTheNextProtocolWhereItsBytesBegin) {
  Recorder rec;
  Http1Session session(rec, 4096);
  const std::string request = "GET /v1/realtime?model=m HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
  const std::string head = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: WebSocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Extensions: permessage-deflate; Server_No_Context_Takeover\r\n"
                           "Sec-WebSocket-Protocol: realtime\r\n\r\n";
  ASSERT_TRUE(session.decide(Flow::inbound, as_bytes(request)));
  Side in{session, Flow::inbound}, out{session, Flow::outbound};
  in.send(request, 1);
  EXPECT_EQ(session.upgrade(), nullptr);
  out.send(head + "\x81\x02hi", 2);  // the new protocol's first frame rides in the 101's piece
  const UpgradeStart* up = session.upgrade();
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->role, Role::server);
  EXPECT_EQ(up->upgrade, "websocket");
  EXPECT_EQ(up->extensions, "permessage-deflate; server_no_context_takeover");
  EXPECT_EQ(up->protocol, "realtime");
  EXPECT_EQ(up->outbound_position, head.size()) << "just past the 101's blank line";
  EXPECT_EQ(up->inbound_position, request.size()) << "just past the upgrade request";
  ASSERT_NE(up->request, nullptr);
  EXPECT_EQ(up->request->target, "/v1/realtime?model=m");
  EXPECT_TRUE(rec.responses.empty()) << "a 101 is no response of its own";
}

TEST(Http1Session, PipelinedResponsesAnswerTheirRequestsInOrder) {
  Recorder rec;
  Http1Session session(rec, 4096);
  ASSERT_TRUE(session.decide(Flow::inbound, as_bytes(kRequest)));
  EXPECT_EQ(session.role(), Role::server);
  EXPECT_TRUE(session.carries_responses(Flow::outbound));
  Side in{session, Flow::inbound}, out{session, Flow::outbound};
  in.send(kRequest, 1);
  in.send("GET /health HTTP/1.1\r\n\r\n", 2);
  const std::string event = "data: {\"a\":1}\n\n";
  const std::string head = kStreamHead + std::to_string(event.size()) + "\r\n\r\n";
  out.send(head, 3);
  out.send(event, 4);
  out.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 5);
  ASSERT_EQ(rec.responses.size(), 2u);
  EXPECT_EQ(rec.responses[0].target, "/v1/chat/completions");
  EXPECT_EQ(rec.responses[0].info.exchange, 0u);
  EXPECT_TRUE(rec.responses[0].info.event_stream);
  EXPECT_EQ(rec.responses[0].events, std::vector<std::string>{"{\"a\":1}"});
  // The event's last byte is the last byte of the piece that carried it.
  ASSERT_EQ(rec.responses[0].end_positions.size(), 1u);
  EXPECT_EQ(rec.responses[0].end_positions[0], head.size() + event.size());
  EXPECT_EQ(rec.responses[0].end, ResponseEnd::complete);
  EXPECT_EQ(rec.responses[1].target, "/health");
  EXPECT_FALSE(rec.responses[1].info.event_stream);
  EXPECT_EQ(rec.responses[1].body, 0u) << "only event-stream bodies are handed on";
}

TEST(Http1Session, HolesCountAsBodyAndKeepPositions) {
  Recorder rec;
  Http1Session session(rec, 4096);
  ASSERT_TRUE(session.decide(Flow::inbound, as_bytes(kRequest)));
  Side in{session, Flow::inbound}, out{session, Flow::outbound};
  in.send(kRequest, 1);
  const std::string e1 = "data: one\n\n", e2 = "data: two\n\n";
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";  // until close
  out.send(head, 2);
  // One call moved e1 + e2; only e1's first 4 bytes and e2 were captured.
  const std::string both = e1 + e2;
  out.send_with_hole(both, 4, e2.size(), 3);
  session.close(4);
  ASSERT_EQ(rec.responses.size(), 1u);
  const auto& r = rec.responses[0];
  EXPECT_EQ(r.gaps, e1.size() - 4);
  EXPECT_EQ(r.body + r.gaps, both.size());
  ASSERT_FALSE(r.events.empty());
  EXPECT_EQ(r.events.back(), "two");
  EXPECT_EQ(r.end_positions.back(), head.size() + both.size());
  EXPECT_EQ(r.end, ResponseEnd::complete) << "an until-close body ends with the connection";
}

TEST(Http1Session, AResponseTheConnectionCutShortSaysSo) {
  Recorder rec;
  Http1Session session(rec, 4096);
  ASSERT_TRUE(session.decide(Flow::outbound, as_bytes(kRequest)));  // a client
  EXPECT_EQ(session.role(), Role::client);
  Side out{session, Flow::outbound}, in{session, Flow::inbound};
  out.send(kRequest, 1);
  out.send(kRequest, 2);
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
  in.send(head + "b\r\ndata: one\n\n\r\n0\r\n\r\n", 3);
  in.send(head + "b\r\ndata: two\n\n\r\n", 4);
  EXPECT_TRUE(session.response_open());
  session.close(5);
  EXPECT_FALSE(session.response_open());
  ASSERT_EQ(rec.responses.size(), 2u);
  EXPECT_EQ(rec.responses[0].end, ResponseEnd::complete);
  EXPECT_EQ(rec.responses[1].events, std::vector<std::string>{"two"});
  EXPECT_EQ(rec.responses[1].end, ResponseEnd::cut_short);
  EXPECT_EQ(rec.errors, std::vector<ParseError>{ParseError::truncated_message});
}

std::string gzip(std::string_view text) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, text.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A compressing gateway's stream: events are found in the decoded bytes, and
// each is placed no later than the compressed bytes that produced it.
TEST(Http1Session, CompressedEventsAreDecodedAndPlacedByTheirCompressedBytes) {
  Recorder rec;
  Http1Session session(rec, 4096);
  ASSERT_TRUE(session.decide(Flow::inbound, as_bytes(kRequest)));
  Side in{session, Flow::inbound}, out{session, Flow::outbound};
  in.send(kRequest, 1);
  const std::string body = gzip("data: one\n\ndata: two\n\ndata: three\n\n");
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  out.send(head, 2);
  out.send(body.substr(0, body.size() / 2), 3);
  out.send(body.substr(body.size() / 2), 4);
  ASSERT_EQ(rec.responses.size(), 1u);
  const auto& r = rec.responses[0];
  EXPECT_EQ(r.info.content_encoding, ContentEncoding::gzip);
  EXPECT_EQ(r.events, (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_EQ(r.body, body.size()) << "body bytes are counted on the wire";
  EXPECT_EQ(r.end_positions.back(), head.size() + body.size());
  EXPECT_EQ(r.exact, (std::vector<bool>{false, false, false}));
  EXPECT_FALSE(r.undecodable);
  EXPECT_EQ(r.end, ResponseEnd::complete);
}

TEST(Http1Session, ACompressedBodyThatCannotBeDecodedSaysWhy) {
  const std::string head_start = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n";
  for (const std::string& coding : {std::string("compress"), std::string("gzip")}) {
    Recorder rec;
    Http1Session session(rec, 4096);
    ASSERT_TRUE(session.decide(Flow::inbound, as_bytes(kRequest)));
    Side in{session, Flow::inbound}, out{session, Flow::outbound};
    in.send(kRequest, 1);
    out.send(head_start + "Content-Encoding: " + coding + "\r\n\r\n", 2);
    const std::string body = gzip("data: one\n\ndata: two\n\n");
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", body.size());
    // The capture missed the middle of the chunk.
    const std::string chunk = size + body + "\r\n0\r\n\r\n";
    Piece p;
    p.position = out.position;
    p.length = chunk.size();
    p.head = as_bytes(std::string_view(chunk).substr(0, 12));
    p.tail = as_bytes(std::string_view(chunk).substr(chunk.size() - 12));
    p.ts = 3;
    session.feed(Flow::outbound, p);
    ASSERT_EQ(rec.responses.size(), 1u);
    EXPECT_EQ(rec.responses[0].undecodable,
              coding == "gzip" ? ExchangeSink::Undecodable::capture_hole : ExchangeSink::Undecodable::unsupported);
    EXPECT_TRUE(rec.responses[0].events.empty());
    EXPECT_EQ(rec.responses[0].end, ResponseEnd::complete);
  }
}

}  // namespace
}  // namespace infertap::protocol
