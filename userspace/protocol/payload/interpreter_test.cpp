#include "protocol/payload/interpreter.h"

#include <gtest/gtest.h>

#include <string>

namespace infertap::protocol {

// Readable gtest failure messages.
void PrintTo(EventKind k, std::ostream* os) { *os << to_string(k); }
void PrintTo(Dialect d, std::ostream* os) { *os << to_string(d); }

namespace {

EventMeaning openai(std::string_view data, bool truncated = false) { return interpret_event("", data, truncated); }

const std::string kContentChunk =
    R"({"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,"model":"llama-3-8b",)"
    R"("choices":[{"index":0,"delta":{"content":" hello"},"logprobs":null,"finish_reason":null}]})";

TEST(Payload, OpenAiContent) {
  const EventMeaning m = openai(kContentChunk);
  EXPECT_EQ(m.kind, EventKind::content);
  EXPECT_EQ(m.dialect, Dialect::openai);
  EXPECT_EQ(m.response_id, "chatcmpl-abc");
  EXPECT_EQ(m.model, "llama-3-8b");
  EXPECT_EQ(m.finish_reason, "");
  EXPECT_FALSE(m.from_partial);
  EXPECT_FALSE(m.completion_tokens.has_value());
}

TEST(Payload, OpenAiKinds) {
  EXPECT_EQ(openai(R"({"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"}}]})").kind,
            EventKind::role_only);
  EXPECT_EQ(openai(R"({"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})").kind,
            EventKind::role_only);
  EXPECT_EQ(openai(R"({"id":"x","choices":[{"index":0,"delta":{"content":""}}]})").kind, EventKind::empty);
  EXPECT_EQ(openai(R"({"id":"x","choices":[{"index":0,"delta":{}}]})").kind, EventKind::empty);
  const EventMeaning stop =
      openai(R"({"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null})");
  EXPECT_EQ(stop.kind, EventKind::empty);
  EXPECT_EQ(stop.finish_reason, "stop");
  const EventMeaning usage =
      openai(R"({"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}})");
  EXPECT_EQ(usage.kind, EventKind::usage_only);
  EXPECT_EQ(usage.prompt_tokens, 12u);
  EXPECT_EQ(usage.completion_tokens, 34u);
  EXPECT_EQ(openai(R"({"choices":[{"delta":{"reasoning_content":"hmm"}}]})").kind, EventKind::content);
  EXPECT_EQ(openai(R"({"choices":[{"delta":{"reasoning":"hmm","content":null}}]})").kind, EventKind::content);
  EXPECT_EQ(openai(R"({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f"}}]}}]})").kind,
            EventKind::content);
  EXPECT_EQ(openai(R"({"choices":[{"delta":{"tool_calls":[]}}]})").kind, EventKind::empty);
  // Text completions.
  EXPECT_EQ(openai(R"({"id":"cmpl-1","object":"text_completion","choices":[{"text":" a","index":0}]})").kind,
            EventKind::content);
  EXPECT_EQ(openai(R"({"id":"cmpl-1","object":"text_completion","choices":[{"text":"","index":0,"finish_reason":"length"}]})")
                .finish_reason,
            "length");
}

TEST(Payload, OpenAiDoneAndErrors) {
  EXPECT_EQ(openai("[DONE]").kind, EventKind::done);
  EXPECT_EQ(openai(" [DONE] ").dialect, Dialect::openai);
  const EventMeaning err = openai(R"({"error":{"message":"boom","type":"server_error","code":null}})");
  EXPECT_EQ(err.kind, EventKind::error);
  EXPECT_EQ(err.error_type, "server_error");
  const EventMeaning code = openai(R"({"error":{"message":"slow down","code":"rate_limit_exceeded"}})");
  EXPECT_EQ(code.error_type, "rate_limit_exceeded");
  const EventMeaning vllm = openai(R"({"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400})");
  EXPECT_EQ(vllm.kind, EventKind::error);
  EXPECT_EQ(vllm.error_type, "BadRequestError");
  EXPECT_EQ(openai(R"({"error":"plain string"})").kind, EventKind::error);
  EXPECT_EQ(openai("not json").kind, EventKind::unparsed);
  EXPECT_EQ(openai("").kind, EventKind::unparsed);
  EXPECT_EQ(openai("[1,2]").kind, EventKind::unparsed);
  EXPECT_EQ(openai(R"({"hello":"world"})").kind, EventKind::unparsed);
}

