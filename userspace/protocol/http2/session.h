// HTTP/2 over the two byte streams of one connection: each direction's frames
// read from the position-addressed pieces (protocol/stream.h), header blocks
// decoded per direction (hpack.h), and every stream id its own exchange,
// told to its own ExchangeSink: the request (:method, :path, the body's head),
// the response head (:status, content-type, content-encoding), the events of
// its DATA (protocol/body/events.h), trailers (grpc-status), and its end.
// An event's end_position is its last byte's position in the CONNECTION's
// byte stream, so the transport maps it onto TCP exactly as for HTTP/1.
//
//   pieces --> per direction: frames --> streams --> ExchangeSink per stream
//
// Bounds per connection: kMaxStreams live streams, a header block of
// kMaxHeaderBlock bytes, an HPACK table of HpackDecoder::kMaxTableBytes per
// direction, 9 bytes of a frame header held across pieces, kMaxControlPayload
// bytes of any other frame's payload.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "protocol/body/events.h"
#include "protocol/exchange.h"
#include "protocol/session.h"
#include "protocol/http2/frames.h"
#include "protocol/http2/hpack.h"
#include "protocol/stream.h"

namespace infertap::protocol::http2 {

// The fields of a header block the records use (capped); no other value is kept.
struct HeaderFields {
  std::string method, path;                          // requests
  std::string status, type, encoding, grpc_status;   // responses, trailers
};
bool decode_fields(HpackDecoder& hpack, std::span<const std::uint8_t> block, bool requests, HeaderFields& out);
int decimal(std::string_view digits);  // -1 when not a decimal number


// What a connection's first bytes say: HTTP/2 from the start (a client
// preface, a server's first SETTINGS), joined mid-way at a DATA frame of an
// event stream, or not HTTP/2.
enum class Start : std::uint8_t { not_http2, preface, server_settings, joined };
Start detect(std::span<const std::uint8_t> head);

class Session : public protocol::Session {
 public:
  static constexpr std::size_t kMaxStreams = 256;
  static constexpr std::size_t kMaxHeaderBlock = 64 * 1024;
  static constexpr std::size_t kMaxControlPayload = 256;
  static constexpr std::size_t kClosedRemembered = 512;  // stream ids whose late frames are ignored

  Session(ExchangeSinks& sinks, const SessionSettings& settings);
  ~Session() override;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The first piece with bytes decides the role (false: not HTTP/2).
  Protocol protocol() const override { return Protocol::http2; }
  bool decide(Flow flow, std::span<const std::uint8_t> head) override;
  // After an HTTP/1.1 `Upgrade: h2c` answered by 101 (the next byte of the
  // responses' direction is the server's first SETTINGS): the upgrade
  // request is stream 1, its response comes as HTTP/2.
  void start_upgraded(Role role, const RequestInfo* upgrade_request);
  Role role() const override { return role_; }
  bool accepts(Flow flow) const override;
  bool carries_responses(Flow flow) const override { return role_ != Role::unknown && (flow == Flow::outbound) == (role_ == Role::server); }

  void feed(Flow flow, const Piece& piece) override;
  void gap(Flow flow, std::uint64_t n, TimestampNs ts) override;
  void end(Flow flow, TimestampNs ts) override;
  void close(TimestampNs ts) override;
  // Ends stream `id`'s response `cut_short` (idle); the connection goes on.
  void abandon(std::uint64_t id, TimestampNs ts) override;
  std::size_t live_streams() const { return streams_.size(); }

 private:
  struct Stream;
  struct Direction;

  Direction& direction(Flow flow);
  bool is_requests(const Direction& d) const;
  void feed_bytes(Direction& d, std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts);
  void feed_preface(Direction& d, std::span<const std::uint8_t> bytes, std::size_t& i);
  void gap_bytes(Direction& d, std::uint64_t n, TimestampNs ts);
  void lose_sync(Direction& d);
  void lost_bytes(Direction& d, std::uint64_t n, TimestampNs ts);
  void try_resync(Direction& d, const Piece& piece);
  void begin_frame(Direction& d, TimestampNs ts);
  void frame_payload(Direction& d, std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts);
  void data_payload(Direction& d, std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts);
  void data_gap(Direction& d, std::uint64_t n, TimestampNs ts);
  void end_frame(Direction& d, TimestampNs ts);
  void end_data(Direction& d, TimestampNs ts);
  void header_fragment(Direction& d, TimestampNs ts);
  void header_block(Direction& d, TimestampNs ts);
  void request_headers(Stream& s, const HeaderFields* fields, bool end_stream, TimestampNs ts);
  void response_headers(Stream& s, const HeaderFields* fields, bool end_stream, TimestampNs ts);
  void settings(Direction& d, TimestampNs ts);
  void window_update(Direction& d, TimestampNs ts);
  void rst_stream(Direction& d, TimestampNs ts);
  void goaway(Direction& d, TimestampNs ts);

  Stream* find(std::uint32_t id);
  bool may_join(std::uint32_t id) const;
  bool request_went_unseen(std::uint32_t id) const;
  Stream* open_stream(std::uint32_t id, bool joined);
  void start_response(Stream& s, TimestampNs ts);
  void start_joined_response(Stream& s, std::span<const std::uint8_t> first_bytes, TimestampNs ts);
  void request_data(Stream& s, std::span<const std::uint8_t> bytes, std::uint64_t n);
  void end_request(Stream& s, TimestampNs ts);
  void end_stream_of(Stream& s, TimestampNs ts, ResponseEnd how);
  void close_streams_above(std::uint32_t last_id, TimestampNs ts);
  void note_windows(Stream& s, TimestampNs ts);
  void note_all_windows(TimestampNs ts, std::uint32_t ending = 0);
  ExchangeSink* sink(const Stream& s);

  ExchangeSinks& sinks_;
  const std::size_t request_body_head_;
  const DecoderLimits decoder_limits_;
  const DeclaredFormats* formats_;
  Role role_ = Role::unknown;
  bool from_start_ = false;  // every stream's opening is seen (not joined mid-way)
  bool requests_lost_ = false;  // the requests' frames could not be read for a while
  std::unique_ptr<Direction> outbound_, inbound_;
  std::map<std::uint32_t, std::unique_ptr<Stream>> streams_;
  std::deque<std::uint32_t> closed_;  // recently closed stream ids
  std::uint32_t highest_opened_ = 0;
  std::uint32_t first_opened_ = 0;  // the first stream seen opening (its request HEADERS)
  std::uint64_t responses_ = 0;
  // The response sender's connection window and the initial stream window
  // the receiver granted (SETTINGS_INITIAL_WINDOW_SIZE).
  std::int64_t connection_window_ = kDefaultWindow;
  std::int64_t initial_window_ = kDefaultWindow;
  bool windows_known_ = true;  // a lost WINDOW_UPDATE or SETTINGS makes them unknown
};

}  // namespace infertap::protocol::http2
