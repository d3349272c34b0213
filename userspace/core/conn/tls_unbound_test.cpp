// The bounds of the TLS writes held until their socket is known.
#include "core/conn/tls_unbound.h"

#include <gtest/gtest.h>

namespace infertap::core {
namespace {

const std::vector<std::uint8_t> kRecord(200, 0x41);

TEST(UnboundTlsWrites, ReleasesWhatWasHeldInOrderOnce) {
  UnboundTlsWrites w;
  std::vector<std::uint8_t> a(10, 1), b(20, 2);
  ASSERT_TRUE(w.hold(7, a, 100));
  ASSERT_TRUE(w.hold(7, b, 101));
  auto got = w.take(7);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], a);
  EXPECT_EQ(got[1], b);
  EXPECT_TRUE(w.take(7).empty());
  EXPECT_EQ(w.connections(), 0u);
}

TEST(UnboundTlsWrites, BoundsRecordsPerConnectionAndConnections) {
  UnboundTlsWrites w;
  for (std::size_t i = 0; i < UnboundTlsWrites::kMaxPerConnection; ++i) ASSERT_TRUE(w.hold(1, kRecord, 0));
  EXPECT_FALSE(w.hold(1, kRecord, 0));
  for (std::uint64_t ssl = 2; ssl <= UnboundTlsWrites::kMaxConnections; ++ssl) ASSERT_TRUE(w.hold(ssl, kRecord, 0));
  EXPECT_FALSE(w.hold(UnboundTlsWrites::kMaxConnections + 1, kRecord, 0));
  EXPECT_TRUE(w.hold(1 + 1, kRecord, 0));  // a connection already held still takes more
}

TEST(UnboundTlsWrites, ExpiresWhatWaitedTooLong) {
  UnboundTlsWrites w;
  ASSERT_TRUE(w.hold(1, kRecord, 1000));
  ASSERT_TRUE(w.hold(1, kRecord, 2000));
  ASSERT_TRUE(w.hold(2, kRecord, 1000 + UnboundTlsWrites::kMaxAgeNs));
  EXPECT_EQ(w.expire(1000 + UnboundTlsWrites::kMaxAgeNs), 0u);
  EXPECT_EQ(w.expire(1001 + UnboundTlsWrites::kMaxAgeNs), 2u);
  EXPECT_TRUE(w.take(1).empty());
  EXPECT_EQ(w.take(2).size(), 1u);
}

}  // namespace
}  // namespace infertap::core
