#include "degrade/observation.h"

#include "core/labels.h"

namespace infertap::degrade {

std::string_view to_string(Vantage v) {
  switch (v) {
    case Vantage::server_emit: return "server_emit";
    case Vantage::client_observed: return "client_observed";
  }
  return "unknown";
}

std::optional<Vantage> parse_vantage(std::string_view s) {
  if (s == "server_emit") return Vantage::server_emit;
  if (s == "client_observed") return Vantage::client_observed;
  return std::nullopt;
}

// The record's own name for it (stall_causes, Prometheus' cause label): "none"
// for a stall nothing on the path decided.
std::string stall_cause_of(const core::StallVerdict& verdict) { return std::string(core::to_string(verdict.cause)); }

namespace {

// The judged numbers of a record's metrics, its stalls counted by the
// verdicts the path gave them; decode_ns is the caller's.
StreamTiming timing_of(const core::StreamMetrics& m, const std::vector<core::StallVerdict>& verdicts) {
  StreamTiming t;
  t.ttft_ns = m.ttft_ns;
  t.tokens_per_s = m.tokens_per_s;
  t.itl_p95_ns = m.itl_p95_ns;
  t.itl_p99_ns = m.itl_p99_ns;
  t.longest_pause_ns = m.longest_pause_ns;
  for (std::size_t i = 0; i < m.stalls.size(); ++i) t.stall_causes[stall_cause_of(core::verdict_at(verdicts, i))] += 1;
  return t;
}

}  // namespace

LoadNumbers load_of(const core::LoadContext& l) {
  LoadNumbers n;
  if (l.concurrency_mean) {
    n.concurrency = *l.concurrency_mean;
  } else if (l.concurrency) {
    n.concurrency = *l.concurrency;
  }
  if (l.waiting_at_request) n.waiting = *l.waiting_at_request;
  if (l.input_tokens) n.input_tokens = static_cast<double>(*l.input_tokens);
  if (l.request_bytes) n.request_bytes = static_cast<double>(*l.request_bytes);
  if (l.client_concurrency) n.client_concurrency = *l.client_concurrency;
  if (l.client_concurrency && l.concurrency && *l.concurrency > 0)
    n.client_share = static_cast<double>(*l.client_concurrency) / *l.concurrency;
  const auto level = [](const std::optional<core::Pressure>& p, auto field) -> std::optional<double> {
    return p ? (*p).*field : std::nullopt;
  };
  n.cpu_pressure = level(l.cgroup_pressure, &core::Pressure::cpu_some);
  if (!n.cpu_pressure) n.cpu_pressure = level(l.host_pressure, &core::Pressure::cpu_some);
  n.memory_pressure = level(l.cgroup_pressure, &core::Pressure::memory_some);
  if (!n.memory_pressure) n.memory_pressure = level(l.host_pressure, &core::Pressure::memory_some);
  n.cpu_ms_per_token = l.cpu_ms_per_token;
  return n;
}

std::optional<DeliveryMetrics> delivery_of(const core::StreamRecord& r) {
  const core::PathView& path = core::path_view_of(r);
  if (!path.delivery) return std::nullopt;
  const core::Delivery& delivery = *path.delivery;
  DeliveryMetrics d = timing_of(delivery.metrics, delivery.stall_causes);
  core::TimestampNs first = 0, last = 0;
  for (std::size_t i = 0; i < r.timeline.size() && i < path.times.size(); ++i) {
    const core::TimestampNs t = path.times[i].delivered_ns;
    if (r.timeline[i].kind != protocol::EventKind::content || !t) continue;
    if (!first) first = t;
    last = t;
  }
  d.decode_ns = last > first ? last - first : 0;
  d.delivery_lag_ns = delivery.lag_last_ns;
  // The first token's wait on the path counts as a stall of its cause.
  if (delivery.ttft_cause != core::StallCause::none) d.stall_causes[std::string(core::to_string(delivery.ttft_cause))] += 1;
  return d;
}

std::vector<Observation> observations_from(const core::StreamRecord& r, const std::optional<DeliveryMetrics>& delivery) {
  std::vector<Observation> out;
  if (r.metrics.tokens == 0 || r.first_token_ns == 0) return out;
  if (r.status != 0 && (r.status < 200 || r.status > 299)) return out;
  if (r.role != core::Role::server && r.role != core::Role::client) return out;
  // A local client whose server is traced: the server record's delivery view
  // is this observation already (counting both would weigh it twice).
  if (r.role == core::Role::client && !core::path_view_of(r).peer_stream_id.empty()) return out;

  Observation o;
  o.end_ns = r.end_ns ? r.end_ns : r.last_event_ns;
  // The model asked for groups the traffic; the one that answered is the
  // identity a baseline review follows.
  o.model = !r.request_model.empty() ? r.request_model : core::model_of(r);
  o.identity.model = r.model;
  o.identity.system_fingerprint = r.load.system_fingerprint;
  o.identity.server_version = r.load.server_version;
  o.load = load_of(r.load);
  o.route = core::route_of(r.path);
  o.process = r.conn.comm;
  o.container = core::container_key(r.conn.cgroup_path);
  o.vantage = r.role == core::Role::server ? Vantage::server_emit : Vantage::client_observed;
  o.output_tokens = r.metrics.tokens;
  static_cast<StreamTiming&>(o) = timing_of(r.metrics, core::path_view_of(r).stall_causes);
  o.decode_ns = r.last_token_ns > r.first_token_ns ? r.last_token_ns - r.first_token_ns : 0;
  if (r.role == core::Role::server) o.client_addr = core::address_of(r.conn.remote);
  out.push_back(o);

  if (delivery && r.role == core::Role::server) {
    Observation d = o;
    d.vantage = Vantage::client_observed;
    d.client_addr.clear();
    static_cast<StreamTiming&>(d) = *delivery;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace infertap::degrade
