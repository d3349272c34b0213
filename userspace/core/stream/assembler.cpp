#include "core/stream/assembler.h"

#include <algorithm>
#include <functional>

#include "core/labels.h"
#include "core/metrics.h"

namespace infertap::core {

using protocol::EventKind;

namespace {

// Requests counted as waiting per connection at most (a peer that pipelines
// without reading: the session keeps 64 too).
constexpr std::size_t kMaxPendingWaits = 64;

}  // namespace

StreamAssembler::StreamAssembler(const ConnIdentity& identity, const PipelineConfig& config,
                                 PipelineCounters& counters, const RoleCensus& census, LoadTracker* load)
    : identity_(identity), config_(config), counters_(counters), census_(census), load_(load) {}

// A connection that goes away leaves nothing counted in its scope.
StreamAssembler::~StreamAssembler() {
  if (active_) unaccount(*active_);
  if (!load_ || scope_.key == 0) return;
  for (std::size_t i = 0; i < pending_waits_.size(); ++i) load_->request_dropped(scope_.key);
  if (active_) {
    if (active_->waiting) load_->request_dropped(scope_.key);
    LoadContext ignored;
    if (active_->ticket.decoding) load_->stream_ended(scope_, active_->ticket, active_->record.last_event_ns, 0, {}, ignored);
  }
}

// The load scope of the connection: the serving process for a server, the
// server's address for a client.
void StreamAssembler::set_role(Role role) {
  role_ = role;
  if (!load_) return;
  scope_ = {};
  if (role == Role::server) {
    scope_.key = LoadTracker::process_key(identity_.pid);
    scope_.process = true;
    scope_.pid = identity_.pid;
    scope_.comm = identity_.comm;
    scope_.cgroup = identity_.cgroup_path;
    std::uint8_t addr[16];
    std::copy(identity_.remote.addr.begin(), identity_.remote.addr.end(), addr);
    client_ = LoadTracker::address_key(addr, 0);
  } else if (role == Role::client) {
    std::uint8_t addr[16];
    std::copy(identity_.remote.addr.begin(), identity_.remote.addr.end(), addr);
    scope_.key = LoadTracker::address_key(addr, identity_.remote.port);
    scope_.server = identity_.remote.to_string();
    scope_.cgroup = identity_.cgroup_path;
  }
}

void StreamAssembler::on_request_end(const protocol::RequestInfo& request) {
  if (!load_ || scope_.key == 0 || pending_waits_.size() >= kMaxPendingWaits) return;
  pending_waits_.push_back(load_->request_ended(scope_, request.end_ns));
}

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
  mark_acked(active_->record.timeline, active_->ack_cursor, ack_seq, ts);
}

// ---- exchange callbacks -------------------------------------------------------

void StreamAssembler::on_response(const protocol::ResponseInfo& response) {
  if (!response.event_stream) {
    ++counters_.non_stream_responses;
    // Answered at once: no longer waiting.
    if (load_ && !pending_waits_.empty() && !response.joined_midstream) {
      pending_waits_.pop_front();
      load_->request_dropped(scope_.key);
    }
    return;
  }
  ++counters_.streams_started;
  start(response);
}

