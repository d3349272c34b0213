// The stream picture drawn from known streams (tests/support/stream_json.h):
// each is parsed as XML (expat) and its marks are checked where they must be.
#include "output/svg/stream_svg.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "support/repo_file.h"
#include "support/stream_json.h"
#include "support/xml_dom.h"

namespace infertap::output {
namespace {

using json = nlohmann::json;
using testing::XmlNode;

struct Drawn {
  testing::XmlDocument doc;
  std::string svg;
  const XmlNode& root() const { return *doc.root; }
};

Drawn draw(const json& record) {
  Drawn d;
  d.svg = render_stream_svg(record);
  d.doc = testing::parse_xml(d.svg);
  return d;
}

// The lane drawn from a timeline field, in the order the lanes are drawn.
std::vector<std::string> lane_keys(const XmlNode& root) {
  std::vector<std::string> keys;
  for (const XmlNode* g : root.find("g", "lane")) keys.push_back(g->attr("data-key"));
  return keys;
}

const XmlNode* lane(const XmlNode& root, const std::string& key) {
  for (const XmlNode* g : root.find("g", "lane")) {
    if (g->attr("data-key") == key) return g;
  }
  return nullptr;
}

// The marks of one class inside the groups of another (the legend has a mark of each).
std::vector<const XmlNode*> marks(const XmlNode& root, const std::string& group, const std::string& element,
                                  const std::string& cls) {
  std::vector<const XmlNode*> out;
  for (const XmlNode* g : root.find("g", group)) {
    const auto found = g->find(element, cls);
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

double events_in(const XmlNode& lane_group) {
  double n = 0;
  for (const XmlNode* t : lane_group.find("line", "tick")) n += t->number("data-n");
  return n;
}

// The tick of event i in a lane (its column's first event).
const XmlNode* tick_of(const XmlNode& lane_group, int i) {
  for (const XmlNode* t : lane_group.find("line", "tick")) {
    if (t->attr("data-i") == std::to_string(i)) return t;
  }
  return nullptr;
}

// Ticks' x grows with their time, and along one straight line: x = a + b * ms.
void expect_x_follows_time(const XmlNode& lane_group) {
  const auto ticks = lane_group.find("line", "tick");
  ASSERT_GE(ticks.size(), 3u);
  const XmlNode &first = *ticks.front(), &last = *ticks.back();
  const double slope = (last.number("x1") - first.number("x1")) / (last.number("data-ms") - first.number("data-ms"));
  ASSERT_GT(slope, 0);
  double prev_x = -1;
  for (const XmlNode* t : ticks) {
    EXPECT_GT(t->number("x1"), prev_x) << "ticks in time order, left to right";
    prev_x = t->number("x1");
    const double expected = first.number("x1") + slope * (t->number("data-ms") - first.number("data-ms"));
    EXPECT_NEAR(t->number("x1"), expected, 0.15) << "event " << t->attr("data-i");
  }
}

TEST(StreamSvg, HealthyStreamHasATickPerEventAndALagLinePerToken) {
  const json record = testing::healthy_stream();
  const Drawn d = draw(record);
  ASSERT_TRUE(d.doc.root) << d.doc.error;
  EXPECT_EQ(d.root().name, "svg");
  EXPECT_EQ(d.root().attr("xmlns"), "http://www.w3.org/2000/svg");
  EXPECT_EQ(lane_keys(d.root()), (std::vector<std::string>{"ts_ns", "delivered_ns"}));
  for (const char* key : {"ts_ns", "delivered_ns"}) {
    const XmlNode* g = lane(d.root(), key);
    ASSERT_TRUE(g);
    EXPECT_EQ(events_in(*g), 22) << key << ": role, 20 tokens, done";
    expect_x_follows_time(*g);
    EXPECT_TRUE(g->find("rect", "stall").empty()) << key;
    EXPECT_TRUE(g->find("rect", "burst").empty()) << key;
  }
  EXPECT_EQ(marks(d.root(), "lags", "line", "lag").size(), 20u) << "one per token event";
  const auto ttft = d.root().find("g", "ttft");
  ASSERT_EQ(ttft.size(), 2u);
  EXPECT_DOUBLE_EQ(ttft[0]->number("data-ms"), 80.0);
  const std::string text = d.root().all_text();
  EXPECT_NE(text.find("model demo-llama-8b · POST /v1/chat/completions · server/emit"), std::string::npos) << text;
  EXPECT_NE(text.find("TTFT 80.0 ms"), std::string::npos);
  const auto bars = marks(d.root(), "gaps", "rect", "gap");
  EXPECT_EQ(bars.size(), 2u * 19u) << "per lane, a gap before each token but the first";
  for (const XmlNode* bar : bars) EXPECT_FALSE(bar->has_class("long"));
}

TEST(StreamSvg, GatewayBufferingShowsThreeLanesBurstsAndItsStalls) {
  const json record = testing::gateway_buffered_stream();
  const Drawn d = draw(record);
  ASSERT_TRUE(d.doc.root) << d.doc.error;
  EXPECT_EQ(lane_keys(d.root()), (std::vector<std::string>{"ts_ns", "peer_ns", "delivered_ns"}));
  const XmlNode* emit = lane(d.root(), "ts_ns");
  const XmlNode* gateway = lane(d.root(), "peer_ns");
  const XmlNode* delivered = lane(d.root(), "delivered_ns");
  ASSERT_TRUE(emit && gateway && delivered);
  EXPECT_EQ(gateway->attr("data-name"), "gateway read");
  EXPECT_NE(gateway->all_text().find("nginx"), std::string::npos);
  // Emits are spread: no bursts there; the client got three bursts of 8.
  EXPECT_TRUE(emit->find("rect", "burst").empty());
  EXPECT_TRUE(gateway->find("rect", "burst").empty());
  const auto bursts = delivered->find("rect", "burst");
  ASSERT_EQ(bursts.size(), 3u);
  for (const XmlNode* b : bursts) EXPECT_EQ(b->attr("data-n"), "8");
  EXPECT_EQ(events_in(*emit), 26);
  EXPECT_EQ(events_in(*delivered), 26);
  // The two stalls between the bursts, each from the last token of a burst
  // to the first of the next, labelled with their cause.
  const auto stalls = delivered->find("rect", "stall");
  ASSERT_EQ(stalls.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(stalls[s]->attr("data-cause"), "gateway_buffering");
    EXPECT_TRUE(stalls[s]->has_class("cause-gateway_buffering"));
    const int burst_last = 8 * (s + 1), next_first = burst_last + 1;
    const XmlNode* from = tick_of(*delivered, burst_last);
    const XmlNode* to = tick_of(*delivered, next_first);
    // A burst's ticks share a pixel column: the column's tick is its first event's.
    if (!from) from = tick_of(*delivered, burst_last - 7);
    ASSERT_TRUE(from && to) << "burst " << s;
    EXPECT_NEAR(stalls[s]->number("x"), from->number("x1"), 0.25);
    EXPECT_NEAR(stalls[s]->number("x") + stalls[s]->number("width"), to->number("x1"), 0.25);
  }
  EXPECT_EQ(delivered->find("text", "stall-label").size(), 2u);
  EXPECT_NE(delivered->all_text().find("gateway_buffering 211 ms"), std::string::npos) << delivered->all_text();
  EXPECT_EQ(d.root().find("g", "lags").size(), 2u);
  EXPECT_EQ(marks(d.root(), "lags", "line", "lag").size(), 48u) << "24 tokens: emit->gateway, gateway->client";
  // Only the delivered gaps between bursts pass the threshold.
  std::size_t long_gaps = 0;
  for (const XmlNode* g : d.root().find("g", "gaps")) {
    const auto bars = g->find("rect", "long");
    if (g->attr("data-key") != "delivered_ns") {
      EXPECT_TRUE(bars.empty()) << g->attr("data-key");
    }
    long_gaps += bars.size();
  }
  EXPECT_EQ(long_gaps, 2u);
  EXPECT_NE(d.root().all_text().find("degraded by the path: 2 gateway_buffering stalls"), std::string::npos);
}

TEST(StreamSvg, ModelPauseIsShadedOverItsGapOnBothLanes) {
  const json record = testing::model_pause_stream();
  const Drawn d = draw(record);
  ASSERT_TRUE(d.doc.root) << d.doc.error;
  for (const auto& [key, evidence] : {std::pair{"ts_ns", "nothing sent for 325 ms"},
                                      std::pair{"delivered_ns", "the server sent nothing"}}) {
    const XmlNode* g = lane(d.root(), key);
    ASSERT_TRUE(g);
    const auto stalls = g->find("rect", "stall");
    ASSERT_EQ(stalls.size(), 1u) << key;
    EXPECT_EQ(stalls[0]->attr("data-cause"), "model");
    // Token 12 is event 12 (event 0 is role-only); the pause ends at event 13.
    const XmlNode* before = tick_of(*g, 12);
    const XmlNode* after = tick_of(*g, 13);
    ASSERT_TRUE(before && after);
    EXPECT_NEAR(stalls[0]->number("x"), before->number("x1"), 0.15) << key;
    EXPECT_NEAR(stalls[0]->number("x") + stalls[0]->number("width"), after->number("x1"), 0.15) << key;
    EXPECT_NEAR(stalls[0]->number("data-end-ms") - stalls[0]->number("data-start-ms"), 325.0, 0.01);
    EXPECT_NE(g->all_text().find("model 325 ms"), std::string::npos) << g->all_text();
    EXPECT_NE(stalls[0]->all_text().find(evidence), std::string::npos) << "the evidence as tooltip";
  }
  // The gap bar at event 13 is the tallest and the only one past the threshold.
  const auto emit_gaps = d.root().find([](const XmlNode& n) { return n.name == "g" && n.attr("data-key") == "ts_ns" && n.has_class("gaps"); });
  ASSERT_EQ(emit_gaps.size(), 1u);
  const auto bars = emit_gaps[0]->find("rect", "gap");
  ASSERT_EQ(bars.size(), 23u) << "a gap before each token but the first";
  const auto tallest = std::max_element(bars.begin(), bars.end(), [](const XmlNode* a, const XmlNode* b) {
    return a->number("height") < b->number("height");
  });
  EXPECT_NEAR((*tallest)->number("data-ms"), 325.0, 0.01);
  EXPECT_EQ(std::count_if(bars.begin(), bars.end(), [](const XmlNode* b) { return b->has_class("long"); }), 1);
}

TEST(StreamSvg, NamesAreEscapedAndNeverMarkup) {
  using namespace std::string_literals;
  json record = testing::healthy_stream();
  const std::string evil = "</text><script>alert(1)</script>&amp;\x1b[2J\0\xef\xbf\xbf\xff\"'"s;
  record["model"] = evil;
  record["comm"] = evil;
  record["path"] = "/v1/" + evil;
  record["delivery"]["path"] = "sample-server>gateway(" + evil + ")>x";
  const Drawn d = draw(record);
  ASSERT_TRUE(d.doc.root) << d.doc.error << "\n" << d.svg.substr(0, 2000);
  EXPECT_TRUE(d.root().find("script").empty());
  EXPECT_EQ(d.svg.find("<script"), std::string::npos);
  const std::string text = d.root().all_text();
  EXPECT_NE(text.find("</text><script>alert(1)</script>&amp;\\x1b[2J\\x00\\uffff\\xff\"'"), std::string::npos) << text;
  EXPECT_EQ(xml_text("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
}

// A timeline at its cap: as many marks as the picture has pixel columns,
// not as the stream has events, and every event counted in a tick.
TEST(StreamSvg, TheLongestTimelineIsDrawnBounded) {
  std::vector<double> emit = {0.3};
  for (int k = 0; k < 32766; ++k) emit.push_back(50.0 + k * 0.7 + (k % 5) * 0.05);
  emit.push_back(emit.back() + 0.01);
  json record = testing::server_record(emit);
  std::vector<double> delivered;
  for (std::size_t i = 0; i < emit.size(); ++i) delivered.push_back(emit[i] + 0.3 + (i % 1000 == 0 ? 40.0 : 0.0));
  testing::add_path(record, delivered, {}, "sample-server>sample-client");
  record["events"] = 60000;
  record["timeline_truncated"] = true;
  const Drawn d = draw(record);
  ASSERT_TRUE(d.doc.root) << d.doc.error;
  const XmlNode* emit_lane = lane(d.root(), "ts_ns");
  ASSERT_TRUE(emit_lane);
  EXPECT_EQ(events_in(*emit_lane), 32768);
  const double width = d.root().number("width");
  EXPECT_LE(emit_lane->find("line", "tick").size(), static_cast<std::size_t>(width));
  EXPECT_LE(marks(d.root(), "lags", "line", "lag").size(), static_cast<std::size_t>(width));
  EXPECT_LT(d.root().element_count(), static_cast<std::size_t>(8 * width));
  EXPECT_LT(d.svg.size(), 1'500'000u);
  const std::string text = d.root().all_text();
  EXPECT_NE(text.find("timeline cut at 32768 of 60000 events"), std::string::npos);
  EXPECT_NE(text.find("pixel columns"), std::string::npos);
  // Lag spikes (every 1000th event, 40 ms) survive the aggregation.
  std::size_t spikes = 0;
  for (const XmlNode* l : marks(d.root(), "lags", "line", "lag")) spikes += std::stoi(l->attr("data-i")) % 1000 == 0;
  EXPECT_EQ(spikes, 32u);
}

TEST(StreamSvg, RecordsWithoutTimelineOrOfOtherRolesStillDraw) {
  json bare = testing::healthy_stream();
  bare.erase("timeline");
  const Drawn none = draw(bare);
  ASSERT_TRUE(none.doc.root) << none.doc.error;
  EXPECT_NE(none.root().all_text().find("no timeline kept"), std::string::npos);
  EXPECT_TRUE(none.root().find("g", "lane").empty());

  json client = testing::healthy_stream();
  client["role"] = "client";
  client["vantage"] = "read";
  client["delivery"] = nullptr;
  const Drawn c = draw(client);
  ASSERT_TRUE(c.doc.root) << c.doc.error;
  EXPECT_EQ(lane_keys(c.root()), (std::vector<std::string>{"peer_ns", "ts_ns"}));

  json upstream_leg = testing::healthy_stream();
  upstream_leg["role"] = "gateway";
  upstream_leg["gateway"] = {{"leg", "upstream"}};
  for (json& e : upstream_leg["timeline"]) e["downstream_ns"] = e["ts_ns"].get<std::uint64_t>() + 500;
  const Drawn u = draw(upstream_leg);
  ASSERT_TRUE(u.doc.root) << u.doc.error;
  EXPECT_EQ(lane_keys(u.root()), (std::vector<std::string>{"peer_ns", "ts_ns", "downstream_ns", "delivered_ns"}));
}

// The picture in the README and docs/cli.md: a real capture drawn by
// `infertap show --svg`, kept well-formed, with its three lanes and causes.
TEST(StreamSvg, TheDocumentedPictureIsWellFormed) {
  const std::string svg = testing::repo_file("docs/img/stream-gateway-buffering.svg");
  const testing::XmlDocument doc = testing::parse_xml(svg);
  ASSERT_TRUE(doc.root) << doc.error;
  EXPECT_EQ(lane_keys(*doc.root), (std::vector<std::string>{"ts_ns", "peer_ns", "delivered_ns"}));
  const std::string text = doc.root->all_text();
  EXPECT_NE(text.find("model 322 ms"), std::string::npos);
  EXPECT_NE(text.find("gateway_buffering"), std::string::npos);
}

}  // namespace
}  // namespace infertap::output
