// The names of probed TLS libraries by id (the probes' cookie, a data
// event's tls_lib): one id per name, so files of one kind (every libssl.so.3)
// share it and no tenant can use the ids up — past the bound, files take the
// overflow name's id. Written by the TLS worker, read by the capture thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace infertap::capture {

class LibraryNames {
 public:
  LibraryNames(std::uint16_t first_id, std::size_t max, std::string overflow_name)
      : first_id_(first_id), max_(max), overflow_(std::move(overflow_name)) {}

  std::uint16_t id_for(const std::string& name) {
    std::lock_guard lock(mu_);
    if (auto it = ids_.find(name); it != ids_.end()) return it->second;
    const std::string& kept = names_.size() + 1 < max_ ? name : overflow_;
    if (auto it = ids_.find(kept); it != ids_.end()) return it->second;
    names_.push_back(kept);
    const auto id = static_cast<std::uint16_t>(first_id_ + names_.size() - 1);
    ids_.emplace(kept, id);
    return id;
  }

  // "" for an id never given. Stays valid: names are never removed.
  std::string_view name(std::uint16_t id) const {
    std::lock_guard lock(mu_);
    if (id < first_id_ || std::size_t(id - first_id_) >= names_.size()) return "";
    return names_[id - first_id_];
  }

 private:
  const std::uint16_t first_id_;
  const std::size_t max_;
  const std::string overflow_;
  mutable std::mutex mu_;
  std::deque<std::string> names_;
  std::map<std::string, std::uint16_t, std::less<>> ids_;
};

}  // namespace infertap::capture
