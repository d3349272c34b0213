#include "protocol/encoding/decoder.h"

#include <brotli/decode.h>
#include <zlib.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_createDStream_advanced: a decoder with our allocator
#include <zstd.h>
#include <zstd_errors.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

namespace infertap::protocol {
namespace {

// What one decoded chunk may hold: events go to the event parser as soon as
// they are decoded, so this bounds nothing but the stack.
constexpr std::size_t kChunk = 16 * 1024;
// zstd windows past 8 MiB are refused outright (its default limit is 128 MiB).
constexpr int kZstdWindowLogMax = 23;

std::atomic<std::size_t> g_state_bytes{0};

// Counts a decoder's allocations against its own budget and the process's.
class Budget {
 public:
  Budget(std::size_t own, std::size_t total) : own_cap_(own), total_cap_(total) {}
  ~Budget() { g_state_bytes -= used_; }
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;

  void* allocate(std::size_t size) {
    if (used_ + size > own_cap_) return nullptr;
    if (g_state_bytes.fetch_add(size) + size > total_cap_) {
      g_state_bytes -= size;
      return nullptr;
    }
    auto* block = static_cast<std::size_t*>(std::malloc(size + kHeader));
    if (!block) {
      g_state_bytes -= size;
      return nullptr;
    }
    *block = size;
    used_ += size;
    return reinterpret_cast<char*>(block) + kHeader;
  }
  void release(void* p) {
    if (!p) return;
    auto* block = reinterpret_cast<std::size_t*>(static_cast<char*>(p) - kHeader);
    used_ -= *block;
    g_state_bytes -= *block;
    std::free(block);
  }

  static void* zlib_alloc(void* self, unsigned items, unsigned size) {
    return static_cast<Budget*>(self)->allocate(std::size_t{items} * size);
  }
  static void zlib_free(void* self, void* p) { static_cast<Budget*>(self)->release(p); }
  static void* plain_alloc(void* self, std::size_t size) { return static_cast<Budget*>(self)->allocate(size); }
  static void plain_free(void* self, void* p) { static_cast<Budget*>(self)->release(p); }

 private:
  static constexpr std::size_t kHeader = alignof(std::max_align_t);
  const std::size_t own_cap_, total_cap_;
  std::size_t used_ = 0;
};

// gzip (one member after another) and deflate (zlib-wrapped, or raw as some
// servers send it: told apart by the two header bytes RFC 1950 defines).
class ZlibDecoder final : public BodyDecoder {
 public:
  ZlibDecoder(ContentEncoding encoding, const DecoderLimits& limits)
      : BodyDecoder(limits), gzip_(encoding == ContentEncoding::gzip), budget_(limits.state_bytes, limits.total_state_bytes) {
    z_.zalloc = &Budget::zlib_alloc;
    z_.zfree = &Budget::zlib_free;
    z_.opaque = &budget_;
  }
  ~ZlibDecoder() override {
    if (started_) inflateEnd(&z_);
  }

 protected:
  Status step(std::span<const std::uint8_t> in, std::span<std::uint8_t> out, std::size_t* consumed,
              std::size_t* produced) override {
    if (!started_) {
      if (!gzip_ && !held_ && in.size() == 1) {
        // One byte cannot tell a zlib header from raw deflate: hold it.
        first_ = in[0];
        held_ = true;
        *consumed = 1;
        return Status::ok;
      }
      if (in.empty()) return Status::ok;
      if (const Status s = start(in); s != Status::ok) return s;
    }
    if (ended_ && !in.empty()) {
      if (!gzip_) return Status::corrupt;  // bytes after the end of a deflate stream
      if (inflateReset(&z_) != Z_OK) return Status::corrupt;  // the next gzip member
      ended_ = false;
    }
    z_.next_in = const_cast<Bytef*>(in.data());
    z_.avail_in = static_cast<uInt>(in.size());
    z_.next_out = out.data();
    z_.avail_out = static_cast<uInt>(out.size());
    const int ret = inflate(&z_, Z_NO_FLUSH);
    *consumed = in.size() - z_.avail_in;
    *produced = out.size() - z_.avail_out;
    switch (ret) {
      case Z_OK:
      case Z_BUF_ERROR: return Status::ok;  // needs more input (or room)
      case Z_STREAM_END: ended_ = true; return Status::ok;
      case Z_MEM_ERROR: return Status::no_memory;
      default: return Status::corrupt;
    }
  }
  bool ended() const override { return ended_; }

