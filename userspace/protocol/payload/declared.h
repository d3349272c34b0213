// Declared formats: a user's own server streams JSON events no built-in
// dialect knows. The configuration (`formats:`, docs/configuration.md) names,
// per format, which responses it covers (a glob on the request path, one on
// the response's media type) and where its events keep their facts, as JSON
// pointers (RFC 6901): the generated text, the finish marker, the token count.
// A declared format that matches a response wins over built-in detection.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/framing.h"
#include "protocol/payload/interpreter.h"

namespace infertap::protocol {

// What is wrong with a JSON pointer as a declared format needs it ("" when
// nothing): it starts with '/', and '~' is only ever "~0" ('~') or "~1" ('/').
std::string json_pointer_problem(std::string_view pointer);

struct DeclaredFormat {
  std::string name;
  // Which responses: fnmatch(3) globs on the request path (query removed; a
  // stream joined mid-way has none and matches "*" only) and on the media type
  // (lower-case, parameters removed); an empty content_type matches any.
  std::string path = "*";
  std::string content_type;
  // How its events are delimited; unset: text/event-stream is SSE, anything else NDJSON.
  std::optional<EventFraming> framing;
  // JSON pointers into each event. `content` is required: a non-empty string
  // there makes a token event (with `cumulative`, one longer than the last).
  std::string content;
  bool cumulative = false;  // `content` holds the whole output so far
  std::string finish;        // "" = none: the event there ends the stream ...
  std::optional<std::string> finish_value;  // ... when its value reads as this (else: any but null, false, "")
  std::string finish_reason, tokens, prompt_tokens, error, model, response_id;  // "" = none
  // Prometheus gen_ai.provider.name and gen_ai.operation.name of its streams
  // ("" = the format's name / from the route).
  std::string provider, operation;
};
using DeclaredFormats = std::vector<std::shared_ptr<const DeclaredFormat>>;

// The media type of a Content-Type value: lower-case, without parameters.
std::string_view media_type(std::string_view content_type);

// The first format covering a response to `path` (query removed) with this
// media type, or null. A format framed `websocket` covers only the messages of
// a WebSocket session (`websocket`), which other framings do not cover.
std::shared_ptr<const DeclaredFormat> match_declared(const DeclaredFormats& formats, std::string_view path,
                                                     std::string_view media, bool websocket = false);

// One event of a declared format: its kind and facts from the pointers. A cut
// event (truncated) is read as far as its captured bytes prove.
EventMeaning interpret_declared(const DeclaredFormat& format, std::string_view data, bool truncated);

}  // namespace infertap::protocol
