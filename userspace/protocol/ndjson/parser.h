// Newline-delimited JSON (application/x-ndjson, application/jsonlines, a
// streamed application/json body): one event per line, fed from the same
// de-chunked (and decoded) body bytes as the SSE parser, with capture holes.
//
// An event is complete when its line is: it ends at its LF (a CR before the
// LF belongs to the terminator), and is timed by the piece that carried that
// LF. Lines of whitespace only are keep-alives, not events. A line longer than
// kMaxLine keeps its first kMaxLine bytes and is marked truncated; it still
// ends at its LF. The body's end completes a last line without its LF (JSON
// Lines allows it) when the body ended whole.
//
// Hole rule (as for SSE, deterministic; the tests pin it down):
//  1. A line cut by a hole keeps its captured prefix (the payload scanner
//     reads what it proves) and is marked truncated.
//  2. The bytes after a hole finish a line whose start was before or in the
//     hole: they are discarded up to its LF, where the cut line is dispatched
//     (truncated). A line that began inside the hole has nothing captured and
//     is not dispatched. The hole may have hidden whole lines: they are not
//     seen (the hole is counted by the caller).
// Known limit: a hole ending exactly at a line boundary makes the next line
// read as the rest of the cut one (the cut line is then timed by the next
// line's LF). JSON cannot say where a line starts from its middle: '{' opens
// nested objects as often as lines.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "protocol/stream.h"

namespace infertap::protocol {

struct NdjsonLine {
  std::string_view data;          // the line without its terminator; capped at kMaxLine
  TimestampNs first_byte_ts = 0;  // time of the piece holding the line's first byte
  TimestampNs ts = 0;             // time of the piece holding its LF (or its last byte, at the body's end)
  std::uint64_t stream_offset = 0;  // body offset of the line's first byte
  std::uint32_t wire_bytes = 0;     // bytes of the line incl. its terminator
  bool truncated = false;           // a capture hole or the line cap cut part of it
};

class NdjsonParser {
 public:
  static constexpr std::size_t kMaxLine = 64 * 1024;  // bound per line

  using Callback = std::function<void(const NdjsonLine&)>;
  explicit NdjsonParser(Callback on_line);

  void feed(std::span<const std::uint8_t> bytes, TimestampNs ts);
  // n bytes were not captured.
  void gap(std::uint64_t n, TimestampNs ts);
  // The body ended; `whole`: its framing said so (a pending line is complete),
  // else it was cut short (a pending line is counted in incomplete_lines()).
  void end(TimestampNs ts, bool whole);
  // Join a body in the middle: start at once when the next byte opens an
  // object ('{'), else discard up to the next LF.
  void resync();

  std::uint64_t lines() const { return lines_; }
  std::uint64_t incomplete_lines() const { return incomplete_; }
  std::uint64_t bytes_discarded() const { return discarded_; }

 private:
  enum class Mode : std::uint8_t {
    normal,         // reading lines
    skip_line,      // discarding the rest of a line cut by a hole (or joined mid-way)
    resync_decide,  // after resync(): the next byte decides
  };
  void consume(const char* p, const char* end, TimestampNs ts);
  const char* take_line(const char* p, const char* end, TimestampNs ts, std::uint64_t base, const char* begin);
  const char* skip_line(const char* p, const char* end, TimestampNs ts, std::uint64_t end_offset_of_eol);
  void append(std::string_view bytes);
  void dispatch(std::string_view data, TimestampNs ts, std::uint64_t end_offset);
  void reset_line();

  Callback on_line_;
  Mode mode_ = Mode::normal;
  bool line_open_ = false;    // a line has started (line_ holds its bytes so far)
  bool nonblank_ = false;     // the open line has a byte other than whitespace
  bool truncated_ = false;
  bool captured_ = false;     // the open line has captured bytes (false: it began in a hole)
  std::uint64_t offset_ = 0;       // body bytes seen, holes included
  std::uint64_t line_offset_ = 0;  // offset of the open line's first byte
  TimestampNs first_byte_ts_ = 0;
  TimestampNs last_byte_ts_ = 0;
  std::string line_;
  std::uint64_t lines_ = 0;
  std::uint64_t incomplete_ = 0;
  std::uint64_t discarded_ = 0;
};

}  // namespace infertap::protocol
