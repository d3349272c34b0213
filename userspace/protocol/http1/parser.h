// HTTP/1.x message framing over a captured byte stream with holes.
//
// Why hand-written and not llhttp/http-parser: the capture copies only the head
// and tail of each syscall, so the parser must accept "n bytes not captured"
// and keep framing across the hole (skip n bytes of a chunk, resynchronise on
// the next chunk-size line when a hole hits framing). No maintained HTTP parser
// has a notion of missing bytes; all of them fail or desynchronise.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "protocol/framing.h"
#include "protocol/stream.h"

namespace infertap::protocol {

struct RequestHead {
  std::string method;        // "POST"
  std::string target;        // "/v1/chat/completions" (query string kept, capped)
  std::string host;          // Host header, capped
  std::string content_type;  // lower-cased, capped
  std::string user_agent;    // capped
  BodyFraming framing = BodyFraming::none;
  std::uint64_t content_length = 0;
  int version_minor = 1;  // HTTP/1.x
};

struct ResponseHead {
  int status = 0;
  std::string content_type;  // lower-cased, parameters kept ("text/event-stream; charset=utf-8")
  std::string content_encoding;  // lower-cased, capped; "" when absent
  BodyFraming framing = BodyFraming::none;
  std::uint64_t content_length = 0;
  bool event_stream = false;  // media type is text/event-stream
  bool keep_alive = true;
  int version_minor = 1;
  // True when the parser joined a connection in the middle of a response body
  // (agent started after the response head went by). status/content_type are
  // then unknown; framing is the parser's inference from the bytes.
  bool joined_midstream = false;
  // Joined mid-way at a chunk whose data opens a JSON object: a stream of
  // JSON lines (Ollama's) more likely than not.
  bool joined_json = false;
  // What names the serving software: the `Server` header and any
  // `x-*-version` header, as "server=vllm/0.6.3; x-vllm-version=0.6.3"
  // (names lower-cased, each value capped, at most kMaxVersionFields; other
  // header values are never kept). "" when none.
  std::string server_version;
  // A 101's protocol switch: `Upgrade` (lower-cased), the negotiated
  // `Sec-WebSocket-Extensions` (lower-cased) and `Sec-WebSocket-Protocol`,
  // each capped at kMaxFieldValue; "" when absent. Kept for 101 only.
  std::string upgrade, websocket_extensions, websocket_protocol;
  // Stream position just past the head's blank line.
  std::uint64_t head_end_position = 0;
  static constexpr std::size_t kMaxVersionFields = 3;
  static constexpr std::size_t kMaxVersionValue = 64;
};


// What a head's fields say about its body's framing and connection reuse.
struct HeadFields {
  bool has_length = false;
  std::uint64_t length = 0;
  bool has_te = false;
  bool te_chunked_last = false;
  bool conn_close = false;
  bool conn_keep_alive = false;
};

// Callbacks of one direction of a connection. Body bytes are de-chunked.
class HttpMessageSink {
 public:
  virtual ~HttpMessageSink() = default;
  virtual void on_request_head(const RequestHead&, TimestampNs) {}
  virtual void on_response_head(const ResponseHead&, TimestampNs) {}
  // `position`: the stream position of bytes[0] (HttpParser::position() counts).
  virtual void on_body(std::span<const std::uint8_t> /*bytes*/, std::uint64_t /*position*/, TimestampNs) {}
  // n body bytes went by without being captured (exact when the hole was inside
  // chunk data, an upper bound when it also covered framing).
  virtual void on_body_gap(std::uint64_t /*n*/, TimestampNs) {}
  // The message is complete: ts is the time of the piece that held its last byte.
  virtual void on_message_end(TimestampNs) {}
  virtual void on_error(ParseError, std::string_view /*detail*/) {}
};

// Incremental parser for one direction. Feed pieces in stream order.
class HttpParser {
 public:
  enum class Mode : std::uint8_t { request, response };

  // Caps that bound memory per connection (abuse: endless headers).
  static constexpr std::size_t kMaxHeadBytes = 16 * 1024;
  static constexpr std::size_t kMaxFieldValue = 256;

  HttpParser(Mode mode, HttpMessageSink& sink);

  void feed(std::span<const std::uint8_t> bytes, TimestampNs ts);
  void gap(std::uint64_t n, TimestampNs ts);
  // The direction ended (EOF, FIN, close): ends an until_close body with
  // on_message_end, reports truncated_message for anything else in flight.
  void close(TimestampNs ts);

