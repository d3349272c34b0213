#include "protocol/websocket/session.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "protocol/payload/declared.h"

namespace infertap::protocol::websocket {
namespace {

ExchangeSink::Undecodable undecodable_reason(Inflater::Status s) {
  switch (s) {
    case Inflater::Status::corrupt: return ExchangeSink::Undecodable::corrupt;
    case Inflater::Status::too_large: return ExchangeSink::Undecodable::too_large;
    case Inflater::Status::too_costly: return ExchangeSink::Undecodable::too_costly;
    case Inflater::Status::no_memory: return ExchangeSink::Undecodable::no_memory;
    case Inflater::Status::ok:
    case Inflater::Status::capture_hole:
    case Inflater::Status::context_lost: break;
  }
  return ExchangeSink::Undecodable::capture_hole;
}

}  // namespace

// One direction: its frames, its inflater, and whether it still takes bytes.
// Joined after the upgrade, whether permessage-deflate was negotiated is
// unknown: RSV1 frames are read as such, their messages undecodable.
struct Session::Direction final : FrameSink {
  Direction(Session& s, bool server_sends, std::uint64_t start)
      : session(s),
        from_server(server_sends),
        reader(server_sends ? Sender::server : Sender::client, s.deflate_.has_value() || s.joined_, start, *this,
               s.joined_) {
    if (!s.deflate_) return;
    const DeflateParams& p = *s.deflate_;
    const int bits = server_sends ? p.server_max_window_bits : p.client_max_window_bits;
    const bool reset = server_sends ? p.server_no_context_takeover : p.client_no_context_takeover;
    inflater = std::make_unique<Inflater>(bits, !reset, s.settings_.decoder_limits, kMaxMessage);
  }

  bool takes_bytes() const { return !closed && !ended; }

  // Compressed payload goes to the inflater as it arrives: its window must
  // see every byte in order, however long the message.
  void on_message_bytes(const Message& m, std::span<const std::uint8_t> bytes, std::uint64_t missing) override {
    if (!m.compressed || !inflater) return;
    if (inflating != m.first_position) {
      inflating = m.first_position;
      inflater->begin();
    }
    inflater->feed(bytes);
    inflater->hole(missing);
  }

  void on_message(const Message& m) override {
    Text text{m.payload, m.payload_bytes, m.truncated, true};
    if (m.compressed && !inflater) {
      session.on_compressed_unread(*this);
      text.readable = false;
    } else if (m.compressed) {
      if (inflating != m.first_position) inflater->begin();  // no payload bytes came
      inflating.reset();
      const Inflater::Status s = inflater->end();
      if (s != Inflater::Status::ok) session.on_undecodable(*this, s);
      text = {inflater->text(), inflater->inflated(), inflater->text_cut(), s == Inflater::Status::ok};
    }
    session.on_message(*this, m, text);
  }

  void on_lost(std::uint64_t n) override { session.on_lost(*this, n); }
  void on_control(const ControlFrame& f) override { session.on_control(*this, f); }

  void on_problem(SessionProblem p) override {
    session.sinks_.on_problem(Protocol::websocket, p);
    // Bytes of this sender's messages went by: a window carried over is
    // lost (told when a compressed message cannot be inflated).
    if (p == SessionProblem::desynchronised && inflater) {
      inflating.reset();
      inflater->bytes_lost();
    }
  }

