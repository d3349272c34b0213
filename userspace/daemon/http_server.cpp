#include "daemon/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/host_port.h"
#include "daemon/http_request.h"
#include "output/prometheus/metrics.h"
#include "daemon/web_security.h"

namespace infertap::daemon {
namespace {

constexpr std::size_t kAcceptsPerRound = 64;
constexpr std::int64_t kLingerNs = 500'000'000;  // after the answer: read what the client still sends, then close
constexpr std::size_t kLingerBytes = 256 * 1024;
constexpr std::int64_t kAcceptPauseNs = 100'000'000;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t ns_of(std::chrono::milliseconds ms) { return static_cast<std::int64_t>(ms.count()) * 1'000'000; }

std::string where(const std::string& host, std::uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]:" : host + ":") + std::to_string(port);
}

std::string listen_error(int err) {
  std::string why = std::strerror(err);
  if (err == EADDRINUSE) why += ": another process listens there; pick another address or stop it";
  else if (err == EACCES) why += ": ports below 1024 need CAP_NET_BIND_SERVICE";
  else if (err == EADDRNOTAVAIL) why += ": no local interface has that address";
  return why;
}

// A non-blocking listening socket on host:port (SO_REUSEADDR, not
// SO_REUSEPORT: a second agent must not share the port and split the
// scrapes). Returns the fd, or -1 with *error set.
int listen_on(const std::string& host, std::uint16_t port, int backlog, std::uint16_t* bound, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int gai = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); gai != 0) {
    *error = "cannot listen on " + where(host, port) + ": cannot resolve host: " + gai_strerror(gai);
    return -1;
  }
  int fd = -1, err = 0;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    *error = "cannot listen on " + where(host, port) + ": " + listen_error(err);
    return -1;
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
}

struct Listener {
  int fd = -1;
  bool metrics = false;  // serves /metrics (and TLS, when configured)
  std::string host;
  std::uint16_t port = 0;
};

enum class Phase : std::uint8_t { handshake, head, rendering, writing, lingering };

struct Conn {
  std::uint64_t id = 0;
  int fd = -1;
  bool metrics = false;  // came in on the metrics address
  Phase phase = Phase::head;
  short wants = POLLIN;  // what the next step waits for
  std::int64_t accepted_ns = 0, deadline_ns = 0;
  std::string in;
  std::string out_head;
  std::shared_ptr<const std::string> out_body;
  std::size_t sent = 0;  // of out_head + out_body
  std::size_t lingered = 0;
  bool head_only = false;  // a HEAD request: the answer's head alone
  bool reserve = false;    // took a slot past max_connections: health answers only
  std::unique_ptr<TlsSession> tls;
  bool closed = false;
};

struct RenderJob {
  std::uint64_t conn = 0;
  std::string authorization;
};
struct RenderDone {
  std::uint64_t conn = 0;
  bool authorized = false;
  std::shared_ptr<const std::string> body;  // null on a failed rendering
  std::string failure;
};

// The render thread: checks credentials and renders /metrics, once for all
// the scrapes waiting when it starts; wakes the poll loop with the answers.
class Renderer {
 public:
  Renderer(HttpServer::RenderFn render, BasicAuth& auth, int wake_fd)
      : render_(std::move(render)), auth_(auth), wake_fd_(wake_fd), thread_([this] { run(); }) {}
  ~Renderer() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void submit(RenderJob job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }
  std::vector<RenderDone> take_done() {
    std::lock_guard lock(mu_);
    return std::exchange(done_, {});
  }
  std::uint64_t renders() const { return renders_.load(std::memory_order_relaxed); }

 private:
  void run();
  std::vector<RenderDone> serve(std::vector<RenderJob> jobs);

  HttpServer::RenderFn render_;
  BasicAuth& auth_;
  const int wake_fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RenderJob> jobs_;
  std::vector<RenderDone> done_;
  bool stop_ = false;
  std::atomic<std::uint64_t> renders_{0};
  std::thread thread_;
};

void Renderer::run() {
  for (;;) {
    std::vector<RenderJob> jobs;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      jobs.swap(jobs_);
    }
    std::vector<RenderDone> done = serve(std::move(jobs));
    {
      std::lock_guard lock(mu_);
      for (RenderDone& d : done) done_.push_back(std::move(d));
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof one);
  }
}

