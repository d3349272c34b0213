// Server-Sent Events parser (WHATWG HTML "event stream interpretation"), fed
// from de-chunked response body bytes that may contain capture holes.
//
// Rules followed: lines end in CRLF, LF or CR; a leading UTF-8 BOM is skipped;
// lines starting with ':' are comments; "field:value" with one optional space
// after the colon; "data" lines are joined with '\n'; an empty line dispatches
// the event; "event" sets the type, "id" the last event id (ignored if it holds
// NUL), "retry" is parsed and ignored; unknown fields are ignored; an event with
// no data line is not dispatched (but is counted as a boundary).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "protocol/stream.h"

namespace infertap::protocol {

struct SseEvent {
  std::string_view type;  // "" when no event: field (means "message")
  std::string_view data;  // data lines joined by '\n'; capped at kMaxEventData
  std::string_view id;    // last "id:" value seen in this event, "" if none
  TimestampNs first_byte_ts = 0;  // time of the piece holding the event's first byte
  TimestampNs ts = 0;             // time of the piece holding the terminating empty line
  std::uint64_t stream_offset = 0;  // body offset of the event's first byte
  std::uint32_t wire_bytes = 0;     // bytes of the event on the wire incl. terminator
  bool truncated = false;  // a capture hole or the data cap cut part of this event
};

class SseParser {
 public:
  static constexpr std::size_t kMaxEventData = 64 * 1024;  // bound per event

  using Callback = std::function<void(const SseEvent&)>;
  explicit SseParser(Callback on_event);

  void feed(std::span<const std::uint8_t> bytes, TimestampNs ts);
  // n bytes were not captured. The current event (if any) is marked truncated.
  // A hole may hide a boundary: the parser keeps going and relies on the
  // following bytes; see resync().
  void gap(std::uint64_t n, TimestampNs ts);
  // Body ended. A pending event without its empty line is not dispatched
  // (WHATWG); it is counted in incomplete_events().
  void end(TimestampNs ts);
  // Join an event stream in the middle (agent started late): discard bytes up
  // to the next event boundary, or start at once when the next byte begins a
  // line with a known field ("data:", "event:", "id:", "retry:") or ':'.
  void resync();

  std::uint64_t events() const { return events_; }
  std::uint64_t incomplete_events() const { return incomplete_; }
  std::uint64_t bytes_discarded() const { return discarded_; }

 private:
  // Implementation-defined state.
  enum class Mode : std::uint8_t {
    normal,         // line parsing
    after_gap,      // first bytes after a hole: a known field starts a new event, else skip_line
    skip_line,      // discarding the rest of a line whose start was in a hole
    resync_decide,  // after resync(): a known field starts at once, else skip_event
    skip_event,     // discarding up to the next empty line
  };
  void consume(const char* p, const char* end, TimestampNs ts);
  const char* skip_rest_of_line(const char* p, const char* end);
  const char* skip_to_event_end(const char* p, const char* end);
  const char* take_line(const char* p, const char* end);
  const char* decide(const char* p, const char* end, TimestampNs ts, std::uint64_t offset);
  const char* skip_terminator(const char* p, const char* end);
  // `in_piece`: the line lies in the bytes being fed (valid until feed returns).
  void process_line(std::string_view line, bool in_piece = false);
  void keep_data_view();  // copies a data value still pointing into a piece
  void dispatch(TimestampNs ts, std::uint64_t end_offset);
  void reset_event();

  Callback on_event_;
  Mode mode_ = Mode::normal;
  bool in_event_ = false;       // a byte of the current event was seen (or lost in a hole)
  bool has_data_ = false;       // at least one data line (WHATWG "data buffer non-empty")
  bool truncated_ = false;
  bool line_open_ = false;      // line_ holds the start of a line cut by the end of a piece
  bool pending_cr_ = false;     // last byte was a CR ending a line: a leading LF is its partner
  bool skip_at_line_start_ = false;
  std::uint8_t bom_matched_ = 0;
  bool bom_checked_ = false;
  std::uint8_t decide_len_ = 0;
  char decide_buf_[8] = {};
  std::uint64_t offset_ = 0;        // body bytes seen, holes included
  std::uint64_t event_offset_ = 0;  // offset of the current event's first byte
  std::uint64_t hole_offset_ = 0;   // where the latest hole began
  std::uint64_t decide_offset_ = 0;
  TimestampNs first_byte_ts_ = 0;
  TimestampNs gap_ts_ = 0;
  TimestampNs decide_ts_ = 0;
  std::string data_;
  std::string_view data_view_;  // the event's one data line, inside the piece being fed
  bool data_in_view_ = false;
  std::string type_;
  std::string id_;
  std::string line_;
  std::uint64_t events_ = 0;
  std::uint64_t incomplete_ = 0;
  std::uint64_t discarded_ = 0;
};

}  // namespace infertap::protocol
