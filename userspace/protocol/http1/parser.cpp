// HTTP/1.x framing over captured bytes with holes. See http.h for the contract.
//
// Resynchronisation rules (after a hole over framing, a malformed chunk size,
// a bad start line, or when joining a connection mid-stream):
//  * A candidate position is the start of a piece (a feed() call) or, inside a
//    piece, the byte after a LF.
//  * At a piece start we accept a start line ("HTTP/1.x " / "METHOD "), a
//    chunk-size line ("hex[;ext]\r\n"), and, for a response whose head we never
//    saw, SSE fields ("data:", "event:", "id:", "retry:", ":").
//  * Inside a piece the evidence must be stronger: a start line, or a chunk-size
//    line followed by SSE fields (or the last chunk "0\r\n\r\n"). Arbitrary
//    body text after a newline must not look like framing.
//  * A piece-start candidate cut by the end of the piece is held (bounded by
//    kProbeCap) and decided when the next contiguous piece arrives.
#include "protocol/http1/parser.h"

#include <algorithm>
#include <cstring>

namespace infertap::protocol {


namespace {

enum class Match : std::uint8_t { no, partial, yes };

// Longest piece-start candidate we hold across pieces while deciding.
constexpr std::size_t kProbeCap = 512;
// A chunk-size line with extensions longer than this is treated as malformed.
constexpr std::size_t kMaxChunkLine = 1024;
// Hex digits accepted in a chunk size seen while resynchronising (real chunk
// sizes are small; the stricter bound cuts false positives in body text).
constexpr std::size_t kProbeHexDigits = 8;

constexpr std::string_view kMethods[] = {"GET",     "POST",  "PUT",     "DELETE", "HEAD",
                                         "OPTIONS", "PATCH", "CONNECT", "TRACE"};

bool is_hex(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
unsigned hex_value(unsigned char c) {
  if (c <= '9') return c - '0';
  return (c | 0x20) - 'a' + 10;
}
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

void assign_capped(std::string& out, std::string_view value, bool lower_case) {
  value = value.substr(0, HttpParser::kMaxFieldValue);
  out.assign(value);
  if (lower_case)
    for (char& c : out) c = lower(c);
}

// Does `s` begin with (a prefix of) an HTTP/1 start line for this mode?
Match match_start_line(std::string_view s, HttpParser::Mode mode) {
  if (mode == HttpParser::Mode::response) {
    constexpr std::string_view kProto = "HTTP/1.";
    const std::size_t n = std::min(s.size(), kProto.size());
    if (s.substr(0, n) != kProto.substr(0, n)) return Match::no;
    if (s.size() <= kProto.size()) return Match::partial;
    if (!is_digit(s[7])) return Match::no;
    if (s.size() == 8) return Match::partial;
    return s[8] == ' ' ? Match::yes : Match::no;
  }
  bool any_partial = false;
  for (std::string_view m : kMethods) {
    const std::size_t n = std::min(s.size(), m.size());
    if (s.substr(0, n) != m.substr(0, n)) continue;
    if (s.size() <= m.size()) {
      any_partial = true;
      continue;
    }
    if (s[m.size()] != ' ') continue;
    if (s.size() == m.size() + 1) {
      any_partial = true;
      continue;
    }
    const char t = s[m.size() + 1];
    if (t != ' ' && t != '\r' && t != '\n') return Match::yes;
  }
  return any_partial ? Match::partial : Match::no;
}

// Does `s` begin with an SSE field line ("data:", "event:", "id:", "retry:",
// or a ":" comment) whose visible part is text?
Match match_sse_field(std::string_view s) {
  constexpr std::string_view kFields[] = {"data:", "event:", "id:", "retry:", ":"};
  std::size_t name_len = 0;
  bool partial = false;
  for (std::string_view f : kFields) {
    const std::size_t n = std::min(s.size(), f.size());
    if (s.substr(0, n) != f.substr(0, n)) continue;
    if (s.size() < f.size()) {
      partial = true;
      continue;
    }
    name_len = f.size();
    break;
  }
  if (name_len == 0) return partial ? Match::partial : Match::no;
  // The rest of the line must be text (binary junk rarely is).
  for (std::size_t i = name_len; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') return Match::yes;
    if (c == '\r') return (i + 1 == s.size() || s[i + 1] == '\n') ? Match::yes : Match::no;
    if (c < 0x20 && c != '\t') return Match::no;
    if (c == 0x7f) return Match::no;
  }
  return s.size() >= name_len + 16 ? Match::yes : Match::partial;
}

// Strict chunk-size line for resynchronisation: hex{1,8} [BWS] [; ext] CRLF.
// On yes, *size and *line_len are set.
Match match_chunk_line(std::string_view s, std::uint64_t* size, std::size_t* line_len) {
  std::size_t i = 0;
  std::uint64_t v = 0;
  while (i < s.size() && is_hex(static_cast<unsigned char>(s[i]))) {
    if (i == kProbeHexDigits) return Match::no;
    v = v * 16 + hex_value(static_cast<unsigned char>(s[i]));
    ++i;
  }
  if (i == s.size()) return Match::partial;
  if (i == 0) return Match::no;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  if (i < s.size() && s[i] == ';') {
    for (; i < s.size() && s[i] != '\r'; ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      if ((c < 0x20 && c != '\t') || c == 0x7f) return Match::no;
      if (i > 256) return Match::no;
    }
  }
  if (i == s.size()) return Match::partial;
  if (s[i] != '\r') return Match::no;
  if (i + 1 == s.size()) return Match::partial;
  if (s[i + 1] != '\n') return Match::no;
  *size = v;
  *line_len = i + 2;
  return Match::yes;
}

}  // namespace

HttpParser::HttpParser(Mode mode, HttpMessageSink& sink) : mode_(mode), sink_(sink) {}

void HttpParser::expect_head_response() { expect_head_response_ = true; }

bool HttpParser::synced() const {
  switch (state_) {
    case State::join: return position_ == 0;
    case State::resync_start:
    case State::resync_chunk:
    case State::tunnel:
    case State::closed: return false;
    default: return true;
  }
}

void HttpParser::feed(std::span<const std::uint8_t> bytes, TimestampNs ts) {
  if (state_ == State::closed || bytes.empty()) return;
  const std::uint64_t base = position_;
  position_ += bytes.size();
  last_ts_ = ts;
  const Byte* p = bytes.data();
  const Byte* const end = p + bytes.size();
  if (probe_.empty()) {
    run(p, end, base, ts, true);
    return;
  }
  // A candidate from the start of an earlier piece is still undecided.
  const std::uint64_t held_base = base - probe_.size();
  const std::size_t take = std::min<std::size_t>(bytes.size(), kProbeCap - probe_.size());
  probe_.append(reinterpret_cast<const char*>(p), take);
  Probe probe = evaluate(probe_, false);
  if (probe.verdict == Verdict::need_more) {
    if (take == bytes.size() && probe_.size() < kProbeCap) return;
    probe.verdict = Verdict::reject;
  }
  if (probe.verdict == Verdict::reject) {
    drop(probe_.size() - take, ts);
    probe_.clear();
    if (state_ == State::join) give_up_join();
    run(p, end, base, ts, false);  // the rest of this piece is searched mid-piece
    return;
  }
  const std::string held = std::move(probe_);
  probe_.clear();
  accept(probe, ts);
  const Byte* held_begin = reinterpret_cast<const Byte*>(held.data());
  run(held_begin + probe.skip, held_begin + held.size(), held_base + probe.skip, ts, false);
  run(p + take, end, base + take, ts, false);
}

void HttpParser::gap(std::uint64_t n, TimestampNs ts) {
  if (state_ == State::closed || n == 0) return;
  position_ += n;
  last_ts_ = ts;
  if (!probe_.empty()) {
    drop(probe_.size(), ts);
    probe_.clear();
  }
  switch (state_) {
    case State::join:  // still nothing known; decide on the next piece
    case State::resync_start:
    case State::tunnel:
    case State::closed: break;
    case State::resync_chunk: drop(n, ts); break;
    case State::start: lose_sync(ParseError::gap_in_head, "hole where a message head was expected"); break;
    case State::head: lose_sync(ParseError::gap_in_head, "hole inside a message head"); break;
    case State::body_length:
      if (n < remaining_) {
        remaining_ -= n;
        sink_.on_body_gap(n, ts);
      } else {
        const std::uint64_t beyond = n - remaining_;
        sink_.on_body_gap(remaining_, ts);
        end_message(ts);
        // The hole ran past the body: it swallowed the start of the next message.
        if (beyond > 0) lose_sync(ParseError::gap_in_head, "hole past the end of a body");
      }
      break;
    case State::chunk_data:
      if (n <= remaining_) {
        remaining_ -= n;
        sink_.on_body_gap(n, ts);
        if (remaining_ == 0) {
          state_ = State::chunk_data_end;
          saw_cr_ = false;
        }
        break;
      }
      [[fallthrough]];
    case State::chunk_size:
    case State::chunk_data_end:
      lose_chunk_framing(ParseError::gap_in_framing, "hole over chunk framing");
      sink_.on_body_gap(n, ts);  // upper bound: part of it was framing
      break;
    case State::trailers:
      sink_.on_error(ParseError::gap_in_framing, "hole inside chunked trailers");
      end_message(ts);
      state_ = State::resync_start;
      break;
    case State::until_close: sink_.on_body_gap(n, ts); break;
  }
}

void HttpParser::close(TimestampNs ts) {
  switch (state_) {
    case State::until_close: end_message(position_ > 0 ? last_ts_ : ts); break;
    case State::head:
    case State::body_length:
    case State::chunk_size:
    case State::chunk_data:
    case State::chunk_data_end:
    case State::trailers:
    case State::resync_chunk:
      sink_.on_error(ParseError::truncated_message, "connection closed inside a message");
      break;
    default: break;
  }
  state_ = State::closed;
  probe_.clear();
  buf_.clear();
}

// ---------------------------------------------------------------------------

const HttpParser::Byte* HttpParser::run(const Byte* p, const Byte* end, std::uint64_t base, TimestampNs ts,
                                        bool piece_start) {
  run_begin_ = p;
  run_base_ = base;
  while (p < end) {
    switch (state_) {
      case State::join:
      case State::resync_start:
      case State::resync_chunk: p = search(p, end, ts, piece_start); break;
      case State::start:
        while (p < end && (*p == '\r' || *p == '\n')) ++p;  // RFC 9112 2.2: tolerate empty lines
        if (p == end) return end;
        state_ = State::head;
        buf_.clear();
        line_start_ = 0;
        start_line_checked_ = false;
        break;
      case State::head: p = on_head_bytes(p, end, ts); break;
      case State::body_length:
      case State::chunk_data: {
        const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, end - p));
        sink_.on_body({p, take}, run_base_ + static_cast<std::uint64_t>(p - run_begin_), ts);
        p += take;
        remaining_ -= take;
        if (remaining_ == 0) {
          if (state_ == State::body_length) {
            end_message(ts);
          } else {
            state_ = State::chunk_data_end;
            saw_cr_ = false;
          }
        }
        break;
      }
      case State::chunk_size: p = on_chunk_size_bytes(p, end, ts); break;
      case State::chunk_data_end:
        if (*p == '\r' && !saw_cr_) {
          saw_cr_ = true;
          ++p;
        } else if (*p == '\n') {
          ++p;
          state_ = State::chunk_size;
          buf_.clear();
        } else {
          lose_chunk_framing(ParseError::bad_chunk_size, "no CRLF after chunk data");
        }
        break;
      case State::trailers: p = on_trailer_bytes(p, end, ts); break;
      case State::until_close:
        sink_.on_body({p, static_cast<std::size_t>(end - p)}, run_base_ + static_cast<std::uint64_t>(p - run_begin_), ts);
        return end;
      case State::tunnel:
      case State::closed: return end;
    }
    piece_start = false;
  }
  return p;
}

