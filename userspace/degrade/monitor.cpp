#include "degrade/monitor.h"

#include "degrade/render.h"

namespace infertap::degrade {

Monitor::Monitor(DegradationConfig config, output::WallClock clock, std::string host, LineSink emit)
    : engine_(std::make_unique<Engine>(std::move(config))), clock_(clock), host_(std::move(host)), emit_(std::move(emit)) {}

void Monitor::observe(const core::StreamRecord& record) {
  const std::vector<Observation> observations = observations_from(record, delivery_of(record));
  std::lock_guard lock(mu_);
  for (const Observation& o : observations) engine_->observe(o);
  flush();
}

void Monitor::tick(core::TimestampNs now) {
  std::lock_guard lock(mu_);
  engine_->tick(now);
  flush();
}

bool Monitor::reconfigure(const DegradationConfig& config) {
  std::lock_guard lock(mu_);
  if (engine_->config() == config) return false;
  engine_ = std::make_unique<Engine>(config);
  return true;
}

void Monitor::flush() {
  for (const Alert& a : engine_->take_alerts()) emit_(render_alert(a, clock_, host_));
  for (const AbuseSignal& s : engine_->take_abuse()) emit_(render_abuse(s, clock_, host_));
  for (const BaselineReview& r : engine_->take_reviews()) emit_(render_review(r, clock_, host_));
}

nlohmann::json Monitor::alerts_response() const {
  std::lock_guard lock(mu_);
  return degrade::alerts_response(*engine_, clock_, host_);
}

std::vector<CohortGauge> Monitor::gauges() const {
  std::lock_guard lock(mu_);
  std::vector<CohortGauge> out;
  for (const CohortStatus& c : engine_->cohorts()) out.push_back({c.key, c.state == CohortState::degraded});
  return out;
}

std::size_t Monitor::active_abuse() const {
  std::lock_guard lock(mu_);
  return engine_->active_abuse().size();
}

}  // namespace infertap::degrade
