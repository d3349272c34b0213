// Meaning of inference-stream events: the facts of one event (facts.h, read
// by json_read.h) classified by its dialect, the legacy three here and the
// servers' own in native.cpp; declared formats in declared.cpp. The per-stream
// interpreter keeps the stream's dialect, the growth of cumulative text and
// the memo.
#include "protocol/payload/interpreter.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "protocol/payload/declared.h"
#include "protocol/payload/facts.h"
#include "protocol/payload/json_read.h"
#include "protocol/payload/json_text.h"
#include "protocol/payload/native.h"

namespace infertap::protocol {

std::string_view to_string(EventKind k) {
  switch (k) {
    case EventKind::content: return "content";
    case EventKind::role_only: return "role_only";
    case EventKind::empty: return "empty";
    case EventKind::usage_only: return "usage_only";
    case EventKind::done: return "done";
    case EventKind::error: return "error";
    case EventKind::control: return "control";
    case EventKind::unparsed: return "unparsed";
  }
  return "unknown";
}

std::string_view to_string(Dialect d) {
  switch (d) {
    case Dialect::unknown: return "unknown";
    case Dialect::openai: return "openai";
    case Dialect::openai_responses: return "openai_responses";
    case Dialect::anthropic: return "anthropic";
    case Dialect::ollama: return "ollama";
    case Dialect::tgi: return "tgi";
    case Dialect::llamacpp: return "llamacpp";
    case Dialect::sglang: return "sglang";
    case Dialect::vllm: return "vllm";
    case Dialect::triton: return "triton";
    case Dialect::gemini: return "gemini";
    case Dialect::declared: return "declared";
    case Dialect::grpc: return "grpc";
    case Dialect::openai_realtime: return "openai_realtime";
  }
  return "unknown";
}

namespace {

using namespace payload_detail;
using json_text::trim_ws;

constexpr std::size_t kMaxString = 128;

void assign_capped(std::string& out, std::string_view v) { out.assign(v.substr(0, kMaxString)); }

bool is_anthropic_type(std::string_view t) {
  return t == "message_start" || t == "message_delta" || t == "message_stop" || t == "content_block_start" ||
         t == "content_block_delta" || t == "content_block_stop" || t == "ping" || t == "error";
}

bool is_responses_content_delta(std::string_view t) {
  return t == "response.output_text.delta" || t == "response.reasoning_text.delta" ||
         t == "response.reasoning_summary_text.delta" || t == "response.function_call_arguments.delta" ||
         t == "response.refusal.delta" || t == "response.custom_tool_call_input.delta";
}

std::string_view first_nonempty(std::initializer_list<std::string_view> values) {
  for (std::string_view v : values)
    if (!v.empty()) return v;
  return {};
}

void classify_openai(const EventFacts& f, bool partial, EventMeaning& m) {
  m.dialect = Dialect::openai;
  assign_capped(m.response_id, f.id.proven());
  assign_capped(m.model, f.model.proven());
  assign_capped(m.finish_reason, f.finish_reason.proven());
  assign_capped(m.system_fingerprint, f.system_fingerprint.proven());
  if (f.error_seen || f.object.proven() == "error") {
    m.kind = EventKind::error;
    // vLLM-style error responses carry the type at top level.
    const std::string_view top_type = f.object.proven() == "error" ? f.type.proven() : std::string_view{};
    assign_capped(m.error_type, first_nonempty({f.error_type.proven(), f.error_code.proven(), f.error_code_number,
                                                top_type, f.top_code.proven(), f.top_code_number}));
    return;
  }
  if (f.content) {
    m.kind = EventKind::content;
  } else if (f.choices_closed && f.choices_count == 0) {
    if (f.completion_tokens || f.prompt_tokens) {
      m.kind = EventKind::usage_only;
    } else {
      m.kind = partial ? EventKind::unparsed : EventKind::empty;
    }
  } else if (f.delta_closed || !partial) {
    m.kind = f.role ? EventKind::role_only : EventKind::empty;
  } else {
    m.kind = EventKind::unparsed;  // the head does not prove what the chunk carried
  }
}

void classify_anthropic(std::string_view type, const EventFacts& f, bool partial, EventMeaning& m) {
  m.dialect = Dialect::anthropic;
  if (type == "message_start") {
    m.kind = EventKind::control;
    assign_capped(m.response_id, f.msg_id.proven());
    assign_capped(m.model, f.msg_model.proven());
  } else if (type == "content_block_delta") {
    const std::string_view delta_type = f.delta_type.proven();
    if (f.content) {
      m.kind = EventKind::content;
    } else if (!delta_type.empty() && delta_type != "text_delta" && delta_type != "thinking_delta" &&
               delta_type != "input_json_delta") {
      m.kind = EventKind::control;  // signature_delta, citations_delta: no generated tokens
    } else if (!partial || f.content_empty) {
      m.kind = EventKind::empty;
    } else {
      m.kind = EventKind::unparsed;
    }
  } else if (type == "message_delta") {
    m.kind = EventKind::control;
    assign_capped(m.finish_reason, f.finish_reason.proven());
  } else if (type == "message_stop") {
    m.kind = EventKind::done;
  } else if (type == "error") {
    m.kind = EventKind::error;
    assign_capped(m.error_type, f.error_type.proven());
  } else {
    m.kind = EventKind::control;  // ping, content_block_start/stop
  }
}

void classify_responses(std::string_view type, const EventFacts& f, bool partial, EventMeaning& m) {
  m.dialect = Dialect::openai_responses;
  assign_capped(m.response_id, f.resp_id.proven());
  assign_capped(m.model, f.resp_model.proven());
  if (is_responses_content_delta(type)) {
    if (f.delta_string.nonempty()) {
      m.kind = EventKind::content;
    } else if (f.delta_string.empty_complete() || !partial) {
      m.kind = EventKind::empty;
    } else {
      m.kind = EventKind::unparsed;
    }
  } else if (type == "response.completed" || type == "response.incomplete") {
    m.kind = EventKind::done;
    assign_capped(m.finish_reason, f.resp_status.proven());
  } else if (type == "response.failed") {
    m.kind = EventKind::error;
    assign_capped(m.error_type, f.resp_error_code.proven());
  } else if (type == "error") {
    m.kind = EventKind::error;
    assign_capped(m.error_type, first_nonempty({f.top_code.proven(), f.top_code_number}));
  } else {
    m.kind = EventKind::control;
  }
}

// Realtime deltas that carry generated output; *audio: base64 audio.
bool is_realtime_delta(std::string_view t, bool* audio) {
  *audio = t == "response.output_audio.delta" || t == "response.audio.delta";
  return *audio || t == "response.output_text.delta" || t == "response.text.delta" ||
         t == "response.output_audio_transcript.delta" || t == "response.audio_transcript.delta";
}

// Realtime messages (GA names, and the beta names Qwen-Omni also speaks):
// deltas are token events, response.done ends the response with its usage
// and status (failed: an error; cancelled, incomplete: the reason why).
void classify_realtime(std::string_view type, const EventFacts& f, bool parsed, bool partial, EventMeaning& m) {
  m.dialect = Dialect::openai_realtime;
  assign_capped(m.response_id, first_nonempty({f.realtime_response_id.proven(), f.resp_id.proven()}));
  bool audio = false;
  if (!parsed) {
    m.kind = EventKind::unparsed;
  } else if (is_realtime_delta(type, &audio)) {
    m.audio = audio;
    if (f.delta_string.nonempty()) {
      m.kind = EventKind::content;
    } else {
      m.kind = f.delta_string.empty_complete() || !partial ? EventKind::empty : EventKind::unparsed;
    }
  } else if (type == "response.done") {
    m.ends_stream = true;
    const std::string_view status = f.resp_status.proven();
    m.kind = status == "failed" ? EventKind::error : EventKind::done;
    if (m.kind == EventKind::error) {
      assign_capped(m.error_type, first_nonempty({f.details_error_type.proven(), f.details_error_code.proven()}));
    } else {
      const bool stopped = status == "cancelled" || status == "incomplete";
      assign_capped(m.finish_reason, stopped ? first_nonempty({f.details_reason.proven(), status}) : status);
    }
  } else if (type == "error") {
    m.kind = EventKind::error;
    assign_capped(m.error_type, first_nonempty({f.error_type.proven(), f.error_code.proven()}));
  } else {
    m.kind = EventKind::control;
  }
}

// Reads one event's JSON into facts: simdjson when it is whole, the prefix
// scanner otherwise. *partial is set when the scanner had to read it.
bool read_facts(std::string_view body, bool truncated, EventFacts& facts, bool* partial) {
  *partial = truncated;
  if (body.empty() || body.front() != '{') return false;
  // A truncated payload goes to simdjson too: if the captured bytes still
  // form one whole object, everything it says was captured.
  // A cut payload rarely ends in '}': spare simdjson the attempt.
  if ((!truncated || body.back() == '}') && parse_complete(body, facts)) return true;
  facts = EventFacts{};
  facts.raw_strings = true;
  *partial = true;
  return PrefixScanner<EventFacts>(body, facts).scan();
}

// The dialect an event of an unknown (or legacy) stream shows, classified.
void detect_and_classify(const EventContext& ctx, std::string_view type, const EventFacts& facts, bool parsed,
                         bool partial, EventMeaning& meaning) {
  const bool responses_error = type == "error" && !facts.error_seen &&
                               (facts.top_code.seen || !facts.top_code_number.empty());
  const bool hint = is_native(ctx.path_hint);
  if (type.substr(0, 9) == "response." || responses_error) {
    classify_responses(type, facts, partial, meaning);
  } else if (is_anthropic_type(type)) {
    classify_anthropic(type, facts, partial, meaning);
  } else if (facts.choices_seen || facts.object.proven().starts_with("chat.completion") ||
             facts.object.proven() == "text_completion") {
    classify_openai(facts, partial, meaning);
  } else if (const Dialect native = native_shape(facts); native != Dialect::unknown) {
    classify_native(native, facts, partial, meaning);
  } else if (facts.error_seen || facts.object.proven() == "error") {
    if (hint) {
      classify_native(ctx.path_hint, facts, partial, meaning);
    } else {
      classify_openai(facts, partial, meaning);
    }
  } else if (!parsed) {
    meaning.kind = EventKind::unparsed;
  } else if (hint) {
    classify_native(ctx.path_hint, facts, partial, meaning);  // the path says what the shape left open
  } else if (!partial && (facts.id.seen || facts.model.seen)) {
    classify_openai(facts, partial, meaning);  // a chunk without choices (some servers' keep-alives)
  } else {
    meaning.kind = EventKind::unparsed;
  }
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Dialect dialect_of_path(std::string_view path) {
  path = path.substr(0, path.find_first_of("?#"));
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const bool triton = path.find("/v2/models/") != std::string_view::npos;
  if (ends_with(path, "/api/chat") || ends_with(path, "/api/generate")) return Dialect::ollama;
  if (ends_with(path, ":streamGenerateContent")) return Dialect::gemini;
  if (ends_with(path, "/generate_stream")) return triton ? Dialect::triton : Dialect::tgi;
  if (ends_with(path, "/generate")) return triton ? Dialect::triton : Dialect::sglang;
  if (ends_with(path, "/completion")) return Dialect::llamacpp;
  if (ends_with(path, "/responses")) return Dialect::openai_responses;
  if (ends_with(path, "/messages")) return Dialect::anthropic;
  if (ends_with(path, "/completions")) return Dialect::openai;
  if (ends_with(path, "/realtime")) return Dialect::openai_realtime;
  return Dialect::unknown;
}

EventMeaning interpret_event(std::string_view event_type, std::string_view data, bool truncated) {
  return interpret_event(EventContext{}, event_type, data, truncated);
}

EventMeaning interpret_event(const EventContext& ctx, std::string_view event_type, std::string_view data,
                             bool truncated) {
  EventMeaning meaning;
  const std::string_view body = trim_ws(data);
  if (body == "[DONE]") {
    meaning.kind = EventKind::done;
    meaning.dialect = is_native(ctx.dialect) ? ctx.dialect : Dialect::openai;
    meaning.ends_stream = true;
    meaning.from_partial = truncated;
    return meaning;
  }
  EventFacts facts;
  bool partial = truncated;
  const bool parsed = read_facts(body, truncated, facts, &partial);
  meaning.from_partial = partial;
  if (is_native(ctx.dialect)) {
    classify_native(ctx.dialect, facts, partial, meaning);
    return meaning;
  }
  // The JSON "type" wins; the SSE event name stands in when it was cut or absent.
  std::string_view type = facts.type.proven();
  if (type.empty() && event_type != "message") type = event_type;
  // Realtime names overlap the Responses API's: only its path says realtime.
  if (ctx.dialect == Dialect::openai_realtime || ctx.path_hint == Dialect::openai_realtime) {
    classify_realtime(type, facts, parsed, partial, meaning);
  } else {
    detect_and_classify(ctx, type, facts, parsed, partial, meaning);
  }
  if (!is_native(meaning.dialect)) {
    // Usage wherever the dialect puts it (all cumulative).
    meaning.prompt_tokens = facts.prompt_tokens;
    meaning.completion_tokens = facts.completion_tokens;
  }
  return meaning;
}

RequestMeaning interpret_request_body(std::string_view body_head) {
  RequestMeaning meaning;
  RequestFacts facts;
  const std::string_view body = trim_ws(body_head);
  if (body.empty() || body.front() != '{') return meaning;
  if (!parse_complete(body, facts)) {
    facts = RequestFacts{};
    PrefixScanner<RequestFacts>(body, facts).scan();
  }
  assign_capped(meaning.model, facts.model.proven());
  meaning.stream = facts.stream;
  meaning.include_usage = facts.include_usage;
  meaning.max_tokens = facts.max_tokens;
  return meaning;
}

}  // namespace infertap::protocol
