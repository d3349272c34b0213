// The events of one response body, whatever protocol carried it: HTTP/1
// (de-chunked body bytes) and HTTP/2 (a stream's DATA payloads) both hand the
// body here with the stream position of every byte, and get back StreamEvents
// whose `end_position` is the position of the event's last byte.
//
//   body bytes / holes --> [decoder] --> SSE | NDJSON | gRPC messages --> ExchangeSink
//
// A streamed JSON body of undecided kind is held until its first bytes say
// whether it is JSON lines; its response is announced then.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/body/grpc.h"
#include "protocol/encoding/decoder.h"
#include "protocol/exchange.h"
#include "protocol/payload/declared.h"
#include "protocol/ndjson/parser.h"
#include "protocol/sse/parser.h"

namespace infertap::protocol {

// How a response body's events are delimited, as its head (or first bytes) say.
enum class BodyEventKind : std::uint8_t { none, sse, ndjson, sniff, grpc };

// What a response head says about its body.
struct BodyTraits {
  int status = 0;
  std::string_view media;    // media type, lower-cased, no parameters
  bool streamed = false;     // no declared length (chunked, until close, an HTTP/2 stream)
  bool event_stream = false; // text/event-stream
  bool joined = false;       // the head was never seen
  bool joined_json = false;  // joined at bytes that open a JSON object
  ContentEncoding encoding = ContentEncoding::identity;
  const DeclaredFormat* declared = nullptr;
};
BodyEventKind body_event_kind(const BodyTraits& traits);
bool is_json_lines_media(std::string_view media);
bool is_grpc_media(std::string_view media);

class BodyEvents {
 public:
  BodyEvents(ExchangeSink& sink, const DecoderLimits& limits);
  BodyEvents(const BodyEvents&) = delete;
  BodyEvents& operator=(const BodyEvents&) = delete;

  // Announces the response (now, or once a sniffed body's first bytes
  // decide). `info.request` is copied when the announcement may wait.
  void start(ResponseInfo info, BodyEventKind kind, bool joined);
  // Body bytes whose first is at stream `position`.
  void body(std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts);
  void gap(std::uint64_t n, TimestampNs ts);
  // The body ended (before the sink hears the response's end): a held body
  // decides, a compressed one checks its end, a last line may complete.
  void finish(TimestampNs ts, ResponseEnd how);
  // Whether its events are being looked for (or its kind is being decided).
  bool event_stream() const { return event_stream_; }
  std::uint64_t body_offset() const { return body_offset_; }

 private:
  struct BodySpan {
    std::uint64_t body_offset = 0;
    std::uint64_t length = 0;
    std::uint64_t position = 0;
  };
  struct Sniff {
    struct Held {
      std::string bytes;
      std::uint64_t position = 0;
      TimestampNs ts = 0;
      std::uint64_t gap = 0;  // a hole instead of bytes
    };
    ResponseInfo info;
    std::optional<RequestInfo> request;  // kept: the request queue may move on before the decision
    std::vector<Held> held;
    std::string text;  // the body's first bytes, up to the first hole
  };
  struct DecodedToEvents : BodyDecoder::Output {
    BodyEvents* events = nullptr;
    TimestampNs ts = 0;
    void decoded(std::span<const std::uint8_t> bytes) override;
  };

  void begin(ResponseInfo& info, BodyEventKind kind, bool joined);
  void stop_decoding(ExchangeSink::Undecodable why);
  void feed_framer(std::span<const std::uint8_t> bytes, TimestampNs ts);
  void feed_events(std::span<const std::uint8_t> bytes, TimestampNs ts);
  void on_framed_event(std::string_view type, std::string_view data, TimestampNs ts, TimestampNs first_byte_ts,
                       std::uint64_t offset, std::uint32_t wire_bytes, bool truncated);
  void body_to_events(std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts);
  void gap_to_events(std::uint64_t n, TimestampNs ts);
  void sniff_body(std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts);
  void sniff_gap(std::uint64_t n, TimestampNs ts);
  void decide_sniff(bool json_lines);
  bool framing() const { return sse_ || ndjson_ || grpc_; }

  ExchangeSink& sink_;
  const DecoderLimits limits_;
  bool event_stream_ = false;
  std::uint64_t body_offset_ = 0;  // body bytes so far, holes included
  std::optional<SseParser> sse_;
  std::optional<NdjsonParser> ndjson_;
  std::optional<GrpcMessages> grpc_;
  std::optional<BodySpan> span_;       // the bytes being fed
  std::optional<BodySpan> last_span_;  // the last bytes fed (the body's end completes a last line)
  ContentEncoding encoding_ = ContentEncoding::identity;
  std::unique_ptr<BodyDecoder> decoder_;  // set while a compressed body decodes
  std::unique_ptr<Sniff> sniff_;          // set while a JSON body's kind is undecided
};

}  // namespace infertap::protocol
