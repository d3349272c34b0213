#include "daemon/store.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "base/percentile.h"
#include "core/labels.h"
#include "output/format.h"

namespace infertap::daemon {
namespace {

using json = nlohmann::json;

constexpr std::string_view kNoRoute = "(none)";  // the route key of a stream without a path

using output::ms_of;

// Nearest-rank percentile (docs/metrics.md) of a group's values, or null.
json percentile_json(std::vector<double>& values, double p) {
  return output::or_null(base::percentile_in_place(values, p));
}

// Aggregates one group of record summaries.
struct Group {
  std::uint64_t streams = 0, partial = 0, errors = 0, tokens = 0, stalls = 0, streams_with_stalls = 0;
  std::vector<double> ttft, itl50, itl95, itl99, rate;

  void add(const RecordSummary& s) {
    ++streams;
    partial += s.partial;
    errors += s.error;
    tokens += s.tokens;
    stalls += s.stalls;
    streams_with_stalls += s.stalls > 0;
    if (s.ttft_ms) ttft.push_back(*s.ttft_ms);
    if (s.itl_p50_ms) itl50.push_back(*s.itl_p50_ms);
    if (s.itl_p95_ms) itl95.push_back(*s.itl_p95_ms);
    if (s.itl_p99_ms) itl99.push_back(*s.itl_p99_ms);
    if (s.tokens_per_s) rate.push_back(*s.tokens_per_s);
  }
};

}  // namespace

std::optional<GroupBy> parse_group_by(std::string_view name) {
  if (name == "model") return GroupBy::model;
  if (name == "route") return GroupBy::route;
  if (name == "process") return GroupBy::process;
  if (name == "container") return GroupBy::container;
  return std::nullopt;
}

std::string_view to_string(GroupBy by) {
  switch (by) {
    case GroupBy::model: return "model";
    case GroupBy::route: return "route";
    case GroupBy::process: return "process";
    case GroupBy::container: return "container";
  }
  return "model";
}

RecordSummary summarize(const core::StreamRecord& r) {
  RecordSummary s;
  s.id = core::stream_id(r);
  s.comm = r.conn.comm;
  s.pid = r.conn.pid;
  s.model = r.model;
  s.path = r.path;
  s.cgroup = r.conn.cgroup_path;
  s.container = core::container_key(r.conn);
  s.role = r.role;
  s.end_ns = r.end_ns;
  s.ttft_ms = ms_of(r.metrics.ttft_ns);
  s.itl_p50_ms = ms_of(r.metrics.itl_p50_ns);
  s.itl_p95_ms = ms_of(r.metrics.itl_p95_ns);
  s.itl_p99_ms = ms_of(r.metrics.itl_p99_ns);
  s.tokens_per_s = r.metrics.tokens_per_s;
  s.tokens = r.metrics.tokens;
  s.stalls = static_cast<std::uint32_t>(r.metrics.stalls.size());
  s.partial = r.end != core::StreamEnd::complete;
  s.error = r.status >= 400 || !r.error_type.empty();
  return s;
}

// ---------------------------------------------------------------- Subscription

Subscription::Line Subscription::pop(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return nullptr;
  Line line = std::move(queue_.front());
  queue_.pop_front();
  return line;
}

bool Subscription::push(Line line) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return true;
    if (queue_.size() >= capacity_) {
      ++dropped_total_;
      ++dropped_unreported_;
      return false;
    }
    queue_.push_back(std::move(line));
  }
  cv_.notify_one();
  return true;
}

std::uint64_t Subscription::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_total_;
}

std::uint64_t Subscription::take_dropped() {
  std::lock_guard lock(mu_);
  return std::exchange(dropped_unreported_, 0);
}

void Subscription::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool Subscription::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

// ---------------------------------------------------------------- RecordStore

RecordStore::RecordStore(StoreOptions options) : options_(std::move(options)) {
  if (options_.capacity == 0) options_.capacity = 1;
  if (options_.subscriber_queue == 0) options_.subscriber_queue = 1;
  counters_.capacity = options_.capacity;
}

