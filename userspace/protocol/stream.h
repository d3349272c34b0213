// The boundary every protocol is fed through, whatever carried the bytes:
// one direction of a conversation as a byte stream with positions, delivered
// in pieces, each with the time it moved. Plaintext socket calls make pieces
// today; TLS library calls and HTTP/2 DATA frames make the same pieces, so a
// protocol parser never knows which it got.
//
// A piece is what one capture unit moved (a send or receive call): `length`
// bytes starting at stream `position`, of which the first head.size() and the
// last tail.size() were copied; bytes in between (`hole()`) are known to exist
// but were not captured. Positions count every byte of the direction, holes
// and bytes lost before userspace included, so a protocol's offsets stay
// exact across them.
#pragma once

#include <cstdint>
#include <span>

#include "base/clock.h"

namespace infertap::protocol {

using TimestampNs = base::TimestampNs;

// Which way bytes flow, seen from the traced process.
enum class Flow : std::uint8_t { outbound, inbound };

struct Piece {
  std::uint64_t position = 0;  // stream offset of the piece's first byte
  std::uint64_t length = 0;    // bytes moved
  std::span<const std::uint8_t> head;  // bytes [position, position + head.size())
  std::span<const std::uint8_t> tail;  // bytes [position + length - tail.size(), position + length)
  TimestampNs ts = 0;                  // when the bytes moved (the call returned)

  std::uint64_t hole() const {
    const std::uint64_t captured = head.size() + tail.size();
    return length > captured ? length - captured : 0;
  }
  std::uint64_t end() const { return position + length; }

  // The part at and after stream position `at`: the whole piece when `at` is
  // at or before it, nothing (length 0) when at or past its end.
  Piece from(std::uint64_t at) const {
    if (at <= position) return *this;
    Piece rest = *this;
    rest.head = {};
    rest.tail = {};
    if (at >= end()) {
      rest.position = end();
      rest.length = 0;
      return rest;
    }
    const std::uint64_t skip = at - position;
    rest.position = at;
    rest.length = length - skip;
    const std::uint64_t tail_start = length - tail.size();
    if (skip <= head.size()) rest.head = head.subspan(skip);
    rest.tail = skip <= tail_start ? tail : tail.subspan(skip - tail_start);
    return rest;
  }
};

}  // namespace infertap::protocol
