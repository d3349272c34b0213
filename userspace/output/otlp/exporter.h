// infertap's OTLP/HTTP exporter (docs/otlp.md): every finished stream record
// becomes a span and updates cumulative metrics; a sender thread of its own
// posts batches of spans and, every export interval, a snapshot of the
// metrics to an OpenTelemetry Collector.
//
// The pipeline thread never waits on the collector: observe() encodes the
// span and queues it under a lock held for a push, and refuses (drops and
// counts) it when the queue is full (spans or bytes). The sender retries
// 429, 502, 503, 504 and connection errors with exponential backoff and
// jitter, honouring Retry-After; other statuses drop the request. Every span
// offered and not delivered is counted by reason (output/otlp/counters.h).
// close() gives the queue and a last metrics export a bounded time, then
// cancels what is in flight and counts the rest as dropped at shutdown.
//
// Header values are secrets: they go to the collector and nowhere else
// (never to a log line, a counter or an error text).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/types.h"
#include "output/ndjson/records.h"
#include "output/otlp/counters.h"
#include "output/otlp/encode.h"
#include "output/otlp/metrics.h"
#include "output/otlp/spans.h"

namespace infertap::output::otlp {

// service.version of the resource and the scope's version.
inline constexpr std::string_view kAgentVersion = "0.1.0";

// Where one signal goes and how.
struct SignalOptions {
  std::string url;  // http(s)://host[:port]/path, e.g. http://collector:4318/v1/traces
  Encoding encoding = Encoding::protobuf;
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every request; secrets
  std::chrono::milliseconds timeout{10'000};                   // per request
};

struct RetryPolicy {
  int max_attempts = 5;                              // the first send included
  std::chrono::milliseconds initial_backoff{1'000};  // doubled after each retry ...
  std::chrono::milliseconds max_backoff{30'000};     // ... up to this
  double jitter = 0.2;                               // each wait times a random factor in [1 - jitter, 1 + jitter]
  // A Retry-After longer than this gives the request up (retries exhausted)
  // rather than holding the queue behind it.
  std::chrono::milliseconds max_retry_after{60'000};
};

struct ExporterOptions {
  std::optional<SignalOptions> metrics;  // none: metrics are not exported
  std::optional<SignalOptions> traces;   // none: spans are not made
  std::chrono::milliseconds export_interval{60'000};  // metrics
  std::size_t queue_spans = 2048;                     // spans waiting, at most ...
  std::uint64_t queue_bytes = 16ull << 20;            // ... and their encoded bytes
  std::size_t batch_spans = 512;                      // spans per request, at most
  std::chrono::milliseconds batch_delay{1'000};       // a span waits at most this long for a fuller batch
  std::chrono::milliseconds shutdown_timeout{3'000};  // close(): the last sends, then what is left is dropped
  Attributes resource;
  Scope scope;
  SpanOptions spans;
  MetricLimits limits;
  RetryPolicy retry;
};

// What an HTTP POST got: a status, or 0 and why there was none.
struct HttpAnswer {
  int status = 0;
  std::string error;                                     // status 0: connection refused, timeout, ...
  std::optional<std::chrono::milliseconds> retry_after;  // the Retry-After header, when given
};

// How requests leave: HTTP in the agent, a fake in tests.
class Transport {
 public:
  virtual ~Transport() = default;
  // One POST of `body` to `to`; gives up after `timeout`.
  virtual HttpAnswer post(const SignalOptions& to, const std::string& body, std::chrono::milliseconds timeout) = 0;
  // Makes a post() in progress return now. Thread-safe.
  virtual void cancel() = 0;
};
// cpp-httplib (the project links it already; https through OpenSSL, with
// the system's CA certificates), a kept-alive connection per endpoint.
std::unique_ptr<Transport> http_transport();

class Exporter {
 public:
  // Starts the sender thread. `transport` null: http_transport().
  Exporter(ExporterOptions options, WallClock clock, std::unique_ptr<Transport> transport = nullptr);
  ~Exporter();  // close()
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // One finished stream: its span queued, its observations added. Never
  // blocks on I/O; thread-safe.
  void observe(const core::StreamRecord& record);

  // Sends what is queued and a last metrics export within
  // options.shutdown_timeout, then stops the sender; what did not go is
  // counted as dropped at shutdown. Returns true when nothing was dropped
  // there. Idempotent.
  bool close();

  Counters counters() const;
  // The last failed send ("503 from http://collector:4318/v1/traces"), "" = none.
  std::string last_error() const;

 private:
  enum class Outcome : std::uint8_t { sent, retries_exhausted, rejected, at_shutdown };
  using Clock = std::chrono::steady_clock;

  void run();
  void export_spans(std::vector<std::string> batch);
  void export_metrics();
  Outcome send(const SignalOptions& to, const std::string& body);
  // Waits `wait` before a retry; false when the request is to be given up (shutdown).
  bool wait_to_retry(std::chrono::milliseconds wait);
  std::chrono::milliseconds backoff(int attempt);
  void count_spans(Outcome outcome, std::uint64_t n);
  void note_failure(const SignalOptions& to, const HttpAnswer& answer);

  const ExporterOptions options_;
  const WallClock clock_;
  const std::uint64_t start_wall_ns_;
  std::unique_ptr<Transport> transport_;
  MetricAggregator metrics_;
  const SpanIds ids_;

  mutable std::mutex mu_;
  std::condition_variable wake_;      // the sender: spans queued, close
  std::condition_variable finished_;  // close(): the sender is done
  std::deque<std::string> pending_;   // encoded spans, oldest first
  Clock::time_point first_pending_{};
  bool closing_ = false;
  bool abandon_ = false;  // past the shutdown deadline: give up at once
  bool done_ = false;
  Clock::time_point deadline_{};
  Counters counters_;
  std::string last_error_;
  std::uint64_t jitter_state_;

  std::mutex close_mu_;
  bool closed_ = false;
  bool close_result_ = false;
  std::thread sender_;
};

}  // namespace infertap::output::otlp
