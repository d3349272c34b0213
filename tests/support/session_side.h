// One direction of a connection fed to a protocol session (HTTP/1, HTTP/2)
// piece by piece, as the connection layer feeds it, keeping the direction's
// stream position.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "protocol/stream.h"

namespace infertap::testing {

inline std::span<const std::uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

template <class Session>
struct Side {
  Session& session;
  protocol::Flow flow;
  std::uint64_t position = 0;

  // One piece with all of `s` captured.
  void send(std::string_view s, protocol::TimestampNs ts) { send_with_hole(s, s.size(), 0, ts); }
  // A piece of s.size() bytes of which only the first `head` and last `tail` were copied.
  void send_with_hole(std::string_view s, std::size_t head, std::size_t tail, protocol::TimestampNs ts) {
    protocol::Piece p;
    p.position = position;
    p.length = s.size();
    p.head = as_bytes(s.substr(0, head));
    p.tail = as_bytes(s.substr(s.size() - tail));
    p.ts = ts;
    session.feed(flow, p);
    position += s.size();
  }
  void send_bytewise(std::string_view s, protocol::TimestampNs ts) {
    for (std::size_t i = 0; i < s.size(); ++i) send(s.substr(i, 1), ts + i);
  }
};

}  // namespace infertap::testing
