// infertapd in hostile and unlucky production, as root: clients that starve
// the metrics endpoint, secrets in requests, a log reader that stops, idle
// API connections, a second agent, and how current `streams --live` is.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/escape.h"
#include "daemon/api.h"
#include "support/http_load.h"
#include "support/live_test.h"
#include "support/process.h"
#include "support/test_certificate.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using testing::Process;
using testing::build_dir;
using testing::read_file;
using namespace std::chrono_literals;

class Hostile : public testing::LiveTest {
 protected:
  Hostile() : LiveTest("infertap-hostile") {}

  // infertapd tracing port_ with its API in the scratch dir and its metrics
  // on metrics_port_; `extra` appended. Returns once it has attached.
  // `wrapper`: a command the daemon runs under (setpriv with fewer capabilities).
  void start_daemon(std::vector<std::string> extra = {}, const std::string& output = "",
                    std::vector<std::string> wrapper = {}) {
    metrics_port_ = testing::free_port();
    std::vector<std::string> argv = {build_dir() + "/infertapd", "--port", std::to_string(port_), "--socket",
                                     path("api.sock"), "--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port_),
                                     "--ready-file", path("ready"), "-o", output.empty() ? path("records.ndjson") : output};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.begin(), wrapper.begin(), wrapper.end());
    auto d = Process::spawn(argv, path("daemon.log"));
    ASSERT_TRUE(d);
    daemon_.emplace(std::move(*d));
    ASSERT_TRUE(testing::wait_for_file(path("ready"), 20s)) << read_file(path("daemon.log"));
  }
  void stop_daemon() {
    const auto st = daemon_->stop(15s);
    EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_file(path("daemon.log"));
  }

  // `infertap ARGS` against the daemon: exit status, stdout + stderr.
  std::pair<int, std::string> cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {build_dir() + "/infertap", "--socket", path("api.sock")};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = Process::spawn(argv, path("cli.out"));
    if (!p) return {-1, ""};
    const auto st = p->wait(20s);
    return {st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1, read_file(path("cli.out"))};
  }

  json status() { return daemon::ApiClient(path("api.sock")).request({{"cmd", "status"}}); }

  // A client run to its end; it must exit 0. Its output: client.out.
  void run_client(const std::vector<std::string>& argv) {
    auto client = Process::spawn(argv, path("client.out"));
    ASSERT_TRUE(client);
    const auto st = client->wait(30s);
    ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_file(path("client.out"));
  }

  std::uint16_t metrics_port_ = 0;
  std::optional<Process> daemon_;
};

// ---- the metrics endpoint cannot be starved ---------------------------------------

// 8 clients trickling request heads, 4 POSTs announcing 1 GB bodies and 200
// concurrent scrapes for 5 s: a probe loop gets every /healthz and /readyz
// answer within 1 s throughout (before: four tricklers alone made every
// probe time out while they held on).
TEST_F(Hostile, HealthAnswersUnderSlowClientsHugePostsAndManyScrapes) {
  std::ofstream(path("config.yaml")) << "metrics:\n  read_timeout_s: 1\n";
  start_daemon({"-c", path("config.yaml")});
  testing::HttpLoad load(metrics_port_);
  load.slow_heads(8);
  load.huge_posts(4);
  load.scrapes(200);
  load.probe("/healthz", 50ms, 1s);
  load.probe("/readyz", 100ms, 1s);
  std::this_thread::sleep_for(5s);
  load.stop();
  std::this_thread::sleep_for(1200ms);  // the status counters refresh once a second
  const json http = status()["counters"]["http"];
  std::fprintf(stderr, "probes %zu: p50 %.1f ms, p99 %.1f ms, max %.1f ms, %zu failed; scrapes %llu ok, %llu failed; %s\n",
               load.probes(), load.probe_percentile_ms(50), load.probe_percentile_ms(99), load.probe_max_ms(),
               load.probe_failures(), static_cast<unsigned long long>(load.scrapes_ok()),
               static_cast<unsigned long long>(load.scrapes_failed()), http.dump().c_str());
  EXPECT_EQ(load.probe_failures(), 0u);
  EXPECT_LT(load.probe_max_ms(), 1000);
  EXPECT_GE(load.probes(), 50u);
  EXPECT_GE(load.scrapes_ok(), 200u);
  EXPECT_GE(http.value("head_timeouts", 0) + http.value("evicted", 0), 8)
      << "the trickling heads lost their slots (cut at the read timeout, or closed to make room)";
  EXPECT_GE(http.value("rejected", 0), 4) << "the POSTs were answered 405";
  stop_daemon();
}

