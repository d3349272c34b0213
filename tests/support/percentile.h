// Percentiles of timing errors for the ground-truth tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace infertap::testing {

// Nearest-rank percentile (p in 0..100) of the absolute values; 0 when empty.
inline std::int64_t percentile_abs(std::vector<std::int64_t> v, double p) {
  if (v.empty()) return 0;
  for (auto& x : v) x = std::llabs(x);
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace infertap::testing
