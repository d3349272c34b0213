// File offsets of named functions in an ELF file, as a uprobe needs them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

typedef struct Elf Elf;  // libelf's

namespace infertap::capture {

struct FunctionOffsets {
  // offsets[i]: file offset of names[i]'s code, 0 when the file defines no
  // such function (an undefined import does not count).
  std::vector<std::uint64_t> offsets;
  std::string error;  // the file could not be read as ELF (offsets then empty)
};

// Reads .dynsym and .symtab (a stripped binary keeps its exported .dynsym).
// A versioned name (dlopen@@GLIBC_2.34) matches its plain form.
FunctionOffsets find_functions(const std::string& path, std::span<const std::string_view> names);

// A virtual address of executable code as a file offset (0: in no executable
// loadable segment).
std::uint64_t file_offset(Elf* elf, std::uint64_t vaddr);

// The executable code of an ELF file, read by file offset (for the probe
// sites of probe_sites.h).
class ElfCode {
 public:
  explicit ElfCode(const std::string& path);
  ~ElfCode();
  ElfCode(const ElfCode&) = delete;
  ElfCode& operator=(const ElfCode&) = delete;

  bool x86_64() const { return x86_64_; }
  // Up to `max` bytes from file offset `at` to the end of the executable
  // segment that holds it; empty when none does or the read fails.
  std::vector<std::uint8_t> bytes(std::uint64_t at, std::size_t max) const;

 private:
  struct Segment {
    std::uint64_t offset = 0, size = 0;
  };
  int fd_ = -1;
  bool x86_64_ = false;
  std::vector<Segment> segments_;
};

}  // namespace infertap::capture
