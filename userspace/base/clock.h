// The one clock of the product: CLOCK_MONOTONIC nanoseconds, the clock the
// kernel side stamps events with (bpf_ktime_get_ns). Wall time is derived
// only at output (output/ndjson/records.h WallClock).
#pragma once

#include <time.h>

#include <cstdint>

namespace infertap::base {

using TimestampNs = std::uint64_t;  // CLOCK_MONOTONIC nanoseconds

inline TimestampNs monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimestampNs>(ts.tv_sec) * 1'000'000'000ull + static_cast<TimestampNs>(ts.tv_nsec);
}

// A duration in seconds, as exporters write it (Prometheus, OTLP).
inline double seconds(std::uint64_t ns) { return static_cast<double>(ns) / 1e9; }

}  // namespace infertap::base
