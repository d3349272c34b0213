// The realtime (WebSocket) peers of the integration tests: the sample
// Realtime-style server tests/support/realtime/server.mjs (ws) and the official
// openai SDK's OpenAIRealtimeWS client tests/support/realtime/client.mjs as RAII
// objects, their logs read back, nginx and HAProxy set up to proxy WebSocket
// upgrades, and the tshark oracle (a dumpcap capture + tshark_ws.py).
//
//   RealtimeServer server(scratch.file("server"), {.tokens = 30, .interval_ms = 10});
//   ASSERT_TRUE(server.ok()) << server.error();
//   WebsocketNginx gw(server.port(), scratch.file("nginx"));          // optional
//   ASSERT_TRUE(gw.ok()) << gw.error();
//   RealtimeClientRun c = run_realtime_client(scratch.file("client"),
//                                             {.url = realtime_base_url(gw.port()), .responses = 2});
//   ASSERT_EQ(c.rc, 0) << c.output;
//   RealtimeServerLog s = server.log();      // stops the server: its log is complete
//   s.token_times("resp_0_0");  c.log.received_of_type("response.output_text.delta");
//
// The node packages come from tests/support/realtime/node_modules (npm ci by
// scripts/setup.sh); the beta client (--beta) also from node_modules_dir()
// (openai 4.104.0). Paths are relative to the repository root (run from there).
// realtime/server.mjs and realtime/client.mjs document every option and log line.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "support/gateways.h"
#include "support/node_modules.h"
#include "support/process.h"

namespace infertap::testing {

inline constexpr const char* kRealtimeDir = "tests/support/realtime";
inline constexpr const char* kRealtimeServerScript = "tests/support/realtime/server.mjs";
inline constexpr const char* kRealtimeClientScript = "tests/support/realtime/client.mjs";
inline constexpr const char* kTsharkWsScript = "tests/support/tshark_ws.py";

// The server messages that carry a response's output, one per token (server.mjs:
// with --audio, each audio delta is followed by its transcript delta, not counted).
inline bool is_output_delta(const std::string& type) {
  return type == "response.output_text.delta" || type == "response.text.delta" ||
         type == "response.output_audio.delta" || type == "response.audio.delta";
}

// "" when node and the pinned packages are there, else what is missing.
inline std::string realtime_peers_missing(bool beta = false) {
  if (find_system_binary("node").empty()) return "node not installed: run scripts/setup.sh (nodejs)";
  if (!std::filesystem::exists(kRealtimeServerScript)) return "run from the repository root (" + std::string(kRealtimeServerScript) + ")";
  for (const char* pkg : {"openai", "ws"})
    if (!std::filesystem::exists(std::string(kRealtimeDir) + "/node_modules/" + pkg + "/package.json"))
      return std::string(pkg) + " missing from " + kRealtimeDir + "/node_modules: run scripts/setup.sh (npm ci there)";
  if (beta && !std::filesystem::exists(node_modules_dir() + "/openai/beta/realtime/ws.js"))
    return "openai 4.x (beta realtime) missing from " + node_modules_dir() + ": run scripts/setup.sh";
  return "";
}

// The SDK's baseURL for a server or gateway on host:port: http://HOST:PORT/v1
// (tls: https://). The SDK connects to BASE/realtime?model=M.
inline std::string realtime_base_url(std::uint16_t port, bool tls = false, const std::string& host = "127.0.0.1") {
  return std::string(tls ? "https://" : "http://") + host + ":" + std::to_string(port) + "/v1";
}

// ---- logs ------------------------------------------------------------------------------

// server.mjs --log: one line per server message, ground truth.
struct RealtimeServerLog {
  struct Message {
    int conn = 0, seq = 0;
    std::string type, response_id;  // response_id "" for session messages
    int token = -1;                  // deltas: the token index in the response
    std::int64_t bytes = 0;          // JSON text length (uncompressed payload)
    std::int64_t buffered = 0;       // ws.bufferedAmount before the send
    std::int64_t t_ns = 0;           // CLOCK_MONOTONIC just before ws.send
    std::int64_t written_ns = -1;    // ws's send callback ran (handed to the kernel); -1 never
    bool output_delta() const { return is_output_delta(type); }
  };
  std::vector<Message> messages;

