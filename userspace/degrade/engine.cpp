#include "degrade/engine.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

// A number as the leads say it: whole when it is, else 1-2 decimals.
std::string num(double v) {
  char buf[32];
  if (std::fabs(v - std::round(v)) < 1e-9 && std::fabs(v) < 1e12) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else if (std::fabs(v) >= 10) {
    std::snprintf(buf, sizeof buf, "%.1f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f", v);
  }
  return buf;
}

double round3(double v) { return std::round(v * 1000) / 1000; }

// Band of `v` among classes; "" when there are none, "unknown" without a value.
std::string band_of(const std::vector<LengthClass>& bands, const std::optional<double>& v) {
  if (bands.empty()) return "";
  if (!v) return "unknown";
  for (const LengthClass& b : bands) {
    if (!b.below || *v < static_cast<double>(*b.below)) return b.name;
  }
  return bands.back().name;
}

// The identity fields, in the order of Engine::IdentityCounts.
constexpr std::array<const char*, 3> kIdentityFields = {"model", "system_fingerprint", "server_version"};
std::string& field_of(ServingIdentity& id, std::size_t i) {
  return i == 0 ? id.model : i == 1 ? id.system_fingerprint : id.server_version;
}
const std::string& field_of(const ServingIdentity& id, std::size_t i) {
  return i == 0 ? id.model : i == 1 ? id.system_fingerprint : id.server_version;
}
// Does `obs` come from another serving identity than the cohort's? Only fields both know count.
bool identity_differs(const ServingIdentity& cohort, const ServingIdentity& obs) {
  for (std::size_t i = 0; i < kIdentityFields.size(); ++i) {
    const std::string& a = field_of(cohort, i);
    const std::string& b = field_of(obs, i);
    if (!a.empty() && !b.empty() && a != b) return true;
  }
  return false;
}

// The engine's value of each load number of an observation.
std::array<std::optional<double>, kLoadMetrics> load_values(const LoadNumbers& l) {
  std::array<std::optional<double>, kLoadMetrics> v{};
  v[static_cast<std::size_t>(LoadMetric::concurrency)] = l.concurrency;
  v[static_cast<std::size_t>(LoadMetric::waiting)] = l.waiting;
  v[static_cast<std::size_t>(LoadMetric::input)] = l.input_size();
  v[static_cast<std::size_t>(LoadMetric::cpu_pressure)] = l.cpu_pressure;
  v[static_cast<std::size_t>(LoadMetric::memory_pressure)] = l.memory_pressure;
  v[static_cast<std::size_t>(LoadMetric::cpu_per_token)] = l.cpu_ms_per_token;
  return v;
}

constexpr std::size_t idx(Metric m) { return static_cast<std::size_t>(m); }
constexpr std::size_t idx(LoadMetric m) { return static_cast<std::size_t>(m); }

}  // namespace

std::string_view load_metric_name(LoadMetric m) {
  switch (m) {
    case LoadMetric::concurrency: return "concurrency";
    case LoadMetric::waiting: return "waiting";
    case LoadMetric::input: return "input_tokens";
    case LoadMetric::cpu_pressure: return "cpu_pressure";
    case LoadMetric::memory_pressure: return "memory_pressure";
    case LoadMetric::cpu_per_token: return "cpu_ms_per_token";
  }
  return "?";
}

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
    case CohortState::reviewing: return "reviewing";
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

std::string length_class_of(const DegradationConfig& config, std::uint64_t tokens) {
  for (const LengthClass& lc : config.length_classes) {
    if (!lc.below || tokens < *lc.below) return lc.name;
  }
  return config.length_classes.empty() ? "all" : config.length_classes.back().name;
}

std::string Engine::length_class_of(std::uint64_t tokens) const { return degrade::length_class_of(config_, tokens); }

namespace {
// The decode-phase mean, rounded: 1.4 streams in flight is band 1, 1.6 is 2.
std::string concurrency_band(const DegradationConfig& c, const std::optional<double>& concurrency) {
  return band_of(c.concurrency_bands, concurrency ? std::optional<double>(std::round(*concurrency)) : std::nullopt);
}
}  // namespace

std::array<std::string, 3> bands_of(const DegradationConfig& config, const core::StreamRecord& record) {
  const LoadNumbers l = load_of(record.load);
  return {length_class_of(config, record.metrics.tokens), concurrency_band(config, l.concurrency),
          band_of(config.input_bands, l.input_size())};
}

