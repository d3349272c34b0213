// The records of one connection's exchanges, whatever the protocol: one
// StreamAssembler per exchange the session opens (HTTP/1: exchange 0 for the
// connection's responses in turn; HTTP/2: each stream; websocket: each
// response), each told the transport context of the piece that reaches it,
// and every one told the connection's ACKs. The sinks outlive an upgrade:
// the next session opens its exchanges beside the old ones.
//
//   protocol::Session --exchange(id)--> StreamAssembler of that exchange --> records
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/counters.h"
#include "core/stream/assembler.h"
#include "protocol/session.h"

namespace infertap::core {

class Exchanges : public protocol::ExchangeSinks {
 public:
  Exchanges(const ConnIdentity& identity, const PipelineConfig& config, PipelineCounters& counters,
            const RoleCensus& census, LoadTracker* load);

  // The session now speaking (`upgraded`: an upgrade changed it; else the
  // connection's first bytes decided it): its role and protocol go to the
  // exchanges it opens from now on.
  void set_session(protocol::Protocol protocol, Role role, bool upgraded);
  // The piece being fed: an exchange it reaches takes its context.
  void begin_piece(const PieceContext& piece) { piece_ = &piece; }
  void end_piece();
  void on_acked(std::uint32_t ack_seq, TimestampNs ts);
  void set_cut_reason(StreamEnd reason);

  // Streams sending or receiving now (records filled so far), with their exchange ids.
  void for_each_active(const std::function<void(StreamRecord&)>& visit);
  void for_each_active(const std::function<void(const StreamRecord&)>& visit) const;
  std::vector<std::uint64_t> active_ids(const std::function<bool(const StreamRecord&)>& pick) const;
  bool has_finished() const;
  std::vector<StreamRecord> take_finished();

  // protocol::ExchangeSinks
  protocol::ExchangeSink* exchange(std::uint64_t id) override;
  void exchange_closed(std::uint64_t id) override;
  void on_problem(protocol::Protocol protocol, protocol::SessionProblem problem) override;

 private:
  struct Entry {
    std::unique_ptr<StreamAssembler> assembler;
    bool in_piece = false;  // begin_piece told for the piece being fed
    bool closed = false;    // its exchange is over: dropped once its record is taken
    bool reached = false;   // its sink was used since the last take: it may have finished a record
  };
  void note_reached(std::uint64_t id, Entry& e);

  const ConnIdentity& identity_;
  const PipelineConfig& config_;
  PipelineCounters& counters_;
  const RoleCensus& census_;
  LoadTracker* load_;
  protocol::Protocol protocol_ = protocol::Protocol::http1;
  Role role_ = Role::unknown;
  const PieceContext* piece_ = nullptr;
  std::map<std::uint64_t, Entry> entries_;
  std::vector<std::uint64_t> touched_;  // exchanges begun in the piece being fed
  std::vector<std::uint64_t> closed_;   // exchanges closed whose assemblers wait for the take
  std::vector<std::uint64_t> reached_;  // exchanges whose sinks were used since the last take
};

}  // namespace infertap::core