  static RealtimeServerLog parse(const std::string& path) {
    RealtimeServerLog log;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;
      Message m;
      m.conn = j.value("conn", 0);
      m.seq = j.value("seq", 0);
      m.type = j.value("type", "");
      if (j["response_id"].is_string()) m.response_id = j["response_id"].get<std::string>();
      m.token = j.value("token", -1);
      m.bytes = j.value("bytes", std::int64_t(0));
      m.buffered = j.value("buffered", std::int64_t(0));
      m.t_ns = j.value("t_ns", std::int64_t(0));
      if (j["written_ns"].is_number()) m.written_ns = j["written_ns"].get<std::int64_t>();
      log.messages.push_back(std::move(m));
    }
    // Lines are written when each send completes: in send order per connection,
    // but connections interleave. Sort by (conn, seq).
    std::sort(log.messages.begin(), log.messages.end(),
              [](const Message& a, const Message& b) { return std::tie(a.conn, a.seq) < std::tie(b.conn, b.seq); });
    return log;
  }

  std::vector<Message> of_conn(int conn) const {
    std::vector<Message> out;
    for (const auto& m : messages)
      if (m.conn == conn) out.push_back(m);
    return out;
  }
  std::vector<Message> of_type(const std::string& type, int conn = -1) const {
    std::vector<Message> out;
    for (const auto& m : messages)
      if (m.type == type && (conn < 0 || m.conn == conn)) out.push_back(m);
    return out;
  }
  // Response ids in the order their response.created was sent.
  std::vector<std::string> response_ids(int conn = -1) const {
    std::vector<std::string> out;
    for (const auto& m : of_type("response.created", conn)) out.push_back(m.response_id);
    return out;
  }
  // Every message of one response (response.created to response.done), in order.
  std::vector<Message> of_response(const std::string& response_id) const {
    std::vector<Message> out;
    for (const auto& m : messages)
      if (m.response_id == response_id) out.push_back(m);
    return out;
  }
  // The output deltas of one response (one per token), in order.
  std::vector<Message> output_deltas(const std::string& response_id) const {
    std::vector<Message> out;
    for (const auto& m : messages)
      if (m.response_id == response_id && m.output_delta()) out.push_back(m);
    return out;
  }
  std::vector<std::int64_t> token_times(const std::string& response_id) const {
    std::vector<std::int64_t> t;
    for (const auto& m : output_deltas(response_id)) t.push_back(m.t_ns);
    return t;
  }
  // Gap before token k (k >= 1) of a response, ms; -1 when there is no such token.
  double gap_before_token_ms(const std::string& response_id, std::size_t k) const {
    auto t = token_times(response_id);
    return k == 0 || k >= t.size() ? -1 : double(t[k] - t[k - 1]) / 1e6;
  }
  double max_token_gap_ms(const std::string& response_id) const {
    auto t = token_times(response_id);
    std::int64_t g = 0;
    for (std::size_t i = 1; i < t.size(); ++i) g = std::max(g, t[i] - t[i - 1]);
    return double(g) / 1e6;
  }
  // The longest time a message waited in Node before ws handed it to the
  // kernel (TCP backpressure: the peer stopped reading), ms.
  double max_write_delay_ms() const {
    std::int64_t d = 0;
    for (const auto& m : messages)
      if (m.written_ns >= 0) d = std::max(d, m.written_ns - m.t_ns);
    return double(d) / 1e6;
  }
  std::int64_t max_buffered() const {
    std::int64_t b = 0;
    for (const auto& m : messages) b = std::max(b, m.buffered);
    return b;
  }
};

// client.mjs --log: the messages received (with the SDK's parse), those sent,
// the pause of --stop-reading-after.
struct RealtimeClientLog {
  struct Received {
    int seq = 0;
    std::string type, response_id;
    std::int64_t t_ns = 0;
    nlohmann::json usage;  // response.done: response.usage as the SDK parsed it
    bool output_delta() const { return is_output_delta(type); }
  };
  struct Sent {
    std::string type;
    std::int64_t t_ns = 0;
  };
  std::vector<Received> received;
  std::vector<Sent> sent;
  std::int64_t pause_ns = 0, resume_ns = 0;  // 0: no pause

