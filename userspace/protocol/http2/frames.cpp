#include "protocol/http2/frames.h"

namespace infertap::protocol::http2 {

std::uint32_t read_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

FrameHeader parse_frame_header(std::span<const std::uint8_t> b) {
  FrameHeader h;
  h.length = (std::uint32_t{b[0]} << 16) | (std::uint32_t{b[1]} << 8) | b[2];
  h.type = b[3];
  h.flags = b[4];
  const std::uint32_t id = read_u32(b.data() + 5);
  h.reserved_bit = (id & 0x80000000u) != 0;
  h.stream_id = id & 0x7fffffffu;
  return h;
}

bool plausible(const FrameHeader& h, std::uint32_t max_frame) {
  if (h.reserved_bit || h.length > max_frame || h.type > static_cast<std::uint8_t>(FrameType::continuation))
    return false;
  const bool on_connection = h.stream_id == 0;
  switch (h.frame_type()) {
    case FrameType::data: return !on_connection && (h.flags & ~(flags::kEndStream | flags::kPadded)) == 0;
    case FrameType::headers:
      return !on_connection &&
             (h.flags & ~(flags::kEndStream | flags::kEndHeaders | flags::kPadded | flags::kPriority)) == 0;
    case FrameType::priority: return !on_connection && h.length == 5 && h.flags == 0;
    case FrameType::rst_stream: return !on_connection && h.length == 4 && h.flags == 0;
    case FrameType::settings:
      return on_connection && (h.flags & ~flags::kAck) == 0 && h.length % 6 == 0 && (!h.has(flags::kAck) || h.length == 0);
    case FrameType::push_promise: return !on_connection;
    case FrameType::ping: return on_connection && h.length == 8 && (h.flags & ~flags::kAck) == 0;
    case FrameType::goaway: return on_connection && h.length >= 8 && h.flags == 0;
    case FrameType::window_update: return h.length == 4 && h.flags == 0;
    case FrameType::continuation: return !on_connection && (h.flags & ~flags::kEndHeaders) == 0;
  }
  return false;
}

bool looks_like_server_settings(std::span<const std::uint8_t> head) {
  if (head.size() < kFrameHeaderBytes) return false;
  const FrameHeader h = parse_frame_header(head);
  return h.frame_type() == FrameType::settings && h.flags == 0 && h.stream_id == 0 && !h.reserved_bit &&
         h.length % 6 == 0 && h.length <= 6 * 16;
}

}  // namespace infertap::protocol::http2
