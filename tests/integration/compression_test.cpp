// Compressed event streams, as root with the real agent: nginx compressing
// text/event-stream (gzip on, default gzip_buffers) for the sample client and
// for curl --compressed, HAProxy's compression, and the sample server's own
// gzip, deflate, br and zstd encoders. Each compressed leg is read like a
// plain one — events, tokens, TTFT — its gateway legs are joined by content,
// and a compressor that holds events is named as the cause.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/gateways.h"
#include "support/netns.h"
#include "support/live_test.h"
#include "support/sample_peers.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::ClientRun;
using testing::SampleServer;

constexpr int kTokens = 60;

std::vector<json> select(const std::vector<json>& records, const std::string& comm, const std::string& role) {
  std::vector<json> out;
  for (const json& r : records)
    if (r.value("comm", "") == comm && r.value("role", "") == role) out.push_back(r);
  return out;
}

std::string brief(const json& r) {
  return json{{"stream_id", r["stream_id"]},       {"role", r["role"]},         {"events", r["events"]},
              {"content_events", r["content_events"]}, {"content_encoding", r["content_encoding"]},
              {"decode_error", r["decode_error"]}, {"ttft_ms", r["ttft_ms"]},   {"stalls", r["stalls"]},
              {"delivery", r["delivery"]},         {"gateway", r["gateway"]}}
      .dump(1);
}

class CompressionTest : public testing::LiveTest {
 protected:
  CompressionTest() : LiveTest("infertap-compress") {}
  std::vector<json> stop_agent() {
    std::this_thread::sleep_for(1500ms);
    return stop_agent_records();
  }
  void expect_read_whole(const json& r, const std::string& coding) {
    EXPECT_EQ(r["content_encoding"], coding) << brief(r);
    EXPECT_TRUE(r["decode_error"].is_null()) << brief(r);
    EXPECT_EQ(r["content_events"], kTokens) << brief(r);
    EXPECT_EQ(r["dialect"], "openai") << brief(r);
    EXPECT_EQ(r["end"], "complete") << brief(r);
    EXPECT_FALSE(r["ttft_ms"].is_null()) << brief(r);
  }
};

// nginx gzip on text/event-stream, proxy buffering as by default: the
// compressed leg is decoded, joined to the plain upstream leg by content, and
// the held events are the compressor's.
TEST_F(CompressionTest, NginxGzipIsReadJoinedAndNamedAsTheHolder) {
  SampleServer server(path("server"), {"--ttft-ms", "30", "--itl-ms", "10", "--tokens", std::to_string(kTokens)});
  ASSERT_TRUE(server.ok()) << server.error();
  testing::Nginx nginx(testing::NginxMode::gzip, server.port(), path("nginx"));
  ASSERT_TRUE(nginx.ok()) << nginx.error();
  start_agent_with({"--socket", "", "--metrics-listen", ""});
  const ClientRun run = testing::run_sample_client(
      path("client"), nginx.port(), {"--tokens", std::to_string(kTokens), "--accept-encoding", "gzip"});
  ASSERT_EQ(run.rc, 0) << run.output;
  std::string curl_out;
  ASSERT_EQ(testing::run_shell("curl -sN --compressed -o /dev/null http://127.0.0.1:" + std::to_string(nginx.port()) +
                                   "/v1/chat/completions -H 'Content-Type: application/json' -d "
                                   "'{\"model\":\"m\",\"stream\":true,\"max_tokens\":" + std::to_string(kTokens) + "}'",
                               &curl_out),
            0)
      << curl_out;
  const std::vector<json> records = stop_agent();
  const auto gateway = select(records, "nginx", "gateway");
  const auto clients = select(records, "sample-client", "client"), curls = select(records, "curl", "client");
  ASSERT_EQ(clients.size(), 1u);
  ASSERT_EQ(curls.size(), 1u);
  expect_read_whole(clients[0], "gzip");
  expect_read_whole(curls[0], "gzip");
  std::size_t downstream = 0;
  for (const json& r : gateway) {
    ASSERT_TRUE(r["gateway"].is_object()) << brief(r);
    if (r["gateway"]["leg"] != "downstream") continue;
    ++downstream;
    expect_read_whole(r, "gzip");
    EXPECT_EQ(r["gateway"]["events_matched"], r["events"]) << "joined to the plain leg by content\n" << brief(r);
    EXPECT_GT(r["gateway"]["max_events_per_send"].get<int>(), 10) << "the compressor let them go together\n"
                                                                   << brief(r);
  }
  EXPECT_EQ(downstream, 2u);
  // The server's record, seen from each client through the gateway: gzip held the events.
  bool named = false;
  const auto servers = select(records, "sample-server", "server");
  EXPECT_EQ(servers.size(), 2u);
  for (const json& s : servers) {
    ASSERT_TRUE(s["delivery"].is_object()) << brief(s);
    EXPECT_TRUE(s["delivery"]["degraded_by_path"].get<bool>()) << brief(s);
    EXPECT_EQ(s["delivery"]["ttft_cause"], "gateway_buffering") << brief(s);
    named |= s["delivery"]["ttft_evidence"].get<std::string>().find("gzip held") != std::string::npos;
    for (const json& st : s["delivery"]["stalls"])
      named |= st["evidence"].get<std::string>().find("gzip held") != std::string::npos;
  }
  EXPECT_TRUE(named) << "the evidence names the compressor";
}

