// BPF integration tests of the syscall capture (bpf/infertap.bpf.c + loader).
// Needs root (CAP_BPF+CAP_PERFMON), kernel BTF and tracefs or raw tracepoints:
// when any is missing the tests FAIL naming it; they never skip.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "protocol/websocket/test_encoder.h"
#include "test_util.h"

using infertap::capture::Capture;
using infertap::capture::CaptureConfig;
using namespace infertap::testutil;

namespace {

constexpr int kTcpClose = 7;
constexpr int kTcpFinWait1 = 4;

std::string comm_of_self() {
  char name[17] = {};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  return name;
}

std::string comm_of(const Ev& e) { return std::string(e.h.comm, strnlen(e.h.comm, ITAP_COMM_LEN)); }

CaptureConfig self_config() {
  CaptureConfig c;
  c.ignore_self = false;
  c.pids = {static_cast<std::uint32_t>(getpid())};
  c.ringbuf_bytes = 4u << 20;
  // The payloads below are sized against these caps (head, hole, tail).
  c.head_bytes = 512;
  c.tail_bytes = 128;
  return c;
}

bool is_data(const Ev& e, int fd, int dir) {
  return e.h.kind == ITAP_EV_DATA && e.h.pid == std::uint32_t(getpid()) && e.h.fd == fd && e.h.direction == dir;
}

const char kRequest[] = "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n";

class CaptureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string err;
    cap_ = Capture::open(self_config(), &err).release();
    if (!cap_) open_error_ = new std::string(err);
  }
  static void TearDownTestSuite() {
    delete cap_;
    cap_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(cap_, nullptr) << "cannot load the capture (needs root: CAP_BPF+CAP_PERFMON, kernel BTF, "
                                "tracefs or raw tracepoints): "
                             << (open_error_ ? *open_error_ : "");
    col_ = std::make_unique<Collector>(cap_);
    col_->clear();
  }

  // Client sends an HTTP request with write(2), server reads it with read(2):
  // both sockets get the FOLLOW verdict. Returns their sock ids.
  void follow(TcpPair& p, std::uint64_t* client_sock, std::uint64_t* server_sock) {
    ASSERT_GE(p.client.get(), 0);
    ASSERT_EQ(::write(p.client.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
    ASSERT_TRUE(read_exact(p.server.get(), sizeof(kRequest) - 1));
    const int cfd = p.client.get(), sfd = p.server.get();
    ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
      bool c = false, s = false;
      for (const auto& e : evs) {
        c |= is_data(e, cfd, ITAP_DIR_SEND);
        s |= is_data(e, sfd, ITAP_DIR_RECV);
      }
      return c && s;
    })) << "no events for the HTTP request on a fresh loopback connection";
    for (const auto& e : col_->events) {
      if (is_data(e, cfd, ITAP_DIR_SEND)) {
        EXPECT_TRUE(e.h.flags & ITAP_F_NEW_SOCKET);
        *client_sock = e.h.sock_id;
      }
      if (is_data(e, sfd, ITAP_DIR_RECV)) {
        EXPECT_TRUE(e.h.flags & ITAP_F_NEW_SOCKET);
        *server_sock = e.h.sock_id;
      }
    }
    ASSERT_NE(*client_sock, *server_sock);
    last_send_seq_ = 0;
    for (const auto& e : col_->events)
      if (e.h.sock_id == *client_sock) last_send_seq_ = e.h.seq_end;
    last_recv_seq_ = 0;
    for (const auto& e : col_->events)
      if (e.h.sock_id == *server_sock) last_recv_seq_ = e.h.seq_end;
    col_->events.clear();
  }

  // Waits for exactly one data event on (fd, dir) and returns it.
  Ev one_event(int fd, int dir) {
    col_->wait_for([&](const std::vector<Ev>& evs) {
      return std::any_of(evs.begin(), evs.end(), [&](const Ev& e) { return is_data(e, fd, dir); });
    });
    col_->settle(10);
    auto v = col_->select([&](const Ev& e) { return is_data(e, fd, dir); });
    EXPECT_EQ(v.size(), 1u) << "expected exactly one event on fd " << fd;
    col_->events.clear();
    return v.empty() ? Ev{} : v.front();
  }

  void check_common(const Ev& e, int fd, std::uint64_t sock, std::uint16_t lport, std::uint16_t rport,
                    std::uint64_t t0, std::uint64_t t1) {
    EXPECT_EQ(e.h.kind, ITAP_EV_DATA);
    EXPECT_EQ(e.h.pid, std::uint32_t(getpid()));
    EXPECT_EQ(e.h.tid, std::uint32_t(gettid()));
    EXPECT_EQ(e.h.fd, fd);
    EXPECT_EQ(e.h.sock_id, sock);
    EXPECT_EQ(e.h.family, AF_INET);
    EXPECT_EQ(e.h.local_port, lport);
    EXPECT_EQ(e.h.remote_port, rport);
    const std::uint8_t lo[4] = {127, 0, 0, 1};
    EXPECT_EQ(std::memcmp(e.h.local_addr, lo, 4), 0);
    EXPECT_EQ(std::memcmp(e.h.remote_addr, lo, 4), 0);
    EXPECT_GE(e.h.ts_ns, t0) << "event timestamp before the call";
    EXPECT_LE(e.h.ts_ns, t1) << "event timestamp after the call returned";
    EXPECT_GE(e.h.enter_ns, t0);
    EXPECT_LE(e.h.enter_ns, e.h.ts_ns);
    // Per-connection constants ride on a socket's first event only.
    if (e.h.flags & ITAP_F_NEW_SOCKET) {
      EXPECT_NE(e.h.cgroup_id, 0u);
      EXPECT_EQ(comm_of(e), comm_of_self());
    } else {
      EXPECT_EQ(e.h.cgroup_id, 0u);
      EXPECT_EQ(comm_of(e), "");
    }
    EXPECT_EQ(e.h.flags & ITAP_F_READ_FAILED, 0);
  }

  static Capture* cap_;
  static std::string* open_error_;
  std::unique_ptr<Collector> col_;
  std::uint32_t last_send_seq_ = 0;
  std::uint32_t last_recv_seq_ = 0;
};

Capture* CaptureTest::cap_ = nullptr;
std::string* CaptureTest::open_error_ = nullptr;

TEST(CaptureConfigTest, RejectsBadConfig) {
  std::string err;
  CaptureConfig c;
  c.head_bytes = ITAP_HEAD_MAX + 1;
  EXPECT_EQ(Capture::open(c, &err), nullptr);
  EXPECT_NE(err.find("head_bytes"), std::string::npos) << err;
  c = CaptureConfig{};
  c.tail_bytes = ITAP_TAIL_MAX * 2;
  EXPECT_EQ(Capture::open(c, &err), nullptr);
  EXPECT_NE(err.find("tail_bytes"), std::string::npos) << err;
  c = CaptureConfig{};
  c.ringbuf_bytes = 3 << 20;
  EXPECT_EQ(Capture::open(c, &err), nullptr);
  EXPECT_NE(err.find("power of two"), std::string::npos) << err;
}

