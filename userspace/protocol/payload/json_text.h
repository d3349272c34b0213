// What the payload readers share about JSON text: one DOM parse per event on
// the calling thread's parser, and the byte-level facts of JSON strings the
// per-stream memo and the cumulative dialects rely on. Internal to payload/.
#pragma once

#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace infertap::protocol::json_text {

// Parses one complete JSON text with this thread's DOM parser (runtime-
// dispatched SIMD kernel). The element is valid until the next parse on the
// thread. False when the text is not one whole, well-formed JSON value.
bool parse(std::string_view text, simdjson::dom::element* out);

std::string_view trim_ws(std::string_view s);

// End of a JSON string body starting at `from` (just past its opening quote):
// the index of the closing quote, or npos if the text ends first.
std::size_t string_body_end(std::string_view s, std::size_t from);

// True if `body` is a string body simdjson accepts exactly as it would inside
// any JSON text: no raw control characters, only valid escapes, valid UTF-8.
// \u escapes of surrogates are left to a full parse (pairing rules).
bool plain_string_body(std::string_view body);

// Bytes of text a raw (escaped) string body stands for once decoded: an
// escape counts as the UTF-8 bytes it makes (a lone surrogate as 3). A cut
// body counts what was captured.
std::uint64_t decoded_length(std::string_view raw_body);

}  // namespace infertap::protocol::json_text
