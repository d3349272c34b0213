#include "protocol/http1/session.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <string_view>

namespace infertap::protocol {
namespace {

// Requests kept while their responses have not started: bounds memory when a
// peer pipelines without reading.
constexpr std::size_t kMaxPendingRequests = 64;

bool starts_with(std::span<const std::uint8_t> bytes, std::string_view prefix) {
  return bytes.size() >= prefix.size() && std::memcmp(bytes.data(), prefix.data(), prefix.size()) == 0;
}

bool looks_like_request_line(std::span<const std::uint8_t> b) {
  static constexpr std::array<std::string_view, 7> kMethods = {"GET ",    "POST ", "PUT ",    "PATCH ",
                                                               "DELETE ", "HEAD ", "OPTIONS "};
  return std::any_of(kMethods.begin(), kMethods.end(), [&](std::string_view m) { return starts_with(b, m); });
}

bool looks_like_status_line(std::span<const std::uint8_t> b) { return starts_with(b, "HTTP/1."); }

// A response body joined mid-way: SSE field lines or a chunk-size line.
bool looks_like_event_stream(std::span<const std::uint8_t> b) {
  for (std::string_view field : {"data:", "event:", "id:", "retry:", ":"}) {
    if (starts_with(b, field)) return true;
  }
  std::size_t hex = 0;
  while (hex < b.size() && hex < 9 && std::isxdigit(b[hex])) ++hex;
  return hex >= 1 && hex <= 8 && hex + 1 < b.size() && b[hex] == '\r' && b[hex + 1] == '\n';
}

}  // namespace

std::string_view to_string(Role r) {
  switch (r) {
    case Role::unknown: return "unknown";
    case Role::server: return "server";
    case Role::client: return "client";
  }
  return "unknown";
}

Role role_from_first_bytes(Flow flow, std::span<const std::uint8_t> head) {
  bool requests_here;
  if (looks_like_request_line(head)) {
    requests_here = true;
  } else if (looks_like_status_line(head) || looks_like_event_stream(head)) {
    requests_here = false;
  } else {
    return Role::unknown;
  }
  // Requests flow client -> server.
  return requests_here == (flow == Flow::outbound) ? Role::client : Role::server;
}

Http1Session::Http1Session(ExchangeSink& sink, std::size_t request_body_head, const DecoderLimits& decoder_limits,
                           const DeclaredFormats* formats)
    : sink_(sink), request_body_head_(request_body_head), decoder_limits_(decoder_limits), formats_(formats) {}

bool Http1Session::decide(Flow flow, std::span<const std::uint8_t> head) {
  role_ = role_from_first_bytes(flow, head);
  if (role_ == Role::unknown) return false;
  using Mode = HttpParser::Mode;
  Direction& requests = role_ == Role::client ? outbound_ : inbound_;
  Direction& responses = role_ == Role::client ? inbound_ : outbound_;
  requests.parser.emplace(Mode::request, request_side_);
  responses.parser.emplace(Mode::response, response_side_);
  return true;
}

bool Http1Session::accepts(Flow flow) const {
  const Direction& d = direction(flow);
  return d.parser && !d.ended;
}

bool Http1Session::carries_responses(Flow flow) const {
  const Direction& d = direction(flow);
  return d.parser && d.parser->mode() == HttpParser::Mode::response;
}

void Http1Session::feed(Flow flow, const Piece& piece) {
  Direction& d = direction(flow);
  if (!d.parser || d.ended) return;
  d.parser->feed(piece.head, piece.ts);
  if (const std::uint64_t hole = piece.hole(); hole > 0) d.parser->gap(hole, piece.ts);
  if (!piece.tail.empty()) d.parser->feed(piece.tail, piece.ts);
}

void Http1Session::gap(Flow flow, std::uint64_t n, TimestampNs ts) {
  Direction& d = direction(flow);
  if (d.parser && !d.ended) d.parser->gap(n, ts);
}

void Http1Session::end(Flow flow, TimestampNs ts) {
  Direction& d = direction(flow);
  if (!d.parser || d.ended) return;
  d.ended = true;
  d.parser->close(ts);
}

void Http1Session::close(TimestampNs ts) {
  end(Flow::outbound, ts);
  end(Flow::inbound, ts);
  if (response_) end_response(ts, ResponseEnd::cut_short);
}

void Http1Session::abandon_response(TimestampNs ts) {
  if (response_) end_response(ts, ResponseEnd::cut_short);
}

// ---- requests ---------------------------------------------------------------

void Http1Session::RequestSide::on_request_head(const RequestHead& head, TimestampNs ts) {
  RequestInfo req;
  req.method = head.method;
  req.target = head.target;
  req.start_ns = ts;
  s_.requests_.push_back(std::move(req));
  if (s_.requests_.size() > kMaxPendingRequests) s_.requests_.pop_front();
}

void Http1Session::RequestSide::on_body(std::span<const std::uint8_t> bytes, std::uint64_t, TimestampNs) {
  if (s_.requests_.empty()) return;
  s_.requests_.back().body_bytes += bytes.size();
  std::string& body = s_.requests_.back().body_head;
  const std::size_t room = s_.request_body_head_ - std::min(body.size(), s_.request_body_head_);
  body.append(reinterpret_cast<const char*>(bytes.data()), std::min(room, bytes.size()));
}

void Http1Session::RequestSide::on_body_gap(std::uint64_t n, TimestampNs) {
  if (!s_.requests_.empty()) s_.requests_.back().body_bytes += n;
}

void Http1Session::RequestSide::on_message_end(TimestampNs ts) {
  if (s_.requests_.empty()) return;
  RequestInfo& req = s_.requests_.back();
  req.end_ns = ts;
  req.complete = true;
  s_.sink_.on_request_end(req);
}

void Http1Session::RequestSide::on_error(ParseError e, std::string_view) { s_.sink_.on_parse_error(e, false); }

// ---- responses --------------------------------------------------------------

namespace {

// Media types of newline-delimited JSON (JSON Lines, NDJSON and their aliases).
bool is_json_lines_media(std::string_view media) {
  return media == "application/x-ndjson" || media == "application/ndjson" || media == "application/jsonl" ||
         media == "application/jsonlines" || media == "application/x-jsonlines" || media == "application/json-lines";
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Are the first bytes of a JSON body JSON lines? Yes once a whole one-line
// object ends at its LF and another line begins with '{'; no as soon as they
// cannot be (not an object first, a first line that does not close it, another
// line that is not an object); undecided while they may still be.
enum class Sniffed : std::uint8_t { undecided, json_lines, not_lines };
Sniffed sniff_json_lines(std::string_view text, bool* first_line_whole) {
  std::size_t i = 0;
  while (i < text.size() && is_blank(text[i])) ++i;
  if (i == text.size()) return Sniffed::undecided;
  if (text[i] != '{') return Sniffed::not_lines;
  const std::size_t lf = text.find('\n', i);
  if (lf == std::string_view::npos) return Sniffed::undecided;
  std::size_t last = lf;
  while (last > i && is_blank(text[last - 1])) --last;
  if (text[last - 1] != '}') return Sniffed::not_lines;  // "{" alone: a pretty-printed document
  *first_line_whole = true;
  std::size_t next = lf + 1;
  while (next < text.size() && is_blank(text[next])) ++next;
  if (next == text.size()) return Sniffed::undecided;
  return text[next] == '{' ? Sniffed::json_lines : Sniffed::not_lines;
}

// Bytes of a body held while its kind is undecided: past this, it is no stream.
constexpr std::size_t kMaxSniff = 64 * 1024;

}  // namespace

// Which framer a response's events need: a declared format that covers it
// says (for a streamed body, or one whose media type it names), else the
// media type; a streamed JSON body (or one of no type: vLLM's /generate) is
// sniffed; a body joined mid-way is SSE or, opening a JSON object, JSON lines.
Http1Session::Events Http1Session::events_of(const ResponseHead& head, const ResponseInfo& info) const {
  const bool streamed = head.framing == BodyFraming::chunked || head.framing == BodyFraming::until_close;
  const std::string_view media = media_type(head.content_type);
  if (info.declared && (streamed || head.event_stream || !info.declared->content_type.empty())) {
    const EventFraming f = info.declared->framing.value_or(head.event_stream ? EventFraming::sse : EventFraming::ndjson);
    return f == EventFraming::sse ? Events::sse : Events::ndjson;
  }
  if (head.event_stream) return Events::sse;
  if (is_json_lines_media(media)) return Events::ndjson;
  if (head.joined_midstream) return head.joined_json ? Events::ndjson : Events::none;
  const bool ok = head.status >= 200 && head.status < 300;
  if (streamed && ok && (media == "application/json" || media.empty()) &&
      info.content_encoding == ContentEncoding::identity)
    return Events::sniff;
  return Events::none;
}

void Http1Session::start_response(const ResponseHead& head, TimestampNs ts) {
  if (response_) end_response(ts, ResponseEnd::superseded);
  OpenResponse& open = response_.emplace();
  open.joined_midstream = head.joined_midstream;
  ResponseInfo info;
  info.exchange = responses_++;
  info.status = head.status;
  info.content_type = head.content_type;
  info.framing = head.framing;
  info.content_encoding = parse_content_encoding(head.content_encoding);
  info.joined_midstream = head.joined_midstream;
  info.head_ns = ts;
  info.server_version = head.server_version;
  if (!head.joined_midstream && !requests_.empty()) info.request = &requests_.front();
  if (formats_) {
    info.declared = match_declared(*formats_, info.request ? std::string_view(info.request->target) : "",
                                   media_type(head.content_type));
  }
  switch (events_of(head, info)) {
    case Events::none: break;
    case Events::sse: begin_events(open, info, EventFraming::sse, head.joined_midstream); break;
    case Events::ndjson: begin_events(open, info, EventFraming::ndjson, head.joined_midstream); break;
    case Events::sniff:
      open.sniff = std::make_unique<Sniff>();
      if (info.request) info.request = &open.sniff->request.emplace(*info.request);
      open.sniff->info = std::move(info);
      return;  // announced once the first bytes decide
  }
  sink_.on_response(info);
  if (open.event_stream && open.encoding != ContentEncoding::identity && !open.decoder)
    stop_decoding(open, ExchangeSink::Undecodable::unsupported);
}

void Http1Session::begin_events(OpenResponse& open, ResponseInfo& info, EventFraming framing, bool joined) {
  info.event_stream = true;
  info.event_framing = framing;
  open.event_stream = true;
  if (framing == EventFraming::sse) {
    open.sse.emplace([this](const SseEvent& e) {
      on_framed_event(e.type, e.data, e.ts, e.first_byte_ts, e.stream_offset, e.wire_bytes, e.truncated);
    });
    if (joined) open.sse->resync();
  } else {
    open.ndjson.emplace([this](const NdjsonLine& l) {
      on_framed_event({}, l.data, l.ts, l.first_byte_ts, l.stream_offset, l.wire_bytes, l.truncated);
    });
    if (joined) open.ndjson->resync();
  }
  open.encoding = info.content_encoding;
  if (open.encoding != ContentEncoding::identity) open.decoder = BodyDecoder::create(open.encoding, decoder_limits_);
}

// Event parsing stops for the rest of a body that cannot be decoded.
void Http1Session::stop_decoding(OpenResponse& open, ExchangeSink::Undecodable why) {
  open.decoder.reset();
  open.sse.reset();
  open.ndjson.reset();
  sink_.on_body_undecodable(why);
}

void Http1Session::DecodedToEvents::decoded(std::span<const std::uint8_t> bytes) {
  if (open->sse) open->sse->feed(bytes, ts);
  if (open->ndjson) open->ndjson->feed(bytes, ts);
}

void Http1Session::feed_events(OpenResponse& open, std::span<const std::uint8_t> bytes, TimestampNs ts) {
  if (open.encoding == ContentEncoding::identity) {
    if (open.sse) open.sse->feed(bytes, ts);
    if (open.ndjson) open.ndjson->feed(bytes, ts);
    return;
  }
  if (!open.decoder) return;
  DecodedToEvents out;
  out.open = &open;
  out.ts = ts;
  switch (open.decoder->feed(bytes, out)) {
    case BodyDecoder::Status::ok: break;
    case BodyDecoder::Status::corrupt: stop_decoding(open, ExchangeSink::Undecodable::corrupt); break;
    case BodyDecoder::Status::too_large: stop_decoding(open, ExchangeSink::Undecodable::too_large); break;
    case BodyDecoder::Status::no_memory: stop_decoding(open, ExchangeSink::Undecodable::no_memory); break;
  }
}

void Http1Session::end_response(TimestampNs ts, ResponseEnd how) {
  OpenResponse& current = *response_;
  if (current.sniff) decide_sniff(current, false);  // it ended before its first bytes made it JSON lines
  // A compressed stream that did not end where its body did was cut short or
  // corrupt: what it decoded is kept, and the record says so.
  if (current.decoder && how == ResponseEnd::complete && current.decoder->finish() != BodyDecoder::Status::ok)
    stop_decoding(current, ExchangeSink::Undecodable::corrupt);
  if (current.sse) current.sse->end(ts);
  if (current.ndjson) current.ndjson->end(ts, how == ResponseEnd::complete);  // may complete a last line
  OpenResponse open = std::move(current);
  response_.reset();
  if (!requests_.empty() && !open.joined_midstream) requests_.pop_front();
  sink_.on_response_end(ts, how);
}

void Http1Session::on_framed_event(std::string_view type, std::string_view data, TimestampNs ts,
                                   TimestampNs first_byte_ts, std::uint64_t offset, std::uint32_t wire_bytes,
                                   bool truncated) {
  StreamEvent event;
  event.type = type;
  event.data = data;
  event.ts = ts;
  event.first_byte_ts = first_byte_ts;
  event.body_offset = offset;
  event.wire_bytes = wire_bytes;
  event.truncated = truncated;
  const OpenResponse& open = *response_;
  if (open.encoding != ContentEncoding::identity) {
    // Decoded offsets do not map onto the wire: the event ended no later
    // than the compressed bytes being decoded.
    if (open.span) event.end_position = open.span->position + open.span->length;
    event.end_position_exact = false;
  } else {
    // The bytes being fed, or (a last line the body's end completed) the last ones fed.
    const std::uint64_t end = offset + wire_bytes;
    for (const std::optional<BodySpan>& span : {open.span, open.last_span}) {
      if (span && end > span->body_offset && end <= span->body_offset + span->length) {
        event.end_position = span->position + (end - span->body_offset);
        break;
      }
    }
  }
  sink_.on_event(event);
}

void Http1Session::body_to_events(OpenResponse& open, std::span<const std::uint8_t> bytes, std::uint64_t position,
                                  TimestampNs ts) {
  open.span = BodySpan{open.body_offset, bytes.size(), position};
  open.last_span = open.span;
  open.body_offset += bytes.size();
  sink_.on_body_bytes(bytes.size());
  if (open.sse || open.ndjson) feed_events(open, bytes, ts);
  if (response_) response_->span.reset();
}

void Http1Session::gap_to_events(OpenResponse& open, std::uint64_t n, TimestampNs ts) {
  open.body_offset += n;
  open.last_span.reset();
  sink_.on_body_gap(n);
  if (!open.sse && !open.ndjson) return;
  // Compressed bytes cannot be skipped: what follows a hole cannot be decoded.
  if (open.encoding != ContentEncoding::identity) return stop_decoding(open, ExchangeSink::Undecodable::capture_hole);
  if (open.sse) open.sse->gap(n, ts);
  if (open.ndjson) open.ndjson->gap(n, ts);
}

void Http1Session::sniff_body(OpenResponse& open, std::span<const std::uint8_t> bytes, std::uint64_t position,
                              TimestampNs ts) {
  Sniff& sniff = *open.sniff;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  sniff.held.push_back({std::string(text), position, ts, 0});
  sniff.text.append(text.substr(0, kMaxSniff - std::min(kMaxSniff, sniff.text.size())));
  bool first_line_whole = false;
  switch (sniff_json_lines(sniff.text, &first_line_whole)) {
    case Sniffed::json_lines: return decide_sniff(open, true);
    case Sniffed::not_lines: return decide_sniff(open, false);
    case Sniffed::undecided:
      if (sniff.text.size() >= kMaxSniff) decide_sniff(open, false);
      return;
  }
}

// A hole proves the body goes on: a whole first line is enough then.
void Http1Session::sniff_gap(OpenResponse& open, std::uint64_t n, TimestampNs ts) {
  open.sniff->held.push_back({{}, 0, ts, n});
  bool first_line_whole = false;
  const Sniffed sniffed = sniff_json_lines(open.sniff->text, &first_line_whole);
  decide_sniff(open, sniffed == Sniffed::json_lines || (sniffed == Sniffed::undecided && first_line_whole));
}

// Announces the response: a stream of JSON lines fed with what was held (its
// events keep their own times and positions; the call duration of the piece
// that decided is the only one they borrow), or no stream at all.
void Http1Session::decide_sniff(OpenResponse& open, bool json_lines) {
  const std::unique_ptr<Sniff> sniff = std::move(open.sniff);
  ResponseInfo info = std::move(sniff->info);
  if (info.request) info.request = &*sniff->request;
  if (!json_lines) {
    sink_.on_response(info);
    return;
  }
  begin_events(open, info, EventFraming::ndjson, false);
  sink_.on_response(info);
  for (const Sniff::Held& h : sniff->held) {
    if (h.gap > 0) {
      gap_to_events(open, h.gap, h.ts);
    } else {
      body_to_events(open, {reinterpret_cast<const std::uint8_t*>(h.bytes.data()), h.bytes.size()}, h.position, h.ts);
    }
  }
}

void Http1Session::ResponseSide::on_response_head(const ResponseHead& head, TimestampNs ts) {
  if (head.status >= 100 && head.status < 200) return;  // interim responses
  s_.start_response(head, ts);
}

void Http1Session::ResponseSide::on_body(std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts) {
  if (!s_.response_) return;
  OpenResponse& open = *s_.response_;
  if (open.sniff) return s_.sniff_body(open, bytes, position, ts);
  if (open.event_stream) s_.body_to_events(open, bytes, position, ts);
}

void Http1Session::ResponseSide::on_body_gap(std::uint64_t n, TimestampNs ts) {
  if (!s_.response_) return;
  OpenResponse& open = *s_.response_;
  if (open.sniff) return s_.sniff_gap(open, n, ts);
  if (open.event_stream) s_.gap_to_events(open, n, ts);
}

void Http1Session::ResponseSide::on_message_end(TimestampNs ts) {
  if (s_.response_) s_.end_response(ts, ResponseEnd::complete);
}

void Http1Session::ResponseSide::on_error(ParseError e, std::string_view) {
  s_.sink_.on_parse_error(e, s_.response_ && s_.response_->event_stream);
}

std::string_view to_string(ExchangeSink::Undecodable why) {
  switch (why) {
    case ExchangeSink::Undecodable::corrupt: return "corrupt";
    case ExchangeSink::Undecodable::too_large: return "too_large";
    case ExchangeSink::Undecodable::no_memory: return "no_memory";
    case ExchangeSink::Undecodable::capture_hole: return "capture_hole";
    case ExchangeSink::Undecodable::unsupported: return "unsupported";
  }
  return "corrupt";
}

}  // namespace infertap::protocol
