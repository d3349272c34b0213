// WebSocket (RFC 6455, permessage-deflate RFC 7692) after an HTTP/1.1
// upgrade, read as realtime inference streams (OpenAI Realtime GA and beta,
// Qwen-Omni realtime): each direction's frames (frames.h), inflated per
// direction (deflate.h), and each *response* its own exchange: the run of
// server messages from `response.created` (or the first `response.*`
// carrying an unseen response_id) to its `response.done`, told to its own
// ExchangeSink with the client message that asked for it as its request.
// Every server message of a response is one event (its JSON "type", its
// text) at the stream position just past its last frame, exact even when
// compressed: a message ends at a frame boundary.
//
//   pieces --> per direction: frames --> messages (inflated) --> responses --> ExchangeSink per response
//
// A session the agent joined after its upgrade (started, or restarted, while
// it ran) is recognised from a connection's first frame (recognise()): its
// role from that frame's direction and masking; its upgrade request (path)
// and extensions unknown. A response already in flight at the join has no
// request and says joined_midstream (no TTFT); so does one that opens before
// any client message was seen (what asked for it went by unseen); the others
// are whole. permessage-deflate's parameters went by with the upgrade: a
// compressed message is undecodable, never inflated with a guessed window.
//
// Session traffic (session.*, rate_limits.updated, conversation.item.*,
// input_audio_buffer.*, binary messages) is counted in the responses'
// MessageStats, not told as events. Bounds: kMaxOpenResponses responses open
// at once, a message's kMaxMessage bytes kept (frames.h), one inflater per
// direction within SessionSettings::decoder_limits.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/session.h"
#include "protocol/websocket/deflate.h"
#include "protocol/websocket/frames.h"
#include "protocol/websocket/realtime.h"

namespace infertap::protocol::websocket {

class Session final : public protocol::Session {
 public:
  static constexpr std::size_t kMaxOpenResponses = 16;
  // Ended or refused response ids whose late messages open nothing.
  static constexpr std::size_t kRememberedIds = 64;
  static constexpr std::size_t kMaxResponseId = 128;

  // After the 101: `start.role` says which end the traced process is.
  Session(const UpgradeStart& start, ExchangeSinks& sinks, const SessionSettings& settings);
  // Joined after the upgrade: `role` from the first frame (recognise()).
  Session(Role role, ExchangeSinks& sinks, const SessionSettings& settings);
  ~Session() override;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Protocol protocol() const override { return Protocol::websocket; }
  Role role() const override { return role_; }
  bool accepts(Flow flow) const override;
  bool carries_responses(Flow flow) const override { return (flow == Flow::outbound) == (role_ == Role::server); }
  // An upgrade (make_upgraded) or a first frame (recognise) decided it already.
  bool decide(Flow, std::span<const std::uint8_t>) override { return false; }
  void feed(Flow flow, const Piece& piece) override;
  void gap(Flow flow, std::uint64_t n, TimestampNs ts) override;
  void end(Flow flow, TimestampNs ts) override;
  void close(TimestampNs ts) override;
  void abandon(std::uint64_t id, TimestampNs ts) override;

  std::size_t open_responses() const { return open_.size(); }
  bool compressed() const { return deflate_.has_value() || compressed_seen_; }
  bool joined() const { return joined_; }

 private:
  struct Direction;
  struct Response;
  // A message's text as the session reads it: captured, or inflated.
  struct Text {
    std::string_view bytes;
    std::uint64_t length = 0;  // its whole length (inflated, or payload), captured or not
    bool cut = false;
    bool readable = true;  // false: compressed and not inflated
  };

  Direction& direction(Flow flow);
  void on_message(Direction& d, const Message& m, const Text& text);
  void on_control(Direction& d, const ControlFrame& f);
  void on_lost(Direction& d, std::uint64_t n);
  void on_undecodable(Direction& d, Inflater::Status why);
  void on_compressed_unread(Direction& d);
  void responses_undecodable(ExchangeSink::Undecodable why);

  void server_message(const Message& m, const Text& text);
  void client_message(const Message& m, const Text& text);
  Response* owner(const MessageFacts& f, const Message& m);
  // `start_seen`: opened by its response.created.
  Response* open_response(std::string_view response_id, TimestampNs head_ns, bool start_seen);
  std::optional<RequestInfo> request_for(TimestampNs head_ns);
  void event(Response& r, const Message& m, const Text& text, const MessageFacts& f);
  void count_other(const Response* except);
  // `close_code`: a close frame ended it.
  void end_response(Response& r, TimestampNs ts, ResponseEnd how, std::optional<std::uint16_t> close_code = {});
  void end_all(TimestampNs ts, ResponseEnd how, std::optional<std::uint16_t> close_code = {});
  Response* find(std::uint64_t id);
  bool remembered(std::string_view response_id) const;
  void remember(std::string_view response_id);

  void make_directions(std::uint64_t outbound_start, std::uint64_t inbound_start);

  ExchangeSinks& sinks_;
  std::shared_ptr<const DeclaredFormat> declared_format() const;
  const SessionSettings settings_;
  const Role role_;
  const bool joined_ = false;  // recognised from a frame: the upgrade went by unseen
  bool compressed_seen_ = false;  // joined: a message had RSV1 (permessage-deflate was negotiated)
  bool client_seen_ = false;      // a client message was read
  std::string method_, target_;  // of the upgrade request
  std::optional<DeflateParams> deflate_;
  std::unique_ptr<Direction> outbound_, inbound_;
  std::vector<std::unique_ptr<Response>> open_;  // in the order they opened
  std::deque<std::string> remembered_;
  std::uint64_t next_id_ = kUpgradedIdBase;
  std::uint32_t other_before_ = 0;  // server messages while no response was open
  // The client messages a response may answer: the last response.create, the
  // last message of any type, since the last response opened.
  std::optional<RequestInfo> last_create_, last_client_;
  AudioFormat audio_;  // the output audio format the session declared
};

// A websocket session for the connection `start` upgraded, null when it
// upgraded to something else (or its role is unknown).
std::unique_ptr<protocol::Session> make_upgraded(const UpgradeStart& start, ExchangeSinks& sinks,
                                                 const SessionSettings& settings);
// A websocket session joined after its upgrade, when `head` (the first bytes
// seen of the connection, in `flow`) is a text frame of JSON
// (joined_frame_sender()); null otherwise. The traced process is the server
// when it sends unmasked frames or receives masked ones.
std::unique_ptr<protocol::Session> recognise(Flow flow, std::span<const std::uint8_t> head, ExchangeSinks& sinks,
                                             const SessionSettings& settings);

}  // namespace infertap::protocol::websocket
