// The protobuf wire format, as much of it as OTLP needs: varints, 64-bit and
// 32-bit fixed fields, doubles, length-delimited fields (strings, bytes,
// nested messages) and packed repeated fixed64 / double. A message is
// written into its own buffer and appended to its parent with its length:
// OTLP requests nest five levels deep, so the copies cost little, and no
// size pass is needed.
//
//   ProtoWriter span;  span.bytes(1, trace_id);  span.string(5, "chat gpt-4o");
//   ProtoWriter scope; scope.message(2, span);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infertap::output::otlp {

class ProtoWriter {
 public:
  enum class Wire : std::uint8_t { varint = 0, fixed64 = 1, len = 2, fixed32 = 5 };

  void tag(std::uint32_t field, Wire wire) { varint_raw((std::uint64_t{field} << 3) | static_cast<std::uint8_t>(wire)); }
  void varint(std::uint32_t field, std::uint64_t v) {
    tag(field, Wire::varint);
    varint_raw(v);
  }
  // int32/int64 fields: negative values are ten-byte varints (two's complement).
  void int64(std::uint32_t field, std::int64_t v) { varint(field, static_cast<std::uint64_t>(v)); }
  void boolean(std::uint32_t field, bool v) { varint(field, v ? 1 : 0); }
  void fixed64(std::uint32_t field, std::uint64_t v) {
    tag(field, Wire::fixed64);
    fixed64_raw(v);
  }
  void sfixed64(std::uint32_t field, std::int64_t v) { fixed64(field, static_cast<std::uint64_t>(v)); }
  void fixed32(std::uint32_t field, std::uint32_t v);
  void double_(std::uint32_t field, double v);
  void bytes(std::uint32_t field, std::string_view v) {
    tag(field, Wire::len);
    varint_raw(v.size());
    out_.append(v);
  }
  void string(std::uint32_t field, std::string_view v) { bytes(field, v); }
  void message(std::uint32_t field, const ProtoWriter& m) { bytes(field, m.out_); }
  void packed_fixed64(std::uint32_t field, const std::vector<std::uint64_t>& values);
  void packed_double(std::uint32_t field, const std::vector<double>& values);

  const std::string& data() const { return out_; }
  std::string take() { return std::move(out_); }
  void append_raw(std::string_view encoded) { out_.append(encoded); }

  void varint_raw(std::uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }

 private:
  void fixed64_raw(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));  // little-endian
  }

  std::string out_;
};

}  // namespace infertap::output::otlp
