#include "core/stream/assembler.h"

#include <algorithm>
#include <functional>

#include "core/conn/tcp.h"
#include "core/labels.h"
#include "core/metrics.h"

namespace infertap::core {

using protocol::EventKind;

StreamAssembler::StreamAssembler(const ConnIdentity& identity, const PipelineConfig& config,
                                 PipelineCounters& counters, const RoleCensus& census)
    : identity_(identity), config_(config), counters_(counters), census_(census) {}

// How many events the piece being fed completed: a burst signature.
void StreamAssembler::mark_piece_batch() {
  if (!piece_ || !active_) return;
  auto& timeline = active_->record.timeline;
  if (piece_first_event_ >= timeline.size()) return;
  const auto n = static_cast<std::uint32_t>(timeline.size() - piece_first_event_);
  for (std::size_t i = piece_first_event_; i < timeline.size(); ++i) timeline[i].events_in_syscall = n;
}

void StreamAssembler::on_acked(std::uint32_t ack_seq, TimestampNs ts) {
  if (!active_ || role_ != Role::server) return;
  auto& timeline = active_->record.timeline;
  std::size_t& cursor = active_->ack_cursor;
  while (cursor < timeline.size() && timeline[cursor].end_seq && seq_leq(timeline[cursor].end_seq, ack_seq)) {
    if (!timeline[cursor].acked_ns) timeline[cursor].acked_ns = ts;
    ++cursor;
  }
}

// ---- exchange callbacks -------------------------------------------------------

void StreamAssembler::on_response(const protocol::ResponseInfo& response) {
  if (!response.event_stream) {
    ++counters_.non_stream_responses;
    return;
  }
  ++counters_.streams_started;
  start(response);
}

void StreamAssembler::start(const protocol::ResponseInfo& response) {
  Active& a = active_.emplace();
  StreamRecord& r = a.record;
  r.conn = identity_;
  r.role = role_;
  r.stream_seq = response.exchange;
  r.status = response.status;
  r.content_type = response.content_type;
  r.framing = response.framing;
  r.content_encoding = response.content_encoding;
  r.joined_midstream = response.joined_midstream;
  r.response_head_ns = response.head_ns;
  // Only a process that is on both ends of streams can be a gateway: by now
  // it has its other leg (a gateway answers after its upstream does).
  a.hash_events = census_.has_other_role(identity_.pid, role_);
  r.timeline.reserve(64);  // a typical stream's events without regrowing from 1
  piece_first_event_ = 0;
  if (const protocol::RequestInfo* req = response.request) {
    r.method = req->method;
    r.path = sanitize_target(req->target, config_.privacy);  // no query, no secret-like segments
    r.request_start_ns = req->start_ns;
    r.request_end_ns = req->complete ? req->end_ns : 0;
    const protocol::RequestMeaning meaning = protocol::interpret_request_body(req->body_head);
    r.request_model = meaning.model;
    r.model = meaning.model;
    r.request_stream = meaning.stream;
  }
}

void StreamAssembler::on_event(const protocol::StreamEvent& e) {
  if (!active_) return;
  Active& a = *active_;
  ++counters_.sse_events;
  const protocol::EventMeaning& meaning = a.interpreter.interpret(e.type, e.data, e.truncated);
  if (a.record.timeline.size() < config_.max_timeline_events)
    fill_timeline_event(a.record.timeline.emplace_back(), e, meaning, a.hash_events);
  note_meaning(a, e, meaning);
}

void StreamAssembler::fill_timeline_event(TimelineEvent& t, const protocol::StreamEvent& e,
                                          const protocol::EventMeaning& meaning, bool hash) const {
  t.ts_ns = e.ts;
  t.first_byte_ns = e.first_byte_ts;
  t.offset = e.body_offset;
  t.wire_bytes = e.wire_bytes;
  t.kind = meaning.kind;
  t.truncated = e.truncated;
  if (piece_) {
    t.syscall_ns = piece_->call_ns;
    t.more = piece_->more;
    if (e.end_position) {
      t.end_seq = piece_->start_seq + static_cast<std::uint32_t>(*e.end_position - piece_->position);
      t.end_seq_exact = e.end_position_exact && !e.truncated;
    } else {
      t.end_seq = piece_->end_seq;
    }
    if (role_ == Role::client && t.end_seq && piece_->arrivals) {
      // Bytes cannot arrive after the read that returned them: a later time
      // is another arrival's (a reader racing the kernel), not this event's.
      const TimestampNs arrived = piece_->arrivals->arrival_for(t.end_seq);
      t.arrived_ns = arrived <= t.ts_ns ? arrived : 0;
    }
  }
  if (hash && !e.truncated && !e.data.empty()) t.data_hash = std::hash<std::string_view>{}(e.data) | 1;
}

// What the event says about the stream as a whole.
void StreamAssembler::note_meaning(Active& a, const protocol::StreamEvent& e, const protocol::EventMeaning& meaning) {
  StreamRecord& r = a.record;
  if (e.truncated) ++r.truncated_events;
  if (r.first_event_ns == 0) r.first_event_ns = e.ts;
  r.last_event_ns = e.ts;
  if (meaning.kind == EventKind::content) {
    if (r.first_token_ns == 0) r.first_token_ns = e.ts;
    r.last_token_ns = e.ts;
  }
  if (r.dialect == protocol::Dialect::unknown) r.dialect = meaning.dialect;
  if (r.response_id.empty() && !meaning.response_id.empty()) r.response_id = meaning.response_id;
  if (!meaning.model.empty() && (r.model.empty() || r.model == r.request_model)) r.model = meaning.model;
  if (!meaning.finish_reason.empty()) r.finish_reason = meaning.finish_reason;
  if (meaning.kind == EventKind::error && r.error_type.empty()) {
    r.error_type = meaning.error_type.empty() ? "error" : meaning.error_type;
  }
  // Anthropic reports cumulative output_tokens; the last value wins.
  if (meaning.completion_tokens) a.usage_completion_tokens = meaning.completion_tokens;
  if (meaning.kind == EventKind::done) a.saw_done = true;
}

void StreamAssembler::on_body_bytes(std::uint64_t n) {
  if (active_) active_->record.body_bytes += n;
}

void StreamAssembler::on_body_gap(std::uint64_t n) {
  if (!active_) return;
  active_->record.body_bytes += n;
  active_->record.bytes_not_captured += n;
}

void StreamAssembler::on_body_undecodable(Undecodable why) {
  ++counters_.body_decode_errors;
  if (active_ && !active_->record.decode_error) active_->record.decode_error = why;
}

void StreamAssembler::on_response_end(TimestampNs ts, protocol::ResponseEnd how) {
  if (!active_) return;
  switch (how) {
    case protocol::ResponseEnd::complete: finish(ts, StreamEnd::complete); break;
    case protocol::ResponseEnd::superseded: finish(ts, StreamEnd::protocol_error); break;
    case protocol::ResponseEnd::cut_short: finish(ts, cut_reason_); break;
  }
}

void StreamAssembler::on_parse_error(protocol::ParseError error, bool in_stream) {
  // A message the connection ended in its middle is not malformed: the
  // record's `end` says what happened.
  if (error == protocol::ParseError::truncated_message) return;
  ++counters_.http_parse_errors;
  if (in_stream && active_) ++active_->record.parse_errors;
}

void StreamAssembler::finish(TimestampNs ts, StreamEnd reason) {
  mark_piece_batch();
  Active a = std::move(*active_);
  active_.reset();
  StreamRecord& r = a.record;
  // A stream that delivered its protocol's end marker is complete even when the
  // connection went away before the framing terminator was seen.
  r.end = a.saw_done ? StreamEnd::complete : reason;
  r.end_ns = ts;
  compute_metrics(r, a.usage_completion_tokens, config_);
  if (r.end == StreamEnd::complete) {
    ++counters_.streams_completed;
  } else {
    ++counters_.streams_partial;
  }
  finished_.push_back(std::move(r));
}

}  // namespace infertap::core
