// The servers' own dialects, one by one, at the interpreter: what makes a
// token event, the end of the stream, its finish reason and its own counts;
// how the first event's shape (never a product name) and the request path
// decide the dialect; errors mid-stream; events the capture cut; and the
// declared formats' pointers. The same streams, whole, through the pipeline:
// tests/unit/native_streams_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "protocol/payload/declared.h"
#include "protocol/payload/interpreter.h"

namespace infertap::protocol {
namespace {

// One event as the first of a stream to `path`.
EventMeaning first(std::string_view path, std::string_view data, std::string_view type = "") {
  return interpret_event(EventContext{Dialect::unknown, dialect_of_path(path)}, type, data, false);
}

// Events of one stream to `path`, through the per-stream interpreter.
std::vector<EventMeaning> stream(std::string_view path, const std::vector<std::string>& events,
                                 std::shared_ptr<const DeclaredFormat> declared = nullptr) {
  StreamEventInterpreter s;
  StreamContext c;
  c.path = path;
  c.declared = std::move(declared);
  s.begin(c);
  std::vector<EventMeaning> out;
  for (const std::string& e : events) out.push_back(s.interpret("", e, false, static_cast<std::uint32_t>(e.size())));
  return out;
}

TEST(NativeDialects, PathsNameTheirDialects) {
  EXPECT_EQ(dialect_of_path("/api/chat"), Dialect::ollama);
  EXPECT_EQ(dialect_of_path("/api/generate"), Dialect::ollama);
  EXPECT_EQ(dialect_of_path("/generate_stream"), Dialect::tgi);
  EXPECT_EQ(dialect_of_path("/v2/models/ensemble/generate_stream"), Dialect::triton);
  EXPECT_EQ(dialect_of_path("/completion"), Dialect::llamacpp);
  EXPECT_EQ(dialect_of_path("/generate"), Dialect::sglang);  // vLLM's /generate shows itself by its shape
  EXPECT_EQ(dialect_of_path("/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"), Dialect::gemini);
  EXPECT_EQ(dialect_of_path("/v1/responses"), Dialect::openai_responses);
  EXPECT_EQ(dialect_of_path("/v1/chat/completions"), Dialect::openai);
  EXPECT_EQ(dialect_of_path("/v1/completions"), Dialect::openai);
  EXPECT_EQ(dialect_of_path("/metrics"), Dialect::unknown);
}

TEST(NativeDialects, OllamaChatAndGenerate) {
  const auto m = first("/api/chat",
                       R"({"model":"llama3.2","created_at":"2024-07-01T08:52:19.1Z","message":{"role":"assistant","content":" The"},"done":false})");
  EXPECT_EQ(m.dialect, Dialect::ollama);
  EXPECT_EQ(m.kind, EventKind::content);
  EXPECT_EQ(m.model, "llama3.2");
  EXPECT_FALSE(m.ends_stream);
  const auto g = first("/api/generate", R"({"model":"llama3.2","created_at":"x","response":" sky","done":false})");
  EXPECT_EQ(g.dialect, Dialect::ollama);
  EXPECT_EQ(g.kind, EventKind::content);
  const auto last = first("/api/chat",
                          R"({"model":"llama3.2","created_at":"x","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,)"
                          R"("total_duration":4883583458,"prompt_eval_count":26,"eval_count":290,"eval_duration":4535599000})");
  EXPECT_EQ(last.kind, EventKind::done);
  EXPECT_TRUE(last.ends_stream);
  EXPECT_EQ(last.finish_reason, "stop");
  EXPECT_EQ(last.completion_tokens, 290u);
  EXPECT_EQ(last.prompt_tokens, 26u);
  // A thinking model's thoughts are generated tokens too; an empty message is none.
  EXPECT_EQ(first("/api/chat", R"({"model":"q","created_at":"x","message":{"role":"assistant","content":"","thinking":"hm"},"done":false})").kind,
            EventKind::content);
  EXPECT_EQ(first("/api/chat", R"({"model":"q","created_at":"x","message":{"role":"assistant","content":""},"done":false})").kind,
            EventKind::empty);
}

TEST(NativeDialects, OllamaErrorMidStreamIsTheStreamsError) {
  const auto m = stream("/api/chat", {R"({"model":"m","created_at":"x","message":{"role":"assistant","content":"a"},"done":false})",
                                      R"({"error":"an error was encountered while running the model: unexpected EOF"})"});
  EXPECT_EQ(m[1].kind, EventKind::error);
  EXPECT_EQ(m[1].dialect, Dialect::ollama);
  EXPECT_TRUE(m[1].error_type.empty()) << "a message is never the error type";
  // An error first: the path says whose it is.
  EXPECT_EQ(first("/api/generate", R"({"error":"model 'x' not found"})").dialect, Dialect::ollama);
}

TEST(NativeDialects, TgiTokensSpecialTokensAndDetails) {
  const auto m = first("/generate_stream",
                       R"({"index":1,"token":{"id":415,"text":" The","logprob":-0.1,"special":false},"generated_text":null,"details":null})");
  EXPECT_EQ(m.dialect, Dialect::tgi);
  EXPECT_EQ(m.kind, EventKind::content);
  const auto eos = first("/generate_stream",
                         R"({"index":7,"token":{"id":2,"text":"</s>","logprob":-0.01,"special":true},"generated_text":"The sky",)"
                         R"("details":{"finish_reason":"eos_token","generated_tokens":7,"seed":null,"input_length":6}})");
  EXPECT_EQ(eos.kind, EventKind::done) << "a special token is generated, but is no text";
  EXPECT_TRUE(eos.ends_stream);
  EXPECT_EQ(eos.finish_reason, "eos_token");
  EXPECT_EQ(eos.completion_tokens, 7u);
  EXPECT_EQ(eos.prompt_tokens, 6u);
  const auto err = first("/generate_stream", R"({"error":"Request failed during generation: CUDA out of memory","error_type":"generation"})");
  EXPECT_EQ(err.kind, EventKind::error);
  EXPECT_EQ(err.dialect, Dialect::tgi);
  EXPECT_EQ(err.error_type, "generation");
}

TEST(NativeDialects, LlamaCppContentStopAndTimings) {
  const auto m = first("/completion", R"({"index":0,"content":" The","tokens":[],"stop":false,"id_slot":-1,"tokens_predicted":1})");
  EXPECT_EQ(m.dialect, Dialect::llamacpp);
  EXPECT_EQ(m.kind, EventKind::content);
  EXPECT_FALSE(m.completion_tokens) << "counts that run along are read on the last event only";
  const auto last = first("/completion",
                          R"({"content":"","stop":true,"model":"gpt-3.5-turbo","tokens_predicted":12,"tokens_evaluated":5,)"
                          R"("stop_type":"limit","timings":{"prompt_n":5,"predicted_n":12,"predicted_ms":160.5}})");
  EXPECT_EQ(last.kind, EventKind::done);
  EXPECT_EQ(last.finish_reason, "limit");
  EXPECT_EQ(last.completion_tokens, 12u);
  EXPECT_EQ(last.prompt_tokens, 5u);
  const auto err = first("/completion", R"({"error":{"code":500,"message":"failed to decode the batch","type":"server_error"}})");
  EXPECT_EQ(err.kind, EventKind::error);
  EXPECT_EQ(err.dialect, Dialect::llamacpp);
  EXPECT_EQ(err.error_type, "server_error");
}

TEST(NativeDialects, SglangCountsATokenEventWhenItsTextGrew) {
  const std::string meta = R"(,"meta_info":{"id":"9f1c","finish_reason":null,"prompt_tokens":6,"completion_tokens":)";
  const auto m = stream("/generate", {R"({"text":" The","output_ids":[1])" + meta + "1}}",
                                      R"({"text":" The sky","output_ids":[1,2])" + meta + "2}}",
                                      R"({"text":" The sky","output_ids":[1,2])" + meta + "2}}",
                                      R"({"text":" The sky is","output_ids":[1,2,3],"meta_info":{"id":"9f1c","finish_reason":{"type":"length","length":3},)"
                                      R"("prompt_tokens":6,"completion_tokens":3}})",
                                      "[DONE]"});
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].dialect, Dialect::sglang);
  EXPECT_EQ(m[0].kind, EventKind::content);
  EXPECT_EQ(m[0].response_id, "9f1c");
  EXPECT_EQ(m[1].kind, EventKind::content);
  EXPECT_EQ(m[2].kind, EventKind::empty) << "the same text again: no new token";
  EXPECT_EQ(m[3].kind, EventKind::content);
  EXPECT_TRUE(m[3].ends_stream);
  EXPECT_EQ(m[3].finish_reason, "length");
  EXPECT_EQ(m[3].completion_tokens, 3u);
  EXPECT_EQ(m[3].prompt_tokens, 6u);
  EXPECT_EQ(m[4].kind, EventKind::done);
  EXPECT_EQ(m[4].dialect, Dialect::sglang);
}

