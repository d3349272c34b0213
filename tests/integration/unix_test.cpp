// Unix-domain sockets end to end, as root (issue 16): the sample server on a
// unix socket behind real gateways (nginx `proxy_pass http://unix:…`, HAProxy
// `server … /path.sock`) and under curl --unix-socket, timed against its own
// clock; a reader that stops draining a unix socket (backpressure, blocking
// and EAGAIN senders); what no HTTP ever crosses (abstract names, socketpairs,
// file descriptors passed over SCM_RIGHTS, datagrams) and SOCK_SEQPACKET that
// does; and what Prometheus shows of it.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/api.h"
#include "support/clock_errors.h"
#include "support/cpu_latency.h"
#include "support/gateways.h"
#include "support/live_test.h"
#include "support/ndjson.h"
#include "support/process.h"
#include "support/records.h"
#include "support/sample_peers.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using testing::build_dir;
using testing::ClientRun;
using testing::Process;
using testing::read_file;
using testing::SampleServer;
using namespace std::chrono_literals;

constexpr int kStreams = 3;

std::string describe(const json& r) {
  json brief = {{"stream_id", r["stream_id"]}, {"role", r["role"]},         {"comm", r["comm"]},
                {"local", r["local"]},         {"remote", r["remote"]},     {"transport", r["transport"]},
                {"peer_comm", r["peer_comm"]}, {"ttft_ms", r["ttft_ms"]},   {"stalls", r["stalls"]},
                {"delivery", r["delivery"]},   {"gateway", r["gateway"]},   {"tcp", r["tcp"]},
                {"peer", r["peer_stream_id"]}, {"end", r["end"]}};
  return brief.dump(1);
}

std::vector<json> select(const std::vector<json>& records, const std::string& comm, const std::string& role = "",
                         const std::string& transport = "") {
  std::vector<json> out;
  for (const auto& r : records) {
    if (r.value("type", "stream") != "stream") continue;
    if (!comm.empty() && r.value("comm", "") != comm) continue;
    if (!role.empty() && r.value("role", "") != role) continue;
    if (!transport.empty() && r.value("transport", "") != transport) continue;
    out.push_back(r);
  }
  return out;
}

const json* by_stream_id(const std::vector<json>& records, const json& id) {
  if (!id.is_string()) return nullptr;
  for (const auto& r : records) {
    if (r.value("stream_id", "") == id.get<std::string>()) return &r;
  }
  return nullptr;
}

// Every unix record: no ACK vantage, no TCP signals, its path shown.
void expect_unix_record(const json& r) {
  EXPECT_EQ(r["transport"], "unix") << describe(r);
  EXPECT_FALSE(r["tcp"]["signals"].get<bool>()) << describe(r);
  EXPECT_TRUE(r["tcp"]["srtt_ms"].is_null()) << describe(r);
  for (const auto& e : r["timeline"]) EXPECT_TRUE(e["acked_ns"].is_null()) << "no ACK vantage on a unix socket";
  if (r["delivery"].is_object()) {
    EXPECT_NE(r["delivery"]["vantage"], "acked") << describe(r);
  }
}

// The sample server's own clock for each event of its records: per record,
// the log's request (conn, req) whose request read is nearest the record's
// request end, then each event's send by index. Returns the emit errors,
// those whose clock the host made late apart (support/clock_errors.h).
testing::ClockErrors emit_errors(const std::vector<json>& servers, const std::string& server_log) {
  std::map<std::pair<int, int>, std::int64_t> request_at;
  std::map<std::tuple<int, int, int>, json> sent;
  for (const auto& l : testing::read_ndjson(server_log)) {
    const auto key = std::make_pair(l.value("conn", -1), l.value("req", -1));
    if (l["type"] == "request") request_at[key] = l["mono_ns"].get<std::int64_t>();
    // a refused (EAGAIN) send carries no bytes: the event's time is its retry's
    if (l["type"] == "send" && l.value("event_index", -1) >= 0 && l.value("bytes", 0) > 0)
      sent[{key.first, key.second, l["event_index"].get<int>()}] = l;
  }
  testing::ClockErrors err;
  for (const auto& r : servers) {
    const std::int64_t end = r["request_end_ns"].get<std::int64_t>();
    std::pair<int, int> best{-1, -1};
    std::int64_t best_d = INT64_MAX;
    for (const auto& [key, t] : request_at) {
      if (std::llabs(t - end) < best_d) {
        best_d = std::llabs(t - end);
        best = key;
      }
    }
    EXPECT_LE(best_d, 1'000'000) << "no server log request within 1 ms of " << describe(r);
    if (best_d > 1'000'000) continue;
    for (const auto& e : r["timeline"]) {
      auto it = sent.find({best.first, best.second, e["i"].get<int>()});
      EXPECT_NE(it, sent.end()) << "no server log line for event " << e["i"] << " of " << describe(r);
      if (it != sent.end()) err.add(it->second["mono_ns"], it->second["off_cpu_ns"], e["ts_ns"]);
    }
  }
  return err;
}

class UnixTest : public testing::LiveTest {
 protected:
  UnixTest() : LiveTest("infertap-unix") {}

  std::string sock_path() const { return path("app.sock"); }

