// Fuzzes the websocket session over both directions of an upgraded
// connection, as the connection layer feeds it: pieces with captured heads
// and tails and holes between, lost bytes between pieces, ends of either
// direction, then close. Frames are whatever the input says: oversized and
// 63-bit lengths, unmasked client frames, fragmented control frames,
// compressed messages that are not DEFLATE, responses that never end.
// Checks what the layers above rely on: each response's request comes
// before it, its head once, events only while it is open and at positions
// inside what was fed, its stats before its end, its end exactly once and
// before its exchange closes; open responses within the bound.
//
// Joined (mode bit3): the agent started after the upgrade, so the first piece
// goes to websocket::recognise, as the registration list offers it: a session
// only for a text frame of JSON, its role from the frame's direction and
// masking; whatever the kernel's classifier follows as such a frame
// (bpf/helpers/classify.bpf.h, built for the host) recognised too; a
// response without a request only there, and then joined_midstream.
//
// Input: [mode][n_ops][ops (3 bytes each)...][stream bytes]. mode bit0: the
// traced process is the client (else the server); bit1: permessage-deflate
// negotiated; bit2: without context takeover; bit3: joined (bits 0..2 and
// 4..7 unused); bits 4..7: bytes before the frames begin in each direction
// (the 101's tail). Ops as in feed_pieces.h.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>

#include "feed_pieces.h"
#include "infertap/abi.h"
#include "../../bpf/helpers/classify.bpf.h"
#include "protocol/websocket/session.h"

using namespace infertap::protocol;

namespace {

#define WS_CHECK(cond) \
  do {                 \
    if (!(cond)) std::abort(); \
  } while (0)

struct ResponseCheck : ExchangeSink {
  bool joined = false;  // the session was joined after its upgrade
  bool requested = false, started = false, ended = false, stats = false;
  std::uint64_t next_offset = 0;
  const std::uint64_t* fed_end = nullptr;
  std::uint64_t start = 0;

  bool open() const { return started && !ended; }
  void on_request_end(const RequestInfo& r) override {
    WS_CHECK(!requested && !started && r.complete);
    requested = true;
  }
  void on_response(const ResponseInfo& r) override {
    WS_CHECK(!started && r.protocol == Protocol::websocket && (r.request != nullptr) == requested);
    // No request: only joined, and then no TTFT.
    WS_CHECK((requested || joined) && r.joined_midstream == !requested);
    WS_CHECK(r.event_framing == EventFraming::websocket && r.status == 101);
    started = true;
  }
  void on_event(const StreamEvent& e) override {
    WS_CHECK(open() && e.end_position && e.end_position_exact);
    WS_CHECK(*e.end_position <= *fed_end && *e.end_position > start);
    WS_CHECK(e.body_offset >= next_offset && e.first_byte_ts <= e.ts);
    WS_CHECK(e.type.starts_with("response.") && e.data.size() <= 64 * 1024);
    next_offset = e.body_offset + e.wire_bytes;
  }
  void on_body_bytes(std::uint64_t) override { WS_CHECK(open()); }
  void on_body_gap(std::uint64_t) override { WS_CHECK(open()); }
  void on_body_undecodable(Undecodable) override { WS_CHECK(open()); }
  void on_message_stats(const MessageStats&) override {
    WS_CHECK(open() && !stats);
    stats = true;
  }
  void on_response_end(TimestampNs, ResponseEnd) override {
    WS_CHECK(open() && stats);
    ended = true;
  }
  void on_parse_error(ParseError, bool) override {}
};

struct Sinks : ExchangeSinks {
  std::map<std::uint64_t, ResponseCheck> exchanges;
  std::uint64_t fed_end = 0;  // of the responses' direction
  std::uint64_t start = 0;
  bool joined = false;
  std::uint64_t next_id = kUpgradedIdBase;
  std::set<std::uint64_t> closed;
  ExchangeSink* exchange(std::uint64_t id) override {
    WS_CHECK(id >= kUpgradedIdBase && id <= next_id && !closed.count(id));
    if (id == next_id) ++next_id;  // ids open in order, once
    ResponseCheck& r = exchanges[id];
    WS_CHECK(!r.ended);
    r.fed_end = &fed_end;
    r.start = start;
    r.joined = joined;
    return &r;
  }
  void exchange_closed(std::uint64_t id) override {
    auto it = exchanges.find(id);
    WS_CHECK(it == exchanges.end() || !it->second.open());
    WS_CHECK(closed.insert(id).second);
    exchanges.erase(id);
  }
  void on_problem(Protocol p, SessionProblem) override { WS_CHECK(p == Protocol::websocket); }
};

// The kernel's verdict on a socket whose first data is `head`: its first 16
// bytes little-endian in two u64.
bool kernel_follows(std::span<const std::uint8_t> head) {
  std::uint8_t first[ITAP_CLASSIFY_BYTES] = {};
  const std::size_t n = std::min<std::size_t>(head.size(), ITAP_CLASSIFY_BYTES);
  if (n > 0) std::memcpy(first, head.data(), n);
  __u64 v = 0, v2 = 0;
  std::memcpy(&v, first, 8);
  std::memcpy(&v2, first + 8, 8);
  return classify_first_bytes(v, v2, static_cast<__u32>(n), false) == ITAP_VERDICT_FOLLOW;
}

// What recognise must hold to: a text frame whose payload opens `{"`, the
// process the server when it sends unmasked frames or receives masked ones;
// every text frame the kernel follows taken, but for the masked 64-bit form
// (the kernel cannot see its key's first character; userspace can).
void check_recognised(Flow flow, std::span<const std::uint8_t> head, const Session* s) {
  const bool text = head.size() >= 2 && (head[0] & 0x7f) == 0x01 && head.size() >= websocket::header_size(head[1]);
  if (text && kernel_follows(head) && websocket::header_size(head[1]) != websocket::kMaxFrameHeader) WS_CHECK(s);
  if (!s) return;
  WS_CHECK(text);
  const websocket::FrameHeader h = websocket::parse_header(head);
  WS_CHECK(head.size() >= h.size + 2 && h.length >= 2 && h.minimal_length());
  std::uint8_t first[2] = {head[h.size], head[h.size + 1]};
  websocket::unmask(h, 0, first);
  WS_CHECK(first[0] == '{' && first[1] == '"');
  WS_CHECK(s->protocol() == Protocol::websocket && s->role() != Role::unknown);
  WS_CHECK((s->role() == Role::server) == (h.masked == (flow == Flow::inbound)));
}

// A connection the agent joined after its upgrade, as the feed drives it:
// its first piece decides whether there is a session at all.
struct JoinedConnection {
  Sinks& sinks;
  const SessionSettings& settings;
  std::unique_ptr<Session> session;