TEST(Payload, ResponsesApi) {
  const EventMeaning delta = interpret_event(
      "response.output_text.delta",
      R"({"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","sequence_number":4})",
      false);
  EXPECT_EQ(delta.kind, EventKind::content);
  EXPECT_EQ(delta.dialect, Dialect::openai_responses);
  EXPECT_EQ(interpret_event("", R"({"type":"response.reasoning_text.delta","delta":"think"})", false).kind,
            EventKind::content);
  EXPECT_EQ(interpret_event("", R"({"type":"response.function_call_arguments.delta","delta":"{\"a\""})", false).kind,
            EventKind::content);
  EXPECT_EQ(interpret_event("", R"({"type":"response.output_text.delta","delta":""})", false).kind, EventKind::empty);
  const EventMeaning created = interpret_event(
      "", R"({"type":"response.created","response":{"id":"resp_1","model":"gpt-4.1","status":"in_progress"}})", false);
  EXPECT_EQ(created.kind, EventKind::control);
  EXPECT_EQ(created.response_id, "resp_1");
  EXPECT_EQ(created.model, "gpt-4.1");
  const EventMeaning done = interpret_event(
      "",
      R"({"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":10,"output_tokens":25,"total_tokens":35}}})",
      false);
  EXPECT_EQ(done.kind, EventKind::done);
  EXPECT_EQ(done.completion_tokens, 25u);
  EXPECT_EQ(done.prompt_tokens, 10u);
  EXPECT_EQ(done.finish_reason, "completed");
  const EventMeaning failed = interpret_event(
      "", R"({"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"server_error","message":"x"}}})",
      false);
  EXPECT_EQ(failed.kind, EventKind::error);
  EXPECT_EQ(failed.error_type, "server_error");
  const EventMeaning error =
      interpret_event("error", R"({"type":"error","code":"ERR_SOMETHING","message":"m","param":null,"sequence_number":1})", false);
  EXPECT_EQ(error.kind, EventKind::error);
  EXPECT_EQ(error.dialect, Dialect::openai_responses);
  EXPECT_EQ(error.error_type, "ERR_SOMETHING");
  EXPECT_EQ(interpret_event("", R"({"type":"response.output_text.done","text":"Hi"})", false).kind, EventKind::control);
}

TEST(Payload, Anthropic) {
  const EventMeaning start = interpret_event(
      "message_start",
      R"({"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4","stop_reason":null,"usage":{"input_tokens":25,"output_tokens":1}}})",
      false);
  EXPECT_EQ(start.kind, EventKind::control);
  EXPECT_EQ(start.dialect, Dialect::anthropic);
  EXPECT_EQ(start.response_id, "msg_01");
  EXPECT_EQ(start.model, "claude-sonnet-4");
  EXPECT_EQ(start.prompt_tokens, 25u);
  EXPECT_EQ(start.completion_tokens, 1u);
  for (const char* delta : {R"({"type":"text_delta","text":"Hi"})", R"({"type":"thinking_delta","thinking":"hmm"})",
                            R"({"type":"input_json_delta","partial_json":"{\"loc"})"}) {
    const std::string data = std::string(R"({"type":"content_block_delta","index":0,"delta":)") + delta + "}";
    EXPECT_EQ(interpret_event("content_block_delta", data, false).kind, EventKind::content) << data;
  }
  EXPECT_EQ(interpret_event("content_block_delta",
                            R"({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}})",
                            false)
                .kind,
            EventKind::control);
  EXPECT_EQ(interpret_event("content_block_delta",
                            R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}})", false)
                .kind,
            EventKind::empty);
  const EventMeaning md = interpret_event(
      "message_delta",
      R"({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}})",
      false);
  EXPECT_EQ(md.kind, EventKind::control);
  EXPECT_EQ(md.finish_reason, "end_turn");
  EXPECT_EQ(md.completion_tokens, 15u);
  EXPECT_EQ(interpret_event("message_stop", R"({"type":"message_stop"})", false).kind, EventKind::done);
  EXPECT_EQ(interpret_event("ping", R"({"type": "ping"})", false).kind, EventKind::control);
  EXPECT_EQ(interpret_event("content_block_start",
                            R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})", false)
                .kind,
            EventKind::control);
  EXPECT_EQ(interpret_event("content_block_stop", R"({"type":"content_block_stop","index":0})", false).kind,
            EventKind::control);
  const EventMeaning err = interpret_event(
      "error", R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})", false);
  EXPECT_EQ(err.kind, EventKind::error);
  EXPECT_EQ(err.dialect, Dialect::anthropic);
  EXPECT_EQ(err.error_type, "overloaded_error");
  // The SSE event name stands in when the payload lacks a type.
  EXPECT_EQ(interpret_event("message_stop", "{}", false).kind, EventKind::done);
}

