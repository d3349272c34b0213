// The Go binary reader against a Go program built here with the system Go
// (Debian golang-go) and against objdump's disassembly as the oracle: the RET
// offsets found must be exactly the `ret` lines objdump prints, and a binary
// built with -ldflags='-s -w' (no .symtab) must give the same functions from
// its .gopclntab.
#include "capture/go_binary.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/process.h"

namespace infertap::capture {
namespace {


namespace fs = std::filesystem;

constexpr const char* kGoProgram = R"(package main

import (
	"crypto/tls"
	"fmt"
	"os"
)

func main() {
	c, err := tls.Dial("tcp", os.Args[1], &tls.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	c.Write([]byte("x"))
	b := make([]byte, 10)
	c.Read(b)
}
)";

using testing::command_output;

// Builds the program once per test binary run: plain and stripped.
class GoBinaryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("infertap-go-binary-" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    std::ofstream(*dir_ / "main.go") << kGoProgram;
    // The Go build cache outlives the run: a second run builds in a second.
    const std::string env = "cd " + dir_->string() + " && HOME=" + dir_->string() +
                            " GOCACHE=/tmp/infertap-go-cache GO111MODULE=off GOFLAGS= ";
    build_log_ = new std::string(command_output(env + "go build -o plain main.go 2>&1 && " + env +
                                            "go build -ldflags='-s -w' -o stripped main.go 2>&1; echo rc=$?"));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
    delete build_log_;
  }
  void SetUp() override {
    ASSERT_EQ(system("command -v go >/dev/null 2>&1"), 0) << "go not installed: run scripts/setup.sh (golang-go)";
    ASSERT_NE(build_log_->find("rc=0"), std::string::npos) << "go build failed: " << *build_log_;
  }
  static std::string bin(const char* name) { return (*dir_ / name).string(); }

  // objdump's `ret` lines of a function, relative to its first instruction.
  static std::vector<std::uint64_t> objdump_returns(const std::string& path, const std::string& function) {
    const std::string text = command_output("objdump -d --no-show-raw-insn '--disassemble=" + function + "' " + path);
    std::vector<std::uint64_t> out;
    const std::regex head("^([0-9a-f]+) <"), ret("^\\s*([0-9a-f]+):\\s+ret");
    std::uint64_t start = 0;
    std::smatch m;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (std::regex_search(line, m, head)) start = std::stoull(m[1], nullptr, 16);
      else if (std::regex_search(line, m, ret)) out.push_back(std::stoull(m[1], nullptr, 16) - start);
    }
    return out;
  }
  static std::vector<std::uint64_t> relative(const GoFunction& f) {
    std::vector<std::uint64_t> out;
    for (std::uint64_t r : f.returns) out.push_back(r - f.entry);
    return out;
  }

  static fs::path* dir_;
  static std::string* build_log_;
};
fs::path* GoBinaryTest::dir_ = nullptr;
std::string* GoBinaryTest::build_log_ = nullptr;

TEST_F(GoBinaryTest, VersionArchAndFunctionsOfAGoBinary) {
  const GoBinary b = inspect_go_binary(bin("plain"));
  EXPECT_TRUE(b.is_go);
  EXPECT_EQ(b.problem, "");
  EXPECT_EQ(b.version.rfind("go1.", 0), 0u) << b.version;
  EXPECT_EQ(b.version, command_output("go env GOVERSION | tr -d '\\n'")) << "the toolchain that built it";
  EXPECT_GE(go_minor_version(b.version), 17);
#if defined(__aarch64__)
  EXPECT_EQ(b.arch, GoArch::arm64);
#else
  EXPECT_EQ(b.arch, GoArch::amd64);
#endif
  EXPECT_EQ(b.symbols_from, "symtab");
  EXPECT_GT(b.write.entry, 0u);
  EXPECT_GT(b.read.entry, 0u);
  EXPECT_NE(b.write.entry, b.read.entry);
}

