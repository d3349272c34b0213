// The capabilities the capture needs and what stops working without each,
// checked once at startup so that an agent started with too few says so in
// its log, in `infertap status` and in /metrics instead of capturing nothing
// in silence. Measured on Linux 6.18 (docs/architecture.md#privileges):
//   CAP_BPF, CAP_PERFMON     load the programs, attach the tracepoints (plaintext)
//   CAP_SYS_ADMIN            uprobes: perf_event_open of a uprobe is refused
//                            (EACCES) with CAP_PERFMON alone; also map_files
//   CAP_SYS_PTRACE           /proc/PID/maps, map_files and root of other users
//   CAP_DAC_READ_SEARCH      library files only their owner may read
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infertap::capture {

// Numbers as in <linux/capability.h>.
enum class Capability : std::uint8_t {
  dac_override = 1,
  dac_read_search = 2,
  sys_ptrace = 19,
  sys_admin = 21,
  perfmon = 38,
  bpf = 39,
  checkpoint_restore = 40,
};

// Bit n: capability n, as CapEff in /proc/PID/status.
using CapabilitySet = std::uint64_t;

constexpr CapabilitySet bit_of(Capability c) { return CapabilitySet{1} << static_cast<unsigned>(c); }

// The calling thread's effective set; nullopt when capget(2) fails.
std::optional<CapabilitySet> effective_capabilities();

// A capability the agent lacks (nor any that stands in for it) and what will
// not work because of it.
struct MissingCapability {
  Capability capability;
  std::string_view consequence;
};

// What `effective` lacks for the capture; the TLS needs only when `tls` is on.
std::vector<MissingCapability> missing_capabilities(CapabilitySet effective, bool tls);

std::string_view name_of(Capability c);  // "CAP_SYS_PTRACE"
// "CAP_SYS_PTRACE missing: ..." (one log line).
std::string describe(const MissingCapability& missing);

}  // namespace infertap::capture