  static RealtimeClientLog parse(const std::string& path) {
    RealtimeClientLog log;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;
      const std::int64_t t = j.value("t_ns", std::int64_t(0));
      if (j.contains("type")) {
        Received r{j.value("seq", 0), j.value("type", ""), "", t, j.value("usage", nlohmann::json())};
        if (j["response_id"].is_string()) r.response_id = j["response_id"].get<std::string>();
        log.received.push_back(std::move(r));
      } else if (j.contains("sent")) {
        log.sent.push_back({j.value("sent", ""), t});
      } else if (j.value("marker", "") == "pause") {
        log.pause_ns = t;
      } else if (j.value("marker", "") == "resume") {
        log.resume_ns = t;
      }
    }
    return log;
  }

  std::vector<Received> received_of_type(const std::string& type) const {
    std::vector<Received> out;
    for (const auto& r : received)
      if (r.type == type) out.push_back(r);
    return out;
  }
  std::vector<Received> output_deltas(const std::string& response_id = "") const {
    std::vector<Received> out;
    for (const auto& r : received)
      if (r.output_delta() && (response_id.empty() || r.response_id == response_id)) out.push_back(r);
    return out;
  }
  // When each response.create was sent, in order (the start of a response's TTFT).
  std::vector<std::int64_t> response_create_times() const {
    std::vector<std::int64_t> out;
    for (const auto& s : sent)
      if (s.type == "response.create") out.push_back(s.t_ns);
    return out;
  }
};

// ---- the server ------------------------------------------------------------------------

struct RealtimeServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;           // 0: ephemeral, read back from its "PORT <n>" line
  std::string tls_cert, tls_key;    // both set: TLS (make_localhost_certificate, support/test_certificate.h)
  bool deflate = false;             // permessage-deflate accepted (threshold 0: every message compressed)
  bool context_takeover = true;     // false: server_ and client_no_context_takeover
  bool beta_names = false;          // response.text.delta, response.audio.delta, ...
  int tokens = 20;                  // output deltas per response (usage.output_tokens)
  int ttft_ms = -1;                 // response.created -> first delta; -1: interval_ms
  int interval_ms = 10;             // between deltas
  int stall_ms = 0, stall_at = -1, stall_response = 0;  // one extra pause of stall_ms before token stall_at
  std::string hold_file;            // set: each connection's first response waits before token hold_at until it exists
  int hold_at = -1;
  bool audio = false;               // audio deltas (+ transcript deltas) instead of text deltas
  int audio_bytes = 4800;           // PCM16 bytes per audio delta (4800 = 100 ms at 24 kHz)
  bool noise = false;               // rate_limits.updated / session.updated between deltas
  std::string model;                // default of session.model ("" = server.mjs's gpt-realtime)
  std::vector<std::string> extra_args;
  std::vector<std::string> argv_prefix;  // e.g. NetnsPath::exec_prefix()
};

inline std::vector<std::string> realtime_server_args(const RealtimeServerOptions& o) {
  std::vector<std::string> a = {"--host", o.host, "--port", std::to_string(o.port), "--deflate", o.deflate ? "on" : "off",
                                "--names", o.beta_names ? "beta" : "ga", "--tokens", std::to_string(o.tokens),
                                "--interval-ms", std::to_string(o.interval_ms)};
  if (o.ttft_ms >= 0) a.insert(a.end(), {"--ttft-ms", std::to_string(o.ttft_ms)});
  if (!o.tls_cert.empty()) a.insert(a.end(), {"--tls-cert", o.tls_cert, "--tls-key", o.tls_key});
  if (!o.context_takeover) a.push_back("--no-context-takeover");
  if (o.stall_ms > 0)
    a.insert(a.end(), {"--stall-ms", std::to_string(o.stall_ms), "--stall-at", std::to_string(o.stall_at),
                       "--stall-response", std::to_string(o.stall_response)});
  if (!o.hold_file.empty()) a.insert(a.end(), {"--hold-file", o.hold_file, "--hold-at", std::to_string(o.hold_at)});
  if (o.audio) a.insert(a.end(), {"--audio", "--audio-bytes", std::to_string(o.audio_bytes)});
  if (o.noise) a.push_back("--noise");
  if (!o.model.empty()) a.insert(a.end(), {"--model", o.model});
  a.insert(a.end(), o.extra_args.begin(), o.extra_args.end());
  return a;
}