// ---- privacy of URLs and files ---------------------------------------------------

constexpr const char* kSecrets[] = {
    "qs7Hq2ZxPw9Lm4Tk",                  // query string value
    "PathSecret7Kq2Xw9Lm4Zt8R",          // path segment
    "auth-Secret-Zx81Qw",                // Authorization header
    "prompt-secret-Ww3Kd9",              // prompt
    "completion-secret-Pq5Rt2",          // completion
};

// Every secret a request carries stays out of every output: the NDJSON with
// timelines, every CLI command in both forms, a watcher, /metrics, the log.
TEST_F(Hostile, NoSecretOfARequestReachesAnyOutput) {
  std::ofstream(path("config.yaml")) << "degradation:\n  window_s: 1\n  min_streams: 1\n  warmup_windows: 1\n";
  start_daemon({"-c", path("config.yaml"), "--timeline"});
  auto watcher = Process::spawn({build_dir() + "/infertap", "--socket", path("api.sock"), "watch", "--timeline"},
                                path("watch.out"));
  ASSERT_TRUE(watcher);
  auto server = Process::spawn({build_dir() + "/sample-server", "--port", std::to_string(port_), "--ttft-ms", "5",
                                "--itl-ms", "3", "--tokens", "6", "--model", "privacy-model", "--text", kSecrets[4]},
                               path("server.out"));
  ASSERT_TRUE(server);
  ASSERT_TRUE(testing::wait_for_text(path("server.out"), "listening", 5s)) << read_file(path("server.out"));
  const std::string target = std::string("/v1/u/sk-proj-") + kSecrets[1] + "/chat/completions?api_key=" + kSecrets[0] +
                             "&stream=1";
  ASSERT_NO_FATAL_FAILURE(run_client({build_dir() + "/sample-client", "--port", std::to_string(port_), "--path",
                                      target, "--authorization", std::string("Bearer ") + kSecrets[2], "--prompt",
                                      std::string("tell me ") + kSecrets[3], "--concurrency", "2", "--requests", "3",
                                      "--model", "privacy-model"}));
  std::this_thread::sleep_for(2500ms);  // path settle, a degradation window, the status refresh

  std::vector<std::pair<std::string, std::string>> outputs;  // what, text
  const auto streams = cli({"streams", "-o", "json"});
  ASSERT_EQ(streams.first, 0) << streams.second;
  std::string server_id;
  std::istringstream lines(streams.second);
  for (std::string line; std::getline(lines, line);) {
    const json r = json::parse(line, nullptr, false);
    if (r.is_object() && r.value("role", "") == "server") server_id = r.value("stream_id", "");
  }
  ASSERT_FALSE(server_id.empty()) << streams.second;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"streams"}, {"streams", "-o", "json"}, {"streams", "--live", "-o", "json"},
                                             {"show", server_id}, {"show", server_id, "-o", "json"},
                                             {"stats", "--by", "route"}, {"stats", "--by", "route", "-o", "json"},
                                             {"stats", "--by", "model", "-o", "json"}, {"top", "--once"},
                                             {"top", "--once", "-o", "json"}, {"status"}, {"status", "-o", "json"},
                                             {"alerts"}, {"alerts", "-o", "json"}}) {
    const auto [rc, out] = cli(args);
    EXPECT_EQ(rc, 0) << args[0] << ": " << out;
    std::string what = "infertap";
    for (const std::string& a : args) what += " " + a;
    outputs.emplace_back(what, out);
  }
  const testing::Timed metrics = testing::timed_get(metrics_port_, "/metrics", 5s);
  ASSERT_EQ(metrics.status, 200);
  outputs.emplace_back("/metrics", metrics.body);
  watcher->stop(2s);
  server->stop(5s);
  stop_daemon();
  outputs.emplace_back("NDJSON", read_file(path("records.ndjson")));
  outputs.emplace_back("infertap watch --timeline", read_file(path("watch.out")));
  outputs.emplace_back("infertapd log", read_file(path("daemon.log")));

  for (const auto& [what, text] : outputs) {
    for (const char* secret : kSecrets) EXPECT_EQ(text.find(secret), std::string::npos) << secret << " in " << what;
  }
  // The streams are there, under the route with the secret segment as {id}.
  const std::string route = "/v1/u/{id}/chat/completions";
  for (const auto& [what, text] : outputs) {
    if (what == "NDJSON" || what == "/metrics" || what == "infertap stats --by route -o json" ||
        what == "infertap alerts -o json" || what == "infertap show " + server_id + " -o json") {
      EXPECT_NE(text.find(route), std::string::npos) << route << " not in " << what << ":\n" << text.substr(0, 2000);
    }
  }
  struct stat st {};
  ASSERT_EQ(stat(path("records.ndjson").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the output file is the agent's alone";
}

// ---- tenant text cannot forge output ------------------------------------------------


// A server whose process name (comm, from the name it was executed by)
// carries a newline and ESC[2J: `infertap streams` has a row per stream, and
// no output (streams, top, stats, status, /metrics, the daemon's log) carries
// a raw control character or a line that starts with the forged text (before:
// the row split in two and a scrape carried the ESC).
TEST_F(Hostile, AProcessNameWithANewlineAndEscForgesNoOutput) {
  start_daemon();
  const std::string link = path("a\nFORGED\x1b[2J");
  const std::string target = std::filesystem::absolute(build_dir() + "/sample-server");
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  auto server = Process::spawn({link, "--port", std::to_string(port_), "--ttft-ms", "5", "--itl-ms", "2", "--tokens", "6"},
                               path("server.out"));
  ASSERT_TRUE(server);
  ASSERT_TRUE(testing::wait_for_text(path("server.out"), "listening", 5s)) << read_file(path("server.out"));
  ASSERT_NO_FATAL_FAILURE(
      run_client({build_dir() + "/sample-client", "--port", std::to_string(port_), "--requests", "2", "--tokens", "6"}));
  std::this_thread::sleep_for(1500ms);  // the status refresh

  const auto records = cli({"streams", "-o", "json"});
  ASSERT_EQ(records.first, 0) << records.second;
  std::size_t count = 0, named = 0;
  std::istringstream lines(records.second);
  for (std::string line; std::getline(lines, line); ++count) {
    const json r = json::parse(line, nullptr, false);
    named += r.is_object() && r.value("comm", "") == "a\nFORGED\x1b[2J";
  }
  ASSERT_GE(named, 2u) << "the server's streams, under its own name: " << records.second;
  std::vector<std::pair<std::string, std::string>> outputs;  // what, text
  const auto streams = cli({"streams"});
  EXPECT_EQ(std::count(streams.second.begin(), streams.second.end(), '\n'), static_cast<long>(count + 1))
      << "a header and a row per stream:\n" << streams.second;
  EXPECT_NE(streams.second.find("a\\nFORGED\\x1b[2J"), std::string::npos) << streams.second;
  outputs.emplace_back("infertap streams", streams.second);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"top", "--once"}, {"stats", "--by", "process"}, {"status"}, {"streams", "--live"}}) {
    outputs.emplace_back("infertap " + args[0], cli(args).second);
  }
  const testing::Timed metrics = testing::timed_get(metrics_port_, "/metrics", 5s);
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("process=\"a\\nFORGED\\\\x1b[2J\""), std::string::npos) << "escaped, still there";
  outputs.emplace_back("/metrics", metrics.body);
  server->stop(5s);
  stop_daemon();
  outputs.emplace_back("infertapd log", read_file(path("daemon.log")));
  for (const auto& [what, text] : outputs) {
    EXPECT_FALSE(base::has_unsafe(text, true)) << what << ":\n" << text.substr(0, 3000);
    EXPECT_EQ(text.rfind("FORGED", 0), std::string::npos) << what;
    EXPECT_EQ(text.find("\nFORGED"), std::string::npos) << what << ":\n" << text.substr(0, 3000);
  }
}

