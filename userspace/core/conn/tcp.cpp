#include "core/conn/tcp.h"

#include <algorithm>

namespace infertap::core {

void note_signal(TcpContext& tcp, const capture::DeliverySignal& s) {
  using Kind = capture::DeliverySignal::Kind;
  tcp.signals = true;
  if (s.srtt_us) {
    tcp.srtt_us = s.srtt_us;
    tcp.srtt_max_us = std::max(tcp.srtt_max_us, s.srtt_us);
  }
  if (s.kind == Kind::retransmit) {
    ++tcp.retransmits;
    if (tcp.retransmit_ns.size() < TcpContext::kMaxEvidence) tcp.retransmit_ns.push_back(s.ts_ns);
  } else if (s.kind == Kind::buf_limit) {
    ++tcp.buf_limit;
  }
}

void track_window(TimestampNs& since, const capture::DeliverySignal& ack, TcpContext* tcp) {
  if (ack.window == 0) {
    if (!since) since = ack.ts_ns;
    return;
  }
  if (!since) return;
  if (tcp) {
    ++tcp->zero_window_episodes;
    tcp->zero_window_ns += ack.ts_ns - std::min(ack.ts_ns, since);
    if (tcp->zero_window.size() < TcpContext::kMaxEvidence) tcp->zero_window.emplace_back(since, ack.ts_ns);
  }
  since = 0;
}

}  // namespace infertap::core
