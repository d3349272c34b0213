#include "degrade/engine.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/percentile.h"
#include "output/format.h"

namespace infertap::degrade {
namespace {

constexpr std::size_t kMaxSamples = 4096;  // per metric and window: enough for a stable median

// Percentile p of a non-empty sample: the product's one percentile (nearest
// rank, base/percentile.h), so an alert and `infertap stats` agree.
double percentile(std::vector<double> v, double p) { return *base::percentile_in_place(v, p); }

double median(std::vector<double> v) { return percentile(std::move(v), 50); }

bool glob(const std::string& pattern, const std::string& value) {
  return pattern == "*" || fnmatch(pattern.c_str(), value.c_str(), 0) == 0;
}

std::string dominant(const std::map<std::string, std::uint64_t>& causes) {
  std::string best;
  std::uint64_t n = 0;
  for (const auto& [cause, count] : causes) {
    if (count > n) {
      best = cause;
      n = count;
    }
  }
  return best;
}

}  // namespace

std::string_view to_string(Layer l) {
  switch (l) {
    case Layer::serving: return "serving";
    case Layer::delivery_path: return "delivery_path";
    case Layer::undetermined: return "undetermined";
  }
  return "undetermined";
}

std::string_view to_string(CohortState s) {
  switch (s) {
    case CohortState::warming_up: return "warming_up";
    case CohortState::healthy: return "healthy";
    case CohortState::breaching: return "breaching";
    case CohortState::degraded: return "degraded";
  }
  return "healthy";
}

std::array<std::optional<double>, kMetrics> metric_values(const Observation& o) {
  std::array<std::optional<double>, kMetrics> v{};
  using output::ms_of;
  v[static_cast<std::size_t>(Metric::ttft)] = ms_of(o.ttft_ns);
  if (o.tokens_per_s && std::isfinite(*o.tokens_per_s)) v[static_cast<std::size_t>(Metric::tokens_per_s)] = o.tokens_per_s;
  v[static_cast<std::size_t>(Metric::itl_p95)] = ms_of(o.itl_p95_ns);
  v[static_cast<std::size_t>(Metric::itl_p99)] = ms_of(o.itl_p99_ns);
  v[static_cast<std::size_t>(Metric::longest_pause)] = ms_of(o.longest_pause_ns);
  v[static_cast<std::size_t>(Metric::delivery_lag)] = ms_of(o.delivery_lag_ns);
  return v;
}

Engine::Engine(DegradationConfig config)
    : config_(std::move(config)), window_ns_(static_cast<std::uint64_t>(config_.window_s * 1e9)) {
  if (window_ns_ == 0) window_ns_ = 1;
}

std::string Engine::length_class_of(std::uint64_t tokens) const {
  for (const LengthClass& lc : config_.length_classes) {
    if (!lc.below || tokens < *lc.below) return lc.name;
  }
  return config_.length_classes.empty() ? "all" : config_.length_classes.back().name;
}

bool Engine::breaches(Metric m, double v, double reference, double ratio) const {
  const double floor = m == Metric::delivery_lag ? config_.lag_floor_ms : config_.latency_floor_ms;
  if (higher_is_worse(m)) return v >= reference * ratio && v - reference >= floor && v > reference;
  return v <= reference / ratio && reference - v >= config_.rate_floor_tokens_per_s && v < reference;
}

Engine::Cohort* Engine::cohort_for(const CohortKey& key) {
  if (auto it = cohorts_.find(key); it != cohorts_.end()) return &it->second;
  if (cohorts_.size() >= config_.max_cohorts) {
    // Make room: the cohort idle the longest, never a degraded one or one with
    // streams in the current window.
    auto victim = cohorts_.end();
    for (auto it = cohorts_.begin(); it != cohorts_.end(); ++it) {
      const Cohort& c = it->second;
      if (c.degraded || c.streams != 0) continue;
      if (victim == cohorts_.end() || c.last_seen_ns < victim->second.last_seen_ns) victim = it;
    }
    if (victim == cohorts_.end()) return nullptr;
    cohorts_.erase(victim);
    counters_.cohorts_evicted += 1;
  }
  Cohort c;
  c.key = key;
  for (std::size_t i = 0; i < config_.objectives.size(); ++i) {
    const Objective& o = config_.objectives[i];
    if (o.vantage && *o.vantage != key.vantage) continue;
    if (glob(o.model, key.model) && glob(o.route, key.route) && glob(o.process, key.process) &&
        glob(o.container, key.container) && glob(o.length_class, key.length_class)) {
      c.objective = static_cast<int>(i);
      break;
    }
  }
  return &cohorts_.emplace(key, std::move(c)).first->second;
}

void Engine::observe(const Observation& obs) {
  if (!config_.enabled) return;
  advance(obs.end_ns);
  counters_.observations += 1;

  CohortKey key{obs.model, obs.route, obs.process, obs.container, obs.vantage, length_class_of(obs.output_tokens)};
  if (Cohort* c = cohort_for(key)) {
    c->streams += 1;
    c->last_seen_ns = std::max(c->last_seen_ns, obs.end_ns);
    const Objective* objective = c->objective >= 0 ? &config_.objectives[static_cast<std::size_t>(c->objective)] : nullptr;
    const auto values = metric_values(obs);
    bool any = false;
    for (Metric m : kAllMetrics) {
      const auto i = static_cast<std::size_t>(m);
      if (!values[i]) continue;
      const double v = *values[i];
      MetricWindow& w = c->win[i];
      w.n += 1;
      if (w.values.size() < kMaxSamples) w.values.push_back(v);
      const bool by_objective = objective && objective->limit[i] && breaches(m, v, *objective->limit[i], config_.objective_ratio);
      const bool by_baseline = config_.baseline && c->baseline[i] && breaches(m, v, *c->baseline[i], config_.baseline_ratio);
      w.breached_objective += by_objective ? 1 : 0;
      w.breached_baseline += by_baseline ? 1 : 0;
      if (by_objective || by_baseline) {
        w.breached += 1;
        any = true;
      }
    }
    c->affected += any ? 1 : 0;
    for (const auto& [cause, n] : obs.stall_causes) c->causes[cause] += n;
  } else {
    counters_.cohorts_refused += 1;
  }

  if (config_.abuse.enabled && obs.vantage == Vantage::server_emit && !obs.client_addr.empty()) {
    auto& clients = usage_[obs.process];
    auto it = clients.find(obs.client_addr);
    if (it == clients.end()) {
      const bool room = clients.size() < config_.abuse.max_clients;
      it = clients.try_emplace(room ? obs.client_addr : std::string("other")).first;
    }
    it->second.decode_ns += obs.decode_ns;
    it->second.tokens += obs.output_tokens;
    it->second.streams += 1;
  }
}

void Engine::tick(core::TimestampNs now) {
  if (!config_.enabled) return;
  advance(now);
}

void Engine::advance(core::TimestampNs now) {
  if (!started_) {
    window_start_ = now;
    started_ = true;
    return;
  }
  if (now < window_start_ + window_ns_) return;
  std::uint64_t n = (now - window_start_) / window_ns_;
  // After this many empty windows nothing changes any more: every degraded
  // cohort recovered for lack of traffic and every abuse signal cleared.
  const std::uint64_t enough =
      static_cast<std::uint64_t>(config_.stale_windows) + config_.exit_windows + config_.abuse.exit_windows + 2;
  const std::uint64_t skip = n > enough ? n - enough : 0;
  for (std::uint64_t i = 0; i < n - skip; ++i) {
    close_window();
    window_start_ += window_ns_;
  }
  window_start_ += skip * window_ns_;
}

Engine::WindowVerdict Engine::judge(Cohort& c) const {
  WindowVerdict v;
  v.streams = c.streams;
  v.affected = c.affected;
  v.judged = c.streams >= config_.min_streams;
  if (!v.judged) return v;
  v.healthy = true;
  const Objective* objective = c.objective >= 0 ? &config_.objectives[static_cast<std::size_t>(c.objective)] : nullptr;
  for (Metric m : kAllMetrics) {
    const auto i = static_cast<std::size_t>(m);
    const MetricWindow& w = c.win[i];
    if (w.n < config_.min_streams || w.values.empty()) continue;
    Evidence& e = v.evidence[i];
    e.metric = m;
    e.streams = w.n;
    e.affected = w.breached;
    e.affected_share = static_cast<double>(w.breached) / static_cast<double>(w.n);
    e.observed = median(w.values);
    e.worst = percentile(w.values, higher_is_worse(m) ? 90 : 10);
    if (objective) e.objective = objective->limit[i];
    e.baseline = config_.baseline ? c.baseline[i] : std::nullopt;
    if (w.breached_objective && w.breached_baseline) {
      e.reference = "objective+baseline";
    } else if (w.breached_objective) {
      e.reference = "objective";
    } else if (w.breached_baseline) {
      e.reference = "baseline";
    }
    v.metric_present[i] = true;
    if (e.affected_share >= config_.breach_share) {
      v.metric_breached[i] = true;
      v.breached = true;
    }
    if (e.affected_share >= config_.recovery_share) v.healthy = false;
  }
  if (v.breached) v.healthy = false;
  return v;
}

Layer Engine::layer_for(const Cohort& c) const {
  // Upstream emitters of the same traffic: server-emit cohorts of the same
  // model, route and length class (for a server-emit cohort, of another process:
  // a gateway's emit cohort and the inference server's). One of them healthy on
  // the breached metrics puts the slowdown between it and this vantage; one
  // breaching them too puts it at the server. (Server-emit cohorts have no
  // delivery lag: a lag breach is never compared, see below.)
  bool judged = false;
  for (const auto& [key, other] : cohorts_) {
    if (&other == &c || key.vantage != Vantage::server_emit || key.model != c.key.model ||
        key.route != c.key.route || key.length_class != c.key.length_class) {
      continue;
    }
    if (c.key.vantage == Vantage::server_emit && key.process == c.key.process) continue;
    if (!other.last.judged) continue;
    bool compared = false, breached = false;
    for (Metric m : kAllMetrics) {
      const auto i = static_cast<std::size_t>(m);
      if (!c.last.metric_breached[i] || !other.last.metric_present[i]) continue;
      compared = true;
      // Healthy means below the recovery share, as for a recovery.
      if (other.last.evidence[i].affected_share >= config_.recovery_share) breached = true;
    }
    if (!compared) continue;
    judged = true;
    if (!breached) return Layer::delivery_path;
  }
  if (judged) return Layer::serving;
  // A breach of a metric measured along the path alone (the delivery lag)
  // needs no upstream cohort to name its layer.
  for (Metric m : kAllMetrics) {
    if (path_only(m) && c.last.metric_breached[static_cast<std::size_t>(m)]) return Layer::delivery_path;
  }
  return c.key.vantage == Vantage::server_emit ? Layer::serving : Layer::undetermined;
}

void Engine::remember(const Alert& a) {
  pending_.push_back(a);
  recent_.push_back(a);
  while (recent_.size() > config_.recent_alerts) recent_.pop_front();
}

void Engine::close_window() {
  const core::TimestampNs window_end = window_start_ + window_ns_;
  counters_.windows_closed += 1;
  // Every verdict first: a cohort's layer compares it with the others' (layer_for).
  for (auto& [key, c] : cohorts_) c.last = judge(c);
  for (auto& [key, c] : cohorts_) {
    advance_cohort(key, c, window_end);
    c.win = {};
    c.streams = 0;
    c.affected = 0;
    c.causes.clear();
  }
  close_abuse_window(window_end);
}

void Engine::advance_cohort(const CohortKey& key, Cohort& c, core::TimestampNs window_end) {
  const WindowVerdict& v = c.last;
  if (!v.judged) {
    c.breach_streak = 0;
    c.healthy_streak = 0;
    if (!c.degraded) c.streak_causes.clear();
    c.idle_windows += 1;
    if (c.degraded && c.idle_windows >= config_.stale_windows) recover(c, "no_traffic", c.idle_windows, window_end);
    return;
  }
  c.idle_windows = 0;
  if (v.breached) {
    if (c.breach_streak == 0) c.streak_start_ns = window_start_;
    c.breach_streak += 1;
    c.healthy_streak = 0;
    for (const auto& [cause, n] : c.causes) c.streak_causes[cause] += n;
    if (!c.degraded && c.breach_streak >= config_.enter_windows) enter_degraded(key, c, window_end);
  } else if (v.healthy) {
    c.healthy_streak += 1;
    c.breach_streak = 0;
    if (c.degraded) {
      if (c.healthy_streak >= config_.exit_windows) recover(c, "healthy", c.healthy_streak, window_end);
    } else {
      c.streak_causes.clear();
      learn_baseline(c);
    }
  } else {
    // Between the recovery and the breach share: neither persists.
    c.breach_streak = 0;
    c.healthy_streak = 0;
    if (!c.degraded) c.streak_causes.clear();
  }
}

void Engine::enter_degraded(const CohortKey& key, Cohort& c, core::TimestampNs window_end) {
  const WindowVerdict& v = c.last;
  Alert a;
  a.id = next_id_++;
  a.degraded = true;
  a.reason = "breach";
  a.cohort = key;
  if (c.objective >= 0) a.objective = config_.objectives[static_cast<std::size_t>(c.objective)].name;
  a.ts_ns = window_end;
  a.since_ns = c.streak_start_ns;
  a.window_s = config_.window_s;
  a.windows = c.breach_streak;
  a.streams = v.streams;
  a.affected_share = static_cast<double>(v.affected) / static_cast<double>(v.streams);
  a.layer = layer_for(c);
  a.stall_causes = c.streak_causes;
  a.dominant_stall_cause = dominant(c.streak_causes);
  for (Metric m : kAllMetrics) {
    if (v.metric_breached[static_cast<std::size_t>(m)]) a.evidence.push_back(v.evidence[static_cast<std::size_t>(m)]);
  }
  c.degraded = true;
  c.degraded_since_ns = c.streak_start_ns;
  c.active = a;
  remember(a);
}

void Engine::recover(Cohort& c, const char* reason, std::uint32_t windows, core::TimestampNs window_end) {
  const WindowVerdict& v = c.last;
  Alert r = c.active;
  r.degraded = false;
  r.reason = reason;
  r.ts_ns = window_end;
  r.since_ns = c.degraded_since_ns;
  r.windows = windows;
  r.streams = v.streams;
  r.affected_share = v.streams ? static_cast<double>(v.affected) / static_cast<double>(v.streams) : 0;
  r.stall_causes.clear();
  r.dominant_stall_cause.clear();
  std::vector<Evidence> now;
  for (const Evidence& e : c.active.evidence) {
    const auto i = static_cast<std::size_t>(e.metric);
    if (v.metric_present[i]) now.push_back(v.evidence[i]);
  }
  r.evidence = std::move(now);
  c.degraded = false;
  c.breach_streak = 0;
  c.streak_causes.clear();
  remember(r);
}

// Only healthy windows teach the baseline: a regression is never learned as normal.
void Engine::learn_baseline(Cohort& c) {
  for (Metric m : kAllMetrics) {
    const auto i = static_cast<std::size_t>(m);
    if (!c.last.metric_present[i]) continue;
    std::deque<double>& h = c.history[i];
    h.push_back(c.last.evidence[i].observed);
    while (h.size() > config_.history_windows) h.pop_front();
    if (h.size() >= config_.warmup_windows) c.baseline[i] = median(std::vector<double>(h.begin(), h.end()));
  }
}

std::map<std::pair<std::string, std::string>, AbuseSignal> Engine::usage_signals(core::TimestampNs window_end) const {
  std::map<std::pair<std::string, std::string>, AbuseSignal> seen;
  for (const auto& [process, clients] : usage_) {
    std::uint64_t total_ns = 0, total_tokens = 0;
    for (const auto& [client, u] : clients) {
      total_ns += u.decode_ns;
      total_tokens += u.tokens;
    }
    for (const auto& [client, u] : clients) {
      AbuseSignal s;
      s.process = process;
      s.client = client;
      s.ts_ns = window_end;
      s.window_s = config_.window_s;
      s.decode_share = total_ns ? static_cast<double>(u.decode_ns) / static_cast<double>(total_ns) : 0;
      s.decode_s = static_cast<double>(u.decode_ns) / 1e9;
      s.process_decode_s = static_cast<double>(total_ns) / 1e9;
      s.tokens = u.tokens;
      s.process_tokens = total_tokens;
      s.streams = u.streams;
      s.clients = static_cast<std::uint32_t>(clients.size());
      seen.emplace(std::make_pair(process, client), s);
    }
  }
  return seen;
}

void Engine::close_abuse_window(core::TimestampNs window_end) {
  const auto seen = usage_signals(window_end);
  for (const auto& [key, s] : seen) abuse_.try_emplace(key);
  for (auto it = abuse_.begin(); it != abuse_.end();) {
    const auto found = seen.find(it->first);
    AbuseSignal now;
    if (found != seen.end()) {
      now = found->second;
    } else {
      now.process = it->first.first;
      now.client = it->first.second;
      now.ts_ns = window_end;
      now.window_s = config_.window_s;
    }
    AbuseState& st = it->second;
    advance_abuse(st, now, window_end);
    // Forget clients that are neither flagged nor on their way to it.
    if (!st.active && st.over_streak == 0) {
      it = abuse_.erase(it);
    } else {
      ++it;
    }
  }
  usage_.clear();
}

void Engine::advance_abuse(AbuseState& st, AbuseSignal now, core::TimestampNs window_end) {
  const AbuseConfig& cfg = config_.abuse;
  const bool judged = now.clients >= cfg.min_clients && now.client != "other";
  const bool over = judged && now.decode_share > cfg.share && now.streams >= cfg.min_streams;
  const bool under = !judged || now.decode_share < cfg.release_share;
  if (over) {
    if (st.over_streak == 0) st.since_ns = window_end - window_ns_;
    st.over_streak += 1;
    st.under_streak = 0;
    if (!st.active && st.over_streak >= cfg.enter_windows) {
      st.active = true;
      now.id = next_id_++;
      now.active = true;
      now.since_ns = st.since_ns;
      now.windows = st.over_streak;
      st.signal = now;
      pending_abuse_.push_back(now);
      recent_abuse_.push_back(now);
    }
  } else if (under) {
    st.under_streak += 1;
    st.over_streak = 0;
    if (st.active && st.under_streak >= cfg.exit_windows) {
      st.active = false;
      now.id = st.signal.id;
      now.active = false;
      now.since_ns = st.signal.since_ns;
      now.windows = st.under_streak;
      pending_abuse_.push_back(now);
      recent_abuse_.push_back(now);
    }
  } else {
    st.over_streak = 0;
    st.under_streak = 0;
  }
  while (recent_abuse_.size() > config_.recent_alerts) recent_abuse_.pop_front();
  if (st.active) st.signal.decode_share = now.decode_share;
}

std::vector<Alert> Engine::take_alerts() { return std::exchange(pending_, {}); }
std::vector<AbuseSignal> Engine::take_abuse() { return std::exchange(pending_abuse_, {}); }

std::vector<Alert> Engine::active_alerts() const {
  std::vector<Alert> out;
  for (const auto& [key, c] : cohorts_) {
    if (c.degraded) out.push_back(c.active);
  }
  return out;
}

std::vector<AbuseSignal> Engine::active_abuse() const {
  std::vector<AbuseSignal> out;
  for (const auto& [key, st] : abuse_) {
    if (st.active) out.push_back(st.signal);
  }
  return out;
}

std::vector<CohortStatus> Engine::cohorts() const {
  std::vector<CohortStatus> out;
  for (const auto& [key, c] : cohorts_) {
    CohortStatus s;
    s.key = key;
    s.last_streams = c.last.streams;
    s.baseline = c.baseline;
    bool learned = false;
    for (const auto& b : c.baseline) learned = learned || b.has_value();
    if (c.degraded) {
      s.state = CohortState::degraded;
    } else if (c.breach_streak > 0) {
      s.state = CohortState::breaching;
    } else if (c.objective < 0 && config_.baseline && !learned) {
      s.state = CohortState::warming_up;
    } else {
      s.state = CohortState::healthy;
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace infertap::degrade
