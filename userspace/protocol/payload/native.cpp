#include "protocol/payload/native.h"

namespace infertap::protocol::payload_detail {
namespace {

constexpr std::size_t kMaxString = 128;

void assign_capped(std::string& out, std::string_view v) { out.assign(v.substr(0, kMaxString)); }

// Kind of an event with no proven output: the end marker, else empty when
// its bytes prove it (a complete event, or an empty text field), else
// unknown (the head does not say).
EventKind no_output(const EventMeaning& m, bool partial, bool proven_empty) {
  if (m.ends_stream) return EventKind::done;
  return !partial || proven_empty ? EventKind::empty : EventKind::unparsed;
}

// Ollama: {"model","created_at","message":{"role","content","thinking","tool_calls"}|"response","done",
// and on the last object done_reason, eval_count, prompt_eval_count, durations}.
void classify_ollama(const EventFacts& f, bool partial, EventMeaning& m) {
  const NativeFacts& n = f.native;
  assign_capped(m.model, f.model.proven());
  m.ends_stream = n.done.value_or(false);
  if (m.ends_stream) assign_capped(m.finish_reason, n.done_reason.proven());
  m.completion_tokens = n.eval_count;
  m.prompt_tokens = n.prompt_eval_count;
  if (n.message_text.nonempty || n.response_text.nonempty) {
    m.kind = EventKind::content;
  } else {
    m.kind = no_output(m, partial, n.message_text.empty || n.response_text.empty);
  }
}

// TGI: {"index","token":{"id","text","logprob","special"},"generated_text","details"}; the last
// event carries generated_text and details (finish_reason, generated_tokens, input_length). A
// special token (EOS) is generated but is no text.
void classify_tgi(const EventFacts& f, bool partial, EventMeaning& m) {
  const NativeFacts& n = f.native;
  m.ends_stream = n.details_seen || n.generated_text_seen;
  assign_capped(m.finish_reason, n.tgi_finish.proven());
  m.completion_tokens = n.generated_tokens;
  m.prompt_tokens = n.input_length;
  const bool special_known = n.token_special.has_value() || !partial;
  if (n.token_text.nonempty && special_known && !n.token_special.value_or(false)) {
    m.kind = EventKind::content;
  } else {
    m.kind = no_output(m, partial && !special_known, n.token_text.empty || n.token_special.value_or(false));
  }
}

// llama.cpp: {"content","stop":false,...}; the last, "stop":true, with stop_type, tokens_predicted,
// tokens_evaluated and timings (counts are only read there: the partial ones run along).
void classify_llamacpp(const EventFacts& f, bool partial, EventMeaning& m) {
  const NativeFacts& n = f.native;
  m.ends_stream = n.stop.value_or(false);
  if (m.ends_stream) {
    assign_capped(m.model, f.model.proven());
    assign_capped(m.finish_reason, n.stop_type.proven());
    m.completion_tokens = n.tokens_predicted ? n.tokens_predicted : n.predicted_n;
    m.prompt_tokens = n.tokens_evaluated ? n.tokens_evaluated : n.prompt_n;
  }
  m.kind = n.top_content.nonempty ? EventKind::content : no_output(m, partial, n.top_content.empty);
}

// SGLang: {"text": <the output so far>, "output_ids", "meta_info":{"id","finish_reason",
// "prompt_tokens","completion_tokens",...}}; vLLM's /generate: {"text": [<prompt + output so far>]}.
// Whether an event's text grew is the stream interpreter's to say (output_length).
void classify_cumulative(Dialect d, const EventFacts& f, bool partial, EventMeaning& m) {
  const NativeFacts& n = f.native;
  const Str& text = d == Dialect::sglang ? n.top_text : n.text0;
  if (text.seen) {
    m.output_length = d == Dialect::sglang ? n.top_text_length : n.text0_length;
    m.output_cut = !text.complete;
  }
  if (d == Dialect::sglang) {
    assign_capped(m.response_id, n.meta_id.proven());
    m.ends_stream = n.meta_finish.seen || n.meta_finish_object;
    assign_capped(m.finish_reason, n.meta_finish.proven());
    m.completion_tokens = n.meta_completion;
    m.prompt_tokens = n.meta_prompt;
  }
  m.kind = text.nonempty() ? EventKind::content : no_output(m, partial, text.empty_complete());
}

// Triton generate_stream: {"model_name","model_version",...,"text_output"}.
void classify_triton(const EventFacts& f, bool partial, EventMeaning& m) {
  const NativeFacts& n = f.native;
  assign_capped(m.model, n.model_name.proven());
  m.kind = n.text_output.nonempty ? EventKind::content : no_output(m, partial, n.text_output.empty);
}

// Gemini: {"candidates":[{"content":{"parts":[{"text"}|{"functionCall"}]},"finishReason"}],
// "usageMetadata":{"promptTokenCount","candidatesTokenCount","thoughtsTokenCount"},"modelVersion",
// "responseId"}. Output tokens count the thoughts too (as OpenAI's completion_tokens do).
void classify_gemini(const EventFacts& f, bool partial, EventMeaning& m) {
  const NativeFacts& n = f.native;
  assign_capped(m.model, n.model_version.proven());
  assign_capped(m.response_id, n.gemini_response_id.proven());
  m.ends_stream = n.gemini_finish.nonempty();
  assign_capped(m.finish_reason, n.gemini_finish.proven());
  if (n.candidates_tokens || n.thoughts_tokens)
    m.completion_tokens = n.candidates_tokens.value_or(0) + n.thoughts_tokens.value_or(0);
  m.prompt_tokens = n.prompt_token_count;
  if (n.gemini_text.nonempty) {
    m.kind = EventKind::content;
  } else if (!n.candidates_seen && n.usage_metadata_seen && !partial) {
    m.kind = m.ends_stream ? EventKind::done : EventKind::usage_only;
  } else {
    m.kind = no_output(m, partial, n.gemini_text.empty);
  }
}

// An error object in any native dialect: {"error":"..."} (Ollama, Triton, TGI with error_type),
// {"error":{"message","type"|"code"|"status"}} (llama.cpp, SGLang, Gemini). Never the message.
void classify_error(const EventFacts& f, EventMeaning& m) {
  m.kind = EventKind::error;
  for (std::string_view v : {f.error_type.proven(), f.error_code.proven(), std::string_view(f.error_code_number),
                             f.native.error_status.proven(), f.native.tgi_error_type.proven()}) {
    if (!v.empty()) {
      assign_capped(m.error_type, v);
      return;
    }
  }
}

}  // namespace

bool is_native(Dialect d) {
  switch (d) {
    case Dialect::ollama:
    case Dialect::tgi:
    case Dialect::llamacpp:
    case Dialect::sglang:
    case Dialect::vllm:
    case Dialect::triton:
    case Dialect::gemini: return true;
    default: return false;
  }
}

Dialect native_shape(const EventFacts& f) {
  const NativeFacts& n = f.native;
  if (n.text_output.seen() || n.model_name.seen) return Dialect::triton;
  if (n.candidates_seen || n.usage_metadata_seen) return Dialect::gemini;
  if (n.meta_info_seen) return Dialect::sglang;
  if (n.text_array_seen) return Dialect::vllm;
  if (n.token_seen || n.details_seen) return Dialect::tgi;
  if (n.done && (n.created_at.seen || n.message_seen || n.response_text.seen())) return Dialect::ollama;
  if (n.stop && n.top_content.seen()) return Dialect::llamacpp;
  return Dialect::unknown;
}

void classify_native(Dialect d, const EventFacts& f, bool partial, EventMeaning& m) {
  m.dialect = d;
  if (f.error_seen) return classify_error(f, m);
  switch (d) {
    case Dialect::ollama: return classify_ollama(f, partial, m);
    case Dialect::tgi: return classify_tgi(f, partial, m);
    case Dialect::llamacpp: return classify_llamacpp(f, partial, m);
    case Dialect::sglang:
    case Dialect::vllm: return classify_cumulative(d, f, partial, m);
    case Dialect::triton: return classify_triton(f, partial, m);
    case Dialect::gemini: return classify_gemini(f, partial, m);
    default: m.kind = EventKind::unparsed; return;
  }
}

}  // namespace infertap::protocol::payload_detail