std::vector<RenderDone> Renderer::serve(std::vector<RenderJob> jobs) {
  std::vector<RenderDone> done;
  bool any = false;
  for (const RenderJob& job : jobs) {
    done.push_back({job.conn, auth_.check(job.authorization), nullptr, {}});
    any = any || done.back().authorized;
  }
  if (!any) return done;
  std::shared_ptr<const std::string> body;
  std::string failure;
  try {
    body = std::make_shared<const std::string>(render_ ? render_() : std::string());
  } catch (const std::exception& e) {
    failure = e.what();
  }
  renders_.fetch_add(1, std::memory_order_relaxed);
  for (RenderDone& d : done) {
    d.body = body;
    d.failure = failure;
  }
  return done;
}

}  // namespace

// ---- the poll loop ------------------------------------------------------------------

struct HttpServer::Impl {
  HttpOptions options;
  std::vector<Listener> listeners;
  std::unique_ptr<TlsServer> tls;
  std::unique_ptr<BasicAuth> auth;
  int wake_fd = -1;
  std::unique_ptr<Renderer> renderer;
  std::list<Conn> conns;
  std::uint64_t next_id = 1;
  std::int64_t accepts_paused_until_ns = 0;  // out of descriptors: listeners not polled until then
  std::atomic<bool> ready{false}, stopping{false};
  std::atomic<const Heartbeat*> heartbeat{nullptr};
  bool stopped = false;
  std::thread thread;
  mutable std::mutex counters_mu;
  HttpCounters counters;  // guarded by counters_mu (the loop writes, status reads)

  ~Impl() { shutdown(); }
  void shutdown();
  void run();
  void answer_health(Conn& c);
  void poll_once();
  void accept_from(const Listener& l, std::int64_t now);
  bool make_room(bool reserved = false);
  std::size_t reserve_slots() const { return std::max<std::size_t>(16, options.max_connections / 8); }
  void step(Conn& c, short revents, std::int64_t now);
  void read_head(Conn& c, std::int64_t now);
  void route(Conn& c, const RequestHead& head, std::int64_t now);
  void answer(Conn& c, int status, std::string body, std::string_view content_type = "text/plain; charset=utf-8",
              std::string_view extra = {});
  void start_writing(Conn& c, std::int64_t now);
  void answer_rendered(std::vector<RenderDone> done, std::int64_t now);
  void write_out(Conn& c, std::int64_t now);
  void linger(Conn& c);
  void expire(std::int64_t now);
  void close_conn(Conn& c);
  IoResult io_read(Conn& c, char* buf, std::size_t len);
  IoResult io_write(Conn& c, const char* buf, std::size_t len);
  void count(std::uint64_t HttpCounters::*field) {
    std::lock_guard lock(counters_mu);
    ++(counters.*field);
  }
};

void HttpServer::Impl::shutdown() {
  if (stopped) return;
  stopped = true;
  stopping.store(true);
  const std::uint64_t one = 1;
  if (wake_fd >= 0) [[maybe_unused]] ssize_t n = write(wake_fd, &one, sizeof one);
  if (thread.joinable()) thread.join();
  renderer.reset();
  for (Conn& c : conns) close_conn(c);
  conns.clear();
  for (Listener& l : listeners) {
    close(l.fd);
    l.fd = -1;  // the address stays known (port(), host())
  }
  if (wake_fd >= 0) close(wake_fd);
  wake_fd = -1;
}

void HttpServer::Impl::run() {
  // A TLS write to a client that hung up raises SIGPIPE in this thread: keep it pending here.
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);
  while (!stopping.load()) {
    poll_once();
    const timespec zero{};
    while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
    }
  }
}

