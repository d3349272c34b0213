// Fuzzes interpret_event / interpret_request_body. The first byte picks the
// SSE event name and the truncated flag; the rest is the payload. Every prefix
// of a short payload is also read as truncated (the scanner's main use).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "protocol/payload/interpreter.h"

using namespace infertap::protocol;

namespace {

void check(const EventMeaning& m) {
  if (m.model.size() > 128 || m.response_id.size() > 128 || m.finish_reason.size() > 128 ||
      m.error_type.size() > 128) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  constexpr std::string_view kTypes[] = {"", "message", "content_block_delta", "message_start", "message_delta",
                                         "message_stop", "error", "ping", "response.output_text.delta",
                                         "response.completed"};
  const std::string_view type = kTypes[(data[0] & 0x7f) % std::size(kTypes)];
  const bool truncated = data[0] & 0x80;
  const std::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);

  const EventMeaning whole = interpret_event(type, payload, truncated);
  check(whole);
  (void)interpret_request_body(payload);
  if (payload.size() <= 512) {
    for (std::size_t n = 0; n < payload.size(); n += 1 + n / 16) {
      const EventMeaning part = interpret_event(type, payload.substr(0, n), true);
      check(part);
      if (!part.from_partial && part.kind != EventKind::unparsed && part.kind != EventKind::done) std::abort();
    }
  }
  return 0;
}
