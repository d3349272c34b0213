// Stream metrics exactly as docs/metrics.md defines them. Pure
// functions over a record's timeline: testable without capture or clocks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/types.h"

namespace infertap::core {

// Metrics of one series of token-event times (any vantage). TTFT and e2e are
// measured from request_end_ns (0: none); stalls index the series.
// `gap_observed[i]` (optional): no capture hole lies between token i and i+1;
// a gap over lost events is not judged a stall (its events' times are unknown).
StreamMetrics metrics_of(const std::vector<TimestampNs>& token_times, TimestampNs request_end_ns,
                         TimestampNs last_event_ns, std::uint64_t tokens, const PipelineConfig& config,
                         const std::vector<bool>& gap_observed = {});

// Whether the events between two content events covered every byte: events
// lost between calls leave a break in body offsets (a hole inside one call
// does not: its events keep that call's time). Fed every event in order.
class ContentGapWatch {
 public:
  // Returns, for a content event after another, whether the gap ending at it
  // was observed; false for any other event.
  bool step(std::uint64_t offset, std::uint32_t wire_bytes, bool content) {
    if (seen_ && offset > prev_end_) whole_ = false;
    seen_ = true;
    prev_end_ = offset + wire_bytes;
    if (!content) return false;
    const bool observed = contents_ > 0 && whole_;
    ++contents_;
    whole_ = true;
    return observed;
  }
  std::uint32_t contents() const { return contents_; }

 private:
  std::uint64_t prev_end_ = 0;
  std::uint32_t contents_ = 0;
  bool seen_ = false;
  bool whole_ = true;
};

// For each pair of consecutive content events of the timeline: do the events
// between them cover every byte (none lost between syscalls)?
std::vector<bool> content_gaps_observed(const std::vector<TimelineEvent>& timeline);

// A record's metrics from its timeline and tail, request_end_ns,
// last_event_ns and `usage_completion_tokens` (the stream's own usage report,
// when it had one). The assembler sets them when the record finishes.
StreamMetrics record_metrics(const StreamRecord& record, std::optional<std::uint64_t> usage_completion_tokens,
                             const PipelineConfig& config);

}  // namespace infertap::core