  // The agent on the scratch directory's unix sockets and these TCP ports.
  void start_agent(const std::vector<std::uint16_t>& ports, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--socket", path("api.sock"), "--unix-path", path("*")};
    if (std::find(extra.begin(), extra.end(), "--metrics-listen") == extra.end())
      args.insert(args.end(), {"--metrics-listen", ""});
    for (std::uint16_t p : ports) args.insert(args.end(), {"--port", std::to_string(p)});
    args.insert(args.end(), extra.begin(), extra.end());
    start_agent_with(args);
  }

  std::vector<json> stop_agent() {
    // Records wait briefly for the other records of their path: let them go.
    std::this_thread::sleep_for(1500ms);
    return stop_agent_records();
  }

  // Pinned to CPU 0 and SCHED_FIFO, as the ground-truth tests run it: its log's
  // clock read right after each send is then not delayed by preemption.
  static std::vector<std::string> pinned() { return {"/usr/bin/taskset", "-c", "0", "/usr/bin/chrt", "-f", "50"}; }

  std::unique_ptr<SampleServer> unix_server(std::vector<std::string> args, bool pin = true) {
    args.insert(args.begin(), {"--unix", sock_path()});
    return std::make_unique<SampleServer>(path("server"), args, "127.0.0.1", 0,
                                          pin ? pinned() : std::vector<std::string>{});
  }
};

// ---- behind a gateway -------------------------------------------------------------

struct GatewayCase {
  std::string name;
  bool haproxy;
  testing::NginxMode nginx;
  testing::HAProxyMode ha;
  bool buffers;
};

class UnixGateway : public UnixTest, public ::testing::WithParamInterface<GatewayCase> {};

