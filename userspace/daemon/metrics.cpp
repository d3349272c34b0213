#include "daemon/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/labels.h"

namespace infertap::daemon {

namespace {

constexpr std::string_view kOther = "other";
constexpr std::string_view kUnknown = "unknown";

// Bucket index for v: the first upper bound >= v (le is inclusive); bounds.size() = +Inf.
std::size_t bucket_of(const std::vector<double>& bounds, double v) {
  return static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
}

// Invalid UTF-8 bytes become '?': Prometheus rejects label values that are not UTF-8.
std::string sanitize_utf8(std::string_view in, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(in.size(), max_bytes));
  std::size_t i = 0;
  while (i < in.size()) {
    const auto c = static_cast<unsigned char>(in[i]);
    std::size_t len = 0;
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3;
    else if (c >= 0xF0 && c <= 0xF4) len = 4;
    bool ok = len > 0 && i + len <= in.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      ok = (static_cast<unsigned char>(in[i + k]) & 0xC0) == 0x80;
    }
    if (ok && len >= 3) {  // overlong, surrogate and > U+10FFFF forms
      const auto c1 = static_cast<unsigned char>(in[i + 1]);
      if (c == 0xE0 && c1 < 0xA0) ok = false;
      if (c == 0xED && c1 >= 0xA0) ok = false;
      if (c == 0xF0 && c1 < 0x90) ok = false;
      if (c == 0xF4 && c1 >= 0x90) ok = false;
    }
    if (!ok) len = 1;
    if (out.size() + (ok ? len : 1) > max_bytes) break;
    if (ok) out.append(in.substr(i, len));
    else out.push_back('?');
    i += len;
  }
  return out;
}

std::string_view vantage_label(core::Role r) {
  switch (r) {
    case core::Role::server: return "server";
    case core::Role::client: return "client";
    default: return kUnknown;
  }
}

void add(std::vector<std::uint64_t>& counts, double& sum, std::uint64_t& count,
         const std::vector<double>& bounds, double v) {
  if (std::isnan(v)) return;
  counts[bucket_of(bounds, v)] += 1;
  sum += v;
  count += 1;
}

// Process CPU (user + system) from /proc/self/stat, seconds.
double process_cpu_seconds() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  // After "comm)": state(3) ppid(4) ... utime(14) stime(15).
  for (int field = 3; field <= 15 && (fields >> f); ++field) {
    if (field == 14) utime = std::strtoull(f.c_str(), nullptr, 10);
    if (field == 15) stime = std::strtoull(f.c_str(), nullptr, 10);
  }
  const long hz = sysconf(_SC_CLK_TCK);
  return hz > 0 ? static_cast<double>(utime + stime) / static_cast<double>(hz) : 0;
}

// Resident set size from /proc/self/statm, bytes.
std::uint64_t process_resident_bytes() {
  std::ifstream in("/proc/self/statm");
  unsigned long long size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  const long page = sysconf(_SC_PAGESIZE);
  return resident * static_cast<std::uint64_t>(page > 0 ? page : 4096);
}

// ---- exposition writer ---------------------------------------------------

