// The daemon's LoadProbe (core/load.h): PSI of the host and of cgroups, CPU
// time of processes, read from /proc and the cgroup v2 mount. Called once a
// second by the pipeline thread for a bounded set of cgroups and processes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/load.h"

namespace infertap::daemon {

// "some avg10=1.50 avg60=... total=...\nfull avg10=..." -> the avg10 of each
// line; nullopt when no line parses.
struct PsiLevels {
  std::optional<double> some, full;
};
PsiLevels parse_psi(std::string_view text);
// utime + stime (fields 14 and 15) of a /proc/<pid>/stat line, in clock ticks.
std::optional<std::uint64_t> parse_stat_cpu_ticks(std::string_view stat);

class ProcLoadProbe : public core::LoadProbe {
 public:
  // `proc`: the proc mount; `cgroup2`: the cgroup v2 mount ("" = none: no cgroup pressure).
  ProcLoadProbe(std::string proc, std::string cgroup2);

  std::optional<core::Pressure> host_pressure() override;
  std::optional<core::Pressure> cgroup_pressure(const std::string& cgroup) override;
  std::optional<std::uint64_t> process_cpu_ns(std::uint32_t pid) override;

 private:
  std::optional<core::Pressure> read_levels(const std::string& cpu, const std::string& memory, const std::string& io);

  std::string proc_, cgroup2_;
  std::uint64_t ns_per_tick_;
};

}  // namespace infertap::daemon
