#include "core/path/diagnosis.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <optional>

#include <sys/socket.h>

namespace infertap::core {
namespace {

// A window at 0 for at least this share of a gap (3/10) explains the gap.
bool mostly(std::uint64_t part, std::uint64_t whole) { return part * 10 >= whole * 3; }

std::uint64_t overlap_ns(const std::vector<std::pair<TimestampNs, TimestampNs>>& intervals, TimestampNs a,
                         TimestampNs b) {
  std::uint64_t total = 0;
  for (const auto& [s, e] : intervals) {
    const TimestampNs lo = std::max(s, a), hi = std::min(e, b);
    if (hi > lo) total += hi - lo;
  }
  return total;
}

std::size_t count_in(const std::vector<TimestampNs>& times, TimestampNs a, TimestampNs b) {
  return static_cast<std::size_t>(
      std::count_if(times.begin(), times.end(), [&](TimestampNs t) { return t > a && t <= b; }));
}

const TimelineEvent& event_of(const Hop& hop) { return hop.at->rec.timeline[static_cast<std::size_t>(hop.index)]; }

// The node's body was compressed on the wire: a compressor holds events until
// its buffer fills or it is flushed, the classic way gateways buffer SSE.
bool compressed(const PathNode& node) { return node.rec.content_encoding != protocol::ContentEncoding::identity; }

// How long event i's bytes waited in the node's socket before its read (0: arrival not known).
std::uint64_t unread_ns(const PathNode& node, int i) {
  const TimestampNs arrived = arrived_at(node, i), read = node.rec.timeline[static_cast<std::size_t>(i)].ts_ns;
  return arrived && read > arrived ? read - arrived : 0;
}

const Hop* last_emit_at_or_before(const std::vector<Hop>& path, std::size_t k) {
  for (std::size_t i = k + 1; i-- > 0;) {
    if (path[i].kind == HopKind::emit) return &path[i];
  }
  return nullptr;
}

// A sender sent late, or its sends were held: its own send path's evidence.
// With a traced local reader, did bytes wait in its socket?
Verdict blocked_send_cause(const PathNode* s, int ia, int ib, std::uint64_t gap, const std::string& what) {
  const TcpContext& tcp = s->rec.tcp;
  const auto& tl = s->rec.timeline;
  const TimestampNs ta = tl[static_cast<std::size_t>(ia)].ts_ns, tb = tl[static_cast<std::size_t>(ib)].ts_ns;
  if (const std::size_t rt = count_in(tcp.retransmit_ns, ta, tb); rt > 0)
    return {StallCause::network, what + "; " + std::to_string(rt) + " retransmissions"};
  if (s->peer) {
    std::uint64_t unread = 0;
    for (int i = ia + 1; i <= ib; ++i) {
      const int j = mapped(s->to_peer, i);
      if (j < 0) continue;
      unread = std::max(unread, unread_ns(*s->peer, j));
    }
    if (mostly(unread, gap))
      return {StallCause::backpressure, what + "; the reader left bytes unread for " + evidence_ms(unread)};
    return {StallCause::network, what + "; the reader kept up: the path between drains slower than the sender writes"};
  }
  if (tcp.zero_window_episodes > 0) return {StallCause::backpressure, what + "; the peer's window closed"};
  return {StallCause::network, what + " with the peer's window open: the path drains slower than the sender writes"};
}

// A unix send in [a, b) that left the send buffer full (TcpContext::
// send_buffer_full_at), or null: the send after it waited for the reader.
const std::pair<TimestampNs, std::uint32_t>* full_buffer_in(const TcpContext& tcp, TimestampNs a, TimestampNs b) {
  for (const auto& f : tcp.send_buffer_full_at) {
    if (f.first >= a && f.first < b) return &f;
  }
  return nullptr;
}

std::string kib(std::uint32_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  return buf;
}

// A unix sender's gap that began with its send buffer full: the next send
// waited for the reader (blocked, or refused with EAGAIN). With the reader
// traced, the wait is its doing only when it read the bytes before the gap
// late, not when it read them at once (then the sender was just slow).
std::optional<Verdict> full_buffer_cause(const PathNode* s, int ia, std::uint64_t gap) {
  const auto& tl = s->rec.timeline;
  const TimestampNs ta = tl[static_cast<std::size_t>(ia)].ts_ns;
  const auto* full = full_buffer_in(s->rec.tcp, ta, ta + gap);
  const std::size_t refused = count_in(s->rec.tcp.eagain_ns, ta, ta + gap);
  if (!full && !refused) return std::nullopt;
  std::string what = full ? "send buffer full after a send (" + kib(full->second) +
                                " not read by the reader): the next send waited for the reader"
                          : "the send buffer was full";
  if (refused > 0) what += "; " + std::to_string(refused) + " sends refused (EAGAIN)";
  if (!s->peer) return Verdict{StallCause::backpressure, what};
  const int j = mapped(s->to_peer, ia);
  if (j < 0) return Verdict{StallCause::backpressure, what};
  const TimestampNs read = s->peer->rec.timeline[static_cast<std::size_t>(j)].ts_ns;
  const std::uint64_t unread = read > ta ? read - ta : 0;
  if (!mostly(unread, gap)) return std::nullopt;
  return Verdict{StallCause::backpressure, what + "; the reader left bytes unread for " + evidence_ms(unread)};
}

// Why a sender's gap between its events ia and ib: the send path's evidence.
Verdict emit_cause(const PathNode* s, int ia, int ib) {
  const auto& tl = s->rec.timeline;
  const TimestampNs ta = tl[static_cast<std::size_t>(ia)].ts_ns, tb = tl[static_cast<std::size_t>(ib)].ts_ns;
  const std::uint64_t gap = tb > ta ? tb - ta : 0;
  const TcpContext& tcp = s->rec.tcp;
  const std::uint64_t zero = overlap_ns(tcp.zero_window, ta, tb);
  if (gap && mostly(zero, gap))
    return {StallCause::backpressure, "peer window 0 for " + evidence_ms(zero) + " of the " + evidence_ms(gap) + " gap"};
  const std::uint64_t blocked = tl[static_cast<std::size_t>(ib)].syscall_ns;
  const std::size_t refused = count_in(tcp.eagain_ns, ta, tb);
  if (gap && (blocked * 2 >= gap || refused > 0)) {
    const std::string what = blocked * 2 >= gap
                                 ? "send blocked " + evidence_ms(blocked)
                                 : std::to_string(refused) + " sends refused (EAGAIN, send buffer full)";
    if (s->rec.conn.transport != Transport::unix_stream) return blocked_send_cause(s, ia, ib, gap, what);
    // Unix (a send timed by the syscall sets, or refused): nothing lies
    // between the two ends but the reader's socket, so the send waited for the reader.
    if (auto v = full_buffer_cause(s, ia, gap)) return *v;
    return {StallCause::backpressure, what};
  }
  if (gap && s->rec.conn.transport == Transport::unix_stream) {
    if (auto v = full_buffer_cause(s, ia, gap)) return *v;
  }
  return {StallCause::model,
          "nothing sent for " + evidence_ms(gap) + " (the next send took " + std::to_string(blocked / 1000) + " µs)"};
}

// HTTP/2: the receiver-granted flow-control window (stream or connection) at
// 0 for most of the gap held the sender back, whatever TCP's window said.
std::optional<Verdict> h2_window_cause(const StreamRecord& r, int a, int b) {
  if (r.http_version != protocol::HttpVersion::http2 || r.h2_flow.window_zero.empty()) return std::nullopt;
  const TimestampNs ta = r.timeline[static_cast<std::size_t>(a)].ts_ns, tb = r.timeline[static_cast<std::size_t>(b)].ts_ns;
  const std::uint64_t gap = tb > ta ? tb - ta : 0;
  const std::uint64_t zero = overlap_ns(r.h2_flow.window_zero, ta, tb);
  if (!gap || !mostly(zero, gap)) return std::nullopt;
  return Verdict{StallCause::backpressure, "HTTP/2 " + std::string(protocol::to_string(r.h2_flow.window_scope)) +
                                               " flow-control window 0 for " + evidence_ms(zero) + " of the " +
                                               evidence_ms(gap) + " gap (WINDOW_UPDATE starvation, not the TCP window)"};
}

// The hop of event b's path that added most to the gap over event a's path:
// gaps are compared hop by hop at the same vantage.
struct WorstHop {
  const Hop* a = nullptr;
  const Hop* b = nullptr;
  std::size_t k = 0;                  // index of b in event b's path
  std::int64_t added = INT64_MIN;     // what that hop added to the gap
  std::int64_t last_gap = 0;          // the gap at the last vantage compared
};

WorstHop worst_hop(const std::vector<Hop>& path_a, const std::vector<Hop>& path_b) {
  WorstHop w;
  for (std::size_t k = 0; k < path_b.size(); ++k) {
    const Hop* same_at_a = nullptr;
    for (const Hop& x : path_a) {
      if (x.at == path_b[k].at && x.kind == path_b[k].kind) same_at_a = &x;
    }
    if (!same_at_a) continue;
    const auto gap = static_cast<std::int64_t>(path_b[k].ts) - static_cast<std::int64_t>(same_at_a->ts);
    const std::int64_t added = gap - w.last_gap;
    w.last_gap = gap;
    if (added > w.added) {
      w.added = added;
      w.a = same_at_a;
      w.b = &path_b[k];
      w.k = k;
    }
  }
  return w;
}

// The sender is not on this host: a gap in what arrived is the server's or
// the path's before this host, which cannot be told apart from here
// (`upstream`), unless the reader's own connection retransmitted in the gap.
Verdict remote_sender_cause(const std::vector<Hop>& path_b, const WorstHop& w) {
  const Hop* arrived_b = path_b.front().kind == HopKind::arrived ? &path_b.front() : nullptr;
  if (w.b->kind == HopKind::read && arrived_b && w.b != arrived_b)
    return {StallCause::client_read,
            "bytes waited " + evidence_ms(unread_ns(*w.b->at, w.b->index)) + " in the client's socket before the read"};
  const std::string silent = evidence_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(w.last_gap, 0)));
  const TcpContext& tcp = path_b.front().at->rec.tcp;
  const TimestampNs from = w.a ? w.a->ts : 0;
  if (const std::size_t rt = count_in(tcp.retransmit_ns, from, w.b->ts); rt > 0)
    return {StallCause::network, "nothing arrived for " + silent + "; " + std::to_string(rt) + " retransmissions"};
  return {StallCause::upstream,
          "the sender is not traced on this host: nothing arrived for " + silent + " (the server or the path before this host)"};
}

