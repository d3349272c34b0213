#include "protocol/body/events.h"

#include <algorithm>

namespace infertap::protocol {
namespace {

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

// Media types of newline-delimited JSON (JSON Lines, NDJSON and their aliases).
bool is_json_lines_media(std::string_view media) {
  return media == "application/x-ndjson" || media == "application/ndjson" || media == "application/jsonl" ||
         media == "application/jsonlines" || media == "application/x-jsonlines" || media == "application/json-lines";
}

// application/grpc, application/grpc+proto, application/grpc+json, ...
bool is_grpc_media(std::string_view media) {
  constexpr std::string_view kGrpc = "application/grpc";
  return media.starts_with(kGrpc) && (media.size() == kGrpc.size() || media[kGrpc.size()] == '+');
}

// Which framer a response's events need: a declared format that covers it
// says (for a streamed body, or one whose media type it names), else the
// media type; a streamed JSON body (or one of no type: vLLM's /generate) is
// sniffed; a body joined mid-way is SSE or, opening a JSON object, JSON lines.
BodyEventKind body_event_kind(const BodyTraits& t) {
  if (t.declared && (t.streamed || t.event_stream || !t.declared->content_type.empty())) {
    const EventFraming f = t.declared->framing.value_or(t.event_stream ? EventFraming::sse : EventFraming::ndjson);
    return f == EventFraming::sse ? BodyEventKind::sse : BodyEventKind::ndjson;
  }
  if (t.event_stream) return BodyEventKind::sse;
  if (is_json_lines_media(t.media)) return BodyEventKind::ndjson;
  if (is_grpc_media(t.media)) return BodyEventKind::grpc;
  if (t.joined) return t.joined_json ? BodyEventKind::ndjson : BodyEventKind::none;
  const bool ok = t.status >= 200 && t.status < 300;
  if (t.streamed && ok && (t.media == "application/json" || t.media.empty()) &&
      t.encoding == ContentEncoding::identity)
    return BodyEventKind::sniff;
  return BodyEventKind::none;
}

BodyEvents::BodyEvents(ExchangeSink& sink, const DecoderLimits& limits) : sink_(sink), limits_(limits) {}

void BodyEvents::start(ResponseInfo info, BodyEventKind kind, bool joined) {
  switch (kind) {
    case BodyEventKind::none: break;
    case BodyEventKind::sse:
    case BodyEventKind::ndjson:
    case BodyEventKind::grpc: begin(info, kind, joined); break;
    case BodyEventKind::sniff:
      sniff_ = std::make_unique<Sniff>();
      if (info.request) info.request = &sniff_->request.emplace(*info.request);
      sniff_->info = std::move(info);
      return;  // announced once the first bytes decide
  }
  sink_.on_response(info);
  if (event_stream_ && encoding_ != ContentEncoding::identity && !decoder_)
    stop_decoding(ExchangeSink::Undecodable::unsupported);
}

void BodyEvents::begin(ResponseInfo& info, BodyEventKind kind, bool joined) {
  info.event_stream = true;
  event_stream_ = true;
  if (kind == BodyEventKind::sse) {
    info.event_framing = EventFraming::sse;
    sse_.emplace([this](const SseEvent& e) {
      on_framed_event(e.type, e.data, e.ts, e.first_byte_ts, e.stream_offset, e.wire_bytes, e.truncated);
    });
    if (joined) sse_->resync();
  } else if (kind == BodyEventKind::grpc) {
    info.event_framing = EventFraming::grpc;
    grpc_.emplace([this](const GrpcMessage& m) {
      on_framed_event({}, m.data, m.ts, m.first_byte_ts, m.stream_offset, m.wire_bytes, m.truncated);
    });
    if (joined) grpc_->resync();
  } else {
    info.event_framing = EventFraming::ndjson;
    ndjson_.emplace([this](const NdjsonLine& l) {
      on_framed_event({}, l.data, l.ts, l.first_byte_ts, l.stream_offset, l.wire_bytes, l.truncated);
    });
    if (joined) ndjson_->resync();
  }
  // gRPC messages carry their own compression (grpc-encoding): the body is not decoded.
  encoding_ = kind == BodyEventKind::grpc ? ContentEncoding::identity : info.content_encoding;
  if (encoding_ != ContentEncoding::identity) decoder_ = BodyDecoder::create(encoding_, limits_);
}

// Event parsing stops for the rest of a body that cannot be decoded.
void BodyEvents::stop_decoding(ExchangeSink::Undecodable why) {
  decoder_.reset();
  sse_.reset();
  ndjson_.reset();
  grpc_.reset();
  sink_.on_body_undecodable(why);
}

void BodyEvents::DecodedToEvents::decoded(std::span<const std::uint8_t> bytes) { events->feed_framer(bytes, ts); }

void BodyEvents::feed_framer(std::span<const std::uint8_t> bytes, TimestampNs ts) {
  if (sse_) sse_->feed(bytes, ts);
  if (ndjson_) ndjson_->feed(bytes, ts);
  if (grpc_) grpc_->feed(bytes, ts);
}

void BodyEvents::feed_events(std::span<const std::uint8_t> bytes, TimestampNs ts) {
  if (encoding_ == ContentEncoding::identity) return feed_framer(bytes, ts);
  if (!decoder_) return;
  DecodedToEvents out;
  out.events = this;
  out.ts = ts;
  switch (decoder_->feed(bytes, out)) {
    case BodyDecoder::Status::ok: break;
    case BodyDecoder::Status::corrupt: stop_decoding(ExchangeSink::Undecodable::corrupt); break;
    case BodyDecoder::Status::too_large: stop_decoding(ExchangeSink::Undecodable::too_large); break;
    case BodyDecoder::Status::no_memory: stop_decoding(ExchangeSink::Undecodable::no_memory); break;
    case BodyDecoder::Status::too_costly: stop_decoding(ExchangeSink::Undecodable::too_costly); break;
  }
}

void BodyEvents::finish(TimestampNs ts, ResponseEnd how) {
  if (sniff_) decide_sniff(false);  // it ended before its first bytes made it JSON lines
  // A compressed stream that did not end where its body did was cut short or
  // corrupt: what it decoded is kept, and the record says so.
  if (decoder_ && how == ResponseEnd::complete && decoder_->finish() != BodyDecoder::Status::ok)
    stop_decoding(ExchangeSink::Undecodable::corrupt);
  if (sse_) sse_->end(ts);
  if (ndjson_) ndjson_->end(ts, how == ResponseEnd::complete);  // may complete a last line
}

void BodyEvents::on_framed_event(std::string_view type, std::string_view data, TimestampNs ts,
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
  if (encoding_ != ContentEncoding::identity) {
    // Decoded offsets do not map onto the wire: the event ended no later
    // than the compressed bytes being decoded.
    if (span_) event.end_position = span_->position + span_->length;
    event.end_position_exact = false;
  } else {
    // The bytes being fed, or (a last line the body's end completed) the last ones fed.
    const std::uint64_t end = offset + wire_bytes;
    for (const std::optional<BodySpan>& span : {span_, last_span_}) {
      if (span && end > span->body_offset && end <= span->body_offset + span->length) {
        event.end_position = span->position + (end - span->body_offset);
        break;
      }
    }
  }
  sink_.on_event(event);
}

void BodyEvents::body(std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts) {
  if (sniff_) return sniff_body(bytes, position, ts);
  if (event_stream_) body_to_events(bytes, position, ts);
}

void BodyEvents::gap(std::uint64_t n, TimestampNs ts) {
  if (sniff_) return sniff_gap(n, ts);
  if (event_stream_) gap_to_events(n, ts);
}

void BodyEvents::body_to_events(std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts) {
  span_ = BodySpan{body_offset_, bytes.size(), position};
  last_span_ = span_;
  body_offset_ += bytes.size();
  sink_.on_body_bytes(bytes.size());
  if (framing()) feed_events(bytes, ts);
  span_.reset();
}

void BodyEvents::gap_to_events(std::uint64_t n, TimestampNs ts) {
  body_offset_ += n;
  last_span_.reset();
  sink_.on_body_gap(n);
  if (!framing()) return;
  // Compressed bytes cannot be skipped: what follows a hole cannot be decoded.
  if (encoding_ != ContentEncoding::identity) return stop_decoding(ExchangeSink::Undecodable::capture_hole);
  if (sse_) sse_->gap(n, ts);
  if (ndjson_) ndjson_->gap(n, ts);
  if (grpc_) grpc_->gap(n, ts);
}

void BodyEvents::sniff_body(std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts) {
  Sniff& sniff = *sniff_;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  sniff.held.push_back({std::string(text), position, ts, 0});
  sniff.text.append(text.substr(0, kMaxSniff - std::min(kMaxSniff, sniff.text.size())));
  bool first_line_whole = false;
  switch (sniff_json_lines(sniff.text, &first_line_whole)) {
    case Sniffed::json_lines: return decide_sniff(true);
    case Sniffed::not_lines: return decide_sniff(false);
    case Sniffed::undecided:
      if (sniff.text.size() >= kMaxSniff) decide_sniff(false);
      return;
  }
}

// A hole proves the body goes on: a whole first line is enough then.
void BodyEvents::sniff_gap(std::uint64_t n, TimestampNs ts) {
  sniff_->held.push_back({{}, 0, ts, n});
  bool first_line_whole = false;
  const Sniffed sniffed = sniff_json_lines(sniff_->text, &first_line_whole);
  decide_sniff(sniffed == Sniffed::json_lines || (sniffed == Sniffed::undecided && first_line_whole));
}

// Announces the response: a stream of JSON lines fed with what was held (its
// events keep their own times and positions; the call duration of the piece
// that decided is the only one they borrow), or no stream at all.
void BodyEvents::decide_sniff(bool json_lines) {
  const std::unique_ptr<Sniff> sniff = std::move(sniff_);
  ResponseInfo info = std::move(sniff->info);
  if (info.request) info.request = &*sniff->request;
  if (!json_lines) {
    sink_.on_response(info);
    return;
  }
  begin(info, BodyEventKind::ndjson, false);
  sink_.on_response(info);
  for (const Sniff::Held& h : sniff->held) {
    if (h.gap > 0) {
      gap_to_events(h.gap, h.ts);
    } else {
      body_to_events({reinterpret_cast<const std::uint8_t*>(h.bytes.data()), h.bytes.size()}, h.position, h.ts);
    }
  }
}

}  // namespace infertap::protocol
