#include "output/prometheus/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <exception>
#include <fstream>
#include <sstream>

#include "base/escape.h"
#include "output/prometheus/stream_families.h"

namespace infertap::output {

namespace {

using metrics_detail::CounterFamily;
using metrics_detail::Family;
using metrics_detail::Histogram;
using metrics_detail::HistogramFamily;
using metrics_detail::LabelSet;
using metrics_detail::LabelValues;
using metrics_detail::kCounterFamilies;
using metrics_detail::kHistogramFamilies;

constexpr std::string_view kOther = "other";
constexpr std::string_view kObjectiveStreams = "infertap_objective_streams_total";
constexpr std::string_view kServingIdentity = "infertap_serving_identity";

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

// name="value" appended to a series' labels (comma-separated, no braces).
void add_label(std::string& out, std::string_view name, std::string_view value) {
  if (!out.empty()) out += ',';
  out += name;
  out += "=\"";
  out += escape_label_value(value);
  out += '"';
}

// name{labels[,le="bound"]} value
void line(std::string& out, std::string_view name, std::string_view labels, std::string_view le,
          std::string_view value) {
  out += name;
  if (!labels.empty() || !le.empty()) {
    out += '{';
    out += labels;
    if (!le.empty()) {
      if (!labels.empty()) out += ',';
      out += "le=\"";
      out += le;
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += value;
  out += '\n';
}

class Writer {
 public:
  // `expected`: about the size of the text (the last one's): one allocation
  // instead of a doubling series whose freed steps the heap keeps.
  explicit Writer(std::size_t expected = 0) { out_.reserve(expected); }

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
    std::string rendered;
    for (const auto& [k, v] : labels) add_label(rendered, k, v);
    line(out_, name, rendered, {}, value);
  }
  void sample(std::string_view name, const Labels& labels, std::uint64_t value) {
    sample(name, labels, std::to_string(value));
  }
  void sample_double(std::string_view name, const Labels& labels, double value) {
    sample(name, labels, format_double(value));
  }

  std::string& out() { return out_; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// name="value",... of a series (no braces): its label values under their names.
std::string render_labels(const LabelValues& values, const std::string_view* names, std::size_t n,
                          std::string_view extra_name = {}) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::string_view name = i < n ? names[i] : extra_name;
    if (!name.empty()) add_label(out, name, values[i]);
  }
  return out;
}

std::string render_labels(const LabelValues& values, LabelSet set, std::string_view extra_name = {}) {
  // infertap_* histograms with metrics.band_labels: the length class and the two bands after the four labels.
  static constexpr std::string_view kBanded[] = {"vantage", "model",          "route",     "process",
                                                 "length_class", "concurrency_band", "input_band"};
  if (set == LabelSet::infertap && extra_name.empty() && values.size() == std::size(kBanded)) {
    return render_labels(values, kBanded, std::size(kBanded));
  }
  return set == LabelSet::gen_ai
             ? render_labels(values, MetricsRegistry::kGenAiLabelNames, MetricsRegistry::kGenAiLabels, extra_name)
             : render_labels(values, MetricsRegistry::kLabelNames, MetricsRegistry::kLabels, extra_name);
}

// ---- families of render() ----------------------------------------------------

void write_histograms(Writer& w, const metrics_detail::HistogramSpec& spec, const Family<Histogram>& family,
                      const std::vector<double>& bounds) {
  w.family(spec.name, "histogram", spec.help);
  const std::string bucket = std::string(spec.name) + "_bucket";
  const std::string sum = std::string(spec.name) + "_sum";
  const std::string count = std::string(spec.name) + "_count";
  std::vector<std::string> le_values;
  for (double b : bounds) le_values.push_back(format_double(b));
  le_values.emplace_back("+Inf");
  std::string& out = w.out();
  for (const auto& [values, h] : family.series) {
    const std::string labels = render_labels(values, spec.labels);
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < h.counts.size() && i < le_values.size(); ++i) {
      cumulative += h.counts[i];
      line(out, bucket, labels, le_values[i], std::to_string(cumulative));
    }
    line(out, sum, labels, {}, format_double(h.sum));
    line(out, count, labels, {}, std::to_string(h.count));
  }
}

void write_counters(Writer& w, const metrics_detail::CounterSpec& spec, const Family<std::uint64_t>& family) {
  w.family(spec.name, "counter", spec.help);
  for (const auto& [values, v] : family.series) {
    line(w.out(), spec.name, render_labels(values, LabelSet::infertap, spec.extra), {}, std::to_string(v));
  }
}

template <class State>
void write_stream_metrics(Writer& w, const State& s, const MetricsConfig& config) {
  for (std::size_t i = 0; i < kHistogramFamilies; ++i) {
    const auto f = static_cast<HistogramFamily>(i);
    write_histograms(w, metrics_detail::spec_of(f), s.histograms[i], metrics_detail::bounds_of(f, config));
  }
  for (std::size_t i = 0; i < kCounterFamilies; ++i) {
    write_counters(w, metrics_detail::spec_of(static_cast<CounterFamily>(i)), s.counters[i]);
  }
  w.family("infertap_series_overflow_total", "counter",
           "Stream records whose update of a family went to its overflow series (series budget).");
  for (std::size_t i = 0; i < kHistogramFamilies; ++i) {
    w.sample("infertap_series_overflow_total", {{"family", metrics_detail::spec_of(static_cast<HistogramFamily>(i)).name}},
             s.histograms[i].folded);
  }
  for (std::size_t i = 0; i < kCounterFamilies; ++i) {
    w.sample("infertap_series_overflow_total", {{"family", metrics_detail::spec_of(static_cast<CounterFamily>(i)).name}},
             s.counters[i].folded);
  }
  w.sample("infertap_series_overflow_total", {{"family", kObjectiveStreams}}, s.objective_streams.folded);
  w.sample("infertap_series_overflow_total", {{"family", kServingIdentity}}, s.identities.folded);
}

// The objectives' settings (from the configuration) and the streams counted against them.
template <class State>
void write_objective_metrics(Writer& w, const State& s, const MetricsConfig& config) {
  w.family("infertap_objective", "gauge",
           "Stream objectives of the configuration (objectives:), one series per setting; the fleet's alerting rules "
           "read their thresholds here.");
  for (std::size_t i = 0; i < config.objectives.size(); ++i) {
    for (const auto& [setting, value] : settings_of(config.objectives[i], i)) {
      w.sample_double("infertap_objective", {{"objective", config.objectives[i].name}, {"setting", setting}}, value);
    }
  }
  w.family(kObjectiveStreams, "counter",
           "Streams counted against an objective they match: met=\"true\" when their TTFT and rate meet it, "
           "\"false\" when not or when they ended in error.");
  static constexpr std::string_view kObjectiveLabels[] = {"vantage", "model", "route", "objective", "met"};
  for (const auto& [values, v] : s.objective_streams.series) {
    line(w.out(), kObjectiveStreams, render_labels(values, kObjectiveLabels, std::size(kObjectiveLabels)), {},
         std::to_string(v));
  }
}

// 1 per serving identity seen within the TTL: what the rules' baseline review compares with a day before.
template <class State>
void write_identities(Writer& w, const State& s, std::chrono::steady_clock::time_point now, std::chrono::seconds ttl) {
  w.family(kServingIdentity, "gauge",
           "1 per serving identity (response model, system_fingerprint) of a model and route seen recently.");
  static constexpr std::string_view kIdentityLabels[] = {"model", "route", "response_model", "system_fingerprint"};
  for (const auto& [values, seen] : s.identities.series) {
    if (now - seen > ttl) continue;
    line(w.out(), kServingIdentity, render_labels(values, kIdentityLabels, std::size(kIdentityLabels)), {}, "1");
  }
}

// Every label the caps apply to, for infertap_label_overflow_total.
constexpr std::string_view kCappedLabels[] = {"model",        "route",      "process",           "gen_ai_request_model",
                                              "gen_ai_response_model", "server_port", "system_fingerprint"};

template <class State>
void write_degradation_metrics(Writer& w, const State& s) {
  w.family("infertap_degradation_cohort_degraded", "gauge",
           "Degradation cohorts: 1 while degraded, 0 while judged healthy or learning (docs/degradation.md).");
  for (const auto& [values, v] : s.cohort_degraded.series) {
    static constexpr std::string_view kCohortLabels[] = {"vantage", "model", "route", "process", "length_class",
                                                         "concurrency_band", "input_band"};
    line(w.out(), "infertap_degradation_cohort_degraded", render_labels(values, kCohortLabels, std::size(kCohortLabels)),
         {}, std::to_string(v));
  }
  w.family("infertap_streams_in_flight", "gauge",
           "Streams of the serving processes of this name between their first token and their end, now.");
  for (const auto& [process, load] : s.process_load) w.sample("infertap_streams_in_flight", {{"process", process}}, load.first);
  w.family("infertap_requests_waiting", "gauge",
           "Requests to the serving processes of this name whose request ended with no first token yet, now.");
  for (const auto& [process, load] : s.process_load) w.sample("infertap_requests_waiting", {{"process", process}}, load.second);
  w.family("infertap_abuse_signals_active", "gauge",
           "Clients holding a disproportionate share of a process's decode time now (docs/degradation.md).");
  w.sample("infertap_abuse_signals_active", {}, s.abuse_active);
  w.family("infertap_label_overflow_total", "counter",
           "Observations whose label value was replaced by \"other\" (cardinality cap).");
  for (std::string_view label : kCappedLabels) {
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
  w.family("infertap_capability_missing", "gauge",
           "1 per capability the capture lacks: part of it does not work (infertap status: privileges).");
  for (const std::string& name : s.extra.missing_capabilities) {
    w.sample("infertap_capability_missing", {{"capability", name}}, std::uint64_t{1});
  }
  s.sink.for_each([&](const base::Counter& c) { write_table_counter(w, "infertap_sink_", c); });
  s.extra.otlp.for_each([&](const base::Counter& c) { write_table_counter(w, "infertap_otlp_", c); });
  w.family("infertap_process_cpu_seconds_total", "counter", "User and system CPU time of the agent process.");
  w.sample_double("infertap_process_cpu_seconds_total", {}, process_cpu_seconds());
  w.family("infertap_process_resident_memory_bytes", "gauge", "Resident memory of the agent process.");
  w.sample("infertap_process_resident_memory_bytes", {}, process_resident_bytes());
}

}  // namespace

// ---- helpers ---------------------------------------------------------------

// The exposition format escapes only backslash, quote and newline. Any other
// control character (ESC, NUL, C1) and any byte that is not UTF-8 is written
// as base::printable writes it, its backslash doubled: the scraped value reads
// "\x1b", and no raw control character reaches a scrape.
std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size();) {
    const base::TextUnit u = base::next_unit(v, i);
    if (!u.unsafe) {
      for (char c : v.substr(i, u.size)) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else out += c;
      }
    } else if (u.utf8 && u.code_point == '\n') {
      out += "\\n";
    } else {
      out += '\\' + base::escape_of(u);
    }
    i += u.size;
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

MetricsRegistry::MetricsRegistry(MetricsConfig config)
    : config_(std::move(config)), caps_(config_.max_label_values) {}

std::string MetricsRegistry::cap_label(std::string_view name, std::string value, bool count_overflow) {
  return caps_.cap(name, std::move(value), count_overflow ? &state_.overflow : nullptr);
}

template <class V>
V& MetricsRegistry::series(Family<V>& family, LabelValues labels, std::size_t stream_labels) {
  return output::series_of(family, std::move(labels), stream_labels, config_.max_series_per_family);
}

void MetricsRegistry::observe(const core::StreamRecord& record) {
  // Everything that does not touch shared state happens before the lock.
  metrics_detail::RecordDeltas d = metrics_detail::deltas_of(record, config_);
  metrics_detail::RecordLabels& raw = d.labels;
  std::array<std::string, 3> bands;
  const bool banded = config_.band_labels && config_.band_of;
  if (banded) bands = config_.band_of(record);
  // An identity is worth a series when the stream named what served it.
  const bool identified = raw.response_model != "unknown" || raw.system_fingerprint != "unknown";

  std::lock_guard<std::mutex> lock(mu_);
  const std::string route = cap_label("route", std::move(raw.route));
  const std::string process = cap_label("process", std::move(raw.process));
  const LabelValues infertap = {{}, cap_label("model", std::move(raw.model)), route, process};
  LabelValues infertap_banded = infertap;
  if (banded) {
    static constexpr std::string_view kBandLabels[] = {"length_class", "concurrency_band", "input_band"};
    for (std::size_t i = 0; i < bands.size(); ++i) {
      infertap_banded.push_back(cap_label(kBandLabels[i], metrics_detail::label_value(bands[i], config_.max_label_bytes)));
    }
  }
  const LabelValues gen_ai = {{},
                              std::string(raw.operation),
                              cap_label("gen_ai_provider_name", std::move(raw.provider)),
                              cap_label("gen_ai_request_model", std::move(raw.request_model)),
                              cap_label("gen_ai_response_model", std::move(raw.response_model)),
                              cap_label("server_port", std::move(raw.server_port)),
                              route,
                              process};
  for (const metrics_detail::HistogramDelta& h : d.histograms) {
    const bool otel = metrics_detail::spec_of(h.family).labels == LabelSet::gen_ai;
    LabelValues labels = otel ? gen_ai : infertap_banded;
    labels[0] = h.vantage;
    Histogram& into = series(state_.histograms[static_cast<std::size_t>(h.family)], std::move(labels),
                             otel ? kGenAiLabels : kLabels);
    if (into.counts.empty()) into.counts.assign(h.h.counts.size(), 0);
    for (std::size_t i = 0; i < into.counts.size() && i < h.h.counts.size(); ++i) into.counts[i] += h.h.counts[i];
    into.sum += h.h.sum;
    into.count += h.h.count;
  }
  for (metrics_detail::CounterDelta& c : d.counters) {
    LabelValues labels = infertap;
    labels[0] = c.vantage;
    if (!metrics_detail::spec_of(c.family).extra.empty()) labels.push_back(std::move(c.extra));
    series(state_.counters[static_cast<std::size_t>(c.family)], std::move(labels), kLabels) += c.n;
  }
  for (const metrics_detail::ObjectiveDelta& o : d.objectives) {
    LabelValues labels = infertap;
    labels.resize(3);  // vantage, model, route
    labels[0] = o.vantage;
    labels.push_back(config_.objectives[o.objective].name);
    labels.push_back(o.met ? "true" : "false");
    series(state_.objective_streams, std::move(labels), 3) += 1;
  }
  if (identified) {
    note_identity({infertap[1], route, gen_ai[4], cap_label("system_fingerprint", std::move(raw.system_fingerprint))});
  }
  state_.sse_parse_errors += record.parse_errors;
  ++version_;
}

std::chrono::steady_clock::time_point MetricsRegistry::now() const {
  return config_.clock ? config_.clock() : std::chrono::steady_clock::now();
}

void MetricsRegistry::note_identity(LabelValues labels) {
  const auto t = now();
  auto& identities = state_.identities.series;
  if (identities.find(labels) == identities.end()) {
    // Expired identities give their room in the series budget to new ones;
    // beyond it, every label is "other" (no label of an identity is closed).
    std::erase_if(identities, [&](const auto& entry) { return t - entry.second > config_.identity_ttl; });
    if (identities.size() >= config_.max_series_per_family) {
      std::fill(labels.begin(), labels.end(), std::string(kOther));
      state_.identities.folded += 1;
    }
  }
  identities[std::move(labels)] = t;
}

void MetricsRegistry::set_self(const capture::CaptureStats& capture, const core::PipelineCounters& pipeline,
                               const SinkCounters& sink, const SelfExtra& extra) {
  std::lock_guard<std::mutex> lock(mu_);
  state_.capture = capture;
  state_.pipeline = pipeline;
  state_.sink = sink;
  state_.extra = extra;
  ++version_;
}

void MetricsRegistry::set_degradation(const std::vector<CohortStateSample>& cohorts, std::uint64_t abuse_active) {
  std::lock_guard<std::mutex> lock(mu_);
  state_.cohort_degraded = {};
  for (const CohortStateSample& c : cohorts) {
    // A refresh is not an observation: values over the caps fold into "other" uncounted.
    LabelValues labels = {metrics_detail::label_value(c.vantage, config_.max_label_bytes)};
    const std::pair<std::string_view, const std::string*> capped[] = {
        {"model", &c.model}, {"route", &c.route}, {"process", &c.process}};
    for (const auto& [name, value] : capped) {
      labels.push_back(cap_label(name, metrics_detail::label_value(*value, config_.max_label_bytes), false));
    }
    labels.push_back(metrics_detail::label_value(c.length_class, config_.max_label_bytes));
    if (config_.band_labels) {
      labels.push_back(cap_label("concurrency_band", metrics_detail::label_value(c.concurrency_band, config_.max_label_bytes), false));
      labels.push_back(cap_label("input_band", metrics_detail::label_value(c.input_band, config_.max_label_bytes), false));
    }
    std::uint64_t& g = series(state_.cohort_degraded, std::move(labels), kLabels);
    g = std::max<std::uint64_t>(g, c.degraded ? 1 : 0);
  }
  state_.cohort_degraded.folded = 0;
  state_.abuse_active = abuse_active;
  ++version_;
}

void MetricsRegistry::set_load(const std::vector<ProcessLoadSample>& processes) {
  std::lock_guard<std::mutex> lock(mu_);
  state_.process_load.clear();
  for (const ProcessLoadSample& p : processes) {
    auto& v = state_.process_load[cap_label("process", metrics_detail::label_value(p.process, config_.max_label_bytes), false)];
    v.first += p.in_flight;
    v.second += p.waiting;
  }
  ++version_;
}

std::string MetricsRegistry::render_now(std::uint64_t rendering, std::uint64_t* version) const {
  State s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = state_;
    *version = version_;
  }
  Writer w(last_size_.load(std::memory_order_relaxed) * 9 / 8 + 4096);
  write_stream_metrics(w, s, config_);
  write_objective_metrics(w, s, config_);
  write_identities(w, s, now(), config_.identity_ttl);
  write_degradation_metrics(w, s);
  w.family("infertap_scrape_renderings_total", "counter",
           "Renderings of the metrics text: scrapes that arrive during one, or while nothing changed, share it.");
  w.sample("infertap_scrape_renderings_total", {}, rendering);
  write_self_metrics(w, s);
  std::string text = w.take();
  last_size_.store(text.size(), std::memory_order_relaxed);
  return text;
}

