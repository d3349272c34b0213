#include "output/ndjson/records.h"

#include <ctime>

#include <nlohmann/json.hpp>

namespace infertap::output {
namespace {

using json = nlohmann::ordered_json;

std::int64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double ms(std::uint64_t ns) { return static_cast<double>(ns / 1000) / 1000.0; }  // µs precision

void put_ms(json& j, const char* key, const std::optional<std::uint64_t>& ns) {
  if (ns) {
    j[key] = ms(*ns);
  } else {
    j[key] = nullptr;
  }
}

// Workload identity: null rather than "" when unknown (not in a container / pod).
void put_text(json& j, const char* key, const std::string& text) {
  if (text.empty()) {
    j[key] = nullptr;
  } else {
    j[key] = text;
  }
}

void put_ns(json& j, const char* key, std::uint64_t ns) {
  if (ns) {
    j[key] = ns;
  } else {
    j[key] = nullptr;
  }
}

json or_null(std::uint64_t ns) { return ns ? json(ns) : json(nullptr); }

void put_ms_signed(json& j, const char* key, const std::optional<std::int64_t>& ns) {
  if (ns) {
    j[key] = static_cast<double>(*ns / 1000) / 1000.0;
  } else {
    j[key] = nullptr;
  }
}

// Each stall with the verdict its path gave it.
json stalls_json(const std::vector<core::Stall>& stalls, const std::vector<core::StallVerdict>& verdicts) {
  json out = json::array();
  for (std::size_t i = 0; i < stalls.size(); ++i) {
    const core::Stall& s = stalls[i];
    const core::StallVerdict& v = core::verdict_at(verdicts, i);
    out.push_back(json{{"after_event", s.after_event},
                       {"start_ns", s.start_ns},
                       {"gap_ms", ms(s.gap_ns)},
                       {"cause", core::to_string(v.cause)},
                       {"evidence", v.evidence}});
  }
  return out;
}

// Streaming rate, inter-token gaps and stalls: the same names at the top
// level (the record's vantage) and in `delivery` (the delivered times).
void put_rate_and_gaps(json& j, const core::StreamMetrics& m, const std::vector<core::StallVerdict>& verdicts) {
  j["tokens_per_s"] = m.tokens_per_s ? json(*m.tokens_per_s) : json(nullptr);
  put_ms(j, "itl_p50_ms", m.itl_p50_ns);
  put_ms(j, "itl_p95_ms", m.itl_p95_ns);
  put_ms(j, "itl_p99_ms", m.itl_p99_ns);
  put_ms(j, "itl_max_ms", m.itl_max_ns);
  put_ms(j, "longest_pause_ms", m.longest_pause_ns);
  j["stall_threshold_ms"] = ms(m.stall_threshold_ns);
  j["stalls"] = stalls_json(m.stalls, verdicts);
}

json tcp_json(const core::TcpContext& t) {
  json j;
  j["signals"] = t.signals;
  put_ms(j, "srtt_ms", t.srtt_us ? std::optional<std::uint64_t>(std::uint64_t{t.srtt_us} * 1000) : std::nullopt);
  put_ms(j, "srtt_max_ms", t.srtt_max_us ? std::optional<std::uint64_t>(std::uint64_t{t.srtt_max_us} * 1000) : std::nullopt);
  j["retransmits"] = t.retransmits;
  j["zero_window_episodes"] = t.zero_window_episodes;
  j["zero_window_ms"] = ms(t.zero_window_ns);
  j["send_blocked"] = t.send_blocked;
  j["send_blocked_ms"] = ms(t.send_blocked_ns);
  j["eagain"] = t.eagain;
  j["send_buffer_full"] = t.send_buffer_full;
  j["partial_sends"] = t.partial_sends;
  j["buf_limit"] = t.buf_limit;
  return j;
}

json delivery_json(const core::Delivery& d) {
  const core::StreamMetrics& m = d.metrics;
  json j;
  j["vantage"] = core::to_string(d.vantage);
  j["path"] = d.path;
  put_ms(j, "ttft_ms", m.ttft_ns);
  put_ms(j, "e2e_ms", m.e2e_ns);
  put_rate_and_gaps(j, m, d.stall_causes);
  put_ms(j, "ttft_added_ms", d.ttft_added_ns);
  put_ms_signed(j, "itl_p99_added_ms", d.itl_p99_added_ns);
  put_ms_signed(j, "longest_pause_added_ms", d.longest_pause_added_ns);
  j["max_burst"] = d.max_burst;
  if (d.ttft_cause == core::StallCause::none) {
    j["ttft_cause"] = nullptr;
  } else {
    j["ttft_cause"] = core::to_string(d.ttft_cause);
  }
  j["ttft_evidence"] = d.ttft_evidence;
  put_ms(j, "lag_p50_ms", d.lag_p50_ns);
  put_ms(j, "lag_p99_ms", d.lag_p99_ns);
  put_ms(j, "lag_max_ms", d.lag_max_ns);
  put_ms(j, "lag_last_ms", d.lag_last_ns);
  put_ms_signed(j, "lag_growth_ms", d.lag_growth_ns);
  j["reader_rate"] = d.reader_rate_ratio ? json(*d.reader_rate_ratio) : json(nullptr);
  j["lag_cause"] = d.lag_cause == core::StallCause::none ? json(nullptr) : json(core::to_string(d.lag_cause));
  j["lag_evidence"] = d.lag_evidence;
  j["degraded_by_path"] = d.degraded_by_path;
  j["degraded_reason"] = d.degraded_reason;
  return j;
}

json gateway_json(const core::GatewayLeg& g) {
  json j;
  j["leg"] = core::to_string(g.leg);
  j["peer_stream_id"] = g.peer_stream_id;
  j["upstream"] = g.upstream;
  j["downstream"] = g.downstream;
  j["events_matched"] = g.events_matched;
  put_ms(j, "delay_p50_ms", g.delay_p50_ns);
  put_ms(j, "delay_p99_ms", g.delay_p99_ns);
  put_ms(j, "delay_max_ms", g.delay_max_ns);
  j["max_events_per_send"] = g.max_events_per_send;
  return j;
}

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

double round3(double v) { return static_cast<double>(static_cast<long long>(v * 1000 + (v < 0 ? -0.5 : 0.5))) / 1000; }

json opt_rounded(const std::optional<double>& v) { return v ? json(round3(*v)) : json(nullptr); }

json pressure_json(const std::optional<core::Pressure>& p) {
  if (!p || !p->any()) return nullptr;
  return json{{"cpu_some", opt(p->cpu_some)},       {"cpu_full", opt(p->cpu_full)},
              {"memory_some", opt(p->memory_some)}, {"memory_full", opt(p->memory_full)},
              {"io_some", opt(p->io_some)},         {"io_full", opt(p->io_full)}};
}

// The load the stream ran under (docs/schema.md#load): counts and sizes only.
json load_json(const core::LoadContext& l) {
  json j;
  j["scope"] = l.scope.empty() ? json(nullptr) : json(l.scope);
  j["concurrency"] = opt(l.concurrency);
  j["concurrency_mean"] = opt_rounded(l.concurrency_mean);
  j["concurrency_max"] = opt(l.concurrency_max);
  j["waiting_at_request"] = opt(l.waiting_at_request);
  j["waiting"] = opt(l.waiting);
  j["client_concurrency"] = opt(l.client_concurrency);
  j["input_tokens"] = opt(l.input_tokens);
  j["request_bytes"] = opt(l.request_bytes);
  j["max_tokens"] = opt(l.max_tokens);
  j["include_usage"] = opt(l.include_usage);
  j["system_fingerprint"] = l.system_fingerprint.empty() ? json(nullptr) : json(l.system_fingerprint);
  j["server_version"] = l.server_version.empty() ? json(nullptr) : json(l.server_version);
  j["host_psi"] = pressure_json(l.host_pressure);
  j["cgroup_psi"] = pressure_json(l.cgroup_pressure);
  j["cpu_ms_per_token"] = opt_rounded(l.cpu_ms_per_token);
  return j;
}

}  // namespace

WallClock::WallClock() {
  // Take the sample with the tightest monotonic bracket: preemption between the
  // two clock reads would skew the offset.
  std::int64_t best_span = INT64_MAX;
  for (int i = 0; i < 5; ++i) {
    const std::int64_t m0 = now_ns(CLOCK_MONOTONIC);
    const std::int64_t r = now_ns(CLOCK_REALTIME);
    const std::int64_t m1 = now_ns(CLOCK_MONOTONIC);
    if (m1 - m0 < best_span) {
      best_span = m1 - m0;
      offset_ns_ = r - (m0 + (m1 - m0) / 2);
    }
  }
}

std::string WallClock::rfc3339(std::uint64_t mono_ns) const {
  const std::int64_t wall = static_cast<std::int64_t>(mono_ns) + offset_ns_;
  const std::time_t secs = static_cast<std::time_t>(wall / 1'000'000'000);
  const long nanos = static_cast<long>(wall % 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[48];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%09ldZ", nanos);
  return buf;
}

namespace {

// The record's `event_framing` (docs/schema.md): spelled here only.
std::string_view to_string(protocol::EventFraming f) {
  switch (f) {
    case protocol::EventFraming::sse: return "sse";
    case protocol::EventFraming::ndjson: return "ndjson";
    case protocol::EventFraming::grpc: return "grpc";
    case protocol::EventFraming::websocket: return "websocket";
  }
  return "sse";
}

// Who: the process, its workload, the connection's ends.
void put_identity(json& j, const core::StreamRecord& r, const RenderOptions& options) {
  j["host"] = options.host;
  j["stream_id"] = core::stream_id(r);
  j["role"] = core::path_view_of(r).gateway ? std::string_view("gateway") : core::to_string(r.role);
  j["vantage"] = core::to_string(core::vantage_of(r.role));
  j["pid"] = r.conn.pid;
  j["comm"] = r.conn.comm;
  j["fd"] = r.conn.fd;
  j["cgroup_id"] = r.conn.cgroup_id;
  j["cgroup"] = r.conn.cgroup_path;
  put_text(j, "container_id", r.conn.container_id);
  put_text(j, "pod_uid", r.conn.pod_uid);
  put_text(j, "k8s_namespace", r.conn.k8s_namespace);
  put_text(j, "k8s_pod", r.conn.k8s_pod);
  put_text(j, "k8s_container", r.conn.k8s_container);
  j["local"] = r.conn.local.to_string();
  j["remote"] = r.conn.remote.to_string();
  j["transport"] = core::to_string(r.conn.transport);
  j["peer_pid"] = r.conn.peer_pid ? json(r.conn.peer_pid) : json(nullptr);
  put_text(j, "peer_comm", r.conn.peer_comm);
  j["tls"] = r.conn.tls;
  j["tls_library"] = r.conn.tls_library.empty() ? json(nullptr) : json(r.conn.tls_library);
}

// A message-framed session's response (docs/schema.md#websocket): null on
// other records. Audio's duration is known when the session declared its
// format (bytes / rate / bytes per sample).
void put_messages(json& j, const core::StreamRecord& r) {
  j["protocol"] = protocol::to_string(r.protocol);
  if (!r.messages) {
    j["websocket"] = nullptr;
    return;
  }
  const protocol::MessageStats& m = *r.messages;
  json audio_ms = nullptr;
  if (m.audio_sample_rate && m.audio_bytes_per_sample && m.audio_bytes)
    audio_ms = static_cast<double>(m.audio_bytes) * 1000.0 / (double(m.audio_sample_rate) * m.audio_bytes_per_sample);
  j["websocket"] = json{{"frames", m.frames},
                        {"control_frames", m.control_frames},
                        {"other_messages", m.other_messages},
                        {"client_messages", m.client_messages},
                        {"compressed", m.compressed},
                        {"inflated_bytes", m.compressed ? json(m.inflated_bytes) : json(nullptr)},
                        {"close_code", m.close_code ? json(*m.close_code) : json(nullptr)},
                        {"audio_events", r.audio_events},
                        {"audio_bytes", m.audio_bytes},
                        {"audio_ms", audio_ms}};
}

// HTTP/2 (docs/schema.md#http2): null on HTTP/1 records but http_version.
void put_http2(json& j, const core::StreamRecord& r) {
  j["http_version"] = protocol::to_string(r.http_version);
  const bool h2 = r.http_version == protocol::HttpVersion::http2;
  j["h2_stream_id"] = h2 ? json(r.h2_stream_id) : json(nullptr);
  j["headers_unknown"] = r.headers_unknown;
  j["h2_data_frames"] = h2 ? json(r.h2_data_frames) : json(nullptr);
  j["grpc_status"] = r.grpc_status ? json(*r.grpc_status) : json(nullptr);
  if (!h2) {
    j["h2_flow"] = nullptr;
    return;
  }
  const protocol::Http2StreamStats& f = r.h2_flow;
  j["h2_flow"] = json{{"window_zero_episodes", f.window_zero_episodes},
                      {"window_zero_ms", ms(f.window_zero_ns)},
                      {"scope", f.window_scope == protocol::Http2StreamStats::Scope::none
                                    ? json(nullptr)
                                    : json(protocol::to_string(f.window_scope))}};
}

// What: the request and the response as the protocol and payloads told them.
void put_exchange(json& j, const core::StreamRecord& r) {
  j["method"] = r.method;
  j["path"] = r.path;
  j["model"] = r.model;
  j["status"] = r.status;
  j["content_type"] = r.content_type;
  j["framing"] = protocol::to_string(r.framing);
  j["content_encoding"] = protocol::to_string(r.content_encoding);
  j["decode_error"] = r.decode_error ? json(protocol::to_string(*r.decode_error)) : json(nullptr);
  j["event_framing"] = to_string(r.event_framing);
  j["dialect"] = protocol::to_string(r.dialect);
  j["declared_format"] = r.declared ? json(r.declared->name) : json(nullptr);
  j["response_id"] = r.response_id;
  j["finish_reason"] = r.finish_reason;
  j["error_type"] = r.error_type;
  j["end"] = core::to_string(r.end);
  j["joined_midstream"] = r.joined_midstream;
  put_http2(j, r);
  put_messages(j, r);
}

void put_times(json& j, const core::StreamRecord& r) {
  put_ns(j, "request_start_ns", r.request_start_ns);
  put_ns(j, "request_end_ns", r.request_end_ns);
  put_ns(j, "response_head_ns", r.response_head_ns);
  put_ns(j, "first_event_ns", r.first_event_ns);
  put_ns(j, "first_token_ns", r.first_token_ns);
  put_ns(j, "last_token_ns", r.last_token_ns);
  put_ns(j, "last_event_ns", r.last_event_ns);
  put_ns(j, "end_ns", r.end_ns);
  const std::uint64_t handshake = core::tls_handshake_ns(r);
  put_ms(j, "tls_handshake_ms", handshake ? std::optional<std::uint64_t>(handshake) : std::nullopt);
}

void put_metrics(json& j, const core::StreamMetrics& m, const std::vector<core::StallVerdict>& verdicts) {
  put_ms(j, "ttft_ms", m.ttft_ns);
  put_ms(j, "e2e_ms", m.e2e_ns);
  j["tokens"] = m.tokens;
  j["token_source"] = core::to_string(m.token_source);
  j["counts_lower_bound"] = m.counts_lower_bound;
  j["content_events"] = m.content_events;
  j["events"] = m.events;
  put_rate_and_gaps(j, m, verdicts);
  json causes = json::object();
  for (std::size_t i = 0; i < m.stalls.size(); ++i) {
    const std::string cause(core::to_string(core::verdict_at(verdicts, i).cause));
    causes[cause] = causes.value(cause, 0) + 1;
  }
  j["stall_causes"] = std::move(causes);
}

// Where the delay happened: the traced peer, the TCP context, the delivered
// and gateway views.
void put_path(json& j, const core::StreamRecord& r) {
  const core::PathView& path = core::path_view_of(r);
  j["peer_stream_id"] = path.peer_stream_id.empty() ? json(nullptr) : json(path.peer_stream_id);
  j["tcp"] = tcp_json(r.tcp);
  j["load"] = load_json(r.load);
  j["delivery"] = path.delivery ? delivery_json(*path.delivery) : json(nullptr);
  j["gateway"] = path.gateway ? gateway_json(*path.gateway) : json(nullptr);
}

void put_capture_quality(json& j, const core::StreamRecord& r) {
  j["truncated_events"] = r.truncated_events;
  j["bytes_not_captured"] = r.bytes_not_captured;
  j["bytes_lost"] = r.bytes_lost;
  j["parse_errors"] = r.parse_errors;
  j["body_bytes"] = r.body_bytes;
  j["timeline_truncated"] = r.tail.events > 0;
  j["timeline_events"] = r.timeline.size();
  j["itl_truncated"] = r.metrics.itl_truncated;
}

json timeline_json(const core::StreamRecord& r) {
  json timeline = json::array();
  std::uint32_t index = 0;
  const std::vector<core::PathTimes>& times = core::path_view_of(r).times;
  for (const core::TimelineEvent& e : r.timeline) {
    const core::PathTimes pt = index < times.size() ? times[index] : core::PathTimes{};
    timeline.push_back(json{{"i", index++},
                            {"ts_ns", e.ts_ns},
                            {"first_byte_ns", e.first_byte_ns},
                            {"offset", e.offset},
                            {"bytes", e.wire_bytes},
                            {"kind", protocol::to_string(e.kind)},
                            {"truncated", e.truncated},
                            {"syscall_us", static_cast<double>(e.syscall_ns) / 1000.0},
                            {"batch", e.events_in_syscall},
                            {"end_seq", e.end_seq},
                            {"acked_ns", or_null(e.acked_ns)},
                            {"arrived_ns", or_null(e.arrived_ns ? e.arrived_ns : pt.arrived_ns)},
                            {"peer_ns", or_null(pt.peer_ns)},
                            {"peer_arrived_ns", or_null(pt.peer_arrived_ns)},
                            {"upstream_ns", or_null(pt.upstream_ns)},
                            {"downstream_ns", or_null(pt.downstream_ns)},
                            {"delivered_ns", or_null(pt.delivered_ns)}});
  }
  return timeline;
}

}  // namespace

std::string render_stream(const core::StreamRecord& r, const WallClock& clock, const RenderOptions& options) {
  const std::uint64_t start_ns = r.request_start_ns ? r.request_start_ns : r.response_head_ns;
  json j;
  j["type"] = "stream";
  j["schema_version"] = kSchemaVersion;
  j["ts"] = clock.rfc3339(start_ns);
  j["end_ts"] = clock.rfc3339(r.end_ns);
  put_identity(j, r, options);
  put_exchange(j, r);
  put_times(j, r);
  put_metrics(j, r.metrics, core::path_view_of(r).stall_causes);
  put_path(j, r);
  put_capture_quality(j, r);
  if (options.timeline) j["timeline"] = timeline_json(r);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace infertap::output
