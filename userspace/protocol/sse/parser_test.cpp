#include "protocol/sse/parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace infertap::protocol {
namespace {

std::span<const std::uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// SseEvent views die with the callback: keep owned copies.
struct Ev {
  std::string type, data, id;
  TimestampNs first_byte_ts, ts;
  std::uint64_t offset;
  std::uint32_t wire;
  bool truncated;
};

struct Collect {
  std::vector<Ev> events;
  SseParser parser{[this](const SseEvent& e) {
    events.push_back({std::string(e.type), std::string(e.data), std::string(e.id), e.first_byte_ts, e.ts,
                      e.stream_offset, e.wire_bytes, e.truncated});
  }};
  void feed(std::string_view s, TimestampNs ts) { parser.feed(bytes(s), ts); }
};

std::string openai_event(int i) {
  return "data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"model\":\"llama-3-8b\","
         "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok" +
         std::to_string(i) + "\"},\"finish_reason\":null}]}\n\n";
}

std::string payload_of(const std::string& event) { return event.substr(6, event.size() - 8); }

TEST(SseParser, SingleEventFieldsAndTimestamps) {
  Collect c;
  c.feed("event: content_block_delta\nid: 7\ndata: {\"a\":1}\n\n", 100);
  ASSERT_EQ(c.events.size(), 1u);
  const Ev& e = c.events[0];
  EXPECT_EQ(e.type, "content_block_delta");
  EXPECT_EQ(e.id, "7");
  EXPECT_EQ(e.data, "{\"a\":1}");
  EXPECT_EQ(e.first_byte_ts, 100u);
  EXPECT_EQ(e.ts, 100u);
  EXPECT_EQ(e.offset, 0u);
  EXPECT_EQ(e.wire, 48u);
  EXPECT_FALSE(e.truncated);
  EXPECT_EQ(c.parser.events(), 1u);
}

TEST(SseParser, CoalescedEventsOffsetsAndWireBytes) {
  Collect c;
  std::string all;
  for (int i = 0; i < 5; ++i) all += openai_event(i);
  c.feed(all, 9);
  ASSERT_EQ(c.events.size(), 5u);
  std::uint64_t offset = 0;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(c.events[i].data, payload_of(openai_event(i)));
    EXPECT_EQ(c.events[i].offset, offset);
    EXPECT_EQ(c.events[i].wire, openai_event(i).size());
    offset += openai_event(i).size();
  }
}

std::string with_endings(std::string s, std::string_view eol) {
  std::string out;
  for (char ch : s) {
    if (ch == '\n') {
      out += eol;
    } else {
      out += ch;
    }
  }
  return out;
}

TEST(SseParser, SplitAtEveryBytePositionAllLineEndings) {
  const std::string lf = "\xEF\xBB\xBF: comment\nevent: a\ndata: one\ndata:two\nid: 1\nretry: 5\nfoo: bar\n\n" +
                         openai_event(1) + "data\n\ndata: x\n\n: only comment\n\n";
  for (std::string_view eol : {"\n", "\r\n", "\r"}) {
    const std::string wire = with_endings(lf, eol);
    Collect whole;
    whole.feed(wire, 1);
    ASSERT_EQ(whole.events.size(), 4u) << "eol " << eol.size();
    EXPECT_EQ(whole.events[0].type, "a");
    EXPECT_EQ(whole.events[0].data, "one\ntwo");
    EXPECT_EQ(whole.events[0].id, "1");
    EXPECT_EQ(whole.events[1].data, payload_of(openai_event(1)));
    EXPECT_EQ(whole.events[2].data, "");  // "data" with no colon: one empty data line
    EXPECT_EQ(whole.events[3].data, "x");
    for (std::size_t split = 0; split <= wire.size(); ++split) {
      Collect c;
      c.feed(std::string_view(wire).substr(0, split), 1);
      c.feed(std::string_view(wire).substr(split), 2);
      ASSERT_EQ(c.events.size(), whole.events.size()) << "split " << split << " eol " << eol.size();
      for (std::size_t i = 0; i < c.events.size(); ++i) {
        EXPECT_EQ(c.events[i].data, whole.events[i].data) << split;
        EXPECT_EQ(c.events[i].type, whole.events[i].type) << split;
        EXPECT_EQ(c.events[i].id, whole.events[i].id) << split;
        EXPECT_EQ(c.events[i].offset, whole.events[i].offset) << split;
        EXPECT_FALSE(c.events[i].truncated);
        // The event is dispatched in the piece that holds its empty line.
        const std::uint64_t end = whole.events[i].offset + whole.events[i].wire;
        const bool crlf_straddle = eol == "\r\n" && split + 1 == end;  // LF of the last CRLF in piece 2
        if (!crlf_straddle) {
          EXPECT_EQ(c.events[i].wire, whole.events[i].wire) << split;
        }
        EXPECT_EQ(c.events[i].ts, end <= split || (eol == "\r\n" && end - 1 == split) ? 1u : 2u) << split;
        EXPECT_EQ(c.events[i].first_byte_ts, whole.events[i].offset < split ? 1u : 2u) << split;
      }
    }
  }
}