TEST_F(CaptureTest, LoadNotesNameAttachMethod) {
  ASSERT_FALSE(cap_->notes().empty());
  bool attach = false;
  for (const auto& n : cap_->notes()) {
    attach |= n.what.find("attach") != std::string::npos;
    EXPECT_FALSE(n.why.empty());
  }
  EXPECT_TRUE(attach);
  // This kernel (>= 6.3, tracefs) must get the cheapest set by default.
  bool sock_set = false;
  for (const auto& n : cap_->notes()) sock_set |= n.what.find("sock_send_length") != std::string::npos;
  EXPECT_TRUE(sock_set) << "expected the socket tracepoint set (raw tracepoints sock_send_length, sock_recv_length); "
                           "the kernel lacks them or the BPF helper task_pt_regs";
}

TEST_F(CaptureTest, SendSyscallsEmitOneEventEach) {
  TcpPair p = tcp_pair();
  std::uint64_t cs = 0, ss = 0;
  follow(p, &cs, &ss);
  const int fd = p.client.get();
  std::uint32_t seq = last_send_seq_;

  struct Case {
    int sc;
    std::string payload;
  };
  const Case cases[] = {
      {ITAP_SC_WRITE, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"},
      {ITAP_SC_SENDTO, "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n"},
      {ITAP_SC_SENDMSG, "data: {\"choices\":[{\"delta\":{\"content\":\" world\"}}]}\n\n"},
      {ITAP_SC_WRITEV, "data: [DONE]\n\n"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("syscall " + std::to_string(c.sc));
    const std::string& s = c.payload;
    const std::size_t half = s.size() / 2;
    iovec iov[2] = {{const_cast<char*>(s.data()), half}, {const_cast<char*>(s.data()) + half, s.size() - half}};
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    const std::uint64_t t0 = mono_ns();
    ssize_t r = -1;
    switch (c.sc) {
      case ITAP_SC_WRITE: r = ::write(fd, s.data(), s.size()); break;
      case ITAP_SC_SENDTO: r = ::send(fd, s.data(), s.size(), 0); break;
      case ITAP_SC_SENDMSG: r = ::sendmsg(fd, &mh, 0); break;
      case ITAP_SC_WRITEV: r = ::writev(fd, iov, 2); break;
    }
    const std::uint64_t t1 = mono_ns();
    ASSERT_EQ(r, ssize_t(s.size()));
    ASSERT_TRUE(read_exact(p.server.get(), s.size()));

    Ev e = one_event(fd, ITAP_DIR_SEND);
    check_common(e, fd, cs, p.client_port, p.server_port, t0, t1);
    EXPECT_EQ(e.h.syscall, c.sc);
    EXPECT_EQ(e.h.ret, ssize_t(s.size()));
    EXPECT_EQ(e.h.requested, s.size());
    EXPECT_EQ(e.head, s);
    EXPECT_TRUE(e.tail.empty());
    EXPECT_EQ(e.h.flags, 0) << "no NEW_SOCKET/TRUNCATED/PARTIAL expected";
    EXPECT_EQ(e.h.seq_end - seq, s.size()) << "write_seq must advance by the bytes sent";
    seq = e.h.seq_end;
  }
}

TEST_F(CaptureTest, RecvSyscallsEmitOneEventEach) {
  TcpPair p = tcp_pair();
  std::uint64_t cs = 0, ss = 0;
  follow(p, &cs, &ss);
  const int fd = p.server.get();
  std::uint32_t seq = last_recv_seq_;

  const int scs[] = {ITAP_SC_READ, ITAP_SC_RECVFROM, ITAP_SC_RECVMSG, ITAP_SC_READV};
  int i = 0;
  for (int sc : scs) {
    SCOPED_TRACE("syscall " + std::to_string(sc));
    i++;
    const std::string s =
        "data: {\"id\":\"chatcmpl-" + std::to_string(i) + "\",\"x\":\"" + std::string(40 + i * 7, 'a') + "\"}\n\n";
    ASSERT_EQ(::write(p.client.get(), s.data(), s.size()), ssize_t(s.size()));
    // Let the bytes land, then read them in one call with a buffer of exactly
    // their size (split in two iovecs for the vector calls).
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::string buf(s.size(), '\0');
    const std::size_t half = s.size() / 3;
    iovec iov[2] = {{buf.data(), half}, {buf.data() + half, s.size() - half}};
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    const std::uint64_t t0 = mono_ns();
    ssize_t r = -1;
    switch (sc) {
      case ITAP_SC_READ: r = ::read(fd, buf.data(), buf.size()); break;
      case ITAP_SC_RECVFROM: r = ::recv(fd, buf.data(), buf.size(), 0); break;
      case ITAP_SC_RECVMSG: r = ::recvmsg(fd, &mh, 0); break;
      case ITAP_SC_READV: r = ::readv(fd, iov, 2); break;
    }
    const std::uint64_t t1 = mono_ns();
    ASSERT_EQ(r, ssize_t(s.size()));
    ASSERT_EQ(buf, s);

    col_->settle(5);
    auto sends = col_->select([&](const Ev& e) { return is_data(e, p.client.get(), ITAP_DIR_SEND); });
    ASSERT_EQ(sends.size(), 1u);
    Ev e = one_event(fd, ITAP_DIR_RECV);
    check_common(e, fd, ss, p.server_port, p.client_port, t0, t1);
    EXPECT_EQ(e.h.syscall, sc);
    EXPECT_EQ(e.h.ret, ssize_t(s.size()));
    EXPECT_EQ(e.h.requested, s.size());
    EXPECT_EQ(e.head, s);
    EXPECT_TRUE(e.tail.empty());
    EXPECT_EQ(e.h.flags, 0);
    EXPECT_EQ(e.h.seq_end - seq, s.size()) << "copied_seq must advance by the bytes read";
    seq = e.h.seq_end;
  }
}

TEST_F(CaptureTest, LargeWriteKeepsExactHeadAndTail) {
  TcpPair p = tcp_pair();
  std::string big = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n\r\n";
  for (int i = 0; big.size() < 10240; i++) big += char('a' + i % 26) + std::to_string(i) + ",";
  big.resize(10240);
  big[10239] = '}';
  const std::uint64_t t0 = mono_ns();
  ASSERT_EQ(::write(p.client.get(), big.data(), big.size()), ssize_t(big.size()));
  const std::uint64_t t1 = mono_ns();
  std::string got;
  ASSERT_TRUE(read_exact(p.server.get(), big.size(), &got));

  // The server side followed too (the first bytes it read were "POST "); its
  // receives add up to the bytes sent.
  auto recv_total = [&](const std::vector<Ev>& evs) {
    std::uint64_t t = 0;
    for (const auto& x : evs)
      if (is_data(x, p.server.get(), ITAP_DIR_RECV)) t += std::uint64_t(x.h.ret);
    return t;
  };
  ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    return recv_total(evs) == big.size() &&
           std::any_of(evs.begin(), evs.end(), [&](const Ev& x) { return is_data(x, p.client.get(), ITAP_DIR_SEND); });
  }));
  auto sends = col_->select([&](const Ev& x) { return is_data(x, p.client.get(), ITAP_DIR_SEND); });
  ASSERT_EQ(sends.size(), 1u);
  const Ev& e = sends[0];
  EXPECT_GE(e.h.ts_ns, t0);
  EXPECT_LE(e.h.ts_ns, t1);
  EXPECT_EQ(e.h.ret, 10240);
  EXPECT_TRUE(e.h.flags & ITAP_F_TRUNCATED);
  EXPECT_TRUE(e.h.flags & ITAP_F_NEW_SOCKET);
  EXPECT_FALSE(e.h.flags & ITAP_F_PARTIAL);
  ASSERT_EQ(e.head.size(), 512u);
  ASSERT_EQ(e.tail.size(), 128u);
  EXPECT_EQ(e.head, big.substr(0, 512));
  EXPECT_EQ(e.tail, big.substr(10240 - 128));
  auto recvs = col_->select([&](const Ev& x) { return is_data(x, p.server.get(), ITAP_DIR_RECV); });
  ASSERT_FALSE(recvs.empty());
  EXPECT_TRUE(recvs[0].h.flags & ITAP_F_NEW_SOCKET);
  EXPECT_EQ(recvs[0].head, big.substr(0, recvs[0].head.size()));
}