TEST(NativeDialects, VllmGenerateIsCumulativeAndShownByItsTextList) {
  const auto m = stream("/generate", {R"({"text": ["San Francisco is a city"]})", R"({"text": ["San Francisco is a city in"]})",
                                      R"({"text": ["San Francisco is a city in"]})"});
  EXPECT_EQ(m[0].dialect, Dialect::vllm) << "the shape wins over the path's SGLang";
  EXPECT_EQ(m[0].kind, EventKind::content);
  EXPECT_EQ(m[1].kind, EventKind::content);
  EXPECT_EQ(m[2].kind, EventKind::empty);
  EXPECT_FALSE(m[1].completion_tokens) << "vLLM's /generate counts nothing: token_source events";
}

TEST(NativeDialects, TritonTextOutput) {
  const auto m = first("/v2/models/ensemble/generate_stream",
                       R"({"model_name":"ensemble","model_version":"1","sequence_end":false,"text_output":" The"})");
  EXPECT_EQ(m.dialect, Dialect::triton);
  EXPECT_EQ(m.kind, EventKind::content);
  EXPECT_EQ(m.model, "ensemble");
  const auto err = first("/v2/models/ensemble/generate_stream", R"({"error":"in ensemble 'ensemble': out of memory"})");
  EXPECT_EQ(err.kind, EventKind::error);
  EXPECT_EQ(err.dialect, Dialect::triton);
}

