// The websocket session from realtime conversations the test encoder writes:
// each response its own exchange with its request, events at the stream
// position past their last frame, server VAD, session traffic counted,
// audio, overlapping responses, closes, permessage-deflate with and without
// context takeover, holes and lost sync; and sessions the agent joined after
// their upgrade, recognised from their first frame.
#include "protocol/websocket/session.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "protocol/payload/declared.h"
#include "protocol/websocket/test_encoder.h"
#include "support/session_side.h"

namespace infertap::protocol::websocket {
namespace {

using testing::Compressor;

struct Event {
  std::string type, data;
  TimestampNs ts = 0, first_byte_ts = 0;
  std::uint64_t body_offset = 0;
  std::uint32_t wire_bytes = 0;
  bool truncated = false;
  std::optional<std::uint64_t> end_position;
  bool exact = false;
};

struct ExchangeLog : ExchangeSink {
  std::optional<RequestInfo> request;
  std::optional<ResponseInfo> info;
  std::string info_target;  // through ResponseInfo::request
  std::vector<Event> events;
  std::uint64_t body = 0, gaps = 0;
  std::vector<Undecodable> undecodable;
  std::optional<MessageStats> stats;
  std::optional<ResponseEnd> end;
  TimestampNs end_ts = 0;
  std::vector<std::string> calls;

  void on_request_end(const RequestInfo& r) override {
    calls.push_back("request");
    request = r;
  }
  void on_response(const ResponseInfo& r) override {
    calls.push_back("response");
    info = r;
    if (r.request) info_target = r.request->target;
    info->request = nullptr;
  }
  void on_event(const StreamEvent& e) override {
    calls.push_back("event");
    events.push_back({std::string(e.type), std::string(e.data), e.ts, e.first_byte_ts, e.body_offset, e.wire_bytes,
                      e.truncated, e.end_position, e.end_position_exact});
  }
  void on_body_bytes(std::uint64_t n) override { body += n; }
  void on_body_gap(std::uint64_t n) override { gaps += n; }
  void on_body_undecodable(Undecodable why) override { undecodable.push_back(why); }
  void on_message_stats(const MessageStats& s) override {
    calls.push_back("stats");
    stats = s;
  }
  void on_response_end(TimestampNs ts, ResponseEnd how) override {
    calls.push_back("end");
    end = how;
    end_ts = ts;
  }
  void on_parse_error(ParseError, bool) override {}
};

struct Sinks : ExchangeSinks {
  std::map<std::uint64_t, ExchangeLog> exchanges;
  std::vector<std::uint64_t> closed;
  std::map<SessionProblem, int> problems;
  ExchangeSink* exchange(std::uint64_t id) override { return &exchanges[id]; }
  void exchange_closed(std::uint64_t id) override { closed.push_back(id); }
  void on_problem(Protocol p, SessionProblem problem) override {
    EXPECT_EQ(p, Protocol::websocket);
    ++problems[problem];
  }
  ExchangeLog& nth(std::uint64_t n) { return exchanges.at(kUpgradedIdBase + n); }
};

using Side = ::infertap::testing::Side<protocol::Session>;

constexpr std::uint64_t kServerStart = 180, kClientStart = 250;  // past the 101 head, past the upgrade request

std::string created(std::string_view id) {
  return R"({"type":"response.created","event_id":"e1","response":{"object":"realtime.response","id":")" +
         std::string(id) + R"(","status":"in_progress","output":[]}})";
}
std::string text_delta(std::string_view id, std::string_view text) {
  return R"({"type":"response.output_text.delta","event_id":"e2","response_id":")" + std::string(id) +
         R"(","item_id":"item_1","output_index":0,"content_index":0,"delta":")" + std::string(text) + "\"}";
}
std::string audio_delta(std::string_view id, std::string_view base64) {
  return R"({"type":"response.output_audio.delta","event_id":"e3","response_id":")" + std::string(id) +
         R"(","item_id":"item_1","output_index":0,"content_index":0,"delta":")" + std::string(base64) + "\"}";
}
std::string done(std::string_view id) {
  return R"({"type":"response.done","event_id":"e9","response":{"object":"realtime.response","id":")" + std::string(id) +
         R"(","status":"completed","usage":{"total_tokens":30,"input_tokens":10,"output_tokens":20}}})";
}
const std::string kRateLimits = R"({"type":"rate_limits.updated","event_id":"e4","rate_limits":[{"name":"tokens","remaining":100}]})";
const std::string kCreate = R"({"type":"response.create","response":{"modalities":["text"],"instructions":"Be brief."}})";
const std::string kAppend = R"({"type":"input_audio_buffer.append","audio":"AAAA"})";

// A traced server (or client) after a 101, with both directions' senders.
struct Conversation {
  Conversation(Role role, std::string extensions = "", std::size_t body_head = 4096,
               const DeclaredFormats* formats = nullptr, std::string target = "/v1/realtime?model=gpt-realtime") {
    upgrade.method = "GET";
    upgrade.target = std::move(target);
    start.role = role;
    start.request = &upgrade;
    start.upgrade = "websocket";
    start.extensions = std::move(extensions);
    start.ts = 1;
    start.outbound_position = role == Role::server ? kServerStart : kClientStart;
    start.inbound_position = role == Role::server ? kClientStart : kServerStart;
    settings.request_body_head = body_head;
    settings.formats = formats;
    session = make_upgraded(start, sinks, settings);
    to_client.emplace(Side{*session, role == Role::server ? Flow::outbound : Flow::inbound, kServerStart});
    to_server.emplace(Side{*session, role == Role::server ? Flow::inbound : Flow::outbound, kClientStart});
  }

