#include "protocol/websocket/frames.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

namespace infertap::protocol::websocket {
namespace {

constexpr std::uint64_t kMaxUint64 = ~std::uint64_t{0};

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) { return a > kMaxUint64 - b ? kMaxUint64 : a + b; }

bool known_opcode(std::uint8_t op) {
  switch (static_cast<Opcode>(op)) {
    case Opcode::continuation:
    case Opcode::text:
    case Opcode::binary:
    case Opcode::close:
    case Opcode::ping:
    case Opcode::pong: return true;
  }
  return false;
}

// The part of `piece` from stream position `from` on (piece.position < from < piece.end()).
Piece from_position(const Piece& piece, std::uint64_t from) {
  const std::uint64_t cut = from - piece.position;
  Piece out = piece;
  out.position = from;
  out.length -= cut;
  if (cut <= piece.head.size()) {
    out.head = piece.head.subspan(static_cast<std::size_t>(cut));
    return out;
  }
  out.head = {};
  const std::uint64_t tail_at = piece.end() - piece.tail.size();
  if (from > tail_at) out.tail = piece.tail.subspan(static_cast<std::size_t>(from - tail_at));
  return out;
}

// Does `next` (the frame after `first`) keep the order of a message's frames?
bool follows(const FrameHeader& first, const FrameHeader& next) {
  if (first.control()) return true;  // it may sit inside a fragmented message or not
  const bool continues = next.opcode == static_cast<std::uint8_t>(Opcode::continuation);
  return next.control() || continues == !first.fin;
}

}  // namespace

// ---- headers ------------------------------------------------------------------------

std::size_t header_size(std::uint8_t second_byte) {
  const std::uint8_t l7 = second_byte & 0x7f;
  const std::size_t length_bytes = l7 == 126 ? 2 : l7 == 127 ? 8 : 0;
  return 2 + length_bytes + ((second_byte & 0x80) ? 4 : 0);
}

FrameHeader parse_header(std::span<const std::uint8_t> b) {
  FrameHeader h;
  h.fin = b[0] & 0x80;
  h.rsv1 = b[0] & 0x40;
  h.rsv2 = b[0] & 0x20;
  h.rsv3 = b[0] & 0x10;
  h.opcode = b[0] & 0x0f;
  h.masked = b[1] & 0x80;
  h.size = header_size(b[1]);
  const std::uint8_t l7 = b[1] & 0x7f;
  std::size_t at = 2;
  if (l7 < 126) {
    h.length = l7;
  } else {
    const std::size_t n = l7 == 126 ? 2 : 8;
    for (std::size_t i = 0; i < n; ++i) h.length = (h.length << 8) | b[at + i];
    at += n;
  }
  if (h.masked) std::memcpy(h.mask, b.data() + at, 4);
  return h;
}

bool FrameHeader::minimal_length() const {
  const std::size_t length_bytes = size - 2 - (masked ? 4 : 0);
  if (length_bytes == 2) return length >= 126;
  if (length_bytes == 8) return length > 0xffff;
  return true;
}

bool valid(const FrameHeader& h, Sender sender, bool deflate) {
  if (h.rsv2 || h.rsv3 || !known_opcode(h.opcode) || h.length_too_big()) return false;
  if (h.masked != (sender == Sender::client)) return false;
  // RSV1 marks a compressed message on its first frame only (RFC 7692 §6).
  const bool first_of_message = h.opcode == static_cast<std::uint8_t>(Opcode::text) ||
                                h.opcode == static_cast<std::uint8_t>(Opcode::binary);
  if (h.rsv1 && (!deflate || !first_of_message)) return false;
  return !h.control() || (h.fin && h.length <= kMaxControlPayload);
}

void unmask(const FrameHeader& h, std::uint64_t offset, std::span<std::uint8_t> bytes) {
  if (!h.masked) return;
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] ^= h.mask[(offset + i) & 3];
}

