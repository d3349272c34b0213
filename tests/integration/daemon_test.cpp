// infertapd as a daemon, as root: the query API answers the infertap CLI with
// the streams it timed, SIGTERM leaves no BPF program behind, and a second
// start works.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/api.h"
#include "support/live_test.h"
#include "support/process.h"
#include "support/xml_dom.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using testing::Process;
using namespace std::chrono_literals;

using testing::build_dir;

// Runs a command to completion; returns {exit status, output}.
std::pair<int, std::string> run(const std::vector<std::string>& argv, const std::string& out_path) {
  auto p = Process::spawn(argv, out_path);
  if (!p) return {-1, ""};
  auto st = p->wait(30s);
  const int code = st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
  return {code, testing::read_file(out_path)};
}

// Ids of the BPF programs loaded now (bpftool -j prog show).
std::set<std::uint64_t> bpf_program_ids(const std::string& out_path) {
  auto [code, out] = run({"/usr/sbin/bpftool", "-j", "prog", "show"}, out_path);
  std::set<std::uint64_t> ids;
  const json progs = json::parse(out, nullptr, false);
  if (code != 0 || !progs.is_array()) {
    ADD_FAILURE() << "bpftool -j prog show failed: " << out;
    return ids;
  }
  for (const json& p : progs) ids.insert(p.value("id", 0ull));
  return ids;
}

// Ids of the BPF programs a process holds, from its descriptors' fdinfo
// ("prog_id:" of program and link fds). Other test runs on the machine load
// their own itap_ programs, so checks name the daemon's programs by id.
std::set<std::uint64_t> programs_held_by(pid_t pid) {
  std::set<std::uint64_t> ids;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::istringstream info(testing::read_file(entry.path().string()));
    for (std::string line; std::getline(info, line);) {
      if (line.rfind("prog_id:", 0) == 0) ids.insert(std::stoull(line.substr(8)));
    }
  }
  return ids;
}

class Daemon : public testing::LiveTest {
 protected:
  Daemon() : LiveTest("infertap-daemon") {}

  // `timeline`: --timeline (records written with their timelines); the API keeps them either way.
  std::optional<Process> start_daemon(const std::string& tag, bool timeline = true) {
    const std::string ready = path("ready-" + tag);
    std::vector<std::string> argv = {build_dir() + "/infertapd", "--port", std::to_string(port_), "--socket",
                                     path("api.sock"), "--metrics-listen", "127.0.0.1:0", "--ready-file", ready, "-o",
                                     path("records-" + tag + ".ndjson")};
    if (timeline) argv.push_back("--timeline");
    auto d = Process::spawn(argv, path("daemon-" + tag + ".log"));
    EXPECT_TRUE(d);
    EXPECT_TRUE(testing::wait_for_file(ready, 20s)) << testing::read_file(path("daemon-" + tag + ".log"));
    return d;
  }

  std::pair<int, std::string> cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {build_dir() + "/infertap", "--socket", path("api.sock")};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, path("cli.out"));
  }

  // Sample traffic on port_: `streams` streams of 12 tokens, one 250 ms pause after the 6th.
  void sample_traffic(const std::string& model, int streams) {
    auto server = Process::spawn({build_dir() + "/sample-server", "--port", std::to_string(port_), "--ttft-ms", "20",
                                  "--itl-ms", "5", "--pause-after", "6", "--pause-ms", "250", "--model", model},
                                 path("server.out"));
    ASSERT_TRUE(server);
    for (int i = 0; i < 100 && testing::read_file(path("server.out")).find("listening") == std::string::npos; ++i)
      std::this_thread::sleep_for(20ms);
    auto [client_rc, client_out] = run({build_dir() + "/sample-client", "--port", std::to_string(port_),
                                        "--concurrency", std::to_string(streams), "--tokens", "12", "--model", model},
                                       path("client.out"));
    ASSERT_EQ(client_rc, 0) << client_out;
    std::this_thread::sleep_for(300ms);
    server->stop(5s);
  }

  // The newest finished record of this role and model the daemon keeps.
  json kept_record(const std::string& role, const std::string& model) {
    auto [rc, out] = cli({"streams", "-o", "json", "-n", "50"});
    EXPECT_EQ(rc, 0) << out;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      const json r = json::parse(line, nullptr, false);
      if (r.is_object() && r.value("role", "") == role && r.value("model", "") == model) return r;
    }
    ADD_FAILURE() << "no " << role << " record of " << model << " in:\n" << out;
    return json();
  }
};

