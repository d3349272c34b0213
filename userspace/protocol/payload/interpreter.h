// Meaning of one event of an inference API stream (an SSE event or an NDJSON
// line). OpenAI-compatible chat and text completions (vLLM, TGI, SGLang,
// llama.cpp, Ollama /v1, LiteLLM), the OpenAI Responses API and Anthropic
// Messages; realtime APIs' WebSocket messages (OpenAI Realtime, Qwen-Omni);
// the servers' own APIs: Ollama /api/chat and /api/generate, TGI
// /generate_stream, llama.cpp /completion, SGLang /generate, vLLM's /generate,
// Triton generate_stream, Gemini streamGenerateContent; and the formats a
// configuration declares (protocol/payload/declared.h). Complete JSON is
// parsed with simdjson; an event whose bytes were not all captured is read
// with a tolerant prefix scanner that only reports what the captured head
// proves. docs/metrics.md#token-events-per-dialect says what counts as a
// token event in each.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/framing.h"

namespace infertap::protocol {

struct DeclaredFormat;

enum class Dialect : std::uint8_t {
  unknown,
  openai,
  openai_responses,
  anthropic,
  ollama,    // /api/chat, /api/generate: NDJSON objects with "done"
  tgi,       // /generate_stream: {"token":{...},"details":...}
  llamacpp,  // /completion: {"content":...,"stop":false}
  sglang,    // /generate: {"text": <output so far>, "meta_info": {...}}
  vllm,      // vLLM's own /generate: {"text": [<prompt + output so far>]}
  triton,    // generate_stream: {"text_output": ...}
  gemini,    // streamGenerateContent?alt=sse: {"candidates":[...],"usageMetadata":{...}}
  declared,  // a format from the configuration
  grpc,      // gRPC messages (HTTP/2): each message is an event; its content needs a schema and is not read
  openai_realtime,  // realtime API messages over WebSocket (OpenAI Realtime GA and beta names, Qwen-Omni): path .../realtime
};

enum class EventKind : std::uint8_t {
  content,     // carries generated output: a token event (first token, ITL)
  role_only,   // OpenAI delta with only "role"
  empty,       // no generated output (empty delta or text, a text that did not grow, a special token)
  usage_only,  // usage chunk (choices empty)
  done,        // the stream's end marker: "[DONE]", message_stop, Ollama "done": true, ...
  error,       // mid-stream error object or "event: error"
  control,     // other protocol events (message_start, ping, content_block_start, ...)
  unparsed,    // not JSON we understand
};

std::string_view to_string(EventKind k);
std::string_view to_string(Dialect d);

struct EventMeaning {
  EventKind kind = EventKind::unparsed;
  Dialect dialect = Dialect::unknown;
  std::string response_id;    // OpenAI chunk "id" / Anthropic message.id / ... (capped 128)
  std::string model;          // capped 128
  std::string finish_reason;  // finish_reason / stop_reason / done_reason / ...
  std::string error_type;     // error.type / error.code when kind == error (capped)
  std::string system_fingerprint;  // OpenAI chunk "system_fingerprint" (capped 128): the serving configuration
  // Token usage when the event carries it (OpenAI usage chunk, Anthropic
  // message_start input_tokens / message_delta output_tokens, Ollama
  // eval_count, ... — cumulative).
  std::optional<std::uint64_t> completion_tokens;
  std::optional<std::uint64_t> prompt_tokens;
  bool from_partial = false;  // decided from a truncated payload
  bool ends_stream = false;   // the dialect's own end of the stream (it may carry content too)
  bool audio = false;         // an audio delta (realtime): its content is audio, not text
  // Dialects whose events repeat the whole output so far (SGLang, vLLM's
  // /generate, a declared `cumulative` format): its length in bytes, a lower
  // bound when the capture cut it (output_cut). StreamEventInterpreter turns
  // it into "the text grew".
  std::optional<std::uint64_t> output_length;
  bool output_cut = false;
};

// Which dialect a request path names (its last segments: /api/chat,
// /generate_stream, :streamGenerateContent, ...), unknown when none. The
// first event's shape decides a stream's dialect; the path settles what the
// shape leaves open (an error first, a first event the capture cut).
Dialect dialect_of_path(std::string_view path);

// What the stream told before this event: its dialect once known (unknown:
// detect from this event), and its path's.
struct EventContext {
  Dialect dialect = Dialect::unknown;
  Dialect path_hint = Dialect::unknown;
};

// `data` is the event's data (SSE data lines / the NDJSON line), `event_type`
// the SSE event name ("" for NDJSON), `truncated` whether the capture cut it.
EventMeaning interpret_event(std::string_view event_type, std::string_view data, bool truncated);
EventMeaning interpret_event(const EventContext& context, std::string_view event_type, std::string_view data,
                             bool truncated);

// What a stream says about itself before its first event.
struct StreamContext {
  std::string_view path;  // request target ("" when joined mid-way)
  std::string_view media_type;
  EventFraming framing = EventFraming::sse;
  std::shared_ptr<const DeclaredFormat> declared;  // a declared format covers it: its pointers decide
};

// Interprets the events of one stream, in order. Its dialect is the first one
// an event shows and holds for the stream. Dialects with cumulative text get
// "a token event is one whose text grew" (an event the capture cut grew when
// it is longer on the wire than the last: each repeats the whole output).
//
// Consecutive token events usually differ only in the generated text and a
// few values the meaning does not depend on (Ollama's created_at, TGI's
// token id and logprob): once one has been fully parsed, a later event whose
// bytes outside those values are identical has the same meaning, and is
// recognised with compares and escape-aware scans instead of a JSON parse.
// Sound because each value is replaced by a lexeme of its own kind (a string
// body ends at an unescaped quote, which cannot occur inside it; a number at
// the first byte that cannot continue it): the new event is the memorised
// valid JSON with only those values changed.
class StreamEventInterpreter {
 public:
  void begin(const StreamContext& context);
  // `wire_bytes`: the event's size in the body (cut events of cumulative dialects).
  const EventMeaning& interpret(std::string_view event_type, std::string_view data, bool truncated,
                                std::uint32_t wire_bytes = 0);
  std::uint64_t memo_hits() const { return memo_hits_; }
  // What a fresh interpret_event of the next event must be given to agree.
  EventContext context() const { return {dialect_, path_hint_}; }

