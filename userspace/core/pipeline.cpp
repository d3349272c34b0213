#include "core/pipeline.h"

#include <malloc.h>

#include <algorithm>
#include <vector>

#include "core/connection.h"

namespace infertap::core {
namespace {

constexpr std::uint8_t kTcpClose = 7;  // include/net/tcp_states.h

Endpoint endpoint(const std::uint8_t (&addr)[16], std::uint16_t port, std::uint16_t family) {
  Endpoint e;
  std::copy(std::begin(addr), std::end(addr), e.addr.begin());
  e.port = port;
  e.family = family;
  return e;
}

std::string tuple_key(const Endpoint& local, const Endpoint& remote) {
  std::string k;
  k.reserve(40);
  for (const Endpoint* e : {&local, &remote}) {
    k.append(reinterpret_cast<const char*>(e->addr.data()), e->addr.size());
    k.append(reinterpret_cast<const char*>(&e->port), sizeof e->port);
  }
  return k;
}

}  // namespace

void keep_freed_heap_for_reuse() {
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_TOP_PAD, 8 << 20);
  // Long streams' timelines pass 128 KiB (glibc's default, fixed once the
  // trim threshold is set): served by mmap, every one would be faulted in
  // page by page and unmapped again. Below this they reuse the heap.
  mallopt(M_MMAP_THRESHOLD, 8 << 20);
}

Pipeline::Pipeline(PipelineConfig config, RecordSink sink, MuteSocket mute, CgroupLookup cgroup_lookup,
                   CommLookup comm_lookup)
    : config_(config),
      sink_(std::move(sink)),
      mute_(std::move(mute)),
      cgroup_lookup_(std::move(cgroup_lookup)),
      comm_lookup_(std::move(comm_lookup)),
      path_(
          config_, [this](StreamRecord&& r) { if (sink_) sink_(std::move(r)); },
          [this](const Endpoint& local, const Endpoint& remote) { return peer_activity(local, remote); },
          [this](const StreamRecord& r) { return gateway_partner_active(r); }) {}

Pipeline::~Pipeline() = default;

void Pipeline::on_record(std::span<const std::uint8_t> record) {
  const capture::DecodeResult decoded = capture::decode(record);
  if (decoded.path) {
    on_path(*decoded.path);
    return;
  }
  if (!decoded.event) {
    ++counters_.decode_errors;
    return;
  }
  on_event(*decoded.event);
}

Connection* Pipeline::connection_for(const capture::IoEvent& event) {
  const itap_event& h = event.h();
  if (!refused_.empty()) {
    auto r = refused_.find(h.sock_id);
    if (r != refused_.end()) {
      // Events already in the ring when the mute landed; a new socket at the
      // same address is judged afresh.
      if (!(h.flags & ITAP_F_NEW_SOCKET)) return nullptr;
      refused_.erase(r);
    }
  }
  auto it = connections_.find(h.sock_id);
  if (it != connections_.end()) {
    // The kernel saw this socket address as new: the old connection closed
    // without us hearing of it (state event lost), and the address was reused.
    if (!(h.flags & ITAP_F_NEW_SOCKET)) return it->second.get();
    close_connection(h.sock_id, h.ts_ns, StreamEnd::connection_closed);
  }
  if (connections_.size() >= config_.max_connections) evict_oldest(h.ts_ns);
  ConnIdentity id;
  id.sock_id = h.sock_id;
  id.generation = ++next_generation_;
  id.pid = h.pid;
  id.fd = h.fd;
  id.comm = std::string(event.comm());
  if (id.comm.empty() && comm_lookup_) id.comm = comm_lookup_(h.pid);
  id.cgroup_id = h.cgroup_id;
  id.cgroup_path = cgroup_path(h.pid);
  id.local = endpoint(h.local_addr, h.local_port, h.family);
  id.remote = endpoint(h.remote_addr, h.remote_port, h.family);
  id.first_seen_ns = h.ts_ns;
  if (admit_ && !admit_(id)) {
    ++counters_.connections_refused;
    stop_following(h.sock_id);
    return nullptr;
  }
  ++counters_.connections_opened;
  const std::string key = tuple_key(id.local, id.remote);
  const std::uint32_t pid = id.pid;
  auto conn = std::make_unique<Connection>(std::move(id), *this);
  Connection* raw = conn.get();
  by_tuple_[key] = raw;
  by_pid_[pid].push_back(raw);
  connections_.emplace(h.sock_id, std::move(conn));
  return raw;
}

