#include "core/conn/exchanges.h"

#include <utility>

namespace infertap::core {
namespace {

using protocol::Protocol;
using protocol::SessionProblem;

// The counters each protocol's sessions feed (docs/prometheus.md).
void count_session(PipelineCounters& c, Protocol p, bool upgraded) {
  if (p == Protocol::http2) ++c.h2_connections;
  if (p == Protocol::websocket) ++c.ws_connections;
  if (p == Protocol::websocket && !upgraded) ++c.ws_joined;  // its upgrade went by before the agent started
}

void count_exchange(PipelineCounters& c, Protocol p) {
  if (p == Protocol::http2) ++c.h2_streams;
  if (p == Protocol::websocket) ++c.ws_responses;
}

std::uint64_t* problem_counter(PipelineCounters& c, Protocol p, SessionProblem problem) {
  const bool h2 = p == Protocol::http2;
  switch (problem) {
    case SessionProblem::desynchronised: return h2 ? &c.h2_desyncs : &c.ws_desyncs;
    case SessionProblem::resynchronised: return h2 ? &c.h2_resyncs : &c.ws_resyncs;
    case SessionProblem::header_block_lost: return &c.h2_header_blocks_unread;
    case SessionProblem::header_block_too_large: return &c.h2_header_blocks_too_large;
    case SessionProblem::exchanges_over_limit: return h2 ? &c.h2_streams_not_followed : &c.ws_responses_not_followed;
    case SessionProblem::frame_error: return h2 ? &c.h2_frame_errors : &c.ws_frame_errors;
    case SessionProblem::message_too_large: return &c.ws_messages_too_large;
    case SessionProblem::undecodable: return &c.ws_undecodable;
  }
  return nullptr;
}

void count_problem(PipelineCounters& c, Protocol p, SessionProblem problem) {
  if (p == Protocol::http1) return;  // HTTP/1 reports its errors through its exchange (http_parse_errors)
  if (std::uint64_t* n = problem_counter(c, p, problem)) ++*n;
}

}  // namespace

Exchanges::Exchanges(const ConnIdentity& identity, const PipelineConfig& config, PipelineCounters& counters,
                     const RoleCensus& census, LoadTracker* load)
    : identity_(identity), config_(config), counters_(counters), census_(census), load_(load) {}

void Exchanges::set_session(protocol::Protocol protocol, Role role, bool upgraded) {
  protocol_ = protocol;
  role_ = role;
  count_session(counters_, protocol, upgraded);
  for (auto& [id, e] : entries_) e.assembler->set_role(role);
}

protocol::ExchangeSink* Exchanges::exchange(std::uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    Entry entry;
    entry.assembler = std::make_unique<StreamAssembler>(identity_, config_, counters_, census_, load_);
    entry.assembler->set_role(role_);
    it = entries_.emplace(id, std::move(entry)).first;
    count_exchange(counters_, protocol_);
  }
  Entry& e = it->second;
  note_reached(id, e);
  if (piece_ && !e.in_piece) {
    e.assembler->begin_piece(*piece_);
    e.in_piece = true;
    touched_.push_back(id);
  }
  return e.assembler.get();
}

// A record finishes only through its exchange's sink: the exchanges reached
// since the last take, and the closed ones, are all there is to look at.
void Exchanges::note_reached(std::uint64_t id, Entry& e) {
  if (e.reached) return;
  e.reached = true;
  reached_.push_back(id);
}

// Only the exchanges the piece reached: a piece touches few of many live ones.
void Exchanges::end_piece() {
  for (std::uint64_t id : touched_) {
    auto it = entries_.find(id);
    if (it == entries_.end()) continue;
    Entry& e = it->second;
    e.assembler->end_piece();
    e.in_piece = false;
  }
  touched_.clear();
  piece_ = nullptr;
}

void Exchanges::exchange_closed(std::uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.closed) return;
  it->second.closed = true;
  closed_.push_back(id);
}

void Exchanges::on_problem(protocol::Protocol protocol, protocol::SessionProblem problem) {
  count_problem(counters_, protocol, problem);
}

void Exchanges::on_acked(std::uint32_t ack_seq, TimestampNs ts) {
  for (auto& [id, e] : entries_) e.assembler->on_acked(ack_seq, ts);
}

void Exchanges::set_cut_reason(StreamEnd reason) {
  for (auto& [id, e] : entries_) e.assembler->set_cut_reason(reason);
}

void Exchanges::for_each_active(const std::function<void(StreamRecord&)>& visit) {
  for (auto& [id, e] : entries_) {
    if (StreamRecord* r = e.assembler->active_stream()) visit(*r);
  }
}

void Exchanges::for_each_active(const std::function<void(const StreamRecord&)>& visit) const {
  for (const auto& [id, e] : entries_) {
    if (const StreamRecord* r = std::as_const(*e.assembler).active_stream()) visit(*r);
  }
}

std::vector<std::uint64_t> Exchanges::active_ids(const std::function<bool(const StreamRecord&)>& pick) const {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, e] : entries_) {
    if (const StreamRecord* r = std::as_const(*e.assembler).active_stream(); r && pick(*r)) ids.push_back(id);
  }
  return ids;
}

bool Exchanges::has_finished() const {
  if (!closed_.empty()) return true;
  for (std::uint64_t id : reached_) {
    if (auto it = entries_.find(id); it != entries_.end() && it->second.assembler->has_finished()) return true;
  }
  return false;
}

// Records finished since the last take; the assemblers of closed exchanges go.
std::vector<StreamRecord> Exchanges::take_finished() {
  std::vector<StreamRecord> out;
  for (std::uint64_t id : reached_) {
    auto it = entries_.find(id);
    if (it == entries_.end()) continue;
    it->second.reached = false;
    for (StreamRecord& r : it->second.assembler->take_finished()) out.push_back(std::move(r));
  }
  reached_.clear();
  std::vector<std::uint64_t> kept;
  for (std::uint64_t id : closed_) {
    auto it = entries_.find(id);
    if (it == entries_.end()) continue;
    if (it->second.in_piece) {
      kept.push_back(id);  // still bracketed by the piece being fed
    } else {
      entries_.erase(it);
    }
  }
  closed_ = std::move(kept);
  return out;
}

}  // namespace infertap::core