RecordStore::~RecordStore() {
  std::lock_guard lock(mu_);
  for (auto& weak : subscribers_) {
    if (SubscriptionPtr sub = weak.lock()) sub->close();
  }
}

std::size_t timeline_memory_bytes(const core::StreamRecord& r) {
  return sizeof(core::StreamRecord) + r.timeline.capacity() * sizeof(core::TimelineEvent) +
         r.metrics.stalls.capacity() * sizeof(core::Stall) +
         (r.path_view ? sizeof(core::PathView) + r.path_view->times.capacity() * sizeof(core::PathTimes) +
                            r.path_view->stall_causes.capacity() * sizeof(core::StallVerdict)
                      : 0);
}

void RecordStore::add(const core::StreamRecord& record) {
  add_shared(std::make_shared<const core::StreamRecord>(record));
}

void RecordStore::add(core::StreamRecord&& record) {
  add_shared(std::make_shared<const core::StreamRecord>(std::move(record)));
}

void RecordStore::add_shared(std::shared_ptr<const core::StreamRecord> record) {
  // The summary line is rendered now (lists, stats and watchers read it);
  // the timeline only on request.
  output::RenderOptions render;
  render.timeline = false;
  render.host = options_.host;
  auto shared_line = std::make_shared<const std::string>(output::render_stream(*record, options_.clock, render));
  const std::size_t bytes = timeline_memory_bytes(*record);
  const bool keep = bytes <= options_.max_record_timeline_bytes;
  Entry entry{summarize(*record), shared_line, keep ? record : nullptr, keep ? bytes : 0};

  std::vector<SubscriptionPtr> timeline_watchers;  // served after the lock: rendering takes a while
  {
    std::lock_guard lock(mu_);
    ++counters_.added;
    if (!keep) ++counters_.timelines_dropped;
    counters_.timeline_bytes += entry.timeline_bytes;
    entries_.push_back(std::move(entry));
    while (entries_.size() > options_.capacity) {
      counters_.timeline_bytes -= entries_.front().timeline_bytes;
      entries_.pop_front();
      ++counters_.evicted;
    }
    trim_timelines_locked();

    std::size_t live_subs = 0;
    for (auto it = subscribers_.begin(); it != subscribers_.end();) {
      SubscriptionPtr sub = it->lock();
      if (!sub || sub->closed()) {
        it = subscribers_.erase(it);
        continue;
      }
      ++live_subs;
      if (sub->wants_timeline() && keep) {
        timeline_watchers.push_back(std::move(sub));
      } else if (!sub->push(shared_line)) {
        ++counters_.subscriber_drops;
      }
      ++it;
    }
    counters_.subscribers = live_subs;
  }
  if (timeline_watchers.empty()) return;
  // Only add() pushes, from one thread: watchers still get records in order.
  render.timeline = true;
  const auto with_timeline = std::make_shared<const std::string>(output::render_stream(*record, options_.clock, render));
  std::uint64_t dropped = 0;
  for (const SubscriptionPtr& sub : timeline_watchers) dropped += sub->push(with_timeline) ? 0 : 1;
  if (dropped) {
    std::lock_guard lock(mu_);
    counters_.subscriber_drops += dropped;
  }
}

void RecordStore::trim_timelines_locked() {
  for (Entry& e : entries_) {
    if (counters_.timeline_bytes <= options_.timeline_budget_bytes) break;
    if (e.record) {
      counters_.timeline_bytes -= e.timeline_bytes;
      e.record.reset();
      e.timeline_bytes = 0;
      ++counters_.timelines_dropped;
    }
  }
}

void RecordStore::set_live(std::vector<LiveStream> live) {
  {
    std::lock_guard lock(mu_);
    live_ = std::move(live);
    ++live_generation_;
    live_asked_.store(false, std::memory_order_relaxed);
  }
  live_cv_.notify_all();
}

std::uint64_t RecordStore::ask_live() {
  std::lock_guard lock(mu_);
  live_asked_.store(true, std::memory_order_relaxed);
  return live_generation_;
}

bool RecordStore::wait_live(std::uint64_t generation, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return live_cv_.wait_for(lock, timeout, [&] { return live_generation_ > generation; });
}