TEST_F(CaptureTest, WritevLikeNginxChunkCapturesConcatenation) {
  TcpPair p = tcp_pair();
  const int fd = p.server.get();
  // A response joined mid-way: the first bytes the kernel sees are a chunk.
  std::string hdr = "2f\r\n", data = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", crlf = "\r\n";
  hdr = [&] {
    char b[16];
    snprintf(b, sizeof(b), "%zx\r\n", data.size());
    return std::string(b);
  }();
  iovec iov[3] = {{hdr.data(), hdr.size()}, {data.data(), data.size()}, {crlf.data(), crlf.size()}};
  const std::size_t total = hdr.size() + data.size() + crlf.size();
  const std::uint64_t t0 = mono_ns();
  ASSERT_EQ(::writev(fd, iov, 3), ssize_t(total));
  const std::uint64_t t1 = mono_ns();
  ASSERT_TRUE(read_exact(p.client.get(), total));
  Ev e = one_event(fd, ITAP_DIR_SEND);
  EXPECT_GE(e.h.ts_ns, t0);
  EXPECT_LE(e.h.ts_ns, t1);
  EXPECT_EQ(e.h.syscall, ITAP_SC_WRITEV);
  EXPECT_EQ(e.h.ret, ssize_t(total));
  EXPECT_EQ(e.h.requested, total);
  EXPECT_EQ(e.head, hdr + data + crlf);
  EXPECT_TRUE(e.tail.empty());
  EXPECT_EQ(e.h.flags, ITAP_F_NEW_SOCKET);

  // Head and tail crossing iovec boundaries: 600 + 100 + 50 bytes, head 512
  // (inside iovec 0), tail 128 = last 78 bytes of iovec 1 + all of iovec 2.
  std::string a(600, 'A'), b(100, 'B'), c(50, 'C');
  for (std::size_t i = 0; i < a.size(); i++) a[i] = char('a' + i % 26);
  for (std::size_t i = 0; i < b.size(); i++) b[i] = char('0' + i % 10);
  iovec iov2[3] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  ASSERT_EQ(::writev(fd, iov2, 3), ssize_t(750));
  ASSERT_TRUE(read_exact(p.client.get(), 750));
  Ev e2 = one_event(fd, ITAP_DIR_SEND);
  const std::string all = a + b + c;
  EXPECT_EQ(e2.h.flags, ITAP_F_TRUNCATED);
  EXPECT_EQ(e2.head, all.substr(0, 512));
  EXPECT_EQ(e2.tail, all.substr(750 - 128));

  // Head spanning three iovecs with a tail inside the last one.
  std::string x(200, 'x'), y(200, 'y'), z(400, 'z');
  for (std::size_t i = 0; i < z.size(); i++) z[i] = char('A' + i % 26);
  iovec iov3[3] = {{x.data(), x.size()}, {y.data(), y.size()}, {z.data(), z.size()}};
  ASSERT_EQ(::writev(fd, iov3, 3), ssize_t(800));
  ASSERT_TRUE(read_exact(p.client.get(), 800));
  Ev e3 = one_event(fd, ITAP_DIR_SEND);
  const std::string all3 = x + y + z;
  EXPECT_EQ(e3.head, all3.substr(0, 512));
  EXPECT_EQ(e3.tail, all3.substr(800 - 128));

  // More iovecs than the kernel walks (ITAP_IOV_MAX): the head is exact, the
  // tail (in iovecs never walked) is dropped and the event says TRUNCATED.
  std::vector<std::string> parts;
  std::vector<iovec> iov4;
  std::string all4;
  for (int i = 0; i < ITAP_IOV_MAX + 2; i++) parts.push_back(std::string(100, char('a' + i)));
  for (auto& part : parts) {
    iov4.push_back({part.data(), part.size()});
    all4 += part;
  }
  ASSERT_EQ(::writev(fd, iov4.data(), int(iov4.size())), ssize_t(all4.size()));
  ASSERT_TRUE(read_exact(p.client.get(), all4.size()));
  Ev e4 = one_event(fd, ITAP_DIR_SEND);
  EXPECT_EQ(e4.h.flags, ITAP_F_TRUNCATED);
  EXPECT_EQ(e4.h.requested, 100u * ITAP_IOV_MAX) << "requested sums the iovecs walked";
  EXPECT_EQ(e4.head, all4.substr(0, 512));
  EXPECT_TRUE(e4.tail.empty());
}

