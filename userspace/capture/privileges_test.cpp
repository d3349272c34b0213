// Which missing capability the agent reports, and what it says will not work.
#include "capture/privileges.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace infertap::capture {
namespace {

CapabilitySet set_of(std::initializer_list<Capability> caps) {
  CapabilitySet s = 0;
  for (Capability c : caps) s |= bit_of(c);
  return s;
}

std::vector<std::string> names(const std::vector<MissingCapability>& missing) {
  std::vector<std::string> out;
  for (const MissingCapability& m : missing) out.emplace_back(name_of(m.capability));
  return out;
}

const CapabilitySet kDeployed = set_of({Capability::bpf, Capability::perfmon, Capability::sys_admin,
                                        Capability::sys_ptrace, Capability::dac_read_search});

TEST(Privileges, TheDeployedSetLacksNothing) {
  EXPECT_TRUE(missing_capabilities(kDeployed, true).empty());
  EXPECT_TRUE(missing_capabilities(~CapabilitySet{0}, true).empty());
}

TEST(Privileges, SysAdminStandsInForBpfPerfmonAndCheckpointRestore) {
  const CapabilitySet s = set_of({Capability::sys_admin, Capability::sys_ptrace, Capability::dac_read_search});
  EXPECT_TRUE(missing_capabilities(s, true).empty());
}

// The DaemonSet's old pair: plaintext works, TLS does not, and each reason is named.
TEST(Privileges, BpfAndPerfmonAloneNameEveryTlsLack) {
  const auto missing = missing_capabilities(set_of({Capability::bpf, Capability::perfmon}), true);
  EXPECT_EQ(names(missing), (std::vector<std::string>{"CAP_SYS_ADMIN", "CAP_CHECKPOINT_RESTORE", "CAP_SYS_PTRACE",
                                                      "CAP_DAC_READ_SEARCH"}));
  EXPECT_EQ(describe(missing[1]),
            "CAP_CHECKPOINT_RESTORE missing: /proc/PID/map_files refused: TLS libraries of other processes are only "
            "found by their path");
  EXPECT_NE(describe(missing[0]).find("uprobes"), std::string::npos);
}

TEST(Privileges, WithTlsOffOnlyTheLoadNeedsCount) {
  EXPECT_TRUE(missing_capabilities(set_of({Capability::bpf, Capability::perfmon}), false).empty());
  EXPECT_EQ(names(missing_capabilities(set_of({Capability::bpf}), false)), std::vector<std::string>{"CAP_PERFMON"});
  EXPECT_EQ(names(missing_capabilities(0, false)), (std::vector<std::string>{"CAP_BPF", "CAP_PERFMON"}));
}

TEST(Privileges, DacOverrideStandsInForDacReadSearch) {
  const CapabilitySet s = set_of({Capability::sys_admin, Capability::sys_ptrace, Capability::dac_override});
  EXPECT_TRUE(missing_capabilities(s, true).empty());
  EXPECT_EQ(names(missing_capabilities(set_of({Capability::sys_admin, Capability::sys_ptrace}), true)),
            std::vector<std::string>{"CAP_DAC_READ_SEARCH"});
}

TEST(Privileges, EffectiveSetIsReadable) { EXPECT_TRUE(effective_capabilities().has_value()); }

}  // namespace
}  // namespace infertap::capture
