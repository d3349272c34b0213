// Degraded-stream detection (docs/degradation.md): observations grouped into
// cohorts, judged per tumbling window against absolute objectives and learned
// baselines, turned into alerts with persistence and hysteresis; per-client
// decode-capacity shares turned into abuse signals.
//
// Single-threaded and clock-free: time advances only with observations'
// end_ns and tick(now), so tests drive it with a fake clock.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/counter.h"
#include "degrade/config.h"
#include "degrade/observation.h"

namespace infertap::degrade {

struct CohortKey {
  std::string model, route, process, container;
  Vantage vantage = Vantage::server_emit;
  std::string length_class;
  auto operator<=>(const CohortKey&) const = default;
};

// Where the slowdown most likely is: the server already emits slowly
// (serving), only the client-observed side is slow while the matching
// server-emit cohort is healthy (delivery_path), or no matching counterpart
// was judged in the window (undetermined).
enum class Layer : std::uint8_t { serving, delivery_path, undetermined };
std::string_view to_string(Layer l);

// One metric's verdict over a window.
struct Evidence {
  Metric metric = Metric::ttft;
  std::string reference;   // "objective" | "baseline" | "objective+baseline" | "" (not breached)
  double observed = 0;     // median of the window's per-stream values
  double worst = 0;        // the window's p90 per-stream value (p10 for the rate): the tail
  std::optional<double> objective, baseline;
  std::uint32_t streams = 0;   // streams with this metric in the window
  std::uint32_t affected = 0;  // of them, breaching
  double affected_share = 0;
};

struct Alert {
  std::uint64_t id = 0;           // the degraded episode; its recovery carries the same id
  bool degraded = true;           // false: recovered
  std::string reason;             // degraded: "breach"; recovered: "healthy" | "no_traffic"
  CohortKey cohort;
  std::string objective;          // name of the matching objective, "" = baseline only
  core::TimestampNs ts_ns = 0;    // end of the window that decided it
  core::TimestampNs since_ns = 0; // degraded: first breached window start; recovered: when it became degraded
  double window_s = 0;
  std::uint32_t windows = 0;      // consecutive windows behind the decision
  std::uint32_t streams = 0;      // in the deciding window
  double affected_share = 0;      // streams breaching any metric / streams, deciding window
  Layer layer = Layer::undetermined;
  std::map<std::string, std::uint64_t> stall_causes;  // over the breached windows
  std::string dominant_stall_cause;                    // "" = no stalls
  std::vector<Evidence> evidence;  // degraded: the breached metrics; recovered: the same metrics now
};

struct AbuseSignal {
  std::uint64_t id = 0;
  bool active = true;  // false: cleared
  std::string process, client;
  core::TimestampNs ts_ns = 0, since_ns = 0;
  double window_s = 0;
  std::uint32_t windows = 0;
  double decode_share = 0;  // client's decode time / the process's, deciding window
  double decode_s = 0, process_decode_s = 0;
  std::uint64_t tokens = 0, process_tokens = 0;
  std::uint32_t streams = 0, clients = 0;
};

enum class CohortState : std::uint8_t { warming_up, healthy, breaching, degraded };
std::string_view to_string(CohortState s);

struct CohortStatus {
  CohortKey key;
  CohortState state = CohortState::warming_up;
  std::uint32_t last_streams = 0;  // streams in the last closed window
  std::array<std::optional<double>, kMetrics> baseline{};
};

// What the engine counts: X(name, kind, help) makes the field and its key in
// the `alerts` response's "counters".
#define INFERTAP_ENGINE_COUNTERS(X)                                                          \
  X(observations, total, "observations handed to the engine")                              \
  X(windows_closed, total, "evaluation windows closed")                                    \
  X(cohorts_evicted, total, "cohorts dropped at max_cohorts: idle, not degraded, oldest first") \
  X(cohorts_refused, total, "observations not judged: the cohort table was full of active cohorts")

struct EngineCounters {
  INFERTAP_COUNTER_FIELDS(INFERTAP_ENGINE_COUNTERS)
};

class Engine {
 public:
  explicit Engine(DegradationConfig config);

  void observe(const Observation& obs);
  // Closes every window that ended at or before `now`.
  void tick(core::TimestampNs now);