  // The next response answers a HEAD request (no body whatever its headers say).
  // Responses to requests are matched in order by the caller.
  void expect_head_response();

  Mode mode() const { return mode_; }
  // True while between messages or inside one whose framing is known.
  bool synced() const;
  // Bytes the parser has consumed, including gaps.
  std::uint64_t position() const { return position_; }

 private:
  // Implementation-defined state (no heap allocation per connection beyond
  // small strings).
  enum class State : std::uint8_t {
    join,            // nothing parsed yet: first bytes may be a start line or mid-body
    start,           // between messages
    head,            // accumulating a request/response head
    body_length,     // Content-Length body, remaining_ bytes left
    chunk_size,      // reading a chunk-size line
    chunk_data,      // inside chunk data, remaining_ bytes left
    chunk_data_end,  // expecting the CRLF after chunk data
    trailers,        // trailer section after the last chunk
    until_close,     // body runs until close()
    resync_start,    // lost: looking for a start line (or, for responses, a body we can infer)
    resync_chunk,    // chunk framing lost: looking for a chunk-size line
    tunnel,          // after 101 Switching Protocols: bytes are not HTTP/1
    closed,
  };
  enum class Verdict : std::uint8_t { need_more, reject, start_line, chunk_line, sse_fields };
  struct Probe {
    Verdict verdict = Verdict::reject;
    std::size_t skip = 0;  // leading CR/LF bytes before the candidate
    bool event_stream = false;
    bool json = false;  // the chunk's data opens a JSON object
  };

  using Byte = std::uint8_t;
  // `base`: stream position of p.
  const Byte* run(const Byte* p, const Byte* end, std::uint64_t base, TimestampNs ts, bool piece_start);
  const Byte* on_head_bytes(const Byte* p, const Byte* end, TimestampNs ts);
  const Byte* on_chunk_size_bytes(const Byte* p, const Byte* end, TimestampNs ts);
  const Byte* on_trailer_bytes(const Byte* p, const Byte* end, TimestampNs ts);
  const Byte* search(const Byte* p, const Byte* end, TimestampNs ts, bool piece_start);
  void accept(const Probe& probe, TimestampNs ts);
  Probe evaluate(std::string_view s, bool mid_piece) const;
  void parse_head(TimestampNs ts);
  bool parse_header_line(std::string_view line, HeadFields& fields);
  std::optional<BodyFraming> response_framing(const HeadFields& fields);
  std::optional<BodyFraming> request_framing(const HeadFields& fields);
  void enter_body(BodyFraming framing, std::uint64_t length, TimestampNs ts);
  void parse_chunk_size_line(std::string_view line);
  void drop(std::uint64_t n, TimestampNs ts);
  void give_up_join();
  void end_message(TimestampNs ts);
  void lose_chunk_framing(ParseError e, std::string_view detail);
  void lose_sync(ParseError e, std::string_view detail);

  Mode mode_;
  HttpMessageSink& sink_;
  std::uint64_t position_ = 0;
  State state_ = State::join;
  bool expect_head_response_ = false;
  bool not_http_reported_ = false;
  bool start_line_checked_ = false;
  bool saw_cr_ = false;              // chunk_data_end: CR seen, LF expected
  bool trailer_line_has_colon_ = false;
  bool trailer_last_cr_ = false;
  std::size_t trailer_line_len_ = 0;
  std::size_t trailer_total_ = 0;
  std::size_t line_start_ = 0;       // head: offset of the current line in buf_
  std::uint64_t remaining_ = 0;      // body or chunk bytes left
  std::uint64_t head_end_ = 0;       // stream position past the blank line of the head being parsed
  std::uint64_t skipped_ = 0;        // body bytes dropped while resynchronising chunk framing
  TimestampNs lost_ts_ = 0;          // time of the last byte dropped while resynchronising
  TimestampNs last_ts_ = 0;          // time of the latest piece or hole
  const Byte* run_begin_ = nullptr;  // start of the buffer run() is working on
  std::uint64_t run_base_ = 0;       // its stream position
  std::string buf_;                  // head bytes or a chunk-size line split across pieces
  std::string probe_;                // start of a piece held while deciding how to resync
  RequestHead request_;
  ResponseHead response_;
};

}  // namespace infertap::protocol