  // One message from the server (compressed when `c` is given), its end position.
  std::uint64_t server(std::string_view json, TimestampNs ts, Compressor* c = nullptr) {
    to_client->send(testing::message(json, Sender::server, c), ts);
    return to_client->position;
  }
  void client(std::string_view json, TimestampNs ts, Compressor* c = nullptr) {
    to_server->send(testing::message(json, Sender::client, c), ts);
  }
  // resp_1, compressed: created, a delta the capture cut, a delta, done.
  void response_with_a_holed_message(Compressor& c) {
    server(created("resp_1"), 1, &c);
    const std::string wire = testing::message(text_delta("resp_1", std::string(400, 'x')), Sender::server, &c);
    to_client->send_with_hole(wire, 6, 2, 2);
    server(text_delta("resp_1", "y"), 3, &c);
    server(done("resp_1"), 4, &c);
  }

  Sinks sinks;
  RequestInfo upgrade;
  UpgradeStart start;
  SessionSettings settings;
  std::unique_ptr<protocol::Session> session;
  std::optional<Side> to_client, to_server;
};

TEST(WebsocketSession, MadeOnlyForAWebsocketUpgrade) {
  Sinks sinks;
  UpgradeStart start;
  start.role = Role::server;
  start.upgrade = "h2c";
  EXPECT_EQ(make_upgraded(start, sinks, {}), nullptr);
  start.upgrade = "websocket";
  const auto s = make_upgraded(start, sinks, {});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->protocol(), Protocol::websocket);
  EXPECT_EQ(s->role(), Role::server);
  EXPECT_TRUE(s->carries_responses(Flow::outbound));
  EXPECT_FALSE(s->carries_responses(Flow::inbound));
  EXPECT_FALSE(s->decide(Flow::outbound, {}));
  start.role = Role::client;
  EXPECT_TRUE(make_upgraded(start, sinks, {})->carries_responses(Flow::inbound));
}

TEST(WebsocketSession, AResponsesEventsWithTheRequestThatAskedForIt) {
  Conversation c(Role::server);
  c.server(R"({"type":"session.created","event_id":"e0","session":{"id":"sess_1"}})", 5);
  c.client(R"({"type":"session.update","session":{"instructions":"x"}})", 8);
  c.client(kCreate, 10);
  const std::uint64_t created_at = c.to_client->position;
  const std::uint64_t e1 = c.server(created("resp_1"), 20);
  c.server(kRateLimits, 21);
  const std::uint64_t e2 = c.server(text_delta("resp_1", "Hel"), 22);
  const std::uint64_t e3 = c.server(text_delta("resp_1", "lo"), 23);
  const std::uint64_t e4 = c.server(done("resp_1"), 24);

  ASSERT_EQ(c.sinks.exchanges.size(), 1u);
  const ExchangeLog& x = c.sinks.nth(0);
  EXPECT_EQ(x.calls, (std::vector<std::string>{"request", "response", "event", "event", "event", "event", "stats", "end"}));
  ASSERT_TRUE(x.request);
  EXPECT_EQ(x.request->method, "GET");
  EXPECT_EQ(x.request->target, "/v1/realtime?model=gpt-realtime");
  EXPECT_EQ(x.request->start_ns, 10u);
  EXPECT_EQ(x.request->end_ns, 10u);
  EXPECT_TRUE(x.request->complete);
  EXPECT_EQ(x.request->body_head, kCreate);
  EXPECT_EQ(x.request->body_bytes, kCreate.size());
  ASSERT_TRUE(x.info);
  EXPECT_EQ(x.info->exchange, kUpgradedIdBase);
  EXPECT_EQ(x.info->status, 101);
  EXPECT_EQ(x.info->content_type, "application/json");
  EXPECT_TRUE(x.info->event_stream);
  EXPECT_EQ(x.info->event_framing, EventFraming::websocket);
  EXPECT_EQ(x.info->protocol, Protocol::websocket);
  EXPECT_EQ(x.info->http_version, HttpVersion::http1_1);
  EXPECT_EQ(x.info->framing, BodyFraming::none);
  EXPECT_EQ(x.info->head_ns, 20u);
  EXPECT_EQ(x.info_target, "/v1/realtime?model=gpt-realtime");

  ASSERT_EQ(x.events.size(), 4u);
  EXPECT_EQ(x.events[0].type, "response.created");
  EXPECT_EQ(x.events[1].type, "response.output_text.delta");
  EXPECT_EQ(x.events[1].data, text_delta("resp_1", "Hel"));
  EXPECT_EQ(x.events[3].type, "response.done");
  EXPECT_EQ(x.events[0].end_position, e1);
  EXPECT_EQ(x.events[1].end_position, e2);
  EXPECT_EQ(x.events[2].end_position, e3);
  EXPECT_EQ(x.events[3].end_position, e4);
  EXPECT_TRUE(x.events[3].exact);
  EXPECT_EQ(x.events[2].ts, 23u);
  EXPECT_EQ(x.events[2].first_byte_ts, 23u);
  // Offsets count this response's wire bytes only (not the rate limits between).
  EXPECT_EQ(x.events[0].body_offset, 0u);
  EXPECT_EQ(x.events[0].wire_bytes, e1 - created_at);
  EXPECT_EQ(x.events[1].body_offset, e1 - created_at);
  EXPECT_EQ(x.events[3].wire_bytes, e4 - e3);
  EXPECT_EQ(x.body, x.events[0].wire_bytes + x.events[1].wire_bytes + x.events[2].wire_bytes + x.events[3].wire_bytes);
  EXPECT_EQ(x.end, ResponseEnd::complete);
  EXPECT_EQ(x.end_ts, 24u);
  ASSERT_TRUE(x.stats);
  EXPECT_EQ(x.stats->frames, 4u);
  EXPECT_EQ(x.stats->other_messages, 2u);  // session.created before it, rate_limits.updated during it
  EXPECT_EQ(x.stats->client_messages, 0u);
  EXPECT_EQ(x.stats->control_frames, 0u);
  EXPECT_FALSE(x.stats->compressed);
  EXPECT_FALSE(x.stats->close_code);
  EXPECT_EQ(c.sinks.closed, std::vector<std::uint64_t>{kUpgradedIdBase});
  EXPECT_EQ(static_cast<websocket::Session&>(*c.session).open_responses(), 0u);
  EXPECT_TRUE(c.sinks.problems.empty());
}