void HttpServer::Impl::poll_once() {
  std::vector<pollfd> fds;
  std::vector<Conn*> polled;
  fds.reserve(listeners.size() + 1 + conns.size());
  fds.push_back({wake_fd, POLLIN, 0});
  const bool accepting = steady_ns() >= accepts_paused_until_ns;
  for (const Listener& l : listeners) fds.push_back({l.fd, static_cast<short>(accepting ? POLLIN : 0), 0});
  std::int64_t next_deadline = steady_ns() + (accepting ? 1'000'000'000 : kAcceptPauseNs);
  for (Conn& c : conns) {
    fds.push_back({c.fd, c.wants, 0});
    polled.push_back(&c);
    next_deadline = std::min(next_deadline, c.deadline_ns);
  }
  const std::int64_t wait_ms = std::max<std::int64_t>(0, (next_deadline - steady_ns()) / 1'000'000 + 1);
  if (poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) < 0 && errno != EINTR) return;
  const std::int64_t now = steady_ns();
  if (fds[0].revents & POLLIN) {
    std::uint64_t n = 0;
    [[maybe_unused]] const ssize_t r = read(wake_fd, &n, sizeof n);
    answer_rendered(renderer->take_done(), now);
  }
  for (std::size_t i = 0; i < polled.size(); ++i) {
    if (const short ev = fds[1 + listeners.size() + i].revents; ev != 0) step(*polled[i], ev, now);
  }
  std::erase_if(conns, [](const Conn& c) { return c.closed; });  // their slots are free for the accepts below
  for (std::size_t i = 0; i < listeners.size(); ++i) {
    if (fds[1 + i].revents & POLLIN) accept_from(listeners[i], now);
  }
  expire(steady_ns());
  std::erase_if(conns, [](const Conn& c) { return c.closed; });
  std::lock_guard lock(counters_mu);
  counters.connections = conns.size();
}

void HttpServer::Impl::accept_from(const Listener& l, std::int64_t now) {
  for (std::size_t i = 0; i < kAcceptsPerRound; ++i) {
    const int fd = accept4(l.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: the pending connection stays queued, and polling
      // the listener again at once would spin; look again a little later.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accepts_paused_until_ns = now + kAcceptPauseNs;
      }
      return;
    }
    // Past max_connections, a few slots more are kept for health probes: when
    // every slot holds a request being answered, a probe still gets in.
    const bool reserve = conns.size() >= options.max_connections && !make_room();
    if (reserve && conns.size() >= options.max_connections + reserve_slots() && !make_room(true)) {
      const std::string busy = response_head(503, "text/plain; charset=utf-8", 5) + "busy\n";
      [[maybe_unused]] const ssize_t n = send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      count(&HttpCounters::refused);
      continue;
    }
    Conn& c = conns.emplace_back();
    c.id = next_id++;
    c.fd = fd;
    c.metrics = l.metrics;
    c.accepted_ns = now;
    c.deadline_ns = now + ns_of(options.read_timeout);
    c.reserve = reserve;
    if (l.metrics && tls) {
      c.tls = tls->session(fd);
      c.phase = Phase::handshake;
      if (!c.tls) close_conn(c);
    }
  }
}

// Makes a slot: closes a connection whose answer is out (lingering), else the
// oldest one that has not sent its whole request yet; `reserved`: among
// those in the reserve slots only.
bool HttpServer::Impl::make_room(bool reserved) {
  Conn* victim = nullptr;
  for (const bool done_only : {true, false}) {
    for (Conn& c : conns) {
      if (c.closed || (reserved && !c.reserve)) continue;
      const bool done = c.phase == Phase::lingering;
      const bool unsent = c.phase == Phase::handshake || c.phase == Phase::head;
      if (!(done_only ? done : unsent)) continue;
      if (!victim || c.accepted_ns < victim->accepted_ns) victim = &c;
    }
    if (victim) break;
  }
  if (!victim) return false;
  if (victim->phase != Phase::lingering) count(&HttpCounters::evicted);
  close_conn(*victim);
  std::erase_if(conns, [](const Conn& c) { return c.closed; });
  return true;
}

void HttpServer::Impl::step(Conn& c, short revents, std::int64_t now) {
  if (c.closed) return;
  if (c.phase == Phase::handshake) {
    const IoResult r = c.tls->handshake();
    if (r.state == IoState::done) {
      c.phase = Phase::head;
      c.wants = POLLIN;
    } else if (r.state == IoState::want_read || r.state == IoState::want_write) {
      c.wants = r.state == IoState::want_read ? POLLIN : POLLOUT;
      return;
    } else {
      count(&HttpCounters::tls_failures);
      close_conn(c);
      return;
    }
  }
  if (c.phase == Phase::head) return read_head(c, now);
  if (c.phase == Phase::writing) return write_out(c, now);
  if (c.phase == Phase::lingering) return linger(c);
  if (c.phase == Phase::rendering && (revents & (POLLHUP | POLLERR))) close_conn(c);
}

