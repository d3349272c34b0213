// Comparable conditions in the degradation engine, with a fake clock: load
// bands as cohort dimensions, the baseline review on a change of the serving
// identity, each lead rule of docs/degradation.md#leads, the abuse signal's
// sizes and concurrency share, and their records.
#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "core/metrics.h"
#include "daemon/config.h"
#include "output/prometheus/metrics.h"
#include "degrade/engine.h"
#include "degrade/render.h"

namespace infertap::degrade {
namespace {

using json = nlohmann::json;
constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kS = 1'000'000'000;
constexpr core::TimestampNs kT0 = 5'000 * kS;

Observation healthy() {
  Observation o;
  o.model = "llama-8b";
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
  o.identity.model = "llama-8b";
  o.identity.system_fingerprint = "fp_a";
  o.load.concurrency = 4;
  o.load.waiting = 0;
  o.load.input_tokens = 500;
  o.load.cpu_pressure = 2;
  o.load.cpu_ms_per_token = 0.5;
  return o;
}

// Slower decode, the first token on time: breaches the baseline (x1.5 and
// the floors) and the objective's rate.
Observation slow_decode(Observation o = healthy()) {
  o.tokens_per_s = 10;
  o.itl_p95_ns = 100 * kMs;
  o.itl_p99_ns = 120 * kMs;
  o.longest_pause_ns = 150 * kMs;
  return o;
}

// Slower by half against the baseline, inside the objective: what an upgrade
// that is slower but fine might do.
Observation slower_upgrade(Observation o = healthy()) {
  o.tokens_per_s = 30;
  o.itl_p95_ns = 50 * kMs;
  o.itl_p99_ns = 60 * kMs;
  o.longest_pause_ns = 80 * kMs;
  return o;
}

DegradationConfig config(bool bands = false) {
  DegradationConfig c;
  c.window_s = 10;
  c.min_streams = 5;
  c.enter_windows = 3;
  c.exit_windows = 2;
  c.breach_share = 0.25;
  c.recovery_share = 0.10;
  c.warmup_windows = 3;
  c.history_windows = 10;
  if (!bands) {
    c.concurrency_bands.clear();
    c.input_bands.clear();
  }
  Objective chat;
  chat.name = "chat";
  chat.route = "/v1/chat/*";
  chat.limit[static_cast<std::size_t>(Metric::tokens_per_s)] = 20;
  chat.limit[static_cast<std::size_t>(Metric::longest_pause)] = 500;
  c.objectives.push_back(chat);
  c.abuse.enabled = false;
  return c;
}

class Harness {
 public:
  explicit Harness(DegradationConfig c) : engine_(std::move(c)) { engine_.tick(kT0); }
  // Streams ending inside the current window, spread over it.
  void feed(const std::vector<Observation>& v) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      Observation x = v[i];
      x.end_ns = window_start() + (i + 1) * (10 * kS) / (v.size() + 2);
      engine_.observe(x);
    }
  }
  void feed(std::size_t n, const Observation& o) { feed(std::vector<Observation>(n, o)); }
  // `windows` windows of n streams of o; the alerts and reviews they produced.
  void run(int windows, std::size_t n, const Observation& o) {
    for (int w = 0; w < windows; ++w) {
      feed(n, o);
      close();
    }
  }
  void close() {
    ++window_;
    engine_.tick(window_start());
    for (Alert& a : engine_.take_alerts()) alerts.push_back(std::move(a));
    for (BaselineReview& r : engine_.take_reviews()) reviews.push_back(std::move(r));
  }
  core::TimestampNs window_start() const { return kT0 + window_ * 10 * kS; }
  Engine& engine() { return engine_; }
  std::vector<Alert> degraded() const {
    std::vector<Alert> out;
    for (const Alert& a : alerts)
      if (a.degraded) out.push_back(a);
    return out;
  }

  std::vector<Alert> alerts;
  std::vector<BaselineReview> reviews;

 private:
  Engine engine_;
  std::uint64_t window_ = 0;
};

const Lead* lead_of(const Alert& a, const std::string& name) {
  for (const Lead& l : a.leads)
    if (l.lead == name) return &l;
  return nullptr;
}

