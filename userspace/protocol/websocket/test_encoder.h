// A small WebSocket encoder for the websocket tests and fuzzers: frames with
// any header bits (masked or not, each length form), messages split into
// fragments, and permessage-deflate compression with zlib's own deflate (raw,
// sync flush, the 00 00 ff ff tail stripped, the window kept across messages
// or reset per message). Not part of the agent.
#pragma once

#include <zlib.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/websocket/frames.h"

namespace infertap::protocol::websocket::testing {

inline constexpr std::array<std::uint8_t, 4> kMask = {0x37, 0xfa, 0x21, 0x3d};

enum class LengthForm : std::uint8_t { shortest, bits16, bits64 };

struct FrameBits {
  bool fin = true;
  bool rsv1 = false;
  bool masked = false;
  LengthForm form = LengthForm::shortest;
  std::array<std::uint8_t, 4> mask = kMask;
};

// One frame: its header and `payload` (masked when the bits say so).
inline std::string frame(Opcode opcode, std::string_view payload, const FrameBits& bits = {}) {
  std::string out;
  out += static_cast<char>((bits.fin ? 0x80 : 0) | (bits.rsv1 ? 0x40 : 0) | static_cast<std::uint8_t>(opcode));
  const std::uint8_t mask_bit = bits.masked ? 0x80 : 0;
  const std::uint64_t n = payload.size();
  LengthForm form = bits.form;
  if (form == LengthForm::shortest) form = n < 126 ? LengthForm::shortest : n <= 0xffff ? LengthForm::bits16 : LengthForm::bits64;
  if (form == LengthForm::shortest) {
    out += static_cast<char>(mask_bit | n);
  } else {
    const int bytes = form == LengthForm::bits16 ? 2 : 8;
    out += static_cast<char>(mask_bit | (bytes == 2 ? 126 : 127));
    for (int i = bytes - 1; i >= 0; --i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  }
  if (bits.masked) out.append(reinterpret_cast<const char*>(bits.mask.data()), 4);
  for (std::size_t i = 0; i < payload.size(); ++i) {
    out += static_cast<char>(payload[i] ^ (bits.masked ? bits.mask[i & 3] : 0));
  }
  return out;
}

// A header only, announcing `length` payload bytes (lengths no test could hold).
inline std::string header(Opcode opcode, std::uint64_t length, const FrameBits& bits = {}) {
  std::string out;
  out += static_cast<char>((bits.fin ? 0x80 : 0) | (bits.rsv1 ? 0x40 : 0) | static_cast<std::uint8_t>(opcode));
  out += static_cast<char>((bits.masked ? 0x80 : 0) | 127);
  for (int i = 7; i >= 0; --i) out += static_cast<char>((length >> (8 * i)) & 0xff);
  if (bits.masked) out.append(reinterpret_cast<const char*>(bits.mask.data()), 4);
  return out;
}

// permessage-deflate as a sender does it.
class Compressor {
 public:
  explicit Compressor(bool context_takeover = true, int window_bits = 15) : takeover_(context_takeover) {
    deflateInit2(&z_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -window_bits, 8, Z_DEFAULT_STRATEGY);
  }
  ~Compressor() { deflateEnd(&z_); }
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;

  // The message's compressed bytes, without the 00 00 ff ff tail.
  std::string compress(std::string_view text) {
    std::string out;
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    z_.avail_in = static_cast<uInt>(text.size());
    std::array<char, 4096> chunk;
    do {
      z_.next_out = reinterpret_cast<Bytef*>(chunk.data());
      z_.avail_out = chunk.size();
      deflate(&z_, Z_SYNC_FLUSH);
      out.append(chunk.data(), chunk.size() - z_.avail_out);
    } while (z_.avail_out == 0);
    if (out.size() >= 4 && out.compare(out.size() - 4, 4, std::string("\0\0\xff\xff", 4)) == 0) out.resize(out.size() - 4);
    if (!takeover_) deflateReset(&z_);
    return out;
  }

 private:
  z_stream z_{};
  bool takeover_;
};

// A whole message from `sender` (a client masks), in frames of at most
// `fragment` payload bytes (0: one frame), compressed when `c` is given.
inline std::string message(std::string_view text, Sender sender, Compressor* c = nullptr, std::size_t fragment = 0,
                           Opcode opcode = Opcode::text) {
  const std::string payload = c ? c->compress(text) : std::string(text);
  const std::size_t step = fragment == 0 ? std::max<std::size_t>(payload.size(), 1) : fragment;
  std::string out;
  std::size_t at = 0;
  do {
    const std::size_t n = std::min(step, payload.size() - at);
    FrameBits bits;
    bits.fin = at + n == payload.size();
    bits.rsv1 = c && at == 0;
    bits.masked = sender == Sender::client;
    out += frame(at == 0 ? opcode : Opcode::continuation, std::string_view(payload).substr(at, n), bits);
    at += n;
  } while (at < payload.size());
  return out;
}

}  // namespace infertap::protocol::websocket::testing