// HAProxy compression with http-no-delay flushes per chunk: compressed, read,
// and no finding (a compressing gateway that streams is not buffering).
TEST_F(CompressionTest, HAProxyCompressionThatStreamsIsNoFinding) {
  SampleServer server(path("server"), {"--ttft-ms", "30", "--itl-ms", "10", "--tokens", std::to_string(kTokens)});
  ASSERT_TRUE(server.ok()) << server.error();
  testing::HAProxyOptions opt;
  opt.extra_backend = "  compression algo gzip\n  compression type text/event-stream";
  testing::HAProxy haproxy(testing::HAProxyMode::streaming, server.port(), path("haproxy"), opt);
  ASSERT_TRUE(haproxy.ok()) << haproxy.error();
  start_agent_with({"--socket", "", "--metrics-listen", ""});
  const ClientRun run = testing::run_sample_client(
      path("client"), haproxy.port(), {"--tokens", std::to_string(kTokens), "--accept-encoding", "gzip"});
  ASSERT_EQ(run.rc, 0) << run.output;
  const std::vector<json> records = stop_agent();
  const auto clients = select(records, "sample-client", "client");
  ASSERT_EQ(clients.size(), 1u);
  expect_read_whole(clients[0], "gzip");
  const auto servers = select(records, "sample-server", "server");
  ASSERT_EQ(servers.size(), 1u);
  ASSERT_TRUE(servers[0]["delivery"].is_object()) << brief(servers[0]);
  EXPECT_FALSE(servers[0]["delivery"]["degraded_by_path"].get<bool>()) << brief(servers[0]);
}

// The sample server's own encoders, each event flushed: both ends decoded,
// the server's emits on the ground truth of its own log.
class ServerEncoding : public CompressionTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(ServerEncoding, BothEndsReadTheCodingOnTime) {
  const std::string coding = GetParam();
  SampleServer server(path("server"), {"--ttft-ms", "30", "--itl-ms", "10", "--tokens", std::to_string(kTokens),
                                       "--encoding", coding});
  ASSERT_TRUE(server.ok()) << server.error();
  start_agent_with({"--socket", "", "--metrics-listen", "", "--port", std::to_string(server.port())});
  std::string out;
  ASSERT_EQ(testing::run_shell("curl -sN --compressed -H 'Accept-Encoding: " + coding +
                                   "' -o /dev/null http://127.0.0.1:" + std::to_string(server.port()) +
                                   "/v1/chat/completions -H 'Content-Type: application/json' -d "
                                   "'{\"model\":\"m\",\"stream\":true,\"max_tokens\":" + std::to_string(kTokens) + "}'",
                               &out),
            0)
      << out;
  const std::vector<json> records = stop_agent();
  const auto servers = select(records, "sample-server", "server"), clients = select(records, "curl", "client");
  ASSERT_EQ(servers.size(), 1u);
  ASSERT_EQ(clients.size(), 1u);
  expect_read_whole(servers[0], coding);
  expect_read_whole(clients[0], coding);
  EXPECT_FALSE(servers[0]["peer_stream_id"].is_null()) << "both ends joined\n" << brief(servers[0]);
  // First token at the server: the send the server logged for it.
  const testing::ServerLog log = server.log();
  ASSERT_GT(log.first_content_ns(), 0);
  EXPECT_NEAR(servers[0]["first_token_ns"].get<double>(), double(log.first_content_ns()), 200e3) << brief(servers[0]);
}

INSTANTIATE_TEST_SUITE_P(Codings, ServerEncoding, ::testing::Values("gzip", "deflate", "br", "zstd"),
                         [](const auto& info) { return std::string(info.param); });

// The agent starts while a compressed stream is under way: its bytes cannot
// be decoded from the middle, and no record pretends to have read them.
TEST_F(CompressionTest, AStreamJoinedMidwayThroughCompressedBytesMakesNoBogusRecord) {
  SampleServer server(path("server"), {"--ttft-ms", "10", "--itl-ms", "10", "--tokens", "300", "--encoding", "gzip"});
  ASSERT_TRUE(server.ok()) << server.error();
  auto curl = testing::Process::spawn({"/usr/bin/curl", "-sN", "--compressed", "-o", "/dev/null",
                                       "http://127.0.0.1:" + std::to_string(server.port()) + "/v1/chat/completions",
                                       "-H", "Content-Type: application/json", "-d",
                                       "{\"model\":\"m\",\"stream\":true,\"max_tokens\":300}"},
                                      path("curl.out"));
  ASSERT_TRUE(curl);
  std::this_thread::sleep_for(500ms);
  start_agent_with({"--socket", "", "--metrics-listen", "", "--port", std::to_string(server.port())});
  ASSERT_TRUE(curl->wait(10s));
  for (const json& r : stop_agent()) {
    if (r.value("comm", "") != "sample-server" && r.value("comm", "") != "curl") continue;
    EXPECT_FALSE(r["events"] == 0 && r["dialect"] == "unknown") << "a 0-event record\n" << brief(r);
  }
}

}  // namespace
}  // namespace infertap
