// Decoded view of one ring-buffer record (no copy: spans point into the ring).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "capture/abi_check.h"

namespace infertap::capture {

struct IoEvent {
  const itap_event* header = nullptr;
  std::span<const std::uint8_t> head;  // first head_len bytes moved by the syscall
  std::span<const std::uint8_t> tail;  // last tail_len bytes moved by the syscall
  // AF_UNIX first event: the socket's path (sun_path bytes; an abstract name
  // starts with a NUL), its own or, with ITAP_F_PEER_PATH, its peer's.
  std::span<const std::uint8_t> path;

  const itap_event& h() const { return *header; }
  // Bytes moved by the syscall (0 for errors and state events).
  std::uint64_t bytes() const { return header->ret > 0 ? static_cast<std::uint64_t>(header->ret) : 0; }
  // Bytes moved but not captured (between head and tail).
  std::uint64_t hole() const {
    const std::uint64_t captured = head.size() + tail.size();
    return bytes() > captured ? bytes() - captured : 0;
  }
  std::string_view comm() const { return {header->comm, strnlen(header->comm, ITAP_COMM_LEN)}; }
  // A TLS library call (plaintext; see ITAP_F_TLS), or a TLS socket's EOF or refused send.
  bool tls() const { return (header->flags & ITAP_F_TLS) != 0; }
  bool is_unix() const { return header->family == kAfUnix; }
  // AF_UNIX: the socket's identity (local_addr and remote_addr).
  itap_unix_ends unix_ends() const {
    itap_unix_ends ends{};
    std::memcpy(&ends, header->local_addr, sizeof ends);
    return ends;
  }
  static constexpr std::uint16_t kAfUnix = 1;  // AF_UNIX
};

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
  const itap_event& h = event.h();
  if (!h.arrived_ns) return std::nullopt;
  DeliverySignal s;
  s.kind = DeliverySignal::Kind::arrived;
  s.ts_ns = h.arrived_ns;
  s.sock_id = h.sock_id;
  s.seq = h.arrived_seq;
  return s;
}

// The signal a delivery-signal record reports.
DeliverySignal signal_of(const itap_path_event& record);

enum class DecodeError : std::uint8_t { too_short, bad_kind, bad_lengths };
std::string_view to_string(DecodeError e);

struct DecodeResult {
  std::optional<IoEvent> event;     // ITAP_EV_DATA / ITAP_EV_STATE
  const itap_path_event* signal = nullptr;  // ITAP_EV_PATH (signal_of() reads it)
  const itap_event* tls_bind = nullptr;     // ITAP_EV_TLS_BIND
  bool code_signal = false;  // ITAP_EV_EXEC / ITAP_EV_DLOPEN: for the TLS library finder, nothing to decode
  DecodeError error{};
};

// Validates a raw record: size covers header and both captured spans, kind is
// known (data/state events, delivery signals, TLS binds), head/tail lengths
// do not exceed what the call moved, a unix path fits sun_path.
DecodeResult decode(std::span<const std::uint8_t> record);

}  // namespace infertap::capture