 private:
  enum class Hole : std::uint8_t { text, string, number };
  void learn(std::string_view event_type, std::string_view data);
  bool memo_matches(std::string_view event_type, std::string_view data) const;
  void note_growth(EventMeaning& m, std::uint32_t wire_bytes);

  EventMeaning last_;
  Dialect dialect_ = Dialect::unknown;
  Dialect path_hint_ = Dialect::unknown;
  bool grpc_ = false;  // the body is gRPC messages: each one counts as a content event
  std::shared_ptr<const DeclaredFormat> declared_;
  std::string declared_key_;  // "\"name\":" the declared text lives under ("" = no memo)
  // Cumulative text: the longest output seen and the last event's wire size.
  std::uint64_t output_length_ = 0;
  bool output_exact_ = true;  // output_length_ is the last event's whole length, not a captured prefix's
  std::uint32_t last_wire_ = 0;
  // The memo: literal segments around the holes (segments_.size() == holes_.size() + 1).
  std::string memo_type_;
  std::vector<std::string> segments_;
  std::vector<Hole> holes_;
  bool has_memo_ = false;
  std::uint64_t memo_hits_ = 0;
};

// Facts from the head of a request body (JSON): model, stream flag, max tokens,
// stream_options.include_usage. Tolerates a truncated body (only the captured
// head is known: a field past it is unknown, never false). Sizes and flags
// only: no text of the request is kept.
struct RequestMeaning {
  std::string model;  // capped 128
  std::optional<bool> stream;
  std::optional<bool> include_usage;         // stream_options.include_usage
  std::optional<std::uint64_t> max_tokens;   // max_tokens | max_completion_tokens | max_output_tokens
};
RequestMeaning interpret_request_body(std::string_view body_head);

}  // namespace infertap::protocol
