// Recorded streams of the servers' own streaming APIs, written from their
// public API documentation (Ollama docs/api.md, TGI's OpenAPI schema and
// router, llama.cpp tools/server/README.md, SGLang's native API docs, vLLM's
// api_server.py, Triton's generate extension, the Gemini API reference, the
// OpenAI Responses streaming events) and one declared format: each with the
// request that asked for it, its response head, its events on the wire and
// what they are. Variants add keep-alive lines and an error mid-stream.
// sample-server replays them (--help: "Native routes"); the unit tests
// (tests/support/native_streams.h) replay the same bytes through the pipeline.
// Header-only and standard C++ alone: the tools stay standalone.
//
//   const RecordedStream s = recorded_stream(Format::ollama_chat, 12, Variant::keepalive);
//   s.wire[i]      the bytes of event i (an SSE event with its blank line, an NDJSON line with its LF)
//   s.token[i]     whether event i is a token event
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infertap::tools::native {

enum class Format : std::uint8_t {
  ollama_chat, ollama_generate, tgi, llamacpp, sglang, vllm, triton, gemini, responses, declared_acme
};
inline constexpr Format kAllFormats[] = {Format::ollama_chat, Format::ollama_generate, Format::tgi,
                                         Format::llamacpp,    Format::sglang,          Format::vllm,
                                         Format::triton,      Format::gemini,          Format::responses,
                                         Format::declared_acme};
enum class Variant : std::uint8_t { plain, keepalive, error_mid };

struct RecordedStream {
  std::string name;          // "ollama_chat"
  std::string dialect;       // what the record must say ("ollama", "declared", ...)
  std::string framing;       // "sse" | "ndjson"
  std::string path, request_body;
  std::string content_type;   // the response's ("" = none)
  std::string response_head;  // status line and headers, chunked
  std::vector<std::string> wire;  // events, and keep-alives (not events: token false, event false)
  std::vector<bool> token;
  std::vector<bool> event;          // false for keep-alive lines and comments
  std::optional<std::uint64_t> usage_tokens;  // the stream's own output count
  std::string finish_reason;
  bool error = false;  // the variant ends with an error object
};

namespace detail {

// Token texts, JSON-escaped, with quotes, a newline and a non-ASCII escape.
inline std::string token_text(int i) {
  static const char* const kTexts[] = {" The", " sky", " is", " \\\"blue\\\"", ",\\n", " caf\\u00e9", " and", " more"};
  return kTexts[i % 8];
}

// The cumulative text after i+1 tokens (SGLang, vLLM), JSON-escaped.
inline std::string text_upto(int i) {
  std::string s;
  for (int k = 0; k <= i; ++k) s += token_text(k);
  return s;
}

inline std::string head(const std::string& type) {
  return "HTTP/1.1 200 OK\r\n" + (type.empty() ? std::string() : "Content-Type: " + type + "\r\n") +
         "Transfer-Encoding: chunked\r\n\r\n";
}
inline std::string head(RecordedStream& s, const std::string& type) {
  s.content_type = type;
  return head(type);
}

inline void add(RecordedStream& s, std::string wire, bool token, bool event = true) {
  s.wire.push_back(std::move(wire));
  s.token.push_back(token);
  s.event.push_back(event);
}

inline std::string sse(const std::string& data, const char* sep = "data: ") { return sep + data + "\n\n"; }

inline void ollama(RecordedStream& s, int n, Variant v, bool chat) {
  s.dialect = "ollama";
  s.framing = "ndjson";
  s.path = chat ? "/api/chat" : "/api/generate";
  const std::string options = R"(,"options":{"num_predict":)" + std::to_string(n) + "}}";
  s.request_body = chat ? R"({"model":"llama3.2","messages":[{"role":"user","content":"why is the sky blue?"}])" + options
                        : R"({"model":"llama3.2","prompt":"Why is the sky blue?")" + options;
  s.response_head = head(s, "application/x-ndjson");
  const auto line = [&](int i, const std::string& text) {
    const std::string at = "\"created_at\":\"2024-07-01T08:52:19." + std::to_string(100000 + i * 37) + "Z\"";
    return chat ? R"({"model":"llama3.2",)" + at + R"(,"message":{"role":"assistant","content":")" + text + R"("},"done":false})"
                : R"({"model":"llama3.2",)" + at + R"(,"response":")" + text + R"(","done":false})";
  };
  for (int i = 0; i < n; ++i) {
    add(s, line(i, token_text(i)) + "\n", true);
    if (v == Variant::keepalive && i % 4 == 1) add(s, "\n", false, false);
    if (v == Variant::error_mid && i == n / 2) {
      add(s, R"({"error":"an error was encountered while running the model: unexpected EOF"})" "\n", false);
      s.error = true;
      return;
    }
  }
  const std::string metrics = R"("total_duration":4883583458,"load_duration":1334875,"prompt_eval_count":26,)"
                              R"("prompt_eval_duration":342546000,"eval_count":)" + std::to_string(n) +
                              R"(,"eval_duration":4535599000})";
  add(s, chat ? R"({"model":"llama3.2","created_at":"2024-07-01T08:52:20.1Z","message":{"role":"assistant","content":""},)"
                R"("done_reason":"stop","done":true,)" + metrics + "\n"
              : R"({"model":"llama3.2","created_at":"2024-07-01T08:52:20.1Z","response":"","done":true,)"
                R"("done_reason":"stop","context":[1,2,3,4,5],)" + metrics + "\n",
      false);
  s.usage_tokens = n;
  s.finish_reason = "stop";
}

inline void tgi(RecordedStream& s, int n, Variant v) {
  s.dialect = "tgi";
  s.framing = "sse";
  s.path = "/generate_stream";
  s.request_body = R"({"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":)" + std::to_string(n) + "}}";
  s.response_head = head(s, "text/event-stream");
  for (int i = 0; i < n; ++i) {
    add(s, sse(R"({"index":)" + std::to_string(i + 1) + R"(,"token":{"id":)" + std::to_string(415 + i * 7) +
                   R"(,"text":")" + token_text(i) + R"(","logprob":-0.)" + std::to_string(1000 + i * 13) +
                   R"(,"special":false},"generated_text":null,"details":null,"top_tokens":null})",
               "data:"),
        true);
    if (v == Variant::keepalive && i % 4 == 1) add(s, ":\n\n", false, false);
    if (v == Variant::error_mid && i == n / 2) {
      add(s, sse(R"({"error":"Request failed during generation: Server error: CUDA out of memory","error_type":"generation"})", "data:"), false);
      s.error = true;
      return;
    }
  }
  add(s, sse(R"({"index":)" + std::to_string(n + 1) +
                 R"(,"token":{"id":2,"text":"</s>","logprob":-0.01,"special":true},"generated_text":"Deep learning is ...",)"
                 R"("details":{"finish_reason":"eos_token","generated_tokens":)" + std::to_string(n + 1) +
                 R"(,"seed":null,"input_length":6},"top_tokens":null})",
             "data:"),
      false);
  s.usage_tokens = n + 1;  // the special end token is generated too
  s.finish_reason = "eos_token";
}

inline void llamacpp(RecordedStream& s, int n, Variant v) {
  s.dialect = "llamacpp";
  s.framing = "sse";
  s.path = "/completion";
  s.request_body = R"({"prompt":"Building a website can be done in 10 simple steps:","n_predict":)" + std::to_string(n) +
                   R"(,"stream":true})";
  s.response_head = head(s, "text/event-stream");
  for (int i = 0; i < n; ++i) {
    add(s, sse(R"({"index":0,"content":")" + token_text(i) + R"(","tokens":[],"stop":false,"id_slot":-1,"tokens_predicted":)" +
               std::to_string(i + 1) + R"(,"tokens_evaluated":12})"),
        true);
    if (v == Variant::keepalive && i % 4 == 1) add(s, ": keep-alive\n\n", false, false);
    if (v == Variant::error_mid && i == n / 2) {
      add(s, sse(R"({"error":{"code":500,"message":"failed to decode the batch","type":"server_error"}})"), false);
      s.error = true;
      return;
    }
  }
  add(s, sse(R"({"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"gpt-3.5-turbo","tokens_predicted":)" +
             std::to_string(n) + R"(,"tokens_evaluated":12,"generation_settings":{"n_predict":128,"seed":4294967295,)"
             R"("temperature":0.8,"top_k":40,"top_p":0.95},"prompt":"Building a website","has_new_line":false,)"
             R"("truncated":false,"stop_type":"limit","stopping_word":"","tokens_cached":140,"timings":{"prompt_n":12,)"
             R"("prompt_ms":21.3,"predicted_n":)" + std::to_string(n) + R"(,"predicted_ms":160.5}})"),
      false);
  s.usage_tokens = n;
  s.finish_reason = "limit";
}

inline void sglang(RecordedStream& s, int n, Variant v) {
  s.dialect = "sglang";
  s.framing = "sse";
  s.path = "/generate";
  s.request_body = R"({"text":"The capital of France is","sampling_params":{"max_new_tokens":)" + std::to_string(n) +
                   R"(},"stream":true})";
  s.response_head = head(s, "text/event-stream");
  std::string ids;
  const auto meta = [&](int i, const std::string& finish) {
    return R"(,"meta_info":{"id":"9f1c2a","finish_reason":)" + finish + R"(,"prompt_tokens":6,"weight_version":"default",)"
           R"("completion_tokens":)" + std::to_string(i + 1) + R"(,"cached_tokens":0}})";
  };
  for (int i = 0; i < n; ++i) {
    ids += (i ? "," : "") + std::to_string(785 + i);
    const bool last = v == Variant::plain && i + 1 == n;
    add(s, sse(R"({"text":")" + text_upto(i) + R"(","output_ids":[)" + ids + "]" +
               meta(i, last ? R"({"type":"length","length":16})" : "null")),
        true);
    if (v == Variant::keepalive && i % 4 == 1) {
      // The same output again (no new token): an event, not a token event.
      add(s, sse(R"({"text":")" + text_upto(i) + R"(","output_ids":[)" + ids + "]" + meta(i, "null")), false);
    }
    if (v == Variant::error_mid && i == n / 2) {
      add(s, sse(R"({"error":{"message":"The server is shutting down"}})"), false);
      s.error = true;
      break;
    }
  }
  add(s, sse("[DONE]"), false);
  s.usage_tokens = s.error ? std::optional<std::uint64_t>(n / 2 + 1) : n;
  if (v == Variant::plain) s.finish_reason = "length";
}

inline void vllm(RecordedStream& s, int n, Variant v) {
  s.dialect = "vllm";
  s.framing = "ndjson";
  s.path = "/generate";
  s.request_body = R"({"prompt":"San Francisco is a","stream":true,"max_tokens":)" + std::to_string(n) + "}";
  s.response_head = head(s, "");  // vLLM's api_server streams without a content type
  for (int i = 0; i < n; ++i) {
    add(s, R"({"text": ["San Francisco is a)" + text_upto(i) + "\"]}\n", true);
    if (v == Variant::keepalive && i % 4 == 1) add(s, "\n", false, false);
  }
}

