#include "capture/uprobes.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <utility>

namespace infertap::capture {

namespace {

// BPF_LINK_CREATE's uprobe_multi arguments (kernel >= 6.6), laid out as the
// kernel's union bpf_attr; the system's linux/bpf.h may predate them.
struct UprobeMultiAttr {
  std::uint32_t prog_fd = 0, target_fd = 0, attach_type = 0, flags = 0;
  std::uint64_t path = 0, offsets = 0, ref_ctr_offsets = 0, cookies = 0;
  std::uint32_t cnt = 0, multi_flags = 0, pid = 0;
  std::uint8_t zero[76] = {};  // the rest of bpf_attr: the kernel checks it is zero
};
constexpr std::uint32_t kUprobeMultiReturn = 1;  // BPF_F_UPROBE_MULTI_RETURN

int link_create_uprobe_multi(int prog_fd, const std::string& path, std::span<const std::uint64_t> offsets,
                             std::span<const std::uint64_t> cookies, bool ret, int pid) {
  UprobeMultiAttr attr;
  attr.prog_fd = static_cast<std::uint32_t>(prog_fd);
  attr.attach_type = Uprobes::kMultiAttachType;
  attr.path = reinterpret_cast<std::uint64_t>(path.c_str());
  attr.offsets = reinterpret_cast<std::uint64_t>(offsets.data());
  attr.cookies = reinterpret_cast<std::uint64_t>(cookies.data());
  attr.cnt = static_cast<std::uint32_t>(offsets.size());
  attr.multi_flags = ret ? kUprobeMultiReturn : 0;
  attr.pid = pid > 0 ? static_cast<std::uint32_t>(pid) : 0;
  return static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr)));
}

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Threads that detach at once: enough to share grace periods, few enough
// to start quickly on a small node.
constexpr std::size_t kReleaseThreads = 32;

}  // namespace

std::string_view to_string(UprobeMode mode) { return mode == UprobeMode::multi ? "uprobe_multi" : "uprobe"; }

ProbeSet& ProbeSet::operator=(ProbeSet&& other) noexcept {
  if (this == &other) return *this;
  release();
  link_fds_ = std::exchange(other.link_fds_, {});
  links_ = std::exchange(other.links_, {});
  sites_ = std::exchange(other.sites_, 0);
  return *this;
}

void ProbeSet::release() {
  for (int fd : link_fds_) ::close(fd);
  for (bpf_link* link : links_) bpf_link__destroy(link);
  link_fds_.clear();
  links_.clear();
  sites_ = 0;
}

void ProbeSet::absorb(ProbeSet&& other) {
  link_fds_.insert(link_fds_.end(), other.link_fds_.begin(), other.link_fds_.end());
  links_.insert(links_.end(), other.links_.begin(), other.links_.end());
  sites_ += other.sites_;
  other.link_fds_.clear();
  other.links_.clear();
  other.sites_ = 0;
}

bool Uprobes::attach(int fd, int pid, std::span<const UprobeSite> sites, ProbeSet* out, std::string* why) const {
  // The descriptor's own file, whatever its path names by now.
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  ProbeSet placed;
  const bool ok = mode_ == UprobeMode::multi ? attach_multi(path, pid, sites, placed, why)
                                             : attach_single(path, pid, sites, placed, why);
  if (!ok) return false;  // `placed` detaches what did attach
  out->absorb(std::move(placed));
  return true;
}

std::size_t Uprobes::handles_for(std::span<const UprobeSite> sites) const {
  if (mode_ == UprobeMode::single) return sites.size();
  std::set<std::pair<bpf_program*, bool>> groups;
  for (const UprobeSite& s : sites) groups.insert({s.prog, s.ret});
  return groups.size();
}

