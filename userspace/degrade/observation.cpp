#include "degrade/observation.h"

#include "daemon/metrics.h"
#include "daemon/store.h"

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

std::string stall_cause_of(const core::Stall& stall) {
  if (stall.cause == core::StallCause::none) return "unclassified";
  return std::string(core::to_string(stall.cause));
}

std::optional<DeliveryMetrics> delivery_of(const core::StreamRecord& r) {
  if (!r.delivery) return std::nullopt;
  const core::StreamMetrics& m = r.delivery->metrics;
  DeliveryMetrics d;
  d.ttft_ns = m.ttft_ns;
  d.tokens_per_s = m.tokens_per_s;
  d.itl_p95_ns = m.itl_p95_ns;
  d.itl_p99_ns = m.itl_p99_ns;
  d.longest_pause_ns = m.longest_pause_ns;
  core::TimestampNs first = 0, last = 0;
  for (std::size_t i = 0; i < r.timeline.size() && i < r.path_times.size(); ++i) {
    const core::TimestampNs t = r.path_times[i].delivered_ns;
    if (r.timeline[i].kind != protocol::EventKind::content || !t) continue;
    if (!first) first = t;
    last = t;
  }
  d.decode_ns = last > first ? last - first : 0;
  for (const core::Stall& s : m.stalls) d.stall_causes[stall_cause_of(s)] += 1;
  // The first token's wait on the path counts as a stall of its cause.
  if (r.delivery->ttft_cause != core::StallCause::none) d.stall_causes[std::string(core::to_string(r.delivery->ttft_cause))] += 1;
  return d;
}

namespace {

// "10.0.0.7:51234" -> "10.0.0.7", "[::1]:8000" -> "::1".
std::string address_only(const core::Endpoint& e) {
  if (e.family == 0) return {};
  std::string s = e.to_string();
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    return close == std::string::npos ? s : s.substr(1, close - 1);
  }
  const auto colon = s.rfind(':');
  return colon == std::string::npos ? s : s.substr(0, colon);
}

}  // namespace

std::vector<Observation> observations_from(const core::StreamRecord& r, const std::optional<DeliveryMetrics>& delivery) {
  std::vector<Observation> out;
  if (r.metrics.tokens == 0 || r.first_token_ns == 0) return out;
  if (r.status != 0 && (r.status < 200 || r.status > 299)) return out;
  if (r.role != core::Role::server && r.role != core::Role::client) return out;
  // A local client whose server is traced: the server record's delivery view
  // is this observation already (counting both would weigh it twice).
  if (r.role == core::Role::client && !r.peer_stream_id.empty()) return out;

  Observation o;
  o.end_ns = r.end_ns ? r.end_ns : r.last_event_ns;
  o.model = !r.model.empty() ? r.model : r.request_model;
  o.route = daemon::route_of(r.path);
  o.process = r.conn.comm;
  o.container = daemon::container_key(r.conn.cgroup_path);
  o.vantage = r.role == core::Role::server ? Vantage::server_emit : Vantage::client_observed;
  o.output_tokens = r.metrics.tokens;
  o.ttft_ns = r.metrics.ttft_ns;
  o.tokens_per_s = r.metrics.tokens_per_s;
  o.itl_p95_ns = r.metrics.itl_p95_ns;
  o.itl_p99_ns = r.metrics.itl_p99_ns;
  o.longest_pause_ns = r.metrics.longest_pause_ns;
  o.decode_ns = r.last_token_ns > r.first_token_ns ? r.last_token_ns - r.first_token_ns : 0;
  if (r.role == core::Role::server) o.client_addr = address_only(r.conn.remote);
  for (const core::Stall& s : r.metrics.stalls) o.stall_causes[stall_cause_of(s)] += 1;
  out.push_back(o);

  if (delivery && r.role == core::Role::server) {
    Observation d = o;
    d.vantage = Vantage::client_observed;
    d.client_addr.clear();
    d.ttft_ns = delivery->ttft_ns;
    d.tokens_per_s = delivery->tokens_per_s;
    d.itl_p95_ns = delivery->itl_p95_ns;
    d.itl_p99_ns = delivery->itl_p99_ns;
    d.longest_pause_ns = delivery->longest_pause_ns;
    d.decode_ns = delivery->decode_ns;
    d.stall_causes = delivery->stall_causes;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace infertap::degrade