TEST_F(CaptureTest, BinaryFirstMessageMutesSocket) {
  const auto before = cap_->stats();
  TcpPair p = tcp_pair();
  // A database protocol's first message (PostgreSQL's SSLRequest). TLS
  // records are not the example: with TLS capture on, a TLS socket is left to
  // its library's probes (verdict TLS), not muted.
  const std::string binary("\x00\x00\x00\x08\x04\xd2\x16\x2f", 8);
  ASSERT_EQ(::write(p.client.get(), binary.data(), binary.size()), ssize_t(binary.size()));
  ASSERT_TRUE(read_exact(p.server.get(), binary.size()));
  // Later HTTP-looking bytes do not revive it.
  ASSERT_EQ(::write(p.client.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
  ASSERT_TRUE(read_exact(p.server.get(), sizeof(kRequest) - 1));
  col_->settle(50);
  EXPECT_TRUE(col_->events.empty()) << col_->events.size() << " events on a muted connection";
  const auto after = cap_->stats();
  EXPECT_EQ(after.sockets_muted - before.sockets_muted, 2u) << "both ends classified as muted";
  EXPECT_GE(after.muted - before.muted, 2u) << "later calls stopped at the verdict lookup";
}

// TLS that no probed library makes (rustls, GnuTLS, a stripped BoringSSL,
// Go before 1.17): its ciphertext is never copied, and once its first
// ITAP_TLS_BLIND_CALLS calls passed with no library call of ours on them, the
// socket is muted like any socket that is not HTTP, ACKs included.
TEST_F(CaptureTest, TlsNoProbedLibraryMakesIsMutedAfterItsFirstCalls) {
  const auto before = cap_->stats();
  TcpPair p = tcp_pair();
  const std::string hello("\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00", 10);
  const std::string record("\x17\x03\x03\x00\x04" "abcd", 9);
  ASSERT_EQ(::write(p.client.get(), hello.data(), hello.size()), ssize_t(hello.size()));
  ASSERT_TRUE(read_exact(p.server.get(), hello.size()));
  for (int i = 0; i < ITAP_TLS_BLIND_CALLS + 4; ++i) {
    ASSERT_EQ(::write(p.client.get(), record.data(), record.size()), ssize_t(record.size()));
    ASSERT_TRUE(read_exact(p.server.get(), record.size()));
  }
  // Request-looking bytes after it do not revive it.
  ASSERT_EQ(::write(p.client.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
  ASSERT_TRUE(read_exact(p.server.get(), sizeof(kRequest) - 1));
  col_->settle(50);
  EXPECT_TRUE(col_->events.empty()) << col_->events.size() << " events from TLS no library of ours made";
  const auto after = cap_->stats();
  EXPECT_EQ(after.tls_unprobed - before.tls_unprobed, 2u) << "both ends muted as TLS no probe sees";
  EXPECT_GE(after.muted - before.muted, 6u) << "the calls after the mute stopped at the verdict lookup";
}

// h2c: the kernel follows a connection whose first bytes are HTTP/2's client
// preface, and one whose first bytes are a server's SETTINGS frame (the
// server speaks first); a frame of another type first is not followed.
TEST_F(CaptureTest, Http2PrefaceAndServerSettingsAreFollowed) {
  const auto before = cap_->stats();
  const std::string preface = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + std::string("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);
  const std::string settings("\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x04\x00\x00\xff\xff", 15);
  const std::string ping("\x00\x00\x08\x06\x00\x00\x00\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08", 17);
  TcpPair a = tcp_pair(), b = tcp_pair(), c = tcp_pair();
  ASSERT_EQ(::write(a.client.get(), preface.data(), preface.size()), ssize_t(preface.size()));
  ASSERT_TRUE(read_exact(a.server.get(), preface.size()));
  ASSERT_EQ(::write(b.server.get(), settings.data(), settings.size()), ssize_t(settings.size()));
  ASSERT_TRUE(read_exact(b.client.get(), settings.size()));
  ASSERT_EQ(::write(c.client.get(), ping.data(), ping.size()), ssize_t(ping.size()));
  ASSERT_TRUE(read_exact(c.server.get(), ping.size()));
  const int preface_fd = a.client.get(), settings_fd = b.server.get(), ping_fd = c.client.get();
  EXPECT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    bool pre = false, set = false;
    for (const auto& e : evs) {
      pre |= is_data(e, preface_fd, ITAP_DIR_SEND);
      set |= is_data(e, settings_fd, ITAP_DIR_SEND);
    }
    return pre && set;
  })) << "the h2c preface or the server's SETTINGS was not followed";
  col_->settle(50);
  for (const auto& e : col_->events) EXPECT_FALSE(is_data(e, ping_fd, ITAP_DIR_SEND)) << "a PING first is not HTTP/2's start";
  EXPECT_GE(cap_->stats().sockets_muted - before.sockets_muted, 2u) << "both ends of the PING connection muted";
}

// A realtime session the agent joined after its upgrade: a socket whose
// first data is a WebSocket text frame of JSON is followed, from either end
// (a server's unmasked frame, a client's masked one, each length form); one
// whose first frame no joined session can read (compressed: its window went
// by; binary; a continuation; text that is not JSON) or random binary is
// muted, both ends, and a valid frame after it does not revive it.
class WebsocketFirstFrames : public CaptureTest {};

TEST_F(WebsocketFirstFrames, JsonTextFramesAreFollowedOthersMuted) {
  namespace ws = infertap::protocol::websocket;
  const std::string delta = R"({"type":"response.output_text.delta","response_id":"resp_1","delta":"Hi"})";
  const std::string append = R"({"type":"input_audio_buffer.append","audio":")" + std::string(70000, 'A') + "\"}";
  const std::string server_frame = ws::testing::message(delta, ws::Sender::server);
  // Who writes each first frame: the server's end (unmasked) or the client's (masked).
  const std::vector<std::pair<bool, std::string>> readable = {
      {true, server_frame},
      {false, ws::testing::message(R"({"type":"response.create"})", ws::Sender::client)},
      {true, ws::testing::message(delta + std::string(300, ' '), ws::Sender::server)},  // 16-bit length
      {false, ws::testing::message(append, ws::Sender::client)},                       // 64-bit length
  };
  ws::testing::Compressor deflate;
  std::string random(64, '\0');
  std::uint32_t x = 0x2545f491;
  for (char& c : random) c = static_cast<char>((x = x * 1664525 + 1013904223) >> 24);
  random[0] = '\x9c';  // not a byte HTTP, SSE or a frame header of text begins with
  const std::vector<std::string> unreadable = {
      ws::testing::message(delta, ws::Sender::server, &deflate),
      ws::testing::message(delta, ws::Sender::server, nullptr, 0, ws::Opcode::binary),
      ws::testing::frame(ws::Opcode::continuation, delta),
      ws::testing::message("hello, world", ws::Sender::server),
      random,
  };
  // Read while written: 70 KB may not fit the socket buffers.
  const auto pass = [](int writer, int reader, const std::string& bytes) {
    bool read = false;
    std::thread t([&] { read = read_exact(reader, bytes.size()); });
    const ssize_t wrote = ::write(writer, bytes.data(), bytes.size());
    t.join();
    return wrote == ssize_t(bytes.size()) && read;
  };
  const auto before = cap_->stats();
  std::vector<TcpPair> followed, muted;
  for (const auto& [from_server, bytes] : readable) {
    TcpPair& p = followed.emplace_back(tcp_pair());
    ASSERT_TRUE(from_server ? pass(p.server.get(), p.client.get(), bytes) : pass(p.client.get(), p.server.get(), bytes));
  }
  for (const std::string& bytes : unreadable) {
    TcpPair& p = muted.emplace_back(tcp_pair());
    ASSERT_TRUE(pass(p.server.get(), p.client.get(), bytes));
    ASSERT_TRUE(pass(p.server.get(), p.client.get(), server_frame)) << "a readable frame later";
  }
  EXPECT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    std::size_t ends = 0;
    for (const TcpPair& p : followed) {
      for (int fd : {p.client.get(), p.server.get()}) {
        ends += std::any_of(evs.begin(), evs.end(), [&](const Ev& e) {
          return is_data(e, fd, ITAP_DIR_SEND) || is_data(e, fd, ITAP_DIR_RECV);
        });
      }
    }
    return ends == 2 * followed.size();
  })) << "a WebSocket text frame of JSON first was not followed at both ends";
  col_->settle(50);
  for (const TcpPair& p : muted) {
    for (int fd : {p.client.get(), p.server.get()}) {
      EXPECT_TRUE(col_->select([&](const Ev& e) { return e.h.pid == std::uint32_t(getpid()) && e.h.fd == fd; }).empty())
          << "events on fd " << fd << " whose first frame no joined session can read";
    }
  }
  const auto after = cap_->stats();
  EXPECT_EQ(after.sockets_followed - before.sockets_followed, 2 * followed.size());
  EXPECT_EQ(after.sockets_muted - before.sockets_muted, 2 * muted.size());
}

