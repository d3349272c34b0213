// RecordStore (bounds, eviction, timeline budget, aggregates, subscribers) and
// the CLI's text formatters (userspace/cli/format.h).
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "core/metrics.h"
#include "daemon/store.h"
#include "output/ndjson/records.h"

namespace infertap::daemon {
namespace {

using json = nlohmann::json;
constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kS = 1'000'000'000;

// A stream shaped like scripts/demo.sh: role chunk, 24 token events 25 ms
// apart with one 320 ms pause after token 12, usage chunk, [DONE].
core::StreamRecord demo_record(std::uint64_t generation, std::uint64_t base_ns = 1000 * kS,
                               core::Role role = core::Role::server) {
  core::StreamRecord r;
  r.conn.generation = generation;
  r.conn.pid = 4242;
  r.conn.fd = 7;
  r.conn.comm = "sample-server";
  r.conn.cgroup_path = "/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope";
  r.conn.local.family = AF_INET;
  r.conn.local.addr = {127, 0, 0, 1};
  r.conn.local.port = 8000;
  r.conn.remote.family = AF_INET;
  r.conn.remote.addr = {127, 0, 0, 1};
  r.conn.remote.port = 51234;
  r.role = role;
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.model = r.request_model = "demo-llama-8b";
  r.request_stream = true;
  r.request_start_ns = base_ns;
  r.request_end_ns = base_ns + 1 * kMs;
  r.status = 200;
  r.content_type = "text/event-stream";
  r.framing = protocol::BodyFraming::chunked;
  r.dialect = protocol::Dialect::openai;
  r.response_id = "chatcmpl-demo";
  r.finish_reason = "stop";
  r.response_head_ns = r.request_end_ns + 110 * kMs;
  const auto event = [&](std::uint64_t ts, protocol::EventKind kind, std::uint32_t bytes) {
    core::TimelineEvent e;
    e.ts_ns = e.first_byte_ns = ts;
    e.offset = r.body_bytes;
    e.wire_bytes = bytes;
    e.kind = kind;
    e.syscall_ns = 9000;
    e.events_in_syscall = 1;
    r.body_bytes += bytes;
    r.timeline.push_back(e);
  };
  event(r.request_end_ns + 118 * kMs, protocol::EventKind::role_only, 142);
  std::uint64_t t = r.request_end_ns + 120 * kMs;
  for (int i = 0; i < 24; ++i) {
    if (i > 0) t += (i == 12 ? 320 : 25) * kMs;
    event(t, protocol::EventKind::content, 138 + static_cast<std::uint32_t>(i % 3) * 4);
  }
  event(t + 2 * kMs, protocol::EventKind::usage_only, 221);
  event(t + 3 * kMs, protocol::EventKind::done, 14);
  r.first_event_ns = r.timeline.front().ts_ns;
  r.first_token_ns = r.timeline[1].ts_ns;
  r.last_token_ns = t;
  r.last_event_ns = r.timeline.back().ts_ns;
  r.end_ns = r.last_event_ns + 1 * kMs;
  r.metrics = core::record_metrics(r, 24, core::PipelineConfig{});
  return r;
}

StoreOptions fixed_clock_options() {
  StoreOptions o;
  o.clock = output::WallClock(1'700'000'000 * static_cast<std::int64_t>(kS));
  o.host = "testhost";
  return o;
}

TEST(DemoRecord, HasOneStallAfterToken11) {
  const core::StreamRecord r = demo_record(1);
  ASSERT_EQ(r.metrics.stalls.size(), 1u);
  EXPECT_EQ(r.metrics.stalls[0].after_event, 11u);
  EXPECT_EQ(r.metrics.stalls[0].gap_ns, 320 * kMs);
  EXPECT_EQ(r.metrics.tokens, 24u);
}

TEST(RecordStore, KeepsTheLastNAndEvictsTheOldest) {
  StoreOptions o = fixed_clock_options();
  o.capacity = 3;
  RecordStore store(o);
  for (std::uint64_t g = 1; g <= 5; ++g) store.add(demo_record(g, g * kS));
  EXPECT_EQ(store.size(), 3u);
  const auto recent = store.recent(10);
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(json::parse(*recent[0])["stream_id"], "5-0");
  EXPECT_EQ(json::parse(*recent[2])["stream_id"], "3-0");
  EXPECT_EQ(store.recent(1).size(), 1u);
  EXPECT_FALSE(store.find("1-0").has_value());
  EXPECT_FALSE(store.find("2-0").has_value());
  ASSERT_TRUE(store.find("3-0").has_value());
  const StoreCounters c = store.counters();
  EXPECT_EQ(c.added, 5u);
  EXPECT_EQ(c.evicted, 2u);
  EXPECT_EQ(c.records, 3u);
  EXPECT_EQ(c.capacity, 3u);
  const json list = json::parse(store.recent_json(2));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1]["stream_id"], "4-0");
}

TEST(RecordStore, LinesAreExactlyTheRenderedRecords) {
  const StoreOptions o = fixed_clock_options();
  RecordStore store(o);
  const core::StreamRecord r = demo_record(7);
  store.add(r);
  output::RenderOptions plain{false, o.host}, with_timeline{true, o.host};
  EXPECT_EQ(*store.recent(1)[0], output::render_stream(r, o.clock, plain));
  const auto found = store.find("7-0");
  ASSERT_TRUE(found);
  EXPECT_TRUE(found->timeline_kept);
  EXPECT_EQ(found->line, output::render_stream(r, o.clock, with_timeline));
  EXPECT_EQ(json::parse(found->line)["timeline"].size(), r.timeline.size());
}

TEST(RecordStore, TimelinesStayWithinTheByteBudgetOldestFirst) {
  StoreOptions o = fixed_clock_options();
  const core::StreamRecord sample = demo_record(1);
  const std::size_t one = timeline_memory_bytes(sample);
  o.timeline_budget_bytes = one + one / 2;
  RecordStore store(o);
  for (std::uint64_t g = 1; g <= 3; ++g) store.add(demo_record(g));
  EXPECT_TRUE(store.find("3-0")->timeline_kept);
  EXPECT_FALSE(store.find("2-0")->timeline_kept);
  EXPECT_FALSE(store.find("1-0")->timeline_kept);
  EXPECT_FALSE(json::parse(store.find("1-0")->line).contains("timeline"));
  EXPECT_EQ(json::parse(store.find("1-0")->line)["stream_id"], "1-0");  // the record itself stays
  const StoreCounters c = store.counters();
  EXPECT_EQ(c.timelines_dropped, 2u);
  EXPECT_LE(c.timeline_bytes, o.timeline_budget_bytes);
  EXPECT_EQ(c.records, 3u);

  StoreOptions tiny = fixed_clock_options();
  tiny.max_record_timeline_bytes = 16;  // no timeline fits
  RecordStore small(tiny);
  small.add(demo_record(1));
  EXPECT_FALSE(small.find("1-0")->timeline_kept);
  EXPECT_EQ(small.counters().timeline_bytes, 0u);
}

// Records with chosen metrics for the aggregate tests.
core::StreamRecord metric_record(std::uint64_t generation, const std::string& model, std::optional<double> ttft_ms,
                                 double itl_ms, double rate, std::size_t stalls, std::uint64_t end_ns,
                                 const std::string& comm = "vllm", std::uint32_t pid = 10,
                                 const std::string& path = "/v1/chat/completions") {
  core::StreamRecord r;
  r.conn.generation = generation;
  r.conn.comm = comm;
  r.conn.pid = pid;
  r.role = core::Role::server;
  r.model = model;
  r.path = path;
  r.status = 200;
  r.request_start_ns = end_ns > kS ? end_ns - kS : 1;
  r.end_ns = end_ns;
  const auto ns = [](double ms) { return static_cast<std::uint64_t>(ms * 1e6); };
  if (ttft_ms) r.metrics.ttft_ns = ns(*ttft_ms);
  r.metrics.itl_p50_ns = ns(itl_ms);
  r.metrics.itl_p95_ns = ns(itl_ms * 2);
  r.metrics.itl_p99_ns = ns(itl_ms * 3);
  r.metrics.tokens_per_s = rate;
  r.metrics.tokens = 100;
  r.metrics.stalls.resize(stalls);
  return r;
}

TEST(RecordStore, StatsAggregatePerStreamValuesPerGroup) {
  RecordStore store(fixed_clock_options());
  store.add(metric_record(1, "llama", 100, 10, 10, 0, 10 * kS));
  store.add(metric_record(2, "llama", 300, 30, 30, 2, 11 * kS, "vllm", 11, "/v1/completions?x=1"));
  store.add(metric_record(3, "llama", 200, 20, 20, 1, 12 * kS));
  store.add(metric_record(4, "qwen", std::nullopt, 40, 50, 0, 13 * kS));  // joined mid-stream: no TTFT

  const json s = store.stats(GroupBy::model);
  EXPECT_EQ(s["by"], "model");
  EXPECT_EQ(s["records"], 4);
  ASSERT_EQ(s["groups"].size(), 2u);
  const json& llama = s["groups"][0];  // most streams first
  EXPECT_EQ(llama["key"], "llama");
  EXPECT_EQ(llama["streams"], 3);
  EXPECT_DOUBLE_EQ(llama["ttft_p50_ms"].get<double>(), 200.0);  // nearest rank: 2nd of 3
  EXPECT_DOUBLE_EQ(llama["ttft_p95_ms"].get<double>(), 300.0);
  EXPECT_DOUBLE_EQ(llama["itl_p50_ms"].get<double>(), 20.0);   // p50 of per-stream p50s
  EXPECT_DOUBLE_EQ(llama["itl_p95_ms"].get<double>(), 60.0);   // p95 of per-stream p95s (20, 40, 60)
  EXPECT_DOUBLE_EQ(llama["itl_p99_ms"].get<double>(), 90.0);   // p99 of per-stream p99s (30, 60, 90)
  EXPECT_DOUBLE_EQ(llama["tokens_per_s_p50"].get<double>(), 20.0);
  EXPECT_EQ(llama["tokens"], 300);
  EXPECT_EQ(llama["stalls"], 3);
  EXPECT_EQ(llama["streams_with_stalls"], 2);
  const json& qwen = s["groups"][1];
  EXPECT_EQ(qwen["key"], "qwen");
  EXPECT_TRUE(qwen["ttft_p50_ms"].is_null());
  EXPECT_DOUBLE_EQ(qwen["itl_p50_ms"].get<double>(), 40.0);
  EXPECT_EQ(s["total"]["streams"], 4);

  const json by_route = store.stats(GroupBy::route);
  ASSERT_EQ(by_route["groups"].size(), 2u);
  EXPECT_EQ(by_route["groups"][0]["key"], "/v1/chat/completions");
  EXPECT_EQ(by_route["groups"][1]["key"], "/v1/completions");  // query string dropped
  const json by_process = store.stats(GroupBy::process);
  EXPECT_EQ(by_process["groups"][0]["key"], "vllm[10]");
  EXPECT_EQ(by_process["groups"][0]["streams"], 3);
  const json by_container = store.stats(GroupBy::container);
  EXPECT_EQ(by_container["groups"][0]["key"], "(host)");

  RecordStore empty;
  EXPECT_TRUE(empty.stats(GroupBy::model)["groups"].empty());
}

// A stream the capture did not see whole (bytes lost) counts its events as a
// lower bound; its event-based rate is unknown, and the stats leave it out.
TEST(RecordStore, StatsLeaveOutTheRateOfLowerBoundCounts) {
  RecordStore store(fixed_clock_options());
  core::StreamRecord holes = metric_record(1, "llama", 100, 10, 10, 0, 10 * kS);
  for (int i = 0; i < 4; ++i) {
    core::TimelineEvent e;
    e.ts_ns = kS + static_cast<std::uint64_t>(i) * 100'000'000;
    e.kind = protocol::EventKind::content;
    holes.timeline.push_back(e);
  }
  holes.bytes_lost = 500;
  holes.metrics = core::record_metrics(holes, std::nullopt, core::PipelineConfig{});
  ASSERT_TRUE(holes.metrics.counts_lower_bound);
  ASSERT_FALSE(holes.metrics.tokens_per_s);
  store.add(std::move(holes));
  store.add(metric_record(2, "llama", 100, 10, 20, 0, 11 * kS));  // 20 tokens/s
  const json s = store.stats(GroupBy::model);
  EXPECT_EQ(s["groups"][0]["streams"], 2);
  EXPECT_DOUBLE_EQ(s["groups"][0]["tokens_per_s_p50"].get<double>(), 20.0) << "the other stream's rate alone";
}

TEST(RecordStore, GroupKeys) {
  // The keys themselves: core/labels_test.cpp.
  EXPECT_EQ(parse_group_by("container"), GroupBy::container);
  EXPECT_FALSE(parse_group_by("host").has_value());
}

TEST(RecordStore, TopCountsTheWindowAndLiveStreams) {
  RecordStore store(fixed_clock_options());
  const std::uint64_t now = 1000 * kS;
  store.add(metric_record(1, "llama", 100, 10, 10, 1, now - 10 * kS));
  store.add(metric_record(2, "llama", 300, 30, 30, 0, now - 20 * kS));
  store.add(metric_record(3, "llama", 900, 90, 90, 5, now - 70 * kS));  // outside 60 s
  store.add(metric_record(4, "qwen", 100, 10, 10, 0, now - 5 * kS, "sglang", 20));
  LiveStream l;
  l.id = "9-0";
  l.pid = 10;
  l.comm = "vllm";
  l.path = "/v1/chat/completions";
  l.model = "llama";
  l.started_ns = now - 2 * kS;
  l.events = 5;
  l.last_event_ns = now - 100 * kMs;
  LiveStream l2 = l;
  l2.id = "10-0";
  l2.model = "mistral";
  store.set_live({l, l2});

  const json top = store.top(now, 60 * kS);
  EXPECT_EQ(top["streams"], 3);
  EXPECT_EQ(top["live"], 2);
  EXPECT_EQ(top["stalls"], 1);
  EXPECT_DOUBLE_EQ(top["tokens_per_s"].get<double>(), 300.0 / 60.0);
  ASSERT_EQ(top["rows"].size(), 3u);
  const json& first = top["rows"][0];
  EXPECT_EQ(first["process"], "vllm[10]");
  EXPECT_EQ(first["model"], "llama");
  EXPECT_EQ(first["route"], "/v1/chat/completions");
  EXPECT_EQ(first["streams"], 2);
  EXPECT_EQ(first["live"], 1);
  EXPECT_DOUBLE_EQ(first["ttft_p50_ms"].get<double>(), 100.0);
  bool saw_live_only = false;
  for (const json& row : top["rows"]) {
    if (row["model"] == "mistral") {
      saw_live_only = true;
      EXPECT_EQ(row["streams"], 0);
      EXPECT_EQ(row["live"], 1);
      EXPECT_TRUE(row["ttft_p50_ms"].is_null());
    }
  }
  EXPECT_TRUE(saw_live_only);

  const json live = store.live_json(now);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_DOUBLE_EQ(live[0]["age_ms"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(live[0]["idle_ms"].get<double>(), 100.0);
  EXPECT_EQ(store.counters().live, 2u);
  store.set_live({});
  EXPECT_TRUE(store.live_json(now).empty());
}

TEST(RecordStore, TimelineWatchersGetRecordsInOrderAndTheirDropsAreCounted) {
  RecordStore store(fixed_clock_options());
  SubscriptionPtr watcher = store.subscribe(true, 2);
  for (std::uint64_t g = 1; g <= 4; ++g) store.add(demo_record(g));
  EXPECT_EQ(watcher->dropped(), 2u);
  EXPECT_EQ(store.counters().subscriber_drops, 2u);
  auto a = watcher->pop(std::chrono::milliseconds(0));
  auto b = watcher->pop(std::chrono::milliseconds(0));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(json::parse(*a)["stream_id"], "1-0");
  EXPECT_EQ(json::parse(*b)["stream_id"], "2-0");
  EXPECT_EQ(*a, output::render_stream(demo_record(1), fixed_clock_options().clock, {true, fixed_clock_options().host}));
}

TEST(RecordStore, SlowSubscribersDropAndCountNeverBlock) {
  RecordStore store(fixed_clock_options());
  SubscriptionPtr slow = store.subscribe(false, 2);
  SubscriptionPtr full = store.subscribe(true, 100);
  for (std::uint64_t g = 1; g <= 5; ++g) store.add(demo_record(g));
  EXPECT_EQ(slow->dropped(), 3u);
  EXPECT_EQ(full->dropped(), 0u);
  EXPECT_EQ(store.counters().subscriber_drops, 3u);
  EXPECT_EQ(slow->take_dropped(), 3u);
  EXPECT_EQ(slow->take_dropped(), 0u);
  // The queue kept the oldest lines, in order.
  auto a = slow->pop(std::chrono::milliseconds(0));
  auto b = slow->pop(std::chrono::milliseconds(0));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(json::parse(*a)["stream_id"], "1-0");
  EXPECT_EQ(json::parse(*b)["stream_id"], "2-0");
  EXPECT_FALSE(json::parse(*a).contains("timeline"));
  EXPECT_EQ(slow->pop(std::chrono::milliseconds(1)), nullptr);
  auto with_timeline = full->pop(std::chrono::milliseconds(0));
  ASSERT_TRUE(with_timeline);
  EXPECT_EQ(json::parse(*with_timeline)["timeline"].size(), 27u);

  EXPECT_EQ(store.counters().subscribers, 2u);
  slow.reset();
  full->close();
  EXPECT_EQ(store.counters().subscribers, 0u);
  store.add(demo_record(6));  // prunes them
  EXPECT_EQ(store.counters().subscribers, 0u);
}

TEST(RecordStore, PopWakesOnAddAndOnClose) {
  RecordStore store(fixed_clock_options());
  SubscriptionPtr sub = store.subscribe();
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    store.add(demo_record(1));
  });
  auto line = sub->pop(std::chrono::seconds(5));
  producer.join();
  ASSERT_TRUE(line);
  EXPECT_EQ(json::parse(*line)["stream_id"], "1-0");
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    sub->close();
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(sub->pop(std::chrono::seconds(5)), nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  closer.join();
}

// A reader that asks for the live view gets one published after it asked:
// the pipeline thread sees the question on its next drain tick.
TEST(RecordStore, TheLiveViewIsPublishedWhenAsked) {
  RecordStore store;
  EXPECT_FALSE(store.live_asked());
  const std::uint64_t before = store.ask_live();
  EXPECT_TRUE(store.live_asked());
  EXPECT_FALSE(store.wait_live(before, std::chrono::milliseconds(30))) << "nothing was published";
  std::thread pipeline([&] {
    while (!store.live_asked()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    LiveStream l;
    l.id = "7-0";
    store.set_live({l});
  });
  const std::uint64_t asked = store.ask_live();
  EXPECT_TRUE(store.wait_live(asked, std::chrono::seconds(2)));
  pipeline.join();
  EXPECT_FALSE(store.live_asked()) << "answered";
  ASSERT_EQ(store.live().size(), 1u);
  EXPECT_EQ(store.live()[0].id, "7-0");
}

TEST(RecordStore, ConcurrentAddsAndQueries) {
  StoreOptions o = fixed_clock_options();
  o.capacity = 50;
  RecordStore store(o);
  SubscriptionPtr sub = store.subscribe(false, 8);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done) {
      (void)store.recent_json(20);
      (void)store.stats(GroupBy::model);
      (void)store.top(2000 * kS);
      (void)sub->pop(std::chrono::milliseconds(0));
    }
  });
  for (std::uint64_t g = 1; g <= 300; ++g) store.add(demo_record(g));
  done = true;
  reader.join();
  const StoreCounters c = store.counters();
  EXPECT_EQ(c.records, 50u);
  EXPECT_EQ(c.added, 300u);
  EXPECT_EQ(c.evicted, 250u);
}