std::vector<std::shared_ptr<const std::string>> RecordStore::recent(std::size_t limit) const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<const std::string>> out;
  out.reserve(std::min(limit, entries_.size()));
  for (auto it = entries_.rbegin(); it != entries_.rend() && out.size() < limit; ++it) out.push_back(it->line);
  return out;
}

std::string RecordStore::recent_json(std::size_t limit) const {
  const auto lines = recent(limit);
  std::string out = "[";
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i) out.push_back(',');
    out += *lines[i];
  }
  out.push_back(']');
  return out;
}

std::optional<RecordStore::Found> RecordStore::find(std::string_view id) const {
  std::shared_ptr<const std::string> line;
  std::shared_ptr<const core::StreamRecord> record;
  {
    std::lock_guard lock(mu_);
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      if (it->summary.id == id) {
        line = it->line;
        record = it->record;
        break;
      }
    }
  }
  if (!line) return std::nullopt;
  Found found;
  found.timeline_kept = record != nullptr;
  if (!record) {
    found.line = *line;
    return found;
  }
  output::RenderOptions render;
  render.timeline = true;
  render.host = options_.host;
  found.line = output::render_stream(*record, options_.clock, render);  // outside the lock
  return found;
}

std::vector<LiveStream> RecordStore::live() const {
  std::lock_guard lock(mu_);
  return live_;
}

json RecordStore::live_json(core::TimestampNs now_ns) const {
  std::vector<LiveStream> streams = live();
  std::sort(streams.begin(), streams.end(), [](const LiveStream& a, const LiveStream& b) { return a.started_ns < b.started_ns; });
  json out = json::array();
  for (const LiveStream& l : streams) {
    const auto since = [&](core::TimestampNs t) -> json {
      if (!t || t > now_ns) return t ? json(0.0) : json(nullptr);
      return static_cast<double>((now_ns - t) / 1000) / 1000.0;
    };
    out.push_back(json{{"id", l.id},
                       {"pid", l.pid},
                       {"comm", l.comm},
                       {"path", l.path},
                       {"model", l.model},
                       {"role", core::to_string(l.role)},
                       {"started_ns", l.started_ns},
                       {"age_ms", since(l.started_ns)},
                       {"events", l.events},
                       {"last_event_ns", l.last_event_ns},
                       {"idle_ms", since(l.last_event_ns)},
                       {"first_token", l.first_token_ns != 0},
                       {"cgroup", l.cgroup}});
  }
  return out;
}

namespace {

json group_json(const std::string& key, Group& g) {
  return json{{"key", key},
              {"streams", g.streams},
              {"partial", g.partial},
              {"errors", g.errors},
              {"ttft_p50_ms", percentile_json(g.ttft, 50)},
              {"ttft_p95_ms", percentile_json(g.ttft, 95)},
              {"itl_p50_ms", percentile_json(g.itl50, 50)},
              {"itl_p95_ms", percentile_json(g.itl95, 95)},
              {"itl_p99_ms", percentile_json(g.itl99, 99)},
              {"tokens", g.tokens},
              {"tokens_per_s_p50", percentile_json(g.rate, 50)},
              {"stalls", g.stalls},
              {"streams_with_stalls", g.streams_with_stalls}};
}

std::string key_of(const RecordSummary& s, GroupBy by) {
  switch (by) {
    case GroupBy::model: return core::model_key(s.model);
    case GroupBy::route: return core::route_of(s.path, kNoRoute);
    case GroupBy::process: return core::process_key(s.comm, s.pid);
    case GroupBy::container: return s.container;
  }
  return {};
}

}  // namespace

