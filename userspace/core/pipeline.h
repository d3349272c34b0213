// Kernel events -> connections -> protocol sessions -> stream records -> path
// joining -> finished records.
//
// One Pipeline per agent; single-threaded (the ring-buffer consumer thread owns
// it). Each followed socket becomes a Connection keyed by its kernel address
// plus a generation. Byte positions come from the TCP sequence numbers the
// kernel reports, so events the kernel could not deliver show up as exact holes
// instead of silently shifting the stream. The stages below it never call
// back: each takes its input and returns its output, and the pipeline moves
// the outputs on (docs/architecture.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "capture/event.h"
#include "core/conn/connection.h"
#include "core/conn/tls_unbound.h"
#include "core/live_index.h"
#include "core/load.h"
#include "core/path/joiner.h"
#include "core/types.h"

namespace infertap::core {

// Stream timelines are allocated and freed all the time; glibc's default
// returns freed heap to the kernel eagerly and the next stream pays page
// faults for it again (measured: 9x the faults of keeping it). Keep up to
// 64 MiB of freed heap for reuse. Call once at process start.
void keep_freed_heap_for_reuse();

class Pipeline {
 public:
  using RecordSink = std::function<void(StreamRecord&&)>;
  // A socket in the kernel's table: its address and, for a unix socket, its
  // inode (0 for TCP). A unix socket's close is not seen there, so its entry
  // can belong to a newer socket at the same address by the time userspace
  // acts: the inode tells them apart, and a newer socket's entry is left alone.
  using MuteSocket = std::function<void(std::uint64_t sock_id, std::uint32_t inode)>;
  using CgroupLookup = std::function<std::string(std::uint32_t pid)>;
  // The kernel sends a process name with a connection's first event only; when
  // that event was lost, the name is looked up (e.g. /proc/<pid>/comm).
  using CommLookup = std::function<std::string(std::uint32_t pid)>;

  // Called once per new connection with its identity (comm, cgroup path
  // filled): may add to it (container, pod) and returns whether to follow the
  // connection. A refused one is muted in the kernel and its later events are
  // dropped here; targeting the kernel cannot do (process name globs) costs
  // one event per socket of an untargeted process, not one per syscall.
  using Admit = std::function<bool(ConnIdentity&)>;

  Pipeline(PipelineConfig config, RecordSink sink, MuteSocket mute = {}, CgroupLookup cgroup_lookup = {},
           CommLookup comm_lookup = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // A raw ring-buffer record (decoded and validated here).
  void on_record(std::span<const std::uint8_t> record);
  void on_event(const capture::IoEvent& event);
  void on_signal(const capture::DeliverySignal& signal);

  // Time-based housekeeping: partial records for idle streams, forget idle
  // connections. Call about once a second with the current monotonic time.
  void expire(TimestampNs now);
  // After the kernel dropped events (a full ring buffer), closes may have been
  // among them: every connection whose socket the kernel no longer knows
  // (`alive` false) ends now, not at the idle timeout, and releases the
  // records waiting for it.
  void reconcile(TimestampNs now, const std::function<bool(std::uint64_t sock_id)>& alive);
  // Ends everything in flight with `reason` (agent shutdown).
  void flush(TimestampNs now, StreamEnd reason = StreamEnd::agent_stopped);

  // Visits every stream in flight (records filled so far, no metrics yet).
  void for_each_active_stream(const std::function<void(const StreamRecord&)>& visit) const;
  // Stall thresholds apply to streams finished from now on (config reload).
  void set_stall_threshold(std::uint64_t floor_ns, double ratio) {
    config_.stall_floor_ns = floor_ns;
    config_.stall_ratio = ratio;
  }
  // The delivery lag floor (a client fell behind), likewise.
  void set_lag_floor(std::uint64_t floor_ns) { config_.lag_floor_ns = floor_ns; }

  void set_admit(Admit admit) { admit_ = std::move(admit); }
  // The name of the TLS library a TLS event's tls_lib names (the capture's table).
  using TlsLibraryName = std::function<std::string(std::uint16_t id)>;
  void set_tls_library_names(TlsLibraryName names) { tls_library_name_ = std::move(names); }
  // Deletes the kernel's entry for a socket that is already closed (its
  // next use, by a new socket at the same address, is classified afresh).
  using ForgetSocket = std::function<void(std::uint64_t sock_id, std::uint32_t inode)>;
  void set_forget(ForgetSocket forget) { forget_ = std::move(forget); }

  // Once a second: host and cgroup pressure and the serving processes' CPU
  // time, for the load context of the records that end next (core/load.h).
  // Without a probe, records carry no pressure or CPU numbers.
  void set_load_probe(LoadProbe* probe) { load_probe_ = probe; }
  void sample_load(TimestampNs now) {
    if (load_probe_) load_.sample(now, *load_probe_);
  }
  // In-flight streams and waiting requests per scope now.
  std::vector<ScopeLoad> load_scopes() const { return load_.scopes(); }

  const PipelineCounters& counters() const { return counters_; }
  std::size_t connection_count() const { return connections_.size(); }
  const PipelineConfig& config() const { return config_; }

 private:
  void on_state(const capture::IoEvent& event);
  void on_tls_bind(const capture::TlsBind& bind);
  Connection* connection_for(const capture::IoEvent& event);
  Connection* open_connection(const capture::IoEvent& event);
  ConnIdentity identity_of(const capture::IoEvent& event);
  void fill_unix_identity(ConnIdentity& id, const capture::IoEvent& event);
  bool unix_peer_shut_down(Connection& reader, TimestampNs ts);
  void finish_unix_connection(std::uint64_t sock_id, std::uint32_t inode, TimestampNs ts);
  void take(Connection& conn, const Connection::Decision& decision);
  void join_finished(Connection& conn);
  void release(std::vector<StreamRecord>&& records);
  void close_connection(std::uint64_t sock_id, TimestampNs now, StreamEnd reason);
  void evict_oldest(TimestampNs now);
  void enforce_stream_budget(TimestampNs now);
  // Mute in the kernel, drop its events already queued (inode: MuteSocket).
  void stop_following(std::uint64_t sock_id, std::uint32_t inode);
  std::string cgroup_path(std::uint32_t pid);

  PipelineConfig config_;
  RecordSink sink_;
  MuteSocket mute_;
  CgroupLookup cgroup_lookup_;
  CommLookup comm_lookup_;
  PipelineCounters counters_;
  LoadTracker load_;  // before the connections: theirs is kept here until they go
  LoadProbe* load_probe_ = nullptr;
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections_;
  std::uint64_t next_generation_ = 0;  // connection generations are unique per agent run
  std::unordered_map<std::uint32_t, std::string> cgroup_cache_;
  LiveIndex live_;
  PathJoiner joiner_;
  Admit admit_;
  ForgetSocket forget_;
  TlsLibraryName tls_library_name_;
  UnboundTlsWrites unbound_tls_;
  std::unordered_set<std::uint64_t> refused_;  // sockets the admit hook refused (muted; events in flight dropped)
};

}  // namespace infertap::core
