// Fuzzes HttpParser (both modes) over pieces and holes, feeding the body into
// SseParser and interpret_event as the agent does.
//
// Input: [control][n_ops ops...][stream bytes]. control bit0 = mode, bit1 =
// expect a HEAD response, bits 2..5 = number of op bytes. Each op (used in a
// cycle) makes one piece: length (op & 0x7f) + 1, and bit7 turns the piece
// into a hole (its bytes are skipped, as the capture would).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "protocol/http1/parser.h"
#include "protocol/payload/interpreter.h"
#include "protocol/sse/parser.h"

using namespace infertap::protocol;

namespace {

struct Sink : HttpMessageSink {
  SseParser sse{[](const SseEvent& e) {
    const EventMeaning m = interpret_event(e.type, e.data, e.truncated);
    if (m.model.size() > 128 || m.response_id.size() > 128) std::abort();
  }};
  std::uint64_t body_bytes = 0;
  bool in_body = false;
  void on_response_head(const ResponseHead& h, TimestampNs) override {
    if (h.content_type.size() > HttpParser::kMaxFieldValue) std::abort();
    if (h.joined_midstream) sse.resync();
    in_body = true;
  }
  void on_request_head(const RequestHead& h, TimestampNs) override {
    if (h.target.size() > HttpParser::kMaxFieldValue || h.host.size() > HttpParser::kMaxFieldValue) std::abort();
    in_body = true;
  }
  void on_body(std::span<const std::uint8_t> b, std::uint64_t position, TimestampNs ts) override {
    if (!in_body) std::abort();  // body bytes only inside a message
    // Body bytes come in stream order, never before bytes already delivered.
    if (position < next_body_position) std::abort();
    next_body_position = position + b.size();
    body_bytes += b.size();
    sse.feed(b, ts);
  }
  void on_body_gap(std::uint64_t n, TimestampNs ts) override { sse.gap(n, ts); }
  std::uint64_t next_body_position = 0;
  void on_message_end(TimestampNs ts) override {
    sse.end(ts);
    in_body = false;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t control = data[0];
  const std::size_t n_ops = std::min<std::size_t>((control >> 2) & 15, size - 1);
  const std::uint8_t* ops = data + 1;
  const std::uint8_t* stream = data + 1 + n_ops;
  const std::size_t stream_size = size - 1 - n_ops;

  Sink sink;
  HttpParser parser((control & 1) ? HttpParser::Mode::request : HttpParser::Mode::response, sink);
  if (control & 2) parser.expect_head_response();
  std::size_t at = 0;
  std::size_t fed = 0;
  for (std::size_t i = 0; at < stream_size; ++i) {
    const std::uint8_t op = n_ops ? ops[i % n_ops] : 0x7f;
    const std::size_t len = std::min<std::size_t>(stream_size - at, (op & 0x7f) + 1);
    if (op & 0x80) {
      parser.gap(len, i);
    } else {
      parser.feed({stream + at, len}, i);
      fed += len;
    }
    at += len;
  }
  if (parser.position() != stream_size) std::abort();
  if (sink.body_bytes > fed) std::abort();
  parser.close(at);
  sink.sse.end(at);
  return 0;
}
