#include "output/prometheus/stream_families.h"

#include <algorithm>
#include <cmath>

#include "base/clock.h"


namespace infertap::output::metrics_detail {
namespace {

using core::StreamRecord;
using Buckets = HistogramSpec::Buckets;

constexpr HistogramSpec kHistogramSpecs[kHistogramFamilies] = {
    {"gen_ai_server_time_to_first_token_seconds",
     "Time to first token at the server: first content event sent minus request end, per successful stream.",
     LabelSet::gen_ai, Buckets::latency},
    {"gen_ai_server_time_per_output_token_seconds",
     "Time per output token after the first, per successful stream: (request duration - TTFT) / (tokens - 1).",
     LabelSet::gen_ai, Buckets::latency},
    {"gen_ai_server_request_duration_seconds", "Server request duration: last SSE event sent minus request end.",
     LabelSet::gen_ai, Buckets::duration},
    {"gen_ai_client_operation_time_to_first_chunk_seconds",
     "Time to the first content chunk as the client got it, from the request end.", LabelSet::gen_ai,
     Buckets::latency},
    {"gen_ai_client_operation_time_per_output_chunk_seconds",
     "Time per output chunk as the client got it: one observation per gap between consecutive content chunks.",
     LabelSet::gen_ai, Buckets::latency},
    {"gen_ai_client_operation_duration_seconds",
     "Operation duration as the client got it: last SSE event minus request end.", LabelSet::gen_ai,
     Buckets::duration},
    {"infertap_inter_token_latency_seconds",
     "Inter-token latency: one observation per gap between consecutive content events, at each vantage.",
     LabelSet::infertap, Buckets::latency},
    {"infertap_tokens_per_second", "Streaming token rate after the first token, one observation per stream.",
     LabelSet::infertap, Buckets::rate},
    {"infertap_delivery_lag_seconds",
     "Delivery lag at a stream's last token: delivered minus emitted, one observation per stream.",
     LabelSet::infertap, Buckets::latency},
    {"infertap_longest_pause_seconds",
     "Longest gap between consecutive content events of a stream, one observation per stream, at each vantage.",
     LabelSet::infertap, Buckets::latency},
};

constexpr CounterSpec kCounterSpecs[kCounterFamilies] = {
    {"infertap_stream_tokens_total", "Output tokens of finished streams (usage count, else content events).", ""},
    {"infertap_streams_total", "Finished streams by how they ended.", "end"},
    {"infertap_stalls_total", "Gaps between content events above the stall threshold, by cause.", "cause"},
    {"infertap_path_degraded_streams_total",
     "Streams the path, not the server, degraded: one increment per cause found on the stream.", "cause"},
};

// Bucket index for v: the first upper bound >= v (le is inclusive); bounds.size() = +Inf.
std::size_t bucket_of(const std::vector<double>& bounds, double v) {
  return static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
}

// A record's deltas, one histogram per family and vantage, bucketed by the
// Prometheus bounds (what feeds which family: output/stream_measures.cpp).
class Deltas : public MeasureSink {
 public:
  explicit Deltas(const MetricsConfig& config) : config_(config) {}

  void observe(HistogramFamily f, std::string_view vantage, double v) override {
    if (std::isnan(v)) return;
    Histogram& h = histogram(f, vantage);
    h.counts[bucket_of(bounds_of(f, config_), v)] += 1;
    h.sum += v;
    h.count += 1;
  }
  void count(CounterFamily f, std::string_view vantage, std::string_view extra, std::uint64_t n) override {
    out_.counters.push_back({f, vantage, std::string(extra), n});
  }
  // The objectives a record's views are counted against: those matching its
  // labels; an errored record misses each of them.
  void objective_scope(const RecordLabels& labels, bool errored) {
    for (std::size_t i = 0; i < config_.objectives.size(); ++i) {
      if (matches(config_.objectives[i], labels.model, labels.route)) matched_.push_back(i);
    }
    errored_ = errored;
  }
  // Each view is counted against every objective in scope.
  void view(std::string_view vantage, const core::StreamMetrics& m) override {
    const std::optional<double> ttft = m.ttft_ns ? std::optional<double>(base::seconds(*m.ttft_ns)) : std::nullopt;
    for (std::size_t i : matched_) {
      const ObjectiveOutcome o = outcome_of(config_.objectives[i], errored_, ttft, m.tokens_per_s);
      if (o != ObjectiveOutcome::not_counted) out_.objectives.push_back({i, vantage, o == ObjectiveOutcome::met});
    }
  }
  RecordDeltas take(RecordLabels labels) {
    out_.labels = std::move(labels);
    return std::move(out_);
  }

 private:
  Histogram& histogram(HistogramFamily f, std::string_view vantage) {
    for (HistogramDelta& d : out_.histograms) {
      if (d.family == f && d.vantage == vantage) return d.h;
    }
    HistogramDelta& d = out_.histograms.emplace_back();
    d.family = f;
    d.vantage = vantage;
    d.h.counts.assign(bounds_of(f, config_).size() + 1, 0);
    return d.h;
  }

  const MetricsConfig& config_;
  RecordDeltas out_;
  std::vector<std::size_t> matched_;
  bool errored_ = false;
};

}  // namespace

const HistogramSpec& spec_of(HistogramFamily f) { return kHistogramSpecs[static_cast<std::size_t>(f)]; }
const CounterSpec& spec_of(CounterFamily f) { return kCounterSpecs[static_cast<std::size_t>(f)]; }

const std::vector<double>& bounds_of(HistogramFamily f, const MetricsConfig& config) {
  switch (spec_of(f).buckets) {
    case Buckets::duration: return config.duration_buckets;
    case Buckets::rate: return config.rate_buckets;
    case Buckets::latency: break;
  }
  return config.latency_buckets;
}

RecordDeltas deltas_of(const StreamRecord& r, const MetricsConfig& config) {
  Deltas d(config);
  RecordLabels labels = labels_of(r, config.max_label_bytes);
  d.objective_scope(labels, !successful(r));
  observe_record(r, d);
  return d.take(std::move(labels));
}

}  // namespace infertap::output::metrics_detail
