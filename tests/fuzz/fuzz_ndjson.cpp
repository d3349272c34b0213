// Fuzzes NdjsonParser with pieces and holes, and checks that splitting a body
// without holes never changes what it means (same lines as one feed), that
// every line lies inside the body, and that the cap holds.
//
// Input: [control][n_ops ops...][body bytes]. bits 0..3 of control = number
// of op bytes; bit4 = start with resync(); bit5 = the body ends cut short.
// Each op (in a cycle) makes one piece of length (op & 0x7f) + 1; bit7 makes
// it a hole.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "protocol/ndjson/parser.h"
#include "feed_pieces.h"
#include "protocol/payload/interpreter.h"

using namespace infertap::protocol;

namespace {

struct Seen {
  std::string data;
  std::uint64_t offset;
  std::uint32_t wire;
  bool truncated;
  bool operator==(const Seen&) const = default;
};

struct Run {
  std::vector<Seen> lines;
  std::uint64_t body_size = 0;
  std::uint64_t last_end = 0;
  NdjsonParser parser{[this](const NdjsonLine& l) {
    if (l.data.size() > NdjsonParser::kMaxLine) std::abort();
    if (l.stream_offset + l.wire_bytes > body_size) std::abort();
    if (l.stream_offset < last_end) std::abort();  // lines do not overlap, in order
    if (l.first_byte_ts > l.ts) std::abort();
    if (l.data.find('\n') != std::string_view::npos) std::abort();
    last_end = l.stream_offset + l.wire_bytes;
    lines.push_back({std::string(l.data), l.stream_offset, l.wire_bytes, l.truncated});
  }};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t control = data[0];
  const std::size_t n_ops = std::min<std::size_t>(control & 15, size - 1);
  const bool resync = control & 16;
  const bool whole = !(control & 32);
  const std::uint8_t* ops = data + 1;
  const std::uint8_t* body = data + 1 + n_ops;
  const std::size_t body_size = size - 1 - n_ops;

  Run split;
  split.body_size = body_size;
  if (resync) split.parser.resync();
  const bool holes = infertap::fuzzing::feed_pieces(split.parser, {ops, n_ops}, {body, body_size});
  split.parser.end(body_size, whole);
  for (const Seen& l : split.lines) (void)interpret_event("", l.data, l.truncated);

  if (!holes) {
    Run one;
    one.body_size = body_size;
    if (resync) one.parser.resync();
    one.parser.feed({body, body_size}, 0);
    one.parser.end(1, whole);
    if (!(one.lines == split.lines)) std::abort();
    if (one.parser.incomplete_lines() != split.parser.incomplete_lines()) std::abort();
    for (const Seen& l : one.lines)
      if (l.truncated) std::abort();  // only holes and the cap cut lines (the input is far below the cap)
  }
  return 0;
}
