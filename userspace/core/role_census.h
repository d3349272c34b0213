// How many followed connections each process has in each role. A process on
// both ends of streams may be a gateway: its events are hashed so that its
// other leg can be found by content (core/path/joiner.h).
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>

#include "core/types.h"

namespace infertap::core {

class RoleCensus {
 public:
  void add(std::uint32_t pid, Role role) { ++counts_[pid][index(role)]; }
  void remove(std::uint32_t pid, Role role) {
    auto it = counts_.find(pid);
    if (it == counts_.end()) return;
    auto& n = it->second[index(role)];
    if (n > 0) --n;
    if (it->second == Counts{}) counts_.erase(it);
  }
  // Does process `pid` follow connections in a role other than `role`?
  bool has_other_role(std::uint32_t pid, Role role) const {
    auto it = counts_.find(pid);
    if (it == counts_.end()) return false;
    for (std::size_t r = 1; r < it->second.size(); ++r) {
      if (r != index(role) && it->second[r] > 0) return true;
    }
    return false;
  }

 private:
  using Counts = std::array<std::uint32_t, 3>;  // per Role
  static std::size_t index(Role role) { return static_cast<std::size_t>(role); }
  std::unordered_map<std::uint32_t, Counts> counts_;
};

}  // namespace infertap::core
