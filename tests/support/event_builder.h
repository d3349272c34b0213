// Builds ring-buffer records exactly as the kernel side lays them out, for
// driving the pipeline from synthetic syscall sequences with a fake clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "capture/abi_check.h"
#include "capture/event.h"

namespace infertap::testing {

class ConnBuilder {
 public:
  ConnBuilder(std::uint64_t sock_id, std::uint32_t pid, std::uint16_t local_port, std::uint16_t remote_port)
      : sock_id_(sock_id), pid_(pid), local_port_(local_port), remote_port_(remote_port) {}

  // Capture caps, as the agent's --head-bytes / --tail-bytes.
  void set_caps(std::uint32_t head, std::uint32_t tail) { head_cap_ = head; tail_cap_ = tail; }

  // One send/recv syscall that moved `bytes`, returning at ts_ns.
  std::vector<std::uint8_t> send(std::uint64_t ts_ns, std::string_view bytes, std::uint64_t duration_ns = 2000) {
    return data(ITAP_DIR_SEND, ITAP_SC_WRITE, ts_ns, bytes, duration_ns);
  }
  std::vector<std::uint8_t> recv(std::uint64_t ts_ns, std::string_view bytes, std::uint64_t duration_ns = 2000) {
    return data(ITAP_DIR_RECV, ITAP_SC_READ, ts_ns, bytes, duration_ns);
  }
  // The kernel already had an entry for this socket address (a stale one, its
  // close lost): no event is marked as the socket's first.
  void as_known_socket() { first_ = false; }
  // TCP sequences the connection starts from (each side picks its own).
  void start_at(std::uint32_t send_seq, std::uint32_t recv_seq) {
    send_seq_ = send_seq;
    recv_seq_ = recv_seq;
  }
  // The socket's port after it closed (the kernel releases it).
  void closed_port() { local_port_ = 0; }
  // An AF_UNIX socket: no ports, its identity (this socket, its inode, its
  // peer's socket) in place of addresses, its path (or, peer_path, its
  // peer's) on its first event, byte counts from 0 in place of sequences.
  void as_unix(std::uint64_t peer_sock, std::uint32_t inode, std::string path = "", bool peer_path = false) {
    unix_ = true;
    unix_peer_ = peer_sock;
    unix_ino_ = inode;
    unix_path_ = std::move(path);
    unix_peer_path_ = peer_path;
    local_port_ = remote_port_ = 0;
    send_seq_ = recv_seq_ = 0;
  }
  // The next send leaves the send buffer full (unread: the bytes the reader has not consumed).
  void full_after_next_send(std::uint32_t unread) { full_unread_ = unread; }
  // Skip bytes in a direction as if their events were dropped before userspace.
  void lose(std::uint8_t direction, std::uint32_t n) { (direction == ITAP_DIR_SEND ? send_seq_ : recv_seq_) += n; }

  // A TLS connection: events are the plaintext of a TLS library's calls on
  // connection object `ssl` (sequences count plaintext from 0; tls_seq is
  // TCP's after each call's ciphertext, TLS records adding kTlsOverhead), its
  // handshake began at `handshake_ns` (0: not seen).
  static constexpr std::uint32_t kTlsOverhead = 22;
  void as_tls(std::uint64_t ssl, std::uint16_t library, std::uint64_t handshake_ns) {
    tls_ssl_ = ssl;
    tls_lib_ = library;
    tls_start_ns_ = handshake_ns;
    tcp_send_seq_ = send_seq_;
    tcp_recv_seq_ = recv_seq_;
    send_seq_ = recv_seq_ = 0;
  }
  // The TCP sequence after the ciphertext of the last send (what an ACK of it carries).
  std::uint32_t tls_send_seq() const { return tcp_send_seq_; }
  // Writes encrypted into memory: the socket is not known until bind().
  void unbound(bool on) { unbound_ = on; }
  // ITAP_EV_TLS_BIND: the ciphertext of the writes so far went out at ts_ns.
  std::vector<std::uint8_t> bind(std::uint64_t ts_ns) {
    auto rec = header(ITAP_EV_TLS_BIND, ITAP_DIR_SEND, 0, ts_ns, 0);
    auto* h = reinterpret_cast<itap_event*>(rec.data());
    h->fd = -1;
    h->tls_ssl = tls_ssl_;
    h->tls_seq = tcp_send_seq_;
    if (h->flags & ITAP_F_NEW_SOCKET) h->tls_start_ns = tls_start_ns_;
    return rec;
  }

