// Query API over a real unix socket in a temporary directory.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "core/metrics.h"
#include "daemon/api.h"

namespace infertap::daemon {
namespace {

using json = nlohmann::json;
constexpr std::uint64_t kMs = 1'000'000;

core::StreamRecord record(std::uint64_t generation, const std::string& model = "demo-llama-8b") {
  core::StreamRecord r;
  r.conn.generation = generation;
  r.conn.pid = 4242;
  r.conn.comm = "sample-server";
  r.role = core::Role::server;
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.model = model;
  r.status = 200;
  r.request_start_ns = 1000 * kMs;
  r.request_end_ns = 1001 * kMs;
  std::uint64_t t = r.request_end_ns + 120 * kMs;
  for (int i = 0; i < 8; ++i) {
    core::TimelineEvent e;
    e.ts_ns = e.first_byte_ns = t;
    e.kind = protocol::EventKind::content;
    e.wire_bytes = 140;
    e.events_in_syscall = 1;
    r.timeline.push_back(e);
    t += (i == 3 ? 320 : 25) * kMs;
  }
  r.first_token_ns = r.timeline.front().ts_ns;
  r.last_token_ns = r.last_event_ns = r.timeline.back().ts_ns;
  r.end_ns = r.last_event_ns + kMs;
  r.metrics = core::record_metrics(r, std::nullopt, core::PipelineConfig{});
  return r;
}

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/infertap-api-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/run/infertap.sock";  // parent created by the server
    ApiOptions o;
    o.socket_path = path_;
    o.status = [] { return json{{"version", "test-1"}, {"attach", {"sock tracepoints"}}}; };
    server_ = std::make_unique<ApiServer>(store_, o);
    server_->start();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  json ask(const json& request) {
    ApiClient client(path_);
    return client.request(request);
  }