 private:
  Status start(std::span<const std::uint8_t> in) {
    int window = 15 + 32;  // gzip or zlib header, detected
    if (!gzip_) {
      const std::uint8_t b0 = held_ ? first_ : in[0];
      const std::uint8_t b1 = held_ ? in[0] : in[1];
      const bool zlib_header = (b0 & 0x0f) == 8 && ((b0 << 8) | b1) % 31 == 0;
      window = zlib_header ? 15 : -15;
    }
    const int ret = inflateInit2(&z_, window);
    if (ret == Z_MEM_ERROR) return Status::no_memory;
    if (ret != Z_OK) return Status::corrupt;
    started_ = true;
    if (!held_) return Status::ok;
    // The held byte goes in first; alone it cannot produce output.
    z_.next_in = &first_;
    z_.avail_in = 1;
    std::uint8_t none[1];
    z_.next_out = none;
    z_.avail_out = 0;
    const int r = inflate(&z_, Z_NO_FLUSH);
    return r == Z_OK || r == Z_BUF_ERROR ? Status::ok : Status::corrupt;
  }

  const bool gzip_;
  Budget budget_;
  z_stream z_{};
  bool started_ = false;
  bool ended_ = false;
  bool held_ = false;      // deflate: first_ waits for the second header byte
  std::uint8_t first_ = 0;
};

class BrotliDecoder final : public BodyDecoder {
 public:
  explicit BrotliDecoder(const DecoderLimits& limits)
      : BodyDecoder(limits), budget_(limits.state_bytes, limits.total_state_bytes) {
    state_ = BrotliDecoderCreateInstance(&Budget::plain_alloc, &Budget::plain_free, &budget_);
  }
  ~BrotliDecoder() override {
    if (state_) BrotliDecoderDestroyInstance(state_);
  }

 protected:
  Status step(std::span<const std::uint8_t> in, std::span<std::uint8_t> out, std::size_t* consumed,
              std::size_t* produced) override {
    if (!state_) return Status::no_memory;
    std::size_t avail_in = in.size(), avail_out = out.size();
    const std::uint8_t* next_in = in.data();
    std::uint8_t* next_out = out.data();
    const BrotliDecoderResult r =
        BrotliDecoderDecompressStream(state_, &avail_in, &next_in, &avail_out, &next_out, nullptr);
    *consumed = in.size() - avail_in;
    *produced = out.size() - avail_out;
    if (r != BROTLI_DECODER_RESULT_ERROR) {
      // After the end of the stream, more bytes are not brotli.
      return r == BROTLI_DECODER_RESULT_SUCCESS && avail_in > 0 ? Status::corrupt : Status::ok;
    }
    const BrotliDecoderErrorCode code = BrotliDecoderGetErrorCode(state_);
    return code <= BROTLI_DECODER_ERROR_ALLOC_CONTEXT_MODES && code >= BROTLI_DECODER_ERROR_ALLOC_BLOCK_TYPE_TREES
               ? Status::no_memory
               : Status::corrupt;
  }
  bool ended() const override { return state_ && BrotliDecoderIsFinished(state_); }

 private:
  Budget budget_;
  BrotliDecoderState* state_ = nullptr;
};

class ZstdDecoder final : public BodyDecoder {
 public:
  explicit ZstdDecoder(const DecoderLimits& limits)
      : BodyDecoder(limits), budget_(limits.state_bytes, limits.total_state_bytes) {
    const ZSTD_customMem mem{&Budget::plain_alloc, &Budget::plain_free, &budget_};
    stream_ = ZSTD_createDStream_advanced(mem);
    if (stream_) ZSTD_DCtx_setParameter(stream_, ZSTD_d_windowLogMax, kZstdWindowLogMax);
  }
  ~ZstdDecoder() override {
    if (stream_) ZSTD_freeDStream(stream_);
  }