TEST(SseParser, CrLfSplitAcrossFeedsIsOneLineEnding) {
  Collect c;
  c.feed("data: a\r", 1);
  c.feed("\ndata: b\r", 2);
  c.feed("\n\r", 3);
  ASSERT_EQ(c.events.size(), 1u);  // dispatched at the CR: the LF may never come
  EXPECT_EQ(c.events[0].data, "a\nb");
  EXPECT_EQ(c.events[0].ts, 3u);
  c.feed("\ndata: c\n\n", 4);  // leading LF belongs to the CR above
  ASSERT_EQ(c.events.size(), 2u);
  EXPECT_EQ(c.events[1].data, "c");
  EXPECT_EQ(c.events[1].first_byte_ts, 4u);
  // A lone CR followed by a non-LF is a line ending by itself.
  Collect d;
  d.feed("data: a\r", 1);
  d.feed("\r", 2);
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].data, "a");
}

TEST(SseParser, BomOnlyAtStartAndSplit) {
  Collect c;
  c.feed("\xEF", 1);
  c.feed("\xBB", 1);
  c.feed("\xBF" "data: x\n\n", 1);
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.events[0].data, "x");
  EXPECT_EQ(c.events[0].offset, 3u);
  // Not a BOM after all: the bytes are content (an unknown field here).
  Collect d;
  d.feed("\xEF", 1);
  d.feed("X\ndata: y\n\n", 1);
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].data, "y");
  EXPECT_EQ(d.events[0].offset, 0u);
  // A second BOM later is not stripped: the field name is then unknown.
  Collect e;
  e.feed("\xEF\xBB\xBF" "data: 1\n\n\xEF\xBB\xBF" "data: 2\n\n", 1);
  ASSERT_EQ(e.events.size(), 1u);
  EXPECT_EQ(e.events[0].data, "1");
}

TEST(SseParser, FieldRules) {
  Collect c;
  c.feed("data:  two spaces\n\n", 1);                // one leading space is stripped
  c.feed("event: x\nretry: 10\nwhat: ever\n\n", 1);  // no data line: not dispatched
  c.feed(std::string("id: a\0b\ndata: 1\n\n", 17), 1);  // an id holding NUL is ignored
  c.feed("id: 9\ndata: z\nevent: t\n\ndata: after\n\n", 1);
  ASSERT_EQ(c.events.size(), 4u);
  EXPECT_EQ(c.events[0].data, " two spaces");
  EXPECT_EQ(c.events[0].type, "");
  EXPECT_EQ(c.events[1].id, "");
  EXPECT_EQ(c.events[1].data, "1");
  EXPECT_EQ(c.events[1].type, "");  // the type of the undispatched event was reset
  EXPECT_EQ(c.events[2].id, "9");
  EXPECT_EQ(c.events[2].type, "t");
  EXPECT_EQ(c.events[3].type, "");
  EXPECT_EQ(c.events[3].id, "");
  EXPECT_EQ(c.parser.events(), 4u);
}

TEST(SseParser, CommentsAndHeartbeatsAreNotEvents) {
  Collect c;
  c.feed(": ping\n\n:\n\n", 1);
  EXPECT_TRUE(c.events.empty());
  c.feed(": keep-alive\ndata: x\n\n", 2);
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.events[0].offset, 11u);  // the comment line opens the event
}

TEST(SseParser, HoleInsideDataLineKeepsPrefix) {
  // One long write: head, hole, tail "…}\n\n". The event ends in the tail.
  const std::string ev = openai_event(0);
  Collect c;
  c.feed(ev.substr(0, 60), 1);
  c.parser.gap(ev.size() - 60 - 10, 1);
  c.feed(ev.substr(ev.size() - 10), 1);
  c.feed(openai_event(1), 2);
  ASSERT_EQ(c.events.size(), 2u);
  EXPECT_TRUE(c.events[0].truncated);
  EXPECT_EQ(c.events[0].data, ev.substr(6, 54));
  EXPECT_EQ(c.events[0].wire, ev.size());
  EXPECT_FALSE(c.events[1].truncated);
  EXPECT_EQ(c.events[1].data, payload_of(openai_event(1)));
  EXPECT_EQ(c.events[1].offset, ev.size());
}

TEST(SseParser, HoleEndingAtEventBoundaryThenField) {
  // Rule 2a: the bytes after the hole start with "data:": the hole ended the event.
  Collect c;
  const std::string cut = "data: {\"choices\":[{\"delta\":{\"content\":\"ab";
  c.feed(cut, 1);
  c.parser.gap(50, 2);
  c.feed(openai_event(5), 3);
  ASSERT_EQ(c.events.size(), 2u);
  EXPECT_TRUE(c.events[0].truncated);
  EXPECT_EQ(c.events[0].data, "{\"choices\":[{\"delta\":{\"content\":\"ab");
  EXPECT_EQ(c.events[0].ts, 2u);
  EXPECT_FALSE(c.events[1].truncated);
  EXPECT_EQ(c.events[1].data, payload_of(openai_event(5)));
  EXPECT_EQ(c.events[1].first_byte_ts, 3u);
  EXPECT_EQ(c.events[1].offset, cut.size() + 50u);
}

