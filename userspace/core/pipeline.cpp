#include "core/pipeline.h"

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

Pipeline::Pipeline(PipelineConfig config, RecordSink sink, MuteSocket mute, CgroupLookup cgroup_lookup,
                   CommLookup comm_lookup)
    : config_(config),
      sink_(std::move(sink)),
      mute_(std::move(mute)),
      cgroup_lookup_(std::move(cgroup_lookup)),
      comm_lookup_(std::move(comm_lookup)),
      path_(
          config_, [this](StreamRecord&& r) { if (sink_) sink_(std::move(r)); },
          [this](const Endpoint& local, const Endpoint& remote) {
            return tuples_.count(tuple_key(local, remote)) > 0;
          },
          [this](std::uint32_t pid, Role role) {
            auto it = roles_by_pid_.find(pid);
            return it != roles_by_pid_.end() && it->second[static_cast<std::size_t>(role)] > 0;
          }) {}

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
  ++counters_.connections_opened;
  ++tuples_[tuple_key(id.local, id.remote)];
  auto conn = std::make_unique<Connection>(std::move(id), *this);
  Connection* raw = conn.get();
  connections_.emplace(h.sock_id, std::move(conn));
  return raw;
}

void Pipeline::on_path(const capture::PathSignal& signal) {
  const itap_path_event& p = signal.h();
  ++counters_.path_signals;
  auto it = connections_.find(p.sock_id);
  if (it == connections_.end()) return;
  it->second->on_path(signal);
  if (p.path_kind == ITAP_PATH_ACK) path_.on_ack(p.sock_id, it->second->identity().generation, p.ts_ns, p.seq);
}

void Pipeline::role_decided(std::uint32_t pid, Role role) { ++roles_by_pid_[pid][static_cast<std::size_t>(role)]; }

void Pipeline::on_event(const capture::IoEvent& event) {
  const itap_event& h = event.h();
  if (h.kind == ITAP_EV_STATE) {
    ++counters_.state_events;
    auto it = connections_.find(h.sock_id);
    if (it == connections_.end()) return;
    if (h.new_state == kTcpClose) {
      close_connection(h.sock_id, h.ts_ns, StreamEnd::connection_closed);
    } else {
      it->second->on_state(event);
    }
    return;
  }
  ++counters_.data_events;
  Connection* conn = connection_for(event);
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
  if (auto t = tuples_.find(tuple_key(id.local, id.remote)); t != tuples_.end() && --t->second == 0) tuples_.erase(t);
  if (conn->role() != Role::unknown) {
    auto r = roles_by_pid_.find(id.pid);
    if (r != roles_by_pid_.end()) {
      auto& n = r->second[static_cast<std::size_t>(conn->role())];
      if (n > 0) --n;
      if (r->second == std::array<std::uint32_t, 3>{}) roles_by_pid_.erase(r);
    }
  }
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
