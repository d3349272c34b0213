// Fuzzes the interpreter of realtime API messages (Dialect::openai_realtime:
// OpenAI Realtime GA and beta names, Qwen-Omni), begun as the websocket
// session's responses begin it (EventFraming::websocket, the upgrade's
// /v1/realtime?model=... target), or as an SSE stream of the same path. Each
// event's type is what the session reads from the message (websocket/realtime.h). tests/fuzz/dialect_fuzz.h's checks:
// the stream's answer equals a fresh interpret_event's (its memo included),
// values stay capped, the dialect holds, a cut event says only what it
// proves; and an audio delta's content says it is audio.
//
// Input: [control][bytes...]. Bit 0 of control: 0 template (a delta of the
// recorded conversation, bits 1..3 pick which, with its text replaced by the
// bytes), 1 raw (one message per line; bit 1 cuts every other one). Bit 4:
// SSE framing and a path without a query.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dialect_fuzz.h"
#include "protocol/websocket/realtime.h"

namespace {

using namespace infertap::protocol;
using infertap::fuzz::capped;
using infertap::fuzz::same_facts;
using infertap::fuzz::with_text;

// A recorded response: session traffic, text, audio and transcript deltas (GA
// and beta names), its end with usage.
const std::vector<std::string> kConversation = {
    R"({"type":"session.created","event_id":"event_0","session":{"id":"sess_1","model":"gpt-realtime","output_audio_format":"pcm16"}})",
    R"({"type":"response.created","event_id":"event_1","response":{"object":"realtime.response","id":"resp_1","status":"in_progress","output":[],"usage":null}})",
    R"({"type":"rate_limits.updated","event_id":"event_2","rate_limits":[{"name":"tokens","limit":40000,"remaining":39000}]})",
    R"({"type":"response.output_text.delta","event_id":"event_3","response_id":"resp_1","item_id":"item_1","output_index":0,"content_index":0,"delta":"The"})",
    R"({"type":"response.output_text.delta","event_id":"event_4","response_id":"resp_1","item_id":"item_1","output_index":0,"content_index":0,"delta":" sky \"blue\""})",
    R"({"type":"response.text.delta","event_id":"event_5","response_id":"resp_1","item_id":"item_1","output_index":0,"content_index":0,"delta":" caf\u00e9"})",
    R"({"type":"response.output_audio.delta","event_id":"event_6","response_id":"resp_1","item_id":"item_2","output_index":1,"content_index":0,"delta":"AAAAAQACAAMABAAF"})",
    R"({"type":"response.audio.delta","event_id":"event_7","response_id":"resp_1","item_id":"item_2","output_index":1,"content_index":0,"delta":"AAYABwAIAAk="})",
    R"({"type":"response.output_audio_transcript.delta","event_id":"event_8","response_id":"resp_1","item_id":"item_2","output_index":1,"content_index":0,"delta":"Hi"})",
    R"({"type":"response.done","event_id":"event_9","response":{"object":"realtime.response","id":"resp_1","status":"completed","status_details":null,"usage":{"total_tokens":30,"input_tokens":10,"output_tokens":20}}})",
};
constexpr std::size_t kDeltas[] = {3, 4, 5, 6, 7, 8};

class Checker {
 public:
  explicit Checker(bool by_path) {
    StreamContext context;
    context.path = by_path ? "/v1/realtime" : "/v1/realtime?model=gpt-realtime";
    context.framing = by_path ? EventFraming::sse : EventFraming::websocket;
    context.media_type = "application/json";
    stream_.begin(context);
  }

  void feed(std::string_view data, bool truncated) {
    const std::string_view type = websocket::read_message(data).type;
    const EventContext before = stream_.context();
    const EventMeaning fresh = interpret_event(before, type, data, truncated);
    const EventMeaning got = stream_.interpret(type, data, truncated, static_cast<std::uint32_t>(data.size()));
    DIALECT_FUZZ_CHECK(capped(got) && capped(fresh), "values capped at 128 bytes");
    DIALECT_FUZZ_CHECK(same_facts(got, fresh) && got.kind == fresh.kind && got.audio == fresh.audio,
                       "the stream's meaning equals a fresh interpretation's");
    DIALECT_FUZZ_CHECK(got.dialect == Dialect::openai_realtime || got.kind == EventKind::done,
                       "a realtime stream's events are realtime's");
    DIALECT_FUZZ_CHECK(!got.audio || websocket::is_audio_delta(type), "only audio deltas are audio");
    if (data.size() <= 256 && !truncated) {
      for (std::size_t n = 0; n < data.size(); n += 1 + n / 8) {
        const EventMeaning part = interpret_event(before, type, data.substr(0, n), true);
        DIALECT_FUZZ_CHECK(capped(part), "values of a cut event capped");
        DIALECT_FUZZ_CHECK(part.from_partial || part.kind == EventKind::unparsed || part.kind == EventKind::done,
                           "a cut event's meaning is partial");
      }
    }
  }

 private:
  StreamEventInterpreter stream_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t control = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  Checker checker(control & 0x10);
  if ((control & 1) == 0) {
    const std::size_t pick = kDeltas[((control >> 1) & 7) % std::size(kDeltas)];
    for (std::size_t i = 0; i < kConversation.size(); ++i) {
      if (i == pick) checker.feed(with_text(kConversation[i], "\"delta\":", bytes), false);
      checker.feed(kConversation[i], false);
    }
    return 0;
  }
  const bool cut_some = control & 2;
  std::string_view rest = bytes;
  for (std::size_t n = 0; !rest.empty() && n < 64; ++n) {
    const std::size_t lf = rest.find('\n');
    const std::string_view line = rest.substr(0, lf);
    rest.remove_prefix(lf == std::string_view::npos ? rest.size() : lf + 1);
    checker.feed(line, cut_some && n % 2 == 1);
  }
  return 0;
}
