// Picking records out of the agent's NDJSON in the integration tests: by role,
// by gateway leg, by HTTP/2 stream, and the port of an endpoint.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace infertap::testing {

// The port of a record's "host:port" endpoint (-1: none).
inline int port_of(const nlohmann::json& endpoint) {
  if (!endpoint.is_string()) return -1;
  const std::string s = endpoint.get<std::string>();
  return std::stoi(s.substr(s.rfind(':') + 1));
}

inline std::vector<nlohmann::json> select(const std::vector<nlohmann::json>& records,
                                          const std::function<bool(const nlohmann::json&)>& keep) {
  std::vector<nlohmann::json> out;
  std::copy_if(records.begin(), records.end(), std::back_inserter(out), keep);
  return out;
}

inline bool has_role(const nlohmann::json& r, const char* role) { return r.value("role", "") == role; }

// A gateway's record of its "downstream" or "upstream" leg.
inline bool is_leg(const nlohmann::json& r, const char* leg) {
  return has_role(r, "gateway") && r["gateway"].is_object() && r["gateway"].value("leg", "") == leg;
}

// The record's HTTP/2 stream id, -1 when it is not an HTTP/2 stream.
inline int h2_stream(const nlohmann::json& r) {
  return r.value("h2_stream_id", nlohmann::json()).is_number() ? r["h2_stream_id"].get<int>() : -1;
}

// The causes of a delivery's stalls.
inline std::set<std::string> stall_causes(const nlohmann::json& stalls) {
  std::set<std::string> out;
  if (stalls.is_array())
    for (const auto& s : stalls) out.insert(s.value("cause", ""));
  return out;
}

// A record described for a failure message (each test file keeps its fields).
using Describe = std::function<std::string(const nlohmann::json&)>;

// A gateway's upstream legs, each plaintext HTTP/1.1: their stream ids.
inline std::set<std::string> h1_upstream_ids(const std::vector<nlohmann::json>& up, const Describe& describe) {
  std::set<std::string> ids;
  for (const auto& r : up) {
    EXPECT_EQ(r["http_version"], "1.1") << describe(r);
    EXPECT_FALSE(r.value("tls", true)) << describe(r);
    ids.insert(r.value("stream_id", ""));
  }
  return ids;
}

// A gateway's HTTP/2-over-TLS downstream leg on `port`: one stream, joined to
// one of the upstream legs `up_ids` by at least `min_matched` events.
inline void expect_h2_tls_leg_joined(const nlohmann::json& r, int port, const std::set<std::string>& up_ids,
                                     int min_matched, const Describe& describe) {
  EXPECT_EQ(r["http_version"], "2") << describe(r);
  EXPECT_TRUE(r.value("tls", false)) << describe(r);
  EXPECT_GT(h2_stream(r), 0) << describe(r);
  EXPECT_EQ(port_of(r["local"]), port) << describe(r);
  ASSERT_TRUE(r["gateway"].is_object()) << describe(r);
  EXPECT_EQ(up_ids.count(r["gateway"].value("peer_stream_id", "")), 1u) << "joined to an upstream leg: " << describe(r);
  EXPECT_GE(r["gateway"].value("events_matched", 0), min_matched) << describe(r);
}

// A streaming gateway adds little: most events pass in under a millisecond,
// and its slowest (p99 of ~60 events is the slowest) in well under the
// ~100 ms a buffering one holds them. That slowest one is the gateway
// process's worst scheduling delay on this host, so it gets room.
inline void expect_streaming_gateway_delay(const nlohmann::json& gateway, const std::string& describe) {
  EXPECT_LT(gateway["delay_p50_ms"].get<double>(), 1.0) << "a streaming gateway adds little: " << describe;
  EXPECT_LT(gateway["delay_p99_ms"].get<double>(), 20.0) << "a streaming gateway adds little: " << describe;
}

}  // namespace infertap::testing
