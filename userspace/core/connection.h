// One followed TCP connection: places an HTTP parser on each direction by the
// connection's role, pairs responses with requests, and assembles a record per
// text/event-stream response with one timeline entry per SSE event.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "capture/event.h"
#include "core/types.h"
#include "protocol/http.h"
#include "protocol/payload.h"
#include "protocol/sse.h"

namespace infertap::core {

class Pipeline;

class Connection {
 public:
  Connection(ConnIdentity identity, Pipeline& pipeline);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void on_data(const capture::IoEvent& event);
  void on_state(const capture::IoEvent& event);
  // A delivery signal of this socket: ACKs give the sender's `acked` times and
  // the peer window, arrivals the receiver's `arrived` times.
  void on_path(const capture::PathSignal& signal);
  // Ends the connection: closes both directions, finishes any stream.
  void close(TimestampNs ts, StreamEnd reason);
  // Ends a stream that saw no bytes for too long (the connection stays).
  void expire_stream(TimestampNs now, std::uint64_t idle_ns);

  // The stream this connection is sending or receiving now, if any (record
  // filled so far; metrics not computed yet).
  const StreamRecord* active_stream() const {
    return response_ && response_->is_stream ? &response_->record : nullptr;
  }
  const ConnIdentity& identity() const { return identity_; }
  Role role() const { return role_; }
  bool ignored() const { return ignored_; }
  TimestampNs last_activity() const { return last_activity_; }

 private:
  struct PendingRequest {
    std::string method, target;
    TimestampNs start_ns = 0, end_ns = 0;
    std::string body_head;
    bool complete = false;
  };

  // Per-direction byte stream: parser plus the TCP sequence expected next.
  struct Direction {
    std::optional<protocol::HttpParser> parser;
    std::optional<std::uint32_t> next_seq;
    bool ended = false;
  };

  class RequestSink : public protocol::HttpMessageSink {
   public:
    explicit RequestSink(Connection& c) : c_(c) {}
    void on_request_head(const protocol::RequestHead& head, TimestampNs ts) override;
    void on_body(std::span<const std::uint8_t> bytes, TimestampNs ts) override;
    void on_message_end(TimestampNs ts) override;
    void on_error(protocol::ParseError e, std::string_view detail) override;

   private:
    Connection& c_;
  };

  class ResponseSink : public protocol::HttpMessageSink {
   public:
    explicit ResponseSink(Connection& c) : c_(c) {}
    void on_response_head(const protocol::ResponseHead& head, TimestampNs ts) override;
    void on_body(std::span<const std::uint8_t> bytes, TimestampNs ts) override;
    void on_body_gap(std::uint64_t n, TimestampNs ts) override;
    void on_message_end(TimestampNs ts) override;
    void on_error(protocol::ParseError e, std::string_view detail) override;

   private:
    Connection& c_;
  };

  // The response currently being received/sent on this connection.
  struct ActiveResponse {
    ActiveResponse() {}  // user-provided: clang needs it to emplace a nested type with member initialisers
    bool is_stream = false;
    StreamRecord record;
    std::optional<protocol::SseParser> sse;
    protocol::StreamEventInterpreter interpreter;
    std::optional<std::uint64_t> usage_completion_tokens;
    bool saw_done = false;
    bool hash_events = false;  // the process may be a gateway: hash events to find them on its other leg
  };

  bool decide_role(const capture::IoEvent& event);
  Direction& direction_of(const capture::IoEvent& event);
  void feed(Direction& dir, const capture::IoEvent& event);
  void on_sse_event(const protocol::SseEvent& event);
  void start_response(const protocol::ResponseHead& head, TimestampNs ts);
  void finish_response(TimestampNs ts, StreamEnd reason);

  ConnIdentity identity_;
  Pipeline& pipeline_;
  Role role_ = Role::unknown;
  bool ignored_ = false;
  TimestampNs last_activity_ = 0;
  RequestSink request_sink_{*this};
  ResponseSink response_sink_{*this};
  Direction outbound_, inbound_;
  std::deque<PendingRequest> requests_;
  std::optional<ActiveResponse> response_;
  std::uint64_t responses_seen_ = 0;
  // The syscall whose bytes are being fed right now (timeline context).
  const capture::IoEvent* current_ = nullptr;
  std::size_t current_first_event_ = 0;
  std::uint32_t current_start_seq_ = 0;  // TCP sequence of the syscall's first byte
  // The body bytes handed to the SSE parser right now and where they sit on
  // the wire, so that an event completed inside them gets its exact sequence.
  struct BodySpan {
    bool valid = false;
    std::uint64_t body_start = 0;
    std::uint64_t len = 0;
    std::uint32_t seq_start = 0;
  };
  BodySpan body_span_;
  BodySpan locate(std::span<const std::uint8_t> bytes, std::uint64_t body_start) const;
  // Receiver: rcv_nxt after each arrival not yet matched to a read event.
  std::deque<std::pair<std::uint32_t, TimestampNs>> arrivals_;
  TimestampNs arrival_for(std::uint32_t end_seq);
  // Sender: first timeline event not yet acknowledged.
  std::size_t ack_cursor_ = 0;
  std::optional<TimestampNs> zero_window_since_;
  void close_zero_window(TimestampNs ts, TcpContext* tcp);
};

}  // namespace infertap::core
