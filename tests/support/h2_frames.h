// Builds HTTP/2 frames and HPACK header blocks as a peer would send them
// (libnghttp2's deflater for the blocks), for feeding the HTTP/2 session,
// the pipeline, the fuzzer's seeds and the benchmark from synthetic bytes.
#pragma once

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace infertap::testing {

using H2Fields = std::vector<std::pair<std::string, std::string>>;

// One direction's frames: its own HPACK deflater, as each endpoint has.
class H2Builder {
 public:
  static constexpr std::uint8_t kData = 0, kHeaders = 1, kRst = 3, kSettings = 4, kPing = 6, kGoaway = 7,
                                kWindowUpdate = 8, kContinuation = 9;
  static constexpr std::uint8_t kEndStream = 0x1, kEndHeaders = 0x4, kPadded = 0x8, kPriority = 0x20;

  H2Builder() { nghttp2_hd_deflate_new(&deflater_, 4096); }
  ~H2Builder() { nghttp2_hd_deflate_del(deflater_); }
  H2Builder(const H2Builder&) = delete;
  H2Builder& operator=(const H2Builder&) = delete;

  static std::string preface() { return "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"; }

  static std::string frame(std::uint8_t type, std::uint8_t flags, std::uint32_t stream, std::string_view payload) {
    std::string f;
    const auto n = static_cast<std::uint32_t>(payload.size());
    f.push_back(static_cast<char>(n >> 16));
    f.push_back(static_cast<char>(n >> 8));
    f.push_back(static_cast<char>(n));
    f.push_back(static_cast<char>(type));
    f.push_back(static_cast<char>(flags));
    append_u32(f, stream);
    f.append(payload);
    return f;
  }

  // The HPACK block of `fields` (changes this direction's table).
  std::string block(const H2Fields& fields) {
    std::vector<nghttp2_nv> nva;
    for (const auto& [name, value] : fields) {
      nva.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                     reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
                     NGHTTP2_NV_FLAG_NONE});
    }
    std::string out(nghttp2_hd_deflate_bound(deflater_, nva.data(), nva.size()), '\0');
    const ssize_t n = nghttp2_hd_deflate_hd(deflater_, reinterpret_cast<std::uint8_t*>(out.data()), out.size(),
                                            nva.data(), nva.size());
    out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    return out;
  }

  // HEADERS (then CONTINUATION frames of at most `fragment` bytes, 0: one frame).
  std::string headers(std::uint32_t stream, const H2Fields& fields, bool end_stream, std::size_t fragment = 0,
                      std::uint8_t pad = 0) {
    const std::string b = block(fields);
    const std::size_t first = fragment ? std::min(fragment, b.size()) : b.size();
    std::uint8_t flags = end_stream ? kEndStream : 0;
    if (first == b.size()) flags |= kEndHeaders;
    std::string payload;
    if (pad) {
      flags |= kPadded | kPriority;
      payload.push_back(static_cast<char>(pad));
      payload.append("\x00\x00\x00\x00\x10", 5);  // priority: depends on 0, weight 16
    }
    payload.append(b, 0, first);
    payload.append(pad, '\0');
    std::string out = frame(kHeaders, flags, stream, payload);
    for (std::size_t at = first; at < b.size(); at += fragment) {
      const std::size_t n = std::min(fragment, b.size() - at);
      out += frame(kContinuation, at + n == b.size() ? kEndHeaders : 0, stream, b.substr(at, n));
    }
    return out;
  }

  static std::string data(std::uint32_t stream, std::string_view payload, bool end_stream, std::uint8_t pad = 0) {
    std::string p;
    std::uint8_t flags = end_stream ? kEndStream : 0;
    if (pad) {
      flags |= kPadded;
      p.push_back(static_cast<char>(pad));
    }
    p.append(payload);
    p.append(pad, '\0');
    return frame(kData, flags, stream, p);
  }

  static std::string settings(const std::vector<std::pair<std::uint16_t, std::uint32_t>>& values) {
    std::string p;
    for (const auto& [id, value] : values) {
      p.push_back(static_cast<char>(id >> 8));
      p.push_back(static_cast<char>(id));
      append_u32(p, value);
    }
    return frame(kSettings, 0, 0, p);
  }
  static std::string settings_ack() { return frame(kSettings, 1, 0, ""); }
  static std::string window_update(std::uint32_t stream, std::uint32_t increment) {
    std::string p;
    append_u32(p, increment);
    return frame(kWindowUpdate, 0, stream, p);
  }
  static std::string rst_stream(std::uint32_t stream, std::uint32_t code) {
    std::string p;
    append_u32(p, code);
    return frame(kRst, 0, stream, p);
  }
  static std::string goaway(std::uint32_t last_stream, std::uint32_t code) {
    std::string p;
    append_u32(p, last_stream);
    append_u32(p, code);
    return frame(kGoaway, 0, 0, p);
  }
  static std::string ping() { return frame(kPing, 0, 0, std::string(8, '\x01')); }

  // A gRPC message: compressed flag 0, 4-byte length, the message.
  static std::string grpc_message(std::string_view message) {
    std::string m(1, '\0');
    append_u32(m, static_cast<std::uint32_t>(message.size()));
    m.append(message);
    return m;
  }

 private:
  static void append_u32(std::string& s, std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>(v >> shift));
  }
  nghttp2_hd_deflater* deflater_ = nullptr;
};

}  // namespace infertap::testing