void HttpParser::drop(std::uint64_t n, TimestampNs ts) {
  if (state_ != State::resync_chunk || n == 0) return;
  skipped_ += n;
  lost_ts_ = ts;
}

void HttpParser::give_up_join() {
  if (!not_http_reported_) {
    not_http_reported_ = true;
    sink_.on_error(ParseError::not_http, "stream does not start with HTTP/1 or a recognisable body");
  }
  state_ = State::resync_start;
}

const HttpParser::Byte* HttpParser::search(const Byte* p, const Byte* end, TimestampNs ts, bool piece_start) {
  if (piece_start) {
    Probe probe = evaluate({reinterpret_cast<const char*>(p), static_cast<std::size_t>(end - p)}, false);
    if (probe.verdict == Verdict::need_more) {
      if (static_cast<std::size_t>(end - p) < kProbeCap) {
        probe_.assign(reinterpret_cast<const char*>(p), end - p);
        return end;
      }
      probe.verdict = Verdict::reject;
    }
    if (probe.verdict != Verdict::reject) {
      accept(probe, ts);
      return p + probe.skip;
    }
    if (state_ == State::join) give_up_join();
  }
  // Candidates inside the piece: right after each LF.
  const Byte* q = p;
  if (q == run_begin_ || q[-1] != '\n') {
    const void* lf = std::memchr(q, '\n', end - q);
    if (lf == nullptr) {
      drop(end - p, ts);
      return end;
    }
    q = static_cast<const Byte*>(lf) + 1;
  }
  while (q < end) {
    const Probe probe = evaluate({reinterpret_cast<const char*>(q), static_cast<std::size_t>(end - q)}, true);
    if (probe.verdict != Verdict::reject && probe.verdict != Verdict::need_more) {
      drop(q - p, ts);
      accept(probe, ts);
      return q + probe.skip;
    }
    const void* lf = std::memchr(q, '\n', end - q);
    if (lf == nullptr) break;
    q = static_cast<const Byte*>(lf) + 1;
  }
  drop(end - p, ts);
  return end;
}

