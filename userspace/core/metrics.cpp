#include "core/metrics.h"

#include <algorithm>
#include <cmath>

#include "base/percentile.h"

namespace infertap::core {

namespace {

// Streaming rate: tokens after the first over the first→last token span. When
// the count comes from usage, the first event's share is the average tokens
// per content event (exact for one token per event).
std::optional<double> token_rate(std::uint64_t tokens, std::uint64_t content_events, TimestampNs first,
                                 TimestampNs last) {
  if (content_events < 2 || last <= first) return std::nullopt;
  const double span_s = static_cast<double>(last - first) / 1e9;
  const double after_first =
      static_cast<double>(tokens) * static_cast<double>(content_events - 1) / static_cast<double>(content_events);
  return after_first / span_s;
}

// The content event times of the timeline, then those the tail kept.
std::vector<TimestampNs> token_times_of(const StreamRecord& r) {
  std::vector<TimestampNs> times;
  times.reserve(r.timeline.size() / 2 + r.tail.gaps.size() + 1);
  for (const TimelineEvent& e : r.timeline) {
    if (e.kind == protocol::EventKind::content) times.push_back(e.ts_ns);
  }
  if (r.tail.content_events == 0) return times;
  TimestampNs t = r.tail.first_token_ns;
  times.push_back(t);
  std::size_t next_long = 0;
  for (const std::uint32_t gap : r.tail.gaps) {
    t += gap != TimelineTail::kLongGap ? gap : r.tail.long_gaps[next_long++];
    times.push_back(t);
  }
  return times;
}

// content_gaps_observed over the whole record: the timeline's, then the tail's.
std::vector<bool> gaps_observed_of(const StreamRecord& r, std::size_t token_count) {
  std::vector<bool> observed = content_gaps_observed(r.timeline);
  if (token_count < 2) return observed;
  observed.resize(token_count - 1, true);
  for (const std::uint32_t i : r.tail.unobserved) {
    if (i < observed.size()) observed[i] = false;
  }
  return observed;
}

}  // namespace

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

  if (!token_times.empty()) m.tokens_per_s = token_rate(m.tokens, m.content_events, token_times.front(), token_times.back());

  if (m.itl_p50_ns) {
    const auto relative = static_cast<std::uint64_t>(config.stall_ratio * static_cast<double>(*m.itl_p50_ns));
    m.stall_threshold_ns = std::max(config.stall_floor_ns, relative);
    for (std::size_t i = 0; i < gaps.size(); ++i) {
      const bool observed = i >= gap_observed.size() || gap_observed[i];
      if (gaps[i] > m.stall_threshold_ns && observed) {
        m.stalls.push_back(Stall{static_cast<std::uint32_t>(i), token_times[i], gaps[i]});
      }
    }
  } else {
    m.stall_threshold_ns = config.stall_floor_ns;
  }
  return m;
}

std::vector<bool> content_gaps_observed(const std::vector<TimelineEvent>& timeline) {
  std::vector<bool> out;
  ContentGapWatch watch;
  for (const TimelineEvent& e : timeline) {
    const bool content = e.kind == protocol::EventKind::content;
    const bool observed = watch.step(e.offset, e.wire_bytes, content);
    if (content && watch.contents() > 1) out.push_back(observed);
  }
  return out;
}

StreamMetrics record_metrics(const StreamRecord& record, std::optional<std::uint64_t> usage_completion_tokens,
                             const PipelineConfig& config) {
  const std::vector<TimestampNs> token_times = token_times_of(record);
  const TimelineTail& tail = record.tail;
  // Past kMaxTailGaps the tail counts content events it keeps no time for.
  const std::uint64_t content_events = token_times.size() + tail.content_events -
                                       std::min<std::uint64_t>(tail.content_events, tail.gaps.size() + 1);
  const std::uint64_t tokens = usage_completion_tokens ? *usage_completion_tokens : content_events;
  const bool has_request = record.request_end_ns != 0 && !record.joined_midstream;
  StreamMetrics m = metrics_of(token_times, has_request ? record.request_end_ns : 0, record.last_event_ns, tokens,
                               config, gaps_observed_of(record, token_times.size()));
  m.events = static_cast<std::uint32_t>(record.timeline.size() + tail.events);
  if (content_events > token_times.size()) {
    m.itl_truncated = true;
    m.content_events = static_cast<std::uint32_t>(content_events);
    m.tokens_per_s = token_rate(tokens, content_events, token_times.front(), tail.last_token_ns);
    m.itl_max_ns = std::max(m.itl_max_ns.value_or(0), tail.max_gap_ns);
    m.longest_pause_ns = m.itl_max_ns;
  }
  // Content that was all audio (a realtime voice response without its
  // transcript): each delta is a piece of audio, counted as a token event.
  const bool all_audio = record.audio_events > 0 && record.audio_events == m.content_events;
  m.token_source = usage_completion_tokens                               ? TokenSource::usage
                   : record.event_framing == protocol::EventFraming::grpc ? TokenSource::messages
                   : all_audio                                            ? TokenSource::audio
                                                                           : TokenSource::events;
  m.counts_lower_bound = record.bytes_lost + record.bytes_not_captured > 0;
  if (m.counts_lower_bound && m.token_source != TokenSource::usage) m.tokens_per_s.reset();
  return m;
}

}  // namespace infertap::core
