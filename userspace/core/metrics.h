// Stream metrics exactly as docs/metrics.md defines them (DESIGN §2). Pure
// functions over a record's timeline: testable without capture or clocks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/types.h"

namespace infertap::core {

// Nearest-rank percentile (p in (0,100]) of an unsorted sample; nullopt if empty.
std::optional<std::uint64_t> percentile(std::vector<std::uint64_t> sample, double p);

// Fills record.metrics from record.timeline, request_end_ns, last_event_ns and
// `usage_completion_tokens` (the stream's own usage report, when it had one).
void compute_metrics(StreamRecord& record, std::optional<std::uint64_t> usage_completion_tokens,
                     const PipelineConfig& config);

}  // namespace infertap::core