HttpParser::Probe HttpParser::evaluate(std::string_view s, bool mid_piece) const {
  Probe probe;
  while (probe.skip < 2 && probe.skip < s.size() && (s[probe.skip] == '\r' || s[probe.skip] == '\n')) ++probe.skip;
  s.remove_prefix(probe.skip);
  const bool inferring_body = mode_ == Mode::response && (state_ == State::join || state_ == State::resync_start);
  const bool allow_chunk = state_ == State::resync_chunk || inferring_body;
  const bool allow_sse = inferring_body && !mid_piece;

  bool need_more = false;
  const Match start = match_start_line(s, mode_);
  if (start == Match::yes) {
    probe.verdict = Verdict::start_line;
    return probe;
  }
  need_more |= start == Match::partial;

  if (allow_chunk) {
    std::uint64_t size = 0;
    std::size_t line_len = 0;
    const Match chunk = match_chunk_line(s, &size, &line_len);
    if (chunk == Match::yes) {
      const std::string_view data = s.substr(line_len);
      if (size == 0) {
        // Last chunk: inside a piece only when followed by the empty trailer line.
        if (!mid_piece || data.substr(0, 2) == "\r\n") {
          probe.verdict = Verdict::chunk_line;
          return probe;
        }
        if (data.size() < 2) need_more = true;
      } else {
        const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(size, 6));
        if (data.size() >= want) {
          probe.event_stream = match_sse_field(data.substr(0, want)) != Match::no;
          probe.json = !probe.event_stream && data.front() == '{';
          if (!mid_piece || probe.event_stream) {
            probe.verdict = Verdict::chunk_line;
            return probe;
          }
        } else {
          need_more = true;
        }
      }
    }
    need_more |= chunk == Match::partial;
  }

  if (allow_sse) {
    const Match sse = match_sse_field(s);
    if (sse == Match::yes) {
      probe.verdict = Verdict::sse_fields;
      probe.event_stream = true;
      return probe;
    }
    need_more |= sse == Match::partial;
  }
  probe.verdict = (need_more || s.empty()) ? Verdict::need_more : Verdict::reject;
  return probe;
}

