// The records of an HTTP/2 connection: one StreamAssembler per live stream
// (the session bounds them), each told the transport context of the piece
// that reaches it, and every one told the connection's ACKs.
//
//   http2::Session --stream(id)--> StreamAssembler of that stream --> records
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/counters.h"
#include "core/stream/assembler.h"
#include "protocol/http2/session.h"

namespace infertap::core {

class H2Streams : public protocol::http2::StreamSinks {
 public:
  H2Streams(const ConnIdentity& identity, const PipelineConfig& config, PipelineCounters& counters,
            const RoleCensus& census, LoadTracker* load);

  void set_role(Role role) { role_ = role; }
  // The piece being fed: a stream it reaches takes its context.
  void begin_piece(const PieceContext& piece) { piece_ = &piece; }
  void end_piece();
  void on_acked(std::uint32_t ack_seq, TimestampNs ts);
  void set_cut_reason(StreamEnd reason);

  // Streams sending or receiving now (records filled so far).
  void for_each_active(const std::function<void(StreamRecord&)>& visit);
  void for_each_active(const std::function<void(const StreamRecord&)>& visit) const;
  bool has_finished() const;
  std::vector<StreamRecord> take_finished();

  // protocol::http2::StreamSinks
  protocol::ExchangeSink* stream(std::uint32_t id) override;
  void stream_closed(std::uint32_t id) override;
  void on_problem(protocol::http2::Problem problem) override;

 private:
  struct Entry {
    std::unique_ptr<StreamAssembler> assembler;
    bool in_piece = false;  // begin_piece told for the piece being fed
    bool closed = false;    // its stream is over: dropped once its record is taken
  };

  const ConnIdentity& identity_;
  const PipelineConfig& config_;
  PipelineCounters& counters_;
  const RoleCensus& census_;
  LoadTracker* load_;
  Role role_ = Role::unknown;
  const PieceContext* piece_ = nullptr;
  std::map<std::uint32_t, Entry> streams_;
};

}  // namespace infertap::core
