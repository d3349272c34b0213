#include "core/path.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <tuple>
#include <unordered_map>

#include "core/metrics.h"

namespace infertap::core {
namespace {

using protocol::EventKind;

bool same_endpoint(const Endpoint& a, const Endpoint& b) {
  return a.port == b.port && a.family == b.family && a.addr == b.addr;
}

bool seq_leq(std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(b - a) >= 0; }

std::string ms(std::uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f ms", static_cast<double>(ns) / 1e6);
  return buf;
}

// Events of `from` found in `to`, the other end of the same TCP connection:
// by the TCP sequence just past each event's last byte, else by body offset
// (both ends parse the same response body from its first byte).
std::vector<int> match_tcp_ends(const StreamRecord& from, const StreamRecord& to) {
  // Both timelines are in TCP order: sequences and body offsets only grow,
  // so one forward pass over each finds every equal pair.
  const bool offsets_comparable = !from.joined_midstream && !to.joined_midstream;
  const std::size_t n = to.timeline.size();
  std::vector<int> out(from.timeline.size(), -1);
  std::size_t by_seq = 0, by_offset = 0;
  for (std::size_t i = 0; i < from.timeline.size(); ++i) {
    const TimelineEvent& e = from.timeline[i];
    if (e.end_seq_exact) {
      while (by_seq < n && (!to.timeline[by_seq].end_seq_exact || !seq_leq(e.end_seq, to.timeline[by_seq].end_seq)))
        ++by_seq;
      if (by_seq < n && to.timeline[by_seq].end_seq == e.end_seq) {
        out[i] = static_cast<int>(by_seq);
        continue;
      }
    }
    if (offsets_comparable) {
      while (by_offset < n && to.timeline[by_offset].offset < e.offset) ++by_offset;
      if (by_offset < n && to.timeline[by_offset].offset == e.offset &&
          to.timeline[by_offset].wire_bytes == e.wire_bytes)
        out[i] = static_cast<int>(by_offset);
    }
  }
  // An event the other end did not capture whole (several events in one
  // read, larger than the capture window) moved no later than the next event
  // that end did capture: TCP keeps the order.
  if (to.timeline.empty()) return out;
  // Only inside the other record's stream, not an earlier response on the connection.
  const std::uint32_t to_start = to.timeline.front().end_seq - static_cast<std::uint32_t>(to.body_bytes + 65536);
  std::size_t j = 0;
  for (std::size_t i = 0; i < from.timeline.size(); ++i) {
    const std::uint32_t seq = from.timeline[i].end_seq;
    if (out[i] >= 0 || !seq || !seq_leq(to_start, seq)) continue;
    while (j < to.timeline.size() && !(to.timeline[j].end_seq && seq_leq(seq, to.timeline[j].end_seq))) ++j;
    if (j == to.timeline.size()) break;
    out[i] = static_cast<int>(j);
  }
  return out;
}

// The same SSE events on a gateway's two legs, in order, by data hash.
// Returns upstream event -> downstream event (exact matches only).
std::vector<int> match_by_content(const StreamRecord& up, const StreamRecord& down) {
  std::unordered_map<std::uint64_t, std::deque<int>> positions;
  for (std::size_t k = 0; k < down.timeline.size(); ++k) {
    if (down.timeline[k].data_hash) positions[down.timeline[k].data_hash].push_back(static_cast<int>(k));
  }
  // Events the downstream capture did not see whole have no hash; a gateway
  // that passes the body through unchanged keeps its offsets.
  std::map<std::pair<std::uint64_t, std::uint32_t>, int> by_offset;
  if (!up.joined_midstream && !down.joined_midstream) {
    for (std::size_t k = 0; k < down.timeline.size(); ++k)
      by_offset.emplace(std::make_pair(down.timeline[k].offset, down.timeline[k].wire_bytes), static_cast<int>(k));
  }
  std::vector<int> out(up.timeline.size(), -1);
  int last = -1;
  for (std::size_t j = 0; j < up.timeline.size(); ++j) {
    const std::uint64_t h = up.timeline[j].data_hash;
    auto it = h ? positions.find(h) : positions.end();
    if (it != positions.end()) {
      auto& q = it->second;
      while (!q.empty() && q.front() <= last) q.pop_front();  // identical events: keep the order
      if (!q.empty()) {
        out[j] = last = q.front();
        q.pop_front();
        continue;
      }
    }
    auto o = by_offset.find({up.timeline[j].offset, up.timeline[j].wire_bytes});
    if (o != by_offset.end() && o->second > last) out[j] = last = o->second;
  }
  return out;
}

int count_matched(const std::vector<int>& m) {
  return static_cast<int>(std::count_if(m.begin(), m.end(), [](int x) { return x >= 0; }));
}

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
  return static_cast<std::size_t>(std::count_if(times.begin(), times.end(), [&](TimestampNs t) { return t > a && t <= b; }));
}

}  // namespace

