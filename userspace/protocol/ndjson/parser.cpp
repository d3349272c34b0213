#include "protocol/ndjson/parser.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace infertap::protocol {
namespace {

bool is_blank_byte(char c) { return c == ' ' || c == '\t' || c == '\r'; }

bool has_nonblank(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return !is_blank_byte(c); });
}

std::string_view without_cr(std::string_view s) {
  if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
  return s;
}

}  // namespace

NdjsonParser::NdjsonParser(Callback on_line) : on_line_(std::move(on_line)) {}

void NdjsonParser::feed(std::span<const std::uint8_t> bytes, TimestampNs ts) {
  const char* p = reinterpret_cast<const char*>(bytes.data());
  consume(p, p + bytes.size(), ts);
}

void NdjsonParser::gap(std::uint64_t n, TimestampNs ts) {
  if (n == 0) return;
  if (!line_open_) {
    // A line may have begun inside the hole: nothing of it was captured.
    line_open_ = true;
    captured_ = false;
    line_offset_ = offset_;
    first_byte_ts_ = ts;
  }
  truncated_ = true;
  mode_ = Mode::skip_line;  // the bytes after the hole finish the cut line
  last_byte_ts_ = ts;
  offset_ += n;
}

void NdjsonParser::end(TimestampNs, bool whole) {
  if (line_open_ && captured_ && nonblank_) {
    if (whole) {
      dispatch(line_, last_byte_ts_, offset_);
    } else {
      ++incomplete_;
    }
  }
  reset_line();
  line_.clear();
  if (line_.capacity() > 4096) line_.shrink_to_fit();
  mode_ = Mode::normal;
  offset_ = 0;
}

void NdjsonParser::resync() {
  reset_line();
  line_.clear();
  mode_ = Mode::resync_decide;
}

void NdjsonParser::reset_line() {
  line_open_ = false;
  nonblank_ = false;
  truncated_ = false;
  captured_ = false;
  line_.clear();
}

void NdjsonParser::append(std::string_view bytes) {
  if (!nonblank_) nonblank_ = has_nonblank(bytes);
  const std::size_t room = kMaxLine - std::min(kMaxLine, line_.size());
  if (bytes.size() > room) truncated_ = true;
  line_.append(bytes.substr(0, room));
}

void NdjsonParser::dispatch(std::string_view data, TimestampNs ts, std::uint64_t end_offset) {
  if (captured_ && nonblank_) {
    NdjsonLine line;
    line.data = without_cr(data);
    line.first_byte_ts = first_byte_ts_;
    line.ts = ts;
    line.stream_offset = line_offset_;
    line.wire_bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(end_offset - line_offset_, UINT32_MAX));
    line.truncated = truncated_;
    ++lines_;
    on_line_(line);
  }
  reset_line();
}

void NdjsonParser::consume(const char* p, const char* end, TimestampNs ts) {
  const char* const begin = p;
  const std::uint64_t base = offset_;
  if (p < end) last_byte_ts_ = ts;
  while (p < end) {
    switch (mode_) {
      case Mode::resync_decide:
        // A line that opens an object starts here; anything else is the rest of one.
        mode_ = *p == '{' ? Mode::normal : Mode::skip_line;
        break;
      case Mode::skip_line: p = skip_line(p, end, ts, base + static_cast<std::uint64_t>(p - begin)); break;
      case Mode::normal: p = take_line(p, end, ts, base, begin); break;
    }
  }
  offset_ = base + static_cast<std::uint64_t>(end - begin);
}

// The rest of a line from p: dispatched when its LF is here, kept otherwise.
// The usual line, whole inside one piece, is handed on without a copy.
const char* NdjsonParser::take_line(const char* p, const char* end, TimestampNs ts, std::uint64_t base,
                                    const char* begin) {
  if (!line_open_) {
    line_open_ = true;
    captured_ = true;
    line_offset_ = base + static_cast<std::uint64_t>(p - begin);
    first_byte_ts_ = ts;
  }
  const auto* lf = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
  if (lf == nullptr) {
    append({p, static_cast<std::size_t>(end - p)});
    return end;
  }
  const std::uint64_t end_offset = base + static_cast<std::uint64_t>(lf + 1 - begin);
  const std::string_view rest(p, static_cast<std::size_t>(lf - p));
  if (line_.empty() && rest.size() <= kMaxLine) {
    nonblank_ = nonblank_ || has_nonblank(rest);
    dispatch(rest, ts, end_offset);
  } else {
    append(rest);
    dispatch(line_, ts, end_offset);
  }
  return lf + 1;
}

// Discards the rest of a line whose start was cut off; at its LF the line
// (its captured prefix, if any) ends.
const char* NdjsonParser::skip_line(const char* p, const char* end, TimestampNs ts, std::uint64_t offset) {
  const auto* lf = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
  if (lf == nullptr) {
    discarded_ += static_cast<std::uint64_t>(end - p);
    return end;
  }
  discarded_ += static_cast<std::uint64_t>(lf - p);
  mode_ = Mode::normal;
  if (line_open_) {
    dispatch(line_, ts, offset + static_cast<std::uint64_t>(lf + 1 - p));
  }
  return lf + 1;
}

}  // namespace infertap::protocol