void Pipeline::on_path(const capture::PathSignal& signal) {
  const itap_path_event& p = signal.h();
  ++counters_.path_signals;
  auto it = connections_.find(p.sock_id);
  if (it == connections_.end()) return;
  it->second->on_path(signal);
  path_.on_signal(p.sock_id, it->second->identity().generation, p);
}

void Pipeline::on_event(const capture::IoEvent& event) {
  const itap_event& h = event.h();
  if (h.kind == ITAP_EV_STATE) {
    ++counters_.state_events;
    auto it = connections_.find(h.sock_id);
    if (it == connections_.end()) {
      if (h.new_state == kTcpClose) refused_.erase(h.sock_id);
      return;
    }
    if (h.new_state == kTcpClose) {
      close_connection(h.sock_id, h.ts_ns, StreamEnd::connection_closed);
    } else {
      it->second->on_state(event);
    }
    return;
  }
  ++counters_.data_events;
  Connection* conn = connection_for(event);
  if (!conn) return;
  if (h.arrived_ns) {
    // An arrival the kernel carried on this read instead of sending it alone:
    // it happened before the read, so it is handled first, as if it had.
    itap_path_event arrival{};
    arrival.ts_ns = h.arrived_ns;
    arrival.sock_id = h.sock_id;
    arrival.kind = ITAP_EV_PATH;
    arrival.path_kind = ITAP_PATH_ARRIVED;
    arrival.seq = h.arrived_seq;
    on_path(capture::PathSignal{&arrival});
  }
  conn->on_data(event);
}

void Pipeline::close_connection(std::uint64_t sock_id, TimestampNs now, StreamEnd reason) {
  auto it = connections_.find(sock_id);
  if (it == connections_.end()) return;
  // Move out first: closing emits records, and the sink must see a consistent table.
  std::unique_ptr<Connection> conn = std::move(it->second);
  connections_.erase(it);
  conn->close(now, reason);
  ++counters_.connections_closed;
  const ConnIdentity& id = conn->identity();
  if (auto t = by_tuple_.find(tuple_key(id.local, id.remote)); t != by_tuple_.end() && t->second == conn.get())
    by_tuple_.erase(t);
  if (conn->role() != Role::unknown) {
    if (auto r = roles_by_pid_.find(id.pid); r != roles_by_pid_.end()) {
      auto& n = r->second[static_cast<std::size_t>(conn->role())];
      if (n > 0) --n;
      if (r->second == std::array<std::uint32_t, 3>{}) roles_by_pid_.erase(r);
    }
  }
  if (auto p = by_pid_.find(id.pid); p != by_pid_.end()) {
    std::erase(p->second, conn.get());
    if (p->second.empty()) by_pid_.erase(p);
  }
  path_.on_closed(sock_id, id.generation, now);
}

void Pipeline::role_decided(std::uint32_t pid, Role role) { ++roles_by_pid_[pid][static_cast<std::size_t>(role)]; }

bool Pipeline::process_has_other_role(std::uint32_t pid, Role role) const {
  auto it = roles_by_pid_.find(pid);
  if (it == roles_by_pid_.end()) return false;
  for (std::size_t r = 1; r < it->second.size(); ++r) {
    if (r != static_cast<std::size_t>(role) && it->second[r] > 0) return true;
  }
  return false;
}

PathJoiner::Activity Pipeline::peer_activity(const Endpoint& local, const Endpoint& remote) const {
  auto it = by_tuple_.find(tuple_key(local, remote));
  if (it == by_tuple_.end()) return PathJoiner::Activity::none;
  return it->second->active_stream() ? PathJoiner::Activity::streaming : PathJoiner::Activity::idle;
}

