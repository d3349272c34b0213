#include "output/otlp/exporter.h"

#include <algorithm>
#include <ctime>

namespace infertap::output::otlp {
namespace {

using std::chrono::milliseconds;

std::uint64_t wall_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// OTLP/HTTP: these answers mean "try again later"; any other failure is final.
bool retryable(int status) { return status == 0 || status == 429 || status == 502 || status == 503 || status == 504; }

}  // namespace

std::string describe(const Counters& c) {
  std::string out = std::to_string(c.spans_exported) + " spans exported, " + std::to_string(c.spans_dropped) + " dropped";
  std::string reasons;
  const std::pair<const char*, std::uint64_t> by_reason[] = {{"queue full", c.spans_dropped_queue_full},
                                                             {"retries exhausted", c.spans_dropped_retries_exhausted},
                                                             {"rejected", c.spans_dropped_rejected},
                                                             {"at shutdown", c.spans_dropped_at_shutdown}};
  for (const auto& [reason, n] : by_reason) {
    if (n) reasons += (reasons.empty() ? "" : ", ") + std::string(reason) + " " + std::to_string(n);
  }
  if (!reasons.empty()) out += " (" + reasons + ")";
  out += "; " + std::to_string(c.metric_exports) + " metric exports, " + std::to_string(c.metric_exports_dropped) +
         " dropped; " + std::to_string(c.requests_retried) + " retries";
  return out;
}

Exporter::Exporter(ExporterOptions options, WallClock clock, std::unique_ptr<Transport> transport)
    : options_(std::move(options)),
      clock_(clock),
      start_wall_ns_(wall_now_ns()),
      transport_(transport ? std::move(transport) : http_transport()),
      metrics_(options_.limits),
      jitter_state_(start_wall_ns_ | 1) {
  sender_ = std::thread([this] { run(); });
}

Exporter::~Exporter() { close(); }

void Exporter::observe(const core::StreamRecord& record) {
  if (options_.metrics) metrics_.observe(record);
  if (!options_.traces) return;
  std::string span = encode_span(span_of(record, clock_, ids_, options_.spans), options_.traces->encoding);
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_) {
    counters_.spans_dropped_at_shutdown += 1;
    counters_.spans_dropped += 1;
    return;
  }
  if (pending_.size() >= options_.queue_spans ||
      (!pending_.empty() && counters_.queued_bytes + span.size() > options_.queue_bytes)) {
    counters_.spans_dropped_queue_full += 1;
    counters_.spans_dropped += 1;
    return;
  }
  const bool first = pending_.empty();
  if (first) first_pending_ = Clock::now();
  counters_.queued_bytes += span.size();
  pending_.push_back(std::move(span));
  counters_.queued_spans = pending_.size();
  // The sender sleeps until its next metrics export: a first span sets a
  // nearer time (batch_delay), a full batch is due now.
  if (first || pending_.size() >= options_.batch_spans) wake_.notify_one();
}

// The sender: metrics when their interval is up, spans when a batch is full
// or its oldest has waited batch_delay; at close, every span, then a last
// metrics export, until the deadline.
void Exporter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  Clock::time_point next_metrics = Clock::now() + options_.export_interval;
  bool final_metrics = false;
  while (!abandon_) {
    const Clock::time_point now = Clock::now();
    const bool metrics_due = options_.metrics && (closing_ ? !final_metrics && pending_.empty() : now >= next_metrics);
    const bool spans_due = !pending_.empty() && (closing_ || pending_.size() >= options_.batch_spans ||
                                                 now >= first_pending_ + options_.batch_delay);
    if (metrics_due) {
      const bool last = closing_;  // an export begun before close() is not the last one
      lock.unlock();
      export_metrics();
      lock.lock();
      next_metrics = Clock::now() + options_.export_interval;
      final_metrics = last;
    } else if (spans_due) {
      const std::size_t n = std::min(pending_.size(), options_.batch_spans);
      std::vector<std::string> batch;
      batch.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        counters_.queued_bytes -= pending_.front().size();
        batch.push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
      counters_.queued_spans = pending_.size();
      first_pending_ = now;
      lock.unlock();
      export_spans(std::move(batch));
      lock.lock();
    } else if (closing_) {
      break;
    } else {
      Clock::time_point wake = options_.metrics ? next_metrics : now + std::chrono::hours(1);
      if (!pending_.empty()) wake = std::min(wake, first_pending_ + options_.batch_delay);
      wake_.wait_until(lock, wake);
    }
  }
  // Abandoned at the deadline: what is still queued never left.
  counters_.spans_dropped_at_shutdown += pending_.size();
  counters_.spans_dropped += pending_.size();
  pending_.clear();
  counters_.queued_spans = counters_.queued_bytes = 0;
  done_ = true;
  finished_.notify_all();
}

