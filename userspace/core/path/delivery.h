// The stream as its final client got it (docs/metrics.md#delivery): a server
// or gateway record's events at the last vantage of its traced path (a local
// client's reads, else the last hop's ACKs), their metrics, what the path
// added to TTFT and ITL, bursts, and whether the path degraded the stream.
//
//   a server node with its path times filled --> Delivery
#pragma once

#include <optional>

#include "core/path/node.h"
#include "core/types.h"

namespace infertap::core {

// nullopt when the record is not a server's or nothing was seen past it.
std::optional<Delivery> delivery_of(const PathNode& node, const PipelineConfig& config);

}  // namespace infertap::core
