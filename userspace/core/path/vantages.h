// What a joined path tells each of its records, event by event: the times of
// every other vantage (peer, gateway legs, final delivery), a gateway leg's
// delay statistics, and the cause of each of the record's own stalls.
//
//   linked PathNodes --> PathTimes per event, GatewayLeg, stall verdicts (PathView)
#pragma once

#include <vector>

#include "core/path/node.h"
#include "core/types.h"

namespace infertap::core {

// Indices of the content (token) events of a timeline, in order.
std::vector<int> content_events(const std::vector<TimelineEvent>& timeline);

// A unix send queues its bytes into the reader's socket before it returns:
// each event of a unix reader joined to its traced sender arrived when the
// sender emitted it (no later than the read). Sets node.inferred_arrival,
// before fill_path_times reads arrivals; a reader without a traced sender
// keeps none.
void take_unix_arrivals(PathNode& node);

// Fills node.view.times (left empty when nothing past the node's own socket
// was seen) and node.view.peer_stream_id. `scratch` is reused across calls.
void fill_path_times(PathNode& node, std::vector<Hop>& scratch);

// The gateway view of a node that has a gateway link.
GatewayLeg gateway_leg_of(const PathNode& node);

// The cause and evidence of each of the record's own stalls, in order.
std::vector<StallVerdict> diagnose_own_stalls(const PathNode& node);

}  // namespace infertap::core