// A gateway sent late what it had read on time.
Verdict gateway_held(const std::vector<Hop>& path_b, const WorstHop& w) {
  const PathNode* at = w.b->at;
  std::uint32_t burst = 0;
  for (int u : at->gateway->to_gateway) {
    if (u == w.b->index) ++burst;
  }
  std::uint64_t held = 0;
  for (std::size_t k = w.k; k-- > 0;) {
    if (path_b[k].kind == HopKind::read && path_b[k].at == at->gateway) {
      held = w.b->ts > path_b[k].ts ? w.b->ts - path_b[k].ts : 0;
      break;
    }
  }
  const std::string events = std::to_string(std::max(burst, event_of(*w.b).events_in_syscall));
  if (compressed(*at))
    return {StallCause::gateway_buffering, std::string(protocol::to_string(at->rec.content_encoding)) + " held " + events +
                                               " events, " + evidence_ms(held) + ": the gateway's compressor kept the event " +
                                               "after reading it"};
  return {StallCause::gateway_buffering,
          "gateway held the event " + evidence_ms(held) + " after reading it; " + events + " events left in one send"};
}

Verdict read_hop_cause(const WorstHop& w) {
  const auto worst = static_cast<std::uint64_t>(w.added);
  if (w.b->at->gateway)
    return {StallCause::gateway_buffering, "gateway read the event " + evidence_ms(worst) + " later than the upstream sent it"};
  const bool arrival_known = arrived_at(*w.b->at, w.b->index) != 0;
  const std::uint64_t unread = unread_ns(*w.b->at, w.b->index);
  // Read soon after they arrived: the gap grew before the bytes reached the
  // client's socket (an arrival this event's neighbour had no hop for).
  if (arrival_known && !mostly(unread, worst))
    return {StallCause::network, "the bytes reached the client's socket late and were read " + evidence_ms(unread) +
                                     " after they arrived"};
  return {StallCause::client_read, arrival_known ? "bytes waited " + evidence_ms(unread) + " in the client's socket before the read"
                                                 : "the client read " + evidence_ms(worst) + " after the send"};
}