TEST(Payload, TruncatedOpenAiContentFromPrefix) {
  const EventMeaning m =
      openai(R"({"id":"chatcmpl-abc","object":"chat.completion.chunk","model":"llama-3-8b","choices":[{"index":0,"delta":{"content":"x)",
             true);
  EXPECT_EQ(m.kind, EventKind::content);
  EXPECT_TRUE(m.from_partial);
  EXPECT_EQ(m.response_id, "chatcmpl-abc");
  EXPECT_EQ(m.model, "llama-3-8b");
  // Cut before the content value: nothing proven.
  EXPECT_EQ(openai(R"({"id":"c","choices":[{"index":0,"delta":{"content":")", true).kind, EventKind::unparsed);
  EXPECT_EQ(openai(R"({"id":"c","choices":[{"index":0,"delta":{"role":"assistant")", true).kind,
            EventKind::unparsed);
  // Cut model name is not reported.
  const EventMeaning cut = openai(R"({"id":"c","model":"llama-3)", true);
  EXPECT_EQ(cut.model, "");
  EXPECT_EQ(cut.response_id, "");
  // A cut number is not reported.
  EXPECT_FALSE(openai(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3)", true).completion_tokens);
  EXPECT_EQ(openai(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3)", true).prompt_tokens, 12u);
  // Data that is cut but not flagged (parse fails) is also read as a prefix.
  const EventMeaning unflagged = openai(kContentChunk.substr(0, kContentChunk.find(" hello") + 3), false);
  EXPECT_EQ(unflagged.kind, EventKind::content);
  EXPECT_TRUE(unflagged.from_partial);
}

TEST(Payload, TruncatedOtherDialects) {
  EXPECT_EQ(interpret_event("content_block_delta",
                            R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel)", true)
                .kind,
            EventKind::content);
  EXPECT_EQ(interpret_event("content_block_delta", R"({"type":"content_block_del)", true).kind, EventKind::unparsed);
  EXPECT_EQ(interpret_event("content_block_delta", "", true).dialect, Dialect::anthropic);
  EXPECT_EQ(interpret_event("", R"({"type":"response.output_text.delta","item_id":"m","delta":"a)", true).kind,
            EventKind::content);
  EXPECT_EQ(interpret_event("", R"({"type":"response.output_text.delta","item_id":"m","delta":")", true).kind,
            EventKind::unparsed);
  EXPECT_EQ(interpret_event("message_stop", R"({"type":"message_st)", true).kind, EventKind::done);
}

TEST(Payload, EscapedQuotesInContentDoNotMatchKeys) {
  // Content that spells keys and values of other kinds.
  const std::string tricky =
      R"({"id":"c1","choices":[{"index":0,"delta":{"content":"he said \"finish_reason\":\"stop\", \"error\":{\"type\":\"x\"}, \"usage\":{\"completion_tokens\":99} \\"},"finish_reason":null}]})";
  const EventMeaning m = openai(tricky);
  EXPECT_EQ(m.kind, EventKind::content);
  EXPECT_EQ(m.finish_reason, "");
  EXPECT_EQ(m.error_type, "");
  EXPECT_FALSE(m.completion_tokens);
  // Every prefix, read as truncated: never an error, never a finish reason, never usage.
  for (std::size_t n = 0; n <= tricky.size(); ++n) {
    const EventMeaning p = openai(std::string_view(tricky).substr(0, n), true);
    EXPECT_NE(p.kind, EventKind::error) << n;
    EXPECT_EQ(p.finish_reason, "") << n;
    EXPECT_FALSE(p.completion_tokens) << n;
    const std::size_t content_at = tricky.find("\"content\":\"") + 11;
    if (n <= content_at) {
      EXPECT_NE(p.kind, EventKind::content) << n;
    } else {
      EXPECT_EQ(p.kind, EventKind::content) << n;
    }
  }
  // Escaped content string holding an empty-looking value.
  EXPECT_EQ(openai(R"({"choices":[{"delta":{"content":"\"content\":\"\""}}]})").kind, EventKind::content);
  // simdjson unescapes keys of a complete object; the prefix scanner does not
  // claim a key spelled with escapes (nothing proven).
  EXPECT_EQ(openai(R"({"choices":[{"delta":{"cont\u0065nt":"x"}}]})", true).kind, EventKind::content);
  EXPECT_EQ(openai(R"({"choices":[{"delta":{"cont\u0065nt":"x)", true).kind, EventKind::unparsed);
}