void HttpServer::Impl::read_head(Conn& c, std::int64_t now) {
  char buf[4096];
  bool eof = false;  // a client may end its side once the request is sent
  for (;;) {
    const IoResult r = io_read(c, buf, sizeof buf);
    if (r.state == IoState::want_read || r.state == IoState::want_write) {
      c.wants = r.state == IoState::want_read ? POLLIN : POLLOUT;
      break;
    }
    if (r.state == IoState::failed) return close_conn(c);
    if (r.state == IoState::closed || r.bytes == 0) {
      eof = true;
      break;
    }
    c.in.append(buf, r.bytes);
    if (c.in.size() > options.max_header_bytes) break;
  }
  RequestHead head;
  switch (parse_request_head(c.in, options.max_header_bytes, &head)) {
    case HeadParse::incomplete:
      if (eof) close_conn(c);
      return;
    case HeadParse::too_large: count(&HttpCounters::rejected); return answer(c, 431, "request head too large\n");
    case HeadParse::malformed: count(&HttpCounters::rejected); return answer(c, 400, "not an HTTP/1.x request\n");
    case HeadParse::complete: break;
  }
  c.in.clear();
  route(c, head, now);
}

void HttpServer::Impl::route(Conn& c, const RequestHead& head, std::int64_t now) {
  c.deadline_ns = now + ns_of(options.write_timeout);
  if (head.method != "GET" && head.method != "HEAD") {
    count(&HttpCounters::rejected);
    return answer(c, 405, "only GET and HEAD are served\n", "text/plain; charset=utf-8", "Allow: GET, HEAD\r\n");
  }
  if (head.has_body) {
    count(&HttpCounters::rejected);
    return answer(c, 400, "request bodies are not accepted\n");
  }
  c.head_only = head.method == "HEAD";
  if (head.path == "/healthz") {
    answer_health(c);
  } else if (head.path == "/readyz") {
    ready.load() ? answer(c, 200, "ready\n") : answer(c, 503, "not ready\n");
  } else if (head.path == "/metrics" && c.metrics && c.reserve) {
    count(&HttpCounters::refused);
    answer(c, 503, "busy: every connection slot holds a scrape being answered\n");
  } else if (head.path == "/metrics" && c.metrics) {
    c.phase = Phase::rendering;
    c.wants = 0;
    renderer->submit({c.id, head.authorization});
  } else {
    count(&HttpCounters::rejected);
    answer(c, 404, "not found: /metrics, /healthz, /readyz\n");
  }
}

void HttpServer::Impl::answer(Conn& c, int status, std::string body, std::string_view content_type,
                              std::string_view extra) {
  c.out_head = response_head(status, content_type, body.size(), extra);
  c.out_body = c.head_only ? nullptr : std::make_shared<const std::string>(std::move(body));
  start_writing(c, steady_ns());
}

void HttpServer::Impl::start_writing(Conn& c, std::int64_t now) {
  c.sent = 0;
  c.phase = Phase::writing;
  c.wants = POLLOUT;
  count(&HttpCounters::requests);
  write_out(c, now);
}

void HttpServer::Impl::answer_rendered(std::vector<RenderDone> done, std::int64_t now) {
  for (RenderDone& d : done) {
    const auto it = std::find_if(conns.begin(), conns.end(), [&](const Conn& c) { return c.id == d.conn && !c.closed; });
    if (it == conns.end()) continue;  // gone (timed out, evicted, hung up)
    Conn& c = *it;
    if (!d.authorized) {
      count(&HttpCounters::unauthorized);
      answer(c, 401, "credentials needed\n", "text/plain; charset=utf-8",
             "WWW-Authenticate: Basic realm=\"infertap\", charset=\"UTF-8\"\r\n");
    } else if (!d.body) {
      answer(c, 500, d.failure + "\n");
    } else {
      count(&HttpCounters::scrapes);
      c.out_head = response_head(200, MetricsRegistry::kContentType, d.body->size());
      c.out_body = c.head_only ? nullptr : d.body;  // shared by every scrape of this rendering
      start_writing(c, now);
    }
  }
}