void note_path_signal(TcpContext& tcp, const itap_path_event& p) {
  tcp.signals = true;
  if (p.srtt_us) {
    tcp.srtt_us = p.srtt_us;
    tcp.srtt_max_us = std::max(tcp.srtt_max_us, p.srtt_us);
  }
  if (p.path_kind == ITAP_PATH_RETRANSMIT) {
    ++tcp.retransmits;
    if (tcp.retransmit_ns.size() < TcpContext::kMaxEvidence) tcp.retransmit_ns.push_back(p.ts_ns);
  } else if (p.path_kind == ITAP_PATH_BUF_LIMIT) {
    ++tcp.buf_limit;
  }
}

PathJoiner::PathJoiner(const PipelineConfig& config, Release release, PeerActivity peer_activity,
                       GatewayPartnerActive gateway_partner_active)
    : config_(config),
      release_(std::move(release)),
      peer_activity_(std::move(peer_activity)),
      gateway_partner_active_(std::move(gateway_partner_active)) {}

void PathJoiner::add(StreamRecord&& record, TimestampNs now) {
  if (held_.size() >= config_.max_held_records) {
    // Bounded memory: the oldest wait ends early.
    try_release(held_.front(), now, true);
  }
  Held& h = held_.emplace_back();
  h.rec = std::move(record);
  h.deadline = now + config_.path_settle_ns;
  h.cap = now + config_.stream_idle_timeout_ns;
  h.want_peer = peer_activity_ && peer_activity_(h.rec.conn.remote, h.rec.conn.local) != Activity::none;
  link(h);
  h.want_gateway = !h.gw && h.rec.role != Role::unknown && gateway_partner_active_ &&
                   gateway_partner_active_(h.rec) != Activity::none;
  try_release(h, now, false);
}

void PathJoiner::link(Held& h) {
  const StreamRecord& r = h.rec;
  for (Held& o : held_) {
    if (&o == &h) continue;
    // The other end of this TCP connection.
    if (!h.peer && !o.peer && o.rec.role != r.role && same_endpoint(o.rec.conn.local, r.conn.remote) &&
        same_endpoint(o.rec.conn.remote, r.conn.local)) {
      std::vector<int> fwd = match_tcp_ends(r, o.rec);
      if (count_matched(fwd) > 0 || (r.timeline.empty() && o.rec.timeline.empty())) {
        h.peer = &o;
        o.peer = &h;
        h.to_peer = std::move(fwd);
        o.to_peer = match_tcp_ends(o.rec, r);
        continue;
      }
    }
    // A gateway's other leg: same process, opposite role, same events.
    if (!h.gw && !o.gw && o.rec.role != r.role && o.rec.conn.pid == r.conn.pid && r.role != Role::unknown &&
        o.rec.role != Role::unknown) {
      Held& up = r.role == Role::client ? h : o;
      Held& down = r.role == Role::client ? o : h;
      const bool same_id = !up.rec.response_id.empty() && up.rec.response_id == down.rec.response_id;
      if (!up.rec.response_id.empty() && !down.rec.response_id.empty() && !same_id) continue;
      std::vector<int> u2d = match_by_content(up.rec, down.rec);
      const int matched = count_matched(u2d);
      const int needed = std::min<int>(3, static_cast<int>(up.rec.timeline.size()));
      if (matched == 0 || (matched < needed && !same_id)) continue;
      up.gw = &down;
      down.gw = &up;
      down.to_gw.assign(down.rec.timeline.size(), -1);
      for (std::size_t j = 0; j < u2d.size(); ++j) {
        if (u2d[j] >= 0) down.to_gw[static_cast<std::size_t>(u2d[j])] = static_cast<int>(j);
      }
      // An upstream event the downstream capture missed (inside a burst larger
      // than the capture window) left no later than the next one found: TCP and
      // the gateway keep the order.
      int next = -1;
      for (std::size_t j = u2d.size(); j-- > 0;) {
        if (u2d[j] >= 0) next = u2d[j];
        else u2d[j] = next;
      }
      up.to_gw = std::move(u2d);
    }
  }
}

