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
#include <set>
#include <string>
#include <vector>

struct bpf_link;

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

// Detaches every probe of `links` and empties it.
void destroy_links(std::vector<bpf_link*>& links);

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
  ProcessProbes(std::uint64_t* probed, std::uint64_t* released) : probed_(probed), released_(released) {}
  ~ProcessProbes() { clear(); }
  ProcessProbes(const ProcessProbes&) = delete;
  ProcessProbes& operator=(const ProcessProbes&) = delete;

  // Where to put live process `pid`'s probes on `file`; nullptr when it has
  // them already, is gone, or would be one process too many (then full()).
  std::vector<bpf_link*>* links_for(std::uint32_t pid, const FileKey& file);
  // Past the bound: the owner probes per file from now on (and clear()s).
  bool full() const { return full_; }
  // Releases the probes of processes that exited; checks once a second.
  void release_exited(std::uint64_t now_ns);
  // Every process's probes released (not counted: the owner moves on).
  void clear();

 private:
  struct Process {
    std::uint64_t start = 0;  // process_start_time
    std::map<FileKey, std::vector<bpf_link*>> links;
  };
  void release(std::map<std::uint32_t, Process>::iterator it);

  std::map<std::uint32_t, Process> processes_;  // by pid
  std::uint64_t next_check_ns_ = 0;
  bool full_ = false;
  std::uint64_t* probed_;
  std::uint64_t* released_;
};

// Where cgroup v2 is mounted (the first cgroup2 line of mountinfo);
// /sys/fs/cgroup when none is listed.
std::string cgroup2_mount_point(const std::string& mountinfo_path = "/proc/self/mountinfo");

// A process's start time (clock ticks since boot, /proc/PID/stat field 22):
// with the pid, the identity of a process across pid reuse. 0 when it is gone.
std::uint64_t process_start_time(std::uint32_t pid);

}  // namespace infertap::capture
