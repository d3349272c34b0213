// Prometheus metrics of infertapd: per-stream histograms named after the
// OpenTelemetry GenAI semantic conventions, and the agent's own counters.
// Rendered in the Prometheus text exposition format 0.0.4 (docs/prometheus.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "capture/loader.h"
#include "core/types.h"
#include "daemon/sink.h"

namespace infertap::daemon {

struct MetricsConfig {
  // At most this many distinct values per label (vantage, model, route,
  // process); later values become "other" and bump
  // infertap_label_overflow_total{label=...}.
  std::size_t max_label_values = 50;
  // Label values longer than this are cut (bytes).
  std::size_t max_label_bytes = 128;
  // Upper bounds (seconds / tokens per second), strictly increasing; +Inf is implicit.
  std::vector<double> latency_buckets = default_latency_buckets();    // TTFT, ITL
  std::vector<double> duration_buckets = default_duration_buckets();  // e2e
  std::vector<double> rate_buckets = default_rate_buckets();          // tokens/s

  static std::vector<double> default_latency_buckets();
  static std::vector<double> default_duration_buckets();
  static std::vector<double> default_rate_buckets();
};

// A degradation cohort's state (docs/degradation.md), set on each refresh.
struct CohortStateSample {
  std::string vantage, model, route, process, length_class;
  bool degraded = false;
};

// Values the registry cannot read itself, passed with the counter tables.
struct SelfExtra {
  std::uint64_t tracked_connections = 0;  // Pipeline::connection_count()
};

class MetricsRegistry {
 public:
  explicit MetricsRegistry(MetricsConfig config = {});
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // One finished stream. Thread-safe; the record is read, never kept. The
  // per-gap ITL buckets are computed before the lock is taken.
  void observe(const core::StreamRecord& record);

  // Replace the agent's self counters: every entry of the capture, pipeline
  // and sink tables becomes a series (docs/prometheus.md). Thread-safe.
  void set_self(const capture::CaptureStats& capture, const core::PipelineCounters& pipeline,
                const SinkCounters& sink = {}, const SelfExtra& extra = {});

  // Replace the degradation cohort states and the count of active abuse
  // signals. Labels share the per-stream label caps. Thread-safe.
  void set_degradation(const std::vector<CohortStateSample>& cohorts, std::uint64_t abuse_active);

  // Text exposition format 0.0.4. Thread-safe; formats a snapshot taken under
  // the lock, and reads /proc/self for the process CPU and memory gauges.
  std::string render() const;

  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

  // Label set of the per-stream series, in this order.
  static constexpr std::size_t kLabels = 4;
  static constexpr std::string_view kLabelNames[kLabels] = {"vantage", "model", "route", "process"};

 private:
  struct Histogram {
    std::vector<std::uint64_t> counts;  // per bucket, not cumulative; last = +Inf
    double sum = 0;
    std::uint64_t count = 0;
  };
  using LabelValues = std::vector<std::string>;  // kLabels values (+ one extra for end / cause)

  struct State {
    std::map<LabelValues, Histogram> ttft, itl, e2e, rate;
    std::map<LabelValues, std::uint64_t> tokens, streams, stalls;
    std::uint64_t sse_parse_errors = 0;  // sum of StreamRecord::parse_errors
    std::map<std::string, std::uint64_t> overflow;  // label name -> values folded to "other"
    capture::CaptureStats capture;
    core::PipelineCounters pipeline;
    SinkCounters sink;
    SelfExtra extra;
    std::map<LabelValues, std::uint64_t> cohort_degraded;  // + length_class
    std::uint64_t abuse_active = 0;
  };

  // Applies the cardinality cap; called with mu_ held.
  std::string cap_label(std::size_t label, std::string value, bool count_overflow = true);

  const MetricsConfig config_;
  mutable std::mutex mu_;
  State state_;
  std::set<std::string> seen_[kLabels];
};

// Helpers, public for tests and for other exporters.
std::string escape_label_value(std::string_view v);  // \ " newline
std::string format_double(double v);                 // shortest round trip; +Inf/-Inf/NaN

}  // namespace infertap::daemon
