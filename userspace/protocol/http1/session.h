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

#include "protocol/encoding/decoder.h"
#include "protocol/exchange.h"
#include "protocol/http1/parser.h"
#include "protocol/ndjson/parser.h"
#include "protocol/payload/declared.h"
#include "protocol/sse/parser.h"
#include "protocol/stream.h"

namespace infertap::protocol {

// The role a connection's first bytes give the process that moved them:
// server when it receives a request or sends a response (or an event stream
// joined mid-way), client the other way round; unknown when they are not
// HTTP/1.
Role role_from_first_bytes(Flow flow, std::span<const std::uint8_t> head);

class Http1Session {
 public:
  // `request_body_head`: bytes of each request body kept for the interpreter;
  // `formats`: declared formats, first match wins (they outlive the session).
  Http1Session(ExchangeSink& sink, std::size_t request_body_head, const DecoderLimits& decoder_limits = {},
               const DeclaredFormats* formats = nullptr);
  Http1Session(const Http1Session&) = delete;
  Http1Session& operator=(const Http1Session&) = delete;

  // The first piece with bytes decides the role. Returns false when they are
  // not HTTP/1: nothing is parsed on this connection then.
  bool decide(Flow flow, std::span<const std::uint8_t> head);
  Role role() const { return role_; }
  // Whether `flow` still has a parser taking bytes.
  bool accepts(Flow flow) const;
  // Does `flow` carry the responses (the body a stream is made of)?
  bool carries_responses(Flow flow) const;

  void feed(Flow flow, const Piece& piece);
  // `n` bytes of `flow` never reached userspace (lost before its next piece).
  void gap(Flow flow, std::uint64_t n, TimestampNs ts);
  // `flow` ended (EOF received, or this side shut down its sending).
  void end(Flow flow, TimestampNs ts);
  // Both directions end. A response still open afterwards ends `cut_short`.
  void close(TimestampNs ts);
  // Drops the response in progress (`cut_short`); the connection goes on.
  void abandon_response(TimestampNs ts);
  bool response_open() const { return response_.has_value(); }

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
  // Where the body bytes being handed to the event parser sit in the stream,
  // so that an event they complete gets the position of its last byte.
  struct BodySpan {
    std::uint64_t body_offset = 0;
    std::uint64_t length = 0;
    std::uint64_t position = 0;
  };
  // A streamed application/json body (or one of no type) is held until its
  // first bytes say whether it is JSON lines: a whole one-line object, then
  // another line. Its response is announced then, and what it held is fed on
  // as it came (each piece's bytes, position and time).
  struct Sniff {
    struct Held {
      std::string bytes;
      std::uint64_t position = 0;
      TimestampNs ts = 0;
      std::uint64_t gap = 0;  // a hole instead of bytes
    };
    ResponseInfo info;
    std::optional<RequestInfo> request;  // kept: the queue may move on before the decision
    std::vector<Held> held;
    std::string text;  // the body's first bytes, up to the first hole
  };
  struct OpenResponse {
    OpenResponse() {}  // user-provided: clang needs it to emplace a nested type with member initialisers
    bool event_stream = false;
    bool joined_midstream = false;
    std::uint64_t body_offset = 0;  // body bytes so far, holes included
    std::optional<SseParser> sse;
    std::optional<NdjsonParser> ndjson;
    std::optional<BodySpan> span;       // the bytes being fed
    std::optional<BodySpan> last_span;  // the last bytes fed (the body's end completes a last line)
    ContentEncoding encoding = ContentEncoding::identity;
    std::unique_ptr<BodyDecoder> decoder;  // set while a compressed body decodes
    std::unique_ptr<Sniff> sniff;          // set while a JSON body's kind is undecided
  };
  // Decoded bytes of a compressed body go to its event parser.
  struct DecodedToEvents : BodyDecoder::Output {
    OpenResponse* open = nullptr;
    TimestampNs ts = 0;
    void decoded(std::span<const std::uint8_t> bytes) override;
  };
  enum class Events : std::uint8_t { none, sse, ndjson, sniff };

  Direction& direction(Flow flow) { return flow == Flow::outbound ? outbound_ : inbound_; }
  const Direction& direction(Flow flow) const { return flow == Flow::outbound ? outbound_ : inbound_; }
  void start_response(const ResponseHead& head, TimestampNs ts);
  Events events_of(const ResponseHead& head, const ResponseInfo& info) const;
  void begin_events(OpenResponse& open, ResponseInfo& info, EventFraming framing, bool joined);
  void end_response(TimestampNs ts, ResponseEnd how);
  void on_framed_event(std::string_view type, std::string_view data, TimestampNs ts, TimestampNs first_byte_ts,
                       std::uint64_t offset, std::uint32_t wire_bytes, bool truncated);
  void body_to_events(OpenResponse& open, std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts);
  void gap_to_events(OpenResponse& open, std::uint64_t n, TimestampNs ts);
  void feed_events(OpenResponse& open, std::span<const std::uint8_t> bytes, TimestampNs ts);
  void sniff_body(OpenResponse& open, std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts);
  void sniff_gap(OpenResponse& open, std::uint64_t n, TimestampNs ts);
  void decide_sniff(OpenResponse& open, bool json_lines);
  void stop_decoding(OpenResponse& open, ExchangeSink::Undecodable why);

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
};

}  // namespace infertap::protocol