TEST(Payload, EveryPrefixOfEveryDialectIsSafe) {
  const std::string samples[] = {
      kContentChunk,
      R"({"id":"x","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}})",
      R"({"type":"message_start","message":{"id":"msg_01","model":"claude","usage":{"input_tokens":25,"output_tokens":1}}})",
      R"({"type":"response.completed","response":{"id":"r","usage":{"input_tokens":1,"output_tokens":2}}})",
      R"({"a":[[[[[[[[[[[[{"b":"\\\""}]]]]]]]]]]]],"c":-1.5e3,"d":true,"e":null})",
  };
  for (const std::string& s : samples) {
    const EventMeaning whole = interpret_event("", s, false);
    for (std::size_t n = 0; n < s.size(); ++n) {
      const EventMeaning p = interpret_event("", std::string_view(s).substr(0, n), true);
      EXPECT_TRUE(p.from_partial || p.kind == EventKind::unparsed);
      // The prefix never claims more tokens or a different id than the whole.
      if (p.completion_tokens) {
        EXPECT_EQ(p.completion_tokens, whole.completion_tokens);
      }
      if (!p.response_id.empty()) {
        EXPECT_EQ(p.response_id, whole.response_id);
      }
      if (p.kind != EventKind::unparsed) {
        EXPECT_EQ(p.dialect, whole.dialect) << s.substr(0, n);
      }
    }
  }
}

TEST(Payload, StringCaps) {
  const std::string long_model(300, 'm');
  const EventMeaning m = openai(R"({"id":"x","model":")" + long_model + R"(","choices":[{"delta":{"content":"a"}}]})");
  EXPECT_EQ(m.model.size(), 128u);
}

TEST(Payload, RequestBody) {
  const RequestMeaning r = interpret_request_body(
      R"({"messages":[{"role":"user","content":"say \"model\":\"evil\", \"stream\":false"}],"model":"llama-3-8b","stream":true,"max_tokens":256})");
  EXPECT_EQ(r.model, "llama-3-8b");
  EXPECT_EQ(r.stream, true);
  EXPECT_EQ(r.max_tokens, 256u);
  const RequestMeaning c = interpret_request_body(R"({"model":"gpt-4o","max_completion_tokens":100,"stream":false})");
  EXPECT_EQ(c.stream, false);
  EXPECT_EQ(c.max_tokens, 100u);
  // Truncated head: only what was captured.
  const RequestMeaning t = interpret_request_body(R"({"model":"claude-sonnet-4","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"very long te)");
  EXPECT_EQ(t.model, "claude-sonnet-4");
  EXPECT_EQ(t.max_tokens, 1024u);
  EXPECT_EQ(t.stream, true);
  const RequestMeaning cut = interpret_request_body(R"({"messages":[{"role":"user","content":"x"}],"model":"lla)");
  EXPECT_EQ(cut.model, "");
  EXPECT_FALSE(cut.stream);
  EXPECT_FALSE(interpret_request_body("garbage").max_tokens);
  EXPECT_EQ(interpret_request_body(R"({"stream":tr)").stream, std::nullopt);
  EXPECT_EQ(interpret_request_body(R"({"max_tokens":12)").max_tokens, std::nullopt);
}

