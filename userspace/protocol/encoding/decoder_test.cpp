// Body decoders against the reference encoders of each coding: any split of
// the compressed bytes decodes to the same text; corrupt data, bombs and
// memory budgets end in a status, never a crash.
#include "protocol/encoding/decoder.h"

#include <brotli/encode.h>
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <random>
#include <string>
#include <vector>

namespace infertap::protocol {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes zlib_compress(std::string_view text, int window_bits) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
  Bytes out(deflateBound(&z, text.size()) + 64);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

Bytes compress(ContentEncoding e, std::string_view text) {
  switch (e) {
    case ContentEncoding::gzip: return zlib_compress(text, 15 + 16);
    case ContentEncoding::deflate: return zlib_compress(text, 15);
    case ContentEncoding::br: {
      Bytes out(BrotliEncoderMaxCompressedSize(text.size()) + 64);
      std::size_t n = out.size();
      BrotliEncoderCompress(5, 22, BROTLI_MODE_TEXT, text.size(), reinterpret_cast<const std::uint8_t*>(text.data()), &n,
                            out.data());
      out.resize(n);
      return out;
    }
    case ContentEncoding::zstd: {
      Bytes out(ZSTD_compressBound(text.size()));
      out.resize(ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3));
      return out;
    }
    default: return {};
  }
}

struct Collect : BodyDecoder::Output {
  std::string text;
  void decoded(std::span<const std::uint8_t> b) override { text.append(reinterpret_cast<const char*>(b.data()), b.size()); }
};

std::string sse_text(int events) {
  std::string s;
  for (int i = 0; i < events; ++i)
    s += "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"delta\":{\"content\":\"token " + std::to_string(i) + "\"}}]}\n\n";
  return s;
}

TEST(ContentEncoding, HeaderValues) {
  EXPECT_EQ(parse_content_encoding(""), ContentEncoding::identity);
  EXPECT_EQ(parse_content_encoding("identity"), ContentEncoding::identity);
  EXPECT_EQ(parse_content_encoding(" GZip "), ContentEncoding::gzip);
  EXPECT_EQ(parse_content_encoding("x-gzip"), ContentEncoding::gzip);
  EXPECT_EQ(parse_content_encoding("deflate"), ContentEncoding::deflate);
  EXPECT_EQ(parse_content_encoding("br"), ContentEncoding::br);
  EXPECT_EQ(parse_content_encoding("zstd"), ContentEncoding::zstd);
  EXPECT_EQ(parse_content_encoding("gzip, br"), ContentEncoding::unsupported);
  EXPECT_EQ(parse_content_encoding("compress"), ContentEncoding::unsupported);
  EXPECT_EQ(BodyDecoder::create(ContentEncoding::identity), nullptr);
}

class EveryCoding : public ::testing::TestWithParam<ContentEncoding> {};

TEST_P(EveryCoding, AnySplitDecodesToTheSameText) {
  const std::string text = sse_text(200);
  const Bytes wire = compress(GetParam(), text);
  ASSERT_FALSE(wire.empty());
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    auto d = BodyDecoder::create(GetParam());
    ASSERT_TRUE(d);
    Collect out;
    std::size_t at = 0;
    while (at < wire.size()) {
      const std::size_t n = std::min<std::size_t>(wire.size() - at, 1 + rng() % (round < 5 ? 3 : 300));
      ASSERT_EQ(d->feed({wire.data() + at, n}, out), BodyDecoder::Status::ok);
      at += n;
    }
    EXPECT_EQ(out.text, text);
    EXPECT_EQ(d->decoded_bytes(), text.size());
  }
}

TEST_P(EveryCoding, CorruptDataIsAStatusAndStaysOne) {
  Bytes wire = compress(GetParam(), sse_text(50));
  for (std::size_t i = 0; i < wire.size(); i += 3) wire[i] ^= 0x5a;
  auto d = BodyDecoder::create(GetParam());
  Collect out;
  BodyDecoder::Status s = BodyDecoder::Status::ok;
  for (std::size_t at = 0; at < wire.size() && s == BodyDecoder::Status::ok; at += 64)
    s = d->feed({wire.data() + at, std::min<std::size_t>(64, wire.size() - at)}, out);
  // Found while decoding, or at the latest when the body ends unfinished.
  EXPECT_EQ(d->finish(), BodyDecoder::Status::corrupt);
  EXPECT_EQ(d->feed(wire, out), BodyDecoder::Status::corrupt) << "a failed decoder takes nothing more";
}

