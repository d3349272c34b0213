#include "output/otlp/spans.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>

#include "base/clock.h"
#include "core/labels.h"
#include "output/stream_measures.h"

namespace infertap::output::otlp {
namespace {

using core::StreamRecord;

using base::seconds;

// splitmix64's finaliser: spreads FNV's weak low bits over the whole word.
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a(std::uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

template <std::size_t N>
void put_word(std::array<std::uint8_t, N>& out, std::size_t at, std::uint64_t w) {
  for (std::size_t i = 0; i < 8 && at + i < N; ++i) out[at + i] = static_cast<std::uint8_t>(w >> (56 - 8 * i));
}

// Attribute text: UTF-8-safe and cut; nothing for an empty value.
class Writer {
 public:
  Writer(Attributes& a, std::size_t max_bytes) : a_(a), max_bytes_(max_bytes) {}
  void text(std::string key, std::string_view v) {
    if (!v.empty()) a_.add(std::move(key), label_value(v, max_bytes_));
  }
  void secs(std::string key, const std::optional<std::uint64_t>& ns) {
    if (ns) a_.add_double(std::move(key), seconds(*ns));
  }
  void signed_secs(std::string key, const std::optional<std::int64_t>& ns) {
    if (ns) a_.add_double(std::move(key), seconds(*ns));
  }
  void cause(std::string key, core::StallCause c) {
    if (c != core::StallCause::none) a_.add(std::move(key), std::string(core::to_string(c)));
  }
  Attributes& a_;
  std::size_t max_bytes_;
};

void add_gen_ai(Writer& w, const StreamRecord& r) {
  Attributes& a = w.a_;
  a.add("gen_ai.operation.name", std::string(genai_operation_of(r)));
  a.add("gen_ai.provider.name", label_value(genai_provider_of(r), w.max_bytes_));
  w.text("gen_ai.request.model", r.request_model);
  w.text("gen_ai.response.model", r.model);
  w.text("gen_ai.response.id", r.response_id);
  if (r.request_stream) a.add_bool("gen_ai.request.stream", *r.request_stream);
  if (!r.finish_reason.empty()) a.add_strings("gen_ai.response.finish_reasons", {label_value(r.finish_reason, w.max_bytes_)});
  w.secs("gen_ai.response.time_to_first_chunk", r.metrics.ttft_ns);
  if (r.metrics.token_source == core::TokenSource::usage) a.add_int("gen_ai.usage.output_tokens", static_cast<std::int64_t>(r.metrics.tokens));
  if (r.load.input_tokens) a.add_int("gen_ai.usage.input_tokens", static_cast<std::int64_t>(*r.load.input_tokens));
}

void add_http(Writer& w, const StreamRecord& r) {
  Attributes& a = w.a_;
  const core::Endpoint& server = r.role == core::Role::client ? r.conn.remote : r.conn.local;
  if (r.conn.transport == core::Transport::tcp && server.port) a.add_int("server.port", server.port);
  a.add("network.transport", std::string(core::to_string(r.conn.transport)));
  w.text("http.request.method", r.method);
  w.text("http.route", core::route_of(r.path));  // no query string, id-like segments {id}
  if (r.status) a.add_int("http.response.status_code", r.status);
  w.text("error.type", error_type_of(r));
}

void add_stream(Writer& w, const StreamRecord& r) {
  Attributes& a = w.a_;
  const core::StreamMetrics& m = r.metrics;
  a.add("infertap.stream.id", core::stream_id(r));
  a.add("infertap.vantage", r.role == core::Role::server ? "server" : r.role == core::Role::client ? "client" : "unknown");
  a.add("infertap.stream.end", std::string(core::to_string(r.end)));
  a.add_int("infertap.stream.tokens", static_cast<std::int64_t>(m.tokens));
  a.add("infertap.stream.token_source", std::string(core::to_string(m.token_source)));
  a.add_int("infertap.stream.content_events", m.content_events);
  w.secs("infertap.stream.duration", m.e2e_ns);
  if (m.tokens_per_s) a.add_double("infertap.stream.token_rate", *m.tokens_per_s);
  w.secs("infertap.stream.itl_p50", m.itl_p50_ns);
  w.secs("infertap.stream.itl_p95", m.itl_p95_ns);
  w.secs("infertap.stream.itl_p99", m.itl_p99_ns);
  w.secs("infertap.stream.longest_pause", m.longest_pause_ns);
  a.add_int("infertap.stream.stalls", static_cast<std::int64_t>(m.stalls.size()));
  std::map<std::string_view, std::int64_t> causes;
  const core::PathView& path = core::path_view_of(r);
  for (std::size_t i = 0; i < m.stalls.size(); ++i) causes[core::to_string(core::verdict_at(path.stall_causes, i).cause)] += 1;
  for (const auto& [cause, n] : causes) a.add_int("infertap.stall_causes." + std::string(cause), n);
  w.text("infertap.peer_stream_id", path.peer_stream_id);
}

void add_delivery(Writer& w, const core::Delivery& d) {
  Attributes& a = w.a_;
  a.add("infertap.delivery.vantage", std::string(core::to_string(d.vantage)));
  w.text("infertap.delivery.path", d.path);
  w.secs("infertap.delivery.ttft", d.metrics.ttft_ns);
  w.secs("infertap.delivery.ttft_added", d.ttft_added_ns);
  w.cause("infertap.delivery.ttft_cause", d.ttft_cause);
  w.secs("infertap.delivery.lag_last", d.lag_last_ns);
  w.signed_secs("infertap.delivery.lag_growth", d.lag_growth_ns);
  w.cause("infertap.delivery.lag_cause", d.lag_cause);
  a.add_int("infertap.delivery.max_burst", d.max_burst);
  a.add_int("infertap.delivery.stalls", static_cast<std::int64_t>(d.metrics.stalls.size()));
  a.add_bool("infertap.delivery.degraded_by_path", d.degraded_by_path);
  w.text("infertap.delivery.degraded_reason", d.degraded_reason);
}

void add_gateway(Writer& w, const core::GatewayLeg& g) {
  w.a_.add("infertap.gateway.leg", std::string(core::to_string(g.leg)));
  w.secs("infertap.gateway.delay_p99", g.delay_p99_ns);
  w.a_.add_int("infertap.gateway.max_events_per_send", g.max_events_per_send);
  w.a_.add_bool("infertap.gateway.buffering", g.buffering);
}

void add_workload(Writer& w, const core::ConnIdentity& c) {
  w.a_.add_int("process.pid", c.pid);
  w.text("process.executable.name", c.comm);
  w.text("container.id", c.container_id);
  w.text("k8s.pod.uid", c.pod_uid);
  w.text("k8s.namespace.name", c.k8s_namespace);
  w.text("k8s.pod.name", c.k8s_pod);
  w.text("k8s.container.name", c.k8s_container);
}

std::uint64_t wall(const WallClock& clock, std::uint64_t mono_ns) {
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(mono_ns) + clock.offset_ns());
}

// Stalls (always: few, and what a reader of the trace looks for), then the
// timeline's events when asked, up to the bound.
void add_events(Span& span, const StreamRecord& r, const WallClock& clock, const SpanOptions& options) {
  const auto room = [&] {
    if (span.events.size() < options.max_events) return true;
    ++span.dropped_events;
    return false;
  };
  const core::PathView& path = core::path_view_of(r);
  for (std::size_t k = 0; k < r.metrics.stalls.size(); ++k) {
    if (!room()) continue;
    const core::Stall& s = r.metrics.stalls[k];
    SpanEvent e{wall(clock, s.start_ns), "infertap.stall", {}};
    e.attributes.add("infertap.stall.cause", std::string(core::to_string(core::verdict_at(path.stall_causes, k).cause)))
        .add_double("infertap.stall.gap", seconds(s.gap_ns))
        .add_int("infertap.stall.after_event", s.after_event);
    span.events.push_back(std::move(e));
  }
  if (!options.timeline_events) return;
  for (std::size_t i = 0; i < r.timeline.size(); ++i) {
    if (!room()) continue;
    const core::TimelineEvent& t = r.timeline[i];
    SpanEvent e{wall(clock, t.ts_ns), std::string(protocol::to_string(t.kind)), {}};
    e.attributes.add_int("infertap.event.index", static_cast<std::int64_t>(i)).add_int("infertap.event.wire_bytes", t.wire_bytes);
    if (t.truncated) e.attributes.add_bool("infertap.event.truncated", true);
    if (i < path.times.size() && path.times[i].delivered_ns >= t.ts_ns && path.times[i].delivered_ns) {
      e.attributes.add_double("infertap.event.delivery_lag", seconds(path.times[i].delivered_ns - t.ts_ns));
    }
    span.events.push_back(std::move(e));
  }
  span.dropped_events += r.tail.events;  // events past the record's own timeline bound
}

// The span that sent this one its request: the client end of a server's
// connection, the downstream leg of a gateway's upstream leg; "" for none.
std::string parent_stream_of(const StreamRecord& r) {
  const core::PathView& path = core::path_view_of(r);
  if (r.role == core::Role::server) return path.peer_stream_id;
  if (r.role == core::Role::client && path.gateway) return path.gateway->peer_stream_id;
  return {};
}

}  // namespace

SpanIds::SpanIds() {
  std::random_device rd;
  for (std::size_t i = 0; i < salt_.size(); i += 4) {
    const std::uint32_t v = rd();
    for (std::size_t k = 0; k < 4; ++k) salt_[i + k] = static_cast<std::uint8_t>(v >> (8 * k));
  }
}

std::uint64_t SpanIds::hash(std::string_view domain, std::string_view key, std::uint64_t seed) const {
  std::uint64_t h = fnv1a(0xcbf29ce484222325ull ^ seed, std::string_view(reinterpret_cast<const char*>(salt_.data()), salt_.size()));
  h = fnv1a(h, domain);
  h = fnv1a(h, "\x1f");
  return mix(fnv1a(h, key));
}

TraceId SpanIds::trace_of(std::string_view path_key) const {
  TraceId id{};
  put_word(id, 0, hash("trace", path_key, 1));
  put_word(id, 8, hash("trace", path_key, 2));
  if (id[15] == 0 && id[0] == 0) id[15] = 1;  // an all-zero id is invalid; vanishingly rare, still never sent
  return id;
}

SpanId SpanIds::span_of(std::string_view stream_id) const {
  SpanId id{};
  put_word(id, 0, hash("span", stream_id, 3));
  if (id[7] == 0 && id[0] == 0) id[7] = 1;
  return id;
}

Span span_of(const StreamRecord& r, const WallClock& clock, const SpanIds& ids, const SpanOptions& options) {
  Span span;
  const std::string own = core::stream_id(r);
  const core::PathView& path = core::path_view_of(r);
  span.trace_id = ids.trace_of(path.root.empty() ? own : path.root);
  span.span_id = ids.span_of(own);
  if (const std::string parent = parent_stream_of(r); !parent.empty()) span.parent_span_id = ids.span_of(parent);
  const std::string_view operation = genai_operation_of(r);
  const std::string& model = r.request_model.empty() ? r.model : r.request_model;
  span.name = model.empty() ? std::string(operation) : std::string(operation) + " " + label_value(model, options.max_text_bytes);
  span.kind = r.role == core::Role::server ? Span::Kind::server : r.role == core::Role::client ? Span::Kind::client
                                                                                                : Span::Kind::internal;
  const core::TimestampNs start = r.request_start_ns ? r.request_start_ns : r.response_head_ns ? r.response_head_ns : r.first_event_ns;
  const core::TimestampNs end = std::max({r.end_ns, r.last_event_ns, start});
  span.start_ns = wall(clock, start);
  span.end_ns = wall(clock, end);
  Writer w(span.attributes, options.max_text_bytes);
  add_gen_ai(w, r);
  add_http(w, r);
  add_stream(w, r);
  if (path.delivery) add_delivery(w, *path.delivery);
  if (path.gateway) add_gateway(w, *path.gateway);
  add_workload(w, r.conn);
  add_events(span, r, clock, options);
  if (const std::string error = error_type_of(r); !error.empty()) {
    span.status = Span::Status::error;
    span.status_message = label_value(error, options.max_text_bytes);
  }
  return span;
}

}  // namespace infertap::output::otlp
