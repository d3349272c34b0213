// Fuzzes one direction's permessage-deflate inflater (protocol/websocket/
// deflate.h). Two modes:
//   round trip: each chunk is a message's text, compressed as a sender does
//     (tests' Compressor: zlib, the window kept or reset per message); the
//     inflater must give each text back whole, fed in pieces of any size.
//   raw: each chunk is a message's compressed bytes as the input says (bad
//     DEFLATE, distances before the window, bombs), some lost to a hole.
// Checks: bounds of what is kept, a lost context stays lost, the memory
// budget returns to zero.
//
// Input: [mode][chunks...], a chunk = [length | 0x80 hole][bytes]. mode
// bit0: context takeover; bits 1..3: window bits - 8 (read as 9..15);
// bit4: round trip; bits 5..7: piece size - 1 (x 7).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "protocol/websocket/deflate.h"
#include "protocol/websocket/test_encoder.h"

using namespace infertap::protocol;
using namespace infertap::protocol::websocket;

namespace {

#define DEFLATE_CHECK(cond) \
  do {                      \
    if (!(cond)) std::abort(); \
  } while (0)

constexpr std::size_t kKeep = 4096;

void feed_in_pieces(Inflater& in, std::string_view bytes, std::size_t piece) {
  for (std::size_t at = 0; at < bytes.size(); at += piece) {
    const std::string_view part = bytes.substr(at, piece);
    in.feed({reinterpret_cast<const std::uint8_t*>(part.data()), part.size()});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t before = Inflater::state_bytes();
  const std::uint8_t mode = data[0];
  const bool takeover = mode & 1;
  const int bits = 8 + ((mode >> 1) & 7);
  const bool round_trip = mode & 0x10;
  const std::size_t piece = 1 + 7 * (mode >> 5);
  DecoderLimits limits;
  limits.output_bytes = 1 << 20;
  limits.output_grace_bytes = 64 << 10;
  {
    Inflater in(bits, takeover, limits, kKeep);
    testing::Compressor sender(takeover, std::max(bits, 9));
    bool lost = false;
    std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
    for (int messages = 0; !rest.empty() && messages < 64; ++messages) {
      const std::uint8_t head = static_cast<std::uint8_t>(rest[0]);
      const std::string_view chunk = rest.substr(1, head & 0x7f);
      rest.remove_prefix(1 + chunk.size());
      const bool hole = (head & 0x80) && !round_trip;
      const std::string compressed = round_trip ? sender.compress(chunk) : std::string(chunk);
      in.begin();
      if (hole) {
        feed_in_pieces(in, std::string_view(compressed).substr(0, compressed.size() / 2), piece);
        in.hole(compressed.size() - compressed.size() / 2 + 1);
      } else {
        feed_in_pieces(in, compressed, piece);
      }
      const Inflater::Status s = in.end();
      DEFLATE_CHECK(in.text().size() <= kKeep && in.inflated() >= in.text().size());
      if (s == Inflater::Status::ok) {
        DEFLATE_CHECK(in.text_cut() == (in.inflated() > in.text().size()) && in.inflated() <= limits.output_bytes);
      }
      DEFLATE_CHECK(!lost || (in.context_lost() && s == Inflater::Status::context_lost));
      DEFLATE_CHECK(!in.context_lost() || takeover);
      lost = in.context_lost();
      if (round_trip) DEFLATE_CHECK(s == Inflater::Status::ok && in.text() == chunk);
      if (hole) DEFLATE_CHECK(s != Inflater::Status::ok);
    }
  }
  DEFLATE_CHECK(Inflater::state_bytes() == before);
  return 0;
}
