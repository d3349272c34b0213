// The fixture of the TLS tests (OpenSSL and Go): a scratch directory with an
// EC certificate for localhost and 127.0.0.1 made by `openssl req` (cert.pem,
// key.pem, both.pem for HAProxy), the tls_peer.py server and client, the
// agent's exit counters, and helpers to pick records.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/gateways.h"
#include "support/live_test.h"
#include "support/ndjson.h"
#include "support/process.h"
#include "support/records.h"
#include "support/test_certificate.h"

namespace infertap::testing {

inline constexpr const char* kTlsPeer = "tests/support/tls_peer.py";
inline constexpr const char* kPython = "/usr/bin/python3";

// Did a uprobe ever fire in the process? Its first hit maps the kernel's
// out-of-line area ("[uprobes]", or "[uprobes-trampoline]"), where return
// probes return through.
inline bool has_hit_a_uprobe(int pid) {
  return read_file("/proc/" + std::to_string(pid) + "/maps").find("[uprobes") != std::string::npos;
}

class TlsFixture : public LiveTest {
 protected:
  using json = nlohmann::json;
  explicit TlsFixture(std::string scratch_prefix) : LiveTest(std::move(scratch_prefix)) {}

  void SetUp() override {
    LiveTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(std::filesystem::exists(kTlsPeer)) << "run from the repository root (" << kTlsPeer << ")";
    // An EC certificate for localhost and 127.0.0.1; the PEM with both for HAProxy.
    ASSERT_EQ(make_localhost_certificate(path("key.pem"), path("cert.pem"), path("openssl.log")), "");
    std::ofstream(path("both.pem")) << read_file(path("cert.pem")) << read_file(path("key.pem"));
  }

  void TearDown() override {
    peers_.clear();  // killed before the scratch directory goes
    LiveTest::TearDown();
  }

  std::string cert() const { return path("cert.pem"); }
  std::string key() const { return path("key.pem"); }

  // The counters infertapd printed at exit (--stats): {"kernel": {...}, ...}.
  json agent_stats() const {
    const std::string log = read_file(path("agent.log"));
    const std::size_t at = log.rfind("stats {");
    if (at == std::string::npos) return json();
    const std::size_t end = log.find('\n', at);
    return json::parse(log.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6), nullptr, false);
  }
  std::uint64_t kernel_counter(const json& stats, const std::string& name) const {
    return stats.is_object() ? stats["kernel"].value(name, std::uint64_t(0)) : 0;
  }

  // tls_peer.py server on port_, logging to NAME.ndjson (at its exit), on
  // `cpu` SCHED_FIFO when given; "" when it is listening, else why not.
  std::string start_tls_server(const std::string& name, std::vector<std::string> extra, int cpu = -1) {
    std::vector<std::string> argv = {kPython, kTlsPeer, "server", "--port", std::to_string(port_),
                                     "--cert", cert(), "--key", key(), "--log", path(name + ".ndjson")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Process::spawn(on_cpu(cpu, argv), path(name + ".out"));
    if (!p) return "cannot spawn " + std::string(kPython);
    peers_[name].emplace(std::move(*p));
    if (!wait_for_text(path(name + ".out"), "listening", std::chrono::seconds(10)))
      return "tls_peer.py server did not start:\n" + read_file(path(name + ".out"));
    return "";
  }
  // SIGTERM writes its log; the log's lines.
  std::vector<json> stop_tls_server(const std::string& name) {
    if (peers_[name]) peers_[name]->stop(std::chrono::seconds(5));
    return read_ndjson(path(name + ".ndjson"));
  }

  std::vector<std::string> tls_client(const std::string& name, std::uint16_t port, std::vector<std::string> extra) {
    std::vector<std::string> argv = {kPython, kTlsPeer, "client", "--port", std::to_string(port), "--log",
                                     path(name + ".ndjson")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  // Pinned to a CPU and SCHED_FIFO, as the plaintext ground-truth runs: a
  // thread preempted between its call's return and its clock read would put
  // that delay in the log.
  static std::vector<std::string> on_cpu(int cpu, std::vector<std::string> argv) {
    if (cpu < 0) return argv;
    argv.insert(argv.begin(), {"/usr/bin/taskset", "-c", std::to_string(cpu), "/usr/bin/chrt", "-f", "50"});
    return argv;
  }

  static std::vector<json> where(const std::vector<json>& records, const std::string& key, const json& value) {
    std::vector<json> out;
    for (const auto& r : records)
      if (r.value(key, json()) == value) out.push_back(r);
    return out;
  }
  static std::vector<json> on_port(const std::vector<json>& records, int port) {
    std::vector<json> out;
    for (const auto& r : records)
      if (port_of(r["local"]) == port || port_of(r["remote"]) == port) out.push_back(r);
    return out;
  }

  std::map<std::string, std::optional<Process>> peers_;
};

}  // namespace infertap::testing