// ------------------------------------------------------------ CLI formatting

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

json rendered(const core::StreamRecord& r, bool timeline = true) {
  return json::parse(output::render_stream(r, output::WallClock(0), {timeline, "h"}));
}

TEST(CliFormat, ShowMarksTheStallOnTheEventThatEndedIt) {
  const std::string text = cli::format_show(rendered(demo_record(12)));
  const auto lines = lines_of(text);
  std::vector<std::string> marked;
  for (const auto& l : lines) {
    if (l.find("◀ stall") != std::string::npos) marked.push_back(l);
  }
  ASSERT_EQ(marked.size(), 1u) << text;
  // Token event 12 (after token 11) is timeline event 13: the role chunk is event 0.
  EXPECT_EQ(marked[0].rfind("  13 content", 0), 0u) << marked[0];
  EXPECT_NE(marked[0].find("◀ stall 320 ms"), std::string::npos);
  EXPECT_NE(marked[0].find("320.0"), std::string::npos);  // the gap column
  EXPECT_NE(text.find("+emit ms"), std::string::npos);
  EXPECT_NE(text.find("stream 12-0"), std::string::npos);
  // Sparkline: one character per gap, the stall the only full block.
  std::string spark;
  for (const auto& l : lines) {
    if (l.rfind("gaps ", 0) == 0) spark = l;
  }
  ASSERT_FALSE(spark.empty());
  std::size_t full_blocks = 0;
  for (std::size_t at = spark.find("█"); at != std::string::npos; at = spark.find("█", at + 1)) ++full_blocks;
  EXPECT_EQ(full_blocks, 1u) << spark;
  // The stall's bar is the longest; timeline rows fit 80 columns.
  std::size_t rows = 0;
  for (const auto& l : lines) {
    if (l.size() > 5 && l[3] >= '0' && l[3] <= '9' && l[4] == ' ' && l[0] == ' ') {
      ++rows;
      EXPECT_LE(cli::display_width(l), 80u) << l;
    }
  }
  EXPECT_EQ(rows, 27u);
  // The stall is also named under the sparkline, with where to find it.
  EXPECT_NE(text.find("▶ stall 320 ms before event 13 (+"), std::string::npos) << text;
}

