// How the TLS finders place uprobes, and how they take them away.
//
// Placed only on the very file the agent read: through its open descriptor
// (/proc/self/fd/N), never by a path, which a tenant can point elsewhere
// between the read and the attach (a mapping replaced with MAP_FIXED, an
// exec). Where the kernel has uprobe_multi links (>= 6.6) every site of one
// program on one file is one BPF link: one descriptor, and removing it waits
// for one RCU grace period (30-80 ms measured here) instead of one per site.
// Otherwise each site is a perf-event uprobe of its own. Removals from
// parallel threads share grace periods (release_all), so stopping with
// hundreds of probes placed stays within a DaemonSet's grace period.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct bpf_program;
struct bpf_link;

namespace infertap::capture {

enum class UprobeMode { multi, single };
std::string_view to_string(UprobeMode mode);

struct UprobeSite {
  bpf_program* prog = nullptr;
  std::uint64_t offset = 0;  // file offset
  std::uint64_t cookie = 0;  // the program's bpf_get_attach_cookie()
  bool ret = false;          // a return probe
};

// The probes placed on one file for one process (or for all): detached
// together, on destruction or release().
class ProbeSet;
// Detaches every set from parallel threads (bounded in number) and empties
// the vector: a set's own probes are removed in parallel too.
void release_all(std::vector<ProbeSet>& sets);

class ProbeSet {
 public:
  ProbeSet() = default;
  ~ProbeSet() { release(); }
  ProbeSet(ProbeSet&& other) noexcept { *this = std::move(other); }
  ProbeSet& operator=(ProbeSet&& other) noexcept;
  ProbeSet(const ProbeSet&) = delete;
  ProbeSet& operator=(const ProbeSet&) = delete;

  bool empty() const { return link_fds_.empty() && links_.empty(); }
  std::size_t sites() const { return sites_; }  // uprobes placed
  // Kernel objects held: link descriptors (multi) or perf events (single).
  std::size_t handles() const { return link_fds_.size() + links_.size(); }
  // Detaches now (waits for the kernel's grace periods).
  void release();
  // Moves every probe of `other` into this set.
  void absorb(ProbeSet&& other);

 private:
  friend class Uprobes;
  friend void release_all(std::vector<ProbeSet>& sets);
  std::vector<int> link_fds_;
  std::vector<bpf_link*> links_;
  std::size_t sites_ = 0;
};

class Uprobes {
 public:
  Uprobes() = default;
  explicit Uprobes(UprobeMode mode) : mode_(mode) {}
  UprobeMode mode() const { return mode_; }

  // Every site on the file open as `fd`, for process `pid` (-1: every
  // process); all or none. *why names the site that failed.
  bool attach(int fd, int pid, std::span<const UprobeSite> sites, ProbeSet* out, std::string* why) const;

  // Kernel objects these sites take: a link per program and direction
  // (multi), or one per site.
  std::size_t handles_for(std::span<const UprobeSite> sites) const;

  // Whether this kernel makes uprobe_multi links: one probe on the agent's
  // own executable, for itself only. *why says why not.
  static bool multi_supported(std::string* why);
  // The attach type programs need to be loaded with for uprobe_multi links.
  static constexpr int kMultiAttachType = 48;  // BPF_TRACE_UPROBE_MULTI

 private:
  bool attach_multi(const std::string& path, int pid, std::span<const UprobeSite> sites, ProbeSet& set,
                    std::string* why) const;
  bool attach_single(const std::string& path, int pid, std::span<const UprobeSite> sites, ProbeSet& set,
                     std::string* why) const;
  UprobeMode mode_ = UprobeMode::single;
};

}  // namespace infertap::capture
