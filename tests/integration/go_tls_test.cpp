// Go crypto/tls end to end, as root: the real infertapd probes Go programs'
// own TLS (entry of crypto/tls.(*Conn).Write/Read and their RET instructions)
// — Caddy (Debian's, a stripped Go 1.19 binary) terminating TLS in front of
// the sample server, and a small net/http streaming client built here with
// the system Go, with its own clock readings as ground truth; the same client
// built with -ldflags='-s -w'; and a Go client killed while probed.
//
// Both legs of the clients are HTTP/1.1 (curl --http1.1, Caddy `protocols h1`,
// the Go client with HTTP/2 off): HTTP/2 is another piece of work.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/gateways.h"
#include "support/live_test.h"
#include "support/ndjson.h"
#include "support/percentile.h"
#include "support/process.h"
#include "support/repo_file.h"
#include "support/sample_peers.h"
#include "support/tls_fixture.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::Process;
using testing::read_file;

using testing::port_of;
// The Go build cache outlives a run (shared with the unit test of capture/go_binary).
constexpr const char* kGoCache = "/tmp/infertap-go-cache";

// The Go client's source: tests/support/go_sse_client.go.
constexpr const char* kGoClientSource = "tests/support/go_sse_client.go";

std::string brief(const json& r) {
  json b = json::object();
  for (const char* k : {"role", "comm", "local", "remote", "tls", "tls_library", "end", "content_events", "ttft_ms",
                        "gateway", "peer_stream_id"})
    if (r.contains(k)) b[k] = r[k];
  return b.dump();
}

class GoTlsTest : public testing::TlsFixture {
 protected:
  GoTlsTest() : TlsFixture("infertap-go-tls") {}

  void SetUp() override {
    TlsFixture::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_FALSE(testing::find_system_binary("go").empty()) << "go not installed: run scripts/setup.sh (golang-go)";
  }

  // The Go client built into NAME (a program name: its comm), "" or why not.
  std::string build_go_client(const std::string& name, bool stripped) {
    const std::string dir = path("go-src");
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/main.go") << testing::repo_file(kGoClientSource);
    const std::string cmd = "cd " + dir + " && HOME=" + dir + " GOCACHE=" + kGoCache + " GO111MODULE=off GOFLAGS= " +
                            "go build " + (stripped ? "-ldflags='-s -w' " : "") + "-o " + path(name) +
                            " main.go > " + path(name + ".build.log") + " 2>&1";
    if (std::system(cmd.c_str()) != 0) return "go build failed:\n" + read_file(path(name + ".build.log"));
    return "";
  }

  std::vector<std::string> go_client(const std::string& name, std::uint16_t port, int tokens, int requests) {
    return {path(name), "https://localhost:" + std::to_string(port) + "/v1/chat/completions", path("cert.pem"),
            std::to_string(tokens), std::to_string(requests), "300"};
  }

  std::uint64_t agent_counter(const std::string& name) const { return kernel_counter(agent_stats(), name); }
};