void Exporter::export_spans(std::vector<std::string> batch) {
  const std::string body = trace_request(options_.resource, options_.scope, batch, options_.traces->encoding);
  const Outcome outcome = send(*options_.traces, body);
  std::lock_guard<std::mutex> lock(mu_);
  count_spans(outcome, batch.size());
}

void Exporter::export_metrics() {
  const std::vector<Metric> snapshot = metrics_.snapshot(start_wall_ns_, wall_now_ns());
  if (snapshot.empty()) return;  // no stream finished yet: nothing to say
  const std::string body = metrics_request(options_.resource, options_.scope, snapshot, options_.metrics->encoding);
  const Outcome outcome = send(*options_.metrics, body);
  std::lock_guard<std::mutex> lock(mu_);
  if (outcome == Outcome::sent) counters_.metric_exports += 1;
  else counters_.metric_exports_dropped += 1;
}

void Exporter::count_spans(Outcome outcome, std::uint64_t n) {
  switch (outcome) {
    case Outcome::sent: counters_.spans_exported += n; return;
    case Outcome::retries_exhausted: counters_.spans_dropped_retries_exhausted += n; break;
    case Outcome::rejected: counters_.spans_dropped_rejected += n; break;
    case Outcome::at_shutdown: counters_.spans_dropped_at_shutdown += n; break;
  }
  counters_.spans_dropped += n;
}

Exporter::Outcome Exporter::send(const SignalOptions& to, const std::string& body) {
  for (int attempt = 1;; ++attempt) {
    milliseconds timeout = to.timeout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (abandon_) return Outcome::at_shutdown;
      if (closing_) {
        const auto left = std::chrono::duration_cast<milliseconds>(deadline_ - Clock::now());
        if (left <= milliseconds(0)) return Outcome::at_shutdown;
        timeout = std::min(timeout, left);
      }
    }
    const HttpAnswer answer = transport_->post(to, body, timeout);
    if (answer.status >= 200 && answer.status < 300) return Outcome::sent;
    note_failure(to, answer);
    if (!retryable(answer.status)) return Outcome::rejected;
    if (attempt >= options_.retry.max_attempts) return Outcome::retries_exhausted;
    const milliseconds wait = answer.retry_after ? *answer.retry_after : backoff(attempt);
    if (wait > options_.retry.max_retry_after) return Outcome::retries_exhausted;
    if (!wait_to_retry(wait)) return Outcome::at_shutdown;
  }
}

void Exporter::note_failure(const SignalOptions& to, const HttpAnswer& answer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (answer.status == 0) counters_.send_errors += 1;
  // The URL and what came back; never the request's headers.
  last_error_ = (answer.status ? std::to_string(answer.status) : answer.error) + " from " + to.url;
}

bool Exporter::wait_to_retry(milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  counters_.requests_retried += 1;
  const Clock::time_point until = Clock::now() + wait;
  while (!abandon_) {
    if (closing_ && until > deadline_) return false;  // the retry would come after the deadline
    if (wake_.wait_until(lock, until) == std::cv_status::timeout) return !abandon_;
  }
  return false;
}

milliseconds Exporter::backoff(int attempt) {
  const RetryPolicy& p = options_.retry;
  double ms = static_cast<double>(p.initial_backoff.count());
  for (int i = 1; i < attempt && ms < static_cast<double>(p.max_backoff.count()); ++i) ms *= 2;
  ms = std::min(ms, static_cast<double>(p.max_backoff.count()));
  // xorshift: the jitter needs spread, not quality; the sender thread alone calls it.
  jitter_state_ ^= jitter_state_ << 13;
  jitter_state_ ^= jitter_state_ >> 7;
  jitter_state_ ^= jitter_state_ << 17;
  const double unit = static_cast<double>(jitter_state_ >> 11) / static_cast<double>(1ull << 53);  // [0, 1)
  ms *= 1 + p.jitter * (2 * unit - 1);
  return milliseconds(static_cast<std::int64_t>(ms));
}

bool Exporter::close() {
  std::lock_guard<std::mutex> close_lock(close_mu_);
  if (closed_) return close_result_;
  std::unique_lock<std::mutex> lock(mu_);
  closing_ = true;
  deadline_ = Clock::now() + options_.shutdown_timeout;
  wake_.notify_all();
  if (!finished_.wait_until(lock, deadline_, [&] { return done_; })) {
    // Past the deadline: a request in flight is cut, the rest is dropped.
    abandon_ = true;
    wake_.notify_all();
    lock.unlock();
    transport_->cancel();
    lock.lock();
  }
  lock.unlock();
  sender_.join();
  closed_ = true;
  close_result_ = counters().spans_dropped_at_shutdown == 0;
  return close_result_;
}

Counters Exporter::counters() const {
  Counters c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = counters_;
  }
  c.label_overflow = metrics_.label_overflow();
  c.series_overflow = metrics_.series_overflow();
  return c;
}

std::string Exporter::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

}  // namespace infertap::output::otlp