void HttpServer::Impl::write_out(Conn& c, std::int64_t now) {
  if (c.closed || c.phase != Phase::writing) return;
  const std::size_t body_size = c.out_body ? c.out_body->size() : 0;
  const std::size_t total = c.out_head.size() + body_size;
  while (c.sent < total) {
    const bool in_head = c.sent < c.out_head.size();
    const char* from = in_head ? c.out_head.data() + c.sent : c.out_body->data() + (c.sent - c.out_head.size());
    const std::size_t len = in_head ? c.out_head.size() - c.sent : total - c.sent;
    const IoResult r = io_write(c, from, len);
    if (r.state == IoState::want_read || r.state == IoState::want_write) {
      c.wants = r.state == IoState::want_read ? POLLIN : POLLOUT;
      return;
    }
    if (r.state != IoState::done) return close_conn(c);
    c.sent += r.bytes;
  }
  if (c.tls) c.tls->close_notify();
  ::shutdown(c.fd, SHUT_WR);
  c.phase = Phase::lingering;
  c.wants = POLLIN;
  c.deadline_ns = now + kLingerNs;
}

// The answer is out: what the client still sends is read and dropped until it
// closes (closing with unread bytes would reset the connection and could
// destroy the answer before the client read it).
void HttpServer::Impl::linger(Conn& c) {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0 || (c.lingered += static_cast<std::size_t>(n)) > kLingerBytes) return close_conn(c);
  }
}