// curl --http1.1 -> Caddy (Go TLS, HTTP/1.1) -> sample server (plaintext).
TEST_F(GoTlsTest, CaddyTlsDownstreamLegIsTimedAndJoinedToItsUpstream) {
  constexpr int kStreams = 3, kTokens = 40;
  ASSERT_FALSE(testing::find_system_binary("caddy").empty()) << "caddy not installed: run scripts/setup.sh (caddy)";
  testing::SampleServer server(path("server"), {"--ttft-ms", "50", "--itl-ms", "10"});
  ASSERT_TRUE(server.ok()) << server.error();
  const std::uint16_t caddy_port = testing::free_port();
  std::ofstream(path("Caddyfile")) << "{\n  admin off\n  auto_https off\n  storage file_system " << path("caddy-data")
                                   << "\n  servers {\n    protocols h1\n  }\n}\nhttps://localhost:" << caddy_port
                                   << " {\n  tls " << path("cert.pem") << " " << path("key.pem")
                                   << "\n  reverse_proxy 127.0.0.1:" << server.port()
                                   << " {\n    flush_interval -1\n  }\n}\n";
  auto caddy = Process::spawn({"/usr/bin/env", "HOME=" + path(""), "XDG_DATA_HOME=" + path("caddy-data"),
                               "XDG_CONFIG_HOME=" + path("caddy-config"), testing::find_system_binary("caddy"), "run",
                               "--config", path("Caddyfile"), "--adapter", "caddyfile"},
                              path("caddy.log"));
  ASSERT_TRUE(caddy) << "cannot spawn caddy";
  peers_["caddy"].emplace(std::move(*caddy));
  for (int i = 0; i < 250 && !testing::tcp_connects("127.0.0.1", caddy_port); ++i) std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(testing::tcp_connects("127.0.0.1", caddy_port)) << "caddy did not listen:\n" << read_file(path("caddy.log"));

  start_agent_on_ports({server.port(), caddy_port});
  for (int i = 0; i < kStreams; ++i)
    ASSERT_EQ(run_to_end({"/usr/bin/curl", "--http1.1", "-sSN", "--cacert", path("cert.pem"), "-o", "/dev/null", "-X", "POST",
                   "https://localhost:" + std::to_string(caddy_port) + "/v1/chat/completions", "-H",
                   "Content-Type: application/json", "-d",
                   R"({"model":"m","stream":true,"max_tokens":)" + std::to_string(kTokens) + "}"},
                  "curl.out"),
              0)
        << read_file(path("curl.out"));
  const auto records = stop_agent_after_joins();
  const std::string agent_log = read_file(path("agent.log"));
  EXPECT_NE(agent_log.find("probing Go TLS in caddy as go:caddy"), std::string::npos) << agent_log;
  EXPECT_NE(agent_log.find("from gopclntab"), std::string::npos) << "Debian's caddy is stripped: " << agent_log;
  const auto legs = where(where(records, "comm", "caddy"), "role", "gateway");
  ASSERT_EQ(legs.size(), std::size_t(2 * kStreams)) << "both legs of Caddy, per stream:\n" << agent_log;
  int downstream = 0;
  for (const auto& r : legs) {
    ASSERT_TRUE(r["gateway"].is_object()) << brief(r);
    if (r["gateway"]["leg"] != "downstream") {
      EXPECT_FALSE(r["tls"].get<bool>()) << "the upstream leg is plaintext: " << brief(r);
      continue;
    }
    ++downstream;
    EXPECT_EQ(port_of(r["local"]), caddy_port) << brief(r);
    EXPECT_TRUE(r["tls"].get<bool>()) << brief(r);
    EXPECT_EQ(r["tls_library"], "go:caddy") << brief(r);
    EXPECT_EQ(r["content_events"], kTokens) << brief(r);
    EXPECT_EQ(r["end"], "complete") << brief(r);
    EXPECT_GE(r["gateway"]["events_matched"].get<int>(), kTokens) << "joined to the upstream leg: " << brief(r);
    std::printf("  caddy TLS downstream: gateway delay p50 %.2f ms p99 %.2f ms, %d events matched\n",
                r["gateway"]["delay_p50_ms"].get<double>(), r["gateway"]["delay_p99_ms"].get<double>(),
                r["gateway"]["events_matched"].get<int>());
  }
  EXPECT_EQ(downstream, kStreams);
  const auto servers = where(where(records, "comm", "sample-server"), "role", "server");
  ASSERT_EQ(servers.size(), std::size_t(kStreams));
  for (const auto& r : servers) {
    ASSERT_TRUE(r["delivery"].is_object()) << brief(r);
    EXPECT_NE(r["delivery"]["path"].get<std::string>().find("gateway(caddy)"), std::string::npos) << brief(r);
  }
  const auto curls = where(records, "comm", "curl");
  ASSERT_EQ(curls.size(), std::size_t(kStreams)) << "curl's own view (OpenSSL)";
  for (const auto& r : curls) EXPECT_EQ(r["content_events"], kTokens) << brief(r);
}

