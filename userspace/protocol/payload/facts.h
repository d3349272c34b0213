// The facts one event's JSON gives, whatever read it: the keys the dialects
// look at, interned so that paths compare as small integers, and one
// collector per kind of payload (an event, a request body). Fed by the DOM
// walker (complete JSON) and by the prefix scanner (cut JSON), both in
// protocol/payload/json_read.h. Internal to payload/.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/payload/json_text.h"

namespace infertap::protocol::payload_detail {

enum class Key : std::uint8_t {
  other,
  element,  // array element
  type,
  id,
  model,
  object,
  choices,
  delta,
  content,
  reasoning_content,
  reasoning,
  refusal,
  tool_calls,
  function_call,
  role,
  finish_reason,
  text,
  usage,
  prompt_tokens,
  completion_tokens,
  input_tokens,
  output_tokens,
  error,
  code,
  message,
  thinking,
  partial_json,
  stop_reason,
  response,
  status,
  stream,
  max_tokens,
  max_completion_tokens,
  max_output_tokens,
  system_fingerprint,
  stream_options,
  include_usage,
  created_at,
  done,
  done_reason,
  eval_count,
  prompt_eval_count,
  token,
  special,
  details,
  generated_tokens,
  generated_text,
  input_length,
  stop,
  stop_type,
  tokens_predicted,
  tokens_evaluated,
  timings,
  predicted_n,
  prompt_n,
  meta_info,
  text_output,
  model_name,
  candidates,
  parts,
  finishReason,
  usageMetadata,
  candidatesTokenCount,
  promptTokenCount,
  thoughtsTokenCount,
  modelVersion,
  responseId,
  functionCall,
  error_type,
  options,
  num_predict,
  parameters,
  max_new_tokens,
  n_predict,
  sampling_params,
  generationConfig,
  maxOutputTokens,
  response_id,     // realtime: the response a message belongs to
  status_details,  // realtime: response.status_details
  reason,
};

Key lookup_key(std::string_view k);

// Deeper than this nothing we need lives (Gemini's candidates[].content.parts[].text
// is the deepest); deeper keys are not tracked.
constexpr std::size_t kMaxPath = 6;

struct Path {
  std::array<Key, kMaxPath> keys{};
  std::size_t depth = 0;
  // Paths deeper than kMaxPath or through an unknown key are "untracked".
  bool tracked = true;

  bool is(std::initializer_list<Key> want) const {
    if (!tracked || want.size() != depth) return false;
    for (std::size_t i = 0; i < depth; ++i)
      if (keys[i] != want.begin()[i]) return false;
    return true;
  }
  // Path starts with `prefix` and has exactly extra more keys.
  bool under(std::initializer_list<Key> prefix, std::size_t extra) const {
    if (!tracked || depth != prefix.size() + extra) return false;
    for (std::size_t i = 0; i < prefix.size(); ++i)
      if (keys[i] != prefix.begin()[i]) return false;
    return true;
  }
  Key last() const { return depth > 0 ? keys[depth - 1] : Key::other; }
};

// Scoped push of one path segment.
class PathPush {
 public:
  PathPush(Path& path, Key key) : path_(path), saved_tracked_(path.tracked) {
    if (path_.depth < kMaxPath && key != Key::other && path_.tracked) {
      path_.keys[path_.depth] = key;
    } else {
      path_.tracked = false;
    }
    ++path_.depth;
  }
  ~PathPush() {
    --path_.depth;
    path_.tracked = saved_tracked_;
  }
  PathPush(const PathPush&) = delete;
  PathPush& operator=(const PathPush&) = delete;

