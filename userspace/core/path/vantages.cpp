#include "core/path/vantages.h"

#include <algorithm>
#include <map>

#include "base/percentile.h"
#include "core/path/diagnosis.h"

namespace infertap::core {

std::vector<int> content_events(const std::vector<TimelineEvent>& timeline) {
  std::vector<int> content;
  for (std::size_t i = 0; i < timeline.size(); ++i) {
    if (timeline[i].kind == protocol::EventKind::content) content.push_back(static_cast<int>(i));
  }
  return content;
}

namespace {

// Across a link (a connection's two ends, a gateway's two legs) a body
// offset names the same byte on both sides when both records start at the
// body's first event and it is the same event: neither joined mid-stream,
// the gateway passed the body through unchanged, no side decoded it. Only a
// process that may be a gateway hashes its events: a hash is compared when
// both sides have one.
bool positions_agree(const StreamRecord& a, const StreamRecord& b) {
  if (a.joined_midstream || b.joined_midstream || a.timeline.empty() || b.timeline.empty()) return false;
  if (a.content_encoding != protocol::ContentEncoding::identity || b.content_encoding != a.content_encoding) return false;
  const TimelineEvent &x = a.timeline.front(), &y = b.timeline.front();
  const bool hashes_agree = !x.data_hash || !y.data_hash || x.data_hash == y.data_hash;
  return x.offset == y.offset && x.wire_bytes == y.wire_bytes && hashes_agree;
}

// The end client a node's bytes go on to (through the reader of a sender and
// the downstream leg of a gateway), when body offsets agree all the way.
const PathNode* end_reader(const PathNode* node) {
  const PathNode* start = node;
  for (int step = 0; step < 8; ++step) {
    const PathNode* next = node->rec.role == Role::server ? node->peer : node->gateway;
    if (!next) break;
    if (!positions_agree(node->rec, next->rec)) return nullptr;
    node = next;
  }
  return node != start && node->rec.role == Role::client && !node->gateway ? node : nullptr;
}

// When `reader` read the body byte just before offset `end`: the read that
// completed the event holding it, or the call whose uncopied run held it
// (0: neither is known).
TimestampNs read_at_position(const StreamRecord& reader, std::uint64_t end) {
  if (end == 0) return 0;
  const std::uint64_t byte = end - 1;
  const auto& tl = reader.timeline;
  auto it = std::partition_point(tl.begin(), tl.end(), [&](const TimelineEvent& e) { return e.offset + e.wire_bytes <= byte; });
  if (it != tl.end() && it->offset <= byte) return it->ts_ns;
  for (const BodyHole& h : reader.body_holes) {
    if (h.offset <= byte && byte < h.offset + h.bytes) return h.ts;
  }
  return 0;
}

// An event whose walk stopped short of the end client (its bytes went by in
// a call the capture copied only the head and tail of, at the gateway and at
// the client): the end client's read that covered its last byte, found by
// body position from the last record that saw it.
TimestampNs delivered_by_position(const Hop& stop) {
  const PathNode* reader = end_reader(stop.at);
  if (!reader) return 0;
  const TimelineEvent& e = stop.at->rec.timeline[static_cast<std::size_t>(stop.index)];
  const TimestampNs t = read_at_position(reader->rec, e.offset + e.wire_bytes);
  return t >= stop.ts ? t : 0;  // not before the place it was last seen
}

// The other places event i of `node` was seen, and where it ended up.
PathTimes times_of(const PathNode& node, int i, std::vector<Hop>& scratch) {
  const StreamRecord& r = node.rec;
  PathTimes pt;
  if (!node.peer && !node.gateway) {
    pt.delivered_ns = r.timeline[static_cast<std::size_t>(i)].acked_ns;  // the only hop past this socket
    return pt;
  }
  if (const int j = node.peer ? mapped(node.to_peer, i) : -1; j >= 0) {
    const TimelineEvent& o = node.peer->rec.timeline[static_cast<std::size_t>(j)];
    pt.peer_ns = o.ts_ns;
    if (r.role == Role::server) pt.peer_arrived_ns = arrived_at(*node.peer, j);
  }
  if (const int k = node.gateway ? mapped(node.to_gateway, i) : -1; k >= 0) {
    const TimestampNs other = node.gateway->rec.timeline[static_cast<std::size_t>(k)].ts_ns;
    if (r.role == Role::client) pt.downstream_ns = other;
    else pt.upstream_ns = other;
  }
  hops_of(&node, i, scratch);
  if (reached_end(scratch)) pt.delivered_ns = scratch.back().ts;
  else if (!scratch.empty()) pt.delivered_ns = delivered_by_position(scratch.back());
  return pt;
}

}  // namespace

void take_unix_arrivals(PathNode& node) {
  const StreamRecord& r = node.rec;
  if (r.conn.transport != Transport::unix_stream || r.role != Role::client || !node.peer) return;
  node.inferred_arrival.assign(r.timeline.size(), 0);
  for (std::size_t i = 0; i < r.timeline.size(); ++i) {
    const int j = mapped(node.to_peer, static_cast<int>(i));
    const TimelineEvent& e = r.timeline[i];
    if (j < 0 || e.arrived_ns) continue;
    node.inferred_arrival[i] = std::min(e.ts_ns, node.peer->rec.timeline[static_cast<std::size_t>(j)].ts_ns);
  }
}

void fill_path_times(PathNode& node, std::vector<Hop>& scratch) {
  const StreamRecord& r = node.rec;
  if (node.peer) node.view.peer_stream_id = stream_id(node.peer->rec);
  const bool acked = r.role == Role::server && r.tcp.signals;
  if (!node.peer && !node.gateway && !acked) return;  // nothing seen past this socket
  std::vector<PathTimes>& times = node.view.times;
  times.resize(r.timeline.size());
  for (std::size_t i = 0; i < r.timeline.size(); ++i) {
    times[i] = times_of(node, static_cast<int>(i), scratch);
    if (!r.timeline[i].arrived_ns) times[i].arrived_ns = arrived_at(node, static_cast<int>(i));
  }
  // TCP delivers in order: an event was delivered no later than the next one.
  for (std::size_t i = times.size(); i-- > 1;) {
    TimestampNs& mine = times[i - 1].delivered_ns;
    const TimestampNs next = times[i].delivered_ns;
    if (next && (!mine || mine > next)) mine = next;
  }
}

GatewayLeg gateway_leg_of(const PathNode& node) {
  const StreamRecord& r = node.rec;
  const PathNode* up = r.role == Role::client ? &node : node.gateway;
  const PathNode* down = r.role == Role::client ? node.gateway : &node;
  GatewayLeg g;
  g.leg = r.role == Role::client ? GatewayLeg::Side::upstream : GatewayLeg::Side::downstream;
  g.peer_stream_id = stream_id(node.gateway->rec);
  g.upstream = up->rec.conn.remote.to_string();
  g.downstream = down->rec.conn.remote.to_string();
  std::vector<std::uint64_t> delays;
  std::map<TimestampNs, std::uint32_t> per_send;  // events of one downstream send share its time
  for (std::size_t j = 0; j < up->to_gateway.size(); ++j) {
    const int k = up->to_gateway[j];
    if (k < 0) continue;
    const TimestampNs read = up->rec.timeline[j].ts_ns;
    const TimestampNs sent = down->rec.timeline[static_cast<std::size_t>(k)].ts_ns;
    delays.push_back(sent > read ? sent - read : 0);
    ++per_send[sent];
  }
  for (int k : down->to_gateway) g.events_matched += k >= 0 ? 1 : 0;
  g.delay_p50_ns = base::percentile(delays, 50);
  g.delay_p99_ns = base::percentile(delays, 99);
  g.delay_max_ns = base::percentile(delays, 100);
  for (const auto& [t, n] : per_send) g.max_events_per_send = std::max(g.max_events_per_send, n);
  for (const TimelineEvent& e : down->rec.timeline)
    g.max_events_per_send = std::max(g.max_events_per_send, e.events_in_syscall);
  return g;
}

std::vector<StallVerdict> diagnose_own_stalls(const PathNode& node) {
  const std::vector<int> content = content_events(node.rec.timeline);
  std::vector<StallVerdict> verdicts;
  verdicts.reserve(node.rec.metrics.stalls.size());
  for (const Stall& st : node.rec.metrics.stalls) {
    if (st.after_event + 1 >= content.size()) verdicts.emplace_back();  // its events fell past the timeline
    else verdicts.push_back(gap_cause(&node, content[st.after_event], content[st.after_event + 1], false));
  }
  return verdicts;
}

}  // namespace infertap::core
