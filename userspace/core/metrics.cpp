#include "core/metrics.h"

#include <algorithm>
#include <cmath>

#include "base/percentile.h"

namespace infertap::core {

StreamMetrics metrics_of(const std::vector<TimestampNs>& token_times, TimestampNs request_end_ns,
                         TimestampNs last_event_ns, std::uint64_t tokens, const PipelineConfig& config,
                         const std::vector<bool>& gap_observed) {
  StreamMetrics m;
  m.content_events = static_cast<std::uint32_t>(token_times.size());
  m.tokens = tokens;
  if (!token_times.empty() && request_end_ns && token_times.front() >= request_end_ns) {
    m.ttft_ns = token_times.front() - request_end_ns;
  }
  if (last_event_ns != 0 && request_end_ns && last_event_ns >= request_end_ns) {
    m.e2e_ns = last_event_ns - request_end_ns;
  }

  std::vector<std::uint64_t> gaps;
  gaps.reserve(token_times.size());
  for (std::size_t i = 1; i < token_times.size(); ++i) {
    gaps.push_back(token_times[i] >= token_times[i - 1] ? token_times[i] - token_times[i - 1] : 0);
  }
  m.itl_p50_ns = base::percentile(gaps, 50);
  m.itl_p95_ns = base::percentile(gaps, 95);
  m.itl_p99_ns = base::percentile(gaps, 99);
  m.itl_max_ns = base::percentile(gaps, 100);
  m.longest_pause_ns = m.itl_max_ns;

  // Streaming rate: tokens after the first over the first→last token span. When
  // the count comes from usage, the first event's share is the average tokens
  // per content event (exact for one token per event).
  if (token_times.size() >= 2 && token_times.back() > token_times.front()) {
    const double span_s = static_cast<double>(token_times.back() - token_times.front()) / 1e9;
    const double after_first = static_cast<double>(m.tokens) * static_cast<double>(m.content_events - 1) /
                               static_cast<double>(m.content_events);
    m.tokens_per_s = after_first / span_s;
  }

  if (m.itl_p50_ns) {
    const auto relative = static_cast<std::uint64_t>(config.stall_ratio * static_cast<double>(*m.itl_p50_ns));
    m.stall_threshold_ns = std::max(config.stall_floor_ns, relative);
    for (std::size_t i = 0; i < gaps.size(); ++i) {
      const bool observed = i >= gap_observed.size() || gap_observed[i];
      if (gaps[i] > m.stall_threshold_ns && observed) {
        m.stalls.push_back(Stall{static_cast<std::uint32_t>(i), token_times[i], gaps[i], StallCause::none, {}});
      }
    }
  } else {
    m.stall_threshold_ns = config.stall_floor_ns;
  }
  return m;
}

std::vector<bool> content_gaps_observed(const std::vector<TimelineEvent>& timeline) {
  std::vector<bool> out;
  const TimelineEvent* prev_content = nullptr;
  bool whole = true;  // since the previous content event
  const TimelineEvent* prev = nullptr;
  for (const TimelineEvent& e : timeline) {
    // A hole always lies inside one syscall: an event cut by it (truncated)
    // still has the time of the syscall that moved the bytes it swallowed. Only
    // a break in the offsets (events lost across syscalls) hides a time.
    if (prev && e.offset > prev->offset + prev->wire_bytes) whole = false;
    if (e.kind == protocol::EventKind::content) {
      if (prev_content) out.push_back(whole);
      prev_content = &e;
      whole = true;
    }
    prev = &e;
  }
  return out;
}

void compute_metrics(StreamRecord& record, std::optional<std::uint64_t> usage_completion_tokens,
                     const PipelineConfig& config) {
  std::vector<TimestampNs> token_times;
  for (const TimelineEvent& e : record.timeline) {
    if (e.kind == protocol::EventKind::content) token_times.push_back(e.ts_ns);
  }
  const auto content_events = static_cast<std::uint64_t>(token_times.size());
  const std::uint64_t tokens = usage_completion_tokens ? *usage_completion_tokens : content_events;
  const bool has_request = record.request_end_ns != 0 && !record.joined_midstream;
  StreamMetrics m = metrics_of(token_times, has_request ? record.request_end_ns : 0, record.last_event_ns, tokens,
                               config, content_gaps_observed(record.timeline));
  m.events = static_cast<std::uint32_t>(record.timeline.size());
  m.token_source = usage_completion_tokens                               ? TokenSource::usage
                   : record.event_framing == protocol::EventFraming::grpc ? TokenSource::messages
                                                                           : TokenSource::events;
  m.counts_lower_bound = record.bytes_lost + record.bytes_not_captured > 0;
  if (m.counts_lower_bound && m.token_source != TokenSource::usage) m.tokens_per_s.reset();
  record.metrics = std::move(m);
}

}  // namespace infertap::core