TEST(WebsocketSession, ServerVadResponseAnswersTheLastClientMessage) {
  Conversation c(Role::server);
  c.client(kAppend, 1);
  const std::string last = R"({"type":"input_audio_buffer.append","audio":"BBBB"})";
  c.client(last, 2);
  c.server(R"({"type":"input_audio_buffer.speech_stopped","event_id":"e","audio_end_ms":900,"item_id":"i"})", 3);
  c.server(R"({"type":"input_audio_buffer.committed","event_id":"e","item_id":"i"})", 4);
  c.server(created("resp_1"), 5);
  c.client(kAppend, 6);  // the user goes on talking
  c.server(text_delta("resp_1", "ok"), 7);
  c.server(done("resp_1"), 8);
  // The next response answers what the user said meanwhile.
  c.server(created("resp_2"), 20);
  c.server(done("resp_2"), 21);
  // One with no client message since the last opened: its own start.
  c.server(created("resp_3"), 30);
  c.server(done("resp_3"), 31);

  const ExchangeLog& first = c.sinks.nth(0);
  ASSERT_TRUE(first.request);
  EXPECT_EQ(first.request->end_ns, 2u);
  EXPECT_EQ(first.request->body_head, last);
  ASSERT_TRUE(first.stats);
  EXPECT_EQ(first.stats->client_messages, 1u);
  EXPECT_EQ(first.stats->other_messages, 2u);
  ASSERT_TRUE(c.sinks.nth(1).request);
  EXPECT_EQ(c.sinks.nth(1).request->end_ns, 6u);
  const ExchangeLog& third = c.sinks.nth(2);
  ASSERT_TRUE(third.request);
  EXPECT_EQ(third.request->start_ns, 30u);
  EXPECT_EQ(third.request->end_ns, 30u);
  EXPECT_EQ(third.request->body_head, "");
  EXPECT_EQ(third.request->target, "/v1/realtime?model=gpt-realtime");
  EXPECT_EQ(third.end, ResponseEnd::complete);
}

TEST(WebsocketSession, AudioBytesInTheDeclaredFormat) {
  Conversation c(Role::server);
  c.server(R"({"type":"session.created","session":{"output_audio_format":"pcm16"}})", 1);
  c.client(kCreate, 2);
  c.server(created("resp_1"), 3);
  c.server(audio_delta("resp_1", "AAAAAAAA"), 4);  // 6 bytes
  c.server(audio_delta("resp_1", "AAAAAA=="), 5);  // 4 bytes
  // A long delta the capture cut: counted from its length on the wire.
  const std::string big = audio_delta("resp_1", std::string(8000, 'A'));
  c.to_client->send_with_hole(testing::message(big, Sender::server), 300, 10, 6);
  c.server(R"({"type":"response.output_audio_transcript.delta","response_id":"resp_1","delta":"hi"})", 7);
  c.server(done("resp_1"), 8);
  const ExchangeLog& x = c.sinks.nth(0);
  ASSERT_TRUE(x.stats);
  EXPECT_EQ(x.stats->audio_bytes, 6u + 4u + 6000u);
  EXPECT_EQ(x.stats->audio_sample_rate, 24000u);
  EXPECT_EQ(x.stats->audio_bytes_per_sample, 2u);
  ASSERT_EQ(x.events.size(), 6u);
  EXPECT_TRUE(x.events[3].truncated);
  EXPECT_EQ(x.events[3].type, "response.output_audio.delta");
  EXPECT_EQ(x.events[3].wire_bytes, big.size() + 4);
  EXPECT_EQ(x.gaps, big.size() + 4 - 310);

  // GA: session.audio.output.format.
  Conversation ga(Role::server);
  ga.server(R"({"type":"session.updated","session":{"type":"realtime","audio":{"output":{"format":{"type":"audio/pcmu"}}}}})", 1);
  ga.server(created("r"), 2);
  ga.server(audio_delta("r", "AAAA"), 3);
  ga.server(done("r"), 4);
  ASSERT_TRUE(ga.sinks.nth(0).stats);
  EXPECT_EQ(ga.sinks.nth(0).stats->audio_sample_rate, 8000u);
  EXPECT_EQ(ga.sinks.nth(0).stats->audio_bytes_per_sample, 1u);
  EXPECT_EQ(ga.sinks.nth(0).stats->audio_bytes, 3u);
}

