#include "core/conn/h2_streams.h"

namespace infertap::core {

H2Streams::H2Streams(const ConnIdentity& identity, const PipelineConfig& config, PipelineCounters& counters,
                     const RoleCensus& census, LoadTracker* load)
    : identity_(identity), config_(config), counters_(counters), census_(census), load_(load) {}

protocol::ExchangeSink* H2Streams::stream(std::uint32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    Entry entry;
    entry.assembler = std::make_unique<StreamAssembler>(identity_, config_, counters_, census_, load_);
    entry.assembler->set_role(role_);
    it = streams_.emplace(id, std::move(entry)).first;
    ++counters_.h2_streams;
  }
  Entry& e = it->second;
  if (piece_ && !e.in_piece) {
    e.assembler->begin_piece(*piece_);
    e.in_piece = true;
    touched_.push_back(id);
  }
  return e.assembler.get();
}

// Only the streams the piece reached: a piece touches few of many live streams.
void H2Streams::end_piece() {
  for (std::uint32_t id : touched_) {
    auto it = streams_.find(id);
    if (it == streams_.end()) continue;
    Entry& e = it->second;
    e.assembler->end_piece();
    e.in_piece = false;
  }
  touched_.clear();
  piece_ = nullptr;
}

void H2Streams::stream_closed(std::uint32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end() || it->second.closed) return;
  it->second.closed = true;
  closed_.push_back(id);
}

void H2Streams::on_problem(protocol::http2::Problem problem) {
  using protocol::http2::Problem;
  switch (problem) {
    case Problem::desynchronised: ++counters_.h2_desyncs; break;
    case Problem::resynchronised: ++counters_.h2_resyncs; break;
    case Problem::header_block_lost: ++counters_.h2_header_blocks_unread; break;
    case Problem::header_block_too_large: ++counters_.h2_header_blocks_too_large; break;
    case Problem::streams_over_limit: ++counters_.h2_streams_not_followed; break;
    case Problem::frame_error: ++counters_.h2_frame_errors; break;
  }
}

void H2Streams::on_acked(std::uint32_t ack_seq, TimestampNs ts) {
  for (auto& [id, e] : streams_) e.assembler->on_acked(ack_seq, ts);
}

void H2Streams::set_cut_reason(StreamEnd reason) {
  for (auto& [id, e] : streams_) e.assembler->set_cut_reason(reason);
}

void H2Streams::for_each_active(const std::function<void(StreamRecord&)>& visit) {
  for (auto& [id, e] : streams_) {
    if (StreamRecord* r = e.assembler->active_stream()) visit(*r);
  }
}

void H2Streams::for_each_active(const std::function<void(const StreamRecord&)>& visit) const {
  for (const auto& [id, e] : streams_) {
    if (const StreamRecord* r = std::as_const(*e.assembler).active_stream()) visit(*r);
  }
}

// A record finishes only when its stream closes: the closed streams are all
// there is to look at.
bool H2Streams::has_finished() const { return !closed_.empty(); }

// Records of the streams closed since the last take; their assemblers go.
std::vector<StreamRecord> H2Streams::take_finished() {
  std::vector<StreamRecord> out;
  std::vector<std::uint32_t> kept;
  for (std::uint32_t id : closed_) {
    auto it = streams_.find(id);
    if (it == streams_.end()) continue;
    for (StreamRecord& r : it->second.assembler->take_finished()) out.push_back(std::move(r));
    if (it->second.in_piece) {
      kept.push_back(id);  // still bracketed by the piece being fed
    } else {
      streams_.erase(it);
    }
  }
  closed_ = std::move(kept);
  return out;
}

}  // namespace infertap::core