bool PathJoiner::satisfied(const Held& h) const {
  if (h.want_peer && !h.peer) return false;
  if (h.want_gateway && !h.gw) return false;
  // A sender waits for the ACK of its last event when ACKs are being seen.
  if (h.rec.role == Role::server && h.rec.tcp.signals && !h.closed && !h.rec.timeline.empty()) {
    const TimelineEvent& last = h.rec.timeline.back();
    if (last.end_seq && !last.acked_ns && !h.peer) return false;
  }
  return true;
}

std::vector<PathJoiner::Held*> PathJoiner::group_of(Held& h) {
  std::vector<Held*> group{&h};
  for (std::size_t i = 0; i < group.size(); ++i) {
    for (Held* n : {group[i]->peer, group[i]->gw}) {
      if (n && std::find(group.begin(), group.end(), n) == group.end()) group.push_back(n);
    }
  }
  return group;
}

void PathJoiner::try_release(Held& h, TimestampNs now, bool force) {
  std::vector<Held*> group = group_of(h);
  bool ready = force;
  if (!ready) {
    ready = std::all_of(group.begin(), group.end(), [&](const Held* m) { return satisfied(*m); });
    if (!ready) {
      const TimestampNs deadline = (*std::max_element(group.begin(), group.end(), [](const Held* a, const Held* b) {
                                     return a->deadline < b->deadline;
                                   }))->deadline;
      ready = now >= deadline;
      // Past the settle time, keep waiting only for a partner that is still
      // streaming (a slow reader, a gateway draining to a slow client).
      for (const Held* m : group) {
        if (!ready || now >= m->cap) continue;
        const bool peer_streaming = m->want_peer && !m->peer && peer_activity_ &&
                                    peer_activity_(m->rec.conn.remote, m->rec.conn.local) == Activity::streaming;
        const bool leg_streaming = m->want_gateway && !m->gw && gateway_partner_active_ &&
                                   gateway_partner_active_(m->rec) == Activity::streaming;
        if (peer_streaming || leg_streaming) ready = false;
      }
    }
  }
  if (!ready) return;
  finish_group(group);
  if (group.size() > 1) joined_ += group.size();
  // Release in the order the records finished.
  std::vector<std::list<Held>::iterator> its;
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (std::find(group.begin(), group.end(), &*it) != group.end()) its.push_back(it);
  }
  for (auto it : its) {
    StreamRecord rec = std::move(it->rec);
    held_.erase(it);
    if (release_) release_(std::move(rec));
  }
}

void PathJoiner::on_signal(std::uint64_t sock_id, std::uint64_t generation, const itap_path_event& p) {
  for (Held& h : held_) {
    if (h.rec.conn.sock_id != sock_id || h.rec.conn.generation != generation) continue;
    TcpContext& tcp = h.rec.tcp;
    note_path_signal(tcp, p);
    if (p.path_kind != ITAP_PATH_ACK || h.rec.role != Role::server) continue;
    for (TimelineEvent& e : h.rec.timeline) {
      if (!e.acked_ns && e.end_seq && seq_leq(e.end_seq, p.seq)) e.acked_ns = p.ts_ns;
    }
    if (p.window == 0 && !tcp.zero_window_since) {
      tcp.zero_window_since = p.ts_ns;
    } else if (p.window != 0 && tcp.zero_window_since) {
      ++tcp.zero_window_episodes;
      tcp.zero_window_ns += p.ts_ns - std::min<TimestampNs>(p.ts_ns, tcp.zero_window_since);
      if (tcp.zero_window.size() < TcpContext::kMaxEvidence) tcp.zero_window.emplace_back(tcp.zero_window_since, p.ts_ns);
      tcp.zero_window_since = 0;
    }
  }
}

void PathJoiner::on_closed(std::uint64_t sock_id, std::uint64_t generation, TimestampNs now) {
  bool any = false;
  for (Held& h : held_) {
    if (h.rec.conn.sock_id == sock_id && h.rec.conn.generation == generation) h.closed = any = true;
  }
  if (any) release_due(now);
}

void PathJoiner::release_due(TimestampNs now) {
  // try_release erases group members: restart after each release.
  bool again = true;
  while (again) {
    again = false;
    for (Held& h : held_) {
      const std::size_t before = held_.size();
      try_release(h, now, false);
      if (held_.size() != before) {
        again = true;
        break;
      }
    }
  }
}

void PathJoiner::release_all() {
  while (!held_.empty()) try_release(held_.front(), 0, true);
}

// ---- the path of one event --------------------------------------------------

enum class PathJoiner::HopKind { emit, acked, arrived, read };

