// The engine as infertapd runs it: fed every finished record on the pipeline
// thread, its alert and abuse records written as NDJSON lines, its state read
// by API threads and the metrics endpoint. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/types.h"
#include "degrade/engine.h"
#include "output/ndjson/records.h"

namespace infertap::degrade {

// A cohort's state as the Prometheus gauge shows it.
struct CohortGauge {
  CohortKey key;
  bool degraded = false;
};

class Monitor {
 public:
  using LineSink = std::function<void(std::string line)>;
  Monitor(DegradationConfig config, output::WallClock clock, std::string host, LineSink emit);

  void observe(const core::StreamRecord& record);
  void tick(core::TimestampNs now);
  // A changed configuration starts a new engine (cohorts, baselines and
  // alert history are dropped, degraded cohorts emit no recovery). Returns
  // whether it changed.
  bool reconfigure(const DegradationConfig& config);

  nlohmann::json alerts_response() const;
  std::vector<CohortGauge> gauges() const;
  std::size_t active_abuse() const;

 private:
  void flush();  // called with mu_ held

  mutable std::mutex mu_;
  std::unique_ptr<Engine> engine_;
  const output::WallClock clock_;
  const std::string host_;
  LineSink emit_;
};

}  // namespace infertap::degrade