TEST_F(CaptureTest, UdpAndUnixDatagramsProduceNoEvents) {
  const auto before = cap_->stats();
  // UDP on loopback.
  Fd a(::socket(AF_INET, SOCK_DGRAM, 0)), b(::socket(AF_INET, SOCK_DGRAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(b.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  addr.sin_port = htons(local_port(b.get()));
  ASSERT_EQ(::sendto(a.get(), kRequest, sizeof(kRequest) - 1, 0, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            ssize_t(sizeof(kRequest) - 1));
  char buf[256];
  ASSERT_EQ(::recvfrom(b.get(), buf, sizeof(buf), 0, nullptr, nullptr), ssize_t(sizeof(kRequest) - 1));
  // Unix datagram socket pair: not a byte stream, never followed.
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM, 0, sv), 0);
  Fd u0(sv[0]), u1(sv[1]);
  ASSERT_EQ(::write(u0.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
  ASSERT_EQ(::read(u1.get(), buf, sizeof(buf)), ssize_t(sizeof(kRequest) - 1));
  col_->settle(50);
  EXPECT_TRUE(col_->events.empty()) << col_->events.size() << " events for UDP/unix datagram traffic";
  EXPECT_GE(cap_->stats().not_tcp - before.not_tcp, 4u);
}

// A unix stream pair that carries HTTP is followed like TCP: its identity is
// the socket, its inode and its peer's socket (no ports); positions are the
// agent's own byte counts; the first event names the peer's process.
TEST_F(CaptureTest, UnixStreamPairIsFollowedWithItsPeerAndByteCounts) {
  const auto before = cap_->stats();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd c(sv[0]), s(sv[1]);
  ASSERT_EQ(::write(c.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
  ASSERT_TRUE(read_exact(s.get(), sizeof(kRequest) - 1));
  const std::string more = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::write(c.get(), more.data(), more.size()), ssize_t(more.size()));
  ASSERT_TRUE(read_exact(s.get(), more.size()));
  ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    return std::count_if(evs.begin(), evs.end(), [](const Ev& e) { return e.h.family == AF_UNIX; }) >= 4;
  })) << "no events for HTTP over a unix socket pair";
  struct stat cst {}, sst {};
  ASSERT_EQ(fstat(c.get(), &cst), 0);
  ASSERT_EQ(fstat(s.get(), &sst), 0);
  const auto sends = col_->select([&](const Ev& e) { return is_data(e, c.get(), ITAP_DIR_SEND); });
  const auto recvs = col_->select([&](const Ev& e) { return is_data(e, s.get(), ITAP_DIR_RECV); });
  ASSERT_EQ(sends.size(), 2u);
  ASSERT_EQ(recvs.size(), 2u);
  itap_unix_ends ce{}, se{};
  std::memcpy(&ce, sends[0].h.local_addr, sizeof ce);
  std::memcpy(&se, recvs[0].h.local_addr, sizeof se);
  EXPECT_EQ(sends[0].h.family, AF_UNIX);
  EXPECT_EQ(sends[0].h.local_port, 0);
  EXPECT_EQ(ce.sock, sends[0].h.sock_id);
  EXPECT_EQ(ce.ino, std::uint32_t(cst.st_ino)) << "the inode ss -x and /proc/PID/fd show";
  EXPECT_EQ(se.ino, std::uint32_t(sst.st_ino));
  EXPECT_EQ(ce.peer_sock, se.sock) << "each end names the other";
  EXPECT_EQ(se.peer_sock, ce.sock);
  EXPECT_TRUE(sends[0].h.flags & ITAP_F_NEW_SOCKET);
  EXPECT_FALSE(sends[1].h.flags & ITAP_F_NEW_SOCKET);
  EXPECT_EQ(sends[0].h.peer_pid, std::uint32_t(getpid())) << "SO_PEERCRED of a socketpair: this process";
  EXPECT_EQ(sends[0].h.path_len, 0) << "a socketpair has no name";
  EXPECT_EQ(sends[0].h.seq_end, sizeof(kRequest) - 1) << "bytes counted from the first call";
  EXPECT_EQ(sends[1].h.seq_end, sizeof(kRequest) - 1 + more.size());
  EXPECT_EQ(recvs[1].h.seq_end, sizeof(kRequest) - 1 + more.size());
  EXPECT_EQ(sends[1].h.srtt_us, 0u);
  EXPECT_FALSE(sends[0].h.flags & ITAP_F_SNDBUF_FULL);
  const auto after = cap_->stats();
  EXPECT_EQ(after.unix_sockets_classified - before.unix_sockets_classified, 2u);
  EXPECT_EQ(after.sockets_followed - before.sockets_followed, 2u);
}

// A followed unix socket's end: when both ends are closed the socket is freed
// (fentry unix_sock_destructor), its close is reported and its entry goes, so
// a later socket at the address is judged afresh. Where the kernel does not
// load fentry programs (or a policy forbids them) the load notes say so, and
// each call on a unix socket reads the socket's inode instead.
TEST_F(CaptureTest, FreedUnixSocketsAreReportedAndForgotten) {
  bool traced = false, inode_check = false;
  std::string notes;
  for (const auto& n : cap_->notes()) {
    traced |= n.what == "attach: fentry unix_sock_destructor";
    if (n.what == "unix sockets: each call reads the socket's inode") {
      inode_check = true;
      EXPECT_NE(n.why.find("to tell it from a closed one"), std::string::npos) << n.why;
    }
    notes += n.what + " (" + n.why + "); ";
  }
  ASSERT_NE(traced, inode_check) << "one of the two, named: " << notes;
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ASSERT_EQ(::write(sv[0], kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
  ASSERT_TRUE(read_exact(sv[1], sizeof(kRequest) - 1));
  ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    return std::count_if(evs.begin(), evs.end(), [](const Ev& e) { return e.h.family == AF_UNIX; }) >= 2;
  }));
  const std::uint64_t a = col_->events[0].h.sock_id, b = col_->events[1].h.sock_id;
  EXPECT_TRUE(cap_->knows(a));
  EXPECT_TRUE(cap_->knows(b));
  col_->events.clear();
  ::close(sv[0]);
  ::close(sv[1]);
  if (inode_check) {
    std::printf("  (%s)\n", notes.c_str());
    return;  // the entries stay until a new socket at the address finds another inode
  }
  ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    return std::count_if(evs.begin(), evs.end(),
                         [](const Ev& e) { return e.h.kind == ITAP_EV_STATE && e.h.new_state == ITAP_STATE_DESTROYED; }) >= 2;
  })) << "no close reported for the freed unix sockets";
  for (const auto& e : col_->events) {
    EXPECT_EQ(e.h.family, AF_UNIX);
    EXPECT_EQ(e.h.srtt_us, 0u) << "a unix socket has no RTT to read";
  }
  EXPECT_FALSE(cap_->knows(a));
  EXPECT_FALSE(cap_->knows(b));
}