std::string Engine::concurrency_band_of(const std::optional<double>& concurrency) const {
  return concurrency_band(config_, concurrency);
}

std::string Engine::input_band_of(const std::optional<double>& input_size) const {
  return band_of(config_.input_bands, input_size);
}

CohortKey Engine::key_of(const Observation& obs) const {
  return CohortKey{obs.model,
                   obs.route,
                   obs.process,
                   obs.container,
                   obs.vantage,
                   length_class_of(obs.output_tokens),
                   concurrency_band_of(obs.load.concurrency),
                   input_band_of(obs.load.input_size())};
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
        glob(o.container, key.container) && glob(o.length_class, key.length_class) &&
        glob(o.concurrency_band, key.concurrency_band) && glob(o.input_band, key.input_band)) {
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

  const CohortKey key = key_of(obs);
  if (Cohort* c = cohort_for(key)) {
    c->streams += 1;
    c->last_seen_ns = std::max(c->last_seen_ns, obs.end_ns);
    const Objective* objective = c->objective >= 0 ? &config_.objectives[static_cast<std::size_t>(c->objective)] : nullptr;
    const auto values = metric_values(obs);
    // A stream of another serving identity than the cohort's (an upgrade
    // rolling in) is not judged against the old baseline: the window decides
    // whether the identity changed (close_window, baseline review).
    const bool other_identity = identity_differs(c->identity, obs.identity);
    for (std::size_t i = 0; i < kIdentityFields.size(); ++i) {
      const std::string& v = field_of(obs.identity, i);
      auto& counts = c->identities[i];
      if (v.empty() || (counts.size() >= 8 && !counts.count(v))) continue;
      counts[v] += 1;
    }
    const auto loads = load_values(obs.load);
    for (std::size_t i = 0; i < kLoadMetrics; ++i) {
      if (loads[i] && c->load_win[i].size() < kMaxSamples) c->load_win[i].push_back(*loads[i]);
    }
    bool any = false;
    for (Metric m : kAllMetrics) {
      const auto i = static_cast<std::size_t>(m);
      if (!values[i]) continue;
      const double v = *values[i];
      MetricWindow& w = c->win[i];
      w.n += 1;
      if (w.values.size() < kMaxSamples) w.values.push_back(v);
      const bool by_objective = objective && objective->limit[i] && breaches(m, v, *objective->limit[i], config_.objective_ratio);
      const bool by_baseline = config_.baseline && !other_identity && c->baseline[i] &&
                               breaches(m, v, *c->baseline[i], config_.baseline_ratio);
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
    Usage& u = it->second;
    u.decode_ns += obs.decode_ns;
    u.tokens += obs.output_tokens;
    u.streams += 1;
    if (obs.load.input_tokens) {
      u.input_tokens += *obs.load.input_tokens;
      u.with_input_tokens += 1;
    }
    if (obs.load.request_bytes) {
      u.request_bytes += *obs.load.request_bytes;
      u.with_request_bytes += 1;
    }
    if (obs.load.client_share) {
      u.share_sum += *obs.load.client_share;
      u.with_share += 1;
    }
    if (obs.load.client_concurrency) u.peak = std::max(u.peak, *obs.load.client_concurrency);
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
  // Load bands: the same input band (the same requests), any concurrency band
  // (each process counts its own streams in flight: a buffering gateway's
  // bursts overlap less than the server's streams do).
  bool judged = false;
  for (const auto& [key, other] : cohorts_) {
    if (&other == &c || key.vantage != Vantage::server_emit || key.model != c.key.model ||
        key.route != c.key.route || key.length_class != c.key.length_class || key.input_band != c.key.input_band) {
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
  for (auto& [key, c] : cohorts_) {
    c.last = judge(c);
    for (std::size_t i = 0; i < kLoadMetrics; ++i) {
      c.load_last[i] = c.last.judged && !c.load_win[i].empty() ? std::optional<double>(median(c.load_win[i])) : std::nullopt;
    }
  }
  for (auto& [key, c] : cohorts_) {
    c.windows_since_review += 1;
    const bool reviewed = review_identity(c, window_end);
    if (reviewed) {
      // The window mixes the identities: no streak goes on, nothing is learned.
      c.breach_streak = 0;
      c.healthy_streak = 0;
      c.idle_windows = 0;
      if (!c.degraded) c.streak_causes.clear();
    } else {
      advance_cohort(key, c, window_end);
      if (c.reviewing) complete_review(c, window_end);
    }
    c.win = {};
    c.load_win = {};
    c.streams = 0;
    c.affected = 0;
    c.causes.clear();
    c.identities = {};
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
  a.leads = leads_for(c, a.layer);
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
  r.leads.clear();
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
  for (std::size_t i = 0; i < kLoadMetrics; ++i) {
    if (!c.load_last[i]) continue;
    std::deque<double>& h = c.load_history[i];
    h.push_back(*c.load_last[i]);
    while (h.size() > config_.history_windows) h.pop_front();
    if (h.size() >= config_.warmup_windows) c.load_baseline[i] = median(std::vector<double>(h.begin(), h.end()));
  }
}

// The window's serving identity: per field, the value of at least 2/3 of the
// streams that carry the field, when at least half of the window's streams
// do. A field the cohort knew that now has another value is a change: the
// baseline starts anew and a review is written. A mix (two replicas of
// different versions behind one route) changes nothing.
bool Engine::review_identity(Cohort& c, core::TimestampNs window_end) {
  if (!c.last.judged || !config_.baseline) return false;
  ServingIdentity now = c.identity;
  std::vector<std::string> changed;
  for (std::size_t i = 0; i < kIdentityFields.size(); ++i) {
    std::uint32_t total = 0, best = 0;
    std::string value;
    for (const auto& [v, n] : c.identities[i]) {
      total += n;
      if (n > best) {
        best = n;
        value = v;
      }
    }
    if (total * 2 < c.last.streams || best * 3 < total * 2) continue;
    std::string& known = field_of(now, i);
    if (known == value) continue;
    if (!known.empty()) changed.push_back(kIdentityFields[i]);
    known = value;
  }
  if (changed.empty()) {
    c.identity = now;  // first seen: learned, not a change
    return false;
  }
  BaselineReview r;
  r.id = next_id_++;
  r.cohort = c.key;
  r.from = c.identity;
  r.to = now;
  r.changed = std::move(changed);
  r.ts_ns = window_end;
  r.since_ns = window_start_;
  r.window_s = config_.window_s;
  r.prior = c.baseline;
  c.identity = now;
  c.reviewing = true;
  c.reviewed = true;
  c.review = r;
  c.windows_since_review = 0;
  c.baseline = {};
  c.history = {};
  counters_.baseline_reviews += 1;
  pending_reviews_.push_back(r);
  recent_reviews_.push_back(r);
  while (recent_reviews_.size() > config_.recent_alerts) recent_reviews_.pop_front();
  return true;
}

// The new baseline has warmed up: the review says what it is against the prior one.
void Engine::complete_review(Cohort& c, core::TimestampNs window_end) {
  bool learned = false;
  for (const auto& b : c.baseline) learned = learned || b.has_value();
  if (!learned) return;
  BaselineReview r = c.review;
  r.completed = true;
  r.ts_ns = window_end;
  r.baseline = c.baseline;
  std::size_t windows = 0;
  for (const auto& h : c.history) windows = std::max(windows, h.size());
  r.windows = static_cast<std::uint32_t>(windows);
  c.review = r;
  c.reviewing = false;
  pending_reviews_.push_back(r);
  recent_reviews_.push_back(r);
  while (recent_reviews_.size() > config_.recent_alerts) recent_reviews_.pop_front();
}

std::optional<double> Engine::load_reference(const Cohort& c, LoadMetric m) const {
  if (c.load_baseline[idx(m)]) return c.load_baseline[idx(m)];
  const bool by_concurrency = m == LoadMetric::concurrency || m == LoadMetric::waiting;
  const bool by_input = m == LoadMetric::input;
  if (!by_concurrency && !by_input) return std::nullopt;
  std::optional<double> least;
  for (const auto& [key, other] : cohorts_) {
    if (&other == &c || !other.load_baseline[idx(m)]) continue;
    CohortKey a = key, b = c.key;
    if (by_concurrency) a.concurrency_band = b.concurrency_band = "";
    if (by_input) a.input_band = b.input_band = "";
    if (a != b) continue;
    if (!least || *other.load_baseline[idx(m)] < *least) least = other.load_baseline[idx(m)];
  }
  return least;
}

// Seed 000's table of investigative leads, where the window's evidence
// supports them (docs/degradation.md#leads). A lead says what to check and
// the numbers behind it; it is never the verdict.
std::vector<Lead> Engine::leads_for(const Cohort& c, Layer layer) const {
  std::vector<Lead> out;
  const WindowVerdict& v = c.last;
  const auto breached = [&](Metric m) { return v.metric_breached[idx(m)]; };
  const auto present = [&](Metric m) { return v.metric_present[idx(m)]; };
  const bool decode = breached(Metric::tokens_per_s) || breached(Metric::itl_p95) || breached(Metric::itl_p99) ||
                      breached(Metric::longest_pause);
  const bool ttft = breached(Metric::ttft);
  const auto now = [&](LoadMetric m) { return c.load_last[idx(m)]; };
  // A load number rose materially: by half again and by `floor`.
  const auto rose = [](const std::optional<double>& before, const std::optional<double>& after, double floor) {
    return before && after && *after >= *before * 1.5 && *after - *before >= floor;
  };
  const auto concurrency_ref = load_reference(c, LoadMetric::concurrency);
  const auto concurrency_now = now(LoadMetric::concurrency);
  const bool concurrency_rose = rose(concurrency_ref, concurrency_now, 2);

  if (decode && concurrency_rose) {
    out.push_back({"decode_pressure",
                   "decode-stage pressure may be contributing: concurrency " + num(*concurrency_ref) + " -> " +
                       num(*concurrency_now) + " in this window" + (ttft ? "" : ", while TTFT holds"),
                   {{"concurrency_before", round3(*concurrency_ref)}, {"concurrency_now", round3(*concurrency_now)}}});
  }
  if (ttft) {
    const auto waiting_ref = load_reference(c, LoadMetric::waiting);
    const auto waiting_now = now(LoadMetric::waiting);
    const bool waiting_rose = waiting_now && *waiting_now >= 2 && (!waiting_ref || rose(waiting_ref, waiting_now, 2));
    if (waiting_rose || concurrency_rose) {
      Lead l{"queueing", "queueing before the first token may be contributing:", {}};
      if (waiting_now) {
        l.says += " waiting requests " + (waiting_ref ? num(*waiting_ref) + " -> " : std::string()) + num(*waiting_now);
        if (waiting_ref) l.numbers.push_back({"waiting_before", round3(*waiting_ref)});
        l.numbers.push_back({"waiting_now", round3(*waiting_now)});
      }
      if (concurrency_ref && concurrency_now) {
        l.says += std::string(waiting_now ? "," : "") + " concurrency " + num(*concurrency_ref) + " -> " + num(*concurrency_now);
        l.numbers.push_back({"concurrency_before", round3(*concurrency_ref)});
        l.numbers.push_back({"concurrency_now", round3(*concurrency_now)});
      }
      out.push_back(std::move(l));
    }
    const auto input_ref = load_reference(c, LoadMetric::input);
    const auto input_now = now(LoadMetric::input);
    if (input_ref && *input_ref > 0 && rose(input_ref, input_now, 1)) {
      out.push_back({"input_size",
                     "longer inputs may be contributing: median input " + num(*input_ref) + " -> " + num(*input_now) +
                         " tokens (request bytes / 4 where the stream reports no usage)",
                     {{"input_tokens_before", round3(*input_ref)}, {"input_tokens_now", round3(*input_now)}}});
    }
  }
  // The path: the lag, or stalls the server did not cause.
  const std::string cause = dominant(c.streak_causes);
  const bool path_cause = cause == "client_read" || cause == "backpressure" || cause == "network" || cause == "gateway_buffering";
  if (layer == Layer::delivery_path || breached(Metric::delivery_lag) || path_cause) {
    Lead l{"delivery", "downstream delivery or backpressure:", {}};
    if (present(Metric::delivery_lag)) {
      const Evidence& e = v.evidence[idx(Metric::delivery_lag)];
      l.says += " delivery lag median " + num(e.observed) + " ms, p90 " + num(e.worst) + " ms";
      l.numbers.push_back({"lag_median_ms", round3(e.observed)});
      l.numbers.push_back({"lag_p90_ms", round3(e.worst)});
    }
    if (!cause.empty()) {
      l.says += std::string(present(Metric::delivery_lag) ? "," : "") + " stall cause " + cause;
      l.numbers.push_back({"stalls_" + cause, static_cast<double>(c.streak_causes.at(cause))});
    }
    if (layer == Layer::delivery_path) l.says += std::string(l.numbers.empty() ? "" : ";") + " the server's own emit is healthy";
    out.push_back(std::move(l));
  }
  if (c.reviewed && c.windows_since_review <= config_.history_windows) {
    const BaselineReview& r = c.review;
    Lead l{"serving_change", "compare with the prior baseline:", {}};
    for (std::size_t i = 0; i < r.changed.size(); ++i) {
      const std::size_t f = r.changed[i] == "model" ? 0 : r.changed[i] == "system_fingerprint" ? 1 : 2;
      l.says += std::string(i ? "," : "") + " " + r.changed[i] + " " + field_of(r.from, f) + " -> " + field_of(r.to, f);
    }
    l.says += " " + std::to_string(c.windows_since_review) + " windows ago";
    for (const Evidence& e : v.evidence) {
      if (!breached(e.metric) || !r.prior[idx(e.metric)]) continue;
      const std::string name(metric_name(e.metric));
      l.says += "; " + name + " prior baseline " + num(*r.prior[idx(e.metric)]) + ", now " + num(e.observed);
      l.numbers.push_back({name + "_prior", round3(*r.prior[idx(e.metric)])});
      l.numbers.push_back({name + "_now", round3(e.observed)});
    }
    out.push_back(std::move(l));
  }
  if ((breached(Metric::longest_pause) || breached(Metric::itl_p99)) && present(Metric::tokens_per_s) &&
      !breached(Metric::tokens_per_s)) {
    const Metric gap = breached(Metric::longest_pause) ? Metric::longest_pause : Metric::itl_p99;
    const Evidence& g = v.evidence[idx(gap)];
    const Evidence& rate = v.evidence[idx(Metric::tokens_per_s)];
    out.push_back({"uneven_delivery",
                   std::string("uneven delivery: ") + (gap == Metric::longest_pause ? "longest pause" : "ITL p99") +
                       " p90 " + num(g.worst) + " ms while the mean rate holds at " + num(rate.observed) + " tokens/s",
                   {{std::string(metric_name(gap)) + "_p90", round3(g.worst)}, {"tokens_per_s", round3(rate.observed)}}});
  }
  for (const LoadMetric m : {LoadMetric::cpu_pressure, LoadMetric::memory_pressure}) {
    const auto p = now(m);
    const auto ref = c.load_baseline[idx(m)];
    if (!p || *p < 10 || (ref && *p < *ref * 2)) continue;
    const std::string what = m == LoadMetric::cpu_pressure ? "cpu" : "memory";
    Lead l{"host_pressure",
           what + " pressure on the server's cgroup or host may be contributing: " + what + " some avg10 " + num(*p) + "%",
           {{what + "_some_avg10", round3(*p)}}};
    if (ref) {
      l.says += " (baseline " + num(*ref) + "%)";
      l.numbers.push_back({what + "_some_avg10_baseline", round3(*ref)});
    }
    out.push_back(std::move(l));
  }
  {
    const auto ref = c.load_baseline[idx(LoadMetric::cpu_per_token)];
    const auto p = now(LoadMetric::cpu_per_token);
    if (ref && *ref > 0 && rose(ref, p, 0)) {
      out.push_back({"cpu_per_token",
                     "the server spends more CPU per token: " + num(*ref) + " -> " + num(*p) + " ms",
                     {{"cpu_ms_per_token_before", round3(*ref)}, {"cpu_ms_per_token_now", round3(*p)}}});
    }
  }
  return out;
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
      if (u.with_input_tokens) s.input_tokens_per_stream = round3(u.input_tokens / u.with_input_tokens);
      if (u.with_request_bytes) s.request_bytes_per_stream = round3(u.request_bytes / u.with_request_bytes);
      s.output_tokens_per_stream = u.streams ? round3(static_cast<double>(u.tokens) / u.streams) : 0;
      if (u.with_share) s.concurrency_share = round3(u.share_sum / u.with_share);
      if (u.peak > 0) s.peak_client_concurrency = u.peak;
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
std::vector<BaselineReview> Engine::take_reviews() { return std::exchange(pending_reviews_, {}); }

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
    s.identity = c.identity;
    bool learned = false;
    for (const auto& b : c.baseline) learned = learned || b.has_value();
    if (c.degraded) {
      s.state = CohortState::degraded;
    } else if (c.breach_streak > 0) {
      s.state = CohortState::breaching;
    } else if (c.reviewing) {
      s.state = CohortState::reviewing;
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
