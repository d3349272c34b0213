// The registration list: every protocol a connection can speak, in the order
// a connection's first bytes are offered to them, and the protocols an
// HTTP/1.1 upgrade can switch to. A new protocol is one entry here and its
// own folder; the connection above never names one.
#pragma once

#include <memory>
#include <span>

#include "protocol/session.h"

namespace infertap::protocol {

struct ProtocolEntry {
  Protocol protocol;
  // A session for a connection whose first bytes (of `flow`) are this
  // protocol's, its role decided; null when they are not.
  std::unique_ptr<Session> (*recognise)(Flow flow, std::span<const std::uint8_t> head, ExchangeSinks& sinks,
                                        const SessionSettings& settings);
  // A session an upgrade switches to; null when `start.upgrade` is not this
  // protocol's token (or the protocol is never an upgrade's).
  std::unique_ptr<Session> (*upgraded)(const UpgradeStart& start, ExchangeSinks& sinks, const SessionSettings& settings);
};

std::span<const ProtocolEntry> protocols();

// The first protocol, in list order, that recognises the first bytes.
std::unique_ptr<Session> recognise(Flow flow, std::span<const std::uint8_t> head, ExchangeSinks& sinks,
                                   const SessionSettings& settings);
// The protocol an upgrade switched to; null when none of the list speaks it
// (the connection's bytes after the switch stay unread).
std::unique_ptr<Session> start_upgraded(const UpgradeStart& start, ExchangeSinks& sinks, const SessionSettings& settings);

}  // namespace infertap::protocol
