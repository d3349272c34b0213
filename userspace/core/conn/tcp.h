// What TCP tells the connection layer: sequence numbers place each captured
// call in its direction's byte stream (so bytes the kernel could not deliver
// become exact holes), and delivery signals say when bytes arrived at a local
// receiver, when the peer acknowledged them, and when its window closed.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

#include "capture/event.h"
#include "core/types.h"

namespace infertap::core {

// One direction of a TCP connection as a byte stream: the position of each
// call's bytes from the sequence the kernel reported after it.
class TcpCursor {
 public:
  // Past these, a jump of the sequence is not bytes lost but another
  // connection's numbers: the socket address was reused without its close
  // reaching userspace (a ring-buffer overflow dropped it).
  static constexpr std::int64_t kMaxLostBytes = 64ll << 20;
  static constexpr std::int64_t kMaxOverlapBytes = 1ll << 20;

  struct Placement {
    std::uint64_t position = 0;  // stream position of the call's first byte
    std::uint64_t lost = 0;      // bytes between the previous call and this one that never reached userspace
    std::uint32_t start_seq = 0; // TCP sequence of the call's first byte
    bool foreign = false;        // the sequence does not continue this stream (nothing else is set)
  };
  // A call that moved `moved` bytes and left the sequence at `seq_end`.
  Placement place(std::uint32_t seq_end, std::uint64_t moved) {
    Placement p;
    p.start_seq = seq_end - static_cast<std::uint32_t>(moved);
    if (started_) {
      // Bytes between what we last saw and this call were moved by events the
      // kernel could not deliver (full ring buffer): an exact hole.
      const auto missing = static_cast<std::int32_t>(p.start_seq - next_seq_);
      if (missing > kMaxLostBytes || missing < -kMaxOverlapBytes) {
        p.foreign = true;
        return p;
      }
      if (missing > 0) p.lost = static_cast<std::uint64_t>(missing);
    }
    started_ = true;
    next_seq_ = seq_end;
    position_ += p.lost;
    p.position = position_;
    position_ += moved;
    return p;
  }

 private:
  bool started_ = false;
  std::uint32_t next_seq_ = 0;
  std::uint64_t position_ = 0;
};

// What a delivery signal tells every record of its socket alike: that signals
// are seen, the RTT, retransmissions, memory-limit hits. ACK positions and
// window episodes depend on where the record is: see track_window.
void note_signal(TcpContext& tcp, const capture::DeliverySignal& signal);

// An ACK's window opens or closes a zero-window episode (`since`: its start,
// 0 = none open); a closed episode is counted in `tcp` when given.
void track_window(TimestampNs& since, const capture::DeliverySignal& ack, TcpContext* tcp);

}  // namespace infertap::core