TEST(CliFormat, ShowVariants) {
  const std::string client = cli::format_show(rendered(demo_record(3, 1000 * kS, core::Role::client)));
  EXPECT_NE(client.find("+read ms"), std::string::npos);
  cli::FormatOptions ascii;
  ascii.unicode = false;
  const std::string plain = cli::format_show(rendered(demo_record(3)), ascii);
  EXPECT_NE(plain.find("< stall 320 ms"), std::string::npos);
  EXPECT_EQ(plain.find("█"), std::string::npos);
  const std::string no_timeline = cli::format_show(rendered(demo_record(3), false));
  EXPECT_NE(no_timeline.find("no timeline kept"), std::string::npos);
  // Joined mid-stream: no request end, times from the first event.
  core::StreamRecord joined = demo_record(4);
  joined.request_start_ns = joined.request_end_ns = 0;
  joined.joined_midstream = true;
  joined.metrics = core::record_metrics(joined, 24, core::PipelineConfig{});
  const std::string j = cli::format_show(rendered(joined));
  EXPECT_NE(j.find("joined mid-stream"), std::string::npos);
  EXPECT_NE(j.find("◀ stall 320 ms"), std::string::npos);
}

TEST(CliFormat, SparklineBucketsKeepSpikes) {
  std::vector<double> values(1000, 1.0);
  values[637] = 50.0;
  const std::string s = cli::sparkline(values, 40);
  EXPECT_EQ(cli::display_width(s), 40u);
  EXPECT_NE(s.find("█"), std::string::npos);
  EXPECT_EQ(cli::sparkline({}, 10), "");
  EXPECT_EQ(cli::sparkline({0, 0}, 10), "▁▁");
  EXPECT_EQ(cli::sparkline({1, 8}, 10), "▁█");
}

