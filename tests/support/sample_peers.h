// The project's ground-truth peers for path tests: build/sample-server and
// build/sample-client as RAII objects, and their NDJSON logs read back with
// the numbers the path tests assert on (per-event arrival, bursts, TTFT,
// time blocked in send).
//
//   SampleServer server(scratch.file("server"), {"--ttft-ms", "50", "--itl-ms", "10"});
//   ASSERT_TRUE(server.ok()) << server.error();
//   ClientRun c = run_sample_client(scratch.file("client"), server.port(), {"--tokens", "40"});
//   ASSERT_EQ(c.rc, 0) << c.output;
//   c.log.max_content_burst();  c.log.ttft_ms();
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/process.h"

namespace infertap::testing {

// ---- logs ---------------------------------------------------------------------

// sample-client --log: one stream (conn 0, req 0 unless asked otherwise).
struct ClientLog {
  struct Event {
    std::int64_t mono_ns = 0;  // right after the read that completed the event
    std::string kind;          // role, content, finish, done, usage, anthropic:...
    std::int64_t index = 0;
    bool content() const { return kind == "content" || kind == "anthropic:content_block_delta"; }
  };
  std::vector<Event> events;
  std::int64_t request_sent_ns = 0, first_content_ns = 0, last_event_ns = 0;
  std::int64_t reads = 0;
  bool ok = false;
  std::string error;
  std::optional<std::pair<std::int64_t, std::int64_t>> stall;  // --stall-after: [start, end] ns

  static ClientLog parse(const std::string& path, std::int64_t conn = 0, std::int64_t req = 0) {
    ClientLog log;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || j.value("conn", -1) != conn || j.value("req", -1) != req) continue;
      const std::string type = j.value("type", "");
      if (type == "event") {
        log.events.push_back({j.value("mono_ns", std::int64_t(0)), j.value("kind", ""), j.value("event_index", 0)});
      } else if (type == "read") {
        ++log.reads;
      } else if (type == "summary") {
        log.request_sent_ns = j.value("request_sent_ns", std::int64_t(0));
        log.first_content_ns = j.value("first_content_ns", std::int64_t(0));
        log.last_event_ns = j.value("last_event_ns", std::int64_t(0));
        log.ok = j.value("ok", false);
        log.error = j.value("error", "");
      } else if (type == "stall") {
        log.stall = std::make_pair(j.value("start_ns", std::int64_t(0)), j.value("end_ns", std::int64_t(0)));
      }
    }
    return log;
  }

  std::vector<std::int64_t> content_times() const {
    std::vector<std::int64_t> t;
    for (const auto& e : events)
      if (e.content()) t.push_back(e.mono_ns);
    return t;
  }
  std::size_t content_events() const { return content_times().size(); }
  // Client-observed TTFT: request sent -> first content event read.
  double ttft_ms() const { return first_content_ns ? double(first_content_ns - request_sent_ns) / 1e6 : -1; }
  double e2e_ms() const { return double(last_event_ns - request_sent_ns) / 1e6; }
  // Runs of content events that arrived within `within_ns` of the previous one.
  std::vector<std::size_t> content_bursts(std::int64_t within_ns = 1'000'000) const {
    auto t = content_times();
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (i == 0 || t[i] - t[i - 1] >= within_ns) out.push_back(0);
      ++out.back();
    }
    return out;
  }
  std::size_t max_content_burst(std::int64_t within_ns = 1'000'000) const {
    auto b = content_bursts(within_ns);
    return b.empty() ? 0 : *std::max_element(b.begin(), b.end());
  }
  // Largest gap between consecutive content events, ms.
  double max_content_gap_ms() const {
    auto t = content_times();
    std::int64_t g = 0;
    for (std::size_t i = 1; i < t.size(); ++i) g = std::max(g, t[i] - t[i - 1]);
    return double(g) / 1e6;
  }
  // Gap before content event i (0-based), ms.
  double content_gap_before_ms(std::size_t i) const {
    auto t = content_times();
    if (i == 0 || i >= t.size()) return -1;
    return double(t[i] - t[i - 1]) / 1e6;
  }
};

// sample-server --log: the send syscalls of one stream.
struct ServerLog {
  struct Send {
    std::int64_t mono_ns = 0;  // right after the syscall returned
    std::int64_t call_ns = 0;  // time inside the syscall (blocked on a full send buffer)
    std::int64_t bytes = 0;
    std::int64_t event_index = -1;
    std::string kind;
  };
  std::vector<Send> sends;
  std::int64_t request_ns = 0;  // the server read the last request byte

