// permessage-deflate (RFC 7692): the parameters a 101 accepted, and one
// direction's inflater. A compressed message is raw DEFLATE that the sender
// sync-flushed and stripped of its last four bytes (00 00 ff ff); they are put
// back, and the window carries over to the sender's next message unless it
// resets its context per message (`*_no_context_takeover`).
//
// A message whose compressed bytes were not all captured cannot be inflated,
// nor, while the window carries over, any later message of its sender: the
// context is lost for good. Bounded as BodyDecoder bounds a body
// (protocol/encoding/decoder.h): zlib's own memory per inflater and for all
// of the process, the output of one message, and its output per byte in.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <zlib.h>

#include "protocol/encoding/decoder.h"

namespace infertap::protocol::websocket {

struct DeflateParams {
  bool server_no_context_takeover = false;  // the server resets its window per message
  bool client_no_context_takeover = false;
  std::uint8_t server_max_window_bits = 15;  // 8..15: the window the server compresses with
  std::uint8_t client_max_window_bits = 15;
};

// The permessage-deflate a 101's `Sec-WebSocket-Extensions` value accepted,
// nullopt when it accepted none. Unknown parameters and window sizes outside
// 8..15 are ignored.
std::optional<DeflateParams> parse_deflate(std::string_view extensions);

// The messages one sender compressed, in order: begin(), feed() and hole()
// with its compressed bytes as they come, end().
class Inflater {
 public:
  enum class Status : std::uint8_t {
    ok,
    capture_hole,  // some of its compressed bytes were not captured
    corrupt,       // not DEFLATE (or not the context it was compressed against)
    too_large,     // inflated past DecoderLimits::output_bytes
    too_costly,    // inflated more per byte in than DecoderLimits::output_per_input_byte allows
    no_memory,     // zlib needed more than the memory budget
    context_lost,  // an earlier message failed and the window carries over: nothing can be inflated
  };

  // `window_bits`: the sender's negotiated window; `keep`: text bytes of a message kept.
  Inflater(int window_bits, bool context_takeover, const DecoderLimits& limits, std::size_t keep);
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  void begin();
  void feed(std::span<const std::uint8_t> compressed);
  void hole(std::uint64_t n);
  // The message ended: ok, or why it could not be inflated (whole).
  Status end();
  // Bytes of this sender went by unread (its frames were lost): a window
  // that carries over is unknown from here on.
  void bytes_lost();

  std::string_view text() const { return text_; }  // the message's first `keep` inflated bytes
  bool text_cut() const { return cut_; }            // it inflated to more than text() holds
  std::uint64_t inflated() const { return inflated_; }
  bool context_lost() const { return lost_; }
  // Bytes zlib holds for every inflater of the process now.
  static std::size_t state_bytes();

 private:
  struct Budget;
  Status start();
  void inflate_bytes(std::span<const std::uint8_t> in);
  bool take_output(std::span<const std::uint8_t> out);
  void restart_after_final_block();
  void fail(Status s);

  const int window_bits_;
  const bool takeover_;
  const DecoderLimits limits_;
  const std::size_t keep_;
  std::unique_ptr<Budget> budget_;
  z_stream z_{};
  bool started_ = false;
  bool lost_ = false;
  bool final_block_ = false;  // the sender ended its DEFLATE stream (BFINAL) inside this message
  Status status_ = Status::ok;  // of the message in progress
  std::string text_;
  bool cut_ = false;
  bool fed_ = false;  // the message had compressed bytes
  std::uint64_t inflated_ = 0, consumed_ = 0;
};

}  // namespace infertap::protocol::websocket