json RecordStore::stats(GroupBy by) const {
  std::map<std::string, Group> groups;
  Group all;
  core::TimestampNs from = 0, to = 0;
  {
    std::lock_guard lock(mu_);
    for (const Entry& e : entries_) {
      groups[key_of(e.summary, by)].add(e.summary);
      all.add(e.summary);
      if (!from || e.summary.end_ns < from) from = e.summary.end_ns;
      to = std::max(to, e.summary.end_ns);
    }
  }
  std::vector<json> rows;
  for (auto& [key, g] : groups) rows.push_back(group_json(key, g));
  std::stable_sort(rows.begin(), rows.end(), [](const json& a, const json& b) {
    return a["streams"].get<std::uint64_t>() > b["streams"].get<std::uint64_t>();
  });
  json out;
  out["by"] = to_string(by);
  out["records"] = all.streams;
  out["from_ns"] = from ? json(from) : json(nullptr);
  out["to_ns"] = to ? json(to) : json(nullptr);
  out["groups"] = rows;
  out["total"] = group_json("(all)", all);
  return out;
}

json RecordStore::top(core::TimestampNs now_ns, std::uint64_t window_ns) const {
  using Key = std::tuple<std::string, std::string, std::string>;  // process, model, route
  struct Row {
    Group g;
    std::uint64_t live = 0;
  };
  std::map<Key, Row> rows;
  const core::TimestampNs since = now_ns > window_ns ? now_ns - window_ns : 0;
  std::uint64_t live_total = 0;
  Group all;
  {
    std::lock_guard lock(mu_);
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      const RecordSummary& s = it->summary;
      if (s.end_ns < since || s.end_ns > now_ns) continue;
      rows[Key{core::process_key(s.comm, s.pid), core::model_key(s.model), core::route_of(s.path, kNoRoute)}].g.add(s);
      all.add(s);
    }
    for (const LiveStream& l : live_) {
      ++rows[Key{core::process_key(l.comm, l.pid), core::model_key(l.model), core::route_of(l.path, kNoRoute)}].live;
      ++live_total;
    }
  }
  const double window_s = static_cast<double>(window_ns) / 1e9;
  std::vector<json> out_rows;
  for (auto& [key, row] : rows) {
    json j = group_json("", row.g);
    j.erase("key");
    j["process"] = std::get<0>(key);
    j["model"] = std::get<1>(key);
    j["route"] = std::get<2>(key);
    j["live"] = row.live;
    j["tokens_per_s"] = window_s > 0 ? static_cast<double>(row.g.tokens) / window_s : 0.0;
    out_rows.push_back(std::move(j));
  }
  std::stable_sort(out_rows.begin(), out_rows.end(), [](const json& a, const json& b) {
    const auto weight = [](const json& j) { return j["live"].get<std::uint64_t>() + j["streams"].get<std::uint64_t>(); };
    return weight(a) > weight(b);
  });
  json out;
  out["window_s"] = window_s;
  out["now_ns"] = now_ns;
  out["live"] = live_total;
  out["streams"] = all.streams;
  out["tokens"] = all.tokens;
  out["tokens_per_s"] = window_s > 0 ? static_cast<double>(all.tokens) / window_s : 0.0;
  out["stalls"] = all.stalls;
  out["rows"] = out_rows;
  return out;
}

SubscriptionPtr RecordStore::subscribe(bool timeline, std::size_t queue) {
  auto sub = std::make_shared<Subscription>(queue ? queue : options_.subscriber_queue, timeline);
  std::lock_guard lock(mu_);
  subscribers_.push_back(sub);
  std::size_t n = 0;
  for (auto& weak : subscribers_) n += !weak.expired();
  counters_.subscribers = n;
  return sub;
}

StoreCounters RecordStore::counters() const {
  std::lock_guard lock(mu_);
  StoreCounters c = counters_;
  c.records = entries_.size();
  c.live = live_.size();
  c.subscribers = 0;
  for (auto& weak : subscribers_) {
    SubscriptionPtr sub = weak.lock();
    c.subscribers += sub && !sub->closed();
  }
  return c;
}

json RecordStore::counters_json() const {
  const StoreCounters c = counters();
  return json{{"records", c.records},
              {"capacity", c.capacity},
              {"added", c.added},
              {"evicted", c.evicted},
              {"timeline_bytes", c.timeline_bytes},
              {"timelines_dropped", c.timelines_dropped},
              {"live", c.live},
              {"subscribers", c.subscribers},
              {"subscriber_drops", c.subscriber_drops}};
}

std::size_t RecordStore::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace infertap::daemon
