// Who a traced process is, beyond its pid: the container and Kubernetes pod it
// runs in (from its cgroup v2 path and the node's pod log directory), and the
// targeting the kernel cannot do itself (process name globs).
//
// Runs on the capture thread once per new connection (results cached per
// cgroup path), so lookups touch the filesystem only for a cgroup not seen yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/types.h"

namespace infertap::daemon {

// What a cgroup v2 path says by itself. Recognised (innermost match wins):
//   container id: ".../docker-<64hex>.scope", "cri-containerd-<64hex>.scope",
//                 "crio-<64hex>.scope", "libpod-<64hex>.scope" (systemd driver),
//                 ".../<64hex>" (cgroupfs driver: /docker/<id>, /kubepods/.../pod<uid>/<id>)
//   pod UID:      "kubepods-<qos>-pod<uid>.slice" (systemd driver writes '_' for '-')
//                 or "pod<uid>" (cgroupfs driver); returned with dashes.
struct CgroupWorkload {
  std::string container_id;
  std::string pod_uid;
};
CgroupWorkload parse_cgroup_path(std::string_view cgroup_path);

// Kubernetes names of a container on this node.
struct PodNames {
  std::string k8s_namespace, pod, container;
};

struct KubernetesSources {
  // kubelet's pod log directory: <pods_dir>/<namespace>_<pod>_<uid>/<container>/N.log.
  // Gives namespace and pod by UID; the container name when the pod has one container.
  std::string pods_dir = "/var/log/pods";
  // Symlinks <containers_dir>/<pod>_<namespace>_<container>-<container id>.log:
  // the only place on a node that maps a container id to its name.
  std::string containers_dir = "/var/log/containers";
  // The daemon's own pod (downward API: POD_UID, POD_NAMESPACE, POD_NAME), used
  // when the traced process shares it (infertapd as a sidecar).
  std::string self_pod_uid, self_namespace, self_pod;
  static KubernetesSources from_environment(std::string pods_dir, std::string containers_dir);
};

// Names for a pod UID / container id; fields stay empty where nothing says.
PodNames find_pod_names(const KubernetesSources& sources, std::string_view pod_uid, std::string_view container_id);

// fnmatch(3) globs on a process name; an empty list matches every name.
bool comm_matches(const std::vector<std::string>& patterns, std::string_view comm);

// fnmatch(3) globs on a unix connection's path as its record shows it,
// without "unix:" ("/run/app.sock", "@name" for an abstract one, "*" for
// none); an empty list matches every socket. TCP sockets always match: the
// kernel filters them by port.
bool unix_path_matches(const std::vector<std::string>& patterns, const core::ConnIdentity& id);

// Fills ConnIdentity's workload fields, caching per cgroup path. Names not
// found yet (a pod whose log directory kubelet has not created) are looked up
// again after `retry_ns`.
class WorkloadResolver {
 public:
  explicit WorkloadResolver(KubernetesSources sources, std::uint64_t retry_ns = 10'000'000'000ull)
      : sources_(std::move(sources)), retry_ns_(retry_ns) {}
  void fill(core::ConnIdentity& id, std::uint64_t now_ns);
  std::size_t cached() const { return cache_.size(); }

 private:
  struct Entry {
    CgroupWorkload workload;
    PodNames names;
    std::uint64_t looked_up_ns = 0;
  };
  KubernetesSources sources_;
  std::uint64_t retry_ns_;
  std::unordered_map<std::string, Entry> cache_;
};

}  // namespace infertap::daemon
