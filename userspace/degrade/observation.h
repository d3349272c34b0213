// What the degradation engine judges: one finished stream as seen at one
// vantage, as a small value type the engine holds (no capture pipeline), and
// the adapter from the pipeline's stream records (core/types.h).
// docs/degradation.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace infertap::degrade {

// server_emit: when the serving process handed the bytes to the kernel.
// client_observed: when a client (a local one today; a downstream vantage of a
// server record later) got them. Never mixed in one cohort.
enum class Vantage : std::uint8_t { server_emit, client_observed };
std::string_view to_string(Vantage v);
std::optional<Vantage> parse_vantage(std::string_view s);

// How one stream was timed at one vantage: what the rules judge.
struct StreamTiming {
  std::optional<std::uint64_t> ttft_ns;
  std::optional<double> tokens_per_s;
  std::optional<std::uint64_t> itl_p95_ns, itl_p99_ns, longest_pause_ns;
  // Client-observed views of a server record: how long after its emit the
  // last token was delivered (Delivery::lag_last_ns). Unknown elsewhere.
  std::optional<std::uint64_t> delivery_lag_ns;
  std::uint64_t decode_ns = 0;                        // first token -> last token
  std::map<std::string, std::uint32_t> stall_causes;  // cause -> stalls in this stream
};

// What served a stream: a change of any field that both sides know starts a
// baseline review of the cohort (docs/degradation.md#baseline-review). "" =
// not known (never a change).
struct ServingIdentity {
  std::string model;               // the response's model
  std::string system_fingerprint;  // OpenAI system_fingerprint
  std::string server_version;      // Server / x-*-version headers
  auto operator<=>(const ServingIdentity&) const = default;
};

// The load a stream ran under, as the engine reads it (core::LoadContext):
// what places it in its bands, and the context the alerts' leads compare.
struct LoadNumbers {
  std::optional<double> concurrency;       // streams in flight at the server: decode-phase mean, else at first token
  std::optional<double> waiting;           // requests waiting for a first token when its request ended
  std::optional<double> input_tokens;      // usage prompt/input tokens
  std::optional<double> request_bytes;     // request body bytes
  std::optional<double> client_share;      // client_concurrency / concurrency
  std::optional<double> client_concurrency;  // the client's streams in flight at its first token
  std::optional<double> cpu_pressure;      // PSI cpu some avg10, the cgroup's else the host's (percent)
  std::optional<double> memory_pressure;   // PSI memory some avg10, likewise
  std::optional<double> cpu_ms_per_token;  // the serving process's CPU time per token
  // Input size in tokens: the usage count, else the request bytes / 4 (about
  // four bytes of JSON per token of English text).
  std::optional<double> input_size() const {
    if (input_tokens) return input_tokens;
    if (request_bytes) return *request_bytes / 4;
    return std::nullopt;
  }
};

struct Observation : StreamTiming {
  core::TimestampNs end_ns = 0;  // monotonic; the engine's clock comes from observations + tick(now)
  // The cohort's model: the one the request asked for, else the response's.
  std::string model, route, process, container;
  Vantage vantage = Vantage::server_emit;
  std::uint64_t output_tokens = 0;
  std::string client_addr;  // remote address without port (server_emit records)
  ServingIdentity identity;
  LoadNumbers load;
};

// Client-observed timing of a server record measured at a downstream vantage
// (ACKs of a remote peer, reads of a local one). Handed to observations_from()
// together with the record it belongs to.
using DeliveryMetrics = StreamTiming;

// The engine's view of a record's load context.
LoadNumbers load_of(const core::LoadContext& load);

// The stall cause name a record's stall is counted under.
std::string stall_cause_of(const core::StallVerdict& verdict);

// The client-observed view a server (or gateway) record carries when the
// path behind it was traced: its `delivery` (local reader's reads or the last
// hop's ACKs).
std::optional<DeliveryMetrics> delivery_of(const core::StreamRecord& record);

// Observations of one finished record: role server -> server_emit, role
// client -> client_observed unless its server is traced too (then the
// server record's delivery view already is that observation); plus a client_observed one built from `delivery`
// when given (same identity as the server record, no client address). Records
// that cannot be judged give none: no token, a non-2xx status, unknown role.
std::vector<Observation> observations_from(const core::StreamRecord& record,
                                           const std::optional<DeliveryMetrics>& delivery = std::nullopt);

}  // namespace infertap::degrade
