#include "core/conn/connection.h"

#include <algorithm>

#include "protocol/registry.h"

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
  return event.direction == capture::IoEvent::Direction::send ? Flow::outbound : Flow::inbound;
}

std::uint64_t call_duration(const capture::IoEvent& h) { return h.ts_ns - std::min(h.ts_ns, h.enter_ns); }

protocol::SessionSettings session_settings(const PipelineConfig& config) {
  protocol::SessionSettings settings;
  settings.request_body_head = config.request_body_head;
  settings.formats = &config.formats;
  return settings;
}

}  // namespace

Connection::Connection(ConnIdentity identity, const PipelineConfig& config, PipelineCounters& counters,
                       const RoleCensus& census, LoadTracker* load)
    : identity_(std::move(identity)),
      counters_(counters),
      settings_(session_settings(config)),
      exchanges_(identity_, config, counters, census, load),
      last_activity_(identity_.first_seen_ns) {}

// The registration list decides from the first bytes (protocol/registry.h).
bool Connection::decide(Flow flow, std::span<const std::uint8_t> head) {
  session_ = protocol::recognise(flow, head, exchanges_, settings_);
  if (!session_) return false;
  exchanges_.set_session(session_->protocol(), session_->role(), /*upgraded=*/false);
  return true;
}

void Connection::end_flow(Flow flow, TimestampNs ts) {
  if (session_) session_->end(flow, ts);
}

void Connection::for_each_active(const std::function<void(StreamRecord&)>& visit) { exchanges_.for_each_active(visit); }

void Connection::for_each_active_stream(const std::function<void(const StreamRecord&)>& visit) const {
  std::as_const(exchanges_).for_each_active(visit);
}

bool Connection::streaming() const {
  bool any = false;
  for_each_active_stream([&](const StreamRecord&) { any = true; });
  return any;
}

void Connection::set_cut_reason(StreamEnd reason) { exchanges_.set_cut_reason(reason); }

std::vector<StreamRecord> Connection::take_finished() {
  std::vector<StreamRecord> finished = exchanges_.take_finished();
  // A zero-window episode still open: the record carries it on (the path
  // joiner closes it when the window opens).
  for (StreamRecord& r : finished) {
    if (zero_window_since_) r.tcp.zero_window_since = zero_window_since_;
  }
  return finished;
}

Connection::Decision Connection::on_data(const capture::IoEvent& event) {
  const capture::IoEvent& h = event;
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
  const capture::IoEvent& h = event;
  if (h.flags.eagain && role() == Role::server) {
    for_each_active([&](StreamRecord& r) {
      TcpContext& tcp = r.tcp;
      ++tcp.eagain;
      if (tcp.eagain_ns.size() < TcpContext::kMaxEvidence) tcp.eagain_ns.push_back(h.ts_ns);
      note_full_buffer(tcp, h);
    });
  }
  if (!h.flags.eof) return false;
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
  const capture::IoEvent& h = event;
  TcpCursor& cursor = flow == Flow::outbound ? outbound_cursor_ : inbound_cursor_;
  const TcpCursor::Placement at = cursor.place(h.seq_end, event.bytes());
  if (at.foreign) return false;
  if (at.lost > 0) {
    counters_.bytes_lost += at.lost;
    if (carries_responses(flow)) for_each_active([&](StreamRecord& r) { r.bytes_lost += at.lost; });
    session_->gap(flow, at.lost, h.ts_ns);
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
  context.more = h.flags.more;
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
  feed_session(flow, piece, context);
  if (h.direction == capture::IoEvent::Direction::send && role() == Role::server) note_send(event);
  return true;
}

void Connection::feed_session(Flow flow, const protocol::Piece& piece, const PieceContext& context) {
  exchanges_.begin_piece(context);
  session_->feed(flow, piece);
  exchanges_.end_piece();
  if (session_->upgrade() && !upgrade_unread_) switch_protocols(flow, piece, context);
}

// The session switched the connection to another protocol (an HTTP/1.1 101):
// the registration list makes the next session, which takes the rest of this
// piece from where its bytes begin. A protocol the list does not speak leaves
// the rest unread.
void Connection::switch_protocols(Flow flow, const protocol::Piece& piece, const PieceContext& context) {
  const protocol::UpgradeStart& start = *session_->upgrade();
  std::unique_ptr<protocol::Session> next = protocol::start_upgraded(start, exchanges_, settings_);
  if (!next) {
    upgrade_unread_ = true;
    return;
  }
  const std::uint64_t begins = flow == Flow::outbound ? start.outbound_position : start.inbound_position;
  session_ = std::move(next);
  exchanges_.set_session(session_->protocol(), session_->role(), /*upgraded=*/true);
  const protocol::Piece rest = piece.from(begins);
  if (rest.length > 0) feed_session(flow, rest, context);
}

// A send that waited for buffer space, or moved less than asked: the reader
// (or the path) is not draining.
void Connection::note_send(const capture::IoEvent& event) {
  const capture::IoEvent& h = event;
  const bool blocked = call_duration(h) >= kSendBlockedNs;
  if (!blocked && !h.flags.partial && !h.flags.sndbuf_full) return;  // nothing to note
  for_each_active([&](StreamRecord& r) {
    TcpContext& tcp = r.tcp;
    if (const std::uint64_t took = call_duration(h); blocked) {
      ++tcp.send_blocked;
      tcp.send_blocked_ns += took;
    }
    if (h.flags.partial) ++tcp.partial_sends;
    note_full_buffer(tcp, h);
  });
}

// A unix send that left its send buffer full (the kernel side's flag): the
// next send waits for the reader.
void Connection::note_full_buffer(TcpContext& tcp, const capture::IoEvent& h) {
  if (!h.flags.sndbuf_full) return;
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
      exchanges_.on_acked(signal.seq, signal.ts_ns);
      break;
    case capture::DeliverySignal::Kind::arrived: arrivals_.add(signal.seq, signal.ts_ns); break;
    default: break;  // retransmissions, memory limits: noted above
  }
}

void Connection::on_state(const capture::IoEvent& event) {
  const capture::IoEvent& h = event;
  last_activity_ = h.ts_ns;
  // This side called close()/shutdown(): nothing more will be sent. (TCP_CLOSE
  // ends the connection: the pipeline calls close().)
  if (h.new_state == kTcpFinWait1 || h.new_state == kTcpLastAck) end_flow(Flow::outbound, h.ts_ns);
}

void Connection::close(TimestampNs ts, StreamEnd reason) {
  set_cut_reason(reason);
  if (session_) session_->close(ts);
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
  if (!session_) return;
  const std::vector<std::uint64_t> chosen = exchanges_.active_ids(pick);
  if (chosen.empty()) return;
  set_cut_reason(reason);
  for (std::uint64_t id : chosen) session_->abandon(id, now);
  set_cut_reason(StreamEnd::connection_closed);
}

}  // namespace infertap::core
