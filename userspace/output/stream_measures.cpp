#include "output/stream_measures.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "base/clock.h"
#include "core/labels.h"

namespace infertap::output {
namespace {

using core::StreamMetrics;
using core::StreamRecord;
using core::TimestampNs;

using base::seconds;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One observation per gap between consecutive token-event times.
void observe_gaps(MeasureSink& sink, HistogramFamily f, std::string_view vantage, const std::vector<TimestampNs>& times) {
  for (std::size_t i = 1; i < times.size(); ++i) sink.observe(f, vantage, seconds(times[i] - std::min(times[i], times[i - 1])));
}

// A stream as timed at one vantage: its metrics there, its token events' times.
struct View {
  std::string_view vantage;
  const StreamMetrics& m;
  const std::vector<core::StallVerdict>& stall_causes;  // one per m.stalls
  std::vector<TimestampNs> token_times;
};

// Which gen_ai measures a view feeds: the server's, the client's, none.
enum class Side : std::uint8_t { server, client, none };

// OTel's per-request value: (duration - TTFT) / (output tokens - 1). Left out
// when the token count is a lower bound (capture holes): the value would be too high.
std::optional<double> time_per_output_token(const StreamMetrics& m) {
  if (!m.ttft_ns || !m.e2e_ns || m.tokens < 2 || *m.e2e_ns < *m.ttft_ns) return std::nullopt;
  if (m.counts_lower_bound && m.token_source == core::TokenSource::events) return std::nullopt;
  return seconds(*m.e2e_ns - *m.ttft_ns) / static_cast<double>(m.tokens - 1);
}

void add_server_side(MeasureSink& sink, const View& v, bool successful) {
  if (v.m.ttft_ns && successful) sink.observe(HistogramFamily::server_ttft, v.vantage, seconds(*v.m.ttft_ns));
  if (const auto tpot = time_per_output_token(v.m); tpot && successful) {
    sink.observe(HistogramFamily::server_tpot, v.vantage, *tpot);
  }
  if (v.m.e2e_ns) sink.observe(HistogramFamily::server_duration, v.vantage, seconds(*v.m.e2e_ns));
}

void add_client_side(MeasureSink& sink, const View& v) {
  if (v.m.ttft_ns) sink.observe(HistogramFamily::client_ttfc, v.vantage, seconds(*v.m.ttft_ns));
  observe_gaps(sink, HistogramFamily::client_tpoc, v.vantage, v.token_times);
  if (v.m.e2e_ns) sink.observe(HistogramFamily::client_duration, v.vantage, seconds(*v.m.e2e_ns));
}

void add_view(MeasureSink& sink, const View& v, Side side, bool successful) {
  if (side == Side::server) add_server_side(sink, v, successful);
  if (side == Side::client) add_client_side(sink, v);
  observe_gaps(sink, HistogramFamily::itl, v.vantage, v.token_times);
  // tokens_per_s is null when the count is a lower bound (core/metrics.h): no rate then.
  if (v.m.tokens_per_s) sink.observe(HistogramFamily::rate, v.vantage, *v.m.tokens_per_s);
  if (v.m.itl_max_ns) sink.observe(HistogramFamily::longest_pause, v.vantage, seconds(*v.m.itl_max_ns));
  sink.view(v.vantage, v.m);
  std::map<core::StallCause, std::uint64_t> causes;
  for (std::size_t i = 0; i < v.m.stalls.size(); ++i) causes[core::verdict_at(v.stall_causes, i).cause] += 1;
  for (const auto& [cause, n] : causes) sink.count(CounterFamily::stalls, v.vantage, core::to_string(cause), n);
}

// The token counts the stream itself reported (usage): estimates from
// counted events are no usage.
void add_usage(MeasureSink& sink, const StreamRecord& r, std::string_view vantage) {
  if (r.load.input_tokens) sink.usage(vantage, TokenType::input, *r.load.input_tokens);
  if (r.metrics.token_source == core::TokenSource::usage) sink.usage(vantage, TokenType::output, r.metrics.tokens);
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
  const std::vector<core::PathTimes>& times = core::path_view_of(r).times;
  for (std::size_t i = 0; i < r.timeline.size() && i < times.size(); ++i) {
    if (r.timeline[i].kind != protocol::EventKind::content) continue;
    if (!times[i].delivered_ns) break;
    out.push_back(times[i].delivered_ns);
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
  for (const core::StallVerdict& v : d.stall_causes) {
    if (core::on_the_path(v.cause)) out.insert(core::to_string(v.cause));
  }
  if (out.empty()) out.insert(core::to_string(core::StallCause::none));
  return out;
}

// A server record's client-observed view: the lag and the path's verdict
// always; the client measures only when the final client is remote and this
// record's socket is the last hop (a local client's own record, or the
// gateway's downstream record, is that view already).
void add_delivery(MeasureSink& sink, const StreamRecord& r) {
  const core::PathView& path = core::path_view_of(r);
  const core::Delivery& del = *path.delivery;
  const std::string_view vantage = vantage_of(del);
  if (del.lag_last_ns) sink.observe(HistogramFamily::lag, vantage, seconds(*del.lag_last_ns));
  if (del.degraded_by_path) {
    for (std::string_view cause : path_causes(del)) sink.count(CounterFamily::path_degraded, vantage, cause, 1);
  }
  if (del.vantage == core::Vantage::acked && path.peer_stream_id.empty()) {
    add_view(sink, View{kVantageAcked, del.metrics, del.stall_causes, delivered_token_times(r)}, Side::client, true);
    add_usage(sink, r, kVantageAcked);
  }
}

// Invalid UTF-8 bytes become '?': Prometheus rejects label values that are
// not UTF-8, and OTLP strings must be UTF-8.
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

std::string_view to_string(TokenType t) { return t == TokenType::input ? "input" : "output"; }

void observe_record(const StreamRecord& r, MeasureSink& sink) {
  const std::string_view vantage = vantage_of(r.role);
  const Side side = r.role == core::Role::server ? Side::server : r.role == core::Role::client ? Side::client : Side::none;
  add_view(sink, View{vantage, r.metrics, core::path_view_of(r).stall_causes, own_token_times(r)}, side, successful(r));
  if (side == Side::client) add_usage(sink, r, vantage);
  sink.count(CounterFamily::tokens, vantage, {}, r.metrics.tokens);
  sink.count(CounterFamily::streams, vantage, core::to_string(r.end), 1);
  if (r.role == core::Role::server && core::path_view_of(r).delivery) add_delivery(sink, r);
}

RecordLabels labels_of(const StreamRecord& r, std::size_t max_bytes) {
  RecordLabels l;
  l.model = label_value(core::model_of(r), max_bytes);
  l.route = label_value(core::route_of(r.path), max_bytes);
  l.process = label_value(r.conn.comm, max_bytes);
  l.request_model = label_value(r.request_model, max_bytes);
  l.response_model = label_value(r.model, max_bytes);
  l.system_fingerprint = label_value(r.load.system_fingerprint, max_bytes);
  const core::Endpoint& server = r.role == core::Role::client ? r.conn.remote : r.conn.local;
  // A unix socket's path is no label: paths can be per process or per request, an unbounded set.
  const std::string port = r.conn.transport == core::Transport::unix_stream ? std::string("unix")
                           : server.port                                    ? std::to_string(server.port)
                                                                            : std::string();
  l.server_port = label_value(port, max_bytes);
  l.operation = genai_operation_of(r);
  l.provider = label_value(genai_provider_of(r), max_bytes);
  const std::string error = error_type_of(r);
  if (!error.empty()) l.error_type = label_value(error, max_bytes);
  return l;
}

std::string label_value(std::string_view in, std::size_t max_bytes) {
  std::string v = sanitize_utf8(in, max_bytes);
  return v.empty() ? std::string("unknown") : v;
}

bool successful(const StreamRecord& r) {
  return (r.status == 0 || (r.status >= 200 && r.status < 300)) && r.error_type.empty();
}

std::string error_type_of(const StreamRecord& r) {
  if (!r.error_type.empty()) return r.error_type;
  if (r.status >= 400) return std::to_string(r.status);
  if (r.grpc_status && *r.grpc_status != 0) return "grpc_" + std::to_string(*r.grpc_status);
  switch (r.end) {
    case core::StreamEnd::connection_closed:
    case core::StreamEnd::protocol_error:
    case core::StreamEnd::stream_reset:
    case core::StreamEnd::goaway:
    case core::StreamEnd::idle_timeout: return std::string(core::to_string(r.end));
    default: return {};
  }
}

std::string_view genai_operation_of(std::string_view route) {
  while (route.size() > 1 && route.back() == '/') route.remove_suffix(1);
  if (ends_with(route, "/chat/completions") || ends_with(route, "/messages") || ends_with(route, "/responses")) {
    return "chat";
  }
  if (ends_with(route, "/completions")) return "text_completion";
  return "unknown";
}

std::string_view genai_operation_of(const StreamRecord& r) {
  using protocol::Dialect;
  switch (r.dialect) {
    case Dialect::ollama: return ends_with(core::route_of(r.path), "/api/chat") ? "chat" : "text_completion";
    case Dialect::tgi:
    case Dialect::llamacpp:
    case Dialect::sglang:
    case Dialect::vllm:
    case Dialect::triton: return "text_completion";
    case Dialect::gemini: return "generate_content";
    case Dialect::anthropic:
    case Dialect::openai_responses: return "chat";
    case Dialect::openai_realtime: return "realtime";
    case Dialect::declared:
      if (r.declared && !r.declared->operation.empty()) return r.declared->operation;
      break;
    default: break;
  }
  return genai_operation_of(core::route_of(r.path));
}

std::string_view genai_provider_of(const StreamRecord& r) {
  using protocol::Dialect;
  switch (r.dialect) {
    case Dialect::openai:
    case Dialect::openai_responses:
    case Dialect::openai_realtime: return "openai";
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
