#include "protocol/http1/session.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
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

namespace {

// Exchange kExchange of a connection's sinks: opened now, for the session's life.
ExchangeSink& first_exchange(ExchangeSinks& sinks) {
  ExchangeSink* sink = sinks.exchange(Http1Session::kExchange);
  if (!sink) std::abort();  // a connection's sinks always take its first exchange
  return *sink;
}

}  // namespace

Http1Session::Http1Session(ExchangeSinks& sinks, const SessionSettings& settings)
    : Http1Session(first_exchange(sinks), settings.request_body_head, settings.decoder_limits, settings.formats) {
  sinks_ = &sinks;
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
  if (!d.parser || d.ended || upgrade_) return;
  touch();
  d.parser->feed(piece.head, piece.ts);
  if (const std::uint64_t hole = piece.hole(); hole > 0) d.parser->gap(hole, piece.ts);
  if (!piece.tail.empty()) d.parser->feed(piece.tail, piece.ts);
}

void Http1Session::gap(Flow flow, std::uint64_t n, TimestampNs ts) {
  Direction& d = direction(flow);
  if (!d.parser || d.ended || upgrade_) return;
  touch();
  d.parser->gap(n, ts);
}

void Http1Session::end(Flow flow, TimestampNs ts) {
  Direction& d = direction(flow);
  if (!d.parser || d.ended) return;
  touch();
  d.ended = true;
  d.parser->close(ts);
}

void Http1Session::close(TimestampNs ts) {
  touch();
  end(Flow::outbound, ts);
  end(Flow::inbound, ts);
  if (response_) end_response(ts, ResponseEnd::cut_short);
}

void Http1Session::abandon(std::uint64_t id, TimestampNs ts) {
  if (id == kExchange) abandon_response(ts);
}

void Http1Session::abandon_response(TimestampNs ts) {
  touch();
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

void Http1Session::start_response(const ResponseHead& head, TimestampNs ts) {
  if (response_) end_response(ts, ResponseEnd::superseded);
  OpenResponse& open = response_.emplace();
  open.joined_midstream = head.joined_midstream;
  open.events = std::make_unique<BodyEvents>(sink_, decoder_limits_);
  ResponseInfo info;
  info.exchange = responses_++;
  info.status = head.status;
  info.content_type = head.content_type;
  info.framing = head.framing;
  info.content_encoding = parse_content_encoding(head.content_encoding);
  info.joined_midstream = head.joined_midstream;
  info.head_ns = ts;
  info.server_version = head.server_version;
  info.http_version = head.version_minor == 0 ? HttpVersion::http1_0 : HttpVersion::http1_1;
  if (!head.joined_midstream && !requests_.empty()) info.request = &requests_.front();
  if (formats_) {
    info.declared = match_declared(*formats_, info.request ? std::string_view(info.request->target) : "",
                                   media_type(head.content_type));
  }
  BodyTraits traits;
  traits.status = head.status;
  traits.media = media_type(head.content_type);
  traits.streamed = head.framing == BodyFraming::chunked || head.framing == BodyFraming::until_close;
  traits.event_stream = head.event_stream;
  traits.joined = head.joined_midstream;
  traits.joined_json = head.joined_json;
  traits.encoding = info.content_encoding;
  traits.declared = info.declared.get();
  const BodyEventKind kind = body_event_kind(traits);
  open.events->start(std::move(info), kind, head.joined_midstream);
}

void Http1Session::end_response(TimestampNs ts, ResponseEnd how) {
  response_->events->finish(ts, how);
  OpenResponse open = std::move(*response_);
  response_.reset();
  if (!requests_.empty() && !open.joined_midstream) requests_.pop_front();
  sink_.on_response_end(ts, how);
}

// What the next protocol starts from: where its bytes begin in each direction
// (past the 101's head; past the upgrade request, the last bytes the
// requests' direction sent before the switch).
void Http1Session::switch_protocols(const ResponseHead& head, TimestampNs ts) {
  UpgradeStart start;
  start.role = role_;
  start.request = requests_.empty() ? nullptr : &requests_.front();
  start.upgrade = head.upgrade;
  start.extensions = head.websocket_extensions;
  start.protocol = head.websocket_protocol;
  start.ts = ts;
  const Flow responses = role_ == Role::server ? Flow::outbound : Flow::inbound;
  const Direction& requests = direction(responses == Flow::outbound ? Flow::inbound : Flow::outbound);
  const std::uint64_t requests_end = requests.parser ? requests.parser->position() : 0;
  (responses == Flow::outbound ? start.outbound_position : start.inbound_position) = head.head_end_position;
  (responses == Flow::outbound ? start.inbound_position : start.outbound_position) = requests_end;
  upgrade_ = std::move(start);
}

void Http1Session::ResponseSide::on_response_head(const ResponseHead& head, TimestampNs ts) {
  if (head.status == 101) s_.switch_protocols(head, ts);  // the bytes after its head are another protocol's
  if (head.status >= 100 && head.status < 200) return;  // interim responses
  s_.start_response(head, ts);
}

void Http1Session::ResponseSide::on_body(std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts) {
  if (!s_.response_) return;
  s_.response_->events->body(bytes, position, ts);
}

void Http1Session::ResponseSide::on_body_gap(std::uint64_t n, TimestampNs ts) {
  if (!s_.response_) return;
  s_.response_->events->gap(n, ts);
}

void Http1Session::ResponseSide::on_message_end(TimestampNs ts) {
  if (s_.response_) s_.end_response(ts, ResponseEnd::complete);
}

void Http1Session::ResponseSide::on_error(ParseError e, std::string_view) {
  s_.sink_.on_parse_error(e, s_.response_ && s_.response_->events->event_stream());
}

std::string_view to_string(ExchangeSink::Undecodable why) {
  switch (why) {
    case ExchangeSink::Undecodable::corrupt: return "corrupt";
    case ExchangeSink::Undecodable::too_large: return "too_large";
    case ExchangeSink::Undecodable::no_memory: return "no_memory";
    case ExchangeSink::Undecodable::too_costly: return "too_costly";
    case ExchangeSink::Undecodable::capture_hole: return "capture_hole";
    case ExchangeSink::Undecodable::unsupported: return "unsupported";
  }
  return "corrupt";
}

}  // namespace infertap::protocol
