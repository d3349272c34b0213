// A real Prometheus server (Debian package `prometheus`) for integration
// tests: it scrapes one target every second, optionally evaluates rule files
// every second and starts on history imported with promtool; its HTTP API is
// read over a plain loopback socket. Also the daemon and the sample server as
// the Prometheus tests start them.
//
//   PrometheusServer prom(metrics_port, {.rule_files = {rules}, .history = "history.om"});
//   ASSERT_TRUE(prom.process);
//   const nlohmann::json answer = prom.query("sum(rate(infertap_streams_total[1m]))");
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/process.h"

namespace infertap::testing {

// INFERTAP_PROMETHEUS overrides the binary; promtool is taken from beside it.
inline std::string prometheus_binary() {
  const char* env = std::getenv("INFERTAP_PROMETHEUS");
  return env && *env ? env : "/usr/bin/prometheus";
}
inline std::string promtool_binary() {
  return (std::filesystem::path(prometheus_binary()).parent_path() / "promtool").string();
}

// Status and body of a GET on 127.0.0.1 (plain socket, Connection: close); status 0 when unreachable.
inline std::pair<int, std::string> http_get(std::uint16_t port, const std::string& target) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return {0, ""};
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string raw;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[8192];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) raw.append(buf, static_cast<std::size_t>(n));
    }
  }
  close(fd);
  const auto head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) return {0, ""};
  std::string body = raw.substr(head_end + 4);
  // Prometheus answers small JSON with Content-Length, larger answers chunked.
  if (raw.substr(0, head_end).find("chunked") != std::string::npos) {
    std::string plain;
    std::size_t i = 0;
    while (i < body.size()) {
      const auto eol = body.find("\r\n", i);
      if (eol == std::string::npos) break;
      const std::size_t len = std::stoul(body.substr(i, eol - i), nullptr, 16);
      if (len == 0) break;
      plain += body.substr(eol + 2, len);
      i = eol + 2 + len + 2;
    }
    body = plain;
  }
  return {std::stoi(raw.substr(9, 3)), body};
}

inline std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// Runs `argv` to its end within `timeout`, its output into `log`: "" when it
// exited 0, else what went wrong with the output.
inline std::string run_to_end(const std::vector<std::string>& argv, const std::string& log,
                              std::chrono::seconds timeout = std::chrono::seconds(60)) {
  auto p = Process::spawn(argv, log);
  if (!p) return "cannot run " + argv[0];
  const auto st = p->wait(timeout);
  if (st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) return "";
  return argv[0] + " failed:\n" + read_file(log);
}

struct PrometheusOptions {
  std::vector<std::string> rule_files;  // evaluated every second
  // An OpenMetrics file imported with `promtool tsdb create-blocks-from
  // openmetrics` into the data directory before Prometheus starts: history
  // a fresh server does not have (yesterday's samples for `offset 1d`).
  std::string history;
};

// Prometheus scraping 127.0.0.1:`target_port` every second, its HTTP API on a free port.
struct PrometheusServer {
  ScratchDir dir{"infertap-prom"};
  std::uint16_t web_port = 0;
  std::string log;
  std::optional<Process> process;

  explicit PrometheusServer(std::uint16_t target_port, const PrometheusOptions& options = {}) {
    const std::string prometheus = prometheus_binary();
    if (access(prometheus.c_str(), X_OK) != 0) {
      ADD_FAILURE() << prometheus << " is missing: install the Debian package (apt-get install -y prometheus)";
      return;
    }
    if (!dir.ok()) {
      ADD_FAILURE() << "mkdtemp failed";
      return;
    }
    const std::string data = dir.file("data");
    if (!options.history.empty()) {
      const std::string problem = run_to_end(
          {promtool_binary(), "tsdb", "create-blocks-from", "openmetrics", options.history, data}, dir.file("backfill.log"));
      if (!problem.empty()) {
        ADD_FAILURE() << "backfill: " << problem;
        return;
      }
    }
    const std::string config = dir.file("prometheus.yml");
    std::ofstream out(config);
    out << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n";
    if (!options.rule_files.empty()) {
      out << "rule_files:\n";
      for (const std::string& f : options.rule_files) out << "  - '" << std::filesystem::absolute(f).string() << "'\n";
    }
    out << "scrape_configs:\n  - job_name: infertap\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << target_port << "']\n";
    out.close();
    web_port = free_port();
    log = dir.file("prometheus.log");
    auto spawned = Process::spawn({prometheus, "--config.file=" + config, "--storage.tsdb.path=" + data,
                                   "--web.listen-address=127.0.0.1:" + std::to_string(web_port)},
                                  log);
    if (spawned) {
      process.emplace(std::move(*spawned));
    } else {
      ADD_FAILURE() << "cannot spawn " << prometheus;
    }
  }
  ~PrometheusServer() {
    if (process) process->stop(std::chrono::milliseconds(5000));
  }

