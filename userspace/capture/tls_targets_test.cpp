// The per-process probes' bookkeeping, on real processes (this one and
// children that wait): one set per process and file, released once the
// process exits, and the bound past which the owner goes per file.
#include "capture/tls_targets.h"
#include "capture/library_names.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

namespace infertap::capture {
namespace {

constexpr std::uint64_t kLater = ~0ull;  // a time past any process check

// Children that wait until killed; killed and reaped when it goes.
class Children {
 public:
  explicit Children(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        pause();
        _exit(0);
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~Children() {
    for (pid_t pid : pids_) end(pid);
  }
  const std::vector<pid_t>& pids() const { return pids_; }
  static void end(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }

 private:
  std::vector<pid_t> pids_;
};

std::uint32_t self() { return static_cast<std::uint32_t>(getpid()); }

TEST(ProcessProbes, GivesALiveProcessOneSetOfProbesPerFile) {
  std::uint64_t probed = 0, released = 0;
  ProcessProbes probes(&probed, &released, nullptr);
  EXPECT_NE(probes.links_for(self(), {1, 10}), nullptr);
  EXPECT_EQ(probes.links_for(self(), {1, 10}), nullptr) << "already probed there";
  EXPECT_NE(probes.links_for(self(), {1, 11}), nullptr) << "another file of the same process";
  EXPECT_EQ(probed, 1u) << "one process";
  EXPECT_EQ(probes.links_for(0x3fffffff, {1, 10}), nullptr) << "no such process";
  EXPECT_EQ(probed, 1u);
  probes.release_exited(kLater);
  EXPECT_EQ(released, 0u) << "this process still runs";
  EXPECT_FALSE(probes.full());
}

TEST(ProcessProbes, ReleasesTheProbesOfAProcessThatExited) {
  std::uint64_t probed = 0, released = 0;
  ProcessProbes probes(&probed, &released, nullptr);
  Children child(1);
  ASSERT_EQ(child.pids().size(), 1u) << "fork failed";
  const auto pid = static_cast<std::uint32_t>(child.pids()[0]);
  ASSERT_NE(probes.links_for(pid, {1, 10}), nullptr);
  ASSERT_NE(probes.links_for(self(), {1, 10}), nullptr);
  Children::end(child.pids()[0]);
  probes.release_exited(kLater);
  EXPECT_EQ(released, 1u);
  EXPECT_EQ(probes.links_for(self(), {1, 10}), nullptr) << "this process keeps its probes";
  EXPECT_EQ(probed, 2u);
}

TEST(ProcessProbes, PastTheBoundTellsTheOwnerToProbePerFile) {
  std::uint64_t probed = 0, released = 0;
  ProcessProbes probes(&probed, &released, nullptr);
  Children children(ProcessProbes::kMaxProcesses);
  ASSERT_EQ(children.pids().size(), ProcessProbes::kMaxProcesses) << "fork failed";
  for (pid_t pid : children.pids()) ASSERT_NE(probes.links_for(static_cast<std::uint32_t>(pid), {1, 10}), nullptr);
  EXPECT_FALSE(probes.full());
  EXPECT_EQ(probes.links_for(self(), {1, 10}), nullptr) << "one process too many";
  EXPECT_TRUE(probes.full());
  EXPECT_EQ(probed, ProcessProbes::kMaxProcesses);
  probes.clear();
  EXPECT_FALSE(probes.full());
  EXPECT_NE(probes.links_for(self(), {1, 10}), nullptr) << "room again once cleared";
}

TEST(ProbeBudget, OneTenantsFilesSpendItsOwnShareNotTheOthers) {
  ProbeBudget budget({.sites_per_file = 20, .files_per_tenant = 2, .sites_per_tenant = 100, .handles_total = 50});
  EXPECT_EQ(budget.admit("/a", 6, 5), "");
  budget.charge("/a", 6, 5);
  EXPECT_EQ(budget.admit("/a", 6, 5), "");
  budget.charge("/a", 6, 5);
  const std::string refused = budget.admit("/a", 6, 5);
  EXPECT_NE(refused.find("its cgroup /a has 2 files with TLS probes already"), std::string::npos) << refused;
  EXPECT_EQ(budget.admit("/b", 6, 5), "") << "another tenant is not refused";
  EXPECT_EQ(budget.admit(kHostTenant, 6, 5), "") << "the host's libraries are outside any share";
  EXPECT_NE(budget.admit("/b", 21, 5).find("21 uprobes on one file: more than 20"), std::string::npos);
  const UprobeBudgetStats s = budget.stats();
  EXPECT_EQ(s.uprobe_files, 2u);
  EXPECT_EQ(s.uprobe_sites, 12u);
  EXPECT_EQ(s.uprobe_handles, 10u);
  EXPECT_EQ(s.uprobe_tenants, 1u);
  EXPECT_EQ(s.uprobe_budget_refusals, 2u);
  budget.refund("/a", 6, 5);
  EXPECT_EQ(budget.admit("/a", 6, 5), "") << "a released file gives its share back";
}

TEST(ProbeBudget, TheTotalOfKernelHandlesBoundsEveryTenant) {
  ProbeBudget budget({.sites_per_file = 20, .files_per_tenant = 100, .sites_per_tenant = 1000, .handles_total = 12});
  for (const char* t : {"/a", "/b"}) {
    ASSERT_EQ(budget.admit(t, 6, 5), "");
    budget.charge(t, 6, 5);
  }
  const std::string refused = budget.admit("/c", 6, 5);
  EXPECT_NE(refused.find("10 uprobe handles placed already; 5 more pass the agent's total of 12"), std::string::npos)
      << refused;
  EXPECT_NE(budget.admit(kHostTenant, 6, 5), "") << "the total holds for the host too";
}

TEST(LibraryNames, OneIdPerNameAndTheOverflowNamePastTheBound) {
  LibraryNames names(1, 3, "openssl");
  const std::uint16_t ssl3 = names.id_for("openssl-3");
  EXPECT_EQ(names.id_for("openssl-3"), ssl3) << "every libssl.so.3 shares one id";
  const std::uint16_t ssl11 = names.id_for("openssl-1.1");
  EXPECT_NE(ssl11, ssl3);
  const std::uint16_t over = names.id_for("static:fake1");
  EXPECT_EQ(names.name(over), "openssl") << "past the bound, the overflow name";
  EXPECT_EQ(names.id_for("static:fake2"), over) << "and every name after it shares its id";
  EXPECT_EQ(names.name(ssl3), "openssl-3");
  EXPECT_EQ(names.name(0), "");
  EXPECT_EQ(names.name(99), "");
}

}  // namespace
}  // namespace infertap::capture