class Writer {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    for (char c : help) {  // HELP escapes backslash and newline only
      if (c == '\\') out_ += "\\\\";
      else if (c == '\n') out_ += "\\n";
      else out_ += c;
    }
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }

  using Labels = std::vector<std::pair<std::string_view, std::string_view>>;

  void sample(std::string_view name, const Labels& labels, std::string_view value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      bool first = true;
      for (const auto& [k, v] : labels) {
        if (!first) out_ += ',';
        first = false;
        out_ += k;
        out_ += "=\"";
        out_ += escape_label_value(v);
        out_ += '"';
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += value;
    out_ += '\n';
  }
  void sample(std::string_view name, const Labels& labels, std::uint64_t value) {
    sample(name, labels, std::to_string(value));
  }
  void sample_double(std::string_view name, const Labels& labels, double value) {
    sample(name, labels, format_double(value));
  }

  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

Writer::Labels stream_labels(const std::vector<std::string>& values, std::string_view extra_name = {}) {
  Writer::Labels l;
  for (std::size_t i = 0; i < MetricsRegistry::kLabels && i < values.size(); ++i) {
    l.emplace_back(MetricsRegistry::kLabelNames[i], values[i]);
  }
  if (!extra_name.empty() && values.size() > MetricsRegistry::kLabels) {
    l.emplace_back(extra_name, values[MetricsRegistry::kLabels]);
  }
  return l;
}

// ---- families of render() ----------------------------------------------------
// Templates over the registry's private state types.

template <class Family>
void write_histograms(Writer& w, std::string_view name, std::string_view help, const Family& family,
                      const std::vector<double>& bounds) {
  w.family(name, "histogram", help);
  const std::string bucket = std::string(name) + "_bucket";
  const std::string sum = std::string(name) + "_sum";
  const std::string count = std::string(name) + "_count";
  std::vector<std::string> le_values;
  for (double b : bounds) le_values.push_back(format_double(b));
  le_values.emplace_back("+Inf");
  for (const auto& [values, h] : family) {
    Writer::Labels labels = stream_labels(values);
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < h.counts.size(); ++i) {
      cumulative += h.counts[i];
      Writer::Labels with_le = labels;
      with_le.emplace_back("le", le_values[i]);
      w.sample(bucket, with_le, cumulative);
    }
    w.sample_double(sum, labels, h.sum);
    w.sample(count, labels, h.count);
  }
}

template <class Family>
void write_counters(Writer& w, std::string_view name, std::string_view help, const Family& family,
                    std::string_view extra_label) {
  w.family(name, "counter", help);
  for (const auto& [values, v] : family) w.sample(name, stream_labels(values, extra_label), v);
}

template <class State>
void write_stream_metrics(Writer& w, const State& s, const MetricsConfig& config) {
  const std::vector<double>& lat = config.latency_buckets;
  write_histograms(w, "gen_ai_server_time_to_first_token_seconds",
                   "Time to first token: first content event minus request end, at the record's vantage.", s.ttft, lat);
  write_histograms(w, "gen_ai_server_time_per_output_token_seconds",
                   "Inter-token latency: one observation per gap between consecutive content events.", s.itl, lat);
  write_histograms(w, "gen_ai_server_request_duration_seconds", "End to end: last SSE event minus request end.", s.e2e,
                   config.duration_buckets);
  write_histograms(w, "infertap_tokens_per_second",
                   "Streaming token rate after the first token, one observation per stream.", s.rate,
                   config.rate_buckets);
  write_counters(w, "infertap_stream_tokens_total",
                 "Output tokens of finished streams (usage count, else content events).", s.tokens, {});
  write_counters(w, "infertap_streams_total", "Finished streams by how they ended.", s.streams, "end");
  write_counters(w, "infertap_stalls_total", "Gaps between content events above the stall threshold.", s.stalls,
                 "cause");
}

template <class State>
void write_degradation_metrics(Writer& w, const State& s) {
  w.family("infertap_degradation_cohort_degraded", "gauge",
           "Degradation cohorts: 1 while degraded, 0 while judged healthy or learning (docs/degradation.md).");
  for (const auto& [values, v] : s.cohort_degraded) {
    w.sample("infertap_degradation_cohort_degraded", stream_labels(values, "length_class"), v);
  }
  w.family("infertap_abuse_signals_active", "gauge",
           "Clients holding a disproportionate share of a process's decode time now (docs/degradation.md).");
  w.sample("infertap_abuse_signals_active", {}, s.abuse_active);
  w.family("infertap_label_overflow_total", "counter",
           "Observations whose label value was replaced by \"other\" (cardinality cap).");
  for (std::string_view label : MetricsRegistry::kLabelNames) {
    const auto it = s.overflow.find(std::string(label));
    w.sample("infertap_label_overflow_total", {{"label", label}}, it == s.overflow.end() ? 0 : it->second);
  }
}

// Pipeline counters that are stages of infertap_parse_errors_total rather
// than series of their own; sse, the third stage, comes from the records.
struct ParseErrorStage {
  std::string_view stage;
  std::string_view counter;  // its name in INFERTAP_PIPELINE_COUNTERS
};
constexpr ParseErrorStage kParseErrorStages[] = {{"http", "http_parse_errors"}, {"decode", "decode_errors"}};