double number_of(const Lead& l, const std::string& name) {
  for (const auto& [k, v] : l.numbers)
    if (k == name) return v;
  ADD_FAILURE() << "lead " << l.lead << " has no number " << name;
  return -1;
}

// ---- bands ------------------------------------------------------------------------

TEST(DegradeBands, DefaultBandsAndTheirEdges) {
  const Engine e{DegradationConfig{}};
  EXPECT_EQ(e.concurrency_band_of(1.0), "1");
  EXPECT_EQ(e.concurrency_band_of(1.4), "1") << "a mean rounds to the nearest stream count";
  EXPECT_EQ(e.concurrency_band_of(1.6), "2-8");
  EXPECT_EQ(e.concurrency_band_of(8), "2-8");
  EXPECT_EQ(e.concurrency_band_of(8.6), "9-32");
  EXPECT_EQ(e.concurrency_band_of(32), "9-32");
  EXPECT_EQ(e.concurrency_band_of(33), "33-128");
  EXPECT_EQ(e.concurrency_band_of(128), "33-128");
  EXPECT_EQ(e.concurrency_band_of(129), ">128");
  EXPECT_EQ(e.concurrency_band_of(std::nullopt), "unknown");
  EXPECT_EQ(e.input_band_of(100), "<512");
  EXPECT_EQ(e.input_band_of(511), "<512");
  EXPECT_EQ(e.input_band_of(512), "512-4k");
  EXPECT_EQ(e.input_band_of(4096), "4k-32k");
  EXPECT_EQ(e.input_band_of(40000), ">=32k");
  EXPECT_EQ(e.input_band_of(std::nullopt), "unknown");
  // Without usage, the request bytes stand in at four bytes a token.
  Observation o = healthy();
  o.load.input_tokens.reset();
  o.load.request_bytes = 8000;
  EXPECT_EQ(e.key_of(o).input_band, "512-4k");
  // Turned off: no dimension.
  DegradationConfig off;
  off.concurrency_bands.clear();
  off.input_bands.clear();
  const Engine f{off};
  EXPECT_EQ(f.key_of(o).concurrency_band, "");
  EXPECT_EQ(f.key_of(o).input_band, "");
}

TEST(DegradeBands, EachBandIsItsOwnCohortAndCanBeTurnedOff) {
  Harness on(config(true));
  Observation one = healthy(), many = healthy();
  one.load.concurrency = 1;
  many.load.concurrency = 24;
  on.feed(6, one);
  on.feed(6, many);
  on.close();
  std::set<std::string> bands;
  for (const CohortStatus& c : on.engine().cohorts()) bands.insert(c.key.concurrency_band);
  EXPECT_EQ(bands, (std::set<std::string>{"1", "9-32"}));
  Harness off(config(false));
  off.feed(6, one);
  off.feed(6, many);
  off.close();
  EXPECT_EQ(off.engine().cohorts().size(), 1u);
}

TEST(DegradeBands, ConfigurationOfBands) {
  std::string error;
  auto c = daemon::parse_config(
      "degradation:\n  concurrency_bands: []\n  input_bands:\n    - {name: small, below: 1000}\n    - {name: big}\n",
      &error);
  ASSERT_TRUE(c) << error;
  EXPECT_TRUE(c->degradation.concurrency_bands.empty());
  ASSERT_EQ(c->degradation.input_bands.size(), 2u);
  EXPECT_EQ(c->degradation.input_bands[0].name, "small");
  EXPECT_FALSE(daemon::parse_config("degradation:\n  concurrency_bands:\n    - {name: a, below: 9}\n    - {name: b, below: 3}\n"
                                    "    - {name: c}\n",
                                    &error));
  EXPECT_NE(error.find("below must increase"), std::string::npos) << error;
  EXPECT_FALSE(daemon::parse_config("degradation:\n  input_bands: 3\n", &error));
  EXPECT_NE(error.find("or [] to turn it off"), std::string::npos) << error;
}

// ---- baseline review ------------------------------------------------------------------