void HttpParser::accept(const Probe& probe, TimestampNs ts) {
  switch (probe.verdict) {
    case Verdict::start_line:
      if (state_ == State::resync_chunk) {
        // The chunked body ended somewhere in what we dropped.
        if (skipped_ > 0) sink_.on_body_gap(skipped_, ts);
        skipped_ = 0;
        sink_.on_message_end(lost_ts_ != 0 ? lost_ts_ : ts);
      }
      state_ = State::start;
      break;
    case Verdict::chunk_line:
      if (state_ == State::resync_chunk) {
        if (skipped_ > 0) sink_.on_body_gap(skipped_, ts);
        skipped_ = 0;
      } else {
        response_ = ResponseHead{};
        response_.joined_midstream = true;
        response_.framing = BodyFraming::chunked;
        response_.event_stream = probe.event_stream;
        response_.joined_json = probe.json;
        sink_.on_response_head(response_, ts);
      }
      state_ = State::chunk_size;
      buf_.clear();
      break;
    case Verdict::sse_fields:
      response_ = ResponseHead{};
      response_.joined_midstream = true;
      response_.framing = BodyFraming::until_close;
      response_.event_stream = true;
      sink_.on_response_head(response_, ts);
      state_ = State::until_close;
      break;
    case Verdict::need_more:
    case Verdict::reject: break;
  }
}

