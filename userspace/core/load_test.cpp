// The load context of stream records with a fake clock: concurrency at the
// first token and its mean and max over the decode phase, the queue of
// requests waiting for their first token, a client's share, pressure and CPU
// time per token from a fake probe, bounded sampling; and end to end through
// the pipeline from synthetic kernel records (streams of one server process
// overlapping, input size and identity from usage and the request).
#include "core/load.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/pipeline.h"
#include "support/event_builder.h"

namespace infertap {
namespace {

using core::LoadContext;
using core::LoadTracker;
using core::Pressure;

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kT0 = 1'000'000'000'000ull;

LoadTracker::ScopeId server(std::uint32_t pid = 7, std::string cgroup = "/srv.slice") {
  LoadTracker::ScopeId id;
  id.key = LoadTracker::process_key(pid);
  id.process = true;
  id.pid = pid;
  id.comm = "vllm";
  id.cgroup = std::move(cgroup);
  return id;
}

class FakeProbe : public core::LoadProbe {
 public:
  std::optional<Pressure> host;
  std::map<std::string, Pressure> cgroups;
  std::map<std::uint32_t, std::uint64_t> cpu;
  std::vector<std::string> cgroups_read;
  std::vector<std::uint32_t> pids_read;

  std::optional<Pressure> host_pressure() override { return host; }
  std::optional<Pressure> cgroup_pressure(const std::string& c) override {
    cgroups_read.push_back(c);
    auto it = cgroups.find(c);
    return it == cgroups.end() ? std::nullopt : std::optional<Pressure>(it->second);
  }
  std::optional<std::uint64_t> process_cpu_ns(std::uint32_t pid) override {
    pids_read.push_back(pid);
    auto it = cpu.find(pid);
    return it == cpu.end() ? std::nullopt : std::optional<std::uint64_t>(it->second);
  }
};

// Three streams decode in a staircase: A from 0 to 30 ms, B 10-40, C 20-50.
TEST(Load, ConcurrencyAtFirstTokenAndItsMeanAndMaxOverTheDecodePhase) {
  LoadTracker t;
  const auto s = server();
  LoadTracker::Ticket a, b, c;
  LoadContext la, lb, lc;
  t.first_token(s, a, false, kT0, 0, la);
  t.first_token(s, b, false, kT0 + 10 * kMs, 0, lb);
  t.first_token(s, c, false, kT0 + 20 * kMs, 0, lc);
  EXPECT_EQ(la.concurrency, 1u);
  EXPECT_EQ(lb.concurrency, 2u);
  EXPECT_EQ(lc.concurrency, 3u);
  t.stream_ended(s, a, kT0 + 30 * kMs, 10, "", la);
  t.stream_ended(s, b, kT0 + 40 * kMs, 10, "", lb);
  t.stream_ended(s, c, kT0 + 50 * kMs, 10, "", lc);
  // A: 1, 2, 3 streams for 10 ms each; B: 2, 3, 2; C: 3, 2, 1.
  EXPECT_NEAR(*la.concurrency_mean, 2.0, 1e-9);
  EXPECT_NEAR(*lb.concurrency_mean, 7.0 / 3, 1e-9);
  EXPECT_NEAR(*lc.concurrency_mean, 2.0, 1e-9);
  EXPECT_EQ(la.concurrency_max, 3u);
  EXPECT_EQ(lb.concurrency_max, 3u);
  EXPECT_EQ(lc.concurrency_max, 3u) << "its own start was the peak";
  // A stream alone after them: the earlier peak is not its own.
  LoadTracker::Ticket d;
  LoadContext ld;
  t.first_token(s, d, false, kT0 + 60 * kMs, 0, ld);
  t.stream_ended(s, d, kT0 + 70 * kMs, 1, "", ld);
  EXPECT_EQ(ld.concurrency, 1u);
  EXPECT_EQ(ld.concurrency_max, 1u);
  EXPECT_NEAR(*ld.concurrency_mean, 1.0, 1e-9);
  ASSERT_EQ(t.scopes().size(), 1u);
  EXPECT_EQ(t.scopes()[0].in_flight, 0u);
}

// A peak that came and went inside a stream's decode phase is its max.
TEST(Load, PeakInsideTheDecodePhaseIsTheMax) {
  LoadTracker t;
  const auto s = server();
  LoadTracker::Ticket a;
  LoadContext la;
  t.first_token(s, a, false, kT0, 0, la);
  std::vector<LoadTracker::Ticket> burst(5);
  for (int i = 0; i < 5; ++i) {
    LoadContext l;
    t.first_token(s, burst[i], false, kT0 + (10 + i) * kMs, 0, l);
  }
  for (int i = 0; i < 5; ++i) {
    LoadContext l;
    t.stream_ended(s, burst[i], kT0 + (20 + i) * kMs, 1, "", l);
  }
  t.stream_ended(s, a, kT0 + 100 * kMs, 1, "", la);
  EXPECT_EQ(la.concurrency, 1u);
  EXPECT_EQ(la.concurrency_max, 6u);
  EXPECT_GT(*la.concurrency_mean, 1.0);
  EXPECT_LT(*la.concurrency_mean, 2.0);
}

TEST(Load, RequestsWaitUntilTheirFirstTokenOrUntilDropped) {
  LoadTracker t;
  const auto s = server();
  EXPECT_EQ(t.request_ended(s, kT0), 0u);
  EXPECT_EQ(t.request_ended(s, kT0 + 1), 1u);
  EXPECT_EQ(t.request_ended(s, kT0 + 2), 2u);
  LoadTracker::Ticket a;
  LoadContext la;
  t.first_token(s, a, true, kT0 + 10 * kMs, 0, la);
  EXPECT_EQ(la.waiting, 2u) << "two others still wait";
  EXPECT_EQ(t.scopes()[0].waiting, 2u);
  EXPECT_EQ(t.scopes()[0].in_flight, 1u);
  t.request_dropped(s.key);  // answered without a stream
  EXPECT_EQ(t.scopes()[0].waiting, 1u);
  t.request_dropped(s.key);
  t.request_dropped(s.key);  // never below zero
  EXPECT_EQ(t.scopes()[0].waiting, 0u);
}

TEST(Load, ClientConcurrencyCountsOneClientsStreams) {
  LoadTracker t;
  const auto s = server();
  std::vector<LoadTracker::Ticket> tickets(4);
  std::vector<LoadContext> l(4);
  t.first_token(s, tickets[0], false, kT0, 1, l[0]);
  t.first_token(s, tickets[1], false, kT0 + 1, 1, l[1]);
  t.first_token(s, tickets[2], false, kT0 + 2, 2, l[2]);
  t.first_token(s, tickets[3], false, kT0 + 3, 1, l[3]);
  EXPECT_EQ(l[0].client_concurrency, 1u);
  EXPECT_EQ(l[1].client_concurrency, 2u);
  EXPECT_EQ(l[2].client_concurrency, 1u);
  EXPECT_EQ(l[3].client_concurrency, 3u);
  EXPECT_EQ(l[3].concurrency, 4u);
  t.stream_ended(s, tickets[0], kT0 + 10, 1, "", l[0]);
  LoadTracker::Ticket e;
  LoadContext le;
  t.first_token(s, e, false, kT0 + 20, 1, le);
  EXPECT_EQ(le.client_concurrency, 3u);
}

TEST(Load, PressureAndCpuPerTokenComeFromTheLatestSamples) {
  LoadTracker t;
  FakeProbe probe;
  const auto s = server(7, "/srv.slice");
  Pressure host;
  host.cpu_some = 5;
  host.memory_some = 0;
  probe.host = host;
  Pressure cg;
  cg.cpu_some = 40;
  cg.cpu_full = 12;
  probe.cgroups["/srv.slice"] = cg;
  probe.cpu[7] = 1'000 * kMs;

  // First stream: before any sample nothing is known; its cgroup is noted.
  LoadTracker::Ticket a;
  LoadContext la;
  t.first_token(s, a, false, kT0, 0, la);
  t.stream_ended(s, a, kT0 + 100 * kMs, 100, "/srv.slice", la);
  EXPECT_FALSE(la.host_pressure);
  EXPECT_FALSE(la.cgroup_pressure);
  EXPECT_FALSE(la.cpu_ms_per_token);

  t.sample(kT0 + 1000 * kMs, probe);  // cpu 1000 ms, 100 tokens so far
  LoadTracker::Ticket b;
  LoadContext lb;
  t.first_token(s, b, false, kT0 + 1100 * kMs, 0, lb);
  t.stream_ended(s, b, kT0 + 1500 * kMs, 200, "/srv.slice", lb);
  ASSERT_TRUE(lb.host_pressure);
  EXPECT_EQ(lb.host_pressure->cpu_some, 5.0);
  ASSERT_TRUE(lb.cgroup_pressure);
  EXPECT_EQ(lb.cgroup_pressure->cpu_some, 40.0);
  EXPECT_EQ(lb.cgroup_pressure->cpu_full, 12.0);
  EXPECT_FALSE(lb.cpu_ms_per_token) << "one CPU sample is no delta";

  probe.cpu[7] = 1'100 * kMs;          // 100 ms of CPU ...
  t.sample(kT0 + 2000 * kMs, probe);  // ... for the 200 tokens ended since
  LoadTracker::Ticket c;
  LoadContext lc;
  t.first_token(s, c, false, kT0 + 2100 * kMs, 0, lc);
  t.stream_ended(s, c, kT0 + 2200 * kMs, 10, "/srv.slice", lc);
  ASSERT_TRUE(lc.cpu_ms_per_token);
  EXPECT_NEAR(*lc.cpu_ms_per_token, 0.5, 1e-9);

  // A pid reused (CPU time went back): no per-token number across it.
  probe.cpu[7] = 5 * kMs;
  t.sample(kT0 + 3000 * kMs, probe);
  LoadTracker::Ticket d;
  LoadContext ld;
  t.stream_ended(s, d, kT0 + 3100 * kMs, 10, "/srv.slice", ld);
  EXPECT_FALSE(ld.cpu_ms_per_token);
}

// Client scopes (a server address) have no process to sample; at most
// max_sampled cgroups and processes are read per tick, the most recent ones.
TEST(Load, SamplingIsBounded) {
  core::LoadConfig config;
  config.max_sampled = 2;
  LoadTracker t(config);
  FakeProbe probe;
  for (std::uint32_t pid = 1; pid <= 5; ++pid) {
    const auto s = server(pid, "/c" + std::to_string(pid));
    LoadTracker::Ticket k;
    LoadContext l;
    t.first_token(s, k, false, kT0 + pid * kMs, 0, l);
    t.stream_ended(s, k, kT0 + pid * kMs + 1, 1, "/c" + std::to_string(pid), l);
  }
  LoadTracker::ScopeId client;
  const std::uint8_t addr[16] = {10, 0, 0, 9};
  client.key = LoadTracker::address_key(addr, 8000);
  client.server = "10.0.0.9:8000";
  LoadTracker::Ticket k;
  LoadContext l;
  t.first_token(client, k, false, kT0 + 10 * kMs, 0, l);
  t.sample(kT0 + 20 * kMs, probe);
  EXPECT_EQ(probe.cgroups_read, (std::vector<std::string>{"/c5", "/c4"}));
  EXPECT_EQ(probe.pids_read, (std::vector<std::uint32_t>{5, 4}));
  EXPECT_EQ(t.scope_count(), 6u);
  // Idle scopes are forgotten after 10 minutes; one with a stream in flight is not.
  t.sample(kT0 + 700'000 * kMs, probe);
  EXPECT_EQ(t.scope_count(), 1u);
}

// ---- through the pipeline -----------------------------------------------------

using testing::ConnBuilder;
using testing::chunked;
using testing::openai_chunk;

std::string request(std::string_view body) {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

const std::string kBody =
    R"({"model":"llama-test","stream":true,"stream_options":{"include_usage":true},"max_tokens":40,"messages":[{"role":"user","content":"hi"}]})";
const std::string kHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nServer: vllm-test/1.2\r\nTransfer-Encoding: chunked\r\n\r\n";

std::string fp_chunk(std::string_view fp) {
  return chunked("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"llama-test\",\"system_fingerprint\":\"" +
                 std::string(fp) + "\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"},\"finish_reason\":null}]}\n\n");
}

std::string usage_chunk(int prompt, int completion) {
  return chunked(R"(data: {"id":"c","object":"chat.completion.chunk","model":"llama-test","choices":[],"usage":{"prompt_tokens":)" +
                 std::to_string(prompt) + ",\"completion_tokens\":" + std::to_string(completion) + "}}\n\n");
}

struct PipelineHarness {
  std::vector<core::StreamRecord> records;
  core::PipelineConfig config;
  core::Pipeline pipeline{config, [this](core::StreamRecord&& r) { records.push_back(std::move(r)); }};
  void feed(const std::vector<std::uint8_t>& rec) { pipeline.on_record(rec); }
  const core::StreamRecord* by_port(std::uint16_t remote) const {
    for (const auto& r : records)
      if (r.conn.remote.port == remote) return &r;
    return nullptr;
  }
};

// Two streams of one server process overlap; a third request waits while
// they decode; input size, the output limit, include_usage and the serving
// identity come from the request, the usage chunk, the chunks and the head.
TEST(LoadPipeline, OverlappingStreamsOfOneProcessSeeEachOther) {
  PipelineHarness h;
  FakeProbe probe;
  Pressure host;
  host.cpu_some = 3.5;
  probe.host = host;
  h.pipeline.set_load_probe(&probe);
  ConnBuilder a(0xA1, 100, 8000, 40001), b(0xA2, 100, 8000, 40002), c(0xA3, 100, 8000, 40003);
  h.feed(a.recv(kT0, request(kBody)));
  h.feed(a.send(kT0 + 1 * kMs, kHead));
  h.feed(b.recv(kT0 + 2 * kMs, request(kBody)));
  h.feed(b.send(kT0 + 3 * kMs, kHead));
  h.pipeline.sample_load(kT0 + 4 * kMs);
  h.feed(a.send(kT0 + 10 * kMs, fp_chunk("fp_one")));  // A's first token: B waits
  h.feed(c.recv(kT0 + 12 * kMs, request(kBody)));         // C's request ends while A decodes, B waits
  h.feed(b.send(kT0 + 20 * kMs, fp_chunk("fp_one")));  // B's first token
  for (int i = 1; i < 4; ++i) {
    h.feed(a.send(kT0 + (20 + 10 * i) * kMs, fp_chunk("fp_one")));
    h.feed(b.send(kT0 + (25 + 10 * i) * kMs, fp_chunk("fp_one")));
  }
  h.feed(a.send(kT0 + 60 * kMs, usage_chunk(812, 4) + chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
  h.feed(b.send(kT0 + 80 * kMs, usage_chunk(812, 4) + chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 2u);
  const core::StreamRecord* ra = h.by_port(40001);
  const core::StreamRecord* rb = h.by_port(40002);
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->load.scope, "process");
  EXPECT_EQ(ra->load.concurrency, 1u);
  EXPECT_EQ(ra->load.waiting, 1u) << "B's request had ended, no token yet";
  EXPECT_EQ(ra->load.waiting_at_request, 0u);
  EXPECT_EQ(rb->load.waiting_at_request, 1u) << "A was waiting when B's request ended";
  EXPECT_EQ(rb->load.concurrency, 2u);
  EXPECT_EQ(rb->load.waiting, 1u) << "C waits";
  EXPECT_EQ(ra->load.concurrency_max, 2u);
  EXPECT_EQ(rb->load.concurrency_max, 2u);
  // A: 1 stream 10 ms, 2 streams 40 ms; B: 2 streams 40 ms, 1 stream 20 ms.
  EXPECT_NEAR(*ra->load.concurrency_mean, 90.0 / 50, 1e-9);
  EXPECT_NEAR(*rb->load.concurrency_mean, 100.0 / 60, 1e-9);
  EXPECT_EQ(ra->load.client_concurrency, 1u) << "127.0.0.1 holds A alone at its first token";
  EXPECT_EQ(rb->load.client_concurrency, 2u);
  EXPECT_EQ(ra->load.input_tokens, 812u);
  EXPECT_EQ(ra->load.request_bytes, kBody.size());
  EXPECT_EQ(ra->load.max_tokens, 40u);
  EXPECT_EQ(ra->load.include_usage, true);
  EXPECT_EQ(ra->load.system_fingerprint, "fp_one");
  EXPECT_EQ(ra->load.server_version, "server=vllm-test/1.2");
  ASSERT_TRUE(ra->load.host_pressure);
  EXPECT_EQ(ra->load.host_pressure->cpu_some, 3.5);
  // C is still waiting; its connection going away takes it off the queue.
  std::vector<core::ScopeLoad> scopes = h.pipeline.load_scopes();
  ASSERT_EQ(scopes.size(), 1u);
  EXPECT_EQ(scopes[0].pid, 100u);
  EXPECT_EQ(scopes[0].in_flight, 0u);
  EXPECT_EQ(scopes[0].waiting, 1u);
  h.feed(c.state(kT0 + 90 * kMs, 1, 7));
  scopes = h.pipeline.load_scopes();
  EXPECT_EQ(scopes[0].waiting, 0u);
}

// A non-streaming answer stops its request waiting; a client's streams count
// in the scope of the server address they go to.
TEST(LoadPipeline, NonStreamAnswersLeaveTheQueueAndClientsCountPerServer) {
  PipelineHarness h;
  ConnBuilder a(0xB1, 100, 8000, 40001);
  h.feed(a.recv(kT0, request(kBody)));
  EXPECT_EQ(h.pipeline.load_scopes()[0].waiting, 1u);
  h.feed(a.send(kT0 + 5 * kMs, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"));
  EXPECT_EQ(h.pipeline.load_scopes()[0].waiting, 0u);

  ConnBuilder c1(0xC1, 200, 41001, 8000), c2(0xC2, 200, 41002, 8000);
  h.feed(c1.send(kT0, request(kBody)));
  h.feed(c1.recv(kT0 + 1 * kMs, kHead));
  h.feed(c1.recv(kT0 + 10 * kMs, chunked(openai_chunk("x"))));
  h.feed(c2.send(kT0 + 11 * kMs, request(kBody)));
  h.feed(c2.recv(kT0 + 12 * kMs, kHead));
  h.feed(c2.recv(kT0 + 20 * kMs, chunked(openai_chunk("x"))));
  h.feed(c1.recv(kT0 + 30 * kMs, chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
  h.feed(c2.recv(kT0 + 40 * kMs, chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 2u);
  const core::StreamRecord* r2 = nullptr;
  for (const auto& r : h.records)
    if (r.conn.local.port == 41002) r2 = &r;
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->load.scope, "server");
  EXPECT_EQ(r2->load.concurrency, 2u);
  EXPECT_FALSE(r2->load.client_concurrency) << "a client's own streams have no client share";
  EXPECT_FALSE(r2->load.input_tokens) << "no usage in this stream";
  EXPECT_EQ(r2->load.request_bytes, kBody.size());
}

}  // namespace
}  // namespace infertap
