// Helpers for BPF integration tests: loopback sockets, clocks, event capture.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "capture/event.h"
#include "capture/loader.h"

namespace infertap::testutil {

inline std::uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

// Owned fd.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

inline std::uint16_t local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// A listening TCP socket on 127.0.0.1 (port 0 = any). rcvbuf > 0 sets
// SO_RCVBUF before listen (inherited by accepted sockets).
inline Fd tcp_listener(std::uint16_t port = 0, int rcvbuf = 0) {
  Fd l(::socket(AF_INET, SOCK_STREAM, 0));
  int one = 1;
  setsockopt(l.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (rcvbuf > 0) setsockopt(l.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return Fd();
  if (::listen(l.get(), 16) != 0) return Fd();
  return l;
}

struct TcpPair {
  Fd client;
  Fd server;  // accepted side
  std::uint16_t client_port = 0;
  std::uint16_t server_port = 0;
};

// Connected loopback TCP pair through listener l.
inline TcpPair tcp_connect(const Fd& l) {
  TcpPair p;
  p.server_port = local_port(l.get());
  p.client = Fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(p.server_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(p.client.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return TcpPair{};
  p.server = Fd(::accept(l.get(), nullptr, nullptr));
  p.client_port = local_port(p.client.get());
  int one = 1;
  setsockopt(p.client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(p.server.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return p;
}

inline TcpPair tcp_pair() {
  Fd l = tcp_listener();
  return tcp_connect(l);
}

// Reads exactly n bytes (blocking) with plain read(2).
inline bool read_exact(int fd, std::size_t n, std::string* out = nullptr) {
  std::string buf(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, buf.data() + got, n - got);
    if (r <= 0) return false;
    got += std::size_t(r);
  }
  if (out) *out = std::move(buf);
  return true;
}

// A decoded event, copied out of the ring.
struct Ev {
  itap_event h{};
  std::string head;
  std::string tail;
  std::string path;  // AF_UNIX first event: sun_path as the kernel keeps it
};

// Accumulates events from a Capture.
class Collector {
 public:
  explicit Collector(capture::Capture* cap) : cap_(cap) {}

  // Discards whatever is pending.
  void clear() {
    pump(0);
    events.clear();
    decode_errors = 0;
  }

  void pump(int timeout_ms) {
    cap_->poll(timeout_ms, [this](std::span<const std::uint8_t> rec) {
      auto d = capture::decode(rec);
      if (!d.event) {
        decode_errors++;
        return;
      }
      Ev e;
      std::memcpy(&e.h, rec.data(), sizeof e.h);  // the kernel record itself: these tests check the kernel side
      e.head.assign(reinterpret_cast<const char*>(d.event->head.data()), d.event->head.size());
      e.tail.assign(reinterpret_cast<const char*>(d.event->tail.data()), d.event->tail.size());
      e.path.assign(reinterpret_cast<const char*>(d.event->path.data()), d.event->path.size());
      events.push_back(std::move(e));
    });
  }

  // Pumps until pred(events) holds or timeout; returns pred's last value.
  bool wait_for(const std::function<bool(const std::vector<Ev>&)>& pred, int timeout_ms = 1000) {
    const std::uint64_t deadline = mono_ns() + std::uint64_t(timeout_ms) * 1000000ull;
    for (;;) {
      pump(5);
      if (pred(events)) return true;
      if (mono_ns() > deadline) return false;
    }
  }

  // Lets in-flight events arrive, without a condition.
  void settle(int ms = 30) {
    const std::uint64_t deadline = mono_ns() + std::uint64_t(ms) * 1000000ull;
    while (mono_ns() < deadline) pump(5);
  }

  std::vector<Ev> select(const std::function<bool(const Ev&)>& f) const {
    std::vector<Ev> out;
    for (const auto& e : events)
      if (f(e)) out.push_back(e);
    return out;
  }

  std::vector<Ev> events;
  int decode_errors = 0;

 private:
  capture::Capture* cap_;
};

}  // namespace infertap::testutil