  std::vector<std::uint8_t> eof(std::uint64_t ts_ns) {
    auto rec = header(ITAP_EV_DATA, ITAP_DIR_RECV, ITAP_SC_READ, ts_ns, 0);
    reinterpret_cast<itap_event*>(rec.data())->flags |= ITAP_F_EOF;
    return rec;
  }
  std::vector<std::uint8_t> state(std::uint64_t ts_ns, std::uint8_t old_state, std::uint8_t new_state) {
    auto rec = header(ITAP_EV_STATE, 0, 0, ts_ns, 0);
    auto* h = reinterpret_cast<itap_event*>(rec.data());
    h->old_state = old_state;
    h->new_state = new_state;
    return rec;
  }

 private:
  std::vector<std::uint8_t> header(std::uint16_t kind, std::uint8_t dir, std::uint8_t sc, std::uint64_t ts,
                                   std::int64_t ret) {
    std::vector<std::uint8_t> rec(sizeof(itap_event), 0);
    auto* h = reinterpret_cast<itap_event*>(rec.data());
    h->ts_ns = ts;
    h->enter_ns = ts;
    h->sock_id = sock_id_;
    h->ret = ret;
    h->requested = ret > 0 ? static_cast<std::uint64_t>(ret) : 0;
    h->pid = pid_;
    h->tid = pid_;
    h->fd = 7;
    h->kind = kind;
    h->direction = dir;
    h->syscall = sc;
    h->family = 2;  // AF_INET
    h->local_port = local_port_;
    h->remote_port = remote_port_;
    h->local_addr[0] = 127;
    h->local_addr[3] = 1;
    h->remote_addr[0] = 127;
    h->remote_addr[3] = 1;
    std::memcpy(h->comm, "sample", 7);
    if (unix_) {
      h->family = 1;  // AF_UNIX
      itap_unix_ends ends{};
      ends.sock = sock_id_;
      ends.ino = unix_ino_;
      ends.peer_sock = unix_peer_;
      std::memcpy(h->local_addr, &ends, sizeof ends);
    }
    if (first_) {
      h->flags |= ITAP_F_NEW_SOCKET;
      first_ = false;
    }
    return rec;
  }

  std::vector<std::uint8_t> data(std::uint8_t dir, std::uint8_t sc, std::uint64_t ts, std::string_view bytes,
                                 std::uint64_t duration_ns) {
    auto rec = header(ITAP_EV_DATA, dir, sc, ts, static_cast<std::int64_t>(bytes.size()));
    auto* h = reinterpret_cast<itap_event*>(rec.data());
    h->enter_ns = ts - std::min(ts, duration_ns);
    std::uint32_t& seq = dir == ITAP_DIR_SEND ? send_seq_ : recv_seq_;
    seq += static_cast<std::uint32_t>(bytes.size());
    h->seq_end = seq;
    const std::size_t head = std::min<std::size_t>(bytes.size(), head_cap_);
    const std::size_t tail = std::min<std::size_t>(bytes.size() - head, tail_cap_);
    h->head_len = static_cast<std::uint16_t>(head);
    h->tail_len = static_cast<std::uint16_t>(tail);
    if (head + tail < bytes.size()) h->flags |= ITAP_F_TRUNCATED;
    if (tls_ssl_) tls_fields(*h, dir, bytes.size());
    const bool with_path = unix_ && (h->flags & ITAP_F_NEW_SOCKET) && !unix_path_.empty();
    if (with_path) {
      h->path_len = static_cast<std::uint16_t>(unix_path_.size());
      if (unix_peer_path_) h->flags |= ITAP_F_PEER_PATH;
    }
    if (unix_ && dir == ITAP_DIR_SEND && full_unread_) {
      h->flags |= ITAP_F_SNDBUF_FULL;
      h->arrived_seq = full_unread_;
      full_unread_ = 0;
    }
    rec.insert(rec.end(), bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(head));
    rec.insert(rec.end(), bytes.end() - static_cast<std::ptrdiff_t>(tail), bytes.end());
    if (with_path) rec.insert(rec.end(), unix_path_.begin(), unix_path_.end());
    return rec;
  }

