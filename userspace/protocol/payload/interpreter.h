// Meaning of one SSE event of an inference API stream: OpenAI-compatible chat
// and text completions (vLLM, TGI, SGLang, llama.cpp, Ollama /v1, LiteLLM),
// OpenAI Responses API, and Anthropic Messages. Complete JSON is parsed with
// simdjson; an event whose bytes were not all captured is read with a tolerant
// prefix scanner that only reports what the captured head proves.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace infertap::protocol {

enum class Dialect : std::uint8_t { unknown, openai, openai_responses, anthropic };

enum class EventKind : std::uint8_t {
  content,     // carries generated output: a token event (first token, ITL)
  role_only,   // OpenAI delta with only "role"
  empty,       // delta with empty content / no fields
  usage_only,  // usage chunk (choices empty)
  done,        // OpenAI "[DONE]" or Anthropic message_stop / Responses completed
  error,       // mid-stream error object or "event: error"
  control,     // other protocol events (message_start, ping, content_block_start, ...)
  unparsed,    // not JSON we understand
};

std::string_view to_string(EventKind k);
std::string_view to_string(Dialect d);

struct EventMeaning {
  EventKind kind = EventKind::unparsed;
  Dialect dialect = Dialect::unknown;
  std::string response_id;    // OpenAI chunk "id" / Anthropic message.id (capped 128)
  std::string model;          // capped 128
  std::string finish_reason;  // OpenAI finish_reason / Anthropic stop_reason
  std::string error_type;     // error.type / error.code when kind == error (capped)
  std::string system_fingerprint;  // OpenAI chunk "system_fingerprint" (capped 128): the serving configuration
  // Token usage when the event carries it (OpenAI usage chunk, Anthropic
  // message_start input_tokens / message_delta output_tokens — cumulative).
  std::optional<std::uint64_t> completion_tokens;
  std::optional<std::uint64_t> prompt_tokens;
  bool from_partial = false;  // decided from a truncated payload
};

// `data` is SseEvent::data, `event_type` SseEvent::type, `truncated` SseEvent::truncated.
EventMeaning interpret_event(std::string_view event_type, std::string_view data, bool truncated);

// Interprets the events of one stream, in order. Consecutive token events
// usually differ only in the generated text: once one has been fully parsed, a
// later event whose bytes before and after that text are identical has the
// same meaning, and is recognised with two compares and one escape-aware scan
// of the text instead of a JSON parse. Sound because the text's delimiters
// are unescaped quotes, which cannot occur inside a JSON string: the new event
// is the memorised (valid) prefix + one string body + the memorised suffix.
class StreamEventInterpreter {
 public:
  const EventMeaning& interpret(std::string_view event_type, std::string_view data, bool truncated);
  std::uint64_t memo_hits() const { return memo_hits_; }

 private:
  void learn(std::string_view event_type, std::string_view data);

  EventMeaning last_;
  std::string memo_type_, memo_prefix_, memo_suffix_;
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