inline void triton(RecordedStream& s, int n, Variant v) {
  s.dialect = "triton";
  s.framing = "sse";
  s.path = "/v2/models/ensemble/generate_stream";
  s.request_body = R"({"text_input":"What is machine learning?","max_tokens":)" + std::to_string(n) +
                   R"(,"bad_words":"","stop_words":"","stream":true})";
  s.response_head = head(s, "text/event-stream");
  for (int i = 0; i < n; ++i) {
    add(s, sse(R"({"model_name":"ensemble","model_version":"1","sequence_end":false,"sequence_id":0,)"
               R"("sequence_start":false,"text_output":")" + token_text(i) + "\"}"),
        true);
    if (v == Variant::error_mid && i == n / 2) {
      add(s, sse(R"({"error":"in ensemble 'ensemble', executing 1 models: out of memory"})"), false);
      s.error = true;
      return;
    }
  }
}

inline void gemini(RecordedStream& s, int n, Variant v) {
  s.dialect = "gemini";
  s.framing = "sse";
  s.path = "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse";
  s.request_body = R"({"contents":[{"parts":[{"text":"Write a story about a magic backpack."}]}],)"
                   R"("generationConfig":{"maxOutputTokens":)" + std::to_string(n) + "}}";
  s.response_head = head(s, "text/event-stream");
  for (int i = 0; i < n; ++i) {
    const bool last = i + 1 == n;
    add(s, "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"" + token_text(i) +
               "\"}],\"role\": \"model\"}" + (last ? ",\"finishReason\": \"STOP\"" : "") +
               ",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 8,\"candidatesTokenCount\": " +
               std::to_string(i + 1) + ",\"totalTokenCount\": " + std::to_string(i + 9) +
               "},\"modelVersion\": \"gemini-2.0-flash\",\"responseId\": \"mVz8Z9aSKqWz\"}\r\n\r\n",
        true);
    if (v == Variant::error_mid && i == n / 2) {
      add(s, "data: {\"error\": {\"code\": 503, \"message\": \"The model is overloaded.\", \"status\": \"UNAVAILABLE\"}}\r\n\r\n",
          false);
      s.error = true;
      s.usage_tokens = i + 1;  // the count runs along the stream
      return;
    }
  }
  s.usage_tokens = n;
  s.finish_reason = "STOP";
}

