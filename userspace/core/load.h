// The load each stream ran under (docs/schema.md#load): how many streams of
// the same serving process were in flight and how many requests waited for
// their first token, kept exactly because the agent follows every stream;
// and host and cgroup pressure (PSI) and the server's CPU time per token,
// sampled once a second by whoever owns the pipeline (the daemon reads
// /proc; tests hand in a fake LoadProbe).
//
// Cost: nothing per event. A scope's counts change when a request ends, a
// stream's first token comes and a stream ends (per stream); samples are
// taken per window (LoadTracker::sample). The time-weighted mean over a
// stream's decode phase is the difference of a running integral; the max is
// a suffix maximum over a stack of strictly decreasing values (at most as
// deep as the largest concurrency), so a stream's end costs O(log depth).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.h"

namespace infertap::core {

using TimestampNs = base::TimestampNs;

// PSI avg10 of one level (the host, a cgroup), percent; nullopt where the
// kernel has no such file (no PSI, a cgroup v1 host, `full` of the host's cpu
// before 5.13).
struct Pressure {
  std::optional<double> cpu_some, cpu_full, memory_some, memory_full, io_some, io_full;
  bool any() const { return cpu_some || cpu_full || memory_some || memory_full || io_some || io_full; }
  bool operator==(const Pressure&) const = default;
};

// Where the numbers of the pressure and CPU samples come from. The daemon's
// reads /proc/pressure/*, <cgroup2>/<path>/{cpu,memory,io}.pressure and
// /proc/<pid>/stat; unit tests give fixed values.
class LoadProbe {
 public:
  virtual ~LoadProbe() = default;
  virtual std::optional<Pressure> host_pressure() = 0;
  // `cgroup`: the path below the cgroup v2 mount, as ConnIdentity::cgroup_path.
  virtual std::optional<Pressure> cgroup_pressure(const std::string& cgroup) = 0;
  // utime + stime of the whole process (all threads), nanoseconds.
  virtual std::optional<std::uint64_t> process_cpu_ns(std::uint32_t pid) = 0;
};

// What the agent knows of the load a stream ran under. Counts and sizes only.
struct LoadContext {
  // The scope the counts are taken in: the serving process ("process",
  // server records) or the server address a client talks to ("server",
  // client records). Empty: the role was never known.
  std::string scope;
  // Streams of the scope between their first token and their end, this one
  // included, at this stream's first token; their time-weighted mean and
  // their max from this stream's first token to its end.
  std::optional<std::uint32_t> concurrency;
  std::optional<double> concurrency_mean;
  std::optional<std::uint32_t> concurrency_max;
  // Requests of the scope whose request had ended with no first token yet
  // (the agent's view of the server's queue), this one not counted: when
  // this stream's request ended, and at its first token.
  std::optional<std::uint32_t> waiting_at_request;
  std::optional<std::uint32_t> waiting;
  // Streams of the same client address in the scope at this stream's first
  // token, this one included (its share of the server: client_concurrency /
  // concurrency).
  std::optional<std::uint32_t> client_concurrency;
  // Input size: usage.prompt_tokens / input_tokens when the stream reported
  // it, and the request body's size in bytes; requested max_tokens;
  // stream_options.include_usage as the request said it.
  std::optional<std::uint64_t> input_tokens;
  std::optional<std::uint64_t> request_bytes;
  std::optional<std::uint64_t> max_tokens;
  std::optional<bool> include_usage;
  // Identity of what served it, for baseline review: OpenAI system_fingerprint,
  // the Server / x-*-version header values.
  std::string system_fingerprint;
  std::string server_version;
  // PSI avg10 at the last sample before the stream ended (avg10 spans the
  // 10 s before it), of the host and of the traced process's cgroup.
  std::optional<Pressure> host_pressure, cgroup_pressure;
  // The serving process's CPU time per output token over the samples of the
  // last ~10 s before the stream ended (server records).
  std::optional<double> cpu_ms_per_token;
};

struct LoadConfig {
  // At most this many scopes, cgroups and processes are sampled per tick
  // (the most recently active ones); others get no pressure or CPU numbers.
  std::size_t max_sampled = 64;
  // The span over which CPU time per token is taken.
  std::uint64_t cpu_span_ns = 10'000'000'000ull;
  // Client addresses counted per scope; more are not counted.
  std::size_t max_clients_per_scope = 4096;
};

// One scope's counts now (the Prometheus gauges of in-flight streams and
// waiting requests per serving process).
struct ScopeLoad {
  std::string scope;      // "process" | "server"
  std::uint32_t pid = 0;  // process scopes
  std::string comm;       // process scopes: its name
  std::string server;     // server scopes: the address clients talk to
  std::uint32_t in_flight = 0, waiting = 0;
};

class LoadTracker {
 public:
  explicit LoadTracker(LoadConfig config = {}) : config_(config) {}