void StreamAssembler::start(const protocol::ResponseInfo& response) {
  if (active_) unaccount(*active_);
  Active& a = active_.emplace();
  StreamRecord& r = a.record;
  r.conn = identity_;
  r.role = role_;
  r.stream_seq = response.exchange;
  r.status = response.status;
  r.content_type = response.content_type;
  r.framing = response.framing;
  r.content_encoding = response.content_encoding;
  r.event_framing = response.event_framing;
  r.declared = response.declared;
  if (r.declared) r.dialect = protocol::Dialect::declared;
  r.joined_midstream = response.joined_midstream;
  r.http_version = response.http_version;
  r.protocol = response.protocol;
  r.h2_stream_id = response.h2_stream_id;
  r.headers_unknown = response.headers_unknown;
  if (r.event_framing == protocol::EventFraming::grpc) r.dialect = protocol::Dialect::grpc;
  r.response_head_ns = response.head_ns;
  // Only a process that is on both ends of streams can be a gateway: by now
  // it has its other leg (a gateway answers after its upstream does).
  a.hash_events = census_.has_other_role(identity_.pid, role_);
  r.timeline.reserve(64);  // a typical stream's events without regrowing from 1
  piece_first_event_ = 0;
  if (scope_.key != 0) r.load.scope = scope_.process ? "process" : "server";
  r.load.server_version = response.server_version;
  if (load_ && !pending_waits_.empty() && !response.joined_midstream) {
    a.waiting = true;
    r.load.waiting_at_request = pending_waits_.front();
    pending_waits_.pop_front();
  }
  if (const protocol::RequestInfo* req = response.request) {
    r.method = req->method;
    r.path = sanitize_target(req->target, config_.privacy);  // no query, no secret-like segments
    r.request_start_ns = req->start_ns;
    r.request_end_ns = req->complete ? req->end_ns : 0;
    const protocol::RequestMeaning meaning = protocol::interpret_request_body(req->body_head);
    r.request_model = meaning.model;
    r.model = meaning.model;
    r.request_stream = meaning.stream;
    r.load.max_tokens = meaning.max_tokens;
    r.load.include_usage = meaning.include_usage;
    if (req->complete) r.load.request_bytes = req->body_bytes;
  }
  protocol::StreamContext context;
  context.path = r.path;
  context.media_type = protocol::media_type(r.content_type);
  context.framing = r.event_framing;
  context.declared = r.declared;
  a.interpreter.begin(context);
}

void StreamAssembler::on_event(const protocol::StreamEvent& e) {
  if (!active_) return;
  Active& a = *active_;
  ++counters_.sse_events;
  const protocol::EventMeaning& meaning = a.interpreter.interpret(e.type, e.data, e.truncated, e.wire_bytes);
  keep_event(a, e, meaning);
  note_meaning(a, e, meaning);
  account(a);
}

// The first max_timeline_events events whole, the rest in the tail.
void StreamAssembler::keep_event(Active& a, const protocol::StreamEvent& e, const protocol::EventMeaning& meaning) {
  const bool content = meaning.kind == EventKind::content;
  if (content && meaning.audio) ++a.record.audio_events;
  const bool observed = a.gap_watch.step(e.body_offset, e.wire_bytes, content);
  std::vector<TimelineEvent>& timeline = a.record.timeline;
  const std::size_t bound = config_.max_timeline_events;
  if (timeline.size() < bound) {
    // Grow to the bound, never past it (doubling would overshoot by up to 2x).
    if (timeline.size() == timeline.capacity()) timeline.reserve(std::min(bound, std::max<std::size_t>(64, 2 * timeline.size())));
    fill_timeline_event(timeline.emplace_back(), e, meaning, a.hash_events);
    return;
  }
  add_to_tail(a.record.tail, e, content, observed, a.gap_watch.contents() - 1);
}

void StreamAssembler::add_to_tail(TimelineTail& tail, const protocol::StreamEvent& e, bool content, bool observed,
                                  std::uint32_t content_index) {
  ++tail.events;
  if (!content) return;
  const bool kept = tail.gaps.size() < TimelineTail::kMaxTailGaps;
  // The gap ending at content event k is gap k-1 of the record.
  if (content_index > 0 && !observed && kept) tail.unobserved.push_back(content_index - 1);
  if (++tail.content_events == 1) {
    tail.first_token_ns = tail.last_token_ns = e.ts;
    return;
  }
  const std::uint64_t gap = e.ts >= tail.last_token_ns ? e.ts - tail.last_token_ns : 0;
  tail.last_token_ns = e.ts;
  tail.max_gap_ns = std::max(tail.max_gap_ns, gap);
  if (!kept) return;
  if (gap >= TimelineTail::kLongGap) tail.long_gaps.push_back(gap);
  tail.gaps.push_back(static_cast<std::uint32_t>(std::min<std::uint64_t>(gap, TimelineTail::kLongGap)));
}

// live_stream_bytes follows every stream's held_bytes (the budget's measure).
void StreamAssembler::account(Active& a) {
  const std::size_t held = held_bytes(a.record);
  counters_.live_stream_bytes += held - a.accounted;  // unsigned wrap adds a negative delta
  a.accounted = held;
}