inline void responses(RecordedStream& s, int n, Variant v) {
  s.dialect = "openai_responses";
  s.framing = "sse";
  s.path = "/v1/responses";
  s.request_body = R"({"model":"gpt-4.1","input":"Tell me a three sentence bedtime story.","stream":true,"max_output_tokens":)" +
                   std::to_string(n) + "}";
  s.response_head = head(s, "text/event-stream");
  int seq = 0;
  const auto ev = [&](const std::string& type, const std::string& rest) {
    return "event: " + type + "\ndata: {\"type\":\"" + type + "\",\"sequence_number\":" + std::to_string(seq++) + rest +
           "}\n\n";
  };
  add(s, ev("response.created", R"(,"response":{"id":"resp_67c9","object":"response","status":"in_progress","model":"gpt-4.1-2025-04-14"})"), false);
  for (int i = 0; i < n; ++i) {
    add(s, ev("response.output_text.delta", R"(,"item_id":"msg_67c9","output_index":0,"content_index":0,"delta":")" + token_text(i) + "\""), true);
    if (v == Variant::error_mid && i == n / 2) {
      add(s, ev("error", R"(,"code":"server_error","message":"The server had an error","param":null)"), false);
      s.error = true;
      return;
    }
  }
  add(s, ev("response.completed", R"(,"response":{"id":"resp_67c9","object":"response","status":"completed","model":"gpt-4.1-2025-04-14","usage":{"input_tokens":37,"output_tokens":)" +
             std::to_string(n) + R"(,"total_tokens":)" + std::to_string(n + 37) + "}}"),
      false);
  s.usage_tokens = n;
  s.finish_reason = "completed";
}

