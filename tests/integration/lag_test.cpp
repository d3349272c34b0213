// A client that falls behind, as root with the real agent and real readers:
// a steady reader slower than the server (several read rates, buffer sizes)
// never leaves a gap above the stall threshold, yet each event reaches it
// later than the one before; the server's record says the path degraded the
// stream and where the bytes waited. Readers that keep up, or fall behind a
// little and catch up, are no finding.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/live_test.h"
#include "support/sample_peers.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::ClientRun;
using testing::SampleServer;

struct Reader {
  const char* name;
  std::vector<std::string> client_args;  // how it reads
  std::vector<std::string> server_args;  // the server's send buffer
  bool falls_behind;
  const char* cause;  // expected lag cause when it does
};

// A sample server and its reading client under the agent: the server
// records it left (empty, with a failure, when a peer did not run).
class ReaderRun : public testing::LiveTest {
 protected:
  explicit ReaderRun(const char* name) : LiveTest(name) {}
  std::vector<json> server_records(const std::vector<std::string>& server_args,
                                   const std::vector<std::string>& client_args) {
    SampleServer server(path("server"), server_args);
    EXPECT_TRUE(server.ok()) << server.error();
    if (!server.ok()) return {};
    start_agent_with({"--socket", "", "--metrics-listen", "", "--port", std::to_string(server.port())});
    const ClientRun run = testing::run_sample_client(path("client"), server.port(), client_args);
    EXPECT_EQ(run.rc, 0) << run.output;
    std::this_thread::sleep_for(1500ms);  // the server records wait for their reader's
    std::vector<json> servers;
    for (const json& r : stop_agent_records())
      if (r.value("comm", "") == "sample-server" && r.value("role", "") == "server") servers.push_back(r);
    return servers;
  }
};

class LagTest : public ReaderRun, public ::testing::WithParamInterface<Reader> {
 protected:
  LagTest() : ReaderRun("infertap-lag") {}
};

std::string brief(const json& r) {
  return json{{"stream_id", r["stream_id"]}, {"ttft_ms", r["ttft_ms"]}, {"stalls", r["stalls"]},
              {"delivery", r["delivery"]},   {"tcp", r["tcp"]}}
      .dump(1);
}

