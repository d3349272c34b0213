#include "protocol/http2/session.h"

#include <algorithm>
#include <cstring>

#include "protocol/payload/declared.h"

namespace infertap::protocol::http2 {
namespace {

constexpr std::size_t kMaxFieldValue = 256;
constexpr std::size_t kMaxPath = 2048;

std::span<const std::uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::string lower_capped(std::string_view v, std::size_t cap) {
  std::string out(v.substr(0, cap));
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool starts_with(std::span<const std::uint8_t> b, std::string_view prefix) {
  return b.size() >= prefix.size() && std::memcmp(b.data(), prefix.data(), prefix.size()) == 0;
}

// The first bytes of a body joined mid-way: SSE fields, a JSON line, or neither.
BodyEventKind joined_kind(std::span<const std::uint8_t> b) {
  for (std::string_view field : {"data:", "event:", "id:", "retry:", ":"}) {
    if (starts_with(b, field)) return BodyEventKind::sse;
  }
  return starts_with(b, "{") ? BodyEventKind::ndjson : BodyEventKind::none;
}

// A DATA frame at the start of `head` whose payload opens like an event stream.
bool joined_event_data(std::span<const std::uint8_t> head) {
  if (head.size() < kFrameHeaderBytes + 1) return false;
  const FrameHeader h = parse_frame_header(head);
  if (h.frame_type() != FrameType::data || !plausible(h, kDefaultMaxFrame) || h.has(flags::kPadded)) return false;
  return joined_kind(head.subspan(kFrameHeaderBytes)) != BodyEventKind::none;
}

}  // namespace

int decimal(std::string_view digits) {
  if (digits.empty()) return -1;
  int v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

bool decode_fields(HpackDecoder& hpack, std::span<const std::uint8_t> block, bool requests, HeaderFields& out) {
  return hpack.decode(block, [&](std::string_view name, std::string_view value) {
    if (requests && name == ":method") out.method = value.substr(0, kMaxFieldValue);
    if (requests && name == ":path") out.path = value.substr(0, kMaxPath);
    if (!requests && name == ":status") out.status = value.substr(0, 3);
    if (!requests && name == "content-type") out.type = lower_capped(value, kMaxFieldValue);
    if (!requests && name == "content-encoding") out.encoding = lower_capped(value, kMaxFieldValue);
    if (!requests && name == "grpc-status") out.grpc_status = value.substr(0, 4);
  });
}

Start detect(std::span<const std::uint8_t> head) {
  if (starts_with(head, kClientPreface.substr(0, std::min(head.size(), kClientPreface.size()))) && head.size() >= 4)
    return Start::preface;
  if (looks_like_server_settings(head)) return Start::server_settings;
  if (joined_event_data(head)) return Start::joined;
  return Start::not_http2;
}

// ---- state --------------------------------------------------------------------

struct Session::Stream {
  explicit Stream(std::uint32_t stream_id) : id(stream_id) {}
  std::uint32_t id;
  RequestInfo request;
  bool request_seen = false;  // its HEADERS were read (decoded or not)
  bool request_ended = false;
  bool response_head_seen = false;
  bool response_started = false;  // the sink heard on_response
  bool headers_unknown = false;
  bool request_unread = false;  // its request's header block was not read (a hole, a lost HPACK state)
  bool joined = false;
  ResponseInfo pending;           // a head whose body kind waits for the first DATA (headers unknown)
  std::unique_ptr<BodyEvents> events;
  std::int64_t window = kDefaultWindow;  // the response sender's stream window
  TimestampNs blocked_since = 0;
  Http2StreamStats stats;
};

struct Session::Direction {
  enum class State : std::uint8_t { preface, maybe_preface, header, payload, lost, ended };
  State state = State::header;
  std::size_t preface_have = 0;
  std::uint8_t header[kFrameHeaderBytes] = {};
  std::size_t header_have = 0;
  FrameHeader frame;
  std::uint64_t frame_off = 0;   // payload bytes of the frame consumed
  bool frame_lost = false;       // a hole hit this (non-DATA) frame's payload
  std::string payload;           // a non-DATA frame's payload (bounded)
  // DATA: where its data sits in the payload (padding excluded).
  std::uint64_t data_begin = 0, data_end = 0;
  bool pad_unknown = false;
  // A header block in progress (HEADERS, then CONTINUATION).
  std::string block;
  std::uint32_t block_stream = 0;
  bool block_end_stream = false;
  bool block_lost = false;
  bool in_block = false;
  std::uint32_t max_frame = kDefaultMaxFrame;  // the receiver's SETTINGS_MAX_FRAME_SIZE
  HpackDecoder hpack;
};

Session::Session(ExchangeSinks& sinks, const SessionSettings& settings)
    : sinks_(sinks),
      request_body_head_(settings.request_body_head),
      decoder_limits_(settings.decoder_limits),
      formats_(settings.formats),
      outbound_(std::make_unique<Direction>()),
      inbound_(std::make_unique<Direction>()) {}

Session::~Session() = default;

Session::Direction& Session::direction(Flow flow) { return flow == Flow::outbound ? *outbound_ : *inbound_; }

bool Session::is_requests(const Direction& d) const {
  return &d == (role_ == Role::client ? outbound_.get() : inbound_.get());
}

bool Session::decide(Flow flow, std::span<const std::uint8_t> head) {
  const Start start = detect(head);
  // Which way requests flow from the first bytes: a preface is the client's,
  // SETTINGS first and event DATA are the server's.
  switch (start) {
    case Start::not_http2: return false;
    case Start::preface: role_ = flow == Flow::outbound ? Role::client : Role::server; break;
    case Start::server_settings:
    case Start::joined: role_ = flow == Flow::outbound ? Role::server : Role::client; break;
  }
  Direction& requests = role_ == Role::client ? *outbound_ : *inbound_;
  if (start == Start::preface) requests.state = Direction::State::preface;
  if (start == Start::server_settings) requests.state = Direction::State::maybe_preface;
  from_start_ = start != Start::joined;
  return true;
}

void Session::start_upgraded(Role role, const RequestInfo* upgrade_request) {
  role_ = role;
  from_start_ = true;
  (role_ == Role::client ? *outbound_ : *inbound_).state = Direction::State::maybe_preface;
  first_opened_ = 1;
  Stream* s = open_stream(1, false);
  if (!s || !upgrade_request) return;
  s->request = *upgrade_request;
  s->request_seen = true;
  s->request_ended = upgrade_request->complete;
}

bool Session::accepts(Flow flow) const {
  const Direction& d = flow == Flow::outbound ? *outbound_ : *inbound_;
  return role_ != Role::unknown && d.state != Direction::State::ended;
}

// ---- bytes to frames ------------------------------------------------------------

void Session::feed(Flow flow, const Piece& piece) {
  Direction& d = direction(flow);
  if (role_ == Role::unknown || d.state == Direction::State::ended) return;
  if (d.state == Direction::State::maybe_preface) {
    d.state = starts_with(piece.head, kClientPreface.substr(0, std::min(piece.head.size(), kClientPreface.size())))
                  ? Direction::State::preface
                  : Direction::State::header;
  }
  if (d.state == Direction::State::lost) {
    try_resync(d, piece);
    if (d.state == Direction::State::lost) return lost_bytes(d, piece.length, piece.ts);
  }
  feed_bytes(d, piece.head, piece.position, piece.ts);
  if (const std::uint64_t hole = piece.hole(); hole > 0) gap_bytes(d, hole, piece.ts);
  if (!piece.tail.empty()) feed_bytes(d, piece.tail, piece.end() - piece.tail.size(), piece.ts);
}

void Session::gap(Flow flow, std::uint64_t n, TimestampNs ts) {
  Direction& d = direction(flow);
  if (role_ != Role::unknown && d.state != Direction::State::ended) gap_bytes(d, n, ts);
}

void Session::feed_preface(Direction& d, std::span<const std::uint8_t> bytes, std::size_t& i) {
  while (i < bytes.size() && d.preface_have < kClientPreface.size()) {
    if (bytes[i] != static_cast<std::uint8_t>(kClientPreface[d.preface_have])) {
      sinks_.on_problem(Protocol::http2, SessionProblem::frame_error);
      d.state = Direction::State::lost;
      return;
    }
    ++i;
    ++d.preface_have;
  }
  if (d.preface_have == kClientPreface.size()) d.state = Direction::State::header;
}

void Session::feed_bytes(Direction& d, std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    switch (d.state) {
      case Direction::State::preface:
      case Direction::State::maybe_preface: feed_preface(d, bytes, i); break;
      case Direction::State::header: {
        const std::size_t take = std::min(kFrameHeaderBytes - d.header_have, bytes.size() - i);
        std::memcpy(d.header + d.header_have, bytes.data() + i, take);
        d.header_have += take;
        i += take;
        if (d.header_have == kFrameHeaderBytes) begin_frame(d, ts);
        break;
      }
      case Direction::State::payload: {
        const std::size_t take =
            static_cast<std::size_t>(std::min<std::uint64_t>(d.frame.length - d.frame_off, bytes.size() - i));
        frame_payload(d, bytes.subspan(i, take), position + i, ts);
        i += take;
        if (d.frame_off == d.frame.length) end_frame(d, ts);
        break;
      }
      case Direction::State::lost:
      case Direction::State::ended: return;
    }
  }
}

// A hole inside a frame's payload is that frame's; one that reaches a frame
// header loses the direction's frames (nothing after it is guessed).
void Session::gap_bytes(Direction& d, std::uint64_t n, TimestampNs ts) {
  if (d.state == Direction::State::ended) return;
  if (d.state == Direction::State::lost) return lost_bytes(d, n, ts);
  if (d.state != Direction::State::payload) {
    lose_sync(d);
    return lost_bytes(d, n, ts);
  }
  const std::uint64_t left = d.frame.length - d.frame_off;
  const std::uint64_t in_frame = std::min(n, left);
  if (d.frame.frame_type() == FrameType::data) {
    data_gap(d, in_frame, ts);
  } else {
    d.frame_lost = true;
  }
  d.frame_off += in_frame;
  if (d.frame_off == d.frame.length) end_frame(d, ts);
  if (n > left) {
    lose_sync(d);
    lost_bytes(d, n - left, ts);
  }
}

// Bytes of a direction whose frames cannot be read: which stream they were
// is unknown, so every stream whose response is open counts them as a hole
// (its counts become lower bounds; an event they cut is truncated).
void Session::lost_bytes(Direction& d, std::uint64_t n, TimestampNs ts) {
  if (n == 0 || is_requests(d)) return;
  for (auto& [id, s] : streams_) {
    if (s->events) s->events->gap(n, ts);
  }
}

void Session::lose_sync(Direction& d) {
  sinks_.on_problem(Protocol::http2, SessionProblem::desynchronised);
  if (is_requests(d)) requests_lost_ = true;
  d.state = Direction::State::lost;
  d.header_have = 0;
  d.in_block = false;
  d.block.clear();
  d.hpack.lose_state();  // blocks will go by unseen
  windows_known_ = false;
}

// A piece that begins with a frame header of a stream followed (or a
// connection frame) lets a lost direction read frames again.
void Session::try_resync(Direction& d, const Piece& piece) {
  if (piece.head.size() < kFrameHeaderBytes) return;
  const FrameHeader h = parse_frame_header(piece.head);
  if (!plausible(h, d.max_frame)) return;
  const bool known_stream = h.stream_id != 0 && find(h.stream_id) != nullptr;
  const bool connection_frame = h.stream_id == 0 && h.frame_type() != FrameType::settings;
  if (!known_stream && !connection_frame) return;
  if (h.frame_type() == FrameType::continuation) return;  // its block's start went by
  d.state = Direction::State::header;
  d.header_have = 0;
  sinks_.on_problem(Protocol::http2, SessionProblem::resynchronised);
}

void Session::begin_frame(Direction& d, TimestampNs ts) {
  d.header_have = 0;
  d.frame = parse_frame_header({d.header, kFrameHeaderBytes});
  d.frame_off = 0;
  d.frame_lost = false;
  d.payload.clear();
  if (d.frame.length > d.max_frame || (d.in_block && d.frame.frame_type() != FrameType::continuation)) {
    sinks_.on_problem(Protocol::http2, SessionProblem::frame_error);
    return lose_sync(d);
  }
  d.state = Direction::State::payload;
  if (d.frame.frame_type() == FrameType::data) {
    d.data_begin = d.frame.has(flags::kPadded) ? 1 : 0;
    d.data_end = d.frame.length;
    d.pad_unknown = d.frame.has(flags::kPadded);
    if (!is_requests(d)) {
      const bool connection_was_open = connection_window_ > 0;
      connection_window_ -= d.frame.length;
      // Every stream waits on the connection window only when it closes.
      const bool connection_closed = connection_was_open && connection_window_ <= 0;
      if (Stream* s = find(d.frame.stream_id)) {
        ++s->stats.data_frames;
        s->window -= d.frame.length;
        // A frame that ends its stream leaves that stream nothing to send.
        const std::uint32_t ending = d.frame.has(flags::kEndStream) ? s->id : 0;
        if (connection_closed) {
          note_all_windows(ts, ending);
        } else if (!ending) {
          note_windows(*s, ts);
        }
      } else if (connection_closed) {
        note_all_windows(ts);
      }
    }
  }
  if (d.frame.length == 0) end_frame(d, ts);
}

void Session::frame_payload(Direction& d, std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts) {
  if (d.frame.frame_type() == FrameType::data) return data_payload(d, bytes, position, ts);
  const bool header_part =
      d.frame.frame_type() == FrameType::headers || d.frame.frame_type() == FrameType::continuation;
  const std::size_t bound = header_part ? kMaxHeaderBlock : kMaxControlPayload;
  const std::size_t room = bound - std::min(bound, d.payload.size());
  if (bytes.size() > room) d.frame_lost = d.frame_lost || header_part;
  d.payload.append(reinterpret_cast<const char*>(bytes.data()), std::min(room, bytes.size()));
  d.frame_off += bytes.size();
}

void Session::end_frame(Direction& d, TimestampNs ts) {
  d.state = Direction::State::header;
  switch (d.frame.frame_type()) {
    case FrameType::data: end_data(d, ts); break;
    case FrameType::headers:
    case FrameType::continuation: header_fragment(d, ts); break;
    case FrameType::settings: settings(d, ts); break;
    case FrameType::window_update: window_update(d, ts); break;
    case FrameType::rst_stream: rst_stream(d, ts); break;
    case FrameType::goaway: goaway(d, ts); break;
    case FrameType::push_promise:
      // Its block changes the sender's HPACK table, and it is not read here.
      d.hpack.lose_state();
      break;
    case FrameType::priority:
    case FrameType::ping: break;
  }
  d.payload.clear();
}

// ---- DATA -----------------------------------------------------------------------

void Session::data_payload(Direction& d, std::span<const std::uint8_t> bytes, std::uint64_t position, TimestampNs ts) {
  std::uint64_t off = d.frame_off;
  d.frame_off += bytes.size();
  if (d.pad_unknown && off == 0 && !bytes.empty()) {
    const std::uint8_t pad = bytes[0];
    d.pad_unknown = false;
    if (pad >= d.frame.length) {
      sinks_.on_problem(Protocol::http2, SessionProblem::frame_error);
      d.data_end = 0;  // all padding: nothing of it is body
    } else {
      d.data_end = d.frame.length - pad;
    }
  }
  const std::uint64_t begin = std::max(off, d.data_begin);
  const std::uint64_t end = std::min(off + bytes.size(), d.data_end);
  if (begin >= end) return;
  const auto data = bytes.subspan(static_cast<std::size_t>(begin - off), static_cast<std::size_t>(end - begin));
  Stream* s = find(d.frame.stream_id);
  if (!s && !is_requests(d) && off == d.data_begin && may_join(d.frame.stream_id)) s = open_stream(d.frame.stream_id, true);
  if (!s) return;
  if (is_requests(d)) return request_data(*s, data, data.size());
  if (!s->response_started) start_joined_response(*s, data, ts);
  // Through sink(): the caller learns which stream the piece reached.
  if (s->events && sink(*s)) s->events->body(data, position + (begin - off), ts);
}

void Session::data_gap(Direction& d, std::uint64_t n, TimestampNs ts) {
  const std::uint64_t off = d.frame_off;
  if (d.pad_unknown && off == 0) {
    // The pad length went by: the rest of the frame counts as body not captured.
    d.pad_unknown = false;
    d.data_end = d.frame.length;
  }
  const std::uint64_t begin = std::max(off, d.data_begin);
  const std::uint64_t end = std::min(off + n, d.data_end);
  if (begin >= end) return;
  Stream* s = find(d.frame.stream_id);
  if (!s) return;
  if (is_requests(d)) return request_data(*s, {}, end - begin);
  if (s->events && sink(*s)) s->events->gap(end - begin, ts);
}

void Session::end_data(Direction& d, TimestampNs ts) {
  if (!d.frame.has(flags::kEndStream)) return;
  Stream* s = find(d.frame.stream_id);
  if (!s) return;
  if (is_requests(d)) return end_request(*s, ts);
  end_stream_of(*s, ts, ResponseEnd::complete);
}

void Session::request_data(Stream& s, std::span<const std::uint8_t> bytes, std::uint64_t n) {
  s.request.body_bytes += n;
  std::string& body = s.request.body_head;
  const std::size_t room = request_body_head_ - std::min(body.size(), request_body_head_);
  body.append(reinterpret_cast<const char*>(bytes.data()), std::min(room, bytes.size()));
}

void Session::end_request(Stream& s, TimestampNs ts) {
  if (s.request_ended) return;
  s.request_ended = true;
  s.request.complete = true;
  s.request.end_ns = ts;
  if (ExchangeSink* out = sink(s)) out->on_request_end(s.request);
}

// ---- header blocks --------------------------------------------------------------

// HEADERS opens a block (its padding and priority stripped), CONTINUATION
// adds to it; END_HEADERS decodes it.
void Session::header_fragment(Direction& d, TimestampNs ts) {
  const FrameHeader& f = d.frame;
  std::string_view fragment = d.payload;
  if (f.frame_type() == FrameType::headers) {
    d.in_block = true;
    d.block.clear();
    d.block_stream = f.stream_id;
    d.block_end_stream = f.has(flags::kEndStream);
    d.block_lost = false;
    std::size_t pad = 0, skip = 0;
    if (f.has(flags::kPadded)) {
      pad = fragment.empty() ? 0 : static_cast<std::uint8_t>(fragment[0]);
      skip = 1;
    }
    if (f.has(flags::kPriority)) skip += 5;
    if (skip + pad > f.length) {
      sinks_.on_problem(Protocol::http2, SessionProblem::frame_error);
      d.block_lost = true;
    } else if (!d.frame_lost) {
      fragment = fragment.substr(std::min(skip, fragment.size()));
      fragment = fragment.substr(0, fragment.size() - std::min(pad, fragment.size()));
    }
  } else if (!d.in_block || f.stream_id != d.block_stream) {
    sinks_.on_problem(Protocol::http2, SessionProblem::frame_error);
    return;
  }
  if (d.frame_lost) d.block_lost = true;
  if (d.block.size() + fragment.size() > kMaxHeaderBlock) {
    if (!d.block_lost) sinks_.on_problem(Protocol::http2, SessionProblem::header_block_too_large);
    d.block_lost = true;
  }
  if (!d.block_lost) d.block.append(fragment);
  if (f.has(flags::kEndHeaders)) header_block(d, ts);
}

void Session::header_block(Direction& d, TimestampNs ts) {
  d.in_block = false;
  HeaderFields fields;
  bool decoded = false;
  if (!d.block_lost) {
    decoded = decode_fields(d.hpack, as_bytes(d.block), is_requests(d), fields);
  } else {
    d.hpack.lose_state();
  }
  if (!decoded) sinks_.on_problem(Protocol::http2, SessionProblem::header_block_lost);
  d.block.clear();
  Stream* s = find(d.block_stream);
  if (is_requests(d)) {
    if (!s && d.block_stream > highest_opened_) {
      if (!first_opened_) first_opened_ = d.block_stream;
      s = open_stream(d.block_stream, false);
    }
    if (s) request_headers(*s, decoded ? &fields : nullptr, d.block_end_stream, ts);
    return;
  }
  if (!s) {
    if (may_join(d.block_stream)) {
      s = open_stream(d.block_stream, true);
    } else if (request_went_unseen(d.block_stream)) {
      s = open_stream(d.block_stream, false);
      if (s) s->request_unread = true;
    }
  }
  if (s) response_headers(*s, decoded ? &fields : nullptr, d.block_end_stream, ts);
}

void Session::request_headers(Stream& s, const HeaderFields* fields, bool end_stream, TimestampNs ts) {
  if (!s.request_seen) {
    s.request_seen = true;
    s.request.method = fields ? fields->method : "";
    s.request.target = fields ? fields->path : "";  // unknown: never guessed
    s.request.start_ns = ts;
    s.request_unread = !fields;
  }
  if (end_stream) end_request(s, ts);
}

// The first block is the head (after any 1xx), a later one the trailers.
void Session::response_headers(Stream& s, const HeaderFields* fields, bool end_stream, TimestampNs ts) {
  if (!s.response_head_seen) {
    const int code = fields ? decimal(fields->status) : 0;
    if (code >= 100 && code < 200 && !end_stream) return;  // interim
    s.response_head_seen = true;
    s.headers_unknown = !fields;
    s.pending = {};
    s.pending.head_ns = ts;
    if (fields) {
      s.pending.status = std::max(code, 0);
      s.pending.content_type = fields->type;
      s.pending.content_encoding = parse_content_encoding(fields->encoding);
      start_response(s, ts);
    }
  } else if (fields && !fields->grpc_status.empty()) {
    if (const int code = decimal(fields->grpc_status); code >= 0) s.stats.grpc_status = code;
  }
  if (end_stream) end_stream_of(s, ts, ResponseEnd::complete);
}

// ---- streams --------------------------------------------------------------------

// A stream not seen opening may be one that began before the agent joined:
// only on a connection joined mid-way, below the first stream seen opening,
// and not one already closed.
bool Session::may_join(std::uint32_t id) const {
  if (from_start_ || (first_opened_ && id >= first_opened_)) return false;
  return std::find(closed_.begin(), closed_.end(), id) == closed_.end();
}

// A response to a client stream not seen opening, after the requests' frames
// were lost for a while: its request went by in the hole.
bool Session::request_went_unseen(std::uint32_t id) const {
  if (!requests_lost_ || (id & 1) == 0 || id <= highest_opened_) return false;
  return std::find(closed_.begin(), closed_.end(), id) == closed_.end();
}

ExchangeSink* Session::sink(const Stream& s) { return sinks_.exchange(s.id); }

Session::Stream* Session::find(std::uint32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

Session::Stream* Session::open_stream(std::uint32_t id, bool joined) {
  if (streams_.size() >= kMaxStreams) {
    sinks_.on_problem(Protocol::http2, SessionProblem::exchanges_over_limit);
    return nullptr;
  }
  highest_opened_ = std::max(highest_opened_, id);
  auto& slot = streams_[id];
  slot = std::make_unique<Stream>(id);
  slot->joined = joined;
  slot->window = initial_window_;
  return slot.get();
}

namespace {

ResponseInfo base_info(const ResponseInfo& head, std::uint64_t exchange, std::uint32_t id) {
  ResponseInfo info;
  info.exchange = exchange;
  info.status = head.status;
  info.content_type = head.content_type;
  info.content_encoding = head.content_encoding;
  info.head_ns = head.head_ns;
  info.framing = BodyFraming::until_close;  // a stream's body ends with END_STREAM
  info.http_version = HttpVersion::http2;
  info.h2_stream_id = id;
  return info;
}

}  // namespace

void Session::start_response(Stream& s, TimestampNs) {
  ExchangeSink* out = sink(s);
  if (!out) return;
  ResponseInfo info = base_info(s.pending, responses_++, s.id);
  if (s.request_seen) info.request = &s.request;
  // Its path and method are unknown when its request's block went unread.
  info.headers_unknown = s.request_unread;
  s.headers_unknown = s.request_unread;
  if (formats_) {
    info.declared = match_declared(*formats_, s.request_seen ? std::string_view(s.request.target) : "",
                                   media_type(info.content_type));
  }
  BodyTraits traits;
  traits.status = info.status;
  traits.media = media_type(info.content_type);
  traits.streamed = true;
  traits.event_stream = traits.media == "text/event-stream";
  traits.encoding = info.content_encoding;
  traits.declared = info.declared.get();
  s.response_started = true;
  s.events = std::make_unique<BodyEvents>(*out, decoder_limits_);
  s.events->start(std::move(info), body_event_kind(traits), false);
}

// A stream whose head was not read (joined, or headers unknown): its first
// DATA bytes say whether it is SSE or JSON lines; nothing else is guessed.
void Session::start_joined_response(Stream& s, std::span<const std::uint8_t> first_bytes, TimestampNs ts) {
  ExchangeSink* out = sink(s);
  if (!out) return;
  if (!s.response_head_seen) s.pending.head_ns = ts;
  s.response_head_seen = true;  // a HEADERS after its DATA is its trailers
  ResponseInfo info = base_info(s.pending, responses_++, s.id);
  info.joined_midstream = s.joined;
  info.headers_unknown = true;
  if (s.request_seen) info.request = &s.request;
  const BodyEventKind kind = s.pending.content_encoding == ContentEncoding::identity ? joined_kind(first_bytes)
                                                                                    : BodyEventKind::none;
  s.headers_unknown = true;
  s.response_started = true;
  s.events = std::make_unique<BodyEvents>(*out, decoder_limits_);
  s.events->start(std::move(info), kind, true);
}

void Session::end_stream_of(Stream& s, TimestampNs ts, ResponseEnd how) {
  const std::uint32_t id = s.id;
  if (s.blocked_since) {
    ++s.stats.window_zero_episodes;
    s.stats.window_zero_ns += ts - std::min(ts, s.blocked_since);
    if (s.stats.window_zero.size() < Http2StreamStats::kMaxEpisodes) s.stats.window_zero.emplace_back(s.blocked_since, ts);
    s.blocked_since = 0;
  }
  if (ExchangeSink* out = s.response_started ? sink(s) : nullptr) {
    if (s.events) s.events->finish(ts, how);
    out->on_h2_stream(s.stats);
    out->on_response_end(ts, how);
  }
  streams_.erase(id);
  closed_.push_back(id);
  if (closed_.size() > kClosedRemembered) closed_.pop_front();
  sinks_.exchange_closed(id);
}

void Session::abandon(std::uint64_t id, TimestampNs ts) {
  if (id > UINT32_MAX) return;  // not a stream id
  if (Stream* s = find(static_cast<std::uint32_t>(id))) end_stream_of(*s, ts, ResponseEnd::cut_short);
}

void Session::close_streams_above(std::uint32_t last_id, TimestampNs ts) {
  std::vector<std::uint32_t> ids;
  for (const auto& [id, s] : streams_) {
    if (id > last_id) ids.push_back(id);
  }
  for (std::uint32_t id : ids) end_stream_of(*find(id), ts, ResponseEnd::goaway);
}

void Session::end(Flow flow, TimestampNs ts) {
  Direction& d = direction(flow);
  if (role_ == Role::unknown || d.state == Direction::State::ended) return;
  d.state = Direction::State::ended;
  // The responses' direction ended: no stream can end whole any more.
  if (carries_responses(flow)) {
    while (!streams_.empty()) end_stream_of(*streams_.begin()->second, ts, ResponseEnd::cut_short);
  }
}

void Session::close(TimestampNs ts) {
  if (role_ == Role::unknown) return;
  end(Flow::outbound, ts);
  end(Flow::inbound, ts);
  while (!streams_.empty()) end_stream_of(*streams_.begin()->second, ts, ResponseEnd::cut_short);
}

// ---- control frames -------------------------------------------------------------

// A direction's SETTINGS govern what its sender receives: the other
// direction's header table and frame size, and (sent by the client) the
// response sender's initial stream window.
void Session::settings(Direction& d, TimestampNs ts) {
  if (d.frame.has(flags::kAck)) return;
  if (d.frame_lost) {
    windows_known_ = false;
    return;
  }
  Direction& other = &d == outbound_.get() ? *inbound_ : *outbound_;
  for (std::size_t i = 0; i + 6 <= d.payload.size(); i += 6) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(d.payload.data() + i);
    const std::uint16_t id = static_cast<std::uint16_t>((p[0] << 8) | p[1]);
    const std::uint32_t value = read_u32(p + 2);
    if (id == settings::kHeaderTableSize) other.hpack.set_max_table(value);
    if (id == settings::kMaxFrameSize && value >= kDefaultMaxFrame && value <= kLargestMaxFrame) other.max_frame = value;
    if (id == settings::kInitialWindowSize && is_requests(d) && value <= kLargestWindow) {
      const std::int64_t delta = std::int64_t{value} - initial_window_;
      initial_window_ = value;
      for (auto& [sid, s] : streams_) s->window += delta;
      note_all_windows(ts);
    }
  }
}

// Credit the receiver (the requests' direction) gives the response sender.
void Session::window_update(Direction& d, TimestampNs ts) {
  if (!is_requests(d)) return;
  if (d.frame_lost || d.payload.size() < 4) {
    windows_known_ = false;
    return;
  }
  const std::int64_t increment = read_u32(reinterpret_cast<const std::uint8_t*>(d.payload.data())) & 0x7fffffffu;
  if (d.frame.stream_id == 0) {
    const bool was_closed = connection_window_ <= 0;
    connection_window_ = std::min(connection_window_ + increment, kLargestWindow);
    if (was_closed && connection_window_ > 0) note_all_windows(ts);
  } else if (Stream* s = find(d.frame.stream_id)) {
    s->window = std::min(s->window + increment, kLargestWindow);
    note_windows(*s, ts);
  }
}

void Session::rst_stream(Direction& d, TimestampNs ts) {
  if (Stream* s = find(d.frame.stream_id)) end_stream_of(*s, ts, ResponseEnd::reset);
}

void Session::goaway(Direction& d, TimestampNs ts) {
  if (d.frame_lost || d.payload.size() < 8) return;
  close_streams_above(read_u32(reinterpret_cast<const std::uint8_t*>(d.payload.data())) & 0x7fffffffu, ts);
}

// A stream is blocked while its window or the connection's is at or below 0.
void Session::note_windows(Stream& s, TimestampNs ts) {
  if (!windows_known_) return;
  const bool stream_zero = s.window <= 0;
  const bool connection_zero = connection_window_ <= 0;
  const bool blocked = stream_zero || connection_zero;
  if (blocked && !s.blocked_since) {
    s.blocked_since = ts;
    using Scope = Http2StreamStats::Scope;
    const Scope now = stream_zero && connection_zero ? Scope::both : stream_zero ? Scope::stream : Scope::connection;
    Scope& scope = s.stats.window_scope;
    scope = scope == Scope::none || scope == now ? now : Scope::both;
  } else if (!blocked && s.blocked_since) {
    ++s.stats.window_zero_episodes;
    s.stats.window_zero_ns += ts - std::min(ts, s.blocked_since);
    if (s.stats.window_zero.size() < Http2StreamStats::kMaxEpisodes) s.stats.window_zero.emplace_back(s.blocked_since, ts);
    s.blocked_since = 0;
  }
}

void Session::note_all_windows(TimestampNs ts, std::uint32_t ending) {
  for (auto& [id, s] : streams_) {
    if (id != ending) note_windows(*s, ts);
  }
}

}  // namespace infertap::protocol::http2
