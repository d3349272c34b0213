// Fuzzes SseParser with pieces and holes, and checks that splitting a stream
// without holes never changes what it means (same events as one feed).
//
// Input: [control][n_ops ops...][stream bytes]. bits 0..3 of control = number
// of op bytes; bit4 = start with resync(). Each op (in a cycle) makes one piece
// of length (op & 0x7f) + 1; bit7 makes it a hole.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "feed_pieces.h"
#include "protocol/payload/interpreter.h"
#include "protocol/sse/parser.h"

using namespace infertap::protocol;

namespace {

struct Seen {
  std::string type, data, id;
  std::uint64_t offset;
  bool truncated;
  bool operator==(const Seen&) const = default;
};

struct Run {
  std::vector<Seen> events;
  std::uint64_t body_size = 0;
  SseParser parser{[this](const SseEvent& e) {
    if (e.data.size() > SseParser::kMaxEventData) std::abort();
    if (e.stream_offset + e.wire_bytes > body_size) std::abort();
    if (e.first_byte_ts > e.ts) std::abort();
    events.push_back({std::string(e.type), std::string(e.data), std::string(e.id), e.stream_offset, e.truncated});
  }};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t control = data[0];
  const std::size_t n_ops = std::min<std::size_t>(control & 15, size - 1);
  const bool resync = control & 16;
  const std::uint8_t* ops = data + 1;
  const std::uint8_t* stream = data + 1 + n_ops;
  const std::size_t stream_size = size - 1 - n_ops;

  Run split;
  split.body_size = stream_size;
  if (resync) split.parser.resync();
  const bool holes = infertap::fuzzing::feed_pieces(split.parser, {ops, n_ops}, {stream, stream_size});
  split.parser.end(stream_size);
  for (const Seen& e : split.events) (void)interpret_event(e.type, e.data, e.truncated);

  if (!holes) {
    Run whole;
    whole.body_size = stream_size;
    if (resync) whole.parser.resync();
    whole.parser.feed({stream, stream_size}, 0);
    whole.parser.end(1);
    if (!(whole.events == split.events)) std::abort();
    if (whole.parser.incomplete_events() != split.parser.incomplete_events()) std::abort();
  }
  return 0;
}