// The Go client's read times against its own clock, one event per TLS record.
TEST_F(GoTlsTest, GoClientReadTimesMatchItsOwnClock) {
  constexpr int kRequests = 3, kTokens = 50;
  ASSERT_EQ(build_go_client("go-sse-client", false), "");
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "20", "--itl-ms", "5"}), "");
  start_agent_on_ports({port_});
  ASSERT_EQ(run_to_end(go_client("go-sse-client", port_, kTokens, kRequests), "client.ndjson"), 0)
      << read_file(path("client.ndjson"));
  const auto records = stop_agent_after_joins();
  std::map<std::pair<int, int>, std::int64_t> read_at;  // (local port, event index) -> its clock
  for (const auto& l : testing::read_ndjson(path("client.ndjson")))
    read_at[{l["port"].get<int>(), l["event_index"].get<int>()}] = l["mono_ns"];
  const auto clients = where(records, "comm", "go-sse-client");
  ASSERT_EQ(clients.size(), std::size_t(kRequests)) << read_file(path("agent.log"));
  std::vector<std::int64_t> err;
  for (const auto& r : clients) {
    EXPECT_EQ(r["role"], "client") << brief(r);
    EXPECT_TRUE(r["tls"].get<bool>()) << brief(r);
    EXPECT_EQ(r["tls_library"], "go:go-sse-client") << brief(r);
    EXPECT_EQ(r["content_events"], kTokens) << brief(r);
    EXPECT_EQ(r["end"], "complete") << brief(r);
    for (const auto& e : r["timeline"]) {
      auto it = read_at.find({port_of(r["local"]), e["i"].get<int>()});
      ASSERT_NE(it, read_at.end()) << "no client line for event " << e["i"] << " of " << brief(r);
      err.push_back(it->second - e["ts_ns"].get<std::int64_t>());
    }
  }
  ASSERT_GE(err.size(), std::size_t(kRequests * kTokens));
  const std::int64_t p99 = testing::percentile_abs(err, 99);
  std::printf("[ accuracy ] Go crypto/tls read: p50 %.1f us p99 %.1f us over %zu events\n",
              testing::percentile_abs(err, 50) / 1e3, p99 / 1e3, err.size());
  EXPECT_LE(p99, 100'000) << "read time p99 error over Go TLS (ns)";
  EXPECT_GE(agent_counter("go_tls_binaries_attached"), 1u);
}

// -ldflags='-s -w': no .symtab; the function table still names the functions.
TEST_F(GoTlsTest, StrippedGoBinaryIsFoundThroughItsFunctionTable) {
  ASSERT_EQ(build_go_client("go-stripped", true), "");
  ASSERT_EQ(std::system(("readelf -S " + path("go-stripped") + " | grep -qE '\\s\\.symtab\\s'").c_str()) != 0, true)
      << "-s -w left a .symtab";
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "2"}), "");
  start_agent_on_ports({port_});
  ASSERT_EQ(run_to_end(go_client("go-stripped", port_, 20, 1), "client.ndjson"), 0) << read_file(path("client.ndjson"));
  const auto records = stop_agent_after_joins();
  const std::string agent_log = read_file(path("agent.log"));
  EXPECT_NE(agent_log.find("probing Go TLS in go-stripped as go:go-stripped"), std::string::npos) << agent_log;
  EXPECT_NE(agent_log.find("from gopclntab"), std::string::npos) << agent_log;
  const auto clients = where(records, "comm", "go-stripped");
  ASSERT_EQ(clients.size(), 1u) << agent_log;
  EXPECT_EQ(clients[0]["tls_library"], "go:go-stripped") << brief(clients[0]);
  EXPECT_EQ(clients[0]["content_events"], 20) << brief(clients[0]);
}

