// Stream records as NDJSON lines (schema: docs/schema.md, version kSchemaVersion).
// Never renders payload text: records carry timing and metadata only.
#pragma once

#include <cstdint>
#include <string>

#include "core/types.h"

namespace infertap::output {

inline constexpr int kSchemaVersion = 1;

// Converts CLOCK_MONOTONIC to wall time at output (the kernel stamps events
// with the monotonic clock; wall time is only for humans and log pipelines).
class WallClock {
 public:
  WallClock();  // samples the realtime - monotonic offset now
  explicit WallClock(std::int64_t offset_ns) : offset_ns_(offset_ns) {}
  std::int64_t offset_ns() const { return offset_ns_; }
  // RFC 3339 UTC with nanoseconds: "2026-11-29T17:34:09.123456789Z".
  std::string rfc3339(std::uint64_t mono_ns) const;

 private:
  std::int64_t offset_ns_ = 0;
};

struct RenderOptions {
  bool timeline = false;  // include the per-event timeline
  std::string host;       // node name
};

// One line, no trailing newline.
std::string render_stream(const core::StreamRecord& record, const WallClock& clock, const RenderOptions& options);

}  // namespace infertap::output
