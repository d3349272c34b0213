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
  // Load bands; "" when the dimension is off, "unknown" when the stream's
  // load was not observed.
  std::string concurrency_band, input_band;
  auto operator<=>(const CohortKey&) const = default;
};

// The load context the engine keeps per cohort and window (medians of the
// streams' numbers, LoadNumbers) and learns like the metrics: what the
// alerts' leads compare.
enum class LoadMetric : std::uint8_t { concurrency, waiting, input, cpu_pressure, memory_pressure, cpu_per_token };
inline constexpr std::size_t kLoadMetrics = 6;
std::string_view load_metric_name(LoadMetric m);

// An investigative lead of a degraded alert (docs/degradation.md#leads): what
// the evidence supports checking, with the numbers behind it; never a verdict.
struct Lead {
  std::string lead;  // decode_pressure | queueing | input_size | delivery | serving_change | uneven_delivery |
                     // host_pressure | cpu_per_token
  std::string says;  // for a person: "decode-stage pressure may be contributing: concurrency 12 -> 48 ..."
  std::vector<std::pair<std::string, double>> numbers;  // name -> value, in order
};

// A cohort's serving identity changed (a new model or system_fingerprint or
// server version): its baseline starts anew. Written when the review starts
// (the old baseline) and again when the new baseline has warmed up (both).
struct BaselineReview {
  std::uint64_t id = 0;
  bool completed = false;  // false: started
  CohortKey cohort;
  ServingIdentity from, to;
  std::vector<std::string> changed;  // "model", "system_fingerprint", "server_version"
  core::TimestampNs ts_ns = 0;       // end of the window that decided it
  core::TimestampNs since_ns = 0;    // start of the first window of the new identity
  double window_s = 0;
  std::uint32_t windows = 0;         // completed: healthy windows the new baseline learned from
  std::array<std::optional<double>, kMetrics> prior{}, baseline{};  // per Metric
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
  std::vector<Lead> leads;         // degraded only
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
  // Sizes of the client's streams: input (usage tokens, where reported;
  // request body bytes) and output, per stream; and its share of the
  // server's streams in flight (mean over its streams of
  // client_concurrency / concurrency at their first token), and the most it
  // held at once.
  std::optional<double> input_tokens_per_stream, request_bytes_per_stream;
  double output_tokens_per_stream = 0;
  std::optional<double> concurrency_share;
  std::optional<double> peak_client_concurrency;
};

enum class CohortState : std::uint8_t { warming_up, healthy, breaching, degraded, reviewing };
std::string_view to_string(CohortState s);

struct CohortStatus {
  CohortKey key;
  CohortState state = CohortState::warming_up;
  std::uint32_t last_streams = 0;  // streams in the last closed window
  std::array<std::optional<double>, kMetrics> baseline{};
  ServingIdentity identity;
};

// What the engine counts: X(name, kind, help) makes the field and its key in
// the `alerts` response's "counters".
#define INFERTAP_ENGINE_COUNTERS(X)                                                          \
  X(observations, total, "observations handed to the engine")                              \
  X(windows_closed, total, "evaluation windows closed")                                    \
  X(cohorts_evicted, total, "cohorts dropped at max_cohorts: idle, not degraded, oldest first") \
  X(cohorts_refused, total, "observations not judged: the cohort table was full of active cohorts") \
  X(baseline_reviews, total, "baseline reviews started: a cohort's serving identity changed")

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
  std::vector<BaselineReview> take_reviews();

  // State for the API, the CLI and the metrics.
  std::vector<Alert> active_alerts() const;           // the degraded alert of each degraded cohort
  const std::deque<Alert>& recent_alerts() const { return recent_; }  // newest last
  std::vector<AbuseSignal> active_abuse() const;
  const std::deque<AbuseSignal>& recent_abuse() const { return recent_abuse_; }
  const std::deque<BaselineReview>& recent_reviews() const { return recent_reviews_; }
  std::vector<CohortStatus> cohorts() const;
  const EngineCounters& counters() const { return counters_; }
  const DegradationConfig& config() const { return config_; }

  std::string length_class_of(std::uint64_t output_tokens) const;
  // Band of a stream's load ("" when the dimension is off, "unknown" when not observed).
  std::string concurrency_band_of(const std::optional<double>& concurrency) const;
  std::string input_band_of(const std::optional<double>& input_size) const;
  CohortKey key_of(const Observation& obs) const;

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
  // Each field of the serving identity, counted per window.
  using IdentityCounts = std::array<std::map<std::string, std::uint32_t>, 3>;
  struct Cohort {
    CohortKey key;
    int objective = -1;  // index into config_.objectives, -1 = none
    // current window
    std::array<MetricWindow, kMetrics> win{};
    std::array<std::vector<double>, kLoadMetrics> load_win{};
    std::uint32_t streams = 0, affected = 0;
    std::map<std::string, std::uint64_t> causes;
    IdentityCounts identities;
    // Load context of the last closed window (medians) and its baseline.
    std::array<std::optional<double>, kLoadMetrics> load_last{};
    std::array<std::deque<double>, kLoadMetrics> load_history{};
    std::array<std::optional<double>, kLoadMetrics> load_baseline{};
    // Serving identity and its review.
    ServingIdentity identity;
    bool reviewing = false;
    BaselineReview review;  // the last one started
    bool reviewed = false;  // a review was ever started
    std::uint64_t windows_since_review = 0;
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
    double input_tokens = 0, request_bytes = 0, share_sum = 0, peak = 0;
    std::uint32_t with_input_tokens = 0, with_request_bytes = 0, with_share = 0;
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
  // The window's identity against the cohort's: starts a review on a change.
  bool review_identity(Cohort& c, core::TimestampNs window_end);
  void complete_review(Cohort& c, core::TimestampNs window_end);
  std::vector<Lead> leads_for(const Cohort& c, Layer layer) const;
  // A reference for a load number: the cohort's own baseline, else the least
  // loaded learned baseline among the cohorts that differ only in the band of that number.
  std::optional<double> load_reference(const Cohort& c, LoadMetric m) const;
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
  std::vector<BaselineReview> pending_reviews_;
  std::deque<BaselineReview> recent_reviews_;
  std::uint64_t next_id_ = 1;
  EngineCounters counters_;
};

// The output-length class of a stream of this many tokens (config.length_classes).
std::string length_class_of(const DegradationConfig& config, std::uint64_t output_tokens);

// A record's cohort bands as the engine assigns them: {length_class,
// concurrency_band, input_band} ("" for a load dimension turned off,
// "unknown" when not observed).
std::array<std::string, 3> bands_of(const DegradationConfig& config, const core::StreamRecord& record);

// Values of an observation per metric, in the engine's units (ms, tokens/s).
std::array<std::optional<double>, kMetrics> metric_values(const Observation& obs);

}  // namespace infertap::degrade