// 120 token events 5 ms apart (~250 B each): the server emits for 0.6 s.
TEST_P(LagTest, TheServerRecordSaysWhetherItsClientFellBehind) {
  const Reader& reader = GetParam();
  std::vector<std::string> server_args = {"--ttft-ms", "20", "--itl-ms", "5", "--tokens", "120"};
  server_args.insert(server_args.end(), reader.server_args.begin(), reader.server_args.end());
  std::vector<std::string> client_args = {"--tokens", "120", "--requests", "2"};
  client_args.insert(client_args.end(), reader.client_args.begin(), reader.client_args.end());
  const std::vector<json> servers = server_records(server_args, client_args);
  ASSERT_EQ(servers.size(), 2u);
  for (const json& r : servers) {
    ASSERT_TRUE(r["delivery"].is_object()) << brief(r);
    const json& d = r["delivery"];
    std::printf("%s: lag p50 %.0f ms, max %.0f ms, last %.0f ms, growth %.0f ms, cause %s; delivered stalls %zu\n",
                reader.name, d["lag_p50_ms"].get<double>(), d["lag_max_ms"].get<double>(),
                d["lag_last_ms"].get<double>(), d["lag_growth_ms"].get<double>(),
                d["lag_cause"].is_null() ? "none" : d["lag_cause"].get<std::string>().c_str(), d["stalls"].size());
    if (reader.falls_behind) {
      EXPECT_GE(d["lag_growth_ms"].get<double>(), 200.0) << brief(r);
      EXPECT_EQ(d["lag_cause"], reader.cause) << brief(r);
      EXPECT_NE(d["lag_evidence"].get<std::string>().find("fell behind by"), std::string::npos) << brief(r);
      EXPECT_TRUE(d["degraded_by_path"].get<bool>()) << brief(r);
      EXPECT_NE(d["degraded_reason"].get<std::string>().find("client fell behind"), std::string::npos) << brief(r);
      EXPECT_TRUE(d["stalls"].empty()) << "no single gap is a stall: the finding is the lag\n" << brief(r);
    } else {
      EXPECT_TRUE(d["lag_cause"].is_null()) << brief(r);
      EXPECT_FALSE(d["degraded_by_path"].get<bool>()) << brief(r);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Readers, LagTest,
    ::testing::Values(
        // About one event per 12 ms read against one per 5 ms sent.
        Reader{"steady_slow_reader", {"--read-size", "300", "--read-delay-ms", "12"}, {}, true, "client_read"},
        // Slower still, with small buffers on both ends: the server's sends
        // block, the lag is what the buffers hold; the bytes still wait on
        // the reader.
        Reader{"slow_reader_small_buffers",
               {"--read-size", "300", "--read-delay-ms", "20", "--rcvbuf", "4096"},
               {"--sndbuf", "4096"},
               true,
               "client_read"},
        Reader{"reader_that_keeps_up", {}, {}, false, ""},
        // A pause shorter than the stall floor after 30 events (60 ms: the
        // delivered gap is the pause plus an ITL plus the host's jitter, and
        // must stay under the 100 ms floor), then reads at full speed and
        // catches up.
        Reader{"bursty_reader_that_catches_up", {"--stall-after", "30", "--stall-ms", "60"}, {}, false, ""}),
    [](const auto& info) { return std::string(info.param.name); });

// The slow reader a user tries first, on a short stream (40 tokens 20 ms
// apart, 512 B read every 60 ms) and on a longer one with a 2 KiB receive
// buffer: named by its rate, and over loopback never `network` (no byte
// crossed one: what waited in the server's queue waited for the reader).
struct SlowReader {
  const char* name;
  std::vector<std::string> server_args, client_args;
};

class SlowReaderTest : public ReaderRun, public ::testing::WithParamInterface<SlowReader> {
 protected:
  SlowReaderTest() : ReaderRun("infertap-slow-reader") {}
};

TEST_P(SlowReaderTest, IsNamedByItsRateAndNeverNetworkOverLoopback) {
  const SlowReader& c = GetParam();
  const std::vector<json> servers = server_records(c.server_args, c.client_args);
  ASSERT_EQ(servers.size(), 1u);
  const json& r = servers.front();
  ASSERT_TRUE(r["delivery"].is_object()) << brief(r);
  const json& d = r["delivery"];
  std::printf("%s: reader rate %.2f, growth %.0f ms, cause %s: %s\n", c.name,
              d["reader_rate"].is_null() ? -1.0 : d["reader_rate"].get<double>(), d["lag_growth_ms"].get<double>(),
              d["lag_cause"].is_null() ? "none" : d["lag_cause"].get<std::string>().c_str(),
              d["lag_evidence"].get<std::string>().c_str());
  ASSERT_TRUE(d["reader_rate"].is_number()) << brief(r);
  EXPECT_LE(d["reader_rate"].get<double>(), 0.9) << brief(r);
  EXPECT_EQ(d["lag_cause"], "client_read") << brief(r);
  EXPECT_NE(d["lag_evidence"].get<std::string>().find("as fast as the server wrote"), std::string::npos) << brief(r);
  for (const json& st : d["stalls"]) EXPECT_NE(st["cause"], "network") << "loopback: " << brief(r);
  for (const json& st : r["stalls"]) EXPECT_NE(st["cause"], "network") << "loopback: " << brief(r);
}

INSTANTIATE_TEST_SUITE_P(
    Readers, SlowReaderTest,
    ::testing::Values(SlowReader{"short",
                                 {"--ttft-ms", "20", "--itl-ms", "20", "--tokens", "40"},
                                 {"--tokens", "40", "--read-size", "512", "--read-delay-ms", "60"}},
                      SlowReader{"long_small_rcvbuf",
                                 {"--ttft-ms", "20", "--itl-ms", "10", "--tokens", "100"},
                                 {"--tokens", "100", "--read-size", "512", "--read-delay-ms", "60", "--rcvbuf", "2048"}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace infertap
