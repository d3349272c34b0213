// The stream metrics infertap exports over OTLP: the OpenTelemetry GenAI
// semantic-convention histograms (gen_ai.server.*, gen_ai.client.*) with
// their names, units, required attributes and recommended bucket boundaries,
// and infertap's own under infertap.* (docs/otlp.md). Every record's
// observations come from output/stream_measures.h, the same as the
// Prometheus families'; labels are capped and series bounded as there
// (output/cardinality.h, the metrics.max_label_values and
// metrics.max_series_per_family settings).
//
// Cumulative: the aggregator keeps totals since it started, and each export
// is a snapshot of them, so an export the collector never got loses nothing
// the next one does not carry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/types.h"
#include "output/cardinality.h"
#include "output/otlp/model.h"
#include "output/stream_measures.h"

namespace infertap::output::otlp {

struct MetricLimits {
  std::size_t max_label_values = 50;
  std::size_t max_label_bytes = 128;
  std::size_t max_series_per_family = 100;
};

// One exported metric: its OTLP name, unit, description and buckets.
struct MetricSpec {
  std::string_view name, unit, description;
  const std::vector<double>* bounds;  // nullptr: a sum
};

// The exported metrics, in export order.
enum class MetricId : std::uint8_t {
  server_ttft, server_tpot, server_duration, client_ttfc, client_tpoc, client_duration,  // HistogramFamily order
  itl, rate, lag, longest_pause,
  token_usage,                                 // gen_ai.client.token.usage
  tokens, streams, stalls, path_degraded,      // CounterFamily order
};
inline constexpr std::size_t kMetricIds = 15;
inline constexpr std::size_t kHistogramIds = static_cast<std::size_t>(MetricId::token_usage) + 1;  // server_ttft .. token_usage
const MetricSpec& spec_of(MetricId id);

class MetricAggregator {
 public:
  explicit MetricAggregator(MetricLimits limits = {});

  // One finished stream; thread-safe. Its observations are gathered before the lock.
  void observe(const core::StreamRecord& record);
  // Every series with data, cumulative from `start_ns` to `now_ns` (wall clock, Unix ns).
  std::vector<Metric> snapshot(std::uint64_t start_ns, std::uint64_t now_ns) const;

  // Values replaced by "other" (label caps), updates folded into an overflow series (series budget).
  std::uint64_t label_overflow() const;
  std::uint64_t series_overflow() const;

 private:
  struct Histogram {
    std::vector<std::uint64_t> counts;  // bounds.size() + 1
    double sum = 0;
    std::uint64_t count = 0;
  };

  const MetricLimits limits_;
  mutable std::mutex mu_;
  LabelCaps caps_;
  std::map<std::string, std::uint64_t> overflow_;  // label name -> values folded to "other"
  std::array<Family<Histogram>, kHistogramIds> histograms_;  // MetricId server_ttft .. token_usage
  std::array<Family<std::uint64_t>, kCounterFamilies> sums_;  // MetricId tokens .. path_degraded
};

}  // namespace infertap::output::otlp
