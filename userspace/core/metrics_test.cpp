#include <gtest/gtest.h>

#include "core/metrics.h"

namespace infertap::core {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

StreamRecord record_with_tokens(std::initializer_list<std::uint64_t> token_times_ms, std::uint64_t request_end_ms) {
  StreamRecord r;
  r.request_end_ns = request_end_ms * kMs;
  for (std::uint64_t t : token_times_ms) {
    TimelineEvent e;
    e.ts_ns = t * kMs;
    e.kind = protocol::EventKind::content;
    r.timeline.push_back(e);
    r.last_event_ns = e.ts_ns;
  }
  return r;
}

TEST(Metrics, TtftItlRateAndE2eFollowTheirDefinitions) {
  StreamRecord r = record_with_tokens({110, 120, 140, 150}, 100);
  TimelineEvent done;
  done.ts_ns = 160 * kMs;
  done.kind = protocol::EventKind::done;
  r.timeline.push_back(done);
  r.last_event_ns = done.ts_ns;
  r.metrics = record_metrics(r, std::nullopt, PipelineConfig{});
  EXPECT_EQ(*r.metrics.ttft_ns, 10 * kMs);
  EXPECT_EQ(*r.metrics.e2e_ns, 60 * kMs);
  EXPECT_EQ(r.metrics.tokens, 4u);
  EXPECT_EQ(r.metrics.token_source, core::TokenSource::events);
  EXPECT_EQ(r.metrics.events, 5u);
  EXPECT_EQ(r.metrics.content_events, 4u);
  EXPECT_EQ(*r.metrics.itl_p50_ns, 10 * kMs);  // gaps 10, 20, 10
  EXPECT_EQ(*r.metrics.itl_max_ns, 20 * kMs);
  EXPECT_NEAR(*r.metrics.tokens_per_s, 3.0 / 0.040, 1e-9);
}

TEST(Metrics, UsageTokensScaleTheRateByEventShare) {
  StreamRecord r = record_with_tokens({0, 100}, 0);
  r.metrics = record_metrics(r, 10, PipelineConfig{});  // 10 tokens in 2 events: 5 after the first
  EXPECT_EQ(r.metrics.tokens, 10u);
  EXPECT_EQ(r.metrics.token_source, core::TokenSource::usage);
  EXPECT_NEAR(*r.metrics.tokens_per_s, 5.0 / 0.1, 1e-9);
}

TEST(Metrics, SingleTokenHasNoRateNorItl) {
  StreamRecord r = record_with_tokens({50}, 0);
  r.metrics = record_metrics(r, std::nullopt, PipelineConfig{});
  EXPECT_FALSE(r.metrics.tokens_per_s.has_value());
  EXPECT_FALSE(r.metrics.itl_p50_ns.has_value());
  EXPECT_TRUE(r.metrics.stalls.empty());
}

TEST(Metrics, StallThresholdIsRelativeAboveTheFloor) {
  PipelineConfig config;
  config.stall_floor_ns = 10 * kMs;
  config.stall_ratio = 3.0;
  // Median gap 40 ms -> threshold 120 ms; the 130 ms gap is a stall, 100 ms is not.
  StreamRecord r = record_with_tokens({0, 40, 80, 180, 220, 350, 390}, 0);
  r.metrics = record_metrics(r, std::nullopt, config);
  EXPECT_EQ(r.metrics.stall_threshold_ns, 120 * kMs);
  ASSERT_EQ(r.metrics.stalls.size(), 1u);
  EXPECT_EQ(r.metrics.stalls[0].gap_ns, 130 * kMs);
  EXPECT_EQ(r.metrics.stalls[0].start_ns, 220 * kMs);
}

TEST(Metrics, JoinedStreamHasNoTtftOrE2e) {
  StreamRecord r = record_with_tokens({110, 120}, 100);
  r.joined_midstream = true;
  r.metrics = record_metrics(r, std::nullopt, PipelineConfig{});
  EXPECT_FALSE(r.metrics.ttft_ns.has_value());
  EXPECT_FALSE(r.metrics.e2e_ns.has_value());
  EXPECT_EQ(*r.metrics.itl_p50_ns, 10 * kMs);
}

}  // namespace
}  // namespace infertap::core
