#include "protocol/ndjson/parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace infertap::protocol {
namespace {

std::span<const std::uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// NdjsonLine views die with the callback: keep owned copies.
struct Line {
  std::string data;
  TimestampNs first_byte_ts, ts;
  std::uint64_t offset;
  std::uint32_t wire;
  bool truncated;
};

struct Collect {
  std::vector<Line> lines;
  NdjsonParser parser{[this](const NdjsonLine& l) {
    lines.push_back({std::string(l.data), l.first_byte_ts, l.ts, l.stream_offset, l.wire_bytes, l.truncated});
  }};
  void feed(std::string_view s, TimestampNs ts) { parser.feed(bytes(s), ts); }
};

const std::string kChat1 =
    R"({"model":"llama3.2","created_at":"2024-01-01T00:00:00.1Z","message":{"role":"assistant","content":"The"},"done":false})";
const std::string kChat2 =
    R"({"model":"llama3.2","created_at":"2024-01-01T00:00:00.2Z","message":{"role":"assistant","content":" sky"},"done":false})";

TEST(NdjsonParser, OneLinePerEventWithOffsetsAndWireBytes) {
  Collect c;
  c.feed(kChat1 + "\n" + kChat2 + "\r\n", 100);
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0].data, kChat1);
  EXPECT_EQ(c.lines[0].offset, 0u);
  EXPECT_EQ(c.lines[0].wire, kChat1.size() + 1);
  EXPECT_EQ(c.lines[1].data, kChat2) << "a CR before the LF is part of the terminator";
  EXPECT_EQ(c.lines[1].offset, kChat1.size() + 1);
  EXPECT_EQ(c.lines[1].wire, kChat2.size() + 2);
  EXPECT_EQ(c.lines[1].ts, 100u);
  EXPECT_FALSE(c.lines[1].truncated);
  EXPECT_EQ(c.parser.lines(), 2u);
}

TEST(NdjsonParser, ALineSplitAcrossPiecesIsTimedByItsLf) {
  const std::string wire = kChat1 + "\n";
  for (std::size_t cut = 1; cut < wire.size(); ++cut) {
    Collect c;
    c.feed(wire.substr(0, cut), 10);
    EXPECT_TRUE(c.lines.empty()) << "cut " << cut;
    c.feed(wire.substr(cut), 20);
    ASSERT_EQ(c.lines.size(), 1u) << "cut " << cut;
    EXPECT_EQ(c.lines[0].data, kChat1) << "cut " << cut;
    EXPECT_EQ(c.lines[0].first_byte_ts, 10u);
    EXPECT_EQ(c.lines[0].ts, 20u);
    EXPECT_EQ(c.lines[0].wire, wire.size());
  }
}

TEST(NdjsonParser, BlankLinesAreKeepAlivesNotEvents) {
  Collect c;
  c.feed("\n  \r\n" + kChat1 + "\n\t\n\n" + kChat2 + "\n", 1);
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0].offset, 5u) << "the event starts after the keep-alives";
  EXPECT_EQ(c.lines[1].offset, 5 + kChat1.size() + 1 + 3);
}

TEST(NdjsonParser, TheBodysEndCompletesALastLineWithoutLf) {
  Collect whole;
  whole.feed(kChat1 + "\n" + kChat2, 5);
  whole.parser.end(9, true);
  ASSERT_EQ(whole.lines.size(), 2u);
  EXPECT_EQ(whole.lines[1].data, kChat2);
  EXPECT_EQ(whole.lines[1].ts, 5u) << "timed by the piece that held its last byte";
  EXPECT_EQ(whole.lines[1].wire, kChat2.size());

  Collect cut;
  cut.feed(kChat1 + "\n" + kChat2.substr(0, 20), 5);
  cut.parser.end(9, false);
  EXPECT_EQ(cut.lines.size(), 1u) << "a body cut short leaves its last line incomplete";
  EXPECT_EQ(cut.parser.incomplete_lines(), 1u);
}

