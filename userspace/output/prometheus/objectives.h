// Stream objectives for the fleet's Prometheus rules (docs/prometheus.md,
// "Objectives"): "a share `target` of the streams of these models and routes
// get their first token within ttft_seconds and stream at min_tokens_per_second
// or faster", and the numbers the alerting rules judge cohorts with. The agent
// exports them as infertap_objective{objective, setting} and counts each
// finished stream against every objective it matches
// (infertap_objective_streams_total), so no threshold is written in the rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace infertap::output {

struct Objective {
  std::string name;
  std::vector<std::string> models{"*"}, routes{"*"};  // fnmatch(3) globs on the model and route labels' values
  double ttft_seconds = 0;                            // required
  double min_tokens_per_second = 0;                   // required
  double target = 0.99;                               // share of streams that must meet both
  // Materiality of a breach: worse than the reference by the ratio AND by the
  // absolute floor (the objective's numbers, or the cohort's baseline).
  double objective_ratio = 1.0;
  double baseline_ratio = 1.5;
  double ttft_floor_seconds = 0.05;
  double rate_floor_tokens_per_second = 2;
  std::uint32_t min_streams = 20;  // a window with fewer streams is not judged
  // The delivery path: the lag at the last token, its floor, and the share of
  // streams the path may degrade.
  double delivery_lag_seconds = 0.5;
  double lag_floor_seconds = 0.1;
  double max_path_degraded_share = 0.05;
  bool operator==(const Objective&) const = default;
};

// The series of infertap_objective: setting name -> value, in export order;
// `order` is the objective's position in the configuration (the alerts judge
// a cohort against the first objective that matches it).
std::vector<std::pair<std::string_view, double>> settings_of(const Objective& objective, std::size_t order);

// Whether the objective covers a stream of this model and route (label values).
bool matches(const Objective& objective, std::string_view model, std::string_view route);

// A stream as an objective counts it: met, missed, or not counted (no TTFT
// or no rate, and no error).
enum class ObjectiveOutcome : std::uint8_t { met, missed, not_counted };
ObjectiveOutcome outcome_of(const Objective& objective, bool errored, std::optional<double> ttft_seconds,
                            std::optional<double> tokens_per_second);

}  // namespace infertap::output
