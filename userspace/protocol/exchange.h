// What a protocol session yields from the byte streams of one connection,
// whatever the protocol: requests, the responses that answer them, and the
// events of a streamed response body, each event with the stream position of
// its last byte so that the transport below can say when each vantage saw it.
//
//   pieces (protocol/stream.h) --> session --> ExchangeSink
//
// HTTP/1.x is the session today (protocol/http1/session.h). A response is one
// exchange; sessions that carry several at once give each its own id.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/encoding/decoder.h"
#include "protocol/framing.h"
#include "protocol/stream.h"

namespace infertap::protocol {

struct DeclaredFormat;  // protocol/payload/declared.h: the configuration's formats
using DeclaredFormats = std::vector<std::shared_ptr<const DeclaredFormat>>;

// Which HTTP carried an exchange ("1.0", "1.1", "2" in records).
enum class HttpVersion : std::uint8_t { http1_0, http1_1, http2 };
std::string_view to_string(HttpVersion v);

// Every protocol a session can speak (protocol/registry.cpp lists them).
enum class Protocol : std::uint8_t { http1, http2, websocket };
inline constexpr std::size_t kProtocols = 3;
std::string_view to_string(Protocol p);

// Which end of the exchange the traced process is on this connection.
enum class Role : std::uint8_t { unknown, server, client };
std::string_view to_string(Role r);

// A request as the session saw it. Only the head of its body is kept, for
// the interpreter (model, stream flag); it never leaves the process.
struct RequestInfo {
  std::string method;
  std::string target;         // as sent (query string included: output decides what to keep)
  TimestampNs start_ns = 0;   // the piece that completed its head
  TimestampNs end_ns = 0;     // the piece that held its last byte (0: not complete)
  bool complete = false;
  std::string body_head;      // first bytes of the body, bounded by the session
  std::uint64_t body_bytes = 0;  // the whole body's size (de-chunked; bytes not captured included)
};

struct ResponseInfo {
  std::uint64_t exchange = 0;  // responses of the connection, counted from 0
  int status = 0;
  std::string content_type;
  BodyFraming framing = BodyFraming::none;
  ContentEncoding content_encoding = ContentEncoding::identity;  // undone before events are looked for
  bool event_stream = false;     // its body is a stream of events
  EventFraming event_framing = EventFraming::sse;  // how they are delimited (event streams)
  std::shared_ptr<const DeclaredFormat> declared;   // a declared format covers the response
  bool joined_midstream = false; // the head was never seen: status and type unknown
  TimestampNs head_ns = 0;
  std::string server_version;  // `Server` / `x-*-version` header values (ResponseHead::server_version)
  const RequestInfo* request = nullptr;  // the request it answers; null when unknown
  HttpVersion http_version = HttpVersion::http1_1;
  Protocol protocol = Protocol::http1;  // the session that framed it (websocket: after an HTTP/1.1 upgrade)
  std::uint32_t h2_stream_id = 0;  // HTTP/2: the stream it is (0: HTTP/1)
  // HTTP/2: its header block could not be read (joined mid-connection, HPACK
  // state unknown, a hole in the block): status, type and path are unknown.
  bool headers_unknown = false;
};

// HTTP/2: what a stream's frames said, told once before its end.
struct Http2StreamStats {
  std::uint32_t data_frames = 0;     // DATA frames of the stream (response direction)
  std::optional<int> grpc_status;    // trailers' grpc-status (the message text is never kept)
  // The sender's flow-control window (granted by the receiver) at or below 0
  // while the stream had not ended: episodes, their time, and which window.
  enum class Scope : std::uint8_t { none, stream, connection, both };
  std::uint32_t window_zero_episodes = 0;
  std::uint64_t window_zero_ns = 0;
  Scope window_scope = Scope::none;
  static constexpr std::size_t kMaxEpisodes = 64;
  std::vector<std::pair<TimestampNs, TimestampNs>> window_zero;  // [start, end), the first kMaxEpisodes
};
std::string_view to_string(Http2StreamStats::Scope s);

// Message-framed sessions (websocket): what the frames of one response said,
// told once before its end.
struct MessageStats {
  std::uint32_t frames = 0;           // data frames of the response's messages
  std::uint32_t control_frames = 0;   // ping/pong/close in the responses' direction while it ran
  std::uint32_t other_messages = 0;   // server messages while it ran that were not its own (session traffic)
  std::uint32_t client_messages = 0;  // client messages while it ran (audio appends, ...)
  std::uint64_t inflated_bytes = 0;   // its messages' bytes after permessage-deflate
  bool compressed = false;            // permessage-deflate was negotiated
  std::optional<std::uint16_t> close_code;  // a close frame ended the session while it ran
  // Audio deltas: decoded bytes, and the format the session declared (0: not told).
  std::uint64_t audio_bytes = 0;
  std::uint32_t audio_sample_rate = 0;
  std::uint8_t audio_bytes_per_sample = 0;
};

// One event of a streamed response body (an SSE event, an NDJSON line), valid
// during the call.
struct StreamEvent {
  std::string_view type;  // SSE `event:` field, "" when absent (and for NDJSON)
  std::string_view data;  // SSE data lines joined by '\n'; the NDJSON line without its terminator
  TimestampNs ts = 0;             // the piece that completed the event
  TimestampNs first_byte_ts = 0;  // the piece that held its first byte
  std::uint64_t body_offset = 0;  // offset of its first byte in the response body
  std::uint32_t wire_bytes = 0;   // its bytes in the body, terminator included
  bool truncated = false;         // a capture hole or a size cap cut part of it
  // Stream position just past its last byte, when the bytes that ended it were
  // fed from a piece (always, unless they were held over from an earlier one).
  std::optional<std::uint64_t> end_position;
  // False when end_position is only an upper bound: in a compressed body it
  // is the end of the compressed bytes that let the decoder produce the event.
  bool end_position_exact = true;
};

// Why a response ended as far as the protocol can tell.
enum class ResponseEnd : std::uint8_t {
  complete,     // its framing said so (last chunk, length reached, close of an until-close body)
  superseded,   // a new response head came before this one ended
  cut_short,    // the connection (or the caller) ended it first: the caller knows why
  reset,        // HTTP/2: RST_STREAM ended the stream
  goaway,       // HTTP/2: GOAWAY said the stream will not be processed (or the connection went away after it)
};

class ExchangeSink {
 public:
  virtual ~ExchangeSink() = default;
  // A request was read (or written, by a client) to its last byte: once per
  // request, before the response that answers it.
  virtual void on_request_end(const RequestInfo& /*request*/) {}
  virtual void on_response(const ResponseInfo& response) = 0;
  virtual void on_event(const StreamEvent& event) = 0;
  // Body bytes of the current response: seen, or gone by without capture.
  virtual void on_body_bytes(std::uint64_t n) = 0;
  virtual void on_body_gap(std::uint64_t n) = 0;
  // A compressed body could not be decoded from here on (no more events).
  enum class Undecodable : std::uint8_t { corrupt, too_large, no_memory, capture_hole, unsupported, too_costly };
  virtual void on_body_undecodable(Undecodable why) = 0;
  // HTTP/2: the stream's frame and flow-control counts, just before its end.
  virtual void on_h2_stream(const Http2StreamStats& /*stats*/) {}
  // Message-framed sessions: the response's frame and message counts, just before its end.
  virtual void on_message_stats(const MessageStats& /*stats*/) {}
  virtual void on_response_end(TimestampNs ts, ResponseEnd how) = 0;
  // A framing error; `in_stream` when it hit the body of the streamed
  // response in progress.
  virtual void on_parse_error(ParseError error, bool in_stream) = 0;
};

std::string_view to_string(ExchangeSink::Undecodable why);

}  // namespace infertap::protocol
