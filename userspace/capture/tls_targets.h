// Which processes the TLS probes (OpenSSL libraries' and Go executables'
// alike) are for. When targeting names processes (pids, cgroups), each
// eligible process gets probes of its own: a uprobe bound to a process has
// its breakpoint written only into that process's memory, so a TLS user that
// is not a target never traps. When nothing narrows the processes every
// process is a target (the agent excepted: its own calls trap and return at
// the kernel's first check), and each library or executable file is probed
// once for all.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/counter.h"
#include "capture/uprobes.h"

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

// A file on disk, as the kernel knows it (device + inode): what probes are on.
struct FileKey {
  std::uint64_t dev = 0, ino = 0;
  auto operator<=>(const FileKey&) const = default;
};

// Who pays for a file's probes: the cgroup of the process the file was found
// in (a container, a service), or the host ("") for the libraries in the
// host's own library directories. Not the uid: most containers run as root.
using Tenant = std::string;
inline const Tenant kHostTenant;
// Process `pid`'s cgroup v2 path ("/kubepods/…/cri-containerd-….scope");
// "?" when it cannot be read.
Tenant process_tenant(std::uint32_t pid, const std::string& proc_root = "/proc");

#define INFERTAP_UPROBE_BUDGET_COUNTERS(X)                                                                         \
  X(uprobe_sites, level, "TLS uprobes placed now (every offset of every file, process or all)")                   \
  X(uprobe_handles, level, "kernel objects the TLS uprobes hold now (uprobe_multi links, or one perf event per uprobe)") \
  X(uprobe_files, level, "files (TLS libraries, Go executables) with TLS uprobes now")                              \
  X(uprobe_tenants, level, "cgroups with TLS uprobes on files found in their processes now")                               \
  X(uprobe_budget_refusals, total, "TLS probe placements refused: past a budget per file, per owner or in total (named in the log)")

struct UprobeBudgetStats {
  INFERTAP_COUNTER_FIELDS(INFERTAP_UPROBE_BUDGET_COUNTERS)
};

// The TLS uprobes the agent may place, so that no tenant can spend them for
// all: a bound per file (a real TLS library needs ~12 sites, a Go executable
// 2 entries and a few RETs), per tenant (files and sites) and in total
// (kernel objects: each one is a grace period to wait for when it is removed,
// which bounds how long detaching everything takes at shutdown).
class ProbeBudget {
 public:
  struct Limits {
    std::size_t sites_per_file = 160;
    std::size_t files_per_tenant = 32;
    std::size_t sites_per_tenant = 1024;
    std::size_t handles_total = 1024;
  };
  ProbeBudget() = default;
  explicit ProbeBudget(Limits limits) : limits_(limits) {}
  const Limits& limits() const { return limits_; }

  // "" when one more file (or process) with these probes fits `tenant`'s
  // share; else which budget it would exceed (counted as a refusal).
  std::string admit(const Tenant& tenant, std::size_t sites, std::size_t handles);
  void charge(const Tenant& tenant, const ProbeSet& set) { charge(tenant, set.sites(), set.handles()); }
  void refund(const Tenant& tenant, const ProbeSet& set) { refund(tenant, set.sites(), set.handles()); }
  void charge(const Tenant& tenant, std::size_t sites, std::size_t handles);
  void refund(const Tenant& tenant, std::size_t sites, std::size_t handles);
  UprobeBudgetStats stats() const;

 private:
  struct Use {
    std::size_t files = 0, sites = 0;
  };
  Limits limits_;
  std::map<Tenant, Use> tenants_;
  std::size_t sites_ = 0, handles_ = 0, files_ = 0;
  std::uint64_t refusals_ = 0;
};

// The probes each targeted process has of its own, by the file they are on,
// for the TLS finders (OpenSSL libraries, Go executables) when targeting names
// processes. A process's probes are released within a second of its exit (a
// reused pid is another process: told apart by its start time). Bounded: each
// process holds perf events, so past kMaxProcesses the owner is told to probe
// every file once for all instead (the kernel's filters still decide what is
// traced).
class ProcessProbes {
 public:
  static constexpr std::size_t kMaxProcesses = 64;

  // The counts of processes given probes and of processes released.
  ProcessProbes(std::uint64_t* probed, std::uint64_t* released, ProbeBudget* budget)
      : probed_(probed), released_(released), budget_(budget) {}
  ~ProcessProbes() { clear(); }
  ProcessProbes(const ProcessProbes&) = delete;
  ProcessProbes& operator=(const ProcessProbes&) = delete;

  // Where to put live process `pid`'s probes on `file`; nullptr when it has
  // them already, is gone, or would be one process too many (then full()).
  ProbeSet* links_for(std::uint32_t pid, const FileKey& file);
  // Past the bound: the owner probes per file from now on (and clear()s).
  bool full() const { return full_; }
  // Releases the probes of processes that exited; checks once a second.
  void release_exited(std::uint64_t now_ns);
  // Every process's probes released (not counted: the owner moves on).
  void clear();
  // The probes of process `pid` on `file` were placed (charged to `tenant`).
  void placed(std::uint32_t pid, const FileKey& file, const Tenant& tenant);

 private:
  struct Process {
    std::uint64_t start = 0;  // process_start_time
    std::map<FileKey, ProbeSet> links;
    Tenant tenant = kHostTenant;
  };
  void release(std::map<std::uint32_t, Process>::iterator it);

  std::map<std::uint32_t, Process> processes_;  // by pid
  std::uint64_t next_check_ns_ = 0;
  bool full_ = false;
  std::uint64_t* probed_;
  std::uint64_t* released_;
  ProbeBudget* budget_;
};

// Where cgroup v2 is mounted (the first cgroup2 line of mountinfo);
// /sys/fs/cgroup when none is listed.
std::string cgroup2_mount_point(const std::string& mountinfo_path = "/proc/self/mountinfo");

// A process's start time (clock ticks since boot, /proc/PID/stat field 22):
// with the pid, the identity of a process across pid reuse. 0 when it is gone.
std::uint64_t process_start_time(std::uint32_t pid);

}  // namespace infertap::capture