TEST(SseParser, HoleFieldPrefixSplitAcrossPieces) {
  Collect c;
  c.feed("data: {\"x\":", 1);
  c.parser.gap(10, 2);
  c.feed("da", 3);
  c.feed("ta: next\n\n", 4);
  ASSERT_EQ(c.events.size(), 2u);
  EXPECT_EQ(c.events[0].data, "{\"x\":");
  EXPECT_EQ(c.events[1].data, "next");
  EXPECT_EQ(c.events[1].first_byte_ts, 3u);
  EXPECT_FALSE(c.events[1].truncated);
}

TEST(SseParser, HoleAtBoundaryHidingWholeEventStart) {
  // Rule 2b with nothing pending: the tail finishes an event we never saw.
  Collect c;
  c.feed(openai_event(0), 1);
  c.parser.gap(200, 2);
  c.feed("\"}]}\n\n" + openai_event(2), 2);
  ASSERT_EQ(c.events.size(), 2u);  // nothing to dispatch for the hidden event
  EXPECT_EQ(c.events[1].data, payload_of(openai_event(2)));
  EXPECT_FALSE(c.events[1].truncated);
  EXPECT_GT(c.parser.bytes_discarded(), 0u);
}

TEST(SseParser, HoleAfterLoneLfThenBlankLine) {
  Collect c;
  c.feed("data: abc", 1);
  c.parser.gap(5, 2);
  c.feed("\n\n", 2);  // the unknown line ends, then the empty line
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.events[0].data, "abc");
  EXPECT_TRUE(c.events[0].truncated);
}

TEST(SseParser, TruncatedEventWithTypeButNoDataIsDispatched) {
  Collect c;
  c.feed("event: content_block_delta\n", 1);
  c.parser.gap(300, 2);
  c.feed("\"}}\n\n", 2);
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.events[0].type, "content_block_delta");
  EXPECT_EQ(c.events[0].data, "");
  EXPECT_TRUE(c.events[0].truncated);
}

TEST(SseParser, DataCap) {
  Collect c;
  const std::string big(SseParser::kMaxEventData + 100, 'x');
  c.feed("data: " + big.substr(0, 1000), 1);
  c.feed(big.substr(1000) + "\ndata: more\n\n", 1);
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.events[0].data.size(), SseParser::kMaxEventData);
  EXPECT_TRUE(c.events[0].truncated);
  c.feed("data: ok\n\n", 2);
  ASSERT_EQ(c.events.size(), 2u);
  EXPECT_FALSE(c.events[1].truncated);
}

TEST(SseParser, EndCountsIncompleteAndResets) {
  Collect c;
  c.feed("data: x\n\ndata: pending", 1);
  c.parser.end(2);
  EXPECT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.parser.incomplete_events(), 1u);
  c.feed(": comment only", 3);
  c.parser.end(4);
  EXPECT_EQ(c.parser.incomplete_events(), 1u);
  c.feed("\xEF\xBB\xBF" "data: y\n\n", 5);  // fresh body: BOM allowed again, offsets restart
  ASSERT_EQ(c.events.size(), 2u);
  EXPECT_EQ(c.events[1].offset, 3u);
}

TEST(SseParser, ResyncStartsAtFieldOrNextBoundary) {
  Collect c;
  c.parser.resync();
  c.feed("data: now\n\n", 1);
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.events[0].data, "now");

  Collect d;
  d.parser.resync();
  d.feed("t\":\"x\"}]}\ndata: still the old event\n\ndata: fresh\n\n", 1);
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].data, "fresh");
  EXPECT_GT(d.parser.bytes_discarded(), 20u);

  Collect e;
  e.parser.resync();
  e.feed(": hb\n\nevent: ping\ndata: {}\n\n", 1);
  ASSERT_EQ(e.events.size(), 1u);
  EXPECT_EQ(e.events[0].type, "ping");
}

TEST(SseParser, RandomPiecesAndHolesNeverCrash) {
  std::string wire;
  for (int i = 0; i < 30; ++i) wire += (i % 3 == 0 ? "event: x\r\n" : "") + openai_event(i);
  std::mt19937 rng(3);
  for (int round = 0; round < 300; ++round) {
    Collect c;
    std::size_t at = 0;
    std::size_t holes = 0;
    while (at < wire.size()) {
      const std::size_t n = std::min<std::size_t>(wire.size() - at, 1 + rng() % 200);
      if (rng() % 6 == 0) {
        c.parser.gap(n, at);
        ++holes;
      } else {
        c.feed(std::string_view(wire).substr(at, n), at);
      }
      at += n;
    }
    c.parser.end(at);
    if (holes == 0) {
      EXPECT_EQ(c.events.size(), 30u);
    }
    for (const Ev& e : c.events) {
      EXPECT_LE(e.offset + e.wire, wire.size());
      if (!e.truncated) {
        EXPECT_EQ(e.data.front(), '{');  // an untruncated event is a whole one
        EXPECT_EQ(e.data.back(), '}');
      }
    }
  }
}

}  // namespace
}  // namespace infertap::protocol