// server.mjs, running until stop(); output in DIR/server.out, log DIR/server.ndjson.
class RealtimeServer {
 public:
  RealtimeServer(const std::string& dir, RealtimeServerOptions opt = {}) : dir_(dir), opt_(std::move(opt)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (error_ = realtime_peers_missing(); !error_.empty()) return;
    std::vector<std::string> argv = opt_.argv_prefix;
    argv.insert(argv.end(), {find_system_binary("node"), kRealtimeServerScript, "--log", log_path()});
    for (auto& a : realtime_server_args(opt_)) argv.push_back(a);
    auto spawned = Process::spawn(argv, output_path());
    if (!spawned) {
      error_ = "cannot spawn node";
      return;
    }
    proc_.emplace(std::move(*spawned));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string out = read_file(output_path());
      if (auto p = out.find("PORT "); p != std::string::npos && out.find('\n', p) != std::string::npos) {
        port_ = std::uint16_t(std::atoi(out.c_str() + p + 5));
        return;
      }
      if (proc_->wait(std::chrono::milliseconds(0))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    error_ = "server.mjs did not start: " + read_file(output_path());
    proc_.reset();
  }
  ~RealtimeServer() { stop(); }
  RealtimeServer(const RealtimeServer&) = delete;
  RealtimeServer& operator=(const RealtimeServer&) = delete;

  bool ok() const { return error_.empty() && port_ != 0; }
  const std::string& error() const { return error_; }
  std::uint16_t port() const { return port_; }
  const std::string& host() const { return opt_.host; }
  bool tls() const { return !opt_.tls_cert.empty(); }
  // The SDK's baseURL for a client talking to it directly.
  std::string base_url() const { return realtime_base_url(port_, tls(), opt_.host); }
  pid_t pid() const { return proc_ ? proc_->pid() : -1; }
  const RealtimeServerOptions& options() const { return opt_; }
  std::string log_path() const { return dir_ + "/server.ndjson"; }
  std::string output_path() const { return dir_ + "/server.out"; }
  std::string output() const { return read_file(output_path()); }
  // SIGTERM: lines of sends still pending are written (written_ns null), exit 0.
  void stop() {
    if (proc_) proc_->stop(std::chrono::milliseconds(5000));
    proc_.reset();
  }
  RealtimeServerLog log() {
    stop();
    return RealtimeServerLog::parse(log_path());
  }

 private:
  std::string dir_;
  RealtimeServerOptions opt_;
  std::uint16_t port_ = 0;
  std::string error_;
  std::optional<Process> proc_;
};

// ---- the client ------------------------------------------------------------------------

struct RealtimeClientOptions {
  std::string url;                  // the SDK's baseURL: realtime_base_url(port[, tls]) / server.base_url()
  int responses = 1;                // response.create, each after the previous response.done
  std::string model;                // "" = client.mjs's gpt-realtime
  bool deflate = true;              // ws offers permessage-deflate (used only if the server accepts it)
  std::string ca_cert;              // TLS: trusted through NODE_EXTRA_CA_CERTS
  bool beta = false;                // openai 4.104.0's openai/beta/realtime/ws (from node_modules_dir())
  int append = 0;                   // input_audio_buffer.append messages (100 ms each) before the first response
  int stop_reading_after = -1;      // pause reading after this many output deltas of the first response
  int pause_ms = 2000;              // ... for this long
  int timeout_ms = 30000;
  std::string tls_keylog;           // node --tls-keylog=FILE (for tshark_ws.py --keylog)
  std::vector<std::string> extra_args;
  std::vector<std::string> argv_prefix;  // e.g. NetnsPath::exec_prefix()
};

// The command line of client.mjs with its log in DIR/client.ndjson (for a test
// that spawns it itself, e.g. several at once); output: DIR/client.out.
inline std::vector<std::string> realtime_client_argv(const std::string& dir, const RealtimeClientOptions& o) {
  std::vector<std::string> argv = o.argv_prefix;
  argv.push_back("/usr/bin/env");
  if (!o.ca_cert.empty()) argv.push_back("NODE_EXTRA_CA_CERTS=" + o.ca_cert);
  if (o.beta) argv.push_back("INFERTAP_NODE_MODULES=" + node_modules_dir());
  argv.push_back(find_system_binary("node"));
  if (!o.tls_keylog.empty()) argv.push_back("--tls-keylog=" + o.tls_keylog);
  argv.insert(argv.end(), {kRealtimeClientScript, "--url", o.url, "--responses", std::to_string(o.responses), "--deflate",
                           o.deflate ? "on" : "off", "--log", dir + "/client.ndjson", "--timeout-ms",
                           std::to_string(o.timeout_ms)});
  if (!o.model.empty()) argv.insert(argv.end(), {"--model", o.model});
  if (o.beta) argv.push_back("--beta");
  if (o.append > 0) argv.insert(argv.end(), {"--append", std::to_string(o.append)});
  if (o.stop_reading_after >= 0)
    argv.insert(argv.end(), {"--stop-reading-after", std::to_string(o.stop_reading_after), "--pause-ms",
                             std::to_string(o.pause_ms)});
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  return argv;
}

struct RealtimeClientRun {
  int rc = -1;                 // exit status (0: every response.done and a clean close), -1: did not finish
  std::string output;          // its stdout (the summary line) and stderr
  nlohmann::json summary;      // the summary: {"ok","sdk","mode","url","local_port","responses","counts","extensions","close_code"}
  std::uint16_t local_port() const {
    return summary.is_object() && summary["local_port"].is_number() ? summary["local_port"].get<std::uint16_t>() : 0;
  }
  std::string log_path;
  RealtimeClientLog log;
};

// client.mjs in the background: start, then finish() (or run_realtime_client).
class RealtimeClient {
 public:
  RealtimeClient(const std::string& dir, RealtimeClientOptions opt) : dir_(dir), opt_(std::move(opt)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (error_ = realtime_peers_missing(opt_.beta); !error_.empty()) return;
    auto p = Process::spawn(realtime_client_argv(dir_, opt_), dir_ + "/client.out");
    if (!p) error_ = "cannot spawn node";
    else proc_.emplace(std::move(*p));
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  pid_t pid() const { return proc_ ? proc_->pid() : -1; }
  // Waits for it to exit (its own timeout + 5 s), reads its summary and log.
  RealtimeClientRun finish() {
    RealtimeClientRun r;
    r.log_path = dir_ + "/client.ndjson";
    if (!proc_) {
      r.output = error_;
      return r;
    }
    auto st = proc_->wait(std::chrono::milliseconds(opt_.timeout_ms + 5000));
    r.output = read_file(dir_ + "/client.out");
    if (!st) {
      proc_->stop(std::chrono::milliseconds(1000));
      r.output += "\n(client.mjs did not finish in time)";
    } else {
      r.rc = WIFEXITED(*st) ? WEXITSTATUS(*st) : 128 + WTERMSIG(*st);
    }
    proc_.reset();
    for (std::size_t at = 0; at < r.output.size();) {  // the summary: the line starting with {"ok"
      const std::size_t end = r.output.find('\n', at);
      const std::string line = r.output.substr(at, end == std::string::npos ? std::string::npos : end - at);
      if (line.rfind("{\"ok\"", 0) == 0) r.summary = nlohmann::json::parse(line, nullptr, false);
      if (end == std::string::npos) break;
      at = end + 1;
    }
    r.log = RealtimeClientLog::parse(r.log_path);
    return r;
  }

 private:
  std::string dir_;
  RealtimeClientOptions opt_;
  std::string error_;
  std::optional<Process> proc_;
};

// Runs client.mjs to completion.
inline RealtimeClientRun run_realtime_client(const std::string& dir, const RealtimeClientOptions& opt) {
  RealtimeClient c(dir, opt);
  return c.finish();
}

// ---- gateways ----------------------------------------------------------------------------

// nginx proxying WebSocket upgrades to an upstream (server.mjs): the standard
// setup, HTTP/1.1 upstream with the hop-by-hop Upgrade/Connection headers
// passed on, so nginx answers the client's Upgrade with the upstream's 101 and
// then relays bytes both ways (a tunnel: no buffering, frames untouched,
// permessage-deflate negotiated end to end). Any NginxOptions (TLS to clients,
// a network namespace, sndbuf, ...) apply as for Nginx.
class WebsocketNginx : public Nginx {
 public:
  WebsocketNginx(std::uint16_t upstream_port, const std::string& dir, NginxOptions opt = {})
      : Nginx(NginxMode::defaults, upstream_port, dir, with_websocket(std::move(opt))) {}