// A Go binary the agent cannot probe (here: claiming Go 1.16, whose calls pass
// arguments on the stack) is named with its version and the reason, counted,
// and skipped; the agent goes on (its peer, Python's ssl, is still seen).
TEST_F(GoTlsTest, GoBinaryTooOldIsNamedCountedAndSkipped) {
  ASSERT_EQ(build_go_client("go-sse-client", false), "");
  const std::string version = testing::command_output("go version " + path("go-sse-client") + " | awk '{print $2}' | tr -d '\\n'");
  ASSERT_EQ(version.rfind("go1.", 0), 0u) << version;
  const std::string patched = "go1.16" + version.substr(6);  // same length: the binary still runs
  ASSERT_EQ(std::system(("sed 's/" + version + "/" + patched + "/g' " + path("go-sse-client") + " > " + path("go-old") +
                         " && chmod +x " + path("go-old"))
                            .c_str()),
            0);
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "2"}), "");
  start_agent_on_ports({port_});
  ASSERT_EQ(run_to_end(go_client("go-old", port_, 10, 1), "client.ndjson"), 0) << read_file(path("client.ndjson"));
  const auto records = stop_agent_after_joins();
  const std::string agent_log = read_file(path("agent.log"));
  EXPECT_NE(agent_log.find("Go TLS of " + path("go-old") + " (" + patched + ") not probed"), std::string::npos)
      << agent_log;
  EXPECT_NE(agent_log.find("older than 1.17"), std::string::npos) << agent_log;
  EXPECT_GE(agent_counter("go_tls_binaries_skipped"), 1u) << agent_log;
  EXPECT_TRUE(where(records, "comm", "go-old").empty()) << "its TLS streams are not seen";
  const auto servers = where(records, "role", "server");
  ASSERT_EQ(servers.size(), 1u) << "capture of everything else goes on: " << agent_log;
  EXPECT_EQ(servers[0]["content_events"], 10) << brief(servers[0]);
}

// SIGKILL mid-stream, inside its probed calls: the agent goes on, counts the
// exit and releases the executable's probes.
TEST_F(GoTlsTest, GoProcessKilledWhileProbedIsCountedAndReleased) {
  ASSERT_EQ(build_go_client("go-killed", false), "");
  ASSERT_EQ(start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "20"}), "");
  start_agent_on_ports({port_});
  auto client = Process::spawn(go_client("go-killed", port_, 500, 1), path("client.ndjson"));
  ASSERT_TRUE(client);
  ASSERT_TRUE(testing::wait_for_text(path("client.ndjson"), "\"event_index\":5,", 10s)) << read_file(path("client.ndjson"));
  ::kill(client->pid(), SIGKILL);
  client->wait(5s);
  std::this_thread::sleep_for(2500ms);  // the agent checks probed executables' processes every second
  const auto records = stop_agent_after_joins();
  // (other Go programs on the host may add to these)
  EXPECT_GE(agent_counter("go_tls_binaries_attached"), 1u) << read_file(path("agent.log"));
  EXPECT_GE(agent_counter("go_tls_processes_exited"), 1u) << read_file(path("agent.log"));
  EXPECT_GE(agent_counter("go_tls_binaries_released"), 1u) << read_file(path("agent.log"));
  EXPECT_NE(read_file(path("agent.log")).find("probing Go TLS in go-killed"), std::string::npos);
  const auto clients = where(records, "comm", "go-killed");
  ASSERT_EQ(clients.size(), 1u) << read_file(path("agent.log"));
  EXPECT_GE(clients[0]["content_events"].get<int>(), 5) << brief(clients[0]);
  EXPECT_NE(clients[0]["end"], "complete") << brief(clients[0]);
}

}  // namespace
}  // namespace infertap
