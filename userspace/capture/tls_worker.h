// The TLS finders (OpenSSL libraries, Go executables) on a thread of their
// own. Reading a tenant's ELF files, scanning processes' maps and placing or
// removing uprobes (a grace period each) take milliseconds to seconds; none
// of it may hold up the thread that drains the ring buffer. The capture
// thread hands it exec and dlopen signals (a bounded queue: past it, a full
// rescan) and reads library names, notes and counters from it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "capture/go_tls.h"
#include "capture/tls_libraries.h"
#include "capture/tls_targets.h"
#include "capture/uprobes.h"

namespace infertap::capture {

struct LoadNote;

class TlsWorker {
 public:
  // Scans every process once on the calling thread (probes are in place
  // when this returns), then goes on on its own thread.
  TlsWorker(const TlsPrograms& tls, const GoTlsPrograms& go, const TlsTargets& targets, Uprobes uprobes,
            ProbeBudget::Limits limits = {});
  // Stops the thread, then removes every probe (in parallel: bounded time).
  ~TlsWorker();
  TlsWorker(const TlsWorker&) = delete;
  TlsWorker& operator=(const TlsWorker&) = delete;

  void on_exec(std::uint32_t pid) { signal(Signal::exec, pid); }
  void on_dlopen(std::uint32_t pid) { signal(Signal::dlopen, pid); }

  std::string_view library_name(std::uint16_t id) const;
  // Notes since the last call, in order.
  std::vector<LoadNote> take_notes();
  struct Stats {
    TlsLibraryStats tls;
    GoTlsStats go;
    UprobeBudgetStats budget;
  };
  Stats stats() const;

  static constexpr std::size_t kMaxQueued = 8192;

 private:
  enum class Signal : std::uint8_t { exec, dlopen };
  void signal(Signal kind, std::uint32_t pid);
  void run();
  void publish();  // notes and counters, under the lock

  ProbeBudget budget_;
  std::vector<LoadNote> worker_notes_;  // the finders write here (worker thread only)
  std::unique_ptr<TlsLibraries> tls_;
  std::unique_ptr<GoTls> go_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<Signal, std::uint32_t>> queue_;
  bool overflowed_ = false;
  bool stop_ = false;
  std::vector<LoadNote> notes_;  // published, not taken yet
  Stats stats_;
  std::thread thread_;
};

}  // namespace infertap::capture
