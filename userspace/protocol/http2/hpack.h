// HPACK header blocks of one direction of a connection, decoded with
// libnghttp2's inflater. Its table is right only if every block since the
// direction began was decoded: after a lost block (a capture hole, a block
// over the bound) or on a connection joined mid-way it starts afresh, and a
// block that refers to an entry it never saw fails (the stream's headers are
// then unknown) instead of decoding to another entry's value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

struct nghttp2_hd_inflater;

namespace infertap::protocol::http2 {

class HpackDecoder {
 public:
  // The dynamic table never grows past this, whatever SETTINGS allow (bound per direction).
  static constexpr std::size_t kMaxTableBytes = 64 * 1024;
  static constexpr std::size_t kDefaultTableBytes = 4096;

  HpackDecoder();
  ~HpackDecoder();
  HpackDecoder(const HpackDecoder&) = delete;
  HpackDecoder& operator=(const HpackDecoder&) = delete;

  using Field = std::function<void(std::string_view name, std::string_view value)>;
  // Decodes one whole header block. False when it could not be: the fields
  // already given are to be dropped, and the table starts afresh.
  bool decode(std::span<const std::uint8_t> block, const Field& field);
  // The receiver's SETTINGS_HEADER_TABLE_SIZE (capped at kMaxTableBytes).
  void set_max_table(std::uint32_t bytes);
  // A block went by undecoded: the table is unknown from here.
  void lose_state();

 private:
  void renew();

  nghttp2_hd_inflater* inflater_ = nullptr;
  std::size_t max_table_ = kDefaultTableBytes;
};

}  // namespace infertap::protocol::http2