  // Scopes are named by the caller: a process (process_key) or a server
  // address (server_key); 0 is none. `process`: whether it is a serving
  // process (sampled for CPU). The names are kept when the scope is made.
  struct ScopeId {
    std::uint64_t key = 0;
    bool process = false;
    std::uint32_t pid = 0;
    std::string comm, server, cgroup;
  };
  static std::uint64_t process_key(std::uint32_t pid) { return (1ull << 63) | pid; }
  // An address (and port: 0 for a client address) as a key: FNV-1a, never 0
  // and never a process key.
  static std::uint64_t address_key(const std::uint8_t (&addr)[16], std::uint16_t port) {
    std::uint64_t h = 1469598103934665603ull;
    for (std::uint8_t b : addr) h = (h ^ b) * 1099511628211ull;
    h = (h ^ (port & 0xff)) * 1099511628211ull;
    h = (h ^ (port >> 8)) * 1099511628211ull;
    return (h & ~(1ull << 63)) | 1;
  }
  // A stream's handle on its scope, kept by its assembler.
  struct Ticket {
    bool waiting = false, decoding = false;
    TimestampNs first_token_ns = 0;
    unsigned __int128 area_at_first_token = 0;
    std::uint32_t concurrency = 0;
    std::uint64_t client = 0;
  };

  // A request of the scope ended: it waits for its first token. Returns the
  // requests already waiting (this one not counted).
  std::uint32_t request_ended(const ScopeId& scope, TimestampNs ts);
  // A waiting request stopped waiting without a first token (a response that
  // is no stream, a stream that ended without a token, the connection went).
  void request_dropped(std::uint64_t scope);
  // The stream's first token: it moves from waiting (when it was counted
  // there) to in flight. Fills concurrency, waiting, client_concurrency
  // (`client`: address_key of the client's address, 0 = none).
  void first_token(const ScopeId& scope, Ticket& ticket, bool was_waiting, TimestampNs ts, std::uint64_t client,
                   LoadContext& out);
  // The stream ended: mean and max over its decode phase, the pressure and CPU
  // numbers of the latest samples; its tokens count towards the scope's CPU
  // time per token.
  void stream_ended(const ScopeId& scope, Ticket& ticket, TimestampNs ts, std::uint64_t tokens,
                    const std::string& cgroup, LoadContext& out);

  // Once a second: host pressure, and the pressure and CPU time of the most
  // recently active cgroups and serving processes (at most max_sampled).
  void sample(TimestampNs now, LoadProbe& probe);

  std::vector<ScopeLoad> scopes() const;
  std::size_t scope_count() const { return scopes_.size(); }

 private:
  struct CpuSample {
    TimestampNs ts = 0;
    std::uint64_t cpu_ns = 0, tokens = 0;
  };
  struct Scope {
    ScopeId id;
    std::uint32_t in_flight = 0, waiting = 0;
    TimestampNs last_change = 0, last_used = 0;
    unsigned __int128 area = 0;  // integral of in_flight over time (ns x streams)
    // (time, value) of in_flight changes, values strictly decreasing: the max
    // since any time is the value of the first entry at or after it.
    std::vector<std::pair<TimestampNs, std::uint32_t>> peaks;
    std::unordered_map<std::uint64_t, std::uint32_t> clients;  // decoding streams per client address
    std::optional<Pressure> cgroup_pressure;  // of id.cgroup at the last sample
    std::uint64_t tokens = 0;    // output tokens of its ended streams
    std::deque<CpuSample> cpu;   // samples over cpu_span_ns
  };
  struct CgroupSample {
    std::optional<Pressure> pressure;
    TimestampNs last_used = 0;
  };

  Scope& scope_for(const ScopeId& id, TimestampNs ts);
  static void advance(Scope& s, TimestampNs ts);
  static void set_in_flight(Scope& s, std::uint32_t value, TimestampNs ts);
  void forget_idle(TimestampNs now);

  LoadConfig config_;
  std::unordered_map<std::uint64_t, Scope> scopes_;
  std::unordered_map<std::string, CgroupSample> cgroups_;
  std::optional<Pressure> host_;
};

}  // namespace infertap::core
