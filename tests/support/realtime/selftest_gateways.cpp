// The gateway part of selftest.sh, through the C++ helpers the integration
// tests use (support/websocket_peers.h): server.mjs behind WebsocketNginx and
// WebsocketHAProxy (plain and TLS to the client), the official-SDK client
// through each, the client leg captured and dissected by tshark_ws.py. No agent.
// Built and run by selftest.sh (not by the Makefile) from the repository root:
//   g++ -std=c++20 -O1 -Itests tests/support/realtime/selftest_gateways.cpp -o DIR/selftest_gateways
//   DIR/selftest_gateways DIR
// Prints "ok - ..." / "FAIL - ..." lines; exit status 1 when any check failed.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "support/test_certificate.h"
#include "support/websocket_peers.h"

using namespace infertap::testing;

namespace {

int failures = 0;

void check(bool ok, const std::string& what, const std::string& detail = "") {
  std::printf("%s - %s%s\n", ok ? "ok  " : "FAIL", what.c_str(), ok || detail.empty() ? "" : ("\n    " + detail).c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

int count_done_with_usage(const RealtimeClientLog& log, int tokens) {
  int n = 0;
  for (const auto& r : log.received_of_type("response.done"))
    if (r.usage.is_object() && r.usage.value("output_tokens", -1) == tokens &&
        r.usage.value("total_tokens", -1) == r.usage.value("input_tokens", -1000) + tokens)
      ++n;
  return n;
}

// One run: server -> gateway -> client, the client leg captured when `capture`.
void run(const std::string& root, const std::string& gw_name, bool tls, bool capture) {
  const std::string name = gw_name + (tls ? "-tls" : "-plain");
  const std::string dir = root + "/" + name;
  std::filesystem::create_directories(dir);
  constexpr int kTokens = 30, kResponses = 2, kStallMs = 300, kStallAt = 10;
  RealtimeServer server(dir + "/server", {.deflate = true, .tokens = kTokens, .interval_ms = 5, .stall_ms = kStallMs,
                                          .stall_at = kStallAt, .stall_response = 1, .noise = true});
  check(server.ok(), name + ": server.mjs started", server.error());
  if (!server.ok()) return;

  std::unique_ptr<Gateway> gw;
  if (gw_name == "nginx") {
    NginxOptions o;
    if (tls) o.tls_cert = root + "/cert.pem", o.tls_key = root + "/key.pem";
    gw = std::make_unique<WebsocketNginx>(server.port(), dir + "/nginx", o);
  } else {
    HAProxyOptions o;
    if (tls) o.tls_pem = root + "/both.pem";
    gw = std::make_unique<WebsocketHAProxy>(server.port(), dir + "/haproxy", o);
  }
  check(gw->ok(), name + ": " + gw_name + " started", gw->error());
  if (!gw->ok()) return;

  std::unique_ptr<WebsocketCapture> cap;
  if (capture) {
    cap = std::make_unique<WebsocketCapture>(dir + "/client-leg.pcapng", gw->port(), dir + "/dumpcap.log");
    check(cap->ok(), name + ": dumpcap capturing the client leg", cap->error());
  }
  RealtimeClientOptions co{.url = realtime_base_url(gw->port(), tls), .responses = kResponses};
  if (tls) co.ca_cert = root + "/cert.pem";
  RealtimeClientRun c = run_realtime_client(dir + "/client", co);
  if (cap) cap->stop();
  check(c.rc == 0, name + ": GA client exit 0 (2 responses, clean close)", c.output);
  RealtimeServerLog s = server.log();
  const auto ids = s.response_ids();
  check(ids.size() == kResponses, name + ": server answered 2 response.create", std::to_string(ids.size()));
  check(int(s.output_deltas(ids.empty() ? "" : ids[0]).size()) == kTokens &&
            int(c.log.output_deltas().size()) == kTokens * kResponses,
        name + ": deltas: server " + std::to_string(s.output_deltas(ids.empty() ? "" : ids[0]).size()) +
            " per response, client " + std::to_string(c.log.output_deltas().size()) + " in all");
  check(count_done_with_usage(c.log, kTokens) == kResponses, name + ": response.done usage output_tokens = 30 (both)");
  const std::string ext = c.summary.is_object() ? c.summary.value("extensions", "") : "";
  check(ext.find("permessage-deflate") != std::string::npos,
        name + ": permessage-deflate negotiated end to end through " + gw_name + " (" + ext + ")");
  // The stall (response 1, before token 10) in the server's timestamps and at the client.
  if (ids.size() == kResponses) {
    const double sgap = s.gap_before_token_ms(ids[1], kStallAt);
    const auto cd = c.log.output_deltas(ids[1]);
    const double cgap = cd.size() > kStallAt ? double(cd[kStallAt].t_ns - cd[kStallAt - 1].t_ns) / 1e6 : -1;
    double other = 0;  // the largest other client gap of that response
    for (std::size_t i = 1; i < cd.size(); ++i)
      if (i != kStallAt) other = std::max(other, double(cd[i].t_ns - cd[i - 1].t_ns) / 1e6);
    char buf[200];
    std::snprintf(buf, sizeof buf, "server gap %.1f ms, client gap %.1f ms, other client gaps <= %.1f ms", sgap, cgap,
                  other);
    check(sgap >= kStallMs && cgap >= kStallMs - 20 && other < 100, name + ": stall before token 10 of response 1: " + buf);
  }
  if (cap && cap->ok()) {
    std::string err;
    auto t = dissect_websocket(cap->pcap(), gw->port(), &err);
    check(t.is_object() && t["errors"].empty(), name + ": tshark_ws.py dissected the client leg",
          err + (t.is_object() ? t["errors"].dump() : ""));
    if (t.is_object() && t["server"].is_object()) {
      const int text = t["server"]["opcodes"].value("text", 0), rsv1 = t["server"].value("rsv1", 0);
      check(text == int(s.messages.size()) && rsv1 == text &&
                t["server"]["opcodes"].value("close", 0) == 1 && t["client"]["opcodes"].value("close", 0) == 1 &&
                t["client"].value("masked", 0) == t["client"].value("frames", -1) &&
                t["client"]["opcodes"].value("text", 0) == int(c.log.sent.size()),
            name + ": tshark: " + std::to_string(text) + " text frames (compressed: " + std::to_string(rsv1) +
                ") to the client = server.mjs's " + std::to_string(s.messages.size()) + " messages; client " +
                std::to_string(t["client"]["opcodes"].value("text", 0)) + " masked text frames = " +
                std::to_string(c.log.sent.size()) + " sent; a close each way",
            t["server"].dump().substr(0, 400));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: selftest_gateways SCRATCH_DIR (run from the repository root)\n");
    return 2;
  }
  const std::string root = argv[1];
  const std::string missing = realtime_peers_missing();
  check(missing.empty(), "realtime peers installed", missing);
  if (!missing.empty()) return 1;
  const std::string cert_err = make_localhost_certificate(root + "/key.pem", root + "/cert.pem", root + "/openssl.log");
  check(cert_err.empty(), "test certificate (openssl req)", cert_err);
  std::ofstream(root + "/both.pem") << read_file(root + "/cert.pem") << read_file(root + "/key.pem");
  for (const char* gw : {"nginx", "haproxy"}) {
    run(root, gw, false, true);
    run(root, gw, true, false);
  }
  return failures ? 1 : 0;
}