// A named unix socket's first event carries the path: the server's own, the
// client's peer's (flagged), abstract names with their leading NUL.
TEST_F(CaptureTest, UnixPathRidesOnTheFirstEvent) {
  for (const std::string& name : {std::string("/tmp/infertap-capture-") + std::to_string(getpid()) + ".sock",
                                 std::string(1, '\0') + "infertap-capture-" + std::to_string(getpid())}) {
    col_->clear();
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, name.data(), name.size());
    const socklen_t len = socklen_t(offsetof(sockaddr_un, sun_path) + name.size() + (name[0] ? 1 : 0));
    if (name[0]) ::unlink(name.c_str());
    Fd l(::socket(AF_UNIX, SOCK_STREAM, 0));
    ASSERT_EQ(::bind(l.get(), reinterpret_cast<sockaddr*>(&a), len), 0) << std::strerror(errno);
    ASSERT_EQ(::listen(l.get(), 1), 0);
    Fd c(::socket(AF_UNIX, SOCK_STREAM, 0));
    ASSERT_EQ(::connect(c.get(), reinterpret_cast<sockaddr*>(&a), len), 0);
    Fd s(::accept(l.get(), nullptr, nullptr));
    ASSERT_EQ(::write(c.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
    ASSERT_TRUE(read_exact(s.get(), sizeof(kRequest) - 1));
    ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
      return std::count_if(evs.begin(), evs.end(), [](const Ev& e) { return e.h.family == AF_UNIX; }) >= 2;
    }));
    const auto send = col_->select([&](const Ev& e) { return is_data(e, c.get(), ITAP_DIR_SEND); });
    const auto recv = col_->select([&](const Ev& e) { return is_data(e, s.get(), ITAP_DIR_RECV); });
    ASSERT_EQ(send.size(), 1u);
    ASSERT_EQ(recv.size(), 1u);
    const std::string want = name;  // sun_path as the kernel keeps it (a file path may carry its NUL after)
    const std::string client_path(send[0].path.begin(), send[0].path.end());
    const std::string server_path(recv[0].path.begin(), recv[0].path.end());
    EXPECT_EQ(client_path.substr(0, name.size()), want) << "the client's peer's name";
    EXPECT_TRUE(send[0].h.flags & ITAP_F_PEER_PATH);
    EXPECT_EQ(server_path.substr(0, name.size()), want) << "the server's own name";
    EXPECT_FALSE(recv[0].h.flags & ITAP_F_PEER_PATH);
    if (name[0]) ::unlink(name.c_str());
  }
}

// HTTP over SOCK_SEQPACKET: one message per call, followed like a stream.
TEST_F(CaptureTest, UnixSeqpacketCarryingHttpIsFollowed) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  Fd c(sv[0]), s(sv[1]);
  ASSERT_EQ(::send(c.get(), kRequest, sizeof(kRequest) - 1, 0), ssize_t(sizeof(kRequest) - 1));
  char buf[512];
  ASSERT_EQ(::recv(s.get(), buf, sizeof buf, 0), ssize_t(sizeof(kRequest) - 1));
  ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    return std::count_if(evs.begin(), evs.end(), [](const Ev& e) { return e.h.family == AF_UNIX; }) >= 2;
  })) << "no events for HTTP over SOCK_SEQPACKET";
  const auto recv = col_->select([&](const Ev& e) { return is_data(e, s.get(), ITAP_DIR_RECV); });
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].h.seq_end, sizeof(kRequest) - 1);
  EXPECT_EQ(std::string(recv[0].head.begin(), recv[0].head.end()), std::string(kRequest));
}

// Unix traffic that is not HTTP (D-Bus, binary frames) is muted after its
// first bytes: later calls stop at the verdict lookup.
TEST_F(CaptureTest, UnixBinaryFirstBytesMuteTheSocket) {
  const auto before = cap_->stats();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd c(sv[0]), s(sv[1]);
  const std::string auth = std::string(1, '\0') + "AUTH EXTERNAL 30\r\n";
  ASSERT_EQ(::write(c.get(), auth.data(), auth.size()), ssize_t(auth.size()));
  ASSERT_TRUE(read_exact(s.get(), auth.size()));
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(::write(c.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
    ASSERT_TRUE(read_exact(s.get(), sizeof(kRequest) - 1));
  }
  col_->settle(50);
  EXPECT_TRUE(col_->events.empty()) << col_->events.size() << " events on a muted unix socket";
  const auto after = cap_->stats();
  EXPECT_EQ(after.unix_sockets_classified - before.unix_sockets_classified, 2u);
  EXPECT_EQ(after.sockets_muted - before.sockets_muted, 2u);
  EXPECT_GE(after.muted - before.muted, 20u) << "each later call stopped at the verdict lookup";
}

// A unix sender whose reader stops: the sends that leave the send buffer full
// say so (the next send waits for the reader), and the refused one is EAGAIN.
TEST_F(CaptureTest, UnixSendIntoAFullBufferIsFlaggedAndEagainIsReported) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd c(sv[0]), s(sv[1]);
  ASSERT_EQ(::write(c.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
  ASSERT_TRUE(read_exact(s.get(), sizeof(kRequest) - 1));
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";
  ASSERT_EQ(::write(s.get(), head.data(), head.size()), ssize_t(head.size()));
  int small = 4096;
  ASSERT_EQ(setsockopt(s.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  int sndbuf = 0;
  socklen_t sl = sizeof sndbuf;
  getsockopt(s.get(), SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl);
  ASSERT_EQ(fcntl(s.get(), F_SETFL, fcntl(s.get(), F_GETFL) | O_NONBLOCK), 0);
  const std::string ev = "data: {\"x\":\"" + std::string(200, 'a') + "\"}\n\n";
  int sent = 0, refused = 0;
  for (int i = 0; i < 1000 && !refused; ++i) {
    if (::send(s.get(), ev.data(), ev.size(), 0) > 0) ++sent;
    else if (errno == EAGAIN) ++refused;
  }
  ASSERT_EQ(refused, 1) << "the send buffer never filled";
  ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    return std::any_of(evs.begin(), evs.end(), [&](const Ev& e) { return is_data(e, s.get(), ITAP_DIR_SEND) && (e.h.flags & ITAP_F_EAGAIN); });
  })) << "no EAGAIN event";
  const auto sends = col_->select([&](const Ev& e) { return is_data(e, s.get(), ITAP_DIR_SEND); });
  ASSERT_GE(sends.size(), 3u);
  const Ev& last_ok = sends[sends.size() - 2];
  const Ev& eagain = sends.back();
  EXPECT_TRUE(eagain.h.flags & ITAP_F_EAGAIN);
  EXPECT_EQ(eagain.h.ret, -EAGAIN);
  EXPECT_TRUE(eagain.h.flags & ITAP_F_SNDBUF_FULL) << "refused because the buffer is full";
  EXPECT_TRUE(last_ok.h.flags & ITAP_F_SNDBUF_FULL) << "the send that filled it says so";
  EXPECT_GE(last_ok.h.arrived_seq, std::uint32_t(sndbuf)) << "unread bytes as the send buffer counts them";
  EXPECT_FALSE(sends.front().h.flags & ITAP_F_SNDBUF_FULL) << "the head went into an empty buffer";
  EXPECT_EQ(eagain.h.seq_end, last_ok.h.seq_end) << "a refused send moves no bytes";
}

TEST_F(CaptureTest, ReadReturningZeroGivesEof) {
  TcpPair p = tcp_pair();
  std::uint64_t cs = 0, ss = 0;
  follow(p, &cs, &ss);
  ASSERT_EQ(::shutdown(p.client.get(), SHUT_WR), 0);
  char buf[64];
  const std::uint64_t t0 = mono_ns();
  ASSERT_EQ(::read(p.server.get(), buf, sizeof(buf)), 0);
  const std::uint64_t t1 = mono_ns();
  Ev e = one_event(p.server.get(), ITAP_DIR_RECV);
  EXPECT_EQ(e.h.sock_id, ss);
  EXPECT_EQ(e.h.ret, 0);
  EXPECT_EQ(e.h.syscall, ITAP_SC_READ);
  EXPECT_EQ(e.h.requested, sizeof(buf));
  EXPECT_TRUE(e.h.flags & ITAP_F_EOF);
  EXPECT_TRUE(e.head.empty() && e.tail.empty());
  EXPECT_GE(e.h.ts_ns, t0);
  EXPECT_LE(e.h.ts_ns, t1);
}

TEST_F(CaptureTest, CloseEmitsStateEvents) {
  TcpPair p = tcp_pair();
  std::uint64_t cs = 0, ss = 0;
  follow(p, &cs, &ss);
  // Both ends are followed: the kernel's follow hint counts them, so the
  // per-segment programs look them up.
  EXPECT_EQ(cap_->followed_hint_total(), 2u);
  const std::uint16_t cport = p.client_port, sport = p.server_port;
  p.client.reset();
  p.server.reset();
  auto state_of = [](std::uint64_t sock, int st) {
    return [=](const Ev& e) { return e.h.kind == ITAP_EV_STATE && e.h.sock_id == sock && e.h.new_state == st; };
  };
  ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    return std::any_of(evs.begin(), evs.end(), state_of(cs, kTcpClose)) &&
           std::any_of(evs.begin(), evs.end(), state_of(ss, kTcpClose));
  })) << "expected TCP_CLOSE state events for both ends";
  auto fin = col_->select(state_of(cs, kTcpFinWait1));
  ASSERT_EQ(fin.size(), 1u) << "active close: ESTABLISHED -> FIN_WAIT1";
  EXPECT_EQ(fin[0].h.old_state, 1);  // TCP_ESTABLISHED
  EXPECT_EQ(fin[0].h.local_port, cport);
  EXPECT_EQ(fin[0].h.remote_port, sport);
  EXPECT_EQ(fin[0].h.family, AF_INET);
  EXPECT_EQ(fin[0].h.head_len + fin[0].h.tail_len, 0);
  // Closed sockets are forgotten: nothing more arrives for them.
  col_->settle(20);
  const auto n = col_->events.size();
  col_->settle(20);
  EXPECT_EQ(col_->events.size(), n);
  EXPECT_EQ(cap_->followed_hint_total(), 0u) << "closing a followed socket uncounts its follow hint";
}

