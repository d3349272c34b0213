// WebSocket framing (RFC 6455 §5) of one direction, read from the
// position-addressed pieces of protocol/stream.h: frame headers (7, 16 and
// 63-bit lengths, the mask key), unmasking across pieces, fragmented
// messages with control frames between their fragments, and RSV1 as
// permessage-deflate's "compressed" bit (RFC 7692). Whole messages come out
// with their stream positions, times and (unmasked) payload head; the
// payload bytes also go by as they arrive, for an inflater that must see
// every compressed byte in order.
//
// Capture holes: one inside a frame's payload keeps positions exact and
// truncates the message; one that swallows a frame header loses the
// direction's frames (desynchronised) until a piece begins with a header
// that proves itself (resynchronised; see provable()).
//
// Bounds: 14 bytes of a frame header held across pieces, kMaxMessage bytes
// of a message's payload kept, 125 of a control frame's.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "protocol/session.h"
#include "protocol/stream.h"

namespace infertap::protocol::websocket {

enum class Opcode : std::uint8_t { continuation = 0x0, text = 0x1, binary = 0x2, close = 0x8, ping = 0x9, pong = 0xa };

inline constexpr std::size_t kMaxFrameHeader = 14;    // 2 + 8 (63-bit length) + 4 (mask key)
inline constexpr std::size_t kMaxControlPayload = 125;
inline constexpr std::size_t kMaxMessage = 64 * 1024;  // payload bytes of a message kept
// Longest frame a header found after a hole may announce (resync only).
inline constexpr std::uint64_t kMaxPlausibleFrame = 16u << 20;

// Which end sends a direction's frames: a client masks every frame, a server none.
enum class Sender : std::uint8_t { client, server };

struct FrameHeader {
  bool fin = false;
  bool rsv1 = false, rsv2 = false, rsv3 = false;
  std::uint8_t opcode = 0;
  bool masked = false;
  std::uint64_t length = 0;
  std::uint8_t mask[4] = {};
  std::size_t size = 0;  // header bytes, 2..14

  bool control() const { return (opcode & 0x8) != 0; }
  bool length_too_big() const { return (length >> 63) != 0; }  // the 63-bit form's top bit
  bool minimal_length() const;  // the shortest length form was used
};

// How many header bytes a frame has, from its second byte (mask bit, length form).
std::size_t header_size(std::uint8_t second_byte);
// `bytes` holds at least header_size(bytes[1]) bytes.
FrameHeader parse_header(std::span<const std::uint8_t> bytes);

// What a direction's reader must reject, given who sends and whether
// permessage-deflate was negotiated (the message-level checks, continuation
// without a message and RSV1 past a message's first frame, are the reader's).
bool valid(const FrameHeader& h, Sender sender, bool deflate);

// The payload bytes of a frame, unmasked in place: `offset` is the payload
// offset of bytes[0] (the mask key's phase).
void unmask(const FrameHeader& h, std::uint64_t offset, std::span<std::uint8_t> bytes);

// Can `head`, the captured first bytes of a piece after a hole, only be the
// start of a frame? A valid header that starts a message or is a control
// frame, with a minimal, plausible length; the next header valid too when the
// head reaches it; an uncompressed text frame's payload opening with '{'.
// Conservative: a false "no" waits for the next piece, a false "yes" reads
// garbage as frames.
bool provable(std::span<const std::uint8_t> head, Sender sender, bool deflate);
// Where in `bytes` (a call's captured tail: its last bytes) a run of whole
// frames begins that ends exactly at its end: every header valid for the
// sender, minimal and plausible, each frame following the one before, an
// uncompressed text frame's payload opening with `{`. The first such offset,
// or none. A read ends where the sender's last write did, so the frames of a
// call's tail are found again after a hole swallowed a header before them.
std::optional<std::size_t> frames_ending_at_end(std::span<const std::uint8_t> bytes, Sender sender, bool deflate);
// Does `head`, the first bytes the agent saw of a connection, start a
// WebSocket text frame of JSON, as a realtime session joined after its
// upgrade does? RSV bits clear (a compressed message cannot be read without
// the window before it), text (the whole message or its first fragment), a
// minimal plausible length, the payload (unmasked) opening `{"` and, when the
// head holds it, a key's first character: the kernel's test
// (bpf/helpers/classify.bpf.h) on more bytes. Who sent it: a client masks, a
// server does not. None when it is not such a frame.
std::optional<Sender> joined_frame_sender(std::span<const std::uint8_t> head);

// A data message (text or binary), whole: all its frames read.
struct Message {
  Opcode opcode = Opcode::text;
  bool compressed = false;            // RSV1 on its first frame
  std::uint64_t first_position = 0;   // its first frame's first header byte
  std::uint64_t end_position = 0;     // just past its last frame's last byte
  std::uint64_t wire_bytes = 0;       // its frames' bytes, headers included (control frames between not)
  std::uint64_t payload_bytes = 0;    // all of its payload, captured or not
  std::uint64_t missing_bytes = 0;    // payload bytes a capture hole took
  std::uint32_t frames = 0;
  TimestampNs first_ts = 0;  // the piece holding its first byte
  TimestampNs end_ts = 0;    // the piece completing its last frame
  std::string payload;       // unmasked, the first kMaxMessage bytes up to the first hole
  bool truncated = false;    // payload holds less than all of it (a hole, the cap)
};

// A ping, pong or close frame.
struct ControlFrame {
  Opcode opcode = Opcode::ping;
  std::uint64_t position = 0, end_position = 0;
  TimestampNs ts = 0;                      // the piece completing it
  std::optional<std::uint16_t> close_code;  // close: the status code, when it carried one and it was captured
};

class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // Payload bytes of the message in progress (`m`: what is known of it so
  // far), unmasked, in stream order as they arrive; `missing` of them went by
  // uncaptured (then `bytes` is empty).
  virtual void on_message_bytes(const Message& /*m*/, std::span<const std::uint8_t> /*bytes*/,
                                std::uint64_t /*missing*/) {}
  virtual void on_message(const Message& m) = 0;
  // `n` bytes went by while the direction's frames were lost: whose they were is unknown.
  virtual void on_lost(std::uint64_t /*n*/) {}
  virtual void on_control(const ControlFrame& f) = 0;
  virtual void on_problem(SessionProblem p) = 0;
};