  // Alerts and abuse signals produced since the last call, in order.
  std::vector<Alert> take_alerts();
  std::vector<AbuseSignal> take_abuse();

  // State for the API, the CLI and the metrics.
  std::vector<Alert> active_alerts() const;           // the degraded alert of each degraded cohort
  const std::deque<Alert>& recent_alerts() const { return recent_; }  // newest last
  std::vector<AbuseSignal> active_abuse() const;
  const std::deque<AbuseSignal>& recent_abuse() const { return recent_abuse_; }
  std::vector<CohortStatus> cohorts() const;
  const EngineCounters& counters() const { return counters_; }
  const DegradationConfig& config() const { return config_; }

  std::string length_class_of(std::uint64_t output_tokens) const;

 private:
  struct MetricWindow {
    std::uint32_t n = 0, breached = 0, breached_objective = 0, breached_baseline = 0;
    std::vector<double> values;  // bounded sample for the median
  };
  struct WindowVerdict {
    bool judged = false, breached = false, healthy = false;
    std::uint32_t streams = 0, affected = 0;
    std::array<Evidence, kMetrics> evidence{};
    std::array<bool, kMetrics> metric_breached{}, metric_present{};
  };
  struct Cohort {
    CohortKey key;
    int objective = -1;  // index into config_.objectives, -1 = none
    // current window
    std::array<MetricWindow, kMetrics> win{};
    std::uint32_t streams = 0, affected = 0;
    std::map<std::string, std::uint64_t> causes;
    // across windows
    bool degraded = false;
    std::uint32_t breach_streak = 0, healthy_streak = 0, idle_windows = 0;
    core::TimestampNs streak_start_ns = 0, degraded_since_ns = 0, last_seen_ns = 0;
    std::map<std::string, std::uint64_t> streak_causes;
    std::array<std::deque<double>, kMetrics> history{};
    std::array<std::optional<double>, kMetrics> baseline{};
    WindowVerdict last;
    Alert active;  // valid while degraded
  };
  struct Usage {
    std::uint64_t decode_ns = 0, tokens = 0;
    std::uint32_t streams = 0;
  };
  struct AbuseState {
    bool active = false;
    std::uint32_t over_streak = 0, under_streak = 0;
    core::TimestampNs since_ns = 0;
    AbuseSignal signal;
  };

  void advance(core::TimestampNs now);
  void close_window();
  Cohort* cohort_for(const CohortKey& key);
  bool breaches(Metric m, double v, double reference, double ratio) const;
  WindowVerdict judge(Cohort& c) const;
  Layer layer_for(const Cohort& c) const;
  // One cohort after its window's verdict (c.last): streaks, alerts, baseline.
  void advance_cohort(const CohortKey& key, Cohort& c, core::TimestampNs window_end);
  void enter_degraded(const CohortKey& key, Cohort& c, core::TimestampNs window_end);
  void recover(Cohort& c, const char* reason, std::uint32_t windows, core::TimestampNs window_end);
  void learn_baseline(Cohort& c);
  // This window's decode share of every client of every process.
  std::map<std::pair<std::string, std::string>, AbuseSignal> usage_signals(core::TimestampNs window_end) const;
  void close_abuse_window(core::TimestampNs window_end);
  // One client after the window: streaks, signals raised and cleared.
  void advance_abuse(AbuseState& st, AbuseSignal now, core::TimestampNs window_end);
  void remember(const Alert& a);

  DegradationConfig config_;
  std::uint64_t window_ns_;
  core::TimestampNs window_start_ = 0;
  bool started_ = false;
  std::map<CohortKey, Cohort> cohorts_;
  std::map<std::string, std::map<std::string, Usage>> usage_;  // process -> client -> usage (current window)
  std::map<std::pair<std::string, std::string>, AbuseState> abuse_;
  std::vector<Alert> pending_;
  std::vector<AbuseSignal> pending_abuse_;
  std::deque<Alert> recent_;
  std::deque<AbuseSignal> recent_abuse_;
  std::uint64_t next_id_ = 1;
  EngineCounters counters_;
};

// Values of an observation per metric, in the engine's units (ms, tokens/s).
std::array<std::optional<double>, kMetrics> metric_values(const Observation& obs);

}  // namespace infertap::degrade
