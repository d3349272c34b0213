#include "degrade/render.h"

#include "output/format.h"

namespace infertap::degrade {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

double round3(double v) { return static_cast<double>(static_cast<long long>(v * 1000 + (v < 0 ? -0.5 : 0.5))) / 1000; }

ojson cohort_json(const CohortKey& k) {
  return ojson{{"model", k.model},
               {"route", k.route},
               {"process", k.process},
               {"container", k.container},
               {"vantage", to_string(k.vantage)},
               {"length_class", k.length_class},
               {"concurrency_band", k.concurrency_band.empty() ? ojson(nullptr) : ojson(k.concurrency_band)},
               {"input_band", k.input_band.empty() ? ojson(nullptr) : ojson(k.input_band)}};
}

ojson identity_json(const ServingIdentity& id) {
  const auto text = [](const std::string& s) { return s.empty() ? ojson(nullptr) : ojson(s); };
  return ojson{{"model", text(id.model)},
               {"system_fingerprint", text(id.system_fingerprint)},
               {"server_version", text(id.server_version)}};
}

ojson per_metric(const std::array<std::optional<double>, kMetrics>& values) {
  ojson j = ojson::object();
  for (Metric m : kAllMetrics) {
    const auto& v = values[static_cast<std::size_t>(m)];
    j[std::string(metric_name(m))] = v ? ojson(round3(*v)) : ojson(nullptr);
  }
  return j;
}

ojson lead_json(const Lead& l) {
  ojson numbers = ojson::object();
  for (const auto& [name, v] : l.numbers) numbers[name] = v;
  return ojson{{"lead", l.lead}, {"says", l.says}, {"numbers", std::move(numbers)}};
}

template <class T>
ojson opt(const std::optional<T>& v) {
  return v ? ojson(*v) : ojson(nullptr);
}

ojson evidence_json(const Evidence& e) {
  return ojson{{"metric", metric_name(e.metric)},
               {"phase", phase_of(e.metric)},
               {"reference", e.reference.empty() ? ojson(nullptr) : ojson(e.reference)},
               {"observed", round3(e.observed)},
               {"tail", round3(e.worst)},
               {"objective", output::or_null<ojson>(e.objective)},
               {"baseline", e.baseline ? ojson(round3(*e.baseline)) : ojson(nullptr)},
               {"streams", e.streams},
               {"affected", e.affected},
               {"affected_share", round3(e.affected_share)}};
}

// The fields every alert and abuse line starts with.
ojson record_head(const char* type, core::TimestampNs ts_ns, const output::WallClock& clock, const std::string& host,
                  const char* id_key, std::uint64_t id, const char* state) {
  ojson j;
  j["type"] = type;
  j["schema_version"] = output::kSchemaVersion;
  j["ts"] = clock.rfc3339(ts_ns);
  j["ts_ns"] = ts_ns;
  j["host"] = host;
  j[id_key] = id;
  j["state"] = state;
  return j;
}

}  // namespace

ojson alert_json(const Alert& a, const output::WallClock& clock, const std::string& host) {
  ojson j = record_head("alert", a.ts_ns, clock, host, "alert_id", a.id, a.degraded ? "degraded" : "recovered");
  j["reason"] = a.reason;
  j["cohort"] = cohort_json(a.cohort);
  j["objective"] = a.objective.empty() ? ojson(nullptr) : ojson(a.objective);
  j["since"] = clock.rfc3339(a.since_ns);
  j["since_ns"] = a.since_ns;
  if (!a.degraded) j["degraded_s"] = round3(static_cast<double>(a.ts_ns - a.since_ns) / 1e9);
  j["window_s"] = a.window_s;
  j["windows"] = a.windows;
  j["streams"] = a.streams;
  j["affected_share"] = round3(a.affected_share);
  j["layer"] = to_string(a.layer);
  j["dominant_stall_cause"] = a.dominant_stall_cause.empty() ? ojson(nullptr) : ojson(a.dominant_stall_cause);
  ojson causes = ojson::object();
  for (const auto& [cause, n] : a.stall_causes) causes[cause] = n;
  j["stall_causes"] = std::move(causes);
  ojson evidence = ojson::array();
  for (const Evidence& e : a.evidence) evidence.push_back(evidence_json(e));
  j["evidence"] = std::move(evidence);
  ojson leads = ojson::array();
  for (const Lead& l : a.leads) leads.push_back(lead_json(l));
  j["leads"] = std::move(leads);
  return j;
}

