#include "core/conn/tls_unbound.h"

namespace infertap::core {

bool UnboundTlsWrites::hold(std::uint64_t ssl, std::span<const std::uint8_t> record, TimestampNs now) {
  auto it = held_.find(ssl);
  if (it == held_.end()) {
    if (held_.size() >= kMaxConnections) return false;
    it = held_.emplace(ssl, Held{now, {}}).first;
  }
  if (it->second.records.size() >= kMaxPerConnection) return false;
  it->second.records.emplace_back(record.begin(), record.end());
  return true;
}

std::vector<std::vector<std::uint8_t>> UnboundTlsWrites::take(std::uint64_t ssl) {
  auto it = held_.find(ssl);
  if (it == held_.end()) return {};
  std::vector<std::vector<std::uint8_t>> records = std::move(it->second.records);
  held_.erase(it);
  return records;
}

std::size_t UnboundTlsWrites::expire(TimestampNs now) {
  std::size_t dropped = 0;
  for (auto it = held_.begin(); it != held_.end();) {
    if (now > it->second.since && now - it->second.since > kMaxAgeNs) {
      dropped += it->second.records.size();
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

}  // namespace infertap::core
