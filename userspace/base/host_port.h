// host:port, read the one way every layer reads it: "127.0.0.1:9464",
// "[::1]:9464", "localhost:80", ":9464" (no host). An IPv6 host goes in
// brackets; the port is a decimal number 0..65535. What a caller accepts
// beyond the form (a host required, port 0 refused) is the caller's rule.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace infertap::base {

struct HostPort {
  std::string_view host;  // without brackets; empty when the address starts with ':'
  std::uint16_t port = 0;
};

// nullopt when `address` is not of the form; *why (when given) then says what is wrong.
inline std::optional<HostPort> split_host_port(std::string_view address, std::string_view* why = nullptr) {
  const auto fail = [&](std::string_view reason) -> std::optional<HostPort> {
    if (why) *why = reason;
    return std::nullopt;
  };
  std::string_view host, port;
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    if (close == std::string_view::npos) return fail("missing ']'");
    host = address.substr(1, close - 1);
    if (close + 1 >= address.size() || address[close + 1] != ':') return fail("expected [host]:port");
    port = address.substr(close + 2);
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string_view::npos) return fail("expected host:port");
    host = address.substr(0, colon);
    if (host.find(':') != std::string_view::npos) return fail("IPv6 hosts go in brackets: [::1]:9464");
    port = address.substr(colon + 1);
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return fail("port must be a number 0-65535");
  }
  return HostPort{host, static_cast<std::uint16_t>(value)};
}

}  // namespace infertap::base
