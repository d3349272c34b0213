// Function offsets in ELF files, checked against the bytes the loader mapped:
// a uprobe at the offset found lands on the function's first instruction.
#include "capture/elf_symbols.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <fstream>
#include <vector>

extern "C" __attribute__((noinline, used, visibility("default"))) int infertap_elf_probe_target(int x) {
  return x * 3 + 1;
}

namespace infertap::capture {
namespace {

std::vector<char> file_bytes(const std::string& path, std::uint64_t offset, std::size_t n) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  std::vector<char> out(n);
  f.read(out.data(), static_cast<std::streamsize>(n));
  return f ? out : std::vector<char>{};
}

TEST(ElfSymbols, TheOffsetOfAFunctionHoldsItsCode) {
  const std::array<std::string_view, 1> names = {"infertap_elf_probe_target"};
  const FunctionOffsets found = find_functions("/proc/self/exe", names);
  ASSERT_TRUE(found.error.empty()) << found.error;
  ASSERT_NE(found.offsets[0], 0u);
  std::vector<char> in_memory(16);
  std::memcpy(in_memory.data(), reinterpret_cast<const void*>(&infertap_elf_probe_target), in_memory.size());
  EXPECT_EQ(file_bytes("/proc/self/exe", found.offsets[0], 16), in_memory);
}

TEST(ElfSymbols, ImportsAndAbsentNamesAreNotFound) {
  // malloc is imported by this binary (undefined here), the other is nowhere.
  const std::array<std::string_view, 2> names = {"malloc", "no_such_function_anywhere"};
  const FunctionOffsets found = find_functions("/proc/self/exe", names);
  ASSERT_TRUE(found.error.empty());
  EXPECT_EQ(found.offsets[0], 0u);
  EXPECT_EQ(found.offsets[1], 0u);
}

// The OpenSSL library every TLS test links: SSL_write, SSL_read and the _ex
// forms are exported; its dlopen is an import.
TEST(ElfSymbols, TheSystemOpenSslExportsItsCalls) {
  const std::array<std::string_view, 5> names = {"SSL_write", "SSL_read", "SSL_write_ex", "SSL_read_ex", "dlopen"};
  const FunctionOffsets found = find_functions("/usr/lib/x86_64-linux-gnu/libssl.so.3", names);
  ASSERT_TRUE(found.error.empty()) << "libssl3 (Debian) is needed: " << found.error;
  for (int i = 0; i < 4; ++i) EXPECT_NE(found.offsets[static_cast<std::size_t>(i)], 0u) << names[static_cast<std::size_t>(i)];
  EXPECT_EQ(found.offsets[4], 0u);
}

TEST(ElfSymbols, AVersionedDefinitionMatchesItsPlainName) {
  const std::array<std::string_view, 1> names = {"dlopen"};  // dlopen@@GLIBC_2.34 in libc.so.6
  const FunctionOffsets found = find_functions("/lib/x86_64-linux-gnu/libc.so.6", names);
  ASSERT_TRUE(found.error.empty()) << found.error;
  EXPECT_NE(found.offsets[0], 0u);
}

TEST(ElfSymbols, AFileThatIsNotElfIsAnErrorNotACrash) {
  const std::array<std::string_view, 1> names = {"SSL_write"};
  EXPECT_FALSE(find_functions("/proc/self/maps", names).error.empty());
  EXPECT_FALSE(find_functions("/nonexistent/libssl.so.3", names).error.empty());
}

}  // namespace
}  // namespace infertap::capture
