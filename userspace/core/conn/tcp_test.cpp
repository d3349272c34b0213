// TCP sequences place each call in its direction's byte stream; arrivals are
// claimed by the reads that follow them; ACK windows open and close episodes.
#include "core/conn/tcp.h"

#include <gtest/gtest.h>

namespace infertap::core {
namespace {

TEST(TcpCursor, SequencesGivePositionsAndExactHoles) {
  TcpCursor c;
  TcpCursor::Placement a = c.place(1100, 100);  // bytes 1000..1100
  EXPECT_EQ(a.position, 0u);
  EXPECT_EQ(a.lost, 0u);
  EXPECT_EQ(a.start_seq, 1000u);
  TcpCursor::Placement b = c.place(1350, 50);  // 200 bytes were never seen
  EXPECT_EQ(b.lost, 200u);
  EXPECT_EQ(b.position, 300u);
  EXPECT_EQ(b.start_seq, 1300u);
  TcpCursor::Placement wrap = c.place(1350 + 10, 10);
  EXPECT_EQ(wrap.position, 350u);
}

TEST(TcpCursor, SequenceWrapIsNotALoss) {
  TcpCursor c;
  c.place(0xFFFFFFF0u, 16);
  TcpCursor::Placement next = c.place(0x10u, 0x20u);
  EXPECT_EQ(next.lost, 0u);
  EXPECT_EQ(next.position, 16u);
}

TEST(ArrivalLog, AReadClaimsTheFirstArrivalThatCoversItsBytes) {
  ArrivalLog log;
  log.add(100, 10);
  log.add(200, 20);
  log.add(300, 30);
  EXPECT_EQ(log.arrival_for(150), 20u);
  EXPECT_EQ(log.arrival_for(200), 20u);
  EXPECT_EQ(log.arrival_for(301), 0u) << "nothing has arrived past 300";
}

TEST(TrackWindow, AClosedWindowIsOneEpisodeUntilItOpens) {
  TcpContext tcp;
  TimestampNs since = 0;
  capture::DeliverySignal ack;
  ack.kind = capture::DeliverySignal::Kind::ack;
  ack.window = 0;
  ack.ts_ns = 1000;
  track_window(since, ack, &tcp);
  ack.ts_ns = 1500;
  track_window(since, ack, &tcp);  // still closed
  ack.window = 65535;
  ack.ts_ns = 4000;
  track_window(since, ack, &tcp);
  EXPECT_EQ(since, 0u);
  EXPECT_EQ(tcp.zero_window_episodes, 1u);
  EXPECT_EQ(tcp.zero_window_ns, 3000u);
  ASSERT_EQ(tcp.zero_window.size(), 1u);
  EXPECT_EQ(tcp.zero_window[0], std::make_pair(TimestampNs{1000}, TimestampNs{4000}));
}

}  // namespace
}  // namespace infertap::core