PathJoiner::Activity Pipeline::gateway_partner_active(const StreamRecord& record) const {
  using Activity = PathJoiner::Activity;
  auto it = by_pid_.find(record.conn.pid);
  if (it == by_pid_.end()) return Activity::none;
  // The first few events identify a stream: chunk ids and timestamps differ
  // between streams.
  std::vector<std::uint64_t> mine;
  for (const TimelineEvent& e : record.timeline) {
    if (e.data_hash) mine.push_back(e.data_hash);
    if (mine.size() == 4) break;
  }
  Activity found = Activity::none;
  for (const Connection* c : it->second) {
    if (c->role() == record.role || c->role() == Role::unknown) continue;
    found = Activity::idle;
    const StreamRecord* other = c->active_stream();
    if (!other) continue;
    if (!record.response_id.empty() && other->response_id == record.response_id) return Activity::streaming;
    const std::size_t n = std::min<std::size_t>(other->timeline.size(), 8);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t h = other->timeline[i].data_hash;
      if (h && std::find(mine.begin(), mine.end(), h) != mine.end()) return Activity::streaming;
    }
  }
  return found;
}

void Pipeline::evict_oldest(TimestampNs now) {
  // Drop the least recently active 1/16 at once so a full table costs one scan
  // per many new connections, not one per connection.
  std::vector<std::pair<TimestampNs, std::uint64_t>> by_age;
  by_age.reserve(connections_.size());
  for (const auto& [sock, conn] : connections_) by_age.emplace_back(conn->last_activity(), sock);
  const std::size_t n = std::max<std::size_t>(1, by_age.size() / 16);
  std::nth_element(by_age.begin(), by_age.begin() + static_cast<std::ptrdiff_t>(n - 1), by_age.end());
  for (std::size_t i = 0; i < n; ++i) {
    close_connection(by_age[i].second, now, StreamEnd::evicted);
    ++counters_.connections_evicted;
    // Stop following it: were its next event to make it a connection again
    // (joined mid-stream), a table full of live sockets would evict and
    // re-admit in a loop, one partial record per turn.
    stop_following(by_age[i].second);
  }
}

void Pipeline::expire(TimestampNs now) {
  std::vector<std::uint64_t> idle;
  for (auto& [sock, conn] : connections_) {
    const TimestampNs last = conn->last_activity();
    if (now > last && now - last > config_.conn_idle_timeout_ns) {
      idle.push_back(sock);
    } else {
      conn->expire_stream(now, config_.stream_idle_timeout_ns);
    }
  }
  for (std::uint64_t sock : idle) close_connection(sock, now, StreamEnd::idle_timeout);
  path_.release_due(now);
  counters_.records_held = path_.held();
  counters_.records_joined = path_.joined();
}

void Pipeline::flush(TimestampNs now, StreamEnd reason) {
  std::vector<std::uint64_t> all;
  all.reserve(connections_.size());
  for (const auto& [sock, conn] : connections_) all.push_back(sock);
  for (std::uint64_t sock : all) close_connection(sock, now, reason);
  path_.release_all();
  counters_.records_held = 0;
}

void Pipeline::for_each_active_stream(const std::function<void(const StreamRecord&)>& visit) const {
  for (const auto& [sock, conn] : connections_) {
    if (const StreamRecord* r = conn->active_stream()) visit(*r);
  }
}

void Pipeline::emit(StreamRecord&& record) {
  ++counters_.records;
  const TimestampNs now = record.end_ns;
  path_.add(std::move(record), now);
  counters_.records_held = path_.held();
}

void Pipeline::stop_following(std::uint64_t sock_id) {
  // Bounded (a few MiB at most): a socket forgotten here is judged again on
  // its next event, but after the kernel mute there are only the events that
  // were already in the ring buffer, so the bound only has to outlast those.
  if (refused_.size() >= std::max<std::size_t>(4 * config_.max_connections, 65536)) refused_.clear();
  refused_.insert(sock_id);
  if (mute_) mute_(sock_id);
}

void Pipeline::mute(std::uint64_t sock_id) {
  ++counters_.connections_muted;
  if (mute_) mute_(sock_id);
}

std::string Pipeline::cgroup_path(std::uint32_t pid) {
  if (!cgroup_lookup_) return {};
  auto it = cgroup_cache_.find(pid);
  if (it != cgroup_cache_.end()) return it->second;
  if (cgroup_cache_.size() > 65536) cgroup_cache_.clear();  // pids recycle; bound the cache
  std::string path = cgroup_lookup_(pid);
  cgroup_cache_.emplace(pid, path);
  return path;
}

}  // namespace infertap::core
