// The stream families of the Prometheus endpoint (docs/prometheus.md): their
// names, label sets and buckets, and what one finished stream record adds to
// them — per family and vantage, its observations already bucketed, and its
// counter increments. Plain functions of a record: the registry applies the
// result under its lock (output/prometheus/metrics.h).
//
//   StreamRecord --> RecordDeltas (label values + histogram deltas + counter increments)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "output/prometheus/metrics.h"

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

// The vantage label values: where a view's times were taken.
inline constexpr std::string_view kVantageServer = "server";    // a server's (or a gateway's) sends
inline constexpr std::string_view kVantageClient = "client";    // a local client's reads
inline constexpr std::string_view kVantageAcked = "acked";      // a remote client's kernel ACKs, seen at the last sender
inline constexpr std::string_view kVantageUnknown = "unknown";  // a record of unknown role

// A record's label values, UTF-8-safe and cut, before the registry's caps.
struct RecordLabels {
  std::string model, route, process, request_model, response_model, server_port;
  std::string system_fingerprint;  // the serving identity's (core::LoadContext)
  std::string_view operation;  // gen_ai.operation.name: closed set, never capped
  std::string provider;        // gen_ai.provider.name
};

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

// A label value as the exposition takes it: invalid UTF-8 bytes become '?',
// cut to max_bytes, "unknown" when empty.
std::string label_value(std::string_view in, std::size_t max_bytes);

}  // namespace infertap::output::metrics_detail