// Does the sender reach its peer without a network: a unix socket, or a
// loopback address? Its bytes then wait in the sender's queue only for the
// receiver's window. (A traced peer in another network namespace sits behind
// a link that can be slow: no such conclusion there.)
bool peer_on_loopback(const PathNode& sender) {
  if (sender.rec.conn.transport == Transport::unix_stream) return true;
  const Endpoint& e = sender.rec.conn.remote;
  if (e.family == AF_INET) return e.addr[0] == 127;
  if (e.family == AF_INET6) {
    static constexpr std::uint8_t kLoopback6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::equal(e.addr.begin(), e.addr.end(), kLoopback6)) return true;
    return std::equal(e.addr.begin(), e.addr.begin() + 12, kMapped) && e.addr[12] == 127;
  }
  return false;
}

// The bytes left the sender on time and reached the peer (ACK) or a local
// socket (arrival) late: the receiver's window, the network. `network` needs
// its own evidence: retransmissions, or a peer across a network.
Verdict transport_hop_cause(const std::vector<Hop>& path_b, const WorstHop& w, bool ends_at_local_reader) {
  const PathNode* sender = w.b->kind == HopKind::acked ? w.b->at : nullptr;
  for (std::size_t k = w.k; !sender && k-- > 0;) {
    if (path_b[k].kind == HopKind::emit) sender = path_b[k].at;
  }
  const TimestampNs ta = w.a->ts, tb = w.b->ts;
  const std::uint64_t gap = tb > ta ? tb - ta : 0;
  const auto worst = static_cast<std::uint64_t>(w.added);
  const TcpContext empty;
  const TcpContext& tcp = sender ? sender->rec.tcp : empty;
  const std::uint64_t zero = overlap_ns(tcp.zero_window, ta, tb);
  const std::size_t rt = count_in(tcp.retransmit_ns, ta, tb);
  const std::string vantage = w.b->kind == HopKind::acked ? "ACK" : "arrival";
  const Hop* send_hop = last_emit_at_or_before(path_b, w.k);
  const bool held_by_kernel = send_hop && event_of(*send_hop).more;
  if (held_by_kernel && sender && sender->gateway)
    return {StallCause::gateway_buffering,
            "gateway sent with MSG_MORE: the kernel held the bytes " + evidence_ms(worst) + " before they left"};
  if (gap && mostly(zero, gap))
    return {ends_at_local_reader ? StallCause::client_read : StallCause::backpressure,
            "receiver's window 0 for " + evidence_ms(zero)};
  if (rt > 0)
    return {StallCause::network, vantage + " " + evidence_ms(worst) + " late; " + std::to_string(rt) + " retransmissions"};
  if (sender && peer_on_loopback(*sender))
    return {ends_at_local_reader ? StallCause::client_read : StallCause::backpressure,
            vantage + " " + evidence_ms(worst) + " later than the send over loopback, no retransmission: the bytes "
                                                 "waited in the sender's queue for the receiver's window"};
  return {StallCause::network, vantage + " " + evidence_ms(worst) + " later than the send (srtt " +
                                   std::to_string(tcp.srtt_us / 1000) + " ms)"};
}

}  // namespace