TEST(CliFormat, TablesAlign) {
  const std::string t = cli::format_table({"NAME", "N"}, {{"a", "1"}, {"long-name", "12345"}}, {false, true});
  const auto lines = lines_of(t);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "NAME           N");
  EXPECT_EQ(lines[1], "a              1");
  EXPECT_EQ(lines[2], "long-name  12345");
  EXPECT_EQ(cli::ellipsize("abcdef", 4), "abc…");
  EXPECT_EQ(cli::fmt_ms(json(nullptr)), "-");
  EXPECT_EQ(cli::fmt_ms(json(12.345)), "12.3");

  RecordStore store(fixed_clock_options());
  store.add(demo_record(1));
  store.add(demo_record(2));
  const std::string streams = cli::format_streams(json::parse(store.recent_json(10)));
  EXPECT_NE(streams.find("2-0"), std::string::npos);
  EXPECT_NE(streams.find("demo-llama-8b"), std::string::npos);
  const std::string stats = cli::format_stats(store.stats(GroupBy::model));
  EXPECT_NE(stats.find("MODEL"), std::string::npos);
  EXPECT_NE(stats.find("demo-llama-8b"), std::string::npos);
  EXPECT_NE(cli::format_top(store.top(1000 * kS + 2 * kS)).find("sample-server[4242]"), std::string::npos);
  EXPECT_NE(cli::format_status(json{{"ok", true}, {"version", "1.2"}, {"store", {{"records", 2}}}}).find("store.records: 2"),
            std::string::npos);
  EXPECT_EQ(cli::format_live(json::array()), "no streams in flight\n");
}

}  // namespace
}  // namespace infertap::daemon
