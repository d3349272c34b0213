// Debian's libcpp-httplib is built with these; httplib::Request's layout
// depends on CPPHTTPLIB_OPENSSL_SUPPORT, so this file must agree with the
// library (see cpp-httplib.pc) or handlers would read a shifted struct.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>

#include "daemon/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/host_port.h"
#include "daemon/metrics.h"

namespace infertap::daemon {

namespace {

// SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let
// a second agent bind the same port silently and split the scrapes.
void socket_options(socket_t sock) {
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

// Why binding host:port fails, from a probe socket with the same options.
std::string bind_failure(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int gai = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (gai != 0) return std::string("cannot resolve host: ") + gai_strerror(gai);
  std::string why = "bind failed";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    socket_options(fd);
    int err = 0;
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) err = errno;
    else if (listen(fd, 1) != 0) err = errno;
    close(fd);
    if (err == 0) {
      why = "bind failed (the address is free now: retry)";
      continue;
    }
    why = std::strerror(err);
    if (err == EADDRINUSE) why += ": another process listens there; pick another address or stop it";
    else if (err == EACCES) why += ": ports below 1024 need CAP_NET_BIND_SERVICE";
    else if (err == EADDRNOTAVAIL) why += ": no local interface has that address";
    break;
  }
  freeaddrinfo(res);
  return why;
}

}  // namespace

bool parse_listen_address(std::string_view address, std::string* host, std::uint16_t* port, std::string* error) {
  auto fail = [&](std::string_view why) {
    if (error) *error = "bad listen address \"" + std::string(address) + "\": " + std::string(why);
    return false;
  };
  std::string_view why;
  const auto split = base::split_host_port(address, &why);
  if (!split) return fail(why);
  *host = split->host.empty() ? "0.0.0.0" : std::string(split->host);
  *port = split->port;
  return true;
}

std::unique_ptr<HttpServer> HttpServer::start(std::string_view address, const MetricsRegistry& registry,
                                              std::string* error) {
  return start(address, [&registry] { return registry.render(); }, error);
}

std::unique_ptr<HttpServer> HttpServer::start(std::string_view address, RenderFn metrics, std::string* error) {
  std::string host;
  std::uint16_t port = 0;
  if (!parse_listen_address(address, &host, &port, error)) return nullptr;

  std::unique_ptr<HttpServer> self(new HttpServer());
  self->render_ = std::move(metrics);
  self->server_ = std::make_unique<httplib::Server>();
  httplib::Server& svr = *self->server_;
  // Few workers, and one request per connection: a kept-alive scrape
  // connection would pin a worker for the keep-alive timeout and delay the
  // kubelet's /healthz probe behind it. A handshake per scrape costs nothing.
  svr.new_task_queue = [] { return new httplib::ThreadPool(4); };
  svr.set_socket_options(socket_options);
  svr.set_keep_alive_max_count(1);
  svr.set_read_timeout(5);
  svr.set_write_timeout(5);
  svr.set_payload_max_length(64 * 1024);  // no endpoint takes a body

  HttpServer* raw = self.get();
  svr.Get("/metrics", [raw](const httplib::Request&, httplib::Response& res) {
    res.set_content(raw->render_ ? raw->render_() : std::string(), std::string(MetricsRegistry::kContentType));
  });
  svr.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  svr.Get("/readyz", [raw](const httplib::Request&, httplib::Response& res) {
    if (raw->ready()) {
      res.set_content("ready\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content("not ready\n", "text/plain");
    }
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(what + "\n", "text/plain");
  });

  const std::string where = host.find(':') != std::string::npos ? "[" + host + "]:" : host + ":";
  if (port == 0) {
    const int bound = svr.bind_to_any_port(host);
    if (bound <= 0) {
      if (error) *error = "cannot listen on " + where + "0: " + bind_failure(host, 0);
      return nullptr;
    }
    port = static_cast<std::uint16_t>(bound);
  } else if (!svr.bind_to_port(host, port)) {
    if (error) *error = "cannot listen on " + where + std::to_string(port) + ": " + bind_failure(host, port);
    return nullptr;
  }
  self->host_ = host;
  self->port_ = port;
  self->thread_ = std::thread([raw] {
    raw->server_->listen_after_bind();
    raw->loop_done_.store(true);
  });
  // Return once the accept loop runs (or failed to), so that /healthz answers.
  while (!svr.is_running() && !self->loop_done_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (self->loop_done_.load()) {
    if (error) *error = "HTTP server on " + where + std::to_string(port) + " stopped at once";
    self->stop();
    return nullptr;
  }
  return self;
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() {
  if (stopped_.exchange(true)) return;
  if (!thread_.joinable()) return;
  // httplib::Server::stop() acts only once the accept loop runs, and must be
  // called once: wait for either the loop to run or the thread to end.
  bool asked = false;
  while (!loop_done_.load()) {
    if (!asked && server_->is_running()) {
      server_->stop();
      asked = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  thread_.join();
}

}  // namespace infertap::daemon