TEST_F(GoBinaryTest, ReturnInstructionsAreExactlyObjdumps) {
  const GoBinary b = inspect_go_binary(bin("plain"));
  ASSERT_EQ(b.problem, "");
  const auto write_oracle = objdump_returns(bin("plain"), "crypto/tls.(*Conn).Write");
  const auto read_oracle = objdump_returns(bin("plain"), "crypto/tls.(*Conn).Read");
  ASSERT_FALSE(write_oracle.empty()) << "objdump found no ret in Write: is binutils installed?";
  ASSERT_FALSE(read_oracle.empty());
  EXPECT_EQ(relative(b.write), write_oracle);
  EXPECT_EQ(relative(b.read), read_oracle);
  std::printf("  Write: %zu returns, Read: %zu returns (objdump agrees)\n", b.write.returns.size(),
              b.read.returns.size());
}

TEST_F(GoBinaryTest, StrippedBinaryIsReadFromItsFunctionTable) {
  const GoBinary plain = inspect_go_binary(bin("plain"));
  const GoBinary stripped = inspect_go_binary(bin("stripped"));
  ASSERT_EQ(command_output("readelf -S " + bin("stripped") + " | grep -cE '\\s\\.symtab\\s' | tr -d '\\n'"), "0")
      << "-s -w left a .symtab";
  EXPECT_EQ(stripped.problem, "");
  EXPECT_EQ(stripped.symbols_from, "gopclntab");
  EXPECT_EQ(stripped.version, plain.version);
  // The same code, so the same returns relative to the entry (the function
  // table's end is the next function's start: padding after is not code).
  EXPECT_EQ(relative(stripped.write), relative(plain.write));
  EXPECT_EQ(relative(stripped.read), relative(plain.read));
}

// A binary whose function table is gone as well as its .symtab.
TEST_F(GoBinaryTest, BinaryWithoutSymbolsOrFunctionTableIsNamedAsStrippedBeyondRepair) {
  const std::string gone = bin("no-pclntab");
  ASSERT_EQ(command_output("objcopy -R .gopclntab " + bin("stripped") + " " + gone + " 2>&1; echo rc=$?"), "rc=0\n");
  const GoBinary b = inspect_go_binary(gone);
  EXPECT_TRUE(b.is_go) << ".go.buildinfo still says Go";
  EXPECT_EQ(go_minor_version(b.version), go_minor_version(inspect_go_binary(bin("plain")).version));
  EXPECT_NE(b.problem.find("stripped beyond repair"), std::string::npos) << b.problem;
}

// The same binary claiming Go 1.16 (arguments on the stack then): not probed.
TEST_F(GoBinaryTest, GoOlderThan117IsNamedAndNotProbed) {
  const std::string version = inspect_go_binary(bin("plain")).version;
  ASSERT_EQ(version.rfind("go1.", 0), 0u);
  const std::string old = bin("old");
  const std::string patched = "go1.16" + version.substr(6);  // same length
  ASSERT_EQ(command_output("sed 's/" + version + "/" + patched + "/g' " + bin("plain") + " > " + old + "; echo rc=$?"),
            "rc=0\n");
  const GoBinary b = inspect_go_binary(old);
  EXPECT_EQ(b.version, patched);
  EXPECT_NE(b.problem.find("older than 1.17"), std::string::npos) << b.problem;
  EXPECT_EQ(b.write.entry, 0u) << "not looked for";
}

// The entry probe sits on the stack check's branch, per objdump: the first
// conditional jump of each function, a few bytes past its entry.
TEST_F(GoBinaryTest, EntryProbesSitOnTheStackChecksBranch) {
  const GoBinary b = inspect_go_binary(bin("plain"));
  ASSERT_EQ(b.problem, "");
#if defined(__aarch64__)
  EXPECT_EQ(b.write.probe_at, b.write.entry) << "arm64 probes the entry itself";
  EXPECT_EQ(b.read.probe_at, b.read.entry);
#else
  for (const auto& [f, name] : {std::pair{&b.write, "crypto/tls.(*Conn).Write"}, {&b.read, "crypto/tls.(*Conn).Read"}}) {
    const std::string text = command_output("objdump -d --no-show-raw-insn '--disassemble=" + std::string(name) +
                                            "' " + bin("plain") + " | grep -m1 -E '^\\s*[0-9a-f]+:\\s+jbe'");
    ASSERT_FALSE(text.empty()) << name << ": objdump shows no jbe";
    const std::uint64_t jbe = std::stoull(text, nullptr, 16);
    const std::string head = command_output("objdump -d --no-show-raw-insn '--disassemble=" + std::string(name) +
                                            "' " + bin("plain") + " | grep -m1 -E '^[0-9a-f]+ <'");
    const std::uint64_t start = std::stoull(head, nullptr, 16);
    EXPECT_GT(f->probe_at, f->entry) << name;
    EXPECT_EQ(f->probe_at - f->entry, jbe - start) << name;
  }
#endif
}