bool is_parse_error_stage(std::string_view counter) {
  return std::any_of(std::begin(kParseErrorStages), std::end(kParseErrorStages),
                     [&](const ParseErrorStage& p) { return p.counter == counter; });
}

// One series per entry of a counter table: <prefix><name>_total (a counter)
// or <prefix><name> (a gauge), its HELP the table's text.
void write_table_counter(Writer& w, std::string_view prefix, const base::Counter& c) {
  const bool total = c.kind == base::CounterKind::total;
  const std::string name = std::string(prefix) + std::string(c.name) + (total ? "_total" : "");
  std::string help(c.help);
  if (!help.empty()) help[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(help[0])));
  w.family(name, total ? "counter" : "gauge", help + ".");
  w.sample(name, {}, c.value);
}

template <class State>
void write_self_metrics(Writer& w, const State& s) {
  s.capture.for_each_stat([&](const base::Counter& c) { write_table_counter(w, "infertap_kernel_", c); });
  w.family("infertap_drops_total", "counter", "Events dropped in the kernel, by reason.");
  s.capture.for_each_drop(
      [&](const base::Counter& c) { w.sample("infertap_drops_total", {{"reason", c.name}}, c.value); });
  w.family("infertap_parse_errors_total", "counter",
           "Parse errors by stage: http (HTTP framing), decode (kernel records), sse (inside finished streams).");
  for (const ParseErrorStage& p : kParseErrorStages) {
    s.pipeline.for_each([&](const base::Counter& c) {
      if (c.name == p.counter) w.sample("infertap_parse_errors_total", {{"stage", p.stage}}, c.value);
    });
  }
  w.sample("infertap_parse_errors_total", {{"stage", "sse"}}, s.sse_parse_errors);
  s.pipeline.for_each([&](const base::Counter& c) {
    if (!is_parse_error_stage(c.name)) write_table_counter(w, "infertap_pipeline_", c);
  });
  w.family("infertap_tracked_connections", "gauge", "Connections the pipeline is following now.");
  w.sample("infertap_tracked_connections", {}, s.extra.tracked_connections);
  s.sink.for_each([&](const base::Counter& c) { write_table_counter(w, "infertap_sink_", c); });
  w.family("infertap_process_cpu_seconds_total", "counter", "User and system CPU time of the agent process.");
  w.sample_double("infertap_process_cpu_seconds_total", {}, process_cpu_seconds());
  w.family("infertap_process_resident_memory_bytes", "gauge", "Resident memory of the agent process.");
  w.sample("infertap_process_resident_memory_bytes", {}, process_resident_bytes());
}

}  // namespace

// ---- helpers ---------------------------------------------------------------

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_double(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::vector<double> MetricsConfig::default_latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05,
          0.075, 0.1,    0.15,  0.25,   0.5,  1,     2.5,  5,    10};
}

std::vector<double> MetricsConfig::default_duration_buckets() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600};
}

std::vector<double> MetricsConfig::default_rate_buckets() {
  return {1, 2, 5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300, 500, 1000, 2000, 5000};
}

// ---- registry ----------------------------------------------------------------

MetricsRegistry::MetricsRegistry(MetricsConfig config) : config_(std::move(config)) {}

std::string MetricsRegistry::cap_label(std::size_t label, std::string value, bool count_overflow) {
  std::set<std::string>& seen = seen_[label];
  if (seen.count(value) != 0) return value;
  if (seen.size() < config_.max_label_values) {
    seen.insert(value);
    return value;
  }
  if (count_overflow) state_.overflow[std::string(kLabelNames[label])] += 1;
  return std::string(kOther);
}

