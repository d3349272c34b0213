// Value types of the stream pipeline: who a connection is, what a finished
// stream record holds. Plain data; produced by core/, rendered by output/.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "core/counters.h"
#include "core/load.h"
#include "protocol/exchange.h"
#include "protocol/payload/declared.h"
#include "protocol/payload/interpreter.h"

namespace infertap::core {

using TimestampNs = base::TimestampNs;  // CLOCK_MONOTONIC nanoseconds

// Which end of the exchange the traced process is on this connection.
using protocol::Role;
using protocol::to_string;

// Where an event's time was taken (docs/metrics.md#vantages): a sender's send
// exits, a receiver's receive exits, the peer kernel's ACKs.
enum class Vantage : std::uint8_t { unknown, emit, read, acked };
std::string_view to_string(Vantage v);
// The vantage a record's own event times are taken at: emit for a server, read for a client.
Vantage vantage_of(Role r);

// What carried a connection's bytes.
enum class Transport : std::uint8_t { tcp, unix_stream };
std::string_view to_string(Transport t);  // "tcp", "unix"

struct Endpoint {
  // AF_UNIX: the socket's kernel address in the first 8 bytes (the peer's,
  // for a remote endpoint), so the two ends of one unix connection meet as
  // reversed endpoints, like a TCP 4-tuple; the rest 0.
  std::array<std::uint8_t, 16> addr{};
  std::uint16_t port = 0;
  std::uint16_t family = 0;  // AF_INET / AF_INET6 / AF_UNIX
  std::string path;          // AF_UNIX: sun_path bytes when known (abstract: a leading NUL)
  // "127.0.0.1:8000" / "[::1]:8000"; "unix:/run/app.sock", "unix:@name"
  // (abstract), "unix:*" (no name, or not known: as ss -x shows it)
  std::string to_string() const;
};

struct ConnIdentity {
  std::uint64_t sock_id = 0;     // kernel socket address (opaque)
  std::uint64_t generation = 0;  // bumps each time a socket address is reused
  std::uint32_t pid = 0;
  std::int32_t fd = -1;
  std::string comm;
  std::uint64_t cgroup_id = 0;
  std::string cgroup_path;  // from /proc/<pid>/cgroup when known
  // Workload identity from the cgroup path and the node's pod directory; empty when unknown.
  std::string container_id;   // full id (64 hex for docker/containerd/cri-o)
  std::string pod_uid;        // Kubernetes pod UID, with dashes
  std::string k8s_namespace, k8s_pod, k8s_container;
  Endpoint local;
  Endpoint remote;
  Transport transport = Transport::tcp;
  // AF_UNIX: the process at the other end (SO_PEERCRED: the one that
  // connected, or the listener's for the connecting side); 0 = unknown.
  std::uint32_t peer_pid = 0;
  std::string peer_comm;
  std::uint32_t inode = 0;  // AF_UNIX: the socket's inode (ss -x, /proc/PID/fd)
  TimestampNs first_seen_ns = 0;
  // A TLS connection: its bytes are the plaintext of a TLS library's calls.
  bool tls = false;
  std::string tls_library;      // `openssl-3`, `static:node`; "" when not known
  TimestampNs tls_start_ns = 0; // its first handshake record (0: the agent joined after it)
};

enum class StreamEnd : std::uint8_t {
  complete,           // response message ended (last chunk / close-delimited EOF)
  connection_closed,  // connection ended mid-stream
  idle_timeout,       // no bytes for the stream idle timeout
  agent_stopped,      // agent shut down while the stream was running
  evicted,            // connection table full: oldest connections dropped
  protocol_error,     // framing lost and could not be recovered
  stream_reset,       // HTTP/2: RST_STREAM ended the stream
  goaway,             // HTTP/2: GOAWAY left the stream unprocessed
  evicted_memory,     // streams in flight held more than limits.max_live_stream_bytes: the largest ended early
};
std::string_view to_string(StreamEnd e);

// One SSE event of a stream as seen at this record's vantage.
struct TimelineEvent {
  TimestampNs ts_ns = 0;          // syscall exit that moved the event's last byte
  TimestampNs first_byte_ns = 0;  // syscall exit that moved its first byte
  std::uint64_t offset = 0;       // body offset of the event
  std::uint32_t wire_bytes = 0;
  protocol::EventKind kind = protocol::EventKind::unparsed;
  bool truncated = false;            // not every byte of the event was captured
  std::uint64_t syscall_ns = 0;      // duration of the syscall that completed the event
  std::uint32_t events_in_syscall = 0;  // SSE events completed by that same syscall
  bool more = false;  // that send carried MSG_MORE: the kernel may hold the bytes back
  // TCP sequence just past the event's last byte: exact when the byte was
  // captured, else the end of the syscall that moved it. Joins vantages.
  std::uint32_t end_seq = 0;
  bool end_seq_exact = false;
  // Hash of the event's data, to find the same event on a gateway's other leg
  // (0: not wholly captured). Never output.
  std::uint64_t data_hash = 0;
  // Delivery vantages (0 = not seen). docs/metrics.md#vantages.
  TimestampNs acked_ns = 0;    // sender: the peer's kernel acknowledged the last byte
  TimestampNs arrived_ns = 0;  // receiver: the last byte was queued on this socket
};

// TCP sequence comparison modulo 2^32: a at or before b.
inline bool seq_leq(std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(b - a) >= 0; }

// Marks the sent events an ACK of `ack_seq` covers, from `cursor` on, and
// moves the cursor past them. An event without a sequence (a TLS write whose
// ciphertext was not seen) is never acknowledged and does not hold back the
// ones after it. One definition for the assembler (streams in flight) and the
// path joiner (records waiting for their path).
void mark_acked(std::vector<TimelineEvent>& timeline, std::size_t& cursor, std::uint32_t ack_seq, TimestampNs ts);

// Arrivals at a receiving socket (rcv_nxt after each), oldest first, until a
// read claims them.
class ArrivalLog {
 public:
  void add(std::uint32_t seq, TimestampNs ts);
  // When the byte before `end_seq` arrived (0: unknown). Arrivals that end
  // before it are of no use to later reads either and are dropped.
  TimestampNs arrival_for(std::uint32_t end_seq);

