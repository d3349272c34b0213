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

struct Observation : StreamTiming {
  core::TimestampNs end_ns = 0;  // monotonic; the engine's clock comes from observations + tick(now)
  std::string model, route, process, container;
  Vantage vantage = Vantage::server_emit;
  std::uint64_t output_tokens = 0;
  std::string client_addr;  // remote address without port (server_emit records)
};

// Client-observed timing of a server record measured at a downstream vantage
// (ACKs of a remote peer, reads of a local one). Handed to observations_from()
// together with the record it belongs to.
using DeliveryMetrics = StreamTiming;

// The stall cause name a record's stall is counted under.
std::string stall_cause_of(const core::Stall& stall);

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
