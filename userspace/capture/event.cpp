#include "capture/event.h"

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
    r.tls_bind = h;
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
  IoEvent ev;
  ev.header = h;
  ev.head = record.subspan(sizeof(itap_event), h->head_len);
  ev.tail = record.subspan(sizeof(itap_event) + h->head_len, h->tail_len);
  ev.path = record.subspan(sizeof(itap_event) + captured, h->path_len);
  r.event = ev;
  return r;
}

}  // namespace infertap::capture
