#include "core/conn/connection.h"

#include <algorithm>

namespace infertap::core {
namespace {

using protocol::Flow;

// Linux TCP states (include/net/tcp_states.h).
constexpr std::uint8_t kTcpFinWait1 = 4;
constexpr std::uint8_t kTcpLastAck = 9;

// A send that waited this long waited for buffer space: far above an
// unblocked send (a few µs).
constexpr std::uint64_t kSendBlockedNs = 1'000'000;

Flow flow_of(const capture::IoEvent& event) {
  return event.h().direction == ITAP_DIR_SEND ? Flow::outbound : Flow::inbound;
}

std::uint64_t call_duration(const itap_event& h) { return h.ts_ns - std::min(h.ts_ns, h.enter_ns); }

}  // namespace

Connection::Connection(ConnIdentity identity, const PipelineConfig& config, PipelineCounters& counters,
                       const RoleCensus& census, LoadTracker* load)
    : identity_(std::move(identity)),
      counters_(counters),
      assembler_(identity_, config, counters, census, load),
      session_(assembler_, config.request_body_head, {}, &config.formats),
      config_(config),
      census_(census),
      load_(load),
      last_activity_(identity_.first_seen_ns) {}

// HTTP/2 first (a preface, a server's SETTINGS, event DATA of a connection
// joined mid-way), else HTTP/1.
bool Connection::decide(Flow flow, std::span<const std::uint8_t> head) {
  if (protocol::http2::detect(head) != protocol::http2::Start::not_http2) {
    h2_streams_ = std::make_unique<H2Streams>(identity_, config_, counters_, census_, load_);
    h2_ = std::make_unique<protocol::http2::Session>(*h2_streams_, config_.request_body_head, protocol::DecoderLimits{},
                                                     &config_.formats);
    if (h2_->decide(flow, head)) {
      ++counters_.h2_connections;
      h2_streams_->set_role(h2_->role());
      return true;
    }
    h2_.reset();
    h2_streams_.reset();
  }
  if (!session_.decide(flow, head)) return false;
  assembler_.set_role(session_.role());
  return true;
}

bool Connection::carries_responses(Flow flow) const {
  return h2_ ? h2_->carries_responses(flow) : session_.carries_responses(flow);
}

void Connection::end_flow(Flow flow, TimestampNs ts) {
  if (h2_) return h2_->end(flow, ts);
  session_.end(flow, ts);
}

void Connection::for_each_active(const std::function<void(StreamRecord&)>& visit) {
  if (StreamRecord* r = assembler_.active_stream()) visit(*r);
  if (h2_streams_) h2_streams_->for_each_active(visit);
}

void Connection::for_each_active_stream(const std::function<void(const StreamRecord&)>& visit) const {
  if (const StreamRecord* r = assembler_.active_stream()) visit(*r);
  if (h2_streams_) std::as_const(*h2_streams_).for_each_active(visit);
}

bool Connection::streaming() const {
  bool any = false;
  for_each_active_stream([&](const StreamRecord&) { any = true; });
  return any;
}

void Connection::set_cut_reason(StreamEnd reason) {
  assembler_.set_cut_reason(reason);
  if (h2_streams_) h2_streams_->set_cut_reason(reason);
}

std::vector<StreamRecord> Connection::take_finished() {
  std::vector<StreamRecord> finished = assembler_.take_finished();
  if (h2_streams_) {
    for (StreamRecord& r : h2_streams_->take_finished()) finished.push_back(std::move(r));
  }
  // A zero-window episode still open: the record carries it on (the path
  // joiner closes it when the window opens).
  for (StreamRecord& r : finished) {
    if (zero_window_since_) r.tcp.zero_window_since = zero_window_since_;
  }
  return finished;
}

Connection::Decision Connection::on_data(const capture::IoEvent& event) {
  const itap_event& h = event.h();
  last_activity_ = h.ts_ns;
  Decision decision;
  if (ignored_) return decision;
  if (h.tls_ssl) {
    // Another TLS session on this socket address: the old connection's close was lost.
    if (tls_ssl_ && h.tls_ssl != tls_ssl_) {
      decision.foreign = true;
      return decision;
    }
    tls_ssl_ = h.tls_ssl;
  }
  if (h.ret <= 0) {
    decision.ended = note_failed_call(event);
    return decision;
  }
  if (role() == Role::unknown) {
    if (!decide(flow_of(event), event.head)) {
      ignored_ = true;
      ++counters_.connections_muted;
      decision.mute = true;
      return decision;
    }
    decision.role_decided = true;
  }
  const Flow flow = flow_of(event);
  if (accepts(flow)) decision.foreign = !feed(flow, event);
  return decision;
}

void Connection::note_tls(std::string library, TimestampNs start_ns) {
  identity_.tls = true;
  identity_.tls_library = std::move(library);
  if (!identity_.tls_start_ns) identity_.tls_start_ns = start_ns;
  for_each_active([&](StreamRecord& r) { r.conn = identity_; });
}

// A call that moved no bytes: a send refused for lack of buffer space, or the
// peer's end of the stream. True when that end was all a closed socket had
// left to read.
bool Connection::note_failed_call(const capture::IoEvent& event) {
  const itap_event& h = event.h();
  if ((h.flags & ITAP_F_EAGAIN) && role() == Role::server) {
    for_each_active([&](StreamRecord& r) {
      TcpContext& tcp = r.tcp;
      ++tcp.eagain;
      if (tcp.eagain_ns.size() < TcpContext::kMaxEvidence) tcp.eagain_ns.push_back(h.ts_ns);
      note_full_buffer(tcp, h);
    });
  }
  if (!(h.flags & ITAP_F_EOF)) return false;
  inbound_eof_ = true;
  end_flow(Flow::inbound, h.ts_ns);
  return closed_unread_;
}

bool Connection::on_peer_shut_down(TimestampNs ts) {
  last_activity_ = std::max(last_activity_, ts);
  outbound_shut_ = true;
  end_flow(Flow::outbound, ts);
  return inbound_eof_;
}

// False when the event's sequence does not continue this connection.
bool Connection::feed(Flow flow, const capture::IoEvent& event) {
  const itap_event& h = event.h();
  TcpCursor& cursor = flow == Flow::outbound ? outbound_cursor_ : inbound_cursor_;
  const TcpCursor::Placement at = cursor.place(h.seq_end, event.bytes());
  if (at.foreign) return false;
  if (at.lost > 0) {
    counters_.bytes_lost += at.lost;
    if (carries_responses(flow)) for_each_active([&](StreamRecord& r) { r.bytes_lost += at.lost; });
    if (h2_) {
      h2_->gap(flow, at.lost, h.ts_ns);
    } else {
      session_.gap(flow, at.lost, h.ts_ns);
    }
  }
  protocol::Piece piece;
  piece.position = at.position;
  piece.length = event.bytes();
  piece.head = event.head;
  piece.tail = event.tail;
  piece.ts = h.ts_ns;
  counters_.bytes_not_captured += piece.hole();

  PieceContext context;
  context.call_ns = call_duration(h);
  context.more = (h.flags & ITAP_F_MORE) != 0;
  context.position = at.position;
  context.ts = h.ts_ns;
  if (event.tls()) {
    // Plaintext positions are not TCP's: every event the call completed is
    // acknowledged with the ciphertext the call sent (0: not seen).
    context.per_byte_seq = false;
    context.end_seq = h.tls_seq;
  } else {
    context.start_seq = at.start_seq;
    context.end_seq = h.seq_end;
  }
  context.arrivals = &arrivals_;
  if (h2_) {
    h2_streams_->begin_piece(context);
    h2_->feed(flow, piece);
    h2_streams_->end_piece();
  } else if (upgrade_pending_ && carries_responses(flow)) {
    switch_protocols(flow, piece, context, 0);
  } else {
    assembler_.begin_piece(context);
    session_.feed(flow, piece);
    assembler_.end_piece();
    if (session_.switched_protocols() && carries_responses(flow)) switch_protocols(flow, piece, context, end_of_101(piece));
  }
  if (h.direction == ITAP_DIR_SEND && role() == Role::server) note_send(event);
  return true;
}

// Bytes of the piece's head up to the end of its 101 head (its blank line),
// or none when the head ends elsewhere (the next piece then begins HTTP/2).
std::optional<std::size_t> Connection::end_of_101(const protocol::Piece& piece) {
  const std::string_view head(reinterpret_cast<const char*>(piece.head.data()), piece.head.size());
  const std::size_t status = head.find(" 101");
  const std::size_t blank = status == std::string_view::npos ? status : head.find("\r\n\r\n", status);
  if (blank == std::string_view::npos) return std::nullopt;
  return blank + 4;
}

// h2c (`Upgrade: h2c` answered by 101): HTTP/2 from the byte after the 101
// head, when the server's first SETTINGS frame starts there; no bytes there
// yet: the next piece of the responses' direction decides.
void Connection::switch_protocols(Flow flow, const protocol::Piece& piece, const PieceContext& context,
                                  std::optional<std::size_t> after) {
  upgrade_pending_ = false;
  if (!after) {
    upgrade_pending_ = true;
    return;
  }
  protocol::Piece rest = piece;
  rest.position += *after;
  rest.length -= *after;
  rest.head = piece.head.subspan(*after);
  if (rest.length == 0) {
    upgrade_pending_ = true;
    return;
  }
  if (!protocol::http2::looks_like_server_settings(rest.head)) return;  // another protocol: stays unread
  h2_streams_ = std::make_unique<H2Streams>(identity_, config_, counters_, census_, load_);
  h2_ = std::make_unique<protocol::http2::Session>(*h2_streams_, config_.request_body_head, protocol::DecoderLimits{},
                                                   &config_.formats);
  h2_->start_upgraded(session_.role(), session_.upgrade_request());
  h2_streams_->set_role(h2_->role());
  ++counters_.h2_connections;
  h2_streams_->begin_piece(context);
  h2_->feed(flow, rest);
  h2_streams_->end_piece();
}

// A send that waited for buffer space, or moved less than asked: the reader
// (or the path) is not draining.
void Connection::note_send(const capture::IoEvent& event) {
  const itap_event& h = event.h();
  const bool blocked = call_duration(h) >= kSendBlockedNs;
  if (!blocked && !(h.flags & (ITAP_F_PARTIAL | ITAP_F_SNDBUF_FULL))) return;  // nothing to note
  for_each_active([&](StreamRecord& r) {
    TcpContext& tcp = r.tcp;
    if (const std::uint64_t took = call_duration(h); blocked) {
      ++tcp.send_blocked;
      tcp.send_blocked_ns += took;
    }
    if (h.flags & ITAP_F_PARTIAL) ++tcp.partial_sends;
    note_full_buffer(tcp, h);
  });
}

// A unix send that left its send buffer full (the kernel side's flag): the
// next send waits for the reader.
void Connection::note_full_buffer(TcpContext& tcp, const itap_event& h) {
  if (!(h.flags & ITAP_F_SNDBUF_FULL)) return;
  ++tcp.send_buffer_full;
  if (tcp.send_buffer_full_at.size() < TcpContext::kMaxEvidence) tcp.send_buffer_full_at.emplace_back(h.ts_ns, h.arrived_seq);
}

// Every stream in flight shares the connection's signals (HTTP/2: each live stream).
void Connection::on_signal(const capture::DeliverySignal& signal) {
  for_each_active([&](StreamRecord& r) { note_signal(r.tcp, signal); });
  switch (signal.kind) {
    case capture::DeliverySignal::Kind::ack:
      for_each_active([&](StreamRecord& r) {
        TimestampNs since = zero_window_since_;
        track_window(since, signal, &r.tcp);
      });
      track_window(zero_window_since_, signal, nullptr);
      assembler_.on_acked(signal.seq, signal.ts_ns);
      if (h2_streams_) h2_streams_->on_acked(signal.seq, signal.ts_ns);
      break;
    case capture::DeliverySignal::Kind::arrived: arrivals_.add(signal.seq, signal.ts_ns); break;
    default: break;  // retransmissions, memory limits: noted above
  }
}

void Connection::on_state(const capture::IoEvent& event) {
  const itap_event& h = event.h();
  last_activity_ = h.ts_ns;
  // This side called close()/shutdown(): nothing more will be sent. (TCP_CLOSE
  // ends the connection: the pipeline calls close().)
  if (h.new_state == kTcpFinWait1 || h.new_state == kTcpLastAck) end_flow(Flow::outbound, h.ts_ns);
}

void Connection::close(TimestampNs ts, StreamEnd reason) {
  set_cut_reason(reason);
  if (h2_) return h2_->close(ts);
  session_.close(ts);
}

namespace {

bool idle(const StreamRecord& r, TimestampNs now, std::uint64_t idle_ns) {
  const TimestampNs last = std::max({r.last_event_ns, r.response_head_ns, r.first_event_ns});
  return now > last && now - last > idle_ns;
}

}  // namespace

void Connection::expire_stream(TimestampNs now, std::uint64_t idle_ns) {
  end_streams(now, StreamEnd::idle_timeout, [&](const StreamRecord& r) { return idle(r, now, idle_ns); });
}

void Connection::end_streams(TimestampNs now, StreamEnd reason, const std::function<bool(const StreamRecord&)>& pick) {
  if (h2_) {
    std::vector<std::uint32_t> chosen;
    h2_streams_->for_each_active([&](StreamRecord& r) {
      if (pick(r)) chosen.push_back(r.h2_stream_id);
    });
    if (chosen.empty()) return;
    set_cut_reason(reason);
    for (std::uint32_t id : chosen) h2_->abandon_stream(id, now);
    set_cut_reason(StreamEnd::connection_closed);
    return;
  }
  const StreamRecord* r = assembler_.active_stream();
  if (!r || !pick(*r)) return;
  assembler_.set_cut_reason(reason);
  session_.abandon_response(now);
  assembler_.set_cut_reason(StreamEnd::connection_closed);
}

}  // namespace infertap::core