std::string evidence_ms(std::uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f ms", static_cast<double>(ns) / 1e6);
  return buf;
}

Verdict gap_cause(const PathNode* node, int a, int b, bool through_final) {
  const std::vector<Hop> path_a = hops_of(node, a);
  std::vector<Hop> path_b = hops_of(node, b);
  if (!through_final) {
    // Only up to the node's own vantage.
    const HopKind own = node->rec.role == Role::server ? HopKind::emit : HopKind::read;
    for (std::size_t k = 0; k < path_b.size(); ++k) {
      if (path_b[k].at == node && path_b[k].kind == own) {
        path_b.resize(k + 1);
        break;
      }
    }
  }
  if (std::optional<Verdict> v = h2_window_cause(node->rec, a, b)) return *v;
  const WorstHop w = worst_hop(path_a, path_b);
  if (!w.b) return {StallCause::model, "no other vantage of this event"};
  if (path_b.front().kind != HopKind::emit) return remote_sender_cause(path_b, w);
  const bool ends_at_local_reader = path_b.back().kind == HopKind::read && through_final;
  Verdict out;
  switch (w.b->kind) {
    case HopKind::emit:
      out = emit_cause(w.b->at, w.a->index, w.b->index);
      if (w.b->at->gateway && out.cause == StallCause::model) out = gateway_held(path_b, w);
      break;
    case HopKind::read: out = read_hop_cause(w); break;
    case HopKind::arrived:
    case HopKind::acked: out = transport_hop_cause(path_b, w, ends_at_local_reader); break;
  }
  // Seen from the client, a sender held back by a local reader that did not
  // drain is the reader's doing.
  if (through_final && out.cause == StallCause::backpressure && ends_at_local_reader)
    out = {StallCause::client_read, "the reader did not drain: " + out.evidence};
  return out;
}

