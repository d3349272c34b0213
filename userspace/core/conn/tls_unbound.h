// TLS writes whose socket is not known yet. A library that encrypts into
// memory (Node.js) returns from SSL_write before any ciphertext moves: its
// event loop sends it later, and that send tells the kernel side which socket
// the TLS connection object (SSL*) rides on (capture::TlsBind). Until then its
// writes wait here, copied, bounded in count and age.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/types.h"

namespace infertap::core {

class UnboundTlsWrites {
 public:
  static constexpr std::size_t kMaxConnections = 4096;
  static constexpr std::size_t kMaxPerConnection = 256;
  // A write whose ciphertext never went out this long is not waiting for its
  // event loop: the connection failed.
  static constexpr TimestampNs kMaxAgeNs = 10'000'000'000ull;

  // Copies the record of a write that has no socket. False when a bound was
  // hit: the record is not kept.
  bool hold(std::uint64_t ssl, std::span<const std::uint8_t> record, TimestampNs now);
  // The writes held for `ssl`, oldest first; none are kept after.
  std::vector<std::vector<std::uint8_t>> take(std::uint64_t ssl);
  // Drops what waited longer than kMaxAgeNs. Returns the records dropped.
  std::size_t expire(TimestampNs now);
  std::size_t connections() const { return held_.size(); }

 private:
  struct Held {
    TimestampNs since = 0;
    std::vector<std::vector<std::uint8_t>> records;
  };
  std::unordered_map<std::uint64_t, Held> held_;
};

}  // namespace infertap::core