// Load context from the request: the output limit and include_usage, never text.
TEST(Payload, RequestBodyIncludeUsage) {
  const RequestMeaning r = interpret_request_body(
      R"({"model":"m","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":64})");
  EXPECT_EQ(r.include_usage, true);
  EXPECT_EQ(r.max_tokens, 64u);
  EXPECT_EQ(interpret_request_body(R"({"stream_options":{"include_usage":false}})").include_usage, false);
  EXPECT_EQ(interpret_request_body(R"({"model":"m","stream":true})").include_usage, std::nullopt) << "absent: unknown";
  // A key of that name inside the prompt text is no flag.
  EXPECT_EQ(interpret_request_body(R"({"messages":[{"content":"\"include_usage\":true"}]})").include_usage, std::nullopt);
  EXPECT_EQ(interpret_request_body(R"({"include_usage":true})").include_usage, std::nullopt) << "only under stream_options";
  // Cut before the value: unknown.
  EXPECT_EQ(interpret_request_body(R"({"stream_options":{"include_usage":tr)").include_usage, std::nullopt);
  EXPECT_EQ(interpret_request_body(R"({"stream_options":{"include_usage":true},"messages":[{"content":"long te)")
                .include_usage,
            true);
}

TEST(Payload, SystemFingerprint) {
  const EventMeaning m = openai(
      R"({"id":"c","object":"chat.completion.chunk","model":"gpt-4o","system_fingerprint":"fp_44709d6fcb",)"
      R"("choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]})");
  EXPECT_EQ(m.kind, EventKind::content);
  EXPECT_EQ(m.system_fingerprint, "fp_44709d6fcb");
  EXPECT_EQ(openai(kContentChunk).system_fingerprint, "");
  // Cut inside the value: not proven.
  EXPECT_EQ(openai(R"({"id":"c","object":"chat.completion.chunk","system_fingerprint":"fp_44)", true).system_fingerprint, "");
  // The usage chunk carries it too.
  EXPECT_EQ(openai(R"({"id":"c","system_fingerprint":"fp_2","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}})")
                .system_fingerprint,
            "fp_2");
}

TEST(Payload, ToString) {
  EXPECT_EQ(to_string(EventKind::usage_only), "usage_only");
  EXPECT_EQ(to_string(Dialect::openai_responses), "openai_responses");
  EXPECT_EQ(to_string(Dialect::openai_realtime), "openai_realtime");
}

// Realtime messages, as the websocket session hands them (type: the JSON "type").
EventMeaning realtime(std::string_view data, bool truncated = false) {
  EventContext ctx;
  ctx.path_hint = dialect_of_path("/v1/realtime?model=gpt-realtime");
  return interpret_event(ctx, "", data, truncated);
}

TEST(Payload, RealtimeIsChosenByItsPathOnly) {
  EXPECT_EQ(dialect_of_path("/v1/realtime?model=gpt-realtime"), Dialect::openai_realtime);
  EXPECT_EQ(dialect_of_path("/api-ws/v1/realtime"), Dialect::openai_realtime);
  EXPECT_EQ(dialect_of_path("/openai/realtime/?api-version=2025-04-01-preview"), Dialect::openai_realtime);
  EXPECT_EQ(dialect_of_path("/v1/realtime/sessions"), Dialect::unknown);
  const std::string delta = R"({"type":"response.output_text.delta","response_id":"resp_1","delta":"Hi"})";
  // The same names elsewhere are the Responses API's, as before.
  EXPECT_EQ(interpret_event("", delta, false).dialect, Dialect::openai_responses);
  EXPECT_EQ(realtime(delta).dialect, Dialect::openai_realtime);
}