  std::string dir_, path_;
  RecordStore store_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(ApiTest, SocketIsPrivate) {
  struct stat st{};
  ASSERT_EQ(lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp." + std::to_string(getpid())));
  if (geteuid() != 0) GTEST_SKIP() << "the uid check needs root";
  // Another user cannot connect: fork, drop to nobody, connect with raw calls.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path_.c_str(), path_.size());
  const pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) _exit(0);
    _exit(errno == EACCES ? 13 : 101);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 13);
}

TEST_F(ApiTest, Status) {
  store_.add(record(1));
  const json r = ask({{"cmd", "status"}});
  EXPECT_EQ(r["ok"], true);
  EXPECT_EQ(r["version"], "test-1");
  EXPECT_EQ(r["attach"][0], "sock tracepoints");
  EXPECT_GE(r["uptime_s"].get<double>(), 0.0);
  EXPECT_EQ(r["store"]["records"], 1);
  EXPECT_EQ(r["store"]["capacity"], 2000);
  EXPECT_EQ(r["socket"], path_);
}

TEST_F(ApiTest, StreamsShowStatsTop) {
  store_.add(record(1));
  store_.add(record(2, "qwen"));
  store_.add(record(3));
  ApiClient client(path_);  // several requests on one connection
  json r = client.request({{"cmd", "streams"}, {"limit", 2}});
  ASSERT_EQ(r["ok"], true) << r;
  ASSERT_EQ(r["streams"].size(), 2u);
  EXPECT_EQ(r["streams"][0]["stream_id"], "3-0");
  EXPECT_FALSE(r["streams"][0].contains("timeline"));
  EXPECT_EQ(client.request({{"cmd", "streams"}})["streams"].size(), 3u);

  r = client.request({{"cmd", "show"}, {"id", "2-0"}});
  ASSERT_EQ(r["ok"], true) << r;
  EXPECT_EQ(r["timeline_kept"], true);
  EXPECT_EQ(r["record"]["model"], "qwen");
  EXPECT_EQ(r["record"]["timeline"].size(), 8u);
  EXPECT_EQ(r["record"]["stalls"].size(), 1u);

  r = client.request({{"cmd", "show"}, {"id", "99-0"}});
  EXPECT_EQ(r["ok"], false);
  EXPECT_NE(r["error"].get<std::string>().find("99-0"), std::string::npos);
  EXPECT_EQ(client.request({{"cmd", "show"}})["ok"], false);

  r = client.request({{"cmd", "stats"}, {"by", "model"}});
  ASSERT_EQ(r["ok"], true) << r;
  ASSERT_EQ(r["groups"].size(), 2u);
  EXPECT_EQ(r["groups"][0]["key"], "demo-llama-8b");
  EXPECT_EQ(r["groups"][0]["streams"], 2);
  EXPECT_EQ(r["groups"][0]["stalls"], 2);
  EXPECT_EQ(client.request({{"cmd", "stats"}, {"by", "colour"}})["ok"], false);

  r = client.request({{"cmd", "top"}});
  EXPECT_EQ(r["ok"], true);
  EXPECT_DOUBLE_EQ(r["window_s"].get<double>(), 60.0);

  LiveStream l;
  l.id = "4-0";
  l.pid = 4242;
  l.comm = "sample-server";
  l.started_ns = base::monotonic_ns();
  store_.set_live({l});
  r = client.request({{"cmd", "streams"}, {"live", true}, {"limit", 50}});
  ASSERT_EQ(r["ok"], true);
  ASSERT_EQ(r["live"].size(), 1u);
  EXPECT_EQ(r["live"][0]["id"], "4-0");
}

TEST_F(ApiTest, MalformedRequestsFailButKeepTheConnection) {
  ApiClient client(path_);
  for (const char* bad : {"not json", "[1,2]", "{\"cmd\":42}", "{\"cmd\":\"launch\"}", "{\"cmd\":\"streams\",\"limit\":-1}"}) {
    client.send_line(bad);
    const auto line = client.read_line();
    ASSERT_TRUE(line) << bad;
    const json r = json::parse(*line);
    EXPECT_EQ(r["ok"], false) << bad;
    EXPECT_TRUE(r["error"].is_string());
  }
  EXPECT_EQ(client.request({{"cmd", "status"}})["ok"], true);
}

TEST_F(ApiTest, OversizedRequestIsRefused) {
  ApiClient client(path_);
  client.send_line(std::string(100 * 1024, 'x'));
  const auto line = client.read_line();
  ASSERT_TRUE(line);
  const json r = json::parse(*line);
  EXPECT_EQ(r["ok"], false);
  EXPECT_NE(r["error"].get<std::string>().find("too large"), std::string::npos);
  EXPECT_FALSE(client.read_line().has_value());  // closed
}

TEST_F(ApiTest, WatchReceivesRecordsAddedAfterSubscribing) {
  store_.add(record(1));  // before: not sent
  ApiClient watcher(path_);
  watcher.send_line(R"({"cmd":"watch"})");
  const auto ack = watcher.read_line();
  ASSERT_TRUE(ack);
  EXPECT_EQ(json::parse(*ack)["ok"], true);
  store_.add(record(2));
  store_.add(record(3));
  const auto first = watcher.read_line();
  const auto second = watcher.read_line();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(json::parse(*first)["stream_id"], "2-0");
  EXPECT_EQ(json::parse(*second)["stream_id"], "3-0");
  EXPECT_FALSE(json::parse(*first).contains("timeline"));
  EXPECT_EQ(store_.counters().subscribers, 1u);
}

TEST_F(ApiTest, WatcherLeavesWhenTheClientDisconnects) {
  {
    ApiClient watcher(path_);
    watcher.send_line(R"({"cmd":"watch","timeline":true})");
    ASSERT_TRUE(watcher.read_line());
    store_.add(record(5));
    const auto line = watcher.read_line();
    ASSERT_TRUE(line);
    EXPECT_EQ(json::parse(*line)["timeline"].size(), 8u);
    EXPECT_EQ(store_.counters().subscribers, 1u);
  }
  for (int i = 0; i < 100 && store_.counters().subscribers != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(store_.counters().subscribers, 0u);
}

TEST_F(ApiTest, StopEndsWatchersPromptly) {
  ApiClient watcher(path_);
  watcher.send_line(R"({"cmd":"watch"})");
  ASSERT_TRUE(watcher.read_line());
  const auto t0 = std::chrono::steady_clock::now();
  server_->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_FALSE(watcher.read_line().has_value());
  EXPECT_FALSE(std::filesystem::exists(path_));  // its socket removed
}

TEST_F(ApiTest, RefusesASecondServerAndReplacesAStaleSocket) {
  RecordStore other;
  ApiOptions o;
  o.socket_path = path_;
  ApiServer second(other, o);
  try {
    second.start();
    FAIL() << "second server started";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("already serving"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ask({{"cmd", "status"}})["ok"], true);  // the first one is untouched

  // A stale socket (nothing listening) is replaced.
  const std::string stale = dir_ + "/stale.sock";
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, stale.c_str(), stale.size());
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  close(fd);
  ApiOptions so;
  so.socket_path = stale;
  ApiServer third(other, so);
  EXPECT_NO_THROW(third.start());
  ApiClient client(stale);
  EXPECT_EQ(client.request({{"cmd", "status"}})["ok"], true);

  // A regular file is never replaced.
  const std::string file = dir_ + "/file.sock";
  std::ofstream(file) << "x";
  ApiOptions fo;
  fo.socket_path = file;
  ApiServer fourth(other, fo);
  EXPECT_THROW(fourth.start(), std::runtime_error);
  EXPECT_TRUE(std::filesystem::is_regular_file(file));
}

// Idle clients are closed so that max_clients silent connections cannot lock
// every CLI out; a client that keeps asking is served past the timeout.
// A server on a socket of its own, with the options a test sets.
class ApiIdle : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/infertap-api-idle-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    o.socket_path = dir_ + "/api.sock";
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  void start() {
    server_ = std::make_unique<ApiServer>(store_, o);
    server_->start();
  }

  ApiOptions o;
  std::string dir_;
  RecordStore store_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(ApiIdle, SilentAndTricklingClientsAreClosedActiveOnesServed) {
  o.first_request_timeout = std::chrono::milliseconds(300);
  o.idle_timeout = std::chrono::milliseconds(300);
  o.max_clients = 2;
  start();

  // Silent: connects, sends nothing, gets the error line then EOF.
  ApiClient silent(o.socket_path);
  const auto t0 = std::chrono::steady_clock::now();
  const auto line = silent.read_line();
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("idle for 300 ms"), std::string::npos) << *line;
  EXPECT_FALSE(silent.read_line().has_value());
  EXPECT_GE(waited, std::chrono::milliseconds(250));
  EXPECT_LT(waited, std::chrono::seconds(3));

  // Trickling: one byte every 100 ms never completes a line, and the timeout
  // counts from the start of the line, so it is closed all the same.
  ApiClient trickle(o.socket_path);
  for (int i = 0; i < 6; ++i) {
    ::send(trickle.fd(), "{", 1, MSG_NOSIGNAL);  // fails once closed: ignored, the answer is read below
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto partial = trickle.read_line();
  ASSERT_TRUE(partial.has_value());
  EXPECT_NE(partial->find("idle for"), std::string::npos) << *partial;

  // Active: requests every 100 ms for 1 s (well past the timeout) all answered.
  ApiClient active(o.socket_path);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(active.request({{"cmd", "status"}})["ok"], true) << "request " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Idle connections in every slot: a CLI is told the daemon is busy (not
// "send: Broken pipe"), and gets in once the silent ones are closed, which
// happens sooner for a connection that never sent a request than between
// the requests of one that did.
TEST_F(ApiIdle, BusyIsSaidAndSilentConnectionsMakeRoomSoon) {
  o.first_request_timeout = std::chrono::milliseconds(400);
  o.idle_timeout = std::chrono::seconds(30);
  o.max_clients = 4;
  start();

  ApiClient kept(o.socket_path);  // sent a request: held to idle_timeout, not to the first-request one
  ASSERT_EQ(kept.request({{"cmd", "status"}})["ok"], true);
  std::vector<std::unique_ptr<ApiClient>> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(std::make_unique<ApiClient>(o.socket_path));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));

  ApiClient refused(o.socket_path);
  const json busy = refused.request({{"cmd", "status"}});  // answered, not thrown
  EXPECT_EQ(busy["ok"], false) << busy.dump();
  EXPECT_EQ(busy.value("error", ""), "infertapd is busy: 4 connections; try again") << busy.dump();

  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // past the first-request timeout
  ApiClient later(o.socket_path);
  EXPECT_EQ(later.request({{"cmd", "status"}})["ok"], true) << "the silent connections still hold their slots";
  EXPECT_EQ(kept.request({{"cmd", "status"}})["ok"], true) << "a connection that had sent a request was closed";
}

TEST(ApiClientErrors, NotRunning) {
  try {
    ApiClient client("/tmp/infertap-api-no-such-dir/infertap.sock");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.kind, ApiErrorKind::not_running);
  }
}

TEST(ApiHandle, WithoutASocket) {
  RecordStore store;
  ApiServer server(store, ApiOptions{});
  EXPECT_EQ(json::parse(server.handle("{"))["ok"], false);
  EXPECT_EQ(json::parse(server.handle(R"({"cmd":"watch"})"))["ok"], false);
  EXPECT_EQ(json::parse(server.handle(R"({"cmd":"streams"})"))["streams"], json::array());
}

// "format":"svg": the record's picture (output/svg) instead of its JSON;
// a record whose timeline was released has nothing to draw.
TEST(ApiHandle, ShowDrawsTheRecordAsSvg) {
  RecordStore store;
  store.add(record(1));
  ApiServer server(store, ApiOptions{});
  const json drawn = json::parse(server.handle(R"({"cmd":"show","id":"1-0","format":"svg"})"));
  ASSERT_EQ(drawn["ok"], true) << drawn;
  EXPECT_FALSE(drawn.contains("record"));
  const std::string svg = drawn["svg"];
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<rect class=\"stall "), std::string::npos) << "the record's 320 ms stall is drawn";
  EXPECT_EQ(json::parse(server.handle(R"({"cmd":"show","id":"1-0","format":"json"})"))["record"]["stream_id"], "1-0");
  const json bad = json::parse(server.handle(R"({"cmd":"show","id":"1-0","format":"png"})"));
  EXPECT_EQ(bad["ok"], false);
  EXPECT_NE(bad["error"].get<std::string>().find("\"format\""), std::string::npos) << bad;

  StoreOptions no_timelines;
  no_timelines.max_record_timeline_bytes = 1;
  RecordStore bare(no_timelines);
  bare.add(record(2));
  ApiServer bare_server(bare, ApiOptions{});
  const json refused = json::parse(bare_server.handle(R"({"cmd":"show","id":"2-0","format":"svg"})"));
  EXPECT_EQ(refused["ok"], false);
  EXPECT_NE(refused["error"].get<std::string>().find("no timeline kept"), std::string::npos) << refused;
}

}  // namespace
}  // namespace infertap::daemon