 private:
  static constexpr std::size_t kMax = 4096;  // a reader that stopped reading cannot grow this without end
  std::deque<std::pair<std::uint32_t, TimestampNs>> arrivals_;
};

// An event's times at the other places of its path (0 = not seen): part of
// the record's PathView. Kept out of TimelineEvent, which every event of
// every stream pays for.
struct PathTimes {
  TimestampNs arrived_ns = 0;       // unix receiver: its bytes were queued when the traced sender emitted
                                    // them (a unix socket gives no arrival of its own)
  TimestampNs peer_ns = 0;          // the other end of this TCP connection, when traced: its read (for a
                                    // sender) or its emit (for a receiver)
  TimestampNs peer_arrived_ns = 0;  // sender: when the traced peer's socket got the last byte
  TimestampNs upstream_ns = 0;      // gateway downstream leg: when the gateway read the event upstream
  TimestampNs downstream_ns = 0;    // gateway upstream leg: when the gateway wrote it downstream
  TimestampNs delivered_ns = 0;     // end of the traced path: the final client's read, else the last
                                    // hop's ack
};

// A run of body bytes a call moved but the capture did not copy (the middle
// of a read or write larger than its head and tail): where it starts in the
// body, how many bytes at most (framing it swallowed included) and when the
// call returned. The events inside it were never parsed, yet they moved then:
// a path places another record's event by its body position here.
struct BodyHole {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  TimestampNs ts = 0;
};
// Holes kept per record (the first ones): bounds memory on a stream of many
// large calls; an event in a later hole is not placed by position.
inline constexpr std::size_t kMaxBodyHoles = 64;

// A stream's events past its timeline bound (PipelineConfig::max_timeline_events):
// only what exact aggregates need, 4 bytes per content event instead of a
// TimelineEvent (96 bytes) per event. Filled by the assembler, read by
// record_metrics; never output event by event.
struct TimelineTail {
  static constexpr std::uint32_t kLongGap = 0xffff'ffff;  // the gap is the next entry of long_gaps
  // Content event gaps kept past the timeline (16 MiB): past it the ITL
  // percentiles cover the gaps kept, and the record says itl_truncated.
  static constexpr std::size_t kMaxTailGaps = std::size_t{4} << 20;
  std::uint32_t events = 0;          // events past the timeline, every kind
  std::uint32_t content_events = 0;  // of which content events
  TimestampNs first_token_ns = 0;    // the tail's first content event
  TimestampNs last_token_ns = 0;     // its last
  // ns from each tail content event to the next (kLongGap: >= 4.29 s, in long_gaps).
  std::vector<std::uint32_t> gaps;
  std::vector<std::uint64_t> long_gaps;
  // Content gaps of the whole record (timeline and tail) that span bytes lost
  // between calls, by index, when the gap ends in the tail: not judged stalls.
  std::vector<std::uint32_t> unobserved;
  std::uint64_t max_gap_ns = 0;  // the longest gap ending in the tail, kept or not
  // Heap bytes this tail holds (its vectors' capacity).
  std::size_t held_bytes() const;
};

// Where a stall came from. `none` until diagnosed. `upstream`: the sender is
// not on this host, and no TCP evidence on the reader says network: the
// server or the path before this host, which cannot be told apart from here.
enum class StallCause : std::uint8_t { none, model, gateway_buffering, backpressure, network, client_read, upstream };
std::string_view to_string(StallCause c);
// Did the path on this host cause it (a gateway, a full window, the network,
// the reader), rather than the sender, what lies before it, or nothing known?
bool on_the_path(StallCause c);

// A gap between token events past the stall threshold, as the stream's own
// timeline shows it (core/metrics.h). Its cause is the path's to say.
struct Stall {
  std::uint32_t after_event = 0;  // index (in content events) of the event before the gap
  TimestampNs start_ns = 0;
  std::uint64_t gap_ns = 0;
};

// Why one stall happened (core/path/diagnosis.h): kept beside the stalls it
// judges, one per stall, in the same order.
struct StallVerdict {
  StallCause cause = StallCause::none;
  std::string evidence;  // what decided the cause, for a person
};
// Verdict i of a list (none when the list has no verdict for it).
const StallVerdict& verdict_at(const std::vector<StallVerdict>& verdicts, std::size_t i);

// TCP context of a stream's connection while the stream ran (delivery signals).
struct TcpContext {
  bool signals = false;             // any delivery signal was seen for the socket
  std::uint32_t srtt_us = 0;        // latest smoothed RTT
  std::uint32_t srtt_max_us = 0;
  std::uint32_t retransmits = 0;
  std::uint32_t zero_window_episodes = 0;  // the peer advertised window 0
  std::uint64_t zero_window_ns = 0;
  std::uint32_t send_blocked = 0;   // sends that waited >= 1 ms (send buffer full)
  std::uint64_t send_blocked_ns = 0;
  std::uint32_t eagain = 0;         // non-blocking sends refused for lack of buffer space
  std::vector<TimestampNs> eagain_ns;  // bounded like the evidence below
  // Unix sockets (no window, no timed send start): sends that left the send
  // buffer full, so that the next one waited for the reader or got EAGAIN;
  // when, and how many bytes the reader had not consumed then (bounded).
  std::uint32_t send_buffer_full = 0;
  std::vector<std::pair<TimestampNs, std::uint32_t>> send_buffer_full_at;
  std::uint32_t partial_sends = 0;  // sends that moved fewer bytes than asked
  std::uint32_t buf_limit = 0;      // the protocol's memory limit was hit
  // Evidence for stall diagnosis (bounded: the first kMaxEvidence of each).
  static constexpr std::size_t kMaxEvidence = 256;
  std::vector<TimestampNs> retransmit_ns;
  std::vector<std::pair<TimestampNs, TimestampNs>> zero_window;  // [start, end)
  TimestampNs zero_window_since = 0;  // an episode still open when the record finished
};

// Where a record's token count comes from: the stream's own usage report, or
// the count of its content events.
// messages: gRPC messages counted, one per message (their content is not read).
enum class TokenSource : std::uint8_t { events, usage, messages, audio };
std::string_view to_string(TokenSource s);

struct StreamMetrics {
  std::optional<std::uint64_t> ttft_ns;  // first token - request end
  std::optional<std::uint64_t> e2e_ns;   // last event - request end
  std::uint64_t tokens = 0;
  TokenSource token_source = TokenSource::events;
  // Bytes of the body went by without capture (bytes_lost, bytes_not_captured):
  // event counts, and a token count taken from them, are lower bounds, and a
  // rate from them is unknown (tokens_per_s null unless usage gave the count).
  bool counts_lower_bound = false;
  std::uint32_t content_events = 0;
  std::uint32_t events = 0;
  std::optional<double> tokens_per_s;  // streaming token rate (after the first token)
  std::optional<std::uint64_t> itl_p50_ns, itl_p95_ns, itl_p99_ns, itl_max_ns;
  std::optional<std::uint64_t> longest_pause_ns;  // == itl_max_ns (named for readers)
  // ITL percentiles and stalls cover the first kMaxTailGaps content events past
  // the timeline only (counts, rate, e2e and the longest pause stay exact).
  bool itl_truncated = false;
  std::vector<Stall> stalls;
  std::uint64_t stall_threshold_ns = 0;
};

// The stream as its final client got it, measured at the last vantage of the
// traced path (a local client's reads, else the last hop's ACKs).
struct Delivery {
  Vantage vantage = Vantage::unknown;  // read (a local client's reads) or acked (the last hop's ACKs)
  std::string path;     // hops, e.g. "server>gateway(nginx)>client"
  StreamMetrics metrics;  // TTFT from the server's request end, ITL between delivered token events
  std::vector<StallVerdict> stall_causes;  // one per metrics.stalls
  std::optional<std::uint64_t> ttft_added_ns;     // delivered TTFT - emitted TTFT
  std::optional<std::int64_t> itl_p99_added_ns;   // delivered ITL p99 - emitted ITL p99
  std::optional<std::int64_t> longest_pause_added_ns;
  std::uint32_t max_burst = 0;  // most token events delivered within 1 ms of each other
  // Where the first token spent the time between its emit and its delivery
  // (the hop that added most), when TTFT grew by the stall floor or more.
  StallCause ttft_cause = StallCause::none;
  std::string ttft_evidence;
  // Delivery lag: per token event, delivered - emitted. A client that reads
  // slower than the server writes never leaves a long gap, but each event
  // reaches it later than the one before (docs/metrics.md#delivery-lag).
  std::optional<std::uint64_t> lag_p50_ns, lag_p99_ns, lag_max_ns;
  std::optional<std::uint64_t> lag_last_ns;   // at the last token event
  std::optional<std::int64_t> lag_growth_ns;  // lag at the last token - the stream's early lag
  // How fast the end of the path took the stream in against how fast the
  // server wrote it (1: kept up); null over fewer than 10 token events.
  std::optional<double> reader_rate_ratio;
  // Set when the client read slower than the server wrote (rate <= 0.9) and
  // fell behind; the stream is degraded by it once the growth reaches the lag floor.
  StallCause lag_cause = StallCause::none;
  std::string lag_evidence;
  bool degraded_by_path = false;
  std::string degraded_reason;
};

// A gateway's view of the stream it relays (set on both legs).
struct GatewayLeg {
  enum class Side : std::uint8_t { downstream, upstream };  // to the client / from the server
  Side leg = Side::downstream;
  std::string peer_stream_id;  // the other leg's stream_id
  std::string upstream, downstream;  // endpoints of the two legs (remote addresses)
  std::uint32_t events_matched = 0;  // events found on both legs
  std::optional<std::uint64_t> delay_p50_ns, delay_p99_ns, delay_max_ns;  // downstream emit - upstream read
  std::uint32_t max_events_per_send = 0;
  bool buffering = false;
};
std::string_view to_string(GatewayLeg::Side s);

// What a record's path on this host says of it (core/path/): the output of
// the path stage, made once when the record's group is released.
struct PathView {
  // The stream_id of the most upstream record of its joined path (the
  // server's, else a gateway's upstream leg), the same on every record of the
  // group; "" when the record was joined to none. Exporters key the path on
  // it (one trace per path) although each record sees only its neighbours.
  std::string root;
  std::string peer_stream_id;               // the traced other end of this connection
  std::vector<PathTimes> times;             // per timeline event; empty when nothing past this socket was seen
  std::vector<StallVerdict> stall_causes;   // one per metrics.stalls of the record
  std::optional<Delivery> delivery;         // server/gateway records: the client-observed view
  std::optional<GatewayLeg> gateway;        // a gateway's leg: the other leg and its delays
};

struct StreamRecord {
  ConnIdentity conn;
  Role role = Role::unknown;
  std::uint64_t stream_seq = 0;  // per connection: 0 for the first response
  // Request (absent when the stream was joined mid-way).
  std::string method, path, model, request_model;
  std::optional<bool> request_stream;
  TimestampNs request_start_ns = 0;  // first request byte moved
  TimestampNs request_end_ns = 0;    // last request byte moved (TTFT origin)
  // Response.
  int status = 0;
  std::string content_type;
  protocol::BodyFraming framing = protocol::BodyFraming::none;
  protocol::ContentEncoding content_encoding = protocol::ContentEncoding::identity;
  // Set when a compressed body could not be decoded past some point: the
  // record holds the events decoded before it (docs/schema.md).
  std::optional<protocol::ExchangeSink::Undecodable> decode_error;
  protocol::EventFraming event_framing = protocol::EventFraming::sse;  // how its events were delimited
  protocol::Dialect dialect = protocol::Dialect::unknown;
  // The declared format that read its events (dialect declared); shared with
  // the configuration, never output but for its name.
  std::shared_ptr<const protocol::DeclaredFormat> declared;
  std::string response_id;
  std::string finish_reason;
  std::string error_type;
  TimestampNs response_head_ns = 0;
  TimestampNs first_event_ns = 0;
  TimestampNs first_token_ns = 0;
  TimestampNs last_token_ns = 0;
  TimestampNs last_event_ns = 0;
  TimestampNs end_ns = 0;
  StreamEnd end = StreamEnd::complete;
  bool joined_midstream = false;  // agent started after the stream did
  // HTTP/2 (docs/schema.md#http2): which stream of the connection, whether its
  // header block could be read, its DATA frames, the trailers' grpc-status,
  // and the receiver-granted flow-control window at 0.
  protocol::HttpVersion http_version = protocol::HttpVersion::http1_1;
  std::uint32_t h2_stream_id = 0;
  bool headers_unknown = false;
  std::uint32_t h2_data_frames = 0;
  std::optional<int> grpc_status;
  protocol::Http2StreamStats h2_flow;  // window_zero_* fields (data_frames, grpc_status above)
  // The session that framed it (websocket: after an HTTP/1.1 upgrade), and
  // what a message-framed session's frames said (docs/schema.md#websocket).
  protocol::Protocol protocol = protocol::Protocol::http1;
  std::optional<protocol::MessageStats> messages;
  std::uint32_t audio_events = 0;  // content events that carried audio, not text
  std::uint32_t truncated_events = 0;
  std::uint64_t bytes_not_captured = 0;  // capture holes inside the body
  std::uint64_t bytes_lost = 0;          // events the kernel could not deliver
  std::uint32_t parse_errors = 0;
  std::uint64_t body_bytes = 0;
  StreamMetrics metrics;
  std::vector<TimelineEvent> timeline;  // the first max_timeline_events events; rendered only on request
  TimelineTail tail;                    // the events past them (timeline_truncated when any)
  std::vector<BodyHole> body_holes;     // in body order, at most kMaxBodyHoles; never output
  TcpContext tcp;
  LoadContext load;                  // the load it ran under (core/load.h)
  // What the path stage (core/path/) found, attached whole when the record
  // leaves it; null before (and for a record that never went through it).
  // Shared, not inline: every stream in flight carries a StreamRecord.
  std::shared_ptr<const PathView> path_view;
};

// Its path view, or an empty one: one place says what "no path" reads as.
const PathView& path_view_of(const StreamRecord& r);

// Bytes a record holds (itself, its timeline, tail and evidence): the
// estimate the live-stream budget (PipelineConfig::max_live_stream_bytes) counts.
std::size_t held_bytes(const StreamRecord& r);

// "<connection generation>-<response index>": unique per agent run.
std::string stream_id(const StreamRecord& r);

// A TLS connection's first response: its first handshake byte to the first
// request byte (0 when not over TLS, not the first, or the handshake was not
// seen). On a client it adds to what the user waited before the TTFT.
std::uint64_t tls_handshake_ns(const StreamRecord& r);

// What of a request target reaches records, labels and cohorts
// (core/labels.h sanitize_target, docs/schema.md#paths).
struct PathPrivacy {
  std::vector<std::string> keep_query_params;  // query parameters kept by name; every other one is dropped
  bool normalize_routes = true;                 // id-like and secret-like path segments become "{id}"
};

struct PipelineConfig {
  // A stall is a gap between content events above both the floor and
  // stall_ratio x the stream's own median ITL.
  std::uint64_t stall_floor_ns = 100'000'000;
  double stall_ratio = 4.0;
  // A client fell behind when the delivery lag at its last token exceeds the
  // stream's early lag by at least this (docs/metrics.md#delivery-lag).
  std::uint64_t lag_floor_ns = 200'000'000;
  std::uint64_t stream_idle_timeout_ns = 120'000'000'000ull;
  std::uint64_t conn_idle_timeout_ns = 600'000'000'000ull;
  std::size_t max_connections = 65536;
  // Per stream, the events kept whole (TimelineEvent, ~96 bytes each): long
  // reasoning streams reach ~30 000 events, so 32768 keeps real streams whole
  // (3 MiB); later events keep 4 bytes each (TimelineTail).
  std::size_t max_timeline_events = 32'768;
  // Every stream in flight together (held_bytes): past it the largest end
  // early as evicted_memory. 256 MiB: half the DaemonSet's 512 MiB limit.
  std::size_t max_live_stream_bytes = std::size_t{256} << 20;
  std::size_t request_body_head = 4096;       // bytes of request body read for model/stream
  // How long a finished record waits for the other records of its path (the
  // traced peer of its connection, a gateway's other leg, late ACKs).
  std::uint64_t path_settle_ns = 1'000'000'000;
  std::size_t max_held_records = 4096;
  // Declared formats (the configuration's `formats:`): the first that covers
  // a response reads its events, before any built-in dialect.
  protocol::DeclaredFormats formats;
  PathPrivacy privacy;
};

}  // namespace infertap::core
