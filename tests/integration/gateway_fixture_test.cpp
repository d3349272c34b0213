// The real-component path fixtures of issue 3 checked on their own, without
// the agent: each gateway configuration proxies a stream end to end and holds
// events back (or not) as docs/gateways.md says; a server pause passes through
// every gateway; a tbf-limited veth path makes a stream bandwidth-bound; a
// small-buffer slow reader makes the server's send block; nothing leaks.
// Every number asserted here is read from the sample server's and sample
// client's own logs (CLOCK_MONOTONIC, same clock on both sides).

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "support/gateways.h"
#include "support/live_test.h"
#include "support/netns.h"
#include "support/sample_peers.h"

using namespace std::chrono_literals;
using infertap::testing::ClientLog;
using infertap::testing::ClientRun;
using infertap::testing::Gateway;
using infertap::testing::HAProxy;
using infertap::testing::HAProxyMode;
using infertap::testing::NetnsOptions;
using infertap::testing::NetnsPath;
using infertap::testing::Nginx;
using infertap::testing::NginxMode;
using infertap::testing::SampleServer;
using infertap::testing::ServerLog;

namespace {

// Per content event: client read time - server send time (ms), in order.
std::vector<double> holds_ms(const ClientLog& c, const ServerLog& s) {
  std::vector<std::int64_t> sent;
  for (const auto& x : s.sends)
    if (x.kind == "content") sent.push_back(x.mono_ns);
  auto got = c.content_times();
  std::vector<double> out;
  for (std::size_t i = 0; i < std::min(sent.size(), got.size()); ++i) out.push_back(double(got[i] - sent[i]) / 1e6);
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string describe(const ClientLog& c, const ServerLog& s) {
  std::string b;
  for (auto n : c.content_bursts()) b += std::to_string(n) + " ";
  auto h = holds_ms(c, s);
  return "client: content_events=" + std::to_string(c.content_events()) + " ttft_ms=" + std::to_string(c.ttft_ms()) +
         " bursts=[" + b + "] max_gap_ms=" + std::to_string(c.max_content_gap_ms()) +
         " first_hold_ms=" + std::to_string(h.empty() ? -1 : h[0]) + " median_hold_ms=" + std::to_string(median(h)) +
         "; server: ttft_ms=" + std::to_string(s.ttft_ms()) + " span_ms=" + std::to_string(s.span_ms());
}

bool namespace_exists(const std::string& name) {
  std::string out;
  infertap::testing::run_shell("ip netns list", &out);
  return (" " + out).find(" " + name + " ") != std::string::npos ||
         (" " + out).find(" " + name + "\n") != std::string::npos;
}

bool link_exists(const std::string& dev) { return infertap::testing::run_shell("ip link show dev " + dev) == 0; }

struct GatewayCase {
  std::string name;
  std::function<std::unique_ptr<Gateway>(std::uint16_t upstream, const std::string& dir)> make;
  bool buffers;
  std::vector<std::string> client_args;  // e.g. Accept-Encoding for gzip
  // Holds the whole (short) stream until the end: a mid-stream pause shows
  // as a later first token, not as a gap between events.
  bool holds_whole_stream = false;
};

void PrintTo(const GatewayCase& c, std::ostream* os) { *os << c.name; }

std::vector<GatewayCase> gateway_cases() {
  auto nginx = [](NginxMode m) {
    return [m](std::uint16_t up, const std::string& dir) -> std::unique_ptr<Gateway> {
      return std::make_unique<Nginx>(m, up, dir);
    };
  };
  auto haproxy = [](HAProxyMode m) {
    return [m](std::uint16_t up, const std::string& dir) -> std::unique_ptr<Gateway> {
      return std::make_unique<HAProxy>(m, up, dir);
    };
  };
  return {
      {"nginx_streaming", nginx(NginxMode::streaming), false, {}},
      {"nginx_buffering_chunked", nginx(NginxMode::buffering_chunked), false, {}},
      {"nginx_defaults", nginx(NginxMode::defaults), true, {}},
      {"nginx_large_buffers", nginx(NginxMode::large_buffers), true, {}, true},
      {"nginx_gzip", nginx(NginxMode::gzip), true, {"--accept-encoding", "gzip"}, true},
      {"haproxy_streaming", haproxy(HAProxyMode::streaming), false, {}},
      {"haproxy_defaults", haproxy(HAProxyMode::defaults), true, {}},
      {"haproxy_wait_for_body", haproxy(HAProxyMode::wait_for_body), true, {}},
  };
}

class GatewayFixture : public infertap::testing::LiveTest, public ::testing::WithParamInterface<GatewayCase> {
 protected:
  GatewayFixture() : LiveTest("infertap-gwfix") {}
};

// 40 content events of ~250 B, TTFT 50 ms, ITL 10 ms, through the gateway.
TEST_P(GatewayFixture, ProxiesTheStreamAndBuffersOnlyWhereExpected) {
  const GatewayCase& gc = GetParam();
  SampleServer server(path("server"), {"--ttft-ms", "50", "--itl-ms", "10"});
  ASSERT_TRUE(server.ok()) << server.error();
  auto gw = gc.make(server.port(), path("gateway"));
  ASSERT_TRUE(gw->ok()) << gw->error();

  std::vector<std::string> args = {"--tokens", "40"};
  args.insert(args.end(), gc.client_args.begin(), gc.client_args.end());
  ClientRun c = infertap::testing::run_sample_client(path("client"), gw->port(), args);
  ASSERT_EQ(c.rc, 0) << c.output << "\ngateway log:\n" << gw->log();
  ServerLog s = server.log();
  ASSERT_TRUE(c.log.ok) << c.log.error;
  ASSERT_EQ(c.log.content_events(), 40u) << "the gateway lost or mangled events";
  ASSERT_EQ(c.log.events.size(), 43u) << "role + 40 content + finish + [DONE]";
  const auto holds = holds_ms(c.log, s);
  ASSERT_EQ(holds.size(), 40u);
  const std::string info = gc.name + ": " + describe(c.log, s);
  std::printf("  %s\n", info.c_str());
  RecordProperty("measured", info);

  if (gc.buffers) {
    // Held back: events leave in bursts, the first token waits for a buffer.
    EXPECT_GE(c.log.max_content_burst(), 8u) << info;
    EXPECT_GE(holds[0], 80.0) << "first token not held back by the gateway: " << info;
  } else {
    // Streamed: events arrive one by one, each a few ms after its send at most.
    EXPECT_LE(c.log.max_content_burst(), 3u) << info;
    EXPECT_LT(median(holds), 15.0) << info;
    EXPECT_LT(holds[0], 60.0) << info;
  }
  // Shutdown leaves nothing behind (nginx: master and worker).
  const auto pids = gw->pids();
  EXPECT_GE(pids.size(), gc.name.rfind("nginx", 0) == 0 ? 2u : 1u) << "nginx master + worker expected";
  EXPECT_TRUE(gw->stop()) << "gateway did not exit on SIGTERM";
  for (pid_t p : pids) {
    for (int i = 0; i < 100 && ::kill(p, 0) == 0; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_NE(::kill(p, 0), 0) << "gateway process " << p << " still alive after stop()";
  }
}

// The server pauses 300 ms after its 20th content event; every gateway
// delivers the stream, and the pause reaches the client.
TEST_P(GatewayFixture, ServerPausePassesThrough) {
  const GatewayCase& gc = GetParam();
  SampleServer server(path("server"),
                      {"--ttft-ms", "20", "--itl-ms", "10", "--pause-after", "20", "--pause-ms", "300"});
  ASSERT_TRUE(server.ok()) << server.error();
  auto gw = gc.make(server.port(), path("gateway"));
  ASSERT_TRUE(gw->ok()) << gw->error();
  std::vector<std::string> args = {"--tokens", "30"};
  args.insert(args.end(), gc.client_args.begin(), gc.client_args.end());
  ClientRun c = infertap::testing::run_sample_client(path("client"), gw->port(), args);
  ASSERT_EQ(c.rc, 0) << c.output << "\ngateway log:\n" << gw->log();
  ServerLog s = server.log();
  ASSERT_EQ(c.log.content_events(), 30u);
  const std::string info = gc.name + ": " + describe(c.log, s);
  std::printf("  %s\n", info.c_str());

  // The server did pause (ground truth) between content events 20 and 21.
  std::vector<std::int64_t> sent;
  for (const auto& x : s.sends)
    if (x.kind == "content") sent.push_back(x.mono_ns);
  ASSERT_EQ(sent.size(), 30u);
  ASSERT_GE(double(sent[20] - sent[19]) / 1e6, 295.0);

  if (!gc.buffers) {
    // Streamed: the client sees the pause exactly there, and nowhere else.
    EXPECT_GE(c.log.content_gap_before_ms(20), 250.0) << info;
    for (std::size_t i = 1; i < 30; ++i) {
      if (i == 20) continue;
      EXPECT_LT(c.log.content_gap_before_ms(i), 150.0) << "event " << i << ": " << info;
    }
  } else if (gc.holds_whole_stream) {
    // Everything arrives at the end: the pause is inside the client's TTFT.
    EXPECT_EQ(c.log.max_content_burst(), 30u) << info;
    EXPECT_GE(double(c.log.first_content_ns - s.first_content_ns()) / 1e6, 300.0) << info;
  } else {
    // Buffered in parts: the pause shows, but moved and resized — nginx
    // holds a half-full buffer across it (gap > pause), HAProxy's corked
    // bytes leave on the kernel's timer during it (gap < pause).
    EXPECT_GE(c.log.max_content_gap_ms(), 150.0) << info;
  }
}

INSTANTIATE_TEST_SUITE_P(Gateways, GatewayFixture, ::testing::ValuesIn(gateway_cases()),
                         [](const ::testing::TestParamInfo<GatewayCase>& i) { return i.param.name; });

// ---- failure messages --------------------------------------------------------------

TEST(GatewayFixtureErrors, NamesWhatIsWrong) {
  // Nothing listens on the upstream: the gateway still starts (it only
  // connects per request), and a request gets 502.
  infertap::testing::ScratchDir dir("infertap-gwerr");
  ASSERT_TRUE(dir.ok());
  const std::uint16_t dead = infertap::testing::free_port();
  Nginx gw(NginxMode::streaming, dead, dir.file("nginx"));
  ASSERT_TRUE(gw.ok()) << gw.error();
  ClientRun c = infertap::testing::run_sample_client(dir.file("client"), gw.port(), {"--expect-status", "502"});
  EXPECT_EQ(c.rc, 0) << c.output;
  // A config nginx refuses: start-up fails with nginx's own message.
  Nginx bad(NginxMode::streaming, dead, dir.file("bad"), {.extra_location = "no_such_directive on;"});
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("no_such_directive"), std::string::npos) << bad.error();
}

// ---- network namespace path -------------------------------------------------------------

class NetnsFixture : public infertap::testing::LiveTest {
 protected:
  NetnsFixture() : LiveTest("infertap-netns") {}
};

TEST_F(NetnsFixture, CreatesAPathAndCleansUp) {
  std::string name, dev;
  {
    NetnsPath net;
    ASSERT_TRUE(net.ok()) << net.error();
    name = net.name();
    dev = net.host_dev();
    EXPECT_TRUE(namespace_exists(name));
    EXPECT_TRUE(link_exists(dev));
    // A process in the namespace reaches a server on the host side.
    SampleServer server(path("server"), {"--ttft-ms", "5", "--itl-ms", "2"}, net.host_ip());
    ASSERT_TRUE(server.ok()) << server.error();
    ClientRun c = infertap::testing::run_sample_client(path("client"), server.port(), {"--tokens", "10"},
                                                       net.host_ip(), net.exec_prefix());
    ASSERT_EQ(c.rc, 0) << c.output;
    EXPECT_EQ(c.log.content_events(), 10u);
    // A process left running inside is killed with the namespace.
    auto sleeper = infertap::testing::Process::spawn(net.wrap({"/bin/sleep", "60"}));
    ASSERT_TRUE(sleeper);
    for (int i = 0; i < 100 && net.pids().empty(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(net.pids().size(), 1u);
    net.destroy();
    auto st = sleeper->wait(2s);
    ASSERT_TRUE(st) << "process in the namespace survived its deletion";
    EXPECT_TRUE(WIFSIGNALED(*st));
  }
  EXPECT_FALSE(namespace_exists(name)) << name << " leaked";
  EXPECT_FALSE(link_exists(dev)) << dev << " leaked";
}

// A gateway can run inside the namespace (argv_prefix): server on the host,
// nginx in the namespace, client on the host going through it.
TEST_F(NetnsFixture, GatewayInsideTheNamespace) {
  NetnsPath net;
  ASSERT_TRUE(net.ok()) << net.error();
  SampleServer server(path("server"), {"--ttft-ms", "5", "--itl-ms", "2"}, net.host_ip());
  ASSERT_TRUE(server.ok()) << server.error();
  Nginx gw(NginxMode::streaming, server.port(), path("nginx"),
           {.listen_host = net.ns_ip(), .upstream_host = net.host_ip(), .argv_prefix = net.exec_prefix()});
  ASSERT_TRUE(gw.ok()) << gw.error();
  EXPECT_FALSE(net.pids().empty()) << "nginx is not in the namespace";
  ClientRun c = infertap::testing::run_sample_client(path("client"), gw.port(), {"--tokens", "10"}, net.ns_ip());
  ASSERT_EQ(c.rc, 0) << c.output << gw.log();
  EXPECT_EQ(c.log.content_events(), 10u);
}

TEST_F(NetnsFixture, SweepsNamespacesOfDeadRuns) {
  // A namespace and veth named as a crashed run (a pid that does not exist) left them.
  pid_t dead = 4194000;
  while (::kill(dead, 0) == 0 || errno == EPERM) --dead;
  const std::string name = std::string(NetnsPath::kPrefix) + std::to_string(dead) + "-0";
  const std::string dev = "itv" + std::to_string(dead) + "h0";
  ASSERT_EQ(infertap::testing::run_shell("ip netns add " + name), 0);
  ASSERT_EQ(infertap::testing::run_shell("ip link add " + dev + " type veth peer name itv" + std::to_string(dead) + "n0"),
            0);
  ASSERT_TRUE(namespace_exists(name));
  EXPECT_GE(NetnsPath::sweep_stale(), 1);
  EXPECT_FALSE(namespace_exists(name));
  EXPECT_FALSE(link_exists(dev));
  // A live run's namespace is left alone.
  NetnsPath mine;
  ASSERT_TRUE(mine.ok()) << mine.error();
  NetnsPath::sweep_stale();
  EXPECT_TRUE(namespace_exists(mine.name()));
}

// 64 kbit/s from the host to a client in the namespace: 30 events of ~250 B
// every 5 ms (50 KB/s offered) drain at 8 KB/s; the server is done long
// before the client. Events arrive a segment at a time (MTU 1500: ~6 events
// per packet, one packet per ~190 ms).
TEST_F(NetnsFixture, RateLimitedPathIsBandwidthBound) {
  NetnsPath net({.rate = "64kbit"});
  ASSERT_TRUE(net.ok()) << net.error();
  SampleServer server(path("server"), {"--ttft-ms", "20", "--itl-ms", "5"}, net.host_ip());
  ASSERT_TRUE(server.ok()) << server.error();
  ClientRun c = infertap::testing::run_sample_client(path("client"), server.port(), {"--tokens", "30"}, net.host_ip(),
                                                     net.exec_prefix());
  ASSERT_EQ(c.rc, 0) << c.output;
  ServerLog s = server.log();
  ASSERT_EQ(c.log.content_events(), 30u);
  std::int64_t bytes = 0;
  for (const auto& x : s.sends) bytes += x.bytes;
  const double wire_ms = double(bytes) * 8 / 64000 * 1000;  // payload alone at the rate
  const double server_ms = double(s.sends.back().mono_ns - s.request_ns) / 1e6;
  const double client_ms = double(c.log.last_event_ns - s.request_ns) / 1e6;
  const std::string info = "bytes=" + std::to_string(bytes) + " payload_at_rate_ms=" + std::to_string(wire_ms) +
                           " server_done_ms=" + std::to_string(server_ms) + " client_done_ms=" +
                           std::to_string(client_ms) + " max_burst=" + std::to_string(c.log.max_content_burst()) +
                           "\n" + net.qdisc_stats();
  std::printf("  %s\n", info.c_str());
  EXPECT_LT(server_ms, 400.0) << "the server itself should not be slowed: " << info;
  EXPECT_GE(client_ms, 0.9 * wire_ms) << "faster than the rate allows: tbf not applied? " << info;
  EXPECT_LE(client_ms, 2.0 * wire_ms + 500) << info;
  // Between the client's first and last content event the bytes came at the
  // link's rate, not at the server's 50 KB/s.
  const double span_s = double(c.log.content_times().back() - c.log.content_times().front()) / 1e9;
  std::int64_t content_bytes = 0;
  for (const auto& x : s.sends)
    if (x.kind == "content") content_bytes += x.bytes;
  const double rate_bps = double(content_bytes) * 29 / 30 * 8 / span_s;  // the 29 events after the first
  std::printf("  client-observed rate: %.0f bit/s\n", rate_bps);
  EXPECT_LE(rate_bps, 1.25 * 64000) << info;
  EXPECT_GE(rate_bps, 0.5 * 64000) << info;
  EXPECT_LE(c.log.max_content_burst(), 8u) << "more than a segment at once: " << info;
}

// ---- slow reader --------------------------------------------------------------------------

class SlowReader : public infertap::testing::LiveTest {
 protected:
  SlowReader() : LiveTest("infertap-slow") {}
};

// A reader with a 4 KB receive buffer taking 256 B every 20 ms (~12 KB/s)
// from a server offering 50 KB/s: with a small send buffer on the server
// (--sndbuf 4096) its sends block; with the kernel's autotuned one the whole
// stream fits in the socket buffers and no send blocks, the backlog just sits
// there (docs/gateways.md).
TEST_F(SlowReader, SmallBuffersMakeTheServerSendBlock) {
  const std::vector<std::string> reader = {"--tokens", "100", "--rcvbuf", "4096", "--read-size", "256",
                                           "--read-delay-ms", "20"};
  SampleServer blocked(path("server-small"), {"--ttft-ms", "20", "--itl-ms", "5", "--sndbuf", "4096"});
  ASSERT_TRUE(blocked.ok()) << blocked.error();
  ClientRun c = infertap::testing::run_sample_client(path("client-small"), blocked.port(), reader);
  ASSERT_EQ(c.rc, 0) << c.output;
  ServerLog s = blocked.log();
  std::printf("  sndbuf 4096: blocked_ms=%.0f max_call_ms=%.0f server_span_ms=%.0f client_e2e_ms=%.0f\n",
              s.blocked_ms(), s.max_call_ms(), s.span_ms(), c.log.e2e_ms());
  EXPECT_GE(s.blocked_ms(), 300.0) << "server sends did not block on the slow reader";
  EXPECT_GE(s.max_call_ms(), 50.0);

  SampleServer autotuned(path("server-auto"), {"--ttft-ms", "20", "--itl-ms", "5"});
  ASSERT_TRUE(autotuned.ok()) << autotuned.error();
  ClientRun c2 = infertap::testing::run_sample_client(path("client-auto"), autotuned.port(), reader);
  ASSERT_EQ(c2.rc, 0) << c2.output;
  ServerLog s2 = autotuned.log();
  std::printf("  autotuned sndbuf: blocked_ms=%.0f server_done_ms=%.0f client_done_ms=%.0f\n", s2.blocked_ms(),
              double(s2.sends.back().mono_ns - s2.request_ns) / 1e6,
              double(c2.log.last_event_ns - s2.request_ns) / 1e6);
  // The reader is the bottleneck either way: it finishes long after the server.
  EXPECT_GE(double(c2.log.last_event_ns - s2.sends.back().mono_ns) / 1e6, 500.0);
}

// --stall-after/--stall-ms: the reader stops for 800 ms after 10 events; a
// server with a small send buffer blocks once both buffers are full (~250 ms
// of its 50 KB/s in), for the rest of the stall.
TEST_F(SlowReader, ReaderStallBlocksTheServer) {
  SampleServer server(path("server"), {"--ttft-ms", "20", "--itl-ms", "5", "--sndbuf", "4096"});
  ASSERT_TRUE(server.ok()) << server.error();
  ClientRun c = infertap::testing::run_sample_client(
      path("client"), server.port(), {"--tokens", "80", "--rcvbuf", "4096", "--stall-after", "10", "--stall-ms", "800"});
  ASSERT_EQ(c.rc, 0) << c.output;
  ServerLog s = server.log();
  ASSERT_TRUE(c.log.stall) << "no stall record in the client log";
  const double stall_ms = double(c.log.stall->second - c.log.stall->first) / 1e6;
  std::printf("  stall_ms=%.0f server max_call_ms=%.0f blocked_ms=%.0f\n", stall_ms, s.max_call_ms(), s.blocked_ms());
  EXPECT_GE(stall_ms, 799.0);
  EXPECT_GE(s.max_call_ms(), 400.0) << "the server's send did not block during the reader's stall";
  EXPECT_LE(s.max_call_ms(), stall_ms + 100) << "blocked longer than the reader stalled";
}

}  // namespace

// ---- measurement (not run by default) ---------------------------------------------------------
//
// The numbers in docs/gateways.md:
//   build/integration_tests --gtest_also_run_disabled_tests --gtest_filter='GatewayMeasure.*'
// INFERTAP_MEASURE_TOKENS (default 200), INFERTAP_MEASURE_ITL_MS (10), INFERTAP_MEASURE_TTFT_MS (50).

namespace {

int env_int(const char* name, int def) {
  const char* v = getenv(name);
  return v ? std::atoi(v) : def;
}

std::string measure_row(const std::string& name, const ClientLog& c, const ServerLog& s) {
  auto b = c.content_bursts();
  std::vector<double> sizes(b.begin(), b.end());
  auto h = holds_ms(c, s);
  char buf[512];
  std::snprintf(buf, sizeof buf, "| %-28s | %6.0f | %6.0f | %5.0f | %4zu | %4zu | %5.0f | %6.0f | %6.0f |", name.c_str(),
                s.ttft_ms(), c.ttft_ms(), h.empty() ? -1 : h[0], b.size(), c.max_content_burst(), median(sizes),
                median(h), h.empty() ? -1 : *std::max_element(h.begin(), h.end()));
  return buf;
}

}  // namespace

class GatewayMeasure : public infertap::testing::LiveTest {
 protected:
  GatewayMeasure() : LiveTest("infertap-gwmeasure") {}

  std::vector<std::string> server_args() const {
    return {"--ttft-ms", std::to_string(env_int("INFERTAP_MEASURE_TTFT_MS", 50)), "--itl-ms",
            std::to_string(env_int("INFERTAP_MEASURE_ITL_MS", 10))};
  }
  std::string tokens() const { return std::to_string(env_int("INFERTAP_MEASURE_TOKENS", 200)); }
  static void header() {
    std::printf("| %-28s | %6s | %6s | %5s | %4s | %4s | %5s | %6s | %6s |\n", "path", "srv", "client", "1st", "bursts",
                "max", "median", "median", "max");
    std::printf("| %-28s | %6s | %6s | %5s | %4s | %4s | %5s | %6s | %6s |\n", "", "ttft ms", "ttft ms", "hold", "",
                "burst", "burst", "hold ms", "hold ms");
  }
};

TEST_F(GatewayMeasure, DISABLED_AllConfigs) {
  header();
  {
    SampleServer server(path("direct/server"), server_args());
    ASSERT_TRUE(server.ok()) << server.error();
    ClientRun c = infertap::testing::run_sample_client(path("direct/client"), server.port(), {"--tokens", tokens()});
    ASSERT_EQ(c.rc, 0) << c.output;
    std::printf("%s\n", measure_row("direct", c.log, server.log()).c_str());
  }
  for (const auto& gc : gateway_cases()) {
    SampleServer server(path(gc.name + "/server"), server_args());
    ASSERT_TRUE(server.ok()) << server.error();
    auto gw = gc.make(server.port(), path(gc.name + "/gateway"));
    ASSERT_TRUE(gw->ok()) << gw->error();
    std::vector<std::string> args = {"--tokens", tokens()};
    args.insert(args.end(), gc.client_args.begin(), gc.client_args.end());
    ClientRun c = infertap::testing::run_sample_client(path(gc.name + "/client"), gw->port(), args);
    ASSERT_EQ(c.rc, 0) << c.output;
    std::printf("%s\n", measure_row(gc.name, c.log, server.log()).c_str());
  }
  // The gateways that hold bytes in the kernel (HAProxy MSG_MORE) over an
  // MTU-1500 veth instead of loopback (MSS 64 KB): client in a namespace.
  for (HAProxyMode m : {HAProxyMode::streaming, HAProxyMode::defaults}) {
    NetnsPath net;
    ASSERT_TRUE(net.ok()) << net.error();
    const std::string name = std::string("veth haproxy_") + infertap::testing::to_string(m);
    SampleServer server(path(name + "/server"), server_args());
    ASSERT_TRUE(server.ok()) << server.error();
    HAProxy gw(m, server.port(), path(name + "/gateway"), {.listen_host = net.host_ip()});
    ASSERT_TRUE(gw.ok()) << gw.error();
    ClientRun c = infertap::testing::run_sample_client(path(name + "/client"), gw.port(), {"--tokens", tokens()},
                                                       net.host_ip(), net.exec_prefix());
    ASSERT_EQ(c.rc, 0) << c.output;
    std::printf("%s\n", measure_row(name, c.log, server.log()).c_str());
  }
}