struct PathJoiner::Hop {
  HopKind kind;
  const Held* at;
  int index;  // event index in at->rec.timeline
  TimestampNs ts;
};

namespace {
int mapped(const std::vector<int>& m, int i) {
  return i >= 0 && static_cast<std::size_t>(i) < m.size() ? m[static_cast<std::size_t>(i)] : -1;
}
}  // namespace

std::pair<const PathJoiner::Held*, int> PathJoiner::origin_of(const Held* h, int i) {
  for (int guard = 0; guard < 8 && i >= 0; ++guard) {
    if (h->rec.role == Role::client && h->peer && mapped(h->to_peer, i) >= 0) {
      i = mapped(h->to_peer, i);
      h = h->peer;
    } else if (h->rec.role == Role::server && h->gw && mapped(h->to_gw, i) >= 0) {
      i = mapped(h->to_gw, i);
      h = h->gw;
    } else {
      break;
    }
  }
  return {h, i};
}

std::vector<PathJoiner::Hop> PathJoiner::hops(const Held* h, int i) {
  std::vector<Hop> out;
  hops_into(h, i, out);
  return out;
}

void PathJoiner::hops_into(const Held* h, int i, std::vector<Hop>& out) {
  auto [cur, idx] = origin_of(h, i);
  out.clear();
  for (int guard = 0; guard < 8 && cur && idx >= 0; ++guard) {
    const TimelineEvent& e = cur->rec.timeline[static_cast<std::size_t>(idx)];
    if (cur->rec.role == Role::server) {
      out.push_back({HopKind::emit, cur, idx, e.ts_ns});
      if (cur->peer && mapped(cur->to_peer, idx) >= 0) {
        idx = mapped(cur->to_peer, idx);
        cur = cur->peer;
        continue;
      }
      if (e.acked_ns) out.push_back({HopKind::acked, cur, idx, e.acked_ns});
      break;
    }
    if (e.arrived_ns) out.push_back({HopKind::arrived, cur, idx, e.arrived_ns});
    out.push_back({HopKind::read, cur, idx, e.ts_ns});
    if (cur->gw && mapped(cur->to_gw, idx) >= 0) {
      idx = mapped(cur->to_gw, idx);
      cur = cur->gw;
      continue;
    }
    break;
  }
}

// Why a sender's gap between its events ia and ib: the send path's evidence.
std::pair<StallCause, std::string> PathJoiner::emit_cause(const Held* s, int ia, int ib) {
  const auto& tl = s->rec.timeline;
  const TimestampNs ta = tl[static_cast<std::size_t>(ia)].ts_ns, tb = tl[static_cast<std::size_t>(ib)].ts_ns;
  const std::uint64_t gap = tb > ta ? tb - ta : 0;
  const TcpContext& tcp = s->rec.tcp;
  const std::uint64_t zero = overlap_ns(tcp.zero_window, ta, tb);
  if (gap && zero * 10 >= gap * 3) {
    return {StallCause::backpressure, "peer window 0 for " + ms(zero) + " of the " + ms(gap) + " gap"};
  }
  const std::uint64_t blocked = tl[static_cast<std::size_t>(ib)].syscall_ns;
  const std::size_t refused = count_in(tcp.eagain_ns, ta, tb);
  if (gap && (blocked * 2 >= gap || refused > 0)) {
    std::string what = blocked * 2 >= gap ? "send blocked " + ms(blocked)
                                          : std::to_string(refused) + " sends refused (EAGAIN, send buffer full)";
    if (const std::size_t rt = count_in(tcp.retransmit_ns, ta, tb); rt > 0) {
      return {StallCause::network, what + "; " + std::to_string(rt) + " retransmissions"};
    }
    if (s->peer) {
      // A local reader: did bytes wait in its socket?
      std::uint64_t unread = 0;
      for (int i = ia + 1; i <= ib; ++i) {
        const int j = mapped(s->to_peer, i);
        if (j < 0) continue;
        const TimelineEvent& r = s->peer->rec.timeline[static_cast<std::size_t>(j)];
        if (r.arrived_ns && r.ts_ns > r.arrived_ns) unread = std::max(unread, r.ts_ns - r.arrived_ns);
      }
      if (unread * 10 >= gap * 3) {
        return {StallCause::backpressure, what + "; the reader left bytes unread for " + ms(unread)};
      }
      return {StallCause::network, what + "; the reader kept up: the path between drains slower than the sender writes"};
    }
    if (tcp.zero_window_episodes > 0) return {StallCause::backpressure, what + "; the peer's window closed"};
    return {StallCause::network, what + " with the peer's window open: the path drains slower than the sender writes"};
  }
  return {StallCause::model, "nothing sent for " + ms(gap) + " (the next send took " +
                                 std::to_string(blocked / 1000) + " µs)"};
}

