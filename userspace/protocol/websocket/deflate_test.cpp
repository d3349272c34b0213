// permessage-deflate: the 101's parameters, and one direction's inflater
// with the window carried over (a message compressed against an earlier
// one's) or reset per message, holes, corrupt data, the output bounds and a
// sender that ends its DEFLATE stream with a final block.
#include "protocol/websocket/deflate.h"

#include <gtest/gtest.h>

#include <string>

#include "protocol/websocket/test_encoder.h"
#include "support/session_side.h"

namespace infertap::protocol::websocket {
namespace {

using testing::Compressor;
using ::infertap::testing::as_bytes;

const std::string kDelta =
    R"({"type":"response.output_text.delta","event_id":"event_1","response_id":"resp_1","item_id":"item_1",)"
    R"("output_index":0,"content_index":0,"delta":"Hello there"})";

// Inflates one message fed in pieces of `step` bytes.
Inflater::Status inflate(Inflater& in, const std::string& compressed, std::size_t step = 5) {
  in.begin();
  for (std::size_t at = 0; at < compressed.size(); at += step) in.feed(as_bytes(std::string_view(compressed).substr(at, step)));
  return in.end();
}

// Its first 4 bytes captured, the rest lost in a hole.
Inflater::Status inflate_with_hole(Inflater& in, const std::string& compressed) {
  in.begin();
  in.feed(as_bytes(std::string_view(compressed).substr(0, 4)));
  in.hole(compressed.size() - 4);
  return in.end();
}

TEST(WebsocketDeflate, ParsesTheNegotiatedParameters) {
  EXPECT_FALSE(parse_deflate(""));
  EXPECT_FALSE(parse_deflate("x-webkit-deflate-frame"));
  const auto plain = parse_deflate("permessage-deflate");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->server_no_context_takeover);
  EXPECT_EQ(plain->server_max_window_bits, 15);
  const auto all = parse_deflate(
      "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; "
      "client_max_window_bits");
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->server_no_context_takeover);
  EXPECT_TRUE(all->client_no_context_takeover);
  EXPECT_EQ(all->server_max_window_bits, 10);
  EXPECT_EQ(all->client_max_window_bits, 15);
  const auto second = parse_deflate("foo; bar=1, permessage-deflate;client_max_window_bits=\"9\";server_max_window_bits=99");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->client_max_window_bits, 9);
  EXPECT_EQ(second->server_max_window_bits, 15);  // out of range: ignored
}

TEST(WebsocketDeflate, ContextTakeoverReadsAMessageCompressedAgainstAnEarlierOne) {
  Compressor sender(true);
  const std::string first = sender.compress(kDelta);
  const std::string second = sender.compress(kDelta);  // the same text: a back-reference into the first
  EXPECT_LT(second.size(), first.size() / 3);
  Inflater in(15, true, {}, 1024);
  ASSERT_EQ(inflate(in, first), Inflater::Status::ok);
  EXPECT_EQ(in.text(), kDelta);
  ASSERT_EQ(inflate(in, second), Inflater::Status::ok);
  EXPECT_EQ(in.text(), kDelta);
  EXPECT_EQ(in.inflated(), kDelta.size());
  // Alone, the second message does not inflate to the text: it needs the first's window.
  Inflater fresh(15, true, {}, 1024);
  const Inflater::Status alone = inflate(fresh, second);
  EXPECT_TRUE(alone != Inflater::Status::ok || fresh.text() != kDelta);
}

TEST(WebsocketDeflate, EmptyMessages) {
  Compressor sender(true);
  const std::string first = sender.compress(kDelta);
  EXPECT_EQ(sender.compress(""), "");  // nothing since the last flush: zlib writes nothing
  const std::string third = sender.compress(kDelta);
  Inflater in(15, true, {}, 1024);
  ASSERT_EQ(inflate(in, first), Inflater::Status::ok);
  ASSERT_EQ(inflate(in, ""), Inflater::Status::ok);
  EXPECT_EQ(in.text(), "");
  ASSERT_EQ(inflate(in, ""), Inflater::Status::ok);
  ASSERT_EQ(inflate(in, third), Inflater::Status::ok);
  EXPECT_EQ(in.text(), kDelta);
  // The RFC's own empty message: one empty stored block's header.
  ASSERT_EQ(inflate(in, std::string("\x00", 1)), Inflater::Status::ok);
  EXPECT_EQ(in.text(), "");
}

