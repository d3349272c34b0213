// Degraded-stream detection with a fake clock: every rule of
// docs/degradation.md, the record adapter, the configuration section, the
// alert records, the `alerts` API command and the cohort gauge.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "core/metrics.h"
#include "daemon/api.h"
#include "daemon/config.h"
#include "output/prometheus/metrics.h"
#include "degrade/engine.h"
#include "degrade/monitor.h"
#include "degrade/render.h"

namespace infertap::degrade {
namespace {

using json = nlohmann::json;
constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kS = 1'000'000'000;

// A healthy stream of the chat cohort: 100 tokens at 50 tokens/s.
Observation healthy(std::string model = "llama-8b") {
  Observation o;
  o.model = std::move(model);
  o.route = "/v1/chat/completions";
  o.process = "vllm";
  o.container = "(host)";
  o.vantage = Vantage::server_emit;
  o.output_tokens = 100;
  o.ttft_ns = 150 * kMs;
  o.tokens_per_s = 50;
  o.itl_p95_ns = 25 * kMs;
  o.itl_p99_ns = 30 * kMs;
  o.longest_pause_ns = 40 * kMs;
  o.decode_ns = 2 * kS;
  o.client_addr = "10.0.0.1";
  return o;
}

// Half the token rate, double the gaps: what --slow-factor 2 does.
Observation slow(std::string model = "llama-8b") {
  Observation o = healthy(std::move(model));
  o.tokens_per_s = 10;
  o.itl_p95_ns = 100 * kMs;
  o.itl_p99_ns = 120 * kMs;
  o.longest_pause_ns = 150 * kMs;
  return o;
}

DegradationConfig test_config() {
  DegradationConfig c;
  c.window_s = 10;
  c.min_streams = 5;
  c.enter_windows = 3;
  c.exit_windows = 2;
  c.breach_share = 0.25;
  c.recovery_share = 0.10;
  c.stale_windows = 4;
  c.warmup_windows = 3;
  c.history_windows = 10;
  Objective chat;
  chat.name = "chat";
  chat.route = "/v1/chat/*";
  chat.limit[static_cast<std::size_t>(Metric::tokens_per_s)] = 20;
  chat.limit[static_cast<std::size_t>(Metric::longest_pause)] = 500;
  c.objectives.push_back(chat);
  c.abuse.enabled = false;
  return c;
}

// Drives an engine window by window with a fake clock.
class Harness {
 public:
  explicit Harness(DegradationConfig c) : engine_(std::move(c)) { engine_.tick(kT0); }

  // Streams ending inside the current window, spread over it.
  void feed(const std::vector<Observation>& streams) {
    for (std::size_t i = 0; i < streams.size(); ++i) {
      Observation o = streams[i];
      o.end_ns = window_start() + (i + 1) * (10 * kS) / (streams.size() + 2);
      engine_.observe(o);
    }
  }
  void feed(std::size_t n, const Observation& o) { feed(std::vector<Observation>(n, o)); }
  // n streams of which `bad` are slow.
  void mix(std::size_t n, std::size_t bad, const Observation& good = healthy(), const Observation& b = slow()) {
    std::vector<Observation> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(i < bad ? b : good);
    feed(v);
  }
  // Closes the current window; returns the alerts it produced.
  std::vector<Alert> close() {
    ++window_;
    engine_.tick(window_start());
    auto alerts = engine_.take_alerts();
    all_.insert(all_.end(), alerts.begin(), alerts.end());
    return alerts;
  }
  core::TimestampNs window_start() const { return kT0 + window_ * 10 * kS; }
  Engine& engine() { return engine_; }
  const std::vector<Alert>& all() const { return all_; }

  static constexpr core::TimestampNs kT0 = 5'000 * kS;

