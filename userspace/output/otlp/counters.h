// What the OTLP exporter counts, listed once: X(name, kind, help) makes the
// field, its `infertap status` key (counters.otlp.<name>) and its Prometheus
// series infertap_otlp_<name>[_total] (docs/prometheus.md, docs/cli.md).
// Spans are counted one by one; metric exports are whole requests (each a
// cumulative snapshot: a lost one loses no data the next one carries).
#pragma once

#include <string>

#include "base/counter.h"

#define INFERTAP_OTLP_COUNTERS(X)                                                                                    \
  X(spans_exported, total, "spans the OTLP collector accepted")                                                   \
  X(spans_dropped, total, "spans dropped: queue full, retries exhausted, rejected by the collector, at shutdown")  \
  X(spans_dropped_queue_full, total, "spans dropped because the OTLP queue was full (the collector did not keep up)") \
  X(spans_dropped_retries_exhausted, total, "spans dropped after their request's last retry")                     \
  X(spans_dropped_rejected, total, "spans the collector refused with a status that is not retried (400, 401, 413, ...)") \
  X(spans_dropped_at_shutdown, total, "spans not delivered by the shutdown deadline")                             \
  X(metric_exports, total, "metric exports the OTLP collector accepted")                                          \
  X(metric_exports_dropped, total, "metric exports dropped: retries exhausted, rejected, at shutdown")              \
  X(requests_retried, total, "OTLP requests sent again after 429, 502, 503, 504 or a connection error")           \
  X(send_errors, total, "OTLP requests that got no answer: connection refused or reset, timeout")                 \
  X(label_overflow, total, "OTLP metric attribute values replaced by \"other\" (metrics.max_label_values)")        \
  X(series_overflow, total, "OTLP metric updates folded into an overflow series (metrics.max_series_per_family)")   \
  X(queued_spans, level, "spans waiting to be sent to the OTLP collector now")                                    \
  X(queued_bytes, level, "encoded span bytes waiting to be sent to the OTLP collector now")

namespace infertap::output::otlp {

struct Counters {
  INFERTAP_COUNTER_FIELDS(INFERTAP_OTLP_COUNTERS)
};

// "120 spans exported, 8 dropped (queue full 8); 5 metric exports, 0 dropped":
// the reasons that dropped any, for the log.
std::string describe(const Counters& c);

}  // namespace infertap::output::otlp
