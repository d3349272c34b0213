// Decoded view of one ring-buffer record (no copy: spans point into the ring).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "capture/abi_check.h"

namespace infertap::capture {

// What the kernel side can copy of one call: its first and last bytes.
inline constexpr std::uint32_t kMaxHeadBytes = ITAP_HEAD_MAX;
inline constexpr std::uint32_t kMaxTailBytes = ITAP_TAIL_MAX;

// One socket call or TCP state change of a followed socket, in the
// pipeline's own words: the kernel record's facts, copied out of it (the ABI
// stays in capture/), and the captured bytes as spans into the ring.
struct IoEvent {
  enum class Kind : std::uint8_t { data, state };
  enum class Direction : std::uint8_t { send, receive };
  // What the kernel noted about the call.
  struct Flags {
    bool tls = false;          // a TLS library call's plaintext, or a TLS socket's EOF or refused send
    bool new_socket = false;   // the kernel side saw this socket for the first time
    bool eof = false;          // a receive returned 0: the peer closed its side
    bool eagain = false;       // a call refused for lack of data or buffer space
    bool partial = false;      // a send moved fewer bytes than asked
    bool more = false;         // a send with MSG_MORE: the kernel may hold its bytes for more
    bool sndbuf_full = false;  // unix: the send left its buffer full
    bool unread = false;       // state: TCP closed with received bytes still unread
    bool peer_path = false;    // unix: `path` is the peer's (this socket has no name)
  };
  // AF_UNIX: the two ends the kernel knows (joined by socket, not address).
  struct UnixEnds {
    std::uint64_t sock = 0;       // this socket (= sock_id)
    std::uint64_t peer_sock = 0;  // its peer (0: not connected)
    std::uint32_t ino = 0;        // this socket's inode
  };

  Kind kind = Kind::data;
  Direction direction = Direction::send;
  Flags flags;
  std::uint64_t ts_ns = 0;     // the call's exit (CLOCK_MONOTONIC)
  std::uint64_t enter_ns = 0;  // its entry (0: not measured)
  std::int64_t ret = 0;        // bytes moved, or -errno
  std::uint64_t sock_id = 0;
  std::uint64_t cgroup_id = 0;
  std::uint32_t pid = 0;
  std::int32_t fd = -1;
  std::uint32_t seq_end = 0;      // TCP sequence after the call (unix: the agent's byte count)
  std::uint32_t arrived_seq = 0;  // an arrival the receive carries (unix sends: bytes unread by the peer)
  std::uint64_t arrived_ns = 0;   // ... and its time (0: none)
  std::uint32_t srtt_us = 0;
  std::uint32_t peer_pid = 0;     // unix first event: the peer's process (0: unknown)
  std::uint64_t tls_ssl = 0;      // TLS: the library's connection object
  std::uint64_t tls_start_ns = 0; // TLS: the socket's first handshake record (0: joined later)
  std::uint32_t tls_seq = 0;      // TLS: TCP sequence after the ciphertext call that carried these bytes (0: not seen)
  std::uint16_t tls_lib = 0;      // TLS: which attached library made the call (capture's table)
  std::uint16_t family = 0;       // AF_INET / AF_INET6 / AF_UNIX
  std::uint16_t local_port = 0, remote_port = 0;
  std::array<std::uint8_t, 16> local_addr{}, remote_addr{};  // IPv4 in the first 4 bytes
  std::uint8_t new_state = 0;     // state events: the TCP state entered
  bool socket_destroyed = false;  // state events: the kernel freed the socket
  UnixEnds unix_ends;             // AF_UNIX only
  std::string_view comm;
  std::span<const std::uint8_t> head;  // first bytes moved by the call
  std::span<const std::uint8_t> tail;  // last bytes moved by the call
  // AF_UNIX first event: the socket's path (sun_path bytes; an abstract name
  // starts with a NUL), its own or, with flags.peer_path, its peer's.
  std::span<const std::uint8_t> path;

  // Bytes moved by the call (0 for errors and state events).
  std::uint64_t bytes() const { return ret > 0 ? static_cast<std::uint64_t>(ret) : 0; }
  // Bytes moved but not captured (between head and tail).
  std::uint64_t hole() const {
    const std::uint64_t captured = head.size() + tail.size();
    return bytes() > captured ? bytes() - captured : 0;
  }
  bool tls() const { return flags.tls; }
  bool is_unix() const { return family == kAfUnix; }
  static constexpr std::uint16_t kAfUnix = 1;  // AF_UNIX
};

// A TLS write encrypted into memory reached its socket: the record of its
// ciphertext's send (ITAP_EV_TLS_BIND), for the writes held until it came.
struct TlsBind {
  std::uint64_t ssl = 0;  // the library's connection object the held writes belong to
  const itap_event* record = nullptr;  // the bind's ring record: valid during the call that decoded it
};
// Gives a held TLS write (its whole ring record, as the pipeline kept it) the
// socket, time and sequence of the send that bound it; `first`: the first
// write of that socket (it carries the socket's first-event facts).
void bind_held_write(std::span<std::uint8_t> record, const TlsBind& bind, bool first);

// A delivery signal of a followed socket: where its bytes are after the send,
// what the path did to them. A userspace value (not the kernel record): the
// kernel sends most arrivals riding on the read that follows them.
struct DeliverySignal {
  enum class Kind : std::uint8_t {
    ack,         // the peer's kernel acknowledged up to `seq`, or its window closed/opened
    arrived,     // bytes up to `seq` were queued on a receiving socket
    retransmit,  // the segment starting at `seq` was sent again
    buf_limit,   // the socket hit the protocol's memory limit (`value`: bytes allocated)
  };
  Kind kind = Kind::ack;
  std::uint64_t ts_ns = 0;
  std::uint64_t sock_id = 0;
  std::uint32_t seq = 0;
  std::uint32_t window = 0;   // ack: the window the peer advertised, scaled
  std::uint32_t srtt_us = 0;  // 0: not reported
  std::uint64_t value = 0;
};

// The arrival a receive event carries (itap_event.arrived_ns), if any.
inline std::optional<DeliverySignal> carried_arrival(const IoEvent& event) {
  if (!event.arrived_ns) return std::nullopt;
  DeliverySignal s;
  s.kind = DeliverySignal::Kind::arrived;
  s.ts_ns = event.arrived_ns;
  s.sock_id = event.sock_id;
  s.seq = event.arrived_seq;
  return s;
}

// The signal a delivery-signal record reports.
DeliverySignal signal_of(const itap_path_event& record);

enum class DecodeError : std::uint8_t { too_short, bad_kind, bad_lengths };
std::string_view to_string(DecodeError e);

struct DecodeResult {
  std::optional<IoEvent> event;     // ITAP_EV_DATA / ITAP_EV_STATE
  const itap_path_event* signal = nullptr;  // ITAP_EV_PATH (signal_of() reads it)
  std::optional<TlsBind> tls_bind;          // ITAP_EV_TLS_BIND
  bool code_signal = false;  // ITAP_EV_EXEC / ITAP_EV_DLOPEN: for the TLS library finder, nothing to decode
  DecodeError error{};
};

// Validates a raw record: size covers header and both captured spans, kind is
// known (data/state events, delivery signals, TLS binds), head/tail lengths
// do not exceed what the call moved, a unix path fits sun_path.
DecodeResult decode(std::span<const std::uint8_t> record);

}  // namespace infertap::capture
