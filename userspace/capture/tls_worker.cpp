#include "capture/tls_worker.h"

#include <unistd.h>

#include <chrono>
#include <utility>

#include "base/clock.h"
#include "capture/loader.h"

namespace infertap::capture {

namespace {
// Signals wake the worker at once; due scans (10 ms and 300 ms after an
// exec, tls_libraries.cpp) and the once-a-second checks run at this cadence,
// the capture loop's own poll timeout: no more wake-ups than before.
constexpr auto kTick = std::chrono::milliseconds(50);
}  // namespace

TlsWorker::TlsWorker(const TlsPrograms& tls, const GoTlsPrograms& go, const TlsTargets& targets, Uprobes uprobes,
                     ProbeBudget::Limits limits)
    : budget_(limits) {
  worker_notes_.push_back({"TLS probes placed as " + std::string(to_string(uprobes.mode())) +
                               " on the descriptor of the very file read, from a thread of their own",
                           "budgets: " + std::to_string(limits.sites_per_file) + " uprobes per file, " +
                               std::to_string(limits.files_per_tenant) + " files and " +
                               std::to_string(limits.sites_per_tenant) + " uprobes per cgroup, " +
                               std::to_string(limits.handles_total) + " kernel handles in all"});
  tls_ = std::make_unique<TlsLibraries>(tls, &worker_notes_, targets, "/proc", &budget_, uprobes);
  tls_->scan_everything(base::monotonic_ns());
  go_ = std::make_unique<GoTls>(go, &worker_notes_, targets, &budget_, uprobes);
  go_->scan_everything(base::monotonic_ns());
  publish();
  thread_ = std::thread([this] { run(); });
}

TlsWorker::~TlsWorker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Both finders' probes come off at once: their grace periods overlap.
  std::thread go_release([this] { go_.reset(); });
  tls_.reset();
  go_release.join();
}

void TlsWorker::signal(Signal kind, std::uint32_t pid) {
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= kMaxQueued) {
      overflowed_ = true;
    } else {
      queue_.emplace_back(kind, pid);
    }
  }
  wake_.notify_one();
}

void TlsWorker::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, kTick, [this] { return stop_ || !queue_.empty() || overflowed_; });
    if (stop_) break;
    std::deque<std::pair<Signal, std::uint32_t>> signals;
    signals.swap(queue_);
    const bool overflowed = std::exchange(overflowed_, false);
    lock.unlock();
    const std::uint64_t now = base::monotonic_ns();
    if (overflowed) {
      tls_->rescan_soon();
      go_->rescan_soon();
    }
    for (const auto& [kind, pid] : signals) {
      if (kind == Signal::exec) {
        go_->on_exec(pid);
        tls_->on_exec(pid, now);
      } else {
        tls_->on_dlopen(pid, now);
      }
    }
    tls_->tick(base::monotonic_ns());
    go_->tick(base::monotonic_ns());
    publish();
    lock.lock();
  }
}

void TlsWorker::publish() {
  Stats now{tls_->stats(), go_->stats(), budget_.stats()};
  std::lock_guard lock(mu_);
  for (LoadNote& n : worker_notes_) notes_.push_back(std::move(n));
  worker_notes_.clear();
  stats_ = now;
}

std::string_view TlsWorker::library_name(std::uint16_t id) const {
  return GoTls::is_go_id(id) ? go_->library_name(id) : tls_->library_name(id);
}

std::vector<LoadNote> TlsWorker::take_notes() {
  std::lock_guard lock(mu_);
  return std::exchange(notes_, {});
}

TlsWorker::Stats TlsWorker::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace infertap::capture