TEST(WebsocketSession, SessionTrafficIsCountedNotTold) {
  Conversation c(Role::server);
  c.server(R"({"type":"session.created","session":{}})", 1);
  c.server(R"({"type":"conversation.item.created","item":{"type":"message","response_id":"x"}})", 2);
  c.to_client->send(testing::message("\x01\x02", Sender::server, nullptr, 0, Opcode::binary), 3);
  c.to_client->send(testing::frame(Opcode::ping, "k"), 4);  // no response open: not counted
  c.server(created("resp_1"), 5);
  c.to_client->send(testing::frame(Opcode::ping, "k"), 6);
  c.server(R"({"type":"error","event_id":"e","error":{"type":"invalid_request_error","code":"bad"}})", 7);
  c.server(R"({"type":"response.output_item.added","response_id":"resp_1","item":{"id":"i"}})", 8);
  c.server(done("resp_1"), 9);
  const ExchangeLog& x = c.sinks.nth(0);
  ASSERT_TRUE(x.stats);
  EXPECT_EQ(x.stats->other_messages, 4u);
  EXPECT_EQ(x.stats->control_frames, 1u);
  ASSERT_EQ(x.events.size(), 3u);
  EXPECT_EQ(x.events[1].type, "response.output_item.added");
  // After the session closes with nothing open, traffic is dropped.
  c.server(kRateLimits, 10);
  c.session->close(11);
  EXPECT_EQ(c.sinks.exchanges.size(), 1u);
}

TEST(WebsocketSession, OverlappingResponsesByResponseId) {
  Conversation c(Role::server);
  c.client(kCreate, 1);
  c.server(created("resp_a"), 2);
  c.client(R"({"type":"response.create","response":{"conversation":"none"}})", 3);
  c.server(created("resp_b"), 4);
  c.server(text_delta("resp_b", "b1"), 5);
  c.server(text_delta("resp_a", "a1"), 6);
  c.server(R"({"type":"response.output_text.done","text":"?"})", 7);  // no id, two open: neither's
  c.server(done("resp_a"), 8);
  c.server(text_delta("resp_b", "b2"), 9);
  c.server(R"({"type":"response.content_part.done"})", 10);  // no id, one open: its
  c.server(done("resp_b"), 11);
  c.server(text_delta("resp_a", "late"), 12);  // ended: opens nothing

  ASSERT_EQ(c.sinks.exchanges.size(), 2u);
  const ExchangeLog& a = c.sinks.nth(0);
  const ExchangeLog& b = c.sinks.nth(1);
  ASSERT_EQ(a.events.size(), 3u);
  EXPECT_EQ(a.events[1].data, text_delta("resp_a", "a1"));
  ASSERT_EQ(b.events.size(), 5u);
  EXPECT_EQ(b.events[1].data, text_delta("resp_b", "b1"));
  EXPECT_EQ(b.events[3].type, "response.content_part.done");
  EXPECT_EQ(a.request->end_ns, 1u);
  EXPECT_EQ(b.request->end_ns, 3u);
  ASSERT_TRUE(a.stats);
  EXPECT_EQ(a.stats->other_messages, 3u);  // b's created and delta, the id-less message
  EXPECT_EQ(a.stats->client_messages, 1u);
  EXPECT_EQ(a.end, ResponseEnd::complete);
  EXPECT_EQ(b.end, ResponseEnd::complete);
  EXPECT_EQ(c.sinks.closed, (std::vector<std::uint64_t>{kUpgradedIdBase, kUpgradedIdBase + 1}));
}

TEST(WebsocketSession, ADeclaredFormatCoversAnotherRealtimeDialect) {
  const auto format = [](std::string path, std::optional<EventFraming> framing) {
    auto f = std::make_shared<DeclaredFormat>();
    f->name = path;
    f->path = std::move(path);
    f->framing = framing;
    f->content = "/delta";
    return std::shared_ptr<const DeclaredFormat>(f);
  };
  // An SSE-framed format on the same path covers HTTP responses, not messages.
  const DeclaredFormats formats = {format("/live/*", EventFraming::sse), format("/live/*", EventFraming::websocket)};
  Conversation c(Role::server, "", 4096, &formats, "/live/audio?key=1");
  c.server(created("resp_1"), 1);
  c.server(done("resp_1"), 2);
  const ExchangeLog& x = c.sinks.nth(0);
  ASSERT_TRUE(x.info);
  ASSERT_TRUE(x.info->declared);
  EXPECT_EQ(x.info->declared, formats[1]);
  // No format for the path: the realtime dialect reads it (no declared format).
  Conversation plain(Role::server, "", 4096, &formats);
  plain.server(created("resp_2"), 1);
  ASSERT_TRUE(plain.sinks.nth(0).info);
  EXPECT_FALSE(plain.sinks.nth(0).info->declared);
  // A websocket-framed format never covers an HTTP response.
  EXPECT_EQ(match_declared(formats, "/live/x", "text/event-stream"), formats[0]);
  const DeclaredFormats only_ws = {formats[1]};
  EXPECT_EQ(match_declared(only_ws, "/live/x", "text/event-stream"), nullptr);
}

TEST(WebsocketSession, ResponseWithoutCreatedOpensAtItsFirstMessage) {
  Conversation c(Role::server);
  c.server(text_delta("resp_9", "joined"), 5);
  c.server(done("resp_9"), 6);
  const ExchangeLog& x = c.sinks.nth(0);
  ASSERT_TRUE(x.info);
  EXPECT_EQ(x.info->head_ns, 5u);
  EXPECT_EQ(x.events.size(), 2u);
  EXPECT_EQ(x.end, ResponseEnd::complete);
}

