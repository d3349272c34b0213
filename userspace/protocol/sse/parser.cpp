// Server-Sent Events parser over de-chunked body bytes with capture holes.
//
// Hole rule (deterministic; the tests pin it down):
//  1. gap(): a line cut by the hole is processed with its captured prefix (so a
//     cut "data: {..." keeps the JSON head for the payload scanner), and the
//     current event is marked truncated.
//  2. The first bytes after a hole decide where we are:
//     a. they begin with a known field name and colon ("data:", "event:", "id:",
//        "retry:"): the hole is taken to have ended the previous event, which is
//        dispatched (truncated, ts of the hole) if it has something to report;
//        a new event starts at this line. A bare ":" is not enough here (JSON
//        text often continues with ':').
//     b. anything else (including a line terminator): the bytes finish a line
//        whose start was in the hole. They are discarded up to the end of that
//        line and parsing goes on: the next empty line dispatches the event.
//  3. A truncated event is dispatched if it has data or an event type (an
//     Anthropic "event: content_block_delta" whose data line was lost still
//     says a token went by). Untruncated events follow WHATWG: data required.
// Known limits (both need a hole to end at one exact byte; inference servers
// write one event per syscall and one data line per event, so they are rare):
//  * a hole ending between the two LFs of an event terminator: the lone LF
//    after it is read as the end of the cut line, and the next event is merged
//    into the truncated one;
//  * a hole inside the first of several data lines of one event that ends just
//    before the next "data:" line: rule 2a splits that event in two.
//
// Wire accounting: wire_bytes runs from the event's first byte to the end of
// its terminating empty line. When that line ends in a CR that is the last
// byte of a piece, the event is dispatched at once and a LF starting the next
// piece is swallowed as the rest of the CRLF (it belongs to no event).
#include "protocol/sse/parser.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace infertap::protocol {
namespace {

constexpr unsigned char kBom[3] = {0xEF, 0xBB, 0xBF};
constexpr std::size_t kMaxFieldValue = 256;  // event type and id
constexpr std::size_t kMaxLine = SseParser::kMaxEventData + 64;

enum class FieldMatch : std::uint8_t { no, partial, yes };

// Does `s` (the start of a line) begin with a field we know and its colon?
FieldMatch match_known_field(std::string_view s, bool allow_comment) {
  if (allow_comment && !s.empty() && s.front() == ':') return FieldMatch::yes;
  constexpr std::string_view kFields[] = {"data:", "event:", "id:", "retry:"};
  bool partial = false;
  for (std::string_view f : kFields) {
    const std::size_t n = std::min(s.size(), f.size());
    if (s.substr(0, n) != f.substr(0, n)) continue;
    if (s.size() >= f.size()) return FieldMatch::yes;
    partial = true;
  }
  return partial ? FieldMatch::partial : FieldMatch::no;
}

}  // namespace

SseParser::SseParser(Callback on_event) : on_event_(std::move(on_event)) {}

void SseParser::feed(std::span<const std::uint8_t> bytes, TimestampNs ts) {
  const char* p = reinterpret_cast<const char*>(bytes.data());
  const char* const end = p + bytes.size();
  if (!bom_checked_) {
    // A UTF-8 BOM may only open the stream; it can be split across pieces.
    while (p < end && bom_matched_ < 3 && static_cast<unsigned char>(*p) == kBom[bom_matched_]) {
      ++bom_matched_;
      ++p;
    }
    if (bom_matched_ == 3) {
      bom_checked_ = true;
      offset_ += 3;
    } else if (p < end) {
      bom_checked_ = true;
      // Not a BOM after all: the bytes matched so far are content.
      const char* prefix = reinterpret_cast<const char*>(kBom);
      if (bom_matched_ > 0) consume(prefix, prefix + bom_matched_, ts);
    } else {
      return;  // still a BOM prefix
    }
  }
  consume(p, end, ts);
}

void SseParser::gap(std::uint64_t n, TimestampNs ts) {
  if (n == 0) return;
  pending_cr_ = false;
  if (!bom_checked_) {
    bom_checked_ = true;
    offset_ += bom_matched_;
  }
  switch (mode_) {
    case Mode::normal:
    case Mode::skip_line:
      if (line_open_) {
        process_line(line_);  // keep what the capture saw of the cut line
        line_.clear();
        line_open_ = false;
        truncated_ = true;
      }
      if (in_event_) truncated_ = true;
      mode_ = Mode::after_gap;
      hole_offset_ = offset_;
      decide_len_ = 0;
      break;
    case Mode::after_gap:
    case Mode::resync_decide:
      discarded_ += decide_len_;
      decide_len_ = 0;
      break;
    case Mode::skip_event: break;
  }
  gap_ts_ = ts;
  offset_ += n;
}

