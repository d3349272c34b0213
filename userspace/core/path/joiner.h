// Joins the records one stream leaves at several places on the host.
//
// Each finished record waits here briefly (PipelineConfig::path_settle_ns)
// for the records of its path and for late ACKs:
//   - the two ends of one TCP connection pair up by their reversed 4-tuple and
//     by TCP sequence numbers of each event's last byte (offsets as fallback);
//   - a gateway's two legs pair up inside one process by content: the same SSE
//     events (hash of each event's data) pass both, whatever the gateway is.
// A joined group then goes through the path stages: every event gets the
// times of every vantage (vantages.h), gateway legs their delays, every stall
// a cause (diagnosis.h), server records the client-observed view (delivery.h).
//
//   finished StreamRecords + delivery signals --> PathJoiner --> released records
#pragma once

#include <cstdint>
#include <list>
#include <vector>

#include "capture/event.h"
#include "core/path/node.h"
#include "core/types.h"

namespace infertap::core {

// What the joiner needs to know of the streams still in flight, asked when a
// record arrives and while it waits.
class PathPartners {
 public:
  enum class Activity { none, idle, streaming };
  virtual ~PathPartners() = default;
  // Is the connection with this local and remote endpoint followed on this
  // host, and is it inside a stream? While it is, a record of its other end
  // waits for it (a reader slower than the server finishes later).
  virtual Activity peer(const Endpoint& local, const Endpoint& remote) const = 0;
  // Could the record's process be a gateway (it follows connections in the
  // other role too: `idle`), and is a stream in flight there that carries the
  // same events (`streaming`)?
  virtual Activity gateway_leg(const StreamRecord& record) const = 0;
};

class PathJoiner {
 public:
  explicit PathJoiner(const PipelineConfig& config);

  // A finished record; `now` is the current monotonic time. Returns the
  // records released by its arrival (its group, or the oldest when full).
  std::vector<StreamRecord> add(StreamRecord&& record, TimestampNs now, const PathPartners& partners);
  // A delivery signal for a socket whose record may be held: the bytes of a
  // finished stream can sit in the send buffer long after its last send.
  void on_signal(std::uint64_t sock_id, std::uint64_t generation, const capture::DeliverySignal& signal);
  // The socket closed: no more ACKs will come for its held records.
  std::vector<StreamRecord> on_closed(std::uint64_t sock_id, std::uint64_t generation, TimestampNs now,
                                      const PathPartners& partners);
  // The records whose path is complete or whose wait is over.
  std::vector<StreamRecord> release_due(TimestampNs now, const PathPartners& partners);
  std::vector<StreamRecord> release_all();
  std::size_t held() const { return waiting_.size(); }
  std::uint64_t joined() const { return joined_; }  // records released linked to another

 private:
  struct Waiting : PathNode {  // a record waiting for the rest of its path
    TimestampNs deadline = 0;  // settle time after it finished
    TimestampNs cap = 0;       // longest wait for a partner still streaming
    bool want_peer = false;
    bool want_gateway = false;
    bool closed = false;  // its socket closed: no ACK to wait for
  };
  using Group = std::vector<Waiting*>;

  bool satisfied(const Waiting& h) const;
  bool waiting_for_streaming_partner(const Waiting& h, TimestampNs now, const PathPartners& partners) const;
  void link(Waiting& h);
  bool link_peer(Waiting& h, Waiting& other);
  void link_gateway_legs(Waiting& h, Waiting& other);
  Group group_of(Waiting& h);
  bool ready(const Group& group, TimestampNs now, const PathPartners* partners) const;
  void try_release(Waiting& h, TimestampNs now, const PathPartners* partners, std::vector<StreamRecord>& out);
  void finish(const Group& group);

  const PipelineConfig& config_;
  std::list<Waiting> waiting_;  // stable addresses: links are pointers
  std::uint64_t joined_ = 0;
};

}  // namespace infertap::core