// An upgrade that is slower: without a review the cohort degrades against
// its baseline; with the fingerprint changing, the baseline starts anew and
// one review is written when it starts and one when the new one is learned.
TEST(DegradeReview, SlowerStreamsWithTheSameFingerprintDegrade) {
  Harness h(config());
  h.run(4, 10, healthy());
  h.run(4, 10, slower_upgrade());
  ASSERT_EQ(h.degraded().size(), 1u) << "the control: a regression against the baseline";
  EXPECT_TRUE(h.reviews.empty());
}

TEST(DegradeReview, AFingerprintChangeStartsAFreshBaselineAndRaisesNoAlert) {
  Harness h(config());
  h.run(4, 10, healthy());
  Observation next = slower_upgrade();
  next.identity.system_fingerprint = "fp_b";
  // The window the upgrade rolls in: a few old streams, most new ones.
  std::vector<Observation> mixed(3, healthy());
  mixed.insert(mixed.end(), 7, next);
  h.feed(mixed);
  h.close();
  ASSERT_EQ(h.reviews.size(), 1u) << "7 of 10 streams carry the new fingerprint: over 2/3, a change";
  h.run(8, 10, next);
  EXPECT_TRUE(h.degraded().empty()) << "an upgrade is reviewed, not read as a regression";
  ASSERT_EQ(h.reviews.size(), 2u);
  const BaselineReview& started = h.reviews[0];
  const BaselineReview& done = h.reviews[1];
  EXPECT_FALSE(started.completed);
  EXPECT_TRUE(done.completed);
  EXPECT_EQ(started.id, done.id);
  EXPECT_EQ(started.changed, (std::vector<std::string>{"system_fingerprint"}));
  EXPECT_EQ(started.from.system_fingerprint, "fp_a");
  EXPECT_EQ(started.to.system_fingerprint, "fp_b");
  EXPECT_EQ(started.prior[static_cast<std::size_t>(Metric::tokens_per_s)], 50.0);
  EXPECT_FALSE(started.baseline[static_cast<std::size_t>(Metric::tokens_per_s)]);
  EXPECT_EQ(done.prior[static_cast<std::size_t>(Metric::tokens_per_s)], 50.0);
  EXPECT_EQ(done.baseline[static_cast<std::size_t>(Metric::tokens_per_s)], 30.0) << "the new median: it hides nothing";
  EXPECT_EQ(done.baseline[static_cast<std::size_t>(Metric::longest_pause)], 80.0);
  EXPECT_EQ(done.windows, 3u);
  EXPECT_EQ(h.engine().counters().baseline_reviews, 1u);
  const json j = review_json(done, output::WallClock(0), "node");
  EXPECT_EQ(j["type"], "baseline_review");
  EXPECT_EQ(j["state"], "completed");
  EXPECT_EQ(j["from"]["system_fingerprint"], "fp_a");
  EXPECT_EQ(j["to"]["system_fingerprint"], "fp_b");
  EXPECT_EQ(j["prior_baseline"]["tokens_per_s"], 50.0);
  EXPECT_EQ(j["baseline"]["tokens_per_s"], 30.0);
  EXPECT_EQ(j["change"]["tokens_per_s"], 0.6);
  // Now the new baseline judges: a slowdown from it alerts again.
  h.run(4, 10, slow_decode(next));
  EXPECT_EQ(h.degraded().size(), 1u);
}

TEST(DegradeReview, ReviewingCohortsStillAnswerToTheirObjective) {
  Harness h(config());
  h.run(4, 10, healthy());
  Observation broken = slow_decode();  // 10 tokens/s: under the objective of 20
  broken.identity.system_fingerprint = "fp_b";
  h.run(5, 10, broken);
  ASSERT_EQ(h.reviews.size(), 1u);
  ASSERT_EQ(h.degraded().size(), 1u) << "the objective is absolute: no review suspends it";
  const Alert a = h.degraded()[0];
  EXPECT_EQ(a.evidence[0].reference, "objective");
  const Lead* l = lead_of(a, "serving_change");
  ASSERT_TRUE(l) << "a slowdown after a change says: compare with the prior baseline";
  EXPECT_NE(l->says.find("system_fingerprint fp_a -> fp_b"), std::string::npos) << l->says;
  EXPECT_EQ(number_of(*l, "tokens_per_s_prior"), 50.0);
  EXPECT_EQ(number_of(*l, "tokens_per_s_now"), 10.0);
}

