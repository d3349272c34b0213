#include "protocol/registry.h"

#include "protocol/http1/session.h"
#include "protocol/http2/session.h"
#include "protocol/websocket/session.h"

namespace infertap::protocol {
namespace {

template <class S>
std::unique_ptr<Session> recognise_as(Flow flow, std::span<const std::uint8_t> head, ExchangeSinks& sinks,
                                      const SessionSettings& settings) {
  auto session = std::make_unique<S>(sinks, settings);
  if (!session->decide(flow, head)) return nullptr;
  return session;
}

// HTTP/2 before HTTP/1: a client preface begins with "PRI * HTTP/2.0", which
// HTTP/1 would take for a request line.
std::unique_ptr<Session> recognise_http2(Flow flow, std::span<const std::uint8_t> head, ExchangeSinks& sinks,
                                         const SessionSettings& settings) {
  if (http2::detect(head) == http2::Start::not_http2) return nullptr;
  return recognise_as<http2::Session>(flow, head, sinks, settings);
}

// h2c: the upgrade request is stream 1; its response comes as HTTP/2.
std::unique_ptr<Session> upgraded_http2(const UpgradeStart& start, ExchangeSinks& sinks, const SessionSettings& settings) {
  if (start.upgrade != "h2c") return nullptr;
  auto session = std::make_unique<http2::Session>(sinks, settings);
  session->start_upgraded(start.role, start.request);
  return session;
}

// WebSocket after HTTP/1: from its first bytes only a session the agent joined
// after its upgrade (a text frame of JSON), never HTTP text.
constexpr ProtocolEntry kProtocolList[] = {
    {Protocol::http2, recognise_http2, upgraded_http2},
    {Protocol::http1, recognise_as<Http1Session>, nullptr},
    {Protocol::websocket, websocket::recognise, websocket::make_upgraded},
};
static_assert(std::size(kProtocolList) == kProtocols, "every Protocol is registered once");

}  // namespace

std::span<const ProtocolEntry> protocols() { return kProtocolList; }

std::unique_ptr<Session> recognise(Flow flow, std::span<const std::uint8_t> head, ExchangeSinks& sinks,
                                   const SessionSettings& settings) {
  for (const ProtocolEntry& entry : kProtocolList) {
    if (!entry.recognise) continue;
    if (std::unique_ptr<Session> session = entry.recognise(flow, head, sinks, settings)) return session;
  }
  return nullptr;
}

std::unique_ptr<Session> start_upgraded(const UpgradeStart& start, ExchangeSinks& sinks, const SessionSettings& settings) {
  for (const ProtocolEntry& entry : kProtocolList) {
    if (!entry.upgraded) continue;
    if (std::unique_ptr<Session> session = entry.upgraded(start, sinks, settings)) return session;
  }
  return nullptr;
}

}  // namespace infertap::protocol