void SseParser::end(TimestampNs) {
  const bool pending = has_data_ || !type_.empty() || (line_open_ && line_.front() != ':');
  if (pending) ++incomplete_;
  reset_event();
  line_.clear();
  if (line_.capacity() > 4096) line_.shrink_to_fit();
  if (data_.capacity() > 4096) data_.shrink_to_fit();
  line_open_ = false;
  pending_cr_ = false;
  mode_ = Mode::normal;
  decide_len_ = 0;
  bom_matched_ = 0;
  bom_checked_ = false;
  offset_ = 0;
}

void SseParser::resync() {
  reset_event();
  line_.clear();
  line_open_ = false;
  pending_cr_ = false;
  bom_checked_ = true;
  decide_len_ = 0;
  mode_ = Mode::resync_decide;
}

void SseParser::reset_event() {
  in_event_ = false;
  has_data_ = false;
  truncated_ = false;
  data_.clear();
  data_in_view_ = false;
  type_.clear();
  id_.clear();
}

void SseParser::dispatch(TimestampNs ts, std::uint64_t end_offset) {
  if (has_data_ || (truncated_ && !type_.empty())) {
    SseEvent event;
    event.type = type_;
    event.data = data_in_view_ ? data_view_ : std::string_view(data_);
    event.id = id_;
    event.first_byte_ts = first_byte_ts_;
    event.ts = ts;
    event.stream_offset = event_offset_;
    event.wire_bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(end_offset - event_offset_, UINT32_MAX));
    event.truncated = truncated_;
    ++events_;
    on_event_(event);
  }
  reset_event();
}

void SseParser::keep_data_view() {
  if (!data_in_view_) return;
  data_.assign(data_view_);
  data_in_view_ = false;
}

