// Joins the records one stream leaves at several places on the host, and says
// where each stall came from.
//
// A stream from an inference server to a client can be traced at up to four
// sockets on one host: the server's (emit), a gateway's upstream leg (read),
// the gateway's downstream leg (emit) and a local client's (read). Each finished
// record waits here briefly (PipelineConfig::path_settle_ns) for the records of
// its path and for late ACKs:
//   - the two ends of one TCP connection pair up by their reversed 4-tuple and
//     by TCP sequence numbers of each event's last byte (offsets as fallback);
//   - a gateway's two legs pair up inside one process by content: the same SSE
//     events (hash of each event's data) pass both, whatever the gateway is.
// Then every event gets the times of every vantage along the path, the
// server-side records get the client-observed (`delivery`) view, and every
// stall gets a cause with its evidence (docs/metrics.md#stall-causes).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "capture/abi_check.h"
#include "core/types.h"

namespace infertap::core {

// What a delivery signal tells every record of its socket alike: that signals
// are seen, the RTT, retransmissions, memory-limit hits. (ACK positions and
// window episodes depend on where the record is: see their callers.)
void note_path_signal(TcpContext& tcp, const itap_path_event& signal);

class PathJoiner {
 public:
  using Release = std::function<void(StreamRecord&&)>;
  // Is the other end of a record's connection (this local and remote
  // endpoint) followed on this host, and is it still inside a stream? While it
  // is, the record waits for the peer's record (a reader slower than the
  // server finishes later).
  enum class Activity { none, idle, streaming };
  using PeerActivity = std::function<Activity(const Endpoint& local, const Endpoint& remote)>;
  // Could the record's process be a gateway (it follows connections in the
  // other role too: `idle`), and is a stream in flight there that carries the
  // same events (`streaming`)?
  using GatewayPartnerActive = std::function<Activity(const StreamRecord& record)>;

  PathJoiner(const PipelineConfig& config, Release release, PeerActivity peer_activity,
             GatewayPartnerActive gateway_partner_active);

  // A finished record; `now` is the current monotonic time.
  void add(StreamRecord&& record, TimestampNs now);
  // A delivery signal for a socket whose record may be held: the bytes of a
  // finished stream can sit in the send buffer long after its last send.
  void on_signal(std::uint64_t sock_id, std::uint64_t generation, const itap_path_event& signal);
  // The socket closed: no more ACKs will come for its held records.
  void on_closed(std::uint64_t sock_id, std::uint64_t generation, TimestampNs now);
  // Releases the records whose path is complete or whose wait is over.
  void release_due(TimestampNs now);
  void release_all();
  std::size_t held() const { return held_.size(); }
  std::uint64_t joined() const { return joined_; }  // records released linked to another

 private:
  struct Held {
    StreamRecord rec;
    TimestampNs deadline = 0;  // settle time after it finished
    TimestampNs cap = 0;       // longest wait for a partner still streaming
    bool want_peer = false;
    bool want_gateway = false;
    bool closed = false;  // its socket closed: no ACK to wait for
    Held* peer = nullptr;       // other end of the TCP connection
    Held* gw = nullptr;         // the gateway's other leg (same process)
    std::vector<int> to_peer;   // my event -> peer's event (-1: none)
    std::vector<int> to_gw;     // upstream leg: -> the downstream event that carried it (or the next
                                // one that was captured); downstream leg: -> upstream event, exact only
  };

  enum class HopKind;
  struct Hop;
  static std::pair<const Held*, int> origin_of(const Held* h, int i);
  static std::vector<Hop> hops(const Held* h, int i);
  static void hops_into(const Held* h, int i, std::vector<Hop>& out);  // reuses out's storage
  static std::pair<StallCause, std::string> emit_cause(const Held* s, int ia, int ib);
  static std::pair<StallCause, std::string> diagnose(const Held* h, int a, int b, bool through_final);
  static std::pair<StallCause, std::string> delay_cause(const std::vector<Hop>& path);

  bool satisfied(const Held& h) const;
  void link(Held& h);
  std::vector<Held*> group_of(Held& h);
  void try_release(Held& h, TimestampNs now, bool force);
  void finish_group(const std::vector<Held*>& group);

  const PipelineConfig& config_;
  Release release_;
  PeerActivity peer_activity_;
  GatewayPartnerActive gateway_partner_active_;
  std::list<Held> held_;  // stable addresses: links are pointers
  std::uint64_t joined_ = 0;
};

}  // namespace infertap::core