void HttpParser::end_message(TimestampNs ts) {
  state_ = State::start;
  sink_.on_message_end(ts);
}

void HttpParser::lose_chunk_framing(ParseError e, std::string_view detail) {
  sink_.on_error(e, detail);
  state_ = State::resync_chunk;
  buf_.clear();
  skipped_ = 0;
  lost_ts_ = last_ts_;
}

void HttpParser::lose_sync(ParseError e, std::string_view detail) {
  sink_.on_error(e, detail);
  state_ = State::resync_start;
  buf_.clear();
}

// ---------------------------------------------------------------------------

const HttpParser::Byte* HttpParser::on_head_bytes(const Byte* p, const Byte* end, TimestampNs ts) {
  while (p < end) {
    const auto* lf = static_cast<const Byte*>(std::memchr(p, '\n', end - p));
    const Byte* stop = lf != nullptr ? lf + 1 : end;
    const auto len = static_cast<std::size_t>(stop - p);
    if (buf_.size() + len > kMaxHeadBytes) {
      lose_sync(ParseError::header_too_large, "message head exceeds kMaxHeadBytes");
      return stop;  // drop the segment: guarantees progress
    }
    buf_.append(reinterpret_cast<const char*>(p), len);
    p = stop;
    if (!start_line_checked_) {
      const Match m = match_start_line(buf_, mode_);
      if (m == Match::no || (m == Match::partial && lf != nullptr)) {
        lose_sync(ParseError::bad_start_line, "not an HTTP/1 start line");
        return p;
      }
      start_line_checked_ = m == Match::yes;
    }
    if (lf == nullptr) break;
    std::size_t line_len = buf_.size() - 1 - line_start_;
    if (line_len > 0 && buf_[buf_.size() - 2] == '\r') --line_len;
    if (line_len == 0 && line_start_ > 0) {
      head_end_ = run_base_ + static_cast<std::uint64_t>(p - run_begin_);
      parse_head(ts);
      return p;
    }
    line_start_ = buf_.size();
  }
  return p;
}