  static NginxOptions with_websocket(NginxOptions opt) {
    opt.extra_location =
        "proxy_http_version 1.1;\n"
        "      proxy_set_header Upgrade $http_upgrade;\n"
        "      proxy_set_header Connection \"upgrade\";\n"
        "      proxy_set_header Host $host;\n"
        "      proxy_read_timeout 1h;\n"
        "      proxy_send_timeout 1h;\n      " +
        opt.extra_location;
    return opt;
  }
};

// HAProxy in `mode http` proxying WebSocket upgrades: it sees the 101 and
// switches the connection to a tunnel, where `timeout tunnel` replaces the
// client/server timeouts; http-no-delay (HAProxyMode::streaming) so the
// tunnelled frames are not held with MSG_MORE. HAProxyOptions apply as for HAProxy.
class WebsocketHAProxy : public HAProxy {
 public:
  WebsocketHAProxy(std::uint16_t upstream_port, const std::string& dir, HAProxyOptions opt = {})
      : HAProxy(HAProxyMode::streaming, upstream_port, dir, with_websocket(std::move(opt))) {}

  static HAProxyOptions with_websocket(HAProxyOptions opt) {
    opt.extra_backend = "  timeout tunnel 1h" + (opt.extra_backend.empty() ? "" : "\n" + opt.extra_backend);
    return opt;
  }
};

// ---- the tshark oracle -------------------------------------------------------------------

// dumpcap capturing one TCP port on an interface (lo) into a pcapng file,
// until stop(). Start it before the connection: tshark_ws.py needs the SYN and
// the upgrade.
class WebsocketCapture {
 public:
  WebsocketCapture(const std::string& pcap, std::uint16_t port, const std::string& log,
                   const std::string& interface = "lo", const std::vector<std::string>& argv_prefix = {})
      : pcap_(pcap) {
    std::string bin = find_system_binary("dumpcap");
    if (bin.empty()) bin = find_system_binary("tshark");
    if (bin.empty()) {
      error_ = "dumpcap/tshark not installed: run scripts/setup.sh (tshark)";
      return;
    }
    std::vector<std::string> argv = argv_prefix;
    // -B 64: a 64 MB kernel buffer, so a burst of large frames is not dropped.
    argv.insert(argv.end(), {bin, "-n", "-i", interface, "-B", "64", "-f", "tcp port " + std::to_string(port), "-w", pcap});
    auto p = Process::spawn(argv, log);
    if (!p) {
      error_ = "cannot spawn " + bin;
      return;
    }
    proc_.emplace(std::move(*p));
    // dumpcap names its file once the capture is open ("File: ..."); tshark
    // prints "Capture started" at the same point (through dumpcap).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      const std::string out = read_file(log);
      if (out.find("File: ") != std::string::npos || out.find("Capture started") != std::string::npos) break;
      if (proc_->wait(std::chrono::milliseconds(0)) || std::chrono::steady_clock::now() > deadline) {
        error_ = bin + " did not start capturing:\n" + out;
        proc_.reset();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  ~WebsocketCapture() { stop(); }
  WebsocketCapture(const WebsocketCapture&) = delete;
  WebsocketCapture& operator=(const WebsocketCapture&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& pcap() const { return pcap_; }
  // SIGINT after a moment (the last packets reach the capture): the file is complete.
  void stop() {
    if (!proc_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    proc_->signal(SIGINT);
    if (!proc_->wait(std::chrono::seconds(10))) proc_->stop(std::chrono::milliseconds(1000));
    proc_.reset();
  }

 private:
  std::string pcap_, error_;
  std::optional<Process> proc_;
};

// tshark_ws.py on a capture: the JSON it printed (see the script for its
// fields; "errors" must be empty for the numbers to hold), or a JSON null with
// `error` set when it did not run. client_port 0: the first connection to port.
inline nlohmann::json dissect_websocket(const std::string& pcap, std::uint16_t port, std::string* error = nullptr,
                                       std::uint16_t client_port = 0, const std::string& keylog = "",
                                       bool frame_list = true) {
  std::vector<std::string> argv = {"/usr/bin/python3", kTsharkWsScript, "--pcap", pcap, "--port", std::to_string(port)};
  if (client_port) argv.insert(argv.end(), {"--client-port", std::to_string(client_port)});
  if (!keylog.empty()) argv.insert(argv.end(), {"--keylog", keylog});
  if (!frame_list) argv.push_back("--no-frame-list");
  const std::string out_path = pcap + ".tshark_ws.json", err_path = pcap + ".tshark_ws.err";
  std::string cmd;
  for (const auto& a : argv) cmd += "'" + a + "' ";
  cmd += "> '" + out_path + "' 2> '" + err_path + "'";
  const int rc = std::system(cmd.c_str());
  nlohmann::json j = nlohmann::json::parse(read_file(out_path), nullptr, false);
  if (rc != 0 || j.is_discarded()) {
    if (error) *error = "tshark_ws.py failed (" + std::to_string(rc) + "): " + read_file(err_path);
    return nlohmann::json();
  }
  if (error) error->clear();
  return j;
}

}  // namespace infertap::testing
