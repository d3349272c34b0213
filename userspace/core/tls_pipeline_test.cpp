// TLS connections through the pipeline, from synthetic records of a TLS
// library's calls: plaintext positions, the ciphertext's sequence for ACKs,
// the handshake time, memory-BIO writes held until their socket is known.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/pipeline.h"
#include "support/event_builder.h"

namespace infertap {
namespace {

using core::StreamRecord;
using testing::ConnBuilder;
using testing::chunked;
using testing::openai_chunk;

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kT0 = 1'000'000'000'000ull;
constexpr std::uint16_t kOpenSsl3 = 1;

const std::string kBody = R"({"model":"m","stream":true,"messages":[]})";
const std::string kRequest = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             "Content-Length: " + std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
const std::string kHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

struct Harness {
  std::vector<StreamRecord> records;
  core::PipelineConfig config;
  core::Pipeline pipeline{config, [this](StreamRecord&& r) { records.push_back(std::move(r)); }};
  Harness() {
    pipeline.set_tls_library_names([](std::uint16_t id) { return id == kOpenSsl3 ? "openssl-3" : ""; });
  }
  void feed(const std::vector<std::uint8_t>& rec) { pipeline.on_record(rec); }
  void ack(std::uint64_t sock, std::uint32_t seq, std::uint64_t ts) { pipeline.on_signal(testing::ack_signal(sock, seq, ts)); }
};

TEST(TlsPipeline, ServerStreamIsTimedByItsPlaintextAndAckedByItsCiphertext) {
  Harness h;
  ConnBuilder c(0xA1, 100, 8443, 40000);
  c.as_tls(0x5510, kOpenSsl3, kT0 - 3 * kMs);
  h.feed(c.recv(kT0, kRequest));
  h.feed(c.send(kT0 + 5 * kMs, kHead));
  std::vector<std::uint32_t> acks;
  for (int i = 0; i < 5; ++i) {
    h.feed(c.send(kT0 + (50 + 10 * i) * kMs, chunked(openai_chunk("tok"))));
    acks.push_back(c.tls_send_seq());
  }
  // The peer acknowledges the first three writes' ciphertext 1 ms after each.
  for (int i = 0; i < 3; ++i) h.ack(0xA1, acks[i], kT0 + (51 + 10 * i) * kMs);
  h.feed(c.send(kT0 + 100 * kMs, chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
  h.ack(0xA1, c.tls_send_seq(), kT0 + 102 * kMs);  // the rest, at once
  h.pipeline.expire(kT0 + 103 * kMs);               // the joiner releases what it holds on a tick
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_TRUE(r.conn.tls);
  EXPECT_EQ(r.conn.tls_library, "openssl-3");
  EXPECT_EQ(r.conn.fd, -1);
  EXPECT_EQ(r.role, core::Role::server);
  EXPECT_EQ(r.metrics.content_events, 5u);
  EXPECT_EQ(*r.metrics.ttft_ns, 50 * kMs);
  EXPECT_EQ(r.bytes_lost, 0u);
  EXPECT_EQ(core::tls_handshake_ns(r), 3 * kMs);
  std::vector<std::uint64_t> acked;
  for (const auto& e : r.timeline)
    if (e.kind == protocol::EventKind::content) acked.push_back(e.acked_ns);
  ASSERT_EQ(acked.size(), 5u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(acked[static_cast<std::size_t>(i)], kT0 + (51 + 10 * i) * kMs) << i;
  EXPECT_EQ(acked[3], kT0 + 102 * kMs);  // acknowledged with the last ACK, not before
  EXPECT_EQ(acked[4], kT0 + 102 * kMs);
  EXPECT_EQ(h.pipeline.counters().tls_events, 8u);
}

TEST(TlsPipeline, AConnectionJoinedAfterItsHandshakeHasNoHandshakeTime) {
  Harness h;
  ConnBuilder c(0xA2, 100, 8443, 40001);
  c.as_tls(0x5520, kOpenSsl3, 0);
  h.feed(c.recv(kT0, kRequest));
  h.feed(c.send(kT0 + 5 * kMs, kHead + chunked(openai_chunk("a")) + chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(core::tls_handshake_ns(h.records[0]), 0u);
}

TEST(TlsPipeline, LostPlaintextEventsAreAnExactHole) {
  Harness h;
  ConnBuilder c(0xA3, 100, 8443, 40002);
  c.as_tls(0x5530, kOpenSsl3, 0);
  h.feed(c.recv(kT0, kRequest));
  h.feed(c.send(kT0 + 5 * kMs, kHead));
  h.feed(c.send(kT0 + 10 * kMs, chunked(openai_chunk("a"))));
  const std::string lost = chunked(openai_chunk("b"));
  c.lose(ITAP_DIR_SEND, static_cast<std::uint32_t>(lost.size()));
  h.feed(c.send(kT0 + 30 * kMs, chunked(openai_chunk("c"))));
  h.feed(c.send(kT0 + 40 * kMs, chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  EXPECT_EQ(h.records[0].bytes_lost, lost.size());
  EXPECT_EQ(h.records[0].metrics.content_events, 2u);
}

// A memory-BIO client (Node.js): SSL_write returns before any ciphertext
// moves; the event loop's send binds the TLS connection to its socket.
TEST(TlsPipeline, MemoryBioWritesWaitForTheSendThatCarriesThem) {
  Harness h;
  ConnBuilder c(0xB1, 200, 40003, 8443);
  c.as_tls(0x5540, kOpenSsl3, kT0 - 4 * kMs);
  c.unbound(true);
  h.feed(c.send(kT0, kRequest));
  EXPECT_EQ(h.pipeline.connection_count(), 0u);
  EXPECT_EQ(h.pipeline.counters().tls_unbound_held, 1u);
  h.feed(c.bind(kT0 + 1 * kMs));
  ASSERT_EQ(h.pipeline.connection_count(), 1u);
  h.feed(c.recv(kT0 + 20 * kMs, kHead));
  h.feed(c.recv(kT0 + 30 * kMs, chunked(openai_chunk("a"))));
  h.feed(c.recv(kT0 + 40 * kMs, chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
  ASSERT_EQ(h.records.size(), 1u);
  const StreamRecord& r = h.records[0];
  EXPECT_EQ(r.role, core::Role::client);
  EXPECT_EQ(r.request_end_ns, kT0 + 1 * kMs);  // when its ciphertext left
  EXPECT_EQ(*r.metrics.ttft_ns, 29 * kMs);
  EXPECT_EQ(r.conn.local.port, 40003);
  EXPECT_EQ(r.conn.remote.port, 8443);
  EXPECT_EQ(core::tls_handshake_ns(r), 5 * kMs);
}

TEST(TlsPipeline, WritesWhoseSocketIsNeverFoundAreDroppedAndCounted) {
  Harness h;
  ConnBuilder c(0xB2, 200, 40004, 8443);
  c.as_tls(0x5550, kOpenSsl3, 0);
  c.unbound(true);
  h.feed(c.send(kT0, kRequest));
  h.pipeline.expire(kT0 + core::UnboundTlsWrites::kMaxAgeNs + kMs);
  EXPECT_EQ(h.pipeline.counters().tls_unbound_dropped, 1u);
  h.feed(c.bind(kT0 + core::UnboundTlsWrites::kMaxAgeNs + 2 * kMs));  // too late: nothing to release
  EXPECT_TRUE(h.records.empty());
}

// The socket address now carries another TLS session and its close was lost:
// the old connection ends, the new one starts, neither borrows the other's bytes.
TEST(TlsPipeline, AnotherTlsSessionOnTheSocketIsAnotherConnection) {
  Harness h;
  ConnBuilder first(0xC1, 100, 8443, 40005);
  first.as_tls(0x5560, kOpenSsl3, 0);
  h.feed(first.recv(kT0, kRequest));
  h.feed(first.send(kT0 + 5 * kMs, kHead + chunked(openai_chunk("a"))));
  ConnBuilder second(0xC1, 100, 8443, 40006);
  second.as_known_socket();
  second.as_tls(0x5570, kOpenSsl3, 0);
  h.feed(second.recv(kT0 + 50 * kMs, kRequest));
  h.feed(second.send(kT0 + 55 * kMs, kHead + chunked(openai_chunk("b")) + chunked("data: [DONE]\n\n") + "0\r\n\r\n"));
  EXPECT_EQ(h.pipeline.counters().sockets_reused, 1u);
  ASSERT_EQ(h.records.size(), 2u);
  EXPECT_EQ(h.records[0].end, core::StreamEnd::connection_closed);
  EXPECT_EQ(h.records[1].end, core::StreamEnd::complete);
  EXPECT_EQ(h.records[1].conn.remote.port, 40006);
}

}  // namespace
}  // namespace infertap
