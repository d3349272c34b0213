#include "core/labels.h"

#include <algorithm>

#include "base/host_port.h"

namespace infertap::core {
namespace {

bool is_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::string route_of(std::string_view path, std::string_view if_empty) {
  const std::string_view route = path.substr(0, path.find_first_of("?#"));
  return std::string(route.empty() ? if_empty : route);
}

std::string model_of(const StreamRecord& r) { return !r.model.empty() ? r.model : r.request_model; }

std::string model_key(std::string_view model) { return model.empty() ? "(unknown)" : std::string(model); }

std::string process_key(std::string_view comm, std::uint32_t pid) {
  return std::string(comm.empty() ? "?" : comm) + "[" + std::to_string(pid) + "]";
}

std::string container_key(std::string_view cgroup) {
  while (!cgroup.empty() && cgroup.back() == '/') cgroup.remove_suffix(1);
  if (cgroup.empty()) return "(host)";
  const std::size_t slash = cgroup.rfind('/');
  std::string_view leaf = slash == std::string_view::npos ? cgroup : cgroup.substr(slash + 1);
  std::string_view parent;
  if (slash != std::string_view::npos && slash > 0) {
    std::string_view up = cgroup.substr(0, slash);
    const std::size_t up_slash = up.rfind('/');
    parent = up_slash == std::string_view::npos ? up : up.substr(up_slash + 1);
  }
  if (ends_with(leaf, ".scope")) leaf.remove_suffix(6);
  // "docker-<id>", "cri-containerd-<id>", "crio-<id>", "libpod-<id>": runtime + short id.
  const std::size_t dash = leaf.rfind('-');
  if (dash != std::string_view::npos && dash > 0 && leaf.size() - dash - 1 >= 32 && is_hex(leaf.substr(dash + 1))) {
    return std::string(leaf.substr(0, dash)) + ":" + std::string(leaf.substr(dash + 1, 12));
  }
  // cgroupfs driver: "/docker/<id>".
  if (leaf.size() >= 32 && is_hex(leaf)) {
    return std::string(parent.empty() ? "container" : parent) + ":" + std::string(leaf.substr(0, 12));
  }
  return std::string(leaf);
}

std::string container_key(const ConnIdentity& conn) {
  if (conn.k8s_pod.empty()) return container_key(conn.cgroup_path);
  return conn.k8s_namespace + "/" + conn.k8s_pod + "/" + (conn.k8s_container.empty() ? "?" : conn.k8s_container);
}

std::string address_of(const Endpoint& endpoint) {
  if (endpoint.family == 0) return {};
  const std::string text = endpoint.to_string();
  const auto split = base::split_host_port(text);
  return split ? std::string(split->host) : text;
}

}  // namespace infertap::core