  Session& session;
  const bool from_server;
  FrameReader reader;
  std::unique_ptr<Inflater> inflater;  // permessage-deflate was negotiated
  std::optional<std::uint64_t> inflating;  // the first position of the message the inflater is in
  bool context_loss_told = false;
  bool closed = false;  // it sent a close frame
  bool ended = false;
};

struct Session::Response {
  std::uint64_t id = 0;
  std::string response_id;
  RequestInfo request;  // ResponseInfo::request points here while it is open
  std::uint64_t body_offset = 0;  // wire bytes of its messages so far
  MessageStats stats;
  bool undecodable_told = false;
  bool request_seen = false;  // false: joined, what asked for it went by before the agent started
};

Session::Session(const UpgradeStart& start, ExchangeSinks& sinks, const SessionSettings& settings)
    : sinks_(sinks), settings_(settings), role_(start.role), deflate_(parse_deflate(start.extensions)) {
  if (start.request) {
    method_ = start.request->method;
    target_ = start.request->target;
  }
  make_directions(start.outbound_position, start.inbound_position);
}

// Each direction's frames begin at its first piece the reader can prove.
Session::Session(Role role, ExchangeSinks& sinks, const SessionSettings& settings)
    : sinks_(sinks), settings_(settings), role_(role), joined_(true) {
  make_directions(0, 0);
}

Session::~Session() = default;

void Session::make_directions(std::uint64_t outbound_start, std::uint64_t inbound_start) {
  const bool server = role_ == Role::server;
  outbound_ = std::make_unique<Direction>(*this, server, outbound_start);
  inbound_ = std::make_unique<Direction>(*this, !server, inbound_start);
}

std::unique_ptr<protocol::Session> make_upgraded(const UpgradeStart& start, ExchangeSinks& sinks,
                                                 const SessionSettings& settings) {
  if (start.upgrade != "websocket" || start.role == Role::unknown) return nullptr;
  return std::make_unique<Session>(start, sinks, settings);
}

std::unique_ptr<protocol::Session> recognise(Flow flow, std::span<const std::uint8_t> head, ExchangeSinks& sinks,
                                             const SessionSettings& settings) {
  const std::optional<Sender> sender = joined_frame_sender(head);
  if (!sender) return nullptr;
  const bool sent_here = flow == Flow::outbound;
  const Role role = (*sender == Sender::server) == sent_here ? Role::server : Role::client;
  return std::make_unique<Session>(role, sinks, settings);
}

Session::Direction& Session::direction(Flow flow) { return flow == Flow::outbound ? *outbound_ : *inbound_; }

bool Session::accepts(Flow flow) const {
  return (flow == Flow::outbound ? *outbound_ : *inbound_).takes_bytes();
}

// ---- bytes in -----------------------------------------------------------------------

void Session::feed(Flow flow, const Piece& piece) {
  Direction& d = direction(flow);
  if (d.takes_bytes()) d.reader.feed(piece);
}

void Session::gap(Flow flow, std::uint64_t n, TimestampNs ts) {
  Direction& d = direction(flow);
  if (d.takes_bytes()) d.reader.gap(n, ts);
}

void Session::end(Flow flow, TimestampNs ts) {
  Direction& d = direction(flow);
  if (d.ended) return;
  d.ended = true;
  end_all(ts, ResponseEnd::cut_short);
}

void Session::close(TimestampNs ts) {
  outbound_->ended = inbound_->ended = true;
  end_all(ts, ResponseEnd::cut_short);
}

void Session::abandon(std::uint64_t id, TimestampNs ts) {
  if (Response* r = find(id)) end_response(*r, ts, ResponseEnd::cut_short);
}

// ---- frames and messages ------------------------------------------------------------

void Session::on_message(Direction& d, const Message& m, const Text& text) {
  if (!d.takes_bytes()) return;  // after its close frame
  if (d.from_server) return server_message(m, text);
  client_message(m, text);
}

void Session::on_control(Direction& d, const ControlFrame& f) {
  if (!d.takes_bytes()) return;
  if (d.from_server) {
    for (auto& r : open_) ++r->stats.control_frames;
  }
  if (f.opcode != Opcode::close) return;
  d.closed = true;
  end_all(f.ts, ResponseEnd::cut_short, f.close_code);
}

// Bytes of the server's messages went by unread: every open response may
// have lost some (its counts become lower bounds).
void Session::on_lost(Direction& d, std::uint64_t n) {
  if (!d.from_server) return;
  for (auto& r : open_) {
    r->body_offset += n;
    if (ExchangeSink* out = sinks_.exchange(r->id)) out->on_body_gap(n);
  }
}

// A sender whose window carries over is told undecodable once (nothing of
// it inflates again); one that resets it, once per message.
void Session::on_undecodable(Direction& d, Inflater::Status why) {
  if (d.inflater->context_lost()) {
    if (d.context_loss_told) return;
    d.context_loss_told = true;
  }
  sinks_.on_problem(Protocol::websocket, SessionProblem::undecodable);
  if (d.from_server) responses_undecodable(undecodable_reason(why));
}

// Joined after the upgrade, a compressed message: permessage-deflate was
// negotiated with parameters and a window the agent never saw. Counted once
// per direction; every response open when one goes by is told, as messages
// of it may be lost.
void Session::on_compressed_unread(Direction& d) {
  compressed_seen_ = true;
  for (auto& r : open_) r->stats.compressed = true;
  if (!std::exchange(d.context_loss_told, true)) sinks_.on_problem(Protocol::websocket, SessionProblem::undecodable);
  if (d.from_server) responses_undecodable(ExchangeSink::Undecodable::capture_hole);
}

void Session::responses_undecodable(ExchangeSink::Undecodable why) {
  for (auto& r : open_) {
    if (std::exchange(r->undecodable_told, true)) continue;
    if (ExchangeSink* out = sinks_.exchange(r->id)) out->on_body_undecodable(why);
  }
}

// ---- server messages: responses -----------------------------------------------------

void Session::server_message(const Message& m, const Text& text) {
  if (!text.readable) return;  // whose it was is unknown: its responses were told undecodable
  MessageFacts facts;
  if (m.opcode == Opcode::text) facts = read_message(text.bytes);
  if (is_session_message(facts.type)) {
    if (const auto format = audio_format(facts)) audio_ = *format;
  }
  Response* r = m.opcode == Opcode::text ? owner(facts, m) : nullptr;
  count_other(r);
  if (!r) return;
  event(*r, m, text, facts);
  if (facts.type == kResponseDone) end_response(*r, m.end_ts, ResponseEnd::complete);
}

// The response a server message belongs to; it opens one when it is the
// start of one (response.created, or a response.* of an id never seen).
Session::Response* Session::owner(const MessageFacts& f, const Message& m) {
  if (!is_response_message(f.type)) return nullptr;
  const bool created = f.type == kResponseCreated;
  if (f.response_id.empty()) {
    if (created) return open_response("", m.end_ts, true);
    return open_.size() == 1 ? open_.front().get() : nullptr;
  }
  const std::string_view id = f.response_id.substr(0, kMaxResponseId);
  for (auto& r : open_) {
    if (r->response_id == id) return r.get();
  }
  if (remembered(id)) return nullptr;  // a late message of an ended (or refused) response
  return open_response(id, m.end_ts, created);
}

// A declared format that covers the upgrade's path (framed `websocket`, or
// unframed) describes another realtime dialect's messages.
std::shared_ptr<const DeclaredFormat> Session::declared_format() const {
  if (!settings_.formats) return nullptr;
  return match_declared(*settings_.formats, target_, "application/json", /*websocket=*/true);
}

// Joined, a response opened by a later message than its response.created was
// in flight when the agent started: what asked for it went by unseen, and the
// client messages seen since are not its request.
Session::Response* Session::open_response(std::string_view response_id, TimestampNs head_ns, bool start_seen) {
  if (open_.size() >= kMaxOpenResponses) {
    sinks_.on_problem(Protocol::websocket, SessionProblem::exchanges_over_limit);
    remember(response_id);
    return nullptr;
  }
  auto r = std::make_unique<Response>();
  r->id = next_id_++;
  r->response_id = response_id;
  std::optional<RequestInfo> request = joined_ && !start_seen ? std::nullopt : request_for(head_ns);
  r->request_seen = request.has_value();
  if (request) r->request = std::move(*request);
  r->stats.compressed = compressed();
  r->stats.other_messages = std::exchange(other_before_, 0);
  open_.push_back(std::move(r));
  Response& opened = *open_.back();
  ExchangeSink* out = sinks_.exchange(opened.id);
  if (!out) return &opened;
  if (opened.request_seen) out->on_request_end(opened.request);
  ResponseInfo info;
  info.exchange = opened.id;
  info.status = 101;
  info.content_type = "application/json";
  info.framing = BodyFraming::none;
  info.content_encoding = ContentEncoding::identity;
  info.event_stream = true;
  info.event_framing = EventFraming::websocket;
  info.head_ns = head_ns;
  // No request seen: no TTFT, as for HTTP joined mid-stream.
  info.joined_midstream = !opened.request_seen;
  info.request = opened.request_seen ? &opened.request : nullptr;
  info.http_version = HttpVersion::http1_1;
  info.protocol = Protocol::websocket;
  info.declared = declared_format();
  out->on_response(info);
  return &opened;
}

// What asked for a response: the last response.create since the last
// response opened; else (server VAD) the last client message; else nothing
// but the response's own start. Joined, before any client message was seen,
// nothing is known: its response.create went by before the agent started.
std::optional<RequestInfo> Session::request_for(TimestampNs head_ns) {
  std::optional<RequestInfo>& asked = last_create_ ? last_create_ : last_client_;
  std::optional<RequestInfo> request;
  if (asked) {
    request = std::move(*asked);
  } else if (!joined_ || client_seen_) {
    request.emplace();
    request->method = method_;
    request->target = target_;
    request->start_ns = request->end_ns = head_ns;
    request->complete = true;
  }
  last_create_.reset();
  last_client_.reset();
  return request;
}

void Session::event(Response& r, const Message& m, const Text& text, const MessageFacts& f) {
  r.stats.frames += m.frames;
  r.stats.inflated_bytes += text.length;
  if (is_audio_delta(f.type)) r.stats.audio_bytes += audio_bytes(f, text.bytes, text.length);
  const std::uint64_t offset = r.body_offset;
  r.body_offset += m.wire_bytes;
  ExchangeSink* out = sinks_.exchange(r.id);
  if (!out) return;
  out->on_body_bytes(m.wire_bytes - m.missing_bytes);
  if (m.missing_bytes > 0) out->on_body_gap(m.missing_bytes);
  StreamEvent e;
  e.type = f.type;
  e.data = text.bytes;
  e.ts = m.end_ts;
  e.first_byte_ts = m.first_ts;
  e.body_offset = offset;
  e.wire_bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(m.wire_bytes, std::numeric_limits<std::uint32_t>::max()));
  e.truncated = text.cut;
  e.end_position = m.end_position;
  e.end_position_exact = true;
  out->on_event(e);
}

