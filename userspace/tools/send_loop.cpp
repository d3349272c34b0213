// send-loop: write-syscall benchmark driver for measuring infertap overhead.
//
// socket mode: a loopback TCP pair inside one process. The accepted (server)
// socket is written N times; a reader thread drains the connecting (client)
// socket with read(). With --payload sse the client first sends an HTTP POST
// to an inference path and the server answers with a text/event-stream head,
// then every timed write is one `data: {...}\n\n` event of --size bytes, so an
// HTTP-following agent traces every write. With --payload binary the bytes are
// random (non-HTTP) and the agent should classify and mute the connection.
// unix mode: the same over a unix stream socket pair (socketpair(2)): the
// traffic of D-Bus, systemd, container runtimes with --payload binary, a
// server behind a local gateway with --payload sse.
// file mode: the same writes go to /dev/null (an untraced-fd baseline).
//
// Output: one JSON line on stdout.
//
// Build: g++ -std=c++20 -O2 -g -Wall -Wextra -pthread userspace/tools/send_loop.cpp -o send-loop

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "tool_common.h"

namespace it = infertap::tools;

namespace {

const char* kUsage = R"(usage: send-loop [options]
  --mode socket|unix|file  loopback TCP pair (default), unix stream socket pair, or /dev/null
  --payload sse|binary     SSE events after an HTTP exchange (default) or random non-HTTP bytes
  --size BYTES             bytes per timed write (default 256; sse minimum 16)
  --count N                timed writes (default 100000)
  --seconds S              run for S seconds instead of --count
  --warmup N               untimed writes before the timed loop (default 0)
  --sender write|send|writev|sendmsg  write syscall (default write; file mode: write|writev)
  --iovecs N               writev/sendmsg: each write split into N iovecs (default 1; at most 1024)
  --framing close|chunked  sse response framing; chunked puts chunk framing inside each write (default close)
  --path P                 request path of the sse preamble (default /v1/chat/completions)
  --no-nodelay             do not set TCP_NODELAY on the writing socket
Prints: {"mode":..,"payload":..,"size":..,"writes":N,"bytes":..,"seconds":..,"writes_per_sec":..,"ns_per_write":..}
)";

enum class Sender { write, send, writev, sendmsg };

std::string make_sse_event(std::size_t size, bool chunked) {
  // Chunk framing (size line + trailing CRLF) counts toward --size.
  std::size_t framing = 0;
  if (chunked) {
    for (std::size_t body = size; body > 0;) {
      // hex digits of body size: find a consistent body size
      std::size_t digits = 0;
      for (std::size_t v = body; v; v >>= 4) ++digits;
      if (body + digits + 4 == size) {
        framing = digits + 4;
        break;
      }
      --body;
    }
  }
  std::size_t body = size - framing;
  static const std::string kPrefix =
      "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"model\":\"bench\",\"choices\":"
      "[{\"index\":0,\"delta\":{\"content\":\"";
  static const std::string kSuffix = "\"},\"finish_reason\":null}]}\n\n";
  std::string ev;
  if (body >= kPrefix.size() + kSuffix.size() + 1) {
    ev = kPrefix + std::string(body - kPrefix.size() - kSuffix.size(), 'a') + kSuffix;
  } else {
    const std::string p = "data: {\"p\":\"", s = "\"}\n\n";
    ev = p + std::string(body > p.size() + s.size() ? body - p.size() - s.size() : 0, 'a') + s;
  }
  if (!chunked) return ev;
  char hdr[32];
  std::snprintf(hdr, sizeof hdr, "%zx\r\n", ev.size());
  return hdr + ev + "\r\n";
}

std::string make_binary(std::size_t size) {
  it::FastRng rng(it::seed_from_entropy());
  std::string s(size, '\0');
  for (auto& ch : s) ch = char(rng.next() & 0xff);
  if (!s.empty()) s[0] = char(0x80 | (s[0] & 0x7f));  // never an ASCII method/status start
  return s;
}

bool write_all(int fd, std::string_view d) {
  while (!d.empty()) {
    ssize_t n = ::write(fd, d.data(), d.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    d.remove_prefix(std::size_t(n));
  }
  return true;
}

// The bytes [p, p + left) as up to `count` iovecs of near-equal length (a
// gRPC library's scatter/gather send: one iovec per frame header, name, value).
std::size_t split_iovecs(const char* p, std::size_t left, std::size_t count, std::vector<iovec>& iov) {
  count = std::max<std::size_t>(1, std::min(count, left));
  iov.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t len = left / count + (i < left % count ? 1 : 0);
    iov[i] = {const_cast<char*>(p), len};
    p += len;
  }
  return count;
}