// ---- an agent short of privileges says so ---------------------------------------------

// The DaemonSet's old pair, CAP_BPF + CAP_PERFMON: the capture attaches, and
// the log, `infertap status` and /metrics name each capability TLS capture
// lacks and what will not work (before: 0 of 6 HTTPS streams, no word why).
TEST_F(Hostile, AnAgentWithoutTheTlsCapabilitiesSaysWhatItLacks) {
  start_daemon({}, "", {"/usr/bin/setpriv", "--bounding-set=-all,+bpf,+perfmon", "--inh-caps=-all", "--"});
  const json privileges = status().value("privileges", json::object());
  const testing::Timed metrics = testing::timed_get(metrics_port_, "/metrics", 5s);
  const auto [rc, text] = cli({"status"});
  stop_daemon();
  const std::string log = read_file(path("daemon.log"));
  for (const char* cap : {"CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_CHECKPOINT_RESTORE"}) {
    EXPECT_NE(log.find(std::string("infertapd: ") + cap + " missing: "), std::string::npos) << cap << "\n" << log;
    EXPECT_NE(privileges.dump().find(std::string(cap) + " missing: "), std::string::npos) << privileges.dump();
    EXPECT_NE(text.find(std::string(cap) + " missing: "), std::string::npos) << text;
    EXPECT_NE(metrics.body.find(std::string("infertap_capability_missing{capability=\"") + cap + "\"} 1"),
              std::string::npos)
        << cap;
  }
  EXPECT_EQ(log.find("CAP_BPF missing"), std::string::npos) << "plaintext capture loads: " << log;
  EXPECT_NE(log.find("/proc/PID/map_files refused"), std::string::npos) << log;
}

