// infertapd on real traffic, as root: process name targeting, container / pod
// identity from a kubepods-like cgroup, every NDJSON line valid against
// docs/schema.json, and a FIFO sink nobody reads that does not stop capture.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/api.h"
#include "daemon/config.h"
#include "support/live_test.h"
#include "support/ndjson.h"
#include "support/process.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using testing::Process;
using testing::build_dir;
using namespace std::chrono_literals;

using testing::read_ndjson;

class Agent : public testing::LiveTest {
 protected:
  Agent() : LiveTest("infertap-agent") {}

  // infertapd with its API on the scratch dir; `extra` flags appended.
  std::optional<Process> start_daemon(std::vector<std::string> extra, const std::string& output) {
    const std::string ready = path("ready");
    unlink(ready.c_str());
    std::vector<std::string> argv = {build_dir() + "/infertapd", "--socket", path("api.sock"), "--metrics-listen", "",
                                     "--ready-file", ready, "-o", output};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto d = Process::spawn(argv, path("daemon.log"));
    EXPECT_TRUE(d);
    if (!d) return d;
    EXPECT_TRUE(testing::wait_for_file(ready, 20s)) << testing::read_file(path("daemon.log"));
    return d;
  }

  // A sample server on `port`, running `binary`; waits for "listening".
  std::optional<Process> start_server(const std::string& binary, std::uint16_t port, const std::string& log,
                                      std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {binary, "--port", std::to_string(port), "--ttft-ms", "10", "--itl-ms", "3"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto s = Process::spawn(argv, path(log));
    EXPECT_TRUE(s);
    for (int i = 0; i < 250 && testing::read_file(path(log)).find("listening") == std::string::npos; ++i) {
      std::this_thread::sleep_for(20ms);
    }
    return s;
  }

  int client(std::uint16_t port, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {build_dir() + "/sample-client", "--port", std::to_string(port)};
    if (std::find(extra.begin(), extra.end(), "--tokens") == extra.end()) extra.insert(extra.end(), {"--tokens", "8"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = Process::spawn(argv, path("client.out"));
    if (!c) return -1;
    const auto st = c->wait(60s);
    EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << testing::read_file(path("client.out"));
    return st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
  }

  json status() {
    daemon::ApiClient api(path("api.sock"));
    return api.request({{"cmd", "status"}});
  }
};

// Two copies of the sample server under different process names; only the one
// matching --process-name is timed (its clients do not match either).
TEST_F(Agent, ProcessNamePatternTimesOnlyTheMatchingProcess) {
  const std::string wanted = path("vllm-fake-srv"), other = path("other-srv");
  std::filesystem::copy_file(build_dir() + "/sample-server", wanted);
  std::filesystem::copy_file(build_dir() + "/sample-server", other);
  std::filesystem::permissions(wanted, std::filesystem::perms::owner_all);
  std::filesystem::permissions(other, std::filesystem::perms::owner_all);
  const std::uint16_t port2 = testing::free_port();

  auto daemon = start_daemon({"--process-name", "vllm*", "--process-name", "python3", "--port",
                              std::to_string(port_), "--port", std::to_string(port2)},
                             path("records.ndjson"));
  ASSERT_TRUE(daemon);
  auto s1 = start_server(wanted, port_, "s1.out");
  auto s2 = start_server(other, port2, "s2.out");
  ASSERT_TRUE(s1 && s2);
  ASSERT_EQ(client(port_, {"--concurrency", "2"}), 0);
  ASSERT_EQ(client(port2, {"--concurrency", "2"}), 0);
  // The status counters are refreshed once a second.
  json st;
  for (int i = 0; i < 50; ++i) {
    st = status();
    if (st["counters"]["pipeline"]["records"] == 2) break;
    std::this_thread::sleep_for(100ms);
  }
  auto exit = daemon->stop(10s);
  ASSERT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << testing::read_file(path("daemon.log"));

  // The other server is timed when its name is the one asked for: it was
  // left out above by the pattern, not by anything else.
  auto second = start_daemon({"--process-name", "other*", "--port", std::to_string(port2)}, path("records-other.ndjson"));
  ASSERT_TRUE(second);
  ASSERT_EQ(client(port2, {"--concurrency", "2"}), 0);
  std::this_thread::sleep_for(300ms);
  exit = second->stop(10s);
  ASSERT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << testing::read_file(path("daemon.log"));
  s1->stop(5s);
  s2->stop(5s);
  int others = 0;
  for (const json& r : read_ndjson(path("records-other.ndjson"))) others += r.value("comm", "") == "other-srv";
  EXPECT_EQ(others, 2) << testing::read_file(path("records-other.ndjson"));

  int matching = 0;
  for (const json& r : read_ndjson(path("records.ndjson"))) {
    ASSERT_TRUE(r.is_object());
    EXPECT_EQ(r["comm"], "vllm-fake-srv") << r.dump();
    if (r["comm"] == "vllm-fake-srv" && r["end"] == "complete") ++matching;
  }
  EXPECT_EQ(matching, 2) << testing::read_file(path("records.ndjson"));
  // Only the matching server's two sockets became connections; the others
  // (the other server's, the clients') were refused on their first event.
  // How many of those reach userspace depends on the kernel's classification
  // of each socket (a client socket whose first event was its request), so
  // the count is a lower bound.
  EXPECT_EQ(st["counters"]["pipeline"]["connections_opened"], 2) << st.dump();
  EXPECT_GE(st["counters"]["pipeline"]["connections_refused"].get<int>(), 2) << st.dump();
}

// A cgroup named like a kubelet-made one (systemd driver), a fake kubelet pod
// log directory: the targeted pod slice covers the container scope below it,
// and the record names the container and the pod.
class AgentInPod : public Agent {
 protected:
  void SetUp() override {
    Agent::SetUp();
    if (HasFatalFailure()) return;
    std::mt19937_64 rng(std::random_device{}());
    char uid[37], id[65];
    std::snprintf(uid, sizeof uid, "%08x-%04x-4%03x-8%03x-%012llx", static_cast<unsigned>(rng()),
                  static_cast<unsigned>(rng() & 0xffff), static_cast<unsigned>(rng() & 0xfff),
                  static_cast<unsigned>(rng() & 0xfff), static_cast<unsigned long long>(rng() & 0xffffffffffffull));
    for (int i = 0; i < 64; i += 16) std::snprintf(id + i, 17, "%016llx", static_cast<unsigned long long>(rng()));
    uid_ = uid;
    id_ = id;
    std::string underscored = uid_;
    for (char& c : underscored) c = c == '-' ? '_' : c;
    root_ = daemon::cgroup2_mount_point();
    pod_slice_ = "/kubepods.slice/kubepods-pod" + underscored + ".slice";
    scope_ = pod_slice_ + "/cri-containerd-" + id_ + ".scope";
    std::error_code ec;
    created_kubepods_ = !std::filesystem::exists(root_ + "/kubepods.slice");
    std::filesystem::create_directories(root_ + scope_, ec);
    ASSERT_FALSE(ec) << "cannot create cgroup " << root_ + scope_ << ": " << ec.message();
  }
  void TearDown() override {
    // Processes are gone by now (stopped in the test); cgroups must be empty to go.
    rmdir((root_ + scope_).c_str());
    rmdir((root_ + pod_slice_).c_str());
    if (created_kubepods_) rmdir((root_ + "/kubepods.slice").c_str());  // fails harmlessly if others use it
    EXPECT_FALSE(std::filesystem::exists(root_ + pod_slice_)) << "cgroup left behind";
    Agent::TearDown();
  }
  std::string uid_, id_, root_, pod_slice_, scope_;
  bool created_kubepods_ = false;
};

TEST_F(AgentInPod, RecordNamesTheContainerAndPodOfACgroupBelowTheTarget) {
  const std::string pods = path("pods");
  std::filesystem::create_directories(pods + "/inference_vllm-0_" + uid_ + "/vllm");
  std::ofstream(path("config.yaml")) << "kubernetes:\n  pods_dir: " << pods << "\n  containers_dir: \"\"\n";
  auto daemon = start_daemon({"--cgroup", pod_slice_, "--port", std::to_string(port_), "-c", path("config.yaml")},
                             path("records.ndjson"));
  ASSERT_TRUE(daemon);
  // The server enters the container cgroup before it opens any socket.
  const std::string procs = root_ + scope_ + "/cgroup.procs";
  auto server = Process::spawn({"/bin/sh", "-c",
                                "echo $$ > " + procs + " && exec " + build_dir() + "/sample-server --port " +
                                    std::to_string(port_) + " --ttft-ms 10 --itl-ms 3"},
                               path("server.out"));
  ASSERT_TRUE(server);
  for (int i = 0; i < 250 && testing::read_file(path("server.out")).find("listening") == std::string::npos; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_NE(testing::read_file(path("server.out")).find("listening"), std::string::npos)
      << testing::read_file(path("server.out"));
  ASSERT_EQ(client(port_), 0);
  std::this_thread::sleep_for(300ms);
  // stats --by container groups by the Kubernetes names.
  daemon::ApiClient api(path("api.sock"));
  const json stats = api.request({{"cmd", "stats"}, {"by", "container"}});
  server->stop(5s);
  const auto exit = daemon->stop(10s);
  ASSERT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << testing::read_file(path("daemon.log"));

  const std::vector<json> records = read_ndjson(path("records.ndjson"));
  ASSERT_EQ(records.size(), 1u) << "only the server in the pod is targeted (the client is outside it):\n"
                                << testing::read_file(path("records.ndjson"));
  const json& r = records[0];
  EXPECT_EQ(r["role"], "server");
  EXPECT_EQ(r["cgroup"], scope_);
  EXPECT_EQ(r["container_id"], id_);
  EXPECT_EQ(r["pod_uid"], uid_);
  EXPECT_EQ(r["k8s_namespace"], "inference");
  EXPECT_EQ(r["k8s_pod"], "vllm-0");
  EXPECT_EQ(r["k8s_container"], "vllm");
  EXPECT_NE(stats.dump().find("inference/vllm-0/vllm"), std::string::npos) << stats.dump();
}

// Every line of a run with timelines, OpenAI and Anthropic dialects, server
// and client vantages, validates against docs/schema.json; and the validator
// does reject a line that breaks it.
TEST_F(Agent, EveryNdjsonLineValidatesAgainstTheSchema) {
  auto daemon = start_daemon({"--timeline", "--port", std::to_string(port_)}, path("records.ndjson"));
  ASSERT_TRUE(daemon);
  auto server = start_server(build_dir() + "/sample-server", port_, "server.out", {"--pause-after", "3", "--pause-ms", "150"});
  ASSERT_TRUE(server);
  ASSERT_EQ(client(port_, {"--concurrency", "2"}), 0);
  ASSERT_EQ(client(port_, {"--anthropic"}), 0);
  ASSERT_EQ(client(port_, {"--usage", "--requests", "2"}), 0);
  std::this_thread::sleep_for(300ms);
  server->stop(5s);
  const auto exit = daemon->stop(10s);
  ASSERT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << testing::read_file(path("daemon.log"));

  const std::vector<json> records = read_ndjson(path("records.ndjson"));
  int anthropic = 0, openai = 0, with_stall = 0;
  for (const json& r : records) {
    if (r.value("dialect", "") == "anthropic") ++anthropic;
    if (r.value("dialect", "") == "openai") ++openai;
    if (!r.value("stalls", json::array()).empty()) ++with_stall;
  }
  EXPECT_EQ(anthropic, 2) << "server + client";
  EXPECT_EQ(openai, 8);
  EXPECT_GE(with_stall, 1);

  const auto validate = [&](const std::string& file) {
    auto v = Process::spawn({"/usr/bin/python3", "tests/schema/validate_ndjson.py", "docs/schema.json", file},
                            path("validate.out"));
    if (!v) return -1;
    const auto st = v->wait(60s);
    return st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
  };
  EXPECT_EQ(validate(path("records.ndjson")), 0) << testing::read_file(path("validate.out"));

  // The same records with one field of the wrong type, one unknown field: rejected.
  json broken = records.front();
  broken["ttft_ms"] = "fast";
  broken["surprise"] = 1;
  std::ofstream(path("broken.ndjson")) << records.back().dump() << "\n" << broken.dump() << "\n";
  EXPECT_EQ(validate(path("broken.ndjson")), 1) << testing::read_file(path("validate.out"));
  const std::string report = testing::read_file(path("validate.out"));
  EXPECT_NE(report.find("ttft_ms"), std::string::npos) << report;
  EXPECT_NE(report.find("surprise"), std::string::npos) << report;
}

// A FIFO whose reader opened it and never reads: the pipe and then the sink
// queue fill, records are dropped and counted, and capture and the API go on.
TEST_F(Agent, ASinkThatStopsReadingDoesNotStopCapture) {
  const std::string fifo = path("records.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // never read
  ASSERT_GE(reader, 0);
  std::ofstream(path("small-queue.yaml")) << "limits:\n  sink_queue_lines: 4\n";
  auto daemon = start_daemon({"--timeline", "--port", std::to_string(port_), "-c", path("small-queue.yaml")}, fifo);
  ASSERT_TRUE(daemon);
  auto server = start_server(build_dir() + "/sample-server", port_, "server.out", {"--tokens", "64"});
  ASSERT_TRUE(server);
  // 60 streams x 2 vantages x ~10 KB of timeline: well past 64 KiB of pipe + 4 queued lines.
  ASSERT_EQ(client(port_, {"--concurrency", "6", "--requests", "10", "--tokens", "64"}), 0);
  std::this_thread::sleep_for(1500ms);  // status counters refresh once a second
  const auto t0 = std::chrono::steady_clock::now();
  const json st = status();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "the API answers while the sink is stuck";
  const json& c = st["counters"];
  EXPECT_EQ(c["pipeline"]["records"], 120) << st.dump();
  EXPECT_GT(c["sink"]["dropped_lines"].get<int>(), 0) << st.dump();
  EXPECT_LT(c["sink"]["written_lines"].get<int>(), 120) << st.dump();
  EXPECT_EQ(c["kernel"]["drops"]["ringbuf_full"], 0) << st.dump();
  // Still capturing: a further stream is counted.
  ASSERT_EQ(client(port_), 0);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(status()["counters"]["pipeline"]["records"], 122);
  server->stop(5s);
  const auto t1 = std::chrono::steady_clock::now();
  const auto exit = daemon->stop(15s);
  EXPECT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << testing::read_file(path("daemon.log"));
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 10s) << "shutdown waits at most the sink's drain deadline";
  close(reader);
}

}  // namespace
}  // namespace infertap