TEST_F(CaptureTest, NonBlockingSendIntoFullBufferGivesEagain) {
  Fd l = tcp_listener(0, 4096);
  TcpPair p = tcp_connect(l);
  std::uint64_t cs = 0, ss = 0;
  follow(p, &cs, &ss);
  const int fd = p.client.get();
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  ASSERT_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
  std::string chunk(16384, 'd');
  int eagain_calls = 0;
  for (int i = 0; i < 2000 && eagain_calls == 0; i++) {
    ssize_t r = ::send(fd, chunk.data(), chunk.size(), 0);
    if (r < 0) {
      ASSERT_EQ(errno, EAGAIN);
      eagain_calls++;
    }
  }
  ASSERT_EQ(eagain_calls, 1) << "send buffer never filled";
  ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    return std::any_of(evs.begin(), evs.end(), [&](const Ev& e) { return is_data(e, fd, ITAP_DIR_SEND) && (e.h.flags & ITAP_F_EAGAIN); });
  })) << "no EAGAIN event";
  auto sends = col_->select([&](const Ev& e) { return is_data(e, fd, ITAP_DIR_SEND); });
  int eagain_events = 0;
  for (const auto& e : sends) {
    EXPECT_EQ(e.h.syscall, ITAP_SC_SENDTO);
    EXPECT_EQ(e.h.requested, chunk.size());
    if (e.h.flags & ITAP_F_EAGAIN) {
      eagain_events++;
      EXPECT_EQ(e.h.ret, -EAGAIN);
      EXPECT_EQ(e.head.size() + e.tail.size(), 0u);
    } else {
      EXPECT_GT(e.h.ret, 0);
      EXPECT_EQ(bool(e.h.flags & ITAP_F_PARTIAL), std::uint64_t(e.h.ret) < e.h.requested);
    }
  }
  EXPECT_EQ(eagain_events, 1);
  EXPECT_EQ(cap_->stats().drops_ringbuf_full, 0u);
}

// A send that waits for buffer space reports the wait as its duration
// (enter_ns -> ts_ns): the evidence of a reader that does not drain.
TEST_F(CaptureTest, BlockingSendReportsHowLongItWaited) {
  Fd l = tcp_listener(0, 4096);
  TcpPair p = tcp_connect(l);
  std::uint64_t cs = 0, ss = 0;
  follow(p, &cs, &ss);
  const int fd = p.client.get();
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  std::thread drainer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    read_exact(p.server.get(), 1 << 20);
  });
  const std::string big(1 << 20, 'b');
  const std::uint64_t t0 = mono_ns();
  ASSERT_EQ(::send(fd, big.data(), big.size(), 0), ssize_t(big.size()));
  const std::uint64_t t1 = mono_ns();
  drainer.join();
  ASSERT_GE(t1 - t0, 100'000'000u) << "the send did not block: the test's premise failed";
  ASSERT_TRUE(col_->wait_for([&](const std::vector<Ev>& evs) {
    return std::any_of(evs.begin(), evs.end(), [&](const Ev& e) { return is_data(e, fd, ITAP_DIR_SEND) && e.h.ret == ssize_t(big.size()); });
  })) << "no event for the blocking send";
  for (const auto& e : col_->select([&](const Ev& e) { return is_data(e, fd, ITAP_DIR_SEND) && e.h.ret == ssize_t(big.size()); })) {
    EXPECT_GE(e.h.enter_ns, t0);
    EXPECT_LE(e.h.ts_ns, t1);
    EXPECT_GE(e.h.ts_ns - e.h.enter_ns, 100'000'000u) << "duration must include the wait for buffer space";
    EXPECT_TRUE(e.h.flags & ITAP_F_TRUNCATED);
  }
}

