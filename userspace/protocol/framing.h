// The framing words every session shares: how a body is delimited on the
// wire, what broke a message's framing, and how the events of a streamed
// response are delimited.
#pragma once

#include <cstdint>
#include <string_view>

namespace infertap::protocol {

// How a message's body is delimited on the wire (HTTP/1.x; HTTP/2 frames its own).
enum class BodyFraming : std::uint8_t {
  none,            // no body (e.g. GET request, 204/304, HEAD response)
  content_length,  // Content-Length: N
  chunked,         // Transfer-Encoding: chunked
  until_close,     // response without length: body ends when the connection closes
};
std::string_view to_string(BodyFraming f);  // "none" | "content_length" | "chunked" | "until_close"

// What broke a message's framing (any session's, reported to its exchange).
enum class ParseError : std::uint8_t {
  bad_start_line,
  bad_header,
  header_too_large,
  bad_chunk_size,
  bad_chunk_trailer,
  gap_in_head,     // a capture hole covered part of a request/response head
  gap_in_framing,  // a capture hole covered chunk framing; parser resynchronised
  not_http,        // bytes are neither HTTP nor a recognisable body: parser gave up
  truncated_message,  // connection closed in the middle of a message
};

std::string_view to_string(ParseError e);

// How the events of a streamed response are delimited. The HTTP/1 session
// picks the framer from the response's media type (or a declared format, or
// what a streamed application/json body's first bytes look like); every
// framer yields the same StreamEvent (protocol/exchange.h).
enum class EventFraming : std::uint8_t {
  sse,     // text/event-stream: WHATWG events, ended by an empty line (protocol/sse/)
  ndjson,  // newline-delimited JSON: one event per line (protocol/ndjson/)
  grpc,    // gRPC length-prefixed messages: one event per message (protocol/body/grpc.h)
  websocket,  // WebSocket messages: one event per message (protocol/websocket/)
};

}  // namespace infertap::protocol
