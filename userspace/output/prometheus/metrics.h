// Prometheus metrics of infertapd: per-stream histograms named after the
// OpenTelemetry GenAI semantic conventions where they define the measure,
// infertap's own (infertap_*) where they do not, and the agent's own counters.
// Rendered in the Prometheus text exposition format 0.0.4 (docs/prometheus.md).
//
// Bounded: each label keeps at most max_label_values values, each family at
// most max_series_per_family series (the rest is folded into the family's
// "other" series and counted), and concurrent scrapes share one rendering.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "capture/loader.h"
#include "core/types.h"
#include "output/cardinality.h"
#include "output/ndjson/sink.h"
#include "output/prometheus/objectives.h"
#include "output/otlp/counters.h"
#include "output/stream_measures.h"

namespace infertap::output {

struct MetricsConfig {
  // At most this many distinct values per label (model, route, process, the
  // gen_ai_* models, server_port); later values become "other" and bump
  // infertap_label_overflow_total{label=...}. vantage and
  // gen_ai_operation_name have a closed set of values and are never capped
  // (gen_ai_provider_name is the dialect's, or a declared format's: capped all the same).
  std::size_t max_label_values = 50;
  // Label values longer than this are cut (bytes).
  std::size_t max_label_bytes = 128;
  // At most this many series per stream family (label sets; a histogram's
  // series is all its _bucket/_sum/_count lines). A new label set beyond it is
  // folded into the family's overflow series (vantage and the family's own
  // label such as `end` or `cause` kept, every other label "other") and
  // counted in infertap_series_overflow_total{family=...}.
  std::size_t max_series_per_family = 100;
  // The degradation cohort gauge and the infertap_* histograms (ITL, rate,
  // lag, longest pause) also carry the load bands (concurrency_band,
  // input_band; docs/degradation.md#cohorts), the histograms the output
  // length class too, capped like the other labels and within the same
  // series budget. Off by default: a series per band multiplies them.
  bool band_labels = false;
  // A record's length class, concurrency band and input band, as the
  // degradation engine assigns them (set with band_labels).
  std::function<std::array<std::string, 3>(const core::StreamRecord&)> band_of;
  // Stream objectives (objectives.h): exported as infertap_objective, each
  // record counted against those it matches in infertap_objective_streams_total.
  std::vector<Objective> objectives;
  // infertap_serving_identity keeps an identity this long after its last stream.
  std::chrono::seconds identity_ttl{3600};
  // The clock of that expiry; steady_clock::now when empty (tests set their own).
  std::function<std::chrono::steady_clock::time_point()> clock;
  // Upper bounds (seconds / tokens per second), strictly increasing; +Inf is implicit.
  std::vector<double> latency_buckets = default_latency_buckets();    // TTFT, TPOT, ITL, chunk gaps, lag
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
  std::string concurrency_band, input_band;  // "" when the dimension is off
};

// Streams in flight and requests waiting for their first token of the
// serving processes of one name now (core::ScopeLoad, summed by name).
struct ProcessLoadSample {
  std::string process;
  std::uint64_t in_flight = 0, waiting = 0;
};

// Values the registry cannot read itself, passed with the counter tables.
struct SelfExtra {
  std::uint64_t tracked_connections = 0;  // Pipeline::connection_count()
  // Names of the capabilities the capture lacks (capture/privileges.h):
  // infertap_capability_missing{capability="CAP_SYS_PTRACE"} 1 each.
  std::vector<std::string> missing_capabilities;
  otlp::Counters otlp;  // the OTLP exporter's (all 0 when it is off)
};

namespace metrics_detail {

struct Histogram {
  std::vector<std::uint64_t> counts;  // per bucket, not cumulative; last = +Inf
  double sum = 0;
  std::uint64_t count = 0;
};

// The series of one family, bounded by MetricsConfig::max_series_per_family
// (output/cardinality.h).
using output::Family;
using output::LabelValues;

// The stream families (docs/prometheus.md), in render order: the measures
// every exporter shares (output/stream_measures.h).
using output::CounterFamily;
using output::HistogramFamily;
using output::kCounterFamilies;
using output::kHistogramFamilies;

}  // namespace metrics_detail

class MetricsRegistry {
 public:
  explicit MetricsRegistry(MetricsConfig config = {});
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // One finished stream. Thread-safe; the record is read, never kept. Every
  // observation is bucketed before the lock is taken.
  void observe(const core::StreamRecord& record);

  // Replace the agent's self counters: every entry of the capture, pipeline
  // and sink tables becomes a series (docs/prometheus.md). Thread-safe.
  void set_self(const capture::CaptureStats& capture, const core::PipelineCounters& pipeline,
                const SinkCounters& sink = {}, const SelfExtra& extra = {});

