// How the events of a streamed response body are delimited. The HTTP/1
// session picks the framer from the response's media type (or a declared
// format, or what a streamed application/json body's first bytes look like);
// both framers yield the same StreamEvent (protocol/exchange.h).
#pragma once

#include <cstdint>

namespace infertap::protocol {

enum class EventFraming : std::uint8_t {
  sse,     // text/event-stream: WHATWG events, ended by an empty line (protocol/sse/)
  ndjson,  // newline-delimited JSON: one event per line (protocol/ndjson/)
  grpc,    // gRPC length-prefixed messages: one event per message (protocol/body/grpc.h)
  websocket,  // WebSocket messages: one event per message (protocol/websocket/)
};

}  // namespace infertap::protocol
