#include "core/pipeline.h"

#include <malloc.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace infertap::core {
namespace {

constexpr std::uint8_t kTcpClose = 7;  // include/net/tcp_states.h

Endpoint endpoint(const std::array<std::uint8_t, 16>& addr, std::uint16_t port, std::uint16_t family) {
  Endpoint e;
  std::copy(addr.begin(), addr.end(), e.addr.begin());
  e.port = port;
  e.family = family;
  return e;
}

// A unix socket by its kernel address (the peer's, for the remote end).
Endpoint unix_endpoint(std::uint64_t sock) {
  Endpoint e;
  e.family = AF_UNIX;
  std::memcpy(e.addr.data(), &sock, sizeof sock);
  return e;
}

std::uint64_t unix_sock_of(const Endpoint& e) {
  std::uint64_t sock = 0;
  std::memcpy(&sock, e.addr.data(), sizeof sock);
  return sock;
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
      joiner_(config_) {}

Pipeline::~Pipeline() = default;

void Pipeline::on_record(std::span<const std::uint8_t> record) {
  const capture::DecodeResult decoded = capture::decode(record);
  if (decoded.signal) {
    on_signal(capture::signal_of(*decoded.signal));
    return;
  }
  if (decoded.tls_bind) {
    on_tls_bind(*decoded.tls_bind);
    return;
  }
  if (decoded.code_signal) return;
  if (!decoded.event) {
    ++counters_.decode_errors;
    return;
  }
  const capture::IoEvent& e = *decoded.event;
  if (e.tls() && e.sock_id == 0 && e.kind == capture::IoEvent::Kind::data) {
    // A write encrypted into memory: its socket is told when the ciphertext goes.
    if (unbound_tls_.hold(e.tls_ssl, record, e.ts_ns)) ++counters_.tls_unbound_held;
    else ++counters_.tls_unbound_dropped;
    return;
  }
  on_event(*decoded.event);
}

// The writes held for this TLS connection went out with the ciphertext of
// the send that bound it: they take its socket, its time (the emit vantage)
// and its sequence (the ACK that covers them).
void Pipeline::on_tls_bind(const capture::TlsBind& bind) {
  std::vector<std::vector<std::uint8_t>> held = unbound_tls_.take(bind.ssl);
  bool first = true;
  for (std::vector<std::uint8_t>& bytes : held) {
    capture::bind_held_write(bytes, bind, first);
    first = false;
    on_record(bytes);
  }
}

void Pipeline::on_event(const capture::IoEvent& event) {
  if (event.kind == capture::IoEvent::Kind::state) {
    on_state(event);
    return;
  }
  ++counters_.data_events;
  Connection* conn = connection_for(event);
  if (!conn) return;
  if (event.tls()) {
    ++counters_.tls_events;
    const capture::IoEvent& h = event;
    if (h.tls_lib && conn->identity().tls_library.empty() && tls_library_name_)
      conn->note_tls(tls_library_name_(h.tls_lib), h.tls_start_ns);
  }
  // An arrival the kernel carried on this read instead of sending it alone:
  // it happened before the read, so it is handled first, as if it had.
  if (const auto arrival = capture::carried_arrival(event)) on_signal(*arrival);
  Connection::Decision decision = conn->on_data(event);
  if (decision.foreign) {
    // Its close never reached us and the address was reused: what we had
    // ends, and this event opens the connection it belongs to.
    ++counters_.sockets_reused;
    close_connection(event.sock_id, event.ts_ns, StreamEnd::connection_closed);
    conn = open_connection(event);
    if (!conn) return;
    decision = conn->on_data(event);
  }
  take(*conn, decision);
  join_finished(*conn);
  if (counters_.live_stream_bytes > config_.max_live_stream_bytes) enforce_stream_budget(event.ts_ns);
  if (event.flags.eof && conn->identity().transport == Transport::unix_stream &&
      unix_peer_shut_down(*conn, event.ts_ns)) {
    finish_unix_connection(event.sock_id, conn->identity().inode, event.ts_ns);
    return;
  }
  if (decision.ended) close_connection(event.sock_id, event.ts_ns, StreamEnd::connection_closed);
}

// A unix reader got EOF: its peer shut its sending side or closed (the
// kernel side sees no close of a unix socket; this is its FIN). The peer's
// connection, when traced, has sent all it will: a close-delimited response
// ends there. Returns whether the reader is done too (its own sending was
// ended the same way before); a connection done both ways is forgotten by
// the kernel side as well, whose entry would otherwise stay until the LRU
// drops it.
bool Pipeline::unix_peer_shut_down(Connection& reader, TimestampNs ts) {
  const ConnIdentity& id = reader.identity();
  auto it = connections_.find(unix_sock_of(id.remote));
  if (it != connections_.end() && unix_sock_of(it->second->identity().remote) == id.sock_id) {
    Connection& peer = *it->second;
    const bool peer_done = peer.on_peer_shut_down(ts);
    join_finished(peer);
    if (peer_done) finish_unix_connection(peer.identity().sock_id, peer.identity().inode, ts);
  }
  return reader.inbound_ended() && reader.outbound_ended();
}

// The kernel's entry goes too, unless it already belongs to a newer socket at
// this address (the userspace side runs behind the kernel's: the inode decides).
void Pipeline::finish_unix_connection(std::uint64_t sock_id, std::uint32_t inode, TimestampNs ts) {
  close_connection(sock_id, ts, StreamEnd::connection_closed);
  if (forget_) forget_(sock_id, inode);
}

void Pipeline::on_state(const capture::IoEvent& event) {
  const capture::IoEvent& h = event;
  ++counters_.state_events;
  auto it = connections_.find(h.sock_id);
  if (it == connections_.end()) {
    if (h.new_state == kTcpClose || h.socket_destroyed) refused_.erase(h.sock_id);
    return;
  }
  if (h.new_state == kTcpClose && h.flags.unread) {
    it->second->on_closed_unread();  // read on to the end; destroyed or EOF ends it
  } else if (h.new_state == kTcpClose || h.socket_destroyed) {
    // A unix socket freed (its only end the kernel side sees): it sent all
    // it will, as TCP's FIN says (a close-delimited response ends there).
    if (it->second->identity().transport == Transport::unix_stream) it->second->on_peer_shut_down(h.ts_ns);
    close_connection(h.sock_id, h.ts_ns, StreamEnd::connection_closed);
  } else {
    it->second->on_state(event);
    join_finished(*it->second);
  }
}

void Pipeline::on_signal(const capture::DeliverySignal& signal) {
  ++counters_.path_signals;
  auto it = connections_.find(signal.sock_id);
  if (it == connections_.end()) return;
  it->second->on_signal(signal);
  joiner_.on_signal(signal.sock_id, it->second->identity().generation, signal);
}

ConnIdentity Pipeline::identity_of(const capture::IoEvent& event) {
  const capture::IoEvent& h = event;
  ConnIdentity id;
  id.sock_id = h.sock_id;
  id.generation = ++next_generation_;
  id.pid = h.pid;
  id.fd = h.fd;
  id.comm = std::string(event.comm);
  if (id.comm.empty() && comm_lookup_) id.comm = comm_lookup_(h.pid);
  id.cgroup_id = h.cgroup_id;
  id.cgroup_path = cgroup_path(h.pid);
  if (event.is_unix()) {
    fill_unix_identity(id, event);
  } else {
    id.local = endpoint(h.local_addr, h.local_port, h.family);
    id.remote = endpoint(h.remote_addr, h.remote_port, h.family);
  }
  id.first_seen_ns = h.ts_ns;
  if (event.tls()) {
    id.tls = true;
    id.fd = -1;  // a library call: no descriptor
    if (h.tls_lib && tls_library_name_) id.tls_library = tls_library_name_(h.tls_lib);
    id.tls_start_ns = h.tls_start_ns;
  }
  return id;
}

// A unix connection: its socket and its peer's, the path it goes through
// (its own name, or its peer's), the peer's process.
void Pipeline::fill_unix_identity(ConnIdentity& id, const capture::IoEvent& event) {
  const capture::IoEvent::UnixEnds& ends = event.unix_ends;
  id.transport = Transport::unix_stream;
  id.local = unix_endpoint(ends.sock);
  id.remote = unix_endpoint(ends.peer_sock);
  id.inode = ends.ino;
  const std::string path(event.path.begin(), event.path.end());
  (event.flags.peer_path ? id.remote : id.local).path = path;
  id.peer_pid = event.peer_pid;
  if (id.peer_pid && comm_lookup_) id.peer_comm = comm_lookup_(id.peer_pid);
}

Connection* Pipeline::connection_for(const capture::IoEvent& event) {
  const capture::IoEvent& h = event;
  if (!refused_.empty()) {
    auto r = refused_.find(h.sock_id);
    if (r != refused_.end()) {
      // Events already in the ring when the mute landed; a new socket at the
      // same address is judged afresh.
      if (!h.flags.new_socket) return nullptr;
      refused_.erase(r);
    }
  }
  auto it = connections_.find(h.sock_id);
  if (it != connections_.end()) {
    // The kernel saw this socket address as new: the old connection closed
    // without us hearing of it (state event lost), and the address was reused.
    if (!h.flags.new_socket) return it->second.get();
    close_connection(h.sock_id, h.ts_ns, StreamEnd::connection_closed);
  }
  return open_connection(event);
}

Connection* Pipeline::open_connection(const capture::IoEvent& event) {
  const capture::IoEvent& h = event;
  if (h.local_port == 0 && (h.family == AF_INET || h.family == AF_INET6)) {
    // A TCP socket loses its port when it closes: this call ran after the
    // close (a send racing the peer's reset). Nothing of a live connection.
    ++counters_.calls_after_close;
    if (forget_) forget_(h.sock_id, 0);
    return nullptr;
  }
  if (connections_.size() >= config_.max_connections) evict_oldest(h.ts_ns);
  ConnIdentity id = identity_of(event);
  if (admit_ && !admit_(id)) {
    ++counters_.connections_refused;
    stop_following(h.sock_id, id.inode);
    return nullptr;
  }
  ++counters_.connections_opened;
  auto conn = std::make_unique<Connection>(std::move(id), config_, counters_, live_.census(), &load_);
  Connection* raw = conn.get();
  live_.add(*raw);
  connections_.emplace(h.sock_id, std::move(conn));
  return raw;
}

// What a connection decided: its role, a mute.
void Pipeline::take(Connection& conn, const Connection::Decision& decision) {
  if (decision.role_decided) live_.role_decided(conn);
  if (decision.mute && mute_) mute_(conn.identity().sock_id, conn.identity().inode);
}

// The records a connection finished go to the joiner.
void Pipeline::join_finished(Connection& conn) {
  if (!conn.has_finished()) return;
  for (StreamRecord& r : conn.take_finished()) {
    ++counters_.records;
    const TimestampNs now = r.end_ns;
    release(joiner_.add(std::move(r), now, live_));
  }
  counters_.records_held = joiner_.held();
}

void Pipeline::release(std::vector<StreamRecord>&& records) {
  if (!sink_) return;
  for (StreamRecord& r : records) sink_(std::move(r));
}

void Pipeline::close_connection(std::uint64_t sock_id, TimestampNs now, StreamEnd reason) {
  auto it = connections_.find(sock_id);
  if (it == connections_.end()) return;
  // Move out first: closing emits records, and the sink must see a consistent table.
  std::unique_ptr<Connection> conn = std::move(it->second);
  connections_.erase(it);
  conn->close(now, reason);
  join_finished(*conn);
  ++counters_.connections_closed;
  live_.remove(*conn);
  release(joiner_.on_closed(sock_id, conn->identity().generation, now, live_));
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
    const std::uint32_t inode = connections_.at(by_age[i].second)->identity().inode;
    close_connection(by_age[i].second, now, StreamEnd::evicted);
    ++counters_.connections_evicted;
    // Stop following it: were its next event to make it a connection again
    // (joined mid-stream), a table full of live sockets would evict and
    // re-admit in a loop, one partial record per turn.
    stop_following(by_age[i].second, inode);
  }
}

// The streams in flight hold more than their budget: the largest (the
// oldest of equals) end now, each with its record (end evicted_memory),
// until they hold 7/8 of it, so that the next events do not evict again.
void Pipeline::enforce_stream_budget(TimestampNs now) {
  struct Held {
    std::size_t bytes;
    TimestampNs start;
    std::uint64_t sock;
    std::uint32_t h2_stream;
    std::uint64_t seq;
  };
  std::vector<Held> held;
  for (const auto& entry : connections_) {
    const std::uint64_t sock = entry.first;  // a plain name: clang 14 captures no structured binding
    entry.second->for_each_active_stream([&](const StreamRecord& r) {
      held.push_back({held_bytes(r), r.response_head_ns, sock, r.h2_stream_id, r.stream_seq});
    });
  }
  std::sort(held.begin(), held.end(), [](const Held& a, const Held& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.start < b.start;
  });
  const std::size_t target = config_.max_live_stream_bytes - config_.max_live_stream_bytes / 8;
  for (const Held& h : held) {
    if (counters_.live_stream_bytes <= target) break;
    Connection& conn = *connections_.at(h.sock);
    conn.end_streams(now, StreamEnd::evicted_memory, [&](const StreamRecord& r) {
      return r.h2_stream_id == h.h2_stream && r.stream_seq == h.seq;
    });
    ++counters_.streams_evicted_memory;
    join_finished(conn);
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
      join_finished(*conn);
    }
  }
  for (std::uint64_t sock : idle) close_connection(sock, now, StreamEnd::idle_timeout);
  counters_.tls_unbound_dropped += unbound_tls_.expire(now);
  release(joiner_.release_due(now, live_));
  counters_.records_held = joiner_.held();
  counters_.records_joined = joiner_.joined();
}

