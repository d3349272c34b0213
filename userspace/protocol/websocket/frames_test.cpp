// The frame reader from frames the test encoder writes: length forms,
// masking both ways and across pieces, fragments with a ping between them,
// control frame rules, close codes, RSV1, holes in a payload, and sync lost
// to a hole over a header and found again.
#include "protocol/websocket/frames.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "protocol/websocket/test_encoder.h"
#include "support/session_side.h"

namespace infertap::protocol::websocket {
namespace {

using testing::FrameBits;
using testing::LengthForm;
using testing::frame;
using testing::message;
using ::infertap::testing::as_bytes;

struct Log : FrameSink {
  std::vector<Message> messages;
  std::vector<ControlFrame> controls;
  std::map<SessionProblem, int> problems;
  std::string streamed;  // payload bytes as they went by
  std::uint64_t streamed_missing = 0, lost = 0;

  void on_message_bytes(const Message&, std::span<const std::uint8_t> bytes, std::uint64_t missing) override {
    streamed.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    streamed_missing += missing;
  }
  void on_message(const Message& m) override { messages.push_back(m); }
  void on_lost(std::uint64_t n) override { lost += n; }
  void on_control(const ControlFrame& f) override { controls.push_back(f); }
  void on_problem(SessionProblem p) override { ++problems[p]; }
};

// One direction fed piece by piece, keeping its position.
struct Feed {
  FrameReader& reader;
  std::uint64_t position = 0;