TEST(WebsocketDeflate, NoContextTakeoverResetsPerMessage) {
  Compressor sender(false, 10);
  const std::string first = sender.compress(kDelta);
  const std::string second = sender.compress(kDelta);
  EXPECT_EQ(first, second);  // each compressed on its own
  Inflater in(10, false, {}, 1024);
  ASSERT_EQ(inflate(in, first), Inflater::Status::ok);
  ASSERT_EQ(inflate(in, second), Inflater::Status::ok);
  EXPECT_EQ(in.text(), kDelta);
  // A hole costs that message only.
  EXPECT_EQ(inflate_with_hole(in, first), Inflater::Status::capture_hole);
  EXPECT_FALSE(in.context_lost());
  ASSERT_EQ(inflate(in, first), Inflater::Status::ok);
  EXPECT_EQ(in.text(), kDelta);
}

TEST(WebsocketDeflate, HoleWithContextTakeoverLosesTheDirection) {
  Compressor sender(true);
  const std::string first = sender.compress(kDelta);
  const std::string second = sender.compress("{\"type\":\"response.done\"}");
  Inflater in(15, true, {}, 1024);
  EXPECT_EQ(inflate_with_hole(in, first), Inflater::Status::capture_hole);
  EXPECT_TRUE(in.context_lost());
  EXPECT_EQ(inflate(in, second), Inflater::Status::context_lost);
  EXPECT_TRUE(in.text().empty());
}

TEST(WebsocketDeflate, LostBytesBetweenMessagesLoseACarriedWindow) {
  Inflater takeover(15, true, {}, 1024);
  takeover.bytes_lost();
  EXPECT_TRUE(takeover.context_lost());
  Inflater reset(15, false, {}, 1024);
  reset.bytes_lost();
  EXPECT_FALSE(reset.context_lost());
}

TEST(WebsocketDeflate, CorruptData) {
  Inflater in(15, false, {}, 1024);
  EXPECT_EQ(inflate(in, std::string("\xff\xff\xff\xff\xff\xff", 6)), Inflater::Status::corrupt);
  Compressor sender(false);
  ASSERT_EQ(inflate(in, sender.compress(kDelta)), Inflater::Status::ok);  // reset per message: fine again
}

TEST(WebsocketDeflate, OutputBounds) {
  const std::string big(200000, 'a');
  Compressor sender(false);
  const std::string compressed = sender.compress(big);
  DecoderLimits small;
  small.output_bytes = 100000;
  Inflater capped(15, false, small, 1024);
  EXPECT_EQ(inflate(capped, compressed, 64), Inflater::Status::too_large);
  DecoderLimits stingy;
  stingy.output_grace_bytes = 1000;
  stingy.output_per_input_byte = 10;
  Inflater costly(15, true, stingy, 1024);
  EXPECT_EQ(inflate(costly, compressed, 64), Inflater::Status::too_costly);
  EXPECT_TRUE(costly.context_lost());
  // Within the bounds the text kept is the head, the count is all of it.
  Inflater in(15, false, {}, 1024);
  ASSERT_EQ(inflate(in, compressed, 64), Inflater::Status::ok);
  EXPECT_EQ(in.text().size(), 1024u);
  EXPECT_TRUE(in.text_cut());
  EXPECT_EQ(in.inflated(), big.size());
}

TEST(WebsocketDeflate, MemoryBudget) {
  const std::size_t before = Inflater::state_bytes();
  {
    DecoderLimits tiny;
    tiny.state_bytes = 1024;  // less than zlib's state
    Inflater starved(15, true, tiny, 1024);
    Compressor sender(true);
    EXPECT_EQ(inflate(starved, sender.compress(kDelta)), Inflater::Status::no_memory);
    EXPECT_TRUE(starved.context_lost());
    Inflater in(15, true, {}, 1024);
    Compressor other(true);
    ASSERT_EQ(inflate(in, other.compress(kDelta)), Inflater::Status::ok);
    EXPECT_GT(Inflater::state_bytes(), before);
  }
  EXPECT_EQ(Inflater::state_bytes(), before);
}

// A sender that ends each message with a final block starts a new DEFLATE
// stream whose distances may reach into the old window.
TEST(WebsocketDeflate, FinalBlockThenAStreamOverTheOldWindow) {
  const auto compress_final = [](std::string_view text, std::string_view dictionary) {
    z_stream z{};
    deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
    if (!dictionary.empty()) {
      deflateSetDictionary(&z, reinterpret_cast<const Bytef*>(dictionary.data()), static_cast<uInt>(dictionary.size()));
    }
    std::string out(1024, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    z.avail_in = static_cast<uInt>(text.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    deflate(&z, Z_FINISH);
    out.resize(out.size() - z.avail_out);
    deflateEnd(&z);
    return out;
  };
  Inflater in(15, true, {}, 1024);
  ASSERT_EQ(inflate(in, compress_final(kDelta, "")), Inflater::Status::ok);
  EXPECT_EQ(in.text(), kDelta);
  ASSERT_EQ(inflate(in, compress_final(kDelta, kDelta)), Inflater::Status::ok);
  EXPECT_EQ(in.text(), kDelta);
}

}  // namespace
}  // namespace infertap::protocol::websocket
