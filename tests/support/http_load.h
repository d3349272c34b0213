// Hostile and busy clients of an HTTP endpoint on 127.0.0.1, for the tests
// of the agent's metrics endpoint: clients that trickle their request head,
// POSTs announcing a huge body they trickle, many concurrent scrapes, and a
// probe loop timing /healthz. Each runs on its own thread until stop();
// RAII: the destructor stops and joins.
//
//   HttpLoad load(port);
//   load.slow_heads(4); load.huge_posts(4); load.scrapes(200);
//   load.probe("/healthz", 50ms);
//   std::this_thread::sleep_for(5s);
//   load.stop();  load.probe_max_ms(); load.probe_failures(); load.scrapes_ok();
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace infertap::testing {

// A non-blocking socket connecting to 127.0.0.1:port; -1 on failure.
inline int connect_nonblocking(std::uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

// One GET with a deadline: the status (0 when it did not complete in time) and how long it took.
struct Timed {
  int status = 0;
  double ms = 0;
  std::string body;
};
inline Timed timed_get(std::uint16_t port, const std::string& path, std::chrono::milliseconds timeout,
                       const std::string& extra_headers = "") {
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + timeout;
  Timed out;
  const int fd = connect_nonblocking(port);
  if (fd < 0) return out;
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers + "Connection: close\r\n\r\n";
  std::string raw;
  std::size_t sent = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(sent < req.size() ? POLLOUT : POLLIN), 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (poll(&p, 1, static_cast<int>(std::max<long long>(1, left.count()))) <= 0) continue;
    if (sent < req.size()) {
      const ssize_t n = send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
      continue;
    }
    char buf[16384];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (n == 0 && raw.rfind("HTTP/1.", 0) == 0 && raw.size() > 12) out.status = std::stoi(raw.substr(9, 3));
      break;
    }
    raw.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (const auto head_end = raw.find("\r\n\r\n"); head_end != std::string::npos) out.body = raw.substr(head_end + 4);
  return out;
}

class HttpLoad {
 public:
  explicit HttpLoad(std::uint16_t port) : port_(port) {}
  ~HttpLoad() { stop(); }
  HttpLoad(const HttpLoad&) = delete;
  HttpLoad& operator=(const HttpLoad&) = delete;

  // `n` clients that send part of a GET head, then one more header byte every 200 ms, forever.
  void slow_heads(int n) { start_tricklers(n, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ", "a"); }
  // `n` POSTs announcing a 1 GB body, then one body byte every 200 ms.
  void huge_posts(int n) {
    start_tricklers(n, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n", "x");
  }
  // `n` scrapes of /metrics in flight at all times (one thread, poll-driven).
  void scrapes(int n) {
    threads_.emplace_back([this, n] { run_scrapes(n); });
  }
  // GET `path` every `every`, each timed (answers after `limit` count as failures).
  void probe(const std::string& path, std::chrono::milliseconds every, std::chrono::milliseconds limit) {
    threads_.emplace_back([this, path, every, limit] {
      while (!stop_.load()) {
        const Timed t = timed_get(port_, path, limit);
        {
          std::lock_guard lock(mu_);
          probe_ms_.push_back(t.status == 200 ? t.ms : -1);
        }
        std::this_thread::sleep_for(every);
      }
    });
  }
  void stop() {
    stop_.store(true);
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  std::size_t probes() const { std::lock_guard lock(mu_); return probe_ms_.size(); }
  std::size_t probe_failures() const {
    std::lock_guard lock(mu_);
    return static_cast<std::size_t>(std::count(probe_ms_.begin(), probe_ms_.end(), -1.0));
  }
  double probe_max_ms() const {
    std::lock_guard lock(mu_);
    return probe_ms_.empty() ? 0 : *std::max_element(probe_ms_.begin(), probe_ms_.end());
  }
  // Of the probes answered 200 in time.
  double probe_percentile_ms(double p) const {
    std::lock_guard lock(mu_);
    std::vector<double> v;
    std::copy_if(probe_ms_.begin(), probe_ms_.end(), std::back_inserter(v), [](double ms) { return ms >= 0; });
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<std::size_t>(p / 100 * static_cast<double>(v.size())))];
  }
  std::uint64_t scrapes_ok() const { return scrapes_ok_.load(); }
  std::uint64_t scrapes_failed() const { return scrapes_failed_.load(); }
  std::uint64_t tricklers_cut() const { return tricklers_cut_.load(); }  // slow clients the server closed

 private:
  void start_tricklers(int n, std::string head, std::string drip) {
    threads_.emplace_back([this, n, head = std::move(head), drip = std::move(drip)] {
      std::vector<int> fds;
      for (int i = 0; i < n; ++i) fds.push_back(connect_nonblocking(port_));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (int fd : fds) {
        if (fd >= 0) [[maybe_unused]] ssize_t w = send(fd, head.data(), head.size(), MSG_NOSIGNAL);
      }
      while (!stop_.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        for (int& fd : fds) {
          // A client the server closed connects again and starts over: the pressure stays.
          if (fd >= 0 && send(fd, drip.data(), drip.size(), MSG_NOSIGNAL) > 0) continue;
          if (fd >= 0) {
            close(fd);
            tricklers_cut_.fetch_add(1);
          }
          fd = connect_nonblocking(port_);
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          if (fd >= 0) [[maybe_unused]] ssize_t w = send(fd, head.data(), head.size(), MSG_NOSIGNAL);
        }
      }
      for (int fd : fds) {
        if (fd >= 0) close(fd);
      }
    });
  }

  struct Scrape {
    int fd = -1;
    std::size_t sent = 0;
    std::string in;
  };
  void run_scrapes(int n);

  const std::uint16_t port_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  std::vector<double> probe_ms_;  // -1: failed
  std::atomic<std::uint64_t> scrapes_ok_{0}, scrapes_failed_{0}, tricklers_cut_{0};
};

inline void HttpLoad::run_scrapes(int n) {
  static const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  std::vector<Scrape> s(static_cast<std::size_t>(n));
  const auto finish = [&](Scrape& c, bool ok) {
    if (c.fd >= 0) close(c.fd);
    (ok ? scrapes_ok_ : scrapes_failed_).fetch_add(1);
    c = Scrape{};
  };
  while (!stop_.load()) {
    std::vector<pollfd> fds;
    for (Scrape& c : s) {
      if (c.fd < 0) c.fd = connect_nonblocking(port_);
      fds.push_back({c.fd, static_cast<short>(c.sent < req.size() ? POLLOUT : POLLIN), 0});
    }
    if (poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (std::size_t i = 0; i < s.size(); ++i) {
      Scrape& c = s[i];
      if (fds[i].revents == 0 || c.fd < 0) continue;
      if (c.sent < req.size()) {
        const ssize_t w = send(c.fd, req.data() + c.sent, req.size() - c.sent, MSG_NOSIGNAL);
        if (w <= 0) finish(c, false);
        else c.sent += static_cast<std::size_t>(w);
        continue;
      }
      char buf[65536];
      const ssize_t r = recv(c.fd, buf, sizeof buf, 0);
      if (r > 0) {
        if (c.in.size() < 64) c.in.append(buf, static_cast<std::size_t>(std::min<ssize_t>(r, 64)));
        continue;
      }
      finish(c, r == 0 && c.in.rfind("HTTP/1.1 200", 0) == 0);
    }
  }
  for (Scrape& c : s) {
    if (c.fd >= 0) close(c.fd);
  }
}

}  // namespace infertap::testing
