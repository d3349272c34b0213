// File offsets of named functions in an ELF file, as a uprobe needs them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <list>
#include <mutex>

#include "capture/elf_file.h"

namespace infertap::capture {

struct FunctionOffsets {
  // offsets[i]: file offset of names[i]'s code, 0 when the file defines no
  // such function (an undefined import does not count) or it was refused.
  std::vector<std::uint64_t> offsets;
  std::string error;     // the file could not be read as ELF (offsets then empty)
  std::string refusal;   // why found functions were refused ("; "-joined), e.g. mid-instruction
  std::string build_id;  // hex of NT_GNU_BUILD_ID; "" when none
};

// What a symbol scan found for one wanted name: its address and the function
// that encloses it (size 0: none), to re-check against each file's bytes.
struct FoundSymbol {
  std::uint64_t vaddr = 0;
  std::uint64_t enclosing_vaddr = 0, enclosing_size = 0;
};

inline constexpr std::size_t kSymbolCacheEntries = 256;

// Symbol scans by (build id, file size, names): the same library in another
// container is not scanned again. Bounded LRU; thread-safe.
class SymbolCache {
 public:
  bool find(const std::string& key, std::vector<FoundSymbol>* out);
  void store(const std::string& key, std::vector<FoundSymbol> found);
  std::size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::list<std::pair<std::string, std::vector<FoundSymbol>>> entries_;  // most recent first
};

// Reads .dynsym and .symtab (a stripped binary keeps its exported .dynsym)
// from `fd` (borrowed, not closed). A versioned name (dlopen@@GLIBC_2.34)
// matches its plain form. Each offset is an instruction start inside an
// executable segment of this file.
FunctionOffsets find_functions(int fd, std::span<const std::string_view> names, SymbolCache* cache = nullptr);
// Opens `path` and reads it as above.
FunctionOffsets find_functions(const std::string& path, std::span<const std::string_view> names,
                               SymbolCache* cache = nullptr);

// The executable code of an ELF file, read by file offset (for the probe
// sites of probe_sites.h).
class ElfCode {
 public:
  // Duplicates `fd` (the caller keeps and closes its own).
  explicit ElfCode(int fd);
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
