#include "core/live_index.h"

#include <algorithm>

#include "core/conn/connection.h"

namespace infertap::core {
namespace {

std::string tuple_key(const Endpoint& local, const Endpoint& remote) {
  std::string k;
  k.reserve(40);
  for (const Endpoint* e : {&local, &remote}) {
    k.append(reinterpret_cast<const char*>(e->addr.data()), e->addr.size());
    k.append(reinterpret_cast<const char*>(&e->port), sizeof e->port);
  }
  return k;
}

// The first few events identify a stream: chunk ids and timestamps differ
// between streams.
constexpr std::size_t kIdentifyingEvents = 4;
constexpr std::size_t kPartnerEventsSearched = 8;

}  // namespace

void LiveIndex::add(const Connection& conn) {
  const ConnIdentity& id = conn.identity();
  by_tuple_[tuple_key(id.local, id.remote)] = &conn;
  by_pid_[id.pid].push_back(&conn);
}

void LiveIndex::remove(const Connection& conn) {
  const ConnIdentity& id = conn.identity();
  if (auto t = by_tuple_.find(tuple_key(id.local, id.remote)); t != by_tuple_.end() && t->second == &conn)
    by_tuple_.erase(t);
  if (conn.role() != Role::unknown) census_.remove(id.pid, conn.role());
  if (auto p = by_pid_.find(id.pid); p != by_pid_.end()) {
    std::erase(p->second, &conn);
    if (p->second.empty()) by_pid_.erase(p);
  }
}

void LiveIndex::role_decided(const Connection& conn) { census_.add(conn.identity().pid, conn.role()); }

PathPartners::Activity LiveIndex::peer(const Endpoint& local, const Endpoint& remote) const {
  auto it = by_tuple_.find(tuple_key(local, remote));
  if (it == by_tuple_.end()) return Activity::none;
  return it->second->streaming() ? Activity::streaming : Activity::idle;
}

PathPartners::Activity LiveIndex::gateway_leg(const StreamRecord& record) const {
  auto it = by_pid_.find(record.conn.pid);
  if (it == by_pid_.end()) return Activity::none;
  std::vector<std::uint64_t> mine;
  for (const TimelineEvent& e : record.timeline) {
    if (e.data_hash) mine.push_back(e.data_hash);
    if (mine.size() == kIdentifyingEvents) break;
  }
  Activity found = Activity::none;
  for (const Connection* c : it->second) {
    if (c->role() == record.role || c->role() == Role::unknown) continue;
    found = Activity::idle;
    bool partner = false;
    c->for_each_active_stream([&](const StreamRecord& other) {
      if (partner) return;
      if (!record.response_id.empty() && other.response_id == record.response_id) partner = true;
      const std::size_t n = std::min(other.timeline.size(), kPartnerEventsSearched);
      for (std::size_t i = 0; i < n && !partner; ++i) {
        const std::uint64_t h = other.timeline[i].data_hash;
        partner = h && std::find(mine.begin(), mine.end(), h) != mine.end();
      }
    });
    if (partner) return Activity::streaming;
  }
  return found;
}

}  // namespace infertap::core