namespace {

// "HTTP/1.x SSS[ reason]": false when malformed.
bool parse_status_line(std::string_view line, ResponseHead* head) {
  if (line.size() < 12 || !is_digit(line[9]) || !is_digit(line[10]) || !is_digit(line[11]) ||
      (line.size() > 12 && line[12] != ' '))
    return false;
  *head = ResponseHead{};
  head->version_minor = line[7] - '0';
  head->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
  return true;
}

// "METHOD SP target SP HTTP/1.x": false when malformed.
bool parse_request_line(std::string_view line, RequestHead* head) {
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = line.rfind(' ');
  const std::string_view version = sp2 == std::string_view::npos ? std::string_view{} : line.substr(sp2 + 1);
  if (sp1 == std::string_view::npos || sp2 <= sp1 + 1 || version.size() != 8 || version.substr(0, 7) != "HTTP/1." ||
      !is_digit(version[7]))
    return false;
  *head = RequestHead{};
  head->version_minor = version[7] - '0';
  head->method.assign(line.substr(0, sp1));
  assign_capped(head->target, trim(line.substr(sp1 + 1, sp2 - sp1 - 1)), false);
  return true;
}

// Content-Length: "" when valid, else why not.
std::string_view take_content_length(std::string_view value, HeadFields& f) {
  if (value.empty() || value.size() > 18 || !std::all_of(value.begin(), value.end(), [](char c) { return is_digit(c); }))
    return "invalid Content-Length";
  std::uint64_t v = 0;
  for (char c : value) v = v * 10 + static_cast<std::uint64_t>(c - '0');
  if (f.has_length && v != f.length) return "conflicting Content-Length";
  f.has_length = true;
  f.length = v;
  return {};
}

void take_connection_tokens(std::string_view tokens, HeadFields& f) {
  while (!tokens.empty()) {
    const std::size_t comma = tokens.find(',');
    const std::string_view token = trim(tokens.substr(0, comma));
    if (iequals(token, "close")) f.conn_close = true;
    if (iequals(token, "keep-alive")) f.conn_keep_alive = true;
    tokens.remove_prefix(comma == std::string_view::npos ? tokens.size() : comma + 1);
  }
}

// `Server` or `x-<anything>-version`: the headers that name the serving software.
bool is_version_header(std::string_view name) {
  if (iequals(name, "server")) return true;
  constexpr std::string_view kSuffix = "-version";
  return name.size() > 2 + kSuffix.size() && (name[0] == 'x' || name[0] == 'X') && name[1] == '-' &&
         iequals(name.substr(name.size() - kSuffix.size()), kSuffix);
}

void add_version_field(ResponseHead& head, std::string_view name, std::string_view value) {
  std::size_t fields = head.server_version.empty() ? 0 : 1;
  for (char c : head.server_version) fields += c == ';' ? 1 : 0;
  if (fields >= ResponseHead::kMaxVersionFields || name.size() > 48) return;
  std::string field;
  for (char c : name) field += lower(c);
  field += '=';
  for (char c : value.substr(0, ResponseHead::kMaxVersionValue)) field += (c == ';' || static_cast<unsigned char>(c) < 0x20) ? '_' : c;
  if (!head.server_version.empty()) head.server_version += "; ";
  head.server_version += field;
}

bool is_event_stream(std::string_view media) {
  return media.substr(0, 17) == "text/event-stream" && (media.size() == 17 || media[17] == ';' || media[17] == ' ');
}

// Splits a head into lines without their CR.
struct LineReader {
  std::string_view rest;
  std::string_view next() {
    const std::size_t lf = rest.find('\n');
    std::string_view line = rest.substr(0, lf);
    rest.remove_prefix(lf == std::string_view::npos ? rest.size() : lf + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  }
};

}  // namespace

void HttpParser::parse_head(TimestampNs ts) {
  LineReader lines{buf_};
  const std::string_view start_line = lines.next();
  if (mode_ == Mode::response) {
    if (!parse_status_line(start_line, &response_)) return lose_sync(ParseError::bad_start_line, "malformed status line");
    if (response_.status < 100) return lose_sync(ParseError::bad_start_line, "status code out of range");
    response_.head_end_position = head_end_;
  } else if (!parse_request_line(start_line, &request_)) {
    return lose_sync(ParseError::bad_start_line, "malformed request line");
  }
  HeadFields fields;
  while (!lines.rest.empty()) {
    const std::string_view line = lines.next();
    if (line.empty()) break;
    if (!parse_header_line(line, fields)) return;
  }
  const std::optional<BodyFraming> framing = mode_ == Mode::response ? response_framing(fields) : request_framing(fields);
  if (!framing) return;
  if (mode_ == Mode::response) {
    sink_.on_response_head(response_, ts);
  } else {
    sink_.on_request_head(request_, ts);
  }
  buf_.clear();
  if (buf_.capacity() > 4096) buf_.shrink_to_fit();  // an unusually large head: give the memory back
  enter_body(*framing, fields.length, ts);
}

// One header field; false when it lost the message (the parser resyncs).
bool HttpParser::parse_header_line(std::string_view line, HeadFields& fields) {
  if (line.front() == ' ' || line.front() == '\t') return true;  // obsolete line folding: ignore
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    sink_.on_error(ParseError::bad_header, "header line without a field name");
    return true;  // lenient: one bad line does not lose the message
  }
  const std::string_view name = trim(line.substr(0, colon));
  const std::string_view value = trim(line.substr(colon + 1));
  if (iequals(name, "content-length")) {
    if (const std::string_view problem = take_content_length(value, fields); !problem.empty()) {
      lose_sync(ParseError::bad_header, problem);
      return false;
    }
  } else if (iequals(name, "transfer-encoding")) {
    fields.has_te = true;
    const std::size_t comma = value.rfind(',');
    fields.te_chunked_last = iequals(trim(comma == std::string_view::npos ? value : value.substr(comma + 1)), "chunked");
  } else if (iequals(name, "connection")) {
    take_connection_tokens(value, fields);
  } else if (iequals(name, "content-type")) {
    assign_capped(mode_ == Mode::response ? response_.content_type : request_.content_type, value, true);
  } else if (mode_ == Mode::response && iequals(name, "content-encoding")) {
    assign_capped(response_.content_encoding, value, true);
  } else if (mode_ == Mode::response && is_version_header(name)) {
    add_version_field(response_, name, value);
  } else if (mode_ == Mode::response && response_.status == 101) {
    if (iequals(name, "upgrade")) assign_capped(response_.upgrade, value, true);
    if (iequals(name, "sec-websocket-extensions")) assign_capped(response_.websocket_extensions, value, true);
    if (iequals(name, "sec-websocket-protocol")) assign_capped(response_.websocket_protocol, value, false);
  } else if (mode_ == Mode::request && iequals(name, "host")) {
    assign_capped(request_.host, value, false);
  } else if (mode_ == Mode::request && iequals(name, "user-agent")) {
    assign_capped(request_.user_agent, value, false);
  }
  return true;
}

