#include "output/prometheus/stream_families.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/labels.h"

namespace infertap::output::metrics_detail {
namespace {

using core::StreamMetrics;
using core::StreamRecord;
using core::TimestampNs;
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

double seconds(std::uint64_t ns) { return static_cast<double>(ns) / 1e9; }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A record's deltas, one histogram per family and vantage.
class Deltas {
 public:
  explicit Deltas(const MetricsConfig& config) : config_(config) {}

  void observe(HistogramFamily f, std::string_view vantage, double v) { add(histogram(f, vantage), f, v); }
  // One observation per gap between consecutive token-event times.
  void gaps(HistogramFamily f, std::string_view vantage, const std::vector<TimestampNs>& times) {
    if (times.size() < 2) return;
    Histogram& h = histogram(f, vantage);
    for (std::size_t i = 1; i < times.size(); ++i) add(h, f, seconds(times[i] - std::min(times[i], times[i - 1])));
  }
  void count(CounterFamily f, std::string_view vantage, std::string extra, std::uint64_t n) {
    out_.counters.push_back({f, vantage, std::move(extra), n});
  }
  // The objectives a record's views are counted against: those matching its
  // labels; an errored record misses each of them.
  void objective_scope(const RecordLabels& labels, bool errored) {
    for (std::size_t i = 0; i < config_.objectives.size(); ++i) {
      if (matches(config_.objectives[i], labels.model, labels.route)) matched_.push_back(i);
    }
    errored_ = errored;
  }
  void count_objectives(std::string_view vantage, const StreamMetrics& m) {
    const std::optional<double> ttft = m.ttft_ns ? std::optional<double>(seconds(*m.ttft_ns)) : std::nullopt;
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
  void add(Histogram& h, HistogramFamily f, double v) {
    if (std::isnan(v)) return;
    h.counts[bucket_of(bounds_of(f, config_), v)] += 1;
    h.sum += v;
    h.count += 1;
  }

  const MetricsConfig& config_;
  RecordDeltas out_;
  std::vector<std::size_t> matched_;
  bool errored_ = false;
};

// A stream as timed at one vantage: its metrics there, its token events' times.
struct View {
  std::string_view vantage;
  const StreamMetrics& m;
  std::vector<TimestampNs> token_times;
};

// Which gen_ai_* families a view feeds: the server's, the client's, none.
enum class Side : std::uint8_t { server, client, none };

// OTel's per-request value: (duration - TTFT) / (output tokens - 1). Left out
// when the token count is a lower bound (capture holes): the value would be too high.
std::optional<double> time_per_output_token(const StreamMetrics& m) {
  if (!m.ttft_ns || !m.e2e_ns || m.tokens < 2 || *m.e2e_ns < *m.ttft_ns) return std::nullopt;
  if (m.counts_lower_bound && m.token_source == core::TokenSource::events) return std::nullopt;
  return seconds(*m.e2e_ns - *m.ttft_ns) / static_cast<double>(m.tokens - 1);
}

void add_server_side(Deltas& d, const View& v, bool successful) {
  if (v.m.ttft_ns && successful) d.observe(HistogramFamily::server_ttft, v.vantage, seconds(*v.m.ttft_ns));
  if (const auto tpot = time_per_output_token(v.m); tpot && successful) {
    d.observe(HistogramFamily::server_tpot, v.vantage, *tpot);
  }
  if (v.m.e2e_ns) d.observe(HistogramFamily::server_duration, v.vantage, seconds(*v.m.e2e_ns));
}

void add_client_side(Deltas& d, const View& v) {
  if (v.m.ttft_ns) d.observe(HistogramFamily::client_ttfc, v.vantage, seconds(*v.m.ttft_ns));
  d.gaps(HistogramFamily::client_tpoc, v.vantage, v.token_times);
  if (v.m.e2e_ns) d.observe(HistogramFamily::client_duration, v.vantage, seconds(*v.m.e2e_ns));
}

void add_view(Deltas& d, const View& v, Side side, bool successful) {
  if (side == Side::server) add_server_side(d, v, successful);
  if (side == Side::client) add_client_side(d, v);
  d.gaps(HistogramFamily::itl, v.vantage, v.token_times);
  // tokens_per_s is null when the count is a lower bound (core/metrics.h): no rate then.
  if (v.m.tokens_per_s) d.observe(HistogramFamily::rate, v.vantage, *v.m.tokens_per_s);
  if (v.m.itl_max_ns) d.observe(HistogramFamily::longest_pause, v.vantage, seconds(*v.m.itl_max_ns));
  d.count_objectives(v.vantage, v.m);
  std::map<core::StallCause, std::uint64_t> causes;
  for (const core::Stall& st : v.m.stalls) causes[st.cause] += 1;
  for (const auto& [cause, n] : causes) d.count(CounterFamily::stalls, v.vantage, std::string(core::to_string(cause)), n);
}

std::vector<TimestampNs> own_token_times(const StreamRecord& r) {
  std::vector<TimestampNs> out;
  for (const core::TimelineEvent& e : r.timeline) {
    if (e.kind == protocol::EventKind::content) out.push_back(e.ts_ns);
  }
  return out;
}

// The token events' delivered times, up to the first one not delivered (as
// the delivery metrics take them, core/path/delivery.cpp).
std::vector<TimestampNs> delivered_token_times(const StreamRecord& r) {
  std::vector<TimestampNs> out;
  for (std::size_t i = 0; i < r.timeline.size() && i < r.path_times.size(); ++i) {
    if (r.timeline[i].kind != protocol::EventKind::content) continue;
    if (!r.path_times[i].delivered_ns) break;
    out.push_back(r.path_times[i].delivered_ns);
  }
  return out;
}

std::string_view vantage_of(core::Role role) {
  switch (role) {
    case core::Role::server: return kVantageServer;
    case core::Role::client: return kVantageClient;
    default: return kVantageUnknown;
  }
}

std::string_view vantage_of(const core::Delivery& d) {
  switch (d.vantage) {
    case core::Vantage::read: return kVantageClient;
    case core::Vantage::acked: return kVantageAcked;
    default: return kVantageUnknown;
  }
}

// Why the path degraded the stream: the first token's and the last token's
// waits, and the delivered stalls the model did not cause; "none" when the
// judgment named no cause.
std::set<std::string_view> path_causes(const core::Delivery& d) {
  std::set<std::string_view> out;
  for (core::StallCause c : {d.ttft_cause, d.lag_cause}) {
    if (c != core::StallCause::none) out.insert(core::to_string(c));
  }
  for (const core::Stall& st : d.metrics.stalls) {
    if (st.cause != core::StallCause::model && st.cause != core::StallCause::none) out.insert(core::to_string(st.cause));
  }
  if (out.empty()) out.insert(core::to_string(core::StallCause::none));
  return out;
}

// A server record's client-observed view: the lag and the path's verdict
// always; the client families only when the final client is remote and this
// record's socket is the last hop (a local client's own record, or the
// gateway's downstream record, is that view already).
void add_delivery(Deltas& d, const StreamRecord& r) {
  const core::Delivery& del = *r.delivery;
  const std::string_view vantage = vantage_of(del);
  if (del.lag_last_ns) d.observe(HistogramFamily::lag, vantage, seconds(*del.lag_last_ns));
  if (del.degraded_by_path) {
    for (std::string_view cause : path_causes(del)) d.count(CounterFamily::path_degraded, vantage, std::string(cause), 1);
  }
  if (del.vantage == core::Vantage::acked && r.peer_stream_id.empty()) {
    add_view(d, View{kVantageAcked, del.metrics, delivered_token_times(r)}, Side::client, true);
  }
}

RecordLabels labels_of(const StreamRecord& r, std::size_t max_bytes) {
  RecordLabels l;
  l.model = label_value(core::model_of(r), max_bytes);
  l.route = label_value(core::route_of(r.path), max_bytes);
  l.process = label_value(r.conn.comm, max_bytes);
  l.request_model = label_value(r.request_model, max_bytes);
  l.response_model = label_value(r.model, max_bytes);
  const core::Endpoint& server = r.role == core::Role::client ? r.conn.remote : r.conn.local;
  // A unix socket's path is no label: paths can be per process or per request, an unbounded set.
  const std::string port = r.conn.transport == core::Transport::unix_stream ? std::string("unix")
                           : server.port                                    ? std::to_string(server.port)
                                                                            : std::string();
  l.server_port = label_value(port, max_bytes);
  l.operation = genai_operation_of(r);
  l.provider = label_value(genai_provider_of(r), max_bytes);
  l.system_fingerprint = label_value(r.load.system_fingerprint, max_bytes);
  return l;
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

std::string label_value(std::string_view in, std::size_t max_bytes) {
  std::string v = sanitize_utf8(in, max_bytes);
  return v.empty() ? std::string("unknown") : v;
}

RecordDeltas deltas_of(const StreamRecord& r, const MetricsConfig& config) {
  Deltas d(config);
  RecordLabels labels = labels_of(r, config.max_label_bytes);
  const std::string_view vantage = vantage_of(r.role);
  const Side side = r.role == core::Role::server ? Side::server : r.role == core::Role::client ? Side::client : Side::none;
  const bool successful = (r.status == 0 || (r.status >= 200 && r.status < 300)) && r.error_type.empty();
  d.objective_scope(labels, !successful);
  add_view(d, View{vantage, r.metrics, own_token_times(r)}, side, successful);
  d.count(CounterFamily::tokens, vantage, {}, r.metrics.tokens);
  d.count(CounterFamily::streams, vantage, std::string(core::to_string(r.end)), 1);
  if (r.role == core::Role::server && r.delivery) add_delivery(d, r);
  return d.take(std::move(labels));
}

}  // namespace infertap::output::metrics_detail

namespace infertap::output {

std::string_view genai_operation_of(std::string_view route) {
  while (route.size() > 1 && route.back() == '/') route.remove_suffix(1);
  if (metrics_detail::ends_with(route, "/chat/completions") || metrics_detail::ends_with(route, "/messages") ||
      metrics_detail::ends_with(route, "/responses")) {
    return "chat";
  }
  if (metrics_detail::ends_with(route, "/completions")) return "text_completion";
  return "unknown";
}

std::string_view genai_operation_of(const core::StreamRecord& r) {
  using protocol::Dialect;
  switch (r.dialect) {
    case Dialect::ollama: return metrics_detail::ends_with(core::route_of(r.path), "/api/chat") ? "chat" : "text_completion";
    case Dialect::tgi:
    case Dialect::llamacpp:
    case Dialect::sglang:
    case Dialect::vllm:
    case Dialect::triton: return "text_completion";
    case Dialect::gemini: return "generate_content";
    case Dialect::anthropic:
    case Dialect::openai_responses: return "chat";
    case Dialect::declared:
      if (r.declared && !r.declared->operation.empty()) return r.declared->operation;
      break;
    default: break;
  }
  return genai_operation_of(core::route_of(r.path));
}

std::string_view genai_provider_of(const core::StreamRecord& r) {
  using protocol::Dialect;
  switch (r.dialect) {
    case Dialect::openai:
    case Dialect::openai_responses: return "openai";
    case Dialect::anthropic: return "anthropic";
    case Dialect::ollama: return "ollama";
    case Dialect::tgi: return "tgi";
    case Dialect::llamacpp: return "llama.cpp";
    case Dialect::sglang: return "sglang";
    case Dialect::vllm: return "vllm";
    case Dialect::triton: return "triton";
    case Dialect::gemini: return "gcp.gemini";
    case Dialect::declared:
      if (r.declared) return r.declared->provider.empty() ? std::string_view(r.declared->name) : r.declared->provider;
      break;
    case Dialect::grpc:  // gRPC names no provider: the service is the path
    case Dialect::unknown: break;
  }
  return "unknown";
}

}  // namespace infertap::output