 private:
  Path& path_;
  bool saved_tracked_;
};

// A string value as seen: complete, or the captured prefix of a cut one.
struct Str {
  std::string_view value;
  bool complete = false;
  bool seen = false;
  void set(std::string_view v, bool c) {
    value = v;
    complete = c;
    seen = true;
  }
  bool nonempty() const { return seen && !value.empty(); }
  bool empty_complete() const { return seen && complete && value.empty(); }
  std::string_view proven() const { return seen && complete ? value : std::string_view{}; }
};

// A field that carries generated text: did it prove output?
struct Text {
  bool nonempty = false;  // a character of it was seen (or an element of a tool-call list)
  bool empty = false;     // present, complete and empty
  void note(std::string_view v, bool complete) {
    if (!v.empty()) {
      nonempty = true;
    } else if (complete) {
      empty = true;
    }
  }
  bool seen() const { return nonempty || empty; }
};

// The servers' own dialects (protocol/payload/native.cpp reads them).
struct NativeFacts {
  // Ollama
  Str created_at, done_reason;
  std::optional<bool> done;
  bool message_seen = false;
  Text message_text;   // message.content, message.thinking, message.tool_calls[]
  Text response_text;  // response, thinking (/api/generate)
  std::optional<std::uint64_t> eval_count, prompt_eval_count;
  // TGI
  bool token_seen = false, details_seen = false, generated_text_seen = false;
  Text token_text;
  std::optional<bool> token_special;
  Str tgi_finish, tgi_error_type;
  std::optional<std::uint64_t> generated_tokens, input_length;
  // llama.cpp
  Text top_content;
  std::optional<bool> stop;
  Str stop_type;
  std::optional<std::uint64_t> tokens_predicted, tokens_evaluated, predicted_n, prompt_n;
  // SGLang, vLLM: the output so far (its decoded length; its value is never kept)
  bool meta_info_seen = false, text_array_seen = false;
  Str top_text, text0;
  std::uint64_t top_text_length = 0, text0_length = 0;
  Str meta_finish, meta_id;
  bool meta_finish_object = false;
  std::optional<std::uint64_t> meta_completion, meta_prompt;
  // Triton
  Text text_output;
  Str model_name;
  // Gemini
  bool candidates_seen = false, usage_metadata_seen = false;
  Text gemini_text;
  Str gemini_finish, model_version, gemini_response_id, error_status;
  std::optional<std::uint64_t> candidates_tokens, thoughts_tokens, prompt_token_count;
};

// Facts of one event payload, gathered from either reader.
struct EventFacts {
  // Set by the prefix scanner's caller: strings are raw (escaped) bodies
  // there, decoded ones from the DOM.
  bool raw_strings = false;
  Str type, id, model, object, finish_reason, system_fingerprint;
  Str error_type, error_code, error_message_str, top_code;
  Str msg_id, msg_model;
  Str resp_id, resp_model, resp_status, resp_error_code;
  // Realtime: "response_id", and response.status_details' reason, error.type and error.code.
  Str realtime_response_id, details_reason, details_error_type, details_error_code;
  Str delta_type, delta_string;
  std::string top_code_number;  // numeric "code" (vLLM error responses) rendered as text
  std::string error_code_number;
  std::optional<std::uint64_t> prompt_tokens, completion_tokens;
  bool error_seen = false;
  bool choices_seen = false, choices_closed = false;
  std::uint32_t choices_count = 0;
  bool delta_closed = false;
  bool content = false;        // a content signal was proven
  bool content_empty = false;  // a content field was present and empty
  bool role = false;
  NativeFacts native;

  void on_begin(const Path& p, bool is_array);
  void on_end(const Path& p, bool is_array, std::uint32_t count);
  void on_string(const Path& p, std::string_view v, bool complete);
  void on_uint(const Path& p, std::uint64_t v);
  void on_bool(const Path& p, bool b);
  void on_null(const Path&) {}

 private:
  void string_at_top(Key k, std::string_view v, bool complete);
  void string_at_two(const Path& p, std::string_view v, bool complete);
  void string_deeper(const Path& p, std::string_view v, bool complete);
  void native_begin(const Path& p, bool is_array);
  void native_uint(const Path& p, std::uint64_t v);
  std::uint64_t length_of(std::string_view v) const;
  void note_content(std::string_view v, bool complete) {
    if (!v.empty()) {
      content = true;
    } else if (complete) {
      content_empty = true;
    }
  }
};

struct RequestFacts {
  Str model;
  std::optional<bool> stream, include_usage;
  std::optional<std::uint64_t> max_tokens;

