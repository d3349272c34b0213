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
// Input: [mode][n_ops][ops (3 bytes each)...][stream bytes]. mode bit0: the
// traced process is the client (else the server); bit1: permessage-deflate
// negotiated; bit2: without context takeover; bits 4..7: bytes before the
// frames begin in each direction (the 101's tail). Ops as in feed_pieces.h.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "feed_pieces.h"
#include "protocol/websocket/session.h"

using namespace infertap::protocol;

namespace {

#define WS_CHECK(cond) \
  do {                 \
    if (!(cond)) std::abort(); \
  } while (0)

struct ResponseCheck : ExchangeSink {
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
    WS_CHECK(requested && !started && r.protocol == Protocol::websocket && r.request != nullptr);
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
  std::uint64_t next_id = kUpgradedIdBase;
  std::set<std::uint64_t> closed;
  ExchangeSink* exchange(std::uint64_t id) override {
    WS_CHECK(id >= kUpgradedIdBase && id <= next_id && !closed.count(id));
    if (id == next_id) ++next_id;  // ids open in order, once
    ResponseCheck& r = exchanges[id];
    WS_CHECK(!r.ended);
    r.fed_end = &fed_end;
    r.start = start;
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::uint8_t mode = data[0];
  const std::size_t n_ops = std::min<std::size_t>(data[1] & 31, (size - 2) / 3);
  if (n_ops == 0) return 0;
  infertap::fuzzing::ConnectionFeed feed({data + 2, 3 * n_ops}, {data + 2 + 3 * n_ops, size - 2 - 3 * n_ops}, 4096);
  Sinks sinks;
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
  SessionSettings settings;
  settings.request_body_head = 256;
  auto session = websocket::make_upgraded(start, sinks, settings);
  WS_CHECK(session != nullptr);
  auto& ws = static_cast<websocket::Session&>(*session);
  feed.decided = true;  // an upgrade decided it
  feed.run(*session, [&](Flow flow, std::uint64_t position, bool) {
    WS_CHECK(ws.open_responses() <= websocket::Session::kMaxOpenResponses);
    if (session->carries_responses(flow)) sinks.fed_end = position;
  });
  WS_CHECK(ws.open_responses() <= websocket::Session::kMaxOpenResponses);
  session->close(feed.ts + 1);
  WS_CHECK(ws.open_responses() == 0);
  WS_CHECK(sinks.exchanges.empty());  // every exchange opened was closed
  return 0;
}
