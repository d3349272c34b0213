#include "core/path/matching.h"

#include <algorithm>
#include <deque>
#include <map>
#include <unordered_map>

#include "core/conn/tcp.h"

namespace infertap::core {

// Events of `from` found in `to`, the other end of the same TCP connection:
// by the TCP sequence just past each event's last byte, else by body offset
// (both ends parse the same response body from its first byte).
std::vector<int> match_tcp_ends(const StreamRecord& from, const StreamRecord& to) {
  // Both timelines are in TCP order: sequences and body offsets only grow,
  // so one forward pass over each finds every equal pair.
  const bool offsets_comparable = !from.joined_midstream && !to.joined_midstream;
  const std::size_t n = to.timeline.size();
  std::vector<int> out(from.timeline.size(), -1);
  std::size_t by_seq = 0, by_offset = 0;
  for (std::size_t i = 0; i < from.timeline.size(); ++i) {
    const TimelineEvent& e = from.timeline[i];
    if (e.end_seq_exact) {
      while (by_seq < n && (!to.timeline[by_seq].end_seq_exact || !seq_leq(e.end_seq, to.timeline[by_seq].end_seq)))
        ++by_seq;
      if (by_seq < n && to.timeline[by_seq].end_seq == e.end_seq) {
        out[i] = static_cast<int>(by_seq);
        continue;
      }
    }
    if (offsets_comparable) {
      while (by_offset < n && to.timeline[by_offset].offset < e.offset) ++by_offset;
      if (by_offset < n && to.timeline[by_offset].offset == e.offset &&
          to.timeline[by_offset].wire_bytes == e.wire_bytes)
        out[i] = static_cast<int>(by_offset);
    }
  }
  // An event the other end did not capture whole (several events in one
  // read, larger than the capture window) moved no later than the next event
  // that end did capture: TCP keeps the order.
  if (to.timeline.empty()) return out;
  // Only inside the other record's stream, not an earlier response on the connection.
  const std::uint32_t to_start = to.timeline.front().end_seq - static_cast<std::uint32_t>(to.body_bytes + 65536);
  std::size_t j = 0;
  for (std::size_t i = 0; i < from.timeline.size(); ++i) {
    const std::uint32_t seq = from.timeline[i].end_seq;
    if (out[i] >= 0 || !seq || !seq_leq(to_start, seq)) continue;
    while (j < to.timeline.size() && !(to.timeline[j].end_seq && seq_leq(seq, to.timeline[j].end_seq))) ++j;
    if (j == to.timeline.size()) break;
    out[i] = static_cast<int>(j);
  }
  return out;
}

std::vector<int> match_by_content(const StreamRecord& up, const StreamRecord& down) {
  std::unordered_map<std::uint64_t, std::deque<int>> positions;
  for (std::size_t k = 0; k < down.timeline.size(); ++k) {
    if (down.timeline[k].data_hash) positions[down.timeline[k].data_hash].push_back(static_cast<int>(k));
  }
  // Events the downstream capture did not see whole have no hash; a gateway
  // that passes the body through unchanged keeps its offsets.
  std::map<std::pair<std::uint64_t, std::uint32_t>, int> by_offset;
  if (!up.joined_midstream && !down.joined_midstream) {
    for (std::size_t k = 0; k < down.timeline.size(); ++k)
      by_offset.emplace(std::make_pair(down.timeline[k].offset, down.timeline[k].wire_bytes), static_cast<int>(k));
  }
  std::vector<int> out(up.timeline.size(), -1);
  int last = -1;
  for (std::size_t j = 0; j < up.timeline.size(); ++j) {
    const std::uint64_t h = up.timeline[j].data_hash;
    auto it = h ? positions.find(h) : positions.end();
    if (it != positions.end()) {
      auto& q = it->second;
      while (!q.empty() && q.front() <= last) q.pop_front();  // identical events: keep the order
      if (!q.empty()) {
        out[j] = last = q.front();
        q.pop_front();
        continue;
      }
    }
    auto o = by_offset.find({up.timeline[j].offset, up.timeline[j].wire_bytes});
    if (o != by_offset.end() && o->second > last) out[j] = last = o->second;
  }
  return out;
}

int count_matched(const std::vector<int>& m) {
  return static_cast<int>(std::count_if(m.begin(), m.end(), [](int x) { return x >= 0; }));
}

}  // namespace infertap::core
