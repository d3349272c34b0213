// Which processes the TLS probes are for. When targeting names processes
// (pids, cgroups), each eligible process gets probes of its own: a uprobe
// bound to a process has its breakpoint written only into that process's
// memory, so a libssl user that is not a target never traps. When nothing
// narrows the processes every process is a target (the agent excepted: its
// own calls trap and return at the kernel's first check), and each library
// file is probed once for all.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace infertap::capture {

class TlsTargets {
 public:
  TlsTargets() = default;  // every process
  TlsTargets(const std::vector<std::uint32_t>& pids, const std::vector<std::uint64_t>& cgroup_ids,
             std::uint32_t self_pid);

  // Probes per process (true) or per library file (false).
  bool per_process() const { return per_process_; }
  // Back to per-file probes (too many processes to probe one by one).
  void widen() { per_process_ = false; }
  // The agent's own filters, as the kernel applies them: listed pid, and in
  // (or below) a listed cgroup; never the agent itself.
  bool eligible(std::uint32_t pid) const;
  // What narrows the processes, for the attach notes ("--pid", "--cgroup").
  std::string narrowed_by() const;

 private:
  bool in_cgroups(std::uint32_t pid) const;

  bool per_process_ = false;
  std::set<std::uint32_t> pids_;
  std::set<std::uint64_t> cgroup_ids_;
  std::uint32_t self_pid_ = 0;
  std::string cgroup_root_;  // where cgroup v2 is mounted
};

// Where cgroup v2 is mounted (the first cgroup2 line of mountinfo);
// /sys/fs/cgroup when none is listed.
std::string cgroup2_mount_point(const std::string& mountinfo_path = "/proc/self/mountinfo");

// A process's start time (clock ticks since boot, /proc/PID/stat field 22):
// with the pid, the identity of a process across pid reuse. 0 when it is gone.
std::uint64_t process_start_time(std::uint32_t pid);

}  // namespace infertap::capture
