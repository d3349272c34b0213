// The agent's HTTP endpoint (docs/prometheus.md):
//   GET /metrics  Prometheus text format 0.0.4
//   GET /healthz  200 while the server runs and the capture loop it watches
//                 (watch()) beat within stuck_after; else 503 saying how long
//   GET /readyz   200 once set_ready(true), else 503
//
// It listens on all interfaces without credentials by default, as exporters
// do, so it is built to stay up under clients that misbehave. One thread
// runs a poll loop over every connection, non-blocking: it reads request
// heads (at most max_header_bytes, within read_timeout of the accept),
// answers /healthz and /readyz itself at once, and writes answers (within
// write_timeout). /metrics is rendered on a second thread, and scrapes that
// arrive while one is being rendered share the next rendering, so neither
// scrapes nor slow clients ever hold the health answers back. At most
// max_connections are open: a new connection makes room by closing the
// oldest one still sending its head. One request per connection (no
// keep-alive), no request bodies. Optional: a separate address for the
// health answers, HTTP basic authentication and TLS of /metrics
// (daemon/web_security.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/counter.h"
#include "daemon/config.h"

namespace infertap::output {
class MetricsRegistry;
}

namespace infertap::daemon {

using output::MetricsRegistry;

// "host:port", "[v6]:port" or ":port" (all IPv4 interfaces). Port 0 = ephemeral.
// Returns false and sets *error on a malformed address.
bool parse_listen_address(std::string_view address, std::string* host, std::uint16_t* port, std::string* error);

struct HttpOptions {
  std::string listen = "0.0.0.0:9464";  // /metrics, and /healthz /readyz unless health_listen
  std::string health_listen;            // "" = none of its own; else /healthz and /readyz only, plain HTTP
  std::size_t max_connections = 256;    // open at once, every address together
  std::chrono::milliseconds read_timeout{5000};    // accept -> whole request head (TLS handshake included)
  std::chrono::milliseconds write_timeout{10000};  // whole request head -> whole answer sent
  std::size_t max_header_bytes = 8192;  // request line and headers
  int backlog = 1024;                   // listen(2) queue (the kernel caps it at net.core.somaxconn)
  std::string web_config_file;          // "" = no TLS, no credentials (daemon/web_security.h)
  // /healthz answers 503 once the watched loop has not beaten for this long:
  // a capture thread stuck (an OOM spiral, a handler that never returns)
  // gets the pod restarted instead of reporting healthy.
  std::chrono::milliseconds stuck_after{10000};
};

// The capture loop's sign of life: the monotonic time of its last iteration.
// The loop beats; the endpoint's thread reads, without a lock.
class Heartbeat {
 public:
  void beat(std::uint64_t now_ns) { last_ns_.store(now_ns, std::memory_order_relaxed); }
  std::uint64_t last_ns() const { return last_ns_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> last_ns_{0};  // 0: not beating yet
};

struct HealthAnswer {
  int status = 200;
  std::string body;
};

// /healthz: 200 while the loop beat within `stuck_after` of now, or has not
// started (0: the capture is still opening, which /readyz tells); else 503
// with how long the loop has been silent.
HealthAnswer health_of(std::uint64_t last_beat_ns, std::uint64_t now_ns, std::chrono::nanoseconds stuck_after);

// metrics.* of a daemon configuration.
HttpOptions http_options(const DaemonConfig& config);

// What the endpoint counts, listed once (`infertap status`: counters.http.<name>, docs/cli.md).
#define INFERTAP_HTTP_COUNTERS(X)                                                                                     \
  X(requests, total, "requests answered, every path and status")                                                     \
  X(scrapes, total, "/metrics requests answered 200")                                                               \
  X(renders, total, "renderings of /metrics (scrapes that arrive together share one)")                              \
  X(head_timeouts, total, "connections closed for not sending a whole request head in time (metrics.read_timeout_s)") \
  X(write_timeouts, total, "connections closed for not taking their answer in time (metrics.write_timeout_s)")      \
  X(evicted, total, "connections still sending their head, closed to make room for a new connection")               \
  X(refused, total, "connections answered 503 at once: every slot held a request being answered")                   \
  X(rejected, total, "requests answered 4xx: head too large or malformed, a body, a method or path not served")     \
  X(unauthorized, total, "/metrics requests without valid credentials (answered 401)")                              \
  X(tls_failures, total, "TLS handshakes that failed or did not finish in time")                                    \
  X(connections, level, "connections open now")

struct HttpCounters {
  INFERTAP_COUNTER_FIELDS(INFERTAP_HTTP_COUNTERS)
};

class HttpServer {
 public:
  using RenderFn = std::function<std::string()>;  // body of /metrics; called on the render thread

  // Binds every address, loads the web configuration and starts serving. On
  // failure returns nullptr and sets *error (e.g. "cannot listen on
  // 127.0.0.1:9464: Address already in use: another process listens there;
  // pick another address or stop it").
  static std::unique_ptr<HttpServer> start(const HttpOptions& options, RenderFn metrics, std::string* error);
  static std::unique_ptr<HttpServer> start(std::string_view address, RenderFn metrics, std::string* error);
  // Serves registry.render(); the registry must outlive the server.
  static std::unique_ptr<HttpServer> start(std::string_view address, const MetricsRegistry& registry,
                                           std::string* error);
  static std::unique_ptr<HttpServer> start(const HttpOptions& options, const MetricsRegistry& registry,
                                           std::string* error);

  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const;         // the bound port of `listen` (the real one when 0 was asked)
  const std::string& host() const;
  std::uint16_t health_port() const;  // of `health_listen`; 0 without one
  bool tls() const;                   // /metrics is served over TLS

  void set_ready(bool ready);
  bool ready() const;
  // /healthz follows this loop from now on (options.stuck_after); it must outlive the server.
  void watch(const Heartbeat* heartbeat);
  HttpCounters counters() const;

  // Stops listening, closes every connection and joins the threads. Idempotent.
  void stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace infertap::daemon