TEST_P(EveryCoding, ATruncatedBodyIsCorruptWhenItEnds) {
  const Bytes wire = compress(GetParam(), sse_text(50));
  auto d = BodyDecoder::create(GetParam());
  Collect out;
  ASSERT_EQ(d->feed({wire.data(), wire.size() - 4}, out), BodyDecoder::Status::ok);
  EXPECT_EQ(d->finish(), BodyDecoder::Status::corrupt);
  auto whole = BodyDecoder::create(GetParam());
  ASSERT_EQ(whole->feed(wire, out), BodyDecoder::Status::ok);
  EXPECT_EQ(whole->finish(), BodyDecoder::Status::ok);
}

TEST_P(EveryCoding, ABombStopsAtTheOutputCap) {
  const std::string zeros(8u << 20, '\0');
  const Bytes wire = compress(GetParam(), zeros);
  DecoderLimits limits;
  limits.output_bytes = 1u << 20;
  auto d = BodyDecoder::create(GetParam(), limits);
  Collect out;
  EXPECT_EQ(d->feed(wire, out), BodyDecoder::Status::too_large);
  EXPECT_LE(out.text.size(), limits.output_bytes);
}

// A bomb costs CPU per byte it decodes to: it stops long before the output
// cap, at output_per_input_byte per coded byte past the grace.
TEST_P(EveryCoding, ABombStopsAtTheCostCap) {
  const std::string zeros(64u << 20, '\0');
  const Bytes wire = compress(GetParam(), zeros);
  const DecoderLimits limits;
  auto d = BodyDecoder::create(GetParam(), limits);
  Collect out;
  EXPECT_EQ(d->feed(wire, out), BodyDecoder::Status::too_costly);
  EXPECT_EQ(d->feed(wire, out), BodyDecoder::Status::too_costly) << "and takes nothing more";
  EXPECT_LE(out.text.size(), limits.output_grace_bytes + limits.output_per_input_byte * wire.size() + (64u << 10));
  EXPECT_LT(out.text.size(), zeros.size() / 4);
  EXPECT_EQ(to_string(BodyDecoder::Status::too_costly), "too_costly");
}

TEST_P(EveryCoding, AStateBudgetTooSmallIsNoMemory) {
  DecoderLimits limits;
  limits.state_bytes = 512;
  const Bytes wire = compress(GetParam(), sse_text(50));
  auto d = BodyDecoder::create(GetParam(), limits);
  Collect out;
  EXPECT_EQ(d->feed(wire, out), BodyDecoder::Status::no_memory);
  d.reset();
  EXPECT_EQ(BodyDecoder::total_state_bytes(), 0u) << "every byte a decoder held is given back";
}

INSTANTIATE_TEST_SUITE_P(Codings, EveryCoding,
                         ::testing::Values(ContentEncoding::gzip, ContentEncoding::deflate, ContentEncoding::br,
                                           ContentEncoding::zstd),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(DeflateDecoder, RawDeflateAsSomeServersSendItDecodesToo) {
  const std::string text = sse_text(20);
  const Bytes wire = zlib_compress(text, -15);
  auto d = BodyDecoder::create(ContentEncoding::deflate);
  Collect out;
  ASSERT_EQ(d->feed({wire.data(), 1}, out), BodyDecoder::Status::ok);
  ASSERT_EQ(d->feed({wire.data() + 1, wire.size() - 1}, out), BodyDecoder::Status::ok);
  EXPECT_EQ(out.text, text);
}

TEST(GzipDecoder, MembersOneAfterAnotherDecodeInOrder) {
  Bytes wire = zlib_compress("data: one\n\n", 31);
  const Bytes second = zlib_compress("data: two\n\n", 31);
  wire.insert(wire.end(), second.begin(), second.end());
  auto d = BodyDecoder::create(ContentEncoding::gzip);
  Collect out;
  ASSERT_EQ(d->feed(wire, out), BodyDecoder::Status::ok);
  EXPECT_EQ(out.text, "data: one\n\ndata: two\n\n");
}

}  // namespace
}  // namespace infertap::protocol
