#include "output/otlp/metrics.h"

#include <algorithm>
#include <cmath>

#include "output/prometheus/metrics.h"

namespace infertap::output::otlp {
namespace {

// The GenAI semantic conventions' recommended ExplicitBucketBoundaries.
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                         0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0};
const std::vector<double> kTpotBounds = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
const std::vector<double> kDurationBounds = {0.01, 0.02, 0.04, 0.08, 0.16,  0.32,  0.64,
                                             1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92};
const std::vector<double> kTokenBounds = {1,     4,      16,      64,      256,      1024,     4096,
                                          16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864};
// infertap's own histograms: the Prometheus families' default buckets.
const std::vector<double> kLatencyBounds = MetricsConfig::default_latency_buckets();
const std::vector<double> kRateBounds = MetricsConfig::default_rate_buckets();

const MetricSpec kSpecs[kMetricIds] = {
    {"gen_ai.server.time_to_first_token", "s", "Time to generate first token for successful responses.", &kTtftBounds},
    {"gen_ai.server.time_per_output_token", "s",
     "Time per output token generated after the first token for successful responses.", &kTpotBounds},
    {"gen_ai.server.request.duration", "s",
     "Generative AI server request duration such as time-to-last byte or last output token.", &kDurationBounds},
    {"gen_ai.client.operation.time_to_first_chunk", "s",
     "Time to receive the first chunk, from the request to the first chunk received in the response stream.",
     &kDurationBounds},
    {"gen_ai.client.operation.time_per_output_chunk", "s",
     "Time per output chunk, recorded for each chunk received after the first one.", &kDurationBounds},
    {"gen_ai.client.operation.duration", "s", "GenAI operation duration.", &kDurationBounds},
    {"infertap.stream.inter_token_latency", "s",
     "Gaps between consecutive content events, one observation per gap, at each vantage.", &kLatencyBounds},
    {"infertap.stream.token_rate", "{token}/s", "Streaming token rate after the first token, one per stream.",
     &kRateBounds},
    {"infertap.delivery.lag", "s", "Delivery lag at a stream's last token: delivered minus emitted.", &kLatencyBounds},
    {"infertap.stream.longest_pause", "s",
     "Longest gap between consecutive content events of a stream, one per stream, at each vantage.", &kLatencyBounds},
    {"gen_ai.client.token.usage", "{token}", "Number of input and output tokens used.", &kTokenBounds},
    {"infertap.stream.tokens", "{token}", "Output tokens of finished streams (usage count, else content events).",
     nullptr},
    {"infertap.streams", "{stream}", "Finished streams by how they ended.", nullptr},
    {"infertap.stalls", "{stall}", "Gaps between content events above the stall threshold, by cause.", nullptr},
    {"infertap.delivery.path_degraded", "{stream}",
     "Streams the path, not the server, degraded: one per cause found on the stream.", nullptr},
};

static_assert(static_cast<std::size_t>(MetricId::longest_pause) + 1 == static_cast<std::size_t>(MetricId::token_usage));
static_assert(kHistogramFamilies == static_cast<std::size_t>(MetricId::token_usage));

MetricId metric_of(HistogramFamily f) { return static_cast<MetricId>(static_cast<std::size_t>(f)); }
MetricId metric_of(CounterFamily f) { return static_cast<MetricId>(kHistogramIds + static_cast<std::size_t>(f)); }

bool is_gen_ai(MetricId id) { return id <= MetricId::client_duration || id == MetricId::token_usage; }
// error.type is conditionally required on the two duration metrics only: the
// others count successful responses, or every chunk of a stream.
bool carries_error(MetricId id) { return id == MetricId::server_duration || id == MetricId::client_duration; }

// Label layouts. GenAI metrics: vantage, operation, provider, request model,
// response model, server port, route, process, error type (+ token type);
// infertap's: vantage, model, route, process (+ the counter's own label).
constexpr std::size_t kGenAiLabels = 9;
constexpr std::size_t kInfertapLabels = 4;
constexpr std::string_view kGenAiNames[kGenAiLabels] = {
    "infertap.vantage", "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
    "server.port",      "http.route",            "process.executable.name", "error.type"};
constexpr std::string_view kInfertapNames[kInfertapLabels] = {"infertap.vantage", "infertap.model", "http.route",
                                                              "process.executable.name"};
std::string_view own_label_of(MetricId id) {
  switch (id) {
    case MetricId::token_usage: return "gen_ai.token.type";
    case MetricId::streams: return "infertap.stream.end";
    case MetricId::stalls:
    case MetricId::path_degraded: return "infertap.stall.cause";
    default: return {};
  }
}

std::size_t bucket_of(const std::vector<double>& bounds, double v) {
  return static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
}

// A record's observations, bucketed, before the aggregator's lock.
struct Delta {
  MetricId id;
  std::string_view vantage;
  std::string own;  // the metric's own label value, "" when it has none
  std::vector<std::uint64_t> counts;
  double sum = 0;
  std::uint64_t n = 0;
};

class Collector : public MeasureSink {
 public:
  void observe(HistogramFamily f, std::string_view vantage, double v) override { add(metric_of(f), vantage, {}, v); }
  void count(CounterFamily f, std::string_view vantage, std::string_view extra, std::uint64_t n) override {
    Delta& d = delta(metric_of(f), vantage, extra);
    d.n += n;
  }
  void usage(std::string_view vantage, TokenType type, std::uint64_t tokens) override {
    add(MetricId::token_usage, vantage, to_string(type), static_cast<double>(tokens));
  }
  std::vector<Delta> deltas;

