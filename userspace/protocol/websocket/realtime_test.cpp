// What the session reads of a realtime message: type, response id, audio
// format (beta and GA), the audio delta's size, from whole and cut text.
#include "protocol/websocket/realtime.h"

#include <gtest/gtest.h>

#include <string>

namespace infertap::protocol::websocket {
namespace {

TEST(WebsocketRealtime, TypeAndResponseId) {
  const MessageFacts delta = read_message(
      R"({"type":"response.output_text.delta","event_id":"e","response_id":"resp_1","item_id":"i","delta":"Hi"})");
  EXPECT_EQ(delta.type, "response.output_text.delta");
  EXPECT_EQ(delta.response_id, "resp_1");
  const MessageFacts created = read_message(
      R"({"type":"response.created","event_id":"e","response":{"object":"realtime.response","id":"resp_2","output":[{"id":"x"}]}})");
  EXPECT_EQ(created.type, "response.created");
  EXPECT_EQ(created.response_id, "resp_2");
  // Keys inside arrays and deeper objects are not the message's.
  const MessageFacts nested = read_message(R"({"item":{"type":"message","response_id":"no"},"list":[{"type":"x"}],"type":"conversation.item.created"})");
  EXPECT_EQ(nested.type, "conversation.item.created");
  EXPECT_EQ(nested.response_id, "");
  EXPECT_EQ(read_message("[1,2]").type, "");
  EXPECT_EQ(read_message(R"({"type":"response.audio)").type, "");  // cut inside the value
  EXPECT_EQ(read_message(R"({"type" : "error" , "error":{"type":"invalid_request_error"}})").type, "error");
}

TEST(WebsocketRealtime, AudioFormats) {
  const auto beta = audio_format(read_message(R"({"type":"session.created","session":{"output_audio_format":"pcm16"}})"));
  ASSERT_TRUE(beta);
  EXPECT_EQ(beta->sample_rate, 24000u);
  EXPECT_EQ(beta->bytes_per_sample, 2u);
  const auto ulaw = audio_format(read_message(R"({"type":"session.updated","session":{"output_audio_format":"g711_ulaw"}})"));
  ASSERT_TRUE(ulaw);
  EXPECT_EQ(ulaw->sample_rate, 8000u);
  EXPECT_EQ(ulaw->bytes_per_sample, 1u);
  const auto ga = audio_format(read_message(
      R"({"type":"session.updated","session":{"type":"realtime","audio":{"input":{"format":{"type":"audio/pcmu"}},"output":{"format":{"type":"audio/pcm","rate":16000},"voice":"x"}}}})"));
  ASSERT_TRUE(ga);
  EXPECT_EQ(ga->sample_rate, 16000u);
  EXPECT_EQ(ga->bytes_per_sample, 2u);
  const auto pcma = audio_format(read_message(R"({"session":{"audio":{"output":{"format":{"type":"audio/pcma"}}}}})"));
  ASSERT_TRUE(pcma);
  EXPECT_EQ(pcma->sample_rate, 8000u);
  EXPECT_FALSE(audio_format(read_message(R"({"type":"session.created","session":{"modalities":["text"]}})")));
}

TEST(WebsocketRealtime, AudioBytes) {
  const std::string whole = R"({"type":"response.output_audio.delta","response_id":"r","delta":"AAAAAA=="})";
  const MessageFacts f = read_message(whole);
  EXPECT_EQ(audio_bytes(f, whole, whole.size()), 4u);  // 8 characters, 2 of padding
  const std::string escaped = R"({"type":"response.audio.delta","delta":"AA\/A"})";
  EXPECT_EQ(audio_bytes(read_message(escaped), escaped, escaped.size()), 3u);
  // Cut inside the delta: its size from the message's whole length.
  const std::string full = R"({"type":"response.audio.delta","response_id":"r","delta":")" + std::string(4000, 'A') + "\"}";
  const std::string_view cut = std::string_view(full).substr(0, 500);
  const MessageFacts c = read_message(cut);
  EXPECT_EQ(c.type, "response.audio.delta");
  EXPECT_FALSE(c.delta_length);
  EXPECT_EQ(audio_bytes(c, cut, full.size()), 3000u);
  EXPECT_EQ(audio_bytes(read_message(R"({"type":"response.audio.delta"})"), "", 0), 0u);
}

}  // namespace
}  // namespace infertap::protocol::websocket