TEST(NativeDialects, GeminiPartsUsageAndFinish) {
  const std::string path = "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse";
  const auto m = first(path, R"({"candidates": [{"content": {"parts": [{"text": " The"}],"role": "model"},"index": 0}],)"
                             R"("usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 1,"totalTokenCount": 9},)"
                             R"("modelVersion": "gemini-2.0-flash","responseId": "mVz8"})");
  EXPECT_EQ(m.dialect, Dialect::gemini);
  EXPECT_EQ(m.kind, EventKind::content);
  EXPECT_EQ(m.model, "gemini-2.0-flash");
  EXPECT_EQ(m.response_id, "mVz8");
  EXPECT_EQ(m.completion_tokens, 1u) << "the count runs along the stream: the last one wins";
  EXPECT_EQ(m.prompt_tokens, 8u);
  const auto last = first(path, R"({"candidates": [{"content": {"parts": [{"text": "."}],"role": "model"},"finishReason": "STOP","index": 0}],)"
                                R"("usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 5,"thoughtsTokenCount": 20}})");
  EXPECT_EQ(last.kind, EventKind::content) << "the last event carries text too";
  EXPECT_TRUE(last.ends_stream);
  EXPECT_EQ(last.finish_reason, "STOP");
  EXPECT_EQ(last.completion_tokens, 25u) << "thoughts are output tokens too";
  const auto err = first(path, R"({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}})");
  EXPECT_EQ(err.kind, EventKind::error);
  EXPECT_EQ(err.dialect, Dialect::gemini);
  EXPECT_FALSE(err.error_type.empty());
}

TEST(NativeDialects, TheShapeDecidesNeverAProductName) {
  // An OpenAI chunk naming an Ollama model on an Ollama server's /v1 path is OpenAI.
  EXPECT_EQ(first("/v1/chat/completions",
                  R"({"id":"c","object":"chat.completion.chunk","model":"ollama/llama3.2","choices":[{"index":0,"delta":{"content":"x"}}]})")
                .dialect,
            Dialect::openai);
  // An Ollama object behind a gateway's own path is Ollama.
  EXPECT_EQ(first("/llm/proxy", R"({"model":"tgi-7b","created_at":"x","response":"x","done":false})").dialect,
            Dialect::ollama);
  // No shape and no path: nothing is guessed.
  EXPECT_EQ(first("/llm/proxy", R"({"model":"llama.cpp","text":"x"})").dialect, Dialect::openai)
      << "a chunk with an id or model but no choices reads as an OpenAI keep-alive";
  EXPECT_EQ(first("/llm/proxy", R"({"foo":"bar"})").kind, EventKind::unparsed);
}

