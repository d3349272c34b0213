// The one escaping of tenant text for people: no control character survives.
#include "base/escape.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace infertap::base {
namespace {

using namespace std::string_literals;

// No byte of `s` is a C0 control or DEL, and no C1 control (U+0080..U+009F) is encoded.
bool has_raw_control(const std::string& s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) return true;
    if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9F) return true;
  }
  return false;
}

TEST(Printable, PrintableTextStaysAsItIs) {
  EXPECT_EQ(printable("llama-3.1-8b /v1/chat/completions"), "llama-3.1-8b /v1/chat/completions");
  EXPECT_EQ(printable("modèle 模型 🦙"), "modèle 模型 🦙");
  EXPECT_EQ(printable("a\\nb"), "a\\nb") << "a backslash is left alone";
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, C0ControlsAndDelBecomeVisibleEscapes) {
  EXPECT_EQ(printable("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(printable("x\x1b[2Jy"), "x\\x1b[2Jy");
  EXPECT_EQ(printable("nul\0here"s), "nul\\x00here");
  EXPECT_EQ(printable("del\x7f"), "del\\x7f");
}

TEST(Printable, C1ControlsAsUtf8BecomeUnicodeEscapes) {
  EXPECT_EQ(printable("csi\xc2\x9b" "2J"), "csi\\u009b2J");
  EXPECT_EQ(printable("\xc2\x80\xc2\x9f\xc2\xa0"), "\\u0080\\u009f\xc2\xa0") << "U+00A0 is no control";
}

TEST(Printable, LineSeparatorsAndBidiOverridesAreEscaped) {
  EXPECT_EQ(printable("a\xe2\x80\xa8" "b"), "a\\u2028b");
  EXPECT_EQ(printable("\xe2\x80\xae" "evil"), "\\u202eevil");
  EXPECT_EQ(printable("\xe2\x81\xa6"), "\\u2066");
}

TEST(Printable, BytesThatAreNotUtf8BecomeByteEscapes) {
  EXPECT_EQ(printable("a\xff" "b"), "a\\xffb");
  EXPECT_EQ(printable("\x9b"), "\\x9b") << "a lone C1 byte";
  EXPECT_EQ(printable("\xc0\x8a"), "\\xc0\\x8a") << "overlong newline";
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80") << "surrogate";
  EXPECT_EQ(printable("\xe6\x97"), "\\xe6\\x97") << "cut sequence";
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80") << "beyond U+10FFFF";
}

TEST(Printable, NoControlSurvivesAnyByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  for (int b = 0x80; b < 0xA0; ++b) all += "\xc2"s + static_cast<char>(b);
  const std::string out = printable(all);
  EXPECT_FALSE(has_raw_control(out));
  EXPECT_EQ(out.find('\n'), std::string::npos);
}

TEST(Printable, JsonFormWritesJsonEscapes) {
  EXPECT_EQ(printable("{\"comm\":\"a\xc2\x9b\x7f\"}", EscapeForm::json), "{\"comm\":\"a\\u009b\\u007f\"}");
}

TEST(HasUnsafe, FindsWhatPrintableWouldEscape) {
  EXPECT_FALSE(has_unsafe("row one 模型"));
  EXPECT_TRUE(has_unsafe("a\nb"));
  EXPECT_FALSE(has_unsafe("a\nb\n", true));
  EXPECT_TRUE(has_unsafe("a\x1b[2J\n", true));
  EXPECT_TRUE(has_unsafe("c1 \xc2\x9b", true));
  EXPECT_TRUE(has_unsafe("bad \xff", true));
  EXPECT_FALSE(has_unsafe(printable("any\n\x1b\0\xc2\x9b\xff")));
}

// An executable's Go version string, as a loader note carries it into the log.
TEST(LogLine, ANoteWithANewlineStaysOneLine) {
  const std::string what = "probing Go crypto/tls in server (go1.21.0\ninfertapd: FORGED attach: nothing)";
  const std::string line = log_line("infertapd", what + " (\x1b[2Jwhy\r)");
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.rfind("infertapd: ", 0), 0u);
  EXPECT_EQ(line.find("\ninfertapd: FORGED"), std::string::npos);
  EXPECT_NE(line.find("go1.21.0\\ninfertapd: FORGED"), std::string::npos) << line;
  EXPECT_EQ(line.find('\x1b'), std::string::npos);
  EXPECT_EQ(line.find('\r'), std::string::npos);
}

}  // namespace
}  // namespace infertap::base