// nginx `proxy_pass http://unix:/…/app.sock:` (HAProxy `server upstream
// /…/app.sock`) in front of the sample server: the server's own record is
// timed at its emits (its clock agrees), the gateway's unix upstream leg is
// joined to the server by socket and to the gateway's TCP downstream leg by
// content, and a buffering gateway is named where a streaming one is not.
TEST_P(UnixGateway, ServerIsTimedAndTheGatewaysUnixLegIsJoined) {
  const GatewayCase& gc = GetParam();
  const testing::CpuWakeLatencyHold awake;  // support/cpu_latency.h: the emit ground truth
  auto server = unix_server({"--ttft-ms", "50", "--itl-ms", "10"});
  ASSERT_TRUE(server->ok()) << server->error();
  ASSERT_EQ(server->unix_path(), sock_path());
  std::unique_ptr<testing::Gateway> gw;
  std::string gw_comm;
  if (gc.haproxy) {
    gw = std::make_unique<testing::HAProxy>(gc.ha, 0, path("haproxy"),
                                            testing::HAProxyOptions{.upstream_unix = sock_path()});
    gw_comm = "haproxy";
  } else {
    gw = std::make_unique<testing::Nginx>(gc.nginx, 0, path("nginx"), testing::NginxOptions{.upstream_unix = sock_path()});
    gw_comm = "nginx";
  }
  ASSERT_TRUE(gw->ok()) << gw->error();
  start_agent({gw->port()});
  ClientRun c = testing::run_sample_client(path("client"), gw->port(),
                                           {"--tokens", "60", "--requests", std::to_string(kStreams)});
  ASSERT_EQ(c.rc, 0) << c.output;
  const std::vector<pid_t> gw_pids = gw->pids();
  const auto records = stop_agent();
  server->stop();
  const auto servers = select(records, "sample-server", "server");
  const auto upstream = select(records, gw_comm, "gateway", "unix");
  const auto downstream = select(records, gw_comm, "gateway", "tcp");
  const auto clients = select(records, "sample-client", "client");
  ASSERT_EQ(servers.size(), std::size_t(kStreams)) << read_file(path("agent.log"));
  ASSERT_EQ(upstream.size(), std::size_t(kStreams)) << "the gateway's unix upstream leg, per stream";
  ASSERT_EQ(downstream.size(), std::size_t(kStreams)) << "the gateway's TCP downstream leg, per stream";
  ASSERT_EQ(clients.size(), std::size_t(kStreams));

  // The server's emits against its own clock.
  const testing::ClockErrors err = emit_errors(servers, server->log_path());
  err.print(gc.name + ": server emit vs its own clock");
  ASSERT_GE(err.events(), std::size_t(kStreams * 60));
  ASSERT_TRUE(err.measurable()) << "most sends were off their CPU: this host is too disturbed to measure on";
  // Four processes share two CPUs here: an interrupt on the server's CPU
  // delays a send without taking the server off it (so the filter above
  // keeps it), and over 189 events the p99 is the second-worst one (measured
  // in a CI run: 175 us and 92 us in two of four gateways, p50 3-7 us).
  // The bound holds for p95; the tail is held to 250 us.
  EXPECT_LE(err.undisturbed_percentile(95), 50'000) << "emit time p95 error (ns)";
  EXPECT_LE(err.undisturbed_percentile(99), 250'000) << "emit time p99 error (ns)";

  for (const auto& r : servers) {
    expect_unix_record(r);
    EXPECT_EQ(r["end"], "complete") << describe(r);
    EXPECT_EQ(r["content_events"], 60) << describe(r);
    EXPECT_EQ(r["local"], "unix:" + sock_path()) << describe(r);
    EXPECT_EQ(r["remote"], "unix:*") << "the gateway's end has no name: " << describe(r);
    EXPECT_EQ(r["peer_comm"], gw_comm) << describe(r);
    EXPECT_NE(std::find(gw_pids.begin(), gw_pids.end(), r["peer_pid"].get<pid_t>()), gw_pids.end()) << describe(r);
    EXPECT_TRUE(r["stalls"].empty()) << "the server emitted on time: " << describe(r);
    // joined to the gateway's upstream leg by socket
    const json* up = by_stream_id(upstream, r["peer_stream_id"]);
    ASSERT_NE(up, nullptr) << "server record not joined to the gateway's unix leg: " << describe(r);
    EXPECT_EQ((*up)["peer_stream_id"], r["stream_id"]);
    ASSERT_TRUE(r["delivery"].is_object()) << describe(r);
    EXPECT_EQ(r["delivery"]["vantage"], "read") << describe(r);
    EXPECT_NE(r["delivery"]["path"].get<std::string>().find("gateway(" + gw_comm + ")"), std::string::npos)
        << describe(r);
    const auto causes = testing::stall_causes(r["delivery"]["stalls"]);
    if (gc.buffers) {
      EXPECT_TRUE(causes == std::set<std::string>{"gateway_buffering"} ||
                  (causes.empty() && r["delivery"]["max_burst"].get<int>() >= 50))
          << describe(r);
      EXPECT_TRUE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
      EXPECT_EQ(r["delivery"]["ttft_cause"], "gateway_buffering") << describe(r);
    } else {
      EXPECT_TRUE(causes.empty()) << describe(r);
      EXPECT_FALSE(r["delivery"]["degraded_by_path"].get<bool>()) << describe(r);
      EXPECT_TRUE(r["delivery"]["ttft_cause"].is_null()) << describe(r);
    }
    const json& d = r["delivery"];
    std::printf("  %s: server TTFT %.1f ms, client TTFT %.1f ms (+%.1f, cause %s), max burst %d, delivery stalls %zu %s\n",
                gc.name.c_str(), r["ttft_ms"].get<double>(), d["ttft_ms"].get<double>(), d["ttft_added_ms"].get<double>(),
                d["ttft_cause"].is_null() ? "-" : d["ttft_cause"].get<std::string>().c_str(), d["max_burst"].get<int>(),
                d["stalls"].size(), d["stalls"].empty() ? "" : d["stalls"][0]["evidence"].get<std::string>().c_str());
  }
  for (const auto& r : upstream) {
    expect_unix_record(r);
    EXPECT_EQ(r["remote"], "unix:" + sock_path()) << describe(r);
    EXPECT_EQ(r["local"], "unix:*") << describe(r);
    EXPECT_EQ(r["peer_comm"], "sample-server") << describe(r);
    ASSERT_TRUE(r["gateway"].is_object()) << describe(r);
    EXPECT_EQ(r["gateway"]["leg"], "upstream") << describe(r);
    EXPECT_EQ(r["gateway"]["upstream"], "unix:" + sock_path()) << describe(r);
    // the gateway join: this unix leg and the gateway's TCP leg to the client
    const json* down = by_stream_id(downstream, r["gateway"]["peer_stream_id"]);
    ASSERT_NE(down, nullptr) << "unix upstream leg not joined to a TCP downstream leg: " << describe(r);
    EXPECT_EQ((*down)["gateway"]["peer_stream_id"], r["stream_id"]);
  }
  for (const auto& r : downstream) {
    EXPECT_EQ(r["transport"], "tcp");
    EXPECT_TRUE(r["peer_pid"].is_null());
    ASSERT_TRUE(r["gateway"].is_object()) << describe(r);
    EXPECT_EQ(r["gateway"]["leg"], "downstream") << describe(r);
    EXPECT_EQ(r["gateway"]["upstream"], "unix:" + sock_path()) << describe(r);
    EXPECT_GE(r["gateway"]["events_matched"].get<int>(), 50) << describe(r);
    const auto causes = testing::stall_causes(r["stalls"]);
    std::printf("  %s: gateway delay p50 %.2f ms p99 %.2f ms, %d events matched, %d events in one send at most\n",
                gc.name.c_str(), r["gateway"]["delay_p50_ms"].get<double>(), r["gateway"]["delay_p99_ms"].get<double>(),
                r["gateway"]["events_matched"].get<int>(), r["gateway"]["max_events_per_send"].get<int>());
    if (gc.buffers) {
      EXPECT_TRUE(causes.empty() || causes == std::set<std::string>{"gateway_buffering"}) << describe(r);
    } else {
      EXPECT_TRUE(causes.empty()) << describe(r);
      testing::expect_streaming_gateway_delay(r["gateway"], describe(r));
    }
  }
  std::size_t buffering_found = 0;
  for (const auto& r : clients) {
    EXPECT_EQ(r["transport"], "tcp");
    auto causes = testing::stall_causes(r["stalls"]);
    buffering_found += causes.count("gateway_buffering");
    if (gc.buffers) {
      // A held burst read at once can pass the capture window (head + tail):
      // the events in the hole are not seen, and a gap across it has no
      // other vantage to be judged by (bytes_not_captured says so).
      if (r["bytes_not_captured"].get<std::uint64_t>() > 0) causes.erase("model");
      EXPECT_TRUE(causes.empty() || causes == std::set<std::string>{"gateway_buffering"}) << describe(r);
    } else {
      EXPECT_TRUE(causes.empty()) << describe(r);
    }
  }
  if (!gc.buffers) {
    EXPECT_EQ(buffering_found, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Gateways, UnixGateway,
    ::testing::Values(
        GatewayCase{"nginx_streaming", false, testing::NginxMode::streaming, testing::HAProxyMode::streaming, false},
        GatewayCase{"nginx_defaults", false, testing::NginxMode::defaults, testing::HAProxyMode::streaming, true},
        GatewayCase{"haproxy_streaming", true, testing::NginxMode::streaming, testing::HAProxyMode::streaming, false},
        GatewayCase{"haproxy_defaults", true, testing::NginxMode::streaming, testing::HAProxyMode::defaults, true}),
    [](const ::testing::TestParamInfo<GatewayCase>& info) { return info.param.name; });

// ---- a client on the socket itself ----------------------------------------------------

// curl --unix-socket … -N: both ends are one unix connection, joined by
// socket; the records name the path and each other's process.
TEST_F(UnixTest, CurlOnTheSocketIsJoinedToTheServer) {
  auto server = unix_server({"--ttft-ms", "30", "--itl-ms", "5"});
  ASSERT_TRUE(server->ok()) << server->error();
  start_agent({});
  for (int i = 0; i < kStreams; ++i) {
    auto p = Process::spawn({"/usr/bin/curl", "-sS", "-N", "-o", path("curl.body"), "--unix-socket", sock_path(),
                             "-X", "POST", "http://localhost/v1/chat/completions", "-H",
                             "Content-Type: application/json", "-d",
                             R"({"model":"curl-model","stream":true,"max_tokens":20})"},
                            path("curl.out"));
    ASSERT_TRUE(p);
    const auto st = p->wait(30s);
    ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_file(path("curl.out"));
  }
  const pid_t server_pid = server->pid();
  const auto records = stop_agent();
  server->stop();
  const auto servers = select(records, "sample-server", "server");
  const auto curls = select(records, "curl", "client");
  ASSERT_EQ(servers.size(), std::size_t(kStreams)) << read_file(path("agent.log"));
  ASSERT_EQ(curls.size(), std::size_t(kStreams));
  for (const auto& r : curls) {
    expect_unix_record(r);
    EXPECT_EQ(r["end"], "complete") << describe(r);
    EXPECT_EQ(r["model"], "curl-model");
    EXPECT_EQ(r["content_events"], 20) << describe(r);
    EXPECT_EQ(r["remote"], "unix:" + sock_path()) << describe(r);
    EXPECT_EQ(r["local"], "unix:*") << describe(r);
    EXPECT_EQ(r["peer_comm"], "sample-server") << describe(r);
    EXPECT_EQ(r["peer_pid"], server_pid) << "the listening server (taskset and chrt exec it): " << describe(r);
    EXPECT_GE(r["ttft_ms"].get<double>(), 25.0) << describe(r);
    const json* s = by_stream_id(servers, r["peer_stream_id"]);
    ASSERT_NE(s, nullptr) << "curl's record is not joined to the server's: " << describe(r);
    EXPECT_EQ((*s)["peer_stream_id"], r["stream_id"]);
    EXPECT_EQ((*s)["peer_comm"], "curl");
    EXPECT_EQ((*s)["peer_pid"], r["pid"]) << "each end names the other's process";
    // The reader's arrival is the sender's emit (a unix send queues into the reader's socket).
    std::size_t arrived = 0;
    for (const auto& e : r["timeline"]) arrived += e["arrived_ns"].is_null() ? 0 : 1;
    EXPECT_EQ(arrived, r["timeline"].size()) << describe(r);
  }
  for (const auto& r : servers) {
    expect_unix_record(r);
    EXPECT_EQ(r["local"], "unix:" + sock_path());
    ASSERT_TRUE(r["delivery"].is_object()) << describe(r);
    EXPECT_EQ(r["delivery"]["vantage"], "read");
    EXPECT_EQ(r["delivery"]["path"], "sample-server>curl") << describe(r);
    EXPECT_TRUE(r["delivery"]["stalls"].empty()) << describe(r);
    EXPECT_LT(r["delivery"]["ttft_added_ms"].get<double>(), 5.0) << describe(r);
  }
  // Unix records are valid records (docs/schema.json).
  auto v = Process::spawn({"/usr/bin/python3", "tests/schema/validate_ndjson.py", "docs/schema.json",
                           path("records.ndjson")},
                          path("validate.out"));
  ASSERT_TRUE(v);
  const auto vst = v->wait(60s);
  EXPECT_TRUE(vst && WIFEXITED(*vst) && WEXITSTATUS(*vst) == 0) << read_file(path("validate.out"));
}

// ---- backpressure ----------------------------------------------------------------------

// A reader that stops draining: the server's unix send buffer fills and its
// next send waits (blocking) or is refused (EAGAIN, --nonblocking, as an event
// loop sends). The server's gap is backpressure, with the full buffer as the
// evidence; the client's is its own slow read.
class UnixBackpressure : public UnixTest, public ::testing::WithParamInterface<bool> {};

TEST_P(UnixBackpressure, AFullSendBufferIsBackpressureWithItsEvidence) {
  const bool nonblocking = GetParam();
  std::vector<std::string> args = {"--ttft-ms", "20", "--itl-ms", "10", "--sndbuf", "4096"};
  if (nonblocking) args.push_back("--nonblocking");
  auto server = unix_server(args, false);
  ASSERT_TRUE(server->ok()) << server->error();
  start_agent({});
  ClientRun c = testing::run_sample_client(
      path("client"), 0,
      {"--unix", sock_path(), "--tokens", "60", "--requests", std::to_string(kStreams), "--stall-after", "10",
       "--stall-ms", "800"});
  ASSERT_EQ(c.rc, 0) << c.output;
  const auto records = stop_agent();
  const testing::ServerLog log = server->log();
  const auto servers = select(records, "sample-server", "server");
  const auto clients = select(records, "sample-client", "client");
  ASSERT_EQ(servers.size(), std::size_t(kStreams)) << read_file(path("agent.log"));
  ASSERT_EQ(clients.size(), std::size_t(kStreams));
  // The ground truth: the sender really waited (blocked in send, or refused).
  std::size_t refused = 0;
  for (const auto& l : testing::read_ndjson(server->log_path()))
    refused += l.value("error", "").find("temporarily unavailable") != std::string::npos;
  if (nonblocking) {
    EXPECT_GE(refused, std::size_t(kStreams)) << "the server's sends were refused with EAGAIN";
  } else {
    EXPECT_GT(log.max_call_ms(), 300.0) << "the server's send blocked";
  }
  for (const auto& r : servers) {
    expect_unix_record(r);
    std::printf("  %s: server stalls %zu (%s); send_buffer_full %d, eagain %d; delivered stalls %zu (%s)\n",
                nonblocking ? "nonblocking" : "blocking", r["stalls"].size(),
                r["stalls"].empty() ? "" : r["stalls"][0]["evidence"].get<std::string>().c_str(),
                r["tcp"]["send_buffer_full"].get<int>(), r["tcp"]["eagain"].get<int>(), r["delivery"]["stalls"].size(),
                r["delivery"]["stalls"].empty() ? "" : r["delivery"]["stalls"][0]["evidence"].get<std::string>().c_str());
    ASSERT_EQ(r["stalls"].size(), 1u) << describe(r);
    EXPECT_EQ(r["stalls"][0]["cause"], "backpressure") << describe(r);
    const std::string evidence = r["stalls"][0]["evidence"];
    EXPECT_NE(evidence.find("send buffer full"), std::string::npos) << evidence;
    EXPECT_NE(evidence.find("the reader left bytes unread for"), std::string::npos) << evidence;
    EXPECT_GE(r["stalls"][0]["gap_ms"].get<double>(), 300.0) << describe(r);
    EXPECT_GE(r["tcp"]["send_buffer_full"].get<int>(), 1) << describe(r);
    if (nonblocking) {
      EXPECT_GE(r["tcp"]["eagain"].get<int>(), 1) << describe(r);
      EXPECT_NE(evidence.find("EAGAIN"), std::string::npos) << evidence;
    }
    ASSERT_TRUE(r["delivery"].is_object()) << describe(r);
    EXPECT_EQ(testing::stall_causes(r["delivery"]["stalls"]), std::set<std::string>{"client_read"}) << describe(r);
  }
  for (const auto& r : clients) {
    expect_unix_record(r);
    EXPECT_EQ(testing::stall_causes(r["stalls"]), std::set<std::string>{"client_read"}) << describe(r);
  }
}

INSTANTIATE_TEST_SUITE_P(Senders, UnixBackpressure, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "eagain" : "blocking";
                         });

// ---- bad input, odd sockets -----------------------------------------------------------

// A sockaddr_un for `name`: a path, or (leading NUL) an abstract name of exactly those bytes.
socklen_t unix_addr(const std::string& name, sockaddr_un* a) {
  *a = {};
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path, name.data(), std::min(name.size(), sizeof a->sun_path));
  return socklen_t(offsetof(sockaddr_un, sun_path) + name.size() + (name.empty() || name[0] ? 1 : 0));
}

int unix_listener(const std::string& name, int type = SOCK_STREAM) {
  sockaddr_un a;
  const socklen_t len = unix_addr(name, &a);
  if (name[0]) ::unlink(name.c_str());
  const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 16) != 0) return -1;
  return fd;
}

