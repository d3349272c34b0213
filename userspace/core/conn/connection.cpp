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
      last_activity_(identity_.first_seen_ns) {}

std::vector<StreamRecord> Connection::take_finished() {
  std::vector<StreamRecord> finished = assembler_.take_finished();
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
  if (session_.role() == Role::unknown) {
    if (!session_.decide(flow_of(event), event.head)) {
      ignored_ = true;
      ++counters_.connections_muted;
      decision.mute = true;
      return decision;
    }
    assembler_.set_role(session_.role());
    decision.role_decided = true;
  }
  const Flow flow = flow_of(event);
  if (session_.accepts(flow)) decision.foreign = !feed(flow, event);
  return decision;
}

void Connection::note_tls(std::string library, TimestampNs start_ns) {
  identity_.tls = true;
  identity_.tls_library = std::move(library);
  if (!identity_.tls_start_ns) identity_.tls_start_ns = start_ns;
  if (StreamRecord* r = assembler_.active_stream()) r->conn = identity_;
}

// A call that moved no bytes: a send refused for lack of buffer space, or the
// peer's end of the stream. True when that end was all a closed socket had
// left to read.
bool Connection::note_failed_call(const capture::IoEvent& event) {
  const itap_event& h = event.h();
  StreamRecord* r = assembler_.active_stream();
  if ((h.flags & ITAP_F_EAGAIN) && r && session_.role() == Role::server) {
    TcpContext& tcp = r->tcp;
    ++tcp.eagain;
    if (tcp.eagain_ns.size() < TcpContext::kMaxEvidence) tcp.eagain_ns.push_back(h.ts_ns);
    note_full_buffer(tcp, h);
  }
  if (!(h.flags & ITAP_F_EOF)) return false;
  inbound_eof_ = true;
  session_.end(Flow::inbound, h.ts_ns);
  return closed_unread_;
}

bool Connection::on_peer_shut_down(TimestampNs ts) {
  last_activity_ = std::max(last_activity_, ts);
  outbound_shut_ = true;
  session_.end(Flow::outbound, ts);
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
    StreamRecord* r = assembler_.active_stream();
    if (r && session_.carries_responses(flow)) r->bytes_lost += at.lost;
    session_.gap(flow, at.lost, h.ts_ns);
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
  assembler_.begin_piece(context);
  session_.feed(flow, piece);
  assembler_.end_piece();
  if (h.direction == ITAP_DIR_SEND && session_.role() == Role::server) note_send(event);
  return true;
}

// A send that waited for buffer space, or moved less than asked: the reader
// (or the path) is not draining.
void Connection::note_send(const capture::IoEvent& event) {
  StreamRecord* r = assembler_.active_stream();
  if (!r) return;
  const itap_event& h = event.h();
  TcpContext& tcp = r->tcp;
  if (const std::uint64_t took = call_duration(h); took >= kSendBlockedNs) {
    ++tcp.send_blocked;
    tcp.send_blocked_ns += took;
  }
  if (h.flags & ITAP_F_PARTIAL) ++tcp.partial_sends;
  note_full_buffer(tcp, h);
}

// A unix send that left its send buffer full (the kernel side's flag): the
// next send waits for the reader.
void Connection::note_full_buffer(TcpContext& tcp, const itap_event& h) {
  if (!(h.flags & ITAP_F_SNDBUF_FULL)) return;
  ++tcp.send_buffer_full;
  if (tcp.send_buffer_full_at.size() < TcpContext::kMaxEvidence) tcp.send_buffer_full_at.emplace_back(h.ts_ns, h.arrived_seq);
}

void Connection::on_signal(const capture::DeliverySignal& signal) {
  StreamRecord* r = assembler_.active_stream();
  if (r) note_signal(r->tcp, signal);
  switch (signal.kind) {
    case capture::DeliverySignal::Kind::ack:
      track_window(zero_window_since_, signal, r ? &r->tcp : nullptr);
      assembler_.on_acked(signal.seq, signal.ts_ns);
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
  if (h.new_state == kTcpFinWait1 || h.new_state == kTcpLastAck) session_.end(Flow::outbound, h.ts_ns);
}

void Connection::close(TimestampNs ts, StreamEnd reason) {
  assembler_.set_cut_reason(reason);
  session_.close(ts);
}

void Connection::expire_stream(TimestampNs now, std::uint64_t idle_ns) {
  const StreamRecord* r = assembler_.active_stream();
  if (!r) return;
  const TimestampNs last = std::max({r->last_event_ns, r->response_head_ns, r->first_event_ns});
  if (now > last && now - last > idle_ns) {
    assembler_.set_cut_reason(StreamEnd::idle_timeout);
    session_.abandon_response(now);
  }
}

}  // namespace infertap::core