  void tls_fields(itap_event& h, std::uint8_t dir, std::size_t bytes) {
    std::uint32_t& tcp = dir == ITAP_DIR_SEND ? tcp_send_seq_ : tcp_recv_seq_;
    tcp += static_cast<std::uint32_t>(bytes) + kTlsOverhead;
    h.flags |= ITAP_F_TLS;
    h.fd = -1;
    h.tls_ssl = tls_ssl_;
    h.tls_lib = tls_lib_;
    h.tls_seq = tcp;
    if (h.flags & ITAP_F_NEW_SOCKET) h.tls_start_ns = tls_start_ns_;
    if (unbound_ && dir == ITAP_DIR_SEND) {
      // No socket yet: no address either, and the socket's first event is the bind.
      h.sock_id = 0;
      h.tls_seq = 0;
      h.family = h.local_port = h.remote_port = 0;
      std::memset(h.local_addr, 0, sizeof h.local_addr);
      std::memset(h.remote_addr, 0, sizeof h.remote_addr);
      if (h.flags & ITAP_F_NEW_SOCKET) {
        h.flags &= static_cast<std::uint16_t>(~ITAP_F_NEW_SOCKET);
        first_ = true;
      }
    }
  }

  std::uint64_t sock_id_;
  std::uint32_t pid_;
  std::uint16_t local_port_, remote_port_;
  std::uint32_t head_cap_ = ITAP_HEAD_DEFAULT, tail_cap_ = ITAP_TAIL_DEFAULT;
  std::uint32_t send_seq_ = 1000, recv_seq_ = 5000;
  bool first_ = true;
  std::uint64_t tls_ssl_ = 0, tls_start_ns_ = 0;
  std::uint16_t tls_lib_ = 0;
  std::uint32_t tcp_send_seq_ = 0, tcp_recv_seq_ = 0;
  bool unbound_ = false;
  bool unix_ = false, unix_peer_path_ = false;
  std::uint64_t unix_peer_ = 0;
  std::uint32_t unix_ino_ = 0, full_unread_ = 0;
  std::string unix_path_;
};

// An OpenAI chat.completion.chunk event as inference servers write it.
inline std::string openai_chunk(std::string_view content, std::string_view id = "chatcmpl-test",
                                std::string_view model = "llama-test") {
  return "data: {\"id\":\"" + std::string(id) +
         "\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"" + std::string(model) +
         "\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + std::string(content) +
         "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
}

// The peer's kernel acknowledged up to `seq` at `ts` (its window open).
inline capture::DeliverySignal ack_signal(std::uint64_t sock, std::uint32_t seq, std::uint64_t ts) {
  capture::DeliverySignal s;
  s.kind = capture::DeliverySignal::Kind::ack;
  s.sock_id = sock;
  s.seq = seq;
  s.ts_ns = ts;
  s.window = 65535;
  return s;
}

inline std::string chunked(std::string_view body) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", body.size());
  return std::string(size) + std::string(body) + "\r\n";
}

}  // namespace infertap::testing