// The cause of a gap between events a and b of h: the hop of the path that
// added most of it. `through_final`: judge the whole path (delivery view), not
// only up to h's own vantage.
std::pair<StallCause, std::string> PathJoiner::diagnose(const Held* h, int a, int b, bool through_final) {
  std::vector<Hop> ha = hops(h, a), hb = hops(h, b);
  if (!through_final) {
    const HopKind own = h->rec.role == Role::server ? HopKind::emit : HopKind::read;
    for (std::size_t k = 0; k < hb.size(); ++k) {
      if (hb[k].at == h && hb[k].kind == own) {
        hb.resize(k + 1);
        break;
      }
    }
  }
  const Hop* worst_a = nullptr;
  const Hop* worst_b = nullptr;
  std::size_t worst_k = 0;
  std::int64_t worst = INT64_MIN, prev = 0;
  for (std::size_t k = 0; k < hb.size(); ++k) {
    const Hop* pa = nullptr;
    for (const Hop& x : ha) {
      if (x.at == hb[k].at && x.kind == hb[k].kind) pa = &x;
    }
    if (!pa) continue;
    const auto gap = static_cast<std::int64_t>(hb[k].ts) - static_cast<std::int64_t>(pa->ts);
    const std::int64_t added = gap - prev;
    prev = gap;
    if (added > worst) {
      worst = added;
      worst_a = pa;
      worst_b = &hb[k];
      worst_k = k;
    }
  }
  if (!worst_b) return {StallCause::model, "no other vantage of this event"};
  const Held* at = worst_b->at;
  if (hb.front().kind != HopKind::emit) {
    // The sender is not on this host: a gap in what arrived is the server's or
    // the network's before this host, and cannot be told apart from here.
    const Hop* arrived_b = hb.front().kind == HopKind::arrived ? &hb.front() : nullptr;
    if (worst_b->kind == HopKind::read && arrived_b && worst_b != arrived_b) {
      const TimelineEvent& e = at->rec.timeline[static_cast<std::size_t>(worst_b->index)];
      return {StallCause::client_read, "bytes waited " + ms(e.ts_ns > e.arrived_ns ? e.ts_ns - e.arrived_ns : 0) +
                                           " in the client's socket before the read"};
    }
    return {StallCause::model, "the sender is not traced on this host: nothing arrived for " +
                                   ms(static_cast<std::uint64_t>(std::max<std::int64_t>(prev, 0)))};
  }
  const bool ends_at_local_reader = !hb.empty() && hb.back().kind == HopKind::read && through_final;
  std::pair<StallCause, std::string> out;
  switch (worst_b->kind) {
    case HopKind::emit: {
      out = emit_cause(at, worst_a->index, worst_b->index);
      if (at->gw && out.first == StallCause::model) {
        // A gateway sent late what it had read on time.
        const TimelineEvent& e = at->rec.timeline[static_cast<std::size_t>(worst_b->index)];
        std::uint32_t burst = 0;
        for (int u : at->gw->to_gw) {
          if (u == worst_b->index) ++burst;
        }
        std::uint64_t held = 0;
        for (std::size_t k = worst_k; k-- > 0;) {
          if (hb[k].kind == HopKind::read && hb[k].at == at->gw) {
            held = worst_b->ts > hb[k].ts ? worst_b->ts - hb[k].ts : 0;
            break;
          }
        }
        out = {StallCause::gateway_buffering, "gateway held the event " + ms(held) + " after reading it; " +
                                                  std::to_string(std::max(burst, e.events_in_syscall)) +
                                                  " events left in one send"};
      }
      break;
    }
    case HopKind::read:
      if (at->gw) {
        out = {StallCause::gateway_buffering, "gateway read the event " + ms(static_cast<std::uint64_t>(worst)) +
                                                  " later than the upstream sent it"};
      } else {
        const TimelineEvent& e = at->rec.timeline[static_cast<std::size_t>(worst_b->index)];
        out = {StallCause::client_read,
               e.arrived_ns ? "bytes waited " + ms(e.ts_ns > e.arrived_ns ? e.ts_ns - e.arrived_ns : 0) +
                                  " in the client's socket before the read"
                            : "the client read " + ms(static_cast<std::uint64_t>(worst)) + " after the send"};
      }
      break;
    case HopKind::arrived:
    case HopKind::acked: {
      // The sender of this hop: the previous emit.
      const Held* sender = worst_b->kind == HopKind::acked ? at : nullptr;
      for (std::size_t k = worst_k; !sender && k-- > 0;) {
        if (hb[k].kind == HopKind::emit) sender = hb[k].at;
      }
      const TimestampNs ta = worst_a->ts, tb = worst_b->ts;
      const std::uint64_t gap = tb > ta ? tb - ta : 0;
      const TcpContext empty;
      const TcpContext& tcp = sender ? sender->rec.tcp : empty;
      const std::uint64_t zero = overlap_ns(tcp.zero_window, ta, tb);
      const std::size_t rt = count_in(tcp.retransmit_ns, ta, tb);
      const char* vantage = worst_b->kind == HopKind::acked ? "ACK" : "arrival";
      const Hop* send_hop = nullptr;
      for (std::size_t k = worst_k + 1; k-- > 0;) {
        if (hb[k].kind == HopKind::emit) {
          send_hop = &hb[k];
          break;
        }
      }
      const bool held_by_kernel =
          send_hop && send_hop->at->rec.timeline[static_cast<std::size_t>(send_hop->index)].more;
      if (held_by_kernel && sender && sender->gw) {
        out = {StallCause::gateway_buffering, "gateway sent with MSG_MORE: the kernel held the bytes " +
                                                  ms(static_cast<std::uint64_t>(worst)) + " before they left"};
      } else if (gap && zero * 10 >= gap * 3) {
        out = {ends_at_local_reader ? StallCause::client_read : StallCause::backpressure,
               "receiver's window 0 for " + ms(zero)};
      } else if (rt > 0) {
        out = {StallCause::network, std::string(vantage) + " " + ms(static_cast<std::uint64_t>(worst)) +
                                        " late; " + std::to_string(rt) + " retransmissions"};
      } else {
        out = {StallCause::network, std::string(vantage) + " " + ms(static_cast<std::uint64_t>(worst)) +
                                        " later than the send (srtt " + std::to_string(tcp.srtt_us / 1000) +
                                        " ms)"};
      }
      break;
    }
  }
  // Seen from the client, a sender held back by a local reader that did not
  // drain is the reader's doing.
  if (through_final && out.first == StallCause::backpressure && ends_at_local_reader) {
    out = {StallCause::client_read, "the reader did not drain: " + out.second};
  }
  return out;
}

