// What the websocket session reads of a realtime API message (OpenAI
// Realtime, GA and beta event names; Qwen-Omni realtime, beta names): the
// JSON "type", the response it belongs to, the output audio format a session
// message declares, and where an audio delta's base64 lies. Its meaning as a
// token event is the payload interpreter's (Dialect::openai_realtime).
//
// A tolerant scan of the message's kept text, which a capture hole or the
// size cap may have cut: a string the text ends inside is never a value.
// Only the first kMaxDepth levels of objects are looked into; arrays never.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace infertap::protocol::websocket {

struct MessageFacts {
  std::string_view type;         // "" when absent or cut
  std::string_view response_id;  // "response_id", else "response":{"id"}
  // session.created / session.updated: beta session.output_audio_format,
  // GA session.audio.output.format.type (and .rate).
  std::string_view audio_format;
  std::uint32_t audio_rate = 0;
  // The top-level "delta" string: where its raw body starts in the text,
  // its raw length when it closes, and the escapes in it.
  std::optional<std::size_t> delta_at;
  std::optional<std::size_t> delta_length;
  std::size_t delta_escapes = 0;
};

inline constexpr std::size_t kMaxDepth = 4;  // session.audio.output.format.type is the deepest read

MessageFacts read_message(std::string_view text);

// What the session tells apart by type.
bool is_response_message(std::string_view type);  // response.*
bool is_audio_delta(std::string_view type);       // response.output_audio.delta (GA) / response.audio.delta (beta)
bool is_session_message(std::string_view type);   // session.created / session.updated
inline constexpr std::string_view kResponseCreated = "response.created";
inline constexpr std::string_view kResponseDone = "response.done";
inline constexpr std::string_view kResponseCreate = "response.create";  // the client's request for one

struct AudioFormat {
  std::uint32_t sample_rate = 0;
  std::uint8_t bytes_per_sample = 0;
};
// The format a session message names (nullopt: it names none we know).
std::optional<AudioFormat> audio_format(const MessageFacts& f);

// Decoded bytes of an audio delta's base64. When the text was cut before the
// delta closed, from the message's whole length (`whole_length`), the delta
// being its last field: exact but for the padding and the bytes after it.
std::uint64_t audio_bytes(const MessageFacts& f, std::string_view text, std::uint64_t whole_length);

}  // namespace infertap::protocol::websocket
