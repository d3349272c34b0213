#include "capture/tls_targets.h"

#include <bpf/libbpf.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace infertap::capture {

// Lines: "id parent major:minor root mount-point options... - fstype source super-options".
std::string cgroup2_mount_point(const std::string& mountinfo_path) {
  std::ifstream in(mountinfo_path);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t sep = line.find(" - ");
    if (sep == std::string::npos || line.compare(sep + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, sep));
    std::string id, parent, dev, root, mount_point;
    if (fields >> id >> parent >> dev >> root >> mount_point) return mount_point;
  }
  return "/sys/fs/cgroup";
}

TlsTargets::TlsTargets(const std::vector<std::uint32_t>& pids, const std::vector<std::uint64_t>& cgroup_ids,
                       std::uint32_t self_pid)
    : per_process_(!pids.empty() || !cgroup_ids.empty()),
      pids_(pids.begin(), pids.end()),
      cgroup_ids_(cgroup_ids.begin(), cgroup_ids.end()),
      self_pid_(self_pid) {
  if (!cgroup_ids_.empty()) cgroup_root_ = cgroup2_mount_point();
}

bool TlsTargets::eligible(std::uint32_t pid) const {
  if (self_pid_ && pid == self_pid_) return false;
  if (!pids_.empty() && !pids_.contains(pid)) return false;
  if (!cgroup_ids_.empty() && !in_cgroups(pid)) return false;
  return true;
}

std::string TlsTargets::narrowed_by() const {
  if (!pids_.empty() && !cgroup_ids_.empty()) return "--pid and --cgroup";
  return pids_.empty() ? "--cgroup" : "--pid";
}

// The process's cgroup v2 path ("0::/a/b"), then each ancestor up to the
// root, by the inode of its directory (the cgroup id the kernel filter uses).
bool TlsTargets::in_cgroups(std::uint32_t pid) const {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line, path;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty() || path.front() != '/') return false;
  while (true) {
    struct stat st {};
    if (stat((cgroup_root_ + path).c_str(), &st) == 0 && cgroup_ids_.contains(st.st_ino)) return true;
    if (path == "/") return false;
    const std::size_t slash = path.rfind('/');
    path.resize(slash == 0 ? 1 : slash);
  }
}

Tenant process_tenant(std::uint32_t pid, const std::string& proc_root) {
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0 && line.size() > 3 && line.size() < 4096) return line.substr(3);
  return "?";
}

std::string ProbeBudget::admit(const Tenant& tenant, std::size_t sites, std::size_t handles) {
  static const Use kNone;
  const auto found = tenants_.find(tenant);
  const Use& use = found == tenants_.end() ? kNone : found->second;
  std::string why;
  if (sites > limits_.sites_per_file)
    why = std::to_string(sites) + " uprobes on one file: more than " + std::to_string(limits_.sites_per_file);
  else if (tenant != kHostTenant && use.files >= limits_.files_per_tenant)
    why = "its cgroup " + tenant + " has " + std::to_string(use.files) + " files with TLS probes already, its share";
  else if (tenant != kHostTenant && use.sites + sites > limits_.sites_per_tenant)
    why = "its cgroup " + tenant + " has " + std::to_string(use.sites) +
          " TLS uprobes already; " + std::to_string(sites) + " more pass its share of " +
          std::to_string(limits_.sites_per_tenant);
  else if (handles_ + handles > limits_.handles_total)
    why = std::to_string(handles_) + " uprobe handles placed already; " + std::to_string(handles) +
          " more pass the agent's total of " + std::to_string(limits_.handles_total);
  if (!why.empty()) ++refusals_;
  return why;
}

void ProbeBudget::charge(const Tenant& tenant, std::size_t sites, std::size_t handles) {
  if (!handles) return;
  Use& use = tenants_[tenant];
  ++use.files;
  use.sites += sites;
  ++files_;
  sites_ += sites;
  handles_ += handles;
}

void ProbeBudget::refund(const Tenant& tenant, std::size_t sites, std::size_t handles) {
  if (!handles) return;
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) {
    it->second.files -= std::min<std::size_t>(it->second.files, 1);
    it->second.sites -= std::min(it->second.sites, sites);
    if (!it->second.files) tenants_.erase(it);
  }
  files_ -= std::min<std::size_t>(files_, 1);
  sites_ -= std::min(sites_, sites);
  handles_ -= std::min(handles_, handles);
}

UprobeBudgetStats ProbeBudget::stats() const {
  UprobeBudgetStats s;
  s.uprobe_sites = sites_;
  s.uprobe_handles = handles_;
  s.uprobe_files = files_;
  s.uprobe_tenants = tenants_.size();
  s.uprobe_budget_refusals = refusals_;
  return s;
}

namespace {
constexpr std::uint64_t kProcessCheckNs = 1'000'000'000ull;
}  // namespace

ProbeSet* ProcessProbes::links_for(std::uint32_t pid, const FileKey& file) {
  const std::uint64_t start = process_start_time(pid);
  if (!start) return nullptr;
  auto it = processes_.find(pid);
  if (it != processes_.end() && it->second.start != start) {
    release(it);
    it = processes_.end();
  }
  if (it == processes_.end()) {
    if (processes_.size() >= kMaxProcesses) {
      full_ = true;
      return nullptr;
    }
    ++*probed_;
    it = processes_.emplace(pid, Process{start, {}}).first;
  }
  const auto [links, added] = it->second.links.try_emplace(file);
  return added ? &links->second : nullptr;
}

void ProcessProbes::release_exited(std::uint64_t now_ns) {
  if (processes_.empty() || now_ns < next_check_ns_) return;
  next_check_ns_ = now_ns + kProcessCheckNs;
  for (auto it = processes_.begin(); it != processes_.end();) {
    auto next = std::next(it);
    if (process_start_time(it->first) != it->second.start) release(it);
    it = next;
  }
}

void ProcessProbes::placed(std::uint32_t pid, const FileKey& file, const Tenant& tenant) {
  auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  it->second.tenant = tenant;
  if (auto set = it->second.links.find(file); set != it->second.links.end() && budget_) budget_->charge(tenant, set->second);
}

void ProcessProbes::release(std::map<std::uint32_t, Process>::iterator it) {
  std::vector<ProbeSet> sets;
  for (auto& [file, links] : it->second.links) {
    if (budget_) budget_->refund(it->second.tenant, links);
    sets.push_back(std::move(links));
  }
  release_all(sets);
  processes_.erase(it);
  ++*released_;
}

void ProcessProbes::clear() {
  std::vector<ProbeSet> sets;
  for (auto& [pid, process] : processes_)
    for (auto& [file, links] : process.links) {
      if (budget_) budget_->refund(process.tenant, links);
      sets.push_back(std::move(links));
    }
  release_all(sets);
  processes_.clear();
  full_ = false;
}

std::uint64_t process_start_time(std::uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  const std::size_t comm_end = stat.rfind(')');  // the command name may hold spaces and ')'
  if (comm_end == std::string::npos) return 0;
  std::istringstream fields(stat.substr(comm_end + 2));
  std::string field;
  for (int i = 3; i < 22 && fields >> field; ++i) {
  }
  std::uint64_t start = 0;
  return fields >> start ? start : 0;
}

}  // namespace infertap::capture