TEST(GoBinary, EntryProbeSiteOfEachStackCheckShape) {
  using B = std::vector<std::uint8_t>;
  // cmp rsp, [r14+16]; jbe rel32
  EXPECT_EQ(go_entry_probe_site(B{0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 1, 0, 0, 0}, 0x100), 0x104u);
  // cmp rsp, [r14+16]; jbe rel8
  EXPECT_EQ(go_entry_probe_site(B{0x49, 0x3b, 0x66, 0x10, 0x76, 0x20}, 0x100), 0x104u);
  // lea r12, [rsp-0x68]; cmp r12, [r14+16]; jbe
  EXPECT_EQ(go_entry_probe_site(B{0x4c, 0x8d, 0x64, 0x24, 0x98, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86, 1, 0, 0, 0}, 0x100),
            0x109u);
  // lea r12, [rsp-0x1000] (disp32)
  EXPECT_EQ(go_entry_probe_site(B{0x4c, 0x8d, 0xa4, 0x24, 0, 0xf0, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x76, 9}, 0x100),
            0x10cu);
  // Other shapes keep the entry: no stack check (a leaf), a cmp of the
  // wrong register, a cut buffer.
  EXPECT_EQ(go_entry_probe_site(B{0x48, 0x83, 0xec, 0x18}, 0x100), 0x100u);
  EXPECT_EQ(go_entry_probe_site(B{0x4c, 0x8d, 0x64, 0x24, 0x98, 0x49, 0x3b, 0x66, 0x10, 0x76, 9}, 0x100), 0x100u);
  EXPECT_EQ(go_entry_probe_site(B{0x49, 0x3b, 0x66, 0x10}, 0x100), 0x100u);
  EXPECT_EQ(go_entry_probe_site(B{}, 0x100), 0x100u);
}

TEST(GoBinary, NotGoAndBrokenFilesAreToldApart) {
  const GoBinary sh = inspect_go_binary("/bin/sh");
  EXPECT_FALSE(sh.is_go);
  EXPECT_EQ(sh.problem, "");
  const GoBinary missing = inspect_go_binary("/nonexistent/binary");
  EXPECT_FALSE(missing.is_go);
}

TEST(GoBinary, VersionNumbers) {
  EXPECT_EQ(go_minor_version("go1.19.8"), 19);
  EXPECT_EQ(go_minor_version("go1.17"), 17);
  EXPECT_EQ(go_minor_version("devel go1.22-abcdef"), 22);
  EXPECT_EQ(go_minor_version("go2"), -1);
  EXPECT_EQ(go_minor_version(""), -1);
}

TEST(GoBinary, Arm64ReturnsAreFixedWidthWords) {
  // nop; ret; add x0,x0,#1; ret
  const std::vector<std::uint8_t> code = {0x1f, 0x20, 0x03, 0xd5, 0xc0, 0x03, 0x5f, 0xd6,
                                          0x00, 0x04, 0x00, 0x91, 0xc0, 0x03, 0x5f, 0xd6};
  std::string error;
  EXPECT_EQ(find_returns(GoArch::arm64, code, 0x1000, &error), (std::vector<std::uint64_t>{0x1004, 0x100c}));
  EXPECT_EQ(error, "");
}

TEST(GoBinary, X86ReturnBytesInsideLongerInstructionsAreNotReturns) {
  // mov eax, 0xc3c3c3c3; ret; int3 padding
  const std::vector<std::uint8_t> code = {0xb8, 0xc3, 0xc3, 0xc3, 0xc3, 0xc3, 0xcc, 0xcc};
  std::string error;
  EXPECT_EQ(find_returns(GoArch::amd64, code, 0x2000, &error), (std::vector<std::uint64_t>{0x2005}));
  EXPECT_EQ(error, "");
}

}  // namespace
}  // namespace infertap::capture