// Where one event spent the time between its emit and its delivery: the hop
// that added most of it.
std::pair<StallCause, std::string> PathJoiner::delay_cause(const std::vector<Hop>& path) {
  std::size_t worst_k = 0;
  std::uint64_t worst = 0;
  for (std::size_t k = 1; k < path.size(); ++k) {
    const std::uint64_t d = path[k].ts > path[k - 1].ts ? path[k].ts - path[k - 1].ts : 0;
    if (d > worst) {
      worst = d;
      worst_k = k;
    }
  }
  if (worst_k == 0) return {StallCause::none, ""};
  const Hop& hop = path[worst_k];
  const Hop* sent = nullptr;
  for (std::size_t k = worst_k + 1; k-- > 0;) {
    if (path[k].kind == HopKind::emit) {
      sent = &path[k];
      break;
    }
  }
  const bool final_reader = path.back().kind == HopKind::read;
  switch (hop.kind) {
    case HopKind::emit: {
      const TimelineEvent& e = hop.at->rec.timeline[static_cast<std::size_t>(hop.index)];
      const TcpContext& tcp = hop.at->rec.tcp;
      const TimestampNs from = path[worst_k - 1].ts;
      if (overlap_ns(tcp.zero_window, from, hop.ts) * 10 >= worst * 3 || e.syscall_ns * 2 >= worst) {
        return {final_reader ? StallCause::client_read : StallCause::backpressure,
                "the gateway's send waited " + ms(e.syscall_ns) + " for its reader"};
      }
      return {StallCause::gateway_buffering, "gateway held it " + ms(worst) + " after reading it; " +
                                                 std::to_string(e.events_in_syscall) + " events in that send"};
    }
    case HopKind::read:
      if (hop.at->gw) return {StallCause::gateway_buffering, "gateway read it " + ms(worst) + " after it arrived"};
      return {StallCause::client_read, "it waited " + ms(worst) + " in the client's socket"};
    case HopKind::arrived:
    case HopKind::acked: {
      if (sent && sent->at->gw && sent->at->rec.timeline[static_cast<std::size_t>(sent->index)].more) {
        return {StallCause::gateway_buffering,
                "gateway sent with MSG_MORE: the kernel held the bytes " + ms(worst) + " before they left"};
      }
      const TcpContext& tcp = sent ? sent->at->rec.tcp : TcpContext{};
      if (overlap_ns(tcp.zero_window, path[worst_k - 1].ts, hop.ts) * 10 >= worst * 3) {
        return {final_reader ? StallCause::client_read : StallCause::backpressure, "receiver's window was 0"};
      }
      return {StallCause::network, std::string(hop.kind == HopKind::acked ? "ACK" : "arrival") + " " + ms(worst) +
                                       " after the send"};
    }
  }
  return {StallCause::none, ""};
}