void HttpServer::Impl::expire(std::int64_t now) {
  for (Conn& c : conns) {
    if (c.closed || c.deadline_ns > now) continue;
    if (c.phase == Phase::handshake) count(&HttpCounters::tls_failures);
    if (c.phase == Phase::head) {
      count(&HttpCounters::head_timeouts);
      if (!c.tls) {
        const std::string late = response_head(408, "text/plain; charset=utf-8", 0);
        [[maybe_unused]] const ssize_t n = send(c.fd, late.data(), late.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
    }
    if (c.phase == Phase::rendering || c.phase == Phase::writing) count(&HttpCounters::write_timeouts);
    close_conn(c);
  }
}

void HttpServer::Impl::close_conn(Conn& c) {
  if (c.closed) return;
  c.tls.reset();
  close(c.fd);
  c.fd = -1;
  c.closed = true;
}

IoResult HttpServer::Impl::io_read(Conn& c, char* buf, std::size_t len) {
  if (c.tls) return c.tls->read(buf, len);
  const ssize_t n = recv(c.fd, buf, len, MSG_DONTWAIT);
  if (n > 0) return {IoState::done, static_cast<std::size_t>(n)};
  if (n == 0) return {IoState::closed, 0};
  return {errno == EAGAIN || errno == EINTR ? IoState::want_read : IoState::failed, 0};
}

IoResult HttpServer::Impl::io_write(Conn& c, const char* buf, std::size_t len) {
  if (c.tls) return c.tls->write(buf, len);
  const ssize_t n = send(c.fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) return {IoState::done, static_cast<std::size_t>(n)};
  return {errno == EAGAIN || errno == EINTR ? IoState::want_write : IoState::failed, 0};
}

// ---- start and stop ---------------------------------------------------------------------

namespace {

// Binds `address` as a listener of `impl`; false with *error set.
bool add_listener(std::vector<Listener>& listeners, std::string_view address, bool metrics, int backlog,
                  std::string* error) {
  std::string host;
  std::uint16_t port = 0;
  if (!parse_listen_address(address, &host, &port, error)) return false;
  Listener l;
  l.metrics = metrics;
  l.host = host;
  l.fd = listen_on(host, port, backlog, &l.port, error);
  if (l.fd < 0) return false;
  listeners.push_back(std::move(l));
  return true;
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

HealthAnswer health_of(std::uint64_t last_beat_ns, std::uint64_t now_ns, std::chrono::nanoseconds stuck_after) {
  const auto silent = static_cast<std::int64_t>(now_ns - last_beat_ns);
  if (last_beat_ns == 0 || now_ns <= last_beat_ns || silent <= stuck_after.count()) return {200, "ok\n"};
  char body[160];
  std::snprintf(body, sizeof body, "stuck: the capture loop has not run for %.1f s (bound %.1f s)\n", silent / 1e9,
                static_cast<double>(stuck_after.count()) / 1e9);
  return {503, body};
}

void HttpServer::Impl::answer_health(Conn& c) {
  const Heartbeat* watched = heartbeat.load();
  HealthAnswer health = watched ? health_of(watched->last_ns(), base::monotonic_ns(), options.stuck_after)
                                : HealthAnswer{200, "ok\n"};
  answer(c, health.status, std::move(health.body));
}

HttpOptions http_options(const DaemonConfig& config) {
  HttpOptions o;
  o.listen = config.metrics.listen;
  o.health_listen = config.metrics.health_listen;
  o.max_connections = config.metrics.max_connections;
  o.read_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(config.metrics.read_timeout_s * 1000));
  o.write_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(config.metrics.write_timeout_s * 1000));
  o.max_header_bytes = config.metrics.max_header_bytes;
  o.web_config_file = config.metrics.web_config_file;
  return o;
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { stop(); }

std::unique_ptr<HttpServer> HttpServer::start(const HttpOptions& options, RenderFn metrics, std::string* error) {
  std::string why;
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->options.max_connections = std::max<std::size_t>(options.max_connections, 1);
  WebConfig web;
  if (!options.web_config_file.empty()) {
    auto loaded = load_web_config(options.web_config_file, &why);
    if (!loaded) {
      if (error) *error = why;
      return nullptr;
    }
    web = std::move(*loaded);
  }
  if (web.tls.enabled() && !(impl->tls = TlsServer::create(web.tls, &why))) {
    if (error) *error = options.web_config_file + ": " + why;
    return nullptr;
  }
  impl->auth = std::make_unique<BasicAuth>(std::move(web.users));
  if (!add_listener(impl->listeners, options.listen, true, options.backlog, &why) ||
      (!options.health_listen.empty() &&
       !add_listener(impl->listeners, options.health_listen, false, options.backlog, &why))) {
    if (error) *error = why;
    return nullptr;
  }
  impl->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0) {
    if (error) *error = std::string("eventfd: ") + std::strerror(errno);
    return nullptr;
  }
  impl->renderer = std::make_unique<Renderer>(std::move(metrics), *impl->auth, impl->wake_fd);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

std::unique_ptr<HttpServer> HttpServer::start(std::string_view address, RenderFn metrics, std::string* error) {
  HttpOptions options;
  options.listen = std::string(address);
  return start(options, std::move(metrics), error);
}

std::unique_ptr<HttpServer> HttpServer::start(std::string_view address, const MetricsRegistry& registry,
                                              std::string* error) {
  return start(address, [&registry] { return registry.render(); }, error);
}

std::unique_ptr<HttpServer> HttpServer::start(const HttpOptions& options, const MetricsRegistry& registry,
                                              std::string* error) {
  return start(options, [&registry] { return registry.render(); }, error);
}

std::uint16_t HttpServer::port() const { return impl_->listeners.empty() ? 0 : impl_->listeners.front().port; }
const std::string& HttpServer::host() const {
  static const std::string none;
  return impl_->listeners.empty() ? none : impl_->listeners.front().host;
}
std::uint16_t HttpServer::health_port() const { return impl_->listeners.size() > 1 ? impl_->listeners[1].port : 0; }
bool HttpServer::tls() const { return impl_->tls != nullptr; }
void HttpServer::set_ready(bool ready) { impl_->ready.store(ready); }
void HttpServer::watch(const Heartbeat* heartbeat) { impl_->heartbeat.store(heartbeat); }
bool HttpServer::ready() const { return impl_->ready.load(); }

HttpCounters HttpServer::counters() const {
  HttpCounters c;
  {
    std::lock_guard lock(impl_->counters_mu);
    c = impl_->counters;
  }
  if (impl_->renderer) c.renders = impl_->renderer->renders();
  return c;
}

void HttpServer::stop() { impl_->shutdown(); }

}  // namespace infertap::daemon