bool provable(std::span<const std::uint8_t> head, Sender sender, bool deflate) {
  if (head.size() < 2 || head.size() < header_size(head[1])) return false;
  const FrameHeader h = parse_header(head);
  // A continuation's message began before the hole: nothing to read it into.
  if (!valid(h, sender, deflate) || h.opcode == static_cast<std::uint8_t>(Opcode::continuation) ||
      !h.minimal_length() || h.length > kMaxPlausibleFrame)
    return false;
  const std::uint64_t next = h.size + h.length;
  if (next < head.size()) {
    // The next header, or what the head holds of it (the bytes past it read as zeros).
    std::uint8_t bytes[kMaxFrameHeader] = {};
    const std::span<const std::uint8_t> have = head.subspan(static_cast<std::size_t>(next));
    std::memcpy(bytes, have.data(), std::min(have.size(), kMaxFrameHeader));
    if (have.size() == 1) bytes[1] = sender == Sender::client ? 0x80 : 0;  // its mask bit unseen: not held against it
    const FrameHeader n = parse_header(bytes);
    const bool whole = have.size() >= 2 && have.size() >= n.size;
    return valid(n, sender, deflate) && (!whole || n.minimal_length()) && follows(h, n);
  }
  if (h.opcode != static_cast<std::uint8_t>(Opcode::text) || !h.fin) return false;
  if (h.rsv1) return true;  // compressed: its first byte says nothing
  if (h.length == 0 || head.size() <= h.size) return false;
  std::uint8_t first = head[h.size];
  unmask(h, 0, {&first, 1});
  return first == '{';
}

namespace {

// The frame at `at` of `bytes` when it lies whole inside them and proves
// itself (see frames_ending_at_end); its size, else 0.
std::size_t whole_frame(std::span<const std::uint8_t> bytes, std::size_t at, Sender sender, bool deflate,
                        const FrameHeader* before) {
  const std::span<const std::uint8_t> rest = bytes.subspan(at);
  if (rest.size() < 2 || rest.size() < header_size(rest[1])) return 0;
  const FrameHeader h = parse_header(rest);
  if (!valid(h, sender, deflate) || !h.minimal_length() || h.length > rest.size() - h.size) return 0;
  if (before ? !follows(*before, h) : h.opcode == static_cast<std::uint8_t>(Opcode::continuation)) return 0;
  if (h.opcode == static_cast<std::uint8_t>(Opcode::text) && !h.rsv1) {
    if (h.length == 0) return 0;
    std::uint8_t first = rest[h.size];
    unmask(h, 0, {&first, 1});
    if (first != '{') return 0;
  }
  return static_cast<std::size_t>(h.size + h.length);
}

}  // namespace

std::optional<std::size_t> frames_ending_at_end(std::span<const std::uint8_t> bytes, Sender sender, bool deflate) {
  for (std::size_t start = 0; start + 2 <= bytes.size(); ++start) {
    std::size_t at = start;
    FrameHeader before{};
    bool first = true;
    while (at < bytes.size()) {
      const std::size_t size = whole_frame(bytes, at, sender, deflate, first ? nullptr : &before);
      if (size == 0) break;
      before = parse_header(bytes.subspan(at));
      first = false;
      at += size;
    }
    if (!first && at == bytes.size()) return start;
  }
  return std::nullopt;
}

namespace {

bool json_key_start(std::uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' || c == '@';
}

}  // namespace

std::optional<Sender> joined_frame_sender(std::span<const std::uint8_t> head) {
  if (head.size() < 2 || head.size() < header_size(head[1])) return std::nullopt;
  const FrameHeader h = parse_header(head);
  const Sender sender = h.masked ? Sender::client : Sender::server;
  if (!valid(h, sender, /*deflate=*/false) || h.opcode != static_cast<std::uint8_t>(Opcode::text) ||
      !h.minimal_length() || h.length > kMaxPlausibleFrame || h.length < 2 || head.size() < h.size + 2)
    return std::nullopt;
  std::uint8_t first[3] = {};
  const std::size_t have = std::min<std::size_t>({3, head.size() - h.size, static_cast<std::size_t>(h.length)});
  std::memcpy(first, head.data() + h.size, have);
  unmask(h, 0, {first, have});
  if (first[0] != '{' || first[1] != '"' || (have == 3 && !json_key_start(first[2]))) return std::nullopt;
  return sender;
}

// ---- the reader ---------------------------------------------------------------------

