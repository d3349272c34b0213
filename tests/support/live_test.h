// Base fixture for tests that load the BPF programs and drive real processes:
// requires root, gives each test a scratch directory (kept when it fails) and
// a free loopback port for its server.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/gateways.h"
#include "support/ndjson.h"
#include "support/process.h"
#include "support/records.h"

namespace infertap::testing {

class LiveTest : public ::testing::Test {
 protected:
  explicit LiveTest(std::string scratch_prefix) : scratch_prefix_(std::move(scratch_prefix)) {}

  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "these tests load BPF programs: run as root";
    scratch_.emplace(scratch_prefix_);
    ASSERT_TRUE(scratch_->ok()) << "cannot create a scratch directory in /tmp";
    port_ = free_port();
  }
  void TearDown() override {
    if ((HasFailure() || std::getenv("INFERTAP_KEEP_ARTIFACTS")) && scratch_) {  // =1 keeps passing ones too
      scratch_->keep();
      std::fprintf(stderr, "artifacts kept in %s\n", scratch_->path().c_str());
    }
  }
  std::string path(const std::string& name) const { return scratch_->file(name); }

  // infertapd writing records with their timelines to records.ndjson, plus
  // `args`; returns once it has attached (its ready file exists).
  void start_agent_with(const std::vector<std::string>& args) {
    using namespace std::chrono_literals;
    std::vector<std::string> argv = {build_dir() + "/infertapd", "--timeline", "--stats", "--ready-file",
                                     path("ready"), "-o", path("records.ndjson")};
    argv.insert(argv.end(), args.begin(), args.end());
    auto agent = Process::spawn(argv, path("agent.log"));
    ASSERT_TRUE(agent) << "cannot start infertapd";
    agent_.emplace(std::move(*agent));
    ASSERT_TRUE(wait_for_file(path("ready"), 20s)) << "infertapd did not attach:\n" << read_file(path("agent.log"));
  }

  // infertapd tracing only these ports, without its API socket and metrics
  // listener.
  void start_agent_on_ports(const std::vector<std::uint16_t>& ports) {
    std::vector<std::string> args = {"--socket", "", "--metrics-listen", ""};
    for (std::uint16_t p : ports) args.insert(args.end(), {"--port", std::to_string(p)});
    start_agent_with(args);
  }

  // Records wait briefly for the other records of their path (gateway legs,
  // the other end): lets them go, then stops the agent as below.
  std::vector<nlohmann::json> stop_agent_after_joins() {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return stop_agent_records();
  }

  // Stops it (SIGTERM), expects a clean exit, and returns every record it wrote.
  std::vector<nlohmann::json> stop_agent_records() {
    using namespace std::chrono_literals;
    auto st = agent_->stop(10s);
    EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0)
        << "infertapd did not exit cleanly:\n" << read_file(path("agent.log"));
    return read_ndjson(path("records.ndjson"));
  }

  // Runs argv to its end, output in the scratch file log_name; its exit
  // status (-1: it did not start, or did not end in time and was stopped).
  int run_to_end(const std::vector<std::string>& argv, const std::string& log_name,
          std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    auto p = Process::spawn(argv, path(log_name));
    EXPECT_TRUE(p) << "cannot spawn " << argv[0];
    if (!p) return -1;
    auto st = p->wait(timeout);
    EXPECT_TRUE(st) << argv[0] << " did not end within " << timeout.count() << " ms";
    if (!st) p->stop(std::chrono::seconds(1));
    return st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
  }

  // Node's http2 client (tests/support/h2_streams.mjs): `streams` concurrent
  // streams on one connection to `url`; its per-stream lines by stream index,
  // from the scratch file NAME.out.
  std::vector<nlohmann::json> run_node_h2_streams(const std::string& url, int streams, int tokens,
                                                  const std::vector<std::string>& extra, const std::string& name = "node") {
    constexpr const char* kNodeClient = "tests/support/h2_streams.mjs";
    const std::string node = find_system_binary("node");
    EXPECT_FALSE(node.empty()) << "node not installed: run scripts/setup.sh (nodejs)";
    EXPECT_TRUE(std::filesystem::exists(kNodeClient)) << "run from the repository root (" << kNodeClient << ")";
    if (node.empty()) return {};
    std::vector<std::string> argv = {node, kNodeClient, url, std::to_string(streams), std::to_string(tokens)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    EXPECT_EQ(run_to_end(argv, name + ".out"), 0) << read_file(path(name + ".out"));
    std::vector<nlohmann::json> lines = select(read_ndjson(path(name + ".out")), [](const nlohmann::json& l) {
      return l.is_object() && l.contains("index");
    });
    std::sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) { return a["index"] < b["index"]; });
    EXPECT_EQ(lines.size(), std::size_t(streams)) << read_file(path(name + ".out"));
    return lines;
  }

  // The stream ids of Node's lines, each stream whole by Node's own count
  // (status 200, `tokens` content events).
  static std::set<int> whole_node_streams(const std::vector<nlohmann::json>& lines, int tokens) {
    std::set<int> ids;
    for (const auto& l : lines) {
      EXPECT_EQ(l["status"], 200) << l;
      EXPECT_EQ(l["content_events"], tokens) << "the client's own count: " << l;
      ids.insert(l["stream_id"].get<int>());
    }
    return ids;
  }

  std::optional<ScratchDir> scratch_;
  std::optional<Process> agent_;
  std::uint16_t port_ = 0;

 private:
  std::string scratch_prefix_;
};

}  // namespace infertap::testing
