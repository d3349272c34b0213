// End to end, as root: the real infertapd (BPF capture) times real streams
// between the project's sample server and clients (its own and curl), and its
// records are checked against the ground-truth logs those programs keep
// (CLOCK_MONOTONIC read right after each send/read returns).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/live_test.h"
#include "support/ndjson.h"
#include "support/percentile.h"
#include "support/process.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using testing::Process;
using namespace std::chrono_literals;

using testing::build_dir;

using testing::read_ndjson;

using testing::percentile_abs;
std::int64_t p99_abs(const std::vector<std::int64_t>& v) { return percentile_abs(v, 99); }

// Per-request errors (request end, TTFT, ITL) against the peers' own clocks:
// a wrong origin or a wrong event shifts every request, so the median is held
// tight; a peer preempted between its syscall and its clock read is late on
// one request, so one in ten (at least one) may pass 1 ms, none 10 ms.
void expect_per_request_errors(const std::vector<std::int64_t>& errors, const char* what) {
  if (errors.empty()) return;
  EXPECT_LE(percentile_abs(errors, 50), 200'000) << what << ": median error (ns)";
  const auto late = std::count_if(errors.begin(), errors.end(), [](std::int64_t e) { return std::llabs(e) > 1'000'000; });
  EXPECT_LE(static_cast<std::size_t>(late), std::max<std::size_t>(1, errors.size() / 10))
      << what << ": " << late << " of " << errors.size() << " differ by more than 1 ms";
  EXPECT_LE(percentile_abs(errors, 100), 10'000'000) << what << ": largest error (ns)";
}

class E2E : public testing::LiveTest {
 protected:
  E2E() : LiveTest("infertap-e2e") {}

  void start_agent(std::vector<std::string> extra = {}, bool filter_port = true) {
    std::vector<std::string> args = {"--socket", path("api.sock"), "--metrics-listen", "127.0.0.1:0"};
    if (filter_port) args.insert(args.end(), {"--port", std::to_string(port_)});
    args.insert(args.end(), extra.begin(), extra.end());
    start_agent_with(args);
  }

  std::vector<json> stop_agent() { return stop_agent_records(); }

  // Ground-truth runs pin the server and the client to different CPUs and run
  // them SCHED_FIFO: a thread preempted between its syscall's return and its
  // clock read (by the reader it just woke, or by the agent's own threads)
  // would put that delay in the log, and the error would be the log's, not the
  // agent's. Both programs sleep between events, so they cannot starve the CPU.
  static std::vector<std::string> on_cpu(int cpu, std::vector<std::string> argv) {
    if (cpu < 0) return argv;
    argv.insert(argv.begin(), {"/usr/bin/taskset", "-c", std::to_string(cpu), "/usr/bin/chrt", "-f", "50"});
    return argv;
  }

  void start_server(std::vector<std::string> extra, int cpu = -1) {
    std::vector<std::string> argv = {build_dir() + "/sample-server", "--port", std::to_string(port_), "--log",
                                     path("server.ndjson")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto server = Process::spawn(on_cpu(cpu, argv), path("server.out"));
    ASSERT_TRUE(server);
    server_.emplace(std::move(*server));
    for (int i = 0; i < 200; ++i) {
      if (testing::read_file(path("server.out")).find("listening") != std::string::npos) return;
      std::this_thread::sleep_for(20ms);
    }
    FAIL() << "sample-server did not start:\n" << testing::read_file(path("server.out"));
  }

  std::vector<json> stop_server() {
    server_->stop(5s);
    return read_ndjson(path("server.ndjson"));
  }

  // Runs a client to completion; returns its exit status.
  int run(const std::vector<std::string>& argv, const std::string& log_name, std::chrono::milliseconds timeout = 60s) {
    auto p = Process::spawn(argv, path(log_name));
    EXPECT_TRUE(p);
    if (!p) return -1;
    auto st = p->wait(timeout);
    EXPECT_TRUE(st) << argv[0] << " timed out";
    return st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
  }

  int run_client(std::vector<std::string> extra, int cpu = -1) {
    std::vector<std::string> argv = {build_dir() + "/sample-client", "--port", std::to_string(port_), "--log",
                                     path("client.ndjson")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(on_cpu(cpu, argv), "client.out");
  }

  static std::vector<json> with(const std::vector<json>& records, const std::string& key, const json& value) {
    std::vector<json> out;
    for (const auto& r : records) {
      if (r.value(key, json()) == value) out.push_back(r);
    }
    return out;
  }

  static int port_of(const std::string& endpoint) { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }

  std::optional<Process> server_;
};

// ---- ground truth ------------------------------------------------------------

struct Mode {
  const char* sender;
  const char* reader;
  const char* framing;
};

class GroundTruth : public E2E, public ::testing::WithParamInterface<Mode> {};

TEST_P(GroundTruth, EmitAndReadTimesMatchTheProcessesOwnClocks) {
  const Mode mode = GetParam();
  const bool close_framing = std::string(mode.framing) == "close";
  const int conns = 2, requests = close_framing ? 2 : 3, tokens = 50;
  start_agent();
  const int server_cpu = 0, client_cpu = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0;
  start_server({"--sender", mode.sender, "--framing", mode.framing, "--ttft-ms", "20", "--itl-ms", "5", "--usage"},
               server_cpu);
  ASSERT_EQ(run_client({"--reader", mode.reader, "--concurrency", std::to_string(conns), "--requests",
                        std::to_string(requests), "--tokens", std::to_string(tokens), "--usage"},
                       client_cpu),
            0)
      << testing::read_file(path("client.out"));
  const std::vector<json> server_log = stop_server();
  const std::vector<json> records = stop_agent();
  const std::vector<json> client_log = read_ndjson(path("client.ndjson"));

  const auto servers = with(records, "role", "server");
  const auto clients = with(records, "role", "client");
  ASSERT_EQ(servers.size(), static_cast<std::size_t>(conns * requests)) << testing::read_file(path("agent.log"));
  ASSERT_EQ(clients.size(), static_cast<std::size_t>(conns * requests));

  // Ground truth by (peer port, request on that connection, event index).
  std::map<std::tuple<int, int, int>, std::int64_t> sent, read;
  std::map<std::pair<int, int>, std::int64_t> request_read, first_content_sent;
  std::map<std::pair<int, int>, json> client_summary;
  for (const auto& l : server_log) {
    const auto key = std::make_pair(l.value("peer_port", 0), l.value("req", 0));
    if (l["type"] == "request") request_read[key] = l["mono_ns"].get<std::int64_t>();
    if (l["type"] == "send" && l["event_index"].get<int>() >= 0) {
      sent[{key.first, key.second, l["event_index"].get<int>()}] = l["mono_ns"].get<std::int64_t>();
      if (l["kind"] == "content" && !first_content_sent.count(key)) first_content_sent[key] = l["mono_ns"];
    }
  }
  // Client (conn, req) -> (local port, request index on that socket): with
  // close framing the client reconnects, and the agent counts per socket.
  std::map<std::pair<int, int>, std::pair<int, int>> socket_of;
  std::map<int, int> requests_on_port;
  for (const auto& l : client_log) {
    if (l["type"] != "write") continue;
    const int port = l["local_port"].get<int>();
    socket_of[{l["conn"].get<int>(), l["req"].get<int>()}] = {port, requests_on_port[port]++};
  }
  for (const auto& l : client_log) {
    const auto [cport, sreq] = socket_of[{l["conn"].get<int>(), l["req"].get<int>()}];
    if (l["type"] == "event") read[{cport, sreq, l["event_index"].get<int>()}] = l["mono_ns"];
    if (l["type"] == "summary") client_summary[{cport, sreq}] = l;
  }

  std::vector<std::int64_t> emit_err, read_err, ttft_err, itl_err, request_end_err;
  for (const auto& r : servers) {
    EXPECT_EQ(r["end"], "complete");
    EXPECT_EQ(r["path"], "/v1/chat/completions");
    EXPECT_EQ(r["framing"], close_framing ? "until_close" : "chunked");
    EXPECT_EQ(r["content_events"], tokens);
    EXPECT_EQ(r["tokens"], tokens);
    EXPECT_EQ(r["token_source"], "usage");
    EXPECT_EQ(r["bytes_lost"], 0);
    const int peer = port_of(r["remote"]);
    const int req = std::stoi(r["stream_id"].get<std::string>().substr(r["stream_id"].get<std::string>().find('-') + 1));
    std::int64_t prev_agent = -1, prev_truth = -1;
    for (const auto& e : r["timeline"]) {
      auto it = sent.find({peer, req, e["i"].get<int>()});
      ASSERT_NE(it, sent.end()) << "no server log line for event " << e["i"] << " of " << r.dump();
      const std::int64_t agent_ts = e["ts_ns"].get<std::int64_t>();
      emit_err.push_back(it->second - agent_ts);
      if (e["kind"] == "content") {
        if (prev_agent >= 0) itl_err.push_back((agent_ts - prev_agent) - (it->second - prev_truth));
        prev_agent = agent_ts;
        prev_truth = it->second;
      }
    }
    ASSERT_TRUE(request_read.count({peer, req}));
    // The TTFT origin: the server's read of the request's last byte.
    request_end_err.push_back(request_read[{peer, req}] - r["request_end_ns"].get<std::int64_t>());
    const std::int64_t truth_ttft = first_content_sent[{peer, req}] - request_read[{peer, req}];
    ttft_err.push_back(static_cast<std::int64_t>(r["ttft_ms"].get<double>() * 1e6) - truth_ttft);
  }
  for (const auto& r : clients) {
    EXPECT_EQ(r["comm"], "sample-client");
    EXPECT_EQ(r["end"], "complete");
    EXPECT_EQ(r["content_events"], tokens);
    const int local = port_of(r["local"]);
    const int req = std::stoi(r["stream_id"].get<std::string>().substr(r["stream_id"].get<std::string>().find('-') + 1));
    for (const auto& e : r["timeline"]) {
      auto it = read.find({local, req, e["i"].get<int>()});
      ASSERT_NE(it, read.end()) << "no client log line for event " << e["i"];
      read_err.push_back(it->second - e["ts_ns"].get<std::int64_t>());
    }
    ASSERT_TRUE(client_summary.count({local, req}));
    const double truth_ttft_ms = client_summary[{local, req}]["ttft_ms"].get<double>();
    ttft_err.push_back(static_cast<std::int64_t>((r["ttft_ms"].get<double>() - truth_ttft_ms) * 1e6));
  }
  ASSERT_FALSE(emit_err.empty());
  ASSERT_FALSE(read_err.empty());
  const std::int64_t emit_p99 = p99_abs(emit_err), read_p99 = p99_abs(read_err);
  std::printf("[ accuracy ] %s/%s/%s: emit p50 %.1f us p99 %.1f us over %zu events, read p50 %.1f us p99 %.1f us "
              "over %zu events, ttft max err %.1f us, itl max err %.1f us\n",
              mode.sender, mode.reader, mode.framing, percentile_abs(emit_err, 50) / 1e3, emit_p99 / 1e3,
              emit_err.size(), percentile_abs(read_err, 50) / 1e3, read_p99 / 1e3, read_err.size(),
              percentile_abs(ttft_err, 100) / 1e3, percentile_abs(itl_err, 100) / 1e3);
  EXPECT_LE(emit_p99, 200'000) << "emit time p99 error (ns)";
  EXPECT_LE(read_p99, 200'000) << "read time p99 error (ns)";
  expect_per_request_errors(request_end_err, "request end");
  expect_per_request_errors(ttft_err, "TTFT");
  expect_per_request_errors(itl_err, "ITL");
}

INSTANTIATE_TEST_SUITE_P(Senders, GroundTruth,
                         ::testing::Values(Mode{"write", "read", "chunked"}, Mode{"send", "recv", "chunked"},
                                           Mode{"sendmsg", "recvmsg", "chunked"}, Mode{"writev", "readv", "chunked"},
                                           Mode{"write", "recv", "close"}, Mode{"writev", "read", "close"}),
                         [](const auto& info) {
                           return std::string(info.param.sender) + "_" + info.param.reader + "_" + info.param.framing;
                         });

// ---- real peers and load -----------------------------------------------------

TEST_F(E2E, CurlClientsAreTimedOnBothEnds) {
  start_agent();
  start_server({"--ttft-ms", "10", "--itl-ms", "5"});
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(run({"/usr/bin/curl", "-sN", "-o", "/dev/null", "-X", "POST", "http://127.0.0.1:" + std::to_string(port_) + "/v1/chat/completions",
                   "-H", "Content-Type: application/json", "-d", R"({"model":"curl-model","stream":true,"max_tokens":12})"},
                  "curl.out"),
              0);
  }
  stop_server();
  const auto records = stop_agent();
  const auto servers = with(records, "role", "server");
  const auto curls = with(records, "comm", "curl");
  ASSERT_EQ(servers.size(), 3u);
  ASSERT_EQ(curls.size(), 3u);
  for (const auto& r : curls) {
    EXPECT_EQ(r["role"], "client");
    EXPECT_EQ(r["vantage"], "read");
    EXPECT_EQ(r["model"], "curl-model");
    EXPECT_EQ(r["content_events"], 12);
    EXPECT_EQ(r["end"], "complete");
    EXPECT_GE(r["ttft_ms"].get<double>(), 10.0);
  }
  for (const auto& r : servers) EXPECT_EQ(r["content_events"], 12);
}

TEST_F(E2E, TwoHundredConcurrentStreamsAreAllComplete) {
  start_agent();
  start_server({"--ttft-ms", "50", "--itl-ms", "20", "--max-conns", "1000"});
  ASSERT_EQ(run_client({"--concurrency", "200", "--tokens", "10"}), 0) << testing::read_file(path("client.out"));
  stop_server();
  const auto records = stop_agent();
  const auto servers = with(records, "role", "server");
  const auto clients = with(records, "role", "client");
  EXPECT_EQ(servers.size(), 200u) << testing::read_file(path("agent.log"));
  EXPECT_EQ(clients.size(), 200u);
  std::set<std::string> ids;
  for (const auto& r : records) {
    EXPECT_EQ(r["end"], "complete");
    EXPECT_EQ(r["content_events"], 10);
    EXPECT_EQ(r["bytes_lost"], 0);
    ids.insert(r["stream_id"].get<std::string>() + r["role"].get<std::string>());
  }
  EXPECT_EQ(ids.size(), records.size()) << "stream ids must be unique";
}

TEST_F(E2E, StreamRunningBeforeTheAgentIsPickedUpAtTheNextEvent) {
  start_server({"--ttft-ms", "10", "--itl-ms", "10"});
  auto client = Process::spawn({build_dir() + "/sample-client", "--port", std::to_string(port_), "--concurrency", "2",
                                "--tokens", "150"},
                               path("client.out"));
  ASSERT_TRUE(client);
  std::this_thread::sleep_for(300ms);
  start_agent();
  auto st = client->wait(30s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << testing::read_file(path("client.out"));
  stop_server();
  const auto records = stop_agent();
  const auto servers = with(records, "role", "server");
  ASSERT_EQ(servers.size(), 2u) << testing::read_file(path("agent.log"));
  for (const auto& r : servers) {
    EXPECT_TRUE(r["joined_midstream"].get<bool>());
    EXPECT_TRUE(r["ttft_ms"].is_null());
    EXPECT_GT(r["content_events"].get<int>(), 20);
    EXPECT_LT(r["content_events"].get<int>(), 150);
    EXPECT_NEAR(r["itl_p50_ms"].get<double>(), 10.0, 3.0);
    EXPECT_EQ(r["end"], "complete");
  }
}

TEST_F(E2E, NonStreamingHttpAndNonHttpTrafficYieldNoStreamRecords) {
  // No filter: every process on the host is eligible, as in production.
  start_agent({}, /*filter_port=*/false);
  start_server({"--ttft-ms", "5", "--itl-ms", "2"});
  const std::string base = "http://127.0.0.1:" + std::to_string(port_);
  ASSERT_EQ(run_client({"--no-stream", "--concurrency", "3", "--tokens", "5"}), 0);
  ASSERT_EQ(run({"/usr/bin/curl", "-s", "-o", "/dev/null", base + "/health"}, "curl1.out"), 0);
  ASSERT_EQ(run({build_dir() + "/send-loop", "--payload", "binary", "--count", "20000"}, "loop.out"), 0);
  // One real stream in the same run proves the agent was capturing all along.
  ASSERT_EQ(run({"/usr/bin/curl", "-sN", "-o", "/dev/null", "-X", "POST", base + "/v1/chat/completions", "-d",
                 R"({"model":"m","stream":true,"max_tokens":4})"},
                "curl2.out"),
            0);
  stop_server();
  const auto records = stop_agent();
  int streams_on_port = 0;
  for (const auto& r : records) {
    const bool ours = port_of(r["local"]) == port_ || port_of(r["remote"]) == port_;
    if (!ours) continue;
    ++streams_on_port;
    EXPECT_EQ(r["content_events"], 4) << "only the streaming request may produce records: " << r.dump();
    EXPECT_NE(r["comm"], "sample-client");
  }
  EXPECT_EQ(streams_on_port, 2) << "the streaming curl request, seen from server and curl";
  for (const auto& r : records) EXPECT_NE(r["comm"], "send-loop") << r.dump();
}

}  // namespace
}  // namespace infertap