TEST(NativeDialects, AStreamKeepsTheDialectItsFirstEventShowed) {
  // Ollama's last object has no text: read as Ollama's, not guessed again.
  const auto m = stream("/x", {R"({"model":"m","created_at":"x","response":"a","done":false})",
                               R"({"model":"m","created_at":"x","response":"","done":true,"eval_count":1})"});
  EXPECT_EQ(m[1].dialect, Dialect::ollama);
  EXPECT_EQ(m[1].kind, EventKind::done);
  EXPECT_EQ(m[1].completion_tokens, 1u);
}

TEST(NativeDialects, ACutEventSaysOnlyWhatItsHeadProves) {
  const std::string full = R"({"model":"llama3.2","created_at":"x","message":{"role":"assistant","content":" The"},"done":false})";
  const auto cut = interpret_event(EventContext{Dialect::ollama, Dialect::ollama}, "", full.substr(0, full.find("content") + 12), true);
  EXPECT_TRUE(cut.from_partial);
  EXPECT_EQ(cut.kind, EventKind::content) << "its text had begun";
  const auto head = interpret_event(EventContext{Dialect::ollama, Dialect::ollama}, "", full.substr(0, 20), true);
  EXPECT_EQ(head.kind, EventKind::unparsed);
  const std::string last = R"({"model":"m","created_at":"x","response":"","done":true,"context":[1,2,3)";
  const auto end = interpret_event(EventContext{Dialect::ollama, Dialect::ollama}, "", last, true);
  EXPECT_TRUE(end.ends_stream) << "done: true came before the cut";
  EXPECT_EQ(end.kind, EventKind::done);
}

TEST(NativeDialects, SameShapeNativeEventsSkipTheParse) {
  StreamEventInterpreter s;
  StreamContext c;
  c.path = "/api/generate";
  s.begin(c);
  for (int i = 0; i < 20; ++i) {
    const std::string e = R"({"model":"m","created_at":"2024-07-01T08:52:19.)" + std::to_string(100000 + i) +
                          R"(Z","response":"t)" + std::to_string(i) + R"(","done":false})";
    EXPECT_EQ(s.interpret("", e, false).kind, EventKind::content);
  }
  EXPECT_GE(s.memo_hits(), 18u) << "created_at and the text are holes";
  const std::string last = R"({"model":"m","created_at":"x","response":"","done":true,"eval_count":20})";
  EXPECT_EQ(s.interpret("", last, false).kind, EventKind::done);
}

// ---- declared formats -----------------------------------------------------------

std::shared_ptr<const DeclaredFormat> acme() {
  auto f = std::make_shared<DeclaredFormat>();
  f->name = "acme";
  f->path = "/acme/*";
  f->content = "/chunk/delta";
  f->finish = "/final";
  f->finish_value = "true";
  f->finish_reason = "/stop_reason";
  f->tokens = "/usage/output_tokens";
  f->prompt_tokens = "/usage/input_tokens";
  f->model = "/model";
  f->response_id = "/id";
  f->error = "/error/code";
  return f;
}

