// PathJoiner from synthetic records with a fake clock: the two ends of a
// connection join by TCP sequence, a gateway's legs join by content, records
// wait only as long as their partners can still come, and each stall is
// charged to the hop that added it.
#include "core/path/joiner.h"

#include "core/metrics.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <cstring>
#include <vector>

namespace infertap::core {
namespace {

constexpr TimestampNs kMs = 1'000'000;
constexpr TimestampNs kT0 = 1'000 * kMs;

Endpoint ep(std::uint8_t last_octet, std::uint16_t port) {
  Endpoint e;
  e.family = AF_INET;
  e.addr[0] = 10;
  e.addr[3] = last_octet;
  e.port = port;
  return e;
}

struct Side {
  Role role;
  std::uint32_t pid;
  std::uint64_t generation;
  Endpoint local, remote;
  std::string comm;
};

// A stream of `n` token events ending at `end_seq0 + 100 * (i + 1)`, timed by `at(i)`.
template <typename At>
StreamRecord stream(const Side& s, int n, At at, std::uint32_t end_seq0 = 5000) {
  StreamRecord r;
  r.role = s.role;
  r.conn.pid = s.pid;
  r.conn.generation = s.generation;
  r.conn.sock_id = 0x1000 + s.generation;
  r.conn.local = s.local;
  r.conn.remote = s.remote;
  r.conn.comm = s.comm;
  r.response_id = "chatcmpl-1";
  r.request_end_ns = kT0;
  for (int i = 0; i < n; ++i) {
    TimelineEvent e;
    e.ts_ns = at(i);
    e.kind = protocol::EventKind::content;
    e.offset = static_cast<std::uint64_t>(100 * i);
    e.wire_bytes = 100;
    e.end_seq = end_seq0 + 100 * static_cast<std::uint32_t>(i + 1);
    e.end_seq_exact = true;
    e.data_hash = 0x5000 + static_cast<std::uint64_t>(i);
    e.events_in_syscall = 1;
    r.timeline.push_back(e);
  }
  r.first_token_ns = r.first_event_ns = r.timeline.front().ts_ns;
  r.last_token_ns = r.last_event_ns = r.end_ns = r.timeline.back().ts_ns;
  std::vector<TimestampNs> times;
  for (const auto& e : r.timeline) times.push_back(e.ts_ns);
  r.metrics = metrics_of(times, kT0, r.last_event_ns, static_cast<std::uint64_t>(n), PipelineConfig{});
  r.metrics.events = static_cast<std::uint32_t>(n);
  return r;
}

class PathJoinerTest : public ::testing::Test, public PathPartners {
 protected:
  // What the pipeline would say of the streams in flight.
  Activity peer(const Endpoint&, const Endpoint&) const override { return peer_; }
  Activity gateway_leg(const StreamRecord& r) const override {
    return r.conn.pid == gateway_pid_ ? gateway_ : Activity::none;
  }
  // The joiner under test; what it releases is collected in out_.
  struct Joiner {
    PathJoinerTest& t;
    PathJoiner joiner{t.config_};
    void keep(std::vector<StreamRecord>&& released) {
      for (StreamRecord& r : released) t.out_.push_back(std::move(r));
    }
    void add(StreamRecord&& r, TimestampNs now) { keep(joiner.add(std::move(r), now, t)); }
    void release_due(TimestampNs now) { keep(joiner.release_due(now, t)); }
    void release_all() { keep(joiner.release_all()); }
    void on_signal(std::uint64_t sock, std::uint64_t generation, const capture::DeliverySignal& s) {
      joiner.on_signal(sock, generation, s);
    }
  } joiner{*this};
  const StreamRecord* find(Role role, std::uint32_t pid) const {
    for (const auto& r : out_)
      if (r.role == role && r.conn.pid == pid) return &r;
    return nullptr;
  }