// The path of a library this test binary has mapped ("libssl.so"), "" if none.
std::string mapped_library(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const std::size_t at = line.find('/');
    if (at != std::string::npos && line.find("/" + name, at) != std::string::npos) return line.substr(at);
  }
  return "";
}

// `file` owned by nobody, with `mode`.
void give_to_nobody(const std::string& file, mode_t mode) {
  ASSERT_EQ(chown(file.c_str(), 65534, 65534), 0) << file;
  ASSERT_EQ(chmod(file.c_str(), mode), 0) << file;
}

// Exactly the DaemonSet's capabilities: the TLS streams of another user's
// processes, whose libssl is a copy in a directory only that user may read,
// are recorded, and nothing is said missing (with CAP_BPF + CAP_PERFMON
// alone: 0 of 6 and no word why; without CAP_DAC_READ_SEARCH: 0 of 6).
TEST_F(Hostile, TheDeployedCapabilitiesCaptureAnotherUsersPrivateTls) {
  ASSERT_EQ(chmod(scratch_->path().c_str(), 0711), 0);
  const std::string home = path("nobody"), lib = home + "/lib";
  ASSERT_EQ(mkdir(home.c_str(), 0700), 0);
  ASSERT_EQ(mkdir(lib.c_str(), 0700), 0);
  ASSERT_EQ(testing::make_localhost_certificate(home + "/key.pem", home + "/cert.pem", path("openssl.log")), "");
  for (const char* name : {"libssl.so", "libcrypto.so"}) {
    const std::filesystem::path from = mapped_library(name);
    ASSERT_FALSE(from.empty()) << name;
    std::filesystem::copy_file(from, lib / from.filename());
    give_to_nobody(lib + "/" + from.filename().string(), 0500);
  }
  // The peer's script is copied in too: the repository may sit in a directory nobody cannot enter.
  std::filesystem::copy_file("tests/support/tls_peer.py", home + "/tls_peer.py");
  for (const char* file : {"/key.pem", "/cert.pem", "/tls_peer.py"}) give_to_nobody(home + file, 0400);
  for (const std::string& d : {lib, home}) give_to_nobody(d, 0700);
  start_daemon({}, "", {"/usr/bin/setpriv", "--bounding-set=-all,+bpf,+perfmon,+sys_admin,+sys_ptrace,+dac_read_search",
                        "--inh-caps=-all", "--"});
  const std::string peer = home + "/tls_peer.py";
  const std::vector<std::string> as_nobody = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                              "/usr/bin/env", "LD_LIBRARY_PATH=" + lib, "/usr/bin/python3", peer};
  std::vector<std::string> server_argv = as_nobody;
  server_argv.insert(server_argv.end(), {"server", "--port", std::to_string(port_), "--cert", home + "/cert.pem", "--key",
                                         home + "/key.pem", "--ttft-ms", "5", "--itl-ms", "5"});
  auto server = Process::spawn(server_argv, path("server.out"));
  ASSERT_TRUE(server);
  ASSERT_TRUE(testing::wait_for_text(path("server.out"), "listening", 10s)) << read_file(path("server.out"));
  std::vector<std::string> client_argv = as_nobody;
  client_argv.insert(client_argv.end(), {"client", "--port", std::to_string(port_), "--tokens", "5", "--requests", "3"});
  ASSERT_NO_FATAL_FAILURE(run_client(client_argv));
  std::this_thread::sleep_for(1500ms);
  server->stop(5s);
  stop_daemon();
  const std::string log = read_file(path("daemon.log"));
  std::size_t tls = 0;
  std::istringstream records(read_file(path("records.ndjson")));
  for (std::string line; std::getline(records, line);) tls += json::parse(line, nullptr, false).value("tls", false);
  EXPECT_EQ(tls, 6u) << "3 streams, each seen by the server and the client:\n" << log;
  EXPECT_NE(log.find(lib + "/libssl.so"), std::string::npos) << "the private copy was probed:\n" << log;
  EXPECT_EQ(log.find(" missing: "), std::string::npos) << log;
}

