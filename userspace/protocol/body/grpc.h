// gRPC's length-prefixed messages in a response body (the DATA of an HTTP/2
// stream with content-type application/grpc*): a 1-byte compressed flag, a
// 4-byte big-endian length, the message. Each message is one event; its
// content needs the service's schema, so only its size and time are read.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "protocol/stream.h"

namespace infertap::protocol {

struct GrpcMessage {
  std::string_view data;          // the message's first bytes (capped at kMaxKept), never output
  TimestampNs first_byte_ts = 0;  // the piece that held its prefix's first byte
  TimestampNs ts = 0;             // the piece that held its last byte
  std::uint64_t stream_offset = 0;  // body offset of the prefix's first byte
  std::uint32_t wire_bytes = 0;     // prefix + message
  bool compressed = false;          // the message is compressed (grpc-encoding)
  bool truncated = false;           // a capture hole cut part of it
};

class GrpcMessages {
 public:
  static constexpr std::size_t kMaxKept = 256;         // bytes of a message kept for the callback
  static constexpr std::uint32_t kMaxMessage = 64u << 20;  // larger: not a length prefix (lost sync)
  using Callback = std::function<void(const GrpcMessage&)>;
  explicit GrpcMessages(Callback on_message) : on_message_(std::move(on_message)) {}

  void feed(std::span<const std::uint8_t> bytes, TimestampNs ts);
  // n bytes not captured: inside a message it is truncated; over a prefix the
  // message boundaries are lost for the rest of the body (nothing is guessed).
  void gap(std::uint64_t n, TimestampNs ts);
  // Joined mid-body: boundaries unknown until a piece says otherwise.
  void resync() { lost_ = true; }
  bool lost() const { return lost_; }

 private:
  void finish_message(TimestampNs ts);

  Callback on_message_;
  std::uint64_t offset_ = 0;   // body offset of the next byte
  std::uint8_t prefix_[5] = {};
  std::size_t prefix_have_ = 0;
  std::uint64_t remaining_ = 0;  // message bytes still to come (after a whole prefix)
  bool in_message_ = false;
  GrpcMessage current_;
  std::string kept_;
  bool lost_ = false;
};

}  // namespace infertap::protocol
