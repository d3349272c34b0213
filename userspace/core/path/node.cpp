#include "core/path/node.h"

#include <utility>

namespace infertap::core {
namespace {

// Paths on one host have at most four nodes; the bound guards against a
// cycle in the links.
constexpr int kMaxSteps = 8;

// Where event i of `node` started on this host: back through the peer a
// client read it from and the gateway leg a server sent it out of.
std::pair<const PathNode*, int> origin_of(const PathNode* node, int i) {
  for (int step = 0; step < kMaxSteps && i >= 0; ++step) {
    if (node->rec.role == Role::client && node->peer && mapped(node->to_peer, i) >= 0) {
      i = mapped(node->to_peer, i);
      node = node->peer;
    } else if (node->rec.role == Role::server && node->gateway && mapped(node->to_gateway, i) >= 0) {
      i = mapped(node->to_gateway, i);
      node = node->gateway;
    } else {
      break;
    }
  }
  return {node, i};
}

}  // namespace

TimestampNs arrived_at(const PathNode& node, int i) {
  const auto k = static_cast<std::size_t>(i);
  if (i < 0 || k >= node.rec.timeline.size()) return 0;
  if (const TimestampNs own = node.rec.timeline[k].arrived_ns) return own;
  return k < node.inferred_arrival.size() ? node.inferred_arrival[k] : 0;
}

void hops_of(const PathNode* node, int i, std::vector<Hop>& out) {
  auto [cur, idx] = origin_of(node, i);
  out.clear();
  for (int step = 0; step < kMaxSteps && cur && idx >= 0; ++step) {
    const TimelineEvent& e = cur->rec.timeline[static_cast<std::size_t>(idx)];
    if (cur->rec.role == Role::server) {
      out.push_back({HopKind::emit, cur, idx, e.ts_ns});
      if (cur->peer && mapped(cur->to_peer, idx) >= 0) {
        idx = mapped(cur->to_peer, idx);
        cur = cur->peer;
        continue;
      }
      if (e.acked_ns) out.push_back({HopKind::acked, cur, idx, e.acked_ns});
      break;
    }
    if (const TimestampNs arrived = arrived_at(*cur, idx)) out.push_back({HopKind::arrived, cur, idx, arrived});
    out.push_back({HopKind::read, cur, idx, e.ts_ns});
    if (cur->gateway && mapped(cur->to_gateway, idx) >= 0) {
      idx = mapped(cur->to_gateway, idx);
      cur = cur->gateway;
      continue;
    }
    break;
  }
}

bool reached_end(const std::vector<Hop>& hops) {
  if (hops.empty()) return false;
  const Hop& last = hops.back();
  switch (last.kind) {
    case HopKind::read: return !last.at->gateway;
    case HopKind::acked: return !last.at->peer;
    case HopKind::emit:
    case HopKind::arrived: return false;
  }
  return false;
}

std::vector<Hop> hops_of(const PathNode* node, int i) {
  std::vector<Hop> out;
  hops_of(node, i, out);
  return out;
}

}  // namespace infertap::core