// One direction's frames, read from `start` (its first frame's position).
// Joined (the agent started after the upgrade): where the frames begin is
// unknown; the reader starts lost and reads from the first piece whose head
// proves a frame (provable(), or joined_frame_sender() for this sender),
// without counting that as a lost and found sync.
class FrameReader {
 public:
  FrameReader(Sender sender, bool deflate, std::uint64_t start, FrameSink& sink, bool joined = false);

  void feed(const Piece& piece);
  // `n` bytes at the reader's position never reached userspace.
  void gap(std::uint64_t n, TimestampNs ts);
  bool synchronised() const { return state_ != State::lost; }
  std::uint64_t position() const { return position_; }

 private:
  enum class State : std::uint8_t { header, payload, lost };

  void feed_bytes(std::span<const std::uint8_t> bytes, TimestampNs ts);
  void take_header(std::span<const std::uint8_t> bytes, std::size_t& i, TimestampNs ts);
  void take_payload(std::span<const std::uint8_t> bytes, std::size_t& i, TimestampNs ts);
  void skip(std::uint64_t n, TimestampNs ts);
  void begin_frame(TimestampNs ts);
  void begin_message();
  bool message_order_ok() const;
  void end_frame(TimestampNs ts);
  void end_control(TimestampNs ts);
  void lose_sync();
  void lost(std::uint64_t n);
  void try_resync(const Piece& piece);
  std::size_t try_resync_in_tail(std::span<const std::uint8_t> tail);
  void found_frames();

  const Sender sender_;
  const bool deflate_;
  FrameSink& sink_;
  State state_ = State::header;
  std::uint64_t position_;  // the next byte's stream position
  std::uint8_t header_[kMaxFrameHeader] = {};
  std::size_t header_have_ = 0;
  std::uint64_t frame_start_ = 0;
  TimestampNs frame_ts_ = 0;  // the piece holding the frame's first byte
  FrameHeader frame_;
  std::uint64_t frame_off_ = 0;  // payload bytes of the frame consumed
  bool control_lost_ = false;    // a hole hit the control frame's payload
  std::string control_;          // a control frame's payload (<= 125 bytes)
  bool in_message_ = false;      // a data message's first frame was read, not its last
  Message message_;
  bool joining_ = false;         // joined, no frame found yet
};

}  // namespace infertap::protocol::websocket