TEST(DegradeReview, MixedIdentitiesAndFirstSightingsAreNoChange) {
  Harness h(config());
  Observation unknown = healthy();
  unknown.identity.system_fingerprint.clear();
  h.run(2, 10, unknown);  // no fingerprint at all yet
  h.run(3, 10, healthy());  // first seen: learned, no review
  Observation b = healthy();
  b.identity.system_fingerprint = "fp_b";
  std::vector<Observation> half(5, healthy());
  half.insert(half.end(), 5, b);
  for (int w = 0; w < 4; ++w) {
    h.feed(half);  // two replicas of different versions behind one route
    h.close();
  }
  EXPECT_TRUE(h.reviews.empty());
  EXPECT_TRUE(h.degraded().empty());
}

TEST(DegradeReview, ANewResponseModelUnderTheSameRequestedModel) {
  Harness h(config());
  h.run(4, 10, healthy());
  Observation next = healthy();
  next.identity.model = "llama-8b-2025-01";
  h.run(2, 10, next);
  ASSERT_EQ(h.reviews.size(), 1u);
  EXPECT_EQ(h.reviews[0].changed, (std::vector<std::string>{"model"}));
  EXPECT_EQ(h.reviews[0].cohort.model, "llama-8b");
  bool reviewing = false;
  for (const CohortStatus& c : h.engine().cohorts()) reviewing = reviewing || c.state == CohortState::reviewing;
  EXPECT_TRUE(reviewing);
}

// ---- leads ------------------------------------------------------------------------------

TEST(DegradeLeads, DecodePressureWhenConcurrencyRoseAgainstTheBaseline) {
  Harness h(config());
  h.run(4, 10, healthy());  // concurrency 4 learned
  Observation loaded = slow_decode();
  loaded.load.concurrency = 20;
  h.run(3, 10, loaded);
  ASSERT_EQ(h.degraded().size(), 1u);
  const Alert a = h.degraded()[0];
  const Lead* l = lead_of(a, "decode_pressure");
  ASSERT_TRUE(l);
  EXPECT_EQ(number_of(*l, "concurrency_before"), 4.0);
  EXPECT_EQ(number_of(*l, "concurrency_now"), 20.0);
  EXPECT_EQ(l->says, "decode-stage pressure may be contributing: concurrency 4 -> 20 in this window, while TTFT holds");
}

TEST(DegradeLeads, NoLoadLeadWhenTheLoadDidNotChange) {
  Harness h(config());
  h.run(4, 10, healthy());
  h.run(3, 10, slow_decode());
  ASSERT_EQ(h.degraded().size(), 1u);
  const Alert a = h.degraded()[0];
  EXPECT_FALSE(lead_of(a, "decode_pressure"));
  EXPECT_FALSE(lead_of(a, "queueing"));
  EXPECT_FALSE(lead_of(a, "host_pressure"));
  EXPECT_FALSE(lead_of(a, "cpu_per_token"));
  EXPECT_FALSE(lead_of(a, "serving_change"));
}

// With bands, the loaded band is a cohort of its own: the reference is the
// least loaded band of the same traffic.
TEST(DegradeLeads, DecodePressureAcrossBandsComparesWithTheLeastLoadedBand) {
  Harness h(config(true));
  Observation one = healthy();
  one.load.concurrency = 1;
  h.run(4, 10, one);
  Observation loaded = slow_decode();
  loaded.load.concurrency = 30;
  h.run(3, 10, loaded);
  ASSERT_EQ(h.degraded().size(), 1u);
  const Alert a = h.degraded()[0];
  EXPECT_EQ(a.cohort.concurrency_band, "9-32");
  EXPECT_EQ(a.evidence[0].reference, "objective");
  const Lead* l = lead_of(a, "decode_pressure");
  ASSERT_TRUE(l);
  EXPECT_EQ(number_of(*l, "concurrency_before"), 1.0);
  EXPECT_EQ(number_of(*l, "concurrency_now"), 30.0);
}