// One syscall per call (partial writes are completed with further calls).
inline bool do_write(int fd, Sender s, const std::string& payload, std::size_t iovecs) {
  static thread_local std::vector<iovec> iov;
  const char* p = payload.data();
  std::size_t left = payload.size();
  while (left > 0) {
    ssize_t n;
    switch (s) {
      case Sender::write: n = ::write(fd, p, left); break;
      case Sender::send: n = ::send(fd, p, left, MSG_NOSIGNAL); break;
      case Sender::writev: {
        const int parts = int(split_iovecs(p, left, iovecs, iov));  // before iov.data(): it may reallocate
        n = ::writev(fd, iov.data(), parts);
        break;
      }
      case Sender::sendmsg: {
        msghdr mh{};
        mh.msg_iovlen = split_iovecs(p, left, iovecs, iov);
        mh.msg_iov = iov.data();
        n = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
        break;
      }
      default: n = -1;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= std::size_t(n);
  }
  return true;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "send-loop: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  it::Args a(kUsage);
  for (const char* o : {"mode", "payload", "size", "count", "seconds", "warmup", "sender", "iovecs", "framing", "path"})
    a.option(o);
  a.flag("no-nodelay");
  if (!a.parse(argc, argv)) return 2;
  const std::string mode = a.choice("mode", "socket", {"socket", "unix", "file"});
  const std::string payload_kind = a.choice("payload", "sse", {"sse", "binary"});
  const std::string sender_s = a.choice("sender", "write", {"write", "send", "writev", "sendmsg"});
  const bool chunked = a.choice("framing", "close", {"close", "chunked"}) == "chunked";
  const std::string path = a.str("path", "/v1/chat/completions");
  std::int64_t size = a.integer("size", 256);
  const std::int64_t count = a.integer("count", 100000);
  const double seconds = a.number("seconds", 0);
  const std::int64_t warmup = a.integer("warmup", 0);
  const std::int64_t iovecs = a.integer("iovecs", 1);
  const bool nodelay = !a.has("no-nodelay");
  const bool sse = payload_kind == "sse";
  if (sse) size = std::max<std::int64_t>(size, chunked ? 24 : 16);
  if (size < 1 || count < 0 || iovecs < 1 || iovecs > 1024) {
    std::fprintf(stderr, "bad --size/--count/--iovecs\n%s", kUsage);
    return 2;
  }
  Sender sender = sender_s == "write"    ? Sender::write
                  : sender_s == "send"   ? Sender::send
                  : sender_s == "writev" ? Sender::writev
                                         : Sender::sendmsg;
  if (mode == "file" && (sender == Sender::send || sender == Sender::sendmsg)) {
    std::fprintf(stderr, "send-loop: --mode file needs --sender write|writev\n");
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);

  const std::string payload = sse ? make_sse_event(std::size_t(size), chunked) : make_binary(std::size_t(size));

  int wfd = -1, rfd = -1;
  std::thread reader;
  std::atomic<std::uint64_t> drained{0};
  if (mode == "file") {
    wfd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (wfd < 0) die("open /dev/null");
  } else if (mode == "unix") {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
    rfd = sv[0];
    wfd = sv[1];
  } else {
    int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(lfd, 1) != 0) die("bind/listen");
    socklen_t len = sizeof sa;
    getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len);
    rfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rfd < 0 || ::connect(rfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) die("connect");
    wfd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (wfd < 0) die("accept");
    ::close(lfd);
    if (nodelay) {
      int one = 1;
      setsockopt(wfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      setsockopt(rfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  }
  if (mode != "file") {
    if (sse) {
      // Client sends an inference request; the server side reads it and answers
      // with an SSE response head before the timed event writes.
      std::string body = "{\"model\":\"bench\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
      std::string req = "POST " + path +
                        " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: "
                        "text/event-stream\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body;
      if (!write_all(rfd, req)) die("write request");
      std::string got;
      char buf[4096];
      while (got.size() < req.size()) {
        ssize_t n = ::read(wfd, buf, sizeof buf);
        if (n <= 0) die("read request");
        got.append(buf, std::size_t(n));
      }
      std::string head =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n";
      head += chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "Connection: close\r\n\r\n";
      if (!write_all(wfd, head)) die("write head");
    }
    reader = std::thread([rfd, &drained] {
      std::vector<char> buf(256 * 1024);
      for (;;) {
        ssize_t n = ::read(rfd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        drained.fetch_add(std::uint64_t(n), std::memory_order_relaxed);
      }
    });
  }

  for (std::int64_t i = 0; i < warmup; ++i)
    if (!do_write(wfd, sender, payload, std::size_t(iovecs))) die("write");

  std::int64_t writes = 0;
  const std::int64_t t0 = it::mono_ns();
  std::int64_t t1 = t0;
  if (seconds > 0) {
    const std::int64_t end = t0 + std::int64_t(seconds * 1e9);
    for (;;) {
      for (int k = 0; k < 64; ++k)
        if (!do_write(wfd, sender, payload, std::size_t(iovecs))) die("write");
      writes += 64;
      t1 = it::mono_ns();
      if (t1 >= end) break;
    }
  } else {
    for (std::int64_t i = 0; i < count; ++i)
      if (!do_write(wfd, sender, payload, std::size_t(iovecs))) die("write");
    writes = count;
    t1 = it::mono_ns();
  }

  double drain_s = 0;
  if (mode != "file") {
    if (sse) {
      std::string done = chunked ? "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n" : "data: [DONE]\n\n";
      write_all(wfd, done);
    }
    ::shutdown(wfd, SHUT_WR);
    reader.join();
    drain_s = double(it::mono_ns() - t1) / 1e9;
    ::close(rfd);
  }
  ::close(wfd);

  const double secs = double(t1 - t0) / 1e9;
  std::string out = "{\"mode\":\"" + mode + "\",\"payload\":\"" + payload_kind + "\",\"sender\":\"" + sender_s +
                    "\",\"size\":";
  it::append_int(out, payload.size());
  out += ",\"writes\":";
  it::append_int(out, writes);
  out += ",\"bytes\":";
  it::append_int(out, std::uint64_t(writes) * payload.size());
  out += ",\"seconds\":";
  it::append_double(out, secs, 6);
  out += ",\"writes_per_sec\":";
  it::append_double(out, secs > 0 ? double(writes) / secs : 0, 1);
  out += ",\"ns_per_write\":";
  it::append_double(out, writes > 0 ? double(t1 - t0) / double(writes) : 0, 1);
  if (mode != "file") {
    out += ",\"drained_bytes\":";
    it::append_int(out, drained.load());
    out += ",\"drain_seconds\":";
    it::append_double(out, drain_s, 6);
  }
  out += '}';
  std::puts(out.c_str());
  return 0;
}
