// How the fuzzers cut their input into what the capture hands the parsers:
// pieces (some with a hole in the middle: head and tail captured), bytes lost
// between pieces, and ends of a direction.
//
// ConnectionFeed (the session fuzzers): ops of 3 bytes, run in a cycle up to
// four times while stream bytes are left. Byte 0 bit0 = flow (outbound,
// inbound), bits 1..2 = kind (piece, piece with a hole, lost bytes, end of
// flow); bytes 1..2 = length (1 to max_piece).
//
// feed_pieces (the body parsers): one op byte per piece, in a cycle: the piece
// is (op & 0x7f) + 1 bytes, lost when bit 7 is set.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "protocol/stream.h"

namespace infertap::fuzzing {

using protocol::Flow;
using protocol::Piece;
using protocol::TimestampNs;

class ConnectionFeed {
 public:
  ConnectionFeed(std::span<const std::uint8_t> ops, std::span<const std::uint8_t> stream, std::size_t max_piece)
      : ops_(ops), stream_(stream), max_piece_(max_piece) {}

  // Runs the ops against `session` (first bytes decide it). Before each piece
  // is fed and after bytes are lost, `fed(flow, position, lost)` with the
  // direction's new stream position, for checks of what the session reports.
  // False when the session refused the first piece.
  template <class Session, class Fed>
  bool run(Session& session, Fed&& fed) {
    const std::size_t n_ops = ops_.size() / 3;
    for (std::size_t i = 0; i < n_ops * 4 && !stream_.empty(); ++i) {
      const std::uint8_t* op = ops_.data() + 3 * (i % n_ops);
      const Flow flow = (op[0] & 1) ? Flow::inbound : Flow::outbound;
      const unsigned kind = (op[0] >> 1) & 3;
      const std::size_t len = std::min<std::size_t>(stream_.size(), 1 + (op[1] | (op[2] << 8)) % max_piece_);
      ++ts;
      if (kind == 3) {
        session.end(flow, ts);
        continue;
      }
      std::uint64_t& at = position[flow == Flow::inbound];
      if (kind == 2) {
        at += len;
        fed(flow, at, true);
        session.gap(flow, len, ts);
        continue;
      }
      const Piece p = piece(at, len, kind == 1);
      if (!decided) {
        decided = true;
        if (!session.decide(flow, p.head)) return false;
      }
      at += len;
      fed(flow, at, false);
      session.feed(flow, p);
      stream_ = stream_.subspan(len);
    }
    return true;
  }

  std::uint64_t position[2] = {0, 0};  // outbound, inbound
  bool decided = false;
  TimestampNs ts = 1;

 private:
  // The next `len` stream bytes at `at`; with a hole: the first half and the
  // last quarter captured.
  Piece piece(std::uint64_t at, std::size_t len, bool hole) const {
    Piece p;
    p.position = at;
    p.length = len;
    p.ts = ts;
    const std::size_t head = hole ? len / 2 : len, tail = hole ? len / 4 : 0;
    p.head = stream_.first(head);
    p.tail = stream_.subspan(len - tail, tail);
    return p;
  }

  std::span<const std::uint8_t> ops_, stream_;
  std::size_t max_piece_;
};

// Feeds all of `body` to `parser` (feed(bytes, ts), gap(length, ts)) as `ops`
// say, each piece's index its timestamp; no ops: pieces of 128 bytes. True
// when bytes were lost.
template <class Parser>
bool feed_pieces(Parser& parser, std::span<const std::uint8_t> ops, std::span<const std::uint8_t> body) {
  bool holes = false;
  std::size_t at = 0;
  for (std::size_t i = 0; at < body.size(); ++i) {
    const std::uint8_t op = ops.empty() ? 0x7f : ops[i % ops.size()];
    const std::size_t len = std::min<std::size_t>(body.size() - at, (op & 0x7f) + 1);
    if (op & 0x80) {
      parser.gap(len, i);
      holes = true;
    } else {
      parser.feed(body.subspan(at, len), i);
    }
    at += len;
  }
  return holes;
}

}  // namespace infertap::fuzzing