FrameReader::FrameReader(Sender sender, bool deflate, std::uint64_t start, FrameSink& sink, bool joined)
    : sender_(sender), deflate_(deflate), sink_(sink), position_(start), joining_(joined) {
  if (joined) state_ = State::lost;
}

void FrameReader::feed(const Piece& piece) {
  // Joined: nothing before the first piece is the reader's to lose.
  if (joining_ && piece.position > position_) position_ = piece.position;
  if (piece.end() <= position_) return;  // before the frames began, or fed already
  if (piece.position > position_) skip(piece.position - position_, piece.ts);
  const Piece p = piece.position < position_ ? from_position(piece, position_) : piece;
  if (state_ == State::lost) {
    try_resync(p);
    if (state_ == State::lost) {
      lost(p.end() - p.tail.size() - position_);
      return feed_bytes(p.tail.subspan(try_resync_in_tail(p.tail)), p.ts);
    }
  }
  feed_bytes(p.head, p.ts);
  skip(p.hole(), p.ts);
  const std::size_t from = state_ == State::lost ? try_resync_in_tail(p.tail) : 0;
  feed_bytes(p.tail.subspan(from), p.ts);
}

void FrameReader::gap(std::uint64_t n, TimestampNs ts) { skip(n, ts); }

void FrameReader::feed_bytes(std::span<const std::uint8_t> bytes, TimestampNs ts) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    switch (state_) {
      case State::header: take_header(bytes, i, ts); break;
      case State::payload: take_payload(bytes, i, ts); break;
      case State::lost: return lost(bytes.size() - i);
    }
  }
}

void FrameReader::take_header(std::span<const std::uint8_t> bytes, std::size_t& i, TimestampNs ts) {
  if (header_have_ == 0) {
    frame_start_ = position_;
    frame_ts_ = ts;
  }
  std::size_t need = header_have_ < 2 ? 2 : header_size(header_[1]);
  while (header_have_ < need && i < bytes.size()) {
    const std::size_t take = std::min(need - header_have_, bytes.size() - i);
    std::memcpy(header_ + header_have_, bytes.data() + i, take);
    header_have_ += take;
    i += take;
    position_ += take;
    if (header_have_ == 2) need = header_size(header_[1]);
  }
  if (header_have_ == need) begin_frame(ts);
}

// A hole of `n` bytes: inside a frame's payload it is that frame's; one
// that reaches a header loses the direction's frames.
void FrameReader::skip(std::uint64_t n, TimestampNs ts) {
  if (n == 0) return;
  if (state_ == State::payload) {
    const std::uint64_t in_frame = std::min(n, frame_.length - frame_off_);
    if (frame_.control()) {
      control_lost_ = true;
    } else {
      message_.missing_bytes = saturating_add(message_.missing_bytes, in_frame);
      message_.truncated = true;
      sink_.on_message_bytes(message_, {}, in_frame);
    }
    frame_off_ += in_frame;
    position_ += in_frame;
    n -= in_frame;
    if (frame_off_ == frame_.length) end_frame(ts);
    if (n == 0) return;
  }
  lose_sync();
  lost(n);
}

void FrameReader::begin_frame(TimestampNs ts) {
  frame_ = parse_header({header_, header_have_});
  header_have_ = 0;
  if (!valid(frame_, sender_, deflate_) || !message_order_ok()) {
    sink_.on_problem(SessionProblem::frame_error);
    return lose_sync();
  }
  frame_off_ = 0;
  state_ = State::payload;
  if (frame_.control()) {
    control_.clear();
    control_lost_ = false;
  } else {
    if (!in_message_) begin_message();
    ++message_.frames;
    message_.wire_bytes = saturating_add(message_.wire_bytes, saturating_add(frame_.size, frame_.length));
    message_.payload_bytes = saturating_add(message_.payload_bytes, frame_.length);
  }
  if (frame_.length == 0) end_frame(ts);
}

void FrameReader::begin_message() {
  in_message_ = true;
  std::string kept = std::move(message_.payload);  // its capacity serves the next message
  kept.clear();
  message_ = Message{};
  message_.payload = std::move(kept);
  message_.opcode = static_cast<Opcode>(frame_.opcode);
  message_.compressed = frame_.rsv1;
  message_.first_position = frame_start_;
  message_.first_ts = frame_ts_;
}

