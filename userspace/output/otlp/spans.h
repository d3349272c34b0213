// One span per finished stream record (docs/otlp.md#traces): kind SERVER for
// a server's record (a gateway's downstream leg included), CLIENT for a
// client's (a gateway's upstream leg included), named "{operation} {model}",
// timed by the record's request and end (monotonic converted to wall time),
// with the GenAI attributes, the stream's timing, its stall causes, the
// delivery view and the workload; status ERROR when the stream failed; the
// per-event timeline as span events on request.
//
// The records of one joined path (a client, a gateway's two legs, the
// server) become spans of one trace: the trace id is derived from the path's
// root (PathView::root), the span ids from each record's stream id,
// and each span's parent is the record that sent it the request (the client
// end of its connection, or the gateway's downstream leg for its upstream
// leg). Derived, not remembered: the records finish at different times, and
// nothing is held for the ones still to come. A per-run salt keeps ids of two
// agents, or two runs, apart.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/types.h"
#include "output/ndjson/records.h"
#include "output/otlp/model.h"

namespace infertap::output::otlp {

class SpanIds {
 public:
  SpanIds();  // a random salt
  explicit SpanIds(std::array<std::uint8_t, 16> salt) : salt_(salt) {}
  TraceId trace_of(std::string_view path_key) const;
  SpanId span_of(std::string_view stream_id) const;

 private:
  std::uint64_t hash(std::string_view domain, std::string_view key, std::uint64_t seed) const;
  std::array<std::uint8_t, 16> salt_{};
};

struct SpanOptions {
  bool timeline_events = false;     // the per-event timeline as span events (otlp.span_events)
  std::size_t max_events = 1024;    // events per span; the rest are counted as dropped
  std::size_t max_text_bytes = 256; // string attribute values are cut here
};

Span span_of(const core::StreamRecord& record, const WallClock& clock, const SpanIds& ids, const SpanOptions& options);

}  // namespace infertap::output::otlp