int unix_connect(const std::string& name, int type = SOCK_STREAM) {
  sockaddr_un a;
  const socklen_t len = unix_addr(name, &a);
  const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) return -1;
  return fd;
}

bool send_all(int fd, std::string_view d) {
  while (!d.empty()) {
    const ssize_t n = ::send(fd, d.data(), d.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    d.remove_prefix(std::size_t(n));
  }
  return true;
}

// Reads until `n` bytes (or EOF when n == 0).
std::string recv_bytes(int fd, std::size_t n = 0) {
  std::string got;
  char buf[4096];
  while (n == 0 || got.size() < n) {
    const ssize_t r = ::recv(fd, buf, n ? std::min(sizeof buf, n - got.size()) : sizeof buf, 0);
    if (r <= 0) break;
    got.append(buf, std::size_t(r));
  }
  return got;
}

const std::string kBody = R"({"model":"odd-model","stream":true,"messages":[{"role":"user","content":"hi"}]})";
const std::string kRequestHttp = "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                                 "Content-Length: " + std::to_string(kBody.size()) + "\r\n\r\n" + kBody;

std::vector<std::string> sse_events(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i)
    out.push_back(R"(data: {"id":"c1","object":"chat.completion.chunk","model":"odd-model","choices":[{"index":0,"delta":{"content":"tok)" +
                  std::to_string(i) + R"("}}]})" + "\n\n");
  out.push_back("data: [DONE]\n\n");
  return out;
}