TEST(NdjsonParser, LongLinesAreCappedAndStillEndAtTheirLf) {
  Collect c;
  const std::string big = "{\"response\":\"" + std::string(NdjsonParser::kMaxLine + 100, 'x') + "\"}";
  c.feed(big.substr(0, 1000), 1);
  c.feed(big.substr(1000) + "\n" + kChat1 + "\n", 2);
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0].data.size(), NdjsonParser::kMaxLine);
  EXPECT_TRUE(c.lines[0].truncated);
  EXPECT_EQ(c.lines[0].wire, big.size() + 1);
  EXPECT_EQ(c.lines[1].data, kChat1);
  EXPECT_FALSE(c.lines[1].truncated);
}

// Rule 1 and 2: the line cut by a hole keeps its captured prefix and ends at
// the next LF after the hole; the lines after it are read as usual.
TEST(NdjsonParser, AHoleCutsALineThatEndsAtTheNextLf) {
  Collect c;
  const std::string line = kChat1 + "\n";
  c.feed(line.substr(0, 40), 1);
  c.parser.gap(30, 2);
  c.feed(line.substr(70) + kChat2 + "\n", 3);
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0].data, line.substr(0, 40));
  EXPECT_TRUE(c.lines[0].truncated);
  EXPECT_EQ(c.lines[0].ts, 3u);
  EXPECT_EQ(c.lines[0].wire, line.size()) << "offsets count the hole";
  EXPECT_EQ(c.lines[1].data, kChat2);
  EXPECT_EQ(c.lines[1].offset, line.size());
  EXPECT_FALSE(c.lines[1].truncated);
}

TEST(NdjsonParser, ALineThatBeganInAHoleIsNotDispatched) {
  Collect c;
  c.feed(kChat1 + "\n", 1);
  c.parser.gap(50, 2);  // a whole line and the start of the next one
  c.feed("\"done\":false}\n" + kChat2 + "\n", 3);
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[1].data, kChat2);
  EXPECT_EQ(c.lines[1].offset, kChat1.size() + 1 + 50 + 14);
  EXPECT_GT(c.parser.bytes_discarded(), 0u);
}

TEST(NdjsonParser, JoiningMidwayStartsAtAnObjectOrAfterTheNextLf) {
  Collect at_object;
  at_object.parser.resync();
  at_object.feed(kChat1 + "\n", 1);
  ASSERT_EQ(at_object.lines.size(), 1u);
  EXPECT_EQ(at_object.lines[0].data, kChat1);

  Collect mid_line;
  mid_line.parser.resync();
  mid_line.feed("ent\":\"x\"},\"done\":false}\n" + kChat2 + "\n", 1);
  ASSERT_EQ(mid_line.lines.size(), 1u);
  EXPECT_EQ(mid_line.lines[0].data, kChat2);
}

// Splitting a stream without holes never changes what it means.
TEST(NdjsonParser, AnySplitGivesTheSameLines) {
  const std::string wire = kChat1 + "\n\n" + kChat2 + "\r\n" + kChat1;
  Collect whole;
  whole.feed(wire, 1);
  whole.parser.end(1, true);
  for (std::size_t a = 1; a < wire.size(); a += 7) {
    for (std::size_t b = a; b < wire.size(); b += 13) {
      Collect split;
      split.feed(wire.substr(0, a), 1);
      split.feed(wire.substr(a, b - a), 1);
      split.feed(wire.substr(b), 1);
      split.parser.end(1, true);
      ASSERT_EQ(split.lines.size(), whole.lines.size()) << a << "," << b;
      for (std::size_t i = 0; i < whole.lines.size(); ++i) {
        EXPECT_EQ(split.lines[i].data, whole.lines[i].data);
        EXPECT_EQ(split.lines[i].offset, whole.lines[i].offset);
        EXPECT_EQ(split.lines[i].wire, whole.lines[i].wire);
      }
    }
  }
}

}  // namespace
}  // namespace infertap::protocol
