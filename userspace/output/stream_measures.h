// What one finished stream record adds to the stream metrics, written once
// for every exporter that aggregates records (Prometheus, OTLP): which
// record feeds which measure at which vantage, with which label values, and
// the GenAI operation and provider a record speaks. Each exporter names the
// measures, buckets the values and caps the labels its own way
// (output/prometheus/stream_families.cpp, output/otlp/metrics.cpp); what
// counts as an observation is decided here only.
//
//   StreamRecord --observe_record--> MeasureSink (histogram values, counter increments, token usage)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/types.h"

namespace infertap::output {

// The histogram measures, in the order exporters list them.
enum class HistogramFamily : std::uint8_t {
  server_ttft,      // gen_ai.server.time_to_first_token (successful streams)
  server_tpot,      // gen_ai.server.time_per_output_token (per request, successful streams)
  server_duration,  // gen_ai.server.request.duration
  client_ttfc,      // gen_ai.client.operation.time_to_first_chunk
  client_tpoc,      // gen_ai.client.operation.time_per_output_chunk (per chunk after the first)
  client_duration,  // gen_ai.client.operation.duration
  itl,              // inter-token latency (per gap, every vantage)
  rate,             // tokens per second after the first token
  lag,              // delivery lag at the last token (per stream)
  longest_pause,    // the longest gap between token events (per stream)
};
inline constexpr std::size_t kHistogramFamilies = 10;
// The counter measures; each but `tokens` carries its own label (end, cause).
enum class CounterFamily : std::uint8_t { tokens, streams, stalls, path_degraded };
inline constexpr std::size_t kCounterFamilies = 4;
// gen_ai.token.type of gen_ai.client.token.usage.
enum class TokenType : std::uint8_t { input, output };
std::string_view to_string(TokenType t);

// The vantage label values: where a view's times were taken.
inline constexpr std::string_view kVantageServer = "server";    // a server's (or a gateway's) sends
inline constexpr std::string_view kVantageClient = "client";    // a local client's reads
inline constexpr std::string_view kVantageAcked = "acked";      // a remote client's kernel ACKs, seen at the last sender
inline constexpr std::string_view kVantageUnknown = "unknown";  // a record of unknown role

// Receives a record's observations, in no particular order.
class MeasureSink {
 public:
  virtual ~MeasureSink() = default;
  virtual void observe(HistogramFamily f, std::string_view vantage, double value) = 0;
  // `extra`: the family's own label value ("complete", "model"), "" for tokens.
  virtual void count(CounterFamily f, std::string_view vantage, std::string_view extra, std::uint64_t n) = 0;
  // A client view's token counts, where the stream reported them (usage):
  // gen_ai.client.token.usage. Exporters without that measure ignore it.
  virtual void usage(std::string_view vantage, TokenType type, std::uint64_t tokens) {
    (void)vantage, (void)type, (void)tokens;
  }
  // Each view of the record as a whole (its own vantage's; the ACKed one of
  // a last hop), for measures judged per stream (objectives).
  virtual void view(std::string_view vantage, const core::StreamMetrics& metrics) { (void)vantage, (void)metrics; }
};

// Every observation of one record (docs/prometheus.md, docs/otlp.md): its own
// vantage's; for a server record also its client-observed view (the delivery
// lag and the path's verdict always; the client measures when the final
// client is remote and this socket is its last hop).
void observe_record(const core::StreamRecord& record, MeasureSink& sink);

// A record's label values, UTF-8-safe and cut, before any cap.
struct RecordLabels {
  std::string model, route, process, request_model, response_model, server_port;
  std::string system_fingerprint;  // the serving identity's (core::LoadContext)
  std::string_view operation;  // gen_ai.operation.name: closed set, never capped
  std::string provider;        // gen_ai.provider.name
  std::string error_type;      // error.type; "" when the stream did not fail
};
RecordLabels labels_of(const core::StreamRecord& record, std::size_t max_bytes);

// A label value as exporters take it: invalid UTF-8 bytes become '?', cut to
// max_bytes, "unknown" when empty.
std::string label_value(std::string_view in, std::size_t max_bytes);

// Did the stream succeed: HTTP 2xx (or no status seen) and no error event.
bool successful(const core::StreamRecord& record);
// error.type of a record, "" when it did not fail: the error event's type,
// else the HTTP status (>= 400), else a non-zero grpc-status ("grpc_<n>"),
// else how it ended when that was a failure (connection_closed,
// protocol_error, stream_reset, goaway, idle_timeout).
std::string error_type_of(const core::StreamRecord& record);

// gen_ai.operation.name of a request path: "chat" (…/chat/completions,
// …/messages, …/responses), "text_completion" (…/completions), else "unknown".
std::string_view genai_operation_of(std::string_view route);
// gen_ai.operation.name of a record: its dialect's (the servers' own generate
// APIs: text_completion, Ollama /api/chat: chat, Gemini: generate_content,
// Anthropic and Responses: chat), a declared format's, else its route's.
std::string_view genai_operation_of(const core::StreamRecord& record);
// gen_ai.provider.name of a record: the API its events speak ("openai",
// "anthropic", "ollama", "tgi", "llama.cpp", "sglang", "vllm", "triton",
// "gcp.gemini"), a declared format's provider (else its name), else "unknown".
std::string_view genai_provider_of(const core::StreamRecord& record);

}  // namespace infertap::output