 private:
  Engine engine_;
  std::uint64_t window_ = 0;
  std::vector<Alert> all_;
};

TEST(Degrade, SingleSlowStreamDoesNotAlert) {
  Harness h(test_config());
  for (int w = 0; w < 12; ++w) {
    h.mix(10, 1);  // one slow stream in ten: 10% < breach share 25%
    EXPECT_TRUE(h.close().empty()) << "window " << w;
  }
  // One very slow stream alone in an otherwise healthy window, too.
  std::vector<Observation> v(10, healthy());
  v[3].tokens_per_s = 0.5;
  v[3].longest_pause_ns = 30 * kS;
  h.feed(v);
  EXPECT_TRUE(h.close().empty());
  EXPECT_TRUE(h.all().empty());
  EXPECT_TRUE(h.engine().active_alerts().empty());
}

TEST(Degrade, SustainedBreachAlertsOnceAfterTheWindow) {
  Harness h(test_config());
  for (int w = 0; w < 3; ++w) {
    h.mix(10, 0);
    ASSERT_TRUE(h.close().empty());
  }
  const core::TimestampNs breach_start = h.window_start();
  h.mix(10, 8);
  EXPECT_TRUE(h.close().empty()) << "one breached window is not persistent";
  h.mix(10, 8);
  EXPECT_TRUE(h.close().empty()) << "two breached windows are not persistent";
  h.mix(10, 8);
  const auto alerts = h.close();
  ASSERT_EQ(alerts.size(), 1u) << "the third consecutive breached window enters degraded";
  const Alert& a = alerts[0];
  EXPECT_TRUE(a.degraded);
  EXPECT_EQ(a.cohort.model, "llama-8b");
  EXPECT_EQ(a.cohort.route, "/v1/chat/completions");
  EXPECT_EQ(a.cohort.vantage, Vantage::server_emit);
  EXPECT_EQ(a.cohort.length_class, "medium");
  EXPECT_EQ(a.objective, "chat");
  EXPECT_EQ(a.since_ns, breach_start);
  EXPECT_EQ(a.ts_ns, h.window_start());
  EXPECT_EQ(a.windows, 3u);
  EXPECT_EQ(a.streams, 10u);
  EXPECT_DOUBLE_EQ(a.affected_share, 0.8);
  EXPECT_EQ(a.layer, Layer::serving);
  ASSERT_FALSE(a.evidence.empty());
  const Evidence& rate = a.evidence[0];
  EXPECT_EQ(rate.metric, Metric::tokens_per_s);
  EXPECT_EQ(rate.reference, "objective+baseline");
  EXPECT_DOUBLE_EQ(rate.observed, 10);
  EXPECT_DOUBLE_EQ(*rate.objective, 20);
  EXPECT_DOUBLE_EQ(*rate.baseline, 50);
  EXPECT_EQ(rate.streams, 10u);
  EXPECT_EQ(rate.affected, 8u);
  // Tail-aware: ITL p95/p99 breach the learned baseline by more than 1.5x too.
  bool itl = false;
  for (const Evidence& e : a.evidence) itl = itl || e.metric == Metric::itl_p99;
  EXPECT_TRUE(itl);

  for (int w = 0; w < 6; ++w) {
    h.mix(10, 8);
    EXPECT_TRUE(h.close().empty()) << "still degraded: no second alert";
  }
  EXPECT_EQ(h.engine().active_alerts().size(), 1u);
}

TEST(Degrade, RecoveryClearsOnceWithHysteresis) {
  Harness h(test_config());
  for (int w = 0; w < 3; ++w) h.mix(10, 10), h.close();
  ASSERT_EQ(h.all().size(), 1u);
  const std::uint64_t id = h.all()[0].id;

  // 20% affected: below the breach share but above the recovery share: holds.
  for (int w = 0; w < 5; ++w) {
    h.mix(10, 2);
    EXPECT_TRUE(h.close().empty()) << "between the shares the cohort stays degraded";
  }
  // Alternating healthy / in-between windows never accumulate two healthy ones.
  for (int w = 0; w < 4; ++w) {
    h.mix(10, w % 2 == 0 ? 0 : 2);
    EXPECT_TRUE(h.close().empty());
  }
  h.mix(10, 0);
  EXPECT_TRUE(h.close().empty()) << "one healthy window is not a recovery";
  h.mix(10, 0);
  const auto rec = h.close();
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_FALSE(rec[0].degraded);
  EXPECT_EQ(rec[0].reason, "healthy");
  EXPECT_EQ(rec[0].id, id);
  EXPECT_EQ(rec[0].windows, 2u);
  ASSERT_FALSE(rec[0].evidence.empty());
  EXPECT_DOUBLE_EQ(rec[0].evidence[0].observed, 50);
  EXPECT_TRUE(h.engine().active_alerts().empty());

  // Flapping around the breach share: breached, healthy, breached, ... no alert.
  for (int w = 0; w < 10; ++w) {
    h.mix(10, w % 2 == 0 ? 3 : 0);
    EXPECT_TRUE(h.close().empty()) << "window " << w;
  }
  EXPECT_EQ(h.all().size(), 2u);
}

TEST(Degrade, CohortWithTooFewStreamsStaysSilent) {
  Harness h(test_config());
  for (int w = 0; w < 10; ++w) {
    h.feed(4, slow());  // min_streams is 5
    EXPECT_TRUE(h.close().empty());
  }
  const auto cohorts = h.engine().cohorts();
  ASSERT_EQ(cohorts.size(), 1u);
  EXPECT_NE(cohorts[0].state, CohortState::degraded);
  EXPECT_EQ(cohorts[0].last_streams, 4u);
}

TEST(Degrade, BreachInOneCohortDoesNotLeakIntoAnother) {
  Harness h(test_config());
  Observation other_route = healthy();
  other_route.route = "/v1/completions";
  Observation short_one = healthy();
  short_one.output_tokens = 10;
  for (int w = 0; w < 5; ++w) {
    std::vector<Observation> v(10, slow("llama-8b"));
    v.insert(v.end(), 10, healthy("qwen-32b"));
    v.insert(v.end(), 10, other_route);
    v.insert(v.end(), 10, short_one);
    h.feed(v);
    h.close();
  }
  ASSERT_EQ(h.all().size(), 1u);
  EXPECT_EQ(h.all()[0].cohort.model, "llama-8b");
  EXPECT_EQ(h.all()[0].cohort.route, "/v1/chat/completions");
  EXPECT_EQ(h.all()[0].cohort.length_class, "medium");
  int degraded = 0;
  for (const CohortStatus& c : h.engine().cohorts()) degraded += c.state == CohortState::degraded;
  EXPECT_EQ(degraded, 1);
  EXPECT_EQ(h.engine().cohorts().size(), 4u);
}

TEST(Degrade, BaselineWarmsUpThenCatchesARegressionNoObjectiveDoes) {
  DegradationConfig c = test_config();
  c.objectives.clear();  // baseline only
  Harness h(c);
  // Warm-up: windows 1 and 2 learned; a halved rate now has nothing to compare with.
  Observation half = healthy();
  half.tokens_per_s = 25;
  h.mix(10, 0);
  h.close();
  h.mix(10, 0);
  h.close();
  ASSERT_EQ(h.engine().cohorts()[0].state, CohortState::warming_up);
  // The third window, with one outlier among ten, completes the warm-up: the
  // median of window medians ignores the outlier.
  h.mix(10, 1, healthy(), [] { Observation o = healthy(); o.tokens_per_s = 1; return o; }());
  h.close();
  const auto cohorts = h.engine().cohorts();
  ASSERT_EQ(cohorts.size(), 1u);
  EXPECT_EQ(cohorts[0].state, CohortState::healthy);
  ASSERT_TRUE(cohorts[0].baseline[static_cast<std::size_t>(Metric::tokens_per_s)]);
  EXPECT_DOUBLE_EQ(*cohorts[0].baseline[static_cast<std::size_t>(Metric::tokens_per_s)], 50);
  ASSERT_TRUE(cohorts[0].baseline[static_cast<std::size_t>(Metric::ttft)]);
  EXPECT_DOUBLE_EQ(*cohorts[0].baseline[static_cast<std::size_t>(Metric::ttft)], 150);

  for (int w = 0; w < 3; ++w) h.feed(10, half), h.close();
  ASSERT_EQ(h.all().size(), 1u);
  const Alert& a = h.all()[0];
  EXPECT_EQ(a.objective, "");
  ASSERT_EQ(a.evidence.size(), 1u) << "only the decode rate moved; TTFT stays healthy";
  EXPECT_EQ(a.evidence[0].metric, Metric::tokens_per_s);
  EXPECT_EQ(a.evidence[0].reference, "baseline");
  EXPECT_FALSE(a.evidence[0].objective);
  EXPECT_DOUBLE_EQ(*a.evidence[0].baseline, 50);
  EXPECT_DOUBLE_EQ(a.evidence[0].observed, 25);
  // The regression is not learned as the new normal.
  EXPECT_DOUBLE_EQ(*h.engine().cohorts()[0].baseline[static_cast<std::size_t>(Metric::tokens_per_s)], 50);
}

TEST(Degrade, TtftAndDecodePhasesAreJudgedSeparately) {
  DegradationConfig c = test_config();
  c.objectives[0].limit[static_cast<std::size_t>(Metric::ttft)] = 500;
  Harness h(c);
  Observation slow_start = healthy();
  slow_start.ttft_ns = 2 * kS;  // the decode phase is healthy
  for (int w = 0; w < 3; ++w) h.feed(10, slow_start), h.close();
  ASSERT_EQ(h.all().size(), 1u);
  ASSERT_EQ(h.all()[0].evidence.size(), 1u);
  EXPECT_EQ(h.all()[0].evidence[0].metric, Metric::ttft);
  EXPECT_EQ(phase_of(h.all()[0].evidence[0].metric), "ttft");
}

TEST(Degrade, LongestPauseBreachesWhileTheMeanRateLooksFine) {
  Harness h(test_config());
  Observation paused = healthy();
  paused.longest_pause_ns = 900 * kMs;  // rate still 50 tokens/s, one visible stall
  paused.stall_causes = {{"gateway_buffering", 1}};
  for (int w = 0; w < 3; ++w) h.mix(10, 4, healthy(), paused), h.close();
  ASSERT_EQ(h.all().size(), 1u);
  const Alert& a = h.all()[0];
  ASSERT_EQ(a.evidence.size(), 1u);
  EXPECT_EQ(a.evidence[0].metric, Metric::longest_pause);
  EXPECT_EQ(a.evidence[0].reference, "objective");
  EXPECT_DOUBLE_EQ(a.evidence[0].affected_share, 0.4);
  EXPECT_DOUBLE_EQ(a.evidence[0].worst, 900);
  EXPECT_EQ(a.dominant_stall_cause, "gateway_buffering");
  EXPECT_EQ(a.stall_causes.at("gateway_buffering"), 12u);
}

TEST(Degrade, MaterialityFloorIgnoresTinyBreaches) {
  DegradationConfig c = test_config();
  c.rate_floor_tokens_per_s = 2;
  Harness h(c);
  Observation barely = healthy();
  barely.tokens_per_s = 19;  // 1 token/s under the objective: below the floor
  for (int w = 0; w < 6; ++w) h.feed(10, barely), h.close();
  EXPECT_TRUE(h.all().empty());
}

TEST(Degrade, LayerDeliveryPathWhenOnlyTheClientSideIsSlow) {
  Harness h(test_config());
  Observation client_ok = healthy();
  client_ok.vantage = Vantage::client_observed;
  client_ok.process = "python3";
  client_ok.client_addr.clear();
  Observation client_slow = slow();
  client_slow.vantage = Vantage::client_observed;
  client_slow.process = "python3";
  client_slow.client_addr.clear();
  for (int w = 0; w < 3; ++w) {
    std::vector<Observation> v(10, healthy());
    v.insert(v.end(), 10, client_slow);
    h.feed(v);
    h.close();
  }
  ASSERT_EQ(h.all().size(), 1u);
  EXPECT_EQ(h.all()[0].cohort.vantage, Vantage::client_observed);
  EXPECT_EQ(h.all()[0].layer, Layer::delivery_path);

  // Both sides slow: serving, one alert per vantage.
  Harness both(test_config());
  for (int w = 0; w < 3; ++w) {
    std::vector<Observation> v(10, slow());
    v.insert(v.end(), 10, client_slow);
    both.feed(v);
    both.close();
  }
  ASSERT_EQ(both.all().size(), 2u);
  for (const Alert& a : both.all()) EXPECT_EQ(a.layer, Layer::serving) << to_string(a.cohort.vantage);

  // Client slow with no server-emit counterpart on this host: undetermined.
  Harness alone(test_config());
  for (int w = 0; w < 3; ++w) alone.feed(10, client_slow), alone.close();
  ASSERT_EQ(alone.all().size(), 1u);
  EXPECT_EQ(alone.all()[0].layer, Layer::undetermined);
}

TEST(Degrade, LayerDeliveryPathBehindABufferingGateway) {
  // The inference server emits on time; a gateway on the host emits late (its
  // own server-emit cohort) and its client observes it late.
  Harness h(test_config());
  Observation gateway = slow();
  gateway.process = "nginx";
  Observation client = slow();
  client.vantage = Vantage::client_observed;
  client.process = "curl";
  for (int w = 0; w < 3; ++w) {
    std::vector<Observation> v(10, healthy());
    v.insert(v.end(), 10, gateway);
    v.insert(v.end(), 10, client);
    h.feed(v);
    h.close();
  }
  ASSERT_EQ(h.all().size(), 2u);
  for (const Alert& a : h.all()) {
    EXPECT_NE(a.cohort.process, "vllm");
    EXPECT_EQ(a.layer, Layer::delivery_path) << a.cohort.process;
  }
}

// The client-observed view a server record's delivery gives (same identity,
// no client address), its last token delivered `lag_ms` after its emit.
Observation delivered(double lag_ms) {
  Observation o = healthy();
  o.vantage = Vantage::client_observed;
  o.client_addr.clear();
  o.delivery_lag_ns = static_cast<std::uint64_t>(lag_ms * 1e6);
  return o;
}

DegradationConfig lag_config() {
  DegradationConfig c = test_config();
  c.objectives[0].limit[static_cast<std::size_t>(Metric::delivery_lag)] = 500;
  return c;
}

// Seed 000's "consumer read rate": the server emits on time, its clients read
// slower and slower. The client-observed cohort alerts once after the
// persistence window, on the delivery path, and recovers like any other.
TEST(Degrade, LaggingClientsAlertOnTheDeliveryPathAndRecover) {
  Harness h(lag_config());
  for (int w = 0; w < 2; ++w) {
    std::vector<Observation> v(10, healthy());
    v.insert(v.end(), 10, delivered(1));
    h.feed(v);
    ASSERT_TRUE(h.close().empty());
  }
  for (int w = 0; w < 3; ++w) {
    std::vector<Observation> v(10, healthy());  // the server's own view: on time
    for (int i = 0; i < 10; ++i) v.push_back(delivered(i < 7 ? 900 : 2));
    h.feed(v);
    const auto alerts = h.close();
    if (w < 2) EXPECT_TRUE(alerts.empty()) << "window " << w;
  }
  ASSERT_EQ(h.all().size(), 1u);
  const Alert a = h.all()[0];
  EXPECT_TRUE(a.degraded);
  EXPECT_EQ(a.cohort.vantage, Vantage::client_observed);
  EXPECT_EQ(a.cohort.process, "vllm");
  EXPECT_EQ(a.layer, Layer::delivery_path);
  ASSERT_EQ(a.evidence.size(), 1u) << "decode and TTFT are healthy";
  EXPECT_EQ(a.evidence[0].metric, Metric::delivery_lag);
  EXPECT_EQ(phase_of(a.evidence[0].metric), "delivery");
  EXPECT_EQ(a.evidence[0].reference, "objective");
  EXPECT_DOUBLE_EQ(a.evidence[0].observed, 900);
  EXPECT_DOUBLE_EQ(*a.evidence[0].objective, 500);
  EXPECT_DOUBLE_EQ(a.evidence[0].affected_share, 0.7);
  EXPECT_EQ(a.windows, 3u);
  // They catch up: recovered after exit_windows healthy windows, same id.
  for (int w = 0; w < 2; ++w) {
    std::vector<Observation> v(10, healthy());
    v.insert(v.end(), 10, delivered(1));
    h.feed(v);
    h.close();
  }
  ASSERT_EQ(h.all().size(), 2u);
  EXPECT_FALSE(h.all()[1].degraded);
  EXPECT_EQ(h.all()[1].id, a.id);
  EXPECT_EQ(h.all()[1].reason, "healthy");
  EXPECT_TRUE(h.engine().active_alerts().empty());

  // With no server-emit cohort judged on this host, a lag breach is still the path's.
  Harness alone(lag_config());
  for (int w = 0; w < 3; ++w) alone.feed(10, delivered(900)), alone.close();
  ASSERT_EQ(alone.all().size(), 1u);
  EXPECT_EQ(alone.all()[0].layer, Layer::delivery_path);
}

// Fast readers: lags of a fraction of a millisecond, and up to the 40 ms of a
// delayed ACK at the last hop for many streams; no objective breached, and
// against their own baseline they stay under the lag floor. No alert, ever.
TEST(Degrade, FastReadersNeverAlertOnLag) {
  Harness h(lag_config());
  for (int w = 0; w < 30; ++w) {
    std::vector<Observation> v(10, healthy());
    for (int i = 0; i < 10; ++i) v.push_back(delivered(w % 2 == 0 ? 0.05 + 0.01 * i : (i < 6 ? 40 : 0.2)));
    h.feed(v);
    EXPECT_TRUE(h.close().empty()) << "window " << w;
  }
  EXPECT_TRUE(h.all().empty());
  for (const CohortStatus& c : h.engine().cohorts()) {
    if (c.key.vantage == Vantage::client_observed) {
      EXPECT_TRUE(c.baseline[static_cast<std::size_t>(Metric::delivery_lag)]) << "learned from healthy windows";
    } else {
      EXPECT_FALSE(c.baseline[static_cast<std::size_t>(Metric::delivery_lag)]) << "the server's view has no lag";
    }
  }
}

// Against a learned baseline the lag needs the ratio and the lag floor:
// 60 ms over a 1 ms baseline is not material (delayed ACKs look like that),
// 300 ms is.
TEST(Degrade, LagAgainstItsBaselineNeedsTheLagFloor) {
  Harness h(test_config());  // no lag objective: the baseline alone
  for (int w = 0; w < 4; ++w) h.feed(10, delivered(1)), h.close();
  ASSERT_TRUE(h.engine().cohorts()[0].baseline[static_cast<std::size_t>(Metric::delivery_lag)]);
  for (int w = 0; w < 4; ++w) h.feed(10, delivered(60)), h.close();
  EXPECT_TRUE(h.all().empty());
  for (int w = 0; w < 3; ++w) h.feed(10, delivered(300)), h.close();
  ASSERT_EQ(h.all().size(), 1u);
  EXPECT_EQ(h.all()[0].evidence[0].metric, Metric::delivery_lag);
  EXPECT_EQ(h.all()[0].evidence[0].reference, "baseline");
  EXPECT_EQ(h.all()[0].layer, Layer::delivery_path);
}

TEST(Degrade, DegradedCohortWithoutTrafficRecoversAsNoTraffic) {
  Harness h(test_config());
  for (int w = 0; w < 3; ++w) h.feed(10, slow()), h.close();
  ASSERT_EQ(h.all().size(), 1u);
  for (int w = 0; w < 3; ++w) EXPECT_TRUE(h.close().empty());
  const auto rec = h.close();  // stale_windows = 4
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].reason, "no_traffic");
  // A long silence (one tick far ahead) stays bounded and quiet.
  h.engine().tick(h.window_start() + 1'000'000 * kS);
  EXPECT_TRUE(h.engine().take_alerts().empty());
}

