#include "capture/privileges.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace infertap::capture {
namespace {

// One need of the capture: `capability`, or any of `stand_ins`, must be held.
struct Need {
  Capability capability;
  CapabilitySet stand_ins;
  bool tls_only;
  std::string_view consequence;
};

constexpr CapabilitySet kSysAdmin = bit_of(Capability::sys_admin);

// Each consequence is what was seen without the capability (the evidence is
// in docs/architecture.md#privileges).
constexpr Need kNeeds[] = {
    {Capability::bpf, kSysAdmin, false, "the BPF programs cannot be loaded: nothing is captured"},
    {Capability::perfmon, kSysAdmin, false, "the tracepoints cannot be attached: nothing is captured"},
    {Capability::sys_admin, 0, true,
     "the kernel refuses uprobes (perf_event_open: EACCES): no TLS library or Go executable is probed, "
     "HTTPS streams are not recorded"},
    {Capability::checkpoint_restore, kSysAdmin, true,
     "/proc/PID/map_files refused: TLS libraries of other processes are only found by their path"},
    {Capability::sys_ptrace, 0, true,
     "/proc/PID/maps, map_files and root of other users' processes refused: their TLS libraries are not "
     "found or probed"},
    {Capability::dac_read_search, bit_of(Capability::dac_override), true,
     "library files only their owner may read (a tenant's own libssl) cannot be opened: they are not probed"},
};

}  // namespace

std::optional<CapabilitySet> effective_capabilities() {
  __user_cap_header_struct header{};
  __user_cap_data_struct data[2]{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  if (syscall(SYS_capget, &header, data) != 0) return std::nullopt;
  return (CapabilitySet{data[1].effective} << 32) | data[0].effective;
}

std::vector<MissingCapability> missing_capabilities(CapabilitySet effective, bool tls) {
  std::vector<MissingCapability> missing;
  for (const Need& need : kNeeds) {
    if (need.tls_only && !tls) continue;
    if (effective & (bit_of(need.capability) | need.stand_ins)) continue;
    missing.push_back({need.capability, need.consequence});
  }
  return missing;
}

std::string_view name_of(Capability c) {
  switch (c) {
    case Capability::dac_override: return "CAP_DAC_OVERRIDE";
    case Capability::dac_read_search: return "CAP_DAC_READ_SEARCH";
    case Capability::sys_ptrace: return "CAP_SYS_PTRACE";
    case Capability::sys_admin: return "CAP_SYS_ADMIN";
    case Capability::perfmon: return "CAP_PERFMON";
    case Capability::bpf: return "CAP_BPF";
    case Capability::checkpoint_restore: return "CAP_CHECKPOINT_RESTORE";
  }
  return "CAP_?";
}

std::string describe(const MissingCapability& missing) {
  return std::string(name_of(missing.capability)) + " missing: " + std::string(missing.consequence);
}

}  // namespace infertap::capture