Verdict delay_cause(const std::vector<Hop>& path) {
  std::size_t worst_k = 0;
  std::uint64_t worst = 0;
  for (std::size_t k = 1; k < path.size(); ++k) {
    const std::uint64_t d = path[k].ts > path[k - 1].ts ? path[k].ts - path[k - 1].ts : 0;
    if (d > worst) {
      worst = d;
      worst_k = k;
    }
  }
  if (worst_k == 0) return {};
  const Hop& hop = path[worst_k];
  const Hop* sent = last_emit_at_or_before(path, worst_k);
  const bool final_reader = path.back().kind == HopKind::read;
  const TimestampNs from = path[worst_k - 1].ts;
  switch (hop.kind) {
    case HopKind::emit: {
      const TimelineEvent& e = event_of(hop);
      if (mostly(overlap_ns(hop.at->rec.tcp.zero_window, from, hop.ts), worst) || e.syscall_ns * 2 >= worst)
        return {final_reader ? StallCause::client_read : StallCause::backpressure,
                "the gateway's send waited " + evidence_ms(e.syscall_ns) + " for its reader"};
      if (const auto* full = full_buffer_in(hop.at->rec.tcp, from, hop.ts))
        return {final_reader ? StallCause::client_read : StallCause::backpressure,
                "the gateway's send buffer was full (" + kib(full->second) + " unread): its send waited for its reader"};
      if (compressed(*hop.at))
        return {StallCause::gateway_buffering, std::string(protocol::to_string(hop.at->rec.content_encoding)) +
                                                   " held it " + evidence_ms(worst) + " after the gateway read it; " +
                                                   std::to_string(e.events_in_syscall) + " events in that send"};
      return {StallCause::gateway_buffering, "gateway held it " + evidence_ms(worst) + " after reading it; " +
                                                 std::to_string(e.events_in_syscall) + " events in that send"};
    }
    case HopKind::read:
      if (hop.at->gateway)
        return {StallCause::gateway_buffering, "gateway read it " + evidence_ms(worst) + " after it arrived"};
      return {StallCause::client_read, "it waited " + evidence_ms(worst) + " in the client's socket"};
    case HopKind::arrived:
    case HopKind::acked: {
      if (sent && sent->at->gateway && event_of(*sent).more)
        return {StallCause::gateway_buffering,
                "gateway sent with MSG_MORE: the kernel held the bytes " + evidence_ms(worst) + " before they left"};
      const TcpContext empty;
      const TcpContext& tcp = sent ? sent->at->rec.tcp : empty;
      if (mostly(overlap_ns(tcp.zero_window, from, hop.ts), worst))
        return {final_reader ? StallCause::client_read : StallCause::backpressure, "receiver's window was 0"};
      return {StallCause::network,
              std::string(hop.kind == HopKind::acked ? "ACK" : "arrival") + " " + evidence_ms(worst) + " after the send"};
    }
  }
  return {};
}

}  // namespace infertap::core