// A continuation continues a message; text and binary begin one.
bool FrameReader::message_order_ok() const {
  if (frame_.control()) return true;
  return (frame_.opcode == static_cast<std::uint8_t>(Opcode::continuation)) == in_message_;
}

void FrameReader::take_payload(std::span<const std::uint8_t> bytes, std::size_t& i, TimestampNs ts) {
  const std::size_t take =
      static_cast<std::size_t>(std::min<std::uint64_t>(frame_.length - frame_off_, bytes.size() - i));
  std::span<const std::uint8_t> chunk = bytes.subspan(i, take);
  std::array<std::uint8_t, 4096> clear;
  std::uint64_t offset = frame_off_;
  while (!chunk.empty()) {
    std::span<const std::uint8_t> part = chunk.first(std::min(chunk.size(), clear.size()));
    chunk = chunk.subspan(part.size());
    if (frame_.masked) {
      std::memcpy(clear.data(), part.data(), part.size());
      unmask(frame_, offset, {clear.data(), part.size()});
      part = {clear.data(), part.size()};
    }
    offset += part.size();
    if (frame_.control()) {
      const std::size_t room = kMaxControlPayload - std::min(control_.size(), kMaxControlPayload);
      control_.append(reinterpret_cast<const char*>(part.data()), std::min(room, part.size()));
      continue;
    }
    if (!message_.truncated) {
      const std::size_t room = kMaxMessage - message_.payload.size();
      message_.payload.append(reinterpret_cast<const char*>(part.data()), std::min(room, part.size()));
      message_.truncated = part.size() > room;
    }
    sink_.on_message_bytes(message_, part, 0);
  }
  frame_off_ += take;
  position_ += take;
  i += take;
  if (frame_off_ == frame_.length) end_frame(ts);
}

void FrameReader::end_frame(TimestampNs ts) {
  state_ = State::header;
  if (frame_.control()) return end_control(ts);
  if (!frame_.fin) return;
  in_message_ = false;
  message_.end_position = position_;
  message_.end_ts = ts;
  sink_.on_message(message_);
}

void FrameReader::end_control(TimestampNs ts) {
  ControlFrame f;
  f.opcode = static_cast<Opcode>(frame_.opcode);
  f.position = frame_start_;
  f.end_position = position_;
  f.ts = ts;
  if (f.opcode == Opcode::close && !control_lost_ && control_.size() >= 2) {
    f.close_code = static_cast<std::uint16_t>((static_cast<std::uint8_t>(control_[0]) << 8) |
                                              static_cast<std::uint8_t>(control_[1]));
  }
  sink_.on_control(f);
}

void FrameReader::lose_sync() {
  if (state_ == State::lost) return;
  sink_.on_problem(SessionProblem::desynchronised);
  state_ = State::lost;
  header_have_ = 0;
  in_message_ = false;
  message_.payload.clear();
}

void FrameReader::lost(std::uint64_t n) {
  position_ += n;
  sink_.on_lost(n);
}

// Only a piece whose first bytes prove a frame header lets a lost direction
// read frames again: the reader starts there with no message in progress.
void FrameReader::try_resync(const Piece& piece) {
  const bool proven = provable(piece.head, sender_, deflate_) ||
                      (joining_ && joined_frame_sender(piece.head) == sender_);
  if (!proven) return;
  state_ = State::header;
  header_have_ = 0;
  position_ = piece.position;
  found_frames();
}

// Frames found again after a lost sync, or for the first time when joined.
void FrameReader::found_frames() {
  if (!std::exchange(joining_, false)) sink_.on_problem(SessionProblem::resynchronised);
}

// A lost direction whose call's tail holds whole frames ending at its end:
// the reader starts at the first of them (the bytes before it are lost).
// Returns where in the tail reading goes on (0: still lost).
std::size_t FrameReader::try_resync_in_tail(std::span<const std::uint8_t> tail) {
  const std::optional<std::size_t> start = frames_ending_at_end(tail, sender_, deflate_);
  if (!start) return 0;
  if (*start > 0) lost(*start);
  state_ = State::header;
  header_have_ = 0;
  found_frames();
  return *start;
}

}  // namespace infertap::protocol::websocket