TEST(Degrade, LengthClassesSplitCohorts) {
  Engine e(test_config());
  EXPECT_EQ(e.length_class_of(0), "short");
  EXPECT_EQ(e.length_class_of(63), "short");
  EXPECT_EQ(e.length_class_of(64), "medium");
  EXPECT_EQ(e.length_class_of(511), "medium");
  EXPECT_EQ(e.length_class_of(512), "long");
  EXPECT_EQ(e.length_class_of(1'000'000), "long");
}

TEST(Degrade, CohortTableIsBounded) {
  DegradationConfig c = test_config();
  c.max_cohorts = 3;
  Harness h(c);
  h.feed({healthy("a"), healthy("b"), healthy("c"), healthy("d")});
  EXPECT_EQ(h.engine().cohorts().size(), 3u);
  EXPECT_EQ(h.engine().counters().cohorts_refused, 1u) << "all three have streams in this window";
  h.close();
  h.feed({healthy("d")});
  EXPECT_EQ(h.engine().cohorts().size(), 3u);
  EXPECT_EQ(h.engine().counters().cohorts_evicted, 1u);
}

TEST(Degrade, AbuseSignalWhenOneClientHoldsMostDecodeTime) {
  DegradationConfig c = test_config();
  c.abuse.enabled = true;
  Harness h(c);
  const auto from = [](const std::string& client, std::uint64_t decode_s) {
    Observation o = healthy();
    o.client_addr = client;
    o.decode_ns = decode_s * kS;
    o.output_tokens = 50 * decode_s;
    return o;
  };
  const auto window = [&](bool hog) {
    std::vector<Observation> v;
    for (int i = 0; i < 6; ++i) v.push_back(from("10.0.0.66", hog ? 8 : 2));
    for (int i = 0; i < 3; ++i) v.push_back(from("10.0.0.1", 2));
    for (int i = 0; i < 3; ++i) v.push_back(from("10.0.0.2", 2));
    h.feed(v);
    h.close();
    return h.engine().take_abuse();
  };
  EXPECT_TRUE(window(true).empty()) << "one window over the share is not enough";
  auto signals = window(true);
  ASSERT_EQ(signals.size(), 1u);
  const AbuseSignal s = signals[0];
  EXPECT_TRUE(s.active);
  EXPECT_EQ(s.client, "10.0.0.66");
  EXPECT_EQ(s.process, "vllm");
  EXPECT_NEAR(s.decode_share, 48.0 / 60.0, 1e-9);
  EXPECT_EQ(s.streams, 6u);
  EXPECT_EQ(s.tokens, 6u * 400);
  EXPECT_EQ(s.clients, 3u);
  EXPECT_EQ(s.windows, 2u);
  EXPECT_TRUE(window(true).empty()) << "no repeat while active";
  EXPECT_EQ(h.engine().active_abuse().size(), 1u);
  // 12/24 = 50%: between the release share and the share: stays active.
  EXPECT_TRUE(window(false).empty());
  EXPECT_TRUE(window(false).empty());
  EXPECT_EQ(h.engine().active_abuse().size(), 1u);
  // The client goes quiet: cleared after two windows, once.
  const auto quiet = [&] {
    std::vector<Observation> v;
    for (int i = 0; i < 3; ++i) v.push_back(from("10.0.0.1", 2));
    for (int i = 0; i < 3; ++i) v.push_back(from("10.0.0.2", 2));
    h.feed(v);
    h.close();
    return h.engine().take_abuse();
  };
  EXPECT_TRUE(quiet().empty());
  signals = quiet();
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_FALSE(signals[0].active);
  EXPECT_EQ(signals[0].id, s.id);
  EXPECT_TRUE(quiet().empty());
  EXPECT_TRUE(h.engine().active_abuse().empty());
}