  PipelineConfig config_;
  std::vector<StreamRecord> out_;
  PathPartners::Activity peer_ = PathPartners::Activity::none;
  PathPartners::Activity gateway_ = PathPartners::Activity::none;
  std::uint32_t gateway_pid_ = 0;  // the process that follows connections in both roles
};

const Side kServer{Role::server, 100, 1, ep(1, 8000), ep(2, 40000), "vllm"};
const Side kClient{Role::client, 200, 2, ep(2, 40000), ep(1, 8000), "client"};

TEST_F(PathJoinerTest, BothEndsJoinBySequenceAndTheServerGetsTheClientsView) {
  peer_ = PathPartners::Activity::streaming;  // the client's connection is followed
  joiner.add(stream(kServer, 20, [](int i) { return kT0 + 20 * kMs + i * 10 * kMs; }), kT0 + 300 * kMs);
  EXPECT_TRUE(out_.empty()) << "the server record waits for its traced peer";
  // The client reads every event 2 ms after the send, and one 300 ms late.
  joiner.add(stream(kClient, 20,
                    [](int i) { return kT0 + 20 * kMs + i * 10 * kMs + 2 * kMs + (i >= 10 ? 300 * kMs : 0); }),
             kT0 + 700 * kMs);
  ASSERT_EQ(out_.size(), 2u);
  const StreamRecord* s = find(Role::server, 100);
  const StreamRecord* c = find(Role::client, 200);
  ASSERT_TRUE(s && c);
  EXPECT_EQ(path_view_of(*s).peer_stream_id, stream_id(*c));
  EXPECT_EQ(path_view_of(*s).root, stream_id(*s));
  EXPECT_EQ(path_view_of(*c).root, stream_id(*s)) << "the client's path starts at the server";
  ASSERT_EQ(path_view_of(*s).times.size(), s->timeline.size());
  EXPECT_EQ(path_view_of(*s).times[3].peer_ns, c->timeline[3].ts_ns);
  EXPECT_EQ(path_view_of(*c).times[3].peer_ns, s->timeline[3].ts_ns);
  ASSERT_TRUE(path_view_of(*s).delivery);
  EXPECT_EQ(path_view_of(*s).delivery->vantage, Vantage::read);
  EXPECT_EQ(path_view_of(*s).delivery->path, "vllm>client");
  EXPECT_EQ(*path_view_of(*s).delivery->ttft_added_ns, 2 * kMs);
  ASSERT_EQ(path_view_of(*s).delivery->metrics.stalls.size(), 1u);
  EXPECT_EQ(path_view_of(*s).delivery->stall_causes[0].cause, StallCause::client_read);
  EXPECT_TRUE(path_view_of(*s).delivery->degraded_by_path);
  EXPECT_TRUE(s->metrics.stalls.empty());
  ASSERT_EQ(c->metrics.stalls.size(), 1u);
  EXPECT_EQ(verdict_at(path_view_of(*c).stall_causes, 0).cause, StallCause::client_read);
}

// A reader a little slower than the server never leaves a long gap (16 ms
// between its reads against 10 ms between sends), yet falls 300 ms behind:
// the path degraded the stream, and the bytes waited in the client's socket.
TEST_F(PathJoinerTest, AClientThatFallsBehindSteadilyIsFoundWithoutAStall) {
  peer_ = PathPartners::Activity::streaming;
  joiner.add(stream(kServer, 51, [](int i) { return kT0 + 20 * kMs + i * 10 * kMs; }), kT0 + 600 * kMs);
  StreamRecord client = stream(kClient, 51, [](int i) { return kT0 + 21 * kMs + i * 16 * kMs; });
  for (int i = 0; i < 51; ++i) client.timeline[static_cast<std::size_t>(i)].arrived_ns = kT0 + 20 * kMs + i * 10 * kMs + 50'000;
  joiner.add(std::move(client), kT0 + 900 * kMs);
  const StreamRecord* s = find(Role::server, 100);
  ASSERT_TRUE(s && path_view_of(*s).delivery);
  const Delivery& d = *path_view_of(*s).delivery;
  EXPECT_TRUE(d.metrics.stalls.empty()) << "no gap between reads is a stall";
  EXPECT_EQ(*d.lag_last_ns, 301 * kMs);
  EXPECT_EQ(*d.lag_growth_ns, 300 * static_cast<std::int64_t>(kMs));
  EXPECT_EQ(d.lag_cause, StallCause::client_read);
  EXPECT_NE(d.lag_evidence.find("fell behind by 300 ms"), std::string::npos) << d.lag_evidence;
  ASSERT_TRUE(d.reader_rate_ratio);
  EXPECT_NEAR(*d.reader_rate_ratio, 10.0 / 16.0, 1e-6) << "a read every 16 ms against a send every 10 ms";
  EXPECT_NE(d.lag_evidence.find("in the client's socket"), std::string::npos) << d.lag_evidence;
  EXPECT_TRUE(d.degraded_by_path);
  EXPECT_NE(d.degraded_reason.find("client fell behind 300 ms (client_read)"), std::string::npos) << d.degraded_reason;
}

// The lag floor is read when a record is joined: a changed floor (SIGHUP,
// Pipeline::set_lag_floor) judges the records joined from then on.
TEST_F(PathJoinerTest, TheLagFloorJudgesRecordsJoinedAfterItChanged) {
  peer_ = PathPartners::Activity::streaming;
  config_.lag_floor_ns = 400 * kMs;  // above the 300 ms this client falls behind
  joiner.add(stream(kServer, 51, [](int i) { return kT0 + 20 * kMs + i * 10 * kMs; }), kT0 + 600 * kMs);
  joiner.add(stream(kClient, 51, [](int i) { return kT0 + 21 * kMs + i * 16 * kMs; }), kT0 + 900 * kMs);
  const StreamRecord* s = find(Role::server, 100);
  ASSERT_TRUE(s && path_view_of(*s).delivery);
  const Delivery& d = *path_view_of(*s).delivery;
  EXPECT_EQ(*d.lag_growth_ns, 300 * static_cast<std::int64_t>(kMs));
  EXPECT_EQ(d.lag_cause, StallCause::client_read) << "the reader is named by its rate, whatever the floor";
  EXPECT_FALSE(d.degraded_by_path) << "300 ms behind is under the 400 ms floor: " << d.degraded_reason;
}

// The slow reader a user meets first: 40 tokens 20 ms apart, read ever later,
// from 60 ms to 231 ms behind over one second. It falls behind by less than
// the lag floor, yet it reads at 0.81x the server's speed: named by its rate,
// not yet a degraded stream.
TEST_F(PathJoinerTest, AShortSteadySlowReaderIsNamedByItsRate) {
  peer_ = PathPartners::Activity::streaming;
  const auto sent = [](int i) { return kT0 + 20 * kMs + i * 20 * kMs; };
  joiner.add(stream(kServer, 40, sent), kT0 + 900 * kMs);
  joiner.add(stream(kClient, 40, [&](int i) { return sent(i) + 60 * kMs + static_cast<TimestampNs>(i) * 171 * kMs / 39; }),
             kT0 + 1300 * kMs);
  const StreamRecord* s = find(Role::server, 100);
  ASSERT_TRUE(s && path_view_of(*s).delivery);
  const Delivery& d = *path_view_of(*s).delivery;
  ASSERT_TRUE(d.reader_rate_ratio);
  EXPECT_NEAR(*d.reader_rate_ratio, 780.0 / 951.0, 0.005);
  EXPECT_EQ(d.lag_cause, StallCause::client_read);
  EXPECT_NE(d.lag_evidence.find("the client read 0.82x as fast as the server wrote over 40 token events"), std::string::npos)
      << d.lag_evidence;
  EXPECT_FALSE(d.degraded_by_path) << "171 ms behind, under the 200 ms floor: " << d.degraded_reason;
}

// A client whose server is on another host: a pause in what arrived is the
// server's or the path's before this host (upstream), unless the client's
// connection retransmitted in it (network). Never the model's by default.
TEST_F(PathJoinerTest, AStallSeenOnlyFromTheClientIsUpstreamUnlessTcpSaysNetwork) {
  for (const bool retransmitted : {false, true}) {
    out_.clear();
    const auto read = [](int i) { return kT0 + 20 * kMs + i * 10 * kMs + (i >= 10 ? 300 * kMs : 0); };
    StreamRecord c = stream(kClient, 20, read);
    if (retransmitted) {
      c.tcp.signals = true;
      c.tcp.retransmits = 1;
      c.tcp.retransmit_ns = {read(9) + 100 * kMs};
    }
    joiner.add(std::move(c), kT0 + 600 * kMs);
    joiner.release_all();
    const StreamRecord* r = find(Role::client, 200);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->metrics.stalls.size(), 1u);
    const StallVerdict& v = verdict_at(path_view_of(*r).stall_causes, 0);
    EXPECT_EQ(v.cause, retransmitted ? StallCause::network : StallCause::upstream) << v.evidence;
    EXPECT_FALSE(on_the_path(StallCause::upstream)) << "what lies before this host is not its path";
  }
}

// Bytes that reached a loopback reader late, with no retransmission, waited
// in the sender's queue for the reader's window: the reader's doing, not the
// network's. Across a network the same arrival is the network's.
TEST_F(PathJoinerTest, ALateArrivalOverLoopbackIsTheReadersAcrossANetworkTheNetworks) {
  for (const bool loopback : {true, false}) {
    out_.clear();
    Side server = kServer, client = kClient;
    if (loopback) {
      for (Endpoint* e : {&server.local, &server.remote, &client.local, &client.remote}) e->addr[0] = 127;
    }
    peer_ = PathPartners::Activity::streaming;
    const auto sent = [](int i) { return kT0 + 20 * kMs + i * 10 * kMs; };
    const auto arrived = [&](int i) { return sent(i) + 50'000 + (i >= 10 ? 300 * kMs : 0); };
    joiner.add(stream(server, 20, sent), kT0 + 300 * kMs);
    StreamRecord c = stream(client, 20, [&](int i) { return arrived(i) + 100'000; });
    for (int i = 0; i < 20; ++i) c.timeline[static_cast<std::size_t>(i)].arrived_ns = arrived(i);
    joiner.add(std::move(c), kT0 + 700 * kMs);
    const StreamRecord* s = find(Role::server, 100);
    ASSERT_TRUE(s && path_view_of(*s).delivery);
    const Delivery& d = *path_view_of(*s).delivery;
    ASSERT_EQ(d.stall_causes.size(), 1u);
    EXPECT_EQ(d.stall_causes[0].cause, loopback ? StallCause::client_read : StallCause::network) << d.stall_causes[0].evidence;
    if (loopback) EXPECT_NE(d.stall_causes[0].evidence.find("over loopback"), std::string::npos) << d.stall_causes[0].evidence;
  }
}

// Readers that keep up, or fall behind a little and catch up, are not findings.
TEST_F(PathJoinerTest, AReaderThatKeepsUpOrCatchesUpIsNoFinding) {
  peer_ = PathPartners::Activity::streaming;
  const auto sent = [](int i) { return kT0 + 20 * kMs + i * 10 * kMs; };
  joiner.add(stream(kServer, 40, sent), kT0 + 500 * kMs);
  // Reads in bursts every 50 ms (up to 40 ms behind), the last one 1 ms after its send.
  const auto read = [&](int i) {
    const TimestampNs burst = 50 * kMs;
    return i < 39 ? (sent(i) + burst - 1) / burst * burst : sent(i) + kMs;
  };
  joiner.add(stream(kClient, 40, read), kT0 + 600 * kMs);
  const StreamRecord* s = find(Role::server, 100);
  ASSERT_TRUE(s && path_view_of(*s).delivery);
  EXPECT_EQ(*path_view_of(*s).delivery->lag_max_ns, 40 * kMs);
  EXPECT_EQ(*path_view_of(*s).delivery->lag_last_ns, kMs);
  EXPECT_EQ(path_view_of(*s).delivery->lag_cause, StallCause::none);
  EXPECT_FALSE(path_view_of(*s).delivery->degraded_by_path) << path_view_of(*s).delivery->degraded_reason;
}

TEST_F(PathJoinerTest, AServerPauseIsTheModelsAtEveryVantage) {
  peer_ = PathPartners::Activity::streaming;
  const auto sent = [](int i) { return kT0 + 20 * kMs + i * 10 * kMs + (i >= 10 ? 300 * kMs : 0); };
  joiner.add(stream(kServer, 20, sent), kT0 + 600 * kMs);
  joiner.add(stream(kClient, 20, [&](int i) { return sent(i) + kMs; }), kT0 + 600 * kMs);
  const StreamRecord* s = find(Role::server, 100);
  const StreamRecord* c = find(Role::client, 200);
  ASSERT_TRUE(s && c && path_view_of(*s).delivery);
  ASSERT_EQ(s->metrics.stalls.size(), 1u);
  EXPECT_EQ(verdict_at(path_view_of(*s).stall_causes, 0).cause, StallCause::model);
  ASSERT_EQ(path_view_of(*s).delivery->metrics.stalls.size(), 1u);
  EXPECT_EQ(path_view_of(*s).delivery->stall_causes[0].cause, StallCause::model);
  EXPECT_FALSE(path_view_of(*s).delivery->degraded_by_path);
  ASSERT_EQ(c->metrics.stalls.size(), 1u);
  EXPECT_EQ(verdict_at(path_view_of(*c).stall_causes, 0).cause, StallCause::model);
}

TEST_F(PathJoinerTest, GatewayLegsJoinByContentAndHeldEventsAreGatewayBuffering) {
  // server -> gateway (pid 300: upstream leg ep(3):6000, downstream ep(3):80) -> client
  const Side server{Role::server, 100, 1, ep(1, 8000), ep(3, 6000), "vllm"};
  const Side up{Role::client, 300, 2, ep(3, 6000), ep(1, 8000), "nginx"};
  const Side down{Role::server, 300, 3, ep(3, 80), ep(2, 40000), "nginx"};
  const Side client{Role::client, 200, 4, ep(2, 40000), ep(3, 80), "client"};
  const auto sent = [](int i) { return kT0 + 20 * kMs + i * 10 * kMs; };
  // The gateway sends what it read in groups of 12 events, 120 ms at a time.
  const auto flushed = [&](int i) { return sent((i / 12) * 12 + 11) + 1 * kMs; };
  peer_ = PathPartners::Activity::streaming;
  gateway_ = PathPartners::Activity::idle;
  gateway_pid_ = 300;
  joiner.add(stream(server, 24, sent, 5000), kT0 + 300 * kMs);
  joiner.add(stream(up, 24, [&](int i) { return sent(i) + kMs / 10; }, 5000), kT0 + 300 * kMs);
  StreamRecord d = stream(down, 24, flushed, 90000);
  for (auto& e : d.timeline) e.events_in_syscall = 12;
  joiner.add(std::move(d), kT0 + 300 * kMs);
  EXPECT_TRUE(out_.empty()) << "the client's record is still to come";
  joiner.add(stream(client, 24, [&](int i) { return flushed(i) + kMs / 10; }, 90000), kT0 + 300 * kMs);
  ASSERT_EQ(out_.size(), 4u);

  const StreamRecord* s = find(Role::server, 100);
  ASSERT_TRUE(s && path_view_of(*s).delivery);
  EXPECT_EQ(path_view_of(*s).delivery->path, "vllm>gateway(nginx)>client");
  ASSERT_FALSE(path_view_of(*s).delivery->metrics.stalls.empty());
  for (const StallVerdict& st : path_view_of(*s).delivery->stall_causes) EXPECT_EQ(st.cause, StallCause::gateway_buffering) << st.evidence;
  EXPECT_EQ(path_view_of(*s).delivery->ttft_cause, StallCause::gateway_buffering) << path_view_of(*s).delivery->ttft_evidence;
  EXPECT_EQ(*path_view_of(*s).delivery->ttft_added_ns, 110 * kMs + kMs + kMs / 10);
  EXPECT_EQ(path_view_of(*s).delivery->max_burst, 12u);
  EXPECT_TRUE(s->metrics.stalls.empty()) << "the server emitted on time";

  const StreamRecord* g = nullptr;
  for (const auto& r : out_)
    if (path_view_of(r).gateway && path_view_of(r).gateway->leg == GatewayLeg::Side::downstream) g = &r;
  ASSERT_TRUE(g);
  EXPECT_EQ(path_view_of(*g).gateway->events_matched, 24u);
  EXPECT_EQ(path_view_of(*g).gateway->max_events_per_send, 12u);
  EXPECT_EQ(*path_view_of(*g).gateway->delay_max_ns, 110 * kMs + kMs - kMs / 10);
  ASSERT_EQ(path_view_of(*g).stall_causes.size(), g->metrics.stalls.size());
  for (const StallVerdict& st : path_view_of(*g).stall_causes) EXPECT_EQ(st.cause, StallCause::gateway_buffering) << st.evidence;
  // Each record knows only its neighbours, yet all four name the server's record as their path's root.
  for (const StreamRecord& r : out_) EXPECT_EQ(path_view_of(r).root, stream_id(*s)) << "record of pid " << r.conn.pid;
}

// nginx's default buffering in front of a TLS client: the gateway sends the
// whole stream at its end in one 16 KB write, the client reads it in one
// 16 KB read, and the capture copied only the head of each: both saw the
// first 14 events of 60. The other 46 stop at the gateway's upstream read
// (its downstream record never had them).
class BufferedBurstTest : public PathJoinerTest {
 protected:
  static constexpr int kEvents = 60, kCaptured = 14;
  static TimestampNs sent(int i) { return kT0 + 50 * kMs + i * 10 * kMs; }
  const TimestampNs flushed = sent(kEvents - 1) + kMs, read = flushed + kMs / 10;

  // `holes`: the downstream and client records say where their calls' uncopied bytes were.
  // `midstream`: the client's record joined its stream mid-way.
  const StreamRecord* run(bool holes, bool midstream = false) {
    const Side server{Role::server, 100, 1, ep(1, 8000), ep(3, 6000), "sample-server"};
    const Side up{Role::client, 300, 2, ep(3, 6000), ep(1, 8000), "nginx"};
    const Side down{Role::server, 300, 3, ep(3, 443), ep(2, 40000), "nginx"};
    const Side client{Role::client, 200, 4, ep(2, 40000), ep(3, 443), "python3"};
    peer_ = PathPartners::Activity::streaming;
    gateway_ = PathPartners::Activity::idle;
    gateway_pid_ = 300;
    joiner.add(stream(server, kEvents, sent, 5000), kT0 + 700 * kMs);
    joiner.add(stream(up, kEvents, [&](int i) { return sent(i) + kMs / 10; }, 5000), kT0 + 700 * kMs);
    // The hole runs from the first uncopied event to past the last: its
    // size is an upper bound (chunk framing it swallowed).
    const BodyHole hole{100 * kCaptured, 100 * (kEvents - kCaptured) + 40, 0};
    StreamRecord d = stream(down, kCaptured, [&](int) { return flushed; }, 90000);
    for (auto& e : d.timeline) e.events_in_syscall = kCaptured;
    if (holes) d.body_holes.push_back({hole.offset, hole.bytes, flushed});
    joiner.add(std::move(d), kT0 + 700 * kMs);
    StreamRecord c = stream(client, kCaptured, [&](int) { return read; }, 90000);
    for (auto& e : c.timeline) e.data_hash = 0;  // not a gateway: hashes nothing
    if (holes) c.body_holes.push_back({hole.offset, hole.bytes, read});
    c.joined_midstream = midstream;
    joiner.add(std::move(c), kT0 + 700 * kMs);
    EXPECT_EQ(out_.size(), 4u);
    return find(Role::server, 100);
  }
};

// The gateway's read is not a delivery, and must not pull the delivered
// times of the events before it forward: the delivered TTFT is the client's.
TEST_F(BufferedBurstTest, EventsTheCaptureMissedAreNotDeliveredAtTheGatewaysRead) {
  const StreamRecord* s = run(false);
  ASSERT_TRUE(s && path_view_of(*s).delivery);
  EXPECT_EQ(path_view_of(*s).delivery->path, "sample-server>gateway(nginx)>python3");
  ASSERT_TRUE(path_view_of(*s).delivery->metrics.ttft_ns);
  EXPECT_EQ(*path_view_of(*s).delivery->metrics.ttft_ns, read - kT0) << "the client's read of the first token";
  EXPECT_EQ(*path_view_of(*s).delivery->ttft_added_ns, read - sent(0));
  EXPECT_EQ(path_view_of(*s).delivery->ttft_cause, StallCause::gateway_buffering) << path_view_of(*s).delivery->ttft_evidence;
  for (int i = 0; i < kEvents; ++i) {
    const TimestampNs t = path_view_of(*s).times[static_cast<std::size_t>(i)].delivered_ns;
    EXPECT_EQ(t, i < kCaptured ? read : 0) << "event " << i << ": nothing says when it was delivered";
  }
}

// With the holes known, every event the client's read covered was delivered
// by that read: found by its body position, as the path's other records
// place it.
TEST_F(BufferedBurstTest, EventsTheCaptureMissedAreDeliveredByTheReadThatCoveredThem) {
  const StreamRecord* s = run(true);
  ASSERT_TRUE(s && path_view_of(*s).delivery);
  EXPECT_EQ(*path_view_of(*s).delivery->metrics.ttft_ns, read - kT0);
  for (int i = 0; i < kEvents; ++i)
    EXPECT_EQ(path_view_of(*s).times[static_cast<std::size_t>(i)].delivered_ns, read) << "event " << i;
  EXPECT_EQ(path_view_of(*s).delivery->max_burst, static_cast<std::uint32_t>(kEvents)) << "the whole stream in one read";
  EXPECT_EQ(*path_view_of(*s).delivery->metrics.e2e_ns, read - kT0);
}

// Body positions name the same bytes only when the records start at the same
// first event: a client that joined mid-stream is not placed by position.
TEST_F(BufferedBurstTest, RecordsWhosePositionsDisagreeAreNotPlacedByPosition) {
  const StreamRecord* s = run(true, true);
  ASSERT_TRUE(s && path_view_of(*s).delivery);
  EXPECT_EQ(*path_view_of(*s).delivery->metrics.ttft_ns, read - kT0);
  for (int i = kCaptured; i < kEvents; ++i)
    EXPECT_EQ(path_view_of(*s).times[static_cast<std::size_t>(i)].delivered_ns, 0u) << "event " << i;
}

TEST_F(PathJoinerTest, ARecordWaitsOnlyWhileItsPartnerCanStillCome) {
  peer_ = PathPartners::Activity::idle;  // the peer connection is followed but not streaming
  joiner.add(stream(kServer, 5, [](int i) { return kT0 + i * kMs; }), kT0 + 10 * kMs);
  joiner.release_due(kT0 + 10 * kMs + config_.path_settle_ns - 1);
  EXPECT_TRUE(out_.empty());
  joiner.release_due(kT0 + 10 * kMs + config_.path_settle_ns);
  ASSERT_EQ(out_.size(), 1u);
  EXPECT_TRUE(path_view_of(out_[0]).peer_stream_id.empty());
  EXPECT_FALSE(path_view_of(out_[0]).delivery) << "no downstream vantage was seen";

  // A peer still streaming (a slow reader) keeps it waiting, up to the cap.
  out_.clear();
  peer_ = PathPartners::Activity::streaming;
  joiner.add(stream(kServer, 5, [](int i) { return kT0 + i * kMs; }), kT0);
  joiner.release_due(kT0 + 10 * config_.path_settle_ns);
  EXPECT_TRUE(out_.empty());
  joiner.release_due(kT0 + config_.stream_idle_timeout_ns);
  EXPECT_EQ(out_.size(), 1u);
}

TEST_F(PathJoinerTest, ASenderWaitsForTheAckOfItsLastEventThenTakesTheAcksAsItsDelivery) {
  StreamRecord s = stream(kServer, 10, [](int i) { return kT0 + i * 10 * kMs; });
  s.tcp.signals = true;
  for (int i = 0; i < 9; ++i) s.timeline[static_cast<std::size_t>(i)].acked_ns = s.timeline[static_cast<std::size_t>(i)].ts_ns + kMs;
  joiner.add(std::move(s), kT0 + 100 * kMs);
  EXPECT_TRUE(out_.empty()) << "the last event is not acknowledged yet";
  capture::DeliverySignal ack;
  ack.kind = capture::DeliverySignal::Kind::ack;
  ack.ts_ns = kT0 + 95 * kMs;
  ack.seq = 5000 + 100 * 10;
  ack.window = 65535;
  joiner.on_signal(0x1000 + 1, 1, ack);
  joiner.release_due(kT0 + 101 * kMs);
  ASSERT_EQ(out_.size(), 1u);
  ASSERT_TRUE(path_view_of(out_[0]).delivery);
  EXPECT_EQ(path_view_of(out_[0]).delivery->vantage, Vantage::acked);
  EXPECT_EQ(path_view_of(out_[0]).delivery->path, "vllm>remote");
  EXPECT_EQ(out_[0].timeline.back().acked_ns, kT0 + 95 * kMs);
}

// ---- unix sockets ---------------------------------------------------------------

Endpoint unix_ep(std::uint64_t sock, std::string path = "") {
  Endpoint e;
  e.family = AF_UNIX;
  std::memcpy(e.addr.data(), &sock, sizeof sock);
  e.path = std::move(path);
  return e;
}

// The ends of one unix connection: each the other's socket, the path on the server's side.
const Side kUnixServer{Role::server, 300, 3, unix_ep(0xA000, "/run/app.sock"), unix_ep(0xB000), "uvicorn"};
const Side kUnixClient{Role::client, 400, 4, unix_ep(0xB000), unix_ep(0xA000, "/run/app.sock"), "nginx"};

template <typename At>
StreamRecord unix_stream(const Side& s, int n, At at) {
  StreamRecord r = stream(s, n, at, 0);
  r.conn.transport = Transport::unix_stream;
  return r;
}

// Sends every 10 ms; after event 9 the reader stops for 300 ms and the send
// buffer is full: event 10 leaves only when the reader drains.
TimestampNs unix_sent(int i) { return kT0 + 20 * kMs + i * 10 * kMs + (i >= 10 ? 300 * kMs : 0); }

TEST_F(PathJoinerTest, AUnixSendBufferLeftFullIsBackpressureWithTheReadersDelay) {
  peer_ = PathPartners::Activity::streaming;
  StreamRecord server = unix_stream(kUnixServer, 20, unix_sent);
  server.tcp.send_buffer_full = 1;
  server.tcp.send_buffer_full_at.emplace_back(unix_sent(9), 9000);
  joiner.add(std::move(server), kT0 + 600 * kMs);
  // The reader reads events 0..6 on time, then the ones the buffer held (7..9)
  // only as it resumes, with event 10 right after.
  joiner.add(unix_stream(kUnixClient, 20, [](int i) { return i < 7 ? unix_sent(i) + kMs : unix_sent(10) - kMs / 2 + (i >= 10 ? kMs : 0); }),
             kT0 + 700 * kMs);
  const StreamRecord* s = find(Role::server, 300);
  const StreamRecord* c = find(Role::client, 400);
  ASSERT_TRUE(s && c && path_view_of(*s).delivery);
  EXPECT_EQ(path_view_of(*s).peer_stream_id, stream_id(*c)) << "the two ends meet by socket";
  ASSERT_EQ(s->metrics.stalls.size(), 1u);
  EXPECT_EQ(verdict_at(path_view_of(*s).stall_causes, 0).cause, StallCause::backpressure) << verdict_at(path_view_of(*s).stall_causes, 0).evidence;
  EXPECT_NE(verdict_at(path_view_of(*s).stall_causes, 0).evidence.find("send buffer full after a send (8.8 KiB"), std::string::npos)
      << verdict_at(path_view_of(*s).stall_causes, 0).evidence;
  EXPECT_NE(verdict_at(path_view_of(*s).stall_causes, 0).evidence.find("the reader left bytes unread for"), std::string::npos)
      << verdict_at(path_view_of(*s).stall_causes, 0).evidence;
  // The reader's events arrived when the sender emitted them (a unix send queues into the reader).
  EXPECT_EQ(path_view_of(*c).times[8].arrived_ns, unix_sent(8));
  ASSERT_EQ(path_view_of(*s).delivery->metrics.stalls.size(), 1u);
  EXPECT_EQ(path_view_of(*s).delivery->stall_causes[0].cause, StallCause::client_read) << path_view_of(*s).delivery->stall_causes[0].evidence;
}

// The buffer was full, but the reader read those bytes at once: the sender
// was not waiting for it, the gap is the sender's own.
TEST_F(PathJoinerTest, AUnixSendBufferTheReaderDrainedAtOnceIsNotBackpressure) {
  peer_ = PathPartners::Activity::streaming;
  StreamRecord server = unix_stream(kUnixServer, 20, unix_sent);
  server.tcp.send_buffer_full_at.emplace_back(unix_sent(9), 9000);
  joiner.add(std::move(server), kT0 + 600 * kMs);
  joiner.add(unix_stream(kUnixClient, 20, [](int i) { return unix_sent(i) + kMs; }), kT0 + 700 * kMs);
  const StreamRecord* s = find(Role::server, 300);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->metrics.stalls.size(), 1u);
  EXPECT_EQ(verdict_at(path_view_of(*s).stall_causes, 0).cause, StallCause::model) << verdict_at(path_view_of(*s).stall_causes, 0).evidence;
}

// Without a traced reader, the full buffer and the refused sends are the evidence.
TEST_F(PathJoinerTest, AUnixSenderRefusedWithEagainAloneIsBackpressure) {
  StreamRecord server = unix_stream(kUnixServer, 20, unix_sent);
  server.tcp.send_buffer_full_at.emplace_back(unix_sent(9), 9000);
  server.tcp.eagain = 1;
  server.tcp.eagain_ns.push_back(unix_sent(9) + kMs);
  joiner.add(std::move(server), kT0 + 600 * kMs);
  joiner.release_due(kT0 + 600 * kMs + config_.path_settle_ns + kMs);
  const StreamRecord* s = find(Role::server, 300);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->metrics.stalls.size(), 1u);
  EXPECT_EQ(verdict_at(path_view_of(*s).stall_causes, 0).cause, StallCause::backpressure) << verdict_at(path_view_of(*s).stall_causes, 0).evidence;
  EXPECT_NE(verdict_at(path_view_of(*s).stall_causes, 0).evidence.find("1 sends refused (EAGAIN)"), std::string::npos)
      << verdict_at(path_view_of(*s).stall_causes, 0).evidence;
}

}  // namespace
}  // namespace infertap::core
