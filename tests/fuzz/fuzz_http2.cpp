// Fuzzes the HTTP/2 session over both directions of a connection, as the
// connection layer feeds it: pieces with captured heads and tails and holes
// between, lost bytes between pieces, ends of either direction, then close.
// Frames and HPACK blocks are whatever the input says: garbage, oversized
// frames, CONTINUATION floods, table-size updates, resets mid-event. Checks
// what the layers above rely on: each stream's response starts at most once
// and ends exactly once, events only while it is open and at positions
// inside what was fed, live streams within the bound.
//
// Input: [mode][n_ops][ops (3 bytes each)...][stream bytes]. mode bit0: the
// outbound bytes start with a client preface (so frames are read from the
// first byte). Op: byte 0 bit0 = flow, bits 1..2 = kind (piece, piece with a
// hole, lost bytes, end of flow); bytes 1..2 = length.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "feed_pieces.h"
#include "protocol/http2/session.h"

using namespace infertap::protocol;

namespace {

struct StreamCheck : ExchangeSink {
  bool started = false, open = false, ended = false;
  const std::uint64_t* fed_end = nullptr;
  void on_response(const ResponseInfo& r) override {
    if (started || r.http_version != HttpVersion::http2) std::abort();
    started = open = true;
  }
  void on_event(const StreamEvent& e) override {
    if (!open) std::abort();
    if (e.end_position && *e.end_position > *fed_end) std::abort();
  }
  void on_body_bytes(std::uint64_t) override {
    if (!open) std::abort();
  }
  void on_body_gap(std::uint64_t) override {
    if (!open) std::abort();
  }
  void on_body_undecodable(Undecodable) override {
    if (!open) std::abort();
  }
  void on_h2_stream(const Http2StreamStats& s) override {
    if (!open || s.window_zero.size() > Http2StreamStats::kMaxEpisodes) std::abort();
  }
  void on_response_end(TimestampNs, ResponseEnd) override {
    if (!open || ended) std::abort();
    open = false;
    ended = true;
  }
  void on_parse_error(ParseError, bool) override {}
};

struct Sinks : ExchangeSinks {
  std::map<std::uint64_t, StreamCheck> streams;
  std::uint64_t fed_end = 0;  // of the responses' direction
  ExchangeSink* exchange(std::uint64_t id) override {
    StreamCheck& s = streams[id];
    if (s.ended) s = StreamCheck{};  // an id forgotten long after its close may be joined again
    s.fed_end = &fed_end;
    return &s;
  }
  void exchange_closed(std::uint64_t id) override {
    auto it = streams.find(id);
    if (it != streams.end() && it->second.open) std::abort();
  }
  void on_problem(Protocol, SessionProblem) override {}
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const bool preface = data[0] & 1;
  const std::size_t n_ops = std::min<std::size_t>(data[1] & 31, (size - 2) / 3);
  if (n_ops == 0) return 0;
  infertap::fuzzing::ConnectionFeed feed({data + 2, 3 * n_ops}, {data + 2 + 3 * n_ops, size - 2 - 3 * n_ops}, 4096);
  Sinks sinks;
  http2::Session session(sinks, SessionSettings{.request_body_head = 512});
  if (preface) {
    const std::string_view p = http2::kClientPreface;
    const std::span<const std::uint8_t> head(reinterpret_cast<const std::uint8_t*>(p.data()), p.size());
    if (!session.decide(Flow::outbound, head)) std::abort();
    Piece piece;
    piece.length = p.size();
    piece.head = head;
    piece.ts = feed.ts;
    session.feed(Flow::outbound, piece);
    feed.position[0] = p.size();
    feed.decided = true;
  }
  const bool decided = feed.run(session, [&](Flow flow, std::uint64_t position, bool) {
    if (session.live_streams() > http2::Session::kMaxStreams) std::abort();
    if (feed.decided && session.carries_responses(flow)) sinks.fed_end = position;
  });
  if (!decided) return 0;
  if (session.live_streams() > http2::Session::kMaxStreams) std::abort();
  session.close(feed.ts + 1);
  if (session.live_streams() != 0) std::abort();
  for (const auto& [id, s] : sinks.streams) {
    if (s.open) std::abort();  // close ends whatever was open
  }
  return 0;
}
