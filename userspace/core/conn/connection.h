// One followed TCP connection: turns its captured calls into the byte
// streams its protocol session reads, and its delivery signals into the
// vantages of its stream records.
//
//   capture events --> TcpCursor (positions, lost bytes) --> protocol::Session
//                  --> Exchanges (a StreamAssembler per exchange) --> finished StreamRecords
//   delivery signals --> ACK / arrival / window state of the records
//
// The session is whichever protocol the registration list recognised from the
// first bytes (protocol/registry.h), replaced when it reports an upgrade; the
// connection names none.
//
// The connection never calls its owner: what it decides (stop following this
// socket, the role it found) is returned, and the records it finished wait to
// be taken.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "capture/event.h"
#include "core/conn/exchanges.h"
#include "core/conn/tcp.h"
#include "core/role_census.h"
#include "core/stream/assembler.h"
#include "core/types.h"
#include "protocol/session.h"

namespace infertap::core {

class Connection {
 public:
  // What handling one event decided.
  struct Decision {
    bool role_decided = false;  // role() is known from this event on
    bool mute = false;          // not HTTP: stop following the socket
    // The event's TCP sequence does not continue this connection's: the
    // socket address now belongs to another connection (the event was not
    // taken; the owner starts a new connection with it).
    bool foreign = false;
    // The connection is over: it closed with bytes unread, and this read
    // found the end of them.
    bool ended = false;
  };

  Connection(ConnIdentity identity, const PipelineConfig& config, PipelineCounters& counters,
             const RoleCensus& census, LoadTracker* load = nullptr);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Decision on_data(const capture::IoEvent& event);
  // A TLS connection whose first events did not name its library.
  void note_tls(std::string library, TimestampNs start_ns);
  void on_state(const capture::IoEvent& event);
  // TCP closed the socket with received bytes still unread: it ends when they
  // are read (EOF) or the socket is destroyed, not now.
  void on_closed_unread() { closed_unread_ = true; }
  // A unix connection's peer read EOF: this side shut its sending down or
  // closed (the kernel side sees no close of a unix socket). Nothing more
  // will be sent. Returns whether the inbound side had ended too.
  bool on_peer_shut_down(TimestampNs ts);
  bool inbound_ended() const { return inbound_eof_; }
  bool outbound_ended() const { return outbound_shut_; }
  // A delivery signal of this socket: ACKs give the sender's `acked` times and
  // the peer window, arrivals the receiver's `arrived` times.
  void on_signal(const capture::DeliverySignal& signal);
  // Ends the connection: closes both directions, finishes any stream.
  void close(TimestampNs ts, StreamEnd reason);
  // Ends a stream that saw no bytes for too long (the connection stays).
  void expire_stream(TimestampNs now, std::uint64_t idle_ns);
  // Ends the streams in flight `pick` chooses, their records with `reason`
  // (the connection stays).
  void end_streams(TimestampNs now, StreamEnd reason, const std::function<bool(const StreamRecord&)>& pick);

  // Records finished since the last take (checked after every call above).
  bool has_finished() const { return exchanges_.has_finished(); }
  std::vector<StreamRecord> take_finished();

  // The streams this connection is sending or receiving now (records filled
  // so far; metrics not computed yet): one for HTTP/1, each live stream of
  // an HTTP/2 connection.
  void for_each_active_stream(const std::function<void(const StreamRecord&)>& visit) const;
  bool streaming() const;
  const ConnIdentity& identity() const { return identity_; }
  Role role() const { return session_ ? session_->role() : Role::unknown; }
  TimestampNs last_activity() const { return last_activity_; }

 private:
  bool note_failed_call(const capture::IoEvent& event);
  bool feed(protocol::Flow flow, const capture::IoEvent& event);
  void note_send(const capture::IoEvent& event);
  static void note_full_buffer(TcpContext& tcp, const capture::IoEvent& h);
  bool decide(protocol::Flow flow, std::span<const std::uint8_t> head);
  void switch_protocols(protocol::Flow flow, const protocol::Piece& piece, const PieceContext& context);
  void feed_session(protocol::Flow flow, const protocol::Piece& piece, const PieceContext& context);
  bool accepts(protocol::Flow flow) const { return session_ && session_->accepts(flow); }
  bool carries_responses(protocol::Flow flow) const { return session_ && session_->carries_responses(flow); }
  void end_flow(protocol::Flow flow, TimestampNs ts);
  void for_each_active(const std::function<void(StreamRecord&)>& visit);
  void set_cut_reason(StreamEnd reason);

  ConnIdentity identity_;
  PipelineCounters& counters_;
  const protocol::SessionSettings settings_;
  Exchanges exchanges_;
  std::unique_ptr<protocol::Session> session_;  // null until the first bytes decide it
  bool ignored_ = false;
  bool upgrade_unread_ = false;  // an upgrade to a protocol the list does not speak: the rest stays unread
  bool closed_unread_ = false;
  bool inbound_eof_ = false;    // a read returned EOF
  bool outbound_shut_ = false;  // unix: the peer read EOF
  TimestampNs last_activity_ = 0;
  TcpCursor outbound_cursor_, inbound_cursor_;  // TLS: over the plaintext byte counts
  std::uint64_t tls_ssl_ = 0;  // TLS: the library's connection object its plaintext comes from
  ArrivalLog arrivals_;           // receiver: rcv_nxt after each arrival not yet claimed by a read
  TimestampNs zero_window_since_ = 0;  // an episode of the peer's window at 0 (0: none)
};

}  // namespace infertap::core