// ---- loss is always counted and said -----------------------------------------------

// A FIFO whose reader stopped: every record is either written (the reader
// finds it whole) or dropped and counted by reason, and the log says so at
// shutdown (before: 16 written, `dropped_lines: 0` and no message).
TEST_F(Hostile, EveryLineTheOutputDropsIsCountedAndSaid) {
  const std::string fifo = path("records.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // opened, never read until the end
  ASSERT_GE(reader, 0);
  std::ofstream(path("config.yaml")) << "limits:\n  sink_queue_lines: 16\n";
  start_daemon({"--timeline", "--stats", "-c", path("config.yaml")}, fifo);
  auto server = Process::spawn({build_dir() + "/sample-server", "--port", std::to_string(port_), "--ttft-ms", "1",
                                "--itl-ms", "1", "--tokens", "32"},
                               path("server.out"));
  ASSERT_TRUE(server);
  ASSERT_TRUE(testing::wait_for_text(path("server.out"), "listening", 5s));
  ASSERT_NO_FATAL_FAILURE(run_client({build_dir() + "/sample-client", "--port", std::to_string(port_), "--concurrency",
                                      "5", "--requests", "10", "--tokens", "32"}));
  std::this_thread::sleep_for(1500ms);
  server->stop(5s);
  stop_daemon();

  std::string got;
  char buf[65536];
  for (ssize_t n; (n = read(reader, buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  close(reader);
  const auto whole_lines = static_cast<std::uint64_t>(std::count(got.begin(), got.end(), '\n'));
  const std::string log = read_file(path("daemon.log"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(output: (\d+) lines written, (\d+) dropped \(([^)]*)\))"))) << log;
  const std::uint64_t written = std::stoull(m[1]), dropped = std::stoull(m[2]);
  std::fprintf(stderr, "100 records: %llu written, %llu dropped (%s); the reader found %llu\n",
               static_cast<unsigned long long>(written), static_cast<unsigned long long>(dropped), m[3].str().c_str(),
               static_cast<unsigned long long>(whole_lines));
  EXPECT_EQ(written + dropped, 100u) << log;
  EXPECT_EQ(written, whole_lines);
  EXPECT_GT(dropped, 0u);
  EXPECT_NE(m[3].str().find("queue full"), std::string::npos) << log;
  EXPECT_NE(log.find("output is losing records"), std::string::npos) << "said while it happens, too:\n" << log;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"("dropped_lines":(\d+))"))) << log;
  EXPECT_EQ(std::stoull(m[1]), dropped) << "--stats reads the counters after the last write";
}

// ---- small ones -------------------------------------------------------------------

// 32 idle connections on the API: the CLI says the daemon is busy (not
// "send: Broken pipe") and gets in about 2 s later (before: 30 s).
TEST_F(Hostile, IdleApiConnectionsLockTheCliOutBriefly) {
  start_daemon();
  std::vector<int> idle;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path("api.sock").c_str());
  for (int i = 0; i < 32; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(100ms);
  const auto t0 = std::chrono::steady_clock::now();
  const auto [rc, out] = cli({"status"});
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("infertapd is busy: 32 connections; try again"), std::string::npos) << out;
  EXPECT_EQ(out.find("Broken pipe"), std::string::npos) << out;
  int answered = -1;
  while (std::chrono::steady_clock::now() - t0 < 10s && answered != 0) {
    std::this_thread::sleep_for(200ms);
    answered = cli({"status"}).first;
  }
  const double locked_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "32 idle connections locked the CLI out for %.1f s\n", locked_s);
  EXPECT_EQ(answered, 0);
  EXPECT_LT(locked_s, 4.0);
  for (int fd : idle) close(fd);
  stop_daemon();
}

