// In-memory view of the agent for the query API (docs/cli.md): the last N
// finished stream records, the streams in flight, aggregates over them, and
// live subscribers for `infertap watch`.
//
// Memory bound. Each kept record is held as its rendered NDJSON summary line
// (output::render_stream without the timeline, ~1.5 KiB) plus a small numeric
// summary for the aggregates. Its timeline is kept as the record itself and
// rendered only when asked for (`show`, a timeline watcher): rendering every
// finished timeline as JSON cost the agent more CPU than capturing the
// events did. Timelines are kept while the sum of their in-memory sizes
// (timeline_memory_bytes) stays under StoreOptions::timeline_budget_bytes
// (oldest dropped first; a single timeline above max_record_timeline_bytes is
// never kept). So the store holds at most  capacity x ~2 KiB  +
// timeline_budget_bytes  (defaults: 2000 records, ~4 MiB + 64 MiB), plus
// subscriber queues (queue length x one shared line each; lines are shared,
// not copied, between subscribers).
//
// Thread-safe: add()/set_live() are called by the pipeline thread, the queries
// by API connection threads. add() never waits on a subscriber: a full
// subscriber queue drops the new line and counts it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/types.h"
#include "output/ndjson/records.h"

namespace infertap::daemon {

// A stream still in flight, as published by the daemon (set_live()).
struct LiveStream {
  std::string id;  // same form as a record's stream_id: "<generation>-<seq>"
  std::uint32_t pid = 0;
  std::string comm;
  std::string path;
  std::string model;
  core::Role role = core::Role::unknown;
  core::TimestampNs started_ns = 0;      // request start (or first byte seen)
  std::uint32_t events = 0;              // SSE events so far
  core::TimestampNs last_event_ns = 0;   // 0: none yet
  core::TimestampNs first_token_ns = 0;  // optional; 0: no token yet / unknown
  std::string cgroup;                    // optional; cgroup path
};

enum class GroupBy { model, route, process, container };
std::optional<GroupBy> parse_group_by(std::string_view name);  // "model" | "route" | "process" | "container"
std::string_view to_string(GroupBy by);

struct StoreOptions {
  std::size_t capacity = 2000;                         // finished records kept
  std::size_t timeline_budget_bytes = 64u << 20;       // all kept timelines together
  std::size_t max_record_timeline_bytes = 8u << 20;    // one timeline above this is not kept
  std::size_t subscriber_queue = 4096;                 // lines queued per subscriber before dropping
  output::WallClock clock{};                           // for ts / end_ts
  std::string host;                                    // record "host" field
};

// Numbers a record contributes to stats/top (ms, as in the schema).
struct RecordSummary {
  std::string id;
  std::string comm;
  std::uint32_t pid = 0;
  std::string model;  // raw, may be empty
  std::string path;   // raw
  std::string cgroup;
  std::string container;  // core::container_key(conn)
  core::Role role = core::Role::unknown;
  core::TimestampNs end_ns = 0;
  std::optional<double> ttft_ms, itl_p50_ms, itl_p95_ms, itl_p99_ms, tokens_per_s;
  std::uint64_t tokens = 0;
  std::uint32_t stalls = 0;
  bool partial = false;  // end != complete
  bool error = false;    // status >= 400 or an error event
};
RecordSummary summarize(const core::StreamRecord& record);

// Queue of record lines for one watcher. Obtained from RecordStore::subscribe;
// the store holds it weakly, so dropping the last shared_ptr unsubscribes.
class Subscription {
 public:
  using Line = std::shared_ptr<const std::string>;  // one NDJSON line, no newline
  Subscription(std::size_t capacity, bool timeline) : capacity_(capacity), timeline_(timeline) {}

  // Next line, waiting up to `timeout`; nullptr on timeout or once closed and drained.
  Line pop(std::chrono::milliseconds timeout);
  // Lines dropped because the queue was full: since subscribing / since the last call.
  std::uint64_t dropped() const;
  std::uint64_t take_dropped();
  void close();  // wakes pop(); later pushes are ignored
  bool closed() const;
  bool wants_timeline() const { return timeline_; }

