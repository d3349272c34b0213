// Timing errors against a peer's own clock, with the events whose clock the
// host made late left out and counted (tls_test.cpp, go_tls_test.cpp,
// unix_test.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "support/percentile.h"

namespace infertap::testing {

// A peer logs with each clock how long its thread was off its CPU during the
// clocked call: wall time less the thread's CPU time, which leaves out any
// preemption and, with steal-time accounting (as on the project's VMs), what
// the host took from the guest's CPU. A clock read after such a gap
// is late by up to it, and that error would be the host's, not the agent's.
// The agent's own cost is run on the peer's CPU time, so leaving those
// events out cannot hide it.
class ClockErrors {
 public:
  static constexpr std::int64_t kDisturbedNs = 20'000;

  // `off_cpu_ns` < 0: not known, counted as disturbed.
  void add(std::int64_t truth_ns, std::int64_t off_cpu_ns, std::int64_t agent_ns) {
    all_.push_back(truth_ns - agent_ns);
    if (off_cpu_ns >= 0 && off_cpu_ns <= kDisturbedNs) undisturbed_.push_back(truth_ns - agent_ns);
  }
  std::size_t events() const { return all_.size(); }
  std::int64_t undisturbed_percentile(double p) const { return percentile_abs(undisturbed_, p); }
  // Most events disturbed: nothing is measured, the host is.
  bool measurable() const { return undisturbed_.size() * 2 >= all_.size() && !all_.empty(); }

  void print(const std::string& what) const {
    std::printf("[ accuracy ] %s: p50 %.1f us p99 %.1f us over %zu undisturbed events; %zu of %zu left out "
                "(peer off its CPU > %.0f us), p99 over all %.1f us\n",
                what.c_str(), undisturbed_percentile(50) / 1e3, undisturbed_percentile(99) / 1e3,
                undisturbed_.size(), all_.size() - undisturbed_.size(), all_.size(), kDisturbedNs / 1e3,
                percentile_abs(all_, 99) / 1e3);
  }

 private:
  std::vector<std::int64_t> undisturbed_, all_;
};

}  // namespace infertap::testing