TEST(Payload, RealtimeDeltas) {
  const EventMeaning text = realtime(
      R"({"type":"response.output_text.delta","event_id":"e","response_id":"resp_1","item_id":"i","output_index":0,"content_index":0,"delta":"Hi"})");
  EXPECT_EQ(text.kind, EventKind::content);
  EXPECT_EQ(text.dialect, Dialect::openai_realtime);
  EXPECT_EQ(text.response_id, "resp_1");
  EXPECT_FALSE(text.audio);
  const EventMeaning audio = realtime(R"({"type":"response.output_audio.delta","response_id":"resp_1","delta":"AAAA"})");
  EXPECT_EQ(audio.kind, EventKind::content);
  EXPECT_TRUE(audio.audio);
  EXPECT_TRUE(realtime(R"({"type":"response.audio.delta","response_id":"r","delta":"AAAA"})").audio);  // beta
  for (std::string_view type : {"response.text.delta", "response.audio_transcript.delta",
                                "response.output_audio_transcript.delta"}) {
    const EventMeaning m = realtime(R"({"type":")" + std::string(type) + R"(","response_id":"r","delta":"x"})");
    EXPECT_EQ(m.kind, EventKind::content) << type;
    EXPECT_FALSE(m.audio) << type;
  }
  EXPECT_EQ(realtime(R"({"type":"response.output_text.delta","response_id":"r","delta":""})").kind, EventKind::empty);
  // A delta the capture cut: what its head proves.
  const EventMeaning cut = realtime(R"({"type":"response.output_audio.delta","response_id":"r","delta":"AAAAAAAA)", true);
  EXPECT_EQ(cut.kind, EventKind::content);
  EXPECT_TRUE(cut.from_partial);
  EXPECT_EQ(realtime(R"({"type":"response.output_text.delta","response_id":"r","del)", true).kind, EventKind::unparsed);
}

TEST(Payload, RealtimeResponseEnds) {
  const EventMeaning created = realtime(R"({"type":"response.created","response":{"id":"resp_1","status":"in_progress","usage":null}})");
  EXPECT_EQ(created.kind, EventKind::control);
  EXPECT_EQ(created.response_id, "resp_1");
  const EventMeaning done = realtime(
      R"({"type":"response.done","response":{"id":"resp_1","status":"completed","status_details":null,"output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],)"
      R"("usage":{"total_tokens":30,"input_tokens":10,"output_tokens":20,"input_token_details":{"cached_tokens":0}}}})");
  EXPECT_EQ(done.kind, EventKind::done);
  EXPECT_TRUE(done.ends_stream);
  EXPECT_EQ(done.response_id, "resp_1");
  EXPECT_EQ(done.finish_reason, "completed");
  EXPECT_EQ(done.prompt_tokens, 10u);
  EXPECT_EQ(done.completion_tokens, 20u);
  const EventMeaning failed = realtime(
      R"({"type":"response.done","response":{"id":"r","status":"failed","status_details":{"type":"failed","error":{"type":"server_error","code":"overloaded"}}}})");
  EXPECT_EQ(failed.kind, EventKind::error);
  EXPECT_TRUE(failed.ends_stream);
  EXPECT_EQ(failed.error_type, "server_error");
  const EventMeaning coded = realtime(
      R"({"type":"response.done","response":{"id":"r","status":"failed","status_details":{"error":{"code":"rate_limit_exceeded"}}}})");
  EXPECT_EQ(coded.error_type, "rate_limit_exceeded");
  const EventMeaning cancelled = realtime(
      R"({"type":"response.done","response":{"id":"r","status":"cancelled","status_details":{"type":"cancelled","reason":"turn_detected"}}})");
  EXPECT_EQ(cancelled.kind, EventKind::done);
  EXPECT_EQ(cancelled.finish_reason, "turn_detected");
  const EventMeaning incomplete = realtime(
      R"({"type":"response.done","response":{"id":"r","status":"incomplete","status_details":{"type":"incomplete","reason":"max_output_tokens"}}})");
  EXPECT_EQ(incomplete.finish_reason, "max_output_tokens");
  const EventMeaning error = realtime(
      R"({"type":"error","event_id":"e","error":{"type":"invalid_request_error","code":"invalid_value","message":"m"}})");
  EXPECT_EQ(error.kind, EventKind::error);
  EXPECT_EQ(error.error_type, "invalid_request_error");
  EXPECT_EQ(realtime(R"({"type":"session.updated","session":{"output_audio_format":"pcm16"}})").kind, EventKind::control);
  EXPECT_EQ(realtime("not json").kind, EventKind::unparsed);
}

