// Fuzzes Http1Session over both directions of a connection, as the connection
// layer feeds it: pieces with captured heads and tails and holes between, lost
// bytes between pieces, ends of either direction, then close. Checks what the
// layers above rely on: every response ends exactly once, events carry stream
// positions inside what was fed, exchange numbers only grow.
//
// Input: [n_ops][ops (3 bytes each)...][stream bytes]. Op: byte 0 bit0 = flow
// (outbound/inbound), bits 1..2 = kind (piece, piece with a hole, lost bytes,
// end of flow); bytes 1..2 = length.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "feed_pieces.h"
#include "protocol/http1/session.h"

using namespace infertap::protocol;

namespace {

struct Checker : ExchangeSink {
  bool open = false;
  std::uint64_t next_exchange = 0;
  std::uint64_t fed_end[2] = {0, 0};  // outbound, inbound
  Flow responses = Flow::outbound;
  void on_response(const ResponseInfo& r) override {
    if (open) std::abort();  // the session ends a response before starting the next
    if (r.exchange < next_exchange) std::abort();
    next_exchange = r.exchange + 1;
    open = true;
  }
  void on_event(const StreamEvent& e) override {
    if (!open) std::abort();
    if (e.end_position && *e.end_position > fed_end[responses == Flow::outbound ? 0 : 1]) std::abort();
  }
  void on_body_bytes(std::uint64_t) override {
    if (!open) std::abort();
  }
  void on_body_gap(std::uint64_t) override {
    if (!open) std::abort();
  }
  void on_response_end(TimestampNs, ResponseEnd) override {
    if (!open) std::abort();
    open = false;
  }
  void on_body_undecodable(Undecodable) override {
    if (!open) std::abort();
  }
  void on_parse_error(ParseError, bool) override {}
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t n_ops = std::min<std::size_t>(data[0] & 31, (size - 1) / 3);
  infertap::fuzzing::ConnectionFeed feed({data + 1, 3 * n_ops}, {data + 1 + 3 * n_ops, size - 1 - 3 * n_ops}, 2048);
  Checker check;
  Http1Session session(check, 512);
  const bool decided = feed.run(session, [&](Flow flow, std::uint64_t position, bool lost) {
    if (lost) return;
    check.responses = session.carries_responses(Flow::outbound) ? Flow::outbound : Flow::inbound;
    check.fed_end[flow == Flow::inbound] = position;
  });
  if (!decided) return 0;
  session.close(feed.ts + 1);
  if (check.open) std::abort();  // close ends whatever was open
  return 0;
}