// A user's own server (the declared format of docs/configuration.md).
inline void acme(RecordedStream& s, int n, Variant v) {
  s.dialect = "declared";
  s.framing = "ndjson";
  s.path = "/acme/v1/generate";
  s.request_body = R"({"prompt":"hello","max_tokens":)" + std::to_string(n) + "}";
  s.response_head = head(s, "application/x-acme-events");
  for (int i = 0; i < n; ++i) {
    add(s, R"({"id":"r-1","model":"acme-7b","chunk":{"delta":")" + token_text(i) + R"("},"final":false})" "\n", true);
    if (v == Variant::keepalive && i % 4 == 1) add(s, "  \n", false, false);
    if (v == Variant::error_mid && i == n / 2) {
      add(s, R"({"id":"r-1","error":{"code":"overloaded"}})" "\n", false);
      s.error = true;
      return;
    }
  }
  add(s, R"({"id":"r-1","final":true,"stop_reason":"eos","usage":{"input_tokens":12,"output_tokens":)" +
             std::to_string(n) + "}}\n",
      false);
  s.usage_tokens = n;
  s.finish_reason = "eos";
}

}  // namespace detail

// The declared format that reads Format::declared_acme, as YAML.
inline const char* kAcmeFormatYaml = R"(formats:
  - name: acme
    path: "/acme/v1/generate*"
    content_type: application/x-acme-events
    framing: ndjson
    content: /chunk/delta
    finish: /final
    finish_value: "true"
    finish_reason: /stop_reason
    tokens: /usage/output_tokens
    prompt_tokens: /usage/input_tokens
    model: /model
    response_id: /id
    error: /error/code
    provider: acme
    operation: text_completion
)";

inline RecordedStream recorded_stream(Format f, int tokens, Variant v = Variant::plain) {
  using namespace detail;
  RecordedStream s;
  switch (f) {
    case Format::ollama_chat: s.name = "ollama_chat", ollama(s, tokens, v, true); break;
    case Format::ollama_generate: s.name = "ollama_generate", ollama(s, tokens, v, false); break;
    case Format::tgi: s.name = "tgi", tgi(s, tokens, v); break;
    case Format::llamacpp: s.name = "llamacpp", llamacpp(s, tokens, v); break;
    case Format::sglang: s.name = "sglang", sglang(s, tokens, v); break;
    case Format::vllm: s.name = "vllm", vllm(s, tokens, v); break;
    case Format::triton: s.name = "triton", triton(s, tokens, v); break;
    case Format::gemini: s.name = "gemini", gemini(s, tokens, v); break;
    case Format::responses: s.name = "responses", responses(s, tokens, v); break;
    case Format::declared_acme: s.name = "declared_acme", acme(s, tokens, v); break;
  }
  return s;
}

}  // namespace infertap::tools::native