TEST(WebsocketSession, CloseMidResponseCutsItShort) {
  Conversation c(Role::server);
  c.server(created("resp_1"), 1);
  c.server(text_delta("resp_1", "par"), 2);
  c.to_server->send(testing::frame(Opcode::close, std::string("\x03\xe8", 2), {.masked = true}), 3);
  const ExchangeLog& x = c.sinks.nth(0);
  EXPECT_EQ(x.end, ResponseEnd::cut_short);
  EXPECT_EQ(x.end_ts, 3u);
  ASSERT_TRUE(x.stats);
  EXPECT_EQ(x.stats->close_code, 1000);
  EXPECT_FALSE(c.session->accepts(Flow::inbound));
  EXPECT_TRUE(c.session->accepts(Flow::outbound));
  EXPECT_EQ(c.sinks.closed.size(), 1u);
}

TEST(WebsocketSession, EndsCloseAndAbandon) {
  Conversation c(Role::client);  // the traced client: server messages come in
  c.server(created("r1"), 1);
  c.server(created("r2"), 2);
  c.session->abandon(kUpgradedIdBase + 1, 3);
  EXPECT_EQ(c.sinks.nth(1).end, ResponseEnd::cut_short);
  EXPECT_FALSE(c.sinks.nth(0).end);
  c.session->end(Flow::inbound, 4);
  EXPECT_EQ(c.sinks.nth(0).end, ResponseEnd::cut_short);
  EXPECT_FALSE(c.session->accepts(Flow::inbound));
  EXPECT_TRUE(c.session->accepts(Flow::outbound));
  c.session->close(5);
  EXPECT_FALSE(c.session->accepts(Flow::outbound));
  EXPECT_EQ(c.sinks.closed.size(), 2u);
}

TEST(WebsocketSession, OpenResponsesAreBounded) {
  Conversation c(Role::server);
  for (std::size_t i = 0; i <= Session::kMaxOpenResponses; ++i) c.server(created("r" + std::to_string(i)), i);
  EXPECT_EQ(c.sinks.problems[SessionProblem::exchanges_over_limit], 1);
  EXPECT_EQ(c.sinks.exchanges.size(), Session::kMaxOpenResponses);
  c.server(text_delta("r16", "x"), 100);  // the refused one's messages open nothing either
  EXPECT_EQ(c.sinks.problems[SessionProblem::exchanges_over_limit], 1);
  EXPECT_EQ(c.sinks.exchanges.size(), Session::kMaxOpenResponses);
}

TEST(WebsocketSession, CompressedMessagesInflateWithExactPositions) {
  Conversation c(Role::server, "permessage-deflate; client_max_window_bits");
  Compressor server(true), client(true);
  c.client(kCreate, 1, &client);
  const std::uint64_t e1 = c.server(created("resp_1"), 2, &server);
  const std::uint64_t e2 = c.server(text_delta("resp_1", "Hello"), 3, &server);
  const std::uint64_t e3 = c.server(text_delta("resp_1", "Hello"), 4, &server);  // against the earlier window
  c.server(done("resp_1"), 5, &server);
  const ExchangeLog& x = c.sinks.nth(0);
  ASSERT_TRUE(x.request);
  EXPECT_EQ(x.request->body_head, kCreate);
  ASSERT_EQ(x.events.size(), 4u);
  EXPECT_EQ(x.events[1].data, text_delta("resp_1", "Hello"));
  EXPECT_EQ(x.events[2].data, text_delta("resp_1", "Hello"));
  EXPECT_EQ(x.events[0].end_position, e1);
  EXPECT_EQ(x.events[1].end_position, e2);
  EXPECT_EQ(x.events[2].end_position, e3);
  EXPECT_TRUE(x.events[2].exact);
  EXPECT_LT(x.events[2].wire_bytes, x.events[1].wire_bytes);
  ASSERT_TRUE(x.stats);
  EXPECT_TRUE(x.stats->compressed);
  EXPECT_EQ(x.stats->inflated_bytes,
            created("resp_1").size() + 2 * text_delta("resp_1", "Hello").size() + done("resp_1").size());
  EXPECT_TRUE(c.sinks.problems.empty());
}

TEST(WebsocketSession, HoleInACompressedMessageWithTakeoverLosesTheDirection) {
  Conversation c(Role::server, "permessage-deflate");
  Compressor server(true);
  c.response_with_a_holed_message(server);
  EXPECT_EQ(c.sinks.problems[SessionProblem::undecodable], 1);  // once
  const ExchangeLog& x = c.sinks.nth(0);
  EXPECT_EQ(x.events.size(), 1u);
  EXPECT_EQ(x.undecodable, std::vector<ExchangeSink::Undecodable>{ExchangeSink::Undecodable::capture_hole});
  EXPECT_FALSE(x.end);  // its response.done could not be read
  c.session->close(5);
  EXPECT_EQ(x.end, ResponseEnd::cut_short);
}

TEST(WebsocketSession, HoleInACompressedMessageWithoutTakeoverCostsThatMessage) {
  Conversation c(Role::server, "permessage-deflate; server_no_context_takeover; client_no_context_takeover");
  Compressor server(false);
  c.response_with_a_holed_message(server);
  EXPECT_EQ(c.sinks.problems[SessionProblem::undecodable], 1);
  const ExchangeLog& x = c.sinks.nth(0);
  ASSERT_EQ(x.events.size(), 3u);
  EXPECT_EQ(x.events[1].data, text_delta("resp_1", "y"));
  EXPECT_EQ(x.end, ResponseEnd::complete);
}

