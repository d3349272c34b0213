#include "core/path/delivery.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "base/percentile.h"
#include "core/metrics.h"
#include "core/path/diagnosis.h"
#include "core/path/vantages.h"

namespace infertap::core {
namespace {

// Token events delivered within this of the one before belong to one burst.
constexpr std::uint64_t kBurstNs = 1'000'000;

// "server>gateway(nginx)>client": the processes an event passed, in order.
std::string path_label(const std::vector<Hop>& hops, Vantage vantage) {
  std::string path;
  for (const Hop& hop : hops) {
    if (hop.kind != HopKind::emit && hop.kind != HopKind::read) continue;
    const std::string name = hop.at->rec.conn.comm.empty() ? "?" : hop.at->rec.conn.comm;
    const std::string label = hop.at->gateway ? "gateway(" + name + ")" : name;
    if (path.empty() || path.substr(path.rfind('>') + 1) != label) path += (path.empty() ? "" : ">") + label;
  }
  if (vantage == Vantage::acked) path += ">remote";
  return path;
}

std::uint32_t longest_burst(const std::vector<TimestampNs>& delivered) {
  std::uint32_t run = 1, longest = 1;
  for (std::size_t i = 1; i < delivered.size(); ++i) {
    run = delivered[i] - std::min(delivered[i], delivered[i - 1]) <= kBurstNs ? run + 1 : 1;
    longest = std::max(longest, run);
  }
  return longest;
}

std::optional<std::int64_t> difference(const std::optional<std::uint64_t>& a, const std::optional<std::uint64_t>& b) {
  if (!a || !b) return std::nullopt;
  return static_cast<std::int64_t>(*a) - static_cast<std::int64_t>(*b);
}

// What the path added over what the server emitted.
void compare_with_emitted(Delivery& d, const StreamMetrics& emitted) {
  if (d.metrics.ttft_ns && emitted.ttft_ns)
    d.ttft_added_ns = *d.metrics.ttft_ns > *emitted.ttft_ns ? *d.metrics.ttft_ns - *emitted.ttft_ns : 0;
  d.itl_p99_added_ns = difference(d.metrics.itl_p99_ns, emitted.itl_p99_ns);
  d.longest_pause_added_ns = difference(d.metrics.longest_pause_ns, emitted.longest_pause_ns);
}

// Events of the stream's start whose lag stands for how fast the path is
// when nothing has piled up yet.
constexpr std::size_t kEarlyEvents = 3;
// A reader is named by its rate over at least this many token events, when
// it took in the stream at most this share of the speed the server wrote it,
// and fell behind by at least this share of the stream's span: a reader that
// reads in bursts and catches up keeps the server's rate.
constexpr std::size_t kRateEvents = 10;
constexpr double kSlowReaderRatio = 0.9;
constexpr double kMinGrowthShare = 0.05;

// How fast the end of the path took the stream in against how fast the server
// wrote it: the inverse of the least-squares slope of delivered against
// emitted time (1: kept up; 0.5: half the speed). Null over too few events.
std::optional<double> reader_rate_ratio(const std::vector<TimestampNs>& emitted, const std::vector<TimestampNs>& delivered) {
  const std::size_t n = delivered.size();
  if (n < kRateEvents) return std::nullopt;
  double mx = 0, my = 0;
  for (std::size_t k = 0; k < n; ++k) {
    mx += static_cast<double>(emitted[k] - emitted[0]);
    my += static_cast<double>(delivered[k] - delivered[0]);
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, sxy = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const double x = static_cast<double>(emitted[k] - emitted[0]) - mx, y = static_cast<double>(delivered[k] - delivered[0]) - my;
    sxx += x * x;
    sxy += x * y;
  }
  if (sxx <= 0 || sxy <= 0) return std::nullopt;
  return sxx / sxy;
}

std::string ratio_text(double r) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.2f", r);
  return buf;
}

// Per token event, how long after its emit it was delivered; and whether the
// client fell behind over the stream: named by its rate (it took the stream
// in slower than the server wrote it), with where the last token's bytes
// waited. Degradation is judged apart, against the lag floor (judge).
void measure_lag(Delivery& d, const PathNode& node, const std::vector<int>& content,
                 const std::vector<TimestampNs>& delivered) {
  std::vector<std::uint64_t> lags;
  std::vector<TimestampNs> emitted;
  lags.reserve(delivered.size());
  emitted.reserve(delivered.size());
  for (std::size_t k = 0; k < delivered.size(); ++k) {
    emitted.push_back(node.rec.timeline[static_cast<std::size_t>(content[k])].ts_ns);
    lags.push_back(delivered[k] > emitted.back() ? delivered[k] - emitted.back() : 0);
  }
  d.lag_p50_ns = base::percentile(lags, 50);
  d.lag_p99_ns = base::percentile(lags, 99);
  d.lag_max_ns = base::percentile(lags, 100);
  d.lag_last_ns = lags.back();
  const std::uint64_t early = *std::min_element(lags.begin(), lags.begin() + std::min(lags.size(), kEarlyEvents));
  d.lag_growth_ns = static_cast<std::int64_t>(lags.back()) - static_cast<std::int64_t>(early);
  d.reader_rate_ratio = reader_rate_ratio(emitted, delivered);
  const double span = static_cast<double>(emitted.back() - emitted.front());
  const bool slow = d.reader_rate_ratio && *d.reader_rate_ratio <= kSlowReaderRatio &&
                    static_cast<double>(*d.lag_growth_ns) >= kMinGrowthShare * span && *d.lag_growth_ns > 0;
  if (!slow) return;
  Verdict where = delay_cause(hops_of(&node, content[delivered.size() - 1]));
  if (!on_the_path(where.cause)) return;
  d.lag_cause = where.cause;
  d.lag_evidence = "the client read " + ratio_text(*d.reader_rate_ratio) + "x as fast as the server wrote over " +
                   std::to_string(delivered.size()) + " token events and fell behind by " +
                   evidence_ms(static_cast<std::uint64_t>(*d.lag_growth_ns)) + " (lag " + evidence_ms(early) +
                   " early, " + evidence_ms(lags.back()) + " at the last token): " + where.evidence;
}

// Degraded by the path: a delivered stall the model did not cause, a first
// token the path held back by the stall floor or more, or a client that fell
// behind.
void judge(Delivery& d, const std::vector<Hop>& first, const PipelineConfig& config) {
  std::map<StallCause, std::uint32_t> path_stalls;
  for (const StallVerdict& v : d.stall_causes) {
    if (on_the_path(v.cause)) ++path_stalls[v.cause];
  }
  const bool ttft_hurt = d.ttft_added_ns && *d.ttft_added_ns >= config.stall_floor_ns;
  if (ttft_hurt) {
    Verdict v = delay_cause(first);
    d.ttft_cause = v.cause;
    d.ttft_evidence = std::move(v.evidence);
  }
  // A reader named by its rate degrades the stream once it fell behind by the lag floor.
  const bool fell_behind = d.lag_cause != StallCause::none && d.lag_growth_ns &&
                           *d.lag_growth_ns >= static_cast<std::int64_t>(config.lag_floor_ns);
  d.degraded_by_path = !path_stalls.empty() || ttft_hurt || fell_behind;
  if (!d.degraded_by_path) return;
  std::string why;
  for (const auto& [cause, n] : path_stalls) {
    why += (why.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(to_string(cause)) + " stall" +
           (n > 1 ? "s" : "");
  }
  if (ttft_hurt) {
    why += (why.empty() ? "" : ", ") + std::string("TTFT +") + evidence_ms(*d.ttft_added_ns) + " (" +
           std::string(to_string(d.ttft_cause)) + ")";
  }
  if (fell_behind) {
    why += (why.empty() ? "" : ", ") + std::string("client fell behind ") +
           evidence_ms(static_cast<std::uint64_t>(*d.lag_growth_ns)) + " (" + std::string(to_string(d.lag_cause)) + ")";
  }
  d.degraded_reason = why;
}

}  // namespace

std::optional<Delivery> delivery_of(const PathNode& node, const PipelineConfig& config) {
  const StreamRecord& r = node.rec;
  const std::vector<int> content = content_events(r.timeline);
  const std::vector<PathTimes>& times = node.view.times;
  if (r.role != Role::server || content.empty() || times.empty()) return std::nullopt;
  std::vector<TimestampNs> delivered;
  for (int i : content) {
    const TimestampNs t = times[static_cast<std::size_t>(i)].delivered_ns;
    if (!t) break;
    delivered.push_back(t);
  }
  if (delivered.empty()) return std::nullopt;
  const std::vector<Hop> first = hops_of(&node, content.front());
  Delivery d;
  d.vantage = first.back().kind == HopKind::read ? Vantage::read : Vantage::acked;
  d.path = path_label(first, d.vantage);
  const bool has_request = r.request_end_ns != 0 && !r.joined_midstream;
  const TimestampNs last = times.back().delivered_ns ? times.back().delivered_ns : delivered.back();
  d.metrics = metrics_of(delivered, has_request ? r.request_end_ns : 0, last, r.metrics.tokens, config,
                         content_gaps_observed(r.timeline));
  d.metrics.token_source = r.metrics.token_source;
  d.metrics.counts_lower_bound = r.metrics.counts_lower_bound;
  if (d.metrics.counts_lower_bound && d.metrics.token_source == TokenSource::events) d.metrics.tokens_per_s.reset();
  d.metrics.events = r.metrics.events;
  for (const Stall& st : d.metrics.stalls) {
    if (st.after_event + 1 >= content.size()) d.stall_causes.emplace_back();
    else d.stall_causes.push_back(gap_cause(&node, content[st.after_event], content[st.after_event + 1], true));
  }
  compare_with_emitted(d, r.metrics);
  d.max_burst = longest_burst(delivered);
  measure_lag(d, node, content, delivered);
  judge(d, first, config);
  return d;
}

}  // namespace infertap::core
