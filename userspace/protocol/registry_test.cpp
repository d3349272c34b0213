// The registration list's order on a connection's first bytes: HTTP/2's
// preface before HTTP/1, HTTP/1 text before WebSocket, and a WebSocket frame
// (a session joined after its upgrade) to websocket only.
#include "protocol/registry.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "protocol/websocket/test_encoder.h"
#include "support/session_side.h"

namespace infertap::protocol {
namespace {

struct NullExchange : ExchangeSink {
  void on_response(const ResponseInfo&) override {}
  void on_event(const StreamEvent&) override {}
  void on_body_bytes(std::uint64_t) override {}
  void on_body_gap(std::uint64_t) override {}
  void on_body_undecodable(Undecodable) override {}
  void on_response_end(TimestampNs, ResponseEnd) override {}
  void on_parse_error(ParseError, bool) override {}
};

struct NullSinks : ExchangeSinks {
  NullExchange exchange_sink;
  ExchangeSink* exchange(std::uint64_t) override { return &exchange_sink; }
  void exchange_closed(std::uint64_t) override {}
  void on_problem(Protocol, SessionProblem) override {}
};

// The protocol the list recognises `first` (sent by the traced process) as; none: refused.
std::optional<Protocol> recognised(const std::string& first) {
  NullSinks sinks;
  const auto session = recognise(Flow::outbound, ::infertap::testing::as_bytes(first), sinks, {});
  if (!session) return std::nullopt;
  return session->protocol();
}

TEST(WebsocketRegistry, AFrameIsWebsocketHttpTextStaysHttp) {
  namespace ws = websocket;
  const std::string delta = R"({"type":"response.output_text.delta","response_id":"r","delta":"x"})";
  EXPECT_EQ(recognised(ws::testing::message(delta, ws::Sender::server)), Protocol::websocket);
  EXPECT_EQ(recognised(ws::testing::message(delta, ws::Sender::client)), Protocol::websocket);
  EXPECT_EQ(recognised("GET /v1/realtime HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"), Protocol::http1);
  EXPECT_EQ(recognised("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"), Protocol::http1);
  EXPECT_EQ(recognised("data: {\"choices\":[]}\n\n"), Protocol::http1);
  EXPECT_EQ(recognised(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")), Protocol::http2);
  EXPECT_EQ(recognised(ws::testing::message(delta, ws::Sender::server, nullptr, 0, ws::Opcode::binary)), std::nullopt);
  EXPECT_EQ(recognised(std::string("\x00\x00\x00\x08\x04\xd2\x16\x2f", 8)), std::nullopt);
}

}  // namespace
}  // namespace infertap::protocol
