// The per-process probes' bookkeeping, on real processes (this one and
// children that wait): one set per process and file, released once the
// process exits, and the bound past which the owner goes per file.
#include "capture/tls_targets.h"

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

}  // namespace
}  // namespace infertap::capture
