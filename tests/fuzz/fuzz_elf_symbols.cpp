// The ELF symbol reader on arbitrary bytes: a library file on a host can be
// truncated, corrupt or not ELF at all; the reader answers with an error or
// offsets, never a crash. The input is handed over as a memory file, the way
// the agent reaches a library through /proc/PID/map_files.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "capture/elf_symbols.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const int fd = ::memfd_create("elf", 0);
  if (fd < 0) return 0;
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  static constexpr std::string_view kNames[] = {"SSL_write", "SSL_read", "SSL_write_ex", "SSL_read_ex", "dlopen"};
  static infertap::capture::SymbolCache cache;
  const auto found = infertap::capture::find_functions(fd, kNames, &cache);
  if (found.error.empty() && found.offsets.size() != std::size(kNames)) __builtin_trap();
  for (std::uint64_t offset : found.offsets)
    if (offset >= size) __builtin_trap();  // every offset lies inside the file
  return 0;
}