// A server message that is not a response's own: session traffic for every
// response open, or for the next one.
void Session::count_other(const Response* except) {
  if (open_.empty() && !except) {
    ++other_before_;
    return;
  }
  for (auto& r : open_) {
    if (r.get() != except) ++r->stats.other_messages;
  }
}

// ---- client messages: requests ------------------------------------------------------

void Session::client_message(const Message& m, const Text& text) {
  client_seen_ = true;
  for (auto& r : open_) ++r->stats.client_messages;
  RequestInfo& request = last_client_.emplace();
  request.method = method_;
  request.target = target_;
  request.start_ns = request.end_ns = m.end_ts;
  request.complete = true;
  request.body_bytes = text.length;
  if (!text.readable || m.opcode != Opcode::text) return;
  request.body_head.assign(text.bytes.substr(0, settings_.request_body_head));
  if (read_message(text.bytes).type == kResponseCreate) last_create_ = request;
}

// ---- ends ---------------------------------------------------------------------------

void Session::end_response(Response& r, TimestampNs ts, ResponseEnd how, std::optional<std::uint16_t> close_code) {
  const std::uint64_t id = r.id;
  if (ExchangeSink* out = sinks_.exchange(id)) {
    MessageStats stats = r.stats;
    stats.close_code = close_code;
    stats.audio_sample_rate = audio_.sample_rate;
    stats.audio_bytes_per_sample = audio_.bytes_per_sample;
    out->on_message_stats(stats);
    out->on_response_end(ts, how);
  }
  remember(r.response_id);
  std::erase_if(open_, [id](const std::unique_ptr<Response>& o) { return o->id == id; });
  sinks_.exchange_closed(id);
}

void Session::end_all(TimestampNs ts, ResponseEnd how, std::optional<std::uint16_t> close_code) {
  while (!open_.empty()) end_response(*open_.front(), ts, how, close_code);
}

Session::Response* Session::find(std::uint64_t id) {
  for (auto& r : open_) {
    if (r->id == id) return r.get();
  }
  return nullptr;
}

bool Session::remembered(std::string_view response_id) const {
  return std::find(remembered_.begin(), remembered_.end(), response_id) != remembered_.end();
}

void Session::remember(std::string_view response_id) {
  if (response_id.empty()) return;
  remembered_.emplace_back(response_id);
  if (remembered_.size() > kRememberedIds) remembered_.pop_front();
}

}  // namespace infertap::protocol::websocket