// RFC 9112 6.3: 1xx, 204, 304 and answers to HEAD have no body.
std::optional<BodyFraming> HttpParser::response_framing(const HeadFields& f) {
  const int status = response_.status;
  const bool interim = status < 200;
  const bool head_answer = !interim && expect_head_response_;
  if (!interim) expect_head_response_ = false;
  BodyFraming framing;
  if (interim || head_answer || status == 204 || status == 304) {
    framing = BodyFraming::none;
  } else if (f.has_te) {
    framing = f.te_chunked_last ? BodyFraming::chunked : BodyFraming::until_close;
  } else if (f.has_length) {
    framing = BodyFraming::content_length;
  } else {
    framing = BodyFraming::until_close;
  }
  response_.framing = framing;
  response_.content_length = framing == BodyFraming::content_length ? f.length : 0;
  response_.keep_alive = !f.conn_close && (response_.version_minor >= 1 || f.conn_keep_alive);
  response_.event_stream = is_event_stream(response_.content_type);
  return framing;
}

std::optional<BodyFraming> HttpParser::request_framing(const HeadFields& f) {
  BodyFraming framing = BodyFraming::none;
  if (f.has_te) {
    if (!f.te_chunked_last) {
      lose_sync(ParseError::bad_header, "request transfer-coding does not end in chunked");
      return std::nullopt;
    }
    framing = BodyFraming::chunked;
  } else if (f.has_length) {
    framing = BodyFraming::content_length;
  }
  request_.framing = framing;
  request_.content_length = framing == BodyFraming::content_length ? f.length : 0;
  return framing;
}

