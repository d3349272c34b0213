// Base fixture for tests that load the BPF programs and drive real processes:
// requires root, gives each test a scratch directory (kept when it fails) and
// a free loopback port for its server.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "support/process.h"

namespace infertap::testing {

class LiveTest : public ::testing::Test {
 protected:
  explicit LiveTest(std::string scratch_prefix) : scratch_prefix_(std::move(scratch_prefix)) {}

  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "these tests load BPF programs: run as root";
    scratch_.emplace(scratch_prefix_);
    ASSERT_TRUE(scratch_->ok()) << "cannot create a scratch directory in /tmp";
    port_ = free_port();
  }
  void TearDown() override {
    if (HasFailure() && scratch_) {
      scratch_->keep();
      std::fprintf(stderr, "artifacts kept in %s\n", scratch_->path().c_str());
    }
  }
  std::string path(const std::string& name) const { return scratch_->file(name); }

  std::optional<ScratchDir> scratch_;
  std::uint16_t port_ = 0;

 private:
  std::string scratch_prefix_;
};

}  // namespace infertap::testing
