// The one interface every protocol session implements, and what a session is
// handed. A connection owns exactly one session and knows no protocol by
// name: the registration list (protocol/registry.h) recognises a protocol
// from a connection's first bytes, and a session that meets an upgrade
// (HTTP/1.1 `101 Switching Protocols`: h2c, websocket) reports it, and the
// list makes the next one.
//
//   pieces (stream.h) --> Session --> ExchangeSinks --> ExchangeSink per exchange
//
// A session knows bytes, positions and times only: which capture made the
// pieces, and what a TCP sequence is, belong to the caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "protocol/exchange.h"
#include "protocol/stream.h"

namespace infertap::protocol {

// What went wrong in a session, counted by the caller per protocol.
enum class SessionProblem : std::uint8_t {
  desynchronised,          // a hole swallowed a frame header: the direction lost its frames
  resynchronised,          // a later piece began with a provable frame header: frames found again
  header_block_lost,       // a header block could not be decoded (hole, bound, HPACK state unknown)
  header_block_too_large,
  exchanges_over_limit,    // a new exchange beyond the session's bound was not followed
  frame_error,             // a frame its protocol does not allow
  message_too_large,       // a message beyond the session's bound: its meaning was not read
  undecodable,             // a compressed message could not be inflated (the direction's context is lost)
};
inline constexpr std::size_t kSessionProblems = 8;
std::string_view to_string(SessionProblem p);

// Where a session's exchanges go: one ExchangeSink per exchange id the
// session opens (HTTP/1: one sink for the connection's responses in turn;
// HTTP/2: each stream id; websocket: each response). Ids are the session's
// own; the sinks of one connection are shared across an upgrade, so a session
// started by an upgrade uses ids its predecessor did not (kUpgradedIdBase up).
class ExchangeSinks {
 public:
  virtual ~ExchangeSinks() = default;
  // The sink of exchange `id`, opened on its first use; null: not followed.
  virtual ExchangeSink* exchange(std::uint64_t id) = 0;
  // Exchange `id` is over: its sink heard its last call.
  virtual void exchange_closed(std::uint64_t id) = 0;
  virtual void on_problem(Protocol protocol, SessionProblem problem) = 0;
};

// What a session needs besides its sinks, the same for every protocol.
struct SessionSettings {
  std::size_t request_body_head = 0;      // bytes of each request's body kept for the interpreter
  DecoderLimits decoder_limits{};         // compressed bodies and messages
  const DeclaredFormats* formats = nullptr;  // declared formats, first match wins (outlive the session)
};

// What an upgrade hands the next protocol: taken from the HTTP/1.1 exchange
// that switched (the request with `Upgrade:`, the `101` that accepted it).
struct UpgradeStart {
  Role role = Role::unknown;
  const RequestInfo* request = nullptr;  // the request the 101 answered (null: not seen); valid during start()
  std::string upgrade;     // the 101's `Upgrade` token, lower-cased ("h2c", "websocket")
  std::string extensions;  // the 101's `Sec-WebSocket-Extensions`, lower-cased, capped ("" when absent)
  std::string protocol;    // the 101's `Sec-WebSocket-Protocol`, capped ("" when absent)
  TimestampNs ts = 0;      // the piece that completed the 101 head
  // Stream positions where the new protocol's bytes begin, per direction:
  // just past the 101 head (responses' direction) and past the upgrade
  // request (requests' direction).
  std::uint64_t outbound_position = 0;
  std::uint64_t inbound_position = 0;
};

class Session {
 public:
  virtual ~Session() = default;

  virtual Protocol protocol() const = 0;
  // Which end the traced process is on (unknown until the first bytes decided it).
  virtual Role role() const = 0;
  // Whether `flow` still takes bytes.
  virtual bool accepts(Flow flow) const = 0;
  // Does `flow` carry the responses (the body a stream is made of)?
  virtual bool carries_responses(Flow flow) const = 0;

  // The first piece with bytes: false when they are not this protocol's.
  virtual bool decide(Flow flow, std::span<const std::uint8_t> head) = 0;
  virtual void feed(Flow flow, const Piece& piece) = 0;
  // `n` bytes of `flow` never reached userspace (lost before its next piece).
  virtual void gap(Flow flow, std::uint64_t n, TimestampNs ts) = 0;
  // `flow` ended (EOF received, or this side shut down its sending).
  virtual void end(Flow flow, TimestampNs ts) = 0;
  // Both directions end. An exchange still open ends `cut_short`.
  virtual void close(TimestampNs ts) = 0;
  // Ends exchange `id` (`cut_short`); the connection goes on.
  virtual void abandon(std::uint64_t id, TimestampNs ts) = 0;

  // After a feed: this session switched the connection to another protocol
  // (its parsers take no more bytes). Set once; the caller asks the
  // registration list for the next session and feeds it the rest.
  virtual const UpgradeStart* upgrade() const { return nullptr; }
};

// Ids a session started by an upgrade begins its exchanges at (the session
// before it used ids below).
inline constexpr std::uint64_t kUpgradedIdBase = std::uint64_t{1} << 32;

}  // namespace infertap::protocol
