#include "protocol/websocket/deflate.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <vector>

namespace infertap::protocol::websocket {
namespace {

// What the sender strips from each message's end (RFC 7692 §7.2.1).
constexpr std::uint8_t kTrailer[4] = {0x00, 0x00, 0xff, 0xff};
constexpr std::size_t kOutputChunk = 16 * 1024;

std::atomic<std::size_t> g_state_bytes{0};

std::string_view trim(std::string_view s) {
  const std::size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The next `sep`-separated part of `s`, trimmed; `s` keeps what follows it.
std::string_view next_part(std::string_view& s, char sep) {
  const std::size_t at = s.find(sep);
  const std::string_view part = s.substr(0, at);
  s.remove_prefix(at == std::string_view::npos ? s.size() : at + 1);
  return trim(part);
}

// A window size parameter's value (quoted or not), when it is 8..15.
std::optional<std::uint8_t> window_bits(std::string_view value) {
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
  if (value.size() == 1 && value[0] == '8') return 8;
  if (value.size() == 1 && value[0] == '9') return 9;
  if (value.size() == 2 && value[0] == '1' && value[1] >= '0' && value[1] <= '5') {
    return static_cast<std::uint8_t>(10 + (value[1] - '0'));
  }
  return std::nullopt;
}

void apply_parameter(std::string_view name, std::string_view value, DeflateParams& p) {
  if (name == "server_no_context_takeover") p.server_no_context_takeover = true;
  if (name == "client_no_context_takeover") p.client_no_context_takeover = true;
  if (name == "server_max_window_bits") p.server_max_window_bits = window_bits(value).value_or(p.server_max_window_bits);
  if (name == "client_max_window_bits") p.client_max_window_bits = window_bits(value).value_or(p.client_max_window_bits);
}

}  // namespace

std::optional<DeflateParams> parse_deflate(std::string_view extensions) {
  while (!extensions.empty()) {
    std::string_view extension = next_part(extensions, ',');
    if (next_part(extension, ';') != "permessage-deflate") continue;
    DeflateParams p;
    while (!extension.empty()) {
      std::string_view value = next_part(extension, ';');
      const std::string_view name = next_part(value, '=');
      apply_parameter(name, trim(value), p);
    }
    return p;
  }
  return std::nullopt;
}

// zlib's allocations, counted against one inflater's budget and against the
// process's (shared with the body decoders: BodyDecoder::total_state_bytes()).
struct Inflater::Budget {
  Budget(std::size_t own, std::size_t total) : own_cap(own), total_cap(total) {}
  const std::size_t own_cap, total_cap;
  std::size_t used = 0;