TEST(Degrade, AbuseNeedsSeveralClients) {
  DegradationConfig c = test_config();
  c.abuse.enabled = true;
  Harness h(c);
  for (int w = 0; w < 5; ++w) {
    h.feed(10, healthy());  // one client holds 100%: the only client of a gateway, say
    h.close();
    EXPECT_TRUE(h.engine().take_abuse().empty());
  }
}

// ------------------------------------------------------------------ adapter

core::StreamRecord stream_record(core::Role role) {
  core::StreamRecord r;
  r.conn.comm = role == core::Role::server ? "vllm" : "python3";
  r.conn.cgroup_path = "/system.slice/vllm.service";
  r.conn.remote.family = AF_INET;
  r.conn.remote.port = 51234;
  inet_pton(AF_INET, "10.1.2.3", r.conn.remote.addr.data());
  r.role = role;
  r.path = "/v1/chat/completions?stream=1";
  r.model = "llama-8b";
  r.status = 200;
  r.request_start_ns = 1000 * kMs;
  r.request_end_ns = 1001 * kMs;
  std::uint64_t t = r.request_end_ns + 100 * kMs;
  for (int i = 0; i < 10; ++i) {
    core::TimelineEvent e;
    e.ts_ns = e.first_byte_ns = t;
    e.kind = protocol::EventKind::content;
    r.timeline.push_back(e);
    t += (i == 5 ? 400 : 20) * kMs;
  }
  r.first_token_ns = r.timeline.front().ts_ns;
  r.last_token_ns = r.last_event_ns = r.timeline.back().ts_ns;
  r.end_ns = r.last_event_ns + kMs;
  r.metrics = core::record_metrics(r, std::nullopt, core::PipelineConfig{});
  return r;
}