void SseParser::process_line(std::string_view line, bool in_piece) {
  if (line.empty() || line.front() == ':') return;  // comment
  const auto* colon = static_cast<const char*>(std::memchr(line.data(), ':', line.size()));
  std::string_view name = line;
  std::string_view value;
  if (colon != nullptr) {
    name = line.substr(0, colon - line.data());
    value = line.substr(name.size() + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (name == "data") {
    if (!has_data_ && in_piece && value.size() <= kMaxEventData) {
      // The usual event, one data line inside the piece being fed: the
      // event points at the piece's bytes instead of a copy.
      data_view_ = value;
      data_in_view_ = true;
      has_data_ = true;
      return;
    }
    keep_data_view();
    const std::size_t room = kMaxEventData - std::min(kMaxEventData, data_.size() + (has_data_ ? 1 : 0));
    if (has_data_ && data_.size() < kMaxEventData) data_.push_back('\n');
    if (value.size() > room) {
      value = value.substr(0, room);
      truncated_ = true;
    }
    data_.append(value);
    has_data_ = true;
  } else if (name == "event") {
    type_.assign(value.substr(0, kMaxFieldValue));
  } else if (name == "id") {
    if (value.find('\0') == std::string_view::npos) id_.assign(value.substr(0, kMaxFieldValue));
  }
  // "retry" and unknown fields are ignored.
}

// Consumes one line terminator at p (CR, LF or CRLF); a CR ending the piece
// leaves pending_cr_ so that a LF opening the next piece is its partner.
const char* SseParser::skip_terminator(const char* p, const char* end) {
  if (*p++ == '\r') {
    if (p == end) {
      pending_cr_ = true;
    } else if (*p == '\n') {
      ++p;
    }
  }
  return p;
}

const char* SseParser::decide(const char* p, const char* end, TimestampNs ts, std::uint64_t offset) {
  const bool after_gap = mode_ == Mode::after_gap;
  FieldMatch match = FieldMatch::partial;
  while (p < end && match == FieldMatch::partial) {
    if (*p == '\r' || *p == '\n') {
      match = FieldMatch::no;
      break;
    }
    if (decide_len_ == 0) {
      decide_offset_ = offset;
      decide_ts_ = ts;
    }
    decide_buf_[decide_len_++] = *p++;
    ++offset;
    match = match_known_field({decide_buf_, decide_len_}, !after_gap);
  }
  if (match == FieldMatch::partial) return p;  // wait for the next piece
  if (match == FieldMatch::yes) {
    if (after_gap) dispatch(gap_ts_, decide_offset_);  // the hole ended the previous event
    reset_event();
    in_event_ = true;
    event_offset_ = decide_offset_;
    first_byte_ts_ = decide_ts_;
    line_.assign(decide_buf_, decide_len_);
    line_open_ = true;
    mode_ = Mode::normal;
  } else {
    discarded_ += decide_len_;
    if (after_gap) {
      if (!in_event_) {  // the event may have begun inside the hole
        in_event_ = true;
        truncated_ = true;
        event_offset_ = hole_offset_;
        first_byte_ts_ = gap_ts_;
      }
      mode_ = Mode::skip_line;
    } else {
      mode_ = Mode::skip_event;
      skip_at_line_start_ = false;
    }
  }
  decide_len_ = 0;
  return p;
}

namespace {

// The first line terminator (CR or LF) in [from, to), or null.
const char* find_eol(const char* from, const char* to) {
  const auto* lf = static_cast<const char*>(std::memchr(from, '\n', to - from));
  const auto* cr = static_cast<const char*>(std::memchr(from, '\r', (lf != nullptr ? lf : to) - from));
  return cr != nullptr ? cr : lf;
}

}  // namespace

void SseParser::consume(const char* p, const char* end, TimestampNs ts) {
  const char* const begin = p;
  const std::uint64_t base = offset_;
  const auto offset_of = [&](const char* x) { return base + static_cast<std::uint64_t>(x - begin); };
  if (pending_cr_ && p < end) {
    pending_cr_ = false;
    if (*p == '\n') ++p;
  }
  while (p < end) {
    switch (mode_) {
      case Mode::after_gap:
      case Mode::resync_decide: p = decide(p, end, ts, offset_of(p)); break;
      case Mode::skip_line: p = skip_rest_of_line(p, end); break;
      case Mode::skip_event: p = skip_to_event_end(p, end); break;
      case Mode::normal: {
        // The hot path: one line (or the part of it in this piece).
        if (!line_open_) {
          if (*p == '\r' || *p == '\n') {  // empty line: event boundary
            p = skip_terminator(p, end);
            dispatch(ts, offset_of(p));
            break;
          }
          if (!in_event_) {
            in_event_ = true;
            event_offset_ = offset_of(p);
            first_byte_ts_ = ts;
          }
        }
        p = take_line(p, end);
        break;
      }
    }
  }
  offset_ = base + static_cast<std::uint64_t>(end - begin);
  keep_data_view();  // the piece's bytes are gone after this call
}

// Discards the rest of a line whose start was in a hole.
const char* SseParser::skip_rest_of_line(const char* p, const char* end) {
  const char* eol = find_eol(p, end);
  if (eol == nullptr) {
    discarded_ += end - p;
    return end;
  }
  discarded_ += eol - p;
  mode_ = Mode::normal;
  return skip_terminator(eol, end);
}

// Discards bytes up to the next empty line (an event boundary).
const char* SseParser::skip_to_event_end(const char* p, const char* end) {
  if (*p == '\r' || *p == '\n') {
    const bool blank = skip_at_line_start_;
    const char* next = skip_terminator(p, end);
    discarded_ += next - p;
    skip_at_line_start_ = true;
    if (blank) mode_ = Mode::normal;  // found the event boundary
    return next;
  }
  skip_at_line_start_ = false;
  const char* eol = find_eol(p, end);
  const char* stop = eol != nullptr ? eol : end;
  discarded_ += stop - p;
  return stop;
}

// The rest of a line from p: processed when its end is here, kept otherwise.
const char* SseParser::take_line(const char* p, const char* end) {
  const char* eol = find_eol(p, end);
  // Bytes past kMaxLine are dropped; a data line that long trips the data cap
  // (and sets truncated) when processed.
  const std::size_t room = kMaxLine - std::min(kMaxLine, line_.size());
  if (eol == nullptr) {  // the line continues in the next piece
    line_.append(p, std::min(static_cast<std::size_t>(end - p), room));
    line_open_ = true;
    return end;
  }
  if (line_open_) {
    line_.append(p, std::min(static_cast<std::size_t>(eol - p), room));
    process_line(line_);
    line_.clear();
    line_open_ = false;
  } else {
    process_line({p, static_cast<std::size_t>(eol - p)}, true);
  }
  return skip_terminator(eol, end);
}

}  // namespace infertap::protocol