TEST(WebsocketSession, ResyncAfterAGapSwallowingAHeader) {
  Conversation c(Role::server);
  c.server(created("resp_1"), 1);
  c.server(text_delta("resp_1", "a"), 2);
  const std::string lost = testing::message(text_delta("resp_1", "b"), Sender::server);
  c.session->gap(Flow::outbound, lost.size(), 3);
  c.to_client->position += lost.size();
  const std::uint64_t e = c.server(text_delta("resp_1", "c"), 4);
  c.server(done("resp_1"), 5);
  EXPECT_EQ(c.sinks.problems[SessionProblem::desynchronised], 1);
  EXPECT_EQ(c.sinks.problems[SessionProblem::resynchronised], 1);
  const ExchangeLog& x = c.sinks.nth(0);
  ASSERT_EQ(x.events.size(), 4u);
  EXPECT_EQ(x.events[2].data, text_delta("resp_1", "c"));
  EXPECT_EQ(x.events[2].end_position, e);
  EXPECT_EQ(x.gaps, lost.size());
  EXPECT_EQ(x.events[2].body_offset, x.events[1].body_offset + x.events[1].wire_bytes + lost.size());
  EXPECT_EQ(x.end, ResponseEnd::complete);
}

TEST(WebsocketSession, BadFramesAreProblems) {
  Conversation c(Role::server);
  c.to_server->send(testing::frame(Opcode::text, kCreate), 1);  // a client frame unmasked
  EXPECT_EQ(c.sinks.problems[SessionProblem::frame_error], 1);
  EXPECT_EQ(c.sinks.problems[SessionProblem::desynchronised], 1);
  c.client(kCreate, 2);  // a proven header: read again
  EXPECT_EQ(c.sinks.problems[SessionProblem::resynchronised], 1);
  c.server(created("r"), 3);
  EXPECT_EQ(c.sinks.nth(0).request->body_head, kCreate);
}

// ---- joined after the upgrade ----------------------------------------------------------

// The role of a session recognised from `first` in `flow`; unknown: refused.
Role joined_role(Flow flow, std::string_view first) {
  Sinks sinks;
  const auto session = recognise(flow, ::infertap::testing::as_bytes(first), sinks, {});
  return session ? session->role() : Role::unknown;
}

// A session the agent joined after its upgrade: recognised from the first
// bytes it saw (`first`, in `flow`), which it is then fed. Both directions'
// positions count from what the agent saw.
struct Joined {
  Joined(Flow flow, const std::string& first, TimestampNs ts) {
    settings.request_body_head = 4096;
    session = recognise(flow, ::infertap::testing::as_bytes(first), sinks, settings);
    if (!session) return;
    const bool server = session->role() == Role::server;
    to_client.emplace(Side{*session, server ? Flow::outbound : Flow::inbound, 0});
    to_server.emplace(Side{*session, server ? Flow::inbound : Flow::outbound, 0});
    (to_client->flow == flow ? *to_client : *to_server).send(first, ts);
  }
  std::uint64_t server(std::string_view json, TimestampNs ts, Compressor* c = nullptr) {
    to_client->send(testing::message(json, Sender::server, c), ts);
    return to_client->position;
  }
  void client(std::string_view json, TimestampNs ts, Compressor* c = nullptr) {
    to_server->send(testing::message(json, Sender::client, c), ts);
  }

  Sinks sinks;
  SessionSettings settings;
  std::unique_ptr<protocol::Session> session;
  std::optional<Side> to_client, to_server;
};

const std::string kLongAppend = R"({"type":"input_audio_buffer.append","audio":")" + std::string(70000, 'A') + "\"}";

TEST(WebsocketJoined, TheFirstFrameSaysWhichEndTheProcessIs) {
  const std::string from_server = testing::message(text_delta("resp_1", "Hi"), Sender::server);
  const std::string from_client = testing::message(kCreate, Sender::client);
  EXPECT_EQ(joined_role(Flow::outbound, from_server), Role::server);  // it sends unmasked frames
  EXPECT_EQ(joined_role(Flow::inbound, from_server), Role::client);   // it receives them
  EXPECT_EQ(joined_role(Flow::outbound, from_client), Role::client);  // it sends masked frames
  EXPECT_EQ(joined_role(Flow::inbound, from_client), Role::server);
  // The 16-bit and 64-bit length forms, from either end.
  const std::string long_delta = text_delta("resp_1", std::string(300, 'x'));
  ASSERT_EQ(testing::message(long_delta, Sender::server)[1], '\x7e');
  EXPECT_EQ(joined_role(Flow::outbound, testing::message(long_delta, Sender::server)), Role::server);
  EXPECT_EQ(joined_role(Flow::inbound, testing::message(long_delta, Sender::client)), Role::server);
  ASSERT_EQ(testing::message(kLongAppend, Sender::client)[1], '\xff');
  EXPECT_EQ(joined_role(Flow::inbound, testing::message(kLongAppend, Sender::client)), Role::server);
  EXPECT_EQ(joined_role(Flow::inbound, testing::message(kLongAppend, Sender::server)), Role::client);
  // The first fragment of a message.
  EXPECT_EQ(joined_role(Flow::outbound, testing::message(long_delta, Sender::server, nullptr, 100)), Role::server);

  Sinks sinks;
  const auto s = recognise(Flow::outbound, ::infertap::testing::as_bytes(from_server), sinks, {});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->protocol(), Protocol::websocket);
  EXPECT_TRUE(static_cast<Session&>(*s).joined());
  EXPECT_TRUE(s->carries_responses(Flow::outbound));
  EXPECT_FALSE(s->carries_responses(Flow::inbound));
  EXPECT_TRUE(s->accepts(Flow::outbound) && s->accepts(Flow::inbound));
}

