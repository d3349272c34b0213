// What the pipeline counts, listed once. X(name, kind, help) makes the field
// PipelineCounters::<name>, its `infertap status` key (counters.pipeline.<name>)
// and its Prometheus series (docs/prometheus.md); kind is total (counted since
// the start) or level (a value now).
#pragma once

#include <cstdint>

#include "base/counter.h"

#define INFERTAP_PIPELINE_COUNTERS(X)                                                                        \
  X(records, total, "stream records finished, partial ones included")                                     \
  X(decode_errors, total, "kernel records userspace could not decode")                                     \
  X(data_events, total, "send and receive events of followed sockets")                                     \
  X(state_events, total, "TCP state changes of followed sockets")                                          \
  X(connections_opened, total, "connections the pipeline began to follow")                                 \
  X(connections_closed, total, "followed connections that ended: closed, idle, evicted or at shutdown")    \
  X(connections_evicted, total, "connections dropped from a full table (limits.max_connections)")          \
  X(connections_muted, total, "connections muted in the kernel: not HTTP")                                  \
  X(http_parse_errors, total, "HTTP framing errors")                                                       \
  X(streams_started, total, "event-stream responses that began")                                          \
  X(streams_completed, total, "streams whose response ended whole")                                       \
  X(streams_partial, total, "streams that ended before their response did")                               \
  X(streams_evicted_memory, total, "streams ended early: the streams in flight held more than limits.max_live_stream_bytes") \
  X(live_stream_bytes, level, "bytes the streams in flight hold now (estimate; limits.max_live_stream_bytes bounds it)") \
  X(timelines_truncated, total, "records whose timeline stopped at pipeline.max_timeline_events (aggregates stay exact)") \
  X(non_stream_responses, total, "HTTP responses that were not event streams")                            \
  X(sse_events, total, "SSE events of streams")                                                            \
  X(bytes_lost, total, "bytes of sequence gaps: events dropped before userspace")                          \
  X(bytes_not_captured, total, "bytes between the captured head and tail of a call")                       \
  X(path_signals, total, "delivery signals: ACKs, arrivals, retransmissions, memory limits")               \
  X(records_joined, total, "records linked to a traced peer or a gateway's other leg")                     \
  X(records_held, level, "records waiting for the other records of their path now")                        \
  X(connections_refused, total, "connections not targeted (process name): muted on their first event")  \
  X(body_decode_errors, total, "compressed bodies that could not be decoded to their end")                 \
  X(sockets_reused, total, "socket addresses a new connection took over before the old one's close was seen") \
  X(calls_after_close, total, "send/receive calls seen on a socket already closed (not followed)")        \
  X(closes_recovered, total, "connections ended because the kernel no longer knew their socket (a close lost to a full ring)") \
  X(tls_events, total, "plaintext events of TLS library calls")                                           \
  X(tls_unbound_held, total, "TLS writes held until their library wrote the ciphertext (memory BIO)")     \
  X(tls_unbound_dropped, total, "held TLS writes whose socket was never found (or beyond the bound)")   \
  X(h2_connections, total, "connections read as HTTP/2 (preface, server SETTINGS, h2c upgrade or joined at event DATA)") \
  X(h2_streams, total, "HTTP/2 streams followed (each its own exchange)")                                  \
  X(h2_streams_not_followed, total, "HTTP/2 streams beyond the per-connection bound (256 live)")           \
  X(h2_header_blocks_unread, total, "HTTP/2 header blocks that could not be decoded: headers_unknown")      \
  X(h2_header_blocks_too_large, total, "HTTP/2 header blocks over the 64 KiB bound (CONTINUATION floods)")  \
  X(h2_desyncs, total, "HTTP/2 directions that lost their frames: a capture hole swallowed a frame header") \
  X(h2_resyncs, total, "HTTP/2 directions that found their frames again at a plausible frame header")      \
  X(h2_frame_errors, total, "HTTP/2 frames their type does not allow (length, padding, preface)")          \
  X(ws_connections, total, "connections read as WebSocket: switched by an HTTP/1.1 upgrade, or joined at a frame") \
  X(ws_joined, total, "WebSocket connections joined after their upgrade (the agent started mid-session): read from a text frame of JSON") \
  X(ws_responses, total, "WebSocket realtime responses followed (each its own exchange)")                  \
  X(ws_responses_not_followed, total, "WebSocket responses beyond the per-connection bound (16 open)")    \
  X(ws_desyncs, total, "WebSocket directions that lost their frames: a capture hole swallowed a frame header") \
  X(ws_resyncs, total, "WebSocket directions that found their frames again at a provable frame header")    \
  X(ws_frame_errors, total, "WebSocket frames RFC 6455 does not allow (masking, control frame, reserved bits)") \
  X(ws_messages_too_large, total, "WebSocket messages beyond the kept bound: their meaning was read from their head") \
  X(ws_undecodable, total, "WebSocket directions whose permessage-deflate context was lost (a hole, corrupt data, a bound, a session joined after its upgrade)")

namespace infertap::core {

struct PipelineCounters {
  INFERTAP_COUNTER_FIELDS(INFERTAP_PIPELINE_COUNTERS)
};

}  // namespace infertap::core