 private:
  void add(MetricId id, std::string_view vantage, std::string_view own, double v) {
    if (std::isnan(v)) return;
    const std::vector<double>& bounds = *spec_of(id).bounds;
    Delta& d = delta(id, vantage, own);
    if (d.counts.empty()) d.counts.assign(bounds.size() + 1, 0);
    d.counts[bucket_of(bounds, v)] += 1;
    d.sum += v;
    d.n += 1;
  }
  Delta& delta(MetricId id, std::string_view vantage, std::string_view own) {
    for (Delta& d : deltas) {
      if (d.id == id && d.vantage == vantage && d.own == own) return d;
    }
    return deltas.emplace_back(Delta{id, vantage, std::string(own), {}, 0, 0});
  }
};

// An attribute per label; server.port as the integer it is (a unix socket
// has none), error.type only when there is one.
Attributes attributes_of(MetricId id, const LabelValues& labels) {
  Attributes a;
  const bool gen_ai = is_gen_ai(id);
  const std::string_view* names = gen_ai ? kGenAiNames : kInfertapNames;
  const std::size_t n = gen_ai ? kGenAiLabels : kInfertapLabels;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const std::string_view name = i < n ? names[i] : own_label_of(id);
    const std::string& v = labels[i];
    if (name == "server.port") {
      if (!v.empty() && v.size() <= 5 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        a.add_int(std::string(name), std::stoll(v));
      }
    } else if (name == "error.type") {
      if (!v.empty() && carries_error(id)) a.add(std::string(name), v);
    } else {
      a.add(std::string(name), v);
    }
  }
  return a;
}

}  // namespace

const MetricSpec& spec_of(MetricId id) { return kSpecs[static_cast<std::size_t>(id)]; }

MetricAggregator::MetricAggregator(MetricLimits limits) : limits_(limits), caps_(limits.max_label_values) {}

void MetricAggregator::observe(const core::StreamRecord& record) {
  Collector c;
  observe_record(record, c);
  RecordLabels raw = labels_of(record, limits_.max_label_bytes);

  std::lock_guard<std::mutex> lock(mu_);
  const auto cap = [&](std::string_view name, std::string value) { return caps_.cap(name, std::move(value), &overflow_); };
  const std::string route = cap("http.route", std::move(raw.route));
  const std::string process = cap("process.executable.name", std::move(raw.process));
  const LabelValues infertap = {{}, cap("infertap.model", std::move(raw.model)), route, process};
  const LabelValues gen_ai = {{},
                              std::string(raw.operation),
                              cap("gen_ai.provider.name", std::move(raw.provider)),
                              cap("gen_ai.request.model", std::move(raw.request_model)),
                              cap("gen_ai.response.model", std::move(raw.response_model)),
                              cap("server.port", std::move(raw.server_port)),
                              route,
                              process,
                              raw.error_type.empty() ? std::string() : cap("error.type", std::move(raw.error_type))};
  for (Delta& d : c.deltas) {
    const std::size_t index = static_cast<std::size_t>(d.id);
    LabelValues labels = is_gen_ai(d.id) ? gen_ai : infertap;
    labels[0] = std::string(d.vantage);
    if (is_gen_ai(d.id) && !carries_error(d.id)) labels[kGenAiLabels - 1].clear();
    const std::size_t stream_labels = labels.size();
    if (!own_label_of(d.id).empty()) labels.push_back(std::move(d.own));
    if (index >= kHistogramIds) {
      series_of(sums_[index - kHistogramIds], std::move(labels), stream_labels, limits_.max_series_per_family) += d.n;
      continue;
    }
    Histogram& h = series_of(histograms_[index], std::move(labels), stream_labels, limits_.max_series_per_family);
    if (h.counts.empty()) h.counts.assign(d.counts.size(), 0);
    for (std::size_t i = 0; i < h.counts.size() && i < d.counts.size(); ++i) h.counts[i] += d.counts[i];
    h.sum += d.sum;
    h.count += d.n;
  }
}

std::vector<Metric> MetricAggregator::snapshot(std::uint64_t start_ns, std::uint64_t now_ns) const {
  std::vector<Metric> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t i = 0; i < kMetricIds; ++i) {
    const auto id = static_cast<MetricId>(i);
    const MetricSpec& spec = spec_of(id);
    Metric m{std::string(spec.name), std::string(spec.description), std::string(spec.unit), {}, {}, spec.bounds == nullptr};
    if (m.is_sum) {
      for (const auto& [labels, v] : sums_[i - kHistogramIds].series) {
        m.sum.push_back({attributes_of(id, labels), start_ns, now_ns, static_cast<std::int64_t>(v)});
      }
    } else {
      for (const auto& [labels, h] : histograms_[i].series) {
        m.histogram.push_back({attributes_of(id, labels), start_ns, now_ns, h.count, h.sum, h.counts, *spec.bounds});
      }
    }
    if (!m.sum.empty() || !m.histogram.empty()) out.push_back(std::move(m));
  }
  return out;
}

std::uint64_t MetricAggregator::label_overflow() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::uint64_t n = 0;
  for (const auto& [name, count] : overflow_) n += count;
  return n;
}

std::uint64_t MetricAggregator::series_overflow() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::uint64_t n = 0;
  for (const auto& f : histograms_) n += f.folded;
  for (const auto& f : sums_) n += f.folded;
  return n;
}

}  // namespace infertap::output::otlp
