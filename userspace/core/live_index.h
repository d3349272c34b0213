// Who is followed right now: connections by 4-tuple and by process, and the
// roles each process follows. Kept by the pipeline as connections come and
// go; the path joiner asks it whether a record's partners may still come.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/path/joiner.h"
#include "core/role_census.h"
#include "core/types.h"

namespace infertap::core {

class Connection;

class LiveIndex : public PathPartners {
 public:
  void add(const Connection& conn);
  void remove(const Connection& conn);
  // The connection's role became known.
  void role_decided(const Connection& conn);
  const RoleCensus& census() const { return census_; }

  Activity peer(const Endpoint& local, const Endpoint& remote) const override;
  Activity gateway_leg(const StreamRecord& record) const override;

 private:
  std::unordered_map<std::string, const Connection*> by_tuple_;
  std::unordered_map<std::uint32_t, std::vector<const Connection*>> by_pid_;
  RoleCensus census_;
};

}  // namespace infertap::core
