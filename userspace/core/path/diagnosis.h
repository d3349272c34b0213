// Where a stall came from (docs/metrics.md#stall-causes): every gap between
// two content events gets the cause of the hop of its path that added most
// of it, with the evidence that decided it, in words for a person.
//
//   linked path nodes + a gap (or one event's path) --> Verdict
#pragma once

#include <string>
#include <vector>

#include "core/path/node.h"
#include "core/types.h"

namespace infertap::core {

using Verdict = StallVerdict;

// The cause of the gap between events a and b of `node` (timeline indices).
// `through_final`: judge the whole path up to its last vantage (the delivered
// view), not only up to the node's own vantage.
Verdict gap_cause(const PathNode* node, int a, int b, bool through_final);

// Where one event spent the time between its emit and its delivery: the hop
// of `path` (hops_of) that added most of it.
Verdict delay_cause(const std::vector<Hop>& path);

// Formats a duration for evidence: "12 ms".
std::string evidence_ms(std::uint64_t ns);

}  // namespace infertap::core
