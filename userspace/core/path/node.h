// The records one stream left along its path on this host, linked, and the
// walk of one event along them.
//
// A stream from an inference server to a client can be traced at up to four
// sockets on one host: the server's (emit), a gateway's upstream leg (read),
// the gateway's downstream leg (emit) and a local client's (read). Each is a
// node; `peer` links the two ends of one TCP connection, `gateway` a
// gateway's two legs, each with a map from its events to the other's.
#pragma once

#include <cstdint>
#include <vector>

#include "core/types.h"

namespace infertap::core {

// The path stages read the records and write only their own outputs: the
// links, the inferred arrivals, and the view attached to the record when
// the group is released (joiner.h).
struct PathNode {
  StreamRecord rec;
  PathNode* peer = nullptr;     // the other end of this TCP connection
  PathNode* gateway = nullptr;  // the gateway's other leg (same process)
  std::vector<int> to_peer;     // my event -> the peer's event (-1: none)
  // Upstream leg: -> the downstream event that carried it (or the next one
  // that was captured); downstream leg: -> the upstream event, exact only.
  std::vector<int> to_gateway;
  // A unix reader's arrivals inferred from its traced sender, per event
  // (empty: none inferred); see take_unix_arrivals.
  std::vector<TimestampNs> inferred_arrival;
  PathView view;  // what the stages found, in the making
};

// When event i's bytes reached the node's socket: the capture's own arrival,
// else one inferred from a traced unix sender (0: not known).
TimestampNs arrived_at(const PathNode& node, int i);

// The event a map gives for event i (-1: none).
inline int mapped(const std::vector<int>& map, int i) {
  return i >= 0 && static_cast<std::size_t>(i) < map.size() ? map[static_cast<std::size_t>(i)] : -1;
}

enum class HopKind : std::uint8_t { emit, acked, arrived, read };

// One vantage of one event on its path.
struct Hop {
  HopKind kind;
  const PathNode* at;
  int index;  // event index in at->rec.timeline
  TimestampNs ts;
};

// The hops of event i of `node`, from the first emit on this host (or the
// first arrival when the sender is elsewhere) to the last vantage seen.
// `out`'s storage is reused.
void hops_of(const PathNode* node, int i, std::vector<Hop>& out);
std::vector<Hop> hops_of(const PathNode* node, int i);

// Did the walk reach the end of the traced path: a read by a process that
// passes the bytes on to no one (not a gateway's upstream leg), or the ACK of
// a sender whose reader is not traced? A walk that stopped short, at a
// gateway or at a sender whose reader missed the event, says nothing of when
// the event was delivered.
bool reached_end(const std::vector<Hop>& hops);

}  // namespace infertap::core
