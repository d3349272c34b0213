// The stream families of the Prometheus endpoint (docs/prometheus.md): their
// names, label sets and buckets, and what one finished stream record adds to
// them — per family and vantage, its observations (output/stream_measures.h)
// bucketed, and its counter increments. Plain functions of a record: the
// registry applies the result under its lock (output/prometheus/metrics.h).
//
//   StreamRecord --> RecordDeltas (label values + histogram deltas + counter increments)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "output/prometheus/metrics.h"
#include "output/stream_measures.h"

namespace infertap::output::metrics_detail {

// Which labels a family carries: infertap's (vantage, model, route,
// process) or the OpenTelemetry GenAI attributes (MetricsRegistry::kGenAiLabelNames).
enum class LabelSet : std::uint8_t { infertap, gen_ai };

struct HistogramSpec {
  std::string_view name, help;
  LabelSet labels;
  enum class Buckets : std::uint8_t { latency, duration, rate } buckets;
};
struct CounterSpec {
  std::string_view name, help;
  std::string_view extra;  // the family's own label after the infertap ones ("end", "cause"), or ""
};
const HistogramSpec& spec_of(HistogramFamily f);
const CounterSpec& spec_of(CounterFamily f);
const std::vector<double>& bounds_of(HistogramFamily f, const MetricsConfig& config);

// What feeds which family, the vantages and the label values: output/stream_measures.h.
using output::label_value;
using output::RecordLabels;

struct HistogramDelta {
  HistogramFamily family;
  std::string_view vantage;
  Histogram h;
};
struct CounterDelta {
  CounterFamily family;
  std::string_view vantage;
  std::string extra;  // value of the family's own label ("complete", "model", ...)
  std::uint64_t n = 0;
};

// A view of the stream counted against an objective (MetricsConfig::objectives).
struct ObjectiveDelta {
  std::size_t objective;  // index into MetricsConfig::objectives
  std::string_view vantage;
  bool met = false;
};

struct RecordDeltas {
  RecordLabels labels;
  std::vector<HistogramDelta> histograms;
  std::vector<CounterDelta> counters;
  std::vector<ObjectiveDelta> objectives;
};

RecordDeltas deltas_of(const core::StreamRecord& record, const MetricsConfig& config);

}  // namespace infertap::output::metrics_detail