  bool decide(Flow flow, std::span<const std::uint8_t> head) {
    session = websocket::recognise(flow, head, sinks, settings);
    check_recognised(flow, head, session.get());
    return session != nullptr;
  }
  void feed(Flow flow, const Piece& piece) { session->feed(flow, piece); }
  void gap(Flow flow, std::uint64_t n, TimestampNs ts) {
    if (session) session->gap(flow, n, ts);
  }
  void end(Flow flow, TimestampNs ts) {
    if (session) session->end(flow, ts);
  }
};

void check_closed(Session& session, const Sinks& sinks, TimestampNs ts) {
  auto& ws = static_cast<websocket::Session&>(session);
  WS_CHECK(ws.open_responses() <= websocket::Session::kMaxOpenResponses);
  session.close(ts);
  WS_CHECK(ws.open_responses() == 0);
  WS_CHECK(sinks.exchanges.empty());  // every exchange opened was closed
}

void run_joined(infertap::fuzzing::ConnectionFeed& feed, Sinks& sinks, const SessionSettings& settings) {
  sinks.joined = true;
  JoinedConnection connection{sinks, settings, nullptr};
  const bool decided = feed.run(connection, [&](Flow flow, std::uint64_t position, bool) {
    if (!connection.session) return;
    WS_CHECK(static_cast<websocket::Session&>(*connection.session).open_responses() <=
             websocket::Session::kMaxOpenResponses);
    if (connection.session->carries_responses(flow)) sinks.fed_end = position;
  });
  if (decided && connection.session) check_closed(*connection.session, sinks, feed.ts + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::uint8_t mode = data[0];
  const std::size_t n_ops = std::min<std::size_t>(data[1] & 31, (size - 2) / 3);
  if (n_ops == 0) return 0;
  infertap::fuzzing::ConnectionFeed feed({data + 2, 3 * n_ops}, {data + 2 + 3 * n_ops, size - 2 - 3 * n_ops}, 4096);
  Sinks sinks;
  SessionSettings settings;
  settings.request_body_head = 256;
  if (mode & 8) {
    run_joined(feed, sinks, settings);
    return 0;
  }
  UpgradeStart start;
  start.role = (mode & 1) ? Role::client : Role::server;
  start.upgrade = "websocket";
  if (mode & 2) start.extensions = (mode & 4) ? "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
                                              : "permessage-deflate; server_max_window_bits=10";
  start.outbound_position = start.inbound_position = mode >> 4;
  sinks.start = mode >> 4;
  RequestInfo upgrade;
  upgrade.method = "GET";
  upgrade.target = "/v1/realtime?model=m";
  start.request = &upgrade;
  auto session = websocket::make_upgraded(start, sinks, settings);
  WS_CHECK(session != nullptr);
  auto& ws = static_cast<websocket::Session&>(*session);
  feed.decided = true;  // an upgrade decided it
  feed.run(*session, [&](Flow flow, std::uint64_t position, bool) {
    WS_CHECK(ws.open_responses() <= websocket::Session::kMaxOpenResponses);
    if (session->carries_responses(flow)) sinks.fed_end = position;
  });
  check_closed(*session, sinks, feed.ts + 1);
  return 0;
}
