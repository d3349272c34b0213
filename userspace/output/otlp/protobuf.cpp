#include "output/otlp/protobuf.h"

#include <bit>
#include <cstring>

namespace infertap::output::otlp {

void ProtoWriter::fixed32(std::uint32_t field, std::uint32_t v) {
  tag(field, Wire::fixed32);
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void ProtoWriter::double_(std::uint32_t field, double v) {
  tag(field, Wire::fixed64);
  fixed64_raw(std::bit_cast<std::uint64_t>(v));  // IEEE 754, little-endian on the wire
}

void ProtoWriter::packed_fixed64(std::uint32_t field, const std::vector<std::uint64_t>& values) {
  if (values.empty()) return;
  tag(field, Wire::len);
  varint_raw(values.size() * 8);
  for (std::uint64_t v : values) fixed64_raw(v);
}

void ProtoWriter::packed_double(std::uint32_t field, const std::vector<double>& values) {
  if (values.empty()) return;
  tag(field, Wire::len);
  varint_raw(values.size() * 8);
  for (double v : values) fixed64_raw(std::bit_cast<std::uint64_t>(v));
}

}  // namespace infertap::output::otlp
