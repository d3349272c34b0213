#include "core/path/joiner.h"

#include <algorithm>

#include "core/conn/tcp.h"
#include "core/path/delivery.h"
#include "core/path/matching.h"
#include "core/path/vantages.h"

namespace infertap::core {
namespace {

bool same_endpoint(const Endpoint& a, const Endpoint& b) {
  return a.port == b.port && a.family == b.family && a.addr == b.addr;
}

}  // namespace

PathJoiner::PathJoiner(const PipelineConfig& config) : config_(config) {}

std::vector<StreamRecord> PathJoiner::add(StreamRecord&& record, TimestampNs now, const PathPartners& partners) {
  std::vector<StreamRecord> out;
  if (waiting_.size() >= config_.max_held_records) {
    // Bounded memory: the oldest wait ends early.
    try_release(waiting_.front(), now, nullptr, out);
  }
  Waiting& h = waiting_.emplace_back();
  h.rec = std::move(record);
  h.deadline = now + config_.path_settle_ns;
  h.cap = now + config_.stream_idle_timeout_ns;
  h.want_peer = partners.peer(h.rec.conn.remote, h.rec.conn.local) != PathPartners::Activity::none;
  link(h);
  h.want_gateway = !h.gateway && h.rec.role != Role::unknown &&
                   partners.gateway_leg(h.rec) != PathPartners::Activity::none;
  try_release(h, now, &partners, out);
  return out;
}

// ---- linking ----------------------------------------------------------------

void PathJoiner::link(Waiting& h) {
  for (Waiting& o : waiting_) {
    if (&o == &h) continue;
    if (!link_peer(h, o)) link_gateway_legs(h, o);
  }
}

// The other end of this TCP connection: reversed 4-tuple, matching events.
bool PathJoiner::link_peer(Waiting& h, Waiting& o) {
  const StreamRecord& r = h.rec;
  if (h.peer || o.peer || o.rec.role == r.role || !same_endpoint(o.rec.conn.local, r.conn.remote) ||
      !same_endpoint(o.rec.conn.remote, r.conn.local))
    return false;
  std::vector<int> fwd = match_tcp_ends(r, o.rec);
  if (count_matched(fwd) == 0 && !(r.timeline.empty() && o.rec.timeline.empty())) return false;
  h.peer = &o;
  o.peer = &h;
  h.to_peer = std::move(fwd);
  o.to_peer = match_tcp_ends(o.rec, r);
  return true;
}

// A gateway's other leg: same process, opposite role, same events.
void PathJoiner::link_gateway_legs(Waiting& h, Waiting& o) {
  const StreamRecord& r = h.rec;
  if (h.gateway || o.gateway || o.rec.role == r.role || o.rec.conn.pid != r.conn.pid || r.role == Role::unknown ||
      o.rec.role == Role::unknown)
    return;
  Waiting& up = r.role == Role::client ? h : o;
  Waiting& down = r.role == Role::client ? o : h;
  const bool same_id = !up.rec.response_id.empty() && up.rec.response_id == down.rec.response_id;
  if (!up.rec.response_id.empty() && !down.rec.response_id.empty() && !same_id) return;
  std::vector<int> u2d = match_by_content(up.rec, down.rec);
  const int matched = count_matched(u2d);
  const int needed = std::min<int>(3, static_cast<int>(up.rec.timeline.size()));
  if (matched == 0 || (matched < needed && !same_id)) return;
  up.gateway = &down;
  down.gateway = &up;
  down.to_gateway.assign(down.rec.timeline.size(), -1);
  for (std::size_t j = 0; j < u2d.size(); ++j) {
    if (u2d[j] >= 0) down.to_gateway[static_cast<std::size_t>(u2d[j])] = static_cast<int>(j);
  }
  // An upstream event the downstream capture missed (inside a burst larger
  // than the capture window) left no later than the next one found: TCP and
  // the gateway keep the order.
  int next = -1;
  for (std::size_t j = u2d.size(); j-- > 0;) {
    if (u2d[j] >= 0) next = u2d[j];
    else u2d[j] = next;
  }
  up.to_gateway = std::move(u2d);
}

// ---- waiting ----------------------------------------------------------------

bool PathJoiner::satisfied(const Waiting& h) const {
  if (h.want_peer && !h.peer) return false;
  if (h.want_gateway && !h.gateway) return false;
  // A sender waits for the ACK of its last event when ACKs are being seen.
  if (h.rec.role == Role::server && h.rec.tcp.signals && !h.closed && !h.rec.timeline.empty()) {
    const TimelineEvent& last = h.rec.timeline.back();
    if (last.end_seq && !last.acked_ns && !h.peer) return false;
  }
  return true;
}

// Past the settle time, a record keeps waiting only for a partner that is
// still streaming (a slow reader, a gateway draining to a slow client).
bool PathJoiner::waiting_for_streaming_partner(const Waiting& h, TimestampNs now, const PathPartners& partners) const {
  using Activity = PathPartners::Activity;
  if (now >= h.cap) return false;
  const bool peer_streaming =
      h.want_peer && !h.peer && partners.peer(h.rec.conn.remote, h.rec.conn.local) == Activity::streaming;
  const bool leg_streaming = h.want_gateway && !h.gateway && partners.gateway_leg(h.rec) == Activity::streaming;
  return peer_streaming || leg_streaming;
}

PathJoiner::Group PathJoiner::group_of(Waiting& h) {
  Group group{&h};
  for (std::size_t i = 0; i < group.size(); ++i) {
    for (PathNode* n : {group[i]->peer, group[i]->gateway}) {
      auto* w = static_cast<Waiting*>(n);  // every node is a Waiting
      if (w && std::find(group.begin(), group.end(), w) == group.end()) group.push_back(w);
    }
  }
  return group;
}

// `partners` null: release now, whatever is missing.
bool PathJoiner::ready(const Group& group, TimestampNs now, const PathPartners* partners) const {
  if (!partners) return true;
  if (std::all_of(group.begin(), group.end(), [&](const Waiting* m) { return satisfied(*m); })) return true;
  const TimestampNs deadline =
      (*std::max_element(group.begin(), group.end(), [](const Waiting* a, const Waiting* b) {
        return a->deadline < b->deadline;
      }))->deadline;
  if (now < deadline) return false;
  return std::none_of(group.begin(), group.end(),
                      [&](const Waiting* m) { return waiting_for_streaming_partner(*m, now, *partners); });
}

void PathJoiner::try_release(Waiting& h, TimestampNs now, const PathPartners* partners, std::vector<StreamRecord>& out) {
  const Group group = group_of(h);
  if (!ready(group, now, partners)) return;
  finish(group);
  if (group.size() > 1) joined_ += group.size();
  // Release in the order the records finished.
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (std::find(group.begin(), group.end(), &*it) == group.end()) {
      ++it;
      continue;
    }
    out.push_back(std::move(it->rec));
    it = waiting_.erase(it);
  }
}