TEST(DegradeAdapter, ServerRecordIsServerEmitWithItsClientAddress) {
  const core::StreamRecord r = stream_record(core::Role::server);
  const auto obs = observations_from(r);
  ASSERT_EQ(obs.size(), 1u);
  const Observation& o = obs[0];
  EXPECT_EQ(o.vantage, Vantage::server_emit);
  EXPECT_EQ(o.model, "llama-8b");
  EXPECT_EQ(o.route, "/v1/chat/completions");
  EXPECT_EQ(o.process, "vllm");
  EXPECT_EQ(o.container, "vllm.service");
  EXPECT_EQ(o.client_addr, "10.1.2.3");
  EXPECT_EQ(o.output_tokens, 10u);
  EXPECT_EQ(*o.ttft_ns, 100 * kMs);
  EXPECT_EQ(o.decode_ns, 8 * 20 * kMs + 400 * kMs);
  EXPECT_EQ(*o.longest_pause_ns, 400 * kMs);
  ASSERT_TRUE(o.tokens_per_s);
  EXPECT_EQ(o.end_ns, r.end_ns);
  EXPECT_EQ(o.stall_causes.at("none"), 1u) << "the record's own name: nothing on the path decided it";
}

TEST(DegradeAdapter, ClientRecordIsClientObserved) {
  const auto obs = observations_from(stream_record(core::Role::client));
  ASSERT_EQ(obs.size(), 1u);
  EXPECT_EQ(obs[0].vantage, Vantage::client_observed);
  EXPECT_TRUE(obs[0].client_addr.empty());
}