  bool push(Line line);  // store side: false (and counted) when full

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Line> queue_;
  std::size_t capacity_;
  bool timeline_;
  bool closed_ = false;
  std::uint64_t dropped_total_ = 0;
  std::uint64_t dropped_unreported_ = 0;
};
using SubscriptionPtr = std::shared_ptr<Subscription>;

struct StoreCounters {
  std::uint64_t added = 0;
  std::uint64_t evicted = 0;             // records pushed out of the ring
  std::uint64_t timelines_dropped = 0;   // timelines released for the byte budget (record kept)
  std::uint64_t subscriber_drops = 0;    // lines dropped at full subscriber queues, all subscribers
  std::size_t records = 0;               // kept now
  std::size_t capacity = 0;
  std::size_t timeline_bytes = 0;        // held now
  std::size_t subscribers = 0;
  std::size_t live = 0;
};

class RecordStore {
 public:
  explicit RecordStore(StoreOptions options = {});
  ~RecordStore();  // closes every subscription
  RecordStore(const RecordStore&) = delete;
  RecordStore& operator=(const RecordStore&) = delete;

  // Keeps one finished record (its summary rendered now, its timeline when
  // asked for); fans it out to subscribers.
  void add(const core::StreamRecord& record);
  void add(core::StreamRecord&& record);
  // Replaces the set of in-flight streams.
  void set_live(std::vector<LiveStream> live);
  // The live view on demand: a reader asks (ask_live returns the view's
  // generation now) and waits for a newer one; the pipeline thread, seeing
  // live_asked() on its drain tick, publishes one at once instead of at its
  // next once-a-second refresh.
  std::uint64_t ask_live();
  bool live_asked() const { return live_asked_.load(std::memory_order_relaxed); }
  // True when a view newer than `generation` was published within `timeout`.
  bool wait_live(std::uint64_t generation, std::chrono::milliseconds timeout) const;

  // Summary lines (no timeline) of the newest `limit` records, newest first.
  std::vector<std::shared_ptr<const std::string>> recent(std::size_t limit) const;
  // Same, as the text of a JSON array: "[{...},{...}]".
  std::string recent_json(std::size_t limit) const;
  struct Found {
    std::string line;             // full record JSON (with "timeline" when kept)
    bool timeline_kept = false;
  };
  // The newest kept record with this stream_id.
  std::optional<Found> find(std::string_view id) const;

  std::vector<LiveStream> live() const;
  // [{id, pid, comm, path, model, role, started_ns, age_ms, events, idle_ms, ttft_seen}], oldest first.
  nlohmann::json live_json(core::TimestampNs now_ns) const;

  // Aggregates over every kept record, grouped; see docs/cli.md for each field.
  nlohmann::json stats(GroupBy by) const;
  // Per (process, model, route): records that ended in [now - window, now] plus live streams.
  nlohmann::json top(core::TimestampNs now_ns, std::uint64_t window_ns = 60'000'000'000ull) const;

  // A watcher: receives each record added from now on (summary line, or the
  // full line with the timeline when `timeline`). queue 0 = options default.
  SubscriptionPtr subscribe(bool timeline = false, std::size_t queue = 0);

  StoreCounters counters() const;
  nlohmann::json counters_json() const;
  std::size_t size() const;

 private:
  struct Entry {
    RecordSummary summary;
    std::shared_ptr<const std::string> line;          // summary line
    std::shared_ptr<const core::StreamRecord> record;  // for its timeline; null when not kept
    std::size_t timeline_bytes = 0;                    // timeline_memory_bytes(*record) while kept
  };
  void add_shared(std::shared_ptr<const core::StreamRecord> record);
  void trim_timelines_locked();

  StoreOptions options_;
  mutable std::mutex mu_;
  std::deque<Entry> entries_;  // oldest first
  std::vector<LiveStream> live_;
  std::uint64_t live_generation_ = 0;  // set_live() calls
  std::atomic<bool> live_asked_{false};
  mutable std::condition_variable live_cv_;
  std::vector<std::weak_ptr<Subscription>> subscribers_;
  StoreCounters counters_;
};

// What keeping a record for its timeline costs in memory: the record and its
// per-event arrays (an estimate that ignores small strings).
std::size_t timeline_memory_bytes(const core::StreamRecord& record);

}  // namespace infertap::daemon