void PathJoiner::finish_group(const std::vector<Held*>& group) {
  // 1. Every vantage on every event.
  std::vector<Hop> path;  // one event's hops; storage reused across events
  for (Held* h : group) {
    StreamRecord& r = h->rec;
    const bool acked = r.role == Role::server && r.tcp.signals;
    if (!h->peer && !h->gw && !acked) continue;  // nothing seen past this socket
    r.path_times.assign(r.timeline.size(), PathTimes{});
    for (std::size_t i = 0; i < r.timeline.size(); ++i) {
      const TimelineEvent& e = r.timeline[i];
      PathTimes& pt = r.path_times[i];
      const int ii = static_cast<int>(i);
      if (!h->peer && !h->gw) {
        pt.delivered_ns = e.acked_ns;  // the only hop past this socket
        continue;
      }
      if (h->peer) {
        if (const int j = mapped(h->to_peer, ii); j >= 0) {
          const TimelineEvent& o = h->peer->rec.timeline[static_cast<std::size_t>(j)];
          pt.peer_ns = o.ts_ns;
          if (r.role == Role::server) pt.peer_arrived_ns = o.arrived_ns;
        }
      }
      if (h->gw) {
        if (const int k = mapped(h->to_gw, ii); k >= 0) {
          const TimestampNs other = h->gw->rec.timeline[static_cast<std::size_t>(k)].ts_ns;
          if (r.role == Role::client) pt.downstream_ns = other;
          else pt.upstream_ns = other;
        }
      }
      hops_into(h, ii, path);
      if (!path.empty() && path.back().kind != HopKind::emit) pt.delivered_ns = path.back().ts;
    }
    // TCP delivers in order: an event was delivered no later than the next one.
    for (std::size_t i = r.path_times.size(); i-- > 1;) {
      TimestampNs& mine = r.path_times[i - 1].delivered_ns;
      const TimestampNs next = r.path_times[i].delivered_ns;
      if (next && (!mine || mine > next)) mine = next;
    }
    if (h->peer) r.peer_stream_id = stream_id(h->peer->rec);
  }

  // 2. Gateway legs.
  for (Held* h : group) {
    if (!h->gw) continue;
    StreamRecord& r = h->rec;
    const Held* up = r.role == Role::client ? h : h->gw;
    const Held* down = r.role == Role::client ? h->gw : h;
    GatewayLeg g;
    g.leg = r.role == Role::client ? "upstream" : "downstream";
    g.peer_stream_id = stream_id(h->gw->rec);
    g.upstream = up->rec.conn.remote.to_string();
    g.downstream = down->rec.conn.remote.to_string();
    std::vector<std::uint64_t> delays;
    std::map<TimestampNs, std::uint32_t> per_send;  // events of one downstream send share its time
    for (std::size_t j = 0; j < up->to_gw.size(); ++j) {
      const int k = up->to_gw[j];
      if (k < 0) continue;
      const TimestampNs read = up->rec.timeline[j].ts_ns;
      const TimestampNs sent = down->rec.timeline[static_cast<std::size_t>(k)].ts_ns;
      delays.push_back(sent > read ? sent - read : 0);
      ++per_send[sent];
    }
    for (int k : down->to_gw) g.events_matched += k >= 0 ? 1 : 0;
    g.delay_p50_ns = percentile(delays, 50);
    g.delay_p99_ns = percentile(delays, 99);
    g.delay_max_ns = percentile(delays, 100);
    for (const auto& [t, n] : per_send) g.max_events_per_send = std::max(g.max_events_per_send, n);
    for (const TimelineEvent& e : down->rec.timeline)
      g.max_events_per_send = std::max(g.max_events_per_send, e.events_in_syscall);
    r.gateway = std::make_shared<const GatewayLeg>(std::move(g));
  }

  // 3. Causes of each record's own stalls, and the client-observed view.
  for (Held* h : group) {
    StreamRecord& r = h->rec;
    std::vector<int> content;
    for (std::size_t i = 0; i < r.timeline.size(); ++i) {
      if (r.timeline[i].kind == EventKind::content) content.push_back(static_cast<int>(i));
    }
    for (Stall& st : r.metrics.stalls) {
      if (st.after_event + 1 >= content.size()) continue;
      auto [cause, evidence] = diagnose(h, content[st.after_event], content[st.after_event + 1], false);
      st.cause = cause;
      st.evidence = std::move(evidence);
    }
    if (r.role != Role::server || content.empty() || r.path_times.empty()) continue;
    std::vector<TimestampNs> delivered;
    for (int i : content) {
      const TimestampNs t = r.path_times[static_cast<std::size_t>(i)].delivered_ns;
      if (!t) break;
      delivered.push_back(t);
    }
    if (delivered.empty()) continue;
    const std::vector<Hop> first = hops(h, content.front());
    Delivery d;
    d.vantage = first.back().kind == HopKind::read ? "read" : "acked";
    for (const Hop& hop : first) {
      if (hop.kind != HopKind::emit && hop.kind != HopKind::read) continue;
      const std::string name = hop.at->rec.conn.comm.empty() ? "?" : hop.at->rec.conn.comm;
      const std::string label = hop.at->gw ? "gateway(" + name + ")" : name;
      if (d.path.empty() || d.path.substr(d.path.rfind('>') + 1) != label) {
        d.path += (d.path.empty() ? "" : ">") + label;
      }
    }
    if (d.vantage == "acked") d.path += ">remote";
    const bool has_request = r.request_end_ns != 0 && !r.joined_midstream;
    TimestampNs last = r.path_times.back().delivered_ns ? r.path_times.back().delivered_ns : delivered.back();
    d.metrics = metrics_of(delivered, has_request ? r.request_end_ns : 0, last, r.metrics.tokens, config_,
                           content_gaps_observed(r.timeline));
    d.metrics.token_source = r.metrics.token_source;
    d.metrics.events = r.metrics.events;
    for (Stall& st : d.metrics.stalls) {
      if (st.after_event + 1 >= content.size()) continue;
      auto [cause, evidence] = diagnose(h, content[st.after_event], content[st.after_event + 1], true);
      st.cause = cause;
      st.evidence = std::move(evidence);
    }
    if (d.metrics.ttft_ns && r.metrics.ttft_ns)
      d.ttft_added_ns = *d.metrics.ttft_ns > *r.metrics.ttft_ns ? *d.metrics.ttft_ns - *r.metrics.ttft_ns : 0;
    if (d.metrics.itl_p99_ns && r.metrics.itl_p99_ns)
      d.itl_p99_added_ns = static_cast<std::int64_t>(*d.metrics.itl_p99_ns) - static_cast<std::int64_t>(*r.metrics.itl_p99_ns);
    if (d.metrics.longest_pause_ns && r.metrics.longest_pause_ns)
      d.longest_pause_added_ns =
          static_cast<std::int64_t>(*d.metrics.longest_pause_ns) - static_cast<std::int64_t>(*r.metrics.longest_pause_ns);
    // Bursts: token events delivered within 1 ms of the one before.
    std::uint32_t run = 1;
    d.max_burst = 1;
    for (std::size_t i = 1; i < delivered.size(); ++i) {
      run = delivered[i] - std::min(delivered[i], delivered[i - 1]) <= 1'000'000 ? run + 1 : 1;
      d.max_burst = std::max(d.max_burst, run);
    }
    std::map<StallCause, std::uint32_t> path_stalls;
    for (const Stall& st : d.metrics.stalls) {
      if (st.cause != StallCause::model && st.cause != StallCause::none) ++path_stalls[st.cause];
    }
    const bool ttft_hurt = d.ttft_added_ns && *d.ttft_added_ns >= config_.stall_floor_ns;
    if (ttft_hurt) std::tie(d.ttft_cause, d.ttft_evidence) = delay_cause(first);
    d.degraded_by_path = !path_stalls.empty() || ttft_hurt;
    if (d.degraded_by_path) {
      std::string why;
      for (const auto& [cause, n] : path_stalls) {
        why += (why.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(to_string(cause)) + " stall" +
               (n > 1 ? "s" : "");
      }
      if (ttft_hurt) {
        why += (why.empty() ? "" : ", ") + std::string("TTFT +") + ms(*d.ttft_added_ns) + " (" +
               std::string(to_string(d.ttft_cause)) + ")";
      }
      d.degraded_reason = why;
    }
    r.delivery = std::make_shared<const Delivery>(std::move(d));
  }
}

}  // namespace infertap::core
