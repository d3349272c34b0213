#include "core/labels.h"

#include <algorithm>
#include <cctype>

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

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_any_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool all_of(std::string_view s, bool (*f)(char)) { return !s.empty() && std::all_of(s.begin(), s.end(), f); }

// 8-4-4-4-12 hex digits.
bool is_uuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !is_any_hex(s[i])) return false;
  }
  return true;
}

// A run of characters a token is made of (letters, digits, base64's + and =, %-escapes).
bool token_char(char c) { return is_digit(c) || is_upper(c) || is_lower(c) || c == '+' || c == '=' || c == '%'; }

bool secret_like_word(std::string_view w) {
  const auto n = [&](bool (*f)(char)) { return std::count_if(w.begin(), w.end(), f); };
  const auto digits = n(is_digit), upper = n(is_upper), lower = n(is_lower);
  if (w.size() >= 24) return true;
  if (w.size() >= 12 && digits >= 3 && upper + lower > 0) return true;
  return w.size() >= 10 && digits > 0 && upper > 0 && lower > 0;
}

// The query parameters of `query` (without '?') whose names `keep` lists, in order.
std::string kept_query(std::string_view query, const std::vector<std::string>& keep) {
  std::string out;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const std::string_view name = param.substr(0, param.find('='));
    if (name.empty() || std::find(keep.begin(), keep.end(), name) == keep.end()) continue;
    out += (out.empty() ? "" : "&") + std::string(param);
  }
  return out;
}

}  // namespace

bool id_like_segment(std::string_view s) {
  if (s.empty()) return false;
  if (all_of(s, is_digit) || is_uuid(s) || s.find('@') != std::string_view::npos) return true;
  if (s.size() >= 8 && all_of(s, is_any_hex) && std::any_of(s.begin(), s.end(), is_digit)) return true;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    while (j < s.size() && token_char(s[j])) ++j;
    if (j > i && secret_like_word(s.substr(i, j - i))) return true;
    i = j + 1;
  }
  return false;
}

std::string normalize_route(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  while (true) {
    const std::size_t slash = path.find('/');
    const std::string_view segment = path.substr(0, slash);
    out += id_like_segment(segment) ? "{id}" : std::string(segment);
    if (slash == std::string_view::npos) break;
    out += '/';
    path.remove_prefix(slash + 1);
  }
  return out;
}

std::string sanitize_target(std::string_view target, const PathPrivacy& privacy) {
  // Absolute form ("http://user:pass@host/path"): the path alone.
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() &&
        std::equal(scheme.begin(), scheme.end(), target.begin(), [](char a, char b) { return a == std::tolower(b); })) {
      const std::size_t path_at = target.find('/', scheme.size());
      target = path_at == std::string_view::npos ? std::string_view("/") : target.substr(path_at);
      break;
    }
  }
  target = target.substr(0, target.find('#'));
  const std::size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  std::string out = privacy.normalize_routes && !path.empty() && path.front() == '/' ? normalize_route(path)
                                                                                      : std::string(path);
  if (q != std::string_view::npos && !privacy.keep_query_params.empty()) {
    const std::string kept = kept_query(target.substr(q + 1), privacy.keep_query_params);
    if (!kept.empty()) out += "?" + kept;
  }
  return out;
}

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
