// Fuzzes the body decoders (gzip, deflate, br, zstd) with corrupt, truncated
// and bomb-like input cut into pieces, under small memory and output limits:
// every outcome is a status, output never passes the cap, and every byte of
// decoder state is given back.
//
// Input: [coding (low 2 bits)][piece sizes seed][bytes...].
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "protocol/encoding/decoder.h"

using namespace infertap::protocol;

namespace {

struct Count : BodyDecoder::Output {
  std::uint64_t n = 0;
  void decoded(std::span<const std::uint8_t> bytes) override { n += bytes.size(); }
};

constexpr ContentEncoding kCodings[] = {ContentEncoding::gzip, ContentEncoding::deflate, ContentEncoding::br,
                                        ContentEncoding::zstd};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  DecoderLimits limits;
  limits.state_bytes = 4u << 20;
  limits.output_bytes = 1u << 20;
  {
    auto decoder = BodyDecoder::create(kCodings[data[0] & 3], limits);
    if (!decoder) std::abort();
    Count out;
    std::uint8_t seed = data[1];
    std::size_t at = 2;
    BodyDecoder::Status status = BodyDecoder::Status::ok;
    while (at < size) {
      seed = static_cast<std::uint8_t>(seed * 37 + 11);
      const std::size_t n = std::min<std::size_t>(size - at, 1 + seed % 97);
      status = decoder->feed({data + at, n}, out);
      at += n;
      if (out.n > limits.output_bytes) std::abort();
      if (status != BodyDecoder::Status::ok && decoder->feed({data, 1}, out) != status) std::abort();
    }
    decoder->finish();
    if (out.n != decoder->decoded_bytes() && decoder->status() != BodyDecoder::Status::too_large) std::abort();
  }
  if (BodyDecoder::total_state_bytes() != 0) std::abort();
  return 0;
}
