// Where a TLS call's uprobes go so that each call traps once, not twice.
//
// x86-64 uprobes emulate a few instructions (push, direct call/jump, nop) and
// run every other one out of line under single-step: a second trap. On a
// virtualised host the second trap is the expensive part (measured here:
// 0.6 us per call at a push, 9.3 us at a `sub rsp`; docs/benchmarks.md §6).
// OpenSSL 3's SSL_write_ex and SSL_read_ex open with `sub rsp, 8` and call a
// shared body (ssl_write_internal, ssl_read_internal) that opens with pushes
// and that SSL_write and SSL_read call too: probing that body instead times
// all four public calls with one cheap trap each.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace infertap::capture {

// `code` holds the bytes at file offset `at` (at most the rest of the
// executable segment). Offsets are file offsets, as uprobes take them.

// The offset to probe for a function entry at `at` so the kernel emulates the
// probed instruction: past an endbr64 (it moves nothing: the return address
// is still at the stack top for a return probe) onto a push. nullopt when the
// entry is not such an instruction.
std::optional<std::uint64_t> emulated_entry(std::span<const std::uint8_t> code, std::uint64_t at);

// The function a wrapper at `at` calls with its own arguments: it only moves
// the stack (endbr64, push, sub rsp) before its first instruction, a direct
// call. The callee then takes the wrapper's arguments unchanged.
std::optional<std::uint64_t> pass_through_callee(std::span<const std::uint8_t> code, std::uint64_t at);

// Whether the function at `at` makes a direct call to `callee` before its
// first return (in `code`, which bounds the search).
bool calls_before_return(std::span<const std::uint8_t> code, std::uint64_t at, std::uint64_t callee);

// One direction of TLS I/O: SSL_write and SSL_write_ex, or SSL_read and
// SSL_read_ex (file offsets, 0 when the file lacks one).
struct TlsIoPair {
  std::uint64_t plain = 0, ex = 0;
};
// Where their probes go. `ex` takes the _ex form's programs (count through
// the out-pointer); when it is their shared body, `plain` is 0 if the plain
// form calls that body (probing both would time each call twice).
struct TlsIoSites {
  std::uint64_t plain = 0, ex = 0;
  bool shared_body = false;
};
// The bytes of the file from an offset to the end of its executable segment
// (bounded; empty when the offset is in no executable segment).
using CodeAt = std::function<std::vector<std::uint8_t>(std::uint64_t at)>;
TlsIoSites cheap_tls_io_sites(const CodeAt& code, TlsIoPair pair);

}  // namespace infertap::capture