TEST(DeclaredDialect, PointersSayWhatEachEventIs) {
  const auto f = acme();
  const auto tok = interpret_declared(*f, R"({"id":"r-1","model":"acme-7b","chunk":{"delta":"The"},"final":false})", false);
  EXPECT_EQ(tok.dialect, Dialect::declared);
  EXPECT_EQ(tok.kind, EventKind::content);
  EXPECT_EQ(tok.model, "acme-7b");
  EXPECT_EQ(tok.response_id, "r-1");
  const auto last = interpret_declared(*f, R"({"final":true,"stop_reason":"eos","usage":{"input_tokens":12,"output_tokens":2}})", false);
  EXPECT_EQ(last.kind, EventKind::done);
  EXPECT_TRUE(last.ends_stream);
  EXPECT_EQ(last.finish_reason, "eos");
  EXPECT_EQ(last.completion_tokens, 2u);
  EXPECT_EQ(last.prompt_tokens, 12u);
  EXPECT_EQ(interpret_declared(*f, R"({"final":"true"})", false).kind, EventKind::done) << "compared as text";
  EXPECT_EQ(interpret_declared(*f, R"({"final":false,"chunk":{"delta":""}})", false).kind, EventKind::empty);
  const auto err = interpret_declared(*f, R"({"id":"r-1","error":{"code":"overloaded"}})", false);
  EXPECT_EQ(err.kind, EventKind::error);
  EXPECT_EQ(err.error_type, "overloaded");
  EXPECT_EQ(interpret_declared(*f, "not json", false).kind, EventKind::unparsed);
}

TEST(DeclaredDialect, ACountThatIsNoNumberIsNoCount) {
  // Found by fuzz_dialect_declared: an empty or odd value where a count goes
  // once threw out of the interpreter.
  const auto f = acme();
  for (const char* e : {R"({"usage":{"output_tokens":,"input_tokens":}})", R"({"usage":{"output_tokens":-3}})",
                        R"({"usage":{"output_tokens":1.5}})", R"({"usage":{"output_tokens":99999999999999999999999}})",
                        R"({"usage":{"output_tokens":"7"}})"}) {
    for (bool cut : {false, true}) {
      const auto m = interpret_declared(*f, e, cut);
      EXPECT_FALSE(m.completion_tokens) << e;
      EXPECT_FALSE(m.prompt_tokens) << e;
    }
  }
  EXPECT_EQ(interpret_declared(*f, R"({"usage":{"output_tokens":18446744073709551615}})", false).completion_tokens,
            18446744073709551615ull);
}

TEST(DeclaredDialect, ACutEventIsPartialEvenWhenItsHeadParses) {
  const auto f = acme();
  // The captured bytes happen to close an object: what was cut is still unknown.
  const auto m = interpret_declared(*f, R"({"chunk":{"delta":"x"}})", true);
  EXPECT_TRUE(m.from_partial);
  EXPECT_EQ(m.kind, EventKind::content);
  const auto head = interpret_declared(*f, R"({"id":"r-1","chunk":{"del)", true);
  EXPECT_TRUE(head.from_partial);
  EXPECT_EQ(head.kind, EventKind::unparsed);
}

TEST(DeclaredDialect, CumulativeTextCountsGrowth) {
  auto f = std::make_shared<DeclaredFormat>();
  f->name = "studio";
  f->content = "/output/text";
  f->cumulative = true;
  f->finish = "/status";
  f->finish_value = "completed";
  const auto m = stream("/studio/stream", {R"({"output":{"text":"a"},"status":"running"})",
                                           R"({"output":{"text":"ab"},"status":"running"})",
                                           R"({"output":{"text":"ab"},"status":"running"})",
                                           R"({"output":{"text":"abc"},"status":"completed"})"},
                        f);
  EXPECT_EQ(m[0].kind, EventKind::content);
  EXPECT_EQ(m[1].kind, EventKind::content);
  EXPECT_EQ(m[2].kind, EventKind::empty);
  EXPECT_EQ(m[3].kind, EventKind::content);
  EXPECT_TRUE(m[3].ends_stream);
}

TEST(DeclaredDialect, TheFirstFormatCoveringAResponseReadsIt) {
  DeclaredFormats formats;
  auto a = std::make_shared<DeclaredFormat>(*acme());
  a->content_type = "application/x-acme-*";
  auto b = std::make_shared<DeclaredFormat>(*acme());
  b->name = "any-acme";
  formats = {a, b};
  EXPECT_EQ(match_declared(formats, "/acme/v1/generate?x=1", "application/x-acme-events"), a);
  EXPECT_EQ(match_declared(formats, "/acme/v1/generate", "application/json"), b);
  EXPECT_EQ(match_declared(formats, "/other", "application/x-acme-events"), nullptr);
  EXPECT_EQ(media_type("Application/X-NDJSON; charset=utf-8"), "Application/X-NDJSON") << "lower-cased by the caller";
}

}  // namespace
}  // namespace infertap::protocol