  // Replace the degradation cohort states and the count of active abuse
  // signals. Labels share the per-stream label caps and the series budget. Thread-safe.
  void set_degradation(const std::vector<CohortStateSample>& cohorts, std::uint64_t abuse_active);
  // Replace the in-flight and waiting gauges (infertap_streams_in_flight,
  // infertap_requests_waiting), one series per process name under the
  // process label's cap. Thread-safe.
  void set_load(const std::vector<ProcessLoadSample>& processes);

  // Text exposition format 0.0.4, as one immutable buffer every caller
  // shares: a scrape that arrives while another is rendering waits for that
  // rendering and gets the same buffer, so concurrent scrapes cost one
  // rendering, not one each; a scrape within a second of the last rendering,
  // with nothing changed since, gets that one. The state is copied under the
  // lock and formatted outside it; the process CPU and memory gauges are
  // read from /proc/self at each rendering.
  std::shared_ptr<const std::string> scrape() const;
  // A copy of scrape()'s text.
  std::string render() const;
  // Renderings made so far: a scrape served another's rendering adds none.
  std::uint64_t renders() const;

  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

  // Labels of the infertap_* stream families, in this order.
  static constexpr std::size_t kLabels = 4;
  static constexpr std::string_view kLabelNames[kLabels] = {"vantage", "model", "route", "process"};
  // Labels of the gen_ai_* families: the OpenTelemetry attributes
  // (gen_ai.operation.name, gen_ai.provider.name, gen_ai.request.model,
  // gen_ai.response.model, server.port) with dots as underscores, then
  // infertap's vantage, route, process.
  static constexpr std::size_t kGenAiLabels = 8;
  static constexpr std::string_view kGenAiLabelNames[kGenAiLabels] = {
      "vantage",     "gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_response_model",
      "server_port", "route",                 "process"};

 private:
  struct State {
    std::array<metrics_detail::Family<metrics_detail::Histogram>, metrics_detail::kHistogramFamilies> histograms;
    std::array<metrics_detail::Family<std::uint64_t>, metrics_detail::kCounterFamilies> counters;
    std::uint64_t sse_parse_errors = 0;  // sum of StreamRecord::parse_errors
    std::map<std::string, std::uint64_t> overflow;  // label name -> values folded to "other"
    capture::CaptureStats capture;
    core::PipelineCounters pipeline;
    SinkCounters sink;
    SelfExtra extra;
    metrics_detail::Family<std::uint64_t> cohort_degraded;  // infertap labels + length_class (+ bands)
    // vantage, model, route, objective, met
    metrics_detail::Family<std::uint64_t> objective_streams;
    // model, route, response_model, system_fingerprint -> when last seen
    metrics_detail::Family<std::chrono::steady_clock::time_point> identities;
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> process_load;  // process -> in flight, waiting
    std::uint64_t abuse_active = 0;
  };

  // Applies the cardinality cap of label `name`; called with mu_ held.
  std::string cap_label(std::string_view name, std::string value, bool count_overflow = true);
  // The series of `family` for `labels`, or its overflow series when the
  // family is full: labels 1 .. stream_labels-1 become "other", vantage
  // (label 0) and the family's own trailing label are kept. mu_ held.
  template <class V>
  V& series(metrics_detail::Family<V>& family, metrics_detail::LabelValues labels, std::size_t stream_labels);
  // Records the record's serving identity as seen now; mu_ held.
  void note_identity(metrics_detail::LabelValues labels);
  std::chrono::steady_clock::time_point now() const;
  // `rendering`: its number, from 1; *version: that of the state it shows.
  std::string render_now(std::uint64_t rendering, std::uint64_t* version) const;

  const MetricsConfig config_;
  mutable std::mutex mu_;
  State state_;
  std::uint64_t version_ = 0;  // bumped by every change of state_
  LabelCaps caps_;  // label name -> values kept

  // The shared rendering: one at a time; callers that arrive during it wait
  // for it (render_done_) and take its result; while nothing changed, the
  // last one is served for up to kReuseFor (the /proc gauges are that fresh).
  static constexpr std::chrono::milliseconds kReuseFor{1000};
  mutable std::mutex scrape_mu_;
  mutable std::condition_variable render_done_;
  mutable bool rendering_ = false;
  mutable std::uint64_t renders_ = 0;
  mutable std::shared_ptr<const std::string> last_;
  mutable std::uint64_t last_version_ = 0;
  mutable std::chrono::steady_clock::time_point last_at_{};
  mutable std::atomic<std::size_t> last_size_{0};  // bytes of the last rendering
};

// Helpers, public for tests and for other exporters.
std::string escape_label_value(std::string_view v);  // \ " newline; other controls as base::printable
std::string format_double(double v);                 // shortest round trip; +Inf/-Inf/NaN
// genai_operation_of, genai_provider_of: output/stream_measures.h.

}  // namespace infertap::output
