#include "daemon/workload.h"

#include <dirent.h>
#include <fnmatch.h>

#include <cstdlib>
#include <utility>

namespace infertap::daemon {
namespace {

bool all_hex(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A container id as the runtimes write it: 64 lowercase hex.
bool container_id_like(std::string_view s) { return s.size() == 64 && all_hex(s); }

// 8-4-4-4-12 hex with dashes.
bool uid_like(std::string_view s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !all_hex(s.substr(i, 1))) return false;
  }
  return true;
}

// Entries of a directory (names only; empty when it cannot be read).
std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = opendir(path.c_str());
  if (!d) return names;
  while (const dirent* e = readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(d);
  return names;
}

}  // namespace

CgroupWorkload parse_cgroup_path(std::string_view path) {
  CgroupWorkload w;
  while (!path.empty()) {
    const std::size_t slash = path.find('/');
    std::string_view seg = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
    if (seg.empty()) continue;
    // Pod UID: "kubepods-burstable-pod<uid>.slice" (systemd) or "pod<uid>" (cgroupfs).
    std::string_view pod = seg;
    if (ends_with(pod, ".slice")) pod.remove_suffix(6);
    if (const std::size_t at = pod.rfind("pod"); at != std::string_view::npos &&
                                                  (at == 0 || pod[at - 1] == '-')) {
      std::string uid(pod.substr(at + 3));
      for (char& c : uid) {
        if (c == '_') c = '-';
      }
      if (uid_like(uid)) {
        w.pod_uid = std::move(uid);
        continue;
      }
    }
    // Container id: "<runtime>-<id>.scope" (systemd) or "<id>" (cgroupfs).
    std::string_view leaf = seg;
    if (ends_with(leaf, ".scope")) leaf.remove_suffix(6);
    const std::size_t dash = leaf.rfind('-');
    const std::string_view id = dash == std::string_view::npos ? leaf : leaf.substr(dash + 1);
    const std::string_view runtime = dash == std::string_view::npos ? std::string_view{} : leaf.substr(0, dash);
    // "crio-conmon-<id>" is the runtime monitor, not the container.
    const bool known_runtime = runtime == "docker" || runtime == "cri-containerd" || runtime == "crio" ||
                               runtime == "libpod" || runtime.empty();
    if (known_runtime && container_id_like(id)) w.container_id = std::string(id);
  }
  return w;
}

KubernetesSources KubernetesSources::from_environment(std::string pods_dir, std::string containers_dir) {
  KubernetesSources s;
  s.pods_dir = std::move(pods_dir);
  s.containers_dir = std::move(containers_dir);
  const auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  s.self_pod_uid = env("POD_UID");
  s.self_namespace = env("POD_NAMESPACE");
  s.self_pod = env("POD_NAME");
  return s;
}

PodNames find_pod_names(const KubernetesSources& sources, std::string_view pod_uid, std::string_view container_id) {
  PodNames names;
  // By container id: "<pod>_<namespace>_<container>-<id>.log". Kubernetes names
  // cannot contain '_', so the split is unambiguous.
  if (!container_id.empty() && !sources.containers_dir.empty()) {
    const std::string suffix = "-" + std::string(container_id) + ".log";
    for (const std::string& name : list_dir(sources.containers_dir)) {
      if (!ends_with(name, suffix)) continue;
      const std::string_view stem = std::string_view(name).substr(0, name.size() - suffix.size());
      const std::size_t a = stem.find('_');
      const std::size_t b = a == std::string_view::npos ? a : stem.find('_', a + 1);
      if (b == std::string_view::npos) continue;
      names.pod = std::string(stem.substr(0, a));
      names.k8s_namespace = std::string(stem.substr(a + 1, b - a - 1));
      names.container = std::string(stem.substr(b + 1));
      return names;
    }
  }
  if (pod_uid.empty()) return names;
  // By pod UID: "<namespace>_<pod>_<uid>/<container>/".
  if (!sources.pods_dir.empty()) {
    const std::string suffix = "_" + std::string(pod_uid);
    for (const std::string& name : list_dir(sources.pods_dir)) {
      if (!ends_with(name, suffix)) continue;
      const std::string_view stem = std::string_view(name).substr(0, name.size() - suffix.size());
      const std::size_t a = stem.find('_');
      if (a == std::string_view::npos) continue;
      names.k8s_namespace = std::string(stem.substr(0, a));
      names.pod = std::string(stem.substr(a + 1));
      // Which container of several a process is in needs its container id
      // (above); a pod with one container has only one answer.
      const std::vector<std::string> containers = list_dir(sources.pods_dir + "/" + name);
      if (containers.size() == 1) names.container = containers.front();
      return names;
    }
  }
  if (pod_uid == sources.self_pod_uid) {
    names.k8s_namespace = sources.self_namespace;
    names.pod = sources.self_pod;
  }
  return names;
}

bool comm_matches(const std::vector<std::string>& patterns, std::string_view comm) {
  if (patterns.empty()) return true;
  const std::string name(comm);
  for (const std::string& p : patterns) {
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

bool unix_path_matches(const std::vector<std::string>& patterns, const core::ConnIdentity& id) {
  if (patterns.empty() || id.transport != core::Transport::unix_stream) return true;
  const core::Endpoint& named = id.local.path.empty() ? id.remote : id.local;
  const std::string path = named.to_string().substr(std::string_view("unix:").size());
  for (const std::string& p : patterns) {
    if (fnmatch(p.c_str(), path.c_str(), 0) == 0) return true;
  }
  return false;
}

void WorkloadResolver::fill(core::ConnIdentity& id, std::uint64_t now_ns) {
  if (id.cgroup_path.empty()) return;
  auto it = cache_.find(id.cgroup_path);
  const bool stale = it != cache_.end() && !it->second.workload.pod_uid.empty() && it->second.names.pod.empty() &&
                     now_ns - it->second.looked_up_ns > retry_ns_;
  if (it == cache_.end() || stale) {
    if (cache_.size() >= 4096) cache_.clear();  // cgroups come and go; bound the cache
    Entry e;
    e.workload = parse_cgroup_path(id.cgroup_path);
    if (!e.workload.pod_uid.empty() || !e.workload.container_id.empty()) {
      e.names = find_pod_names(sources_, e.workload.pod_uid, e.workload.container_id);
    }
    e.looked_up_ns = now_ns;
    it = cache_.insert_or_assign(id.cgroup_path, std::move(e)).first;
  }
  const Entry& e = it->second;
  id.container_id = e.workload.container_id;
  id.pod_uid = e.workload.pod_uid;
  id.k8s_namespace = e.names.k8s_namespace;
  id.k8s_pod = e.names.pod;
  id.k8s_container = e.names.container;
}

}  // namespace infertap::daemon