void Pipeline::reconcile(TimestampNs now, const std::function<bool(std::uint64_t)>& alive) {
  std::vector<std::uint64_t> gone;
  for (const auto& [sock, conn] : connections_) {
    if (!alive(sock)) gone.push_back(sock);
  }
  for (std::uint64_t sock : gone) {
    ++counters_.closes_recovered;
    close_connection(sock, now, StreamEnd::connection_closed);
  }
  release(joiner_.release_due(now, live_));
  counters_.records_held = joiner_.held();
}

void Pipeline::flush(TimestampNs now, StreamEnd reason) {
  std::vector<std::uint64_t> all;
  all.reserve(connections_.size());
  for (const auto& [sock, conn] : connections_) all.push_back(sock);
  for (std::uint64_t sock : all) close_connection(sock, now, reason);
  release(joiner_.release_all());
  counters_.records_held = 0;
}

void Pipeline::for_each_active_stream(const std::function<void(const StreamRecord&)>& visit) const {
  for (const auto& [sock, conn] : connections_) {
    conn->for_each_active_stream(visit);
  }
}

void Pipeline::stop_following(std::uint64_t sock_id, std::uint32_t inode) {
  // Bounded (a few MiB at most): a socket forgotten here is judged again on
  // its next event, but after the kernel mute there are only the events that
  // were already in the ring buffer, so the bound only has to outlast those.
  if (refused_.size() >= std::max<std::size_t>(4 * config_.max_connections, 65536)) refused_.clear();
  refused_.insert(sock_id);
  if (mute_) mute_(sock_id, inode);
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