// One streamed response, close-delimited, written one event per send (one
// message per event on SOCK_SEQPACKET). Returns false on a failed send.
bool serve_sse(int fd, int events = 5) {
  if (recv_bytes(fd, kRequestHttp.size()) != kRequestHttp) return false;
  if (!send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")) return false;
  for (const std::string& e : sse_events(events)) {
    std::this_thread::sleep_for(2ms);
    if (!send_all(fd, e)) return false;
  }
  return true;
}

// A client in a process of its own (one process that reads a stream and
// writes the same events is a gateway to the agent): connects to `name`,
// sends the request, reads to EOF. Returns its pid.
pid_t fork_client(const std::string& name, int type = SOCK_STREAM) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const int c = unix_connect(name, type);
  if (c < 0) _exit(2);
  if (!send_all(c, kRequestHttp)) _exit(3);
  const std::string got = recv_bytes(c);
  _exit(got.find("data: [DONE]") != std::string::npos ? 0 : 4);
}

bool exited_ok(pid_t pid) {
  int st = 0;
  return ::waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

class UnixOdd : public UnixTest {
 protected:
  // The agent on everything (no targeting): the sockets below have no path
  // to target, and only records of this test's processes are looked at.
  void start_agent_everywhere() {
    start_agent_with({"--socket", path("api.sock"), "--metrics-listen", ""});
  }
  json kernel_counters() {
    const json st = daemon::ApiClient(path("api.sock")).request({{"cmd", "status"}});
    return st["counters"]["kernel"];
  }
  // Counters refresh once a second.
  json kernel_counters_settled() {
    std::this_thread::sleep_for(1200ms);
    return kernel_counters();
  }
  static std::vector<json> of_pids(const std::vector<json>& records, const std::set<pid_t>& pids) {
    std::vector<json> out;
    for (const auto& r : records) {
      if (r.value("type", "stream") == "stream" && pids.count(r.value("pid", 0))) out.push_back(r);
    }
    return out;
  }
};

// Non-HTTP unix traffic of the kinds a node is full of: D-Bus-style abstract
// sockets, socketpairs that carry binary, text or nothing, datagrams, and file
// descriptors passed over SCM_RIGHTS (including a socket passed over itself,
// a cycle the kernel's garbage collector ends): no record, no crash, each
// socket that carried bytes classified once and muted.
TEST_F(UnixOdd, NonHttpUnixTrafficMakesNoRecordAndIsCounted) {
  start_agent_everywhere();
  const json before = kernel_counters_settled();
  const std::string tag = std::to_string(getpid());
  int streams_with_bytes = 0;  // stream sockets that carried data (each is classified once)

  // D-Bus on an abstract name: a NUL, then the AUTH line, then binary messages.
  {
    const std::string name = std::string(1, '\0') + "infertap-test-dbus-" + tag;
    const int l = unix_listener(name);
    ASSERT_GE(l, 0) << std::strerror(errno);
    const int c = unix_connect(name);
    ASSERT_GE(c, 0);
    const int s = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(s, 0);
    ASSERT_TRUE(send_all(c, std::string(1, '\0') + "AUTH EXTERNAL 30\r\n"));
    ASSERT_EQ(recv_bytes(s, 19).size(), 19u);
    ASSERT_TRUE(send_all(s, "OK 1234deadbeef\r\n"));
    ASSERT_EQ(recv_bytes(c, 17).size(), 17u);
    for (int i = 0; i < 20; ++i) {
      const std::string msg("l\x01\x00\x01\x08\x00\x00\x00\x01\x00\x00\x00", 12);
      ASSERT_TRUE(send_all(c, msg));
      ASSERT_EQ(recv_bytes(s, msg.size()).size(), msg.size());
      ASSERT_TRUE(send_all(s, "GET / HTTP/1.1\r\n\r\n"));  // HTTP-looking bytes later do not revive a muted socket
      ASSERT_EQ(recv_bytes(c, 18).size(), 18u);
    }
    streams_with_bytes += 2;
    ::close(c);
    ::close(s);
    ::close(l);
  }
  // Socketpairs: binary, text that is not HTTP, nothing at all.
  for (int i = 0; i < 30; ++i) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    if (i % 3 == 0) {
      const std::string bin("\x80\x01\xfe\x00\x17\x03\x03", 7);
      ASSERT_TRUE(send_all(sv[0], bin));
      ASSERT_EQ(recv_bytes(sv[1], bin.size()).size(), bin.size());
      streams_with_bytes += 2;
    } else if (i % 3 == 1) {
      ASSERT_TRUE(send_all(sv[0], "hello from a worker\n"));
      ASSERT_EQ(recv_bytes(sv[1], 20).size(), 20u);
      ASSERT_TRUE(send_all(sv[1], "{\"jsonrpc\":\"2.0\",\"id\":1}\n"));
      ASSERT_EQ(recv_bytes(sv[0], 25).size(), 25u);
      streams_with_bytes += 2;
    }
    ::close(sv[0]);
    ::close(sv[1]);
  }
  // Datagrams carrying an HTTP request: not a stream, never followed.
  {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(::send(sv[0], kRequestHttp.data(), kRequestHttp.size(), 0), ssize_t(kRequestHttp.size()));
      char buf[1024];
      ASSERT_EQ(::recv(sv[1], buf, sizeof buf, 0), ssize_t(kRequestHttp.size()));
    }
    ::close(sv[0]);
    ::close(sv[1]);
  }
  // File descriptors over SCM_RIGHTS (a pipe, a TCP socket, a unix socket, the
  // carrier itself), one byte of payload each, to a child that uses them.
  std::set<pid_t> pids = {getpid()};
  {
    int carrier[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, carrier), 0);
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    int other[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, other), 0);
    const int tcp = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      int got = 0;
      for (int k = 0; k < 4; ++k) {
        char byte;
        iovec iov{&byte, 1};
        alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl;
        mh.msg_controllen = sizeof ctl;
        if (::recvmsg(carrier[1], &mh, MSG_CMSG_CLOEXEC) != 1) _exit(2);
        const cmsghdr* cm = CMSG_FIRSTHDR(&mh);
        if (!cm || cm->cmsg_type != SCM_RIGHTS) _exit(3);
        int fd;
        std::memcpy(&fd, CMSG_DATA(cm), sizeof fd);
        ::close(fd);
        ++got;
      }
      if (::send(carrier[1], "k", 1, 0) != 1) _exit(4);
      _exit(got == 4 ? 0 : 5);
    }
    pids.insert(child);
    for (int fd : {pipefd[0], tcp, other[0], carrier[0]}) {
      char byte = 'F';
      iovec iov{&byte, 1};
      alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
      msghdr mh{};
      mh.msg_iov = &iov;
      mh.msg_iovlen = 1;
      mh.msg_control = ctl;
      mh.msg_controllen = sizeof ctl;
      cmsghdr* cm = CMSG_FIRSTHDR(&mh);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
      ASSERT_EQ(::sendmsg(carrier[0], &mh, 0), 1) << std::strerror(errno);
    }
    char ack = 0;
    ASSERT_EQ(::recv(carrier[0], &ack, 1, 0), 1);
    int st = 0;
    ASSERT_EQ(::waitpid(child, &st, 0), child);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the child got every fd: status " << st;
    streams_with_bytes += 2;
    for (int fd : {carrier[0], carrier[1], pipefd[0], pipefd[1], other[0], other[1], tcp}) ::close(fd);
  }
  const json after = kernel_counters_settled();
  const auto records = stop_agent();
  const auto mine = of_pids(records, pids);
  EXPECT_TRUE(mine.empty()) << mine.size() << " records for non-HTTP unix traffic, first: "
                            << (mine.empty() ? "" : describe(mine.front()));
  // The host's other unix sockets count too: at least ours.
  const auto delta = [&](const char* name) { return after[name].get<std::uint64_t>() - before[name].get<std::uint64_t>(); };
  std::printf("  classified %llu unix sockets, muted %llu, not followed (not TCP or a unix stream) %llu calls; ours: %d\n",
              (unsigned long long)delta("unix_sockets_classified"), (unsigned long long)delta("sockets_muted"),
              (unsigned long long)delta("not_tcp"), streams_with_bytes);
  EXPECT_GE(delta("unix_sockets_classified"), std::uint64_t(streams_with_bytes));
  EXPECT_GE(delta("sockets_muted"), std::uint64_t(streams_with_bytes));
  EXPECT_GE(delta("not_tcp"), 10u) << "each datagram send and receive";
  EXPECT_GE(delta("muted"), 60u) << "the D-Bus socket's later calls stop at the verdict";
}