TEST_F(CaptureTest, UserspaceMuteAndForget) {
  TcpPair p = tcp_pair();
  std::uint64_t cs = 0, ss = 0;
  follow(p, &cs, &ss);
  const std::string ev = "data: {}\n\n";
  cap_->mute(cs);
  ASSERT_EQ(::write(p.client.get(), ev.data(), ev.size()), ssize_t(ev.size()));
  ASSERT_TRUE(read_exact(p.server.get(), ev.size()));
  col_->settle(30);
  EXPECT_TRUE(col_->select([&](const Ev& e) { return e.h.sock_id == cs; }).empty()) << "muted socket still emits";
  col_->events.clear();
  cap_->forget(cs);  // next data is classified again
  ASSERT_EQ(::write(p.client.get(), ev.data(), ev.size()), ssize_t(ev.size()));
  ASSERT_TRUE(read_exact(p.server.get(), ev.size()));
  Ev e = one_event(p.client.get(), ITAP_DIR_SEND);
  EXPECT_EQ(e.h.sock_id, cs);
  EXPECT_EQ(e.h.flags, ITAP_F_NEW_SOCKET);
  EXPECT_EQ(e.head, ev);
}

TEST_F(CaptureTest, Ipv6LoopbackAddresses) {
  Fd l(::socket(AF_INET6, SOCK_STREAM, 0));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  ASSERT_EQ(::bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << "no IPv6 loopback";
  ASSERT_EQ(::listen(l.get(), 4), 0);
  socklen_t len = sizeof(a);
  getsockname(l.get(), reinterpret_cast<sockaddr*>(&a), &len);
  Fd c(::socket(AF_INET6, SOCK_STREAM, 0));
  ASSERT_EQ(::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  Fd s(::accept(l.get(), nullptr, nullptr));
  ASSERT_EQ(::write(c.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
  ASSERT_TRUE(read_exact(s.get(), sizeof(kRequest) - 1));
  Ev e = one_event(c.get(), ITAP_DIR_SEND);
  EXPECT_EQ(e.h.family, AF_INET6);
  EXPECT_EQ(e.h.remote_port, ntohs(a.sin6_port));
  EXPECT_EQ(std::memcmp(e.h.remote_addr, &in6addr_loopback, 16), 0);
  EXPECT_EQ(std::memcmp(e.h.local_addr, &in6addr_loopback, 16), 0);
}

// Opens a second capture on the raw tracepoint set. The filters are the same
// code on both attach sets; the raw set detaches in ~50 ms where the 17
// tracepoints take ~0.6 s (an RCU grace period each), keeping tests fast.
std::unique_ptr<Capture> open_raw(CaptureConfig cfg, std::string* err) {
  cfg.attach = infertap::capture::AttachMethod::raw_tracepoints;
  return Capture::open(cfg, err);
}

TEST(CaptureVariantsTest, PortFilterKeepsOnlyListedPorts) {
  Fd l1 = tcp_listener(), l2 = tcp_listener();
  CaptureConfig cfg = self_config();
  cfg.ports = {local_port(l1.get())};
  std::string err;
  auto cap = open_raw(cfg, &err);
  ASSERT_NE(cap, nullptr) << err;
  Collector col(cap.get());
  TcpPair in = tcp_connect(l1), out = tcp_connect(l2);
  for (TcpPair* p : {&in, &out}) {
    ASSERT_EQ(::write(p->client.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
    ASSERT_TRUE(read_exact(p->server.get(), sizeof(kRequest) - 1));
  }
  ASSERT_TRUE(col.wait_for([](const std::vector<Ev>& evs) { return evs.size() >= 2; }));
  col.settle(30);
  for (const auto& e : col.events) {
    EXPECT_TRUE(e.h.local_port == local_port(l1.get()) || e.h.remote_port == local_port(l1.get()));
  }
  EXPECT_EQ(col.events.size(), 2u);
}

// The fallback attach sets (older kernels, no tracefs) capture the same events.
class FallbackAttachTest : public ::testing::TestWithParam<infertap::capture::AttachMethod> {};

TEST_P(FallbackAttachTest, CapturesDataAndStateLikeTheDefaultSet) {
  std::string err;
  CaptureConfig cfg = self_config();
  cfg.attach = GetParam();
  auto cap = Capture::open(cfg, &err);
  ASSERT_NE(cap, nullptr) << err;
  const std::string expected_note =
      GetParam() == infertap::capture::AttachMethod::raw_tracepoints ? "raw tracepoints" : "syscalls:sys_";
  bool noted = false;
  for (const auto& n : cap->notes()) noted |= n.what.find(expected_note) != std::string::npos;
  EXPECT_TRUE(noted) << "load notes must name the attach set";
  Collector col(cap.get());
  TcpPair p = tcp_pair();
  ASSERT_EQ(::write(p.client.get(), kRequest, sizeof(kRequest) - 1), ssize_t(sizeof(kRequest) - 1));
  ASSERT_TRUE(read_exact(p.server.get(), sizeof(kRequest) - 1));
  std::string h = "1a\r\n", d = "data: {\"n\":1}\n\n", crlf = "\r\n";
  iovec iov[3] = {{h.data(), h.size()}, {d.data(), d.size()}, {crlf.data(), crlf.size()}};
  const std::uint64_t t0 = mono_ns();
  ASSERT_EQ(::writev(p.server.get(), iov, 3), ssize_t(h.size() + d.size() + crlf.size()));
  const std::uint64_t t1 = mono_ns();
  char buf[128];
  msghdr mh{};
  iovec riov = {buf, sizeof(buf)};
  mh.msg_iov = &riov;
  mh.msg_iovlen = 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(::recvmsg(p.client.get(), &mh, 0), ssize_t(h.size() + d.size() + crlf.size()));
  p.client.reset();
  p.server.reset();
  ASSERT_TRUE(col.wait_for([](const std::vector<Ev>& evs) {
    int data = 0, closes = 0;
    for (const auto& e : evs) {
      data += e.h.kind == ITAP_EV_DATA;
      closes += e.h.kind == ITAP_EV_STATE && e.h.new_state == kTcpClose;
    }
    return data >= 4 && closes >= 2;
  })) << "raw tracepoint capture delivered " << col.events.size() << " events";
  int seen = 0;
  for (const auto& e : col.events) {
    if (e.h.kind != ITAP_EV_DATA) continue;
    if (e.h.syscall == ITAP_SC_WRITEV) {
      seen |= 1;
      EXPECT_EQ(e.head, h + d + crlf);
      EXPECT_GE(e.h.ts_ns, t0);
      EXPECT_LE(e.h.ts_ns, t1);
    }
    if (e.h.syscall == ITAP_SC_RECVMSG) {
      seen |= 2;
      EXPECT_EQ(e.head, h + d + crlf);
      EXPECT_EQ(e.h.requested, sizeof(buf));
    }
    if (e.h.syscall == ITAP_SC_WRITE) seen |= 4;
    if (e.h.syscall == ITAP_SC_READ) seen |= 8;
  }
  EXPECT_EQ(seen, 15);
}

INSTANTIATE_TEST_SUITE_P(Sets, FallbackAttachTest,
                         ::testing::Values(infertap::capture::AttachMethod::raw_tracepoints,
                                           infertap::capture::AttachMethod::tracepoints),
                         [](const auto& info) {
                           return info.param == infertap::capture::AttachMethod::raw_tracepoints ? "raw_tp"
                                                                                                 : "syscall_tracepoints";
                         });

}  // namespace