std::shared_ptr<const std::string> MetricsRegistry::scrape() const {
  std::unique_lock<std::mutex> lock(scrape_mu_);
  if (rendering_) {
    // Another scrape is rendering: its text is as fresh as a new one would be.
    const std::uint64_t ongoing = renders_;
    render_done_.wait(lock, [&] { return renders_ != ongoing; });
    if (last_) return last_;
    render_done_.wait(lock, [&] { return !rendering_; });  // that one failed: render anew, one at a time
  }
  const auto now = std::chrono::steady_clock::now();
  if (last_ && now - last_at_ < kReuseFor) {
    std::lock_guard<std::mutex> state_lock(mu_);
    if (version_ == last_version_) return last_;  // nothing changed since
  }
  rendering_ = true;
  const std::uint64_t nth = renders_ + 1;
  lock.unlock();
  std::shared_ptr<const std::string> text;
  std::uint64_t version = 0;
  std::exception_ptr failed;
  try {
    text = std::make_shared<const std::string>(render_now(nth, &version));
  } catch (...) {
    failed = std::current_exception();
  }
  lock.lock();
  if (text) {
    last_ = text;
    last_version_ = version;
    last_at_ = now;
  }
  rendering_ = false;
  ++renders_;
  render_done_.notify_all();
  if (failed) std::rethrow_exception(failed);
  return text;
}

std::string MetricsRegistry::render() const { return *scrape(); }

std::uint64_t MetricsRegistry::renders() const {
  std::lock_guard<std::mutex> lock(scrape_mu_);
  return renders_;
}

}  // namespace infertap::output