ojson review_json(const BaselineReview& r, const output::WallClock& clock, const std::string& host) {
  ojson j = record_head("baseline_review", r.ts_ns, clock, host, "review_id", r.id, r.completed ? "completed" : "started");
  j["cohort"] = cohort_json(r.cohort);
  j["changed"] = r.changed;
  j["from"] = identity_json(r.from);
  j["to"] = identity_json(r.to);
  j["since"] = clock.rfc3339(r.since_ns);
  j["since_ns"] = r.since_ns;
  j["window_s"] = r.window_s;
  j["windows"] = r.windows;
  j["prior_baseline"] = per_metric(r.prior);
  if (r.completed) {
    j["baseline"] = per_metric(r.baseline);
    ojson change = ojson::object();
    for (Metric m : kAllMetrics) {
      const auto& a = r.prior[static_cast<std::size_t>(m)];
      const auto& b = r.baseline[static_cast<std::size_t>(m)];
      change[std::string(metric_name(m))] = a && b && *a > 0 ? ojson(round3(*b / *a)) : ojson(nullptr);
    }
    j["change"] = std::move(change);
  } else {
    j["baseline"] = nullptr;
    j["change"] = nullptr;
  }
  return j;
}

std::string render_review(const BaselineReview& r, const output::WallClock& clock, const std::string& host) {
  return output::dump(review_json(r, clock, host));
}

ojson abuse_json(const AbuseSignal& s, const output::WallClock& clock, const std::string& host) {
  ojson j = record_head("abuse", s.ts_ns, clock, host, "abuse_id", s.id, s.active ? "active" : "cleared");
  j["process"] = s.process;
  j["client"] = s.client;
  j["since"] = clock.rfc3339(s.since_ns);
  j["since_ns"] = s.since_ns;
  j["window_s"] = s.window_s;
  j["windows"] = s.windows;
  j["decode_share"] = round3(s.decode_share);
  j["decode_s"] = round3(s.decode_s);
  j["process_decode_s"] = round3(s.process_decode_s);
  j["tokens"] = s.tokens;
  j["process_tokens"] = s.process_tokens;
  j["streams"] = s.streams;
  j["clients"] = s.clients;
  j["input_tokens_per_stream"] = opt(s.input_tokens_per_stream);
  j["request_bytes_per_stream"] = opt(s.request_bytes_per_stream);
  j["output_tokens_per_stream"] = round3(s.output_tokens_per_stream);
  j["concurrency_share"] = opt(s.concurrency_share);
  j["peak_client_concurrency"] = opt(s.peak_client_concurrency);
  return j;
}

std::string render_alert(const Alert& a, const output::WallClock& clock, const std::string& host) {
  return output::dump(alert_json(a, clock, host));
}

std::string render_abuse(const AbuseSignal& s, const output::WallClock& clock, const std::string& host) {
  return output::dump(abuse_json(s, clock, host));
}

json alerts_response(const Engine& engine, const output::WallClock& clock, const std::string& host) {
  json out;
  out["enabled"] = engine.config().enabled;
  out["window_s"] = engine.config().window_s;
  json active = json::array(), recent = json::array(), abuse_active = json::array(), abuse_recent = json::array();
  for (const Alert& a : engine.active_alerts()) active.push_back(json(alert_json(a, clock, host)));
  for (auto it = engine.recent_alerts().rbegin(); it != engine.recent_alerts().rend(); ++it) {
    recent.push_back(json(alert_json(*it, clock, host)));
  }
  for (const AbuseSignal& s : engine.active_abuse()) abuse_active.push_back(json(abuse_json(s, clock, host)));
  for (auto it = engine.recent_abuse().rbegin(); it != engine.recent_abuse().rend(); ++it) {
    abuse_recent.push_back(json(abuse_json(*it, clock, host)));
  }
  json cohorts = json::array();
  for (const CohortStatus& c : engine.cohorts()) {
    json baseline = json::object();
    for (Metric m : kAllMetrics) {
      const auto& b = c.baseline[static_cast<std::size_t>(m)];
      if (b) baseline[std::string(metric_name(m))] = round3(*b);
    }
    cohorts.push_back(json{{"cohort", json(cohort_json(c.key))},
                           {"state", to_string(c.state)},
                           {"last_window_streams", c.last_streams},
                           {"baseline", std::move(baseline)},
                           {"identity", json(identity_json(c.identity))}});
  }
  json reviews = json::array();
  for (auto it = engine.recent_reviews().rbegin(); it != engine.recent_reviews().rend(); ++it) {
    reviews.push_back(json(review_json(*it, clock, host)));
  }
  out["reviews_recent"] = std::move(reviews);
  out["active"] = std::move(active);
  out["recent"] = std::move(recent);
  out["abuse_active"] = std::move(abuse_active);
  out["abuse_recent"] = std::move(abuse_recent);
  out["cohorts"] = std::move(cohorts);
  json counters = json::object();
  engine.counters().for_each([&](const base::Counter& c) { counters[std::string(c.name)] = c.value; });
  out["counters"] = std::move(counters);
  return out;
}

}  // namespace infertap::degrade