void MetricsRegistry::observe(const core::StreamRecord& record) {
  const core::StreamMetrics& m = record.metrics;

  // Everything that does not touch shared state happens before the lock.
  std::string raw[kLabels];
  raw[0] = vantage_label(record.role);
  raw[1] = core::model_of(record);
  raw[2] = core::route_of(record.path);
  raw[3] = record.conn.comm;
  for (std::string& v : raw) {
    v = sanitize_utf8(v, config_.max_label_bytes);
    if (v.empty()) v = kUnknown;
  }

  // ITL: one observation per gap between consecutive content events.
  const std::vector<double>& lat = config_.latency_buckets;
  Histogram itl{std::vector<std::uint64_t>(lat.size() + 1, 0), 0, 0};
  bool have_prev = false;
  core::TimestampNs prev = 0;
  for (const core::TimelineEvent& e : record.timeline) {
    if (e.kind != protocol::EventKind::content) continue;
    if (have_prev) {
      const std::uint64_t gap = e.ts_ns >= prev ? e.ts_ns - prev : 0;
      add(itl.counts, itl.sum, itl.count, lat, static_cast<double>(gap) / 1e9);
    }
    prev = e.ts_ns;
    have_prev = true;
  }

  const std::string end(core::to_string(record.end));

  std::lock_guard<std::mutex> lock(mu_);
  LabelValues labels(kLabels);
  for (std::size_t i = 0; i < kLabels; ++i) labels[i] = cap_label(i, std::move(raw[i]));

  auto hist = [&](std::map<LabelValues, Histogram>& family, const std::vector<double>& bounds) -> Histogram& {
    auto [it, inserted] = family.try_emplace(labels);
    if (inserted) it->second.counts.assign(bounds.size() + 1, 0);
    return it->second;
  };
  if (m.ttft_ns) {
    Histogram& h = hist(state_.ttft, lat);
    add(h.counts, h.sum, h.count, lat, static_cast<double>(*m.ttft_ns) / 1e9);
  }
  if (m.e2e_ns) {
    Histogram& h = hist(state_.e2e, config_.duration_buckets);
    add(h.counts, h.sum, h.count, config_.duration_buckets, static_cast<double>(*m.e2e_ns) / 1e9);
  }
  if (m.tokens_per_s) {
    Histogram& h = hist(state_.rate, config_.rate_buckets);
    add(h.counts, h.sum, h.count, config_.rate_buckets, *m.tokens_per_s);
  }
  if (itl.count != 0) {
    Histogram& h = hist(state_.itl, lat);
    for (std::size_t i = 0; i < h.counts.size(); ++i) h.counts[i] += itl.counts[i];
    h.sum += itl.sum;
    h.count += itl.count;
  }
  state_.tokens[labels] += m.tokens;
  LabelValues with_end = labels;
  with_end.push_back(end);
  state_.streams[with_end] += 1;
  LabelValues with_cause = std::move(labels);
  with_cause.emplace_back("unclassified");  // not split by cause here yet; records carry it (stalls[].cause)
  state_.stalls[with_cause] += m.stalls.size();
  state_.sse_parse_errors += record.parse_errors;
}

void MetricsRegistry::set_self(const capture::CaptureStats& capture, const core::PipelineCounters& pipeline,
                               const SinkCounters& sink, const SelfExtra& extra) {
  std::lock_guard<std::mutex> lock(mu_);
  state_.capture = capture;
  state_.pipeline = pipeline;
  state_.sink = sink;
  state_.extra = extra;
}

void MetricsRegistry::set_degradation(const std::vector<CohortStateSample>& cohorts, std::uint64_t abuse_active) {
  std::lock_guard<std::mutex> lock(mu_);
  state_.cohort_degraded.clear();
  for (const CohortStateSample& c : cohorts) {
    // A refresh is not an observation: values over the cap fold into "other" uncounted.
    const std::string raw[kLabels] = {c.vantage, c.model, c.route, c.process};
    LabelValues labels;
    for (std::size_t i = 0; i < kLabels; ++i) {
      std::string v = sanitize_utf8(raw[i], config_.max_label_bytes);
      labels.push_back(cap_label(i, v.empty() ? std::string(kUnknown) : std::move(v), false));
    }
    labels.push_back(sanitize_utf8(c.length_class, config_.max_label_bytes));
    std::uint64_t& g = state_.cohort_degraded[labels];
    g = std::max<std::uint64_t>(g, c.degraded ? 1 : 0);
  }
  state_.abuse_active = abuse_active;
}

std::string MetricsRegistry::render() const {
  State s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = state_;
  }
  Writer w;
  write_stream_metrics(w, s, config_);
  write_degradation_metrics(w, s);
  write_self_metrics(w, s);
  return w.take();
}

}  // namespace infertap::daemon
