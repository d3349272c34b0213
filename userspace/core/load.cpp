#include "core/load.h"

#include <algorithm>
#include <type_traits>

namespace infertap::core {
namespace {

// A scope with nothing in flight or waiting is forgotten after this long.
constexpr std::uint64_t kIdleScopeNs = 600'000'000'000ull;
// Scopes kept before idle ones are forgotten early.
constexpr std::size_t kMaxScopes = 4096;

}  // namespace

LoadTracker::Scope& LoadTracker::scope_for(const ScopeId& id, TimestampNs ts) {
  auto it = scopes_.find(id.key);
  if (it == scopes_.end()) {
    if (scopes_.size() >= kMaxScopes) forget_idle(ts + kIdleScopeNs);  // make room: every idle scope goes
    it = scopes_.emplace(id.key, Scope{}).first;
    it->second.id = id;
    it->second.last_change = ts;
    if (!id.cgroup.empty() && (cgroups_.size() < kMaxScopes || cgroups_.count(id.cgroup))) {
      CgroupSample& c = cgroups_[id.cgroup];
      c.last_used = std::max(c.last_used, ts);  // sampled from the next tick on
    }
  }
  Scope& s = it->second;
  s.last_used = std::max(s.last_used, ts);
  return s;
}

// Events of different CPUs reach userspace slightly out of order: time never
// runs back inside a scope.
void LoadTracker::advance(Scope& s, TimestampNs ts) {
  if (ts <= s.last_change) return;
  s.area += static_cast<unsigned __int128>(s.in_flight) * (ts - s.last_change);
  s.last_change = ts;
}

void LoadTracker::set_in_flight(Scope& s, std::uint32_t value, TimestampNs ts) {
  advance(s, ts);
  s.in_flight = value;
  const TimestampNs at = s.last_change;
  while (!s.peaks.empty() && s.peaks.back().second <= value) s.peaks.pop_back();
  s.peaks.emplace_back(at, value);
}

std::uint32_t LoadTracker::request_ended(const ScopeId& id, TimestampNs ts) {
  Scope& s = scope_for(id, ts);
  const std::uint32_t ahead = s.waiting;
  s.waiting += 1;
  return ahead;
}

void LoadTracker::request_dropped(std::uint64_t key) {
  auto it = scopes_.find(key);
  if (it != scopes_.end() && it->second.waiting > 0) it->second.waiting -= 1;
}

void LoadTracker::first_token(const ScopeId& id, Ticket& t, bool was_waiting, TimestampNs ts, std::uint64_t client,
                              LoadContext& out) {
  Scope& s = scope_for(id, ts);
  if (was_waiting && s.waiting > 0) s.waiting -= 1;
  set_in_flight(s, s.in_flight + 1, ts);
  t.decoding = true;
  t.first_token_ns = s.last_change;
  t.area_at_first_token = s.area;
  t.concurrency = s.in_flight;
  out.concurrency = s.in_flight;
  out.waiting = s.waiting;
  if (client != 0) {
    auto c = s.clients.find(client);
    if (c == s.clients.end() && s.clients.size() < config_.max_clients_per_scope) {
      c = s.clients.emplace(client, 0).first;
    }
    if (c != s.clients.end()) {
      c->second += 1;
      out.client_concurrency = c->second;
      t.client = client;
    }
  }
}

void LoadTracker::stream_ended(const ScopeId& id, Ticket& t, TimestampNs ts, std::uint64_t tokens,
                               const std::string& cgroup, LoadContext& out) {
  Scope& s = scope_for(id, ts);
  if (t.decoding) {
    advance(s, ts);
    const TimestampNs from = t.first_token_ns;
    const TimestampNs to = s.last_change;
    if (to > from) {
      out.concurrency_mean = static_cast<double>(s.area - t.area_at_first_token) / static_cast<double>(to - from);
    } else {
      out.concurrency_mean = t.concurrency;
    }
    // The largest in_flight since the first token: the first change at or
    // after it (the stack's times increase, its values decrease).
    std::uint32_t peak = t.concurrency;
    const auto at = std::lower_bound(s.peaks.begin(), s.peaks.end(), from,
                                     [](const auto& p, TimestampNs v) { return p.first < v; });
    if (at != s.peaks.end()) peak = std::max(peak, at->second);
    out.concurrency_max = peak;
    set_in_flight(s, s.in_flight > 0 ? s.in_flight - 1 : 0, ts);
    if (t.client != 0) {
      auto c = s.clients.find(t.client);
      if (c != s.clients.end() && --c->second == 0) s.clients.erase(c);
    }
    t.decoding = false;
  }
  s.tokens += tokens;
  out.host_pressure = host_;
  if (cgroup == s.id.cgroup) {
    out.cgroup_pressure = s.cgroup_pressure;  // the scope's own: no lookup
  } else if (!cgroup.empty()) {
    if (auto c = cgroups_.find(cgroup); c != cgroups_.end()) {
      out.cgroup_pressure = c->second.pressure;
      c->second.last_used = std::max(c->second.last_used, ts);
    } else if (cgroups_.size() < kMaxScopes) {
      cgroups_.emplace(cgroup, CgroupSample{std::nullopt, ts});  // sampled from the next tick on
    }
  }
  // CPU time per token over the samples of the last cpu_span_ns: the oldest
  // and the newest (the tokens of streams that ended between them).
  if (s.id.process && s.cpu.size() >= 2) {
    const CpuSample& a = s.cpu.front();
    const CpuSample& b = s.cpu.back();
    if (b.tokens > a.tokens && b.cpu_ns >= a.cpu_ns) {
      out.cpu_ms_per_token = static_cast<double>(b.cpu_ns - a.cpu_ns) / 1e6 / static_cast<double>(b.tokens - a.tokens);
    }
  }
}

void LoadTracker::forget_idle(TimestampNs now) {
  for (auto it = scopes_.begin(); it != scopes_.end();) {
    const Scope& s = it->second;
    if (s.in_flight == 0 && s.waiting == 0 && now > s.last_used && now - s.last_used > kIdleScopeNs) {
      it = scopes_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = cgroups_.begin(); it != cgroups_.end();) {
    if (now > it->second.last_used && now - it->second.last_used > kIdleScopeNs) {
      it = cgroups_.erase(it);
    } else {
      ++it;
    }
  }
}

void LoadTracker::sample(TimestampNs now, LoadProbe& probe) {
  forget_idle(now);
  host_ = probe.host_pressure();
  // The most recently used cgroups and serving processes, at most max_sampled each.
  auto newest = [&](auto& table, auto eligible) {
    std::vector<std::pair<TimestampNs, typename std::decay_t<decltype(table)>::key_type>> order;
    for (const auto& [key, v] : table) {
      if (eligible(v)) order.emplace_back(v.last_used, key);
    }
    const std::size_t n = std::min(order.size(), config_.max_sampled);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    order.resize(n);
    return order;
  };
  for (const auto& [key, s] : scopes_) {
    if (s.id.cgroup.empty()) continue;
    if (auto c = cgroups_.find(s.id.cgroup); c != cgroups_.end()) c->second.last_used = std::max(c->second.last_used, s.last_used);
  }
  const auto cgroups = newest(cgroups_, [](const CgroupSample&) { return true; });
  std::unordered_map<std::string, bool> sampled;
  for (const auto& [used, path] : cgroups) {
    cgroups_[path].pressure = probe.cgroup_pressure(path);
    sampled[path] = true;
  }
  for (auto& [path, c] : cgroups_) {
    if (!sampled.count(path)) c.pressure.reset();  // not sampled: no stale numbers
  }
  for (auto& [key, s] : scopes_) {
    const auto c = s.id.cgroup.empty() ? cgroups_.end() : cgroups_.find(s.id.cgroup);
    s.cgroup_pressure = c == cgroups_.end() ? std::nullopt : c->second.pressure;
  }
  const auto processes = newest(scopes_, [](const Scope& s) { return s.id.process; });
  for (const auto& [used, key] : processes) {
    Scope& s = scopes_[key];
    const std::optional<std::uint64_t> cpu = probe.process_cpu_ns(s.id.pid);
    if (!cpu) {
      s.cpu.clear();
      continue;
    }
    // A pid reused by another process: its CPU time starts over.
    if (!s.cpu.empty() && *cpu < s.cpu.back().cpu_ns) s.cpu.clear();
    s.cpu.push_back({now, *cpu, s.tokens});
    while (s.cpu.size() > 2 && now - s.cpu.front().ts > config_.cpu_span_ns) s.cpu.pop_front();
  }
}

std::vector<ScopeLoad> LoadTracker::scopes() const {
  std::vector<ScopeLoad> out;
  out.reserve(scopes_.size());
  for (const auto& [key, s] : scopes_) {
    ScopeLoad l;
    l.scope = s.id.process ? "process" : "server";
    l.pid = s.id.pid;
    l.comm = s.id.comm;
    l.server = s.id.server;
    l.in_flight = s.in_flight;
    l.waiting = s.waiting;
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace infertap::core