TEST(WebsocketJoined, FirstBytesItCannotReadAreRefused) {
  const auto refused = [](std::string_view first) {
    return joined_role(Flow::outbound, first) == Role::unknown && joined_role(Flow::inbound, first) == Role::unknown;
  };
  Compressor c(true);
  EXPECT_TRUE(refused(testing::message(text_delta("r", "x"), Sender::server, &c))) << "compressed";
  EXPECT_TRUE(refused(testing::message(kCreate, Sender::client, &c))) << "compressed";
  EXPECT_TRUE(refused(testing::message(kCreate, Sender::server, nullptr, 0, Opcode::binary))) << "binary";
  EXPECT_TRUE(refused(testing::frame(Opcode::continuation, kCreate))) << "its message began unseen";
  EXPECT_TRUE(refused(testing::frame(Opcode::ping, R"({"a":1})"))) << "control";
  std::string rsv2 = testing::message(kCreate, Sender::server);
  rsv2[0] = static_cast<char>(rsv2[0] | 0x20);
  EXPECT_TRUE(refused(rsv2));
  EXPECT_TRUE(refused(testing::message("hello", Sender::server))) << "text, not JSON";
  EXPECT_TRUE(refused(testing::message("{}", Sender::server)));
  EXPECT_TRUE(refused(testing::message(R"({ "type":"x"})", Sender::client)));
  EXPECT_TRUE(refused(testing::message("[1,2]", Sender::client)));
  EXPECT_TRUE(refused(testing::frame(Opcode::text, kCreate, {.form = testing::LengthForm::bits64}))) << "not minimal";
  EXPECT_TRUE(refused(testing::header(Opcode::text, kMaxPlausibleFrame + 1) + kCreate)) << "implausible length";
  EXPECT_TRUE(refused(testing::message(kCreate, Sender::server).substr(0, 3))) << "cut before its payload";
  // HTTP text, and the event streams HTTP/1 reads.
  EXPECT_TRUE(refused("GET /v1/realtime?model=m HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"));
  EXPECT_TRUE(refused("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"));
  EXPECT_TRUE(refused("data: {\"type\":\"x\"}\n\n"));
  EXPECT_TRUE(refused("{\"type\":\"x\"}\n"));
  // Binary of other protocols: PostgreSQL's SSLRequest, a TLS ClientHello,
  // a text opcode and mask bit before garbage.
  EXPECT_TRUE(refused(std::string("\x00\x00\x00\x08\x04\xd2\x16\x2f", 8)));
  EXPECT_TRUE(refused(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11)));
  EXPECT_TRUE(refused(std::string("\x81\x85\x01\x02\x03\x04\x00\x00\x00\x00\x00", 11)));
  EXPECT_TRUE(refused(std::string("\x01\x7e\x00\x90\x7b\x22\x00", 7)));
}

TEST(WebsocketJoined, AResponseInFlightAtTheJoinHasNoRequestTheNextOnesDo) {
  const std::string first = testing::message(text_delta("resp_1", "lo"), Sender::server);
  Joined j(Flow::outbound, first, 10);
  ASSERT_TRUE(j.session);
  EXPECT_EQ(j.session->role(), Role::server);
  const std::uint64_t end1 = j.server(done("resp_1"), 12);
  j.server(created("resp_2"), 13);  // asked for before the join: no client message seen yet
  j.server(done("resp_2"), 14);
  j.client(kCreate, 20);
  j.server(created("resp_3"), 21);
  j.server(text_delta("resp_3", "Hi"), 22);
  j.server(done("resp_3"), 23);
  j.server(created("resp_4"), 30);  // nothing asked since: its own start, as after an upgrade
  j.server(done("resp_4"), 31);
  ASSERT_EQ(j.sinks.exchanges.size(), 4u);

  const ExchangeLog& in_flight = j.sinks.nth(0);
  EXPECT_EQ(in_flight.calls, (std::vector<std::string>{"response", "event", "event", "stats", "end"}));
  ASSERT_TRUE(in_flight.info);
  EXPECT_TRUE(in_flight.info->joined_midstream);
  EXPECT_EQ(in_flight.info->head_ns, 10u);
  EXPECT_EQ(in_flight.info->status, 101);
  EXPECT_EQ(in_flight.info->protocol, Protocol::websocket);
  ASSERT_EQ(in_flight.events.size(), 2u);
  // Its later events time as any: at their frames' ends, offsets from the first seen.
  EXPECT_EQ(in_flight.events[0].ts, 10u);
  EXPECT_EQ(in_flight.events[0].end_position, first.size());
  EXPECT_EQ(in_flight.events[0].body_offset, 0u);
  EXPECT_EQ(in_flight.events[1].end_position, end1);
  EXPECT_EQ(in_flight.events[1].body_offset, first.size());
  EXPECT_EQ(in_flight.end, ResponseEnd::complete);

  const ExchangeLog& asked_unseen = j.sinks.nth(1);
  EXPECT_FALSE(asked_unseen.request);
  ASSERT_TRUE(asked_unseen.info);
  EXPECT_TRUE(asked_unseen.info->joined_midstream);

  const ExchangeLog& asked = j.sinks.nth(2);
  ASSERT_TRUE(asked.request);
  EXPECT_EQ(asked.calls.front(), "request");
  EXPECT_EQ(asked.request->body_head, kCreate);
  EXPECT_EQ(asked.request->end_ns, 20u);
  EXPECT_EQ(asked.request->target, "") << "the upgrade request went by";
  ASSERT_TRUE(asked.info);
  EXPECT_FALSE(asked.info->joined_midstream);
  EXPECT_EQ(asked.events.size(), 3u);

  const ExchangeLog& unasked = j.sinks.nth(3);
  ASSERT_TRUE(unasked.request);
  EXPECT_EQ(unasked.request->end_ns, 30u);
  ASSERT_TRUE(unasked.info);
  EXPECT_FALSE(unasked.info->joined_midstream);
  EXPECT_TRUE(j.sinks.problems.empty()) << "joining is no lost or found sync";
}

