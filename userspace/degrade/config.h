// The `degradation:` section of infertapd's configuration (docs/degradation.md):
// cohorts, objectives, baselines and the rules that turn breaches into alerts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "degrade/observation.h"

namespace YAML {
class Node;
}

namespace infertap::degrade {

// The metrics judged, each per stream. Latencies in milliseconds (higher is
// worse), the streaming rate in tokens per second (lower is worse). TTFT is the
// ttft phase; the gaps and the rate are the decode phase (after the first
// token); the delivery lag (delivered - emitted at the last token, client-
// observed views of a server record only) is the delivery phase: the path's
// alone, the server's own timing is subtracted out of it.
enum class Metric : std::uint8_t { ttft, tokens_per_s, itl_p95, itl_p99, longest_pause, delivery_lag };
inline constexpr std::size_t kMetrics = 6;
inline constexpr std::array<Metric, kMetrics> kAllMetrics = {Metric::ttft,    Metric::tokens_per_s,
                                                            Metric::itl_p95, Metric::itl_p99,
                                                            Metric::longest_pause, Metric::delivery_lag};
std::string_view metric_name(Metric m);     // "ttft_ms", "tokens_per_s", "itl_p95_ms", ...
std::string_view objective_key(Metric m);   // config key: "ttft_ms", "min_tokens_per_s", ...
std::string_view phase_of(Metric m);        // "ttft" | "decode" | "delivery"
bool higher_is_worse(Metric m);
// Measured along the path only: a breach of it is the delivery path's.
bool path_only(Metric m);

// Output-length class: streams with output_tokens < below (the last class has
// no bound and takes the rest).
struct LengthClass {
  std::string name;
  std::optional<std::uint64_t> below;
  bool operator==(const LengthClass&) const = default;
};

// An absolute SLO for the cohorts it matches (fnmatch globs; first match wins).
struct Objective {
  std::string name;
  std::string model = "*", route = "*", process = "*", container = "*", length_class = "*";
  std::string concurrency_band = "*", input_band = "*";
  std::optional<Vantage> vantage;  // nullopt = both
  std::array<std::optional<double>, kMetrics> limit{};  // indexed by Metric
  bool operator==(const Objective&) const = default;
};

struct AbuseConfig {
  bool enabled = true;
  double share = 0.5;          // a client above this share of a process's decode time ...
  double release_share = 0.3;  // ... stays flagged until below this
  std::uint32_t min_streams = 5;   // streams of the client in the window
  std::uint32_t min_clients = 2;   // distinct clients of the process in the window
  std::uint32_t enter_windows = 2;
  std::uint32_t exit_windows = 2;
  std::size_t max_clients = 10000;  // tracked per process and window; the rest count as "other"
  bool operator==(const AbuseConfig&) const = default;
};

struct DegradationConfig {
  bool enabled = true;
  double window_s = 60;            // evaluation window (tumbling)
  std::uint32_t min_streams = 20;  // a cohort judges a window only with this many streams
  double breach_share = 0.25;      // share of streams breaching a metric that breaches the window
  double recovery_share = 0.10;    // a window is healthy when every metric's share is below this
  std::uint32_t enter_windows = 3;  // consecutive breached windows -> degraded
  std::uint32_t exit_windows = 2;   // consecutive healthy windows -> recovered
  std::uint32_t stale_windows = 10;  // a degraded cohort without traffic for this long recovers (no_traffic)
  // Materiality: a stream breaches a reference when it is worse by the ratio
  // AND by the absolute floor.
  double objective_ratio = 1.0;
  double baseline_ratio = 1.5;
  double latency_floor_ms = 10;
  // The delivery lag's own floor: the last hop's ACKs carry up to ~40 ms of
  // delayed ACK, which must not read as clients falling behind.
  double lag_floor_ms = 100;
  double rate_floor_tokens_per_s = 2;
  // Learned baseline: median of the per-window medians of the last
  // history_windows healthy windows; used once warmup_windows were learned.
  bool baseline = true;
  std::uint32_t warmup_windows = 5;
  std::uint32_t history_windows = 30;
  std::vector<LengthClass> length_classes = {{"short", 64}, {"medium", 512}, {"long", std::nullopt}};
  // Load bands, cohort dimensions like the length class (docs/degradation.md#cohorts):
  // by the streams in flight at the server during the stream (load.concurrency_mean,
  // rounded), and by its input size (load.input_tokens, else request_bytes / 4).
  // Empty: the dimension is off (fewer cohorts).
  std::vector<LengthClass> concurrency_bands = {
      {"1", 2}, {"2-8", 9}, {"9-32", 33}, {"33-128", 129}, {">128", std::nullopt}};
  std::vector<LengthClass> input_bands = {{"<512", 512}, {"512-4k", 4096}, {"4k-32k", 32768}, {">=32k", std::nullopt}};
  std::vector<Objective> objectives;
  std::size_t max_cohorts = 1000;
  std::size_t recent_alerts = 100;
  AbuseConfig abuse;
  bool operator==(const DegradationConfig&) const = default;
};

// Parses the `degradation:` mapping into *out (defaults for keys left out).
// Problems are appended to *errors, one line each, naming the key and line:
//   "degradation.window_s: must be 0.1..86400, got 0 (line 3)"
void parse_config(const YAML::Node& node, const std::string& key, DegradationConfig* out,
                  std::vector<std::string>* errors);

}  // namespace infertap::degrade
