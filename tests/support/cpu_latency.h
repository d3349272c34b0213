// Keeps this machine's CPUs out of their idle halt while a ground-truth test
// measures (PM QoS: /dev/cpu_dma_latency held at 0 µs), as latency-tuned
// hosts do. A halted VM CPU is woken through the host, and on the project's
// VMs a write after such a wake takes several times longer (a Python
// SSL_write of one event: ~105 us after 5 ms asleep, ~58 us so held): part of
// that lands between the agent's timestamp and the peer's clock.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace infertap::testing {

// Not held (no device, no permission): it says why, once, and the
// measurement still runs, with the halts in it.
class CpuWakeLatencyHold {
 public:
  CpuWakeLatencyHold() {
    fd_ = ::open("/dev/cpu_dma_latency", O_WRONLY | O_CLOEXEC);
    const std::int32_t zero_us = 0;
    if (fd_ < 0 || ::write(fd_, &zero_us, sizeof zero_us) != sizeof zero_us) {
      std::printf("  CPUs may halt while measuring: /dev/cpu_dma_latency: %s\n", std::strerror(errno));
      if (fd_ >= 0) ::close(fd_);
      fd_ = -1;
    }
  }
  ~CpuWakeLatencyHold() {
    if (fd_ >= 0) ::close(fd_);  // the request ends with its file
  }
  CpuWakeLatencyHold(const CpuWakeLatencyHold&) = delete;
  CpuWakeLatencyHold& operator=(const CpuWakeLatencyHold&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace infertap::testing
