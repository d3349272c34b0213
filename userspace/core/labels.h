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

// A request target as records keep it (docs/schema.md#paths): the path of an
// absolute-form target only (scheme, credentials and host dropped), its
// query reduced to the parameters `privacy` keeps by name (none by default),
// no #fragment; with privacy.normalize_routes, every id-like or secret-like
// path segment written "{id}" (normalize_route). The assembler sets a
// record's path with it, so the NDJSON, the store, the CLI, the Prometheus
// labels and the degradation cohorts all see the same safe value.
std::string sanitize_target(std::string_view target, const PathPrivacy& privacy);

// "/v1/files/file-AbC123xYz9876qwerty/content" -> "/v1/files/{id}/content".
// A segment is id-like when it is a number, a UUID, hex of 8 characters or
// more with a digit, holds an '@', or has a word (a run between - _ . : ~
// and the like) that is long (24+), or 12+ with 3 digits and a letter, or
// 10+ mixing upper case, lower case and digits: ids, hashes, keys, tokens,
// base64. Route words ("chat", "v1beta", "streamGenerateContent",
// "gpt-4o-2024-08-06") are kept.
std::string normalize_route(std::string_view path);
bool id_like_segment(std::string_view segment);

// The request path without ?query or #fragment; `if_empty` when nothing is
// left. Records' paths are sanitized already (sanitize_target), so the route
// is normalised as the path is.
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