// One link per program and direction, all its sites in it.
bool Uprobes::attach_multi(const std::string& path, int pid, std::span<const UprobeSite> sites, ProbeSet& set,
                           std::string* why) const {
  std::map<std::pair<bpf_program*, bool>, std::pair<std::vector<std::uint64_t>, std::vector<std::uint64_t>>> groups;
  for (const UprobeSite& s : sites) {
    auto& [offsets, cookies] = groups[{s.prog, s.ret}];
    offsets.push_back(s.offset);
    cookies.push_back(s.cookie);
  }
  for (const auto& [key, group] : groups) {
    const int link = link_create_uprobe_multi(bpf_program__fd(key.first), path, group.first, group.second, key.second, pid);
    if (link < 0) {
      *why = std::string(bpf_program__name(key.first)) + " at " + std::to_string(group.first.size()) +
             " offsets from " + hex(group.first.front()) + ": " + errno_text(errno);
      return false;
    }
    set.link_fds_.push_back(link);
    set.sites_ += group.first.size();
  }
  return true;
}

bool Uprobes::attach_single(const std::string& path, int pid, std::span<const UprobeSite> sites, ProbeSet& set,
                            std::string* why) const {
  for (const UprobeSite& s : sites) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = s.cookie, .retprobe = s.ret);
    bpf_link* link = bpf_program__attach_uprobe_opts(s.prog, pid, path.c_str(), static_cast<std::size_t>(s.offset), &opts);
    if (!link) {
      *why = std::string(bpf_program__name(s.prog)) + " at offset " + hex(s.offset) + ": " + errno_text(errno);
      return false;
    }
    set.links_.push_back(link);
    ++set.sites_;
  }
  return true;
}

// A function of the agent's own, probed once for the agent alone.
extern "C" __attribute__((noinline, used)) int infertap_uprobe_feature_target(int x) {
  asm volatile("" ::: "memory");
  return x + 1;
}

bool Uprobes::multi_supported(std::string* why) {
  // The target's file offset: its address within the mapping that holds it.
  const auto address = reinterpret_cast<std::uint64_t>(&infertap_uprobe_feature_target);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::uint64_t offset = 0;
  bool found = false;
  while (!found && std::getline(maps, line)) {
    unsigned long long start = 0, end = 0, file_offset = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %*s %llx", &start, &end, &file_offset) != 3) continue;
    if (address < start || address >= end) continue;
    offset = address - start + file_offset;
    found = true;
  }
  if (!found) {
    *why = "the agent's own code is not in /proc/self/maps";
    return false;
  }
  const bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, load_opts,
              .expected_attach_type = static_cast<bpf_attach_type>(kMultiAttachType));
  const int prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "itap_feature", "GPL", insns, 2, &load_opts);
  if (prog < 0) {
    *why = "a program for uprobe_multi does not load: " + errno_text(errno);
    return false;
  }
  const std::uint64_t offsets[] = {offset};
  const std::uint64_t cookies[] = {0};
  const int link = link_create_uprobe_multi(prog, "/proc/self/exe", offsets, cookies, false, getpid());
  const int err = errno;
  ::close(prog);
  if (link < 0) {
    *why = "the kernel makes no uprobe_multi link (>= 6.6 does): " + errno_text(err);
    return false;
  }
  ::close(link);
  return true;
}

void release_all(std::vector<ProbeSet>& sets) {
  // Every handle of every set: a set's own handles are removed in parallel too.
  std::vector<int> fds;
  std::vector<bpf_link*> links;
  for (ProbeSet& set : sets) {
    fds.insert(fds.end(), set.link_fds_.begin(), set.link_fds_.end());
    links.insert(links.end(), set.links_.begin(), set.links_.end());
    set.link_fds_.clear();
    set.links_.clear();
    set.sites_ = 0;
  }
  sets.clear();
  const std::size_t total = fds.size() + links.size();
  std::atomic<std::size_t> next{0};
  const auto worker = [&] {
    for (std::size_t i = next++; i < total; i = next++) {
      if (i < fds.size()) ::close(fds[i]);
      else bpf_link__destroy(links[i - fds.size()]);
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 1; t < std::min(kReleaseThreads, total); ++t) {
    try {
      threads.emplace_back(worker);
    } catch (...) {
      break;  // no thread available: the ones started (and this one) do the rest
    }
  }
  worker();
  for (auto& t : threads) t.join();
}

}  // namespace infertap::capture
