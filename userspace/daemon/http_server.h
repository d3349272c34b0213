// The agent's HTTP endpoint (cpp-httplib, on its own thread):
//   GET /metrics  Prometheus text format 0.0.4
//   GET /healthz  200 while the server runs
//   GET /readyz   200 once set_ready(true), else 503
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

namespace httplib {
class Server;
}

namespace infertap::daemon {

class MetricsRegistry;

// "host:port", "[v6]:port" or ":port" (all IPv4 interfaces). Port 0 = ephemeral.
// Returns false and sets *error on a malformed address.
bool parse_listen_address(std::string_view address, std::string* host, std::uint16_t* port, std::string* error);

class HttpServer {
 public:
  using RenderFn = std::function<std::string()>;  // body of /metrics; called on the server thread

  // Binds `address` and starts serving on a thread of its own. On failure
  // returns nullptr and sets *error (e.g. "cannot listen on 127.0.0.1:9464:
  // Address already in use: another process listens there; pick another
  // address or stop it").
  static std::unique_ptr<HttpServer> start(std::string_view address, RenderFn metrics, std::string* error);
  // Serves registry.render(); the registry must outlive the server.
  static std::unique_ptr<HttpServer> start(std::string_view address, const MetricsRegistry& registry,
                                           std::string* error);

  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const { return port_; }  // the bound port (the real one when 0 was asked)
  const std::string& host() const { return host_; }

  void set_ready(bool ready) { ready_.store(ready, std::memory_order_relaxed); }
  bool ready() const { return ready_.load(std::memory_order_relaxed); }

  // Stops listening and joins the thread. Idempotent.
  void stop();

 private:
  HttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  RenderFn render_;
  std::string host_;
  std::uint16_t port_ = 0;
  std::atomic<bool> ready_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<bool> loop_done_{false};
};

}  // namespace infertap::daemon
