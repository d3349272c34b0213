// The names streams are grouped and labelled by, written once for every view:
// Prometheus labels, `infertap stats` / `top` keys, degradation cohorts and
// the CLI's columns all call these, so the same stream gets the same name
// everywhere. A view that shows a placeholder for "nothing known" passes its
// own (Prometheus "unknown", the API "(none)", the CLI "-").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/types.h"

namespace infertap::core {

// The request path without ?query or #fragment; `if_empty` when nothing is left.
std::string route_of(std::string_view path, std::string_view if_empty = {});

// The response's model, else the one the request asked for ("" when neither).
std::string model_of(const StreamRecord& record);
// A model name as a grouping key: "(unknown)" when empty.
std::string model_key(std::string_view model);

// "comm[pid]" ("?[pid]" without a name).
std::string process_key(std::string_view comm, std::uint32_t pid);

// The container or systemd unit a cgroup v2 path names: "docker:<12 hex>",
// "cri-containerd:<12 hex>", "vllm.service", ...; "(host)" for the root.
std::string container_key(std::string_view cgroup);
// "namespace/pod/container" when the Kubernetes names are known, else
// container_key(conn.cgroup_path).
std::string container_key(const ConnIdentity& conn);

// The address without its port: "10.0.0.7", "::1"; "" when unknown.
std::string address_of(const Endpoint& endpoint);

}  // namespace infertap::core