TEST(StreamEventInterpreter, RealtimeStreamByItsPath) {
  StreamEventInterpreter it;
  it.begin({.path = "/v1/realtime?model=gpt-realtime", .framing = EventFraming::websocket});
  const std::string delta = R"({"type":"response.output_audio.delta","response_id":"r","delta":"AAAA"})";
  const EventMeaning& m = it.interpret("response.output_audio.delta", delta, false);
  EXPECT_EQ(m.dialect, Dialect::openai_realtime);
  EXPECT_TRUE(m.audio);
  EXPECT_EQ(it.context().dialect, Dialect::openai_realtime);
  EXPECT_TRUE(it.interpret("response.output_audio.delta", delta, false).audio);  // from the memo too
  EXPECT_EQ(it.memo_hits(), 1u);
}

}  // namespace
}  // namespace infertap::protocol

// ---- StreamEventInterpreter: the per-stream memo ----------------------------

namespace {

std::string chat_chunk(std::string_view text, std::string_view finish = "null") {
  return R"({"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":")" +
         std::string(text) + R"("},"finish_reason":)" + std::string(finish) + "}]}";
}

}  // namespace

TEST(StreamEventInterpreter, SameShapeEventsAreRecognisedWithoutAParse) {
  using namespace infertap::protocol;
  StreamEventInterpreter it;
  for (std::string_view text : {"Hello", " wor", R"(ld \"q\")", "\\u00e9", ",", "\\n"}) {
    const std::string ev = chat_chunk(text);
    const EventMeaning fresh = interpret_event("", ev, false);
    const EventMeaning& memo = it.interpret("", ev, false);
    EXPECT_EQ(memo.kind, fresh.kind) << text;
    EXPECT_EQ(memo.kind, EventKind::content);
    EXPECT_EQ(memo.response_id, fresh.response_id);
    EXPECT_EQ(memo.model, fresh.model);
    EXPECT_EQ(memo.from_partial, fresh.from_partial);
  }
  EXPECT_EQ(it.memo_hits(), 5u);  // all but the first
}

TEST(StreamEventInterpreter, AnyDifferenceAroundTheTextForcesAFullParse) {
  using namespace infertap::protocol;
  StreamEventInterpreter it;
  it.interpret("", chat_chunk("a"), false);
  // finish_reason set: different suffix.
  EXPECT_EQ(it.interpret("", chat_chunk("b", "\"stop\""), false).finish_reason, "stop");
  it.interpret("", chat_chunk("a"), false);
  // Empty text is not a token.
  EXPECT_EQ(it.interpret("", chat_chunk(""), false).kind, EventKind::empty);
  it.interpret("", chat_chunk("a"), false);
  // An unescaped quote ends the string early: the suffix no longer lines up.
  const std::string broken = chat_chunk(R"(x"},"usage":{"completion_tokens":5}})");
  EXPECT_EQ(it.interpret("", broken, false).kind, interpret_event("", broken, false).kind);
  it.interpret("", chat_chunk("a"), false);
  // Raw control characters and surrogate escapes go to the full parser.
  const std::string control = chat_chunk(std::string("x\x01y"));
  EXPECT_EQ(it.interpret("", control, false).from_partial, interpret_event("", control, false).from_partial);
  const std::string surrogate = chat_chunk("\\ud83d\\ude00");
  EXPECT_EQ(it.interpret("", surrogate, false).kind, EventKind::content);
  // A truncated event is never answered from the memo.
  EXPECT_TRUE(it.interpret("", chat_chunk("a"), true).from_partial);
  EXPECT_EQ(it.memo_hits(), 0u);
}
