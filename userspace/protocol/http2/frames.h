// HTTP/2 framing (RFC 9113 §4, §6): the 9-byte frame header, the frame types
// and flags the session reads, and what makes a header plausible when a
// direction must find its frames again after a capture hole.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace infertap::protocol::http2 {

inline constexpr std::string_view kClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
inline constexpr std::size_t kFrameHeaderBytes = 9;
inline constexpr std::uint32_t kDefaultMaxFrame = 16384;      // SETTINGS_MAX_FRAME_SIZE initial value
inline constexpr std::uint32_t kLargestMaxFrame = (1u << 24) - 1;
inline constexpr std::int64_t kDefaultWindow = 65535;          // initial stream and connection windows
inline constexpr std::int64_t kLargestWindow = (1ll << 31) - 1;

enum class FrameType : std::uint8_t {
  data = 0,
  headers = 1,
  priority = 2,
  rst_stream = 3,
  settings = 4,
  push_promise = 5,
  ping = 6,
  goaway = 7,
  window_update = 8,
  continuation = 9,
};

namespace flags {
inline constexpr std::uint8_t kEndStream = 0x1;
inline constexpr std::uint8_t kAck = 0x1;  // SETTINGS, PING
inline constexpr std::uint8_t kEndHeaders = 0x4;
inline constexpr std::uint8_t kPadded = 0x8;
inline constexpr std::uint8_t kPriority = 0x20;
}  // namespace flags

namespace settings {
inline constexpr std::uint16_t kHeaderTableSize = 0x1;
inline constexpr std::uint16_t kInitialWindowSize = 0x4;
inline constexpr std::uint16_t kMaxFrameSize = 0x5;
}  // namespace settings

struct FrameHeader {
  std::uint32_t length = 0;
  std::uint8_t type = 0;
  std::uint8_t flags = 0;
  std::uint32_t stream_id = 0;  // reserved bit cleared
  bool reserved_bit = false;

  FrameType frame_type() const { return static_cast<FrameType>(type); }
  bool has(std::uint8_t f) const { return (flags & f) != 0; }
};

// `bytes` holds at least kFrameHeaderBytes.
FrameHeader parse_frame_header(std::span<const std::uint8_t> bytes);

// Could these be the header of a frame a peer sends (known type, flags and
// lengths its type allows, the stream 0 frames on stream 0 only)? Used to
// decide a connection is HTTP/2 and to find frames again after a hole:
// conservative, a false "no" costs a record, a false "yes" invents one.
bool plausible(const FrameHeader& h, std::uint32_t max_frame);

// A server's first frame: SETTINGS, not an ACK, on stream 0, whole settings.
bool looks_like_server_settings(std::span<const std::uint8_t> head);

std::uint32_t read_u32(const std::uint8_t* p);

}  // namespace infertap::protocol::http2
