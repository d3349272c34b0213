// HTTP/1.x over the two byte streams of one connection: which end the traced
// process is on, a parser per direction placed by that role, responses paired
// with the requests they answer (in order, as HTTP/1.1 pipelines them), and
// the events of each streamed body: SSE for text/event-stream, one per line
// for newline-delimited JSON (application/x-ndjson, application/jsonlines, a
// streamed application/json body whose first bytes are JSON lines), or as a
// declared format that covers the response says (protocol/payload/declared.h).
//
//   outbound/inbound pieces --> Http1Session --> ExchangeSink
//
// The session knows bytes, positions and times only: which capture made the
// pieces, and what a TCP sequence is, belong to the caller.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "protocol/body/events.h"
#include "protocol/encoding/decoder.h"
#include "protocol/exchange.h"
#include "protocol/http1/parser.h"
#include "protocol/payload/declared.h"
#include "protocol/session.h"
#include "protocol/stream.h"

namespace infertap::protocol {

// The role a connection's first bytes give the process that moved them:
// server when it receives a request or sends a response (or an event stream
// joined mid-way), client the other way round; unknown when they are not
// HTTP/1.
Role role_from_first_bytes(Flow flow, std::span<const std::uint8_t> head);

class Http1Session : public Session {
 public:
  // The session of a connection: its responses, in turn, are exchange
  // kExchange of `sinks`.
  Http1Session(ExchangeSinks& sinks, const SessionSettings& settings);
  // One sink for every response (tests, fuzzers).
  // `request_body_head`: bytes of each request body kept for the interpreter;
  // `formats`: declared formats, first match wins (they outlive the session).
  Http1Session(ExchangeSink& sink, std::size_t request_body_head, const DecoderLimits& decoder_limits = {},
               const DeclaredFormats* formats = nullptr);
  Http1Session(const Http1Session&) = delete;
  Http1Session& operator=(const Http1Session&) = delete;
  static constexpr std::uint64_t kExchange = 0;

  Protocol protocol() const override { return Protocol::http1; }
  // The first piece with bytes decides the role. Returns false when they are
  // not HTTP/1: nothing is parsed on this connection then.
  bool decide(Flow flow, std::span<const std::uint8_t> head) override;
  Role role() const override { return role_; }
  // Whether `flow` still has a parser taking bytes.
  bool accepts(Flow flow) const override;
  // Does `flow` carry the responses (the body a stream is made of)?
  bool carries_responses(Flow flow) const override;

  void feed(Flow flow, const Piece& piece) override;
  // `n` bytes of `flow` never reached userspace (lost before its next piece).
  void gap(Flow flow, std::uint64_t n, TimestampNs ts) override;
  // `flow` ended (EOF received, or this side shut down its sending).
  void end(Flow flow, TimestampNs ts) override;
  // Both directions end. A response still open afterwards ends `cut_short`.
  void close(TimestampNs ts) override;
  // Drops the response in progress (`cut_short`); the connection goes on.
  void abandon(std::uint64_t id, TimestampNs ts) override;
  void abandon_response(TimestampNs ts);
  bool response_open() const { return response_.has_value(); }
  // A `101 Switching Protocols` ended HTTP/1 on this connection (the parsers
  // take no more bytes): what the next protocol starts from.
  bool switched_protocols() const { return upgrade_.has_value(); }
  const UpgradeStart* upgrade() const override { return upgrade_ ? &*upgrade_ : nullptr; }

 private:
  struct Direction {
    std::optional<HttpParser> parser;
    bool ended = false;
  };
  class RequestSide : public HttpMessageSink {
   public:
    explicit RequestSide(Http1Session& s) : s_(s) {}
    void on_request_head(const RequestHead& head, TimestampNs ts) override;
    void on_body(std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts) override;
    void on_body_gap(std::uint64_t n, TimestampNs ts) override;
    void on_message_end(TimestampNs ts) override;
    void on_error(ParseError e, std::string_view detail) override;

   private:
    Http1Session& s_;
  };
  class ResponseSide : public HttpMessageSink {
   public:
    explicit ResponseSide(Http1Session& s) : s_(s) {}
    void on_response_head(const ResponseHead& head, TimestampNs ts) override;
    void on_body(std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts) override;
    void on_body_gap(std::uint64_t n, TimestampNs ts) override;
    void on_message_end(TimestampNs ts) override;
    void on_error(ParseError e, std::string_view detail) override;

   private:
    Http1Session& s_;
  };
  struct OpenResponse {
    OpenResponse() {}  // user-provided: clang needs it to emplace a nested type with member initialisers
    bool joined_midstream = false;
    std::unique_ptr<BodyEvents> events;  // its body's events (protocol/body/events.h)
  };

  Direction& direction(Flow flow) { return flow == Flow::outbound ? outbound_ : inbound_; }
  const Direction& direction(Flow flow) const { return flow == Flow::outbound ? outbound_ : inbound_; }
  void start_response(const ResponseHead& head, TimestampNs ts);
  void switch_protocols(const ResponseHead& head, TimestampNs ts);
  // A connection's session: the piece being fed reaches the exchange's sink.
  void touch() {
    if (sinks_) sinks_->exchange(kExchange);
  }
  void end_response(TimestampNs ts, ResponseEnd how);

  ExchangeSinks* sinks_ = nullptr;
  ExchangeSink& sink_;
  const std::size_t request_body_head_;
  const DecoderLimits decoder_limits_;
  const DeclaredFormats* formats_;
  Role role_ = Role::unknown;
  RequestSide request_side_{*this};
  ResponseSide response_side_{*this};
  Direction outbound_, inbound_;
  std::deque<RequestInfo> requests_;
  std::optional<OpenResponse> response_;
  std::uint64_t responses_ = 0;
  std::optional<UpgradeStart> upgrade_;
};

}  // namespace infertap::protocol