TEST(DegradeLeads, QueueingWhenTtftBreachesAndRequestsWait) {
  Harness h(config());
  h.run(4, 10, healthy());
  Observation queued = healthy();
  queued.ttft_ns = 900 * kMs;
  queued.load.waiting = 6;
  h.run(3, 10, queued);
  ASSERT_EQ(h.degraded().size(), 1u);
  const Alert a = h.degraded()[0];
  const Lead* l = lead_of(a, "queueing");
  ASSERT_TRUE(l);
  EXPECT_EQ(number_of(*l, "waiting_before"), 0.0);
  EXPECT_EQ(number_of(*l, "waiting_now"), 6.0);
  EXPECT_FALSE(lead_of(a, "decode_pressure")) << "the decode phase is healthy";
  EXPECT_FALSE(lead_of(a, "input_size"));
}

TEST(DegradeLeads, InputSizeWhenTtftBreachesWithLongerInputs) {
  Harness h(config());
  h.run(4, 10, healthy());
  Observation longer = healthy();
  longer.ttft_ns = 900 * kMs;
  longer.load.input_tokens = 3000;
  h.run(3, 10, longer);
  ASSERT_EQ(h.degraded().size(), 1u);
  const Alert a = h.degraded()[0];
  const Lead* l = lead_of(a, "input_size");
  ASSERT_TRUE(l);
  EXPECT_EQ(number_of(*l, "input_tokens_before"), 500.0);
  EXPECT_EQ(number_of(*l, "input_tokens_now"), 3000.0);
}

TEST(DegradeLeads, DeliveryWhenTheLagGrows) {
  DegradationConfig c = config();
  c.objectives.clear();
  Harness h(c);
  Observation client = healthy();
  client.vantage = Vantage::client_observed;
  client.client_addr.clear();
  client.delivery_lag_ns = 5 * kMs;
  h.run(4, 10, client);
  Observation behind = client;
  behind.delivery_lag_ns = 800 * kMs;
  behind.stall_causes["client_read"] = 1;
  h.run(3, 10, behind);
  ASSERT_EQ(h.degraded().size(), 1u);
  const Alert a = h.degraded()[0];
  EXPECT_EQ(a.layer, Layer::delivery_path);
  const Lead* l = lead_of(a, "delivery");
  ASSERT_TRUE(l);
  EXPECT_EQ(number_of(*l, "lag_median_ms"), 800.0);
  EXPECT_EQ(number_of(*l, "lag_p90_ms"), 800.0);
  EXPECT_EQ(number_of(*l, "stalls_client_read"), 30.0);
  EXPECT_NE(l->says.find("downstream delivery or backpressure: delivery lag median 800 ms"), std::string::npos) << l->says;
}

TEST(DegradeLeads, UnevenDeliveryWhenPausesBreachAndTheRateHolds) {
  Harness h(config());
  h.run(4, 10, healthy());
  Observation paused = healthy();
  paused.longest_pause_ns = 1200 * kMs;
  h.run(3, 10, paused);
  ASSERT_EQ(h.degraded().size(), 1u);
  const Alert a = h.degraded()[0];
  const Lead* l = lead_of(a, "uneven_delivery");
  ASSERT_TRUE(l);
  EXPECT_EQ(number_of(*l, "longest_pause_ms_p90"), 1200.0);
  EXPECT_EQ(number_of(*l, "tokens_per_s"), 50.0);
  EXPECT_EQ(l->says, "uneven delivery: longest pause p90 1200 ms while the mean rate holds at 50 tokens/s");
}

