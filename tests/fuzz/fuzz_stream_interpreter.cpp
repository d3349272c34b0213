// Differential fuzzer for StreamEventInterpreter's memo: whatever a stream's
// earlier event taught it, its answer for the next event must equal a fresh
// interpret_event of that event given the stream's context before it (the
// dialect its first event showed). The second event is built from the first
// with its generated text replaced by fuzzer bytes, so the memo path (same
// bytes around the text) is what gets explored, escapes and quotes included.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "protocol/payload/interpreter.h"

using namespace infertap::protocol;

namespace {

bool same(const EventMeaning& a, const EventMeaning& b) {
  return a.kind == b.kind && a.dialect == b.dialect && a.response_id == b.response_id && a.model == b.model &&
         a.finish_reason == b.finish_reason && a.error_type == b.error_type &&
         a.completion_tokens == b.completion_tokens && a.prompt_tokens == b.prompt_tokens &&
         a.from_partial == b.from_partial;
}

// Replaces the first text value after `key` with `text` (raw bytes).
std::string with_text(std::string_view event, std::string_view key, std::string_view text) {
  const std::size_t at = event.find(key);
  if (at == std::string_view::npos) return std::string(text);
  const std::size_t body = at + key.size();
  std::size_t close = body;
  while (close < event.size() && event[close] != '"') close += event[close] == '\\' ? 2 : 1;
  if (close >= event.size()) return std::string(text);
  return std::string(event.substr(0, body)) + std::string(text) + std::string(event.substr(close));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  constexpr std::string_view kTypes[] = {"", "content_block_delta", "message_delta", "response.output_text.delta"};
  constexpr std::string_view kKeys[] = {"\"content\":\"", "\"text\":\"", "\"delta\":\""};
  const std::string_view type = kTypes[data[0] % std::size(kTypes)];
  const std::string_view key = kKeys[(data[0] >> 2) % std::size(kKeys)];
  const std::size_t first_len = data[1];
  const std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  const std::string_view first = rest.substr(0, std::min(first_len, rest.size()));
  const std::string_view text = rest.substr(first.size());
  const std::string second = with_text(first, key, text);

  StreamEventInterpreter interpreter;
  for (std::string_view event : {first, std::string_view(second), first}) {
    // A fresh read given what the stream knew before it (its dialect, once an event showed it).
    EventMeaning fresh = interpret_event(interpreter.context(), type, event, false);
    const EventMeaning& got = interpreter.interpret(type, event, false, static_cast<std::uint32_t>(event.size()));
    // Cumulative text (SGLang, vLLM): only the stream knows whether it grew.
    const bool cumulative = got.dialect == Dialect::sglang || got.dialect == Dialect::vllm;
    if (cumulative && fresh.kind == EventKind::content && (got.kind == EventKind::empty || got.kind == EventKind::done))
      fresh.kind = got.kind;
    if (!same(got, fresh)) std::abort();
  }
  return 0;
}
