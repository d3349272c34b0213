// Real gateways for the path tests (issue 3): nginx and HAProxy run from the
// Debian packages as reverse proxies from a free listen port to an upstream
// (normally build/sample-server, on a port or, with upstream_unix, on a unix
// socket), in configurations that stream SSE and in
// configurations that real deployments run into and that hold events back.
// docs/gateways.md has what each configuration does, measured.
//
//   Nginx gw(NginxMode::defaults, server_port, scratch.file("nginx"));
//   ASSERT_TRUE(gw.ok()) << gw.error();
//   ... sample-client --port gw.port() ...
//   gw.stop();   // or let the destructor do it
//
// Each gateway runs in the foreground (no daemonising) as a child of the test,
// one worker process / thread, logs into its directory, and is SIGTERMed then
// SIGKILLed on stop(); the directory (config, logs) is left for the caller's
// ScratchDir to keep or remove.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

// Absolute path of a system binary, "" when it is not installed.
inline std::string find_system_binary(const std::string& name) {
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"}) {
    std::string p = std::string(dir) + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// True once a TCP connect to host:port succeeds (IPv4 literal host).
inline bool tcp_connects(const std::string& host, std::uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// Common to both gateways: the process, its directory, readiness, shutdown.
class Gateway {
 public:
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;
  virtual ~Gateway() { stop(); }

  bool ok() const { return error_.empty() && proc_.has_value(); }
  // Why it is not ok(): names what is missing and includes the gateway's log.
  const std::string& error() const { return error_; }
  // The port clients connect to (on listen_host()).
  std::uint16_t port() const { return port_; }
  const std::string& listen_host() const { return listen_host_; }
  // The pid the test started (nginx master / the haproxy process). Inside a
  // network namespace (argv_prefix "ip netns exec"), ip execs the gateway, so
  // this is still the gateway's pid.
  pid_t pid() const { return proc_ ? proc_->pid() : -1; }
  // The started pid and its children (nginx: master + worker, the worker is
  // the process that proxies; haproxy: one process, threads).
  std::vector<pid_t> pids() const {
    std::vector<pid_t> out;
    if (!proc_) return out;
    out.push_back(proc_->pid());
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces.
      const std::string st = read_file("/proc/" + name + "/stat");
      const std::size_t rp = st.rfind(')');
      if (rp == std::string::npos || rp + 4 >= st.size()) continue;
      if (std::atol(st.c_str() + rp + 4) == proc_->pid()) out.push_back(pid_t(std::atol(name.c_str())));
    }
    return out;
  }
  const std::string& dir() const { return dir_; }
  const std::string& config_path() const { return config_path_; }
  // Its stdout/stderr and error log, for failure messages.
  std::string log() const { return read_file(dir_ + "/output.log") + read_file(dir_ + "/error.log"); }
  bool running() { return proc_ && !proc_->wait(std::chrono::milliseconds(0)); }

  // SIGTERM (fast shutdown for both), SIGKILL after `grace`. True when it
  // exited. nginx's master takes its worker down before it exits; children
  // still there afterwards (master killed) are SIGKILLed by pid.
  bool stop(std::chrono::milliseconds grace = std::chrono::milliseconds(3000)) {
    if (!proc_) return true;
    std::vector<pid_t> kids = pids();
    auto st = proc_->stop(grace);
    for (std::size_t i = 1; i < kids.size(); ++i) ::kill(kids[i], SIGKILL);  // only if the master died first
    proc_.reset();
    return st.has_value();
  }

 protected:
  Gateway(std::string name, std::string dir, std::string listen_host, std::uint16_t port)
      : name_(std::move(name)), dir_(std::move(dir)), listen_host_(std::move(listen_host)), port_(port) {}

  // Write the config, start argv (with prefix), wait until the port accepts.
  void launch(const std::string& binary_name, const std::string& config_name, const std::string& config,
              const std::vector<std::string>& args_after_binary, const std::vector<std::string>& argv_prefix,
              const std::string& probe_host) {
    const std::string bin = find_system_binary(binary_name);
    if (bin.empty()) {
      error_ = binary_name + " not installed: run scripts/setup.sh (installs nginx and haproxy)";
      return;
    }
    std::error_code ec;
    std::filesystem::create_directories(dir_ + "/tmp", ec);
    if (ec) {
      error_ = "cannot create " + dir_ + ": " + ec.message();
      return;
    }
    config_path_ = dir_ + "/" + config_name;
    std::ofstream(config_path_) << config;
    std::vector<std::string> argv = argv_prefix;
    argv.push_back(bin);
    argv.insert(argv.end(), args_after_binary.begin(), args_after_binary.end());
    auto spawned = Process::spawn(argv, dir_ + "/output.log");
    if (!spawned) {
      error_ = "cannot spawn " + bin;
      return;
    }
    proc_.emplace(std::move(*spawned));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (true) {
      if (auto st = proc_->wait(std::chrono::milliseconds(0))) {
        error_ = name_ + " exited during start-up (status " + std::to_string(*st) + "); config " + config_path_ +
                 "; log:\n" + log();
        proc_.reset();
        return;
      }
      if (tcp_connects(probe_host, port_)) return;
      if (std::chrono::steady_clock::now() > deadline) {
        error_ = name_ + " did not accept on " + probe_host + ":" + std::to_string(port_) + " within 5 s; log:\n" +
                 log();
        stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::string name_, dir_, listen_host_;
  std::uint16_t port_;
  std::string config_path_;
  std::string error_;
  std::optional<Process> proc_;
};

// ---- nginx ----------------------------------------------------------------

enum class NginxMode {
  // The correct SSE setup: proxy_buffering off, HTTP/1.1 keep-alive upstream
  // (proxy_http_version 1.1, Connection ""). Forwards each event as it comes.
  streaming,
  // What a bare `proxy_pass` gives: proxy_http_version 1.0 (the upstream
  // answers close-delimited) and proxy_buffering on with the default 4 KB
  // buffers: events leave in ~4 KB bursts (16 events of 250 B), and at the end.
  defaults,
  // defaults + the common tuning `proxy_buffer_size 16k; proxy_buffers 8 16k`:
  // ~16 KB bursts (64 events of 250 B); a short stream arrives in one burst.
  large_buffers,
  // HTTP/1.1 keep-alive upstream, proxy_buffering on (default) and
  // `gzip on; gzip_types text/event-stream`: for a client that sends
  // Accept-Encoding: gzip the compressed stream is held until gzip's output
  // fills a buffer or the stream ends (sample streams compress ~70x: a whole
  // stream arrives at once). Clients without Accept-Encoding get it streamed.
  gzip,
  // Control, not buffering: proxy_buffering on (default) but HTTP/1.1 upstream
  // with chunked responses — nginx forwards each chunk at once. Shows that
  // `proxy_buffering on` alone does not hold a chunked stream back.
  buffering_chunked,
};

inline const char* to_string(NginxMode m) {
  switch (m) {
    case NginxMode::streaming: return "streaming";
    case NginxMode::defaults: return "defaults";
    case NginxMode::large_buffers: return "large_buffers";
    case NginxMode::gzip: return "gzip";
    case NginxMode::buffering_chunked: return "buffering_chunked";
  }
  return "?";
}

// Whether a mode holds events back (for the sample server's ~250 B events).
inline bool buffers_events(NginxMode m) {
  return m == NginxMode::defaults || m == NginxMode::large_buffers || m == NginxMode::gzip;
}

struct NginxOptions {
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 0;  // 0: free_port()
  std::string upstream_host = "127.0.0.1";
  std::string upstream_unix;       // non-empty: `proxy_pass http://unix:PATH:` to this unix socket, not a port
  int listen_sndbuf = 0;           // >0: `listen ... sndbuf=N` (downstream send buffer: gateway backpressure)
  std::string tls_cert, tls_key;   // both set: `listen ... ssl` with this certificate (TLS to clients)
  bool http2 = false;              // `listen ... http2`: HTTP/2 to clients (h2 by ALPN with TLS, else h2c
                                   // with prior knowledge); the upstream stays HTTP/1.1 or 1.0 as the mode says
  std::string extra_http;          // appended inside http {}
  std::string extra_location;      // appended inside location / {}
  std::vector<std::string> argv_prefix;  // e.g. NetnsPath::exec_prefix() to run it in a namespace
};

class Nginx : public Gateway {
 public:
  Nginx(NginxMode mode, std::uint16_t upstream_port, const std::string& dir, NginxOptions opt = {})
      : Gateway("nginx", dir, opt.listen_host, opt.listen_port ? opt.listen_port : free_port()), mode_(mode) {
    std::string loc;
    std::string http_extra;
    switch (mode) {
      case NginxMode::streaming:
        loc = "proxy_buffering off;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";";
        break;
      case NginxMode::defaults: break;
      case NginxMode::large_buffers: loc = "proxy_buffer_size 16k;\n      proxy_buffers 8 16k;"; break;
      case NginxMode::gzip:
        loc = "proxy_http_version 1.1;\n      proxy_set_header Connection \"\";";
        http_extra = "gzip on;\n  gzip_types text/event-stream;";
        break;
      case NginxMode::buffering_chunked:
        loc = "proxy_http_version 1.1;\n      proxy_set_header Connection \"\";";
        break;
    }
    const std::string d = dir;
    std::string listen = listen_host_ + ":" + std::to_string(port_);
    if (opt.listen_sndbuf > 0) listen += " sndbuf=" + std::to_string(opt.listen_sndbuf);
    std::string server_tls;
    if (!opt.tls_cert.empty()) {
      listen += " ssl";
      server_tls = "    ssl_certificate " + opt.tls_cert + ";\n    ssl_certificate_key " + opt.tls_key + ";\n";
    }
    if (opt.http2) listen += " http2";  // nginx 1.22 (Debian 12): a listen flag, not the later `http2 on;`
    config_ = "# infertap test gateway: nginx, mode " + std::string(to_string(mode)) +
              "\n"
              // root workers: they write temp files into the 0700 scratch directory
              "user root;\n"
              "worker_processes 1;\n"
              "error_log " + d + "/error.log info;\n"
              "pid " + d + "/nginx.pid;\n"
              "events { worker_connections 4096; }\n"
              "http {\n"
              "  access_log off;\n"
              "  client_body_temp_path " + d + "/tmp/body;\n"
              "  proxy_temp_path " + d + "/tmp/proxy;\n"
              "  fastcgi_temp_path " + d + "/tmp/fastcgi;\n"
              "  uwsgi_temp_path " + d + "/tmp/uwsgi;\n"
              "  scgi_temp_path " + d + "/tmp/scgi;\n"
              "  proxy_read_timeout 60s;\n"
              "  " + http_extra + "\n  " + opt.extra_http +
              "\n" +
              // a unix upstream the way a Python server is usually put behind nginx:
              // proxy_pass http://unix:PATH: (no upstream block, no upstream keep-alive)
              (opt.upstream_unix.empty() ? "  upstream backend {\n"
                                           "    server " + opt.upstream_host + ":" + std::to_string(upstream_port) +
                                               ";\n"
                                               "    keepalive 16;\n"
                                               "  }\n"
                                         : std::string()) +
              "  server {\n"
              "    listen " + listen +
              ";\n" + server_tls +
              "    location / {\n"
              "      proxy_pass http://" + (opt.upstream_unix.empty() ? std::string("backend") : "unix:" + opt.upstream_unix + ":") +
              ";\n"
              "      " + loc + "\n      " + opt.extra_location +
              "\n"
              "    }\n"
              "  }\n"
              "}\n";
    // -e: the error log before the config is read (else /var/log/nginx/error.log, may be missing).
    launch("nginx", "nginx.conf", config_,
           {"-p", d, "-e", d + "/error.log", "-c", d + "/nginx.conf", "-g", "daemon off; master_process on;"},
           opt.argv_prefix, listen_host_);
  }

  NginxMode mode() const { return mode_; }
  const std::string& config() const { return config_; }

 private:
  NginxMode mode_;
  std::string config_;
};

// ---- HAProxy --------------------------------------------------------------

enum class HAProxyMode {
  // `option http-no-delay`: each event is sent at once (no MSG_MORE).
  streaming,
  // A plain HTTP proxy config (no http-no-delay): HAProxy sends every event
  // on time, but with MSG_MORE, so the kernel holds the bytes (corked) until
  // a full segment or the ~200 ms probe timer: bursts of ~15 events on
  // loopback (MSS 64 KB); on an MTU-1500 path, less than a segment held.
  // The delay is in the gateway's socket, not in a late send syscall.
  defaults,
  // Response body inspection: `http-response wait-for-body time 10s
  // at-least 4k` (+ http-no-delay): the response, head included, is held
  // until 4 KB of body arrived (16 events) or the stream ended; then streams.
  wait_for_body,
};

inline const char* to_string(HAProxyMode m) {
  switch (m) {
    case HAProxyMode::streaming: return "streaming";
    case HAProxyMode::defaults: return "defaults";
    case HAProxyMode::wait_for_body: return "wait_for_body";
  }
  return "?";
}

inline bool buffers_events(HAProxyMode m) { return m != HAProxyMode::streaming; }

struct HAProxyOptions {
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 0;  // 0: free_port()
  std::string upstream_host = "127.0.0.1";
  std::string upstream_unix;         // non-empty: the server line names this unix socket, not a port
  int wait_for_body_bytes = 4096;    // wait_for_body: the at-least size
  std::string extra_backend;         // appended to the backend section
  std::string tls_pem;               // set: `bind ... ssl crt FILE` (certificate + key in one PEM, TLS to clients)
  std::vector<std::string> argv_prefix;
};

class HAProxy : public Gateway {
 public:
  HAProxy(HAProxyMode mode, std::uint16_t upstream_port, const std::string& dir, HAProxyOptions opt = {})
      : Gateway("haproxy", dir, opt.listen_host, opt.listen_port ? opt.listen_port : free_port()), mode_(mode) {
    std::string defaults_extra, backend_extra;
    switch (mode) {
      case HAProxyMode::streaming: defaults_extra = "  option http-no-delay\n"; break;
      case HAProxyMode::defaults: break;
      case HAProxyMode::wait_for_body:
        defaults_extra = "  option http-no-delay\n";
        backend_extra = "  http-response wait-for-body time 10s at-least " + std::to_string(opt.wait_for_body_bytes) +
                        "\n";
        break;
    }
    config_ = "# infertap test gateway: haproxy, mode " + std::string(to_string(mode)) +
              "\n"
              "global\n"
              "  maxconn 4096\n"
              "  nbthread 1\n"
              "  log stderr format short local0 warning\n"
              "defaults\n"
              "  mode http\n"
              "  log global\n"
              "  timeout connect 5s\n"
              "  timeout client 60s\n"
              "  timeout server 60s\n" +
              defaults_extra +
              "frontend fe\n"
              "  bind " + listen_host_ + ":" + std::to_string(port_) +
              (opt.tls_pem.empty() ? "" : " ssl crt " + opt.tls_pem) + "\n"
              "  default_backend be\n"
              "backend be\n" +
              backend_extra + opt.extra_backend + (opt.extra_backend.empty() ? "" : "\n") +
              "  server upstream " +
              (opt.upstream_unix.empty() ? opt.upstream_host + ":" + std::to_string(upstream_port) : opt.upstream_unix) +
              "\n";
    launch("haproxy", "haproxy.cfg", config_, {"-f", dir + "/haproxy.cfg", "-db"}, opt.argv_prefix, listen_host_);
  }

  HAProxyMode mode() const { return mode_; }
  const std::string& config() const { return config_; }

 private:
  HAProxyMode mode_;
  std::string config_;
};

}  // namespace infertap::testing