TEST(DegradeLeads, HostPressureAndCpuPerToken) {
  Harness h(config());
  h.run(4, 10, healthy());
  Observation starved = slow_decode();
  starved.load.cpu_pressure = 40;
  starved.load.cpu_ms_per_token = 1.5;
  h.run(3, 10, starved);
  ASSERT_EQ(h.degraded().size(), 1u);
  const Alert a = h.degraded()[0];
  const Lead* p = lead_of(a, "host_pressure");
  ASSERT_TRUE(p);
  EXPECT_EQ(number_of(*p, "cpu_some_avg10"), 40.0);
  EXPECT_EQ(number_of(*p, "cpu_some_avg10_baseline"), 2.0);
  const Lead* c = lead_of(a, "cpu_per_token");
  ASSERT_TRUE(c);
  EXPECT_EQ(number_of(*c, "cpu_ms_per_token_before"), 0.5);
  EXPECT_EQ(number_of(*c, "cpu_ms_per_token_now"), 1.5);
  // The alert record carries them.
  const json j = alert_json(a, output::WallClock(0), "node");
  ASSERT_TRUE(j["leads"].is_array());
  bool found = false;
  for (const json& l : j["leads"]) {
    if (l["lead"] == "host_pressure") {
      found = true;
      EXPECT_EQ(l["numbers"]["cpu_some_avg10"], 40.0);
      EXPECT_TRUE(l["says"].is_string());
    }
  }
  EXPECT_TRUE(found) << j.dump();
  EXPECT_TRUE(j["cohort"]["concurrency_band"].is_null()) << "bands off: null";
}

// `infertap alerts` shows the leads of the active alerts and the reviews.
TEST(DegradeLeads, TheAlertsTextShowsLeadsAndReviews) {
  Harness h(config());
  h.run(4, 10, healthy());
  Observation broken = slow_decode();
  broken.identity.system_fingerprint = "fp_b";
  broken.load.concurrency = 20;
  h.run(5, 10, broken);
  const json response = alerts_response(h.engine(), output::WallClock(0), "node");
  const std::string text = cli::format_alerts(response);
  EXPECT_NE(text.find("leads of the active alerts"), std::string::npos) << text;
  EXPECT_NE(text.find("decode-stage pressure may be contributing: concurrency 4 -> 20"), std::string::npos) << text;
  EXPECT_NE(text.find("compare with the prior baseline: system_fingerprint fp_a -> fp_b"), std::string::npos) << text;
  EXPECT_NE(text.find("started: system_fingerprint fp_a -> fp_b"), std::string::npos) << text;
  ASSERT_EQ(response["reviews_recent"].size(), 1u);
  EXPECT_EQ(response["cohorts"][0]["identity"]["system_fingerprint"], "fp_b");
}

// ---- abuse ---------------------------------------------------------------------------------

TEST(DegradeLoadAbuse, TheSignalCarriesSizesAndTheConcurrencyShare) {
  DegradationConfig c = config();
  c.abuse.enabled = true;
  Harness h(c);
  const auto from = [](const std::string& client, double share, double held) {
    Observation o = healthy();
    o.client_addr = client;
    o.decode_ns = (client == "10.0.0.66" ? 8 : 2) * kS;
    o.load.input_tokens = client == "10.0.0.66" ? 6000 : 300;
    o.load.request_bytes = client == "10.0.0.66" ? 24000 : 1200;
    o.load.client_share = share;
    o.load.client_concurrency = held;
    return o;
  };
  std::vector<AbuseSignal> signals;
  for (int w = 0; w < 2; ++w) {
    std::vector<Observation> v;
    for (int i = 0; i < 6; ++i) v.push_back(from("10.0.0.66", i % 2 ? 0.8 : 0.6, 6 + i));
    for (int i = 0; i < 3; ++i) v.push_back(from("10.0.0.1", 0.1, 1));
    for (int i = 0; i < 3; ++i) v.push_back(from("10.0.0.2", 0.1, 1));
    h.feed(v);
    h.close();
    for (auto& s : h.engine().take_abuse()) signals.push_back(s);
  }
  ASSERT_EQ(signals.size(), 1u);
  const AbuseSignal& s = signals[0];
  EXPECT_EQ(s.client, "10.0.0.66");
  EXPECT_EQ(s.input_tokens_per_stream, 6000.0);
  EXPECT_EQ(s.request_bytes_per_stream, 24000.0);
  EXPECT_EQ(s.output_tokens_per_stream, 100.0);
  EXPECT_NEAR(*s.concurrency_share, 0.7, 1e-9);
  EXPECT_EQ(s.peak_client_concurrency, 11.0);
  const json j = abuse_json(s, output::WallClock(0), "node");
  EXPECT_EQ(j["concurrency_share"], 0.7);
  EXPECT_EQ(j["input_tokens_per_stream"], 6000.0);
}

