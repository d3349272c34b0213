#include "capture/event.h"

#include <algorithm>
#include <cstring>

namespace infertap::capture {

std::string_view to_string(DecodeError e) {
  switch (e) {
    case DecodeError::too_short: return "record shorter than the event header";
    case DecodeError::bad_kind: return "unknown event kind";
    case DecodeError::bad_lengths: return "captured lengths exceed the record or the transfer";
  }
  return "unknown";
}

DeliverySignal signal_of(const itap_path_event& p) {
  DeliverySignal s;
  switch (p.path_kind) {
    case ITAP_PATH_ACK: s.kind = DeliverySignal::Kind::ack; break;
    case ITAP_PATH_ARRIVED: s.kind = DeliverySignal::Kind::arrived; break;
    case ITAP_PATH_RETRANSMIT: s.kind = DeliverySignal::Kind::retransmit; break;
    default: s.kind = DeliverySignal::Kind::buf_limit; break;
  }
  s.ts_ns = p.ts_ns;
  s.sock_id = p.sock_id;
  s.seq = p.seq;
  s.window = p.window;
  s.srtt_us = p.srtt_us;
  s.value = p.value;
  return s;
}

namespace {

IoEvent::Flags flags_of(std::uint16_t f) {
  IoEvent::Flags out;
  out.tls = f & ITAP_F_TLS;
  out.new_socket = f & ITAP_F_NEW_SOCKET;
  out.eof = f & ITAP_F_EOF;
  out.eagain = f & ITAP_F_EAGAIN;
  out.partial = f & ITAP_F_PARTIAL;
  out.more = f & ITAP_F_MORE;
  out.sndbuf_full = f & ITAP_F_SNDBUF_FULL;
  out.unread = f & ITAP_F_UNREAD;
  out.peer_path = f & ITAP_F_PEER_PATH;
  return out;
}

// The kernel record's facts in the pipeline's words.
IoEvent facts_of(const itap_event& h) {
  IoEvent e;
  e.kind = h.kind == ITAP_EV_STATE ? IoEvent::Kind::state : IoEvent::Kind::data;
  e.direction = h.direction == ITAP_DIR_SEND ? IoEvent::Direction::send : IoEvent::Direction::receive;
  e.flags = flags_of(h.flags);
  e.ts_ns = h.ts_ns;
  e.enter_ns = h.enter_ns;
  e.ret = h.ret;
  e.sock_id = h.sock_id;
  e.cgroup_id = h.cgroup_id;
  e.pid = h.pid;
  e.fd = h.fd;
  e.seq_end = h.seq_end;
  e.arrived_seq = h.arrived_seq;
  e.arrived_ns = h.arrived_ns;
  e.srtt_us = h.srtt_us;
  e.peer_pid = h.peer_pid;
  e.tls_ssl = h.tls_ssl;
  e.tls_start_ns = h.tls_start_ns;
  e.tls_seq = h.tls_seq;
  e.tls_lib = h.tls_lib;
  e.family = h.family;
  e.local_port = h.local_port;
  e.remote_port = h.remote_port;
  std::memcpy(e.local_addr.data(), h.local_addr, sizeof h.local_addr);
  std::memcpy(e.remote_addr.data(), h.remote_addr, sizeof h.remote_addr);
  e.new_state = h.new_state;
  e.socket_destroyed = h.kind == ITAP_EV_STATE && h.new_state == ITAP_STATE_DESTROYED;
  if (h.family == IoEvent::kAfUnix) {
    itap_unix_ends ends{};
    std::memcpy(&ends, h.local_addr, sizeof ends);
    e.unix_ends = {ends.sock, ends.peer_sock, ends.ino};
  }
  e.comm = {h.comm, strnlen(h.comm, ITAP_COMM_LEN)};
  return e;
}

}  // namespace

void bind_held_write(std::span<std::uint8_t> record, const TlsBind& bind, bool first) {
  if (record.size() < sizeof(itap_event) || !bind.record) return;
  const itap_event& b = *bind.record;
  itap_event h;
  std::memcpy(&h, record.data(), sizeof h);
  h.sock_id = b.sock_id;
  h.ts_ns = std::max(h.ts_ns, b.ts_ns);
  h.tls_seq = b.tls_seq;
  h.family = b.family;
  h.local_port = b.local_port;
  h.remote_port = b.remote_port;
  std::memcpy(h.local_addr, b.local_addr, sizeof h.local_addr);
  std::memcpy(h.remote_addr, b.remote_addr, sizeof h.remote_addr);
  h.flags = static_cast<std::uint16_t>((h.flags & ~ITAP_F_NEW_SOCKET) | (first ? b.flags & ITAP_F_NEW_SOCKET : 0));
  if (first) {
    h.tls_start_ns = b.tls_start_ns;
    h.srtt_us = b.srtt_us;
  }
  std::memcpy(record.data(), &h, sizeof h);
}

DecodeResult decode(std::span<const std::uint8_t> record) {
  DecodeResult r;
  // Every record kind has ts_ns, sock_id and kind at the same offsets.
  if (record.size() >= sizeof(itap_path_event)) {
    const auto* p = reinterpret_cast<const itap_path_event*>(record.data());
    if (p->kind == ITAP_EV_PATH) {
      if (p->path_kind < ITAP_PATH_ACK || p->path_kind > ITAP_PATH_BUF_LIMIT) {
        r.error = DecodeError::bad_kind;
        return r;
      }
      r.signal = p;
      return r;
    }
  }
  if (record.size() < sizeof(itap_event)) {
    r.error = DecodeError::too_short;
    return r;
  }
  const auto* h = reinterpret_cast<const itap_event*>(record.data());
  if (h->kind == ITAP_EV_TLS_BIND) {
    r.tls_bind = TlsBind{h->tls_ssl, h};
    return r;
  }
  if (h->kind == ITAP_EV_EXEC || h->kind == ITAP_EV_DLOPEN) {
    r.code_signal = true;
    return r;
  }
  if (h->kind != ITAP_EV_DATA && h->kind != ITAP_EV_STATE) {
    r.error = DecodeError::bad_kind;
    return r;
  }
  const std::size_t captured = std::size_t{h->head_len} + h->tail_len;
  const std::uint64_t moved = h->ret > 0 ? static_cast<std::uint64_t>(h->ret) : 0;
  if (sizeof(itap_event) + captured + h->path_len > record.size() || captured > moved ||
      h->head_len > ITAP_HEAD_MAX || h->tail_len > ITAP_TAIL_MAX || h->path_len > ITAP_PATH_MAX) {
    r.error = DecodeError::bad_lengths;
    return r;
  }
  IoEvent ev = facts_of(*h);
  ev.head = record.subspan(sizeof(itap_event), h->head_len);
  ev.tail = record.subspan(sizeof(itap_event) + h->head_len, h->tail_len);
  ev.path = record.subspan(sizeof(itap_event) + captured, h->path_len);
  r.event = ev;
  return r;
}

}  // namespace infertap::capture