TEST(DegradeAdapter, DeliveryMetricsAddAClientObservedView) {
  DeliveryMetrics d;
  d.ttft_ns = 900 * kMs;
  d.tokens_per_s = 12;
  d.decode_ns = 3 * kS;
  d.stall_causes = {{"backpressure", 2}};
  const auto obs = observations_from(stream_record(core::Role::server), d);
  ASSERT_EQ(obs.size(), 2u);
  EXPECT_EQ(obs[0].vantage, Vantage::server_emit);
  EXPECT_EQ(obs[1].vantage, Vantage::client_observed);
  EXPECT_EQ(obs[1].process, "vllm");
  EXPECT_EQ(*obs[1].ttft_ns, 900 * kMs);
  EXPECT_EQ(*obs[1].tokens_per_s, 12);
  EXPECT_FALSE(obs[1].itl_p95_ns);
  EXPECT_EQ(obs[1].stall_causes.at("backpressure"), 2u);
  EXPECT_TRUE(obs[1].client_addr.empty()) << "abuse accounting counts the server view only";
}

TEST(DegradeAdapter, DeliveryLagReachesTheClientObservedView) {
  core::StreamRecord r = stream_record(core::Role::server);
  core::PathView view;
  view.delivery.emplace();
  view.delivery->metrics = r.metrics;
  view.delivery->lag_last_ns = 350 * kMs;
  r.path_view = std::make_shared<const core::PathView>(std::move(view));
  const auto obs = observations_from(r, delivery_of(r));
  ASSERT_EQ(obs.size(), 2u);
  EXPECT_FALSE(obs[0].delivery_lag_ns) << "the server's own view has no lag";
  EXPECT_EQ(obs[1].vantage, Vantage::client_observed);
  EXPECT_EQ(*obs[1].delivery_lag_ns, 350 * kMs);
  EXPECT_DOUBLE_EQ(*metric_values(obs[1])[static_cast<std::size_t>(Metric::delivery_lag)], 350);
}

TEST(DegradeAdapter, ALowerBoundCountGivesNoRate) {
  core::StreamRecord r = stream_record(core::Role::server);
  r.bytes_not_captured = 300;  // a capture hole: the event count is a lower bound
  r.metrics = core::record_metrics(r, std::nullopt, core::PipelineConfig{});
  const auto obs = observations_from(r);
  ASSERT_EQ(obs.size(), 1u);
  EXPECT_FALSE(obs[0].tokens_per_s) << "the cohort judges no rate from undercounted tokens";
  EXPECT_FALSE(metric_values(obs[0])[static_cast<std::size_t>(Metric::tokens_per_s)]);
  EXPECT_TRUE(obs[0].ttft_ns) << "its times are still judged";
}

TEST(DegradeAdapter, UnjudgeableRecordsGiveNothing) {
  core::StreamRecord error = stream_record(core::Role::server);
  error.status = 500;
  EXPECT_TRUE(observations_from(error).empty());
  core::StreamRecord empty = stream_record(core::Role::server);
  empty.metrics.tokens = 0;
  EXPECT_TRUE(observations_from(empty).empty());
  core::StreamRecord unknown = stream_record(core::Role::unknown);
  EXPECT_TRUE(observations_from(unknown).empty());
}

