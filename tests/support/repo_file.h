// A repository file's text, found from the working directory (make,
// scripts/test.sh run from the root) or from the including test's location.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace infertap::testing {

// The absolute path of a repository file, found as repo_file finds it; "" when
// there is none (for a file handed to another program).
inline std::string repo_path(const std::string& rel) {
  namespace fs = std::filesystem;
  for (const fs::path& p : {fs::path(rel), fs::path(__FILE__).parent_path() / "../.." / rel}) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return fs::absolute(p).lexically_normal().string();
  }
  return {};
}

inline std::string repo_file(const std::string& rel) {
  namespace fs = std::filesystem;
  for (const fs::path& p : {fs::path(rel), fs::path(__FILE__).parent_path() / "../.." / rel}) {
    std::ifstream in(p);
    if (in) {
      std::ostringstream s;
      s << in.rdbuf();
      return s.str();
    }
  }
  ADD_FAILURE() << "cannot find " << rel << " (run from the repository root)";
  return {};
}

}  // namespace infertap::testing