TEST(WebsocketJoined, AJoinedClientTimesItsOwnRequests) {
  Joined j(Flow::inbound, testing::message(text_delta("resp_1", "a"), Sender::server), 5);
  ASSERT_TRUE(j.session);
  EXPECT_EQ(j.session->role(), Role::client);
  EXPECT_TRUE(j.session->carries_responses(Flow::inbound));
  j.server(done("resp_1"), 6);
  j.client(kCreate, 10);  // the client's own send: the first bytes of its direction
  j.server(created("resp_2"), 11);
  j.server(done("resp_2"), 12);
  ASSERT_EQ(j.sinks.exchanges.size(), 2u);
  ASSERT_TRUE(j.sinks.nth(0).info && j.sinks.nth(1).info);
  EXPECT_TRUE(j.sinks.nth(0).info->joined_midstream);
  EXPECT_FALSE(j.sinks.nth(0).request);
  ASSERT_TRUE(j.sinks.nth(1).request);
  EXPECT_EQ(j.sinks.nth(1).request->end_ns, 10u);
  EXPECT_FALSE(j.sinks.nth(1).info->joined_midstream);
  EXPECT_TRUE(j.sinks.problems.empty());
}

// The traced server's first send is a frame; its first receive is the end of
// a client message begun before the join: that direction is read from its
// first whole frame, and nothing is lost or found.
TEST(WebsocketJoined, TheOtherDirectionIsReadFromItsFirstProvableFrame) {
  Joined j(Flow::outbound, testing::message(kRateLimits, Sender::server), 1);
  ASSERT_TRUE(j.session);
  const std::string begun_before = testing::message(kLongAppend, Sender::client);
  j.to_server->send(begun_before.substr(begun_before.size() - 3000), 2);
  j.client(kCreate, 3);
  j.server(created("r"), 4);
  j.server(done("r"), 5);
  ASSERT_EQ(j.sinks.exchanges.size(), 1u);
  const ExchangeLog& x = j.sinks.nth(0);
  ASSERT_TRUE(x.request);
  EXPECT_EQ(x.request->body_head, kCreate);
  EXPECT_EQ(x.request->end_ns, 3u);
  ASSERT_TRUE(x.info);
  EXPECT_FALSE(x.info->joined_midstream);
  ASSERT_TRUE(x.stats);
  EXPECT_EQ(x.stats->other_messages, 1u) << "the rate limits before it";
  EXPECT_TRUE(j.sinks.problems.empty());
}

// permessage-deflate's parameters went by with the upgrade: a compressed
// message (a sender below its threshold sends some uncompressed) is counted
// undecodable once per direction, its responses told; never inflated.
TEST(WebsocketJoined, CompressedMessagesAreCountedUndecodableNeverInflated) {
  Joined j(Flow::outbound, testing::message(created("resp_1"), Sender::server), 1);
  ASSERT_TRUE(j.session);
  Compressor server(true), client(true);
  j.server(text_delta("resp_1", "a"), 2);
  j.server(text_delta("resp_1", std::string(2000, 'b')), 3, &server);
  j.server(text_delta("resp_1", "c"), 4, &server);
  j.server(done("resp_1"), 5);
  EXPECT_EQ(j.sinks.problems[SessionProblem::undecodable], 1);
  EXPECT_EQ(j.sinks.problems.size(), 1u) << "no frame error, no lost sync";
  const ExchangeLog& x = j.sinks.nth(0);
  ASSERT_EQ(x.events.size(), 3u);
  EXPECT_EQ(x.events[1].data, text_delta("resp_1", "a"));
  EXPECT_EQ(x.events[2].type, "response.done");
  EXPECT_EQ(x.undecodable, std::vector<ExchangeSink::Undecodable>{ExchangeSink::Undecodable::capture_hole});
  ASSERT_TRUE(x.stats);
  EXPECT_TRUE(x.stats->compressed);
  EXPECT_EQ(x.end, ResponseEnd::complete);
  // The client's direction: once more, for its own.
  j.client(kCreate, 6, &client);
  j.client(kCreate, 7, &client);
  EXPECT_EQ(j.sinks.problems[SessionProblem::undecodable], 2);
  j.server(created("resp_2"), 8);
  const ExchangeLog& next = j.sinks.nth(1);
  ASSERT_TRUE(next.request) << "a client message was seen, though not read";
  EXPECT_EQ(next.request->end_ns, 7u);
  EXPECT_EQ(next.request->body_head, "");
  j.session->close(9);
  ASSERT_TRUE(next.stats);
  EXPECT_TRUE(next.stats->compressed) << "seen on an earlier message";
}

}  // namespace
}  // namespace infertap::protocol::websocket