TEST_F(Daemon, CliSeesTheTimedStreamsAndStopLeavesNoProgramsBehind) {
  auto daemon = start_daemon("first");
  ASSERT_TRUE(daemon);
  const std::set<std::uint64_t> ours = programs_held_by(daemon->pid());
  ASSERT_FALSE(ours.empty()) << "no itap_ programs held by the daemon while it runs";

  // A watcher started before the traffic sees the records as they finish.
  auto watcher = Process::spawn({build_dir() + "/infertap", "--socket", path("api.sock"), "watch"}, path("watch.out"));
  ASSERT_TRUE(watcher);
  std::this_thread::sleep_for(200ms);

  sample_traffic("daemon-model", 2);

  // streams: two server and two client records of this model.
  auto [rc, out] = cli({"streams", "-o", "json", "-n", "20"});
  ASSERT_EQ(rc, 0) << out;
  std::vector<json> records;  // -o json: one record per line
  std::istringstream stream_lines(out);
  for (std::string line; std::getline(stream_lines, line);) {
    if (!line.empty()) records.push_back(json::parse(line));
  }
  int servers = 0, clients = 0;
  std::string server_id;
  for (const auto& r : records) {
    if (r.value("model", "") != "daemon-model") continue;
    if (r["role"] == "server") {
      ++servers;
      server_id = r["stream_id"];
    }
    if (r["role"] == "client") ++clients;
  }
  EXPECT_EQ(servers, 2) << out;
  EXPECT_EQ(clients, 2) << out;

  // show: the timeline, with the injected pause marked as a stall.
  ASSERT_FALSE(server_id.empty());
  std::tie(rc, out) = cli({"show", server_id});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("stall"), std::string::npos) << out;
  EXPECT_NE(out.find("daemon-model"), std::string::npos) << out;
  std::tie(rc, out) = cli({"show", server_id, "-o", "json"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(json::parse(out).value("stream_id", ""), server_id) << out;

  // stats by model: the model's streams are counted.
  std::tie(rc, out) = cli({"stats", "--by", "model", "-o", "json"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("daemon-model"), std::string::npos) << out;

  // watch printed the four records as NDJSON.
  watcher->stop(2s);
  int watched = 0;
  std::istringstream lines(testing::read_file(path("watch.out")));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const json j = json::parse(line);
    if (j.value("type", "") == "stream" && j.value("model", "") == "daemon-model") ++watched;
  }
  EXPECT_EQ(watched, 4);

  // SIGTERM: clean exit, no programs left, the API socket removed.
  auto st = daemon->stop(10s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << testing::read_file(path("daemon-first.log"));
  // The kernel frees programs shortly after their last reference goes (RCU).
  std::set<std::uint64_t> left = ours;
  for (int i = 0; i < 60 && !left.empty(); ++i) {
    const std::set<std::uint64_t> now = bpf_program_ids(path("bpftool.out"));
    std::erase_if(left, [&](std::uint64_t id) { return !now.count(id); });
    if (!left.empty()) std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(left.empty()) << left.size() << " of the daemon's " << ours.size()
                            << " BPF programs still loaded 3 s after SIGTERM";
  EXPECT_NE(access(path("api.sock").c_str(), F_OK), 0) << "API socket left behind";
  std::tie(rc, out) = cli({"status"});
  EXPECT_EQ(rc, 3) << "a stopped daemon is reported as not running: " << out;

  // A second start works.
  auto again = start_daemon("second");
  ASSERT_TRUE(again);
  std::tie(rc, out) = cli({"status", "-o", "json"});
  EXPECT_EQ(rc, 0) << out;
  st = again->stop(10s);
  EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
}

// `infertap show ID --svg FILE` with the daemon's defaults (records written
// without timelines: the API keeps them anyway): a picture of the timed
// stream that xmllint accepts, with the injected pause shaded as a model
// stall where the record has it, and the API's "format":"svg" drawing the same.
TEST_F(Daemon, ShowSvgDrawsTheTimedStreamWithTheDefaults) {
  auto daemon = start_daemon("svg", /*timeline=*/false);
  ASSERT_TRUE(daemon);
  sample_traffic("svg-model", 1);
  const json summary = kept_record("server", "svg-model");
  ASSERT_TRUE(summary.is_object());
  const std::string id = summary["stream_id"];
  EXPECT_FALSE(summary.contains("timeline"));

  const std::string file = path("stream.svg");
  auto [rc, out] = cli({"show", id, "--svg", file});
  ASSERT_EQ(rc, 0) << out;
  const std::string svg = testing::read_file(file);
  ASSERT_FALSE(svg.empty());
  ASSERT_EQ(access("/usr/bin/xmllint", X_OK), 0) << "xmllint missing: run scripts/setup.sh (Debian libxml2-utils)";
  std::tie(rc, out) = run({"/usr/bin/xmllint", "--noout", file}, path("xmllint.out"));
  EXPECT_EQ(rc, 0) << "xmllint rejects the picture: " << out;

  // The record the picture was drawn from, with its timeline.
  std::tie(rc, out) = cli({"show", id, "-o", "json"});
  ASSERT_EQ(rc, 0) << out;
  const json record = json::parse(out);
  ASSERT_TRUE(record["timeline"].is_array()) << out;
  ASSERT_EQ(record["stalls"].size(), 1u) << out;
  const json& stall = record["stalls"][0];
  EXPECT_EQ(stall["cause"], "model") << out;

  const testing::XmlDocument doc = testing::parse_xml(svg);
  ASSERT_TRUE(doc.root) << doc.error;
  const auto emit = doc.root->find([](const testing::XmlNode& n) { return n.has_class("lane") && n.attr("data-key") == "ts_ns"; });
  ASSERT_EQ(emit.size(), 1u);
  double ticked = 0;
  for (const auto* t : emit[0]->find("line", "tick")) ticked += t->number("data-n");
  EXPECT_EQ(ticked, static_cast<double>(record["timeline"].size())) << "every event of the timeline has its tick";
  const auto stalls = emit[0]->find("rect", "stall");
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0]->attr("data-cause"), "model");
  const double start_ms = static_cast<double>(stall["start_ns"].get<std::uint64_t>() -
                                              record["request_end_ns"].get<std::uint64_t>()) / 1e6;
  EXPECT_NEAR(stalls[0]->number("data-start-ms"), start_ms, 0.01);
  EXPECT_NEAR(stalls[0]->number("data-end-ms") - stalls[0]->number("data-start-ms"), stall["gap_ms"].get<double>(), 0.01);
  EXPECT_GE(stall["gap_ms"].get<double>(), 240.0);
  EXPECT_NE(emit[0]->all_text().find("model"), std::string::npos);

  // The API draws the same picture.
  daemon::ApiClient api(path("api.sock"));
  const json answer = api.request({{"cmd", "show"}, {"id", id}, {"format", "svg"}});
  ASSERT_EQ(answer.value("ok", false), true) << answer.dump().substr(0, 500);
  EXPECT_EQ(answer["svg"].get<std::string>(), svg);

  // A stream the daemon does not have: exit 1, no file.
  std::tie(rc, out) = cli({"show", "999999-0", "--svg", path("none.svg")});
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(access(path("none.svg").c_str(), F_OK), 0);
  auto st = daemon->stop(10s);
  EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << testing::read_file(path("daemon-svg.log"));
}

}  // namespace
}  // namespace infertap
