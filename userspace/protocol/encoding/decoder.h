// Content codings of a response body (gzip, deflate, br, zstd), undone
// incrementally so that event boundaries can be found in what a compressing
// gateway sends. Each event is then timed by the piece of compressed bytes
// that let the decoder produce its end.
//
// Memory is bounded twice: a decoder's own state (window, tables) through an
// accounting allocator, per decoder and for all decoders of the process
// together; and what one response may decode to (a decompression bomb stops
// at the output cap, or sooner at the output-per-input cap that bounds its CPU). Failures are values, never exceptions or aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace infertap::protocol {

enum class ContentEncoding : std::uint8_t { identity, gzip, deflate, br, zstd, unsupported };
std::string_view to_string(ContentEncoding e);

// The coding a Content-Encoding header value names ("gzip", "x-gzip",
// "deflate", "br", "zstd", "identity", absent). More than one coding, or one
// we cannot undo, is `unsupported`.
ContentEncoding parse_content_encoding(std::string_view header_value);

struct DecoderLimits {
  std::size_t state_bytes = 8u << 20;         // one decoder's memory (zstd and brotli windows are the large part)
  std::size_t total_state_bytes = 256u << 20;  // every decoder of the process together
  std::uint64_t output_bytes = 64ull << 20;   // what one body may decode to
  // CPU per response: decoding and the event framing after it cost per byte
  // out, so a body may decode to at most output_per_input_byte bytes per byte
  // in, past the first output_grace_bytes. Streamed SSE compresses ~5-50x
  // (deflate's own limit is 1032x); a 6.5 kB brotli bomb would otherwise
  // decode to the whole 64 MiB cap (0.5 s of CPU).
  std::uint64_t output_per_input_byte = 256;
  std::uint64_t output_grace_bytes = 1ull << 20;
};

class BodyDecoder {
 public:
  enum class Status : std::uint8_t {
    ok,
    corrupt,     // not valid data of its coding (or cut by a capture hole)
    too_large,   // decoded past DecoderLimits::output_bytes
    no_memory,   // the decoder needed more than its memory budget
    too_costly,  // decoded more per byte in than DecoderLimits::output_per_input_byte
  };
  // Receives decoded bytes, valid during the call.
  class Output {
   public:
    virtual ~Output() = default;
    virtual void decoded(std::span<const std::uint8_t> bytes) = 0;
  };

  // nullptr for identity and unsupported codings.
  static std::unique_ptr<BodyDecoder> create(ContentEncoding encoding, const DecoderLimits& limits = {});
  virtual ~BodyDecoder() = default;

  // Decodes `in` and hands everything it produced to `out`, in order. After a
  // status other than ok the decoder takes nothing more and says so again.
  Status feed(std::span<const std::uint8_t> in, Output& out);
  // The body ended: `corrupt` when the coded stream did not (truncated data,
  // or corruption the coding could not tell earlier).
  Status finish();
  Status status() const { return status_; }
  std::uint64_t decoded_bytes() const { return decoded_; }
  // Bytes of state every decoder of the process holds now.
  static std::size_t total_state_bytes();

 protected:
  explicit BodyDecoder(const DecoderLimits& limits) : limits_(limits) {}
  // One step of the coding: consume from `in`, fill `out`; sets *consumed and
  // *produced. Returns ok, or the failure.
  virtual Status step(std::span<const std::uint8_t> in, std::span<std::uint8_t> out, std::size_t* consumed,
                      std::size_t* produced) = 0;
  // The coded stream reached its proper end.
  virtual bool ended() const = 0;

  const DecoderLimits limits_;

 private:
  Status status_ = Status::ok;
  std::uint64_t decoded_ = 0;
  std::uint64_t consumed_ = 0;  // coded bytes taken
};

std::string_view to_string(BodyDecoder::Status s);

}  // namespace infertap::protocol
