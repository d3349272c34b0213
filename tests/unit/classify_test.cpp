// The kernel's first-bytes classifier (bpf/helpers/classify.bpf.h) built for
// the host: which first bytes of a socket the kernel follows. Here the
// WebSocket frames a realtime session joined after its upgrade starts with,
// and what must stay muted; HTTP as a control (the capture tests load the
// programs themselves: tests/integration/capture_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "infertap/abi.h"
#include "../../bpf/helpers/classify.bpf.h"
#include "protocol/websocket/test_encoder.h"

namespace infertap {
namespace {

namespace ws = protocol::websocket;
using ws::Opcode;
using ws::testing::LengthForm;

// The verdict for a socket whose first data is `bytes`, as the kernel reads it:
// the first 16 bytes little-endian in two u64, n of them valid.
int verdict(const std::string& bytes) {
  unsigned char first[ITAP_CLASSIFY_BYTES] = {};
  const std::size_t n = std::min<std::size_t>(bytes.size(), ITAP_CLASSIFY_BYTES);
  std::memcpy(first, bytes.data(), n);
  __u64 v = 0, v2 = 0;
  std::memcpy(&v, first, 8);
  std::memcpy(&v2, first + 8, 8);
  return classify_first_bytes(v, v2, static_cast<__u32>(n), /*tls=*/false);
}

const std::string kDelta = R"({"type":"response.output_text.delta","response_id":"resp_1","delta":"Hi"})";
const std::string kAppend = R"({"type":"input_audio_buffer.append","audio":")" + std::string(70000, 'A') + "\"}";

std::string server_frame(const std::string& payload, LengthForm form = LengthForm::shortest, bool fin = true) {
  return ws::testing::frame(Opcode::text, payload, {.fin = fin, .form = form});
}
std::string client_frame(const std::string& payload, LengthForm form = LengthForm::shortest) {
  return ws::testing::frame(Opcode::text, payload, {.masked = true, .form = form});
}

TEST(WebsocketKernelClassifier, JsonTextFramesOfEitherEndAreFollowed) {
  for (LengthForm form : {LengthForm::shortest, LengthForm::bits16}) {
    const std::string payload = form == LengthForm::shortest ? kDelta.substr(0, 100) + "\"}" : kDelta + std::string(200, ' ');
    EXPECT_EQ(verdict(server_frame(payload, form)), ITAP_VERDICT_FOLLOW) << int(form);
    EXPECT_EQ(verdict(client_frame(payload, form)), ITAP_VERDICT_FOLLOW) << int(form);
  }
  // The 64-bit form: a long audio append (masked: the key's first character
  // is past the 16 bytes) and a long server message.
  EXPECT_EQ(verdict(client_frame(kAppend)), ITAP_VERDICT_FOLLOW);
  EXPECT_EQ(verdict(server_frame(kAppend)), ITAP_VERDICT_FOLLOW);
  // The first fragment of a message.
  EXPECT_EQ(verdict(server_frame(kDelta, LengthForm::shortest, /*fin=*/false)), ITAP_VERDICT_FOLLOW);
  // Another mask key: the payload is unmasked with the key the frame carries.
  EXPECT_EQ(verdict(ws::testing::frame(Opcode::text, kDelta, {.masked = true, .mask = {0x00, 0xff, 0x80, 0x7b}})),
            ITAP_VERDICT_FOLLOW);
  // HTTP still is.
  EXPECT_EQ(verdict("GET /v1/realtime HTTP/1.1\r\n"), ITAP_VERDICT_FOLLOW);
}

TEST(WebsocketKernelClassifier, FramesNoJoinedSessionCanReadAreMuted) {
  // Compressed (RSV1): its window went by before the agent started.
  EXPECT_EQ(verdict(ws::testing::frame(Opcode::text, kDelta, {.rsv1 = true})), ITAP_VERDICT_MUTED);
  // Binary, continuation, control frames, even carrying JSON.
  EXPECT_EQ(verdict(ws::testing::frame(Opcode::binary, kDelta)), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(ws::testing::frame(Opcode::continuation, kDelta)), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(ws::testing::frame(Opcode::ping, R"({"a":1})")), ITAP_VERDICT_MUTED);
  // RSV2 / RSV3 set.
  for (char bit : {'\x20', '\x10'}) {
    std::string f = server_frame(kDelta);
    f[0] = static_cast<char>(f[0] | bit);
    EXPECT_EQ(verdict(f), ITAP_VERDICT_MUTED) << int(bit);
  }
  // Text that is not a JSON object, or an object without a key.
  EXPECT_EQ(verdict(server_frame("hello, world")), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(server_frame("[1,2,3]")), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(server_frame("{}")), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(server_frame("{type:1}")), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(server_frame("{\" bad\":1}")), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(client_frame("{ \"type\":1}")), ITAP_VERDICT_MUTED);
  // Lengths in a longer form than needed, or 64-bit lengths past the bound.
  EXPECT_EQ(verdict(server_frame(kDelta.substr(0, 100), LengthForm::bits16)), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(server_frame(kDelta, LengthForm::bits64)), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(ws::testing::header(Opcode::text, 1ull << 24) + kDelta), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(ws::testing::header(Opcode::text, 1ull << 63) + kDelta), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(ws::testing::header(Opcode::text, (1ull << 24) - 1) + kDelta), ITAP_VERDICT_FOLLOW);
  // Too short to prove anything.
  EXPECT_EQ(verdict(server_frame(kDelta).substr(0, 3)), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(client_frame(kDelta).substr(0, 7)), ITAP_VERDICT_MUTED);
  // Binary of other protocols.
  EXPECT_EQ(verdict(std::string("\x81\x02\x00\x00\x00\x08\x04\xd2\x16\x2f", 10)), ITAP_VERDICT_MUTED);
  EXPECT_EQ(verdict(std::string("\x00\x00\x00\x08\x04\xd2\x16\x2f", 8)), ITAP_VERDICT_MUTED);
}

// Random bytes after a text frame's first byte are almost never followed:
// `{"` and a key character where the payload begins have odds of about 1 in
// 260000 by chance. Without the payload check nearly all would be.
TEST(WebsocketKernelClassifier, RandomBytesAfterATextOpcodeAreMuted) {
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  int followed = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string bytes(16, '\0');
    for (char& c : bytes) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      c = static_cast<char>(state >> 24);
    }
    bytes[0] = (i & 1) ? '\x81' : '\x01';
    followed += verdict(bytes) == ITAP_VERDICT_FOLLOW;
  }
  EXPECT_LE(followed, 5) << "of 200000 random frames";
}

}  // namespace
}  // namespace infertap