// ---- Prometheus -----------------------------------------------------------------------------

TEST(DegradeLoadMetrics, BandLabelsAreOptionalAndGaugesCountPerProcess) {
  output::MetricsConfig mc;
  output::MetricsRegistry plain(mc);
  plain.set_degradation({{"server_emit", "m", "/v1/chat/completions", "vllm", "all", true, "9-32", "<512"}}, 0);
  EXPECT_NE(plain.render().find("length_class=\"all\"} 1"), std::string::npos) << "no band labels by default";
  mc.band_labels = true;
  mc.max_label_values = 2;
  output::MetricsRegistry banded(mc);
  banded.set_degradation({{"server_emit", "m", "/v1/chat/completions", "vllm", "all", true, "9-32", "<512"},
                          {"server_emit", "m", "/v1/chat/completions", "vllm", "all", false, "1", "<512"},
                          {"server_emit", "m", "/v1/chat/completions", "vllm", "all", false, "33-128", "<512"}},
                         0);
  const std::string text = banded.render();
  EXPECT_NE(text.find("length_class=\"all\",concurrency_band=\"9-32\",input_band=\"<512\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("concurrency_band=\"other\""), std::string::npos) << "bands share the label cap";
  banded.set_load({{"vllm", 12, 3}, {"vllm", 4, 1}, {"tgi", 1, 0}});
  const std::string load = banded.render();
  EXPECT_NE(load.find("infertap_streams_in_flight{process=\"vllm\"} 16"), std::string::npos) << load;
  EXPECT_NE(load.find("infertap_requests_waiting{process=\"vllm\"} 4"), std::string::npos) << load;
  EXPECT_NE(load.find("infertap_streams_in_flight{process=\"tgi\"} 1"), std::string::npos) << load;
}

TEST(DegradeLoadMetrics, HistogramsCarryTheBandsWhenAskedTo) {
  core::StreamRecord r;
  r.role = core::Role::server;
  r.status = 200;
  r.conn.comm = "vllm";
  r.request_end_ns = 1'000'000;
  for (int i = 0; i < 5; ++i) {
    core::TimelineEvent e;
    e.ts_ns = 2'000'000 + static_cast<std::uint64_t>(i) * 10'000'000;
    e.kind = protocol::EventKind::content;
    r.timeline.push_back(e);
  }
  r.first_token_ns = r.timeline.front().ts_ns;
  r.last_token_ns = r.timeline.back().ts_ns;
  r.metrics = core::record_metrics(r, std::nullopt, core::PipelineConfig{});
  r.load.concurrency_mean = 20;
  r.load.input_tokens = 100;
  const DegradationConfig dc;
  EXPECT_EQ(bands_of(dc, r), (std::array<std::string, 3>{"short", "9-32", "<512"}));
  output::MetricsConfig mc;
  output::MetricsRegistry plain(mc);
  plain.observe(r);
  EXPECT_EQ(plain.render().find("concurrency_band"), std::string::npos);
  mc.band_labels = true;
  mc.band_of = [dc](const core::StreamRecord& rec) { return bands_of(dc, rec); };
  output::MetricsRegistry banded(mc);
  banded.observe(r);
  const std::string text = banded.render();
  EXPECT_NE(text.find("infertap_inter_token_latency_seconds_count{vantage=\"server\",model=\"unknown\",route=\"unknown\","
                      "process=\"vllm\",length_class=\"short\",concurrency_band=\"9-32\",input_band=\"<512\"} 4"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gen_ai_server_time_to_first_token_seconds_count{vantage=\"server\""), std::string::npos);
  EXPECT_EQ(text.find("gen_ai_server_time_to_first_token_seconds_count{vantage=\"server\",concurrency"), std::string::npos)
      << "the OpenTelemetry families keep their attributes";
}

}  // namespace
}  // namespace infertap::degrade
