// The `objectives:` section of infertapd's configuration (docs/configuration.md,
// "Stream objectives"): the objectives the fleet's Prometheus rules judge
// cohorts against (output/prometheus/objectives.h). Read as strictly as the
// option table: an unknown key, a missing required one, a number out of range
// or a name given twice names the key and its line.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "output/prometheus/objectives.h"

namespace YAML {
class Node;
}

namespace infertap::daemon {

// At most this many objectives: each one multiplies the series of
// infertap_objective_streams_total.
inline constexpr std::size_t kMaxObjectives = 32;

// Parses the `objectives:` list into *out (replacing it). Problems are
// appended to *errors, one line each, e.g.
//   "objectives[0].target: must be 0.5..0.9999, got 1 (line 5)"
void parse_objectives(const YAML::Node& node, const std::string& key, std::vector<output::Objective>* out,
                      std::vector<std::string>* errors);

}  // namespace infertap::daemon