 protected:
  Status step(std::span<const std::uint8_t> in, std::span<std::uint8_t> out, std::size_t* consumed,
              std::size_t* produced) override {
    if (!stream_) return Status::no_memory;
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    ZSTD_outBuffer output{out.data(), out.size(), 0};
    const std::size_t r = ZSTD_decompressStream(stream_, &output, &input);
    *consumed = input.pos;
    *produced = output.pos;
    if (!ZSTD_isError(r)) {
      // 0: a frame is complete and flushed; anything fed after starts the next.
      if (r == 0) frame_done_ = true;
      else if (input.pos > 0) frame_done_ = false;
      return Status::ok;
    }
    return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? Status::no_memory : Status::corrupt;
  }

 private:
  bool ended() const override { return frame_done_; }

  Budget budget_;
  ZSTD_DStream* stream_ = nullptr;
  bool frame_done_ = false;
};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view to_string(ContentEncoding e) {
  switch (e) {
    case ContentEncoding::identity: return "identity";
    case ContentEncoding::gzip: return "gzip";
    case ContentEncoding::deflate: return "deflate";
    case ContentEncoding::br: return "br";
    case ContentEncoding::zstd: return "zstd";
    case ContentEncoding::unsupported: return "unsupported";
  }
  return "unsupported";
}

std::string_view to_string(BodyDecoder::Status s) {
  switch (s) {
    case BodyDecoder::Status::ok: return "ok";
    case BodyDecoder::Status::corrupt: return "corrupt";
    case BodyDecoder::Status::too_large: return "too_large";
    case BodyDecoder::Status::no_memory: return "no_memory";
    case BodyDecoder::Status::too_costly: return "too_costly";
  }
  return "corrupt";
}

ContentEncoding parse_content_encoding(std::string_view value) {
  value = trim(value);
  if (value.empty() || iequals(value, "identity")) return ContentEncoding::identity;
  if (value.find(',') != std::string_view::npos) return ContentEncoding::unsupported;
  if (iequals(value, "gzip") || iequals(value, "x-gzip")) return ContentEncoding::gzip;
  if (iequals(value, "deflate")) return ContentEncoding::deflate;
  if (iequals(value, "br")) return ContentEncoding::br;
  if (iequals(value, "zstd")) return ContentEncoding::zstd;
  return ContentEncoding::unsupported;
}

std::unique_ptr<BodyDecoder> BodyDecoder::create(ContentEncoding encoding, const DecoderLimits& limits) {
  switch (encoding) {
    case ContentEncoding::gzip:
    case ContentEncoding::deflate: return std::make_unique<ZlibDecoder>(encoding, limits);
    case ContentEncoding::br: return std::make_unique<BrotliDecoder>(limits);
    case ContentEncoding::zstd: return std::make_unique<ZstdDecoder>(limits);
    case ContentEncoding::identity:
    case ContentEncoding::unsupported: break;
  }
  return nullptr;
}

std::size_t BodyDecoder::total_state_bytes() { return g_state_bytes.load(); }

BodyDecoder::Status BodyDecoder::finish() {
  if (status_ == Status::ok && !ended()) status_ = Status::corrupt;
  return status_;
}

BodyDecoder::Status BodyDecoder::feed(std::span<const std::uint8_t> in, Output& out) {
  if (status_ != Status::ok) return status_;
  std::uint8_t chunk[kChunk];
  for (;;) {
    std::size_t consumed = 0, produced = 0;
    const Status s = step(in, chunk, &consumed, &produced);
    consumed_ += consumed;
    if (produced > 0) {
      decoded_ += produced;
      if (decoded_ > limits_.output_bytes) return status_ = Status::too_large;
      if (decoded_ > limits_.output_grace_bytes + limits_.output_per_input_byte * consumed_)
        return status_ = Status::too_costly;
      out.decoded({chunk, produced});
    }
    if (s != Status::ok) return status_ = s;
    in = in.subspan(consumed);
    // Done when nothing moved, or the input is used up and the decoder had
    // room left (a full chunk may mean more output is waiting).
    if ((consumed == 0 && produced == 0) || (in.empty() && produced < kChunk)) break;
  }
  return status_;
}

}  // namespace infertap::protocol