// HTTP where few would look: a socket passed to a worker over SCM_RIGHTS (a
// prefork server), an abstract name of control bytes 107 long, and
// SOCK_SEQPACKET. Each is a record, named as ss -x would name it.
TEST_F(UnixOdd, HttpOverPassedSocketsAbstractNamesAndSeqpacketIsRecorded) {
  start_agent_everywhere();
  std::set<pid_t> pids = {getpid()};
  // A listener hands each accepted connection to a worker process (SCM_RIGHTS);
  // the worker reads the request and streams the response.
  const std::string passed_path = path("prefork.sock");
  pid_t worker = -1;
  {
    const int l = unix_listener(passed_path);
    ASSERT_GE(l, 0);
    int carrier[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, carrier), 0);
    worker = ::fork();
    ASSERT_GE(worker, 0);
    if (worker == 0) {
      char byte;
      iovec iov{&byte, 1};
      alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
      msghdr mh{};
      mh.msg_iov = &iov;
      mh.msg_iovlen = 1;
      mh.msg_control = ctl;
      mh.msg_controllen = sizeof ctl;
      if (::recvmsg(carrier[1], &mh, 0) != 1) _exit(2);
      int fd;
      std::memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof fd);
      const bool ok = serve_sse(fd);
      ::close(fd);
      _exit(ok ? 0 : 3);
    }
    pids.insert(worker);
    const pid_t client = fork_client(passed_path);
    pids.insert(client);
    const int s = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(s, 0);
    char byte = 'F';
    iovec iov{&byte, 1};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl;
    mh.msg_controllen = sizeof ctl;
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &s, sizeof s);
    ASSERT_EQ(::sendmsg(carrier[0], &mh, 0), 1);
    ::close(s);  // the worker holds the connection now
    EXPECT_TRUE(exited_ok(client));
    int st = 0;
    ASSERT_EQ(::waitpid(worker, &st, 0), worker);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "worker status " << st;
    ::close(carrier[0]);
    ::close(carrier[1]);
    ::close(l);
  }
  // An abstract name of 107 bytes, control bytes and all.
  std::string odd(1, '\0');
  for (int i = 0; odd.size() < sizeof(sockaddr_un::sun_path); ++i) odd += char(1 + i % 31);
  {
    const int l = unix_listener(odd);
    ASSERT_GE(l, 0) << std::strerror(errno);
    const pid_t client = fork_client(odd);
    pids.insert(client);
    const int s = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(s, 0);
    EXPECT_TRUE(serve_sse(s));
    ::close(s);
    EXPECT_TRUE(exited_ok(client));
    ::close(l);
  }
  // SOCK_SEQPACKET: the request in one message, each event in its own.
  const std::string seq_path = path("seqpacket.sock");
  {
    const int l = unix_listener(seq_path, SOCK_SEQPACKET);
    ASSERT_GE(l, 0) << std::strerror(errno);
    const pid_t client = fork_client(seq_path, SOCK_SEQPACKET);
    pids.insert(client);
    const int s = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(s, 0);
    EXPECT_TRUE(serve_sse(s));
    ::close(s);
    EXPECT_TRUE(exited_ok(client));
    ::close(l);
  }
  const auto records = stop_agent();
  const auto mine = of_pids(records, pids);
  std::map<std::string, std::vector<json>> by_path;
  for (const auto& r : mine) {
    expect_unix_record(r);
    EXPECT_EQ(r["end"], "complete") << describe(r);
    EXPECT_EQ(r["content_events"], 5) << describe(r);
    EXPECT_EQ(r["model"], "odd-model") << describe(r);
    const std::string named = r["role"] == "server" ? r["local"] : r["remote"];
    by_path[named].push_back(r);
  }
  std::string odd_text = "unix:@";
  for (std::size_t i = 1; i < odd.size(); ++i) {
    char esc[5];
    std::snprintf(esc, sizeof esc, "\\x%02x", static_cast<unsigned char>(odd[i]));
    odd_text += esc;
  }
  for (const std::string& name : {"unix:" + passed_path, odd_text, "unix:" + seq_path}) {
    const auto& rs = by_path[name];
    ASSERT_EQ(rs.size(), 2u) << "a server and a client record on " << name << "; records: " << mine.size();
    const json& server = rs[0]["role"] == "server" ? rs[0] : rs[1];
    const json& client = rs[0]["role"] == "server" ? rs[1] : rs[0];
    EXPECT_EQ(server["role"], "server");
    EXPECT_EQ(client["role"], "client");
    EXPECT_EQ(server["peer_stream_id"], client["stream_id"]) << describe(server);
    EXPECT_EQ(client["peer_stream_id"], server["stream_id"]) << describe(client);
    EXPECT_EQ(client["peer_pid"], getpid()) << "the listener's process: " << describe(client);
    if (name == "unix:" + passed_path) {
      EXPECT_EQ(server["pid"], worker) << "the worker that got the socket serves it: " << describe(server);
    }
  }
}