namespace {

// The most upstream record of a group: from any member, the sender of its
// connection (a reader's peer), then the gateway's upstream leg of a sender
// that relays, until neither is there. The links form a chain, so every
// member reaches the same one.
const PathNode* path_root_of(const PathNode* node) {
  for (std::size_t steps = 0; steps < 8; ++steps) {  // a path on one host has at most four records
    const PathNode* up = node->rec.role == Role::client ? node->peer : node->gateway;
    if (!up || (node->rec.role == Role::client && up->rec.role != Role::server)) break;
    node = up;
  }
  return node;
}

}  // namespace

// The path stages, in order: each needs what the one before found. They
// read the records and fill each node's view, which is attached to its
// record once, whole, when the group is released.
void PathJoiner::finish(const Group& group) {
  if (group.size() > 1) {
    const std::string root = stream_id(path_root_of(group.front())->rec);
    for (Waiting* h : group) h->view.root = root;
  }
  std::vector<Hop> scratch;  // one event's hops; storage reused across events
  for (Waiting* h : group) take_unix_arrivals(*h);
  for (Waiting* h : group) fill_path_times(*h, scratch);
  for (Waiting* h : group) {
    if (h->gateway) h->view.gateway = gateway_leg_of(*h);
  }
  for (Waiting* h : group) {
    h->view.stall_causes = diagnose_own_stalls(*h);
    h->view.delivery = delivery_of(*h, config_);
  }
  for (Waiting* h : group) h->rec.path_view = std::make_shared<const PathView>(std::move(h->view));
}

// ---- signals and releases -----------------------------------------------------

void PathJoiner::on_signal(std::uint64_t sock_id, std::uint64_t generation, const capture::DeliverySignal& signal) {
  for (Waiting& h : waiting_) {
    if (h.rec.conn.sock_id != sock_id || h.rec.conn.generation != generation) continue;
    TcpContext& tcp = h.rec.tcp;
    note_signal(tcp, signal);
    if (signal.kind != capture::DeliverySignal::Kind::ack || h.rec.role != Role::server) continue;
    std::size_t from = 0;  // events acknowledged before stay as they were
    mark_acked(h.rec.timeline, from, signal.seq, signal.ts_ns);
    track_window(tcp.zero_window_since, signal, &tcp);
  }
}

std::vector<StreamRecord> PathJoiner::on_closed(std::uint64_t sock_id, std::uint64_t generation, TimestampNs now,
                                                const PathPartners& partners) {
  bool any = false;
  for (Waiting& h : waiting_) {
    if (h.rec.conn.sock_id == sock_id && h.rec.conn.generation == generation) h.closed = any = true;
  }
  return any ? release_due(now, partners) : std::vector<StreamRecord>{};
}

std::vector<StreamRecord> PathJoiner::release_due(TimestampNs now, const PathPartners& partners) {
  std::vector<StreamRecord> out;
  // try_release erases group members: restart after each release.
  bool again = true;
  while (again) {
    again = false;
    for (Waiting& h : waiting_) {
      const std::size_t before = waiting_.size();
      try_release(h, now, &partners, out);
      if (waiting_.size() != before) {
        again = true;
        break;
      }
    }
  }
  return out;
}

std::vector<StreamRecord> PathJoiner::release_all() {
  std::vector<StreamRecord> out;
  while (!waiting_.empty()) try_release(waiting_.front(), 0, nullptr, out);
  return out;
}

}  // namespace infertap::core