  void on_begin(const Path&, bool) {}
  void on_end(const Path&, bool, std::uint32_t) {}
  void on_string(const Path& p, std::string_view v, bool complete) {
    if (p.is({Key::model})) model.set(v, complete);
  }
  void on_uint(const Path& p, std::uint64_t v);
  void on_bool(const Path& p, bool b) {
    if (p.is({Key::stream})) stream = b;
    if (p.is({Key::stream_options, Key::include_usage})) include_usage = b;
  }
  void on_null(const Path&) {}
};


// ---- definitions: inline, so that the readers' walks inline them -------------

// Called for every key of every event: dispatch on length, then compare the
// few names of that length (constant-size compares the compiler inlines).

inline Key lookup_key(std::string_view k) {
  switch (k.size()) {
    case 2: return k == "id" ? Key::id : Key::other;
    case 4:
      if (k == "type") return Key::type;
      if (k == "role") return Key::role;
      if (k == "text") return Key::text;
      if (k == "code") return Key::code;
      if (k == "done") return Key::done;
      if (k == "stop") return Key::stop;
      return Key::other;
    case 5:
      if (k == "model") return Key::model;
      if (k == "delta") return Key::delta;
      if (k == "usage") return Key::usage;
      if (k == "error") return Key::error;
      if (k == "token") return Key::token;
      if (k == "parts") return Key::parts;
      return Key::other;
    case 6:
      if (k == "object") return Key::object;
      if (k == "status") return Key::status;
      if (k == "stream") return Key::stream;
      if (k == "reason") return Key::reason;
      return Key::other;
    case 7:
      if (k == "choices") return Key::choices;
      if (k == "content") return Key::content;
      if (k == "refusal") return Key::refusal;
      if (k == "message") return Key::message;
      if (k == "special") return Key::special;
      if (k == "details") return Key::details;
      if (k == "timings") return Key::timings;
      if (k == "options") return Key::options;
      return Key::other;
    case 8:
      if (k == "thinking") return Key::thinking;
      if (k == "response") return Key::response;
      if (k == "prompt_n") return Key::prompt_n;
      return Key::other;
    case 9:
      if (k == "reasoning") return Key::reasoning;
      if (k == "stop_type") return Key::stop_type;
      if (k == "meta_info") return Key::meta_info;
      if (k == "n_predict") return Key::n_predict;
      return Key::other;
    case 10:
      if (k == "tool_calls") return Key::tool_calls;
      if (k == "max_tokens") return Key::max_tokens;
      if (k == "created_at") return Key::created_at;
      if (k == "eval_count") return Key::eval_count;
      if (k == "model_name") return Key::model_name;
      if (k == "candidates") return Key::candidates;
      if (k == "responseId") return Key::responseId;
      if (k == "error_type") return Key::error_type;
      if (k == "parameters") return Key::parameters;
      return Key::other;
    case 11:
      if (k == "stop_reason") return Key::stop_reason;
      if (k == "done_reason") return Key::done_reason;
      if (k == "predicted_n") return Key::predicted_n;
      if (k == "text_output") return Key::text_output;
      if (k == "num_predict") return Key::num_predict;
      if (k == "response_id") return Key::response_id;
      return Key::other;
    case 12:
      if (k == "input_tokens") return Key::input_tokens;
      if (k == "partial_json") return Key::partial_json;
      if (k == "input_length") return Key::input_length;
      if (k == "finishReason") return Key::finishReason;
      if (k == "modelVersion") return Key::modelVersion;
      if (k == "functionCall") return Key::functionCall;
      return Key::other;
    case 13:
      if (k == "function_call") return Key::function_call;
      if (k == "finish_reason") return Key::finish_reason;
      if (k == "prompt_tokens") return Key::prompt_tokens;
      if (k == "output_tokens") return Key::output_tokens;
      if (k == "usageMetadata") return Key::usageMetadata;
      if (k == "include_usage") return Key::include_usage;
      return Key::other;
    case 14:
      if (k == "generated_text") return Key::generated_text;
      if (k == "max_new_tokens") return Key::max_new_tokens;
      if (k == "stream_options") return Key::stream_options;
      if (k == "status_details") return Key::status_details;
      return Key::other;
    case 15:
      if (k == "sampling_params") return Key::sampling_params;
      if (k == "maxOutputTokens") return Key::maxOutputTokens;
      return Key::other;
    case 16:
      if (k == "generated_tokens") return Key::generated_tokens;
      if (k == "tokens_predicted") return Key::tokens_predicted;
      if (k == "tokens_evaluated") return Key::tokens_evaluated;
      if (k == "promptTokenCount") return Key::promptTokenCount;
      if (k == "generationConfig") return Key::generationConfig;
      return Key::other;
    case 17:
      if (k == "reasoning_content") return Key::reasoning_content;
      if (k == "completion_tokens") return Key::completion_tokens;
      if (k == "max_output_tokens") return Key::max_output_tokens;
      if (k == "prompt_eval_count") return Key::prompt_eval_count;
      return Key::other;
    case 18:
      if (k == "thoughtsTokenCount") return Key::thoughtsTokenCount;
      if (k == "system_fingerprint") return Key::system_fingerprint;
      return Key::other;
    case 20: return k == "candidatesTokenCount" ? Key::candidatesTokenCount : Key::other;
    case 21: return k == "max_completion_tokens" ? Key::max_completion_tokens : Key::other;
    default: return Key::other;
  }
}

inline std::uint64_t EventFacts::length_of(std::string_view v) const {
  return raw_strings ? json_text::decoded_length(v) : v.size();
}

inline void EventFacts::on_begin(const Path& p, bool is_array) {
  if (!p.tracked) return;
  if (p.is({Key::choices}) && is_array) choices_seen = true;
  if (p.is({Key::error})) error_seen = true;
  if (p.is({Key::choices, Key::element, Key::delta, Key::function_call})) content = true;
  if (p.is({Key::choices, Key::element, Key::delta, Key::tool_calls, Key::element})) content = true;
  native_begin(p, is_array);
}

inline void EventFacts::native_begin(const Path& p, bool is_array) {
  NativeFacts& n = native;
  switch (p.depth) {
    case 1:
      switch (p.last()) {
        case Key::message: n.message_seen = !is_array; break;
        case Key::token: n.token_seen = !is_array; break;
        case Key::details: n.details_seen = !is_array; break;
        case Key::meta_info: n.meta_info_seen = !is_array; break;
        case Key::text: n.text_array_seen = is_array; break;
        case Key::candidates: n.candidates_seen = is_array; break;
        case Key::usageMetadata: n.usage_metadata_seen = !is_array; break;
        default: break;
      }
      return;
    case 2:
      if (p.is({Key::meta_info, Key::finish_reason}) && !is_array) n.meta_finish_object = true;
      return;
    case 3:
      // A tool call is generated output (Ollama sends it whole, in one event).
      if (p.is({Key::message, Key::tool_calls, Key::element})) n.message_text.nonempty = true;
      return;
    case 6:
      if (p.is({Key::candidates, Key::element, Key::content, Key::parts, Key::element, Key::functionCall}))
        n.gemini_text.nonempty = true;
      return;
    default: return;
  }
}

inline void EventFacts::on_end(const Path& p, bool is_array, std::uint32_t count) {
  if (!p.tracked) return;
  if (p.is({Key::choices}) && is_array) {
    choices_closed = true;
    choices_count = count;
  }
  if (p.is({Key::choices, Key::element, Key::delta}) && !is_array) delta_closed = true;
}

inline void EventFacts::on_string(const Path& p, std::string_view v, bool complete) {
  if (!p.tracked) return;
  switch (p.depth) {
    case 1: return string_at_top(p.last(), v, complete);
    case 2: return string_at_two(p, v, complete);
    default: return string_deeper(p, v, complete);
  }
}

inline void EventFacts::string_at_top(Key k, std::string_view v, bool complete) {
  NativeFacts& n = native;
  switch (k) {
    case Key::type: type.set(v, complete); break;
    case Key::id: id.set(v, complete); break;
    case Key::model: model.set(v, complete); break;
    case Key::object: object.set(v, complete); break;
    case Key::system_fingerprint: system_fingerprint.set(v, complete); break;
    case Key::code: top_code.set(v, complete); break;
    case Key::error:
      error_seen = true;
      error_message_str.set(v, complete);
      break;
    case Key::delta: delta_string.set(v, complete); break;  // Responses API: "delta":"text"
    case Key::created_at: n.created_at.set(v, complete); break;
    case Key::done_reason: n.done_reason.set(v, complete); break;
    case Key::response:
    case Key::thinking: n.response_text.note(v, complete); break;
    case Key::content: n.top_content.note(v, complete); break;
    case Key::stop_type: n.stop_type.set(v, complete); break;
    case Key::text:
      n.top_text.set(v, complete);
      n.top_text_length = length_of(v);
      break;
    case Key::text_output: n.text_output.note(v, complete); break;
    case Key::model_name: n.model_name.set(v, complete); break;
    case Key::modelVersion: n.model_version.set(v, complete); break;
    case Key::responseId: n.gemini_response_id.set(v, complete); break;
    case Key::error_type: n.tgi_error_type.set(v, complete); break;
    case Key::response_id: realtime_response_id.set(v, complete); break;
    case Key::generated_text: n.generated_text_seen = true; break;
    default: break;
  }
}

inline void EventFacts::string_at_two(const Path& p, std::string_view v, bool complete) {
  NativeFacts& n = native;
  if (p.is({Key::error, Key::type})) error_type.set(v, complete);
  if (p.is({Key::error, Key::code})) error_code.set(v, complete);
  if (p.is({Key::error, Key::status})) n.error_status.set(v, complete);
  if (p.is({Key::message, Key::id})) msg_id.set(v, complete);
  if (p.is({Key::message, Key::model})) msg_model.set(v, complete);
  if (p.is({Key::message, Key::content}) || p.is({Key::message, Key::thinking})) n.message_text.note(v, complete);
  if (p.is({Key::response, Key::id})) resp_id.set(v, complete);
  if (p.is({Key::response, Key::model})) resp_model.set(v, complete);
  if (p.is({Key::response, Key::status})) resp_status.set(v, complete);
  if (p.is({Key::delta, Key::type})) delta_type.set(v, complete);
  if (p.is({Key::delta, Key::stop_reason})) finish_reason.set(v, complete);
  if (p.is({Key::delta, Key::text}) || p.is({Key::delta, Key::thinking}) || p.is({Key::delta, Key::partial_json})) {
    note_content(v, complete);
  }
  if (p.is({Key::token, Key::text})) n.token_text.note(v, complete);
  if (p.is({Key::details, Key::finish_reason})) n.tgi_finish.set(v, complete);
  if (p.is({Key::meta_info, Key::finish_reason})) n.meta_finish.set(v, complete);
  if (p.is({Key::meta_info, Key::id})) n.meta_id.set(v, complete);
  if (p.is({Key::text, Key::element}) && !n.text0.seen) {
    n.text0.set(v, complete);
    n.text0_length = length_of(v);
  }
}

inline void EventFacts::string_deeper(const Path& p, std::string_view v, bool complete) {
  NativeFacts& n = native;
  switch (p.depth) {
    case 3:
      if (p.is({Key::choices, Key::element, Key::finish_reason})) finish_reason.set(v, complete);
      if (p.is({Key::choices, Key::element, Key::text})) note_content(v, complete);
      if (p.is({Key::response, Key::error, Key::code})) resp_error_code.set(v, complete);
      if (p.is({Key::response, Key::status_details, Key::reason})) details_reason.set(v, complete);
      if (p.is({Key::meta_info, Key::finish_reason, Key::type})) n.meta_finish.set(v, complete);
      if (p.is({Key::candidates, Key::element, Key::finishReason})) n.gemini_finish.set(v, complete);
      return;
    case 4:
      if (p.under({Key::choices, Key::element, Key::delta}, 1)) {
        switch (p.last()) {
          case Key::content:
          case Key::reasoning_content:
          case Key::reasoning:
          case Key::refusal: note_content(v, complete); break;
          case Key::role: role = true; break;
          default: break;
        }
      }
      if (p.is({Key::choices, Key::element, Key::message, Key::content})) note_content(v, complete);
      if (p.is({Key::response, Key::status_details, Key::error, Key::type})) details_error_type.set(v, complete);
      if (p.is({Key::response, Key::status_details, Key::error, Key::code})) details_error_code.set(v, complete);
      return;
    case 6:
      if (p.is({Key::candidates, Key::element, Key::content, Key::parts, Key::element, Key::text}))
        n.gemini_text.note(v, complete);
      return;
    default: return;
  }
}

inline void EventFacts::on_uint(const Path& p, std::uint64_t v) {
  if (!p.tracked) return;
  const Key k = p.last();
  const bool usage =
      p.is({Key::usage, k}) || p.is({Key::message, Key::usage, k}) || p.is({Key::response, Key::usage, k});
  if (usage) {
    if (k == Key::prompt_tokens || k == Key::input_tokens) prompt_tokens = v;
    if (k == Key::completion_tokens || k == Key::output_tokens) completion_tokens = v;
  }
  if (p.is({Key::code})) top_code_number = std::to_string(v);
  if (p.is({Key::error, Key::code})) error_code_number = std::to_string(v);
  native_uint(p, v);
}

inline void EventFacts::native_uint(const Path& p, std::uint64_t v) {
  NativeFacts& n = native;
  if (p.depth == 1) {
    switch (p.last()) {
      case Key::eval_count: n.eval_count = v; break;
      case Key::prompt_eval_count: n.prompt_eval_count = v; break;
      case Key::tokens_predicted: n.tokens_predicted = v; break;
      case Key::tokens_evaluated: n.tokens_evaluated = v; break;
      default: break;
    }
    return;
  }
  if (p.is({Key::details, Key::generated_tokens})) n.generated_tokens = v;
  if (p.is({Key::details, Key::input_length})) n.input_length = v;
  if (p.is({Key::timings, Key::predicted_n})) n.predicted_n = v;
  if (p.is({Key::timings, Key::prompt_n})) n.prompt_n = v;
  if (p.is({Key::meta_info, Key::completion_tokens})) n.meta_completion = v;
  if (p.is({Key::meta_info, Key::prompt_tokens})) n.meta_prompt = v;
  if (p.is({Key::usageMetadata, Key::candidatesTokenCount})) n.candidates_tokens = v;
  if (p.is({Key::usageMetadata, Key::thoughtsTokenCount})) n.thoughts_tokens = v;
  if (p.is({Key::usageMetadata, Key::promptTokenCount})) n.prompt_token_count = v;
}

inline void EventFacts::on_bool(const Path& p, bool b) {
  if (!p.tracked) return;
  if (p.is({Key::done})) native.done = b;
  if (p.is({Key::stop})) native.stop = b;
  if (p.is({Key::token, Key::special})) native.token_special = b;
}

// max_tokens, max_completion_tokens, max_output_tokens (OpenAI, Anthropic,
// Responses), options.num_predict (Ollama), parameters.max_new_tokens (TGI),
// n_predict (llama.cpp), sampling_params.max_new_tokens (SGLang),
// generationConfig.maxOutputTokens (Gemini).
inline void RequestFacts::on_uint(const Path& p, std::uint64_t v) {
  if (p.is({Key::max_tokens}) || p.is({Key::max_completion_tokens}) || p.is({Key::max_output_tokens}) ||
      p.is({Key::options, Key::num_predict}) || p.is({Key::parameters, Key::max_new_tokens}) ||
      p.is({Key::n_predict}) || p.is({Key::sampling_params, Key::max_new_tokens}) ||
      p.is({Key::generationConfig, Key::maxOutputTokens})) {
    max_tokens = v;
  }
}

}  // namespace infertap::protocol::payload_detail
