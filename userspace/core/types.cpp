#include "core/types.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cstdio>

namespace infertap::core {

std::string_view to_string(Vantage v) {
  switch (v) {
    case Vantage::unknown: return "unknown";
    case Vantage::emit: return "emit";
    case Vantage::read: return "read";
    case Vantage::acked: return "acked";
  }
  return "unknown";
}

Vantage vantage_of(Role r) {
  switch (r) {
    case Role::server: return Vantage::emit;
    case Role::client: return Vantage::read;
    case Role::unknown: break;
  }
  return Vantage::unknown;
}

void ArrivalLog::add(std::uint32_t seq, TimestampNs ts) {
  if (arrivals_.size() >= kMax) arrivals_.pop_front();
  arrivals_.emplace_back(seq, ts);
}

TimestampNs ArrivalLog::arrival_for(std::uint32_t end_seq) {
  while (!arrivals_.empty() && !seq_leq(end_seq, arrivals_.front().first)) arrivals_.pop_front();
  return arrivals_.empty() ? 0 : arrivals_.front().second;
}

void mark_acked(std::vector<TimelineEvent>& timeline, std::size_t& cursor, std::uint32_t ack_seq, TimestampNs ts) {
  for (; cursor < timeline.size(); ++cursor) {
    TimelineEvent& e = timeline[cursor];
    if (e.end_seq && !seq_leq(e.end_seq, ack_seq)) break;
    if (e.end_seq && !e.acked_ns) e.acked_ns = ts;
  }
}

std::string_view to_string(TokenSource s) {
  switch (s) {
    case TokenSource::events: return "events";
    case TokenSource::usage: return "usage";
    case TokenSource::messages: return "messages";
    case TokenSource::audio: return "audio";
  }
  return "events";
}

std::string_view to_string(GatewayLeg::Side s) {
  return s == GatewayLeg::Side::upstream ? "upstream" : "downstream";
}

const StallVerdict& verdict_at(const std::vector<StallVerdict>& verdicts, std::size_t i) {
  static const StallVerdict kNone;
  return i < verdicts.size() ? verdicts[i] : kNone;
}

const PathView& path_view_of(const StreamRecord& r) {
  static const PathView kNone;
  return r.path_view ? *r.path_view : kNone;
}

std::size_t TimelineTail::held_bytes() const {
  return gaps.capacity() * sizeof(gaps[0]) + long_gaps.capacity() * sizeof(long_gaps[0]) +
         unobserved.capacity() * sizeof(unobserved[0]);
}

// Capacities, not sizes: what the allocator handed out. Strings of the
// request and response (bounded, small) count by their own capacity.
std::size_t held_bytes(const StreamRecord& r) {
  const TcpContext& t = r.tcp;
  return sizeof(StreamRecord) + r.timeline.capacity() * sizeof(TimelineEvent) + r.tail.held_bytes() +
         r.body_holes.capacity() * sizeof(BodyHole) +
         (t.eagain_ns.capacity() + t.retransmit_ns.capacity()) * sizeof(TimestampNs) +
         (t.send_buffer_full_at.capacity() + t.zero_window.capacity()) * 16 + r.method.capacity() +
         r.path.capacity() + r.model.capacity() + r.request_model.capacity() + r.content_type.capacity() +
         r.response_id.capacity() + r.finish_reason.capacity() + r.error_type.capacity();
}

std::string_view to_string(StreamEnd e) {
  switch (e) {
    case StreamEnd::complete: return "complete";
    case StreamEnd::connection_closed: return "connection_closed";
    case StreamEnd::idle_timeout: return "idle_timeout";
    case StreamEnd::agent_stopped: return "agent_stopped";
    case StreamEnd::evicted: return "evicted";
    case StreamEnd::protocol_error: return "protocol_error";
    case StreamEnd::stream_reset: return "stream_reset";
    case StreamEnd::goaway: return "goaway";
    case StreamEnd::evicted_memory: return "evicted_memory";
  }
  return "unknown";
}

std::string_view to_string(StallCause c) {
  switch (c) {
    case StallCause::none: return "none";
    case StallCause::model: return "model";
    case StallCause::gateway_buffering: return "gateway_buffering";
    case StallCause::backpressure: return "backpressure";
    case StallCause::network: return "network";
    case StallCause::client_read: return "client_read";
    case StallCause::upstream: return "upstream";
  }
  return "none";
}

bool on_the_path(StallCause c) {
  return c == StallCause::gateway_buffering || c == StallCause::backpressure || c == StallCause::network ||
         c == StallCause::client_read;
}

std::string stream_id(const StreamRecord& r) {
  return std::to_string(r.conn.generation) + "-" + std::to_string(r.stream_seq);
}

std::uint64_t tls_handshake_ns(const StreamRecord& r) {
  const TimestampNs start = r.conn.tls_start_ns;
  if (!r.conn.tls || r.stream_seq != 0 || !start || r.request_start_ns <= start) return 0;
  return r.request_start_ns - start;
}

std::string_view to_string(Transport t) { return t == Transport::unix_stream ? "unix" : "tcp"; }

namespace {

// A sun_path for people: up to its NUL (a file name), or "@" and the rest
// (an abstract name); control bytes written \xNN.
std::string unix_path_text(std::string_view path) {
  if (path.empty()) return "*";
  std::string out;
  if (path.front() == '\0') {
    out = "@";
    path.remove_prefix(1);
  } else {
    path = path.substr(0, path.find('\0'));
  }
  for (const char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      char esc[5];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

std::string Endpoint::to_string() const {
  if (family == AF_UNIX) return "unix:" + unix_path_text(path);
  char buf[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET6) {
    inet_ntop(AF_INET6, addr.data(), buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(port);
  }
  inet_ntop(AF_INET, addr.data(), buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(port);
}

}  // namespace infertap::core
