#include "output/prometheus/objectives.h"

#include <fnmatch.h>

#include <algorithm>

namespace infertap::output {
namespace {

bool any_glob(const std::vector<std::string>& globs, std::string_view value) {
  const std::string v(value);
  return std::any_of(globs.begin(), globs.end(),
                     [&](const std::string& g) { return fnmatch(g.c_str(), v.c_str(), 0) == 0; });
}

}  // namespace

std::vector<std::pair<std::string_view, double>> settings_of(const Objective& o, std::size_t order) {
  return {{"ttft_seconds", o.ttft_seconds},
          {"min_tokens_per_second", o.min_tokens_per_second},
          {"target", o.target},
          {"objective_ratio", o.objective_ratio},
          {"baseline_ratio", o.baseline_ratio},
          {"ttft_floor_seconds", o.ttft_floor_seconds},
          {"rate_floor_tokens_per_second", o.rate_floor_tokens_per_second},
          {"min_streams", static_cast<double>(o.min_streams)},
          {"delivery_lag_seconds", o.delivery_lag_seconds},
          {"lag_floor_seconds", o.lag_floor_seconds},
          {"max_path_degraded_share", o.max_path_degraded_share},
          {"order", static_cast<double>(order)}};
}

bool matches(const Objective& o, std::string_view model, std::string_view route) {
  return any_glob(o.models, model) && any_glob(o.routes, route);
}

ObjectiveOutcome outcome_of(const Objective& o, bool errored, std::optional<double> ttft_seconds,
                            std::optional<double> tokens_per_second) {
  if (errored) return ObjectiveOutcome::missed;
  if (!ttft_seconds || !tokens_per_second) return ObjectiveOutcome::not_counted;
  return *ttft_seconds <= o.ttft_seconds && *tokens_per_second >= o.min_tokens_per_second ? ObjectiveOutcome::met
                                                                                         : ObjectiveOutcome::missed;
}

}  // namespace infertap::output