// A second agent given the first one's API socket, metrics port or output
// file stops at once with a clear message, before it attaches anything.
TEST_F(Hostile, ASecondAgentStopsBeforeItAttaches) {
  start_daemon();
  const std::string port = "127.0.0.1:" + std::to_string(metrics_port_);
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--socket", path("api.sock"), "--metrics-listen", "127.0.0.1:0", "-o", path("b.ndjson")},
       "another infertapd is already serving"},
      {{"--socket", path("b.sock"), "--metrics-listen", port, "-o", path("b.ndjson")}, "Address already in use"},
      {{"--socket", path("b.sock"), "--metrics-listen", "127.0.0.1:0", "-o", path("records.ndjson")},
       "another infertapd writes this file"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {build_dir() + "/infertapd", "--port", std::to_string(port_)};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const auto t0 = std::chrono::steady_clock::now();
    auto second = Process::spawn(argv, path("second.log"));
    ASSERT_TRUE(second);
    const auto st = second->wait(10s);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const std::string log = read_file(path("second.log"));
    std::fprintf(stderr, "second agent (%s): exit after %.0f ms\n", c.says.c_str(), ms);
    ASSERT_TRUE(st && WIFEXITED(*st)) << log;
    EXPECT_EQ(WEXITSTATUS(*st), 2) << log;
    EXPECT_NE(log.find(c.says), std::string::npos) << log;
    EXPECT_EQ(log.find("attach"), std::string::npos) << "it attached before it found out:\n" << log;
    EXPECT_LT(ms, 1000) << log;
  }
  EXPECT_EQ(status().value("ok", false), true) << "the first agent is untouched";
  stop_daemon();
}

// `streams --live` of a stream with a token every 25 ms: how long ago the
// view says the last event was (before: up to a second, the refresh period).
TEST_F(Hostile, StreamsLiveIsCurrent) {
  start_daemon();
  auto server = Process::spawn({build_dir() + "/sample-server", "--port", std::to_string(port_), "--ttft-ms", "10",
                                "--itl-ms", "25", "--tokens", "160"},
                               path("server.out"));
  ASSERT_TRUE(server);
  ASSERT_TRUE(testing::wait_for_text(path("server.out"), "listening", 5s));
  auto client = Process::spawn({build_dir() + "/sample-client", "--port", std::to_string(port_), "--tokens", "160"},
                               path("client.out"));
  ASSERT_TRUE(client);
  std::this_thread::sleep_for(500ms);
  std::vector<double> idle;
  daemon::ApiClient api(path("api.sock"));
  for (int i = 0; i < 25; ++i) {
    const json r = api.request({{"cmd", "streams"}, {"live", true}});
    for (const json& l : r.value("live", json::array())) {
      if (l.value("role", "") == "server" && l["idle_ms"].is_number()) idle.push_back(l["idle_ms"].get<double>());
    }
    std::this_thread::sleep_for(100ms);
  }
  const auto [rc, out] = cli({"streams", "--live"});
  EXPECT_EQ(rc, 0) << out;
  client->wait(10s);
  server->stop(5s);
  stop_daemon();
  ASSERT_GE(idle.size(), 20u);
  std::sort(idle.begin(), idle.end());
  std::fprintf(stderr, "live view idle_ms: p50 %.0f, max %.0f (true gaps <= 25 ms)\n", idle[idle.size() / 2],
               idle.back());
  EXPECT_LT(idle[idle.size() / 2], 150);
  EXPECT_LT(idle.back(), 500);
}

}  // namespace
}  // namespace infertap