  static ServerLog parse(const std::string& path, std::int64_t conn = 0, std::int64_t req = 0) {
    ServerLog log;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || j.value("conn", -1) != conn || j.value("req", -1) != req) continue;
      const std::string type = j.value("type", "");
      if (type == "request") log.request_ns = j.value("mono_ns", std::int64_t(0));
      if (type != "send") continue;
      log.sends.push_back({j.value("mono_ns", std::int64_t(0)), j.value("call_ns", std::int64_t(0)),
                           j.value("bytes", std::int64_t(0)), j.value("event_index", std::int64_t(-1)),
                           j.value("kind", "")});
    }
    return log;
  }
  std::int64_t first_content_ns() const {
    for (const auto& s : sends)
      if (s.kind == "content" || s.kind == "anthropic:content_block_delta") return s.mono_ns;
    return 0;
  }
  double ttft_ms() const { return request_ns ? double(first_content_ns() - request_ns) / 1e6 : -1; }
  double span_ms() const { return sends.empty() ? 0 : double(sends.back().mono_ns - sends.front().mono_ns) / 1e6; }
  // Total / longest time the send syscalls spent blocked (> min_ns each).
  double blocked_ms(std::int64_t min_ns = 1'000'000) const {
    std::int64_t s = 0;
    for (const auto& x : sends)
      if (x.call_ns > min_ns) s += x.call_ns;
    return double(s) / 1e6;
  }
  double max_call_ms() const {
    std::int64_t m = 0;
    for (const auto& x : sends) m = std::max(m, x.call_ns);
    return double(m) / 1e6;
  }
};

// ---- processes -------------------------------------------------------------------

// build/sample-server on host:port (port 0 = ephemeral, read back from its
// "listening <port>" line), or on a unix socket ("--unix PATH" in the
// arguments: "listening unix:PATH"). Logs to DIR/server.ndjson, output DIR/server.out.
class SampleServer {
 public:
  SampleServer(const std::string& dir, const std::vector<std::string>& extra_args, const std::string& host = "127.0.0.1",
               std::uint16_t port = 0, const std::vector<std::string>& argv_prefix = {})
      : dir_(dir), host_(host) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    const std::string bin = build_dir() + "/sample-server";
    if (access(bin.c_str(), X_OK) != 0) {
      error_ = bin + " missing: run make";
      return;
    }
    std::vector<std::string> argv = argv_prefix;
    for (const std::string& a : {bin, std::string("--host"), host, std::string("--port"), std::to_string(port),
                                 std::string("--log"), log_path()})
      argv.push_back(a);
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    auto spawned = Process::spawn(argv, dir_ + "/server.out");
    if (!spawned) {
      error_ = "cannot spawn " + bin;
      return;
    }
    proc_.emplace(std::move(*spawned));
    for (int i = 0; i < 250; ++i) {
      const std::string out = read_file(dir_ + "/server.out");
      if (auto p = out.find("listening "); p != std::string::npos && out.find('\n', p) != std::string::npos) {
        const std::string where = out.substr(p + 10, out.find('\n', p) - p - 10);
        if (where.rfind("unix:", 0) == 0) unix_path_ = where.substr(5);
        else port_ = std::uint16_t(std::atoi(where.c_str()));
        return;
      }
      if (proc_->wait(std::chrono::milliseconds(0))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    error_ = "sample-server did not start: " + read_file(dir_ + "/server.out");
    proc_.reset();
  }
  ~SampleServer() { stop(); }
  SampleServer(const SampleServer&) = delete;
  SampleServer& operator=(const SampleServer&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  std::uint16_t port() const { return port_; }
  // With "--unix PATH" among the arguments: the path it listens on ("@name": abstract).
  const std::string& unix_path() const { return unix_path_; }
  const std::string& host() const { return host_; }
  pid_t pid() const { return proc_ ? proc_->pid() : -1; }
  std::string log_path() const { return dir_ + "/server.ndjson"; }
  // SIGTERM flushes the log; call before reading it.
  void stop() {
    if (proc_) proc_->stop(std::chrono::milliseconds(5000));
    proc_.reset();
  }
  ServerLog log(std::int64_t conn = 0, std::int64_t req = 0) {
    stop();
    return ServerLog::parse(log_path(), conn, req);
  }

 private:
  std::string dir_, host_;
  std::uint16_t port_ = 0;
  std::string unix_path_;
  std::string error_;
  std::optional<Process> proc_;
};

struct ClientRun {
  int rc = -1;          // exit status (0 ok), -1 did not finish in time
  std::string output;   // its stderr summary line
  std::string log_path;
  ClientLog log;        // conn 0, req 0
};

// Runs build/sample-client to completion against host:port; its log goes to
// DIR/client.ndjson. argv_prefix: e.g. NetnsPath::exec_prefix().
inline ClientRun run_sample_client(const std::string& dir, std::uint16_t port, const std::vector<std::string>& extra_args,
                                   const std::string& host = "127.0.0.1",
                                   const std::vector<std::string>& argv_prefix = {},
                                   std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
  ClientRun r;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  r.log_path = dir + "/client.ndjson";
  std::vector<std::string> argv = argv_prefix;
  for (const std::string& a : {build_dir() + "/sample-client", std::string("--host"), host, std::string("--port"),
                               std::to_string(port), std::string("--log"), r.log_path,
                               std::string("--timeout-ms"), std::to_string(timeout.count())})
    argv.push_back(a);
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  auto p = Process::spawn(argv, dir + "/client.out");
  if (!p) {
    r.output = "cannot spawn sample-client";
    return r;
  }
  auto st = p->wait(timeout + std::chrono::milliseconds(5000));
  r.output = read_file(dir + "/client.out");
  if (!st) {
    r.output += "\n(sample-client did not finish in time)";
    return r;
  }
  r.rc = WIFEXITED(*st) ? WEXITSTATUS(*st) : 128 + WTERMSIG(*st);
  r.log = ClientLog::parse(r.log_path);
  return r;
}

}  // namespace infertap::testing