  static void* allocate(void* self, uInt items, uInt size) {
    auto& b = *static_cast<Budget*>(self);
    const std::size_t bytes = std::size_t{items} * size;
    const std::size_t process = g_state_bytes.load() + BodyDecoder::total_state_bytes();
    if (b.used + bytes > b.own_cap || process + bytes > b.total_cap) return nullptr;
    // Each block remembers its size in front of what zlib gets.
    auto* block = static_cast<std::max_align_t*>(std::malloc(bytes + sizeof(std::max_align_t)));
    if (!block) return nullptr;
    *reinterpret_cast<std::size_t*>(block) = bytes;
    b.used += bytes;
    g_state_bytes += bytes;
    return block + 1;
  }
  static void release(void* self, void* p) {
    if (!p) return;
    auto* block = static_cast<std::max_align_t*>(p) - 1;
    const std::size_t bytes = *reinterpret_cast<std::size_t*>(block);
    static_cast<Budget*>(self)->used -= bytes;
    g_state_bytes -= bytes;
    std::free(block);
  }
};

std::size_t Inflater::state_bytes() { return g_state_bytes.load(); }

// zlib writes windows of 2^8 as 2^9 (and refuses 8 for raw DEFLATE): read them as 9.
Inflater::Inflater(int window_bits, bool context_takeover, const DecoderLimits& limits, std::size_t keep)
    : window_bits_(std::clamp(window_bits, 9, 15)),
      takeover_(context_takeover),
      limits_(limits),
      keep_(keep),
      budget_(std::make_unique<Budget>(limits.state_bytes, limits.total_state_bytes)) {
  z_.zalloc = &Budget::allocate;
  z_.zfree = &Budget::release;
  z_.opaque = budget_.get();
}

Inflater::~Inflater() {
  if (started_) inflateEnd(&z_);
}

Inflater::Status Inflater::start() {
  const int ret = inflateInit2(&z_, -window_bits_);
  if (ret == Z_MEM_ERROR) return Status::no_memory;
  if (ret != Z_OK) return Status::corrupt;
  started_ = true;
  return Status::ok;
}

void Inflater::begin() {
  status_ = Status::ok;
  text_.clear();
  cut_ = false;
  fed_ = false;
  inflated_ = consumed_ = 0;
  if (lost_) {
    status_ = Status::context_lost;
    return;
  }
  if (!started_) {
    if (const Status s = start(); s != Status::ok) fail(s);
    return;
  }
  if (!takeover_) {
    final_block_ = false;
    if (inflateReset(&z_) != Z_OK) fail(Status::corrupt);
    return;
  }
  if (final_block_) restart_after_final_block();
}

// The sender ended its DEFLATE stream with a final block and starts a new
// one, whose distances may still reach into the old window (RFC 7692
// §7.2.3.4): a fresh inflater given the old window as its dictionary.
void Inflater::restart_after_final_block() {
  final_block_ = false;
  std::vector<Bytef> window(std::size_t{1} << window_bits_);
  uInt length = 0;
  if (inflateGetDictionary(&z_, window.data(), &length) != Z_OK || inflateReset(&z_) != Z_OK ||
      (length > 0 && inflateSetDictionary(&z_, window.data(), length) != Z_OK)) {
    fail(Status::corrupt);
  }
}

void Inflater::feed(std::span<const std::uint8_t> compressed) {
  fed_ = fed_ || !compressed.empty();
  if (status_ == Status::ok && !final_block_ && !compressed.empty()) inflate_bytes(compressed);
}

void Inflater::hole(std::uint64_t n) {
  if (n > 0 && status_ == Status::ok) fail(Status::capture_hole);
}

// An empty payload is an empty message (zlib flushes nothing when nothing
// came since its last flush): the trailer would open a stored block instead.
Inflater::Status Inflater::end() {
  if (status_ == Status::ok && !final_block_ && fed_) inflate_bytes(kTrailer);
  return status_;
}

void Inflater::bytes_lost() {
  if (takeover_) lost_ = true;
}

void Inflater::inflate_bytes(std::span<const std::uint8_t> in) {
  std::array<std::uint8_t, kOutputChunk> out;
  z_.next_in = const_cast<Bytef*>(in.data());
  z_.avail_in = static_cast<uInt>(in.size());
  while (status_ == Status::ok) {
    z_.next_out = out.data();
    z_.avail_out = static_cast<uInt>(out.size());
    const uInt in_before = z_.avail_in;
    const int ret = inflate(&z_, Z_SYNC_FLUSH);
    consumed_ += in_before - z_.avail_in;
    if (!take_output({out.data(), out.size() - z_.avail_out})) return;
    if (ret == Z_STREAM_END) {
      final_block_ = true;  // what follows in this message (the trailer) belongs to no stream
      return;
    }
    if (ret == Z_MEM_ERROR) return fail(Status::no_memory);
    if (ret != Z_OK && ret != Z_BUF_ERROR) return fail(Status::corrupt);
    // Done when the input is used up and zlib had room left, or nothing moved.
    if ((z_.avail_in == 0 && z_.avail_out > 0) || ret == Z_BUF_ERROR) return;
  }
}

bool Inflater::take_output(std::span<const std::uint8_t> out) {
  inflated_ += out.size();
  if (inflated_ > limits_.output_bytes) {
    fail(Status::too_large);
    return false;
  }
  if (inflated_ > limits_.output_grace_bytes + limits_.output_per_input_byte * consumed_) {
    fail(Status::too_costly);
    return false;
  }
  const std::size_t room = keep_ - std::min(keep_, text_.size());
  text_.append(reinterpret_cast<const char*>(out.data()), std::min(room, out.size()));
  cut_ = cut_ || out.size() > room;
  return true;
}

// A message that cannot be inflated leaves the sender's window unknown when
// it carries over: nothing of that direction can be inflated any more.
void Inflater::fail(Status s) {
  status_ = s;
  if (takeover_) lost_ = true;
}

}  // namespace infertap::protocol::websocket