void StreamAssembler::unaccount(const Active& a) { counters_.live_stream_bytes -= a.accounted; }

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
    if (e.end_position && piece_->per_byte_seq) {
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
    if (r.first_token_ns == 0) {
      // Once per stream: the load it starts decoding under.
      r.first_token_ns = e.ts;
      r.load.system_fingerprint = meaning.system_fingerprint;
      if (load_ && scope_.key != 0) {
        load_->first_token(scope_, a.ticket, a.waiting, e.ts, client_, r.load);
        a.waiting = false;
      }
    }
    r.last_token_ns = e.ts;
  }
  if (r.dialect == protocol::Dialect::unknown) r.dialect = meaning.dialect;
  if (r.response_id.empty() && !meaning.response_id.empty()) r.response_id = meaning.response_id;
  if (!meaning.model.empty() && (r.model.empty() || r.model == r.request_model)) r.model = meaning.model;
  if (!meaning.finish_reason.empty()) r.finish_reason = meaning.finish_reason;
  if (meaning.kind == EventKind::error && r.error_type.empty()) {
    r.error_type = meaning.error_type.empty() ? "error" : meaning.error_type;
  }
  // Anthropic reports cumulative output_tokens (so do SGLang, Gemini); the last value wins.
  if (meaning.completion_tokens) {
    a.usage_completion_tokens = meaning.completion_tokens;
    if (meaning.prompt_tokens) r.load.input_tokens = meaning.prompt_tokens;
    if (r.load.system_fingerprint.empty()) r.load.system_fingerprint = meaning.system_fingerprint;
  }
  if (meaning.kind == EventKind::done || meaning.ends_stream) a.saw_done = true;
}

void StreamAssembler::on_body_bytes(std::uint64_t n) {
  if (active_) active_->record.body_bytes += n;
}

void StreamAssembler::on_body_gap(std::uint64_t n) {
  if (!active_) return;
  StreamRecord& r = active_->record;
  // A hole inside a call that moved it (not bytes lost before userspace,
  // whose time is unknown).
  if (piece_ && piece_->ts && r.body_holes.size() < kMaxBodyHoles) r.body_holes.push_back({r.body_bytes, n, piece_->ts});
  r.body_bytes += n;
  r.bytes_not_captured += n;
  account(*active_);
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
    case protocol::ResponseEnd::reset: finish(ts, StreamEnd::stream_reset); break;
    case protocol::ResponseEnd::goaway: finish(ts, StreamEnd::goaway); break;
  }
}

void StreamAssembler::on_h2_stream(const protocol::Http2StreamStats& stats) {
  if (!active_) return;
  StreamRecord& r = active_->record;
  r.h2_data_frames = stats.data_frames;
  r.grpc_status = stats.grpc_status;
  r.h2_flow = stats;
}

void StreamAssembler::on_message_stats(const protocol::MessageStats& stats) {
  if (active_) active_->record.messages = stats;
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
  unaccount(a);
  StreamRecord& r = a.record;
  // A stream that delivered its protocol's end marker is complete even when the
  // connection went away before the framing terminator was seen.
  r.end = a.saw_done ? StreamEnd::complete : reason;
  r.end_ns = ts;
  r.metrics = record_metrics(r, a.usage_completion_tokens, config_);
  // The tail's times served the metrics; a held record needs only its counts.
  if (r.tail.events > 0) ++counters_.timelines_truncated;
  r.tail.gaps = {};
  r.tail.long_gaps = {};
  r.tail.unobserved = {};
  if (load_ && scope_.key != 0) {
    if (a.waiting) load_->request_dropped(scope_.key);  // ended without a token
    load_->stream_ended(scope_, a.ticket, ts, r.metrics.tokens, identity_.cgroup_path, r.load);
  }
  if (r.end == StreamEnd::complete) {
    ++counters_.streams_completed;
  } else {
    ++counters_.streams_partial;
  }
  finished_.push_back(std::move(r));
}

}  // namespace infertap::core
