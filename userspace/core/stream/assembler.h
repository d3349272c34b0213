// Assembles one record per streamed response of a connection from what its
// protocol session yields (protocol/exchange.h): the request it answers, the
// response head, one timeline entry per event with the event's meaning and
// the transport position of its last byte, and how the stream ended.
//
//   ExchangeSink callbacks --> StreamAssembler --> finished StreamRecords
//
// The connection tells it, per piece, what only the transport knows (how long
// the call took, its TCP sequences, arrivals at the receiving socket) and
// takes the finished records.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "core/metrics.h"
#include "core/role_census.h"
#include "core/types.h"
#include "protocol/exchange.h"
#include "protocol/payload/interpreter.h"

namespace infertap::core {

// What the transport knows of the piece being fed.
struct PieceContext {
  std::uint64_t call_ns = 0;    // how long the call that moved it took
  bool more = false;            // the sender asked the kernel to hold the bytes for more (MSG_MORE)
  std::uint64_t position = 0;   // stream position of its first byte
  TimestampNs ts = 0;           // when the call that moved it returned
  std::uint32_t start_seq = 0;  // TCP sequence of its first byte
  std::uint32_t end_seq = 0;    // TCP sequence just past its last byte
  // The piece's bytes map one to one onto TCP's (plaintext sockets); TLS
  // plaintext does not: its events all take end_seq.
  bool per_byte_seq = true;
  ArrivalLog* arrivals = nullptr;  // receiver: arrivals at its socket, claimed per event
};

class StreamAssembler : public protocol::ExchangeSink {
 public:
  // `load`: where the load context of its records is kept (null: none).
  StreamAssembler(const ConnIdentity& identity, const PipelineConfig& config, PipelineCounters& counters,
                  const RoleCensus& census, LoadTracker* load = nullptr);
  ~StreamAssembler() override;
  StreamAssembler(const StreamAssembler&) = delete;
  StreamAssembler& operator=(const StreamAssembler&) = delete;

  // The role the connection's session decided (before any response).
  void set_role(Role role);
  // Brackets the feeding of one piece; events it completes take its context.
  void begin_piece(const PieceContext& piece) {
    piece_ = &piece;
    piece_first_event_ = active_ ? active_->record.timeline.size() : 0;
  }
  void end_piece() {
    mark_piece_batch();
    piece_ = nullptr;
  }
  // Why a response the session cuts short ends (connection closed, idle, ...).
  void set_cut_reason(StreamEnd reason) { cut_reason_ = reason; }

  // The peer's kernel acknowledged up to `ack_seq` (sender records).
  void on_acked(std::uint32_t ack_seq, TimestampNs ts);

  // The streamed response in progress (record filled so far, no metrics yet).
  StreamRecord* active_stream() { return active_ ? &active_->record : nullptr; }
  const StreamRecord* active_stream() const { return active_ ? &active_->record : nullptr; }
  // Records finished since the last take.
  bool has_finished() const { return !finished_.empty(); }
  std::vector<StreamRecord> take_finished() { return std::exchange(finished_, {}); }

  // protocol::ExchangeSink
  void on_request_end(const protocol::RequestInfo& request) override;
  void on_response(const protocol::ResponseInfo& response) override;
  void on_event(const protocol::StreamEvent& event) override;
  void on_body_bytes(std::uint64_t n) override;
  void on_body_gap(std::uint64_t n) override;
  void on_body_undecodable(Undecodable why) override;
  void on_h2_stream(const protocol::Http2StreamStats& stats) override;
  void on_message_stats(const protocol::MessageStats& stats) override;
  void on_response_end(TimestampNs ts, protocol::ResponseEnd how) override;
  void on_parse_error(protocol::ParseError error, bool in_stream) override;

 private:
  struct Active {
    Active() {}  // user-provided: clang needs it to emplace a nested type with member initialisers
    StreamRecord record;
    protocol::StreamEventInterpreter interpreter;
    std::optional<std::uint64_t> usage_completion_tokens;
    bool saw_done = false;
    bool hash_events = false;   // the process may be a gateway
    std::size_t ack_cursor = 0;  // first timeline event not acknowledged yet
    bool waiting = false;        // its request is counted as waiting in the load scope
    ContentGapWatch gap_watch;   // every event: which content gaps span lost bytes (the tail's)
    std::size_t accounted = 0;   // its held_bytes, as counted in live_stream_bytes
    LoadTracker::Ticket ticket;
  };

  void start(const protocol::ResponseInfo& response);
  void fill_timeline_event(TimelineEvent& t, const protocol::StreamEvent& event,
                           const protocol::EventMeaning& meaning, bool hash) const;
  void note_meaning(Active& a, const protocol::StreamEvent& event, const protocol::EventMeaning& meaning);
  void keep_event(Active& a, const protocol::StreamEvent& event, const protocol::EventMeaning& meaning);
  static void add_to_tail(TimelineTail& tail, const protocol::StreamEvent& event, bool content, bool observed,
                          std::uint32_t content_index);
  void account(Active& a);
  void unaccount(const Active& a);
  void mark_piece_batch();
  void finish(TimestampNs ts, StreamEnd reason);

  const ConnIdentity& identity_;
  const PipelineConfig& config_;
  PipelineCounters& counters_;
  const RoleCensus& census_;
  Role role_ = Role::unknown;
  StreamEnd cut_reason_ = StreamEnd::connection_closed;
  std::optional<Active> active_;
  const PieceContext* piece_ = nullptr;
  std::size_t piece_first_event_ = 0;  // first timeline event of the active record completed by this piece
  std::vector<StreamRecord> finished_;
  // Load context: the scope this connection's streams count in, and the
  // requests that ended with their response not begun (each: the requests
  // already waiting when it ended).
  LoadTracker* load_ = nullptr;
  LoadTracker::ScopeId scope_;
  std::uint64_t client_ = 0;  // server role: the client's address (LoadTracker::address_key, port 0)
  std::deque<std::uint32_t> pending_waits_;
};

}  // namespace infertap::core