// ------------------------------------------------------------------ configuration

TEST(DegradeConfig, FullSectionParses) {
  std::string error;
  const auto c = daemon::parse_config(R"(
degradation:
  window_s: 30
  min_streams: 12
  breach_share: 0.3
  recovery_share: 0.05
  enter_windows: 4
  exit_windows: 3
  stale_windows: 20
  objective_ratio: 1.1
  baseline_ratio: 2
  latency_floor_ms: 25
  lag_floor_ms: 150
  rate_floor_tokens_per_s: 3
  baseline: true
  warmup_windows: 6
  history_windows: 60
  length_classes:
    - {name: tiny, below: 32}
    - {name: rest}
  objectives:
    - name: chat
      route: /v1/chat/*
      vantage: client_observed
      ttft_ms: 800
      min_tokens_per_s: 20
      itl_p95_ms: 80
      itl_p99_ms: 150
      longest_pause_ms: 1000
      delivery_lag_ms: 400
    - name: batch
      route: /v1/batch*
      min_tokens_per_s: 5
  abuse:
    share: 0.6
    release_share: 0.4
    min_streams: 3
    min_clients: 3
)",
                                      &error);
  ASSERT_TRUE(c) << error;
  const DegradationConfig& d = c->degradation;
  EXPECT_DOUBLE_EQ(d.window_s, 30);
  EXPECT_EQ(d.min_streams, 12u);
  EXPECT_EQ(d.enter_windows, 4u);
  EXPECT_EQ(d.exit_windows, 3u);
  EXPECT_DOUBLE_EQ(d.baseline_ratio, 2);
  ASSERT_EQ(d.length_classes.size(), 2u);
  EXPECT_EQ(d.length_classes[0].name, "tiny");
  EXPECT_EQ(*d.length_classes[0].below, 32u);
  EXPECT_FALSE(d.length_classes[1].below);
  ASSERT_EQ(d.objectives.size(), 2u);
  EXPECT_EQ(d.objectives[0].name, "chat");
  EXPECT_EQ(*d.objectives[0].vantage, Vantage::client_observed);
  EXPECT_DOUBLE_EQ(*d.objectives[0].limit[static_cast<std::size_t>(Metric::ttft)], 800);
  EXPECT_DOUBLE_EQ(*d.objectives[0].limit[static_cast<std::size_t>(Metric::tokens_per_s)], 20);
  EXPECT_DOUBLE_EQ(*d.objectives[0].limit[static_cast<std::size_t>(Metric::longest_pause)], 1000);
  EXPECT_DOUBLE_EQ(*d.objectives[0].limit[static_cast<std::size_t>(Metric::delivery_lag)], 400);
  EXPECT_DOUBLE_EQ(d.lag_floor_ms, 150);
  EXPECT_FALSE(d.objectives[1].vantage);
  EXPECT_DOUBLE_EQ(d.abuse.share, 0.6);
  EXPECT_EQ(d.abuse.min_clients, 3u);
  // No section: the defaults.
  const auto defaults = daemon::parse_config("", &error);
  ASSERT_TRUE(defaults);
  EXPECT_EQ(defaults->degradation, DegradationConfig{});
}

TEST(DegradeConfig, BadValuesAreClearErrors) {
  const auto error_of = [](const std::string& yaml) {
    std::string error;
    EXPECT_FALSE(daemon::parse_config(yaml, &error)) << yaml;
    return error;
  };
  EXPECT_EQ(error_of("degradation:\n  window: 30\n"),
            "unknown key 'degradation.window' (line 2); known keys in degradation: enabled, window_s, min_streams, "
            "breach_share, recovery_share, enter_windows, exit_windows, stale_windows, objective_ratio, baseline_ratio, "
            "latency_floor_ms, lag_floor_ms, rate_floor_tokens_per_s, baseline, warmup_windows, history_windows, "
            "length_classes, concurrency_bands, input_bands, objectives, max_cohorts, recent_alerts, abuse");
  EXPECT_EQ(error_of("degradation:\n  window_s: 0\n"), "degradation.window_s: must be 0.1..86400, got 0 (line 2)");
  EXPECT_EQ(error_of("degradation:\n  min_streams: many\n"),
            "degradation.min_streams: must be an integer 1..1000000, got 'many' (line 2)");
  EXPECT_NE(error_of("degradation:\n  breach_share: 0.1\n  recovery_share: 0.2\n")
                .find("degradation.recovery_share: must be below degradation.breach_share (hysteresis)"),
            std::string::npos);
  EXPECT_EQ(error_of("degradation:\n  length_classes:\n    - {name: a, below: 10}\n    - {name: b, below: 5}\n"),
            "degradation.length_classes[1]: the last class takes every longer stream: remove its 'below' (line 4)\n"
            "degradation.length_classes[1]: below must increase from class to class (line 4)");
  EXPECT_EQ(error_of("degradation:\n  objectives:\n    - name: x\n      route: /v1/*\n"),
            "degradation.objectives[0]: sets no limit: give at least one of ttft_ms, min_tokens_per_s, itl_p95_ms, "
            "itl_p99_ms, longest_pause_ms, delivery_lag_ms (line 3)");
  EXPECT_EQ(error_of("degradation:\n  objectives:\n    - {vantage: server, ttft_ms: 5}\n"),
            "degradation.objectives[0].vantage: must be server_emit, client_observed or any, got 'server' (line 3)");
  EXPECT_NE(error_of("degradation:\n  objectives:\n    - {length_class: huge, ttft_ms: 5}\n").find("'huge'"),
            std::string::npos);
  EXPECT_EQ(error_of("degradation:\n  abuse:\n    share: 0.3\n    release_share: 0.3\n"),
            "degradation.abuse.release_share: must be below degradation.abuse.share (hysteresis) (line 3)");
  EXPECT_EQ(error_of("degradation: [1]\n"), "degradation: must be a mapping (key: value) (line 1)");
}

// ------------------------------------------------------------------ records, API, metrics

TEST(DegradeRender, AlertRecordCarriesTheEvidence) {
  Harness h(test_config());
  for (int w = 0; w < 3; ++w) h.mix(10, 10), h.close();
  ASSERT_EQ(h.all().size(), 1u);
  const output::WallClock clock(0);
  const json j = json::parse(render_alert(h.all()[0], clock, "node-1"));
  EXPECT_EQ(j["type"], "alert");
  EXPECT_EQ(j["state"], "degraded");
  EXPECT_EQ(j["host"], "node-1");
  EXPECT_EQ(j["cohort"]["vantage"], "server_emit");
  EXPECT_EQ(j["cohort"]["route"], "/v1/chat/completions");
  EXPECT_EQ(j["layer"], "serving");
  EXPECT_EQ(j["window_s"], 10.0);
  EXPECT_EQ(j["windows"], 3);
  EXPECT_EQ(j["streams"], 10);
  EXPECT_EQ(j["affected_share"], 1.0);
  EXPECT_TRUE(j["dominant_stall_cause"].is_null());
  ASSERT_TRUE(j["evidence"].is_array());
  const json& e = j["evidence"][0];
  EXPECT_EQ(e["metric"], "tokens_per_s");
  EXPECT_EQ(e["phase"], "decode");
  EXPECT_EQ(e["reference"], "objective");
  EXPECT_EQ(e["observed"], 10.0);
  EXPECT_EQ(e["objective"], 20.0);
  EXPECT_TRUE(e["baseline"].is_null()) << "no baseline learned yet";
  EXPECT_EQ(e["affected_share"], 1.0);
  EXPECT_EQ(j["ts"], clock.rfc3339(h.all()[0].ts_ns));
}

TEST(DegradeMonitor, AlertsReachTheSinkAndTheApi) {
  DegradationConfig c = test_config();
  c.min_streams = 2;
  c.enter_windows = 1;
  c.window_s = 1;
  std::vector<std::string> lines;
  Monitor monitor(c, output::WallClock(0), "node-1", [&](std::string l) { lines.push_back(std::move(l)); });
  core::StreamRecord r = stream_record(core::Role::server);
  r.metrics.tokens_per_s = 2;  // objective 20
  monitor.tick(r.end_ns - 100 * kMs);
  monitor.observe(r);
  monitor.observe(r);
  monitor.tick(r.end_ns + 2 * kS);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(json::parse(lines[0])["state"], "degraded");

  const auto gauges = monitor.gauges();
  ASSERT_EQ(gauges.size(), 1u);
  EXPECT_TRUE(gauges[0].degraded);

  // The API command, through ApiServer::handle.
  daemon::RecordStore store(daemon::StoreOptions{});
  daemon::ApiOptions options;
  options.alerts = [&] { return monitor.alerts_response(); };
  daemon::ApiServer api(store, options);
  const json response = json::parse(api.handle(R"({"cmd":"alerts"})"));
  ASSERT_TRUE(response["ok"]) << response.dump();
  ASSERT_EQ(response["active"].size(), 1u);
  EXPECT_EQ(response["active"][0]["cohort"]["model"], "llama-8b");
  EXPECT_EQ(response["recent"].size(), 1u);
  EXPECT_EQ(response["cohorts"][0]["state"], "degraded");
  const std::string table = cli::format_alerts(response);
  EXPECT_NE(table.find("active alerts (1)"), std::string::npos) << table;
  EXPECT_NE(table.find("tokens_per_s 2"), std::string::npos) << table;
  EXPECT_NE(table.find("serving"), std::string::npos) << table;

  daemon::ApiServer without(store, daemon::ApiOptions{});
  EXPECT_FALSE(json::parse(without.handle(R"({"cmd":"alerts"})"))["ok"]);

  // The same configuration keeps the engine; a changed one starts afresh.
  EXPECT_FALSE(monitor.reconfigure(c));
  c.window_s = 2;
  EXPECT_TRUE(monitor.reconfigure(c));
  EXPECT_TRUE(monitor.alerts_response()["active"].empty());
}

TEST(DegradeMetrics, CohortGaugeUsesTheLabelCaps) {
  output::MetricsConfig mc;
  mc.max_label_values = 2;
  output::MetricsRegistry reg(mc);
  reg.set_degradation({{"server_emit", "a", "/v1/chat/completions", "vllm", "medium", true},
                       {"server_emit", "b", "/v1/chat/completions", "vllm", "medium", false},
                       {"server_emit", "c", "/v1/chat/completions", "vllm", "medium", false}},
                      1);
  const std::string text = reg.render();
  EXPECT_NE(text.find("# TYPE infertap_degradation_cohort_degraded gauge"), std::string::npos);
  EXPECT_NE(text.find("infertap_degradation_cohort_degraded{vantage=\"server_emit\",model=\"a\",route=\"/v1/chat/"
                      "completions\",process=\"vllm\",length_class=\"medium\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("model=\"other\""), std::string::npos) << "the third model is over the cap";
  EXPECT_NE(text.find("infertap_abuse_signals_active 1"), std::string::npos);
  EXPECT_NE(text.find("infertap_label_overflow_total{label=\"model\"} 0"), std::string::npos)
      << "a refresh is not counted as an overflowing observation";
}

}  // namespace
}  // namespace infertap::degrade
