// Stream records as the agent writes them (docs/schema.md), built from event
// times in milliseconds since the request's end: known streams for the tests
// of what is drawn from a record (the stream picture).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace infertap::testing {

inline constexpr std::uint64_t kRequestEndNs = 5'000'000'000'000;  // monotonic ns of the request's last byte

inline std::uint64_t at_ms(double ms) { return kRequestEndNs + static_cast<std::uint64_t>(ms * 1e6); }

// A server record of `emit_ms.size()` events: a role-only event first, then
// token events, the last one `done`. No path beyond the server (add_path).
inline nlohmann::json server_record(const std::vector<double>& emit_ms, const std::string& model = "demo-llama-8b") {
  using json = nlohmann::json;
  json timeline = json::array();
  for (std::size_t i = 0; i < emit_ms.size(); ++i) {
    const char* kind = i == 0 ? "role_only" : i + 1 == emit_ms.size() ? "done" : "content";
    timeline.push_back({{"i", i}, {"ts_ns", at_ms(emit_ms[i])}, {"first_byte_ns", at_ms(emit_ms[i])},
                        {"bytes", 256}, {"kind", kind}, {"batch", 1}, {"acked_ns", nullptr},
                        {"peer_ns", nullptr}, {"upstream_ns", nullptr}, {"downstream_ns", nullptr},
                        {"delivered_ns", nullptr}});
  }
  const std::size_t tokens = emit_ms.size() >= 2 ? emit_ms.size() - 2 : 0;
  return {{"type", "stream"},
          {"stream_id", "2-0"},
          {"role", "server"},
          {"vantage", "emit"},
          {"pid", 7501},
          {"comm", "sample-server"},
          {"method", "POST"},
          {"path", "/v1/chat/completions"},
          {"model", model},
          {"status", 200},
          {"end", "complete"},
          {"ts", "2026-12-03T10:00:00.000000000Z"},
          {"joined_midstream", false},
          {"request_end_ns", kRequestEndNs},
          {"ttft_ms", emit_ms.size() > 1 ? emit_ms[1] : 0.0},
          {"e2e_ms", emit_ms.empty() ? 0.0 : emit_ms.back()},
          {"tokens", tokens},
          {"events", emit_ms.size()},
          {"timeline_events", emit_ms.size()},
          {"timeline_truncated", false},
          {"stall_threshold_ms", 100.0},
          {"stalls", json::array()},
          {"delivery", nullptr},
          {"gateway", nullptr},
          {"timeline", timeline}};
}

inline nlohmann::json stall(std::uint64_t after_event, double start_ms, double gap_ms, const std::string& cause,
                            const std::string& evidence = "") {
  return {{"after_event", after_event}, {"start_ns", at_ms(start_ms)}, {"gap_ms", gap_ms}, {"cause", cause},
          {"evidence", evidence}};
}

// Where each event went past the server: `delivered_ms` per event (the
// final client's read), and `gateway_read_ms` per event when a gateway
// relayed it (empty: no gateway). `path` as delivery.path.
inline void add_path(nlohmann::json& record, const std::vector<double>& delivered_ms,
                     const std::vector<double>& gateway_read_ms, const std::string& path,
                     const nlohmann::json& delivered_stalls = nlohmann::json::array()) {
  nlohmann::json& timeline = record["timeline"];
  for (std::size_t i = 0; i < timeline.size() && i < delivered_ms.size(); ++i) {
    timeline[i]["delivered_ns"] = at_ms(delivered_ms[i]);
    timeline[i]["peer_ns"] = at_ms(gateway_read_ms.empty() ? delivered_ms[i] : gateway_read_ms[i]);
  }
  const double ttft = delivered_ms.size() > 1 ? delivered_ms[1] : 0.0;
  record["delivery"] = {{"vantage", "read"},
                        {"path", path},
                        {"ttft_ms", ttft},
                        {"ttft_added_ms", ttft - record["ttft_ms"].get<double>()},
                        {"stall_threshold_ms", 100.0},
                        {"stalls", delivered_stalls},
                        {"max_burst", 1},
                        {"degraded_by_path", false},
                        {"degraded_reason", ""}};
}

// Emit times: a role-only event at 0.3 ms, `tokens` token events from
// `ttft_ms` every `itl_ms` (a 0..3 ms pattern of jitter), a pause of
// `pause_ms` before token `pause_before` (0: none), `done` with the last token.
inline std::vector<double> emit_times(int tokens, double ttft_ms, double itl_ms, int pause_before = 0,
                                      double pause_ms = 0) {
  std::vector<double> t = {0.3};
  double now = ttft_ms;
  for (int k = 0; k < tokens; ++k) {
    if (k > 0) now += itl_ms + (k % 4) * 0.9 + (k == pause_before ? pause_ms : 0.0);
    t.push_back(now);
  }
  t.push_back(now + 0.05);
  return t;
}

// 20 tokens, 25 ms apart, read by a local client 0.2 ms after each send.
inline nlohmann::json healthy_stream() {
  const std::vector<double> emit = emit_times(20, 80, 25);
  nlohmann::json r = server_record(emit);
  std::vector<double> delivered;
  for (double t : emit) delivered.push_back(t + 0.2);
  add_path(r, delivered, {}, "sample-server>sample-client");
  return r;
}

// 24 tokens sent 25 ms apart, read by the gateway at once, and written on to
// the client 8 at a time when its buffer fills: the client gets bursts of 8,
// ~200 ms apart (stalls caused by gateway buffering).
inline nlohmann::json gateway_buffered_stream() {
  const std::vector<double> emit = emit_times(24, 80, 25);
  nlohmann::json r = server_record(emit);
  std::vector<double> gateway_read, delivered(emit.size());
  for (double t : emit) gateway_read.push_back(t + 0.1);
  for (std::size_t i = 0; i < emit.size(); ++i) {
    const std::size_t group_end = std::min(emit.size() - 1, (i + 7) / 8 * 8);  // events 1..8, 9..16, ...
    delivered[i] = emit[group_end] + 1.0 + 0.02 * static_cast<double>((i + 7) % 8);  // in order within the burst
  }
  nlohmann::json stalls = nlohmann::json::array();
  for (std::size_t burst_end : {8u, 16u}) {
    const double gap = delivered[burst_end + 1] - delivered[burst_end];
    stalls.push_back(stall(burst_end - 1, delivered[burst_end], gap, "gateway_buffering",
                           "the gateway read the next token " + std::to_string(static_cast<int>(gap)) +
                               " ms before writing it"));
  }
  add_path(r, delivered, gateway_read, "sample-server>gateway(nginx)>sample-client", stalls);
  r["delivery"]["max_burst"] = 8;
  r["delivery"]["degraded_by_path"] = true;
  r["delivery"]["degraded_reason"] = "2 gateway_buffering stalls";
  return r;
}

// 24 tokens 25 ms apart with the model silent for 300 ms more before token 13.
inline nlohmann::json model_pause_stream() {
  const std::vector<double> emit = emit_times(24, 80, 25, 12, 300);
  nlohmann::json r = server_record(emit);
  const double gap = emit[13] - emit[12];
  r["stalls"] = nlohmann::json::array({stall(11, emit[12], gap, "model", "nothing sent for 325 ms")});
  r["stall_causes"] = {{"model", 1}};
  std::vector<double> delivered;
  for (double t : emit) delivered.push_back(t + 0.15);
  add_path(r, delivered, {}, "sample-server>sample-client",
           nlohmann::json::array({stall(11, delivered[12], gap, "model", "the server sent nothing")}));
  return r;
}

}  // namespace infertap::testing
