// The one percentile every output uses: nearest rank (docs/metrics.md).
#include "base/percentile.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace infertap::base {
namespace {

std::optional<std::uint64_t> p(std::vector<std::uint64_t> v, double q) { return percentile(std::move(v), q); }

TEST(Percentile, NearestRank) {
  EXPECT_FALSE(p({}, 50).has_value());
  EXPECT_EQ(*p({5}, 99), 5u);
  EXPECT_EQ(*p({1, 2, 3, 4}, 50), 2u);
  EXPECT_EQ(*p({4, 3, 2, 1}, 75), 3u);
  EXPECT_EQ(*p({1, 2, 3, 4}, 100), 4u);
  std::vector<std::uint64_t> hundred;
  for (std::uint64_t i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_EQ(*p(hundred, 95), 95u);
  EXPECT_EQ(*p(hundred, 99), 99u);
}

// Every sample type picks the same rank: a median of an even sample is its
// lower middle, whether it holds nanoseconds or milliseconds.
TEST(Percentile, SameRankForEverySampleType) {
  std::vector<double> ms = {4.0, 1.0, 3.0, 2.0};
  EXPECT_DOUBLE_EQ(*percentile(ms, 50), 2.0);
  EXPECT_DOUBLE_EQ(*percentile_in_place(ms, 95), 4.0);
  EXPECT_EQ(nearest_rank_index(4, 50), 1u);
  EXPECT_EQ(nearest_rank_index(4, 0.1), 0u);
  EXPECT_EQ(nearest_rank_index(1000, 99), 989u);
}

}  // namespace
}  // namespace infertap::base
