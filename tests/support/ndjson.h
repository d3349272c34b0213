// NDJSON files written by the agent and the sample tools, read back as JSON
// values (a line that does not parse becomes a discarded value, which every
// field lookup in a test then fails on visibly).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/process.h"

namespace infertap::testing {

inline std::vector<nlohmann::json> read_ndjson(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(read_file(path));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return out;
}

}  // namespace infertap::testing