void HttpParser::enter_body(BodyFraming framing, std::uint64_t length, TimestampNs ts) {
  switch (framing) {
    case BodyFraming::none:
      end_message(ts);
      if (mode_ == Mode::response && response_.status == 101) state_ = State::tunnel;  // upgraded: no longer HTTP/1
      break;
    case BodyFraming::content_length:
      if (length == 0) {
        end_message(ts);
      } else {
        remaining_ = length;
        state_ = State::body_length;
      }
      break;
    case BodyFraming::chunked: state_ = State::chunk_size; break;
    case BodyFraming::until_close: state_ = State::until_close; break;
  }
}

const HttpParser::Byte* HttpParser::on_chunk_size_bytes(const Byte* p, const Byte* end, TimestampNs ts) {
  const auto* lf = static_cast<const Byte*>(std::memchr(p, '\n', end - p));
  if (lf == nullptr) {
    if (buf_.size() + (end - p) > kMaxChunkLine) {
      lose_chunk_framing(ParseError::bad_chunk_size, "chunk-size line too long");
      drop(end - p, ts);
      return end;
    }
    buf_.append(reinterpret_cast<const char*>(p), end - p);
    return end;
  }
  const std::string_view here(reinterpret_cast<const char*>(p), lf - p);
  std::string_view line = here;
  if (!buf_.empty()) {
    buf_.append(here);
    line = buf_;
  }
  parse_chunk_size_line(line);
  buf_.clear();
  return lf + 1;
}

void HttpParser::parse_chunk_size_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::size_t i = 0;
  std::uint64_t size = 0;
  while (i < line.size() && is_hex(static_cast<unsigned char>(line[i]))) {
    if (i == 15) {  // > 2^60 bytes: not a real chunk
      lose_chunk_framing(ParseError::bad_chunk_size, "chunk size too large");
      return;
    }
    size = size * 16 + hex_value(static_cast<unsigned char>(line[i]));
    ++i;
  }
  if (i == 0) {
    lose_chunk_framing(ParseError::bad_chunk_size, "chunk size is not hex");
    return;
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  if (i < line.size() && line[i] != ';') {
    lose_chunk_framing(ParseError::bad_chunk_size, "junk after chunk size");
    return;
  }
  // Chunk extensions (";name=value") carry nothing we need.
  if (size == 0) {
    state_ = State::trailers;
    trailer_line_len_ = 0;
    trailer_total_ = 0;
    trailer_line_has_colon_ = false;
    trailer_last_cr_ = false;
  } else {
    state_ = State::chunk_data;
    remaining_ = size;
  }
}

const HttpParser::Byte* HttpParser::on_trailer_bytes(const Byte* p, const Byte* end, TimestampNs ts) {
  while (p < end) {
    const auto* lf = static_cast<const Byte*>(std::memchr(p, '\n', end - p));
    const Byte* stop = lf != nullptr ? lf : end;
    const auto len = static_cast<std::size_t>(stop - p);
    if (len > 0) {
      trailer_line_has_colon_ |= std::memchr(p, ':', len) != nullptr;
      trailer_last_cr_ = stop[-1] == '\r';
    }
    trailer_line_len_ += len;
    trailer_total_ += len + (lf != nullptr ? 1 : 0);
    if (trailer_total_ > kMaxHeadBytes) {
      sink_.on_error(ParseError::bad_chunk_trailer, "trailer section too large");
      end_message(ts);
      state_ = State::resync_start;
      return lf != nullptr ? lf + 1 : end;
    }
    if (lf == nullptr) return end;
    p = lf + 1;
    const std::size_t content_len = trailer_line_len_ - (trailer_last_cr_ && trailer_line_len_ > 0 ? 1 : 0);
    if (content_len == 0) {
      end_message(ts);
      return p;
    }
    if (!trailer_line_has_colon_) {
      sink_.on_error(ParseError::bad_chunk_trailer, "trailer line without a field name");
      end_message(ts);
      state_ = State::resync_start;
      return p;
    }
    trailer_line_len_ = 0;
    trailer_line_has_colon_ = false;
    trailer_last_cr_ = false;
  }
  return p;
}

}  // namespace infertap::protocol
