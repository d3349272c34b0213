// The one percentile of the product (docs/metrics.md): nearest rank. The
// value at rank ceil(p/100 x n) of the sorted sample, 1-based; p in (0, 100].
// p50 of {1, 2, 3, 4} is 2, p100 the maximum. Every percentile a record, the
// query API, Prometheus or the degradation engine reports is this one, so
// `infertap stats` and an alert never disagree over the same streams.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <vector>

namespace infertap::base {

// Index into the sorted sample of size n (n > 0) that holds percentile p.
inline std::size_t nearest_rank_index(std::size_t n, double p) {
  const double rank = std::ceil(p / 100.0 * static_cast<double>(n));
  const std::size_t index = rank < 1 ? 0 : static_cast<std::size_t>(rank) - 1;
  return std::min(index, n - 1);
}

// Percentile p of an unsorted sample (reordered in place); nullopt when empty.
template <class T>
std::optional<T> percentile_in_place(std::vector<T>& sample, double p) {
  if (sample.empty()) return std::nullopt;
  const std::size_t index = nearest_rank_index(sample.size(), p);
  std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(index), sample.end());
  return sample[index];
}

template <class T>
std::optional<T> percentile(std::vector<T> sample, double p) {
  return percentile_in_place(sample, p);
}

}  // namespace infertap::base