  void send(std::string_view s, TimestampNs ts) { send_with_hole(s, s.size(), 0, ts); }
  void send_with_hole(std::string_view s, std::size_t head, std::size_t tail, TimestampNs ts) {
    Piece p;
    p.position = position;
    p.length = s.size();
    p.head = as_bytes(s.substr(0, head));
    p.tail = as_bytes(s.substr(s.size() - tail));
    p.ts = ts;
    reader.feed(p);
    position += s.size();
  }
  void lose(std::uint64_t n, TimestampNs ts) {
    reader.gap(n, ts);
    position += n;
  }
};

struct Reader {
  explicit Reader(Sender sender, bool deflate = false) : reader(sender, deflate, 0, log) {}
  Log log;
  FrameReader reader;
  Feed feed{reader};
};

TEST(WebsocketFrames, LengthForms) {
  const std::string short_frame = frame(Opcode::text, "hi");
  EXPECT_EQ(header_size(static_cast<std::uint8_t>(short_frame[1])), 2u);
  const std::string medium = frame(Opcode::text, std::string(300, 'a'));
  const FrameHeader m = parse_header(as_bytes(medium));
  EXPECT_EQ(m.size, 4u);
  EXPECT_EQ(m.length, 300u);
  EXPECT_TRUE(m.minimal_length());
  const std::string large = frame(Opcode::binary, std::string(70000, 'b'), {.masked = true});
  const FrameHeader l = parse_header(as_bytes(large));
  EXPECT_EQ(l.size, 14u);
  EXPECT_EQ(l.length, 70000u);
  EXPECT_TRUE(l.masked);
  EXPECT_TRUE(l.minimal_length());
  // A 64-bit form for a short payload is allowed to read, not to prove a header.
  const FrameHeader loose = parse_header(as_bytes(frame(Opcode::text, "x", {.form = LengthForm::bits64})));
  EXPECT_EQ(loose.length, 1u);
  EXPECT_FALSE(loose.minimal_length());
  EXPECT_TRUE(parse_header(as_bytes(testing::header(Opcode::text, std::uint64_t{1} << 63))).length_too_big());
}

TEST(WebsocketFrames, ServerMessageWithPositionsTimesAndWireBytes) {
  Reader r(Sender::server);
  r.feed.send(frame(Opcode::text, "{\"a\":1}"), 5);
  r.feed.send(frame(Opcode::text, std::string(200, 'x')), 6);
  ASSERT_EQ(r.log.messages.size(), 2u);
  const Message& a = r.log.messages[0];
  EXPECT_EQ(a.opcode, Opcode::text);
  EXPECT_EQ(a.payload, "{\"a\":1}");
  EXPECT_EQ(a.first_position, 0u);
  EXPECT_EQ(a.end_position, 9u);
  EXPECT_EQ(a.wire_bytes, 9u);
  EXPECT_EQ(a.frames, 1u);
  EXPECT_EQ(a.first_ts, 5u);
  EXPECT_EQ(a.end_ts, 5u);
  EXPECT_FALSE(a.truncated);
  const Message& b = r.log.messages[1];
  EXPECT_EQ(b.first_position, 9u);
  EXPECT_EQ(b.wire_bytes, 204u);  // 16-bit length form
  EXPECT_EQ(b.end_position, 213u);
  EXPECT_TRUE(r.log.problems.empty());
}

TEST(WebsocketFrames, ClientFramesUnmaskedAcrossPieces) {
  Reader r(Sender::client);
  const std::string text = "{\"type\":\"response.create\",\"response\":{\"modalities\":[\"text\"]}}";
  const std::string wire = message(text, Sender::client, nullptr, 7);  // fragments of 7 bytes
  // Byte by byte: the header is held across pieces, the mask key's phase carries on.
  for (std::size_t i = 0; i < wire.size(); ++i) r.feed.send(wire.substr(i, 1), 100 + i);
  ASSERT_EQ(r.log.messages.size(), 1u);
  const Message& m = r.log.messages[0];
  EXPECT_EQ(m.payload, text);
  EXPECT_EQ(r.log.streamed, text);
  EXPECT_EQ(m.frames, (text.size() + 6) / 7);
  EXPECT_EQ(m.wire_bytes, wire.size());
  EXPECT_EQ(m.first_ts, 100u);
  EXPECT_EQ(m.end_ts, 100u + wire.size() - 1);
}

TEST(WebsocketFrames, MaskingMustMatchTheSender) {
  Reader client(Sender::client);
  client.feed.send(frame(Opcode::text, "{}"), 1);  // a client frame unmasked
  EXPECT_EQ(client.log.problems[SessionProblem::frame_error], 1);
  EXPECT_EQ(client.log.problems[SessionProblem::desynchronised], 1);
  EXPECT_TRUE(client.log.messages.empty());
  EXPECT_FALSE(client.reader.synchronised());

  Reader server(Sender::server);
  server.feed.send(frame(Opcode::text, "{}", {.masked = true}), 1);  // a server frame masked
  EXPECT_EQ(server.log.problems[SessionProblem::frame_error], 1);
  EXPECT_TRUE(server.log.messages.empty());
}

TEST(WebsocketFrames, FragmentsWithAPingBetween) {
  Reader r(Sender::server);
  r.feed.send(frame(Opcode::text, "{\"type\":", {.fin = false}), 1);
  r.feed.send(frame(Opcode::ping, "p1"), 2);
  r.feed.send(frame(Opcode::continuation, "\"x\"", {.fin = false}), 3);
  r.feed.send(frame(Opcode::pong, ""), 4);
  r.feed.send(frame(Opcode::continuation, "}"), 5);
  ASSERT_EQ(r.log.messages.size(), 1u);
  const Message& m = r.log.messages[0];
  EXPECT_EQ(m.payload, "{\"type\":\"x\"}");
  EXPECT_EQ(m.frames, 3u);
  EXPECT_EQ(m.wire_bytes, 10u + 5u + 3u);  // control frames between are not its bytes
  EXPECT_EQ(m.first_position, 0u);
  EXPECT_EQ(m.end_position, r.feed.position);
  EXPECT_EQ(m.first_ts, 1u);
  EXPECT_EQ(m.end_ts, 5u);
  ASSERT_EQ(r.log.controls.size(), 2u);
  EXPECT_EQ(r.log.controls[0].opcode, Opcode::ping);
  EXPECT_EQ(r.log.controls[0].position, 10u);
  EXPECT_EQ(r.log.controls[0].end_position, 14u);
  EXPECT_EQ(r.log.controls[1].opcode, Opcode::pong);
  EXPECT_TRUE(r.log.problems.empty());
}

TEST(WebsocketFrames, ControlFrameRules) {
  Reader fragmented(Sender::server);
  fragmented.feed.send(frame(Opcode::ping, "a", {.fin = false}), 1);
  EXPECT_EQ(fragmented.log.problems[SessionProblem::frame_error], 1);
  EXPECT_TRUE(fragmented.log.controls.empty());

  Reader long_ping(Sender::server);
  long_ping.feed.send(frame(Opcode::ping, std::string(126, 'a')), 1);
  EXPECT_EQ(long_ping.log.problems[SessionProblem::frame_error], 1);

  Reader orphan(Sender::server);
  orphan.feed.send(frame(Opcode::continuation, "x"), 1);  // no message to continue
  EXPECT_EQ(orphan.log.problems[SessionProblem::frame_error], 1);

  Reader interrupted(Sender::server);
  interrupted.feed.send(frame(Opcode::text, "a", {.fin = false}) + frame(Opcode::text, "b"), 1);
  EXPECT_EQ(interrupted.log.problems[SessionProblem::frame_error], 1);
  EXPECT_TRUE(interrupted.log.messages.empty());

  Reader reserved(Sender::server);
  reserved.feed.send(std::string("\x83\x00", 2), 1);  // opcode 3 is reserved
  EXPECT_EQ(reserved.log.problems[SessionProblem::frame_error], 1);
}

TEST(WebsocketFrames, CloseCode) {
  Reader r(Sender::client);
  r.feed.send(frame(Opcode::close, std::string("\x03\xe9going", 7), {.masked = true}), 9);
  r.feed.send(frame(Opcode::close, "", {.masked = true}), 10);
  ASSERT_EQ(r.log.controls.size(), 2u);
  EXPECT_EQ(r.log.controls[0].opcode, Opcode::close);
  EXPECT_EQ(r.log.controls[0].close_code, 1001);
  EXPECT_EQ(r.log.controls[0].ts, 9u);
  EXPECT_FALSE(r.log.controls[1].close_code);
}

TEST(WebsocketFrames, Rsv1IsCompressionOnAMessagesFirstFrameOnly) {
  Reader deflate(Sender::server, true);
  deflate.feed.send(frame(Opcode::text, "abc", {.fin = false, .rsv1 = true}), 1);
  deflate.feed.send(frame(Opcode::continuation, "d"), 2);
  ASSERT_EQ(deflate.log.messages.size(), 1u);
  EXPECT_TRUE(deflate.log.messages[0].compressed);
  deflate.feed.send(frame(Opcode::text, "abc", {.fin = false, .rsv1 = true}), 3);
  deflate.feed.send(frame(Opcode::continuation, "d", {.rsv1 = true}), 4);
  EXPECT_EQ(deflate.log.problems[SessionProblem::frame_error], 1);
  EXPECT_EQ(deflate.log.messages.size(), 1u);

  Reader control(Sender::server, true);
  control.feed.send(frame(Opcode::ping, "", {.rsv1 = true}), 1);
  EXPECT_EQ(control.log.problems[SessionProblem::frame_error], 1);

  Reader plain(Sender::server, false);  // not negotiated
  plain.feed.send(frame(Opcode::text, "abc", {.rsv1 = true}), 1);
  EXPECT_EQ(plain.log.problems[SessionProblem::frame_error], 1);
  EXPECT_TRUE(plain.log.messages.empty());
}

TEST(WebsocketFrames, SixtyThreeBitLengthWithTheTopBitIsAnError) {
  Reader r(Sender::server);
  r.feed.send(testing::header(Opcode::binary, (std::uint64_t{1} << 63) | 5) + "hello", 1);
  EXPECT_EQ(r.log.problems[SessionProblem::frame_error], 1);
  EXPECT_EQ(r.log.problems[SessionProblem::desynchronised], 1);
}

TEST(WebsocketFrames, HoleInAPayloadTruncatesTheMessage) {
  Reader r(Sender::server);
  const std::string text = "{\"delta\":\"" + std::string(1000, 'A') + "\"}";
  const std::string wire = frame(Opcode::text, text);
  r.feed.send_with_hole(wire, 100, 50, 7);
  r.feed.send(frame(Opcode::text, "{}"), 8);
  ASSERT_EQ(r.log.messages.size(), 2u);
  const Message& m = r.log.messages[0];
  EXPECT_TRUE(m.truncated);
  EXPECT_EQ(m.payload, text.substr(0, 96));  // up to the hole: the 4 header bytes came first
  EXPECT_EQ(m.payload_bytes, text.size());
  EXPECT_EQ(m.missing_bytes, wire.size() - 150);
  EXPECT_EQ(m.end_position, wire.size());
  EXPECT_EQ(r.log.streamed_missing, wire.size() - 150);
  EXPECT_EQ(r.log.messages[1].first_position, wire.size());
  EXPECT_TRUE(r.log.problems.empty());
}

TEST(WebsocketFrames, LongMessageKeepsItsHead) {
  Reader r(Sender::server);
  const std::string text(kMaxMessage + 5000, 'z');
  r.feed.send(frame(Opcode::text, text), 1);
  ASSERT_EQ(r.log.messages.size(), 1u);
  EXPECT_TRUE(r.log.messages[0].truncated);
  EXPECT_EQ(r.log.messages[0].payload.size(), kMaxMessage);
  EXPECT_EQ(r.log.messages[0].payload_bytes, text.size());
  EXPECT_EQ(r.log.messages[0].missing_bytes, 0u);
}

TEST(WebsocketFrames, ResyncAfterAGapSwallowingAHeader) {
  Reader r(Sender::server);
  r.feed.send(frame(Opcode::text, "{\"n\":1}"), 1);
  const std::string lost = frame(Opcode::text, "{\"n\":2}");
  r.feed.lose(lost.size(), 2);
  EXPECT_EQ(r.log.problems[SessionProblem::desynchronised], 1);
  // A piece that starts inside a payload proves nothing: still lost.
  const std::string next = frame(Opcode::text, "{\"n\":3,\"pad\":\"" + std::string(300, 'q') + "\"}");
  r.feed.lose(60, 3);
  r.feed.send(next.substr(60), 4);
  EXPECT_FALSE(r.reader.synchronised());
  EXPECT_EQ(r.log.lost, lost.size() + next.size());
  // A piece that begins with a text frame whose payload opens a JSON object.
  const std::uint64_t at = r.feed.position;
  r.feed.send(frame(Opcode::text, "{\"n\":4}"), 5);
  EXPECT_EQ(r.log.problems[SessionProblem::resynchronised], 1);
  ASSERT_EQ(r.log.messages.size(), 2u);
  EXPECT_EQ(r.log.messages[1].payload, "{\"n\":4}");
  EXPECT_EQ(r.log.messages[1].first_position, at);
  EXPECT_EQ(r.log.messages[1].end_position, r.feed.position);
}

TEST(WebsocketFrames, HoleOverAHeaderInsideAPiece) {
  Reader r(Sender::server);
  const std::string a = frame(Opcode::text, "{\"n\":1}");
  const std::string b = frame(Opcode::text, "{\"n\":2}");
  r.feed.send_with_hole(a + b, 4, 3, 1);  // the hole runs from a's payload over b's header
  EXPECT_EQ(r.log.problems[SessionProblem::desynchronised], 1);
  ASSERT_EQ(r.log.messages.size(), 1u);  // a's end is known: a, truncated
  EXPECT_TRUE(r.log.messages[0].truncated);
  EXPECT_EQ(r.log.messages[0].end_position, a.size());
  r.feed.send(frame(Opcode::ping, "") + frame(Opcode::text, "{}"), 2);  // a ping proven by the header after it
  EXPECT_EQ(r.log.problems[SessionProblem::resynchronised], 1);
  EXPECT_EQ(r.log.controls.size(), 1u);
  EXPECT_EQ(r.log.messages.size(), 2u);
}

TEST(WebsocketFrames, WholeFramesEndingACallsTailAreFoundAgain) {
  // One read of many messages: its head and tail captured, a hole between that
  // swallows headers. The tail's last whole frames end where the read did.
  Reader r(Sender::server);
  const std::string big = frame(Opcode::text, "{\"audio\":\"" + std::string(3000, 'A') + "\"}");
  const std::string delta = frame(Opcode::text, "{\"type\":\"response.output_audio_transcript.delta\"}");
  const std::string done = frame(Opcode::text, "{\"type\":\"response.done\"}");
  const std::string read = big + big + delta + done;
  const std::size_t tail = 40 + delta.size() + done.size();  // some of the second big frame's payload, then two whole frames
  r.feed.send_with_hole(read, 64, tail, 1);
  EXPECT_EQ(r.log.problems[SessionProblem::desynchronised], 1);
  EXPECT_EQ(r.log.problems[SessionProblem::resynchronised], 1);
  ASSERT_EQ(r.log.messages.size(), 3u) << "the first big frame (truncated), then the tail's two";
  EXPECT_EQ(r.log.messages[1].payload, "{\"type\":\"response.output_audio_transcript.delta\"}");
  EXPECT_EQ(r.log.messages[1].first_position, 2 * big.size());
  EXPECT_EQ(r.log.messages[2].end_position, read.size());
  EXPECT_TRUE(r.reader.synchronised());
  // A tail whose frames do not end at its end proves nothing.
  Reader cut(Sender::server);
  cut.feed.send_with_hole(read.substr(0, read.size() - 1), 64, tail - 1, 1);
  EXPECT_EQ(cut.log.problems[SessionProblem::resynchronised], 0);
  EXPECT_EQ(frames_ending_at_end(as_bytes(delta + done), Sender::server, false), 0u);
  EXPECT_EQ(frames_ending_at_end(as_bytes(delta + done), Sender::client, false), std::nullopt) << "unmasked: not a client's";
}

TEST(WebsocketFrames, ProvableHeaders) {
  const auto prove = [](const std::string& s, Sender sender, bool deflate = false) {
    return provable(as_bytes(s), sender, deflate);
  };
  EXPECT_TRUE(prove(frame(Opcode::text, "{\"a\":1}"), Sender::server));
  EXPECT_FALSE(prove(frame(Opcode::text, "[1]"), Sender::server));            // not an object
  EXPECT_TRUE(prove(message("{\"a\":1}", Sender::client), Sender::client));    // '{' after unmasking
  EXPECT_TRUE(prove(message("{}", Sender::client) + "\x81", Sender::client));
  EXPECT_FALSE(prove(message("{\"a\":1}", Sender::client), Sender::server));   // the mask bit is the client's
  EXPECT_FALSE(prove(frame(Opcode::continuation, "{}"), Sender::server));
  EXPECT_FALSE(prove(frame(Opcode::ping, ""), Sender::server));                // nothing after it to check
  EXPECT_TRUE(prove(frame(Opcode::ping, "") + frame(Opcode::pong, ""), Sender::server));
  EXPECT_FALSE(prove(frame(Opcode::text, "{}") + "\xff\xff", Sender::server));  // the next header is invalid
  EXPECT_FALSE(prove(frame(Opcode::text, "{}") + "\xf1", Sender::server));      // even the first byte of it
  EXPECT_TRUE(prove(frame(Opcode::text, "{}") + "\x81", Sender::server));
  EXPECT_FALSE(prove(frame(Opcode::text, "{}") + "\x81\x80", Sender::server));  // masked by a server
  EXPECT_TRUE(prove(frame(Opcode::text, "{}") + "\x81\x7f\x00", Sender::server));
  EXPECT_FALSE(prove(frame(Opcode::text, "{", {.fin = false}) + frame(Opcode::text, "}"), Sender::server));
  EXPECT_TRUE(prove(frame(Opcode::text, "{", {.fin = false}) + frame(Opcode::continuation, "}"), Sender::server));
  EXPECT_TRUE(prove(frame(Opcode::text, "\x01\x02", {.rsv1 = true}), Sender::server, true));
  EXPECT_FALSE(prove(frame(Opcode::text, "\x01\x02", {.rsv1 = true}), Sender::server, false));
  EXPECT_FALSE(prove(frame(Opcode::text, "{}", {.form = LengthForm::bits16}), Sender::server));
  EXPECT_FALSE(prove(testing::header(Opcode::text, kMaxPlausibleFrame + 1) + "{", Sender::server));
}

TEST(WebsocketFrames, BytesBeforeTheStartAreNotFrames) {
  Log log;
  FrameReader reader(Sender::server, false, 10, log);
  Feed feed{reader};
  feed.send(std::string(10, '-') + frame(Opcode::text, "{}"), 1);  // the 101's last bytes, then a frame
  ASSERT_EQ(log.messages.size(), 1u);
  EXPECT_EQ(log.messages[0].first_position, 10u);
  EXPECT_TRUE(log.problems.empty());
}

}  // namespace
}  // namespace infertap::protocol::websocket
