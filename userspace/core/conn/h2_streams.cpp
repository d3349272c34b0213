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
  }
  return e.assembler.get();
}

void H2Streams::end_piece() {
  for (auto it = streams_.begin(); it != streams_.end();) {
    Entry& e = it->second;
    if (e.in_piece) {
      e.assembler->end_piece();
      e.in_piece = false;
    }
    // A stream that ended without a record (not an event stream) leaves nothing to take.
    if (e.closed && !e.assembler->has_finished()) {
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
  piece_ = nullptr;
}

void H2Streams::stream_closed(std::uint32_t id) {
  if (auto it = streams_.find(id); it != streams_.end()) it->second.closed = true;
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

bool H2Streams::has_finished() const {
  for (const auto& [id, e] : streams_) {
    if (e.assembler->has_finished()) return true;
  }
  return false;
}

// Records in stream order; a closed stream's assembler goes with its record.
std::vector<StreamRecord> H2Streams::take_finished() {
  std::vector<StreamRecord> out;
  for (auto it = streams_.begin(); it != streams_.end();) {
    Entry& e = it->second;
    if (e.assembler->has_finished()) {
      for (StreamRecord& r : e.assembler->take_finished()) out.push_back(std::move(r));
    }
    if (e.closed && !e.in_piece) {
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

}  // namespace infertap::core