// ---- Prometheus --------------------------------------------------------------------------

// The socket's path is no label (it can be per process or per request):
// unix streams count under server_port="unix".
TEST_F(UnixTest, PrometheusLabelsCarryNoPath) {
  auto server = unix_server({"--ttft-ms", "10", "--itl-ms", "2"}, false);
  ASSERT_TRUE(server->ok()) << server->error();
  const std::uint16_t metrics_port = testing::free_port();
  start_agent({}, {"--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port)});
  ClientRun c = testing::run_sample_client(path("client"), 0, {"--unix", sock_path(), "--tokens", "10", "--requests", "2"});
  ASSERT_EQ(c.rc, 0) << c.output;
  std::this_thread::sleep_for(2500ms);  // records joined and counted
  auto p = Process::spawn({"/usr/bin/curl", "-sS", "-o", path("metrics.txt"),
                           "http://127.0.0.1:" + std::to_string(metrics_port) + "/metrics"},
                          path("curl.out"));
  ASSERT_TRUE(p);
  const auto st = p->wait(10s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_file(path("curl.out"));
  const auto records = stop_agent();
  ASSERT_EQ(select(records, "sample-server", "server").size(), 2u);
  const std::string metrics = read_file(path("metrics.txt"));
  EXPECT_EQ(metrics.find(scratch_->path()), std::string::npos) << "a socket path in the labels";
  EXPECT_EQ(metrics.find("unix:"), std::string::npos);
  EXPECT_NE(metrics.find("server_port=\"unix\""), std::string::npos) << metrics.substr(0, 4000);
  EXPECT_NE(metrics.find("infertap_kernel_unix_sockets_classified_total"), std::string::npos);
}

}  // namespace
}  // namespace infertap