  // The parsed answer of GET `target` on the HTTP API; null when it did not answer JSON.
  nlohmann::json api(const std::string& target) const {
    const auto [status, body] = http_get(web_port, target);
    if (status == 0) return nullptr;
    return nlohmann::json::parse(body, nullptr, false);
  }
  // An instant query at the server's now: {"status": ..., "data": {"resultType", "result"}} or an error.
  nlohmann::json query(const std::string& expr) const { return api("/api/v1/query?query=" + url_encode(expr)); }

  // Polls GET `target` until Prometheus answers 200 (its rules loaded, its
  // TSDB open), at most `timeout`.
  bool ready(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (process->wait(std::chrono::milliseconds(0))) return false;
      if (http_get(web_port, "/-/ready").first == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // The value of `query` (an expression with one result), polled until it is
  // at least `at_least`, or 20 s; NaN when it never answered.
  double value(const std::string& query, double at_least, std::string* last_body) {
    const std::string target = "/api/v1/query?query=" + url_encode(query);
    const std::regex value_re(R"re("value":\[[0-9.e+]+,"([^"]+)"\])re");
    double got = NAN;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      const auto [status, body] = http_get(web_port, target);
      *last_body = body;
      std::smatch m;
      if (status == 200 && std::regex_search(body, m, value_re)) {
        got = std::stod(m[1]);
        if (got >= at_least) return got;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return got;
  }

  // le -> cumulative count of `query` (a _bucket selector), polled until
  // Prometheus has scraped samples with at least `min_count` in +Inf, or 20 s.
  std::map<double, double> buckets(const std::string& query, double min_count, std::string* last_body) {
    const std::string target = "/api/v1/query?query=" + url_encode(query);
    const std::regex sample_re(R"re("le":"([^"]+)"[^{}]*\},"value":\[[0-9.e+]+,"([^"]+)"\])re");
    std::map<double, double> out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (process->wait(std::chrono::milliseconds(0))) {
        ADD_FAILURE() << "prometheus exited; its log:\n" << read_file(log);
        return {};
      }
      const auto [status, body] = http_get(web_port, target);
      *last_body = body;
      if (status == 200 && body.find("\"status\":\"success\"") != std::string::npos) {
        out.clear();
        for (auto it = std::sregex_iterator(body.begin(), body.end(), sample_re); it != std::sregex_iterator(); ++it) {
          const std::string le = (*it)[1];
          out[le == "+Inf" ? INFINITY : std::stod(le)] = std::stod((*it)[2]);
        }
        if (!out.empty() && out[INFINITY] >= min_count) return out;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return out;
  }
};

// `promtool check metrics` on an exposition: "" when it passes, else its output.
inline std::string promtool_problems(const std::string& text, const ScratchDir& scratch) {
  const std::string in = scratch.file("scrape.txt"), out = scratch.file("promtool.out");
  std::ofstream(in) << text;
  auto promtool = Process::spawn({"/bin/sh", "-c", "exec " + promtool_binary() + " check metrics < " + in}, out);
  if (!promtool) return "cannot run promtool";
  const auto st = promtool->wait(std::chrono::seconds(30));
  if (st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) return "";
  return "promtool check metrics failed:\n" + read_file(out);
}

struct DaemonOptions {
  std::vector<std::string> extra;    // flags appended
  std::vector<std::string> wrapper;  // a command it runs under (setpriv with fewer capabilities)
  std::string output = "/dev/null";  // its records
};

// infertapd on `app_port` with its metrics on `metrics_port`, once it has attached.
inline std::optional<Process> start_metrics_daemon(const ScratchDir& scratch, std::uint16_t app_port,
                                                   std::uint16_t metrics_port, const DaemonOptions& options = {}) {
  std::vector<std::string> argv = options.wrapper;
  for (const std::string& a : {build_dir() + "/infertapd", std::string("--port"), std::to_string(app_port),
                               std::string("--socket"), std::string(), std::string("--metrics-listen"),
                               "127.0.0.1:" + std::to_string(metrics_port), std::string("--ready-file"),
                               scratch.file("ready"), std::string("-o"), options.output}) {
    argv.push_back(a);
  }
  argv.insert(argv.end(), options.extra.begin(), options.extra.end());
  auto daemon = Process::spawn(argv, scratch.file("daemon.log"));
  if (daemon && !wait_for_file(scratch.file("ready"), std::chrono::seconds(20))) {
    ADD_FAILURE() << "infertapd did not attach:\n" << read_file(scratch.file("daemon.log"));
    return std::nullopt;
  }
  return daemon;
}

// The sample server on `port`, once it listens.
inline std::optional<Process> start_sample_server(const ScratchDir& scratch, std::uint16_t port,
                                                  std::vector<std::string> extra) {
  std::vector<std::string> argv = {build_dir() + "/sample-server", "--port", std::to_string(port)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto server = Process::spawn(argv, scratch.file("server.out"));
  if (server && !wait_for_text(scratch.file("server.out"), "listening", std::chrono::seconds(5))) {
    ADD_FAILURE() << "sample-server did not start: " << read_file(scratch.file("server.out"));
  }
  return server;
}

}  // namespace infertap::testing
