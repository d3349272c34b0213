#include "core/connection.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/metrics.h"
#include "core/pipeline.h"
#include "protocol/payload.h"

namespace infertap::core {
namespace {

using protocol::EventKind;

bool starts_with(std::span<const std::uint8_t> bytes, std::string_view prefix) {
  return bytes.size() >= prefix.size() && std::memcmp(bytes.data(), prefix.data(), prefix.size()) == 0;
}

bool looks_like_request_line(std::span<const std::uint8_t> b) {
  static constexpr std::array<std::string_view, 7> kMethods = {"GET ",    "POST ",  "PUT ",    "PATCH ",
                                                               "DELETE ", "HEAD ",  "OPTIONS "};
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

std::string_view framing_name(protocol::BodyFraming f) {
  switch (f) {
    case protocol::BodyFraming::none: return "none";
    case protocol::BodyFraming::content_length: return "content_length";
    case protocol::BodyFraming::chunked: return "chunked";
    case protocol::BodyFraming::until_close: return "until_close";
  }
  return "none";
}

// Linux TCP states (include/net/tcp_states.h).
constexpr std::uint8_t kTcpFinWait1 = 4;
constexpr std::uint8_t kTcpClose = 7;
constexpr std::uint8_t kTcpLastAck = 9;

constexpr std::uint64_t kSendBlockedNs = 1'000'000;

}  // namespace

Connection::Connection(ConnIdentity identity, Pipeline& pipeline)
    : identity_(std::move(identity)), pipeline_(pipeline), last_activity_(identity_.first_seen_ns) {}

Connection::~Connection() = default;

Connection::Direction& Connection::direction_of(const capture::IoEvent& event) {
  return event.h().direction == ITAP_DIR_SEND ? outbound_ : inbound_;
}

bool Connection::decide_role(const capture::IoEvent& event) {
  const bool send = event.h().direction == ITAP_DIR_SEND;
  const auto head = event.head;
  bool requests_here = false;
  if (looks_like_request_line(head)) {
    requests_here = true;
  } else if (looks_like_status_line(head) || looks_like_event_stream(head)) {
    requests_here = false;
  } else {
    return false;
  }
  // Requests flow client -> server.
  role_ = (requests_here == send) ? Role::client : Role::server;
  pipeline_.role_decided(identity_.pid, role_);
  using Mode = protocol::HttpParser::Mode;
  Direction& req_dir = role_ == Role::client ? outbound_ : inbound_;
  Direction& resp_dir = role_ == Role::client ? inbound_ : outbound_;
  req_dir.parser.emplace(Mode::request, request_sink_);
  resp_dir.parser.emplace(Mode::response, response_sink_);
  return true;
}

void Connection::on_data(const capture::IoEvent& event) {
  const itap_event& h = event.h();
  last_activity_ = h.ts_ns;
  if (ignored_) return;
  if (h.ret <= 0) {
    if ((h.flags & ITAP_F_EAGAIN) && response_ && response_->is_stream && role_ == Role::server) {
      TcpContext& tcp = response_->record.tcp;
      ++tcp.eagain;
      if (tcp.eagain_ns.size() < TcpContext::kMaxEvidence) tcp.eagain_ns.push_back(h.ts_ns);
    }
    // EOF on a receive: the peer finished sending; errors carry no bytes.
    if ((h.flags & ITAP_F_EOF) && inbound_.parser && !inbound_.ended) {
      inbound_.ended = true;
      inbound_.parser->close(h.ts_ns);
    }
    return;
  }
  if (role_ == Role::unknown && !decide_role(event)) {
    ignored_ = true;
    pipeline_.mute(identity_.sock_id);
    return;
  }
  Direction& dir = direction_of(event);
  if (!dir.parser || dir.ended) return;
  feed(dir, event);
}

void Connection::feed(Direction& dir, const capture::IoEvent& event) {
  const itap_event& h = event.h();
  const std::uint64_t moved = event.bytes();
  const auto start_seq = static_cast<std::uint32_t>(h.seq_end - static_cast<std::uint32_t>(moved));
  if (dir.next_seq) {
    // Bytes between what we last saw and this call were moved by events the
    // kernel could not deliver (full ring buffer): an exact hole.
    const auto missing = static_cast<std::int32_t>(start_seq - *dir.next_seq);
    if (missing > 0) {
      pipeline_.mutable_counters().bytes_lost += static_cast<std::uint64_t>(missing);
      const bool response_bytes = dir.parser->mode() == protocol::HttpParser::Mode::response;
      if (response_bytes && response_ && response_->is_stream) {
        response_->record.bytes_lost += static_cast<std::uint64_t>(missing);
      }
      dir.parser->gap(static_cast<std::uint64_t>(missing), h.ts_ns);
    }
  }
  dir.next_seq = h.seq_end;

  current_ = &event;
  current_start_seq_ = start_seq;
  current_first_event_ = response_ && response_->is_stream ? response_->record.timeline.size() : 0;
  dir.parser->feed(event.head, h.ts_ns);
  if (const std::uint64_t hole = event.hole(); hole > 0) {
    pipeline_.mutable_counters().bytes_not_captured += hole;
    dir.parser->gap(hole, h.ts_ns);
  }
  if (!event.tail.empty()) dir.parser->feed(event.tail, h.ts_ns);
  // How many SSE events this one syscall completed: a burst signature.
  if (response_ && response_->is_stream) {
    auto& timeline = response_->record.timeline;
    if (current_first_event_ < timeline.size()) {
      const auto n = static_cast<std::uint32_t>(timeline.size() - current_first_event_);
      for (std::size_t i = current_first_event_; i < timeline.size(); ++i) timeline[i].events_in_syscall = n;
    }
    // A send that waited for buffer space: the reader (or the path) is not
    // draining. 1 ms is far above an unblocked send (a few µs).
    if (h.direction == ITAP_DIR_SEND && role_ == Role::server) {
      TcpContext& tcp = response_->record.tcp;
      const std::uint64_t took = h.ts_ns - std::min(h.ts_ns, h.enter_ns);
      if (took >= kSendBlockedNs) {
        ++tcp.send_blocked;
        tcp.send_blocked_ns += took;
      }
      if (h.flags & ITAP_F_PARTIAL) ++tcp.partial_sends;
    }
  }
  current_ = nullptr;
}

Connection::BodySpan Connection::locate(std::span<const std::uint8_t> bytes, std::uint64_t body_start) const {
  BodySpan span;
  if (!current_ || bytes.empty()) return span;
  const auto inside = [&](std::span<const std::uint8_t> buf) {
    const auto p = reinterpret_cast<std::uintptr_t>(bytes.data());
    const auto b = reinterpret_cast<std::uintptr_t>(buf.data());
    return !buf.empty() && p >= b && p + bytes.size() <= b + buf.size();
  };
  std::uint64_t wire_offset;
  if (inside(current_->head)) {
    wire_offset = static_cast<std::uint64_t>(bytes.data() - current_->head.data());
  } else if (inside(current_->tail)) {
    wire_offset = current_->bytes() - current_->tail.size() + static_cast<std::uint64_t>(bytes.data() - current_->tail.data());
  } else {
    return span;  // bytes the parser had buffered from an earlier call
  }
  span.valid = true;
  span.body_start = body_start;
  span.len = bytes.size();
  span.seq_start = current_start_seq_ + static_cast<std::uint32_t>(wire_offset);
  return span;
}

// ---- delivery signals -------------------------------------------------------

namespace {
// TCP sequence comparison modulo 2^32.
bool seq_leq(std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(b - a) >= 0; }
}  // namespace

TimestampNs Connection::arrival_for(std::uint32_t end_seq) {
  // Arrivals that end before this event are of no use to later events either.
  while (!arrivals_.empty() && !seq_leq(end_seq, arrivals_.front().first)) arrivals_.pop_front();
  return arrivals_.empty() ? 0 : arrivals_.front().second;
}

void Connection::close_zero_window(TimestampNs ts, TcpContext* tcp) {
  if (!zero_window_since_) return;
  if (tcp) {
    ++tcp->zero_window_episodes;
    tcp->zero_window_ns += ts - std::min(ts, *zero_window_since_);
    if (tcp->zero_window.size() < TcpContext::kMaxEvidence) tcp->zero_window.emplace_back(*zero_window_since_, ts);
  }
  zero_window_since_.reset();
}

void Connection::on_path(const capture::PathSignal& signal) {
  const itap_path_event& p = signal.h();
  StreamRecord* r = response_ && response_->is_stream ? &response_->record : nullptr;
  if (r) note_path_signal(r->tcp, p);
  switch (p.path_kind) {
    case ITAP_PATH_ACK:
      if (p.window == 0) {
        if (!zero_window_since_) zero_window_since_ = p.ts_ns;
      } else {
        close_zero_window(p.ts_ns, r ? &r->tcp : nullptr);
      }
      if (r && role_ == Role::server) {
        auto& timeline = r->timeline;
        while (ack_cursor_ < timeline.size() && timeline[ack_cursor_].end_seq &&
               seq_leq(timeline[ack_cursor_].end_seq, p.seq)) {
          if (!timeline[ack_cursor_].acked_ns) timeline[ack_cursor_].acked_ns = p.ts_ns;
          ++ack_cursor_;
        }
      }
      break;
    case ITAP_PATH_ARRIVED:
      // Bounded: a reader that stopped reading cannot grow this without end.
      if (arrivals_.size() >= 4096) arrivals_.pop_front();
      arrivals_.emplace_back(p.seq, p.ts_ns);
      break;
    default: break;  // retransmissions, memory limits: noted above
  }
}

void Connection::on_state(const capture::IoEvent& event) {
  const itap_event& h = event.h();
  last_activity_ = h.ts_ns;
  if (h.new_state == kTcpFinWait1 || h.new_state == kTcpLastAck) {
    // This side called close()/shutdown(): nothing more will be sent.
    if (outbound_.parser && !outbound_.ended) {
      outbound_.ended = true;
      outbound_.parser->close(h.ts_ns);
    }
  }
  // TCP_CLOSE is handled by the pipeline (it ends the connection).
  (void)kTcpClose;
}

void Connection::close(TimestampNs ts, StreamEnd reason) {
  for (Direction* dir : {&outbound_, &inbound_}) {
    if (dir->parser && !dir->ended) {
      dir->ended = true;
      dir->parser->close(ts);
    }
  }
  if (response_) finish_response(ts, reason);
}

void Connection::expire_stream(TimestampNs now, std::uint64_t idle_ns) {
  if (!response_ || !response_->is_stream) return;
  const StreamRecord& r = response_->record;
  const TimestampNs last = std::max({r.last_event_ns, r.response_head_ns, r.first_event_ns});
  if (now > last && now - last > idle_ns) finish_response(now, StreamEnd::idle_timeout);
}

// ---- requests ---------------------------------------------------------------

void Connection::RequestSink::on_request_head(const protocol::RequestHead& head, TimestampNs) {
  PendingRequest req;
  req.method = head.method;
  req.target = head.target;
  // The head's first byte moved in the syscall being fed.
  req.start_ns = c_.current_ ? c_.current_->h().ts_ns : 0;
  c_.requests_.push_back(std::move(req));
  // Bound memory when a peer pipelines without reading responses.
  if (c_.requests_.size() > 64) c_.requests_.pop_front();
}

void Connection::RequestSink::on_body(std::span<const std::uint8_t> bytes, TimestampNs) {
  if (c_.requests_.empty()) return;
  PendingRequest& req = c_.requests_.back();
  const std::size_t room = c_.pipeline_.config().request_body_head - std::min(req.body_head.size(), c_.pipeline_.config().request_body_head);
  const std::size_t n = std::min(room, bytes.size());
  req.body_head.append(reinterpret_cast<const char*>(bytes.data()), n);
}

void Connection::RequestSink::on_message_end(TimestampNs ts) {
  if (c_.requests_.empty()) return;
  PendingRequest& req = c_.requests_.back();
  req.end_ns = ts;
  req.complete = true;
}

void Connection::RequestSink::on_error(protocol::ParseError, std::string_view) {
  ++c_.pipeline_.mutable_counters().http_parse_errors;
}

// ---- responses --------------------------------------------------------------

void Connection::start_response(const protocol::ResponseHead& head, TimestampNs ts) {
  if (response_) finish_response(ts, StreamEnd::protocol_error);
  response_.emplace();
  ActiveResponse& resp = *response_;
  resp.is_stream = head.event_stream;
  ++responses_seen_;
  if (!resp.is_stream) {
    ++pipeline_.mutable_counters().non_stream_responses;
    return;
  }
  ++pipeline_.mutable_counters().streams_started;
  StreamRecord& r = resp.record;
  r.conn = identity_;
  r.role = role_;
  r.stream_seq = responses_seen_ - 1;
  r.status = head.status;
  r.content_type = head.content_type;
  r.framing = std::string(framing_name(head.framing));
  r.joined_midstream = head.joined_midstream;
  r.response_head_ns = ts;
  // Only a process that is on both ends of streams can be a gateway: by now
  // it has its other leg (a gateway answers after its upstream does).
  resp.hash_events = pipeline_.process_has_other_role(identity_.pid, role_);
  r.timeline.reserve(64);  // a typical stream's events without regrowing from 1
  ack_cursor_ = 0;
  if (!head.joined_midstream && !requests_.empty()) {
    const PendingRequest& req = requests_.front();
    r.method = req.method;
    r.path = req.target;
    r.request_start_ns = req.start_ns;
    r.request_end_ns = req.complete ? req.end_ns : 0;
    const protocol::RequestMeaning meaning = protocol::interpret_request_body(req.body_head);
    r.request_model = meaning.model;
    r.model = meaning.model;
    r.request_stream = meaning.stream;
  }
  resp.sse.emplace([this](const protocol::SseEvent& e) { on_sse_event(e); });
  if (head.joined_midstream) resp.sse->resync();
}

void Connection::on_sse_event(const protocol::SseEvent& e) {
  if (!response_ || !response_->is_stream) return;
  ActiveResponse& resp = *response_;
  StreamRecord& r = resp.record;
  ++pipeline_.mutable_counters().sse_events;
  const protocol::EventMeaning& meaning = resp.interpreter.interpret(e.type, e.data, e.truncated);

  if (r.timeline.size() < pipeline_.config().max_timeline_events) {
    TimelineEvent t;
    t.ts_ns = e.ts;
    t.first_byte_ns = e.first_byte_ts;
    t.offset = e.stream_offset;
    t.wire_bytes = e.wire_bytes;
    t.kind = meaning.kind;
    t.truncated = e.truncated;
    if (current_) {
      t.syscall_ns = current_->h().ts_ns - std::min(current_->h().ts_ns, current_->h().enter_ns);
      t.more = (current_->h().flags & ITAP_F_MORE) != 0;
    }
    const std::uint64_t end = e.stream_offset + e.wire_bytes;
    if (body_span_.valid && end > body_span_.body_start && end <= body_span_.body_start + body_span_.len) {
      t.end_seq = body_span_.seq_start + static_cast<std::uint32_t>(end - body_span_.body_start);
      t.end_seq_exact = !e.truncated;
    } else if (current_) {
      t.end_seq = current_->h().seq_end;
    }
    if (role_ == Role::client && t.end_seq) {
      // Bytes cannot arrive after the read that returned them: a later time
      // is another arrival's (a reader racing the kernel), not this event's.
      const TimestampNs arrived = arrival_for(t.end_seq);
      t.arrived_ns = arrived <= t.ts_ns ? arrived : 0;
    }
    if (resp.hash_events && !e.truncated && !e.data.empty()) t.data_hash = std::hash<std::string_view>{}(e.data) | 1;
    r.timeline.push_back(t);
  }
  if (e.truncated) ++r.truncated_events;
  if (r.first_event_ns == 0) r.first_event_ns = e.ts;
  r.last_event_ns = e.ts;
  if (meaning.kind == EventKind::content) {
    if (r.first_token_ns == 0) r.first_token_ns = e.ts;
    r.last_token_ns = e.ts;
  }
  if (r.dialect == protocol::Dialect::unknown) r.dialect = meaning.dialect;
  if (r.response_id.empty() && !meaning.response_id.empty()) r.response_id = meaning.response_id;
  if (!meaning.model.empty() && (r.model.empty() || r.model == r.request_model)) r.model = meaning.model;
  if (!meaning.finish_reason.empty()) r.finish_reason = meaning.finish_reason;
  if (meaning.kind == EventKind::error && r.error_type.empty()) {
    r.error_type = meaning.error_type.empty() ? "error" : meaning.error_type;
  }
  // Anthropic reports cumulative output_tokens; the last value wins.
  if (meaning.completion_tokens) resp.usage_completion_tokens = meaning.completion_tokens;
  if (meaning.kind == EventKind::done) resp.saw_done = true;
}

void Connection::finish_response(TimestampNs ts, StreamEnd reason) {
  if (!response_) return;
  ActiveResponse resp = std::move(*response_);
  response_.reset();
  if (!requests_.empty() && !resp.record.joined_midstream) requests_.pop_front();
  if (!resp.is_stream) return;
  if (resp.sse) resp.sse->end(ts);
  StreamRecord& r = resp.record;
  // A zero-window episode still open: the record carries it on (the path
  // joiner closes it when the window opens).
  if (zero_window_since_) r.tcp.zero_window_since = *zero_window_since_;
  // A stream that delivered its protocol's end marker is complete even when the
  // connection went away before the framing terminator was seen.
  r.end = resp.saw_done ? StreamEnd::complete : reason;
  r.end_ns = ts;
  compute_metrics(r, resp.usage_completion_tokens, pipeline_.config());
  auto& counters = pipeline_.mutable_counters();
  if (r.end == StreamEnd::complete) {
    ++counters.streams_completed;
  } else {
    ++counters.streams_partial;
  }
  pipeline_.emit(std::move(r));
}

void Connection::ResponseSink::on_response_head(const protocol::ResponseHead& head, TimestampNs ts) {
  if (head.status >= 100 && head.status < 200) return;  // interim responses
  c_.start_response(head, ts);
}

void Connection::ResponseSink::on_body(std::span<const std::uint8_t> bytes, TimestampNs ts) {
  if (!c_.response_ || !c_.response_->is_stream) return;
  c_.body_span_ = c_.locate(bytes, c_.response_->record.body_bytes);
  c_.response_->record.body_bytes += bytes.size();
  c_.response_->sse->feed(bytes, ts);
  c_.body_span_ = {};
}

void Connection::ResponseSink::on_body_gap(std::uint64_t n, TimestampNs ts) {
  if (!c_.response_ || !c_.response_->is_stream) return;
  c_.response_->record.body_bytes += n;
  c_.response_->record.bytes_not_captured += n;
  c_.response_->sse->gap(n, ts);
}

void Connection::ResponseSink::on_message_end(TimestampNs ts) { c_.finish_response(ts, StreamEnd::complete); }

void Connection::ResponseSink::on_error(protocol::ParseError, std::string_view) {
  ++c_.pipeline_.mutable_counters().http_parse_errors;
  if (c_.response_ && c_.response_->is_stream) ++c_.response_->record.parse_errors;
}

}  // namespace infertap::core
