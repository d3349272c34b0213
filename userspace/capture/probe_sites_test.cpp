// Probe sites that trap once: synthetic code in the shapes compilers emit,
// then the machine's own libssl.
#include "capture/probe_sites.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <map>

#include "capture/elf_symbols.h"

namespace infertap::capture {
namespace {

using Bytes = std::vector<std::uint8_t>;

// A wrapper at 0x1000: sub rsp, 8; call rel32 to `target`; then its return.
Bytes wrapper_calling(std::uint64_t target, std::uint64_t at = 0x1000) {
  Bytes b = {0x48, 0x83, 0xec, 0x08, 0xe8, 0, 0, 0, 0, 0x48, 0x83, 0xc4, 0x08, 0xc3};
  const auto rel = static_cast<std::int32_t>(target - (at + 9));
  std::memcpy(&b[5], &rel, 4);
  return b;
}

TEST(ProbeSites, APushIsEmulatedAndAnEndbr64IsSteppedOver) {
  EXPECT_EQ(emulated_entry(Bytes{0x41, 0x56, 0x41, 0x55}, 0x500), 0x500u);         // push r14
  EXPECT_EQ(emulated_entry(Bytes{0x55, 0x48, 0x89, 0xe5}, 0x500), 0x500u);         // push rbp
  EXPECT_EQ(emulated_entry(Bytes{0xf3, 0x0f, 0x1e, 0xfa, 0x53}, 0x500), 0x504u);   // endbr64; push rbx
  EXPECT_EQ(emulated_entry(Bytes{0x48, 0x83, 0xec, 0x08, 0xe8}, 0x500), std::nullopt);  // sub rsp, 8
  EXPECT_EQ(emulated_entry(Bytes{0xf3, 0x0f, 0x1e, 0xfa}, 0x500), std::nullopt);   // cut after endbr64
  EXPECT_EQ(emulated_entry(Bytes{}, 0x500), std::nullopt);
}

TEST(ProbeSites, AWrapperThatOnlyMovesTheStackPassesItsArgumentsThrough) {
  EXPECT_EQ(pass_through_callee(wrapper_calling(0x2000), 0x1000), 0x2000u);
  EXPECT_EQ(pass_through_callee(wrapper_calling(0x0800), 0x1000), 0x0800u);  // a callee placed before it
  // endbr64; push rbx; call: still only the stack.
  Bytes cet = {0xf3, 0x0f, 0x1e, 0xfa, 0x53, 0xe8, 0x10, 0, 0, 0};
  EXPECT_EQ(pass_through_callee(cet, 0x1000), 0x1000u + 10 + 0x10);
  // mov r8, rcx; xor ecx, ecx; call: a wrapper adding an argument is not one.
  Bytes adds_flags = {0x49, 0x89, 0xc8, 0x31, 0xc9, 0xe8, 0x10, 0, 0, 0};
  EXPECT_EQ(pass_through_callee(adds_flags, 0x1000), std::nullopt);
  EXPECT_EQ(pass_through_callee(Bytes{0x48, 0x83, 0xec, 0x08, 0xe8, 0x10}, 0x1000), std::nullopt);  // cut call
}

TEST(ProbeSites, ACallIsFoundOnlyBeforeTheFirstReturn) {
  const Bytes calls = wrapper_calling(0x2000);
  EXPECT_TRUE(calls_before_return(calls, 0x1000, 0x2000));
  EXPECT_FALSE(calls_before_return(calls, 0x1000, 0x3000));
  Bytes returns_first = {0xc3};
  returns_first.insert(returns_first.end(), calls.begin(), calls.end());
  EXPECT_FALSE(calls_before_return(returns_first, 0x0fff, 0x2000));
}

// A fake file: code by offset.
struct FakeCode {
  std::map<std::uint64_t, Bytes> at;
  CodeAt reader() const {
    return [this](std::uint64_t off) {
      auto it = at.find(off);
      return it == at.end() ? Bytes{} : it->second;
    };
  }
};

TEST(ProbeSites, BothFormsAreProbedOnceInTheirSharedBody) {
  FakeCode f;
  f.at[0x1000] = wrapper_calling(0x2000, 0x1000);  // SSL_write_ex
  f.at[0x3000] = wrapper_calling(0x2000, 0x3000);  // SSL_write (calls it too)
  f.at[0x2000] = {0x41, 0x56, 0x41, 0x55, 0xc3};    // the body: push r14
  const TlsIoSites sites = cheap_tls_io_sites(f.reader(), {0x3000, 0x1000});
  EXPECT_TRUE(sites.shared_body);
  EXPECT_EQ(sites.ex, 0x2000u);
  EXPECT_EQ(sites.plain, 0u) << "SSL_write calls the body: probing it too would time each call twice";
}

TEST(ProbeSites, APlainFormThatDoesNotCallTheBodyKeepsItsOwnProbe) {
  FakeCode f;
  f.at[0x1000] = wrapper_calling(0x2000, 0x1000);
  f.at[0x3000] = {0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0xc3};  // inlined its own: endbr64; push rbp
  f.at[0x2000] = {0x53, 0xc3};
  const TlsIoSites sites = cheap_tls_io_sites(f.reader(), {0x3000, 0x1000});
  EXPECT_TRUE(sites.shared_body);
  EXPECT_EQ(sites.ex, 0x2000u);
  EXPECT_EQ(sites.plain, 0x3004u);
}

TEST(ProbeSites, ABodyThatWouldBeSteppedLeavesThePublicEntries) {
  FakeCode f;
  f.at[0x1000] = wrapper_calling(0x2000, 0x1000);
  f.at[0x3000] = wrapper_calling(0x2000, 0x3000);
  f.at[0x2000] = {0x48, 0x83, 0xec, 0x28};  // sub rsp: no cheaper than the wrapper
  const TlsIoSites sites = cheap_tls_io_sites(f.reader(), {0x3000, 0x1000});
  EXPECT_FALSE(sites.shared_body);
  EXPECT_EQ(sites.ex, 0x1000u);
  EXPECT_EQ(sites.plain, 0x3000u);
  // A callee outside the executable code (nothing to read there): the same.
  f.at.erase(0x2000);
  EXPECT_FALSE(cheap_tls_io_sites(f.reader(), {0x3000, 0x1000}).shared_body);
  // No _ex form at all: the plain one stays where it is.
  EXPECT_EQ(cheap_tls_io_sites(f.reader(), {0x3000, 0}).plain, 0x3000u);
}

// The suite's machine runs Debian 12's OpenSSL 3: its four I/O calls are
// probed in two shared bodies, each opening with a push.
TEST(ProbeSites, TheSystemLibsslIsProbedInItsSharedBodies) {
  const std::string path = "/usr/lib/x86_64-linux-gnu/libssl.so.3";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " missing: the suite installs libssl3";
  const std::array<std::string_view, 4> names = {"SSL_write", "SSL_write_ex", "SSL_read", "SSL_read_ex"};
  const FunctionOffsets found = find_functions(path, names);
  ASSERT_TRUE(found.error.empty()) << found.error;
  const ElfCode elf(path);
  ASSERT_TRUE(elf.x86_64());
  const CodeAt code = [&elf](std::uint64_t at) { return elf.bytes(at, 512); };
  for (int dir = 0; dir < 2; ++dir) {
    const TlsIoSites sites = cheap_tls_io_sites(code, {found.offsets[2 * dir], found.offsets[2 * dir + 1]});
    EXPECT_TRUE(sites.shared_body) << names[2 * dir + 1];
    EXPECT_EQ(sites.plain, 0u) << names[2 * dir] << " calls the shared body";
    EXPECT_TRUE(emulated_entry(code(sites.ex), sites.ex).has_value());
    EXPECT_NE(sites.ex, found.offsets[2 * dir + 1]);
  }
}

}  // namespace
}  // namespace infertap::capture
